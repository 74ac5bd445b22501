//! Buffer policy: how big a stream's send buffer, receive buffer and
//! unsent-data mark should be, from what the stream measurably did. Pure;
//! [`crate::tuner`] applies the decisions to sockets.
//!
//! Hybrid with the kernel, as DRS intends: kernel autotuning stays in
//! charge until a stream is measurably limited by its send buffer (the
//! `tcpi_sndbuf_limited` counter grows); only then is the buffer set
//! explicitly. It grows by half per step while the limit persists — small
//! enough steps that the buffer ends up within about 1.5× of what the
//! stream needs, which keeps the total near the bandwidth-delay product
//! instead of at a power of two above it — and never past the stream's
//! share of the budget. Once tern owns a buffer it also shrinks it when the
//! stream no longer needs it: when the bytes in flight over the last
//! [`TRIM_WINDOW`] intervals would fit in less than half of it (the path
//! got slower, or its RTT dropped after a reroute). Without privilege the
//! kernel caps an explicit `SO_SNDBUF` at `net.core.wmem_max`; the policy
//! knows and stays within it.

use std::collections::VecDeque;
use std::time::Duration;

use crate::estimate::Interval;

/// A limit counts once it covers this share of an interval's busy time.
const LIMITED: f64 = 0.2;

/// Intervals of history behind a decision to shrink.
pub const TRIM_WINDOW: usize = 10;

/// Growth factor per step while a stream stays buffer-limited.
const GROWTH: f64 = 1.5;

/// Headroom over the bytes in flight: the kernel charges socket buffers
/// with per-packet overhead, and the unsent mark sits on top.
const HEADROOM: f64 = 1.25;

/// What the policy may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferBudget {
    /// Bytes of send buffer one stream may have.
    pub per_stream: u64,
    /// `SO_SNDBUFFORCE` is allowed (CAP_NET_ADMIN): no `wmem_max` cap.
    pub privileged: bool,
    /// `net.core.wmem_max`.
    pub wmem_max: u64,
}

impl BufferBudget {
    /// The largest send buffer this budget allows one stream.
    pub fn cap(&self) -> u64 {
        if self.privileged {
            self.per_stream
        } else {
            self.per_stream.min(self.wmem_max)
        }
    }
}

/// Decides a stream's next send-buffer size when it is buffer-limited, or
/// `None` to leave it. `notsent_lowat` is the unsent-data mark in force.
///
/// Three checks keep the buffer near what the path needs rather than what
/// congestion control asks for:
/// - a stream whose smoothed RTT has risen a quarter above its minimum is
///   already queueing at the bottleneck: more buffer would only lengthen
///   the queue;
/// - a buffer that already holds one and a half times the flight at the
///   current rate (acknowledged rate × minimum RTT) plus the unsent mark is
///   not what holds the rate down, whatever the counters say (BBR keeps a
///   window of about twice the BDP and fills any buffer it is given);
/// - growth follows the congestion window when it ran ahead (slow start),
///   at most fourfold per step, and never past the budget.
pub fn next_sndbuf(
    interval: &Interval,
    current: u64,
    notsent_lowat: u64,
    budget: &BufferBudget,
) -> Option<u64> {
    if !is_sndbuf_limited(interval) {
        return None;
    }
    if is_queueing(interval) {
        return None;
    }
    let flight = interval.acked_rate * f64::from(interval.min_rtt_us) / 1e6;
    let enough = (flight * GROWTH) as u64 + notsent_lowat;
    if current >= enough {
        return None;
    }
    let window = (interval.cwnd_bytes as f64 * HEADROOM) as u64;
    let want = ((current as f64 * GROWTH) as u64)
        .max(window.min(current.saturating_mul(4)))
        .min(budget.cap());
    (want > current).then_some(want)
}

/// True when the stream's smoothed RTT is a quarter above its minimum: it
/// is already queueing at the bottleneck, and more buffer would only
/// lengthen the queue.
pub fn is_queueing(interval: &Interval) -> bool {
    interval.min_rtt_us > 0 && u64::from(interval.srtt_us) * 4 > u64::from(interval.min_rtt_us) * 5
}

