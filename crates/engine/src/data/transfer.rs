//! The async driver: runs a sender or receiver session over one control
//! channel and N data streams.
//!
//! The sending side ([`send`]) and the receiving side ([`receive`]) each
//! run a handful of tasks around their sans-I/O session (see their module
//! docs); this module holds what both share: the framed control
//! connection, the transfer's parameters and report, and the bookkeeping
//! of a session's tasks and first failure.
//!
//! Memory is bounded by one block buffer per stream (two when compressing)
//! plus one digest buffer, whatever the file sizes. The session state sits
//! behind a `std` mutex held only for bookkeeping, never across I/O.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_proto::{ChecksumAlg, Compression, ControlMsg, SkipExisting};
use tokio::sync::Notify;

use crate::data::compress::CompressionStats;
use crate::data::tuning::Tuning;
use crate::integrity::BlockCheck;
use crate::{Error, Result};
use tern_session::FileOutcome;

mod receive;
mod send;

pub use crate::data::channel::{BoxStream, Control, ControlReader, ControlWriter, DataStream};
use crate::data::channel::{TaskGuard, Tasks};
pub use receive::run_receiver;
pub use send::run_sender;

/// Buffer size for reading files back for digests.
const DIGEST_CHUNK: usize = 1 << 20;

/// Control messages written at once, at most (announcements of a tree of
/// small files, their `FileDone`s).
const CONTROL_BATCH: usize = 256;

/// Files a receiver opens in one go off the async threads, at most.
const OPEN_BATCH: usize = 64;

/// How long the receiver waits for the sender's stream-end markers after
/// everything is done.
const LINGER: Duration = Duration::from_secs(5);

/// Settings of one transfer, agreed by both ends.
#[derive(Debug, Clone)]
pub struct TransferParams {
    /// Data streams the session starts with.
    pub streams: u16,
    /// Data streams the session may grow to (at least `streams`).
    pub max_streams: u16,
    /// How the data sockets are tuned.
    pub tuning: Tuning,
    /// Block payload size.
    pub block_size: u32,
    /// Whole-file digest algorithm.
    pub checksum: ChecksumAlg,
    /// Per-block check.
    pub block_check: BlockCheck,
    /// For perf streams of unknown size: when to stop.
    pub deadline: Option<Instant>,
    /// Files announced ahead, at most.
    pub max_files_in_flight: usize,
    /// Repair rounds per file.
    pub max_repair_rounds: u32,
    /// The receiver may resume partial files (both ends have `RESUME`).
    pub resume: bool,
    /// This end moves payload no faster than this (sends when sending,
    /// reads when receiving); `None` for no limit.
    pub pace: Option<Arc<crate::data::pace::Pace>>,
    /// What the sender does with block payloads.
    pub compression: Compression,
    /// The receiver accepts compressed blocks (both ends have `COMPRESS`).
    pub accept_compressed: bool,
    /// When the receiver keeps a file already at the destination.
    pub skip_existing: SkipExisting,
    /// Give up a data stream stalled this long (and replace it when there
    /// is a spare index); `None`: never.
    pub stall_timeout: Option<Duration>,
    /// Of `max_streams`, the highest indices kept to replace streams.
    pub spare_streams: u16,
    /// Both ends have `ENTRIES`: any names, links, pipes and directory
    /// times, and per-entry failures that leave the rest of a tree going.
    pub entries: bool,
    /// Both ends have `PATH_RATE` and this end is the client: as the
    /// sender, it tells the receiver `tuning.known_rate_bps` (`PathRate`).
    pub tell_path_rate: bool,
    /// Both ends have `PATH_RATE` and this end is the server: as the
    /// receiver, it takes a `PathRate` from the client.
    pub take_path_rate: bool,
}

impl TransferParams {
    /// Parameters for `streams` fixed streams and the defaults otherwise.
    pub fn new(streams: u16, block_size: u32, checksum: ChecksumAlg) -> TransferParams {
        TransferParams {
            streams,
            max_streams: streams,
            tuning: Tuning::default(),
            block_size,
            checksum,
            block_check: BlockCheck::Xxh3,
            deadline: None,
            max_files_in_flight: files_in_flight(open_files_limit()),
            max_repair_rounds: tern_session::DEFAULT_MAX_REPAIR_ROUNDS,
            resume: true,
            pace: None,
            compression: Compression::None,
            accept_compressed: true,
            skip_existing: SkipExisting::Never,
            stall_timeout: None,
            spare_streams: 0,
            entries: true,
            tell_path_rate: false,
            take_path_rate: false,
        }
    }

