//! Group commit: many received files made durable at once, then moved
//! into place.
//!
//! A received file may appear at its final name only once its content is
//! durable: a crash (or power cut) leaves either the old state and a
//! partial file, or the complete file, never a torn file at a final name.
//! Doing that one file at a time (fsync, rename, directory fsync) costs a
//! journal commit per file, which dominates a tree of small files. This
//! module does it for a group of files in four steps:
//!
//! 1. each file's mode and modification time are applied to its temporary
//!    file ([`Member::prepare`]), so that the flush covers them too;
//! 2. the group's content is flushed: one `syncfs(2)` of the destination
//!    file system when the group is large enough and the kernel reports
//!    write-back errors through `syncfs` (Linux 5.8 and later), otherwise
//!    an `fdatasync` of each file, several at once ([`flush`]). If the
//!    flush fails, nothing is renamed;
//! 3. every file is renamed to its final name ([`Member::place`]);
//! 4. every directory the group renamed in is flushed once (or, with many
//!    directories, the file system once more), so the renames are durable
//!    before anyone is told the files are done.
//!
//! The caller tells the sender a file is done only after [`commit_group`]
//! returned. Why `syncfs` is sound here: the error it reports is sampled
//! per open file description ([`commit_group`]'s `anchor`, opened before
//! any file of the session was written), so a write-back error of any file
//! since then fails the group instead of passing silently.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use crate::{Error, Result};

/// Groups of at least this many files are flushed with one `syncfs`; below
/// it one `fdatasync` per file is cheaper than flushing the whole file
/// system (which may hold other writers' data).
pub const SYNCFS_FROM: usize = 8;

/// Threads issuing `fdatasync`s at once when a group is flushed file by file.
const SYNC_THREADS: usize = 8;

/// A group renaming into more directories than this flushes the file
/// system once more rather than each directory.
const DIRS_ONE_BY_ONE: usize = 4;

/// A received file taking part in a group commit.
pub trait Member: Send + Sync {
    /// Applies the file's mode and modification time to its temporary file.
    fn prepare(&self) -> Result<()>;
    /// The temporary file.
    fn data(&self) -> BorrowedFd<'_>;
    /// The directory it is renamed in.
    fn dir(&self) -> BorrowedFd<'_>;
    /// Renames the temporary file to its final name (its content is
    /// durable by now) and drops its resume journal.
    fn place(&self) -> Result<()>;
    /// The final name, for messages.
    fn shown(&self) -> String;
}

/// How a group's content was made durable (for tests and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Nothing to flush.
    Nothing,
    /// One `syncfs` of the file system.
    SyncFs,
    /// One `fdatasync` per file.
    EachFile,
}

/// Makes `members` durable and renames them into place, in the order the
/// module docs give. `anchor` is a descriptor on the destination file
/// system opened before any member was written (its `syncfs` reports
/// write-back errors since then); without it, or for members on another
/// file system, each file is flushed by itself.
pub fn commit_group(anchor: Option<BorrowedFd<'_>>, members: &[&dyn Member]) -> Result<Flushed> {
    if members.is_empty() {
        return Ok(Flushed::Nothing);
    }
    for m in members {
        m.prepare()?;
    }
    let how = flush(anchor, members)?;
    for m in members {
        m.place()?;
    }
    sync_dirs(anchor, members)?;
    Ok(how)
}

/// Step 2: the content (and the metadata `prepare` set) of every member on
/// stable storage.
fn flush(anchor: Option<BorrowedFd<'_>>, members: &[&dyn Member]) -> Result<Flushed> {
    fault::before_flush(members)?;
    let fs_wide = anchor.filter(|a| {
        members.len() >= SYNCFS_FROM && syncfs_reports_errors() && same_fs(*a, members)
    });
    if let Some(anchor) = fs_wide {
        rustix::fs::syncfs(anchor).map_err(|e| {
            Error::io(
                format!("flush {} received files (syncfs)", members.len()),
                members[0].shown(),
                e.into(),
            )
        })?;
        return Ok(Flushed::SyncFs);
    }
    each_file(members, |m| {
        rustix::fs::fdatasync(m.data()).map_err(|e| Error::io("fsync", m.shown(), e.into()))
    })?;
    Ok(Flushed::EachFile)
}

/// Runs `f` on every member, from a few threads at once; the first error.
fn each_file(members: &[&dyn Member], f: impl Fn(&dyn Member) -> Result<()> + Sync) -> Result<()> {
    if members.len() == 1 {
        return f(members[0]);
    }
    let per = members.len().div_ceil(SYNC_THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = members
            .chunks(per)
            .map(|chunk| s.spawn(|| chunk.iter().try_for_each(|m| f(*m))))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::Protocol("a flush thread panicked".into())))
        })
    })
}

