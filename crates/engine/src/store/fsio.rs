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
//! the final name. These names, and the resume marker, are tern's own:
//! never listed or served as files ([`is_internal`]).
//!
//! Receiving a tree follows `rsync -a`: directories get their mode and time
//! once everything in them has arrived, links are created last (after every
//! file is in place), and set-user-ID, set-group-ID and sticky bits from
//! the peer are dropped unless this end's user asked to keep them.

mod beneath;

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

use crate::store::journal;
use crate::{Error, Result};
use tern_session::{EntryFailure, SendEntry};

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
    /// Reads back written bytes (for the receiver's whole-file digest).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Flushes to stable storage, applies mode and mtime, and renames the
    /// file into place.
    fn commit(&self) -> Result<()>;
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

/// Files and trees on disk.
#[derive(Debug)]
pub struct FsSource {
    root: Root,
    sources: Vec<PathBuf>,
    recursive: bool,
    keep_special: bool,
}

/// A directory being listed: its handle, where it is, and the
/// subdirectories still to list.
struct Frame {
    fd: OwnedFd,
    rel: RelPath,
    below: PathBuf,
    local: PathBuf,
    subdirs: std::collections::VecDeque<OsString>,
}

impl FsSource {
    /// Sends `sources` (paths under `root`), descending into directories
    /// when `recursive`.
    pub fn new(root: Root, sources: Vec<PathBuf>, recursive: bool) -> FsSource {
        FsSource {
            root,
            sources,
            recursive,
            keep_special: false,
        }
    }

    /// Sends set-user-ID, set-group-ID and sticky bits too (they are
    /// dropped by default; the receiver applies them only if its user also
    /// asked to keep them).
    pub fn keep_special_bits(self, keep: bool) -> FsSource {
        FsSource {
            keep_special: keep,
            ..self
        }
    }

    fn top_name(&self, src: &Path) -> RelPath {
        let named = src.components().rev().find_map(|c| match c {
            Component::Normal(n) => Some(n.as_bytes().to_vec()),
            _ => None,
        });
        let from_root = || match &self.root {
            Root::Confined { shown, .. } => shown.file_name().map(|n| n.as_bytes().to_vec()),
            Root::Ambient => std::env::current_dir()
                .ok()
                .and_then(|d| d.file_name().map(|n| n.as_bytes().to_vec())),
        };
        RelPath(named.or_else(from_root).unwrap_or_else(|| b"root".to_vec()))
    }

    fn file_item(&self, from: ItemFrom, local: PathBuf, rel: RelPath, st: FileStat) -> SourceItem {
        SourceItem {
            entry: SendEntry::File(FileMeta {
                file_id: 0,
                path: rel,
                size: st.size,
                mode: mode_bits(st.mode, self.keep_special),
                mtime_s: st.mtime.0,
                mtime_ns: st.mtime.1,
            }),
            local,
            from,
        }
    }

    fn entry_item(
        &self,
        local: PathBuf,
        rel: RelPath,
        kind: EntryKind,
        st: FileStat,
    ) -> SourceItem {
        SourceItem {
            entry: SendEntry::Entry(EntryMeta {
                path: rel,
                kind,
                mode: mode_bits(st.mode, self.keep_special),
                mtime_s: st.mtime.0,
                mtime_ns: st.mtime.1,
            }),
            local,
            from: ItemFrom::Generated,
        }
    }

    /// Lists the tree below the top-level directory `top`.
    fn walk(
        &self,
        top: OwnedFd,
        rel: RelPath,
        local: PathBuf,
        items: &mut Vec<SourceItem>,
    ) -> Result<()> {
        let handle = Arc::new(top.try_clone().map_err(|e| Error::io("open", &local, e))?);
        let mut stack = vec![self.frame(&handle, top, rel, PathBuf::new(), local, items)];
        while let Some(frame) = stack.last_mut() {
            let Some(name) = frame.subdirs.pop_front() else {
                stack.pop();
                continue;
            };
            let rel = frame.rel.join(name.as_bytes());
            let below = frame.below.join(&name);
            let local = frame.local.join(&name);
            let opened = beneath::open_dir(&frame.fd, &name).and_then(|fd| {
                let st = rustix::fs::fstat(&fd)?;
                Ok((fd, st))
            });
            match opened {
                Ok((fd, st)) => {
                    let st = FileStat::of(&st);
                    items.push(self.entry_item(local.clone(), rel.clone(), EntryKind::Dir, st));
                    let next = self.frame(&handle, fd, rel, below, local, items);
                    stack.push(next);
                }
                Err(e) => items.push(failed(rel, &Error::io("open directory", &local, e))),
            }
        }
        Ok(())
    }

