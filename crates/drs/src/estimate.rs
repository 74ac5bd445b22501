//! Per-stream estimates from a series of `TCP_INFO` samples. Pure.
//!
//! The kernel's time counters (`busy`, `rwnd_limited`, `sndbuf_limited`)
//! are cumulative, so what a stream spent its time on is the difference
//! between the first and the last sample of the measurement window.

use std::time::Duration;

use serde::Serialize;

use crate::tcp_info::TcpInfo;

/// What held a stream back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The peer's receive window (its receive buffer) was too small for
    /// the path.
    ReceiveWindow,
    /// The peer's window was full although it had grown past twice the
    /// path's bandwidth-delay product: the receiving application read more
    /// slowly than data arrived (its disk or CPU), not a buffer cap.
    Receiver,
    /// Our send buffer.
    SendBuffer,
    /// The path, as congestion control saw it.
    Network,
    /// The application did not keep the socket busy (disk, CPU).
    Application,
    /// Not enough samples, or the kernel lacks the counters.
    Unknown,
}

/// What one stream looked like over the measurement window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamEstimate {
    /// Lowest RTT seen, ms.
    pub min_rtt_ms: f64,
    /// Latest smoothed RTT, ms.
    pub srtt_ms: f64,
    /// Highest delivery rate seen, bits/s.
    pub delivery_rate_bps: f64,
    /// Bandwidth-delay product from those two, bytes.
    pub bdp_bytes: u64,
    /// Share of the window the socket was busy sending.
    pub busy_share: f64,
    /// Share of busy time limited by the receive window.
    pub rwnd_limited_share: f64,
    /// Share of busy time limited by the send buffer.
    pub sndbuf_limited_share: f64,
    /// Largest window the peer advertised, bytes (0 when the kernel does
    /// not say).
    pub peer_window_bytes: u64,
    /// The dominant limit.
    pub limit: Limit,
}

/// What one stream did between its last two samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Share of the interval the socket was busy.
    pub busy_share: f64,
    /// Share of busy time limited by the send buffer.
    pub sndbuf_limited_share: f64,
    /// Share of busy time limited by the receive window.
    pub rwnd_limited_share: f64,
    /// Bytes acknowledged per second.
    pub acked_rate: f64,
    /// Lowest RTT seen so far, µs.
    pub min_rtt_us: u32,
    /// Smoothed RTT at the end of the interval, µs.
    pub srtt_us: u32,
    /// Congestion window at the end of the interval, bytes.
    pub cwnd_bytes: u64,
    /// Bytes retransmitted during the interval.
    pub retrans_bytes: u64,
}

/// Accumulates samples of one stream.
#[derive(Debug, Default, Clone)]
pub struct StreamEstimator {
    first: Option<(Duration, TcpInfo)>,
    previous: Option<(Duration, TcpInfo)>,
    last: Option<(Duration, TcpInfo)>,
    min_rtt_us: Option<u32>,
    max_rate: u64,
    max_peer_window: u64,
    /// When the peer's window was last seen larger than ever before.
    peer_window_grew_at: Option<Duration>,
    /// Samples that showed the peer's window, and those that found it
    /// closed (less than one segment).
    peer_window_samples: u32,
    peer_window_closed: u32,
}

/// A limit counts as dominant once it covers this share of busy time.
const LIMITED: f64 = 0.2;

impl StreamEstimator {
    /// Adds a sample taken at `at` (any monotonic origin).
    pub fn add(&mut self, at: Duration, info: TcpInfo) {
        if self.first.is_none() {
            self.first = Some((at, info));
        }
        self.previous = self.last;
        self.last = Some((at, info));
        let rtt = info.min_rtt_us.unwrap_or(info.rtt_us);
        if rtt > 0 {
            self.min_rtt_us = Some(self.min_rtt_us.map_or(rtt, |m| m.min(rtt)));
        }
        if let Some(rate) = info.delivery_rate {
            self.max_rate = self.max_rate.max(rate);
        }
        if let Some(window) = info.snd_wnd {
            self.peer_window_samples += 1;
            if window < info.snd_mss.max(1) {
                self.peer_window_closed += 1;
            }
            if u64::from(window) > self.max_peer_window {
                self.max_peer_window = u64::from(window);
                self.peer_window_grew_at = Some(at);
            }
        }
    }

