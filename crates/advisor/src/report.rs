//! Passive results: what a finished transfer achieved, as `tern cp`,
//! `tern perf` and the daemon report it (`POST /api/v1/report`).
//!
//! Real transfers are the advisor's preferred evidence (they cost the
//! network nothing extra). Short transfers mostly measure TCP's start-up,
//! not the path, so a rate is only kept from transfers that moved at
//! least [`MIN_BYTES`] over at least [`MIN_SECS`]; their RTT is kept
//! anyway.

use serde::{Deserialize, Serialize};
use tern_engine::paths::PathReport;
use tern_engine::transfer::TransferStats;

use crate::Error;
use crate::model::{Kind, MAX_DURATION_S, Sample, shown, validate_host};

/// Fewest bytes a transfer must move for its rate to count.
pub const MIN_BYTES: u64 = 1 << 20;
/// Shortest transfer whose rate counts, seconds.
pub const MIN_SECS: f64 = 0.5;

/// Other addresses a report may name (`paths`), at most.
pub const MAX_PATHS: usize = 16;

/// What a finished transfer reports.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferReport {
    /// The far end: the host the transfer went to or came from.
    pub host: String,
    /// Its tern port, if it runs a daemon there.
    #[serde(default)]
    pub port: Option<u16>,
    /// Rate achieved over the network part of the transfer, bits/s.
    #[serde(default)]
    pub throughput_bps: Option<f64>,
    /// Lowest RTT the transfer's sockets saw, ms.
    #[serde(default)]
    pub rtt_ms: Option<f64>,
    /// Bytes moved.
    #[serde(default)]
    pub bytes: Option<u64>,
    /// Seconds the network part took.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Streams used.
    #[serde(default)]
    pub streams: Option<u16>,
    /// Window mode or size used (`auto`, `kernel`, bytes).
    #[serde(default)]
    pub window: Option<String>,
    /// What limited it (`network`, `send_buffer`, `receive_window`,
    /// `application`, `unknown`), from TCP_INFO.
    #[serde(default)]
    pub limit: Option<String>,
    /// Congestion control used.
    #[serde(default)]
    pub congestion_control: Option<String>,
    /// `send` or `receive`, from the reporter's side.
    #[serde(default)]
    pub direction: Option<String>,
    /// Who reports: `tern cp`, `tern perf`, `tern serve`, a script.
    #[serde(default)]
    pub command: Option<String>,
    /// The far end's other addresses this transfer's streams also went
    /// over (a multi-path session), each reported under its own address;
    /// the advice for `host` names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// The samples a report yields, and what was left out and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    /// To store.
    pub samples: Vec<Sample>,
    /// Left out, with the reason.
    pub ignored: Vec<String>,
}

fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

impl TransferReport {
    /// The report of a finished transfer, from the engine's statistics.
    pub fn from_stats(
        host: &str,
        stats: &TransferStats,
        command: &str,
        direction: &str,
    ) -> TransferReport {
        let moved = stats.bytes.saturating_sub(stats.bytes_resumed);
        let secs = stats.network_elapsed.as_secs_f64();
        let tuning = stats.tuning.as_ref();
        let rtt = tuning
            .map(|t| {
                t.streams
                    .iter()
                    .map(|s| s.min_rtt_ms)
                    .filter(|r| *r > 0.0)
                    .fold(f64::INFINITY, f64::min)
            })
            .filter(|r| r.is_finite());
        TransferReport {
            host: host.to_string(),
            port: None,
            throughput_bps: (secs > 0.0 && moved > 0).then(|| moved as f64 * 8.0 / secs),
            rtt_ms: rtt,
            bytes: Some(moved),
            duration_s: Some(secs),
            streams: Some(stats.streams_used),
            window: tuning.map(|t| t.window.clone()),
            limit: tuning.and_then(|t| {
                serde_json::to_value(t.limit)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
            }),
            congestion_control: tuning.map(|t| t.congestion_control.clone()),
            direction: Some(direction.to_string()),
            command: Some(command.to_string()),
            paths: Vec::new(),
        }
    }

