//! The sending side of the driver.
//!
//! Tasks: one control reader, one control writer, one digest worker (the
//! whole-file digests, folded from the blocks read for sending), one worker per
//! data stream, and with a stall timeout a watchdog that gives up stalled
//! streams and asks for replacements. A worker asks the session for the
//! next block only when its previous write completed, i.e. when its
//! connection could take more: that pull is what makes faster streams carry
//! more. It reads the block, compresses it when the policy says so, and
//! writes it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_proto::data::HEADER_LEN;
use tern_proto::{BlockFlags, BlockHeader, Codec, ControlMsg, DataFrame, FileMeta};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use super::{
    BoxStream, ControlReader, ControlWriter, Failure, Progress, StreamCounts, TaskGuard, Tasks,
    TransferParams, TransferStats,
};
use crate::data::compress::{self, BlockCompressor, Policy};
use crate::data::fold::Folds;
use crate::data::stall::Watch;
use crate::data::supply::{FirstStreams, Indices, Want, supply_streams};
use crate::data::tuning::{Joined, Sampler, StreamSupply};
use crate::integrity::BlockCheck;
use crate::store::fsio::{BlockRead, Source, SourceItem};
use crate::{Error, Result};
use tern_session::{BlockTask, SenderConfig, SenderSession};

mod digests;
mod endgame;
mod streams;
use digests::sender_digests;
use endgame::endgame_feed;
use streams::{first_joins, sender_changes, watchdog};

/// How long a failed session's control writer may take to tell the peer.
const FAILURE_WORD: Duration = Duration::from_secs(2);

/// How long a worker still writing when the session completed may take to
/// end its stream before it is dropped.
const END_GRACE: Duration = Duration::from_millis(50);

/// How long a block read for sending waits for the blocks before it to be
/// folded into the file's digest before it is copied aside instead.
const FOLD_WAIT: Duration = Duration::from_millis(20);

struct SendShared {
    session: Mutex<SenderSession>,
    /// Wakes every task: new blocks, control output, completion, failure.
    wake: Notify,
    /// Wakes the control writer only: a worker queued control output. Kept
    /// apart from `wake` so a worker never wakes itself (or its peers) into
    /// a busy loop.
    control_wake: Notify,
    failure: Failure,
    source: Arc<dyn Source>,
    items: HashMap<u32, SourceItem>,
    /// Open readers of files in flight.
    readers: Mutex<HashMap<u32, Arc<dyn BlockRead>>>,
    check: BlockCheck,
    progress: Arc<Progress>,
    /// Stream workers, including those of streams that joined later.
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Streams from this index on stop taking blocks and end.
    retire_from: AtomicUsize,
    block_size: u32,
    streams: StreamCounts,
    /// Stream indices from here on replace streams given up.
    growth_cap: u16,
    pace: Option<Arc<crate::data::pace::Pace>>,
    compress: Policy,
    /// Watches the streams for stalls (with a stall timeout).
    watch: Option<Arc<Watch>>,
    /// Asks the stream supply for growth and replacements; `None` when
    /// streams are not replaced.
    wanted: Option<mpsc::UnboundedSender<Want>>,
    /// Whole-file digests folded from the blocks read for sending; `None`
    /// when digests are read apart (a skip policy needs them before any
    /// block goes) or not made at all.
    folds: Option<Arc<Folds>>,
    /// The first streams are still joining: one lost meanwhile is no
    /// session's end (the others are on their way).
    first_joining: std::sync::atomic::AtomicBool,
}

impl SendShared {
    /// Returns once the session is complete or has failed.
    async fn ended(&self) {
        loop {
            let notified = self.wake.notified();
            if self.failure.is_set() || self.session.lock().expect("session").is_complete() {
                return;
            }
            notified.await;
        }
    }

    /// Returns once the session is complete.
    async fn completed(&self) {
        loop {
            let notified = self.wake.notified();
            if self.session.lock().expect("session").is_complete() {
                return;
            }
            notified.await;
        }
    }

