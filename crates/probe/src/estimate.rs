//! Estimators: pure functions from timestamps to numbers, so they are
//! tested with synthetic arrivals (exact dispersion, cross traffic, loss,
//! reordering) and no network.
//!
//! Capacity follows the packet-train method of pathchar/pipechar and ABwE:
//! `count` packets leave back to back, the narrowest link spaces them by
//! its serialization time, and that spacing survives to the receiver. One
//! train gives `size × (count − 1) / dispersion`.
//!
//! A whole train rather than pairs, because timer and interrupt
//! granularity (and netlab's coarse delivery) bunch arrivals. And the
//! dispersion is read from the least-squares line through *all* arrivals
//! (its slope × (count − 1)), not from the first and last alone: arrivals
//! seen late by a timer scatter around that line, so the fit averages the
//! lateness out, where the two end timestamps carry all of it. (netlab
//! shows why: its delivery thread wakes tens of µs late after a long
//! sleep, so a train's first packet is later than the rest; first-to-last
//! overestimated 500 Mbit/s by 3–5 % with 100-packet trains, the fit does
//! not.)
//!
//! Trains are discarded when packets are lost or reordered (it is then
//! unknown how many were serialized). A stall (of the sender, a host or
//! an emulator thread, or a burst of cross traffic) moves the arrivals
//! after it off the line the earlier ones are on, and may release a bunch
//! at once; the spacing of the rest still tells the bottleneck's
//! serialization time. So the line is the one most arrivals lie close
//! to (a consensus fit, MSAC-scored), and a train is discarded as
//! disturbed only when that line holds less than [`MIN_ON_LINE`] of its
//! arrivals or of its length, or accounts for less than that share of the
//! time from first to last arrival (a bunch released at once is a line
//! too, a much faster one). netlab shows why: its delivery thread wakes
//! every few tens of µs and is now and then held up for half a
//! millisecond, which spoiled 19 trains of 20 for a fit through all
//! arrivals. A little cross traffic only widens a train (an
//! underestimate). Several trains are summarised by their
//! median, and their quartiles are reported as the spread.

use std::time::Duration;

use serde::Serialize;

/// What one train showed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TrainOutcome {
    /// Usable: the dispersion of all `count` packets.
    Dispersion(Duration),
    /// Packets missing (lost, or rate-limited by the responder).
    Lost {
        /// How many of the train never arrived.
        missing: usize,
    },
    /// A packet arrived before one sent ahead of it.
    Reordered,
    /// All arrivals share one timestamp: faster than the clock can tell.
    Unresolved,
    /// The arrivals are not a line: something stalled or cut in.
    Disturbed {
        /// The largest distance of an arrival from the fitted line, as a
        /// share of the train's span.
        worst_share: f64,
    },
}

/// How far (as a share of its span) an arrival may stray from its
/// train's line and still be on it (the consensus is sought within half
/// of this). Timer lateness strays less (netlab: ≤ 65 µs of 2.4 ms,
/// about 3 %, at 500 Mbit/s with 100-packet trains).
pub const DISTURBED_SHARE: f64 = 0.05;

