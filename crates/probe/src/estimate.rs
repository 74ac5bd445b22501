//! Estimators: pure functions from timestamps to numbers, so they are
//! tested with synthetic arrivals (exact dispersion, cross traffic, loss,
//! reordering) and no network.
//!
//! Capacity follows the packet-train method of pathchar/pipechar and ABwE:
//! `count` packets leave back to back, the narrowest link spaces them by
//! its serialization time, and that spacing survives to the receiver. One
//! train gives `size × (count − 1) / dispersion`, where the dispersion is
//! from the first arrival to the last. A whole train rather than pairs,
//! because timer and interrupt granularity (and netlab's coarse delivery)
//! bunch arrivals: over a train the error is two timestamps' worth, over a
//! pair it is all of it. Cross traffic that slips into a train only widens
//! it (an underestimate); trains with loss or reordering are discarded,
//! since a missing packet leaves it unknown how many were serialized.
//! Several trains are summarised by their median, and their quartiles are
//! reported as the spread.

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
}

/// Examines one train: `arrivals[seq]` is when packet `seq` arrived, in ns
/// on any clock, or `None` if it did not.
pub fn examine_train(arrivals: &[Option<u64>]) -> TrainOutcome {
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
    let span = times[times.len() - 1] - times[0];
    if span == 0 {
        return TrainOutcome::Unresolved;
    }
    TrainOutcome::Dispersion(Duration::from_nanos(span))
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
        match examine_train(arrivals) {
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
            .filter_map(|a| match examine_train(&a) {
                TrainOutcome::Dispersion(d) => Some(train_rate_bps(1500, 2, d)),
                _ => None,
            })
            .collect();
        let p = spread(&pairs).unwrap();
        assert!(p.relative_iqr() > 0.3, "pairs scatter: {p:?}");
    }

    #[test]
    fn cross_traffic_in_a_few_trains_leaves_the_median_alone() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let bps = 200.0 * MBIT;
        let mut rates = Vec::new();
        for k in 0..11 {
            let mut a = train(64, 1500, bps, 2_000, &mut rng);
            if k % 3 == 0 {
                // 20 cross-traffic packets of 1500 B queue inside the train.
                let extra = (20.0 * 1500.0 * 8.0 / bps * 1e9) as u64;
                for slot in a.iter_mut().skip(30) {
                    *slot = slot.map(|t| t + extra);
                }
            }
            rates.push(rate(&a, 1500));
        }
        let s = spread(&rates).unwrap();
        assert!(
            s.min < 0.8 * bps,
            "cross traffic widened some trains: {s:?}"
        );
        assert!(
            (s.median / bps - 1.0).abs() < 0.02,
            "median unaffected: {s:?}"
        );
    }

    #[test]
    fn lost_reordered_and_unresolved_trains_are_told_apart() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let mut a = train(10, 1500, 100.0 * MBIT, 0, &mut rng);
        a[4] = None;
        a[7] = None;
        assert_eq!(examine_train(&a), TrainOutcome::Lost { missing: 2 });
        let mut b = train(10, 1500, 100.0 * MBIT, 0, &mut rng);
        b.swap(3, 4);
        assert_eq!(examine_train(&b), TrainOutcome::Reordered);
        assert_eq!(
            examine_train(&[Some(5), Some(5), Some(5)]),
            TrainOutcome::Unresolved
        );
        assert_eq!(examine_train(&[Some(5)]), TrainOutcome::Lost { missing: 1 });
        assert_eq!(examine_train(&[]), TrainOutcome::Lost { missing: 2 });
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
