//! Direct I/O for the blocks of a big received file.
//!
//! A buffered `pwrite` copies every byte into the page cache, and the
//! file's flush then writes the dirty pages back: on a loopback copy that
//! was the receiver's biggest cost (docs/EFFICIENCY.md). With `O_DIRECT`
//! the device reads the block straight from the receive buffer. Only what
//! the device accepts goes that way: a block whose offset, address and
//! length are multiples of the file system's direct-I/O alignment (full
//! blocks, which start on [`crate::store::blockbuf`] pages); a file's
//! unaligned tail, and everything on a file system that refuses direct
//! I/O, is written through the page cache as before. Durability is
//! unchanged: the file's flush before its rename covers both.
//!
//! The file is allocated a little ahead of its writes ([`ALLOCATE_AHEAD`]).
//! ext4 and XFS take the inode lock exclusively for a direct write that
//! extends a file or fills a hole, so the streams' writes into a new file
//! went to the device one at a time; into allocated space within the
//! file's size they overlap (docs/EFFICIENCY.md, item 24). Allocating the
//! whole file up front would do the same, but would leave an interrupted
//! copy's partial file at full size on disk (a terabyte for a copy that
//! moved a tenth of it); ahead of the writes, it holds at most
//! [`ALLOCATE_AHEAD`] more than was written, and never grows past the
//! file's size.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustix::fs::FallocateFlags;

use crate::store::blockbuf;

/// How far past its furthest write a file is allocated; it is extended by
/// this much whenever a write comes within half of it of the end.
pub(super) const ALLOCATE_AHEAD: u64 = 64 << 20;

/// A file opened a second time, for direct writes.
#[derive(Debug)]
pub(super) struct Direct {
    file: File,
    /// Offsets and lengths of direct writes are multiples of this (at
    /// least the kernel's page, so no buffered write shares a page with
    /// them: a page dirtied during a direct write could not be dropped).
    align: usize,
    /// Set when the file system refused a direct write: buffered from then on.
    refused: AtomicBool,
    /// Bytes written directly.
    written: AtomicU64,
    /// The file's size once complete.
    size: u64,
    /// Where the space allocated ahead of the writes ends (`None` once the
    /// file system refused to allocate: writes extend the file as before).
    allocated: Mutex<Option<u64>>,
}

impl Direct {
    /// `file`, of `size` bytes once complete, opened again with
    /// `O_DIRECT`, when its file system says it takes direct I/O from
    /// memory aligned as block buffers are.
    pub(super) fn open(file: &File, size: u64) -> Option<Direct> {
        use rustix::fs::{AtFlags, StatxFlags, statx};
        if std::env::var_os("TERN_DIRECT_IO").is_some_and(|v| v == "never") {
            return None;
        }
        let st = statx(file.as_fd(), "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN).ok()?;
        let (mem, offset) = (
            st.stx_dio_mem_align as usize,
            st.stx_dio_offset_align as usize,
        );
        if !StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::DIOALIGN)
            || offset == 0
            || !offset.is_power_of_two()
            || mem > blockbuf::ALIGN
        {
            tracing::debug!("no direct I/O: the file system reports no alignment it takes");
            return None;
        }
        // Through /proc: the same file, whatever happened to its name since.
        let reopened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(format!("/proc/self/fd/{}", file.as_raw_fd()));
        // A partial file taken up again is allocated from where it ends.
        let length = file.metadata().map(|m| m.len()).ok();
        match reopened {
            Ok(direct) => Some(Direct {
                file: direct,
                align: offset.max(rustix::param::page_size()),
                refused: AtomicBool::new(false),
                written: AtomicU64::new(0),
                size,
                allocated: Mutex::new(length),
            }),
            Err(e) => {
                tracing::debug!("no direct I/O: {e}");
                None
            }
        }
    }

    /// How many leading bytes of `data`, to be written at `offset`, can go
    /// direct (0: none).
    pub(super) fn takes(&self, offset: u64, data: &[u8]) -> usize {
        let aligned = offset % self.align as u64 == 0
            && (data.as_ptr() as usize) % blockbuf::ALIGN == 0
            && !self.refused.load(Ordering::Relaxed);
        match aligned {
            true => data.len() / self.align * self.align,
            false => 0,
        }
    }

    /// Bytes written directly so far.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Writes `data` at `offset` directly; `false` when the file system
    /// refused (nothing to undo: the caller writes the same bytes buffered).
    pub(super) fn write(&self, offset: u64, data: &[u8]) -> io::Result<bool> {
        self.allocate_ahead(offset + data.len() as u64);
        match self.file.write_all_at(data, offset) {
            Ok(()) => {
                self.written.fetch_add(data.len() as u64, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!("direct write refused ({e}): writing through the page cache");
                self.refused.store(true, Ordering::Relaxed);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Allocates the file up to [`ALLOCATE_AHEAD`] past `end` (and at most
    /// to its size) when `end` came within half of that of the allocated
    /// space's end. A refusal (a file system without `fallocate`, a full
    /// disk) only stops the allocating: the write that follows reports a
    /// full disk itself.
    fn allocate_ahead(&self, end: u64) {
        let mut allocated = self.allocated.lock().expect("allocated");
        let Some(from) = *allocated else {
            return;
        };
        if from >= self.size || end.saturating_add(ALLOCATE_AHEAD / 2) <= from {
            return;
        }
        let to = end.saturating_add(ALLOCATE_AHEAD).min(self.size);
        // Mode 0: the space is allocated and the file's size moves to `to`,
        // so the writes below it neither extend the file nor fill a hole.
        match rustix::fs::fallocate(&self.file, FallocateFlags::empty(), from, to - from) {
            Ok(()) => *allocated = Some(to),
            Err(e) => {
                tracing::debug!("no allocation ahead of the writes: {e}");
                *allocated = None;
            }
        }
    }
}
