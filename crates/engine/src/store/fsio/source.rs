//! Files on disk as a source: the top the user named, then everything
//! beneath it reached without following links, listed lazily in order.

use super::*;
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
            // The report names the entry; the message says why.
            FileType::Socket => Err(Error::BadRequest(format!("a socket, {NOT_COPIED}"))),
            _ => Err(Error::BadRequest(format!("a device file, {NOT_COPIED}"))),
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

/// Why sockets and devices are left out.
const NOT_COPIED: &str =
    "not copied (tern copies files, directories, symbolic links and named pipes)";

/// An entry that cannot be copied. It is logged for a daemon's operator;
/// a command's report lists it.
fn failed(rel: RelPath, e: &Error) -> SourceItem {
    tracing::info!("not copied: {}: {e}", rel);
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

/// Reads blocks of one open file (also what a sink hands back for a
/// partial file's digest).
pub(super) struct FileReader {
    pub(super) file: File,
}

impl BlockRead for FileReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
}