/// Examines one train: `arrivals[seq]` is when packet `seq` arrived, in ns
/// on any clock, or `None` if it did not. Arrivals within `max_stray` ×
/// span of the train's line are on it ([`DISTURBED_SHARE`] unless the
/// clocks are known to be coarse).
pub fn examine_train(arrivals: &[Option<u64>], max_stray: f64) -> TrainOutcome {
    let missing = arrivals.iter().filter(|a| a.is_none()).count();
    if missing > 0 || arrivals.len() < 2 {
        return TrainOutcome::Lost {
            missing: missing.max(2usize.saturating_sub(arrivals.len())),
        };
    }
    let times: Vec<u64> = arrivals.iter().flatten().copied().collect();
    if times.windows(2).any(|w| w[1] < w[0]) {
        return TrainOutcome::Reordered;
    }
    let whole_span =
        fit_line(&times, &(0..times.len()).collect::<Vec<_>>()).1 * (times.len() - 1) as f64;
    if whole_span.is_nan() || whole_span < 1.0 {
        return TrainOutcome::Unresolved;
    }
    // The line most arrivals lie on: a stall of the sender, the path or
    // the receiver moves the arrivals after it off the line that those
    // before it are on, or bunches a few, but leaves the spacing of the
    // rest alone. So the train's line is the one most of its arrivals lie
    // close to, refitted through those; it must hold most of the train,
    // over most of its length.
    let mut on_line = best_line(&times, max_stray);
    if on_line.len() < 2 {
        // No line is straight enough for so tight a limit: judge the line
        // through all arrivals (which then strays too far).
        on_line = (0..times.len()).collect();
    }
    let (intercept, slope) = fit_line(&times, &on_line);
    let span = (slope * (times.len() - 1) as f64).max(1.0);
    let residual = |i: usize| (times[i] - times[0]) as f64 - (intercept + slope * i as f64);
    let worst = (0..times.len())
        .map(|i| residual(i).abs())
        .fold(0.0, f64::max);
    let stray_kept = on_line
        .iter()
        .map(|&i| residual(i).abs())
        .fold(0.0, f64::max);
    let min_on_line = (MIN_ON_LINE * times.len() as f64).ceil() as usize;
    let length = on_line.last().unwrap_or(&0) - on_line.first().unwrap_or(&0) + 1;
    // A bunch released at once lies on a line too, a much faster one: the
    // line must account for most of the time from first to last arrival.
    let first_to_last = (times[times.len() - 1] - times[0]) as f64;
    if span <= 1.0
        || stray_kept > max_stray * span
        || on_line.len() < min_on_line
        || length < min_on_line
        || span < MIN_ON_LINE * first_to_last
    {
        return TrainOutcome::Disturbed {
            worst_share: worst / span,
        };
    }
    TrainOutcome::Dispersion(Duration::from_nanos(span as u64))
}

/// The share of a train's arrivals that must lie on its line.
pub const MIN_ON_LINE: f64 = 0.6;

/// The positions of the arrivals on the train's line: among the lines
/// through two arrivals at least a third of the train apart, the one that
/// the most arrivals lie close to (within half of `max_stray` × span),
/// the closer the better. Scoring closeness (each arrival counts
/// `1 − (distance / tolerance)²`, as MSAC does) rather than counting
/// arrivals keeps a line tilted across a step, through the edges of both
/// sides of it, from winning. Long trains try every few positions.
fn best_line(times: &[u64], max_stray: f64) -> Vec<usize> {
    let n = times.len();
    let y = |i: usize| (times[i] - times[0]) as f64;
    let stride = n.div_ceil(128);
    let min_apart = (n / 3).max(1);
    let tolerance = |slope: f64| max_stray / 2.0 * slope * (n - 1) as f64;
    let distance =
        |i: usize, slope: f64, k: usize| (y(k) - y(i) - slope * (k as f64 - i as f64)).abs();
    let mut best: (f64, usize, f64) = (0.0, 0, 0.0);
    for i in (0..n).step_by(stride) {
        for j in (i + min_apart..n).step_by(stride) {
            let slope = (y(j) - y(i)) / (j - i) as f64;
            let tol = tolerance(slope);
            if tol < 1.0 {
                continue;
            }
            let score: f64 = (0..n)
                .map(|k| distance(i, slope, k) / tol)
                .filter(|d| *d <= 1.0)
                .map(|d| 1.0 - d * d)
                .sum();
            if score > best.0 {
                best = (score, i, slope);
            }
        }
    }
    let (score, i, slope) = best;
    if score <= 0.0 {
        return Vec::new();
    }
    let tol = tolerance(slope);
    (0..n).filter(|&k| distance(i, slope, k) <= tol).collect()
}

/// Least-squares line of arrival time (ns after the first) over position,
/// through the arrivals at positions `kept`: (intercept, slope in ns per
/// packet).
fn fit_line(times: &[u64], kept: &[usize]) -> (f64, f64) {
    let n = kept.len() as f64;
    let mean_x = kept.iter().map(|&i| i as f64).sum::<f64>() / n;
    let y = |i: usize| (times[i] - times[0]) as f64;
    let mean_y = kept.iter().map(|&i| y(i)).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for &i in kept {
        let dx = i as f64 - mean_x;
        sxy += dx * (y(i) - mean_y);
        sxx += dx * dx;
    }
    let slope = sxy / sxx;
    (mean_y - slope * mean_x, slope)
}

/// The rate a train's dispersion implies: `packets − 1` packets of
/// `packet_bytes` (as the link counts them) in `dispersion`, in bits/s.
pub fn train_rate_bps(packet_bytes: usize, packets: usize, dispersion: Duration) -> f64 {
    let secs = dispersion.as_secs_f64();
    if secs <= 0.0 || packets < 2 {
        return 0.0;
    }
    (packet_bytes as f64) * 8.0 * (packets - 1) as f64 / secs
}

