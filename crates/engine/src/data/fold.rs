//! Whole-file digests folded from the blocks as they pass, so that no file
//! is read a second time for its digest.
//!
//! A digest such as MD5 or XXH3 takes a file's bytes in order, but blocks
//! are read (sender) and arrive (receiver) out of order across streams. A
//! fold per file keeps the digest up to a cursor. A block at the cursor is
//! hashed at once and releases the blocks held after it; a block ahead of
//! the cursor is held: the receiver hands its buffer over (no copy), the
//! sender, whose buffer still has to go out, first waits briefly for its
//! predecessor and copies only if that did not come. When holding would
//! cost more memory than [`HELD_CAP`], a receiver's block is not held but
//! noted as written: when the cursor reaches it, it is read back from the
//! file, alone. (Many streams with deep socket buffers spread the blocks
//! in flight over more than the cap; giving the whole fold up then made
//! the driver read back the rest of the file, up to all of it.) A sender's
//! fold over the cap gives up ("spoils") and the driver reads the rest of
//! the file from the cursor: the digest is over the bytes in order,
//! whichever way they were fed.
//!
//! The fold knows nothing of sessions: the drivers decide when a file's
//! digest is due and whether a stalled fold must be finished by reading.
//! A fold that ended (finished, taken or forgotten) is closed: its memory
//! is freed and blocks fed for it later (repairs, copies still on their
//! way) are ignored. Ended files are kept as a watermark (every id below
//! it) and the few ended above it, so a session of millions of files keeps
//! no state per finished file, and a peer's made-up ids cost an entry each.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tern_proto::ChecksumAlg;
use tokio::sync::Notify;

use crate::integrity::FileDigest;
use crate::store::blockbuf::BlockBuf;

/// Bytes of block buffers a session may hold ahead of the cursors, over all
/// files: past it a receiver's fold notes blocks instead of holding them,
/// and a sender's spoils.
pub(crate) const HELD_CAP: usize = 128 << 20;

/// Blocks a fold keeps track of ahead of its cursor, held or noted, at
/// most (64 GiB of 1 MiB blocks): past that it gives up.
const MAX_AHEAD: usize = 1 << 16;

/// Reads `buf.len()` bytes of a file at an offset: how a receiver's fold
/// gets back a block it did not hold.
pub(crate) type ReadBack<'a> = &'a dyn Fn(u64, &mut [u8]) -> std::io::Result<()>;

/// Spare buffers kept for reuse (freshly allocated ones cost page faults).
const SPARE_BUFFERS: usize = 16;

/// The folds of one session's files.
#[derive(Debug)]
pub(crate) struct Folds {
    alg: ChecksumAlg,
    files: Mutex<Slots>,
    /// Buffers of released blocks, for reuse.
    spare: Mutex<Vec<BlockBuf>>,
    /// Bytes held over all files.
    held: Mutex<usize>,
    held_cap: usize,
    /// Notified whenever a fold moves on or spoils.
    pub(crate) progress: Notify,
}

/// The open folds, and which files' folds have ended.
#[derive(Debug, Default)]
struct Slots {
    open: HashMap<u32, Arc<Slot>>,
    /// Every file id below this one has ended…
    closed_below: u32,
    /// … and these above it (files end roughly in id order, so this stays
    /// small; a peer's made-up ids cost one entry each, never a table).
    closed_above: BTreeSet<u32>,
}

impl Slots {
    fn is_closed(&self, file_id: u32) -> bool {
        file_id < self.closed_below || self.closed_above.contains(&file_id)
    }

    /// Ends `file_id`'s fold; returns it if it was open.
    fn close(&mut self, file_id: u32) -> Option<Arc<Slot>> {
        if file_id >= self.closed_below {
            self.closed_above.insert(file_id);
            while self.closed_above.remove(&self.closed_below) {
                match self.closed_below.checked_add(1) {
                    Some(next) => self.closed_below = next,
                    None => break,
                }
            }
        }
        self.open.remove(&file_id)
    }
}

#[derive(Debug)]
struct Slot {
    fold: Mutex<Fold>,
    /// Signalled when the cursor moves (a sender's block may be next).
    turn: Condvar,
}

