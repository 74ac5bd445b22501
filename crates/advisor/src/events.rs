//! Events on a path's series, found as measurements are stored: a route
//! whose hop list changed, and a series that moved to another level and
//! stayed there (in the spirit of IEPM-BW's plateau and drop detection).
//!
//! The detectors are pure ([`route_changed`], [`level_shift`]); [`after_record`]
//! reads what they need from the archive and stores what they find.

use serde_json::json;

use crate::Error;
use crate::model::{Kind, Measurement, Sample, now_ms};
use crate::store::{EventKind, Store};

/// Points a level shift is judged on: the newest [`AFTER`] against the
/// ones before them.
pub const WINDOW: usize = 12;
/// Newest points that must all sit on the new level.
pub const AFTER: usize = 3;
/// Fewest points before them.
pub const MIN_BEFORE: usize = 5;

/// A series' move to another level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shift {
    /// Median of the points before.
    pub before: f64,
    /// Median of the newest points.
    pub after: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// How far a value must move from `level` to count as another level, in
/// the kind's unit: relative for rates and times, with a floor that keeps
/// small numbers' noise out; absolute points for loss.
fn tolerance(kind: Kind, level: f64) -> f64 {
    match kind {
        Kind::Capacity | Kind::Throughput => 0.3 * level,
        Kind::Rtt => (0.2 * level).max(1.0),
        Kind::Jitter | Kind::JitterReverse => level.max(1.0),
        Kind::Loss | Kind::LossReverse => level.max(0.5),
        Kind::Route => f64::INFINITY,
    }
}

/// Whether the newest [`AFTER`] values (oldest first in `values`) all sit
/// beyond the tolerance on the same side of the median before them.
pub fn level_shift(kind: Kind, values: &[f64]) -> Option<Shift> {
    if values.len() < MIN_BEFORE + AFTER {
        return None;
    }
    let values = &values[values.len().saturating_sub(WINDOW)..];
    let (before, after) = values.split_at(values.len() - AFTER);
    let level = median(before);
    let tol = tolerance(kind, level);
    let up = after.iter().all(|&v| v > level + tol);
    let down = after.iter().all(|&v| v < level - tol);
    (up || down).then(|| Shift {
        before: level,
        after: median(after),
    })
}

/// The hop signature stored with a route measurement.
fn signature(m: &Measurement) -> Option<Vec<String>> {
    serde_json::from_value(m.details.get("signature")?.clone()).ok()
}

/// The two signatures when the route changed from `old` to `new`; a route
/// that did not reach its end, or that no hop answered, says nothing.
pub fn route_changed(old: &Measurement, new: &Measurement) -> Option<(Vec<String>, Vec<String>)> {
    let reached = |m: &Measurement| m.details.get("reached") == Some(&json!(true));
    let (a, b) = (signature(old)?, signature(new)?);
    (reached(old) && reached(new) && !a.is_empty() && !b.is_empty() && a != b).then_some((a, b))
}

/// What [`after_record`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// The route to the host changed.
    pub route_changed: bool,
    /// Series that shifted level.
    pub shifted: Vec<Kind>,
}

impl Found {
    /// The events found, by kind.
    pub fn kinds(&self) -> Vec<EventKind> {
        let mut k = Vec::new();
        if self.route_changed {
            k.push(EventKind::RouteChange);
        }
        if !self.shifted.is_empty() {
            k.push(EventKind::LevelShift);
        }
        k
    }
}

