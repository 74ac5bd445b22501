//! Where bytes come from and go to: sources and sinks.
//!
//! The transfer driver only knows the [`Source`] and [`Sink`] traits. Files
//! on disk ([`FsSource`], [`FsSink`]), generated data for `tern perf`
//! ([`GenSource`]) and the discard sink ([`DiscardSink`]) implement them, and
//! `tests::conformance` runs the same checks against each.
//!
//! The top of a transfer (a source the user named, a destination
//! directory) is reached through a [`Root`]: on the client the ambient file
//! system (the user's own paths, links followed as `cp` follows them); on
//! the daemon a directory handle opened with `cap-std`, which resolves every
//! path beneath it and refuses `..`, absolute paths and links that lead
//! outside. Everything below the top is reached from the top's handle one
//! component at a time without following any link ([`beneath`]): links in a
//! tree are copied as links, and one that lies at the destination, or that
//! this session created, never leads an entry elsewhere.
//!
//! Names are bytes ([`RelPath`]): any name the file system takes is
//! copied. A received file is written to a temporary file beside its final
//! name, `.tern.HASH.partial` (a fixed-length name, so that it fits
//! wherever the final name fits), and renamed into place only after its
//! digest matched; a failed transfer leaves it, with a journal of its
//! verified blocks ([`crate::store::journal`]), for a later resume, and nothing at
//! the final name. A file reaches its final name only once its content is
//! on stable storage; small files are flushed and renamed in groups
//! ([`crate::store::commit`]), big ones are written back as they arrive. These names, and the resume marker, are tern's own:
//! never listed or served as files ([`is_internal`]).
//!
//! The partial name is fixed (a rerun must find it to resume), so two
//! copies to one name would write one file. The session writing a partial
//! file holds its `flock`; another copy to the name is refused until that
//! session ends, and a file reaches its final name, or is removed, only
//! while the partial name still holds this session's own file.
//!
//! Receiving a tree follows `rsync -a`: directories get their mode and time
//! once everything in them has arrived, links are created last (after every
//! file is in place), and set-user-ID, set-group-ID and sticky bits from
//! the peer are dropped unless this end's user asked to keep them.

mod beneath;
mod direct;
mod sink;
mod source;

pub use sink::FsSink;
pub use source::FsSource;

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::FileType;
use tern_proto::{EntryKind, EntryMeta, FileMeta, RelPath};

use crate::store::{commit, journal};
use crate::{Error, Result};
use tern_session::{EntryFailure, SendEntry};

/// What a file refused because another session writes its partial file
/// says (in its message, at either end): a retry may find it free.
pub const ANOTHER_COPY: &str = "another copy to this name is in progress";

/// Suffix of files still being received (`.tern.HASH.partial`).
pub const PARTIAL_SUFFIX: &str = ".partial";

/// The file inside a destination directory that a copy created, naming the
/// source it was created from, until that copy completes (so that running
/// the same command again continues into it instead of below it).
pub const RESUME_MARKER: &str = ".tern.resume";

/// The temporary name a file is received under, beside `final_name`.
pub fn partial_name(final_name: &OsStr) -> OsString {
    let hash = blake3::hash(final_name.as_bytes());
    OsString::from(format!(
        ".tern.{}{PARTIAL_SUFFIX}",
        hex::encode(&hash.as_bytes()[..8])
    ))
}

/// The journal kept beside the temporary file of `final_name`.
pub fn journal_name(final_name: &OsStr) -> OsString {
    let mut name = partial_name(final_name);
    name.push(journal::JOURNAL_SUFFIX);
    name
}

