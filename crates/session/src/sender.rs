//! The sending side of a session.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use tern_proto::{ControlMsg, EntryKind, EntryMeta, ErrorCode, Existing, FileMeta, RelPath};

use crate::{BlockSet, BlockTask, EntryFailure, FileOutcome, Problem};
use crate::{Error, Result};

mod endgame;
use endgame::Endgame;
pub use endgame::Flight;

/// Files announced at once whatever their size.
pub const FEW_FILES: usize = 32;

/// Past [`FEW_FILES`], more files are announced only while the files in
/// flight hold less than this many bytes.
pub const BYTES_IN_FLIGHT: u64 = 64 << 20;

/// What an announced file counts for against [`BYTES_IN_FLIGHT`] until it
/// is confirmed: its size, or the whole limit when the size is unknown.
fn payload_in_flight(meta: &FileMeta) -> u64 {
    match meta.size {
        FileMeta::UNKNOWN_SIZE => BYTES_IN_FLIGHT,
        size => size,
    }
}

/// Settings of a sender session.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Number of data streams.
    pub streams: u16,
    /// Block payload size.
    pub block_size: u32,
    /// Files announced but not yet confirmed, at most. Bounds the receiver's
    /// open files and the sender's bookkeeping.
    pub max_files_in_flight: usize,
    /// Repair rounds per file before giving up.
    pub max_repair_rounds: u32,
    /// For generated streams of unknown size: stop handing out new blocks at
    /// this time (`tern perf --time`).
    pub deadline: Option<Instant>,
    /// The receiver answers every announcement with `FileCheck` (a skip
    /// policy is in force): no block of a file is handed out before.
    pub await_checks: bool,
    /// Both ends have `ENTRIES`: any bytes in names, links, pipes and
    /// directory times, and per-entry failures that do not end the session.
    pub entries: bool,
}

/// Whether the driver should compute a file's whole-file digest now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestNeed {
    /// The receiver's `FileCheck` has not come yet: the file may be skipped.
    Wait,
    /// Compute it, from the blocks as they are read for sending (or by
    /// reading what they did not cover).
    Compute,
    /// Read it now, whole: the blocks read for sending will not cover it.
    /// The receiver holds a copy of the same size and waits for this
    /// digest to compare (`--skip-existing digest`; no block goes before
    /// it), or it keeps part of the file from an earlier session
    /// (`FileHave`: those blocks are never read).
    Read,
    /// The file is gone (skipped or done): reading it would be wasted.
    None,
}

/// Something to send, in the order the receiver should create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendEntry {
    /// A directory (created even if empty), symbolic link or named pipe.
    Entry(EntryMeta),
    /// A file; its `file_id` is assigned by the session.
    File(FileMeta),
    /// Something the source could not read: reported, not sent.
    Failed(EntryFailure),
}

#[derive(Debug)]
struct OutFile {
    meta: FileMeta,
    /// Next offset never handed out yet.
    next_offset: u64,
    /// Every fresh block has been handed out; `meta.size` is final.
    fresh_done: bool,
    /// Repair blocks of the current round still in the queue.
    repairs_pending: usize,
    /// A round (the first, or a repair) whose `FileSent` is still owed.
    round_open: bool,
    digest: Option<Vec<u8>>,
    rounds: u32,
    /// Blocks the receiver already holds (`FileHave`): never handed out.
    skip: BlockSet,
    /// Waiting for the receiver's `FileCheck`: nothing is handed out.
    held: bool,
    /// The digest of the receiver's copy (`Existing::Digest`), to compare
    /// with ours once we have it.
    theirs: Option<Vec<u8>>,
    /// The receiver's copy matched: the file is skipped, not sent.
    skipped: bool,
}

