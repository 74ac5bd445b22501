//! The `--json` object of a copy that failed before it could print its
//! report: scripts still get one object, with the exit code and how far
//! the copy got.

use std::time::Instant;

use serde::Serialize;
use tern_engine::transfer::Progress;

/// The `--json` object of a copy that failed before it could report:
/// why, with the exit code, and how far it got.
#[derive(Debug, Serialize)]
pub struct FailureReport {
    pub command: &'static str,
    /// The message printed on stderr.
    pub error: String,
    /// The code the process exits with (the table of `tern --help`).
    pub exit_code: u8,
    /// Payload bytes moved before the failure (skipped files counted as
    /// moved, as the progress display does).
    pub bytes: u64,
    /// Files completed before the failure.
    pub files: u64,
    /// Bytes that were already at the destination from an earlier run.
    pub bytes_resumed: u64,
    pub elapsed_s: f64,
}

impl FailureReport {
    /// The report of a copy that failed with `error` (exit `exit_code`),
    /// from its live counters.
    pub fn new(
        error: String,
        exit_code: u8,
        progress: &Progress,
        started: Instant,
    ) -> FailureReport {
        use std::sync::atomic::Ordering::Relaxed;
        FailureReport {
            command: "cp",
            error,
            exit_code,
            bytes: progress.bytes.load(Relaxed),
            files: progress.files_done.load(Relaxed),
            bytes_resumed: progress.resumed.load(Relaxed),
            elapsed_s: started.elapsed().as_secs_f64(),
        }
    }
}
