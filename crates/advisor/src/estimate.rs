//! Estimators over a series of measurements of one kind on one path. Pure.
//!
//! Following the Enable service: the value reported is a **trimmed mean**
//! of the last N results (the top and bottom 10% dropped, N = 10), so one
//! test that ran during a network hiccup does not move the advice; and a
//! **change detector** notices a lasting shift (a new route, an upgraded
//! link) faster than the window would: when three successive values lie
//! more than 2.5 standard deviations from the mean, the older values are
//! discarded and the estimate restarts from those three. An **EWMA** of the
//! same values is given for display.
//!
//! One choice differs from a literal reading of Enable's text: the mean and
//! standard deviation a candidate run is compared with are those of the
//! values *before* the run. Computed over all N values including the three
//! candidates, no run of three in ten can ever lie 2.5 σ out (the three
//! pull the mean and widen σ: at most √(7/3) ≈ 1.53 σ), so the detector
//! would never fire.

use serde::{Deserialize, Serialize};

/// Settings of the estimators.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EstimatorConfig {
    /// How many of the most recent values the trimmed mean uses (N).
    pub window: usize,
    /// Share of values dropped at each end before averaging.
    pub trim: f64,
    /// Distance from the mean, in standard deviations, that counts as out.
    pub change_sigmas: f64,
    /// Successive values out on the same side that mean the path changed.
    pub change_run: usize,
    /// Fewest earlier values needed before a change can be detected.
    pub change_min_reference: usize,
    /// Weight of the newest value in the EWMA.
    pub ewma_alpha: f64,
}

impl Default for EstimatorConfig {
    fn default() -> EstimatorConfig {
        EstimatorConfig {
            window: 10,
            trim: 0.10,
            change_sigmas: 2.5,
            change_run: 3,
            change_min_reference: 3,
            ewma_alpha: 0.3,
        }
    }
}

/// The estimate of one quantity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The trimmed mean: the number advice rests on.
    pub value: f64,
    /// Values the trimmed mean was taken over (before trimming).
    pub samples: usize,
    /// Values dropped at the two ends.
    pub trimmed: usize,
    /// Plain mean of the same values.
    pub mean: f64,
    /// Their sample standard deviation (0 for one value).
    pub stddev: f64,
    /// Exponentially weighted moving average since the last change, for display.
    pub ewma: f64,
    /// Older values were discarded because the path changed.
    pub change_detected: bool,
}

/// Mean and sample standard deviation; `None` for no values.
pub fn mean_stddev(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() == 1 {
        return Some((mean, 0.0));
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, var.sqrt()))
}

/// Values dropped at each end for `n` values: `floor(n × trim)`, never so
/// many that nothing is left.
pub fn trim_count(n: usize, trim: f64) -> usize {
    let k = (n as f64 * trim.clamp(0.0, 0.5)).floor() as usize;
    k.min(n.saturating_sub(1) / 2)
}