    /// The same transfer as seen through one of its paths (a multi-path
    /// session): that path's address, bytes, rate, streams, RTT and limit,
    /// so that the archive keeps each path under its own address. `None`
    /// for a path that carried nothing.
    pub fn for_path(&self, path: &PathReport) -> Option<TransferReport> {
        let ip = path.remote_ip()?;
        let port = path
            .remote
            .as_deref()
            .and_then(|r| r.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.port());
        (path.bytes > 0).then(|| TransferReport {
            host: ip.to_string(),
            port,
            throughput_bps: Some(path.rate_bps).filter(|r| *r > 0.0),
            rtt_ms: path.rtt_ms,
            bytes: Some(path.bytes),
            streams: Some(u16::try_from(path.streams).unwrap_or(u16::MAX)),
            limit: path.limit.and_then(|l| {
                serde_json::to_value(l)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
            }),
            ..self.clone()
        })
    }

    /// Checks the report and turns it into samples.
    pub fn extract(&self) -> Result<Extracted, Error> {
        validate_host(&self.host)?;
        if self.paths.len() > MAX_PATHS {
            return Err(Error::BadRequest(format!(
                "paths: {} addresses, at most {MAX_PATHS}",
                self.paths.len()
            )));
        }
        for path in &self.paths {
            validate_host(path)?;
        }
        let mut samples = Vec::new();
        let mut ignored = Vec::new();
        if self.port == Some(0) {
            return Err(Error::BadRequest(
                "port must be 1 to 65535: port 0 cannot be probed".into(),
            ));
        }
        if let Some(d) = self.duration_s {
            if !(d.is_finite() && (0.0..=MAX_DURATION_S).contains(&d)) {
                return Err(Error::BadRequest(format!(
                    "duration_s must be at least 0 and at most {} (a year), not {}",
                    shown(MAX_DURATION_S),
                    shown(d)
                )));
            }
        }
        if let Some(rtt) = self.rtt_ms {
            samples.push(self.context(Sample::rtt_ms(Kind::Rtt.check("rtt_ms", rtt)?)));
        }
        if let Some(bps) = self.throughput_bps {
            let bps = Kind::Throughput.check("throughput_bps", bps)?;
            let too_small = self.bytes.is_some_and(|b| b < MIN_BYTES);
            let too_short = self.duration_s.is_some_and(|d| d < MIN_SECS);
            if too_small || too_short {
                ignored.push(format!(
                    "throughput: a transfer of {} bytes in {:.2} s measures TCP start-up, not the \
                     path (at least {MIN_BYTES} bytes over {MIN_SECS} s count)",
                    self.bytes.unwrap_or(0),
                    self.duration_s.unwrap_or(0.0)
                ));
            } else {
                let mut s = Sample::new(Kind::Throughput, bps);
                if let Some(n) = self.streams {
                    s = s.with("streams", n);
                }
                if let Some(w) = &self.window {
                    s = s.with("window", short(w));
                }
                if let Some(l) = &self.limit {
                    s = s.with("limit", short(l));
                }
                if let Some(b) = self.bytes {
                    s = s.with("bytes", b);
                }
                if let Some(d) = self.duration_s {
                    s = s.with("duration_s", d);
                }
                samples.push(self.context(s));
            }
        }
        if samples.is_empty() && ignored.is_empty() {
            return Err(Error::BadRequest(
                "a report needs throughput_bps or rtt_ms".into(),
            ));
        }
        Ok(Extracted { samples, ignored })
    }

    fn context(&self, mut s: Sample) -> Sample {
        if let Some(c) = &self.congestion_control {
            s = s.with("congestion_control", short(c));
        }
        if let Some(d) = &self.direction {
            s = s.with("direction", short(d));
        }
        s
    }

