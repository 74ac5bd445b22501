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

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::store::blockbuf;

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
}

impl Direct {
    /// `file` opened again with `O_DIRECT`, when its file system says it
    /// takes direct I/O from memory aligned as block buffers are.
    pub(super) fn open(file: &File) -> Option<Direct> {
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
        match reopened {
            Ok(direct) => Some(Direct {
                file: direct,
                align: offset.max(rustix::param::page_size()),
                refused: AtomicBool::new(false),
                written: AtomicU64::new(0),
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
}
