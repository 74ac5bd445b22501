//! Files on disk as a sink: partial files beside their final names, the
//! journal and resume marker, committing them (alone, or in groups through
//! [`crate::store::commit`]), and directory and link metadata applied when
//! the tree is complete.

use super::direct::Direct;
use super::source::FileReader;
use super::*;
use crate::store::writeback::{self, WriteBehind};
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

    /// Locks `file`, the partial file at `temp` in `parent` (of the file at
    /// `at`): an error when another session holds it, or put another file
    /// at the name meanwhile.
    fn lock_partial(
        &self,
        file: &std::fs::File,
        parent: impl AsFd,
        temp: &OsStr,
        at: &Path,
    ) -> Result<()> {
        let locked = beneath::lock_exclusive(file).map_err(|e| self.io_err("lock", at, e))?;
        let ours =
            locked && beneath::is_at(parent, temp, file).map_err(|e| self.io_err("stat", at, e))?;
        match ours {
            true => Ok(()),
            false => Err(self.io_err("open partial file", at, beneath::another_copy())),
        }
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

    /// Sets directory modes and times; returns the directories, to be
    /// flushed.
    fn finish_dirs(
        &self,
        left: &mut LeftForTheEnd,
        failures: &mut Vec<EntryFailure>,
    ) -> Vec<OwnedFd> {
        let mut fds = Vec::new();
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
                    .map_err(|e| self.io_err("set mode and time", at, e))?;
                fds.push(fd);
                Ok(())
            });
            if let Err(e) = done {
                failures.push(EntryFailure::here(rel.clone(), e.problem()));
            }
        }
        fds
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
        // A partial file left at the name is locked while a session writes
        // it: another copy to this name is under way, and its blocks are
        // not this session's to resume, replace or rename into place. One
        // planted by another user (the names are predictable) is replaced,
        // never written into and renamed into place as theirs.
        let left = beneath::claim_left(&parent, &temp)
            .map_err(|e| self.io_err("open partial file", &at, e))?;
        let recorded = if resume && journaled && left.is_some() {
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
        // The file left is removed while its lock is still held here, so no
        // other session takes it over in between; a new one is created only
        // where nothing is (what is there by then is another copy's).
        let had_left = left.is_some();
        let (file, recorded) = match left {
            Some(f) if !recorded.is_empty() => (f, recorded),
            _ => {
                if had_left {
                    beneath::remove(&parent, &temp)
                        .map_err(|e| self.io_err("remove partial file", &at, e))?;
                }
                let f = beneath::create_exclusive(&parent, &temp)
                    .map_err(|e| self.io_err("create partial file", &at, e))?;
                self.lock_partial(&f, &parent, &temp, &at)?;
                (f, Vec::new())
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
        let big = meta.size != FileMeta::UNKNOWN_SIZE && meta.size >= writeback::FROM_SIZE;
        let writer = FileWriter {
            dir,
            temp,
            name,
            shown: self.shown(&at),
            journal_name: journal_file,
            journal: Mutex::new(writer),
            mode: meta.mode,
            keep_special: self.keep_special,
            mtime: (meta.mtime_s, meta.mtime_ns),
            behind: big.then(WriteBehind::default),
            direct: big.then(|| Direct::open(&file, meta.size)).flatten(),
            file,
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

    fn commit_group(&self, files: &[Arc<dyn BlockWrite>]) -> Result<()> {
        let members: Vec<&dyn commit::Member> = files.iter().filter_map(|w| w.member()).collect();
        // The top was opened before any file of the session was written:
        // its syncfs reports every write-back error since.
        let started = std::time::Instant::now();
        let flushed = commit::commit_group(Some(self.top.as_fd()), &members)?;
        tracing::debug!(
            "{} files committed as a group ({flushed:?}) in {:?}",
            members.len(),
            started.elapsed()
        );
        files
            .iter()
            .filter(|w| w.member().is_none())
            .try_for_each(|w| w.commit())
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
        let dirs = self.finish_dirs(&mut left, &mut failures);
        // The session ends once this returns: what the end changed is
        // durable by then, as every file is.
        if let Err(e) = commit::flush_dirs(self.top.as_fd(), &dirs) {
            let e = self.io_err("flush the directories of", Path::new(""), e);
            tracing::warn!("{e}");
            if let Some((top, _)) = left.dirs.last() {
                failures.push(EntryFailure::here(top.rel.clone(), e.problem()));
            }
        }
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
    /// Write-behind, for what a big file writes through the page cache.
    behind: Option<WriteBehind>,
    /// Direct writes, for a big file's aligned blocks.
    direct: Option<Direct>,
}

impl FileWriter {
    fn fail(&self, what: &str, e: io::Error) -> Error {
        Error::io(what.to_string(), &self.shown, e)
    }

    /// Removes this writer's journal, if it had one and its name still
    /// holds it (once the partial name is free, another copy may have
    /// started its own).
    fn remove_journal(&self, journal: Option<journal::JournalWriter>) -> Result<()> {
        let Some(j) = journal else {
            return Ok(());
        };
        let name = &self.journal_name;
        if beneath::is_at(&self.dir, name, j.journal_file()).map_err(|e| self.fail("stat", e))? {
            beneath::remove(&self.dir, name).map_err(|e| self.fail("remove journal", e))?;
        }
        Ok(())
    }
}

impl commit::Member for FileWriter {
    fn prepare(&self) -> Result<()> {
        if let Some(d) = &self.direct {
            let shown = self.shown.display();
            tracing::debug!("{shown}: {} bytes written with direct I/O", d.written());
        }
        let owner = self
            .file
            .metadata()
            .map_err(|e| self.fail("stat", e))?
            .uid();
        let keep = self.keep_special && owner == beneath::euid();
        beneath::set_mode_and_mtime(&self.file, mode_bits(self.mode, keep), Some(self.mtime))
            .map_err(|e| self.fail("set mtime", e))
    }

    fn data(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }

    fn dir(&self) -> std::os::fd::BorrowedFd<'_> {
        self.dir.as_fd()
    }

    fn place(&self) -> Result<()> {
        // Only this session's own partial file goes into place.
        if !beneath::is_at(&self.dir, &self.temp, &self.file).map_err(|e| self.fail("stat", e))? {
            return Err(self.fail("rename into place", beneath::another_copy()));
        }
        beneath::rename(&self.dir, &self.temp, &self.name)
            .map_err(|e| self.fail("rename into place", e))?;
        let journal = self.journal.lock().expect("journal").take();
        self.remove_journal(journal)
    }

    fn shown(&self) -> String {
        self.shown.display().to_string()
    }
}

/// The largest `pwrite` a file sink makes (see `FileWriter::write_at`).
const WRITE_PIECE: usize = 128 << 10;

impl FileWriter {
    /// Writes a block; `hashed`: the journal's hash of it, when taken.
    fn write_block(
        &self,
        offset: u64,
        data: &[u8],
        hashed: Option<&journal::BlockHasher>,
    ) -> io::Result<()> {
        // What direct I/O takes goes in one write, past the page cache.
        // The rest in pieces: one 1 MiB pwrite cost this VM's ext4 about 8
        // times the kernel CPU of eight 128 KiB ones (4.2 s against 0.45 s
        // of system time per 2 GiB, measured with a C loop; 256 KiB
        // pieces: 2.1 s), and the bytes are the same.
        // Unless the receive path took it already, the journal's hash of
        // the block is taken piece by piece, while each piece is still in
        // the cache its write read it through.
        let journaled = self.journal.lock().expect("journal").is_some();
        let mut hasher = (journaled && hashed.is_none()).then(journal::BlockHasher::new);
        let direct = match &self.direct {
            Some(d) => match d.takes(offset, data) {
                0 => 0,
                n => match d.write(offset, &data[..n])? {
                    true => n,
                    false => 0,
                },
            },
            None => 0,
        };
        if let Some(h) = &mut hasher {
            h.update(&data[..direct]);
        }
        let mut at = offset + direct as u64;
        for piece in data[direct..].chunks(WRITE_PIECE) {
            self.file.write_all_at(piece, at)?;
            if let Some(h) = &mut hasher {
                h.update(piece);
            }
            at += piece.len() as u64;
        }
        if let Some(behind) = &self.behind
            && direct < data.len()
        {
            behind.written(&self.file, offset + data.len() as u64);
        }
        match (
            self.journal.lock().expect("journal").as_mut(),
            hashed.or(hasher.as_ref()),
        ) {
            (Some(j), Some(h)) => j.record_hashed(offset, data.len(), h),
            (Some(j), None) => j.record(offset, data),
            (None, _) => Ok(()),
        }
    }
}

impl BlockWrite for FileWriter {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_block(offset, data, None)
    }

    fn journaled(&self) -> bool {
        self.journal.lock().expect("journal").is_some()
    }

    fn write_hashed(
        &self,
        offset: u64,
        data: &[u8],
        hashed: &journal::BlockHasher,
    ) -> io::Result<()> {
        self.write_block(offset, data, Some(hashed))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn direct_bytes(&self) -> u64 {
        self.direct.as_ref().map_or(0, Direct::written)
    }

    fn commit(&self) -> Result<()> {
        use commit::Member;
        self.prepare()?;
        self.file.sync_all().map_err(|e| self.fail("fsync", e))?;
        self.place()?;
        rustix::fs::fsync(&self.dir).map_err(|e| self.fail("flush the directory of", e.into()))
    }

    fn member(&self) -> Option<&dyn commit::Member> {
        Some(self)
    }

    fn discard(&self) -> Result<()> {
        let journal = self.journal.lock().expect("journal").take();
        // Another session's by now: not this one's to remove.
        if beneath::is_at(&self.dir, &self.temp, &self.file).map_err(|e| self.fail("stat", e))? {
            beneath::remove(&self.dir, &self.temp)
                .map_err(|e| self.fail("remove partial file", e))?;
        }
        self.remove_journal(journal)
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