    /// Stream `k` joined: it may take blocks now.
    fn start_worker(self: &Arc<Self>, tasks: &Tasks, sampler: &Sampler, j: Joined) {
        let k = usize::from(j.index);
        let socket = j.probe.as_ref().and_then(|p| p.try_clone().ok());
        sampler.add(j.index, j.probe);
        let stream = match &self.watch {
            Some(w) => w.watch(k, j.stream, socket),
            None => j.stream,
        };
        self.session.lock().expect("session").stream_joined(k);
        self.streams.joined(k, self.growth_cap);
        let handle = tasks.spawn(stream_worker(self.clone(), k, stream, self.block_size));
        if let Some(w) = &self.watch {
            w.owned_by(k, handle.abort_handle());
        }
        self.workers.lock().expect("workers").push(handle);
        self.wake.notify_waiters();
    }

    fn reader(&self, file_id: u32) -> Result<Arc<dyn BlockRead>> {
        if let Some(r) = self.readers.lock().expect("readers").get(&file_id) {
            return Ok(r.clone());
        }
        let item = self
            .items
            .get(&file_id)
            .ok_or_else(|| Error::Protocol(format!("no source for file {file_id}")))?;
        let r = self.source.open(item)?;
        self.readers
            .lock()
            .expect("readers")
            .insert(file_id, r.clone());
        Ok(r)
    }

    /// A file could not be read: with `ENTRIES` it is reported and the
    /// session goes on without it (true); otherwise the session fails.
    fn give_up_file(&self, file_id: u32, e: Error) -> bool {
        let given_up = {
            let mut session = self.session.lock().expect("session");
            e.for_entry(session.reports_entries())
                .map(|problem| session.file_failed(file_id, problem))
        };
        self.readers.lock().expect("readers").remove(&file_id);
        if let Some(folds) = &self.folds {
            // Blocks of it already read are ignored: they are not held.
            folds.forget(file_id);
        }
        match given_up {
            Ok(()) => {
                self.control_wake.notify_one();
                self.wake.notify_waiters();
                true
            }
            Err(e) => {
                self.failure.fail(e, &self.wake);
                false
            }
        }
    }

    /// Stream `k` failed or stalled: it gets no more blocks, what it
    /// carried is repaired, and a replacement is asked for when streams
    /// are replaced.
    fn lose_stream(&self, k: usize) {
        if let Some(w) = &self.watch {
            w.forget(k);
        }
        let mut s = self.session.lock().expect("session");
        if s.is_complete() {
            // Over: the peer closed a stream still writing a copy.
            return;
        }
        self.streams.lose(k);
        let lost = match &self.wanted {
            Some(wanted) if !self.failure.is_set() => {
                s.stream_dropped(k);
                let _ = wanted.send(Want::Replace);
                Ok(())
            }
            _ if self.first_joining.load(Ordering::SeqCst) => {
                s.stream_dropped(k);
                Ok(())
            }
            _ => s.stream_lost(k),
        };
        drop(s);
        self.wake.notify_waiters();
        if let Err(e) = lost {
            self.failure.fail(e, &self.wake);
        }
    }
}

