//! The async driver: runs a sender or receiver session over one control
//! channel and N data streams.
//!
//! Tasks of a sender: one control reader, one control writer, one digest
//! worker (reads each file once, in order, for the whole-file digest) and
//! one worker per data stream. A worker asks the session for the next block
//! only when its previous write completed, i.e. when its connection could
//! take more: that pull is what makes faster streams carry more.
//!
//! Tasks of a receiver: one control reader, one action task (owns the
//! control writer and carries out the session's actions: create, open,
//! finalize), one digest follower (hashes each file in order as its
//! contiguous written prefix grows, reading back from the page cache), and
//! one reader per data stream (verify the block check, write at the offset).
//!
//! Memory is bounded by one block buffer per stream plus one digest buffer,
//! whatever the file sizes. The session state sits behind a `std` mutex
//! held only for bookkeeping, never across I/O.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_proto::data::HEADER_LEN;
use tern_proto::{
    BlockFlags, BlockHeader, ChecksumAlg, ControlMsg, DataFrame, FileMeta, decode_control,
    encode_control,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::fsio::{BlockRead, BlockWrite, Sink, Source, SourceItem};
use crate::integrity::{BlockCheck, FileDigest};
use crate::session::{
    BlockVerdict, FileOutcome, ReceiverConfig, ReceiverSession, RecvAction, SenderConfig,
    SenderSession,
};
use crate::tuning::{Joined, Sampler, StreamSupply, Tuning};
use crate::{Error, Result};
use tern_drs::StreamChange;

/// A byte stream a session can run over: TCP, TLS over TCP, or an
/// in-memory pipe (local copies and tests).
pub trait DataStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> DataStream for T {}

/// A boxed [`DataStream`].
pub type BoxStream = Box<dyn DataStream>;

/// Buffer size for reading files back for digests.
const DIGEST_CHUNK: usize = 1 << 20;

/// How long the receiver waits for the sender's stream-end markers after
/// everything is done.
const LINGER: Duration = Duration::from_secs(5);

/// The control connection, framed.
pub struct Control {
    rd: ControlReader,
    wr: ControlWriter,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

/// Receiving half of a [`Control`].
pub struct ControlReader(tokio::io::BufReader<ReadHalf<BoxStream>>);
/// Sending half of a [`Control`].
pub struct ControlWriter(WriteHalf<BoxStream>);

impl std::fmt::Debug for ControlReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlReader")
    }
}

impl std::fmt::Debug for ControlWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlWriter")
    }
}

impl Control {
    /// Frames control messages over `stream`.
    pub fn new(stream: BoxStream) -> Control {
        let (rd, wr) = tokio::io::split(stream);
        Control {
            rd: ControlReader(tokio::io::BufReader::new(rd)),
            wr: ControlWriter(wr),
        }
    }

    /// Sends one message.
    pub async fn send(&mut self, msg: &ControlMsg) -> Result<()> {
        self.wr.send(msg).await
    }

    /// Receives one message.
    pub async fn recv(&mut self) -> Result<ControlMsg> {
        self.rd.recv().await
    }

    /// Splits into halves for concurrent use.
    pub fn split(self) -> (ControlReader, ControlWriter) {
        (self.rd, self.wr)
    }
}

impl ControlWriter {
    /// Sends one message.
    pub async fn send(&mut self, msg: &ControlMsg) -> Result<()> {
        let frame = encode_control(msg);
        self.0.write_all(&frame).await.map_err(gone)?;
        self.0.flush().await.map_err(gone)
    }
}

impl ControlReader {
    /// Receives one message.
    pub async fn recv(&mut self) -> Result<ControlMsg> {
        let mut prefix = [0u8; 4];
        self.0.read_exact(&mut prefix).await.map_err(gone)?;
        let len = tern_proto::control::control_body_len(prefix)?;
        let mut body = vec![0u8; len];
        self.0.read_exact(&mut body).await.map_err(gone)?;
        Ok(decode_control(&body)?)
    }
}

