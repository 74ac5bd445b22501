//! The receiving side of a session.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tern_proto::{BlockHeader, ControlMsg, EntryMeta, Existing, FileMeta, RelPath};

use crate::{BlockSet, EntryFailure, FileOutcome, Problem};
use crate::{Error, Result};

mod ranges;
use ranges::missing_ranges;

/// Settings of a receiver session.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Number of data streams.
    pub streams: u16,
    /// Block payload size agreed for the session.
    pub block_size: u32,
    /// Repair rounds per file before giving up.
    pub max_repair_rounds: u32,
    /// Compare whole-file digests (off for perf, whose data is discarded).
    pub verify_digest: bool,
    /// Both ends have `ENTRIES` (see [`super::SenderConfig::entries`]).
    pub entries: bool,
}

/// What the driver must do for the receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecvAction {
    /// Send this control message to the sender.
    Send(ControlMsg),
    /// Create this directory.
    CreateDir {
        /// Path relative to the transfer's top.
        path: RelPath,
        /// Permission bits.
        mode: u32,
    },
    /// Create this directory, link or pipe (`EntryAnnounce`); on failure
    /// call [`ReceiverSession::entry_failed`].
    Entry(EntryMeta),
    /// The sender gave this file up: drop its temporary file.
    Drop {
        /// The file.
        file_id: u32,
    },
    /// Every file is in place: create the links and apply the directory
    /// modes and times, then call [`ReceiverSession::tree_finished`].
    FinishTree,
    /// Open a temporary file for this announced file.
    OpenFile(FileMeta),
    /// Every block arrived and the digests match: flush, set metadata and
    /// rename into place, then call [`ReceiverSession::finalized`].
    Finalize {
        /// The file.
        file_id: u32,
    },
    /// The sender's digest equals that of the copy already at the final
    /// name: keep that copy, drop the temporary file, then call
    /// [`ReceiverSession::discarded`].
    KeepExisting {
        /// The file.
        file_id: u32,
    },
}

/// What to do with a block that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockVerdict {
    /// Write it at its offset, then call [`ReceiverSession::block_written`].
    Write,
    /// Its check failed: dropped, counted, and requested again later.
    Corrupt,
    /// Already have it (a repair raced the original): dropped.
    Duplicate,
}

#[derive(Debug)]
struct SentInfo {
    size: u64,
    digest: Vec<u8>,
    marks: Vec<u64>,
}

#[derive(Debug)]
struct InFile {
    meta: FileMeta,
    received: BlockSet,
    /// Blocks judged worth writing, written or not yet: a second copy of
    /// one (the sender's endgame) is a duplicate even while the first is
    /// still being written.
    claimed: BlockSet,
    /// Blocks from 0 that are all written: the digest may read this far.
    prefix_blocks: u64,
    /// The sender's latest `FileSent`, while it is being judged.
    sent: Option<SentInfo>,
    /// All blocks present; waiting for our digest or for finalization.
    complete: bool,
    finalizing: bool,
    digest: Option<Vec<u8>>,
    rounds: u32,
    /// The digest of the copy at the final name (skip policy `Digest`).
    existing: Option<Vec<u8>>,
}

/// The receiver's state machine. See the module docs of [`crate::session`].
#[derive(Debug)]
pub struct ReceiverSession {
    cfg: ReceiverConfig,
    files: BTreeMap<u32, InFile>,
    frames: Vec<u64>,
    alive: Vec<bool>,
    stream_bytes: Vec<u64>,
    actions: VecDeque<RecvAction>,
    sender_closed: bool,
    close_sent: bool,
    blocks_corrupt: u64,
    blocks_duplicate: u64,
    finished: Vec<FileOutcome>,
    skipped: Vec<FileOutcome>,
    highest_file_id: u32,
    bytes_resumed: u64,
    failed: Vec<EntryFailure>,
    /// Files given up on at either end: late messages about them are
    /// ignored.
    failed_ids: BTreeSet<u32>,
    finishing: bool,
    bad_digest: Option<u32>,
    /// Per stream: files whose judgement waits for the stream's frames to
    /// reach a mark, as (mark, file id), so that a frame wakes only them.
    mark_waits: Vec<BTreeSet<(u64, u32)>>,
    /// Files to judge again: a block of theirs was written, or a stream
    /// reached their mark.
    due: Vec<u32>,
}