    /// The last interval, once there are two samples with time counters.
    pub fn last_interval(&self) -> Option<Interval> {
        let ((t0, a), (t1, b)) = (self.previous?, self.last?);
        let window_us = (t1 - t0).as_micros() as f64;
        let busy = b.busy_us?.saturating_sub(a.busy_us?) as f64;
        if window_us <= 0.0 {
            return None;
        }
        let share = |x: Option<u64>, y: Option<u64>| -> Option<f64> {
            Some(if busy > 0.0 {
                (y?.saturating_sub(x?) as f64 / busy).min(1.0)
            } else {
                0.0
            })
        };
        Some(Interval {
            busy_share: (busy / window_us).min(1.0),
            sndbuf_limited_share: share(a.sndbuf_limited_us, b.sndbuf_limited_us)?,
            rwnd_limited_share: share(a.rwnd_limited_us, b.rwnd_limited_us)?,
            acked_rate: b.bytes_acked.saturating_sub(a.bytes_acked) as f64 / (window_us / 1e6),
            min_rtt_us: self.min_rtt_us.unwrap_or(0),
            srtt_us: b.rtt_us,
            cwnd_bytes: u64::from(b.snd_cwnd) * u64::from(b.snd_mss),
            retrans_bytes: b
                .bytes_retrans
                .unwrap_or(0)
                .saturating_sub(a.bytes_retrans.unwrap_or(0)),
        })
    }

    /// The estimate so far.
    pub fn estimate(&self) -> StreamEstimate {
        let min_rtt_ms = f64::from(self.min_rtt_us.unwrap_or(0)) / 1e3;
        let srtt_ms = self.last.map_or(0.0, |(_, i)| f64::from(i.rtt_us) / 1e3);
        let delivery_rate_bps = self.max_rate as f64 * 8.0;
        let bdp_bytes = self.bdp_bytes();
        let (mut busy_share, mut rwnd, mut sndbuf, mut limit) = (0.0, 0.0, 0.0, Limit::Unknown);
        if let (Some((t0, a)), Some((t1, b))) = (self.first, self.last) {
            let window_us = (t1 - t0).as_micros() as f64;
            let delta = |x: Option<u64>, y: Option<u64>| match (x, y) {
                (Some(x), Some(y)) => Some(y.saturating_sub(x) as f64),
                _ => None,
            };
            if let (Some(busy), Some(r), Some(s)) = (
                delta(a.busy_us, b.busy_us),
                delta(a.rwnd_limited_us, b.rwnd_limited_us),
                delta(a.sndbuf_limited_us, b.sndbuf_limited_us),
            ) {
                if window_us > 0.0 && busy > 0.0 {
                    busy_share = (busy / window_us).min(1.0);
                    rwnd = (r / busy).min(1.0);
                    sndbuf = (s / busy).min(1.0);
                    limit = if sndbuf >= LIMITED && sndbuf >= rwnd {
                        Limit::SendBuffer
                    } else if rwnd >= LIMITED {
                        self.window_limit(bdp_bytes)
                    } else if busy_share < 0.8 {
                        Limit::Application
                    } else {
                        Limit::Network
                    };
                }
            }
        }
        StreamEstimate {
            min_rtt_ms,
            srtt_ms,
            delivery_rate_bps,
            bdp_bytes,
            busy_share,
            rwnd_limited_share: rwnd,
            sndbuf_limited_share: sndbuf,
            peer_window_bytes: self.max_peer_window,
            limit,
        }
    }

    /// Who a full peer window points at: a window that never grew past
    /// twice the path's bandwidth-delay product was too small for the
    /// path; one that had, and still filled, was drained too slowly.
    fn window_limit(&self, bdp_bytes: u64) -> Limit {
        if self.window_outgrew(bdp_bytes) {
            Limit::Receiver
        } else {
            Limit::ReceiveWindow
        }
    }

    fn window_outgrew(&self, bdp_bytes: u64) -> bool {
        self.max_peer_window > 0 && self.max_peer_window >= 2 * bdp_bytes
    }