/// Mean after dropping `floor(n × trim)` values at each end.
pub fn trimmed_mean(values: &[f64], trim: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let k = trim_count(sorted.len(), trim);
    let kept = &sorted[k..sorted.len() - k];
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

/// Exponentially weighted moving average, oldest value first.
pub fn ewma(values: &[f64], alpha: f64) -> Option<f64> {
    let (first, rest) = values.split_first()?;
    Some(
        rest.iter()
            .fold(*first, |acc, v| alpha * v + (1.0 - alpha) * acc),
    )
}

/// Where the current regime of a series (oldest first) starts: the index
/// after which no change was detected, 0 when none ever was. Replays the
/// detector over the whole series, so the answer depends only on the data.
pub fn regime_start(values: &[f64], cfg: &EstimatorConfig) -> usize {
    let run = cfg.change_run.max(1);
    let mut start = 0;
    for end in 0..values.len() {
        // The candidate run is values[end + 1 - run ..= end]; the reference
        // is up to `window - run` values before it, within the regime.
        let Some(run_start) = (end + 1).checked_sub(run) else {
            continue;
        };
        if run_start < start {
            continue;
        }
        let reference_from = run_start
            .saturating_sub(cfg.window.saturating_sub(run))
            .max(start);
        let reference = &values[reference_from..run_start];
        if reference.len() < cfg.change_min_reference.max(2) {
            continue;
        }
        let (mean, sd) = mean_stddev(reference).expect("not empty");
        // A floor under σ so that rounding noise in a constant series is
        // not mistaken for a change.
        let limit = (cfg.change_sigmas * sd).max(1e-9 * mean.abs());
        let candidates = &values[run_start..=end];
        let above = candidates.iter().all(|v| v - mean > limit);
        let below = candidates.iter().all(|v| mean - v > limit);
        if above || below {
            start = run_start;
        }
    }
    start
}

/// The estimate over a series, oldest value first; `None` when empty.
pub fn estimate(values: &[f64], cfg: &EstimatorConfig) -> Option<Estimate> {
    let start = regime_start(values, cfg);
    let regime = &values[start..];
    let recent = &regime[regime.len().saturating_sub(cfg.window.max(1))..];
    let value = trimmed_mean(recent, cfg.trim)?;
    let (mean, stddev) = mean_stddev(recent)?;
    Some(Estimate {
        value,
        samples: recent.len(),
        trimmed: 2 * trim_count(recent.len(), cfg.trim),
        mean,
        stddev,
        ewma: ewma(regime, cfg.ewma_alpha)?,
        change_detected: start > 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg() -> EstimatorConfig {
        EstimatorConfig::default()
    }

    #[test]
    fn trimmed_mean_drops_one_at_each_end_of_ten() {
        let v = [1000.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 0.0];
        assert_eq!(trimmed_mean(&v, 0.1), Some(10.0));
        assert_eq!(trim_count(10, 0.1), 1);
        assert_eq!(trim_count(9, 0.1), 0);
        assert_eq!(trim_count(20, 0.1), 2);
        assert_eq!(trimmed_mean(&[], 0.1), None);
        assert_eq!(trimmed_mean(&[3.0], 0.1), Some(3.0));
    }

    #[test]
    fn ewma_weights_the_newest() {
        assert_eq!(ewma(&[10.0], 0.3), Some(10.0));
        let e = ewma(&[10.0, 20.0], 0.3).unwrap();
        assert!((e - 13.0).abs() < 1e-12);
        assert_eq!(ewma(&[], 0.3), None);
    }

    #[test]
    fn a_level_shift_of_three_values_restarts_the_estimate() {
        let mut v = vec![100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0];
        let before = estimate(&v, &cfg()).unwrap();
        assert!(!before.change_detected);
        v.extend([180.0, 181.0]);
        let two = estimate(&v, &cfg()).unwrap();
        assert!(!two.change_detected, "two values are not yet a change");
        v.push(179.0);
        let three = estimate(&v, &cfg()).unwrap();
        assert!(three.change_detected);
        assert_eq!(three.samples, 3);
        assert!((three.value - 180.0).abs() < 1e-9);
        // Later values join the new regime, which is not reset again.
        v.extend([180.5, 179.5]);
        let later = estimate(&v, &cfg()).unwrap();
        assert_eq!(later.samples, 5);
        assert!(later.change_detected);
    }

    #[test]
    fn outliers_on_both_sides_are_not_a_change() {
        let v = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 300.0, 10.0, 300.0];
        assert_eq!(regime_start(&v, &cfg()), 0);
    }

    #[test]
    fn a_constant_series_never_changes() {
        let v = [5.0; 30];
        let e = estimate(&v, &cfg()).unwrap();
        assert!(!e.change_detected);
        assert_eq!(e.samples, 10);
        assert_eq!(e.value, 5.0);
        assert_eq!(e.stddev, 0.0);
    }

    proptest! {
        #[test]
        fn trimmed_mean_lies_within_the_values(v in prop::collection::vec(-1e9f64..1e9, 1..40)) {
            let t = trimmed_mean(&v, 0.1).unwrap();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(t >= lo - 1e-6 && t <= hi + 1e-6);
        }

        #[test]
        fn trimmed_mean_ignores_order(mut v in prop::collection::vec(0f64..1e6, 1..30), seed in any::<u64>()) {
            let a = trimmed_mean(&v, 0.1).unwrap();
            let n = v.len();
            v.rotate_left((seed as usize) % n);
            v.reverse();
            let b = trimmed_mean(&v, 0.1).unwrap();
            prop_assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0));
        }

        #[test]
        fn one_wild_value_in_ten_cannot_move_the_mean_outside_the_others(
            v in prop::collection::vec(1f64..1000.0, 9),
            wild in prop_oneof![1e12f64..1e15, -1e15f64..-1e12],
        ) {
            let mut all = v.clone();
            all.push(wild);
            let t = trimmed_mean(&all, 0.1).unwrap();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(t >= lo && t <= hi, "{t} outside {lo}..{hi}");
        }

        #[test]
        fn a_shift_far_beyond_the_noise_is_detected_after_exactly_three(
            level in 10f64..1e6,
            amplitude in 0.1f64..1.0,
            shift_noise in prop::collection::vec(-1f64..1.0, 3),
            factor in 6f64..1000.0,
            up in any::<bool>(),
        ) {
            // Noise that alternates around the level (no run of three on one
            // side, σ ≈ 0.8 a); a shift of 6 a or more, ± a, lies more than
            // 2.5 σ from the mean.
            let pattern = [1.0, -1.0, 0.5, -0.5, 0.8, -0.8, 0.0];
            let shift = if up { factor * amplitude } else { -factor * amplitude };
            let mut v: Vec<f64> = pattern.iter().map(|p| level + p * amplitude).collect();
            v.extend(shift_noise[..2].iter().map(|n| level + shift + n * amplitude));
            prop_assert_eq!(regime_start(&v, &cfg()), 0);
            v.push(level + shift + shift_noise[2] * amplitude);
            prop_assert_eq!(regime_start(&v, &cfg()), 7);
            let e = estimate(&v, &cfg()).unwrap();
            prop_assert_eq!(e.samples, 3);
            prop_assert!((e.value - (level + shift)).abs() <= amplitude + 1e-6);
        }

        #[test]
        fn the_estimate_uses_at_most_the_window(v in prop::collection::vec(1f64..100.0, 1..60)) {
            let e = estimate(&v, &cfg()).unwrap();
            prop_assert!(e.samples >= 1 && e.samples <= 10);
            prop_assert!(e.trimmed < e.samples);
        }
    }
}
