//! Send-buffer sizing for all the streams of one session together, on long
//! paths. Pure; the engine feeds it the session's aggregate and hands each
//! stream's tuner its share.
//!
//! On a long path one stream's view is the wrong one to size from: the
//! streams share one bottleneck, and their shares of it swing (a stream in
//! BBR's `PROBE_RTT` hands its share to the others for a moment), so a
//! buffer sized to each stream's best moment sums to far more than the path
//! holds. What the path needs is the classic DRS rule applied to the whole
//! session: buffers that together hold [`FACTOR`] times its bandwidth-delay
//! product — the aggregate rate (the best of the recent intervals) times
//! the smallest RTT — split evenly among the streams. Twice the BDP is what
//! the hand-tuned best of a window × streams sweep uses; it keeps the pipe
//! full through a loss or a probe without letting the streams pile a second
//! BDP into the bottleneck's queue.
//!
//! While the streams ramp up the aggregate rate is what the buffers let
//! through, so each step sizes the buffers to about twice what they carried
//! in the last interval: growth like slow start's, never ahead of evidence.
//! When the path gets slower or shorter (a reroute) the old rate ages out
//! of the window and the shares shrink.

use std::collections::VecDeque;
use std::time::Duration;

/// Buffers of a session hold this many times its bandwidth-delay product.
pub const FACTOR: f64 = 2.0;

/// A session counts as on a long path from this RTT on: below it, kernel
/// autotuning reaches the BDP on its own and one stream per session is the
/// norm, so each stream is left to its own policy.
pub const LONG_PATH_RTT: Duration = Duration::from_millis(20);

/// How long a good interval's rate counts for the session's BDP.
pub const RATE_MEMORY: Duration = Duration::from_secs(2);

/// The smallest share a stream gets: a few packets' worth of jumbo frames,
/// so that a stream that just joined can show what it can do.
pub const MIN_SHARE: u64 = 256 << 10;

/// The streams a session on a path with round-trip time `rtt` starts with
/// when the count is automatic: one per whole 12.5 ms of RTT (at least one),
/// rounded up to a power of two, at most `max` (1 below 25 ms, 4 at 50 ms,
/// 8 from 87.5 ms on).
///
/// Every stream spends its first round trips in slow start and, under BBR,
/// a few hundred milliseconds every ten seconds nearly idle in `PROBE_RTT`;
/// both cost time in proportion to the RTT, and both hurt less when the
/// rate is split over several streams that each need a smaller window.
/// The window × streams sweep on this repository's emulated paths (see
/// `BENCHMARKS.md`) shows the gain: at 180 ms, one stream with a buffer of
/// twice the BDP reaches 0.93 of eight streams with the same total.
pub fn start_streams(rtt: Duration, max: u16) -> u16 {
    let steps = (rtt.as_micros() / 12_500) as u32;
    let wanted = steps.max(1).next_power_of_two();
    u16::try_from(wanted)
        .unwrap_or(u16::MAX)
        .clamp(1, max.max(1))
}

/// Sizes the send buffers of one session's streams from its aggregate.
#[derive(Debug, Clone, Default)]
pub struct SessionSizer {
    last: Option<(Duration, u64)>,
    rates: VecDeque<(Duration, f64)>,
    min_rtt_us: Option<u32>,
    total: u64,
    limited_before: bool,
}

/// What the session did in the interval that ended at a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionSample {
    /// When, from any fixed origin.
    pub at: Duration,
    /// Bytes acknowledged over all the session's streams so far.
    pub bytes_acked: u64,
    /// The smallest minimum RTT among its streams, µs.
    pub min_rtt_us: u32,
    /// Streams sharing the buffers.
    pub streams: u16,
    /// Some stream spent the interval held back by its send buffer.
    pub buffer_limited: bool,
    /// Some stream is queueing at the bottleneck (its smoothed RTT a
    /// quarter above its minimum): the pipe is full.
    pub queueing: bool,
}