impl ReceiverSession {
    /// A session of up to `cfg.streams` data streams. Streams that have not
    /// joined count as live with no frames: a stream that joins late and
    /// was given blocks is waited for, since the sender only uses streams
    /// that have joined.
    pub fn new(cfg: ReceiverConfig) -> ReceiverSession {
        let n = usize::from(cfg.streams);
        ReceiverSession {
            cfg,
            files: BTreeMap::new(),
            frames: vec![0; n],
            mark_waits: vec![BTreeSet::new(); n],
            due: Vec::new(),
            alive: vec![true; n],
            stream_bytes: vec![0; n],
            actions: VecDeque::new(),
            sender_closed: false,
            close_sent: false,
            blocks_corrupt: 0,
            blocks_duplicate: 0,
            finished: Vec::new(),
            skipped: Vec::new(),
            highest_file_id: 0,
            bytes_resumed: 0,
            failed: Vec::new(),
            failed_ids: BTreeSet::new(),
            finishing: false,
            bad_digest: None,
        }
    }

    /// Feeds a control message from the sender.
    pub fn handle_control(&mut self, msg: ControlMsg) -> Result<()> {
        match msg {
            ControlMsg::DirAnnounce { path, mode } => {
                self.actions.push_back(RecvAction::CreateDir { path, mode });
                Ok(())
            }
            ControlMsg::FileAnnounce(meta) => {
                if meta.file_id <= self.highest_file_id {
                    return Err(Error::Protocol(format!(
                        "file id {} announced out of order",
                        meta.file_id
                    )));
                }
                self.highest_file_id = meta.file_id;
                self.actions.push_back(RecvAction::OpenFile(meta.clone()));
                self.files.insert(
                    meta.file_id,
                    InFile {
                        meta,
                        received: BlockSet::default(),
                        claimed: BlockSet::default(),
                        prefix_blocks: 0,
                        sent: None,
                        complete: false,
                        finalizing: false,
                        digest: None,
                        rounds: 0,
                        existing: None,
                    },
                );
                Ok(())
            }
            ControlMsg::EntryAnnounce(meta) if self.cfg.entries => {
                self.actions.push_back(RecvAction::Entry(meta));
                Ok(())
            }
            ControlMsg::EntryFailed {
                path,
                file_id,
                code,
                message,
            } if self.cfg.entries => {
                let msg = (path, file_id, code, message);
                let below = self.highest_file_id.saturating_add(1);
                let (failure, file_id) = EntryFailure::from_peer(msg, below)?;
                if let Some(id) = file_id {
                    self.failed_ids.insert(id);
                    if self.files.remove(&id).is_some() {
                        self.actions.push_back(RecvAction::Drop { file_id: id });
                    }
                }
                self.failed.push(failure);
                self.maybe_close();
                Ok(())
            }
            ControlMsg::FileSent { file_id, .. } if self.failed_ids.contains(&file_id) => {
                // Crossed our failure report on the way.
                Ok(())
            }
            ControlMsg::FileSent {
                file_id,
                size,
                digest,
                stream_marks,
            } => {
                let streams = self.frames.len();
                let file = self.file_mut(file_id)?;
                let announced = file.meta.size;
                if announced != FileMeta::UNKNOWN_SIZE && size != announced {
                    return Err(Error::Protocol(format!(
                        "file {file_id} announced with {announced} bytes but sent with {size}"
                    )));
                }
                if stream_marks.len() != streams {
                    return Err(Error::Protocol(
                        "stream marks do not match the stream count".into(),
                    ));
                }
                file.meta.size = size;
                let keep_existing = file.existing.as_ref() == Some(&digest);
                file.sent = Some(SentInfo {
                    size,
                    digest,
                    marks: stream_marks,
                });
                if keep_existing && !file.finalizing {
                    // The sender compared digests and found ours equal:
                    // nothing was sent, our copy stays.
                    file.finalizing = true;
                    self.actions.push_back(RecvAction::KeepExisting { file_id });
                    return Ok(());
                }
                self.judge(file_id)
            }
            ControlMsg::Close { .. } => {
                self.sender_closed = true;
                self.maybe_close();
                Ok(())
            }
            ControlMsg::Error { code, message, .. } => Err(Error::Peer { code, message }),
            other => Err(Error::Protocol(format!(
                "unexpected message for a receiver: {other:?}"
            ))),
        }
    }

