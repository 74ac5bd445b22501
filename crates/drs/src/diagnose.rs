//! Turning per-stream estimates into a diagnosis a person can act on. Pure.

use serde::Serialize;

use crate::estimate::{Limit, StreamEstimate};
use crate::host::HostCaps;
use crate::streams::StreamStep;

/// The limit most of `streams` hit (on a tie, the one a person can act on
/// first: buffers before the application before the network); `Unknown`
/// when none could tell.
pub fn most_streams_limit(streams: &[StreamEstimate]) -> Limit {
    let count = |l: Limit| streams.iter().filter(|s| s.limit == l).count();
    [
        Limit::SendBuffer,
        Limit::ReceiveWindow,
        Limit::Receiver,
        Limit::Application,
        Limit::Network,
    ]
    .into_iter()
    .max_by_key(|&l| (count(l), std::cmp::Reverse(l as u8)))
    .filter(|&l| count(l) > 0)
    .unwrap_or(Limit::Unknown)
}

/// One path of a multi-path session, as its streams' `TCP_INFO` saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathTuning {
    /// The peer's address on the path.
    pub remote: std::net::IpAddr,
    /// The smallest minimum RTT among its streams, ms (none before a
    /// sample).
    pub min_rtt_ms: Option<f64>,
    /// The limit most of its streams hit.
    pub limit: Limit,
}

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
    /// The stream count the sending side's measurements bore out at the
    /// end: the last count, or the count before an addition made too late
    /// to judge. What the next copy over the path starts from (0 when the
    /// count was not controlled).
    pub streams_proven: u16,
    /// Sum over streams of the largest send buffer each had, bytes.
    pub send_buffer_peak_bytes: u64,
    /// Sum over streams of the largest receive buffer each had, bytes.
    pub receive_buffer_peak_bytes: u64,
    /// The most the send buffers of the streams open at one time held
    /// together, bytes (sampled as the streams are tuned): the memory the
    /// transfer's send buffers needed. At most `send_buffer_peak_bytes`,
    /// which adds peaks reached at different times.
    pub send_buffers_peak_together_bytes: u64,
    /// As `send_buffers_peak_together_bytes`, for the receive buffers.
    pub receive_buffers_peak_together_bytes: u64,
    /// What tern sized the send buffers of the session's streams to
    /// together, bytes, when it sized them ([`Diagnosis::shared_sizing`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_buffers_sized_bytes: Option<u64>,
    /// Each path's RTT and limit, when the session had several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathTuning>,
    /// How the summary counts the streams a limit held back.
    #[serde(skip)]
    stream_phrase: String,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// A buffer or window size for people: KiB below a MiB, so that a small
/// bandwidth-delay product does not read as zero.
fn size(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        mib(bytes)
    }
}

/// An RTT for people: loopback's microseconds do not read as zero.
fn millis(rtt_ms: f64) -> String {
    if rtt_ms < 1.0 {
        format!("{rtt_ms:.3} ms")
    } else {
        format!("{rtt_ms:.1} ms")
    }
}

/// How many of the streams measured at the end a limit held back.
fn on_streams(hit: usize, n: usize) -> String {
    match (hit, n) {
        (_, 1) => "on its one stream".to_string(),
        (h, n) if h == n => format!("on all {n} streams"),
        (h, n) => format!("on {h} of its {n} streams"),
    }
}

/// A buffer size that holds `bdp` twice over (the kernel counts overhead
/// in the buffer), rounded up to a power of two, at least 4 MiB.
fn buffer_for(bdp: u64) -> u64 {
    (2 * bdp).next_power_of_two().clamp(4 << 20, 1 << 30)
}

/// The sysctl line that raises the maximum of `net.ipv4.{name}` to
/// `want`, keeping its minimum and default; nothing when the maximum is
/// already there, so that advice never lowers a value. `now` is all zeros
/// when the host's value could not be read: the kernel's defaults stand in.
fn raise_max(name: &str, now: [u64; 3], want: u64) -> Option<String> {
    if want <= now[2] {
        return None;
    }
    let (min, default) = match (name, now) {
        (_, [0, 0, _]) if name == "tcp_rmem" => (4096, 131_072),
        (_, [0, 0, _]) => (4096, 16_384),
        (_, [min, default, _]) => (min, default),
    };
    Some(format!(
        "sysctl -w net.ipv4.{name}=\"{min} {default} {want}\""
    ))
}