impl OutFile {
    /// Moves `next_offset` past blocks the receiver holds; true when that
    /// reached the end of the file.
    fn skip_held(&mut self, bs: u64) -> bool {
        let size = self.meta.size;
        if size == FileMeta::UNKNOWN_SIZE {
            return false;
        }
        while self.next_offset < size && self.skip.contains(self.next_offset / bs) {
            self.next_offset += (size - self.next_offset).min(bs);
        }
        self.next_offset >= size
    }
}

/// The sender's state machine. See the module docs of [`crate::session`].
#[derive(Debug)]
pub struct SenderSession {
    cfg: SenderConfig,
    pending: VecDeque<SendEntry>,
    listing_done: bool,
    files: BTreeMap<u32, OutFile>,
    /// Payload bytes of `files` ([`payload_in_flight`] each).
    bytes_in_flight: u64,
    /// Files with fresh blocks still to hand out, in order.
    fresh_order: VecDeque<u32>,
    repair_queue: VecDeque<BlockTask>,
    stream_frames: Vec<u64>,
    stream_alive: Vec<bool>,
    stream_bytes: Vec<u64>,
    outbox: VecDeque<ControlMsg>,
    next_file_id: u32,
    close_sent: bool,
    peer_close: Option<Vec<u64>>,
    blocks_retransmitted: u64,
    finished: Vec<FileOutcome>,
    skipped: Vec<FileOutcome>,
    failed: Vec<EntryFailure>,
    /// Files given up on (a failure at either end): late messages about
    /// them are ignored.
    forgotten: BTreeSet<u32>,
    bytes_total: u64,
    bytes_resumed: u64,
    /// Blocks still on their way per stream, for copies at the end.
    endgame: Endgame,
}

impl SenderSession {
    /// A session with nothing queued yet.
    pub fn new(cfg: SenderConfig) -> SenderSession {
        let n = usize::from(cfg.streams);
        SenderSession {
            cfg,
            pending: VecDeque::new(),
            listing_done: false,
            files: BTreeMap::new(),
            bytes_in_flight: 0,
            fresh_order: VecDeque::new(),
            repair_queue: VecDeque::new(),
            stream_frames: vec![0; n],
            stream_alive: vec![true; n],
            stream_bytes: vec![0; n],
            outbox: VecDeque::new(),
            next_file_id: 1,
            close_sent: false,
            peer_close: None,
            blocks_retransmitted: 0,
            finished: Vec::new(),
            skipped: Vec::new(),
            failed: Vec::new(),
            forgotten: BTreeSet::new(),
            bytes_total: 0,
            bytes_resumed: 0,
            endgame: Endgame::default(),
        }
    }

    /// Queues an entry to send. Files get their `file_id` here: 1, 2, 3…
    /// in push order, returned so the driver can map ids to its sources.
    pub fn push(&mut self, mut entry: SendEntry) -> Option<u32> {
        debug_assert!(!self.listing_done, "push after finish_listing");
        let id = match &mut entry {
            SendEntry::File(meta) => {
                meta.file_id = self.next_file_id;
                self.next_file_id += 1;
                Some(meta.file_id)
            }
            SendEntry::Entry(_) | SendEntry::Failed(_) => None,
        };
        self.pending.push_back(entry);
        self.admit();
        id
    }

    /// No more entries will be pushed.
    pub fn finish_listing(&mut self) {
        self.listing_done = true;
        self.admit();
    }

    /// Removes an announced file, and its bytes from those in flight.
    fn take_file(&mut self, file_id: u32) -> Option<OutFile> {
        let file = self.files.remove(&file_id)?;
        self.bytes_in_flight = self
            .bytes_in_flight
            .saturating_sub(payload_in_flight(&file.meta));
        Some(file)
    }