#[derive(Debug)]
struct Fold {
    digest: FileDigest,
    cursor: u64,
    /// Blocks ahead of the cursor, by offset.
    ahead: BTreeMap<u64, Ahead>,
    /// Bytes of the held ones' buffers (what they cost, not their length:
    /// a peer's one-byte block still holds a whole buffer).
    ahead_bytes: usize,
    spoiled: bool,
    /// When the cursor last moved (or the fold began).
    moved: Instant,
}

/// A block ahead of a fold's cursor.
#[derive(Debug)]
enum Ahead {
    /// Its bytes, held: the buffer and the length.
    Held(BlockBuf, usize),
    /// Written to the file but not held (over the cap): this many bytes,
    /// read back when the cursor reaches them.
    Written(usize),
}

/// Where a file's fold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// No fold: nothing was fed yet (or it was taken).
    None,
    /// Folding; the cursor last moved this long ago.
    Folding { cursor: u64, idle: Duration },
    /// Given up: the rest must be read from the cursor.
    Spoiled { cursor: u64 },
}

impl Folds {
    pub(crate) fn new(alg: ChecksumAlg) -> Folds {
        Folds::with_cap(alg, HELD_CAP)
    }

    pub(crate) fn with_cap(alg: ChecksumAlg, held_cap: usize) -> Folds {
        Folds {
            alg,
            files: Mutex::default(),
            spare: Mutex::default(),
            held: Mutex::new(0),
            held_cap,
            progress: Notify::new(),
        }
    }

    /// `file_id`'s fold, begun if need be; `None` once it ended.
    fn slot(&self, file_id: u32) -> Option<Arc<Slot>> {
        let mut slots = self.files.lock().expect("folds");
        if slots.is_closed(file_id) {
            return None;
        }
        let slot = slots.open.entry(file_id).or_insert_with(|| {
            Arc::new(Slot {
                fold: Mutex::new(Fold {
                    digest: FileDigest::new(self.alg),
                    cursor: 0,
                    ahead: BTreeMap::new(),
                    ahead_bytes: 0,
                    spoiled: false,
                    moved: Instant::now(),
                }),
                turn: Condvar::new(),
            })
        });
        Some(slot.clone())
    }

    /// Ends `file_id`'s fold: frees what it held and wakes a sender
    /// waiting in it. Returns the fold's digest so far and its cursor.
    fn close(&self, file_id: u32) -> Option<(FileDigest, u64)> {
        let slot = self.files.lock().expect("folds").close(file_id)?;
        let mut fold = slot.fold.lock().expect("fold");
        self.spoil_locked(&mut fold);
        slot.turn.notify_all();
        let digest = std::mem::replace(&mut fold.digest, FileDigest::new(self.alg));
        Some((digest, fold.cursor))
    }

    /// Marks a file as one whose digest is read, not folded (a resumed
    /// file: its kept blocks never pass).
    pub(crate) fn exclude(&self, file_id: u32) {
        let Some(slot) = self.slot(file_id) else {
            return;
        };
        let mut fold = slot.fold.lock().expect("fold");
        self.spoil_locked(&mut fold);
    }

    /// Feeds a block whose buffer may be kept (the receiver's, just
    /// written); returns a buffer of the same length to go on with.
    /// `read_back` reads the file: blocks that were not held (over the
    /// cap) are read back through it when the cursor reaches them.
    pub(crate) fn feed_owned(
        &self,
        file_id: u32,
        offset: u64,
        buf: BlockBuf,
        len: usize,
        read_back: ReadBack<'_>,
    ) -> BlockBuf {
        let Some(slot) = self.slot(file_id) else {
            return buf;
        };
        let mut fold = slot.fold.lock().expect("fold");
        if fold.spoiled || offset < fold.cursor || fold.ahead.contains_key(&offset) {
            return buf;
        }
        if offset == fold.cursor {
            self.advance(&slot, &mut fold, &buf[..len], Some(read_back));
            return buf;
        }
        if fold.ahead.len() >= MAX_AHEAD {
            // Even noted blocks cost memory: a file of millions of blocks
            // arriving backwards is read back instead.
            self.spoil(&slot, &mut fold);
            return buf;
        }
        let size = buf.len();
        if !self.book(size) {
            fold.ahead.insert(offset, Ahead::Written(len));
            return buf;
        }
        fold.ahead_bytes += size;
        fold.ahead.insert(offset, Ahead::Held(buf, len));
        drop(fold);
        self.spare_buffer(size)
    }