/// True when the stream spent a real share of the interval on its send
/// buffer while busy.
pub fn is_sndbuf_limited(interval: &Interval) -> bool {
    interval.busy_share >= 0.5 && interval.sndbuf_limited_share >= LIMITED
}

/// Per-stream send-buffer decisions over time: grows like [`next_sndbuf`],
/// and shrinks a buffer tern set once recent intervals show it is more than
/// twice what the stream needs.
#[derive(Debug, Clone, Default)]
pub struct SendTuner {
    /// Bytes in flight (acked rate × smoothed RTT) of recent intervals.
    recent_flight: VecDeque<f64>,
    /// Whether any recent interval was buffer-limited.
    recent_limited: VecDeque<bool>,
    /// Smoothed RTT when the buffer was last set, µs.
    sized_at_rtt_us: Option<u32>,
    /// When the buffer was last grown.
    grown_at: Option<Duration>,
}

/// What [`SendTuner::decide`] wants done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendDecision {
    /// Grow the buffer to this many bytes.
    Grow(u64),
    /// Shrink the buffer to this many bytes.
    Shrink(u64),
}

impl SendTuner {
    /// Judges the interval that ended at `now`. `owned` is true when tern
    /// set the buffer explicitly (it never shrinks a buffer the kernel is
    /// autotuning); `notsent_lowat` is the unsent-data mark in force.
    ///
    /// After growing, it waits one smoothed RTT before growing again: the
    /// stream needs that long to show whether the larger buffer was
    /// enough, and growing on stale evidence overshoots.
    pub fn decide(
        &mut self,
        now: Duration,
        interval: &Interval,
        current: u64,
        owned: bool,
        notsent_lowat: u64,
        budget: &BufferBudget,
    ) -> Option<SendDecision> {
        if let Some(sized) = self.sized_at_rtt_us {
            // A reroute to a shorter path: old flights say nothing now.
            if interval.srtt_us > 0 && u64::from(interval.srtt_us) * 10 < u64::from(sized) * 7 {
                self.recent_flight.clear();
                self.recent_limited.clear();
                self.sized_at_rtt_us = Some(interval.srtt_us);
            }
        }
        let flight =
            interval.acked_rate * f64::from(interval.srtt_us.max(interval.min_rtt_us)) / 1e6;
        push_bounded(&mut self.recent_flight, flight);
        push_bounded(&mut self.recent_limited, is_sndbuf_limited(interval));

        let settle = Duration::from_micros(u64::from(interval.srtt_us));
        let settled = self
            .grown_at
            .is_none_or(|t| now.saturating_sub(t) >= settle);
        if let Some(next) = next_sndbuf(interval, current, notsent_lowat, budget) {
            if !settled {
                return None;
            }
            self.sized_at_rtt_us = Some(interval.srtt_us);
            self.grown_at = Some(now);
            return Some(SendDecision::Grow(next));
        }
        if !owned
            || self.recent_flight.len() < TRIM_WINDOW
            || self.recent_limited.iter().any(|&l| l)
        {
            return None;
        }
        let peak = self.recent_flight.iter().copied().fold(0.0, f64::max);
        let need = (peak * HEADROOM) as u64 + notsent_lowat;
        if need.saturating_mul(2) >= current {
            return None;
        }
        let target = (need as f64 * GROWTH) as u64;
        self.sized_at_rtt_us = Some(interval.srtt_us);
        self.recent_flight.clear();
        self.recent_limited.clear();
        Some(SendDecision::Shrink(target))
    }
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() == TRIM_WINDOW {
        q.pop_front();
    }
    q.push_back(v);
}

/// The unsent-data mark (`TCP_NOTSENT_LOWAT`) for a stream delivering
/// `rate` bytes/s: about 10 ms of data, so a writer woken late still finds
/// the socket fed, but no more, so a deadline is not followed by seconds of
/// queued data. 2 MiB before anything is known.
pub fn notsent_lowat(rate: Option<f64>) -> u64 {
    match rate {
        Some(r) if r > 0.0 => ((r * 0.010) as u64).clamp(256 << 10, 4 << 20),
        _ => 2 << 20,
    }
}