    /// Lists one directory: its files, links and pipes become items now,
    /// its subdirectories are left in the frame for the walk.
    fn frame(
        &self,
        top: &Arc<OwnedFd>,
        fd: OwnedFd,
        rel: RelPath,
        below: PathBuf,
        local: PathBuf,
        items: &mut Vec<SourceItem>,
    ) -> Frame {
        let mut subdirs = std::collections::VecDeque::new();
        let listed = match beneath::list(&fd) {
            Ok(listed) => listed,
            Err(e) => {
                items.push(failed(rel.clone(), &Error::io("list", &local, e)));
                Vec::new()
            }
        };
        for (name, kind) in listed {
            if is_internal(name.as_bytes()) {
                continue;
            }
            if kind == FileType::Directory {
                subdirs.push_back(name);
                continue;
            }
            let child_rel = rel.join(name.as_bytes());
            let child_local = local.join(&name);
            match self.child_item(
                top,
                &fd,
                &name,
                kind,
                &below,
                child_rel.clone(),
                &child_local,
            ) {
                Ok(item) => items.push(item),
                Err(e) => items.push(failed(child_rel, &e)),
            }
        }
        Frame {
            fd,
            rel,
            below,
            local,
            subdirs,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn child_item(
        &self,
        top: &Arc<OwnedFd>,
        dir: &OwnedFd,
        name: &OsStr,
        kind: FileType,
        below: &Path,
        rel: RelPath,
        local: &Path,
    ) -> Result<SourceItem> {
        let io_err = |what: &str, e: io::Error| Error::io(what, local, e);
        let st = FileStat::of(&beneath::lstat(dir, name).map_err(|e| io_err("stat", e))?);
        let local = local.to_path_buf();
        match kind {
            FileType::RegularFile => {
                let from = ItemFrom::Beneath(top.clone(), below.join(name));
                Ok(self.file_item(from, local, rel, st))
            }
            FileType::Symlink => {
                let target = beneath::read_link(dir, name).map_err(|e| io_err("read link", e))?;
                let kind = EntryKind::Symlink {
                    target: RelPath(target),
                };
                Ok(self.entry_item(local, rel, kind, st))
            }
            FileType::Fifo => Ok(self.entry_item(local, rel, EntryKind::Fifo, st)),
            FileType::Socket => Err(Error::BadRequest(format!(
                "{}: a socket, not copied",
                local.display()
            ))),
            _ => Err(Error::BadRequest(format!(
                "{}: a device file, not copied",
                local.display()
            ))),
        }
    }
}

/// What an item needs of a file's status.
#[derive(Debug, Clone, Copy)]
struct FileStat {
    size: u64,
    mode: u32,
    mtime: (i64, u32),
}

impl FileStat {
    fn of(st: &rustix::fs::Stat) -> FileStat {
        FileStat {
            size: st.st_size as u64,
            mode: st.st_mode & 0o7777,
            mtime: stat_mtime(st),
        }
    }

    fn of_meta(meta: &std::fs::Metadata) -> FileStat {
        FileStat {
            size: meta.len(),
            mode: meta.mode() & 0o7777,
            mtime: mtime_of(meta),
        }
    }
}

fn failed(rel: RelPath, e: &Error) -> SourceItem {
    tracing::warn!("not copied: {}: {e}", rel);
    SourceItem {
        entry: SendEntry::Failed(EntryFailure::here(rel, e.problem())),
        local: PathBuf::new(),
        from: ItemFrom::Generated,
    }
}

impl Source for FsSource {
    fn list(&self) -> Result<Vec<SourceItem>> {
        let mut items = Vec::new();
        let mut tops = std::collections::HashSet::new();
        for src in &self.sources {
            let meta = self.root.stat(src)?;
            let name = self.top_name(src);
            if !tops.insert(name.clone()) {
                // Both would land at the same place, one over the other.
                return Err(Error::BadRequest(format!(
                    "two sources are named {name}: copy them separately or rename one"
                )));
            }
            let shown = self.root.shown(src);
            if meta.is_file() {
                let from = ItemFrom::Root(self.root.clone());
                let mut item = self.file_item(from, shown, name, FileStat::of_meta(&meta));
                item.local = src.clone();
                items.push(item);
                continue;
            }
            if !meta.is_dir() {
                return Err(Error::BadRequest(format!(
                    "{}: not a regular file or directory",
                    shown.display()
                )));
            }
            if !self.recursive {
                return Err(Error::BadRequest(format!(
                    "{}: is a directory (use -r to copy it)",
                    shown.display()
                )));
            }
            items.push(self.entry_item(
                shown.clone(),
                name.clone(),
                EntryKind::Dir,
                FileStat::of_meta(&meta),
            ));
            let top = self.root.open_dir_fd(src)?;
            self.walk(top, name, shown, &mut items)?;
        }
        Ok(items)
    }

    fn open(&self, item: &SourceItem) -> Result<Arc<dyn BlockRead>> {
        let file = match &item.from {
            ItemFrom::Root(root) => root.open(&item.local)?,
            ItemFrom::Beneath(top, below) => {
                let err = |what: &str, e: io::Error| Error::io(what, &item.local, e);
                let (dir, name) =
                    beneath::parent_of(top.as_fd(), below).map_err(|e| err("open", e))?;
                let name = name.ok_or_else(|| err("open", io::ErrorKind::InvalidInput.into()))?;
                beneath::open_file(&dir, &name).map_err(|e| err("open", e))?
            }
            ItemFrom::Generated => {
                return Err(Error::BadRequest(format!(
                    "{}: not a file",
                    item.local.display()
                )));
            }
        };
        Ok(Arc::new(FileReader { file }))
    }

    fn digests(&self) -> bool {
        true
    }
}

struct FileReader {
    file: File,
}

impl BlockRead for FileReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
}

/// Where received files go, resolved like scp: into `dest` when it is an
/// existing directory, otherwise as `dest` itself (one source only).
///
/// Everything is resolved beneath a handle of the directory that holds the
/// copy (`dest`, or its parent), without following links.
#[derive(Debug)]
pub struct FsSink {
    top: OwnedFd,
    /// `top` as the user sees it.
    shown: PathBuf,
    plan: DestPlan,
    /// Whether [`Sink::existing`] may look at what is at a final name (not
    /// for a writer who may not read there).
    peek: bool,
    keep_special: bool,
    left: Mutex<LeftForTheEnd>,
}

#[derive(Debug)]
enum DestPlan {
    /// Into the directory: an entry `T/…` lands at `T/…`, except the
    /// source this directory was created from (its resume marker names
    /// it), whose entries land at `…`, as when the copy started.
    Into { resumed: Option<Vec<u8>> },
    /// As this name in the directory: `T/…` lands at `NAME/…`.
    As(OsString),
}

/// An entry whose last step waits for the end of the session.
#[derive(Debug)]
struct Later {
    /// As announced.
    rel: RelPath,
    /// Where it lands, beneath the sink's top.
    at: PathBuf,
    /// Its modification time (none for a directory from an older sender).
    mtime: Option<(i64, u32)>,
}

/// What [`Sink::finish`] does.
#[derive(Debug, Default)]
struct LeftForTheEnd {
    /// Directories, with their modes.
    dirs: Vec<(Later, u32)>,
    /// Links, with their targets.
    links: Vec<(Later, Vec<u8>)>,
    /// Pipes, whose times are set at the end.
    fifos: Vec<Later>,
    /// The directory holding a resume marker to remove.
    marker: Option<PathBuf>,
}

impl FsSink {
    /// Receives `top_level` sources into `dest` (a path under `root`).
    pub fn new(root: Root, dest: PathBuf, top_level: u32) -> Result<FsSink> {
        let (top, shown, plan) = if root.dir_status(&dest)? {
            let top = root.open_dir_fd(&dest)?;
            let resumed = read_marker(&top);
            (top, root.shown(&dest), DestPlan::Into { resumed })
        } else if top_level > 1 {
            return Err(Error::BadRequest(format!(
                "{}: not a directory (copying several sources needs an existing directory)",
                root.shown(&dest).display()
            )));
        } else {
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            if !root.dir_status(&parent)? {
                return Err(Error::NotFound(root.shown(&parent)));
            }
            let name = dest
                .file_name()
                .filter(|n| !is_internal(n.as_bytes()))
                .ok_or_else(|| {
                    Error::BadRequest(format!("{}: not a name to copy to", dest.display()))
                })?;
            let top = root.open_dir_fd(&parent)?;
            (top, root.shown(&parent), DestPlan::As(name.to_os_string()))
        };
        Ok(FsSink {
            top,
            shown,
            plan,
            peek: true,
            keep_special: false,
            left: Mutex::new(LeftForTheEnd::default()),
        })
    }

