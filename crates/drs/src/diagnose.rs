//! Turning per-stream estimates into a diagnosis a person can act on. Pure.

use serde::Serialize;

use crate::estimate::{Limit, StreamEstimate};
use crate::host::HostCaps;
use crate::streams::StreamStep;

/// What limited a transfer, in words and in sysctl lines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The limit most streams hit.
    pub limit: Limit,
    /// One or two sentences for people.
    pub summary: String,
    /// Exact commands that would lift a host cap, if one was the limit.
    pub sysctls: Vec<String>,
    /// What tern did about it.
    pub actions: Vec<String>,
    /// Per-stream estimates.
    pub streams: Vec<StreamEstimate>,
    /// The host's caps.
    pub host: HostCaps,
    /// Congestion control of the data sockets.
    pub congestion_control: String,
    /// Who sized the buffers: `auto` (tern), `kernel`, or a fixed size.
    pub window: String,
    /// The stream count over time (the sending side decides it).
    pub stream_steps: Vec<StreamStep>,
    /// Sum over streams of the largest send buffer each had, bytes.
    pub send_buffer_peak_bytes: u64,
    /// Sum over streams of the largest receive buffer each had, bytes.
    pub receive_buffer_peak_bytes: u64,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// A buffer size that holds `bdp` twice over (the kernel counts overhead
/// in the buffer), rounded up to a power of two, at least 4 MiB.
fn buffer_for(bdp: u64) -> u64 {
    (2 * bdp).next_power_of_two().clamp(4 << 20, 1 << 30)
}

/// Diagnoses a transfer from its streams' estimates. `raised` holds, per
/// stream, the send buffer tern set when the kernel's cap held it back.
pub fn diagnose(streams: Vec<StreamEstimate>, host: HostCaps, raised: &[Option<u64>]) -> Diagnosis {
    let count = |l: Limit| streams.iter().filter(|s| s.limit == l).count();
    let candidates = [
        Limit::SendBuffer,
        Limit::ReceiveWindow,
        Limit::Application,
        Limit::Network,
    ];
    let limit = candidates
        .into_iter()
        .max_by_key(|&l| (count(l), std::cmp::Reverse(l as u8)))
        .filter(|&l| count(l) > 0)
        .unwrap_or(Limit::Unknown);
    let n = streams.len();
    let hit = count(limit);
    let bdp = streams.iter().map(|s| s.bdp_bytes).max().unwrap_or(0);
    let rtt = streams
        .iter()
        .map(|s| s.min_rtt_ms)
        .fold(f64::INFINITY, f64::min);
    let mut sysctls = Vec::new();
    let summary = match limit {
        Limit::SendBuffer => {
            // The rate seen was held down by the cap itself, so the BDP
            // measured is a floor: ask for a good step above the cap too.
            let want = buffer_for(bdp).max(host.tcp_wmem[2].saturating_mul(4).min(1 << 30));
            sysctls.push(format!(
                "sysctl -w net.ipv4.tcp_wmem=\"{} {} {want}\"",
                host.tcp_wmem[0], host.tcp_wmem[1]
            ));
            format!(
                "The send buffer was the limit on {hit} of {n} streams: the sender's tcp_wmem \
                 maximum is {} while a stream's bandwidth-delay product reached {} at {rtt:.1} ms. \
                 More parallel streams work around it; raising tcp_wmem on the sending host removes it.",
                mib(host.tcp_wmem[2]),
                mib(bdp)
            )
        }
        Limit::ReceiveWindow => {
            let want = buffer_for(bdp);
            sysctls.push(format!(
                "sysctl -w net.ipv4.tcp_rmem=\"{} {} {want}\"   # on the receiving host",
                host.tcp_rmem[0], host.tcp_rmem[1]
            ));
            format!(
                "The receiver's window was the limit on {hit} of {n} streams (bandwidth-delay \
                 product {} at {rtt:.1} ms). More parallel streams work around it; raising \
                 tcp_rmem on the receiving host removes it.",
                mib(bdp)
            )
        }
        Limit::Network => format!(
            "The network path set the pace on {hit} of {n} streams (congestion control {}); \
             buffers were not the limit.",
            host.congestion_control
        ),
        Limit::Application => format!(
            "tern itself (disk or CPU) set the pace on {hit} of {n} streams: the sockets were \
             often idle."
        ),
        Limit::Unknown => "TCP_INFO gave too little to tell what limited the transfer (a \
             receiving end sees less than the sender: the sender's report says more)."
            .into(),
    };
    let mut actions = Vec::new();
    let grown: Vec<u64> = raised.iter().flatten().copied().collect();
    let (mut limit, mut summary) = (limit, summary);
    if let Some(&largest) = grown.iter().max() {
        actions.push(format!(
            "raised the send buffer of {} of {n} streams past the {} tcp_wmem cap, up to {}",
            grown.len(),
            mib(host.tcp_wmem[2]),
            mib(largest)
        ));
        if !sysctls.iter().any(|l| l.contains("tcp_wmem")) {
            let want = buffer_for(bdp).max(largest);
            sysctls.insert(
                0,
                format!(
                    "sysctl -w net.ipv4.tcp_wmem=\"{} {} {want}\"",
                    host.tcp_wmem[0], host.tcp_wmem[1]
                ),
            );
        }
        summary = format!(
            "The send buffer was the limit: the sender's tcp_wmem maximum is {}. tern worked \
             around it by setting larger send buffers itself ({} on {} of {n} streams); raising \
             tcp_wmem removes the cap for every program. Afterwards: {summary}",
            mib(host.tcp_wmem[2]),
            mib(largest),
            grown.len()
        );
        limit = Limit::SendBuffer;
    }
    Diagnosis {
        limit,
        summary,
        sysctls,
        actions,
        streams,
        host,
        congestion_control: String::new(),
        window: String::new(),
        stream_steps: Vec::new(),
        send_buffer_peak_bytes: 0,
        receive_buffer_peak_bytes: 0,
    }
}