/// Diagnoses a transfer from its streams' estimates (those of the streams
/// open at the end). `raised` holds, per stream, the send buffer tern set
/// when the kernel's cap held it back. `host` is this host's: the receive
/// window advice is for the receiving host, whose caps are only known when
/// it is this one.
pub fn diagnose(streams: Vec<StreamEstimate>, host: HostCaps, raised: &[Option<u64>]) -> Diagnosis {
    let count = |l: Limit| streams.iter().filter(|s| s.limit == l).count();
    let limit = most_streams_limit(&streams);
    let n = streams.len();
    let on = on_streams(count(limit), n);
    let stream_phrase = on.clone();
    let bdp = streams.iter().map(|s| s.bdp_bytes).max().unwrap_or(0);
    let rtt = millis(
        streams
            .iter()
            .map(|s| s.min_rtt_ms)
            .fold(f64::INFINITY, f64::min),
    );
    let mut sysctls = Vec::new();
    let summary = match limit {
        Limit::SendBuffer => {
            // The rate seen was held down by the cap itself, so the BDP
            // measured is a floor: ask for a good step above the cap too.
            let want = buffer_for(bdp).max(host.tcp_wmem[2].saturating_mul(4).min(1 << 30));
            sysctls.extend(raise_max("tcp_wmem", host.tcp_wmem, want));
            format!(
                "The send buffer was the limit {on}: the sender's tcp_wmem maximum is {} while \
                 a stream's bandwidth-delay product reached {} at {rtt}. More parallel streams \
                 work around it; raising tcp_wmem on the sending host removes it.",
                mib(host.tcp_wmem[2]),
                size(bdp)
            )
        }
        Limit::ReceiveWindow => {
            let window = streams
                .iter()
                .map(|s| s.peer_window_bytes)
                .max()
                .unwrap_or(0);
            let advice = raise_max("tcp_rmem", host.tcp_rmem, buffer_for(bdp));
            let fix = if advice.is_some() {
                "More parallel streams work around it; raising tcp_rmem on the receiving host \
                 removes it."
            } else {
                "More parallel streams work around it, as does a larger tcp_rmem maximum on \
                 the receiving host (or a larger --window)."
            };
            sysctls.extend(advice.map(|line| format!("{line}   # on the receiving host")));
            let grew = if window > 0 {
                format!(", and it never grew past {}", size(window))
            } else {
                String::new()
            };
            format!(
                "The receiver's window was too small for the path {on}: the bandwidth-delay \
                 product reached {} at {rtt}{grew}. {fix}",
                size(bdp)
            )
        }
        Limit::Receiver => {
            let window = streams
                .iter()
                .map(|s| s.peer_window_bytes)
                .max()
                .unwrap_or(0);
            format!(
                "The receiving end set the pace {on}: it read more slowly than data arrived (its \
                 disk or CPU), so its window filled up, though the window had grown to {}, more \
                 than twice the path's bandwidth-delay product ({} at {rtt}). Buffers were not \
                 the limit.",
                size(window),
                size(bdp)
            )
        }
        Limit::Network => format!(
            "The network path set the pace {on} (congestion control {}); buffers were not the \
             limit.",
            host.congestion_control
        ),
        Limit::Application => {
            format!("tern itself (disk or CPU) set the pace {on}: the sockets were often idle.")
        }
        Limit::Unknown => "TCP_INFO gave too little to tell what limited the transfer: too \
             little data moved, or too briefly, to measure."
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
            sysctls.splice(0..0, raise_max("tcp_wmem", host.tcp_wmem, want));
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
        streams_proven: 0,
        send_buffer_peak_bytes: 0,
        receive_buffer_peak_bytes: 0,
        send_buffers_peak_together_bytes: 0,
        receive_buffers_peak_together_bytes: 0,
        paths: Vec::new(),
        send_buffers_sized_bytes: None,
        stream_phrase,
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
    /// Records how the stream count changed. When it did, the summary says
    /// that its count is of the streams open at the end, so that it does
    /// not contradict a report's larger count at the peak.
    pub fn set_stream_steps(&mut self, steps: Vec<StreamStep>) {
        let changed = steps.windows(2).any(|w| w[0].streams != w[1].streams);
        if changed && !self.stream_phrase.is_empty() {
            let at_end = format!("{} open at the end", self.stream_phrase);
            self.summary = self.summary.replacen(&self.stream_phrase, &at_end, 1);
            self.stream_phrase = at_end;
        }
        self.stream_steps = steps;
    }

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
        self.send_buffers_sized_bytes = Some(total);
        self.sysctls.retain(|l| !l.contains("tcp_wmem"));
        if 2 * bdp > cap {
            self.limit = Limit::SendBuffer;
            let line = raise_max("tcp_wmem", self.host.tcp_wmem, buffer_for(bdp));
            self.sysctls.splice(0..0, line);
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
                "The send buffer was the limit: the kernel's autotuning stops a stream's send \
                 buffer at the sender's tcp_wmem maximum of {}, while this path's bandwidth-delay product is {} at \
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

    /// The maximum a sysctl line sets.
    fn max_set(line: &str) -> u64 {
        let quoted = line.split('"').nth(1).expect("a quoted value");
        quoted.split_whitespace().nth(2).unwrap().parse().unwrap()
    }

    #[test]
    fn advice_never_lowers_a_value_whatever_the_host_caps() {
        let maxima = [0, 65_536, 4 << 20, 6 << 20, 32 << 20, 1 << 30];
        // (busy, rwnd-limited, sndbuf-limited) µs of one second, and rates
        // from a trickle to 1 GB/s at 100 ms (a 100 MB BDP).
        let shapes = [(1_000_000, 0, 800_000), (1_000_000, 600_000, 0)];
        let rates = [1, 1_000_000, 50_000_000, 1_000_000_000];
        for &max in &maxima {
            let mut caps = host();
            caps.tcp_rmem[2] = max;
            caps.tcp_wmem[2] = max;
            for &(busy, rwnd, sndbuf) in &shapes {
                for &rate in &rates {
                    let mut e = StreamEstimator::default();
                    e.add(Duration::ZERO, sample(0, 0, 0, 1, 100_000));
                    e.add(
                        Duration::from_secs(1),
                        sample(busy, rwnd, sndbuf, rate, 100_000),
                    );
                    for raised in [None, Some(8 << 20)] {
                        let mut d = diagnose(vec![e.estimate()], caps.clone(), &[raised]);
                        d.shared_sizing(SharedSizing {
                            streams: 4,
                            each: 2 << 20,
                            bdp: rate / 10,
                            rtt_ms: 100.0,
                        });
                        for line in &d.sysctls {
                            let now = if line.contains("tcp_rmem") {
                                caps.tcp_rmem[2]
                            } else {
                                caps.tcp_wmem[2]
                            };
                            assert!(max_set(line) > now, "{line} with maximum {now}");
                            assert!(!line.contains("\"0 0 "), "{line}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_full_window_on_a_tiny_path_blames_no_buffer_and_says_its_sizes() {
        // Loopback: 3 µs, the window grew to 3 MiB and still filled.
        let mut e = StreamEstimator::default();
        let mut first = sample(0, 0, 0, 1, 3);
        first.snd_wnd = Some(3 << 20);
        e.add(Duration::ZERO, first);
        let mut last = sample(1_000_000, 500_000, 0, 10_000_000_000, 3);
        last.snd_wnd = Some(64 << 10);
        e.add(Duration::from_secs(1), last);
        let mut caps = host();
        caps.tcp_rmem[2] = 32 << 20;
        let d = diagnose(vec![e.estimate()], caps, &[]);
        assert_eq!(d.limit, Limit::Receiver);
        assert!(d.sysctls.is_empty(), "{:?}", d.sysctls);
        assert!(
            d.summary.contains("receiving end set the pace"),
            "{}",
            d.summary
        );
        assert!(d.summary.contains("3.0 MiB"), "{}", d.summary);
        assert!(d.summary.contains("29 KiB at 0.003 ms"), "{}", d.summary);
        assert!(!d.summary.contains(" 0.0 "), "{}", d.summary);
    }

    #[test]
    fn stream_counts_read_as_words() {
        assert_eq!(on_streams(1, 1), "on its one stream");
        assert_eq!(on_streams(4, 4), "on all 4 streams");
        assert_eq!(on_streams(1, 2), "on 1 of its 2 streams");
        let d = diagnose(vec![est(1_000_000, 0, 0)], host(), &[]);
        assert!(d.summary.contains("on its one stream"), "{}", d.summary);
    }

    #[test]
    fn buffers_hold_twice_the_bdp() {
        assert_eq!(buffer_for(5_000_000), 16 << 20);
        assert_eq!(buffer_for(1), 4 << 20);
        assert_eq!(buffer_for(u64::MAX / 4), 1 << 30);
    }
}