    fn file_mut(&mut self, file_id: u32) -> Result<&mut InFile> {
        self.files
            .get_mut(&file_id)
            .ok_or_else(|| Error::Protocol(format!("unknown file id {file_id}")))
    }

    /// True once the file's announcement has arrived. A block can overtake
    /// its announcement (they travel on different connections); the driver
    /// holds such a block until this is true.
    pub fn is_announced(&self, file_id: u32) -> bool {
        file_id <= self.highest_file_id
    }

    /// Judges a block whose header arrived on `stream` and whose check was
    /// computed by the driver (`check_ok`).
    pub fn handle_block(
        &mut self,
        stream: usize,
        header: &BlockHeader,
        check_ok: bool,
    ) -> Result<BlockVerdict> {
        if stream >= self.frames.len() {
            return Err(Error::Protocol(format!("no stream {stream}")));
        }
        let bs = u64::from(self.cfg.block_size);
        let file_id = header.file_id;
        let file = match self.files.get(&file_id) {
            Some(file) => file,
            // Finished already: a late repair duplicate.
            None if self.is_announced(file_id) => {
                self.count_frame(stream);
                self.blocks_duplicate += 1;
                return Ok(BlockVerdict::Duplicate);
            }
            None => return Err(Error::Protocol(format!("block for unknown file {file_id}"))),
        };
        let size = file.meta.size;
        let expected_len = if size == FileMeta::UNKNOWN_SIZE {
            bs
        } else {
            size.saturating_sub(header.offset).min(bs)
        };
        if header.offset % bs != 0
            || (size != FileMeta::UNKNOWN_SIZE && header.offset >= size)
            || (u64::from(header.length) != expected_len
                && !(size == FileMeta::UNKNOWN_SIZE && u64::from(header.length) < bs))
        {
            return Err(Error::Protocol(format!(
                "block {}+{} does not fit file {file_id} of {size} bytes",
                header.offset, header.length
            )));
        }
        if !check_ok {
            self.blocks_corrupt += 1;
            self.count_frame(stream);
            return Ok(BlockVerdict::Corrupt);
        }
        let index = header.offset / bs;
        if file.received.contains(index) || file.claimed.contains(index) {
            self.blocks_duplicate += 1;
            self.count_frame(stream);
            return Ok(BlockVerdict::Duplicate);
        }
        if let Some(file) = self.files.get_mut(&file_id) {
            file.claimed.insert(index);
        }
        Ok(BlockVerdict::Write)
    }

    /// True for a file given up at either end (`EntryFailed`).
    pub fn was_given_up(&self, file_id: u32) -> bool {
        self.failed_ids.contains(&file_id)
    }

    /// The file whose whole-file digest did not match, once one did.
    pub fn digest_failed(&self) -> Option<u32> {
        self.bad_digest
    }

    /// A block judged [`BlockVerdict::Write`] is on disk.
    pub fn block_written(&mut self, stream: usize, header: &BlockHeader) -> Result<()> {
        let bs = u64::from(self.cfg.block_size);
        if self.was_given_up(header.file_id) && !self.files.contains_key(&header.file_id) {
            self.count_frame(stream);
            return Ok(());
        }
        let file = self.file_mut(header.file_id)?;
        file.received.insert(header.offset / bs);
        file.prefix_blocks += file.received.run_from(file.prefix_blocks);
        self.stream_bytes[stream] += u64::from(header.length);
        self.due.push(header.file_id);
        self.count_frame(stream);
        Ok(())
    }

    fn count_frame(&mut self, stream: usize) {
        self.frames[stream] += 1;
        let reached = self.frames[stream];
        let waits = &mut self.mark_waits[stream];
        while let Some(&(mark, file_id)) = waits.first() {
            if mark > reached {
                break;
            }
            waits.pop_first();
            self.due.push(file_id);
        }
    }

    /// Judges again the files whose state changed since the last call: a
    /// block of theirs was written, or a stream's frames reached their
    /// mark. The driver calls this after feeding blocks; it costs nothing
    /// for the files that still wait, however many there are.
    pub fn judge_due(&mut self) -> Result<()> {
        let mut due = std::mem::take(&mut self.due);
        due.sort_unstable();
        due.dedup();
        for &file_id in &due {
            self.judge(file_id)?;
        }
        due.clear();
        if self.due.is_empty() {
            self.due = due;
        }
        Ok(())
    }