/// How the send buffers of a session on a long path were sized together
/// ([`crate::session`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedSizing {
    /// Streams whose buffers the session sized.
    pub streams: usize,
    /// The last share of each, bytes.
    pub each: u64,
    /// The session's bandwidth-delay product, bytes.
    pub bdp: u64,
    /// The RTT it was measured at, ms.
    pub rtt_ms: f64,
}

impl Diagnosis {
    /// Tells the story of a session whose streams' send buffers tern sized
    /// together: whether one stream's buffer would have been capped by
    /// `tcp_wmem` (then the send buffer was the limit, and tern's streams
    /// and sizing were the workaround) or not (then the path set the pace).
    pub fn shared_sizing(&mut self, shared: SharedSizing) {
        let SharedSizing {
            streams,
            each,
            bdp,
            rtt_ms,
        } = shared;
        let total = each.saturating_mul(streams as u64);
        let cap = self.host.tcp_wmem[2];
        self.actions.push(format!(
            "sized the send buffers of {streams} streams together to twice the path's \
             bandwidth-delay product ({} at {rtt_ms:.1} ms): {} each, {} in total",
            mib(bdp),
            mib(each),
            mib(total)
        ));
        self.sysctls.retain(|l| !l.contains("tcp_wmem"));
        if 2 * bdp > cap {
            self.limit = Limit::SendBuffer;
            self.sysctls.insert(
                0,
                format!(
                    "sysctl -w net.ipv4.tcp_wmem=\"{} {} {}\"",
                    self.host.tcp_wmem[0],
                    self.host.tcp_wmem[1],
                    buffer_for(bdp)
                ),
            );
            let how = if streams > 1 {
                format!(
                    "spreading the transfer over {streams} streams and setting their send \
                     buffers itself, together twice the bandwidth-delay product ({} each, {} in \
                     total)",
                    mib(each),
                    mib(total)
                )
            } else {
                format!(
                    "setting the send buffer itself to twice the bandwidth-delay product ({})",
                    mib(total)
                )
            };
            self.summary = format!(
                "The send buffer was the limit: one stream's send buffer stops at the sender's \
                 tcp_wmem maximum of {}, while this path's bandwidth-delay product is {} at \
                 {rtt_ms:.1} ms and a stream needs about twice that. tern worked around it by \
                 {how}; raising tcp_wmem on the sending host removes the cap for every program.",
                mib(cap),
                mib(bdp),
            );
        } else {
            self.limit = Limit::Network;
            self.summary = format!(
                "The network path set the pace (congestion control {}): tern gave its \
                 {streams} streams send buffers of together twice the path's \
                 bandwidth-delay product ({} at {rtt_ms:.1} ms; {} in total), within the \
                 host's caps.",
                if self.congestion_control.is_empty() {
                    &self.host.congestion_control
                } else {
                    &self.congestion_control
                },
                mib(bdp),
                mib(total)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::StreamEstimator;
    use crate::estimate::tests::sample;
    use std::time::Duration;

    fn est(busy: u64, rwnd: u64, sndbuf: u64) -> StreamEstimate {
        let mut e = StreamEstimator::default();
        e.add(Duration::ZERO, sample(0, 0, 0, 1, 100_000));
        e.add(
            Duration::from_secs(1),
            sample(busy, rwnd, sndbuf, 50_000_000, 100_000),
        );
        e.estimate()
    }

    fn host() -> HostCaps {
        HostCaps {
            tcp_rmem: [4096, 131072, 6291456],
            tcp_wmem: [4096, 16384, 4194304],
            rmem_max: 4194304,
            wmem_max: 4194304,
            congestion_control: "cubic".into(),
            ..HostCaps::default()
        }
    }

    #[test]
    fn a_send_buffer_limit_names_the_cap_and_the_sysctl_that_lifts_it() {
        let d = diagnose(
            vec![est(1_000_000, 0, 800_000), est(1_000_000, 0, 600_000)],
            host(),
            &[],
        );
        assert_eq!(d.limit, Limit::SendBuffer);
        assert!(d.summary.contains("4.0 MiB"), "{}", d.summary);
        assert!(d.summary.contains("More parallel streams"), "{}", d.summary);
        assert_eq!(
            d.sysctls,
            vec!["sysctl -w net.ipv4.tcp_wmem=\"4096 16384 16777216\"".to_string()]
        );
    }

    #[test]
    fn other_limits_are_named_without_sysctls_unless_a_cap_is_involved() {
        let d = diagnose(vec![est(1_000_000, 600_000, 0)], host(), &[]);
        assert_eq!(d.limit, Limit::ReceiveWindow);
        assert!(d.sysctls[0].contains("tcp_rmem"));
        let d = diagnose(vec![est(1_000_000, 0, 0)], host(), &[]);
        assert_eq!(d.limit, Limit::Network);
        assert!(d.sysctls.is_empty());
        assert!(d.summary.contains("cubic"));
        let d = diagnose(vec![], host(), &[]);
        assert_eq!(d.limit, Limit::Unknown);
    }

    #[test]
    fn a_workaround_is_reported_with_the_sysctl_that_makes_it_unneeded() {
        // The raised buffer removed the limit: streams now look network-bound.
        let d = diagnose(vec![est(1_000_000, 0, 0)], host(), &[Some(32 << 20)]);
        assert_eq!(d.limit, Limit::SendBuffer);
        assert!(d.summary.contains("worked around"), "{}", d.summary);
        assert!(d.summary.contains("32.0 MiB"), "{}", d.summary);
        assert_eq!(d.actions.len(), 1);
        assert!(d.sysctls[0].contains("tcp_wmem"), "{:?}", d.sysctls);
    }

    #[test]
    fn shared_buffers_past_what_one_stream_may_have_are_the_workaround() {
        let mut d = diagnose(vec![est(1_000_000, 0, 800_000)], host(), &[]);
        d.shared_sizing(SharedSizing {
            streams: 8,
            each: 3 << 20,
            bdp: 12 << 20,
            rtt_ms: 100.2,
        });
        assert_eq!(d.limit, Limit::SendBuffer);
        assert!(d.summary.contains("worked around"), "{}", d.summary);
        assert!(d.summary.contains("8 streams"), "{}", d.summary);
        assert!(d.summary.contains("24.0 MiB in total"), "{}", d.summary);
        assert_eq!(
            d.sysctls,
            vec!["sysctl -w net.ipv4.tcp_wmem=\"4096 16384 33554432\"".to_string()]
        );
        assert!(
            d.actions[0].contains("8 streams together"),
            "{:?}",
            d.actions
        );
        // A path one stream's buffer could have held: the path was the limit.
        let mut d = diagnose(vec![est(1_000_000, 0, 800_000)], host(), &[]);
        d.shared_sizing(SharedSizing {
            streams: 2,
            each: 1 << 20,
            bdp: 1 << 20,
            rtt_ms: 30.0,
        });
        assert_eq!(d.limit, Limit::Network);
        assert!(d.sysctls.is_empty(), "{:?}", d.sysctls);
        assert!(d.summary.contains("network path"), "{}", d.summary);
    }

    #[test]
    fn buffers_hold_twice_the_bdp() {
        assert_eq!(buffer_for(5_000_000), 16 << 20);
        assert_eq!(buffer_for(1), 4 << 20);
        assert_eq!(buffer_for(u64::MAX / 4), 1 << 30);
    }
}