    /// Announces queued entries while the in-flight limits allow: up to
    /// [`FEW_FILES`] whatever their size, more (up to the configured count)
    /// while they are small. A small file's life spans two round trips or
    /// more (announce, check, blocks, confirmation), so on a long path the
    /// count in flight sets the rate for small files; large files are sent
    /// one after the other anyway, and announcing many of them early would
    /// only leave the receiver holding many empty temporary files.
    fn admit(&mut self) {
        loop {
            let open = self.files.len();
            if open >= self.cfg.max_files_in_flight
                || (open >= FEW_FILES && self.bytes_in_flight >= BYTES_IN_FLIGHT)
            {
                break;
            }
            let Some(entry) = self.pending.pop_front() else {
                break;
            };
            match entry {
                SendEntry::Entry(meta) => self.announce_entry(meta),
                SendEntry::Failed(failure) => self.fail_here(failure, None),
                SendEntry::File(meta) if !self.cfg.entries && !meta.path.is_utf8() => {
                    self.fail_here(old_peer(meta.path, "a name that is not UTF-8"), None);
                }
                SendEntry::File(meta) => {
                    let empty = meta.size == 0;
                    let held = self.cfg.await_checks;
                    self.outbox
                        .push_back(ControlMsg::FileAnnounce(meta.clone()));
                    if !empty && !held {
                        self.fresh_order.push_back(meta.file_id);
                    }
                    self.bytes_in_flight = self
                        .bytes_in_flight
                        .saturating_add(payload_in_flight(&meta));
                    self.files.insert(
                        meta.file_id,
                        OutFile {
                            meta,
                            next_offset: 0,
                            fresh_done: empty,
                            repairs_pending: 0,
                            round_open: true,
                            digest: None,
                            rounds: 0,
                            skip: BlockSet::default(),
                            held,
                            theirs: None,
                            skipped: false,
                        },
                    );
                }
            }
        }
        self.maybe_close();
    }

    /// Announces a directory, link or pipe: as `EntryAnnounce` when the
    /// receiver knows it, a directory as `DirAnnounce` otherwise, and what
    /// an older receiver cannot take as a failure of this end.
    fn announce_entry(&mut self, meta: EntryMeta) {
        if self.cfg.entries {
            self.outbox.push_back(ControlMsg::EntryAnnounce(meta));
            return;
        }
        let unsupported = match meta.kind {
            _ if !meta.path.is_utf8() => "a name that is not UTF-8",
            EntryKind::Dir => {
                self.outbox.push_back(ControlMsg::DirAnnounce {
                    path: meta.path,
                    mode: meta.mode,
                });
                return;
            }
            EntryKind::Symlink { .. } => "a symbolic link",
            EntryKind::Fifo => "a named pipe",
        };
        self.fail_here(old_peer(meta.path, unsupported), None);
    }

    /// Records an entry this end could not send, and tells the receiver
    /// when it can hear it.
    fn fail_here(&mut self, failure: EntryFailure, file_id: Option<u32>) {
        if self.cfg.entries {
            self.outbox.push_back(failure.to_wire(file_id));
        }
        self.failed.push(failure);
    }

    /// Whether one entry's failure can be reported and the session go on
    /// (`ENTRIES` was negotiated); when not, the driver ends the session
    /// with its error instead of calling [`Self::file_failed`].
    pub fn reports_entries(&self) -> bool {
        self.cfg.entries
    }

    /// An announced file cannot be sent on (its source could not be read):
    /// the receiver is told to drop it, and the session goes on. Only with
    /// `ENTRIES` ([`Self::reports_entries`]).
    pub fn file_failed(&mut self, file_id: u32, problem: Problem) {
        let Some(path) = self.files.get(&file_id).map(|f| f.meta.path.clone()) else {
            return;
        };
        self.forget_file(file_id);
        self.fail_here(EntryFailure::here(path, problem), Some(file_id));
        self.admit();
    }

    /// Drops a file from everything that would send it.
    fn forget_file(&mut self, file_id: u32) {
        self.forgotten.insert(file_id);
        self.take_file(file_id);
        self.fresh_order.retain(|&id| id != file_id);
        self.repair_queue.retain(|t| t.file_id != file_id);
    }