    /// Feeds a block whose buffer is still needed (the sender's, about to
    /// go out): waits up to `wait` for the blocks before it, then copies.
    pub(crate) fn feed_copied(&self, file_id: u32, offset: u64, data: &[u8], wait: Duration) {
        let Some(slot) = self.slot(file_id) else {
            return;
        };
        let mut fold = slot.fold.lock().expect("fold");
        let deadline = Instant::now() + wait;
        while !fold.spoiled && offset > fold.cursor {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            fold = slot.turn.wait_timeout(fold, left).expect("fold").0;
        }
        if fold.spoiled || offset < fold.cursor || fold.ahead.contains_key(&offset) {
            return;
        }
        if offset == fold.cursor {
            self.advance(&slot, &mut fold, data, None);
            return;
        }
        let mut copy = self.spare_buffer(data.len());
        if fold.ahead.len() >= MAX_AHEAD || !self.book(copy.len()) {
            tracing::debug!(
                file_id,
                cursor = fold.cursor,
                "a sender's digest fold gave up: too much held ahead of its cursor"
            );
            self.recycle(copy);
            self.spoil(&slot, &mut fold);
            return;
        }
        fold.ahead_bytes += copy.len();
        copy[..data.len()].copy_from_slice(data);
        fold.ahead.insert(offset, Ahead::Held(copy, data.len()));
    }

    /// Books `len` more bytes held ahead, unless that would pass the cap.
    fn book(&self, len: usize) -> bool {
        let mut held = self.held.lock().expect("held");
        if *held + len > self.held_cap {
            return false;
        }
        *held += len;
        true
    }

    /// Hashes the block at the cursor and every block ahead it releases:
    /// held ones from their buffers, written ones read back through
    /// `read_back`. A failed read spoils the fold (the driver's own read
    /// from the cursor then meets the error and reports it).
    ///
    /// The read happens with the fold locked: the file's other streams
    /// wait to feed it, and their next blocks with them, which holds back
    /// the streams that ran ahead while the cursor catches up (a version
    /// that read unlocked read back as much, within the wide spread of
    /// 16-stream loopback copies). Async callers ask `spoiled_now`, which
    /// does not wait for the lock.
    fn advance(&self, slot: &Slot, fold: &mut Fold, data: &[u8], read_back: Option<ReadBack<'_>>) {
        fold.digest.update(data);
        fold.cursor += data.len() as u64;
        while let Some(entry) = fold.ahead.first_entry() {
            if *entry.key() > fold.cursor {
                break;
            }
            let at = *entry.key();
            match entry.remove() {
                Ahead::Held(buf, len) => {
                    if at == fold.cursor {
                        fold.digest.update(&buf[..len]);
                        fold.cursor += len as u64;
                    }
                    fold.ahead_bytes -= buf.len();
                    *self.held.lock().expect("held") -= buf.len();
                    self.recycle(buf);
                }
                Ahead::Written(len) if at == fold.cursor => {
                    let mut buf = self.spare_buffer(len);
                    let read = read_back.map(|read| read(at, &mut buf[..len]));
                    if let Some(Ok(())) = read {
                        fold.digest.update(&buf[..len]);
                        fold.cursor += len as u64;
                        self.recycle(buf);
                    } else {
                        self.recycle(buf);
                        return self.spoil(slot, fold);
                    }
                }
                Ahead::Written(_) => {}
            }
        }
        self.moved(slot, fold);
    }

    /// Gives the fold up and tells its waiters.
    fn spoil(&self, slot: &Slot, fold: &mut Fold) {
        self.spoil_locked(fold);
        self.moved(slot, fold);
    }