/// Step 4: the renames on stable storage.
fn sync_dirs(anchor: Option<BorrowedFd<'_>>, members: &[&dyn Member]) -> Result<()> {
    let mut seen = BTreeSet::new();
    let mut dirs = Vec::new();
    for m in members {
        let st = rustix::fs::fstat(m.dir())
            .map_err(|e| Error::io("stat directory of", m.shown(), e.into()))?;
        if seen.insert((st.st_dev, st.st_ino)) {
            dirs.push(*m);
        }
    }
    if let Some(anchor) = anchor
        .filter(|a| dirs.len() > DIRS_ONE_BY_ONE && syncfs_reports_errors() && same_fs(*a, members))
    {
        return rustix::fs::syncfs(anchor)
            .map_err(|e| Error::io("flush the directories of", members[0].shown(), e.into()));
    }
    for m in dirs {
        rustix::fs::fsync(m.dir())
            .map_err(|e| Error::io("flush the directory of", m.shown(), e.into()))?;
    }
    Ok(())
}

/// Makes durable what the end of a tree changed in `dirs` (and in the
/// directory `anchor`): links created, directory modes and times, the
/// resume marker removed. One `syncfs` when there are many directories on
/// the file system of `anchor`, else a flush of each.
pub fn flush_dirs(anchor: BorrowedFd<'_>, dirs: &[OwnedFd]) -> std::io::Result<()> {
    let dev = |fd: BorrowedFd<'_>| rustix::fs::fstat(fd).map(|st| st.st_dev);
    let here = dev(anchor)?;
    let one_fs = dirs.iter().all(|d| dev(d.as_fd()).is_ok_and(|d| d == here));
    if dirs.len() > DIRS_ONE_BY_ONE && one_fs && syncfs_reports_errors() {
        return Ok(rustix::fs::syncfs(anchor)?);
    }
    rustix::fs::fsync(anchor)?;
    for d in dirs {
        rustix::fs::fsync(d)?;
    }
    Ok(())
}

/// Whether every member lies on the file system of `anchor`.
fn same_fs(anchor: BorrowedFd<'_>, members: &[&dyn Member]) -> bool {
    let Ok(a) = rustix::fs::fstat(anchor) else {
        return false;
    };
    members
        .iter()
        .all(|m| rustix::fs::fstat(m.data()).is_ok_and(|st| st.st_dev == a.st_dev))
}

/// `syncfs` returns write-back errors only since Linux 5.8; before, it
/// could succeed with data lost, so it is not used.
fn syncfs_reports_errors() -> bool {
    static KNOWN: OnceLock<bool> = OnceLock::new();
    *KNOWN.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .is_ok_and(|release| kernel_at_least(release.trim(), (5, 8)))
    })
}

fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

/// `TERN_FAULT_FLUSH=N` (with the `fault-injection` feature): the N-th
/// group flush of this process fails before anything is flushed or
/// renamed, as a failing disk would make it fail. Tests in one process
/// set it with [`fail_flush`] instead.
#[cfg(feature = "fault-injection")]
mod fault {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::Member;
    use crate::{Error, Result};

    static FLUSHES: AtomicU64 = AtomicU64::new(0);
    static FAIL_AT: OnceLock<AtomicU64> = OnceLock::new();

    fn fail_at() -> &'static AtomicU64 {
        FAIL_AT.get_or_init(|| {
            let n = std::env::var("TERN_FAULT_FLUSH").ok();
            AtomicU64::new(n.and_then(|v| v.parse().ok()).unwrap_or(0))
        })
    }

    pub fn fail_flush(nth: Option<u64>) {
        fail_at().store(nth.unwrap_or(0), Ordering::SeqCst);
        FLUSHES.store(0, Ordering::SeqCst);
    }

    pub(super) fn before_flush(members: &[&dyn Member]) -> Result<()> {
        let n = FLUSHES.fetch_add(1, Ordering::SeqCst) + 1;
        if fail_at().load(Ordering::SeqCst) == n {
            return Err(Error::io(
                format!("flush {} received files (injected fault)", members.len()),
                members[0].shown(),
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        Ok(())
    }
}

/// Makes the `nth` group flush from now on fail (`None`: none), in this
/// process (`fault-injection` feature only).
#[cfg(feature = "fault-injection")]
pub fn fail_flush(nth: Option<u64>) {
    fault::fail_flush(nth);
}

#[cfg(not(feature = "fault-injection"))]
mod fault {
    use super::Member;
    use crate::Result;

    #[inline]
    pub(super) fn before_flush(_members: &[&dyn Member]) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_at_least;

    #[test]
    fn kernel_versions() {
        assert!(kernel_at_least("6.18.44-fc-v769", (5, 8)));
        assert!(kernel_at_least("5.8.0", (5, 8)));
        assert!(!kernel_at_least("5.4.0-150-generic", (5, 8)));
        assert!(!kernel_at_least("4.19.0", (5, 8)));
        assert!(!kernel_at_least("weird", (5, 8)));
    }
}