    /// Says `Close` once everything is announced (PROTOCOL.md §8.6): the
    /// files in flight go on, and the receiver answers with its own `Close`
    /// as soon as the last of them is done, where waiting for the last
    /// `FileDone` first cost the session a round trip at its end.
    fn maybe_close(&mut self) {
        if self.listing_done && self.pending.is_empty() && !self.close_sent {
            self.close_sent = true;
            self.outbox.push_back(ControlMsg::Close {
                per_stream_bytes: self.stream_bytes.clone(),
            });
        }
    }

    /// The next block for `stream` to send, if any. Workers call this when
    /// their connection can take more, so faster streams take more blocks.
    pub fn next_block(&mut self, stream: usize, now: Instant) -> Option<BlockTask> {
        if !self.stream_alive.get(stream).copied().unwrap_or(false) {
            return None;
        }
        let task = if let Some(task) = self.repair_queue.pop_front() {
            let file = self.files.get_mut(&task.file_id)?;
            file.repairs_pending -= 1;
            task
        } else if let Some(task) = self.next_fresh_block(now) {
            task
        } else {
            let copy = self.copy_at_end(stream, now)?;
            self.stream_frames[stream] += 1;
            return Some(copy);
        };
        self.endgame.handed(stream, task);
        self.stream_frames[stream] += 1;
        self.maybe_file_sent(task.file_id);
        Some(task)
    }

    fn next_fresh_block(&mut self, now: Instant) -> Option<BlockTask> {
        loop {
            let file_id = *self.fresh_order.front()?;
            let bs = u64::from(self.cfg.block_size);
            let file = self
                .files
                .get_mut(&file_id)
                .expect("fresh files are tracked");
            let unknown = file.meta.size == FileMeta::UNKNOWN_SIZE;
            if unknown && self.cfg.deadline.is_some_and(|d| now >= d) {
                file.meta.size = file.next_offset;
                file.fresh_done = true;
                self.fresh_order.pop_front();
                self.maybe_file_sent(file_id);
                continue;
            }
            let offset = file.next_offset;
            let len = (file.meta.size - offset).min(bs);
            file.next_offset += len;
            if file.skip_held(bs) {
                file.fresh_done = true;
                self.fresh_order.pop_front();
            }
            return Some(BlockTask {
                file_id,
                offset,
                len: len as u32,
                repair: false,
                copy: false,
            });
        }
    }

    /// Records payload bytes a stream finished writing.
    pub fn record_sent(&mut self, stream: usize, bytes: u64) {
        self.endgame.written(stream, bytes);
        self.stream_bytes[stream] += bytes;
        self.bytes_total += bytes;
    }

    /// The sender's whole-file digest is ready.
    pub fn set_digest(&mut self, file_id: u32, digest: Vec<u8>) {
        if let Some(file) = self.files.get_mut(&file_id) {
            file.digest = Some(digest);
            self.compare_digests(file_id);
            self.maybe_file_sent(file_id);
        }
    }

    /// Whether the driver should read `file_id` for its digest now.
    pub fn digest_need(&self, file_id: u32) -> DigestNeed {
        match self.files.get(&file_id) {
            None => DigestNeed::None,
            Some(f) if f.held && f.theirs.is_none() => DigestNeed::Wait,
            Some(f) if f.held || !f.skip.is_empty() => DigestNeed::Read,
            Some(_) => DigestNeed::Compute,
        }
    }

    /// Whether every fresh block of `file_id` has been handed out (true for
    /// a file no longer in flight): the driver's digest of the blocks it
    /// read has seen all it will see once those reads are done.
    pub fn blocks_handed_out(&self, file_id: u32) -> bool {
        self.files.get(&file_id).is_none_or(|f| f.fresh_done)
    }

    /// Stops holding a file the receiver does not have: its blocks may go.
    fn release(&mut self, file_id: u32) {
        let Some(file) = self.files.get_mut(&file_id) else {
            return;
        };
        file.held = false;
        if !file.fresh_done {
            self.fresh_order.push_back(file_id);
        }
        self.maybe_file_sent(file_id);
    }