    /// Re-judges every file waiting for its stream marks (after a stream
    /// was lost: marks on it will never be reached).
    pub fn poll_judgements(&mut self) -> Result<()> {
        let waiting: Vec<u32> = self
            .files
            .iter()
            .filter(|(_, f)| f.sent.is_some())
            .map(|(&id, _)| id)
            .collect();
        for file_id in waiting {
            self.judge(file_id)?;
        }
        Ok(())
    }

    /// The file's partial copy from an earlier session already holds these
    /// verified ranges (block-aligned; from the journal): they count as
    /// received, and the sender is told (`FileHave`) so it skips them.
    pub fn resumed(&mut self, file_id: u32, ranges: Vec<(u64, u64)>) -> Result<()> {
        if ranges.is_empty() {
            return Ok(());
        }
        let bs = u64::from(self.cfg.block_size);
        let file = self.file_mut(file_id)?;
        let mut bytes = 0;
        for &(offset, len) in &ranges {
            let mut o = offset;
            while o < offset + len {
                file.received.insert(o / bs);
                o += bs;
            }
            bytes += len;
        }
        file.prefix_blocks += file.received.run_from(file.prefix_blocks);
        self.bytes_resumed += bytes;
        self.actions
            .push_back(RecvAction::Send(ControlMsg::FileHave { file_id, ranges }));
        self.judge(file_id)
    }

    /// Bytes found at the destination from an earlier session.
    pub fn bytes_resumed(&self) -> u64 {
        self.bytes_resumed
    }

    /// The announced file is already complete at its final name (skip
    /// policy `Size` or `Mtime`): it is done, and the sender is told.
    /// The driver opened nothing for it.
    pub fn skip_existing(&mut self, file_id: u32) -> Result<()> {
        let file = self
            .files
            .remove(&file_id)
            .ok_or_else(|| Error::Protocol(format!("skip of unknown file {file_id}")))?;
        self.actions
            .push_back(RecvAction::Send(ControlMsg::FileCheck {
                file_id,
                existing: Existing::Same,
            }));
        self.skipped.push(FileOutcome {
            path: file.meta.path.display(),
            size: file.meta.size,
            digest: Vec::new(),
        });
        self.maybe_close();
        Ok(())
    }

    /// Tells the sender what is at the final name of a file that was
    /// opened (after any `FileHave`): nothing that counts, or a copy of
    /// the same size with this digest.
    pub fn checked(&mut self, file_id: u32, existing: Existing) -> Result<()> {
        let file = self.file_mut(file_id)?;
        if let Existing::Digest(d) = &existing {
            file.existing = Some(d.clone());
        }
        self.actions
            .push_back(RecvAction::Send(ControlMsg::FileCheck {
                file_id,
                existing,
            }));
        Ok(())
    }

    /// The driver finished a [`RecvAction::KeepExisting`]: the file is
    /// done without having been sent.
    pub fn discarded(&mut self, file_id: u32) -> Result<()> {
        let file = self
            .files
            .remove(&file_id)
            .ok_or_else(|| Error::Protocol(format!("kept unknown file {file_id}")))?;
        let digest = file.existing.unwrap_or_default();
        self.actions
            .push_back(RecvAction::Send(ControlMsg::FileDone {
                file_id,
                digest: digest.clone(),
            }));
        self.skipped.push(FileOutcome {
            path: file.meta.path.display(),
            size: file.meta.size,
            digest,
        });
        self.maybe_close();
        Ok(())
    }

    /// True while the file is announced and not yet done or skipped.
    pub fn is_tracked(&self, file_id: u32) -> bool {
        self.files.contains_key(&file_id)
    }

    /// Files not received because the copy at the destination was kept.
    pub fn skipped(&self) -> &[FileOutcome] {
        &self.skipped
    }

    /// Per stream: whether it is live and a `FileSent` says frames were
    /// written to it that have not arrived.
    pub fn awaited_streams(&self) -> Vec<bool> {
        let mut due = vec![false; self.frames.len()];
        for sent in self.files.values().filter_map(|f| f.sent.as_ref()) {
            for (k, (&mark, (&got, &alive))) in sent
                .marks
                .iter()
                .zip(self.frames.iter().zip(&self.alive))
                .enumerate()
            {
                due[k] |= alive && mark > got;
            }
        }
        due
    }