fn gone(e: std::io::Error) -> Error {
    let what = match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the peer closed the connection".to_string(),
        _ => e.to_string(),
    };
    Error::PeerGone(what)
}

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
    pub pace: Option<Arc<crate::pace::Pace>>,
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
            max_files_in_flight: 32,
            max_repair_rounds: crate::session::DEFAULT_MAX_REPAIR_ROUNDS,
            resume: true,
            pace: None,
        }
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
    /// Bytes that were already at the destination from an earlier session
    /// (resumed partial files), not sent again.
    pub bytes_resumed: u64,
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
            bytes_resumed: 0,
            tuning,
        }
    }
}

/// Spawns a session's tasks and keeps their abort handles; tasks spawned
/// later (streams that join a running session) go into the same list.
#[derive(Default, Clone)]
pub(crate) struct Tasks(Arc<Mutex<Vec<tokio::task::AbortHandle>>>);

impl Tasks {
    pub(crate) fn spawn<F>(&self, f: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = tokio::spawn(f);
        self.0.lock().expect("tasks").push(handle.abort_handle());
        handle
    }
}

/// Aborts a session's tasks when the session's future is dropped (a
/// daemon shutting down, a caller giving up), so none outlives it.
#[derive(Default)]
struct TaskGuard(Tasks);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        for h in self.0.0.lock().expect("tasks").iter() {
            h.abort();
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
    fn fail(&self, e: Error, wake: &Notify) {
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
    joined: AtomicU16,
    pace: Option<Arc<crate::pace::Pace>>,
}

impl SendShared {
    /// Stream `k` joined: it may take blocks now.
    fn start_worker(self: &Arc<Self>, tasks: &Tasks, k: usize, stream: BoxStream) {
        self.session.lock().expect("session").stream_joined(k);
        self.joined.fetch_add(1, Ordering::Relaxed);
        let handle = tasks.spawn(stream_worker(self.clone(), k, stream, self.block_size));
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
}

/// Runs the sending side of a session until the receiver confirmed
/// everything, or the first failure. `streams` are those joined at the
/// start; `supply` is where more come from when the stream count grows.
pub async fn run_sender(
    control: Control,
    streams: Vec<Joined>,
    supply: StreamSupply,
    source: Arc<dyn Source>,
    params: TransferParams,
    progress: Arc<Progress>,
) -> Result<TransferStats> {
    let started = Instant::now();
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
    });
    session.expect_joined(0);
    let mut by_id = HashMap::new();
    let mut total = 0u64;
    for item in items {
        if let crate::session::SendEntry::File(meta) = &item.entry {
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
        joined: AtomicU16::new(0),
        pace: params.pace.clone(),
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
        max_streams,
        (!matches!(supply, StreamSupply::Fixed)).then_some(changes_tx),
    ));
    for j in streams {
        sampler.add(j.index, j.probe);
        shared.start_worker(&tasks, usize::from(j.index), j.stream);
    }
    tasks.spawn(sender_digests(shared.clone(), digest_rx, params.checksum));
    let (wanted_tx, wanted_rx) = mpsc::unbounded_channel();
    tasks.spawn(sender_changes(shared.clone(), changes_rx, wanted_tx));
    let (sh, tk, sa) = (shared.clone(), tasks.clone(), sampler.clone());
    let ask = shared.clone();
    tasks.spawn(supply_streams(
        tasks.clone(),
        supply,
        params.streams,
        wanted_rx,
        move |total| {
            ask.session.lock().expect("session").request_streams(total);
            ask.control_wake.notify_one();
        },
        move |j| {
            sa.add(j.index, j.probe);
            sh.start_worker(&tk, usize::from(j.index), j.stream);
        },
    ));
    let reader = tasks.spawn(sender_control_reader(shared.clone(), ctrl_rd));
    let writer = tasks.spawn(sender_control_writer(shared.clone(), ctrl_wr, digest_tx));
    loop {
        let next = shared.workers.lock().expect("workers").pop();
        match next {
            Some(w) => {
                let _ = w.await;
            }
            None => break,
        }
    }
    let _ = writer.await;
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
    let mut stats = TransferStats::new(
        session.finished(),
        session.stream_bytes(),
        shared.joined.load(Ordering::Relaxed),
        started.elapsed(),
        session.blocks_retransmitted(),
        0,
        tuning,
    );
    stats.bytes_resumed = session.bytes_resumed();
    Ok(stats)
}