/// The aggregate rate counts as still growing from this factor over the
/// best recent interval on (BBR's test for a full pipe).
const GROWING: f64 = 1.25;

/// Growth of the shares per sample while the buffers set the pace.
const RAMP: f64 = 2.0;

/// While ramping up, the buffers together never hold more than this many
/// times the best rate seen times the RTT: the step that fills the pipe
/// overshoots [`FACTOR`] by little.
pub const RAMP_CEILING: f64 = 2.3;

impl SessionSizer {
    /// Feeds one sample; returns the send buffer each stream should have,
    /// once there is a rate and an RTT to size from: [`FACTOR`] × the
    /// session's BDP split evenly, where the rate is the best of the recent
    /// intervals. While the aggregate rate still grows by a quarter per
    /// interval (the streams are ramping up), shares only grow, and while
    /// the buffers also hold the streams back they grow by half per sample:
    /// the rate seen lags the buffers set a sample earlier, so sizing from
    /// it alone would ramp up far slower than the streams can. Half, not
    /// double, so the step that fills the pipe overshoots by at most half.
    pub fn observe(&mut self, now: SessionSample) -> Option<u64> {
        if now.min_rtt_us > 0 {
            self.min_rtt_us = Some(now.min_rtt_us);
        }
        // A step shows in the rate an interval late (the streams first fill
        // the room they were given), so growth is judged against the best
        // rate before the previous interval.
        let best_before = self.best_rate_before(self.last.map(|(t, _)| t));
        let mut rate = 0.0;
        if let Some((t0, b0)) = self.last.replace((now.at, now.bytes_acked)) {
            let secs = now.at.saturating_sub(t0).as_secs_f64();
            if secs > 0.0 && now.bytes_acked >= b0 {
                rate = (now.bytes_acked - b0) as f64 / secs;
            }
        }
        let growing = rate > 0.0 && rate >= best_before * GROWING;
        if rate > 0.0 {
            self.rates.push_back((now.at, rate));
        }
        while self
            .rates
            .front()
            .is_some_and(|&(t, _)| now.at.saturating_sub(t) > RATE_MEMORY)
        {
            self.rates.pop_front();
        }
        let rtt = f64::from(self.min_rtt_us?) / 1e6;
        let best = self.best_rate();
        if best <= 0.0 {
            return None;
        }
        let sized = (FACTOR * best * rtt) as u64;
        // The interval after a step often shows no limit yet: the streams
        // are still filling the room they were given.
        let limited = !now.queueing && (now.buffer_limited || self.limited_before);
        self.limited_before = now.buffer_limited;
        self.total = match (growing, limited) {
            (true, true) => {
                let ceiling = RAMP_CEILING * best * rtt;
                sized.max((self.total as f64 * RAMP).min(ceiling) as u64)
            }
            (true, false) => sized.max(self.total),
            (false, _) => sized,
        };
        Some(self.share(now.streams))
    }

    /// Starts the buffers at `total` bytes for all streams together
    /// (before any rate is known); they do not shrink below it while the
    /// streams ramp up.
    pub fn start_at(&mut self, total: u64) {
        self.total = self.total.max(total);
    }

    /// The buffers of all streams together, bytes, as last sized.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// One stream's share when `streams` streams split the buffers.
    pub fn share(&self, streams: u16) -> u64 {
        (self.total / u64::from(streams.max(1))).max(MIN_SHARE)
    }

    fn best_rate_before(&self, end: Option<Duration>) -> f64 {
        self.rates
            .iter()
            .filter(|&&(t, _)| end.is_none_or(|end| t < end))
            .map(|&(_, r)| r)
            .fold(0.0, f64::max)
    }

    fn best_rate(&self) -> f64 {
        self.rates.iter().map(|&(_, r)| r).fold(0.0, f64::max)
    }

    /// The smallest RTT seen, µs (0 before one).
    pub fn min_rtt_us(&self) -> u32 {
        self.min_rtt_us.unwrap_or(0)
    }