    /// A data stream ended without its end marker.
    pub fn stream_lost(&mut self, stream: usize) -> Result<()> {
        if let Some(alive) = self.alive.get_mut(stream) {
            *alive = false;
        }
        self.poll_judgements()
    }

    /// Bytes from the start of the file that are on disk, for the digest.
    pub fn contiguous_prefix(&self, file_id: u32) -> u64 {
        self.files.get(&file_id).map_or(0, |f| {
            (f.prefix_blocks * u64::from(self.cfg.block_size)).min(f.meta.size)
        })
    }

    /// The final size once the sender has said it (perf streams), else the
    /// announced size.
    pub fn final_size(&self, file_id: u32) -> Option<u64> {
        self.files
            .get(&file_id)
            .map(|f| f.meta.size)
            .filter(|&s| s != FileMeta::UNKNOWN_SIZE)
    }

    /// The receiver's whole-file digest is ready.
    pub fn set_digest(&mut self, file_id: u32, digest: Vec<u8>) -> Result<()> {
        self.file_mut(file_id)?.digest = Some(digest);
        self.judge(file_id)
    }

    fn judge(&mut self, file_id: u32) -> Result<()> {
        let bs = u64::from(self.cfg.block_size);
        let max_rounds = self.cfg.max_repair_rounds;
        let verify = self.cfg.verify_digest;
        let Some(file) = self.files.get_mut(&file_id) else {
            return Ok(());
        };
        if file.finalizing {
            return Ok(());
        }
        if !file.complete {
            let Some(sent) = &file.sent else {
                return Ok(());
            };
            // With every block in, frames still on their way are copies
            // (the sender's endgame): the file need not wait for them.
            let all_in = file.prefix_blocks.saturating_mul(bs) >= sent.size;
            let waiting = sent
                .marks
                .iter()
                .zip(&self.frames)
                .zip(&self.alive)
                .any(|((&mark, &got), &alive)| alive && got < mark);
            if waiting && !all_in {
                for (k, ((&mark, &got), &alive)) in sent
                    .marks
                    .iter()
                    .zip(&self.frames)
                    .zip(&self.alive)
                    .enumerate()
                {
                    if alive && got < mark {
                        self.mark_waits[k].insert((mark, file_id));
                    }
                }
                return Ok(());
            }
            // A block being written (claimed) is not missing: a copy of it
            // can reach the marks before its write is done.
            let (received, claimed) = (&file.received, &file.claimed);
            let held = |i| received.contains(i) || claimed.contains(i);
            let missing = missing_ranges(held, sent.size, bs);
            if !missing.is_empty() {
                if !self.alive.iter().any(|&a| a) {
                    return Err(Error::PeerGone(format!(
                        "all data streams lost with {} blocks of {} missing",
                        missing.len(),
                        file.meta.path
                    )));
                }
                file.rounds += 1;
                if file.rounds > max_rounds {
                    return Err(Error::TooManyRetries {
                        path: file.meta.path.display(),
                        rounds: max_rounds,
                    });
                }
                file.sent = None;
                self.actions
                    .push_back(RecvAction::Send(ControlMsg::BlockRequest {
                        file_id,
                        ranges: missing,
                    }));
                return Ok(());
            }
            if !all_in {
                // Judged again once the writes in flight are done.
                return Ok(());
            }
            file.complete = true;
        }
        let sent = file.sent.as_ref().expect("a complete file has been sent");
        if !verify {
            file.digest = Some(sent.digest.clone());
        }
        let Some(ours) = &file.digest else {
            return Ok(());
        };
        if *ours != sent.digest {
            self.bad_digest = Some(file_id);
            return Err(Error::DigestMismatch {
                path: file.meta.path.display(),
                sender: hex::encode(&sent.digest),
                receiver: hex::encode(ours),
            });
        }
        file.finalizing = true;
        self.actions.push_back(RecvAction::Finalize { file_id });
        Ok(())
    }

    /// The driver finished a [`RecvAction::Finalize`]: the file is in place.
    pub fn finalized(&mut self, file_id: u32) -> Result<()> {
        let file = self
            .files
            .remove(&file_id)
            .ok_or_else(|| Error::Protocol(format!("finalized unknown file {file_id}")))?;
        let digest = file.digest.unwrap_or_default();
        self.actions
            .push_back(RecvAction::Send(ControlMsg::FileDone {
                file_id,
                digest: digest.clone(),
            }));
        self.finished.push(FileOutcome {
            path: file.meta.path.display(),
            size: file.meta.size,
            digest,
        });
        self.maybe_close();
        Ok(())
    }