/// Carries out the stream-count controller's changes on the sending side:
/// retires streams, and passes growth on to [`supply_streams`].
async fn sender_changes(
    shared: Arc<SendShared>,
    mut changes: mpsc::UnboundedReceiver<StreamChange>,
    wanted: mpsc::UnboundedSender<u16>,
) {
    while let Some(change) = changes.recv().await {
        match change {
            StreamChange::Retire(n) => {
                shared.retire_from.store(usize::from(n), Ordering::SeqCst);
                shared.wake.notify_waiters();
            }
            StreamChange::Grow(n) => {
                let _ = wanted.send(n);
            }
        }
    }
}

/// Brings a running session up to each stream total asked for on
/// `wanted`: opens the streams itself when it has a connector (the
/// client), else asks the peer (`ask_peer`); streams the peer opened
/// arrive through an accepting supply (the server). Every stream that
/// joins goes to `start`.
async fn supply_streams(
    tasks: Tasks,
    supply: StreamSupply,
    mut requested: u16,
    mut wanted: mpsc::UnboundedReceiver<u16>,
    ask_peer: impl Fn(u16) + Send,
    start: impl Fn(Joined) + Send,
) {
    let (connected_tx, mut connected) = mpsc::channel::<Joined>(8);
    let (connector, mut accept) = match supply {
        StreamSupply::Fixed => (None, None),
        StreamSupply::Connect(c) => (Some(c), None),
        StreamSupply::Accept(rx) => (None, Some(rx)),
    };
    loop {
        tokio::select! {
            total = wanted.recv() => match (total, &connector) {
                (None, _) => return,
                (Some(total), Some(connect)) => {
                    open_streams(&tasks, connect, requested..total, &connected_tx);
                    requested = requested.max(total);
                }
                (Some(total), None) => ask_peer(total),
            },
            j = recv_or_pending(&mut accept) => match j {
                Some(j) => start(j),
                None => accept = None,
            },
            Some(j) = connected.recv() => start(j),
        }
    }
}

/// Opens streams `range` in the background; each goes to `tx` once joined.
/// A stream that cannot be opened is only logged: the session goes on with
/// the streams it has.
fn open_streams(
    tasks: &Tasks,
    connect: &crate::tuning::Connector,
    range: std::ops::Range<u16>,
    tx: &mpsc::Sender<Joined>,
) {
    for k in range {
        let (connect, tx) = (connect.clone(), tx.clone());
        tasks.spawn(async move {
            match connect(k).await {
                Ok(j) => {
                    let _ = tx.send(j).await;
                }
                Err(e) => tracing::warn!("cannot open data stream {k}: {e}"),
            }
        });
    }
}