    /// Tells the fold's waiters that it moved on (or spoiled).
    fn moved(&self, slot: &Slot, fold: &mut Fold) {
        fold.moved = Instant::now();
        slot.turn.notify_all();
        self.progress.notify_waiters();
    }

    fn spoil_locked(&self, fold: &mut Fold) {
        fold.spoiled = true;
        let ahead = std::mem::take(&mut fold.ahead);
        *self.held.lock().expect("held") -= fold.ahead_bytes;
        fold.ahead_bytes = 0;
        for (_, ahead) in ahead {
            if let Ahead::Held(buf, _) = ahead {
                self.recycle(buf);
            }
        }
        self.progress.notify_waiters();
    }

    fn spare_buffer(&self, len: usize) -> BlockBuf {
        let found = {
            let mut spare = self.spare.lock().expect("spare");
            let at = spare.iter().position(|b| b.len() >= len);
            at.map(|i| spare.swap_remove(i))
        };
        found.unwrap_or_else(|| BlockBuf::zeroed(len))
    }

    fn recycle(&self, buf: BlockBuf) {
        let mut spare = self.spare.lock().expect("spare");
        if spare.len() < SPARE_BUFFERS {
            spare.push(buf);
        }
    }

    /// Where `file_id`'s fold stands (an ended one is spoiled at 0: were
    /// its digest wanted again, it would be read whole).
    pub(crate) fn standing(&self, file_id: u32) -> Standing {
        let slot = {
            let slots = self.files.lock().expect("folds");
            if slots.is_closed(file_id) {
                return Standing::Spoiled { cursor: 0 };
            }
            let Some(slot) = slots.open.get(&file_id).cloned() else {
                return Standing::None;
            };
            slot
        };
        let fold = slot.fold.lock().expect("fold");
        if fold.spoiled {
            Standing::Spoiled {
                cursor: fold.cursor,
            }
        } else {
            Standing::Folding {
                cursor: fold.cursor,
                idle: fold.moved.elapsed(),
            }
        }
    }

    /// Whether `file_id`'s fold gave up (or ended), without waiting for a
    /// fold in use: one reading a block back holds its lock for as long
    /// as the disk takes, and an async task must not wait that out. A
    /// busy fold counts as going on.
    pub(crate) fn spoiled_now(&self, file_id: u32) -> bool {
        let slot = {
            let slots = self.files.lock().expect("folds");
            if slots.is_closed(file_id) {
                return true;
            }
            match slots.open.get(&file_id) {
                Some(slot) => slot.clone(),
                None => return false,
            }
        };
        match slot.fold.try_lock() {
            Ok(fold) => fold.spoiled,
            Err(std::sync::TryLockError::WouldBlock) => false,
            Err(std::sync::TryLockError::Poisoned(_)) => panic!("fold poisoned"),
        }
    }

    /// Takes `file_id`'s digest so far and the offset it covers up to (a
    /// fresh digest at 0 when nothing was fed); the caller reads the rest.
    /// The fold ends: blocks fed later (repairs) are ignored.
    pub(crate) fn take(&self, file_id: u32) -> (FileDigest, u64) {
        self.close(file_id)
            .unwrap_or_else(|| (FileDigest::new(self.alg), 0))
    }

    /// The digest of `file_id` when its fold covers exactly `size` bytes;
    /// the fold then ends.
    pub(crate) fn finished(&self, file_id: u32, size: u64) -> Option<Vec<u8>> {
        let slot = self
            .files
            .lock()
            .expect("folds")
            .open
            .get(&file_id)
            .cloned()?;
        {
            let fold = slot.fold.lock().expect("fold");
            if fold.spoiled || fold.cursor != size {
                return None;
            }
        }
        let (digest, cursor) = self.close(file_id)?;
        (cursor == size).then(|| digest.finish())
    }

    /// Stops folding `file_id` (done, skipped or given up) and frees what
    /// it held.
    pub(crate) fn forget(&self, file_id: u32) {
        self.close(file_id);
    }

    /// Folds still open (tests: ended ones must not linger).
    #[cfg(test)]
    pub(crate) fn open_folds(&self) -> usize {
        self.files.lock().expect("folds").open.len()
    }
}

#[cfg(test)]
mod tests;
