//! What a transfer did: the `--json` object, and the summary for people
//! made from it (printed by [`crate::console`]).

use std::time::{Duration, Instant};

use serde::Serialize;
use tern_advisor::Advice;
use tern_engine::client::Endpoint;
use tern_engine::paths::PathReport;
use tern_engine::transfer::TransferStats;
use tern_proto::{ChecksumAlg, Protect};

use crate::size::{count, human_bytes, human_rate};

mod failure;
mod paths;
pub use failure::FailureReport;
use paths::path_line;

/// Per-stream numbers.
#[derive(Debug, Serialize)]
pub struct StreamReport {
    pub stream: usize,
    pub bytes: u64,
    pub throughput_bps: f64,
}

/// What compression did.
#[derive(Debug, Serialize)]
pub struct CompressionReport {
    /// What was asked for: auto, zstd, lz4 or none.
    pub mode: &'static str,
    /// The codec(s) blocks went with: zstd, lz4, zstd+lz4 or none.
    pub codec: &'static str,
    /// Block payload bytes before compression.
    pub bytes_raw: u64,
    /// Block payload bytes on the wire.
    pub bytes_wire: u64,
    /// bytes_wire / bytes_raw (1 when nothing was compressed).
    pub ratio: f64,
    pub blocks_compressed: u64,
    /// Blocks sent uncompressed: not worth trying, or did not shrink.
    pub blocks_raw: u64,
    /// Of those, blocks that were compressed and sent raw because they did
    /// not shrink enough (known to the sending end only).
    pub blocks_not_shrunk: u64,
}

impl CompressionReport {
    fn new(c: &tern_engine::compress::CompressionStats) -> CompressionReport {
        CompressionReport {
            mode: c.mode.name(),
            codec: c.codec(),
            bytes_raw: c.bytes_raw,
            bytes_wire: c.bytes_wire,
            ratio: if c.bytes_raw > 0 {
                c.bytes_wire as f64 / c.bytes_raw as f64
            } else {
                1.0
            },
            blocks_compressed: c.blocks_zstd + c.blocks_lz4,
            blocks_raw: c.blocks_raw,
            blocks_not_shrunk: c.blocks_not_shrunk,
        }
    }
}

/// An entry that could not be copied.
#[derive(Debug, Serialize)]
pub struct FailedEntry {
    /// Path relative to the transfer's top, bytes that are not UTF-8
    /// escaped as `\xNN`.
    pub path: String,
    /// Why.
    pub error: String,
    /// Which end saw it: `local` or `peer`.
    pub seen_by: &'static str,
}

/// One file's end-to-end digest.
#[derive(Debug, Serialize)]
pub struct ChecksumReport {
    pub path: String,
    pub algorithm: &'static str,
    pub digest: String,
}

/// The `--json` object (and the source of the human summary).
#[derive(Debug, Serialize)]
pub struct Report {
    pub command: &'static str,
    pub direction: &'static str,
    /// How the far end was reached: local, daemon, ssh, ssh-reverse.
    pub via: &'static str,
    /// The code the process exits with: 0, or what the entries that could
    /// not be copied come to (23, or one entry's own code).
    pub exit_code: u8,
    pub bytes: u64,
    pub files: usize,
    pub elapsed_s: f64,
    pub setup_s: f64,
    pub network_elapsed_s: f64,
    pub throughput_bps: f64,
    pub network_throughput_bps: f64,
    /// Streams that joined the session, replacements of lost ones included.
    pub streams: usize,
    /// Most streams in use at once, and at the end: what the summary's
    /// first line says.
    pub stream_count: StreamStory,
    pub per_stream: Vec<StreamReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Vec<ChecksumReport>>,
    pub blocks_retransmitted: u64,
    pub blocks_corrupt: u64,
    /// Blocks this end sent twice at the end: still on their way on a
    /// slower stream, also sent on a faster one (none when it received).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks_copied: Option<u64>,
    /// Bytes already at the destination from an earlier, interrupted run.
    pub bytes_resumed: u64,
    /// Files not sent because the destination already had them complete.
    pub files_skipped: usize,
    /// Their bytes.
    pub bytes_skipped: u64,
    /// Entries that could not be copied; the rest of the tree was.
    pub failed: Vec<FailedEntry>,
    /// What compression did, as this end counted it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionReport>,
    /// Data streams this end gave up because they stalled.
    pub streams_stalled: u16,
    /// Data streams that ended without their end marker (or were given up).
    pub streams_lost: u16,
    /// Data streams that joined to replace one given up.
    pub streams_replaced: u16,
    pub protect: &'static str,
    pub block_size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_fingerprint: Option<String>,
    /// What limited the streams (TCP_INFO), when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning: Option<tern_drs::Diagnosis>,
    /// The advice started from and the report sent back (`--advisor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisor: Option<AdvisorUse>,
    /// The last copy to the same daemon this one started from (its rate
    /// sized the send buffers, its streams the start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_from_last_copy: Option<LastCopy>,
    /// Each path's share, when the daemon was reached by more than one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathReport>,
    /// With `--mptcp`: whether the connections were MPTCP (false: the
    /// daemon took plain TCP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<bool>,
}