    /// With both digests known, skips the file (equal) or sends it.
    fn compare_digests(&mut self, file_id: u32) {
        let Some(file) = self.files.get_mut(&file_id) else {
            return;
        };
        let (Some(ours), Some(theirs)) = (&file.digest, &file.theirs) else {
            return;
        };
        if !file.held {
            return;
        }
        if ours == theirs {
            // No block goes out: FileSent alone tells the receiver to keep
            // its copy.
            file.held = false;
            file.skipped = true;
            file.fresh_done = true;
            self.maybe_file_sent(file_id);
        } else {
            file.theirs = None;
            self.release(file_id);
        }
    }

    /// The receiver keeps its copy (`Existing::Same`): the file is done.
    fn skip_file(&mut self, file_id: u32) {
        if let Some(file) = self.take_file(file_id) {
            self.skipped.push(FileOutcome {
                path: file.meta.path.display(),
                size: file.meta.size,
                digest: file.digest.unwrap_or_default(),
            });
            self.admit();
        }
    }

    fn maybe_file_sent(&mut self, file_id: u32) {
        let Some(file) = self.files.get_mut(&file_id) else {
            return;
        };
        if file.round_open && file.fresh_done && file.repairs_pending == 0 && !file.held {
            let Some(digest) = file.digest.clone() else {
                return;
            };
            file.round_open = false;
            self.outbox.push_back(ControlMsg::FileSent {
                file_id,
                size: file.meta.size,
                digest,
                stream_marks: self.stream_frames.clone(),
            });
        }
    }

    /// Only the first `joined` streams are connected; the others join later
    /// ([`Self::stream_joined`]) or never.
    pub fn expect_joined(&mut self, joined: usize) {
        for (k, alive) in self.stream_alive.iter_mut().enumerate() {
            *alive = k < joined;
        }
    }

    /// Stream `stream` joined the running session.
    pub fn stream_joined(&mut self, stream: usize) {
        if let Some(alive) = self.stream_alive.get_mut(stream) {
            *alive = true;
        }
    }

    /// Retires `stream`: it gets no more blocks, and everything it carried
    /// was written before its end marker. The last live stream is never
    /// retired; returns whether `stream` was.
    pub fn stream_retired(&mut self, stream: usize) -> bool {
        let live = self.stream_alive.iter().filter(|&&a| a).count();
        match self.stream_alive.get_mut(stream) {
            Some(alive) if *alive && live > 1 => {
                *alive = false;
                true
            }
            _ => false,
        }
    }

    /// Asks the receiving client to bring the session up to `total`
    /// streams (`MoreStreams`).
    pub fn request_streams(&mut self, total: u16) {
        self.outbox.push_back(ControlMsg::MoreStreams { total });
    }

    /// Whether `stream` may be given blocks.
    pub fn stream_is_live(&self, stream: usize) -> bool {
        self.stream_alive.get(stream).copied().unwrap_or(false)
    }

    /// A data stream failed; it gets no more blocks. What it carried is
    /// requested again by the receiver.
    pub fn stream_lost(&mut self, stream: usize) -> Result<()> {
        if let Some(alive) = self.stream_alive.get_mut(stream) {
            *alive = false;
        }
        self.endgame.forget(stream);
        if self.stream_alive.iter().all(|a| !a) && !self.is_complete() {
            return Err(Error::PeerGone("all data streams lost".into()));
        }
        Ok(())
    }

    /// A data stream was given up and a replacement is on its way: it gets
    /// no more blocks, and unlike [`Self::stream_lost`] having no live
    /// stream for a while is no failure.
    pub fn stream_dropped(&mut self, stream: usize) {
        if let Some(alive) = self.stream_alive.get_mut(stream) {
            *alive = false;
        }
        self.endgame.forget(stream);
    }