    /// Streams the session may grow to (its indices without the spares).
    fn growth_cap(&self) -> u16 {
        let max = self.max_streams.max(self.streams);
        max.saturating_sub(self.spare_streams).max(self.streams)
    }

    /// Puts what both ends agreed (the transfer options) into these
    /// parameters.
    pub fn apply_agreed(&mut self, agreed: &tern_session::Agreed) {
        self.compression = agreed.compression();
        self.accept_compressed = agreed.accept_compressed();
        self.skip_existing = agreed.skip_existing();
        self.stall_timeout = agreed.stall_timeout();
        self.spare_streams = agreed.spare_streams();
    }

    /// Keeps the files in flight within what the peer can hold: without
    /// [`Features::MANY_FILES`](tern_proto::Features::MANY_FILES) agreed,
    /// [`FILES_IN_FLIGHT`](tern_proto::FILES_IN_FLIGHT).
    pub fn limit_files_in_flight(&mut self, agreed: tern_proto::Features) {
        if !agreed.contains(tern_proto::Features::MANY_FILES) {
            self.max_files_in_flight = self.max_files_in_flight.min(tern_proto::FILES_IN_FLIGHT);
        }
    }

    /// Applies the user's choices to a local copy (both ends in this
    /// process, no network: `auto` compression would only cost CPU).
    pub fn apply_local(&mut self, choices: &tern_session::Choices) {
        self.compression = match choices.compression {
            tern_proto::Compression::Auto => tern_proto::Compression::None,
            c => c,
        };
        self.skip_existing = choices.skip_existing;
    }
}

/// Files a sender keeps in flight with `open_files` descriptors allowed
/// (the soft `RLIMIT_NOFILE`, raised to the hard limit at start): up to
/// [`MANY_FILES_IN_FLIGHT`](tern_proto::MANY_FILES_IN_FLIGHT), which many
/// small files over a WAN need (10 000 files of 16 KiB over 1 Gbit/s ×
/// 50 ms took 2.5 s with 1024 in flight, 2.26 s with 4096), but never so
/// many that their descriptors (up to four each: the file, and at a
/// receiving end its directory and journal; a local copy is both ends)
/// would run the process out. The peer's limit counts too
/// ([`TransferParams::limit_files_in_flight`]).
fn files_in_flight(open_files: u64) -> usize {
    let most = tern_proto::MANY_FILES_IN_FLIGHT as u64;
    (open_files.saturating_sub(128) / 4).clamp(16, most) as usize
}

/// The soft `RLIMIT_NOFILE` of this process.
fn open_files_limit() -> u64 {
    rlimit::Resource::NOFILE
        .get()
        .map_or(1024, |(soft, _)| soft)
}

/// Descriptors this process has open now (`None` when it cannot tell).
fn open_descriptors() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|dir| dir.count() as u64)
}

/// The features this end offers in its `Hello`: all it implements, less
/// [`Features::MANY_FILES`](tern_proto::Features::MANY_FILES) when the
/// descriptors left under its limit, with what this process has open now
/// (a daemon's other sessions), cannot hold that many files. Two sessions
/// that start at the same moment may both be offered it; the limit is
/// then what fails a file's open, as before.
pub fn offered_features() -> tern_proto::Features {
    let all = tern_proto::Features::ALL;
    let room = open_descriptors().map(|open| open_files_limit().saturating_sub(open));
    if room.is_some_and(|room| files_in_flight(room) >= tern_proto::MANY_FILES_IN_FLIGHT) {
        all
    } else {
        tern_proto::Features(all.0 & !tern_proto::Features::MANY_FILES.0)
    }
}

/// Live counters for progress display, updated by the driver.
#[derive(Debug, Default)]
pub struct Progress {
    /// Payload bytes sent or written so far.
    pub bytes: AtomicU64,
    /// Total payload bytes expected (0 when unknown).
    pub total: AtomicU64,
    /// Files completed.
    pub files_done: AtomicU64,
    /// Bytes already at the destination from an earlier session, not sent
    /// again (what a failed run's report says it resumed).
    pub resumed: AtomicU64,
    /// Payload bytes per stream index (repairs included), when asked for
    /// ([`Progress::per_stream`]): a live view's per-stream rates.
    per_stream: Box<[AtomicU64]>,
}