/// What the last copy to a daemon left for the next one to start from.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LastCopy {
    /// Its payload rate, bits/s.
    pub rate_bps: u64,
    /// Its streams at the end.
    pub streams: u16,
    /// A copy found that more streams did not pay, recently enough that
    /// this one starts from the count without probes.
    pub settled: bool,
}

/// What `--advisor` did, in the `--json` report.
#[derive(Debug, Clone, Serialize)]
pub struct AdvisorUse {
    /// The advisor asked.
    pub url: String,
    /// The streams the transfer started with on its advice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streams: Option<u16>,
    /// The window it set on its advice, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_bytes: Option<u64>,
    /// The advice itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<Advice>,
    /// Why there was no advice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice_error: Option<String>,
    /// The result was reported back.
    pub reported: bool,
    /// Why reporting failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_error: Option<String>,
}

/// How a command reached its far end.
#[derive(Debug, Clone)]
pub enum Via {
    /// Nowhere: a local copy.
    Local,
    /// A daemon.
    Daemon(Endpoint),
    /// A `tern serve --once` started over ssh.
    Ssh(Connect),
}

/// Who dials whom when ssh started the far end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// This side connects to the remote tern.
    Forward,
    /// The remote tern connects to this side (`-z`).
    Reverse,
}

impl Via {
    /// The report's `via`.
    pub fn name(&self) -> &'static str {
        match self {
            Via::Local => "local",
            Via::Daemon(_) => "daemon",
            Via::Ssh(Connect::Forward) => "ssh",
            Via::Ssh(Connect::Reverse) => "ssh-reverse",
        }
    }
}

fn bps(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 { bytes as f64 * 8.0 / s } else { 0.0 }
}

/// Everything a report is made of.
pub struct ReportInput<'a> {
    pub command: &'static str,
    pub direction: &'static str,
    pub via: &'static str,
    pub stats: &'a TransferStats,
    pub started: Instant,
    pub setup: Duration,
    pub protect: Protect,
    pub checksum: Option<ChecksumAlg>,
    pub block_size: u64,
    pub fingerprint: Option<String>,
    pub advisor: Option<AdvisorUse>,
    pub started_from: Option<LastCopy>,
    pub paths: Vec<PathReport>,
    pub mptcp: Option<bool>,
}