    /// The same sink, telling nothing about the files already at the
    /// destination: every file counts as absent and is received.
    pub fn blind(self) -> FsSink {
        FsSink {
            peek: false,
            ..self
        }
    }

    /// Applies set-user-ID, set-group-ID and sticky bits the sender sent
    /// (dropped by default), on files this process's user owns.
    pub fn keep_special_bits(self, keep: bool) -> FsSink {
        FsSink {
            keep_special: keep,
            ..self
        }
    }

    /// Where an entry of the transfer lands, beneath `top` (empty: `top`
    /// itself).
    fn target(&self, rel: &RelPath) -> Result<PathBuf> {
        let names = checked_entry_path(rel)?;
        if names.iter().any(|n| is_internal(n.as_bytes())) {
            // Never sent by a tern that lists honestly: a peer planting a
            // resume marker or a partial file of its choice.
            return Err(Error::PermissionDenied {
                path: rel.display(),
                why: "a name tern keeps for its own files".into(),
            });
        }
        let (first, rest) = names.split_first().expect("a checked path has a name");
        Ok(match &self.plan {
            DestPlan::Into { resumed } if resumed.as_deref() == Some(first.as_bytes()) => {
                rest.iter().collect()
            }
            DestPlan::Into { .. } => names.iter().collect(),
            DestPlan::As(name) => std::iter::once(name.as_os_str())
                .chain(rest.iter().copied())
                .collect(),
        })
    }