impl Progress {
    /// Progress that also counts each of up to `streams` streams.
    pub fn per_stream(streams: u16) -> Progress {
        Progress {
            per_stream: (0..streams).map(|_| AtomicU64::new(0)).collect(),
            ..Progress::default()
        }
    }

    /// Stream `k` moved `bytes` more.
    pub fn stream_moved(&self, k: usize, bytes: u64) {
        if let Some(c) = self.per_stream.get(k) {
            c.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Bytes stream `k` moved so far (0 when not counted).
    pub fn stream_bytes(&self, k: usize) -> u64 {
        self.per_stream
            .get(k)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// A stream lost or given up during a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostStream {
    /// Its index.
    pub index: u16,
    /// How long after the transfer started.
    pub after: Duration,
}

/// What a finished transfer did.
#[derive(Debug, Clone)]
pub struct TransferStats {
    /// Payload bytes delivered: the sizes of the files completed (repairs
    /// are in `per_stream_bytes`, not here).
    pub bytes: u64,
    /// Files verified and in place.
    pub files: Vec<FileOutcome>,
    /// Payload bytes per stream, as this side counted them.
    pub per_stream_bytes: Vec<u64>,
    /// Streams that joined the session.
    pub streams_used: u16,
    /// From the start of the session (all streams up) to its end.
    pub network_elapsed: Duration,
    /// Blocks sent again after the receiver asked for them.
    pub blocks_retransmitted: u64,
    /// Blocks whose check failed on arrival (receiver side).
    pub blocks_corrupt: u64,
    /// Sender side: blocks sent a second time at the end, on a faster
    /// stream than the one still carrying them (the endgame).
    pub blocks_copied: Option<u64>,
    /// Bytes that were already at the destination from an earlier session
    /// (resumed partial files), not sent again.
    pub bytes_resumed: u64,
    /// Files not sent because the destination already had them.
    pub skipped: Vec<FileOutcome>,
    /// Entries that could not be copied (the rest of the tree was).
    pub failed: Vec<tern_session::EntryFailure>,
    /// What compression did (this end's count).
    pub compression: Option<CompressionStats>,
    /// Streams this end gave up because they stalled.
    pub streams_stalled: u16,
    /// Streams that ended without their end marker, or were given up.
    pub streams_lost: u16,
    /// Streams that joined to replace one given up (on spare indices).
    pub streams_replaced: u16,
    /// Which streams were lost or given up, and when.
    pub lost_streams: Vec<LostStream>,
    /// What limited the streams, from `TCP_INFO` (TCP streams only).
    pub tuning: Option<tern_drs::Diagnosis>,
}

impl TransferStats {
    fn new(
        files: &[FileOutcome],
        per_stream_bytes: &[u64],
        streams_used: u16,
        network_elapsed: Duration,
        blocks_retransmitted: u64,
        blocks_corrupt: u64,
        tuning: Option<tern_drs::Diagnosis>,
    ) -> TransferStats {
        TransferStats {
            bytes: files.iter().map(|f| f.size).sum(),
            files: files.to_vec(),
            per_stream_bytes: per_stream_bytes.to_vec(),
            streams_used,
            network_elapsed,
            blocks_retransmitted,
            blocks_corrupt,
            blocks_copied: None,
            bytes_resumed: 0,
            skipped: Vec::new(),
            failed: Vec::new(),
            compression: None,
            streams_stalled: 0,
            streams_lost: 0,
            streams_replaced: 0,
            lost_streams: Vec::new(),
            tuning,
        }
    }

    /// Adds what both sides count beyond the session's basics.
    fn with(
        mut self,
        s: &StreamCounts,
        bytes_resumed: u64,
        skipped: &[FileOutcome],
        failed: &[tern_session::EntryFailure],
        compression: CompressionStats,
    ) -> TransferStats {
        self.failed = failed.to_vec();
        self.streams_stalled = s.stalled.load(Ordering::Relaxed);
        self.streams_lost = s.lost.load(Ordering::Relaxed);
        self.streams_replaced = s.replaced.load(Ordering::Relaxed);
        self.lost_streams = s.lost_at.lock().expect("lost streams").clone();
        self.bytes_resumed = bytes_resumed;
        self.skipped = skipped.to_vec();
        self.compression = Some(compression);
        self
    }
}

/// What happened to a session's streams, for the report.
#[derive(Debug)]
struct StreamCounts {
    started: Instant,
    joined: AtomicU16,
    stalled: AtomicU16,
    lost: AtomicU16,
    replaced: AtomicU16,
    /// Which streams were lost, and when.
    lost_at: Mutex<Vec<LostStream>>,
    /// Told of every stream lost (a client's paths).
    watch: Option<Arc<dyn crate::data::tuning::PathWatch>>,
}

impl Default for StreamCounts {
    fn default() -> StreamCounts {
        StreamCounts {
            started: Instant::now(),
            joined: AtomicU16::new(0),
            stalled: AtomicU16::new(0),
            lost: AtomicU16::new(0),
            replaced: AtomicU16::new(0),
            lost_at: Mutex::new(Vec::new()),
            watch: None,
        }
    }
}

impl StreamCounts {
    /// Stream `k` ended without its end marker, or was given up.
    fn watched(watch: Option<Arc<dyn crate::data::tuning::PathWatch>>) -> StreamCounts {
        StreamCounts {
            watch,
            ..StreamCounts::default()
        }
    }

    fn lose(&self, k: usize) {
        if let Some(watch) = &self.watch {
            watch.lost(k as u16);
        }
        self.lost.fetch_add(1, Ordering::Relaxed);
        self.lost_at.lock().expect("lost streams").push(LostStream {
            index: k as u16,
            after: self.started.elapsed(),
        });
    }

    /// Stream `k` joined; indices from `cap` on are replacements.
    fn joined(&self, k: usize, cap: u16) {
        self.joined.fetch_add(1, Ordering::Relaxed);
        if k >= usize::from(cap) {
            self.replaced.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// First failure of a transfer, shared by its tasks.
#[derive(Default)]
struct Failure {
    error: Mutex<Option<Error>>,
    set: AtomicBool,
}

impl Failure {
    fn fail(&self, e: impl Into<Error>, wake: &Notify) {
        let e = e.into();
        let mut slot = self.error.lock().expect("failure lock");
        *slot = Some(match slot.take() {
            Some(old) => old.more_interesting(e),
            None => e,
        });
        self.set.store(true, Ordering::SeqCst);
        wake.notify_waiters();
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    fn take(&self) -> Option<Error> {
        self.error.lock().expect("failure lock").take()
    }

    /// Whether our peer should be told: not when the peer is the cause.
    fn tell_peer(&self) -> Option<ControlMsg> {
        let slot = self.error.lock().expect("failure lock");
        match slot.as_ref()? {
            Error::Peer { .. } | Error::PeerGone(_) => None,
            e => Some(ControlMsg::Error {
                code: e.wire_code(),
                message: e.to_string(),
                file_id: None,
            }),
        }
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Error::Protocol(format!("I/O task failed: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_in_flight_stay_within_the_open_files_limit() {
        assert_eq!(files_in_flight(1 << 20), 4096);
        assert_eq!(files_in_flight(4096), 992);
        // A host whose hard limit is 1024: 224 files, 896 descriptors.
        assert_eq!(files_in_flight(1024), 224);
        assert!(files_in_flight(1024) * 4 + 128 <= 1024);
        assert_eq!(files_in_flight(100), 16, "a floor to make progress");
    }

    #[test]
    fn many_files_in_flight_only_when_both_ends_can_hold_them() {
        let mut p = TransferParams::new(1, 1 << 20, ChecksumAlg::Xxh3);
        p.max_files_in_flight = tern_proto::MANY_FILES_IN_FLIGHT;
        p.limit_files_in_flight(tern_proto::Features::ALL);
        assert_eq!(p.max_files_in_flight, tern_proto::MANY_FILES_IN_FLIGHT);
        let without =
            tern_proto::Features(tern_proto::Features::ALL.0 & !tern_proto::Features::MANY_FILES.0);
        p.limit_files_in_flight(without);
        assert_eq!(p.max_files_in_flight, tern_proto::FILES_IN_FLIGHT);
        // A lower limit of this end's own stays.
        p.max_files_in_flight = 300;
        p.limit_files_in_flight(tern_proto::Features::ALL);
        assert_eq!(p.max_files_in_flight, 300);
    }
}