/// True for tern's own files in a destination: partial files and their
/// journals (of this version, `.tern.HASH.partial`, and of earlier ones,
/// `.NAME.tern-partial`) and the resume marker. They are never listed,
/// sent or served.
pub fn is_internal(name: &[u8]) -> bool {
    let hashed = |rest: &[u8]| {
        rest.len() > 16 && rest[..16].iter().all(u8::is_ascii_hexdigit) && {
            let tail = &rest[16..];
            tail == b".partial" || tail == b".partial.journal"
        }
    };
    let ours = name.strip_prefix(b".tern.").is_some_and(hashed);
    let older = name.len() > 1
        && name.starts_with(b".")
        && (name.ends_with(b".tern-partial") || name.ends_with(b".tern-partial.journal"));
    ours || older || name == RESUME_MARKER.as_bytes()
}

/// Reads blocks of one file.
pub trait BlockRead: Send + Sync {
    /// Fills `buf` with the bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// True when every block has the same content (generated data), so a
    /// worker may fill its buffer once and reuse it.
    fn is_constant(&self) -> bool {
        false
    }
}

/// Writes blocks of one file being received.
pub trait BlockWrite: Send + Sync {
    /// Writes `data` at `offset`.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Keeps a resume journal, which records a hash of every block
    /// written ([`BlockWrite::write_hashed`]).
    fn journaled(&self) -> bool {
        false
    }
    /// As [`BlockWrite::write_at`], with `hashed` already fed all of
    /// `data` (the receive path hashes each piece as it arrives, while it
    /// is in the cache): the resume journal records its hash as is.
    fn write_hashed(
        &self,
        offset: u64,
        data: &[u8],
        hashed: &super::journal::BlockHasher,
    ) -> io::Result<()> {
        let _ = hashed;
        self.write_at(offset, data)
    }
    /// Reads back written bytes (for the receiver's whole-file digest).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Bytes written so far with direct I/O, past the page cache.
    fn direct_bytes(&self) -> u64 {
        0
    }
    /// Applies mode and mtime, flushes to stable storage, renames the file
    /// into place and flushes its directory: once this returns, the file
    /// is durable at its final name.
    fn commit(&self) -> Result<()>;
    /// This file as a member of a group commit ([`Sink::commit_group`]);
    /// `None`: it is committed by itself ([`BlockWrite::commit`]).
    fn member(&self) -> Option<&dyn commit::Member> {
        None
    }
    /// Drops the temporary file (and its journal): the copy already at the
    /// final name stays.
    fn discard(&self) -> Result<()> {
        Ok(())
    }
    /// Where the file will be, for messages.
    fn final_path(&self) -> String;
}

/// Where a listed item is read from.
#[derive(Debug, Clone)]
enum ItemFrom {
    /// A top-level file, opened through the root by its path.
    Root(Root),
    /// An entry below a top-level directory: that directory's handle and
    /// the path beneath it, resolved without following links.
    Beneath(Arc<OwnedFd>, PathBuf),
    /// Generated data.
    Generated,
}

/// One thing a source will send.
#[derive(Debug, Clone)]
pub struct SourceItem {
    /// What the receiver is told.
    pub entry: SendEntry,
    /// Where it is, for messages.
    pub local: PathBuf,
    from: ItemFrom,
}

/// Something to send from.
pub trait Source: Send + Sync {
    /// Everything to send, directories before their contents. Entries
    /// below the top that cannot be read are listed as
    /// [`SendEntry::Failed`]; a top-level source that cannot be read is an
    /// error.
    fn list(&self) -> Result<Vec<SourceItem>>;
    /// Opens one listed file.
    fn open(&self, item: &SourceItem) -> Result<Arc<dyn BlockRead>>;
    /// Whether whole-file digests mean anything (not for generated data).
    fn digests(&self) -> bool;
}

/// A file opened to receive into, and the byte ranges a resumed partial
/// copy already holds (empty for a fresh file).
pub type Created = (Arc<dyn BlockWrite>, Vec<(u64, u64)>);

/// A regular file found at a received file's final name.
pub struct Found {
    /// Its size.
    pub size: u64,
    /// Its modification time, seconds since the epoch.
    pub mtime_s: i64,
    /// … and nanoseconds.
    pub mtime_ns: u32,
    /// To read it (for a digest).
    pub file: Arc<dyn BlockRead>,
}

