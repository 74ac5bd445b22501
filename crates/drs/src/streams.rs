//! Stream-count control: how many parallel TCP streams a transfer should
//! use, decided from what the streams achieve together. Pure; the engine
//! opens and retires the streams.
//!
//! Parallel streams help when one stream cannot fill the path by itself:
//! its buffer is capped (no privilege to go past `wmem_max`), the peer's
//! window is the limit, each stream is CPU-bound, or loss keeps a
//! loss-based congestion control far below the path's rate. Only the first
//! two show in `TCP_INFO`; the others show only by trying. So the
//! controller starts small and, once every period (at least a second, or
//! four RTTs on long paths; [`LAN_PERIOD`] on a LAN, where new streams
//! reach their rate within milliseconds):
//! - adds streams (doubling, up to the cap) at once when streams are
//!   window- or buffer-limited with no room left to grow their buffers;
//! - otherwise, when something per stream may hold the rate down (loss
//!   under a loss-based congestion control, idle sockets, or a peer that
//!   reads more slowly than data arrives though its window is ample), waits until
//!   the aggregate rate has stopped growing and no buffer is still being
//!   grown, then probes by doubling. A clean path under a rate-based
//!   congestion control (BBR) is not probed: a second flow there only
//!   doubles the queue and costs losses;
//! - after an addition, lets the new streams ramp up for a period and
//!   compares the next period's aggregate rate with the rate before: at
//!   least [`GAIN`] better and it goes on, otherwise it retires the streams
//!   it added and stops for good.
//!
//! On a LAN nothing needs a period to ramp up: the rate counts as levelled
//! at the end of every period (the first included), and an addition is
//! judged over the period that starts one sample after it (new streams
//! connect within milliseconds), so a copy of a second and a half sees its
//! probe made (0.6 s) and judged (1.2 s).

use std::time::Duration;

use serde::Serialize;

/// Relative gain in aggregate rate that justifies the streams added.
pub const GAIN: f64 = 0.10;

/// The aggregate rate counts as still growing above this relative change.
const STILL_GROWING: f64 = 0.05;

/// Paths whose largest smoothed RTT is below this are LANs.
pub const LAN_RTT: Duration = Duration::from_millis(2);

/// The controller's period on a LAN: two samples. A copy of a second and
/// a half there then still sees an addition judged; with the second of
/// long paths it ended before.
pub const LAN_PERIOD: Duration = Duration::from_millis(400);

/// What the streams of a transfer did up to a moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Time since the transfer started.
    pub at: Duration,
    /// Bytes acknowledged, summed over all streams so far.
    pub bytes: u64,
    /// Some stream is window- or buffer-limited and cannot grow its buffer.
    pub limited_at_cap: bool,
    /// Some stream's buffer is still being grown.
    pub growing_buffers: bool,
    /// Something per stream may be holding the rate down that only more
    /// streams would show: a loss-based congestion control losing packets,
    /// sockets left idle (a stream's CPU share), or a peer reading each
    /// stream too slowly (its share).
    pub worth_probing: bool,
    /// Largest smoothed RTT among the streams.
    pub srtt: Duration,
}

/// A change the controller wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamChange {
    /// Open streams until there are this many.
    Grow(u16),
    /// Retire streams until there are this many.
    Retire(u16),
}

/// One entry of the stream count's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StreamStep {
    /// Milliseconds since the start.
    pub at_ms: u64,
    /// Streams in use from then on.
    pub streams: u16,
    /// Why.
    pub reason: StepReason,
}

/// Why the stream count changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepReason {
    /// The starting count.
    Start,
    /// Streams were limited by a window or buffer at its cap.
    Limited,
    /// The aggregate rate had levelled off: a probe.
    Probe,
    /// The previous addition paid off; trying more.
    Paid,
    /// The last addition did not pay off; those streams were retired.
    NoGain,
    /// One stream on each other path to the peer, from the start.
    OtherPaths,
    /// The starting count, where an earlier transfer over the path
    /// settled (its next addition did not pay): no probes.
    Settled,
}