/// The next item of `rx`, or never when there is no `rx`.
async fn recv_or_pending<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sender_control_reader(shared: Arc<SendShared>, mut rd: ControlReader) {
    loop {
        let msg = match rd.recv().await {
            Ok(msg) => msg,
            Err(e) => return shared.failure.fail(e, &shared.wake),
        };
        let done_file = match &msg {
            ControlMsg::FileDone { file_id, .. } => Some(*file_id),
            _ => None,
        };
        let complete = {
            let mut s = shared.session.lock().expect("session");
            if let Err(e) = s.handle_control(msg) {
                drop(s);
                return shared.failure.fail(e, &shared.wake);
            }
            s.is_complete()
        };
        if let Some(id) = done_file {
            shared.readers.lock().expect("readers").remove(&id);
            shared.progress.files_done.fetch_add(1, Ordering::Relaxed);
        }
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
        for msg in out {
            if let ControlMsg::FileAnnounce(meta) = &msg {
                let _ = digest_tx.send((meta.file_id, meta.size));
            }
            if let Err(e) = wr.send(&msg).await {
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

async fn sender_digests(
    shared: Arc<SendShared>,
    mut ids: mpsc::UnboundedReceiver<(u32, u64)>,
    alg: ChecksumAlg,
) {
    while let Some((file_id, size)) = ids.recv().await {
        let digest = if shared.source.digests() {
            let sh = shared.clone();
            let computed = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
                let item = &sh.items[&file_id];
                let reader = sh.source.open(item)?;
                let mut digest = FileDigest::new(alg);
                let mut buf = vec![0u8; DIGEST_CHUNK];
                let mut pos = 0u64;
                while pos < size {
                    let n = (size - pos).min(DIGEST_CHUNK as u64) as usize;
                    reader
                        .read_at(pos, &mut buf[..n])
                        .map_err(|e| Error::io("read for digest", &item.local, e))?;
                    digest.update(&buf[..n]);
                    pos += n as u64;
                }
                Ok(digest.finish())
            })
            .await
            .unwrap_or_else(|e| Err(Error::Protocol(format!("digest task failed: {e}"))));
            match computed {
                Ok(d) => d,
                Err(e) => return shared.failure.fail(e, &shared.wake),
            }
        } else {
            Vec::new()
        };
        shared
            .session
            .lock()
            .expect("session")
            .set_digest(file_id, digest);
        shared.wake.notify_waiters();
    }
}

async fn stream_worker(shared: Arc<SendShared>, k: usize, mut stream: BoxStream, block_size: u32) {
    let mut buf = vec![0u8; HEADER_LEN + block_size as usize];
    // For constant (generated) sources: the buffer already holds this many
    // pattern bytes.
    let mut constant_filled = 0usize;
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
        let len = task.len as usize;
        let reader = match shared.reader(task.file_id) {
            Ok(r) => r,
            Err(e) => return shared.failure.fail(e, &shared.wake),
        };
        if reader.is_constant() {
            if constant_filled < len {
                if let Err(e) = reader.read_at(0, &mut buf[HEADER_LEN..HEADER_LEN + len]) {
                    return shared
                        .failure
                        .fail(Error::io("generate", "perf", e), &shared.wake);
                }
                constant_filled = len;
            }
        } else {
            let r = reader.clone();
            let offset = task.offset;
            let moved = std::mem::take(&mut buf);
            let result = tokio::task::spawn_blocking(move || {
                let mut b = moved;
                let res = r.read_at(offset, &mut b[HEADER_LEN..HEADER_LEN + len]);
                (b, res)
            })
            .await;
            match result {
                Ok((b, Ok(()))) => buf = b,
                Ok((_, Err(e))) => {
                    let path = shared.items[&task.file_id].local.clone();
                    return shared
                        .failure
                        .fail(Error::io("read", path, e), &shared.wake);
                }
                Err(e) => {
                    return shared.failure.fail(
                        Error::Protocol(format!("read task failed: {e}")),
                        &shared.wake,
                    );
                }
            }
        }
        let payload = &buf[HEADER_LEN..HEADER_LEN + len];
        let check = shared.check.compute(task.file_id, task.offset, payload);
        let header = DataFrame::Block(BlockHeader {
            flags: if task.repair {
                BlockFlags::REPAIR
            } else {
                BlockFlags::default()
            },
            file_id: task.file_id,
            offset: task.offset,
            length: task.len,
            check,
        });
        buf[..HEADER_LEN].copy_from_slice(&header.encode());
        if let Some(pace) = &shared.pace {
            pace.acquire(u64::from(task.len)).await;
        }
        // Flush too: a TLS stream may hold the tail of the block in its own
        // buffer, and the receiver cannot finish without it.
        let written = match stream.write_all(&buf[..HEADER_LEN + len]).await {
            Ok(()) => stream.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::warn!("data stream {k} failed: {e}");
            let lost = shared.session.lock().expect("session").stream_lost(k);
            shared.wake.notify_waiters();
            if let Err(e) = lost {
                shared.failure.fail(e, &shared.wake);
            }
            return;
        }
        shared
            .session
            .lock()
            .expect("session")
            .record_sent(k, u64::from(task.len));
        shared
            .progress
            .bytes
            .fetch_add(u64::from(task.len), Ordering::Relaxed);
    }
    let _ = stream.write_all(&DataFrame::StreamEnd.encode()).await;
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
}

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
    joined: AtomicU16,
    /// Partial files from earlier sessions may be resumed.
    resume: bool,
    pace: Option<Arc<crate::pace::Pace>>,
}

