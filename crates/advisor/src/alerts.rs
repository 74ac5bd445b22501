//! Alerts: rules over each path's series, checked as measurements are
//! stored (and, for silence, every half minute). A rule that starts to
//! hold fires once: an `alert` event in the archive (the dashboard shows
//! it) and a JSON POST to the webhook, retried with backoff; when it stops
//! holding, a `resolved` POST follows.
//!
//! The rules file (`--alerts FILE`) is JSON:
//!
//! ```json
//! {"webhook": "http://alerts.example.org:9000/tern",
//!  "rules": [
//!    {"name": "slow", "kind": "capacity", "below_share": 0.5},
//!    {"name": "lossy", "target": "dtn1.example.org", "kind": "loss", "above": 1.0},
//!    {"name": "rtt-jump", "kind": "rtt", "jump_share": 0.2},
//!    {"name": "ocean", "group": "transatlantic", "kind": "loss", "above": 0.1},
//!    {"name": "rerouted", "event": "route_change"},
//!    {"name": "silent", "no_data_intervals": 3}
//!  ]}
//! ```
//!
//! `below_share` compares the newest value with the median of the ones
//! before it (up to 9, at least 3): its baseline. [`Rule::holds`] is pure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::Error;
use crate::model::{Kind, Target, now_ms};
use crate::store::{EventKind, Store};

/// The alert configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertConfig {
    /// Where alerts are POSTed (`http://HOST[:PORT]/PATH`); none: only
    /// events in the archive.
    #[serde(default)]
    pub webhook: Option<String>,
    /// The rules.
    pub rules: Vec<Rule>,
}

/// One rule: which paths, and what must hold for it to fire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Its name, in events and webhooks.
    pub name: String,
    /// The target it watches (default: every target).
    #[serde(default)]
    pub target: Option<String>,
    /// Or the bottleneck group whose targets it watches, each on its own
    /// (a target's `group`, from the API or a targets file).
    #[serde(default)]
    pub group: Option<String>,
    /// The series it reads (for `below_share`, `above`, `jump_share`).
    #[serde(default)]
    pub kind: Option<Kind>,
    /// Fires when the newest value is under this share of the baseline.
    #[serde(default)]
    pub below_share: Option<f64>,
    /// Fires when the newest value is over this level (the kind's unit).
    #[serde(default)]
    pub above: Option<f64>,
    /// Fires when the newest value is over the baseline by this share.
    #[serde(default)]
    pub jump_share: Option<f64>,
    /// Fires on an event of this kind (`route_change`, `level_shift`).
    #[serde(default)]
    pub event: Option<EventKind>,
    /// Fires when the target has had no measurement for this many of its
    /// intervals.
    #[serde(default)]
    pub no_data_intervals: Option<u32>,
}

/// The fewest earlier values a baseline is taken from.
pub const MIN_BASELINE: usize = 3;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Rule {
    fn check(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::Config(format!("alert rule '{}': {m}", self.name)));
        let triggers = [
            self.below_share.is_some(),
            self.above.is_some(),
            self.jump_share.is_some(),
            self.event.is_some(),
            self.no_data_intervals.is_some(),
        ];
        if triggers.iter().filter(|&&t| t).count() != 1 {
            return bad(
                "give exactly one of below_share, above, jump_share, event, no_data_intervals",
            );
        }
        let needs_kind =
            self.below_share.is_some() || self.above.is_some() || self.jump_share.is_some();
        if needs_kind != self.kind.is_some() {
            return bad("below_share, above and jump_share need a kind; the others take none");
        }
        for v in [self.below_share, self.jump_share, self.above]
            .into_iter()
            .flatten()
        {
            if !(v.is_finite() && v >= 0.0) {
                return bad("thresholds are numbers of 0 or more");
            }
        }
        if self.no_data_intervals == Some(0) {
            return bad("no_data_intervals of at least 1");
        }
        if self.target.is_some() && self.group.is_some() {
            return bad("give a target or a group, not both");
        }
        Ok(())
    }

    /// Whether it watches `host`, a target of bottleneck group `group`.
    pub fn watches(&self, host: &str, group: Option<&str>) -> bool {
        match (&self.target, &self.group) {
            (Some(t), _) => t == "*" || t == host,
            (None, Some(g)) => group == Some(g.as_str()),
            (None, None) => true,
        }
    }

    /// Whether it holds for a series of `kind` whose values are `values`,
    /// oldest first; with the baseline it compared against.
    pub fn holds(&self, kind: Kind, values: &[f64]) -> Option<(f64, Option<f64>)> {
        self.holds_against(kind, values, None)
    }

    /// As [`Rule::holds`], against `baseline` when given (the one it fired
    /// against) rather than the median before the newest value.
    pub fn holds_against(
        &self,
        kind: Kind,
        values: &[f64],
        baseline: Option<f64>,
    ) -> Option<(f64, Option<f64>)> {
        if self.kind != Some(kind) {
            return None;
        }
        let (&newest, before) = values.split_last()?;
        let before = &before[before.len().saturating_sub(9)..];
        let baseline = baseline.or_else(|| (before.len() >= MIN_BASELINE).then(|| median(before)));
        let fires = match (self.below_share, self.above, self.jump_share, baseline) {
            (Some(share), _, _, Some(b)) => newest < share * b,
            (_, Some(level), _, _) => newest > level,
            (_, _, Some(share), Some(b)) => newest > (1.0 + share) * b,
            _ => false,
        };
        fires.then_some((newest, baseline))
    }
}

