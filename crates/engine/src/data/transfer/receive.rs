//! The receiving side of the driver.
//!
//! Tasks: one control reader, one action task (owns the control writer and
//! carries out the session's actions: look at what is at a final name,
//! create, open, finalize), one digest follower (hashes each file in order
//! as its contiguous written prefix grows, reading back from the page
//! cache), one reader per data stream (decompress, verify the block check,
//! write at the offset), and with a stall timeout a watchdog that gives up
//! streams whose frames stopped coming.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_proto::data::HEADER_LEN;
use tern_proto::{
    BlockFlags, ChecksumAlg, ControlMsg, DataFrame, Existing, FileMeta, SkipExisting,
};
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use super::{
    BoxStream, ControlReader, ControlWriter, Failure, LINGER, Progress, StreamCounts, TaskGuard,
    Tasks, TransferParams, TransferStats, blocking,
};
use crate::data::compress::Counters;
use crate::data::fold::Folds;

mod digests;
mod payload;
mod streams;
mod write;
use crate::data::stall::Watch;
use crate::data::supply::{FirstStreams, Want};
use crate::data::tuning::{Joined, Sampler, StreamSupply};
use crate::integrity::BlockCheck;
use crate::store::blockbuf::BlockBuf;
use crate::store::fsio::{BlockWrite, Sink};
use crate::{Error, Result};
use digests::receiver_digests;
use payload::{ReadError, read_compressed, read_plain};
use streams::{first_joins, more_streams};
use tern_session::{BlockVerdict, ReceiverConfig, ReceiverSession, RecvAction};
use write::{InFlight, settle};

mod commit;

struct RecvShared {
    session: Mutex<ReceiverSession>,
    /// Wakes every task: announcements, actions, written blocks, failure.
    wake: Notify,
    failure: Failure,
    sink: Arc<dyn Sink>,
    writers: Mutex<HashMap<u32, Arc<dyn BlockWrite>>>,
    /// Files are opened in id order; every id up to this one is open (or done).
    opened_upto: AtomicU32,
    check: BlockCheck,
    progress: Arc<Progress>,
    repaired: AtomicU64,
    /// Stream readers, including those of streams that joined later.
    readers: Mutex<Vec<JoinHandle<()>>>,
    block_size: u32,
    streams: StreamCounts,
    /// Streams the session starts with.
    first_streams: u16,
    /// Stream indices from here on replace streams given up.
    growth_cap: u16,
    max_streams: u16,
    /// Partial files from earlier sessions may be resumed.
    resume: bool,
    pace: Option<Arc<crate::data::pace::Pace>>,
    /// Compressed blocks are accepted (`COMPRESS` was negotiated).
    accept_compressed: bool,
    compression: Counters,
    skip: SkipExisting,
    checksum: ChecksumAlg,
    /// Watches the streams for stalls (with a stall timeout).
    watch: Option<Arc<Watch>>,
    /// Streams with a block write in flight: waiting on the disk, not stalled.
    writing: Mutex<HashSet<usize>>,
    /// Whole-file digests folded from the blocks as they are written;
    /// `None` when the sink makes no digests.
    folds: Option<Arc<Folds>>,
}

impl RecvShared {
    fn start_reader(self: &Arc<Self>, tasks: &Tasks, sampler: &Sampler, j: Joined) {
        let k = usize::from(j.index);
        let socket = j.probe.as_ref().and_then(|p| p.try_clone().ok());
        sampler.add(j.index, j.probe);
        let stream = match &self.watch {
            Some(w) => w.watch(k, j.stream, socket),
            None => j.stream,
        };
        self.streams.joined(k, self.growth_cap);
        let handle = tasks.spawn(stream_reader(self.clone(), k, stream, self.block_size));
        if let Some(w) = &self.watch {
            w.owned_by(k, handle.abort_handle());
        }
        self.readers.lock().expect("readers").push(handle);
    }
}

