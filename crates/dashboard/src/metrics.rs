//! `/metrics`: what Prometheus scrapes, in its exposition format
//! (OpenMetrics text, which Prometheus and its parsers read).
//!
//! A scrape reads a [`Snapshot`] (the daemon's counters, the scheduler's,
//! the newest measurement of every path) and encodes it with the
//! Prometheus project's client library. Names follow Prometheus practice:
//! a `tern_` prefix, base units (`_bytes`, `_seconds`, ratios), `_total`
//! on counters, and labels of bounded cardinality only (a path's site and
//! target, a direction, a limit; never a file, a port or a session).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tern_advisor::model::{Kind, Measurement};

/// What a daemon counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaemonCounts {
    /// Sessions begun (streams up).
    pub started: u64,
    /// Sessions completed.
    pub completed: u64,
    /// Sessions that failed after they began.
    pub failed: u64,
    /// Payload bytes sent in completed sessions.
    pub sent_bytes: u64,
    /// Payload bytes received in completed sessions.
    pub received_bytes: u64,
    /// Blocks sent again.
    pub blocks_retransmitted: u64,
    /// Sessions running now.
    pub sessions_active: u64,
    /// Their data streams.
    pub streams_active: u64,
    /// Connections refused or ended by each limit.
    pub refused: Vec<(&'static str, u64)>,
}

/// What the probe scheduler counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeCounts {
    /// Probe runs that finished, well or not.
    pub runs: u64,
    /// Of them, failed.
    pub failures: u64,
    /// Targets measured.
    pub targets: u64,
    /// Probes running now.
    pub running: u64,
}

/// Everything one scrape shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The daemon's counts, when a daemon runs here.
    pub daemon: Option<DaemonCounts>,
    /// The scheduler's, when an advisor runs here.
    pub probes: Option<ProbeCounts>,
    /// The newest measurement of every (site, target, kind).
    pub latest: Vec<Measurement>,
}

impl Snapshot {
    /// The exposition text.
    pub fn encode(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing to a String");
        out
    }
}