impl AlertConfig {
    /// Reads and checks a rules file's text.
    pub fn parse(text: &str) -> Result<AlertConfig, Error> {
        let c: AlertConfig =
            serde_json::from_str(text).map_err(|e| Error::Config(format!("alert rules: {e}")))?;
        for r in &c.rules {
            r.check()?;
        }
        if let Some(url) = &c.webhook {
            crate::client::AdvisorClient::new(url)?;
        }
        Ok(c)
    }
}

/// What a webhook receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    /// `firing` or `resolved`.
    pub status: &'static str,
    /// The rule's name.
    pub alert: String,
    /// The site that measured.
    pub from: String,
    /// The target.
    pub target: String,
    /// The series, or the event, or `no_data`.
    pub kind: String,
    /// The newest value, when a series fired it.
    pub value: Option<f64>,
    /// What it was compared against.
    pub baseline: Option<f64>,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// For people.
    pub message: String,
}

/// The alerting of one advisor: its rules and which of them are firing.
#[derive(Debug, Clone)]
pub struct Alerts {
    config: Arc<AlertConfig>,
    /// What fires now, with the baseline it fired against: while it fires,
    /// it is judged against that, not against a median its own values
    /// have pulled down.
    firing: Arc<Mutex<HashMap<Key, Option<f64>>>>,
}

/// Webhook tries, and the first wait between them (doubling).
pub const WEBHOOK_TRIES: u32 = 5;
/// The first wait between webhook tries.
pub const WEBHOOK_BACKOFF: Duration = Duration::from_secs(1);

impl Alerts {
    /// Alerting by `config`.
    pub fn new(config: AlertConfig) -> Alerts {
        Alerts {
            config: Arc::new(config),
            firing: Arc::default(),
        }
    }

    /// Looks at this site's path to `host` after measurements of `kinds`
    /// were stored, and at `events` just found there.
    pub async fn after_record(
        &self,
        store: &Store,
        host: &str,
        kinds: &[Kind],
        events: &[EventKind],
    ) -> Result<(), Error> {
        let site = store.site().to_string();
        let group = if self.config.rules.iter().any(|r| r.group.is_some()) {
            store.target(host).await?.and_then(|t| t.group)
        } else {
            None
        };
        for rule in (self.config.rules.iter()).filter(|r| r.watches(host, group.as_deref())) {
            if let Some(ev) = rule.event {
                if events.contains(&ev) {
                    let msg = format!("{}: {} on {site} → {host}", rule.name, ev.name());
                    self.fire(store, rule, host, ev.name(), None, None, msg)
                        .await?;
                    // An event is a moment: it resolves at once.
                    self.firing
                        .lock()
                        .expect("alerts")
                        .remove(&key(rule, host, ev.name()));
                }
                continue;
            }
            let Some(kind) = rule.kind.filter(|k| kinds.contains(k)) else {
                continue;
            };
            let series = store
                .pair_series(&site, host, kind, 0, i64::MAX, 10)
                .await?;
            let values: Vec<f64> = series.iter().map(|m| m.value).collect();
            let frozen = self
                .firing
                .lock()
                .expect("alerts")
                .get(&key(rule, host, kind.name()))
                .copied()
                .flatten();
            match rule.holds_against(kind, &values, frozen) {
                Some((value, baseline)) => {
                    let msg = format!(
                        "{}: {} {site} → {host} is {value:.4} {}{}",
                        rule.name,
                        kind.name(),
                        kind.unit(),
                        baseline.map_or(String::new(), |b| format!(" (baseline {b:.4})"))
                    );
                    self.fire(store, rule, host, kind.name(), Some(value), baseline, msg)
                        .await?;
                }
                None => self.resolve(store, rule, host, kind.name()).await,
            }
        }
        Ok(())
    }