impl std::fmt::Debug for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Found({} bytes)", self.size)
    }
}

/// Something to receive into.
pub trait Sink: Send + Sync {
    /// Creates a directory announced by an older sender (`DirAnnounce`:
    /// a mode, no time).
    fn create_dir(&self, path: &RelPath, mode: u32) -> Result<()>;
    /// Creates a directory, link or pipe (`EntryAnnounce`). Directory
    /// modes and times and links may be left for [`Sink::finish`].
    fn create_entry(&self, entry: &EntryMeta) -> Result<()> {
        match entry.kind {
            EntryKind::Dir => self.create_dir(&entry.path, entry.mode),
            EntryKind::Symlink { .. } | EntryKind::Fifo => Ok(()),
        }
    }
    /// Opens the temporary file for an announced file. With `resume`, a
    /// partial copy kept from an earlier session of the same version of the
    /// file is reopened, and the byte ranges its journal vouches for (and
    /// that still read back as they were written) are returned; otherwise
    /// the file starts empty and the ranges are none.
    fn create_file(&self, meta: &FileMeta, block_size: u32, resume: bool) -> Result<Created>;
    /// Whether whole-file digests are computed (not for the discard sink).
    fn digests(&self) -> bool;
    /// The regular file already at the final name of the file announced as
    /// `path`, if there is one.
    fn existing(&self, _path: &RelPath) -> Result<Option<Found>> {
        Ok(None)
    }
    /// Commits several written files at once: once this returns, every
    /// one is durable at its final name, and on failure none is at its
    /// final name whose content is not durable ([`commit`]). By default,
    /// one by one.
    fn commit_group(&self, files: &[Arc<dyn BlockWrite>]) -> Result<()> {
        files.iter().try_for_each(|w| w.commit())
    }
    /// Every file is in place: creates what was left for the end (links,
    /// directory modes and times) and returns what could not be done.
    fn finish(&self) -> Vec<EntryFailure> {
        Vec::new()
    }
}

/// The file system a side may touch.
#[derive(Debug, Clone)]
pub enum Root {
    /// Everything the process may reach (the client, for the user's paths).
    Ambient,
    /// Only what lies beneath one directory (the daemon's `--root`).
    Confined {
        /// Handle every path is resolved beneath.
        dir: Arc<cap_std::fs::Dir>,
        /// The directory, for messages.
        shown: PathBuf,
    },
}

impl Root {
    /// Opens `path` as a confined root.
    pub fn confined(path: &Path) -> Result<Root> {
        let dir = cap_std::fs::Dir::open_ambient_dir(path, cap_std::ambient_authority())
            .map_err(|e| Error::io("open root", path, e))?;
        Ok(Root::Confined {
            dir: Arc::new(dir),
            shown: path.to_path_buf(),
        })
    }

    /// The subtree `rel` (checked relative, `.` for all) as a root of its
    /// own, resolved beneath this one: what it holds cannot lead back out
    /// of the subtree, and reaching it cannot leave this root.
    pub fn subtree(&self, rel: &Path) -> Result<Root> {
        if rel == Path::new(".") {
            return Ok(self.clone());
        }
        match self {
            Root::Ambient => Root::confined(rel),
            Root::Confined { dir, shown } => {
                let sub = dir.open_dir(rel).map_err(|e| self.err("open", rel, e))?;
                Ok(Root::Confined {
                    dir: Arc::new(sub),
                    shown: shown.join(rel),
                })
            }
        }
    }

    /// `p` as messages show it: relative to a confined root (a daemon
    /// does not tell its clients where its root is).
    fn shown(&self, p: &Path) -> PathBuf {
        p.to_path_buf()
    }

    fn err(&self, what: &str, p: &Path, e: io::Error) -> Error {
        // cap-std reports an escape attempt as PermissionDenied; say why.
        if let (Root::Confined { .. }, io::ErrorKind::PermissionDenied) = (self, e.kind()) {
            return Error::PermissionDenied {
                path: p.display().to_string(),
                why: "outside the served root, or not readable".into(),
            };
        }
        Error::io(what, p, e)
    }