/// Runs the sending side of a session until the receiver confirmed
/// everything, or the first failure. `streams` are those it starts with,
/// joined or still joining (files are announced meanwhile); `supply` is
/// where more come from when the stream count grows or a stream is
/// replaced.
pub async fn run_sender(
    control: super::Control,
    streams: impl Into<FirstStreams>,
    supply: StreamSupply,
    source: Arc<dyn Source>,
    params: TransferParams,
    progress: Arc<Progress>,
) -> Result<TransferStats> {
    let mut started = Instant::now();
    let streams = streams.into();
    let src = source.clone();
    let listed = tokio::task::spawn_blocking(move || src.list())
        .await
        .map_err(|e| Error::Protocol(format!("listing task failed: {e}")))?;
    let (ctrl_rd, mut ctrl_wr) = control.split();
    let items = match listed {
        Ok(items) => items,
        Err(e) => {
            let _ = ctrl_wr
                .send(&ControlMsg::Error {
                    code: e.wire_code(),
                    message: e.to_string(),
                    file_id: None,
                })
                .await;
            return Err(e);
        }
    };
    let max_streams = params.max_streams.max(params.streams);
    let mut session = SenderSession::new(SenderConfig {
        streams: max_streams,
        block_size: params.block_size,
        max_files_in_flight: params.max_files_in_flight,
        max_repair_rounds: params.max_repair_rounds,
        deadline: params.deadline,
        await_checks: params.skip_existing != tern_proto::SkipExisting::Never,
        entries: params.entries,
    });
    session.expect_joined(0);
    let mut by_id = HashMap::new();
    let mut total = 0u64;
    for item in items {
        if let tern_session::SendEntry::File(meta) = &item.entry {
            if meta.size != FileMeta::UNKNOWN_SIZE {
                total += meta.size;
            }
        }
        if let Some(id) = session.push(item.entry.clone()) {
            by_id.insert(id, item);
        }
    }
    session.finish_listing();
    progress.total.store(total, Ordering::Relaxed);
    let growth_cap = params.growth_cap();
    let fixed = matches!(supply, StreamSupply::Fixed);
    let watch = params.stall_timeout.map(|t| Arc::new(Watch::new(t)));
    let (wanted_tx, wanted_rx) = mpsc::unbounded_channel();
    let replaces = watch.is_some() && !fixed && growth_cap < max_streams;
    let fold = source.digests();
    let shared = Arc::new(SendShared {
        session: Mutex::new(session),
        wake: Notify::new(),
        control_wake: Notify::new(),
        failure: Failure::default(),
        source,
        items: by_id,
        readers: Mutex::new(HashMap::new()),
        check: params.block_check.clone(),
        progress,
        workers: Mutex::new(Vec::new()),
        retire_from: AtomicUsize::new(usize::MAX),
        block_size: params.block_size,
        streams: StreamCounts::watched(supply.watch()),
        growth_cap,
        pace: params.pace.clone(),
        compress: Policy::new(params.compression),
        watch: watch.clone(),
        wanted: replaces.then(|| wanted_tx.clone()),
        folds: fold.then(|| Arc::new(Folds::new(params.checksum))),
        first_joining: std::sync::atomic::AtomicBool::new(matches!(
            streams,
            FirstStreams::Joining(_)
        )),
    });

    let (digest_tx, digest_rx) = mpsc::unbounded_channel();
    let guard = TaskGuard::default();
    let tasks = guard.0.clone();
    let (changes_tx, changes_rx) = mpsc::unbounded_channel();
    let sampler = Arc::new(Sampler::start(
        &tasks,
        &params.tuning,
        tern_drs::Direction::Send,
        params.streams,
        growth_cap,
        max_streams,
        (!fixed).then_some(changes_tx),
    ));
    let mut joining = None;
    match streams {
        FirstStreams::Joined(streams) => {
            for j in streams {
                shared.start_worker(&tasks, &sampler, j);
            }
        }
        FirstStreams::Joining(pending) => joining = Some(pending),
    }
    tasks.spawn(sender_digests(shared.clone(), digest_rx, params.checksum));
    tasks.spawn(sender_changes(shared.clone(), changes_rx, wanted_tx));
    let reader = tasks.spawn(sender_control_reader(shared.clone(), ctrl_rd));
    if let (true, Some(bps)) = (params.tell_path_rate, params.tuning.known_rate_bps) {
        // Before the first announcement (PROTOCOL.md §5.2).
        if let Err(e) = ctrl_wr.send(&ControlMsg::PathRate { bps }).await {
            shared.failure.fail(e, &shared.wake);
        }
    }
    let mut writer = tasks.spawn(sender_control_writer(shared.clone(), ctrl_wr, digest_tx));
    tasks.spawn(endgame_feed(shared.clone(), sampler.clone()));
    if let Some(pending) = joining {
        // The control tasks announce files while the streams join; the
        // transfer's clock starts once they all have, as it did when the
        // opening waited for them.
        let all_joined = pending.all_joined();
        if first_joins(&shared, &tasks, &sampler, pending).await {
            started = all_joined.get().copied().unwrap_or(started);
        }
    }
    // Only now: streams asked for beyond the first (another path's, from
    // the start) would be refused by a server still waiting for those.
    let (sh, tk, sa) = (shared.clone(), tasks.clone(), sampler.clone());
    let ask = shared.clone();
    tasks.spawn(supply_streams(
        tasks.clone(),
        supply,
        Indices::new(params.streams, growth_cap, max_streams),
        wanted_rx,
        move |total| {
            ask.session.lock().expect("session").request_streams(total);
            ask.control_wake.notify_one();
        },
        move |j| sh.start_worker(&tk, &sa, j),
    ));
    // Only now: a session still joining its first streams has none live.
    if let Some(w) = watch {
        tasks.spawn(watchdog(shared.clone(), w));
    }
    // Once everything arrived, a worker still writing pushes a copy nobody
    // needs: the workers get END_GRACE together to end their streams.
    let mut ends_by = None;
    loop {
        let next = shared.workers.lock().expect("workers").pop();
        let Some(mut worker) = next else {
            break;
        };
        if ends_by.is_none() {
            tokio::select! {
                _ = &mut worker => continue,
                () = shared.completed() => {
                    ends_by = Some(tokio::time::Instant::now() + END_GRACE);
                }
            }
        }
        let deadline = ends_by.expect("set once the session completed");
        if tokio::time::timeout_at(deadline, &mut worker)
            .await
            .is_err()
        {
            worker.abort();
        }
    }
    // Its last word is a failure; a peer that reads no control (a daemon
    // still waiting for streams that will not join) gets no more time.
    let word = shared.failure.is_set().then_some(FAILURE_WORD);
    if tokio::time::timeout(word.unwrap_or(Duration::MAX), &mut writer)
        .await
        .is_err()
    {
        writer.abort();
        let _ = writer.await;
    }
    if shared.failure.is_set() {
        reader.abort();
    }
    let _ = reader.await;
    let tuning = sampler.finish();
    drop(guard);
    if let Some(e) = shared.failure.take() {
        return Err(e);
    }
    let session = shared.session.lock().expect("session");
    let stats = TransferStats::new(
        session.finished(),
        session.stream_bytes(),
        shared.streams.joined.load(Ordering::Relaxed),
        started.elapsed(),
        session.blocks_retransmitted(),
        0,
        tuning,
    )
    .with(
        &shared.streams,
        session.bytes_resumed(),
        session.skipped(),
        session.failed(),
        shared.compress.counters.report(params.compression),
    );
    Ok(TransferStats {
        blocks_copied: Some(session.blocks_copied()),
        ..stats
    })
}