impl RecvShared {
    fn start_reader(self: &Arc<Self>, tasks: &Tasks, k: usize, stream: BoxStream) {
        self.joined.fetch_add(1, Ordering::Relaxed);
        let handle = tasks.spawn(stream_reader(self.clone(), k, stream, self.block_size));
        self.readers.lock().expect("readers").push(handle);
    }
}

/// Runs the receiving side of a session until every file is verified and
/// in place, or the first failure. On failure, partial files stay where
/// they are (for a later resume) and nothing appears at a final name.
pub async fn run_receiver(
    control: Control,
    streams: Vec<Joined>,
    supply: StreamSupply,
    sink: Arc<dyn Sink>,
    params: TransferParams,
    progress: Arc<Progress>,
) -> Result<TransferStats> {
    let started = Instant::now();
    let verify = sink.digests();
    let max_streams = params.max_streams.max(params.streams);
    let shared = Arc::new(RecvShared {
        session: Mutex::new(ReceiverSession::new(ReceiverConfig {
            streams: max_streams,
            block_size: params.block_size,
            max_repair_rounds: params.max_repair_rounds,
            verify_digest: verify,
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
        joined: AtomicU16::new(0),
        resume: params.resume,
        pace: params.pace.clone(),
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
        max_streams,
        None,
    ));
    for j in streams {
        sampler.add(j.index, j.probe);
        shared.start_reader(&tasks, usize::from(j.index), j.stream);
    }
    let (wanted_tx, wanted_rx) = mpsc::unbounded_channel();
    let (sh, tk, sa) = (shared.clone(), tasks.clone(), sampler.clone());
    tasks.spawn(supply_streams(
        tasks.clone(),
        supply,
        params.streams,
        wanted_rx,
        |total| tracing::warn!("the sender asked for {total} streams; this end cannot open any"),
        move |j| {
            sa.add(j.index, j.probe);
            sh.start_reader(&tk, usize::from(j.index), j.stream);
        },
    ));
    tasks.spawn(receiver_control_reader(shared.clone(), ctrl_rd, wanted_tx));
    tasks.spawn(receiver_digests(shared.clone(), digest_rx, params.checksum));
    let actions = tasks.spawn(receiver_actions(shared.clone(), ctrl_wr, digest_tx, verify));
    let _ = actions.await;
    let network_elapsed = started.elapsed();
    let tuning = sampler.finish();
    if !shared.failure.is_set() {
        // Let the sender's stream-end markers arrive, briefly.
        let linger = async {
            loop {
                let all_done = shared
                    .readers
                    .lock()
                    .expect("readers")
                    .iter()
                    .all(JoinHandle::is_finished);
                if all_done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let _ = tokio::time::timeout(LINGER, linger).await;
    }
    drop(guard);
    if let Some(e) = shared.failure.take() {
        return Err(e);
    }
    let session = shared.session.lock().expect("session");
    let mut stats = TransferStats::new(
        session.finished(),
        session.stream_bytes(),
        shared.joined.load(Ordering::Relaxed),
        network_elapsed,
        shared.repaired.load(Ordering::Relaxed),
        session.blocks_corrupt(),
        tuning,
    );
    stats.bytes_resumed = session.bytes_resumed();
    Ok(stats)
}

async fn receiver_control_reader(
    shared: Arc<RecvShared>,
    mut rd: ControlReader,
    wanted: mpsc::UnboundedSender<u16>,
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
            let _ = wanted.send(total);
            continue;
        }
        let handled = shared.session.lock().expect("session").handle_control(msg);
        if let Err(e) = handled {
            return shared.failure.fail(e, &shared.wake);
        }
        shared.wake.notify_waiters();
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Error::Protocol(format!("I/O task failed: {e}"))))
}

async fn receiver_actions(
    shared: Arc<RecvShared>,
    mut wr: ControlWriter,
    digest_tx: mpsc::UnboundedSender<u32>,
    verify: bool,
) {
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
                let closing = matches!(msg, ControlMsg::Close { .. });
                if let Err(e) = wr.send(&msg).await {
                    return shared.failure.fail(e, &shared.wake);
                }
                Ok(closing)
            }
            RecvAction::CreateDir { path, mode } => {
                let sink = shared.sink.clone();
                blocking(move || sink.create_dir(&path, mode))
                    .await
                    .map(|()| false)
            }
            RecvAction::OpenFile(meta) => {
                let sink = shared.sink.clone();
                let id = meta.file_id;
                let (block_size, resume) = (shared.block_size, shared.resume);
                match blocking(move || sink.create_file(&meta, block_size, resume)).await {
                    Ok((w, kept)) => {
                        shared.writers.lock().expect("writers").insert(id, w);
                        if !kept.is_empty() {
                            let bytes: u64 = kept.iter().map(|r| r.1).sum();
                            tracing::info!(
                                "file {id}: resuming, {bytes} bytes kept from an earlier session"
                            );
                        }
                        if !kept.is_empty() {
                            let resumed = shared.session.lock().expect("session").resumed(id, kept);
                            if let Err(e) = resumed {
                                return shared.failure.fail(e, &shared.wake);
                            }
                        }
                        shared.opened_upto.store(id, Ordering::SeqCst);
                        if verify {
                            let _ = digest_tx.send(id);
                        }
                        shared.wake.notify_waiters();
                        Ok(false)
                    }
                    Err(e) => Err(e),
                }
            }
            RecvAction::Finalize { file_id } => {
                let w = shared.writers.lock().expect("writers").remove(&file_id);
                match w {
                    Some(w) => match blocking(move || w.commit()).await {
                        Ok(()) => {
                            shared.progress.files_done.fetch_add(1, Ordering::Relaxed);
                            shared
                                .session
                                .lock()
                                .expect("session")
                                .finalized(file_id)
                                .map(|()| false)
                        }
                        Err(e) => Err(e),
                    },
                    None => Err(Error::Protocol(format!(
                        "finalize of unopened file {file_id}"
                    ))),
                }
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

async fn receiver_digests(
    shared: Arc<RecvShared>,
    mut ids: mpsc::UnboundedReceiver<u32>,
    alg: ChecksumAlg,
) {
    let mut buf = vec![0u8; DIGEST_CHUNK];
    while let Some(file_id) = ids.recv().await {
        let Some(writer) = shared
            .writers
            .lock()
            .expect("writers")
            .get(&file_id)
            .cloned()
        else {
            continue;
        };
        let mut digest = FileDigest::new(alg);
        let mut pos = 0u64;
        loop {
            let notified = shared.wake.notified();
            if shared.failure.is_set() {
                return;
            }
            let (prefix, size) = {
                let s = shared.session.lock().expect("session");
                (s.contiguous_prefix(file_id), s.final_size(file_id))
            };
            if pos < prefix {
                let w = writer.clone();
                let (mut d, b) = (digest, std::mem::take(&mut buf));
                let result = blocking(move || {
                    let mut b = b;
                    let mut at = pos;
                    while at < prefix {
                        let n = (prefix - at).min(DIGEST_CHUNK as u64) as usize;
                        w.read_at(at, &mut b[..n])
                            .map_err(|e| Error::io("read back for digest", w.final_path(), e))?;
                        d.update(&b[..n]);
                        at += n as u64;
                    }
                    Ok((d, b))
                })
                .await;
                match result {
                    Ok((d, b)) => {
                        digest = d;
                        buf = b;
                        pos = prefix;
                    }
                    Err(e) => return shared.failure.fail(e, &shared.wake),
                }
                continue;
            }
            if size == Some(pos) {
                let set = shared
                    .session
                    .lock()
                    .expect("session")
                    .set_digest(file_id, digest.finish());
                if let Err(e) = set {
                    return shared.failure.fail(e, &shared.wake);
                }
                shared.wake.notify_waiters();
                break;
            }
            notified.await;
        }
    }
}

async fn stream_reader(shared: Arc<RecvShared>, k: usize, stream: BoxStream, block_size: u32) {
    let mut stream = tokio::io::BufReader::with_capacity(64 << 10, stream);
    let mut header = [0u8; HEADER_LEN];
    let mut buf = vec![0u8; block_size as usize];
    loop {
        if let Err(e) = stream.read_exact(&mut header).await {
            return stream_ended(&shared, k, e);
        }
        let h = match DataFrame::decode(&header) {
            Ok(DataFrame::StreamEnd) => return,
            Ok(DataFrame::Block(h)) => h,
            Err(e) => return shared.failure.fail(e.into(), &shared.wake),
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
        let len = h.length as usize;
        if let Some(pace) = &shared.pace {
            pace.acquire(u64::from(h.length)).await;
        }
        if let Err(e) = stream.read_exact(&mut buf[..len]).await {
            return stream_ended(&shared, k, e);
        }
        let ok = shared
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
                let Some(w) = shared
                    .writers
                    .lock()
                    .expect("writers")
                    .get(&h.file_id)
                    .cloned()
                else {
                    return shared.failure.fail(
                        Error::Protocol(format!("block for closed file {}", h.file_id)),
                        &shared.wake,
                    );
                };
                let moved = std::mem::take(&mut buf);
                let offset = h.offset;
                let written = blocking(move || {
                    let res = w.write_at(offset, &moved[..len]);
                    match res {
                        Ok(()) => Ok(moved),
                        Err(e) => Err(Error::io("write", w.final_path(), e)),
                    }
                })
                .await;
                match written {
                    Ok(b) => buf = b,
                    Err(e) => return shared.failure.fail(e, &shared.wake),
                }
                shared
                    .progress
                    .bytes
                    .fetch_add(u64::from(h.length), Ordering::Relaxed);
                let judged = {
                    let mut s = shared.session.lock().expect("session");
                    s.block_written(k, &h).and_then(|()| s.poll_judgements())
                };
                if let Err(e) = judged {
                    return shared.failure.fail(e, &shared.wake);
                }
            }
        }
        let judged = shared.session.lock().expect("session").poll_judgements();
        if let Err(e) = judged {
            return shared.failure.fail(e, &shared.wake);
        }
        shared.wake.notify_waiters();
    }
}

fn stream_ended(shared: &RecvShared, k: usize, e: std::io::Error) {
    if shared.failure.is_set() || shared.session.lock().expect("session").is_complete() {
        return;
    }
    tracing::warn!("data stream {k} lost: {e}");
    let lost = shared.session.lock().expect("session").stream_lost(k);
    shared.wake.notify_waiters();
    if let Err(e) = lost {
        shared.failure.fail(e, &shared.wake);
    }
}