    /// Refuses a path whose last name is one of tern's own files.
    fn refuse_internal(&self, p: &Path) -> Result<()> {
        match p.file_name() {
            Some(n) if is_internal(n.as_bytes()) => Err(Error::NotFound(p.to_path_buf())),
            _ => Ok(()),
        }
    }

    /// Opens a regular file (never waiting on a pipe: `O_NONBLOCK`).
    fn open(&self, p: &Path) -> Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        self.refuse_internal(p)?;
        let nonblock = rustix::fs::OFlags::NONBLOCK.bits() as i32;
        let file = match self {
            Root::Ambient => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nonblock)
                .open(p),
            Root::Confined { dir, .. } => {
                let mut o = cap_std::fs::OpenOptions::new();
                cap_std::fs::OpenOptionsExt::custom_flags(o.read(true), nonblock);
                dir.open_with(p, &o).map(|f| f.into_std())
            }
        }
        .map_err(|e| self.err("open", p, e))?;
        let meta = file.metadata().map_err(|e| self.err("stat", p, e))?;
        if !meta.is_file() && !meta.is_dir() {
            return Err(Error::BadRequest(format!(
                "{}: not a regular file or directory",
                p.display()
            )));
        }
        Ok(file)
    }

    fn stat(&self, p: &Path) -> Result<std::fs::Metadata> {
        self.open(p)?.metadata().map_err(|e| self.err("stat", p, e))
    }

    /// A handle of the directory `p`, for resolving what lies beneath it.
    fn open_dir_fd(&self, p: &Path) -> Result<OwnedFd> {
        let file = match self {
            Root::Ambient => File::open(p).map_err(|e| self.err("open", p, e))?,
            Root::Confined { dir, .. } => {
                // cap-std holds directories as O_PATH handles, which can
                // neither be listed nor changed: open the one it found
                // again, for real.
                let found = dir.open_dir(p).map_err(|e| self.err("open", p, e))?;
                let fd = beneath::reopen_dir(&found).map_err(|e| self.err("open", p, e))?;
                File::from(fd)
            }
        };
        let meta = file.metadata().map_err(|e| self.err("stat", p, e))?;
        if !meta.is_dir() {
            return Err(Error::BadRequest(format!(
                "{}: not a directory",
                p.display()
            )));
        }
        Ok(file.into())
    }

    /// Whether `p` is a directory; `Ok(false)` when it does not exist, an
    /// error when it cannot be looked at (e.g. it leads outside the root).
    fn dir_status(&self, p: &Path) -> Result<bool> {
        let meta = match self {
            Root::Ambient => std::fs::metadata(p).map(|m| m.is_dir()),
            Root::Confined { dir, .. } => dir.metadata(p).map(|m| m.is_dir()),
        };
        match meta {
            Ok(is_dir) => Ok(is_dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.err("stat", p, e)),
        }
    }
}

/// Checks a path that came from the peer: relative, `/`-separated, and
/// free of `..`, `.` and empty components. `allow_top` accepts `""` and
/// `"."` as the top itself.
pub fn checked_relative(path: &str, allow_top: bool) -> Result<PathBuf> {
    if allow_top && (path.is_empty() || path == "." || path == "/") {
        return Ok(PathBuf::from("."));
    }
    let trimmed = path.trim_end_matches('/');
    let names = checked_names(path.as_bytes(), trimmed.as_bytes())?;
    Ok(names.iter().collect())
}

/// The names of an entry's path from the peer, checked as
/// [`checked_relative`] checks, as bytes.
pub fn checked_entry_path(path: &RelPath) -> Result<Vec<&OsStr>> {
    checked_names(path.as_bytes(), path.as_bytes())
}