async fn sender_control_reader(shared: Arc<SendShared>, mut rd: ControlReader) {
    loop {
        let msg = match rd.recv().await {
            Ok(msg) => msg,
            Err(e) => return shared.failure.fail(e, &shared.wake),
        };
        let done_file = match &msg {
            ControlMsg::FileDone { file_id, .. } | ControlMsg::FileCheck { file_id, .. } => {
                Some(*file_id)
            }
            _ => None,
        };
        let (complete, skipped) = {
            let mut s = shared.session.lock().expect("session");
            let before = s.skipped().len();
            if let Err(e) = s.handle_control(msg) {
                drop(s);
                return shared.failure.fail(e, &shared.wake);
            }
            let skipped: u64 = s.skipped()[before..].iter().map(|f| f.size).sum();
            let resumed = s.bytes_resumed();
            shared.progress.resumed.store(resumed, Ordering::Relaxed);
            (s.is_complete(), skipped)
        };
        if let Some(id) = done_file {
            let gone = shared
                .session
                .lock()
                .expect("session")
                .file_meta(id)
                .is_none();
            if gone {
                shared.readers.lock().expect("readers").remove(&id);
                shared.compress.forget(id);
                shared.progress.files_done.fetch_add(1, Ordering::Relaxed);
            }
        }
        // A skipped file counts as moved for the progress display.
        shared.progress.bytes.fetch_add(skipped, Ordering::Relaxed);
        shared.wake.notify_waiters();
        if complete {
            return;
        }
    }
}

async fn sender_control_writer(
    shared: Arc<SendShared>,
    mut wr: ControlWriter,
    digest_tx: mpsc::UnboundedSender<(u32, u64)>,
) {
    loop {
        let notified = shared.wake.notified();
        if shared.failure.is_set() {
            if let Some(msg) = shared.failure.tell_peer() {
                let _ = wr.send(&msg).await;
            }
            return;
        }
        let (out, complete) = {
            let mut s = shared.session.lock().expect("session");
            (
                std::iter::from_fn(|| s.poll_control()).collect::<Vec<_>>(),
                s.is_complete(),
            )
        };
        for msg in &out {
            if let ControlMsg::FileAnnounce(meta) = msg {
                let _ = digest_tx.send((meta.file_id, meta.size));
            }
        }
        for batch in out.chunks(super::CONTROL_BATCH) {
            if let Err(e) = wr.send_all(batch).await {
                return shared.failure.fail(e, &shared.wake);
            }
        }
        if complete {
            return;
        }
        tokio::select! {
            () = notified => {}
            () = shared.control_wake.notified() => {}
        }
    }
}

