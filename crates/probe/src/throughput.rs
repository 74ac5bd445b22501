//! Throughput through the tern engine: a short `tern perf` (generated data
//! sent to the daemon and discarded there), and a window × streams sweep of
//! them like IEPM-BW's, which finds the hand-tuned best for a path.
//!
//! These are the heavy measurements: a throughput test fills the path for
//! its duration, so the caller decides when one may run.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tern_drs::{Limit, WindowMode};
use tern_engine::client::{self, ClientOptions, Endpoint};
use tern_engine::transfer::Progress;

use crate::{Error, Result};

/// What a throughput test achieved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Throughput {
    /// Payload bits per second over the network phase (all streams up).
    pub bits_per_second: f64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Duration of the network phase, s.
    pub elapsed_s: f64,
    /// Streams used (the most at any time).
    pub streams: u16,
    /// Who sized the buffers: `auto`, `kernel`, or a fixed size in bytes.
    pub window: String,
    /// Blocks tern sent again after the receiver asked for them.
    pub blocks_retransmitted: u64,
    /// Congestion control of the data sockets, when known.
    pub congestion_control: Option<String>,
    /// What limited the streams (from `TCP_INFO`), when known.
    pub limit: Option<Limit>,
    /// The diagnosis in words, when known.
    pub summary: Option<String>,
    /// Sum over streams of the largest send buffer each had, bytes.
    pub send_buffer_peak_bytes: Option<u64>,
}

/// Runs a memory-to-memory test to `ep` for `duration` with `opts`.
pub async fn throughput(
    ep: &Endpoint,
    opts: &ClientOptions,
    duration: Duration,
) -> Result<Throughput> {
    if duration.is_zero() {
        return Err(Error::BadOptions("a throughput test of 0 s".into()));
    }
    let progress = Arc::new(Progress::default());
    let outcome = client::perf(ep, opts, None, Some(duration), false, progress).await?;
    let stats = &outcome.stats;
    let secs = stats.network_elapsed.as_secs_f64();
    let moved: u64 = stats.per_stream_bytes.iter().sum::<u64>().max(stats.bytes);
    let tuning = stats.tuning.as_ref();
    Ok(Throughput {
        bits_per_second: if secs > 0.0 {
            moved as f64 * 8.0 / secs
        } else {
            0.0
        },
        bytes: moved,
        elapsed_s: secs,
        streams: outcome.streams,
        window: tuning.map_or_else(|| opts.tuning.window_name(), |t| t.window.clone()),
        blocks_retransmitted: stats.blocks_retransmitted,
        congestion_control: tuning.map(|t| t.congestion_control.clone()),
        limit: tuning.map(|t| t.limit),
        summary: tuning.map(|t| t.summary.clone()),
        send_buffer_peak_bytes: tuning.map(|t| t.send_buffer_peak_bytes),
    })
}

/// One cell of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepCell {
    /// The window asked for (`auto`, `kernel` or bytes).
    pub window: String,
    /// Streams asked for.
    pub streams: u16,
    /// What it achieved, or why it failed.
    pub result: std::result::Result<Throughput, String>,
}

/// A window × streams sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    /// Every cell, windows outer, streams inner.
    pub cells: Vec<SweepCell>,
    /// Index of the fastest cell; `None` when every cell failed.
    pub best: Option<usize>,
}

impl Sweep {
    /// The fastest cell.
    pub fn best_cell(&self) -> Option<&SweepCell> {
        self.best.map(|i| &self.cells[i])
    }
}

/// Runs a throughput test of `duration` for every window and stream count,
/// one after another, with `base` for everything else. A cell that fails
/// is kept with its error; a daemon that cannot be reached at all fails the
/// sweep.
pub async fn sweep(
    ep: &Endpoint,
    base: &ClientOptions,
    windows: &[WindowMode],
    streams: &[u16],
    duration: Duration,
) -> Result<Sweep> {
    if windows.is_empty() || streams.is_empty() || streams.contains(&0) {
        return Err(Error::BadOptions(
            "a sweep needs at least one window and stream counts of 1 or more".into(),
        ));
    }
    let mut cells = Vec::new();
    for &window in windows {
        for &n in streams {
            let mut opts = base.clone();
            opts.tuning.window = window;
            opts.tuning.auto_streams = false;
            opts.streams = n;
            opts.max_streams = n;
            let result = match throughput(ep, &opts, duration).await {
                Ok(t) => Ok(t),
                Err(Error::Engine(e)) if e.kind() == tern_engine::ErrorKind::Connect => {
                    return Err(Error::Engine(e));
                }
                Err(e) => Err(e.to_string()),
            };
            cells.push(SweepCell {
                window: opts.tuning.window_name(),
                streams: n,
                result,
            });
        }
    }
    Ok(Sweep {
        best: best_of(&cells),
        cells,
    })
}

fn best_of(cells: &[SweepCell]) -> Option<usize> {
    cells
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.result.as_ref().ok().map(|t| (i, t.bits_per_second)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(bps: Option<f64>) -> SweepCell {
        SweepCell {
            window: "auto".into(),
            streams: 1,
            result: match bps {
                Some(b) => Ok(Throughput {
                    bits_per_second: b,
                    bytes: 0,
                    elapsed_s: 1.0,
                    streams: 1,
                    window: "auto".into(),
                    blocks_retransmitted: 0,
                    congestion_control: None,
                    limit: None,
                    summary: None,
                    send_buffer_peak_bytes: None,
                }),
                None => Err("failed".into()),
            },
        }
    }

    #[test]
    fn the_best_cell_is_the_fastest_that_succeeded() {
        let cells = vec![
            cell(Some(1e8)),
            cell(None),
            cell(Some(3e8)),
            cell(Some(2e8)),
        ];
        assert_eq!(best_of(&cells), Some(2));
        assert_eq!(best_of(&[cell(None), cell(None)]), None);
        assert_eq!(best_of(&[]), None);
    }
}