impl Report {
    pub fn new(i: ReportInput<'_>) -> Report {
        let elapsed = i.started.elapsed();
        let net = i.stats.network_elapsed;
        let moved = i.stats.bytes.saturating_sub(i.stats.bytes_resumed);
        let streams = usize::from(i.stats.streams_used);
        let mut report = Report {
            command: i.command,
            direction: i.direction,
            via: i.via,
            exit_code: 0,
            bytes: i.stats.bytes,
            files: i.stats.files.len(),
            elapsed_s: elapsed.as_secs_f64(),
            setup_s: i.setup.as_secs_f64(),
            network_elapsed_s: net.as_secs_f64(),
            // Rates count what moved this time, not what a resume found.
            throughput_bps: bps(moved, elapsed),
            network_throughput_bps: bps(moved, net),
            streams,
            stream_count: StreamStory {
                peak: streams,
                at_end: streams,
            },
            // Streams that never joined are left out; a replacement on a
            // spare index is not.
            per_stream: i
                .stats
                .per_stream_bytes
                .iter()
                .enumerate()
                .filter(|&(k, &bytes)| k < usize::from(i.stats.streams_used).max(1) || bytes > 0)
                .map(|(stream, &bytes)| StreamReport {
                    stream,
                    bytes,
                    throughput_bps: bps(bytes, net),
                })
                .collect(),
            checksum: i.checksum.map(|alg| {
                i.stats
                    .files
                    .iter()
                    .map(|f| ChecksumReport {
                        path: f.path.clone(),
                        algorithm: alg.name(),
                        digest: hex(&f.digest),
                    })
                    .collect()
            }),
            blocks_retransmitted: i.stats.blocks_retransmitted,
            blocks_corrupt: i.stats.blocks_corrupt,
            blocks_copied: i.stats.blocks_copied,
            bytes_resumed: i.stats.bytes_resumed,
            files_skipped: i.stats.skipped.len(),
            bytes_skipped: i.stats.skipped.iter().map(|f| f.size).sum(),
            failed: i
                .stats
                .failed
                .iter()
                .map(|f| FailedEntry {
                    path: f.path.display(),
                    error: f.message.clone(),
                    // A local copy's two ends are both this tern.
                    seen_by: if f.by_peer && i.via != "local" {
                        "peer"
                    } else {
                        "local"
                    },
                })
                .collect(),
            compression: i.stats.compression.as_ref().map(CompressionReport::new),
            streams_stalled: i.stats.streams_stalled,
            streams_lost: i.stats.streams_lost,
            streams_replaced: i.stats.streams_replaced,
            protect: i.protect.name(),
            block_size: i.block_size,
            server_fingerprint: i.fingerprint,
            tuning: i.stats.tuning.clone(),
            advisor: i.advisor,
            started_from_last_copy: i.started_from,
            paths: i.paths,
            mptcp: i.mptcp,
        };
        report.stream_count = report.stream_story();
        report
    }

    /// The human summary, one line a string: the totals, then what a
    /// resume, skipping, failures, compression, lost streams, the streams
    /// and the tuning did. A run that moved nothing says so and no more; a
    /// local copy has no streams, protection or network to speak of.
    pub fn human_lines(&self) -> Vec<String> {
        let moved = self.bytes.saturating_sub(self.bytes_resumed);
        let mut out = Vec::new();
        if moved == 0 && self.files == 0 && self.command != "perf" {
            out.push(self.nothing_moved_line());
            out.extend(failed_lines(&self.failed));
            return out;
        }
        let what = if self.command == "perf" {
            human_bytes(self.bytes)
        } else {
            format!(
                "{} in {}",
                human_bytes(self.bytes),
                count(self.files, "file")
            )
        };
        let mut head = format!(
            "tern {}: {what}, {:.2} s, {}",
            self.command,
            self.elapsed_s,
            human_rate(self.throughput_bps)
        );
        if self.via != "local" {
            head.push_str(&format!(
                " (network {}), {}, protect {}, {} re-sent",
                human_rate(self.network_throughput_bps),
                self.stream_story().headline(),
                self.protect,
                count(self.blocks_retransmitted as usize, "block"),
            ));
        }
        out.push(head);
        if let Some(last) = &self.started_from_last_copy {
            out.push(format!(
                "  start: where the last copy to this daemon ended ({}, {})",
                human_rate(last.rate_bps as f64),
                count(usize::from(last.streams), "stream")
            ));
        }
        if self.bytes_resumed > 0 {
            out.push(format!(
                "  resumed: {} were already at the destination from an interrupted run",
                human_bytes(self.bytes_resumed)
            ));
        }
        if self.files_skipped > 0 {
            out.push(format!("  skipped: {}", self.skipped_words()));
        }
        if let Some(copied) = self.blocks_copied.filter(|&n| n > 0) {
            out.push(format!(
                "  endgame: {} still on their way on slower streams also sent on faster ones",
                count(copied as usize, "block")
            ));
        }
        out.extend(failed_lines(&self.failed));
        if self.via != "local" {
            out.extend(self.transport_lines());
        }
        out
    }