    fn maybe_close(&mut self) {
        if self.sender_closed && self.files.is_empty() && !self.finishing {
            self.finishing = true;
            self.actions.push_back(RecvAction::FinishTree);
        }
    }

    /// The driver finished [`RecvAction::FinishTree`]; `failures` are the
    /// links and directories it could not create or set. The session
    /// closes.
    pub fn tree_finished(&mut self, failures: Vec<EntryFailure>) -> Result<()> {
        for failure in failures {
            self.record_failure(failure, None)?;
        }
        self.close_sent = true;
        self.actions.push_back(RecvAction::Send(ControlMsg::Close {
            per_stream_bytes: self.stream_bytes.clone(),
        }));
        Ok(())
    }

    /// A directory, link or pipe could not be created here: the sender is
    /// told and the session goes on. Only with `ENTRIES`
    /// ([`Self::reports_entries`]); the driver fails the session itself
    /// without it, or when its error is not about this entry alone.
    pub fn entry_failed(&mut self, path: RelPath, problem: Problem) -> Result<()> {
        self.record_failure(EntryFailure::here(path, problem), None)
    }

    /// Whether one entry's failure can be reported and the session go on
    /// (`ENTRIES` was negotiated); when not, the driver ends the session
    /// with its error instead of calling [`Self::entry_failed`] or
    /// [`Self::file_failed`].
    pub fn reports_entries(&self) -> bool {
        self.cfg.entries
    }

    /// An announced file could not be opened or created here: as
    /// [`Self::entry_failed`], and the sender stops sending it. The
    /// driver drops whatever it opened for the file.
    pub fn file_failed(&mut self, file_id: u32, problem: Problem) -> Result<()> {
        let Some(file) = self.files.remove(&file_id) else {
            return Ok(());
        };
        self.failed_ids.insert(file_id);
        self.record_failure(EntryFailure::here(file.meta.path, problem), Some(file_id))?;
        self.maybe_close();
        Ok(())
    }

    fn record_failure(&mut self, failure: EntryFailure, file_id: Option<u32>) -> Result<()> {
        // Logged for a daemon's operator; a command's report lists it.
        tracing::info!("not copied: {}: {}", failure.path, failure.message);
        if self.cfg.entries {
            self.actions
                .push_back(RecvAction::Send(failure.to_wire(file_id)));
        }
        self.failed.push(failure);
        Ok(())
    }

    /// Entries not copied, seen at either end.
    pub fn failed(&self) -> &[EntryFailure] {
        &self.failed
    }

    /// The next action for the driver, if any.
    pub fn poll_action(&mut self) -> Option<RecvAction> {
        self.actions.pop_front()
    }

    /// The next action if `take` takes it (the driver batches runs of the
    /// same kind: messages into one write, files opened in one go); an
    /// action it gives back stays first.
    pub fn poll_action_as<T>(
        &mut self,
        take: impl FnOnce(RecvAction) -> std::result::Result<T, RecvAction>,
    ) -> Option<T> {
        match take(self.actions.pop_front()?) {
            Ok(taken) => Some(taken),
            Err(action) => {
                self.actions.push_front(action);
                None
            }
        }
    }

    /// Everything received and confirmed; our `Close` is queued.
    pub fn is_complete(&self) -> bool {
        self.close_sent
    }

    /// Blocks whose check failed.
    pub fn blocks_corrupt(&self) -> u64 {
        self.blocks_corrupt
    }

    /// Blocks received twice.
    pub fn blocks_duplicate(&self) -> u64 {
        self.blocks_duplicate
    }

    /// Payload bytes written per stream.
    pub fn stream_bytes(&self) -> &[u64] {
        &self.stream_bytes
    }

    /// Files verified and in place, in completion order.
    pub fn finished(&self) -> &[FileOutcome] {
        &self.finished
    }

    /// Paths of files announced but not finished (for cleanup messages).
    pub fn unfinished(&self) -> impl Iterator<Item = &FileMeta> {
        self.files.values().map(|f| &f.meta)
    }
}