/// Receive-side decision: the kernel's autotuning grows a receive buffer to
/// about twice what the application read in the last RTT (its receive-space
/// estimate, `tcpi_rcv_space`, DRS's descendant) but never past
/// `tcp_rmem[2]`. When a stream's buffer sits at that cap while the kernel's
/// own estimate says it needs at least the cap, tern takes
/// the buffer over and keeps it growing while the stream reads at least
/// half of it per RTT, within `cap` bytes (the stream's budget share, or
/// `rmem_max` without privilege) and within what the window scale chosen at
/// connection setup can advertise (`max_window`). `owned` is true once tern
/// has set the buffer. `None` leaves it.
pub fn next_rcvbuf(
    rcv_space: u64,
    current: u64,
    owned: bool,
    tcp_rmem_max: u64,
    cap: u64,
    max_window: u64,
) -> Option<u64> {
    let kernel_capped =
        !owned && current >= tcp_rmem_max && rcv_space.saturating_mul(2) >= tcp_rmem_max;
    let owned_and_tight = owned && rcv_space.saturating_mul(2) >= current;
    if !(kernel_capped || owned_and_tight) {
        return None;
    }
    let want = ((current as f64 * GROWTH) as u64)
        .min(cap)
        .min(max_window.saturating_mul(2));
    (want > current).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn interval(busy: f64, sndbuf: f64, rate: f64) -> Interval {
        Interval {
            busy_share: busy,
            sndbuf_limited_share: sndbuf,
            rwnd_limited_share: 0.0,
            acked_rate: rate,
            min_rtt_us: 100_000,
            srtt_us: 100_000,
            cwnd_bytes: 0,
            retrans_bytes: 0,
        }
    }

    /// A time far enough apart for every decision in these tests.
    const T: Duration = Duration::from_secs(100);

    const BUDGET: BufferBudget = BufferBudget {
        per_stream: 64 << 20,
        privileged: true,
        wmem_max: 4 << 20,
    };

    #[test]
    fn a_buffer_limited_stream_grows_by_half() {
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.6, 30e6), 4 << 20, 0, &BUDGET),
            Some(6 << 20)
        );
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.6, 1e9), 60 << 20, 0, &BUDGET),
            Some(64 << 20),
            "the budget caps growth"
        );
    }

    #[test]
    fn a_stream_already_queueing_gets_no_more_buffer() {
        let queueing = Interval {
            srtt_us: 130_000,
            ..interval(1.0, 0.9, 30e6)
        };
        assert_eq!(next_sndbuf(&queueing, 4 << 20, 0, &BUDGET), None);
        let near_min = Interval {
            srtt_us: 110_000,
            ..interval(1.0, 0.9, 30e6)
        };
        assert_eq!(next_sndbuf(&near_min, 4 << 20, 0, &BUDGET), Some(6 << 20));
    }

    #[test]
    fn a_buffer_that_holds_the_flight_is_not_grown_whatever_the_counters_say() {
        // 125 MB/s × 50 ms = 6.25 MB in flight; 11 MiB already hold it 1.5
        // times over plus a 1.25 MB unsent mark, though BBR's window (18 MB)
        // keeps the buffer full.
        let full = Interval {
            min_rtt_us: 50_000,
            srtt_us: 55_000,
            cwnd_bytes: 18_000_000,
            ..interval(1.0, 0.6, 125e6)
        };
        assert_eq!(next_sndbuf(&full, 11 << 20, 1_250_000, &BUDGET), None);
        // Still below what the rate needs: grown.
        assert!(next_sndbuf(&full, 8 << 20, 1_250_000, &BUDGET).is_some());
    }

    #[test]
    fn growth_follows_a_congestion_window_that_ran_ahead() {
        // Slow start: the window wants 16 MB while the buffer holds 4 MiB.
        let ahead = Interval {
            cwnd_bytes: 16_000_000,
            ..interval(1.0, 0.9, 30e6)
        };
        assert_eq!(next_sndbuf(&ahead, 4 << 20, 0, &BUDGET), Some(16 << 20));
        // At most four times the current buffer per step.
        let far = Interval {
            cwnd_bytes: 400_000_000,
            ..interval(1.0, 0.9, 30e6)
        };
        assert_eq!(next_sndbuf(&far, 4 << 20, 0, &BUDGET), Some(16 << 20));
    }

    #[test]
    fn unlimited_or_idle_streams_are_left_to_the_kernel() {
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.05, 30e6), 4 << 20, 0, &BUDGET),
            None
        );
        assert_eq!(
            next_sndbuf(&interval(0.2, 0.9, 30e6), 4 << 20, 0, &BUDGET),
            None
        );
    }

    #[test]
    fn without_privilege_wmem_max_is_the_ceiling() {
        let b = BufferBudget {
            privileged: false,
            ..BUDGET
        };
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.9, 100e6), 1 << 20, 0, &b),
            Some(3 << 19)
        );
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.9, 100e6), 4 << 20, 0, &b),
            None
        );
    }

    #[test]
    fn an_owned_buffer_shrinks_when_the_path_no_longer_needs_it() {
        let mut t = SendTuner::default();
        // 10 MB/s × 100 ms = 1 MB in flight, but 32 MiB of buffer.
        let mut decisions = vec![];
        for _ in 0..TRIM_WINDOW {
            decisions.push(t.decide(
                T,
                &interval(1.0, 0.0, 10e6),
                32 << 20,
                true,
                1 << 20,
                &BUDGET,
            ));
        }
        let need = (1e6 * HEADROOM) as u64 + (1 << 20);
        assert_eq!(
            decisions.last().copied().flatten(),
            Some(SendDecision::Shrink((need as f64 * GROWTH) as u64))
        );
        assert!(decisions[..TRIM_WINDOW - 1].iter().all(Option::is_none));
        // The kernel's own buffer is never shrunk.
        let mut t = SendTuner::default();
        for _ in 0..2 * TRIM_WINDOW {
            assert_eq!(
                t.decide(
                    T,
                    &interval(1.0, 0.0, 10e6),
                    32 << 20,
                    false,
                    1 << 20,
                    &BUDGET
                ),
                None
            );
        }
    }

    #[test]
    fn a_drop_in_rtt_forgets_old_flights() {
        let mut t = SendTuner::default();
        // Sized on a 100 ms path at 100 MB/s: 10 MB in flight.
        t.decide(
            T,
            &interval(1.0, 0.6, 100e6),
            8 << 20,
            true,
            1 << 20,
            &BUDGET,
        );
        for _ in 0..TRIM_WINDOW - 2 {
            t.decide(
                T,
                &interval(1.0, 0.0, 100e6),
                16 << 20,
                true,
                1 << 20,
                &BUDGET,
            );
        }
        // Rerouted to 20 ms: the buffer is five times too big; the 100 ms
        // flights must not keep it.
        let short = Interval {
            srtt_us: 20_000,
            min_rtt_us: 20_000,
            ..interval(1.0, 0.0, 100e6)
        };
        let mut shrunk = None;
        for _ in 0..TRIM_WINDOW {
            shrunk = shrunk.or(t.decide(T, &short, 16 << 20, true, 1 << 20, &BUDGET));
        }
        assert!(
            matches!(shrunk, Some(SendDecision::Shrink(n)) if n < 8 << 20),
            "{shrunk:?}"
        );
    }

    #[test]
    fn a_needed_buffer_is_kept() {
        let mut t = SendTuner::default();
        // 100 MB/s × 100 ms = 10 MB in flight in a 16 MiB buffer: kept.
        for _ in 0..3 * TRIM_WINDOW {
            assert_eq!(
                t.decide(
                    T,
                    &interval(1.0, 0.0, 100e6),
                    16 << 20,
                    true,
                    1 << 20,
                    &BUDGET
                ),
                None
            );
        }
    }

    #[test]
    fn growth_waits_for_the_last_step_to_show() {
        let mut t = SendTuner::default();
        let limited = interval(1.0, 0.9, 100e6);
        let at = |ms| Duration::from_millis(ms);
        assert_eq!(
            t.decide(at(200), &limited, 4 << 20, false, 1 << 20, &BUDGET),
            Some(SendDecision::Grow(6 << 20))
        );
        // 100 ms RTT: not again before 100 ms have passed.
        assert_eq!(
            t.decide(at(250), &limited, 6 << 20, true, 1 << 20, &BUDGET),
            None
        );
        assert_eq!(
            t.decide(at(300), &limited, 6 << 20, true, 1 << 20, &BUDGET),
            Some(SendDecision::Grow(9 << 20))
        );
    }

    #[test]
    fn the_unsent_mark_follows_the_rate() {
        assert_eq!(notsent_lowat(None), 2 << 20);
        assert_eq!(notsent_lowat(Some(125e6)), 1_250_000);
        assert_eq!(notsent_lowat(Some(1e3)), 256 << 10);
        assert_eq!(notsent_lowat(Some(1e12)), 4 << 20);
    }

    #[test]
    fn the_receive_buffer_is_taken_over_only_at_the_kernel_cap() {
        let rmem2 = 6 << 20;
        let w = 1 << 30;
        // Kernel still has room: leave it.
        assert_eq!(
            next_rcvbuf(1 << 20, 2 << 20, false, rmem2, 64 << 20, w),
            None
        );
        // Buffer at the cap and the estimate says it needs the cap: grow.
        assert_eq!(
            next_rcvbuf(3 << 20, 6 << 20, false, rmem2, 64 << 20, w),
            Some(9 << 20)
        );
        // At the cap but idle: leave it.
        assert_eq!(
            next_rcvbuf(1 << 20, 6 << 20, false, rmem2, 64 << 20, w),
            None
        );
        // Owned and the estimate is catching up: grow again, within the cap.
        assert_eq!(
            next_rcvbuf(5 << 20, 9 << 20, true, rmem2, 12 << 20, w),
            Some(12 << 20)
        );
        // Owned with room to spare: keep.
        assert_eq!(
            next_rcvbuf(2 << 20, 9 << 20, true, rmem2, 64 << 20, w),
            None
        );
        // Never past twice what the window scale can advertise.
        assert_eq!(
            next_rcvbuf(6 << 20, 12 << 20, true, rmem2, 64 << 20, 65535 << 7),
            Some(2 * (65535 << 7))
        );
    }

    proptest! {
        #[test]
        fn never_exceeds_the_budget(
            busy in 0.0f64..1.0, sndbuf in 0.0f64..1.0, rate in 0.0f64..1e10,
            current in 1u64..(1 << 31), per_stream in 1u64..(1 << 32), privileged: bool,
            rtt in 1u32..1_000_000, owned: bool,
        ) {
            let b = BufferBudget { per_stream, privileged, wmem_max: 4 << 20 };
            let iv = Interval { srtt_us: rtt, min_rtt_us: rtt, ..interval(busy, sndbuf, rate) };
            let mut t = SendTuner::default();
            for _ in 0..TRIM_WINDOW {
                match t.decide(T, &iv, current, owned, 2 << 20, &b) {
                    Some(SendDecision::Grow(next)) => {
                        prop_assert!(next > current);
                        prop_assert!(next <= per_stream);
                        prop_assert!(privileged || next <= 4 << 20);
                    }
                    Some(SendDecision::Shrink(next)) => {
                        prop_assert!(owned);
                        prop_assert!(next < current);
                    }
                    None => {}
                }
            }
        }

        #[test]
        fn the_receive_buffer_stays_within_its_cap(
            space in 0u64..(1 << 32), current in 1u64..(1 << 32), owned: bool,
            rmem2 in 1u64..(1 << 30), cap in 1u64..(1 << 32), wscale in 0u32..15,
        ) {
            let max_window = 65535u64 << wscale;
            if let Some(next) = next_rcvbuf(space, current, owned, rmem2, cap, max_window) {
                prop_assert!(next > current && next <= cap && next <= 2 * max_window);
            }
        }
    }
}