    /// The one line of a run that found nothing to move.
    fn nothing_moved_line(&self) -> String {
        let why = if self.files_skipped > 0 {
            self.skipped_words()
        } else if self.failed.is_empty() {
            "no files to copy".to_string()
        } else {
            "nothing could be copied".to_string()
        };
        format!(
            "tern {}: nothing to move, {why} ({:.2} s)",
            self.command, self.elapsed_s
        )
    }

    fn skipped_words(&self) -> String {
        format!(
            "{} ({}) already complete at the destination",
            count(self.files_skipped, "file"),
            human_bytes(self.bytes_skipped)
        )
    }

    /// How many streams the run had, told the same way in every line.
    pub fn stream_story(&self) -> StreamStory {
        let steps: Vec<u16> = self
            .tuning
            .iter()
            .flat_map(|t| t.stream_steps.iter().map(|s| s.streams))
            .collect();
        match (steps.iter().max(), steps.last()) {
            (Some(&peak), Some(&last)) if steps.iter().any(|&n| n != last) => StreamStory {
                peak: usize::from(peak),
                at_end: usize::from(last),
            },
            _ => StreamStory {
                peak: self.streams,
                at_end: self.streams,
            },
        }
    }

    /// Compression, lost and replaced streams, per-stream rates, tuning.
    fn transport_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(c) = self
            .compression
            .as_ref()
            .filter(|c| c.blocks_compressed > 0)
        {
            out.push(format!(
                "  compression: {} ({}), {} → {} on the wire ({:.0}%), {} blocks sent raw",
                c.codec,
                c.mode,
                human_bytes(c.bytes_raw),
                human_bytes(c.bytes_wire),
                c.ratio * 100.0,
                c.blocks_raw
            ));
        }
        if self.streams_lost > 0 || self.streams_replaced > 0 {
            out.push(format!(
                "  streams: {} lost ({} stalled), {} replaced",
                self.streams_lost, self.streams_stalled, self.streams_replaced
            ));
        }
        match self.mptcp {
            Some(true) => {
                out.push("  connections: MPTCP (the kernel's path manager chose the paths of their subflows)".into())
            }
            Some(false) => out.push(
                "  connections: plain TCP: the daemon takes no MPTCP (tern serve --mptcp)".into(),
            ),
            None => {}
        }
        out.extend(self.paths.iter().map(path_line));
        if self.streams > 1 {
            let parts: Vec<String> = self
                .per_stream
                .iter()
                .map(|s| format!("#{} {}", s.stream, human_rate(s.throughput_bps)))
                .collect();
            out.push(format!("  per stream: {}", parts.join(", ")));
        }
        if let Some(t) = &self.tuning {
            out.push(format!("  {}", tuning_line(t, self.direction)));
            if self.mptcp == Some(true) {
                // TCP_INFO of an MPTCP socket describes one subflow.
                out.push(
                    "  TCP_INFO sees one subflow of each MPTCP connection: no diagnosis of what limited the transfer."
                        .into(),
                );
            } else {
                out.push(format!("  {}", t.summary));
                for line in &t.sysctls {
                    out.push(format!("  to lift the cap: {line}"));
                }
            }
        }
        out
    }
}

/// How many streams a run had: at most, and at its end (the same when
/// the count never changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StreamStory {
    pub peak: usize,
    pub at_end: usize,
}

impl StreamStory {
    /// The words of a report's first line.
    pub fn headline(self) -> String {
        if self.peak == self.at_end {
            count(self.peak, "stream")
        } else {
            format!(
                "{} at most, {} at the end",
                count(self.peak, "stream"),
                self.at_end
            )
        }
    }
}