impl StepReason {
    /// Why, for people.
    pub fn words(self) -> &'static str {
        match self {
            StepReason::Start => "to start with",
            StepReason::Limited => "windows or buffers held the streams back",
            StepReason::Probe => "the rate had levelled off: trying more",
            StepReason::Paid => "the last streams added raised the rate",
            StepReason::NoGain => "the last streams added did not raise the rate",
            StepReason::OtherPaths => "one on each other path",
            StepReason::Settled => "where the last transfer over the path settled: no probes",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Watching the rate; `previous` is the last period's.
    Ramp { previous: Option<f64> },
    /// Streams were added; `periods` of settling so far.
    Settle { base: f64, before: u16, periods: u8 },
    /// No more changes.
    Done,
}

/// Decides the number of streams of one transfer.
#[derive(Debug, Clone)]
pub struct StreamController {
    max: u16,
    current: u16,
    state: State,
    period_start: Option<(Duration, u64)>,
    history: Vec<StreamStep>,
    /// Probes are made (not when the count is settled).
    probes: bool,
}

impl StreamController {
    /// A controller starting at `start` streams, never above `max`.
    pub fn new(start: u16, max: u16) -> StreamController {
        let max = max.max(1);
        let start = start.clamp(1, max);
        StreamController {
            max,
            current: start,
            state: if start == max {
                State::Done
            } else {
                State::Ramp { previous: None }
            },
            period_start: None,
            history: vec![StreamStep {
                at_ms: 0,
                streams: start,
                reason: StepReason::Start,
            }],
            probes: true,
        }
    }

    /// A controller starting at the count an earlier transfer over the
    /// path settled on: its next addition did not pay, so this one makes
    /// no probes and adds streams only when windows or buffers hold them
    /// back (the path may have changed that much).
    pub fn settled(start: u16, max: u16) -> StreamController {
        let mut c = StreamController::new(start, max);
        c.probes = false;
        c.history[0].reason = StepReason::Settled;
        c
    }

    /// Adds `paths` streams at once, one for each other path to the peer,
    /// within the maximum; the rate is then watched as from the start.
    pub fn open_other_paths(&mut self, at: Duration, paths: u16) -> Option<StreamChange> {
        let before = self.current;
        self.current = before.saturating_add(paths).min(self.max);
        if self.current == before {
            return None;
        }
        if self.current == self.max {
            self.state = State::Done;
        }
        self.history.push(StreamStep {
            at_ms: at.as_millis() as u64,
            streams: self.current,
            reason: StepReason::OtherPaths,
        });
        Some(StreamChange::Grow(self.current))
    }

    /// Streams wanted now.
    pub fn current(&self) -> u16 {
        self.current
    }

    /// Streams the measurements bore out: the current count, or while an
    /// addition is still to be judged, the count before it. A transfer
    /// that ends before the judgment has not shown the addition paid.
    pub fn proven(&self) -> u16 {
        match self.state {
            State::Settle { before, .. } => before,
            _ => self.current,
        }
    }

    /// How the count changed over time.
    pub fn history(&self) -> &[StreamStep] {
        &self.history
    }

    /// Feeds one observation; returns a change when one is due.
    pub fn observe(&mut self, obs: Observation) -> Option<StreamChange> {
        if self.state == State::Done {
            return None;
        }
        let (t0, b0) = *self.period_start.get_or_insert((obs.at, obs.bytes));
        // No stream sampled yet (or no TCP_INFO) is not a LAN.
        let lan = !obs.srtt.is_zero() && obs.srtt < LAN_RTT;
        let period = if lan {
            LAN_PERIOD
        } else {
            Duration::from_secs(1).max(obs.srtt * 4)
        };
        let elapsed = obs.at.saturating_sub(t0);
        if elapsed < period {
            return None;
        }
        let rate = obs.bytes.saturating_sub(b0) as f64 / elapsed.as_secs_f64();
        self.period_start = Some((obs.at, obs.bytes));
        match self.state {
            State::Ramp { previous } => {
                if obs.limited_at_cap {
                    return self.grow(obs.at, rate, StepReason::Limited, lan);
                }
                // On a LAN a stream reaches its rate within milliseconds:
                // any period, the first included, shows where it levels off.
                let levelled = lan || previous.is_some_and(|p| rate < p * (1.0 + STILL_GROWING));
                if levelled && !obs.growing_buffers && obs.worth_probing && self.probes {
                    return self.grow(obs.at, rate, StepReason::Probe, lan);
                }
                self.state = State::Ramp {
                    previous: Some(rate),
                };
                None
            }
            State::Settle {
                base,
                before,
                periods,
            } => {
                if periods == 0 && !lan {
                    // The new streams were still starting; judge the next
                    // period. On a LAN they started within the sample
                    // this period left out.
                    self.state = State::Settle {
                        base,
                        before,
                        periods: 1,
                    };
                    return None;
                }
                if rate >= base * (1.0 + GAIN) {
                    if self.current == self.max {
                        self.state = State::Done;
                        return None;
                    }
                    let probe = self.probes && !obs.growing_buffers && obs.worth_probing;
                    if obs.limited_at_cap || probe {
                        return self.grow(obs.at, rate, StepReason::Paid, lan);
                    }
                    self.state = State::Ramp {
                        previous: Some(rate),
                    };
                    return None;
                }
                self.state = State::Done;
                self.current = before;
                self.history.push(StreamStep {
                    at_ms: obs.at.as_millis() as u64,
                    streams: before,
                    reason: StepReason::NoGain,
                });
                Some(StreamChange::Retire(before))
            }
            State::Done => None,
        }
    }

