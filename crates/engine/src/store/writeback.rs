//! Write-behind for big received files: as blocks land, write-back of the
//! range already written (a few MiB behind the highest write) is started,
//! so that the data is mostly on disk when the file is complete and its
//! final flush is short, instead of the whole file's dirty pages being
//! written at the end while the session waits.
//!
//! Only `sync_file_range(SYNC_FILE_RANGE_WRITE)` is used: it starts
//! write-back without waiting for it and guarantees nothing by itself; the
//! file's durability still comes from the flush before its rename
//! ([`crate::store::commit`]). Pages stay in the page cache (a whole-file
//! digest whose fold gave up reads them back). Blocks written with direct
//! I/O (`fsio/direct.rs`) leave nothing to write back. The one system call has no safe wrapper in
//! `rustix`, hence the `unsafe` here and nowhere else in the store.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Files at least this big get write-behind.
pub const FROM_SIZE: u64 = 16 << 20;

/// Write-back is started in steps of at least this many bytes…
const STEP: u64 = 8 << 20;

/// … ending this far behind the highest byte written, so that blocks
/// still arriving out of order from several streams are not written twice.
const LAG: u64 = 8 << 20;

/// Where write-back of one file has been started up to.
#[derive(Debug, Default)]
pub struct WriteBehind {
    started: AtomicU64,
}

impl WriteBehind {
    /// A block ending at `end` was written to `file`: starts write-back of
    /// what lies far enough behind it, when there is a step's worth.
    pub fn written(&self, file: impl AsFd, end: u64) {
        let upto = end.saturating_sub(LAG);
        let from = self.started.load(Ordering::Relaxed);
        if upto < from + STEP {
            return;
        }
        // One writer starts each range; the others go on writing.
        if self
            .started
            .compare_exchange(from, upto, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        start_writeback(file, from, upto - from);
    }
}

/// `sync_file_range(fd, offset, len, SYNC_FILE_RANGE_WRITE)`. A failure is
/// ignored: nothing depends on it, and the final flush reports any error
/// of writing the data.
fn start_writeback(file: impl AsFd, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    let fd = file.as_fd().as_raw_fd();
    // SAFETY: sync_file_range only reads its integer arguments; `fd` is a
    // descriptor borrowed for the duration of the call.
    let rc = unsafe { libc::sync_file_range(fd, offset, len, libc::SYNC_FILE_RANGE_WRITE) };
    if rc != 0 {
        tracing::debug!(
            "sync_file_range: {} (write-behind skipped)",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_in_steps_behind_the_writes() {
        let file = tempfile::tempfile().expect("temp file");
        let wb = WriteBehind::default();
        wb.written(&file, LAG + STEP - 1);
        assert_eq!(wb.started.load(Ordering::Relaxed), 0, "less than a step");
        wb.written(&file, LAG + STEP);
        assert_eq!(wb.started.load(Ordering::Relaxed), STEP);
        wb.written(&file, LAG + STEP + 1);
        assert_eq!(
            wb.started.load(Ordering::Relaxed),
            STEP,
            "next step not yet"
        );
        wb.written(&file, 5 * STEP);
        assert_eq!(wb.started.load(Ordering::Relaxed), 5 * STEP - LAG);
        wb.written(&file, STEP);
        assert_eq!(
            wb.started.load(Ordering::Relaxed),
            5 * STEP - LAG,
            "never back"
        );
    }
}