/// The entries that could not be copied, one line each after a count
/// (nothing when there are none).
pub fn failed_lines(failed: &[FailedEntry]) -> Vec<String> {
    if failed.is_empty() {
        return Vec::new();
    }
    let entries = if failed.len() == 1 {
        "entry"
    } else {
        "entries"
    };
    let mut out = vec![format!("  not copied: {} {entries}", failed.len())];
    for f in failed {
        let at = if f.seen_by == "peer" {
            " (at the peer)"
        } else {
            ""
        };
        out.push(format!("    {}: {}{at}", f.path, f.error));
    }
    out
}

/// How the transport was tuned, in one line: congestion control, buffer
/// sizing and peak, and how the stream count changed. The buffers named
/// are those of the way this end moved data (`direction` of the report):
/// a sender's receive buffers only ever hold the peer's confirmations, and
/// their small size next to the send buffers read as a starved receiver.
fn tuning_line(t: &tern_drs::Diagnosis, direction: &str) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let (send, receive) = (
        mib(t.send_buffers_peak_together_bytes),
        mib(t.receive_buffers_peak_together_bytes),
    );
    let buffers = match (direction, t.send_buffers_sized_bytes) {
        ("push" | "send", Some(sized)) => {
            format!("send buffers sized to {:.1} MiB in total", mib(sized))
        }
        ("push" | "send", None) => format!("send buffers up to {send:.1} MiB in total"),
        ("pull" | "receive", _) => format!("receive buffers up to {receive:.1} MiB in total"),
        _ => format!("buffers up to {send:.1} MiB send / {receive:.1} MiB receive in total"),
    };
    let mut line = format!(
        "tuning: congestion control {}, window {}, {buffers}",
        t.congestion_control, t.window,
    );
    if t.stream_steps.len() > 1 {
        let steps: Vec<String> = t
            .stream_steps
            .iter()
            .map(|s| match s.reason {
                tern_drs::StepReason::Start => format!("{} at the start", s.streams),
                tern_drs::StepReason::Settled => {
                    format!("{} at the start, where the last copy settled", s.streams)
                }
                reason => format!(
                    "{} from {:.1} s ({})",
                    s.streams,
                    s.at_ms as f64 / 1e3,
                    reason.words()
                ),
            })
            .collect();
        line.push_str(&format!("; streams: {}", steps.join(", ")));
    }
    line
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A push of one file over 4 streams with nothing remarkable.
    fn push() -> Report {
        Report {
            command: "cp",
            direction: "push",
            via: "daemon",
            exit_code: 0,
            bytes: 300 << 20,
            files: 1,
            elapsed_s: 1.0,
            setup_s: 0.01,
            network_elapsed_s: 0.9,
            throughput_bps: 2.5e9,
            network_throughput_bps: 2.8e9,
            streams: 4,
            stream_count: StreamStory { peak: 4, at_end: 4 },
            per_stream: Vec::new(),
            checksum: None,
            blocks_retransmitted: 1,
            blocks_corrupt: 0,
            blocks_copied: Some(0),
            bytes_resumed: 0,
            files_skipped: 0,
            bytes_skipped: 0,
            failed: Vec::new(),
            compression: None,
            streams_stalled: 0,
            streams_lost: 0,
            streams_replaced: 0,
            protect: "private",
            block_size: 1 << 20,
            server_fingerprint: None,
            tuning: None,
            advisor: None,
            started_from_last_copy: None,
            paths: Vec::new(),
            mptcp: None,
        }
    }

    fn step(at_ms: u64, streams: u16, reason: tern_drs::StepReason) -> tern_drs::StreamStep {
        tern_drs::StreamStep {
            at_ms,
            streams,
            reason,
        }
    }

    #[test]
    fn every_line_tells_the_same_stream_story() {
        use tern_drs::StepReason::*;
        let mut r = push();
        r.streams = 2;
        let estimate = tern_drs::StreamEstimator::default().estimate();
        let mut t = tern_drs::diagnose(vec![estimate], tern_drs::HostCaps::default(), &[]);
        t.set_stream_steps(vec![
            step(0, 1, Start),
            step(1200, 2, Limited),
            step(3200, 1, NoGain),
        ]);
        r.tuning = Some(t);
        r.stream_count = r.stream_story();
        assert_eq!(r.stream_count, StreamStory { peak: 2, at_end: 1 });
        let lines = r.human_lines().join("\n");
        assert!(lines.contains("2 streams at most, 1 at the end"), "{lines}");
        assert!(
            lines.contains("streams: 1 at the start, 2 from 1.2 s (windows or buffers held the streams back), 1 from 3.2 s (the last streams added did not raise the rate)"),
            "{lines}"
        );
        assert!(!lines.contains("no_gain"), "{lines}");
        assert!(!lines.contains("1 streams"), "{lines}");
    }

    #[test]
    fn summaries_pluralize_and_leave_out_what_means_nothing() {
        let mut r = push();
        r.streams = 1;
        r.stream_count = r.stream_story();
        let head = &r.human_lines()[0];
        assert!(head.contains("1 stream,"), "{head}");
        assert!(head.contains("1 block re-sent"), "{head}");
        assert!(head.contains("in 1 file,"), "{head}");
        // perf moves no files.
        r.command = "perf";
        let head = &r.human_lines()[0];
        assert!(!head.contains("file"), "{head}");
        // A local copy has no streams, protection or network.
        let mut local = push();
        local.via = "local";
        local.files = 3;
        let lines = local.human_lines().join("\n");
        assert!(lines.contains("in 3 files"), "{lines}");
        for absent in ["stream", "protect", "network", "re-sent"] {
            assert!(!lines.contains(absent), "{absent}: {lines}");
        }
        // A rerun that found everything in place: one line, no rates.
        let mut rerun = push();
        rerun.bytes = 0;
        rerun.files = 0;
        rerun.files_skipped = 1;
        rerun.bytes_skipped = 300 << 20;
        rerun.tuning = Some(tern_drs::diagnose(
            Vec::new(),
            tern_drs::HostCaps::default(),
            &[],
        ));
        let lines = rerun.human_lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("nothing to move, 1 file (300.00 MiB) already complete"),
            "{lines:?}"
        );
        assert!(!lines[0].contains("bit/s"), "{lines:?}");
    }

    #[test]
    fn the_tuning_line_names_the_buffers_of_the_way_data_went() {
        let mut t = tern_drs::diagnose(Vec::new(), tern_drs::HostCaps::default(), &[]);
        t.send_buffer_peak_bytes = 16 << 20;
        t.receive_buffer_peak_bytes = 2 << 20;
        // The line names what the buffers held at once, not the sum of
        // each stream's own peak.
        t.send_buffers_peak_together_bytes = 12 << 20;
        t.receive_buffers_peak_together_bytes = 1 << 20;
        for (direction, says, not) in [
            ("push", "send buffers up to 12.0 MiB in total", "receive"),
            ("send", "send buffers up to 12.0 MiB in total", "receive"),
            ("pull", "receive buffers up to 1.0 MiB in total", "send"),
            ("receive", "receive buffers up to 1.0 MiB in total", "send"),
        ] {
            let line = tuning_line(&t, direction);
            assert!(line.contains(says), "{direction}: {line}");
            assert!(!line.contains(not), "{direction}: {line}");
        }
        let local = tuning_line(&t, "local");
        assert!(local.contains("12.0 MiB send / 1.0 MiB receive"), "{local}");
    }

    #[test]
    fn the_tuning_line_and_the_sizing_action_give_one_total() {
        let mut t = tern_drs::diagnose(Vec::new(), tern_drs::HostCaps::default(), &[]);
        // The buffers held more at their peak than the session sized them
        // to at the end (the demo's "up to 10.8" beside "11.7 MiB in total").
        t.send_buffers_peak_together_bytes = 10_800 << 10;
        t.shared_sizing(tern_drs::SharedSizing {
            streams: 3,
            each: 4 << 20,
            bdp: 6 << 20,
            rtt_ms: 50.0,
        });
        let action = t.actions.last().expect("the sizing action").clone();
        assert!(action.contains("12.0 MiB in total"), "{action}");
        for direction in ["push", "send"] {
            let line = tuning_line(&t, direction);
            assert!(line.contains("12.0 MiB in total"), "{line} / {action}");
            assert!(!line.contains("10.5 MiB"), "{line}");
        }
    }
}
