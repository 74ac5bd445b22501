//! Paths beneath a directory handle, one component at a time, never
//! through a symbolic link.
//!
//! Below the top of a transfer, tern never follows a link: a sender sends
//! links as links, and a receiver must not let a link (one it found, or
//! one this very session created) lead a later entry out of the
//! destination. So every path inside a tree is resolved here with
//! `openat(O_NOFOLLOW)` from the handle of the transfer's top, component
//! by component. That also reaches entries whose full path is longer than
//! `PATH_MAX`, which no call taking a whole path can.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, Timespec, Timestamps, UTIME_OMIT};

/// A directory to run `*at` calls in: the top itself, or one opened below.
#[derive(Debug)]
pub(crate) enum Parent<'a> {
    /// The handle the path was resolved from.
    Top(BorrowedFd<'a>),
    /// A directory opened below it.
    Below(OwnedFd),
}

impl AsFd for Parent<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Parent::Top(fd) => *fd,
            Parent::Below(fd) => fd.as_fd(),
        }
    }
}

impl Parent<'_> {
    /// An owned handle of this directory (a duplicate for the top).
    pub(crate) fn to_owned_fd(&self) -> io::Result<OwnedFd> {
        match self {
            Parent::Top(fd) => fd.try_clone_to_owned(),
            Parent::Below(fd) => fd.try_clone(),
        }
    }
}

/// Opens the directory `name` in `dir`, refusing a link.
pub(crate) fn open_dir(dir: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// A full handle of the directory `dir` refers to (which may be an
/// `O_PATH` handle).
pub(crate) fn reopen_dir(dir: impl AsFd) -> io::Result<OwnedFd> {
    open_dir(dir, OsStr::new("."))
}

/// The normal components of `rel` (a checked relative path).
pub(crate) fn names(rel: &Path) -> Vec<&OsStr> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// The directory holding the last component of `rel`, and that name;
/// `None` for the name when `rel` is the top itself.
pub(crate) fn parent_of<'a>(
    top: BorrowedFd<'a>,
    rel: &Path,
) -> io::Result<(Parent<'a>, Option<OsString>)> {
    let parts = names(rel);
    let Some((last, dirs)) = parts.split_last() else {
        return Ok((Parent::Top(top), None));
    };
    let mut at = Parent::Top(top);
    for d in dirs {
        at = Parent::Below(open_dir(&at, d)?);
    }
    Ok((at, Some(last.to_os_string())))
}

/// `lstat` of `name` in `dir`.
pub(crate) fn lstat(dir: impl AsFd, name: &OsStr) -> io::Result<Stat> {
    Ok(rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
}

/// What kind of entry a stat describes.
pub(crate) fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// Opens the file `name` in `dir` for reading, refusing a link.
pub(crate) fn open_file(dir: impl AsFd, name: &OsStr) -> io::Result<std::fs::File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )?;
    let file = std::fs::File::from(fd);
    // O_NONBLOCK only so that opening a pipe by mistake cannot hang;
    // regular files ignore it, and anything else is refused.
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Why a partial file is not this session's: another copy to the same name
/// holds it.
pub(crate) fn another_copy() -> io::Error {
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!(
            "{} (it holds the partial file); run this one again once it has ended",
            super::ANOTHER_COPY
        ),
    )
}

/// Claims what a partial file's name `name` in `dir` holds: this user's
/// regular file, opened for reading and writing and locked (`None` when
/// nothing is there). A file another session holds locked is refused
/// ([`another_copy`]); one of another user's, or anything but a regular
/// file, is removed, as is this user's read-only partial of a session that
/// ended (its mode was set before its rename), once locked.
pub(crate) fn claim_left(dir: impl AsFd, name: &OsStr) -> io::Result<Option<std::fs::File>> {
    use rustix::io::Errno;
    let rw = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let ro = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    // A name that changes between the open and the lock is looked at again.
    for _ in 0..3 {
        let (fd, writable) = match rustix::fs::openat(&dir, name, rw, Mode::empty()) {
            Ok(fd) => (fd, true),
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::ACCESS | Errno::PERM | Errno::ROFS) => {
                match rustix::fs::openat(&dir, name, ro, Mode::empty()) {
                    Ok(fd) => (fd, false),
                    Err(Errno::NOENT) => return Ok(None),
                    Err(e) => return Err(e.into()),
                }
            }
            Err(Errno::LOOP | Errno::ISDIR | Errno::NXIO | Errno::TXTBSY) => {
                remove(&dir, name)?;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&fd)?;
        if kind(&st) != FileType::RegularFile || st.st_uid != euid() {
            remove(&dir, name)?;
            return Ok(None);
        }
        let file = std::fs::File::from(fd);
        if !lock_exclusive(&file)? {
            return Err(another_copy());
        }
        if !is_at(&dir, name, &file)? {
            continue;
        }
        if !writable {
            remove(&dir, name)?;
            return Ok(None);
        }
        return Ok(Some(file));
    }
    Err(another_copy())
}