/// A worker's buffers: the raw block (after room for its header) and,
/// when compressing, the compressed payload (after room for its header).
struct Buffers {
    raw: Vec<u8>,
    packed: Vec<u8>,
    compressor: BlockCompressor,
    /// For constant (generated) sources: `raw` already holds this many
    /// pattern bytes.
    constant_filled: usize,
}

/// A block ready to write: which buffer holds it, how long it is on the
/// wire, and with which codec.
struct Prepared {
    codec: Option<Codec>,
    wire: usize,
}

impl Buffers {
    fn new(block_size: u32, policy: &Policy) -> Buffers {
        let bs = block_size as usize;
        let packed = if policy.mode() == tern_proto::Compression::None {
            Vec::new()
        } else {
            vec![0u8; HEADER_LEN + compress::max_payload(bs)]
        };
        Buffers {
            raw: vec![0u8; HEADER_LEN + bs],
            packed,
            compressor: BlockCompressor::new(policy.mode()),
            constant_filled: 0,
        }
    }

    /// The bytes to write for a prepared block, header included.
    fn frame(&self, p: &Prepared) -> &[u8] {
        match p.codec {
            Some(_) => &self.packed[..HEADER_LEN + p.wire],
            None => &self.raw[..HEADER_LEN + p.wire],
        }
    }

    fn frame_mut(&mut self, p: &Prepared) -> &mut [u8] {
        match p.codec {
            Some(_) => &mut self.packed[..HEADER_LEN + p.wire],
            None => &mut self.raw[..HEADER_LEN + p.wire],
        }
    }
}

/// Reads block `task` (unless a constant source already filled the
/// buffer) and compresses it when `plan` says so, off the async threads.
async fn prepare_block(
    shared: &SendShared,
    reader: &Arc<dyn BlockRead>,
    task: &BlockTask,
    mut bufs: Buffers,
) -> Result<(Buffers, Prepared)> {
    let len = task.len as usize;
    let mut read = !reader.is_constant();
    if reader.is_constant() && bufs.constant_filled < len {
        reader
            .read_at(0, &mut bufs.raw[HEADER_LEN..HEADER_LEN + len])
            .map_err(|e| Error::io("generate", "perf", e))?;
        bufs.constant_filled = len;
        read = false;
    }
    let plan = shared.compress.plan(task.file_id, len);
    if !read && plan.is_none() {
        return Ok((
            bufs,
            Prepared {
                codec: None,
                wire: len,
            },
        ));
    }
    let (r, offset, file_id) = (reader.clone(), task.offset, task.file_id);
    // Only a block's first read is folded: a repair or a copy re-reads
    // bytes the fold has had.
    let folds = shared
        .folds
        .clone()
        .filter(|_| read && !task.repair && !task.copy);
    let worked = tokio::task::spawn_blocking(move || {
        let mut b = bufs;
        if read {
            let block = &mut b.raw[HEADER_LEN..HEADER_LEN + len];
            if let Err(e) = r.read_at(offset, block) {
                return (b, Err(e), None);
            }
            if let Some(folds) = folds {
                folds.feed_copied(file_id, offset, block, FOLD_WAIT);
            }
        }
        let packed = plan.map(|(codec, limit)| {
            let started = Instant::now();
            let Buffers {
                raw,
                packed,
                compressor,
                ..
            } = &mut b;
            let n = compressor.compress(
                codec,
                &raw[HEADER_LEN..HEADER_LEN + len],
                &mut packed[HEADER_LEN..],
                limit,
            );
            (codec, n, started.elapsed())
        });
        (b, Ok(()), packed)
    })
    .await
    .map_err(|e| Error::Protocol(format!("read task failed: {e}")))?;
    let (bufs, read_result, packed) = worked;
    if let Err(e) = read_result {
        let path = shared.items[&task.file_id].local.clone();
        return Err(Error::io("read", path, e));
    }
    let prepared = match packed {
        Some((codec, n, took)) => {
            shared.compress.compressed(task.file_id, len, n, took);
            match n {
                Some(n) => Prepared {
                    codec: Some(codec),
                    wire: n,
                },
                None => Prepared {
                    codec: None,
                    wire: len,
                },
            }
        }
        None => Prepared {
            codec: None,
            wire: len,
        },
    };
    Ok((bufs, prepared))
}