    /// Checks the silence rules against every target.
    pub async fn check_silence(&self, store: &Store, targets: &[Target]) -> Result<(), Error> {
        let site = store.site().to_string();
        let latest = store.latest().await?;
        let now = now_ms();
        for rule in &self.config.rules {
            let Some(n) = rule.no_data_intervals else {
                continue;
            };
            for t in targets
                .iter()
                .filter(|t| rule.watches(&t.host, t.group.as_deref()))
            {
                let newest = latest
                    .iter()
                    .filter(|m| m.from == site && m.host == t.host)
                    .map(|m| m.at_ms)
                    .max()
                    .unwrap_or(t.added_ms);
                let silent_ms = now - newest;
                if silent_ms > i64::from(n) * (t.interval_s as i64) * 1000 {
                    let msg = format!(
                        "{}: no measurement of {site} → {} for {} s ({n} intervals of {} s)",
                        rule.name,
                        t.host,
                        silent_ms / 1000,
                        t.interval_s
                    );
                    self.fire(store, rule, &t.host, "no_data", None, None, msg)
                        .await?;
                } else {
                    self.resolve(store, rule, &t.host, "no_data").await;
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn fire(
        &self,
        store: &Store,
        rule: &Rule,
        host: &str,
        what: &str,
        value: Option<f64>,
        baseline: Option<f64>,
        message: String,
    ) -> Result<(), Error> {
        if self
            .firing
            .lock()
            .expect("alerts")
            .contains_key(&key(rule, host, what))
        {
            return Ok(());
        }
        tracing::warn!("alert {message}");
        let notice = Notice {
            status: "firing",
            alert: rule.name.clone(),
            from: store.site().to_string(),
            target: host.to_string(),
            kind: what.to_string(),
            value,
            baseline,
            at_ms: now_ms(),
            message,
        };
        let kind = rule.kind.unwrap_or(Kind::Route);
        let details = json!({"alert": rule.name, "status": "firing", "what": what,
            "value": value, "baseline": baseline, "message": notice.message});
        store
            .record_event(host, kind, EventKind::Alert, notice.at_ms, &details)
            .await?;
        // Firing once recorded: a store that failed leaves it to fire again.
        self.firing
            .lock()
            .expect("alerts")
            .insert(key(rule, host, what), baseline);
        self.post(notice);
        Ok(())
    }

    async fn resolve(&self, store: &Store, rule: &Rule, host: &str, what: &str) {
        if self
            .firing
            .lock()
            .expect("alerts")
            .remove(&key(rule, host, what))
            .is_none()
        {
            return;
        }
        self.post(Notice {
            status: "resolved",
            alert: rule.name.clone(),
            from: store.site().to_string(),
            target: host.to_string(),
            kind: what.to_string(),
            value: None,
            baseline: None,
            at_ms: now_ms(),
            message: format!(
                "{}: {what} of {} → {host} is back to normal",
                rule.name,
                store.site()
            ),
        });
    }

    /// POSTs a notice in the background, retried with backoff.
    fn post(&self, notice: Notice) {
        let Some(url) = self.config.webhook.clone() else {
            return;
        };
        tokio::spawn(async move {
            let body = serde_json::to_vec(&notice).expect("a notice encodes");
            let mut wait = WEBHOOK_BACKOFF;
            for attempt in 1..=WEBHOOK_TRIES {
                let sent = match crate::client::AdvisorClient::new(&url) {
                    Ok(c) => c
                        .raw(hyper::Method::POST, "", Some(body.clone()))
                        .await
                        .map(|(status, _)| status.is_success()),
                    Err(e) => Err(e),
                };
                match sent {
                    Ok(true) => return,
                    Ok(false) | Err(_) if attempt < WEBHOOK_TRIES => {
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                    other => {
                        tracing::warn!(
                            "alert webhook {url}: gave up after {attempt} tries ({other:?})"
                        );
                        return;
                    }
                }
            }
        });
    }
}

/// How often silence rules are checked.
pub const SILENCE_EVERY: Duration = Duration::from_secs(30);

/// Checks the alerts' silence rules every [`SILENCE_EVERY`] until `stop`.
pub async fn watch_silence(
    alerts: Alerts,
    store: Store,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(SILENCE_EVERY);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => {}
        }
        let checked = match crate::mesh::targets_of_site(&store).await {
            Ok(targets) => alerts.check_silence(&store, &targets).await,
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            tracing::warn!("alerts: silence not checked: {e}");
        }
    }
}

/// What fires: a rule, a target, and the series or event.
type Key = (String, String, String);

fn key(rule: &Rule, host: &str, what: &str) -> Key {
    (rule.name.clone(), host.to_string(), what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> Rule {
        let r: Rule = serde_json::from_str(json).unwrap();
        r.check().unwrap();
        r
    }

    #[test]
    fn a_drop_below_the_baseline_share_fires_and_a_level_or_a_jump_too() {
        let slow = rule(r#"{"name": "slow", "kind": "capacity", "below_share": 0.5}"#);
        assert_eq!(
            slow.holds(Kind::Capacity, &[100.0, 100.0, 98.0, 102.0, 40.0]),
            Some((40.0, Some(100.0)))
        );
        assert_eq!(
            slow.holds(Kind::Capacity, &[100.0, 100.0, 98.0, 102.0, 60.0]),
            None
        );
        assert_eq!(
            slow.holds(Kind::Capacity, &[100.0, 40.0]),
            None,
            "no baseline yet"
        );
        assert_eq!(
            slow.holds(Kind::Rtt, &[100.0, 100.0, 100.0, 40.0]),
            None,
            "another series"
        );
        let lossy = rule(r#"{"name": "lossy", "kind": "loss", "above": 1.0}"#);
        assert_eq!(lossy.holds(Kind::Loss, &[2.5]), Some((2.5, None)));
        // Once fired, against the baseline it fired at: still 40 of 100.
        let later = [40.0; 9].iter().copied().chain([41.0]).collect::<Vec<_>>();
        assert_eq!(
            slow.holds(Kind::Capacity, &later),
            None,
            "its own values pulled the median down"
        );
        assert!(
            slow.holds_against(Kind::Capacity, &later, Some(100.0))
                .is_some()
        );
        assert!(
            slow.holds_against(Kind::Capacity, &[40.0, 95.0], Some(100.0))
                .is_none()
        );
        let jump = rule(r#"{"name": "j", "kind": "rtt", "jump_share": 0.2}"#);
        assert!(jump.holds(Kind::Rtt, &[10.0, 10.0, 10.0, 12.5]).is_some());
        assert!(jump.holds(Kind::Rtt, &[10.0, 10.0, 10.0, 11.5]).is_none());
    }

    #[test]
    fn rules_need_one_trigger_and_a_kind_where_it_reads_one() {
        for bad in [
            r#"{"rules": [{"name": "x"}]}"#,
            r#"{"rules": [{"name": "x", "kind": "rtt", "above": 1, "jump_share": 0.1}]}"#,
            r#"{"rules": [{"name": "x", "above": 1}]}"#,
            r#"{"rules": [{"name": "x", "event": "route_change", "kind": "rtt"}]}"#,
            r#"{"rules": [{"name": "x", "no_data_intervals": 0}]}"#,
            r#"{"webhook": "https://x", "rules": []}"#,
            r#"{"rules": [{"name": "x", "kind": "rtt", "above": 1, "typo": 2}]}"#,
            r#"{"rules": [{"name": "x", "kind": "rtt", "above": 1, "target": "b", "group": "g"}]}"#,
        ] {
            assert!(AlertConfig::parse(bad).is_err(), "{bad}");
        }
        let ok = AlertConfig::parse(
            r#"{"webhook": "http://127.0.0.1:9/hook", "rules": [{"name": "r", "event": "route_change", "target": "b"}]}"#,
        )
        .unwrap();
        assert!(ok.rules[0].watches("b", None) && !ok.rules[0].watches("c", None));
        let group = AlertConfig::parse(
            r#"{"rules": [{"name": "g", "group": "ta", "event": "route_change"}]}"#,
        )
        .unwrap();
        assert!(group.rules[0].watches("c", Some("ta")));
        assert!(!group.rules[0].watches("c", Some("tb")) && !group.rules[0].watches("c", None));
    }
}