/// Five numbers that summarise a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// First quartile.
    pub p25: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub p75: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The interquartile range relative to the median (0 when all agree).
    pub fn relative_iqr(&self) -> f64 {
        if self.median > 0.0 {
            (self.p75 - self.p25) / self.median
        } else {
            0.0
        }
    }
}

/// Linear interpolation between closest ranks of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The five-number summary of finite `values`; `None` if there are none.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(Spread {
        min: v[0],
        p25: quantile(&v, 0.25),
        median: quantile(&v, 0.5),
        p75: quantile(&v, 0.75),
        max: v[v.len() - 1],
    })
}

/// Round-trip statistics in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RttStats {
    /// Fastest sample.
    pub min_ms: f64,
    /// Median sample.
    pub median_ms: f64,
    /// Slowest sample.
    pub max_ms: f64,
    /// Population standard deviation.
    pub stddev_ms: f64,
    /// Samples counted.
    pub samples: usize,
}

/// Statistics of RTT samples; `None` if there are none.
pub fn rtt_stats(samples: &[Duration]) -> Option<RttStats> {
    let ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let s = spread(&ms)?;
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    let var = ms.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / ms.len() as f64;
    Some(RttStats {
        min_ms: s.min,
        median_ms: s.median,
        max_ms: s.max,
        stddev_ms: var.sqrt(),
        samples: ms.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const MBIT: f64 = 1e6;

    /// Arrivals of `n` packets of `bytes` through a link of `bps`, each
    /// seen up to `jitter_ns` late (a receiver's timer or interrupt
    /// coalescing) but never before the one ahead of it: late packets bunch.
    fn train(
        n: usize,
        bytes: usize,
        bps: f64,
        jitter_ns: u64,
        rng: &mut impl Rng,
    ) -> Vec<Option<u64>> {
        let tx_ns = bytes as f64 * 8.0 / bps * 1e9;
        let mut last = 0;
        (0..n)
            .map(|i| {
                let jitter = if jitter_ns > 0 {
                    rng.gen_range(0..jitter_ns)
                } else {
                    0
                };
                last = (1_000_000 + (i as f64 * tx_ns) as u64 + jitter).max(last);
                Some(last)
            })
            .collect()
    }

    fn rate(arrivals: &[Option<u64>], bytes: usize) -> f64 {
        match examine_train(arrivals, DISTURBED_SHARE) {
            TrainOutcome::Dispersion(d) => train_rate_bps(bytes, arrivals.len(), d),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_exact_train_gives_the_link_rate() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for mbit in [10.0, 100.0, 500.0, 1000.0, 9000.0] {
            let a = train(100, 1500, mbit * MBIT, 0, &mut rng);
            let r = rate(&a, 1500);
            assert!((r / (mbit * MBIT) - 1.0).abs() < 1e-3, "{mbit}: {r}");
        }
    }

    #[test]
    fn timer_jitter_is_diluted_by_the_train_length() {
        // 50 µs of jitter on 24 µs packets (500 Mbit/s): hopeless for pairs,
        // within a few percent for the median of ten 100-packet trains.
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let rates: Vec<f64> = (0..10)
            .map(|_| rate(&train(100, 1500, 500.0 * MBIT, 50_000, &mut rng), 1500))
            .collect();
        let s = spread(&rates).unwrap();
        assert!((s.median / (500.0 * MBIT) - 1.0).abs() < 0.03, "{s:?}");
        // Pairs that arrived in one bunch tell nothing at all.
        let pairs: Vec<f64> = (0..20)
            .map(|_| train(2, 1500, 500.0 * MBIT, 50_000, &mut rng))
            .filter_map(|a| match examine_train(&a, DISTURBED_SHARE) {
                TrainOutcome::Dispersion(d) => Some(train_rate_bps(1500, 2, d)),
                _ => None,
            })
            .collect();
        let p = spread(&pairs).unwrap();
        assert!(p.relative_iqr() > 0.3, "pairs scatter: {p:?}");
    }

    #[test]
    fn a_late_first_packet_does_not_compress_the_train() {
        // netlab-like delivery: the first packet 90 µs late after a long
        // sleep, the writer catching up back to back (8 µs a write), then
        // up to 50 µs late at each later wake-up.
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let tx_ns = 24_000u64; // 1500 B at 500 Mbit/s
        let mut free = 0;
        let arrivals: Vec<Option<u64>> = (0..100u64)
            .map(|i| {
                let due = i * tx_ns;
                let late = if i == 0 {
                    90_000
                } else {
                    rng.gen_range(0..50_000)
                };
                free = (due + late).max(free + 8_000);
                Some(free)
            })
            .collect();
        let r = rate(&arrivals, 1500);
        assert!((r / (500.0 * MBIT) - 1.0).abs() < 0.015, "{r}");
        let first_to_last = train_rate_bps(
            1500,
            100,
            Duration::from_nanos(arrivals[99].unwrap() - arrivals[0].unwrap()),
        );
        assert!(
            first_to_last > 500.0 * MBIT * 1.01,
            "the ends alone: {first_to_last}"
        );
    }

    /// Delays every arrival from `at` on by `extra_ns`: a burst of cross
    /// traffic queued there, or a stalled receiver.
    fn step(a: &mut [Option<u64>], at: usize, extra_ns: u64) {
        for slot in a.iter_mut().skip(at) {
            *slot = slot.map(|t| t + extra_ns);
        }
    }

    #[test]
    fn cross_traffic_in_a_few_trains_leaves_the_median_alone() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let bps = 200.0 * MBIT;
        let packet_ns = (1500.0 * 8.0 / bps * 1e9) as u64;
        let mut rates = Vec::new();
        for k in 0..11 {
            let mut a = train(64, 1500, bps, 2_000, &mut rng);
            if k % 3 == 0 {
                // Two cross-traffic packets: a small step, kept but slower.
                step(&mut a, 30, 2 * packet_ns);
            }
            rates.push(rate(&a, 1500));
        }
        let s = spread(&rates).unwrap();
        assert!(
            s.min < 0.97 * bps,
            "cross traffic widened some trains: {s:?}"
        );
        assert!(
            (s.median / bps - 1.0).abs() < 0.02,
            "median unaffected: {s:?}"
        );
    }

    #[test]
    fn a_stall_or_a_burst_of_cross_traffic_disturbs_the_train() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let bps = 500.0 * MBIT;
        // Twenty packets' worth of cross traffic (or a 480 µs stall) in
        // the middle: the arrivals are a step, not a line.
        let mut a = train(100, 1500, bps, 0, &mut rng);
        step(&mut a, 50, 480_000);
        assert!(matches!(
            examine_train(&a, DISTURBED_SHARE),
            TrainOutcome::Disturbed { worst_share } if worst_share > DISTURBED_SHARE
        ));
        // An emulator or host that sat on the first 80 packets and then
        // delivered them in one go: compressed, and refused.
        let mut b = train(100, 1500, bps, 0, &mut rng);
        let release = b[80].unwrap();
        for slot in b.iter_mut().take(80) {
            *slot = Some(release);
        }
        assert!(matches!(
            examine_train(&b, DISTURBED_SHARE),
            TrainOutcome::Disturbed { .. }
        ));
    }

    #[test]
    fn a_stall_that_the_train_catches_up_on_is_set_aside() {
        // A train of 100 packets through netlab at 500 Mbit/s, as the
        // responder stamped it: delivered in pairs (the emulator wakes
        // every ~45 µs), and a 520 µs stall after packet 14 that the
        // next ten packets make up back to back. Every arrival is late or
        // on time, none early, so the stall is set aside, not the train.
        let stamped: [u64; 100] = [
            0, 23286, 27744, 35760, 78626, 80784, 121908, 148590, 150929, 194966, 224287, 226544,
            272332, 275702, 322109, 841817, 855830, 857140, 858383, 859462, 860666, 861676, 862956,
            863910, 864893, 866232, 892295, 893882, 941149, 942455, 996828, 1000155, 1041981,
            1043495, 1087726, 1089355, 1127246, 1141019, 1182024, 1196841, 1232879, 1250009,
            1276999, 1278329, 1350401, 1362139, 1363927, 1401401, 1403436, 1448738, 1450292,
            1499265, 1501187, 1540288, 1541641, 1595812, 1597591, 1658706, 1670148, 1671705,
            1710962, 1722990, 1759013, 1760791, 1812476, 1814069, 1857685, 1859098, 1908055,
            1909664, 1947239, 1952523, 2002584, 2015434, 2039589, 2052427, 2121120, 2135115,
            2136435, 2160682, 2190014, 2204298, 2236962, 2237999, 2283106, 2300524, 2364622,
            2376988, 2378290, 2402890, 2404744, 2468545, 2470044, 2501583, 2503702, 2544106,
            2573565, 2574792, 2638620, 2640102,
        ];
        let a: Vec<Option<u64>> = stamped.iter().map(|&t| Some(t)).collect();
        let r = rate(&a, 1500);
        assert!((r / (500.0 * MBIT) - 1.0).abs() < 0.03, "{r}");
        // With nothing set aside, the stall throws the line off by more
        // than the stray limit: the train used to be discarded.
        let all: Vec<usize> = (0..100).collect();
        let (intercept, slope) = fit_line(&stamped, &all);
        let worst = (0..100)
            .map(|i| (stamped[i] as f64 - intercept - slope * i as f64).abs())
            .fold(0.0, f64::max);
        assert!(worst > DISTURBED_SHARE * slope * 99.0, "{worst}");
    }

    #[test]
    fn a_stall_near_the_end_is_set_aside_and_a_bunched_train_refused() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let bps = 500.0 * MBIT;
        // The last fifth held back: the four fifths before it still say
        // how fast the link was.
        let mut a = train(100, 1500, bps, 0, &mut rng);
        step(&mut a, 80, 300_000);
        let r = rate(&a, 1500);
        assert!((r / bps - 1.0).abs() < 0.01, "{r}");
        // The last 45 % held back: no line holds most of the train.
        let mut c = train(100, 1500, bps, 0, &mut rng);
        step(&mut c, 55, 300_000);
        assert!(matches!(
            examine_train(&c, DISTURBED_SHARE),
            TrainOutcome::Disturbed { .. }
        ));
        // Held back from the first packet on, all but the last few in a
        // bunch: more late than on the line.
        let mut b = train(100, 1500, bps, 0, &mut rng);
        let release = b[90].unwrap();
        for (i, slot) in b.iter_mut().enumerate().take(90).skip(1) {
            *slot = Some(release - (90 - i as u64) * 1_000);
        }
        assert!(matches!(
            examine_train(&b, DISTURBED_SHARE),
            TrainOutcome::Disturbed { .. }
        ));
    }

    #[test]
    fn lost_reordered_and_unresolved_trains_are_told_apart() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let mut a = train(10, 1500, 100.0 * MBIT, 0, &mut rng);
        a[4] = None;
        a[7] = None;
        assert_eq!(
            examine_train(&a, DISTURBED_SHARE),
            TrainOutcome::Lost { missing: 2 }
        );
        let mut b = train(10, 1500, 100.0 * MBIT, 0, &mut rng);
        b.swap(3, 4);
        assert_eq!(examine_train(&b, DISTURBED_SHARE), TrainOutcome::Reordered);
        assert_eq!(
            examine_train(&[Some(5), Some(5), Some(5)], DISTURBED_SHARE),
            TrainOutcome::Unresolved
        );
        assert_eq!(
            examine_train(&[Some(5)], DISTURBED_SHARE),
            TrainOutcome::Lost { missing: 1 }
        );
        assert_eq!(
            examine_train(&[], DISTURBED_SHARE),
            TrainOutcome::Lost { missing: 2 }
        );
    }

    #[test]
    fn rates_of_degenerate_input_are_zero_not_infinite() {
        assert_eq!(train_rate_bps(1500, 10, Duration::ZERO), 0.0);
        assert_eq!(train_rate_bps(1500, 1, Duration::from_millis(1)), 0.0);
    }

    #[test]
    fn spread_uses_interpolated_quartiles_and_skips_non_finite_values() {
        let s = spread(&[4.0, 1.0, f64::NAN, 3.0, 2.0, 5.0, f64::INFINITY]).unwrap();
        assert_eq!(
            (s.min, s.p25, s.median, s.p75, s.max),
            (1.0, 2.0, 3.0, 4.0, 5.0)
        );
        assert_eq!(s.relative_iqr(), 2.0 / 3.0);
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[f64::NAN]), None);
        let one = spread(&[7.0]).unwrap();
        assert_eq!((one.p25, one.median, one.p75), (7.0, 7.0, 7.0));
    }

    #[test]
    fn rtt_statistics_match_hand_computation() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        let s = rtt_stats(&ms(&[180, 182, 181, 185])).unwrap();
        assert_eq!((s.min_ms, s.max_ms, s.samples), (180.0, 185.0, 4));
        assert_eq!(s.median_ms, 181.5);
        // mean 182, deviations -2 0 -1 3: variance 14/4.
        assert!((s.stddev_ms - 3.5f64.sqrt()).abs() < 1e-9);
        assert_eq!(rtt_stats(&[]), None);
    }
}