/// Writes a frame in place of a block that could not be read: the stream
/// was already counted for it (a `FileSent` mark may include it), so the
/// receiver must see a frame. Its check never matches, so it is discarded
/// (and its file is given up by then). False when the stream failed.
async fn send_filler(
    shared: &SendShared,
    k: usize,
    stream: &mut BoxStream,
    task: &BlockTask,
) -> bool {
    let header = DataFrame::Block(BlockHeader {
        flags: BlockFlags::default(),
        file_id: task.file_id,
        offset: task.offset,
        length: task.len,
        check: [0xa5; tern_proto::BLOCK_CHECK_LEN],
    });
    let mut frame = header.encode().to_vec();
    frame.resize(HEADER_LEN + task.len as usize, 0);
    let written = match crate::data::pace::write_all(stream, &frame, shared.pace.as_deref()).await {
        Ok(()) => stream.flush().await,
        Err(e) => Err(e),
    };
    match written {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("data stream {k} failed: {e}");
            shared.lose_stream(k);
            false
        }
    }
}

async fn stream_worker(shared: Arc<SendShared>, k: usize, mut stream: BoxStream, block_size: u32) {
    let mut bufs = Some(Buffers::new(block_size, &shared.compress));
    loop {
        let notified = shared.wake.notified();
        if shared.failure.is_set() {
            return;
        }
        let (task, complete, has_control) = {
            let mut s = shared.session.lock().expect("session");
            if k >= shared.retire_from.load(Ordering::SeqCst) && s.stream_retired(k) {
                tracing::debug!("data stream {k} retired");
                break;
            }
            let task = s.next_block(k, Instant::now());
            (task, s.is_complete(), s.has_control())
        };
        if complete {
            break;
        }
        if has_control {
            // Asking for a block may have queued a FileSent (the last block
            // of a file was handed out, or a perf deadline passed).
            shared.control_wake.notify_one();
        }
        let Some(task) = task else {
            notified.await;
            continue;
        };
        let reader = match shared.reader(task.file_id) {
            Ok(r) => r,
            Err(e) => {
                if shared.give_up_file(task.file_id, e)
                    && send_filler(&shared, k, &mut stream, &task).await
                {
                    continue;
                }
                return;
            }
        };
        let taken = bufs.take().expect("buffers are put back after each block");
        let (mut b, prepared) = match prepare_block(&shared, &reader, &task, taken).await {
            Ok(done) => done,
            Err(e) => {
                if shared.give_up_file(task.file_id, e)
                    && send_filler(&shared, k, &mut stream, &task).await
                {
                    bufs = Some(Buffers::new(block_size, &shared.compress));
                    continue;
                }
                return;
            }
        };
        let raw = &b.raw[HEADER_LEN..HEADER_LEN + task.len as usize];
        let check = shared.check.compute(task.file_id, task.offset, raw);
        let flags = if task.repair {
            BlockFlags::REPAIR
        } else {
            BlockFlags::default()
        };
        let header = DataFrame::Block(BlockHeader {
            flags: flags.with_codec(prepared.codec),
            file_id: task.file_id,
            offset: task.offset,
            length: prepared.wire as u32,
            check,
        });
        b.frame_mut(&prepared)[..HEADER_LEN].copy_from_slice(&header.encode());
        let wire = prepared.wire as u64;
        let write_started = Instant::now();
        // Flush too: a TLS stream may hold the tail of the block in its own
        // buffer, and the receiver cannot finish without it.
        let pace = shared.pace.as_deref();
        let written =
            match crate::data::pace::write_all(&mut stream, b.frame(&prepared), pace).await {
                Ok(()) => stream.flush().await,
                Err(e) => Err(e),
            };
        if let Err(e) = written {
            tracing::warn!("data stream {k} failed: {e}");
            return shared.lose_stream(k);
        }
        shared
            .compress
            .wrote(prepared.wire, write_started.elapsed());
        shared
            .compress
            .counters
            .block(prepared.codec, u64::from(task.len), wire);
        bufs = Some(b);
        shared
            .session
            .lock()
            .expect("session")
            .record_sent(k, u64::from(task.len));
        shared.progress.stream_moved(k, u64::from(task.len));
        if !task.copy {
            shared
                .progress
                .bytes
                .fetch_add(u64::from(task.len), Ordering::Relaxed);
        }
    }
    if let Some(w) = &shared.watch {
        w.forget(k);
    }
    let _ = stream.write_all(&DataFrame::StreamEnd.encode()).await;
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
}