fn checked_names<'a>(whole: &[u8], trimmed: &'a [u8]) -> Result<Vec<&'a OsStr>> {
    let shown = tern_proto::path::escape(whole);
    let deny = |why: &str| Error::PermissionDenied {
        path: shown.clone(),
        why: why.to_string(),
    };
    if whole.starts_with(b"/") {
        return Err(deny(
            "absolute paths are not allowed; paths are relative to the root",
        ));
    }
    if whole.contains(&0) {
        return Err(Error::BadRequest(format!("{shown:?}: path contains NUL")));
    }
    let mut out = Vec::new();
    for part in trimmed.split(|&b| b == b'/') {
        match part {
            b".." => return Err(deny("'..' would leave the root")),
            b"" | b"." => return Err(Error::BadRequest(format!("{shown:?}: malformed path"))),
            p => out.push(OsStr::from_bytes(p)),
        }
    }
    Ok(out)
}

/// The mode bits to apply or send: the permission bits, and the
/// set-user-ID, set-group-ID and sticky bits only when they are kept.
fn mode_bits(mode: u32, keep_special: bool) -> u32 {
    if keep_special {
        mode & 0o7777
    } else {
        mode & 0o777
    }
}

fn mtime_of(meta: &std::fs::Metadata) -> (i64, u32) {
    (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32)
}

fn stat_mtime(st: &rustix::fs::Stat) -> (i64, u32) {
    (st.st_mtime, st.st_mtime_nsec.clamp(0, 999_999_999) as u32)
}

/// Generated data for `tern perf`: one stream of `size` bytes (or of
/// unknown size, ended by the sender's deadline), random but constant per
/// block so workers fill their buffer once.
#[derive(Debug)]
pub struct GenSource {
    size: u64,
    pattern: Arc<Vec<u8>>,
}

impl GenSource {
    /// A generated stream; `size` may be [`FileMeta::UNKNOWN_SIZE`].
    pub fn new(size: u64, block_size: u32) -> GenSource {
        use rand::RngCore;
        let mut pattern = vec![0u8; block_size as usize];
        rand::thread_rng().fill_bytes(&mut pattern);
        GenSource {
            size,
            pattern: Arc::new(pattern),
        }
    }
}

impl Source for GenSource {
    fn list(&self) -> Result<Vec<SourceItem>> {
        Ok(vec![SourceItem {
            entry: SendEntry::File(FileMeta {
                file_id: 0,
                path: RelPath::from("perf"),
                size: self.size,
                mode: 0o644,
                mtime_s: 0,
                mtime_ns: 0,
            }),
            local: PathBuf::from("perf"),
            from: ItemFrom::Generated,
        }])
    }

    fn open(&self, _item: &SourceItem) -> Result<Arc<dyn BlockRead>> {
        Ok(Arc::new(PatternReader(self.pattern.clone())))
    }

    fn digests(&self) -> bool {
        false
    }
}

struct PatternReader(Arc<Vec<u8>>);

impl BlockRead for PatternReader {
    fn read_at(&self, _offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.0.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "block larger than pattern",
            ));
        }
        buf.copy_from_slice(&self.0[..buf.len()]);
        Ok(())
    }

    fn is_constant(&self) -> bool {
        true
    }
}

/// Receives and forgets (`tern perf`).
#[derive(Debug, Default)]
pub struct DiscardSink;

struct DiscardWriter;

impl BlockWrite for DiscardWriter {
    fn write_at(&self, _offset: u64, _data: &[u8]) -> io::Result<()> {
        Ok(())
    }

    fn read_at(&self, _offset: u64, _buf: &mut [u8]) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "discarded data cannot be read back",
        ))
    }

    fn commit(&self) -> Result<()> {
        Ok(())
    }

    fn final_path(&self) -> String {
        "(discarded)".into()
    }
}

impl Sink for DiscardSink {
    fn create_dir(&self, _path: &RelPath, _mode: u32) -> Result<()> {
        Ok(())
    }

    fn create_file(&self, _meta: &FileMeta, _block_size: u32, _resume: bool) -> Result<Created> {
        Ok((Arc::new(DiscardWriter), Vec::new()))
    }

    fn digests(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