    /// Data streams that may take blocks now.
    pub fn live_streams(&self) -> usize {
        self.stream_alive.iter().filter(|&&a| a).count()
    }

    /// Feeds a control message from the receiver.
    pub fn handle_control(&mut self, msg: ControlMsg) -> Result<()> {
        let about = match &msg {
            ControlMsg::BlockRequest { file_id, .. }
            | ControlMsg::FileDone { file_id, .. }
            | ControlMsg::FileHave { file_id, .. }
            | ControlMsg::FileCheck { file_id, .. } => Some(*file_id),
            _ => None,
        };
        if about.is_some_and(|id| self.forgotten.contains(&id)) {
            // Crossed our failure report on the way.
            return Ok(());
        }
        match msg {
            ControlMsg::BlockRequest { file_id, ranges } => {
                let bs = u64::from(self.cfg.block_size);
                let max_rounds = self.cfg.max_repair_rounds;
                let file = self.files.get_mut(&file_id).ok_or_else(|| {
                    Error::Protocol(format!("repair request for unknown file {file_id}"))
                })?;
                if !file.fresh_done || file.round_open {
                    return Err(Error::Protocol(format!(
                        "repair request for file {file_id} before it was sent"
                    )));
                }
                file.rounds += 1;
                if file.rounds > max_rounds {
                    return Err(Error::TooManyRetries {
                        path: file.meta.path.display(),
                        rounds: max_rounds,
                    });
                }
                for (offset, len) in ranges {
                    let end = offset
                        .checked_add(u64::from(len))
                        .filter(|&e| e <= file.meta.size && offset % bs == 0);
                    let Some(end) = end else {
                        return Err(Error::Protocol(format!(
                            "repair range {offset}+{len} is not block-aligned within file {file_id}"
                        )));
                    };
                    let mut at = offset;
                    while at < end {
                        let n = (end - at).min(bs);
                        self.repair_queue.push_back(BlockTask {
                            file_id,
                            offset: at,
                            len: n as u32,
                            repair: true,
                            copy: false,
                        });
                        file.repairs_pending += 1;
                        self.blocks_retransmitted += 1;
                        at += n;
                    }
                }
                file.round_open = true;
                self.maybe_file_sent(file_id);
                Ok(())
            }
            ControlMsg::FileDone { file_id, digest } => {
                let file = self.take_file(file_id).ok_or_else(|| {
                    Error::Protocol(format!("completion for unknown file {file_id}"))
                })?;
                if file.round_open || file.digest.as_deref() != Some(&digest[..]) {
                    return Err(Error::Protocol(format!(
                        "completion of file {file_id} does not match what was sent"
                    )));
                }
                let done = FileOutcome {
                    path: file.meta.path.display(),
                    size: file.meta.size,
                    digest,
                };
                if file.skipped {
                    self.skipped.push(done);
                } else {
                    self.finished.push(done);
                }
                self.admit();
                Ok(())
            }
            ControlMsg::FileHave { file_id, ranges } => {
                let bs = u64::from(self.cfg.block_size);
                let file = self.files.get_mut(&file_id).ok_or_else(|| {
                    Error::Protocol(format!("FileHave for unknown file {file_id}"))
                })?;
                let size = file.meta.size;
                for (offset, len) in ranges {
                    let end = offset.checked_add(len).filter(|&e| e <= size);
                    let aligned = offset % bs == 0 && (len % bs == 0 || end == Some(size));
                    if size == FileMeta::UNKNOWN_SIZE || end.is_none() || !aligned || len == 0 {
                        return Err(Error::Protocol(format!(
                            "FileHave range {offset}+{len} does not fit file {file_id} of {size} bytes"
                        )));
                    }
                    let mut o = offset;
                    while o < offset + len {
                        file.skip.insert(o / bs);
                        o += bs;
                    }
                    self.bytes_resumed += len;
                }
                if !file.fresh_done && file.skip_held(bs) {
                    file.fresh_done = true;
                    self.fresh_order.retain(|&id| id != file_id);
                }
                self.maybe_file_sent(file_id);
                Ok(())
            }
            ControlMsg::FileCheck { file_id, existing } => {
                let file = self.files.get_mut(&file_id).ok_or_else(|| {
                    Error::Protocol(format!("FileCheck for unknown file {file_id}"))
                })?;
                if !file.held || file.theirs.is_some() {
                    return Err(Error::Protocol(format!(
                        "FileCheck for file {file_id}, which is not waiting for one"
                    )));
                }
                match existing {
                    Existing::Absent => self.release(file_id),
                    Existing::Same => self.skip_file(file_id),
                    Existing::Digest(theirs) => {
                        file.theirs = Some(theirs);
                        self.compare_digests(file_id);
                    }
                }
                Ok(())
            }
            ControlMsg::EntryFailed {
                path,
                file_id,
                code,
                message,
            } if self.cfg.entries => {
                let msg = (path, file_id, code, message);
                let (failure, file_id) = EntryFailure::from_peer(msg, self.next_file_id)?;
                if let Some(id) = file_id {
                    self.forget_file(id);
                }
                self.failed.push(failure);
                self.admit();
                Ok(())
            }
            ControlMsg::Error { code, message, .. } => Err(Error::Peer { code, message }),
            ControlMsg::Close { per_stream_bytes } => {
                if !self.close_sent {
                    return Err(Error::Protocol("receiver closed before the sender".into()));
                }
                self.peer_close = Some(per_stream_bytes);
                Ok(())
            }
            other => Err(Error::Protocol(format!(
                "unexpected message for a sender: {other:?}"
            ))),
        }
    }