    /// Who produced it, for the store.
    pub fn producer(&self) -> String {
        short(self.command.as_deref().unwrap_or("report"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> TransferReport {
        TransferReport {
            host: "10.0.0.2".into(),
            throughput_bps: Some(4.5e8),
            rtt_ms: Some(180.5),
            bytes: Some(1 << 30),
            duration_s: Some(19.0),
            streams: Some(3),
            window: Some("auto".into()),
            limit: Some("network".into()),
            command: Some("tern cp".into()),
            ..TransferReport::default()
        }
    }

    #[test]
    fn a_long_transfer_gives_rtt_and_rate() {
        let e = report().extract().unwrap();
        assert_eq!(e.samples.len(), 2);
        assert!(e.ignored.is_empty());
        let tp = &e.samples[1];
        assert_eq!(tp.kind, Kind::Throughput);
        assert_eq!(tp.details["limit"], "network");
        assert_eq!(tp.details["streams"], 3);
        assert_eq!(report().producer(), "tern cp");
    }

    #[test]
    fn each_path_of_a_transfer_is_reported_under_its_own_address() {
        let path = |remote: &str, bytes: u64| PathReport {
            index: 1,
            local: None,
            remote: Some(remote.into()),
            streams: 2,
            bytes,
            rate_bps: 2.2e8,
            state: tern_engine::paths::PathState::Active,
            rtt_ms: Some(75.2),
            limit: Some(tern_drs::Limit::SendBuffer),
            reserved_bps: None,
            failed_after_s: None,
            failure: None,
            rejoined_after_s: None,
        };
        let whole = report();
        let one = whole.for_path(&path("10.47.1.2:4747", 600 << 20)).unwrap();
        assert_eq!((one.host.as_str(), one.port), ("10.47.1.2", Some(4747)));
        assert_eq!(one.throughput_bps, Some(2.2e8));
        assert_eq!(one.rtt_ms, Some(75.2));
        assert_eq!(one.streams, Some(2));
        assert_eq!(one.limit.as_deref(), Some("send_buffer"));
        assert_eq!(one.duration_s, whole.duration_s, "the transfer's own time");
        let samples = one.extract().unwrap().samples;
        assert_eq!(samples.len(), 2, "an RTT and a rate for the path");
        assert!(whole.for_path(&path("10.47.2.2:4747", 0)).is_none());
        assert!(whole.for_path(&path("not an address", 1 << 30)).is_none());
    }

    #[test]
    fn a_short_transfer_gives_only_its_rtt() {
        let r = TransferReport {
            bytes: Some(1000),
            ..report()
        };
        let e = r.extract().unwrap();
        assert_eq!(e.samples.len(), 1);
        assert_eq!(e.samples[0].kind, Kind::Rtt);
        assert!(e.ignored[0].contains("start-up"));
    }

    #[test]
    fn bad_reports_are_refused() {
        let bad = [
            TransferReport {
                host: "a b".into(),
                ..report()
            },
            TransferReport {
                throughput_bps: Some(-1.0),
                ..report()
            },
            TransferReport {
                rtt_ms: Some(f64::INFINITY),
                ..report()
            },
            TransferReport {
                duration_s: Some(-3.0),
                ..report()
            },
            TransferReport {
                paths: vec!["10.0.1.2".into(), "not a host!".into()],
                ..report()
            },
            TransferReport {
                paths: vec!["10.0.1.2".into(); MAX_PATHS + 1],
                ..report()
            },
            TransferReport {
                throughput_bps: None,
                rtt_ms: None,
                ..report()
            },
        ];
        for r in bad {
            assert!(matches!(r.extract(), Err(Error::BadRequest(_))), "{r:?}");
        }
        let unknown_field = serde_json::from_str::<TransferReport>(r#"{"host":"h","bogus":1}"#);
        assert!(unknown_field.is_err());
    }
}