/// Looks for events after `samples` of this site's path to `host` were
/// stored, and stores what it finds.
pub async fn after_record(store: &Store, host: &str, samples: &[Sample]) -> Result<Found, Error> {
    let mut found = Found::default();
    let site = store.site().to_string();
    let now = now_ms();
    let mut kinds: Vec<Kind> = samples.iter().map(|s| s.kind).collect();
    kinds.dedup();
    for kind in kinds {
        let recent = store
            .pair_series(&site, host, kind, 0, i64::MAX, WINDOW as u32)
            .await?;
        if kind == Kind::Route {
            if let [.., old, new] = recent.as_slice()
                && let Some((before, after)) = route_changed(old, new)
            {
                let details = json!({
                    "before": before, "after": after,
                    "hops_before": old.value, "hops_after": new.value,
                });
                store
                    .record_event(host, kind, EventKind::RouteChange, now, &details)
                    .await?;
                found.route_changed = true;
            }
            continue;
        }
        let values: Vec<f64> = recent.iter().map(|m| m.value).collect();
        let Some(shift) = level_shift(kind, &values) else {
            continue;
        };
        // Reported once: not again while the same shift is in the window
        // (a shift back, a recovery, is news).
        let direction = if shift.after > shift.before {
            "rise"
        } else {
            "drop"
        };
        let window_start = recent.first().map_or(0, |m| m.at_ms);
        let last = store.last_event(host, kind, EventKind::LevelShift).await?;
        if last.is_some_and(|e| e.at_ms >= window_start && e.details["direction"] == direction) {
            continue;
        }
        let details = json!({
            "before": shift.before, "after": shift.after, "unit": kind.unit(),
            "direction": direction,
        });
        store
            .record_event(host, kind, EventKind::LevelShift, now, &details)
            .await?;
        found.shifted.push(kind);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Origin;

    #[test]
    fn a_drop_that_stays_is_a_shift_and_noise_or_a_blip_is_not() {
        let mut v = vec![900.0, 910.0, 890.0, 905.0, 895.0, 900.0];
        assert_eq!(level_shift(Kind::Throughput, &v), None, "too few");
        v.extend([500.0, 480.0, 510.0]);
        let s = level_shift(Kind::Throughput, &v).unwrap();
        assert_eq!((s.before, s.after), (900.0, 500.0));
        let blip = [
            900.0, 910.0, 890.0, 905.0, 895.0, 900.0, 500.0, 905.0, 510.0,
        ];
        assert_eq!(level_shift(Kind::Throughput, &blip), None);
        let noise = [
            900.0, 700.0, 1000.0, 800.0, 950.0, 850.0, 700.0, 750.0, 720.0,
        ];
        assert_eq!(level_shift(Kind::Throughput, &noise), None, "within 30 %");
    }

    #[test]
    fn loss_and_rtt_rises_need_more_than_their_floors() {
        let base = [0.0, 0.1, 0.0, 0.2, 0.0, 0.1];
        let small: Vec<f64> = base.iter().copied().chain([0.3, 0.4, 0.3]).collect();
        assert_eq!(level_shift(Kind::Loss, &small), None, "under 0.5 points");
        let big: Vec<f64> = base.iter().copied().chain([2.0, 1.8, 2.5]).collect();
        assert!(level_shift(Kind::Loss, &big).is_some());
        let rtt = [0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.9, 0.9, 0.9];
        assert_eq!(level_shift(Kind::Rtt, &rtt), None, "under the 1 ms floor");
        let rtt = [40.0, 40.0, 41.0, 40.0, 40.0, 40.0, 60.0, 61.0, 60.0];
        assert_eq!(level_shift(Kind::Rtt, &rtt).unwrap().after, 60.0);
    }

    fn route(sig: &[&str], reached: bool) -> Measurement {
        Measurement {
            host: "h".into(),
            kind: Kind::Route,
            value: sig.len() as f64,
            unit: "hops".into(),
            origin: Origin::Active,
            producer: "route_udp".into(),
            at_ms: 0,
            from: "a".into(),
            details: json!({"signature": sig, "reached": reached}),
        }
    }

    #[test]
    fn a_route_change_needs_two_complete_routes_that_differ() {
        let old = route(&["10.48.0.1", "10.47.0.2"], true);
        let new = route(&["10.48.5.1", "10.47.0.2"], true);
        assert!(route_changed(&old, &new).is_some());
        assert_eq!(route_changed(&old, &old), None);
        assert_eq!(route_changed(&old, &route(&["10.48.5.1"], false)), None);
        assert_eq!(route_changed(&old, &route(&[], true)), None);
    }
}