    /// The next control message to send, if any.
    pub fn poll_control(&mut self) -> Option<ControlMsg> {
        self.outbox.pop_front()
    }

    /// True when control messages are waiting in [`Self::poll_control`].
    pub fn has_control(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// True when no block is waiting to be handed out right now (workers
    /// should wait for an event before asking again).
    pub fn idle(&self) -> bool {
        self.repair_queue.is_empty() && self.fresh_order.is_empty()
    }

    /// Both sides have closed: the session is over.
    pub fn is_complete(&self) -> bool {
        self.close_sent && self.peer_close.is_some()
    }

    /// Files whose first-round blocks are not all handed out yet but whose
    /// digest is owed: the driver computes digests for these.
    pub fn file_meta(&self, file_id: u32) -> Option<&FileMeta> {
        self.files.get(&file_id).map(|f| &f.meta)
    }

    /// Bytes the receiver already held from an earlier session.
    pub fn bytes_resumed(&self) -> u64 {
        self.bytes_resumed
    }

    /// Blocks sent again at the receiver's request.
    pub fn blocks_retransmitted(&self) -> u64 {
        self.blocks_retransmitted
    }

    /// Payload bytes written per stream.
    pub fn stream_bytes(&self) -> &[u64] {
        &self.stream_bytes
    }

    /// What the receiver reported in its `Close`, once it has.
    pub fn peer_stream_bytes(&self) -> Option<&[u64]> {
        self.peer_close.as_deref()
    }

    /// Files confirmed by the receiver, in completion order.
    pub fn finished(&self) -> &[FileOutcome] {
        &self.finished
    }

    /// Files not sent because the receiver already had them.
    pub fn skipped(&self) -> &[FileOutcome] {
        &self.skipped
    }

    /// Entries not copied, seen at either end.
    pub fn failed(&self) -> &[EntryFailure] {
        &self.failed
    }
}

/// An entry a receiver without `ENTRIES` cannot take.
fn old_peer(path: RelPath, what: &str) -> EntryFailure {
    EntryFailure {
        path,
        code: ErrorCode::BadRequest,
        message: format!(
            "not copied: {what}, which the receiving tern is too old to take (update it)"
        ),
        by_peer: false,
    }
}