    fn shown(&self, at: &Path) -> PathBuf {
        self.shown.join(at)
    }

    fn io_err(&self, what: &str, at: &Path, e: io::Error) -> Error {
        Error::io(what, self.shown(at), e)
    }

    /// The directory holding `at` and its last name (`None`: `at` is the
    /// top itself).
    fn parent_of(&self, at: &Path) -> Result<(beneath::Parent<'_>, Option<OsString>)> {
        beneath::parent_of(self.top.as_fd(), at).map_err(|e| self.io_err("open directory", at, e))
    }

    /// Makes a directory of the tree; its own mode and time come at the
    /// end.
    fn make_dir(&self, rel: &RelPath, mode: u32, mtime: Option<(i64, u32)>) -> Result<()> {
        let at = self.target(rel)?;
        let (parent, name) = self.parent_of(&at)?;
        if let Some(name) = &name {
            // Writable by us while it fills, whatever it will end as.
            beneath::make_dir(&parent, name, (mode & 0o777) | 0o700)
                .map_err(|e| self.io_err("create directory", &at, e))?;
        }
        let mut left = self.left.lock().expect("left");
        if matches!(self.plan, DestPlan::As(_)) && at.components().count() == 1 {
            // A copy that creates its destination directory marks it, so
            // that the same command run again continues into it.
            let name = name.expect("one name");
            let dir = beneath::open_dir(&parent, &name)
                .map_err(|e| self.io_err("open directory", &at, e))?;
            let first = checked_entry_path(rel)?[0].as_bytes();
            write_marker(&dir, first).map_err(|e| self.io_err("write resume marker", &at, e))?;
            left.marker = Some(at.clone());
        } else if at.as_os_str().is_empty() && left.marker.is_none() {
            // A resumed copy into the directory it created.
            left.marker = Some(at.clone());
        }
        let later = Later {
            rel: rel.clone(),
            at,
            mtime,
        };
        left.dirs.push((later, mode));
        Ok(())
    }