/// Runs the receiving side of a session until every file is verified and
/// in place (or kept, when the destination had it), or the first failure.
/// On failure, partial files stay where they are (for a later resume) and
/// nothing appears at a final name.
pub async fn run_receiver(
    control: super::Control,
    streams: impl Into<FirstStreams>,
    supply: StreamSupply,
    sink: Arc<dyn Sink>,
    params: TransferParams,
    progress: Arc<Progress>,
) -> Result<TransferStats> {
    let started = Instant::now();
    let verify = sink.digests();
    let max_streams = params.max_streams.max(params.streams);
    let growth_cap = params.growth_cap();
    let watch = params.stall_timeout.map(|t| Arc::new(Watch::new(t)));
    let shared = Arc::new(RecvShared {
        session: Mutex::new(ReceiverSession::new(ReceiverConfig {
            streams: max_streams,
            block_size: params.block_size,
            max_repair_rounds: params.max_repair_rounds,
            verify_digest: verify,
            entries: params.entries,
        })),
        wake: Notify::new(),
        failure: Failure::default(),
        sink,
        writers: Mutex::new(HashMap::new()),
        opened_upto: AtomicU32::new(0),
        check: params.block_check.clone(),
        progress,
        repaired: AtomicU64::new(0),
        readers: Mutex::new(Vec::new()),
        block_size: params.block_size,
        streams: StreamCounts::watched(supply.watch()),
        first_streams: params.streams,
        growth_cap,
        max_streams,
        resume: params.resume,
        pace: params.pace.clone(),
        accept_compressed: params.accept_compressed,
        compression: Counters::default(),
        skip: params.skip_existing,
        checksum: params.checksum,
        watch: watch.clone(),
        writing: Mutex::default(),
        folds: verify.then(|| Arc::new(Folds::new(params.checksum))),
    });
    let (ctrl_rd, ctrl_wr) = control.split();
    let (digest_tx, digest_rx) = mpsc::unbounded_channel();
    let guard = TaskGuard::default();
    let tasks = guard.0.clone();
    let sampler = Arc::new(Sampler::start(
        &tasks,
        &params.tuning,
        tern_drs::Direction::Receive,
        params.streams,
        growth_cap,
        max_streams,
        None,
    ));
    let (wanted_tx, wanted_rx) = mpsc::unbounded_channel();
    let all_joined = match streams.into() {
        FirstStreams::Joined(streams) => {
            for j in streams {
                shared.start_reader(&tasks, &sampler, j);
            }
            tasks.spawn(more_streams(
                shared.clone(),
                tasks.clone(),
                sampler.clone(),
                (supply, wanted_rx),
                watch,
            ));
            None
        }
        FirstStreams::Joining(pending) => {
            // The control tasks answer announcements while the streams
            // join; the transfer's clock starts once they all have.
            let all_joined = pending.all_joined();
            let (sh, tk, sa) = (shared.clone(), tasks.clone(), sampler.clone());
            tasks.spawn(async move {
                if first_joins(&sh, &tk, &sa, pending).await {
                    more_streams(sh, tk, sa, (supply, wanted_rx), watch).await;
                }
            });
            Some(all_joined)
        }
    };
    let path_rate = params.take_path_rate.then(|| sampler.clone());
    let control_reader = tasks.spawn(receiver_control_reader(
        shared.clone(),
        ctrl_rd,
        (wanted_tx, path_rate),
    ));
    tasks.spawn(receiver_digests(shared.clone(), digest_rx));
    let actions = tasks.spawn(receiver_actions(shared.clone(), ctrl_wr, digest_tx, verify));
    let _ = actions.await;
    let started = all_joined.and_then(|a| a.get().copied()).unwrap_or(started);
    let network_elapsed = started.elapsed();
    let tuning = sampler.finish();
    if !shared.failure.is_set() {
        // Let the sender's stream-end markers arrive, briefly: closing a
        // stream with data unread would reset it under a sender that has
        // not heard our Close yet. Once the sender closed the control
        // connection it has, and a slow stream still carrying copies (its
        // endgame) is not waited for.
        let linger = async {
            loop {
                let all_done = shared
                    .readers
                    .lock()
                    .expect("readers")
                    .iter()
                    .all(JoinHandle::is_finished);
                if all_done || control_reader.is_finished() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let _ = tokio::time::timeout(LINGER, linger).await;
    }
    drop(guard);
    if let Some(e) = shared.failure.take() {
        discard_bad_digest(&shared).await;
        // Let go of the partial files (and their locks) now: a task still
        // holding this session must not refuse the next attempt its files.
        shared.writers.lock().expect("writers").clear();
        return Err(e);
    }
    let session = shared.session.lock().expect("session");
    let stats = TransferStats::new(
        session.finished(),
        session.stream_bytes(),
        shared.streams.joined.load(Ordering::Relaxed),
        network_elapsed,
        shared.repaired.load(Ordering::Relaxed),
        session.blocks_corrupt(),
        tuning,
    )
    .with(
        &shared.streams,
        session.bytes_resumed(),
        session.skipped(),
        session.failed(),
        shared.compression.report(params.compression),
    );
    Ok(stats)
}

/// A file whose digest did not match after all repairs leaves no partial
/// file behind: its next run starts it over rather than trusting data that
/// just failed (which could fail the same way forever).
async fn discard_bad_digest(shared: &Arc<RecvShared>) {
    let bad = shared.session.lock().expect("session").digest_failed();
    let Some(id) = bad else {
        return;
    };
    let w = shared.writers.lock().expect("writers").remove(&id);
    if let Some(w) = w {
        if let Err(e) = blocking(move || w.discard()).await {
            tracing::warn!("{e}");
        }
    }
}

/// Feeds the session the sender's control messages, but for those meant
/// for the stream supply (`MoreStreams`) and, from a sending client, the
/// tuning (`PathRate`).
async fn receiver_control_reader(
    shared: Arc<RecvShared>,
    mut rd: ControlReader,
    (wanted, mut path_rate): (mpsc::UnboundedSender<Want>, Option<Arc<Sampler>>),
) {
    loop {
        let msg = match rd.recv().await {
            Ok(msg) => msg,
            Err(e) => {
                let complete = shared.session.lock().expect("session").is_complete();
                if !complete {
                    shared.failure.fail(e, &shared.wake);
                }
                return;
            }
        };
        if let ControlMsg::MoreStreams { total } = msg {
            let _ = wanted.send(Want::Total(total));
            continue;
        }
        // Only as the first message (after it, one is a protocol error).
        if let (ControlMsg::PathRate { bps }, Some(sampler)) = (&msg, path_rate.take()) {
            sampler.know_rate(*bps);
            continue;
        }
        let handled = shared.session.lock().expect("session").handle_control(msg);
        if let Err(e) = handled {
            return shared.failure.fail(e, &shared.wake);
        }
        shared.wake.notify_waiters();
    }
}

/// What opening an announced file came to.
enum Opened {
    /// The copy at the final name is complete: nothing was opened.
    Skipped,
    /// A temporary file, the ranges kept from an earlier session, and what
    /// to tell the sender about the final name (with a skip policy).
    File(Arc<dyn BlockWrite>, Vec<(u64, u64)>, Option<Existing>),
}

async fn receiver_actions(
    shared: Arc<RecvShared>,
    mut wr: ControlWriter,
    digest_tx: mpsc::UnboundedSender<u32>,
    verify: bool,
) {
    let commits = commit::Commits::start(&shared);
    loop {
        let notified = shared.wake.notified();
        if shared.failure.is_set() {
            if let Some(msg) = shared.failure.tell_peer() {
                let _ = wr.send(&msg).await;
            }
            return;
        }
        let action = shared.session.lock().expect("session").poll_action();
        let Some(action) = action else {
            notified.await;
            continue;
        };
        let done = match action {
            RecvAction::Send(msg) => {
                let batch = run_of(&shared, msg, super::CONTROL_BATCH, |a| match a {
                    RecvAction::Send(msg) => Ok(msg),
                    other => Err(other),
                });
                let closing = batch.iter().any(|m| matches!(m, ControlMsg::Close { .. }));
                if let Err(e) = wr.send_all(&batch).await {
                    return shared.failure.fail(e, &shared.wake);
                }
                Ok(closing)
            }
            RecvAction::CreateDir { path, mode } => {
                let sink = shared.sink.clone();
                let at = path.clone();
                let made = blocking(move || sink.create_dir(&at, mode)).await;
                entry_made(&shared, path, made)
            }
            RecvAction::Entry(meta) => {
                let sink = shared.sink.clone();
                let path = meta.path.clone();
                let made = blocking(move || sink.create_entry(&meta)).await;
                entry_made(&shared, path, made)
            }
            RecvAction::Drop { file_id } => {
                let w = shared.writers.lock().expect("writers").remove(&file_id);
                match w {
                    Some(w) => blocking(move || w.discard()).await.map(|()| false),
                    None => Ok(false),
                }
            }
            RecvAction::FinishTree => {
                let sink = shared.sink.clone();
                let failures = tokio::task::spawn_blocking(move || sink.finish())
                    .await
                    .unwrap_or_default();
                shared
                    .session
                    .lock()
                    .expect("session")
                    .tree_finished(failures)
                    .map(|()| false)
                    .map_err(Error::from)
            }
            RecvAction::OpenFile(meta) => {
                let metas = run_of(&shared, meta, super::OPEN_BATCH, |a| match a {
                    RecvAction::OpenFile(meta) => Ok(meta),
                    other => Err(other),
                });
                let sink = shared.sink.clone();
                let (block_size, resume) = (shared.block_size, shared.resume);
                let (skip, alg) = (shared.skip, shared.checksum);
                // One trip off the async threads for a run of files: a tree
                // of small files opens thousands.
                let opened = blocking(move || {
                    Ok(metas
                        .into_iter()
                        .map(|meta| {
                            (
                                meta.file_id,
                                open_file(&*sink, &meta, block_size, resume, skip, alg),
                            )
                        })
                        .collect::<Vec<_>>())
                })
                .await;
                match opened {
                    Ok(opened) => book_opened(&shared, opened, verify, &digest_tx).await,
                    Err(e) => Err(e),
                }
            }
            // Durable at its final name before it is booked (and the
            // sender told); small files in groups. The session closes
            // only once every file is finalized.
            RecvAction::Finalize { file_id } => commits.finalize(&shared, file_id).await,
            RecvAction::KeepExisting { file_id } => {
                let w = shared.writers.lock().expect("writers").remove(&file_id);
                let discarded = match w {
                    Some(w) => blocking(move || w.discard()).await,
                    None => Ok(()),
                };
                discarded
                    .and_then(|()| {
                        Ok(shared.session.lock().expect("session").discarded(file_id)?)
                    })
                    .map(|()| {
                        // The digest task may be waiting on this file, which
                        // the session no longer tracks: without a wake it
                        // waited for good, and the files after it with it.
                        shared.wake.notify_waiters();
                        false
                    })
            }
        };
        match done {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                shared.failure.fail(e, &shared.wake);
            }
        }
    }
}

/// `first` and the actions of its kind queued right after it, up to `most`.
fn run_of<T>(
    shared: &RecvShared,
    first: T,
    most: usize,
    take: impl Fn(RecvAction) -> std::result::Result<T, RecvAction>,
) -> Vec<T> {
    let mut run = vec![first];
    let mut s = shared.session.lock().expect("session");
    while run.len() < most {
        match s.poll_action_as(&take) {
            Some(next) => run.push(next),
            None => break,
        }
    }
    run
}

/// Books a run of opened (or skipped, or failed) files in the session, in
/// order. A file the sender gave up while the run was being opened
/// (`EntryFailed` crossed it) is dropped again: the session no longer
/// knows it.
async fn book_opened(
    shared: &Arc<RecvShared>,
    opened: Vec<(u32, Result<Opened>)>,
    verify: bool,
    digest_tx: &mpsc::UnboundedSender<u32>,
) -> Result<bool> {
    for (id, opened) in opened {
        if shared.session.lock().expect("session").was_given_up(id) {
            if let Ok(Opened::File(w, ..)) = opened {
                blocking(move || w.discard()).await?;
            }
            shared.opened_upto.store(id, Ordering::SeqCst);
            shared.wake.notify_waiters();
            continue;
        }
        match opened {
            Ok(opened) => file_opened(shared, id, opened, verify, digest_tx)?,
            Err(e) => file_not_opened(shared, id, e)?,
        };
    }
    Ok(false)
}

/// Opens the temporary file for an announced file, unless the copy at its
/// final name is complete under the skip policy.
fn open_file(
    sink: &dyn Sink,
    meta: &FileMeta,
    block_size: u32,
    resume: bool,
    skip: SkipExisting,
    alg: ChecksumAlg,
) -> Result<Opened> {
    let existing = crate::store::skip::check(sink, meta, skip, alg)?;
    if existing == Some(Existing::Same) {
        return Ok(Opened::Skipped);
    }
    let (w, kept) = sink.create_file(meta, block_size, resume)?;
    Ok(Opened::File(w, kept, existing))
}

/// Books an opened (or skipped) file in the session; the file's blocks
/// may be written from now on.
fn file_opened(
    shared: &RecvShared,
    id: u32,
    opened: Opened,
    verify: bool,
    digest_tx: &mpsc::UnboundedSender<u32>,
) -> Result<bool> {
    {
        let mut s = shared.session.lock().expect("session");
        match opened {
            Opened::Skipped => {
                tracing::info!("file {id}: already at the destination, skipped");
                s.skip_existing(id)?;
            }
            Opened::File(w, kept, existing) => {
                shared.writers.lock().expect("writers").insert(id, w);
                if !kept.is_empty() {
                    let bytes: u64 = kept.iter().map(|r| r.1).sum();
                    tracing::info!(
                        "file {id}: resuming, {bytes} bytes kept from an earlier session"
                    );
                    s.resumed(id, kept)?;
                    let resumed = s.bytes_resumed();
                    shared.progress.resumed.store(resumed, Ordering::Relaxed);
                    if let Some(folds) = &shared.folds {
                        // Kept blocks never pass: this digest is read.
                        folds.exclude(id);
                    }
                }
                if let Some(existing) = existing {
                    s.checked(id, existing)?;
                }
                if verify {
                    let _ = digest_tx.send(id);
                }
            }
        }
    }
    shared.opened_upto.store(id, Ordering::SeqCst);
    shared.wake.notify_waiters();
    Ok(false)
}

/// A directory, link or pipe was created, or could not be: with `ENTRIES`
/// the session goes on without it.
fn entry_made(shared: &RecvShared, path: tern_proto::RelPath, made: Result<()>) -> Result<bool> {
    match made {
        Ok(()) => Ok(false),
        Err(e) => {
            let mut session = shared.session.lock().expect("session");
            let problem = e.for_entry(session.reports_entries())?;
            session.entry_failed(path, problem)?;
            Ok(false)
        }
    }
}

/// An announced file could not be opened here: with `ENTRIES` the session
/// goes on without it (its blocks are dropped as they come).
fn file_not_opened(shared: &RecvShared, id: u32, e: Error) -> Result<bool> {
    {
        let mut session = shared.session.lock().expect("session");
        let problem = e.for_entry(session.reports_entries())?;
        session.file_failed(id, problem)?;
    }
    shared.opened_upto.store(id, Ordering::SeqCst);
    shared.wake.notify_waiters();
    Ok(false)
}

async fn stream_reader(shared: Arc<RecvShared>, k: usize, stream: BoxStream, block_size: u32) {
    let mut stream = tokio::io::BufReader::with_capacity(64 << 10, stream);
    let mut header = [0u8; HEADER_LEN];
    let mut buf = BlockBuf::zeroed(block_size as usize);
    // The buffer of the block before, once its write is done.
    let mut spare: Option<BlockBuf> = None;
    let mut in_flight: Option<InFlight> = None;
    let mut packed = Vec::new();
    loop {
        if let Err(e) = stream.read_exact(&mut header).await {
            settle(&mut in_flight).await;
            return stream_ended(&shared, k, e);
        }
        let h = match DataFrame::decode(&header) {
            Ok(DataFrame::StreamEnd) => {
                settle(&mut in_flight).await;
                return stream_done(&shared, k);
            }
            Ok(DataFrame::Block(h)) => h,
            Err(e) => return shared.failure.fail(e, &shared.wake),
        };
        if h.length > block_size {
            return shared.failure.fail(
                Error::Protocol(format!(
                    "block of {} bytes exceeds the block size",
                    h.length
                )),
                &shared.wake,
            );
        }
        let pace = shared.pace.as_deref();
        let codec = h.flags.codec();
        // A file not open yet may be journaled: hash it.
        let journaled =
            (shared.writers.lock().expect("writers").get(&h.file_id)).is_none_or(|w| w.journaled());
        let (h, decompressed, hashed) = match codec {
            None => match read_plain(&mut stream, &mut buf[..h.length as usize], pace, journaled)
                .await
            {
                Ok(hashed) => (h, true, hashed),
                Err(e) => {
                    settle(&mut in_flight).await;
                    return stream_ended(&shared, k, e);
                }
            },
            Some(_) if !shared.accept_compressed => {
                return shared.failure.fail(
                    Error::Protocol("a compressed block, but compression was not agreed".into()),
                    &shared.wake,
                );
            }
            Some(codec) => {
                let bufs = (&mut packed, &mut buf);
                let read = read_compressed(&mut stream, h, codec, bufs, block_size, pace).await;
                match read {
                    Ok((h, decompressed)) => (h, decompressed, None),
                    Err(ReadError::Ended(e)) => {
                        settle(&mut in_flight).await;
                        return stream_ended(&shared, k, e);
                    }
                    Err(ReadError::Fatal(e)) => return shared.failure.fail(e, &shared.wake),
                }
            }
        };
        let wire = u64::from(header_length(&header));
        shared.compression.block(codec, u64::from(h.length), wire);
        let len = h.length as usize;
        let ok = decompressed
            && shared
                .check
                .verify(h.file_id, h.offset, &buf[..len], &h.check);
        // The block may have overtaken its announcement: wait for the file to open.
        while shared.opened_upto.load(Ordering::SeqCst) < h.file_id {
            let notified = shared.wake.notified();
            if shared.failure.is_set() {
                return;
            }
            if shared.opened_upto.load(Ordering::SeqCst) >= h.file_id {
                break;
            }
            notified.await;
        }
        if let Some(f) = in_flight.take() {
            match f.done().await {
                Some(b) => spare = Some(b),
                None => return,
            }
        }
        if h.flags.contains(BlockFlags::REPAIR) {
            shared.repaired.fetch_add(1, Ordering::Relaxed);
        }
        let verdict = shared
            .session
            .lock()
            .expect("session")
            .handle_block(k, &h, ok);
        match verdict {
            Err(e) => return shared.failure.fail(e, &shared.wake),
            Ok(BlockVerdict::Corrupt) => {
                tracing::warn!(
                    "stream {k}: block {}+{} of file {} failed its check; it will be sent again",
                    h.offset,
                    h.length,
                    h.file_id
                );
            }
            Ok(BlockVerdict::Duplicate) => {}
            Ok(BlockVerdict::Write) => {
                let w = shared
                    .writers
                    .lock()
                    .expect("writers")
                    .get(&h.file_id)
                    .cloned();
                let Some(w) = w else {
                    if shared
                        .session
                        .lock()
                        .expect("session")
                        .was_given_up(h.file_id)
                    {
                        // Given up at either end while this block came; its
                        // frame still counts toward the stream's marks.
                        let counted = {
                            let mut s = shared.session.lock().expect("session");
                            s.block_written(k, &h).and_then(|()| s.judge_due())
                        };
                        if let Err(e) = counted {
                            return shared.failure.fail(e, &shared.wake);
                        }
                        continue;
                    }
                    return shared.failure.fail(
                        Error::Protocol(format!("block for closed file {}", h.file_id)),
                        &shared.wake,
                    );
                };
                let next = spare
                    .take()
                    .unwrap_or_else(|| BlockBuf::zeroed(block_size as usize));
                let block = std::mem::replace(&mut buf, next);
                in_flight = Some(InFlight::start(&shared, k, w, h, (block, len), hashed));
            }
        }
        let judged = shared.session.lock().expect("session").judge_due();
        if let Err(e) = judged {
            return shared.failure.fail(e, &shared.wake);
        }
        shared.wake.notify_waiters();
    }
}

/// The payload length a header announced (its wire length).
fn header_length(header: &[u8; HEADER_LEN]) -> u32 {
    u32::from_be_bytes(header[16..20].try_into().expect("4 bytes"))
}

/// The sender ended stream `k` on purpose.
fn stream_done(shared: &RecvShared, k: usize) {
    if let Some(w) = &shared.watch {
        w.forget(k);
    }
}

fn stream_ended(shared: &RecvShared, k: usize, e: std::io::Error) {
    stream_done(shared, k);
    if shared.failure.is_set() || shared.session.lock().expect("session").is_complete() {
        return;
    }
    tracing::warn!("data stream {k} lost: {e}");
    shared.streams.lose(k);
    let lost = shared.session.lock().expect("session").stream_lost(k);
    shared.wake.notify_waiters();
    if let Err(e) = lost {
        shared.failure.fail(e, &shared.wake);
    }
}