    /// The session's bandwidth-delay product as last estimated, bytes.
    pub fn bdp(&self) -> u64 {
        (self.best_rate() * f64::from(self.min_rtt_us.unwrap_or(0)) / 1e6) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(
        at_ms: u64,
        bytes_acked: u64,
        rtt_us: u32,
        streams: u16,
        limited: bool,
    ) -> SessionSample {
        SessionSample {
            at: Duration::from_millis(at_ms),
            bytes_acked,
            min_rtt_us: rtt_us,
            streams,
            buffer_limited: limited,
            queueing: false,
        }
    }

    #[test]
    fn long_paths_start_with_more_streams() {
        let ms = Duration::from_millis;
        assert_eq!(start_streams(ms(0), 8), 1);
        assert_eq!(start_streams(ms(20), 8), 1);
        assert_eq!(start_streams(ms(30), 8), 2);
        assert_eq!(start_streams(ms(50), 8), 4);
        assert_eq!(start_streams(ms(51), 8), 4);
        assert_eq!(start_streams(ms(100), 8), 8);
        assert_eq!(start_streams(ms(180), 8), 8);
        assert_eq!(start_streams(ms(180), 3), 3, "the cap holds");
        assert_eq!(start_streams(ms(180), 0), 1);
    }

    /// A path of `rate` bytes/s and `rtt` under streams whose buffers hold
    /// their flight 1.3 times over (the kernel charges overhead) and that
    /// show a new buffer one interval late. Returns the total of the
    /// shares after each 200 ms interval.
    fn ramp(rate: f64, rtt: Duration, streams: u16, intervals: usize) -> Vec<f64> {
        let mut s = SessionSizer::default();
        let rtt_us = rtt.as_micros() as u32;
        s.start_at(MIN_SHARE * u64::from(streams));
        let mut shares = vec![MIN_SHARE];
        let mut bytes = 0u64;
        let mut totals = vec![];
        s.observe(sample(0, 0, rtt_us, streams, false));
        for i in 1..=intervals {
            let lagging = shares[shares.len().saturating_sub(2)];
            let room = lagging as f64 * f64::from(streams) / 1.3 / rtt.as_secs_f64();
            let carried = room.min(rate);
            bytes += (carried * 0.2) as u64;
            let share = s
                .observe(sample(200 * i as u64, bytes, rtt_us, streams, room <= rate))
                .unwrap();
            shares.push(share);
            totals.push(share as f64 * f64::from(streams));
        }
        totals
    }

    #[test]
    fn buffers_ramp_to_twice_the_bdp_without_overshooting_much() {
        for (rate, rtt_ms, streams) in [(62.5e6, 180, 8), (125e6, 100, 8), (125e6, 50, 4)] {
            let rtt = Duration::from_millis(rtt_ms);
            let bdp = rate * rtt.as_secs_f64();
            let totals = ramp(rate, rtt, streams, 50);
            let full = totals
                .iter()
                .position(|&t| t >= 1.95 * bdp)
                .unwrap_or_else(|| panic!("never reaches twice the BDP: {totals:?}"));
            assert!(full <= 15, "ramps within 3 s: {totals:?}");
            assert!(
                totals.iter().all(|&t| t <= RAMP_CEILING * bdp + 1e3),
                "overshoots: {totals:?}"
            );
            let settled = &totals[totals.len() - 5..];
            assert!(
                settled.iter().all(|&t| (t / bdp - FACTOR).abs() < 0.05),
                "settles at twice the BDP: {totals:?}"
            );
        }
    }

    #[test]
    fn a_slower_shorter_path_shrinks_the_shares_once_its_old_rate_ages_out() {
        let mut s = SessionSizer::default();
        let mut bytes = 0u64;
        let mut share = 0;
        for i in 0..20 {
            bytes += 25_000_000; // 125 MB/s over 100 ms
            share = s
                .observe(sample(200 * i, bytes, 100_000, 4, false))
                .unwrap_or(0);
        }
        assert_eq!(share, (2.0 * 125e6 * 0.1 / 4.0) as u64);
        // Rerouted: 62.5 MB/s over 30 ms.
        for i in 20..40 {
            bytes += 12_500_000;
            share = s.observe(sample(200 * i, bytes, 30_000, 4, false)).unwrap();
        }
        assert_eq!(share, (2.0 * 62.5e6 * 0.03 / 4.0) as u64);
    }

    #[test]
    fn shares_do_not_shrink_while_the_rate_still_grows() {
        let mut s = SessionSizer::default();
        s.start_at(4 << 20);
        s.observe(sample(0, 0, 100_000, 1, false));
        // 5 MB/s, then 10: a BDP of 0.5 then 1 MB, far below the start.
        let first = s.observe(sample(200, 1_000_000, 100_000, 1, false));
        assert_eq!(first, Some(4 << 20));
        let second = s.observe(sample(400, 3_000_000, 100_000, 1, false));
        assert_eq!(second, Some(4 << 20));
        // Still twice the rate before the previous interval: growing.
        let third = s.observe(sample(600, 5_000_000, 100_000, 1, false));
        assert_eq!(third, Some(4 << 20));
        // Levelled off: sized from the rate.
        let fourth = s.observe(sample(800, 7_000_000, 100_000, 1, false));
        assert_eq!(fourth, Some(2_000_000));
    }

    #[test]
    fn queueing_stops_the_ramp() {
        let mut s = SessionSizer::default();
        s.start_at(1 << 20);
        s.observe(sample(0, 0, 100_000, 1, true));
        let mut bytes = 0;
        let mut shares = vec![];
        for i in 1..6u64 {
            bytes += 1_000_000 * i * i;
            shares.push(
                s.observe(SessionSample {
                    queueing: true,
                    ..sample(200 * i, bytes, 100_000, 1, true)
                })
                .unwrap(),
            );
        }
        // Growing, limited, but queueing: sized from the rate only.
        let rate = 25_000_000.0 / 0.2;
        assert_eq!(*shares.last().unwrap(), (FACTOR * rate * 0.1) as u64);
    }

    #[test]
    fn nothing_to_size_from_before_a_rate_or_an_rtt() {
        let mut s = SessionSizer::default();
        assert_eq!(s.observe(sample(0, 0, 50_000, 2, false)), None);
        assert_eq!(s.observe(sample(200, 0, 50_000, 2, false)), None);
        let mut s = SessionSizer::default();
        s.observe(sample(0, 0, 0, 2, false));
        assert_eq!(s.observe(sample(200, 1000, 0, 2, false)), None);
        assert_eq!(s.bdp(), 0);
    }

    proptest! {
        /// However the rate and limits go, the shares add up to at most
        /// RAMP_CEILING times the best recent rate times the RTT, or the
        /// floor (or the starting share) per stream.
        #[test]
        fn shares_stay_within_the_session_budget(
            deltas in proptest::collection::vec(0u64..50_000_000, 1..100),
            limited in proptest::collection::vec(any::<bool>(), 1..100),
            rtt_us in 1u32..500_000,
            streams in 1u16..16,
        ) {
            let mut s = SessionSizer::default();
            let mut bytes = 0;
            let mut recent: VecDeque<f64> = VecDeque::new();
            for (i, d) in deltas.iter().enumerate() {
                bytes += d;
                if i > 0 {
                    recent.push_back(*d as f64 / 0.2);
                    if recent.len() > 11 {
                        recent.pop_front();
                    }
                }
                let best = recent.iter().copied().fold(0.0, f64::max);
                let l = limited[i % limited.len()];
                if let Some(share) = s.observe(sample(200 * i as u64, bytes, rtt_us, streams, l)) {
                    let budget = RAMP_CEILING * best * f64::from(rtt_us) / 1e6;
                    prop_assert!(
                        share == MIN_SHARE || share as f64 * f64::from(streams) <= budget + f64::from(streams),
                        "share {share} budget {budget}"
                    );
                }
            }
        }
    }
}