    fn mode_for(&self, mode: u32, owner: u32) -> u32 {
        mode_bits(mode, self.keep_special && owner == beneath::euid())
    }

    fn finish_links(&self, left: &LeftForTheEnd, failures: &mut Vec<EntryFailure>) {
        for (link, target) in &left.links {
            let at = &link.at;
            let done = self.parent_of(at).and_then(|(parent, name)| {
                let name = name.ok_or_else(|| {
                    Error::BadRequest(format!("{}: not a name for a link", at.display()))
                })?;
                let (s, ns) = link.mtime.unwrap_or_default();
                beneath::make_symlink(&parent, &name, target)
                    .and_then(|()| beneath::set_mtime_nofollow(&parent, &name, s, ns))
                    .map_err(|e| self.io_err("create link", at, e))
            });
            if let Err(e) = done {
                failures.push(EntryFailure::here(link.rel.clone(), e.problem()));
            }
        }
        for fifo in &left.fifos {
            let (at, (s, ns)) = (&fifo.at, fifo.mtime.unwrap_or_default());
            let done = self.parent_of(at).and_then(|(parent, name)| match name {
                Some(name) => beneath::set_mtime_nofollow(&parent, &name, s, ns)
                    .map_err(|e| self.io_err("set time", at, e)),
                None => Ok(()),
            });
            if let Err(e) = done {
                failures.push(EntryFailure::here(fifo.rel.clone(), e.problem()));
            }
        }
    }

    fn finish_dirs(&self, left: &mut LeftForTheEnd, failures: &mut Vec<EntryFailure>) {
        // Deepest first: setting a directory's time must come after
        // everything inside it changed it.
        left.dirs
            .sort_by_key(|(d, _)| std::cmp::Reverse(d.at.components().count()));
        for (dir, mode) in &left.dirs {
            let (rel, at, mtime) = (&dir.rel, &dir.at, dir.mtime);
            let done = self.parent_of(at).and_then(|(parent, name)| {
                let fd = match name {
                    Some(name) => beneath::open_dir(&parent, &name),
                    None => parent.to_owned_fd(),
                }
                .map_err(|e| self.io_err("open directory", at, e))?;
                let owner = rustix::fs::fstat(&fd)
                    .map_err(|e| self.io_err("stat", at, e.into()))?
                    .st_uid;
                beneath::set_mode_and_mtime(&fd, self.mode_for(*mode, owner), mtime)
                    .map_err(|e| self.io_err("set mode and time", at, e))
            });
            if let Err(e) = done {
                failures.push(EntryFailure::here(rel.clone(), e.problem()));
            }
        }
    }
}

/// The source name a resume marker in `dir` records, if there is one.
fn read_marker(dir: &OwnedFd) -> Option<Vec<u8>> {
    let file = beneath::open_file(dir, OsStr::new(RESUME_MARKER)).ok()?;
    // Only a marker this user wrote counts: in a shared directory another
    // user could otherwise steer a copy into it.
    if file.metadata().ok()?.uid() != beneath::euid() {
        return None;
    }
    let mut name = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&file, 4096), &mut name).ok()?;
    let name = name.strip_suffix(b"\n")?.to_vec();
    (!name.is_empty() && !name.contains(&b'/')).then_some(name)
}

fn write_marker(dir: &OwnedFd, source: &[u8]) -> io::Result<()> {
    let file = beneath::create_new(dir, OsStr::new(RESUME_MARKER))?;
    let mut line = source.to_vec();
    line.push(b'\n');
    file.write_all_at(&line, 0)?;
    file.sync_all()
}

impl Sink for FsSink {
    fn create_dir(&self, path: &RelPath, mode: u32) -> Result<()> {
        self.make_dir(path, mode, None)
    }