    fn grow(
        &mut self,
        at: Duration,
        rate: f64,
        reason: StepReason,
        lan: bool,
    ) -> Option<StreamChange> {
        if lan {
            // The period that judges the new streams starts with the next
            // sample, after the one in which they connected.
            self.period_start = None;
        }
        let before = self.current;
        self.current = before.saturating_mul(2).min(self.max);
        self.state = State::Settle {
            base: rate,
            before,
            periods: 0,
        };
        self.history.push(StreamStep {
            at_ms: at.as_millis() as u64,
            streams: self.current,
            reason,
        });
        Some(StreamChange::Grow(self.current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Drives a controller with a model of the path: the aggregate rate for
    /// `n` streams is `rate(n)`; observations every 200 ms for `secs`.
    fn drive(
        c: StreamController,
        secs: u64,
        rate: impl Fn(u16) -> f64,
        limited: impl Fn(u16) -> bool,
        worth_probing: bool,
    ) -> StreamController {
        drive_over(
            c,
            Duration::from_millis(100),
            secs,
            rate,
            limited,
            worth_probing,
        )
    }

    /// As [`drive`], over a path of smoothed RTT `srtt`.
    fn drive_over(
        mut c: StreamController,
        srtt: Duration,
        secs: u64,
        rate: impl Fn(u16) -> f64,
        limited: impl Fn(u16) -> bool,
        worth_probing: bool,
    ) -> StreamController {
        let mut bytes = 0.0;
        for tick in 1..=secs * 5 {
            bytes += rate(c.current()) * 0.2;
            let n = c.current();
            c.observe(Observation {
                at: Duration::from_millis(tick * 200),
                bytes: bytes as u64,
                limited_at_cap: limited(n),
                growing_buffers: false,
                worth_probing,
                srtt,
            });
        }
        c
    }

    #[test]
    fn on_a_lan_a_short_copy_sees_its_additions_judged() {
        // Loopback on two cores, the receiver the limit: a second stream
        // shares its work (+35 %), a third and fourth do not pay.
        let rate = |n: u16| [0.0, 660e6, 900e6, 910e6, 920e6][usize::from(n.min(4))];
        let lan = drive_over(
            StreamController::new(1, 8),
            Duration::from_micros(80),
            3,
            rate,
            |_| false,
            true,
        );
        let steps: Vec<_> = lan
            .history()
            .iter()
            .map(|s| (s.streams, s.reason))
            .collect();
        assert_eq!(
            steps,
            [
                (1, StepReason::Start),
                (2, StepReason::Probe),
                (4, StepReason::Paid),
                (2, StepReason::NoGain)
            ]
        );
        assert_eq!((lan.current(), lan.proven()), (2, 2));
        // A copy of a second and a half (≈ 2 GiB at loopback's rate on two
        // cores) sees the probe made and judged.
        let paid = lan.history()[2].at_ms;
        assert!(paid <= 1_200, "judged at {paid} ms: {:?}", lan.history());
        // The same three seconds at 100 ms: the probe is not judged yet,
        // and what the copy bore out is the one stream it started with.
        let wan = drive(StreamController::new(1, 8), 3, rate, |_| false, true);
        assert_eq!((wan.current(), wan.proven()), (2, 1), "{:?}", wan.history());
        // Streams not sampled yet (a smoothed RTT of zero) are no LAN.
        let unsampled = drive_over(
            StreamController::new(1, 8),
            Duration::ZERO,
            3,
            rate,
            |_| false,
            true,
        );
        assert_eq!(unsampled.history(), wan.history());
    }

    /// True when `history` ends where its transfer settled: the last
    /// addition did not pay, or it started settled and stayed.
    fn settled_by(history: &[StreamStep]) -> bool {
        history
            .last()
            .is_some_and(|s| matches!(s.reason, StepReason::NoGain | StepReason::Settled))
    }

    #[test]
    fn a_settled_count_is_not_probed_but_still_grows_when_capped() {
        let rate = |n: u16| [0.0, 660e6, 900e6, 910e6, 920e6][usize::from(n.min(4))];
        let lan = Duration::from_micros(80);
        let first = drive_over(StreamController::new(2, 8), lan, 3, rate, |_| false, true);
        assert!(settled_by(first.history()), "{:?}", first.history());
        let next = drive_over(
            StreamController::settled(2, 8),
            lan,
            3,
            rate,
            |_| false,
            true,
        );
        assert_eq!(next.history().len(), 1, "{:?}", next.history());
        assert_eq!(next.current(), 2);
        assert!(settled_by(next.history()));
        // Windows at their cap still double the streams.
        let capped = drive_over(
            StreamController::settled(2, 8),
            lan,
            3,
            |n| f64::from(n) * 300e6,
            |n| n < 4,
            true,
        );
        assert_eq!(capped.current(), 4, "{:?}", capped.history());
        assert!(!settled_by(capped.history()));
        // A transfer whose probe paid, or was not judged, has not settled.
        let unjudged = drive(StreamController::new(1, 8), 3, rate, |_| false, true);
        assert!(!settled_by(unjudged.history()));
    }

    #[test]
    fn capped_streams_double_until_the_path_is_full() {
        // Each stream capped at 4 MiB over 100 ms: ~42 MB/s; the path 125 MB/s.
        let per = 4.0 * 1048576.0 / 0.1;
        let c = drive(
            StreamController::new(1, 8),
            20,
            |n| (f64::from(n) * per).min(125e6),
            |n| f64::from(n) * per < 125e6,
            false,
        );
        assert_eq!(c.current(), 4, "{:?}", c.history());
        let reasons: Vec<_> = c.history().iter().map(|s| s.reason).collect();
        assert_eq!(
            reasons[..3],
            [StepReason::Start, StepReason::Limited, StepReason::Paid]
        );
    }

    #[test]
    fn other_paths_get_a_stream_at_once_and_keep_it_when_an_addition_is_retired() {
        let mut c = StreamController::new(4, 24);
        assert_eq!(
            c.open_other_paths(Duration::ZERO, 2),
            Some(StreamChange::Grow(6))
        );
        // The paths together are full at six streams: the probe to twelve
        // does not pay and is undone, back to six, not four.
        let c = drive(c, 20, |n| f64::from(n.min(6)) * 20e6, |_| false, true);
        assert_eq!(c.current(), 6, "{:?}", c.history());
        let reasons: Vec<_> = c.history().iter().map(|s| s.reason).collect();
        assert_eq!(reasons[..2], [StepReason::Start, StepReason::OtherPaths]);
        assert_eq!(reasons.last(), Some(&StepReason::NoGain));
        let mut full = StreamController::new(7, 8);
        assert_eq!(
            full.open_other_paths(Duration::ZERO, 3),
            Some(StreamChange::Grow(8)),
            "within the maximum"
        );
        assert_eq!(full.open_other_paths(Duration::ZERO, 1), None);
    }

    #[test]
    fn a_stream_that_fills_the_path_alone_stays_alone_after_one_probe() {
        let c = drive(StreamController::new(1, 8), 20, |_| 125e6, |_| false, true);
        assert_eq!(c.current(), 1, "{:?}", c.history());
        let reasons: Vec<_> = c.history().iter().map(|s| s.reason).collect();
        assert_eq!(
            reasons,
            [StepReason::Start, StepReason::Probe, StepReason::NoGain]
        );
    }

    #[test]
    fn loss_limited_streams_grow_while_it_pays() {
        // Each stream gets 20 MB/s through loss, the path holds 100 MB/s.
        let c = drive(
            StreamController::new(1, 16),
            30,
            |n| (f64::from(n) * 20e6).min(100e6),
            |_| false,
            true,
        );
        assert_eq!(c.current(), 8, "{:?}", c.history());
    }

    #[test]
    fn the_cap_holds_and_a_fixed_count_never_changes() {
        let c = drive(
            StreamController::new(1, 2),
            20,
            |n| f64::from(n) * 1e6,
            |_| true,
            true,
        );
        assert_eq!(c.current(), 2);
        let c = drive(
            StreamController::new(4, 4),
            20,
            |n| f64::from(n) * 1e6,
            |_| true,
            true,
        );
        assert_eq!(c.current(), 4);
        assert_eq!(c.history().len(), 1);
    }

    proptest! {
        #[test]
        fn never_above_the_cap_nor_below_one(
            start in 0u16..40, max in 0u16..40,
            rates in proptest::collection::vec(0u64..1_000_000_000, 1..200),
            limited in proptest::collection::vec(any::<bool>(), 1..200),
        ) {
            let mut c = StreamController::new(start, max);
            let mut bytes = 0u64;
            for (i, r) in rates.iter().enumerate() {
                bytes += r / 5;
                let change = c.observe(Observation {
                    at: Duration::from_millis(200 * (i as u64 + 1)),
                    bytes,
                    limited_at_cap: limited[i % limited.len()],
                    growing_buffers: i % 3 == 0,
                    worth_probing: i % 2 == 0,
                    srtt: Duration::from_millis(50),
                });
                let n = match change {
                    Some(StreamChange::Grow(n) | StreamChange::Retire(n)) => n,
                    None => c.current(),
                };
                prop_assert!(n >= 1 && n <= max.max(1));
                prop_assert_eq!(n, c.current());
            }
        }
    }
}
