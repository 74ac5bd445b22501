//! Where bytes come from and go to: sources and sinks.
//!
//! The transfer driver only knows the [`Source`] and [`Sink`] traits. Files
//! on disk ([`FsSource`], [`FsSink`]), generated data for `tern perf`
//! ([`GenSource`]) and the discard sink ([`DiscardSink`]) implement them, and
//! `tests::conformance` runs the same checks against each.
//!
//! Files are reached through a [`Root`]. On the client it is the ambient
//! file system (the user's own paths). On the daemon it is a directory
//! handle opened with `cap-std`, which resolves every path beneath it and
//! refuses `..`, absolute paths and symlinks that lead outside, at the
//! kernel-call level rather than by checking strings first and opening
//! later.
//!
//! A received file is written to `.NAME.tern-partial` beside its final name
//! and renamed into place only after its digest matched; a failed transfer
//! leaves the partial file, with a journal of its verified ranges
//! ([`crate::journal`]), for a later resume, and nothing at the final name.

use std::fs::{File, FileTimes, Permissions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tern_proto::FileMeta;

use crate::journal::{self, JOURNAL_SUFFIX};
use crate::session::SendEntry;
use crate::{Error, Result};

/// Suffix of files still being received.
pub const PARTIAL_SUFFIX: &str = ".tern-partial";

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

/// One thing a source will send.
#[derive(Debug, Clone)]
pub struct SourceItem {
    /// What the receiver is told.
    pub entry: SendEntry,
    /// Where to read it, relative to the source's root.
    pub local: PathBuf,
}

/// Something to send from.
pub trait Source: Send + Sync {
    /// Everything to send, directories before their contents.
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
    /// Creates a directory announced by the sender.
    fn create_dir(&self, path: &str, mode: u32) -> Result<()>;
    /// Opens the temporary file for an announced file. With `resume`, a
    /// partial copy kept from an earlier session of the same version of the
    /// file is reopened, and the byte ranges its journal vouches for are
    /// returned; otherwise the file starts empty and the ranges are none.
    fn create_file(&self, meta: &FileMeta, block_size: u32, resume: bool) -> Result<Created>;
    /// Whether whole-file digests are computed (not for the discard sink).
    fn digests(&self) -> bool;
    /// The regular file already at the final name of the file announced as
    /// `path`, if there is one.
    fn existing(&self, _path: &str) -> Result<Option<Found>> {
        Ok(None)
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

    fn open(&self, p: &Path) -> Result<File> {
        match self {
            Root::Ambient => File::open(p),
            Root::Confined { dir, .. } => dir.open(p).map(|f| f.into_std()),
        }
        .map_err(|e| self.err("open", p, e))
    }

    fn stat(&self, p: &Path) -> Result<std::fs::Metadata> {
        self.open(p)?.metadata().map_err(|e| self.err("stat", p, e))
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

    fn is_dir(&self, p: &Path) -> bool {
        match self {
            Root::Ambient => p.is_dir(),
            Root::Confined { dir, .. } => dir.is_dir(p),
        }
    }

    /// Names and kinds in a directory, sorted by name.
    fn list_dir(&self, p: &Path) -> Result<Vec<(String, EntryKind)>> {
        let mut out = Vec::new();
        let mut push = |name: std::ffi::OsString, is_dir: bool, is_file: bool, is_link: bool| {
            let kind = if is_link {
                EntryKind::Symlink
            } else if is_dir {
                EntryKind::Dir
            } else if is_file {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            out.push((name.to_string_lossy().into_owned(), kind));
        };
        match self {
            Root::Ambient => {
                for e in std::fs::read_dir(p).map_err(|e| self.err("list", p, e))? {
                    let e = e.map_err(|e| self.err("list", p, e))?;
                    let t = e.file_type().map_err(|e| self.err("list", p, e))?;
                    push(e.file_name(), t.is_dir(), t.is_file(), t.is_symlink());
                }
            }
            Root::Confined { dir, .. } => {
                for e in dir.read_dir(p).map_err(|e| self.err("list", p, e))? {
                    let e = e.map_err(|e| self.err("list", p, e))?;
                    let t = e.file_type().map_err(|e| self.err("list", p, e))?;
                    push(e.file_name(), t.is_dir(), t.is_file(), t.is_symlink());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn create_dir(&self, p: &Path, mode: u32) -> Result<()> {
        let made = match self {
            Root::Ambient => std::fs::create_dir(p),
            Root::Confined { dir, .. } => dir.create_dir(p),
        };
        match made {
            Ok(()) => {
                let perm = Permissions::from_mode((mode & 0o7777) | 0o700);
                self.open(p)?
                    .set_permissions(perm)
                    .map_err(|e| self.err("chmod", p, e))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && self.is_dir(p) => Ok(()),
            Err(e) => Err(self.err("create directory", p, e)),
        }
    }

    /// Opens `p` for reading and writing, creating it; `truncate` empties
    /// an existing file, otherwise its contents are kept (a resume).
    fn open_rw(&self, p: &Path, truncate: bool) -> Result<File> {
        match self {
            Root::Ambient => std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(truncate)
                .open(p),
            Root::Confined { dir, .. } => {
                let mut o = cap_std::fs::OpenOptions::new();
                o.read(true).write(true).create(true).truncate(truncate);
                dir.open_with(p, &o).map(|f| f.into_std())
            }
        }
        .map_err(|e| self.err("create", p, e))
    }

    /// The contents of a small text file, or `None` when it cannot be read.
    fn read_text(&self, p: &Path) -> Option<String> {
        let mut text = String::new();
        io::Read::read_to_string(&mut self.open(p).ok()?, &mut text).ok()?;
        Some(text)
    }

    fn remove(&self, p: &Path) -> Result<()> {
        let removed = match self {
            Root::Ambient => std::fs::remove_file(p),
            Root::Confined { dir, .. } => dir.remove_file(p),
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(self.err("remove", p, e)),
            _ => Ok(()),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        match self {
            Root::Ambient => std::fs::rename(from, to),
            Root::Confined { dir, .. } => dir.rename(from, dir, to),
        }
        .map_err(|e| self.err("rename into place", to, e))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EntryKind {
    Dir,
    File,
    Symlink,
    Other,
}

/// Checks a path that came from the peer: relative, `/`-separated, and
/// free of `..`, `.` and empty components. `allow_top` accepts `""` and
/// `"."` as the top itself.
pub fn checked_relative(path: &str, allow_top: bool) -> Result<PathBuf> {
    let deny = |why: &str| Error::PermissionDenied {
        path: path.to_string(),
        why: why.to_string(),
    };
    if allow_top && (path.is_empty() || path == "." || path == "/") {
        return Ok(PathBuf::from("."));
    }
    let trimmed = path.trim_end_matches('/');
    if path.starts_with('/') {
        return Err(deny(
            "absolute paths are not allowed; paths are relative to the root",
        ));
    }
    if path.contains('\0') {
        return Err(Error::BadRequest(format!("{path:?}: path contains NUL")));
    }
    let mut out = PathBuf::new();
    for part in trimmed.split('/') {
        match part {
            ".." => return Err(deny("'..' would leave the root")),
            "" | "." => return Err(Error::BadRequest(format!("{path:?}: malformed path"))),
            p => out.push(p),
        }
    }
    Ok(out)
}

fn mtime_of(meta: &std::fs::Metadata) -> (i64, u32) {
    (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32)
}

/// Files and trees on disk.
#[derive(Debug)]
pub struct FsSource {
    root: Root,
    sources: Vec<PathBuf>,
    recursive: bool,
}

impl FsSource {
    /// Sends `sources` (paths under `root`), descending into directories
    /// when `recursive`.
    pub fn new(root: Root, sources: Vec<PathBuf>, recursive: bool) -> FsSource {
        FsSource {
            root,
            sources,
            recursive,
        }
    }

    fn top_name(&self, src: &Path) -> String {
        let named = src.components().rev().find_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        });
        named
            .or_else(|| match &self.root {
                Root::Confined { shown, .. } => {
                    shown.file_name().map(|n| n.to_string_lossy().into_owned())
                }
                Root::Ambient => std::env::current_dir()
                    .ok()
                    .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned())),
            })
            .unwrap_or_else(|| "root".into())
    }

    fn file_item(&self, local: PathBuf, rel: String, meta: &std::fs::Metadata) -> SourceItem {
        let (mtime_s, mtime_ns) = mtime_of(meta);
        SourceItem {
            entry: SendEntry::File(FileMeta {
                file_id: 0,
                path: rel,
                size: meta.len(),
                mode: meta.mode() & 0o7777,
                mtime_s,
                mtime_ns,
            }),
            local,
        }
    }
}

impl Source for FsSource {
    fn list(&self) -> Result<Vec<SourceItem>> {
        let mut items = Vec::new();
        for src in &self.sources {
            let meta = self.root.stat(src)?;
            let name = self.top_name(src);
            if meta.is_file() {
                items.push(self.file_item(src.clone(), name, &meta));
                continue;
            }
            if !meta.is_dir() {
                return Err(Error::BadRequest(format!(
                    "{}: not a regular file or directory",
                    src.display()
                )));
            }
            if !self.recursive {
                return Err(Error::BadRequest(format!(
                    "{}: is a directory (use -r to copy it)",
                    src.display()
                )));
            }
            let mut stack = vec![(src.clone(), name, meta)];
            while let Some((local, rel, meta)) = stack.pop() {
                items.push(SourceItem {
                    entry: SendEntry::Dir {
                        path: rel.clone(),
                        mode: meta.mode() & 0o7777,
                    },
                    local: local.clone(),
                });
                let mut subdirs = Vec::new();
                for (child, kind) in self.root.list_dir(&local)? {
                    let child_local = local.join(&child);
                    let child_rel = format!("{rel}/{child}");
                    match kind {
                        EntryKind::File => {
                            let m = self.root.stat(&child_local)?;
                            items.push(self.file_item(child_local, child_rel, &m));
                        }
                        EntryKind::Dir => {
                            let m = self.root.stat(&child_local)?;
                            subdirs.push((child_local, child_rel, m));
                        }
                        EntryKind::Symlink | EntryKind::Other => {
                            tracing::warn!(
                                "skipping {}: not a regular file or directory",
                                child_local.display()
                            );
                        }
                    }
                }
                stack.extend(subdirs.into_iter().rev());
            }
        }
        Ok(items)
    }

    fn open(&self, item: &SourceItem) -> Result<Arc<dyn BlockRead>> {
        Ok(Arc::new(FileReader {
            file: self.root.open(&item.local)?,
        }))
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
#[derive(Debug)]
pub struct FsSink {
    root: Root,
    plan: DestPlan,
    /// Whether [`Sink::existing`] may look at what is at a final name (not
    /// for a writer who may not read there).
    peek: bool,
}

#[derive(Debug)]
enum DestPlan {
    Into(PathBuf),
    As(PathBuf),
}

impl FsSink {
    /// Receives `top_level` sources into `dest` (a path under `root`).
    pub fn new(root: Root, dest: PathBuf, top_level: u32) -> Result<FsSink> {
        let plan = if root.dir_status(&dest)? {
            DestPlan::Into(dest)
        } else if top_level > 1 {
            return Err(Error::BadRequest(format!(
                "{}: not a directory (copying several sources needs an existing directory)",
                dest.display()
            )));
        } else {
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            if !root.dir_status(&parent)? {
                return Err(Error::NotFound(parent));
            }
            DestPlan::As(dest)
        };
        Ok(FsSink {
            root,
            plan,
            peek: true,
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

    fn target(&self, rel: &str) -> Result<PathBuf> {
        let rel = checked_relative(rel, false)?;
        Ok(match &self.plan {
            DestPlan::Into(d) => d.join(rel),
            DestPlan::As(d) => {
                let rest: PathBuf = rel.components().skip(1).collect();
                if rest.as_os_str().is_empty() {
                    d.clone()
                } else {
                    d.join(rest)
                }
            }
        })
    }
}

impl Sink for FsSink {
    fn create_dir(&self, path: &str, mode: u32) -> Result<()> {
        self.root.create_dir(&self.target(path)?, mode)
    }

    fn create_file(&self, meta: &FileMeta, block_size: u32, resume: bool) -> Result<Created> {
        let target = self.target(&meta.path)?;
        if self.root.is_dir(&target) {
            return Err(Error::BadRequest(format!(
                "{}: is a directory, cannot replace it with a file",
                target.display()
            )));
        }
        let name = target
            .file_name()
            .ok_or_else(|| Error::BadRequest(format!("{}: no file name", target.display())))?;
        let temp = target.with_file_name(format!(".{}{PARTIAL_SUFFIX}", name.to_string_lossy()));
        let journal_path = temp.with_file_name(format!(
            ".{}{PARTIAL_SUFFIX}{JOURNAL_SUFFIX}",
            name.to_string_lossy()
        ));
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
        let kept = match self.root.read_text(&journal_path) {
            Some(text) if resume && journaled => journal::recover(&text, &header),
            _ => Vec::new(),
        };
        let file = self.root.open_rw(&temp, kept.is_empty())?;
        let writer = if journaled {
            let journal_file = self.root.open_rw(&journal_path, true)?;
            let data = file.try_clone().map_err(|e| Error::io("open", &temp, e))?;
            let writer = journal::JournalWriter::create(journal_file, data, &header, &kept)
                .map_err(|e| Error::io("write journal", &journal_path, e))?;
            Some(writer)
        } else {
            None
        };
        let mtime = UNIX_EPOCH
            + Duration::from_secs(meta.mtime_s.max(0) as u64)
            + Duration::from_nanos(meta.mtime_ns.into());
        let writer = FileWriter {
            file,
            root: self.root.clone(),
            temp,
            target,
            journal_path,
            journal: Mutex::new(writer),
            mode: meta.mode & 0o7777,
            mtime,
        };
        Ok((Arc::new(writer), kept))
    }

    fn digests(&self) -> bool {
        true
    }

    fn existing(&self, path: &str) -> Result<Option<Found>> {
        if !self.peek {
            return Ok(None);
        }
        let target = self.target(path)?;
        if self.root.is_dir(&target) {
            return Ok(None);
        }
        // What cannot be looked at (missing, or a link out of the root)
        // is no copy: the file is sent and replaces it.
        let file = match self.root.open(&target) {
            Ok(f) => f,
            Err(Error::NotFound(_) | Error::PermissionDenied { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = file
            .metadata()
            .map_err(|e| self.root.err("stat", &target, e))?;
        if !meta.is_file() {
            return Ok(None);
        }
        let (mtime_s, mtime_ns) = mtime_of(&meta);
        Ok(Some(Found {
            size: meta.len(),
            mtime_s,
            mtime_ns,
            file: Arc::new(FileReader { file }),
        }))
    }
}

struct FileWriter {
    file: File,
    root: Root,
    temp: PathBuf,
    target: PathBuf,
    journal_path: PathBuf,
    /// `None` once the file is committed.
    journal: Mutex<Option<journal::JournalWriter>>,
    mode: u32,
    mtime: SystemTime,
}

impl BlockWrite for FileWriter {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)?;
        match self.journal.lock().expect("journal").as_mut() {
            Some(j) => j.record(offset, data.len() as u64),
            None => Ok(()),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn commit(&self) -> Result<()> {
        let fail = |what: &str, e: io::Error| Error::io(what.to_string(), &self.temp, e);
        self.file.sync_all().map_err(|e| fail("fsync", e))?;
        self.file
            .set_permissions(Permissions::from_mode(self.mode))
            .map_err(|e| fail("chmod", e))?;
        self.file
            .set_times(FileTimes::new().set_modified(self.mtime))
            .map_err(|e| fail("set mtime", e))?;
        self.root.rename(&self.temp, &self.target)?;
        if self.journal.lock().expect("journal").take().is_some() {
            self.root.remove(&self.journal_path)?;
        }
        Ok(())
    }

    fn discard(&self) -> Result<()> {
        self.journal.lock().expect("journal").take();
        self.root.remove(&self.temp)?;
        self.root.remove(&self.journal_path)
    }

    fn final_path(&self) -> String {
        self.target.display().to_string()
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
                path: "perf".into(),
                size: self.size,
                mode: 0o644,
                mtime_s: 0,
                mtime_ns: 0,
            }),
            local: PathBuf::from("perf"),
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
    fn create_dir(&self, _path: &str, _mode: u32) -> Result<()> {
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