    /// The peer reads more slowly than data arrives: its window has grown
    /// past twice the path's bandwidth-delay product (and still fills), or
    /// at least a third of the samples found it closed, its buffer full of
    /// data not read yet. A receive buffer that is merely small for the
    /// path drains as data comes and keeps its window open.
    pub fn peer_reads_slowly(&self) -> bool {
        self.window_outgrew(self.bdp_bytes())
            || (self.peer_window_closed >= 2
                && self.peer_window_closed * 3 >= self.peer_window_samples)
    }

    /// The peer's window has not grown for `settle` before `at`: the
    /// receiver's autotuning (or tern's) has stopped opening it.
    pub fn peer_window_settled(&self, at: Duration, settle: Duration) -> bool {
        self.peer_window_grew_at
            .is_some_and(|grew| at.saturating_sub(grew) >= settle)
    }

    /// The highest delivery rate seen times the lowest RTT.
    fn bdp_bytes(&self) -> u64 {
        let min_rtt_s = f64::from(self.min_rtt_us.unwrap_or(0)) / 1e6;
        (self.max_rate as f64 * min_rtt_s) as u64
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A synthetic sample: cumulative counters in µs.
    pub(crate) fn sample(busy: u64, rwnd: u64, sndbuf: u64, rate: u64, min_rtt_us: u32) -> TcpInfo {
        TcpInfo {
            rtt_us: min_rtt_us + 500,
            min_rtt_us: Some(min_rtt_us),
            delivery_rate: Some(rate),
            busy_us: Some(busy),
            rwnd_limited_us: Some(rwnd),
            sndbuf_limited_us: Some(sndbuf),
            ..TcpInfo::default()
        }
    }

    fn run(samples: &[(u64, TcpInfo)]) -> StreamEstimate {
        let mut e = StreamEstimator::default();
        for (ms, info) in samples {
            e.add(Duration::from_millis(*ms), *info);
        }
        e.estimate()
    }

    #[test]
    fn a_stream_stuck_on_its_send_buffer_is_recognised() {
        // Busy the whole second, 70% of it limited by the send buffer.
        let e = run(&[
            (0, sample(0, 0, 0, 10_000_000, 100_000)),
            (1000, sample(1_000_000, 0, 700_000, 20_000_000, 100_000)),
        ]);
        assert_eq!(e.limit, Limit::SendBuffer);
        assert!((e.sndbuf_limited_share - 0.7).abs() < 1e-9);
        assert_eq!(e.min_rtt_ms, 100.0);
        assert_eq!(e.delivery_rate_bps, 160e6);
        assert_eq!(e.bdp_bytes, 2_000_000);
    }

    #[test]
    fn receive_window_network_and_application_limits() {
        let rwnd = run(&[
            (0, sample(0, 0, 0, 1, 1000)),
            (1000, sample(1_000_000, 500_000, 0, 1, 1000)),
        ]);
        assert_eq!(rwnd.limit, Limit::ReceiveWindow);
        let net = run(&[
            (0, sample(0, 0, 0, 1, 1000)),
            (1000, sample(990_000, 10_000, 0, 1, 1000)),
        ]);
        assert_eq!(net.limit, Limit::Network);
        let app = run(&[
            (0, sample(0, 0, 0, 1, 1000)),
            (1000, sample(300_000, 0, 0, 1, 1000)),
        ]);
        assert_eq!(app.limit, Limit::Application);
        assert_eq!(run(&[(0, sample(0, 0, 0, 1, 1000))]).limit, Limit::Unknown);
    }

    #[test]
    fn a_full_window_far_larger_than_the_path_needs_blames_the_receiving_application() {
        // 10 MB/s at 1 ms: a 10 kB bandwidth-delay product.
        let with_window = |window: u32| {
            let mut first = sample(0, 0, 0, 10_000_000, 1000);
            first.snd_wnd = Some(window);
            let mut last = sample(1_000_000, 500_000, 0, 10_000_000, 1000);
            last.snd_wnd = Some(window / 4);
            run(&[(0, first), (1000, last)])
        };
        let slow_reader = with_window(4 << 20);
        assert_eq!(slow_reader.limit, Limit::Receiver);
        assert_eq!(slow_reader.peer_window_bytes, 4 << 20);
        // A window that never held the path twice over was too small.
        assert_eq!(with_window(15_000).limit, Limit::ReceiveWindow);
    }
}