    fn create_entry(&self, entry: &EntryMeta) -> Result<()> {
        let mtime = (entry.mtime_s, entry.mtime_ns);
        match &entry.kind {
            EntryKind::Dir => self.make_dir(&entry.path, entry.mode, Some(mtime)),
            EntryKind::Symlink { target } => {
                if target.as_bytes().is_empty() || target.as_bytes().contains(&0) {
                    return Err(Error::BadRequest(format!(
                        "{}: a link with an empty or malformed target",
                        entry.path
                    )));
                }
                let at = self.target(&entry.path)?;
                let mut left = self.left.lock().expect("left");
                let later = Later {
                    rel: entry.path.clone(),
                    at,
                    mtime: Some(mtime),
                };
                left.links.push((later, target.as_bytes().to_vec()));
                Ok(())
            }
            EntryKind::Fifo => {
                let at = self.target(&entry.path)?;
                let (parent, name) = self.parent_of(&at)?;
                let name = name.ok_or_else(|| {
                    Error::BadRequest(format!("{}: not a name for a pipe", at.display()))
                })?;
                let mode = self.mode_for(entry.mode, beneath::euid());
                beneath::make_fifo(&parent, &name, mode)
                    .map_err(|e| self.io_err("create named pipe", &at, e))?;
                drop(parent);
                let mut left = self.left.lock().expect("left");
                left.fifos.push(Later {
                    rel: entry.path.clone(),
                    at,
                    mtime: Some(mtime),
                });
                Ok(())
            }
        }
    }