type Labels = Vec<(&'static str, String)>;

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn count(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn gauges(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(Labels, f64)],
) -> std::fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let kind = ConstGauge::new(0.0).metric_type();
    let mut family = e.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in samples {
        ConstGauge::new(*v).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// A path's newest value of a kind in base units, with its labels.
fn path_samples(latest: &[Measurement], kind: Kind, scale: f64) -> Vec<(Labels, f64)> {
    latest
        .iter()
        .filter(|m| m.kind == kind)
        .map(|m| {
            let labels = vec![("from", m.from.clone()), ("target", m.host.clone())];
            (labels, m.value * scale)
        })
        .collect()
}

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        if let Some(d) = &self.daemon {
            counter(
                &mut e,
                "tern_transfers_started",
                "Sessions begun by this daemon (data streams up).",
                d.started,
            )?;
            counter(
                &mut e,
                "tern_transfers_completed",
                "Sessions this daemon completed.",
                d.completed,
            )?;
            counter(
                &mut e,
                "tern_transfers_failed",
                "Sessions that failed after they began.",
                d.failed,
            )?;
            counter(
                &mut e,
                "tern_sent_bytes",
                "Payload bytes this daemon sent in completed sessions.",
                d.sent_bytes,
            )?;
            counter(
                &mut e,
                "tern_received_bytes",
                "Payload bytes this daemon received in completed sessions.",
                d.received_bytes,
            )?;
            counter(
                &mut e,
                "tern_blocks_retransmitted",
                "Blocks sent again to repair a session.",
                d.blocks_retransmitted,
            )?;
            count(
                &mut e,
                "tern_sessions_active",
                "Sessions running now.",
                d.sessions_active,
            )?;
            count(
                &mut e,
                "tern_streams_active",
                "Data streams of the sessions running now.",
                d.streams_active,
            )?;
            let kind = ConstCounter::new(0u64).metric_type();
            let mut family = e.encode_descriptor(
                "tern_connections_refused",
                "Connections refused or ended by a limit of the daemon.",
                None,
                kind,
            )?;
            for (limit, n) in &d.refused {
                let labels: Labels = vec![("limit", limit.to_string())];
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
        }
        if let Some(p) = &self.probes {
            counter(
                &mut e,
                "tern_probe_runs",
                "Probe runs the advisor finished, well or not.",
                p.runs,
            )?;
            counter(
                &mut e,
                "tern_probe_failures",
                "Probe runs that failed.",
                p.failures,
            )?;
            count(
                &mut e,
                "tern_probe_targets",
                "Targets the advisor measures.",
                p.targets,
            )?;
            count(
                &mut e,
                "tern_probes_running",
                "Probes running now.",
                p.running,
            )?;
        }
        let l = &self.latest;
        gauges(
            &mut e,
            "tern_path_rtt_seconds",
            "Newest round-trip time of a path.",
            &path_samples(l, Kind::Rtt, 1e-3),
        )?;
        gauges(
            &mut e,
            "tern_path_capacity_bytes_per_second",
            "Newest bottleneck capacity of a path.",
            &path_samples(l, Kind::Capacity, 1.0 / 8.0),
        )?;
        gauges(
            &mut e,
            "tern_path_throughput_bytes_per_second",
            "Newest throughput of a path (a transfer or a test).",
            &path_samples(l, Kind::Throughput, 1.0 / 8.0),
        )?;
        let mut loss = Vec::new();
        for (kind, direction) in [(Kind::Loss, "forward"), (Kind::LossReverse, "reverse")] {
            for (mut labels, v) in path_samples(l, kind, 1e-2) {
                labels.push(("direction", direction.to_string()));
                loss.push((labels, v));
            }
        }
        gauges(
            &mut e,
            "tern_path_loss_ratio",
            "Newest packet loss of a path, 0 to 1, each direction.",
            &loss,
        )?;
        let mut jitter = Vec::new();
        for (kind, direction) in [(Kind::Jitter, "forward"), (Kind::JitterReverse, "reverse")] {
            for (mut labels, v) in path_samples(l, kind, 1e-3) {
                labels.push(("direction", direction.to_string()));
                jitter.push((labels, v));
            }
        }
        gauges(
            &mut e,
            "tern_path_jitter_seconds",
            "Newest delay variation of a path, each direction.",
            &jitter,
        )?;
        gauges(
            &mut e,
            "tern_path_hops",
            "Hops of a path's newest route.",
            &path_samples(l, Kind::Route, 1.0),
        )?;
        let mut newest: std::collections::BTreeMap<(&str, &str), i64> = Default::default();
        for m in l {
            let at = newest
                .entry((m.from.as_str(), m.host.as_str()))
                .or_insert(m.at_ms);
            *at = (*at).max(m.at_ms);
        }
        let stamps: Vec<(Labels, f64)> = newest
            .into_iter()
            .map(|((from, target), at)| {
                let labels = vec![("from", from.to_string()), ("target", target.to_string())];
                (labels, at as f64 / 1e3)
            })
            .collect();
        gauges(
            &mut e,
            "tern_path_measured_timestamp_seconds",
            "When a path was last measured (Unix time): the gauges above are that old.",
            &stamps,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_advisor::model::Origin;

    fn m(kind: Kind, value: f64) -> Measurement {
        Measurement {
            host: "b.example".into(),
            kind,
            value,
            unit: kind.unit().into(),
            origin: Origin::Active,
            producer: "t".into(),
            at_ms: 0,
            from: "a.example".into(),
            details: serde_json::json!({}),
        }
    }

    #[test]
    fn families_are_named_in_base_units_and_counters_end_in_total() {
        let text = Snapshot {
            daemon: Some(DaemonCounts {
                sent_bytes: 1234,
                refused: vec![("handshakes", 2)],
                ..DaemonCounts::default()
            }),
            probes: Some(ProbeCounts::default()),
            latest: vec![
                m(Kind::Rtt, 40.0),
                m(Kind::Loss, 1.5),
                m(Kind::Capacity, 8e9),
            ],
        }
        .encode();
        assert!(text.contains("# TYPE tern_sent_bytes counter\n"), "{text}");
        assert!(text.contains("tern_sent_bytes_total 1234\n"), "{text}");
        assert!(
            text.contains("tern_connections_refused_total{limit=\"handshakes\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("tern_path_rtt_seconds{from=\"a.example\",target=\"b.example\"} 0.04"),
            "{text}"
        );
        assert!(text.contains("tern_path_loss_ratio{from=\"a.example\",target=\"b.example\",direction=\"forward\"} 0.015"), "{text}");
        assert!(text.contains("tern_path_capacity_bytes_per_second{from=\"a.example\",target=\"b.example\"} 1000000000"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        // Without a daemon or measurements, only what exists is shown.
        let bare = Snapshot::default().encode();
        assert!(!bare.contains("tern_"), "{bare}");
    }

    #[test]
    fn every_family_the_grafana_dashboard_queries_is_exported() {
        let all = [
            Kind::Rtt,
            Kind::Capacity,
            Kind::Throughput,
            Kind::Loss,
            Kind::LossReverse,
            Kind::Jitter,
            Kind::JitterReverse,
            Kind::Route,
        ];
        let text = Snapshot {
            daemon: Some(DaemonCounts {
                refused: vec![("handshakes", 0)],
                ..DaemonCounts::default()
            }),
            probes: Some(ProbeCounts::default()),
            latest: all.iter().map(|&k| m(k, 1.0)).collect(),
        }
        .encode();
        let grafana = include_str!("../../../docs/grafana/tern-dashboard.json");
        let dashboard: serde_json::Value = serde_json::from_str(grafana).unwrap();
        let mut queried = Vec::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap();
                for (i, _) in expr.match_indices("tern_") {
                    let name: String = expr[i..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    queried.push(name);
                }
            }
        }
        assert!(queried.len() >= 15, "{queried:?}");
        for name in queried {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("{name} "))
                        || l.starts_with(&format!("{name}{{"))),
                "Grafana queries {name}, which /metrics does not export"
            );
        }
    }
}