/// Creates `name` in `dir` (mode 0600) where nothing is: when something
/// is there by now, another copy to the name made it ([`another_copy`]).
pub(crate) fn create_exclusive(dir: impl AsFd, name: &OsStr) -> io::Result<std::fs::File> {
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => Ok(std::fs::File::from(fd)),
        Err(rustix::io::Errno::EXIST) => Err(another_copy()),
        Err(e) => Err(e.into()),
    }
}

/// Takes `file`'s exclusive lock (`flock`: held by its open file
/// description, so two sessions of one daemon exclude each other, and let
/// go when the process dies); false when another holder has it. Where the
/// file system has no such locks (Lustre mounted without `flock`), true:
/// nothing can be excluded there, and the checks of [`is_at`] remain.
pub(crate) fn lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    use rustix::fs::FlockOperation;
    use rustix::io::Errno;
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(Errno::NOSYS | Errno::OPNOTSUPP | Errno::NOLCK) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// True when `name` in `dir` is `file` itself (not a link, not a file put
/// in its place since it was opened).
pub(crate) fn is_at(dir: impl AsFd, name: &OsStr, file: &std::fs::File) -> io::Result<bool> {
    let here = match lstat(dir, name) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let open = rustix::fs::fstat(file)?;
    Ok(here.st_dev == open.st_dev && here.st_ino == open.st_ino)
}

/// Creates `name` in `dir` afresh (mode 0600), removing whatever was at the
/// name: the file is this process's own, whoever made the name before.
pub(crate) fn create_new(dir: impl AsFd, name: &OsStr) -> io::Result<std::fs::File> {
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let create = || rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(0o600));
    // Usually nothing is there: removing first would cost a lookup per file.
    let fd = match create() {
        Err(rustix::io::Errno::EXIST) => {
            remove(&dir, name)?;
            create()?
        }
        other => other?,
    };
    Ok(std::fs::File::from(fd))
}

/// The names in a directory with their kinds (from the directory entry,
/// or `lstat` where the file system does not say), sorted by bytes.
pub(crate) fn list(dir: impl AsFd) -> io::Result<Vec<(OsString, FileType)>> {
    let dir = dir.as_fd();
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => kind(&lstat(dir, name)?),
            k => k,
        };
        out.push((name.to_os_string(), kind));
    }
    out.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(out)
}

/// The target of the link `name` in `dir`, as bytes.
pub(crate) fn read_link(dir: impl AsFd, name: &OsStr) -> io::Result<Vec<u8>> {
    Ok(rustix::fs::readlinkat(dir, name, Vec::new())?.into_bytes())
}

/// Modification time as `utimensat` takes it, access time left alone.
pub(crate) fn mtime_only(mtime_s: i64, mtime_ns: u32) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: mtime_s,
            tv_nsec: i64::from(mtime_ns.min(999_999_999)),
        },
    }
}

/// Sets the modification time of `name` in `dir` itself, not of what a
/// link points to.
pub(crate) fn set_mtime_nofollow(
    dir: impl AsFd,
    name: &OsStr,
    mtime_s: i64,
    mtime_ns: u32,
) -> io::Result<()> {
    Ok(rustix::fs::utimensat(
        dir,
        name,
        &mtime_only(mtime_s, mtime_ns),
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// Sets mode and modification time of an open file or directory.
pub(crate) fn set_mode_and_mtime(
    fd: impl AsFd,
    mode: u32,
    mtime: Option<(i64, u32)>,
) -> io::Result<()> {
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    if let Some((s, ns)) = mtime {
        rustix::fs::futimens(&fd, &mtime_only(s, ns))?;
    }
    Ok(())
}

/// Creates the directory `name` in `dir` (mode `mode`), or finds it
/// there already; anything else at the name is an error.
pub(crate) fn make_dir(dir: impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) if kind(&lstat(&dir, name)?) == FileType::Directory => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates a named pipe, or keeps the one already there.
pub(crate) fn make_fifo(dir: impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    match rustix::fs::mknodat(&dir, name, FileType::Fifo, Mode::from_raw_mode(mode), 0) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) if kind(&lstat(&dir, name)?) == FileType::Fifo => {
            rustix::fs::chmodat(&dir, name, Mode::from_raw_mode(mode), AtFlags::empty())?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates the link `name` → `target` in `dir`, replacing a link or file
/// already at the name (never a directory).
pub(crate) fn make_symlink(dir: impl AsFd, name: &OsStr, target: &[u8]) -> io::Result<()> {
    match rustix::fs::symlinkat(target, &dir, name) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => {
            let there = kind(&lstat(&dir, name)?);
            if there == FileType::Symlink && read_link(&dir, name)? == target {
                return Ok(());
            }
            if there == FileType::Directory {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "a directory is in the way",
                ));
            }
            rustix::fs::unlinkat(&dir, name, AtFlags::empty())?;
            Ok(rustix::fs::symlinkat(target, &dir, name)?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes the file `name` in `dir`; a missing file is no error.
pub(crate) fn remove(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Renames `from` to `to`, both in `dir`.
pub(crate) fn rename(dir: impl AsFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let dir = dir.as_fd();
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

/// The effective user of this process.
pub(crate) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}