    fn create_file(&self, meta: &FileMeta, block_size: u32, resume: bool) -> Result<Created> {
        let at = self.target(&meta.path)?;
        let (parent, name) = self.parent_of(&at)?;
        let name = name.ok_or_else(|| {
            Error::BadRequest(format!(
                "{}: is a directory, cannot replace it with a file",
                self.shown.display()
            ))
        })?;
        if let Ok(st) = beneath::lstat(&parent, &name) {
            if beneath::kind(&st) == FileType::Directory {
                return Err(Error::BadRequest(format!(
                    "{}: is a directory, cannot replace it with a file",
                    self.shown(&at).display()
                )));
            }
        }
        let temp = partial_name(&name);
        let journal_file = journal_name(&name);
        let header = journal::Header {
            size: meta.size,
            mtime_s: meta.mtime_s,
            mtime_ns: meta.mtime_ns,
            block_size,
            boot: journal::boot_id(),
        };
        // A file of one block has nothing to resume: no journal (which
        // spares small files two extra file operations each).
        let journaled = meta.size > u64::from(block_size);
        let recorded = if resume && journaled {
            beneath::open_file(&parent, &journal_file)
                .ok()
                .filter(|f| f.metadata().is_ok_and(|m| m.uid() == beneath::euid()))
                .and_then(|f| {
                    let mut text = String::new();
                    io::Read::read_to_string(&mut &f, &mut text).ok()?;
                    Some(journal::recover(&text, &header))
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        // A partial file is reused only when this user made it: one planted
        // by another user (the names are predictable) is replaced, never
        // written into and renamed into place as theirs.
        let reused = match recorded.is_empty() {
            true => None,
            false => beneath::open_own(&parent, &temp).map_err(|e| self.io_err("open", &at, e))?,
        };
        let recorded = if reused.is_some() {
            recorded
        } else {
            Vec::new()
        };
        let file = match reused {
            Some(f) => f,
            None => {
                beneath::create_new(&parent, &temp).map_err(|e| self.io_err("create", &at, e))?
            }
        };
        // Only blocks that still read back as they were written count: a
        // partial file changed since (by hand, or by a disk) is sent again
        // where it changed, never trusted.
        let kept = journal::still_intact(&recorded, &file);
        if kept.is_empty() && !recorded.is_empty() {
            file.set_len(0)
                .map_err(|e| self.io_err("truncate", &at, e))?;
        }
        let writer = if journaled {
            let journal_file = beneath::create_new(&parent, &journal_file)
                .map_err(|e| self.io_err("create journal", &at, e))?;
            let data = file.try_clone().map_err(|e| self.io_err("open", &at, e))?;
            let writer = journal::JournalWriter::create(journal_file, data, &header, &kept)
                .map_err(|e| self.io_err("write journal", &at, e))?;
            Some(writer)
        } else {
            None
        };
        let kept_ranges = journal::ranges(&kept);
        let dir = parent
            .to_owned_fd()
            .map_err(|e| self.io_err("open directory", &at, e))?;
        let writer = FileWriter {
            file,
            dir,
            temp,
            name,
            shown: self.shown(&at),
            journal_name: journal_file,
            journal: Mutex::new(writer),
            mode: meta.mode,
            keep_special: self.keep_special,
            mtime: (meta.mtime_s, meta.mtime_ns),
        };
        Ok((Arc::new(writer), kept_ranges))
    }

    fn digests(&self) -> bool {
        true
    }

    fn existing(&self, path: &RelPath) -> Result<Option<Found>> {
        if !self.peek {
            return Ok(None);
        }
        let at = self.target(path)?;
        // What cannot be looked at (missing, a link, a directory) is no
        // copy: the file is sent and replaces it.
        let Ok((parent, Some(name))) = self.parent_of(&at) else {
            return Ok(None);
        };
        match beneath::lstat(&parent, &name) {
            Ok(st) if beneath::kind(&st) == FileType::RegularFile => {}
            _ => return Ok(None),
        }
        let file = match beneath::open_file(&parent, &name) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io_err("open", &at, e)),
        };
        let meta = file.metadata().map_err(|e| self.io_err("stat", &at, e))?;
        let (mtime_s, mtime_ns) = mtime_of(&meta);
        Ok(Some(Found {
            size: meta.len(),
            mtime_s,
            mtime_ns,
            file: Arc::new(FileReader { file }),
        }))
    }

    fn finish(&self) -> Vec<EntryFailure> {
        let mut left = self.left.lock().expect("left");
        let mut failures = Vec::new();
        self.finish_links(&left, &mut failures);
        // The marker goes before directory times are set: removing it
        // changes its directory's time.
        if let Some(at) = left.marker.take() {
            let removed = self.parent_of(&at).and_then(|(parent, name)| {
                let dir = match name {
                    Some(name) => beneath::open_dir(&parent, &name),
                    None => parent.to_owned_fd(),
                };
                dir.and_then(|d| beneath::remove(&d, OsStr::new(RESUME_MARKER)))
                    .map_err(|e| self.io_err("remove resume marker", &at, e))
            });
            if let Err(e) = removed {
                tracing::warn!("{e}");
            }
        }
        self.finish_dirs(&mut left, &mut failures);
        failures
    }
}

struct FileWriter {
    file: File,
    /// The directory the file is received in.
    dir: OwnedFd,
    temp: OsString,
    name: OsString,
    shown: PathBuf,
    journal_name: OsString,
    /// `None` once the file is committed.
    journal: Mutex<Option<journal::JournalWriter>>,
    mode: u32,
    keep_special: bool,
    mtime: (i64, u32),
}

impl BlockWrite for FileWriter {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)?;
        match self.journal.lock().expect("journal").as_mut() {
            Some(j) => j.record(offset, data),
            None => Ok(()),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn commit(&self) -> Result<()> {
        let fail = |what: &str, e: io::Error| Error::io(what.to_string(), &self.shown, e);
        self.file.sync_all().map_err(|e| fail("fsync", e))?;
        let owner = self.file.metadata().map_err(|e| fail("stat", e))?.uid();
        let keep = self.keep_special && owner == beneath::euid();
        beneath::set_mode_and_mtime(&self.file, mode_bits(self.mode, keep), Some(self.mtime))
            .map_err(|e| fail("set mtime", e))?;
        beneath::rename(&self.dir, &self.temp, &self.name)
            .map_err(|e| fail("rename into place", e))?;
        if self.journal.lock().expect("journal").take().is_some() {
            beneath::remove(&self.dir, &self.journal_name)
                .map_err(|e| fail("remove journal", e))?;
        }
        Ok(())
    }

    fn discard(&self) -> Result<()> {
        let fail = |what: &str, e: io::Error| Error::io(what.to_string(), &self.shown, e);
        self.journal.lock().expect("journal").take();
        beneath::remove(&self.dir, &self.temp).map_err(|e| fail("remove partial file", e))?;
        beneath::remove(&self.dir, &self.journal_name).map_err(|e| fail("remove journal", e))
    }

    fn final_path(&self) -> String {
        self.shown.display().to_string()
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // A transfer that failed keeps its partial file: flush it and mark
        // the journal, so that the next run trusts all of it.
        if let Some(j) = self.journal.get_mut().ok().and_then(Option::as_mut) {
            let _ = j.sync();
        }
    }
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
