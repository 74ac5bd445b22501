//! Trees compared entry by entry, the way `rsync -a` users look at a copy:
//! type, permission bits (special bits included), owner, mtime to the
//! nanosecond, size, content, symlink target bytes, which names share an
//! inode, and whether a file is sparse. Walks with `lstat` and never
//! follows a symlink; names are bytes (`OsStr`), so any name the file
//! system holds can be compared. Paths longer than PATH_MAX are reached
//! through `/proc/self/fd/N/NAME` of an open directory, so each system
//! call sees a short path.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::hash::Hasher;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A relative path in a tree, as bytes; the top directory is `.`.
pub type RelPath = Vec<u8>;

/// One scanned tree: every entry by its relative path.
pub type Tree = BTreeMap<RelPath, Entry>;

/// What a copy should keep of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `file`, `dir`, `symlink`, `fifo`, `socket`, `char-device`, `block-device`.
    pub kind: &'static str,
    /// `st_mode & 0o7777`: permissions with setuid, setgid and sticky.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Modification time as `stat` gives it: seconds (negative before
    /// 1970) and nanoseconds.
    pub mtime: (i64, u32),
    /// Size of a regular file (0 for anything else).
    pub size: u64,
    /// Content digest of a regular file.
    pub digest: Option<u128>,
    /// Target of a symlink, as bytes.
    pub target: Option<Vec<u8>>,
    /// The other names in the same tree of this entry's inode (not for
    /// directories), sorted.
    pub links: Vec<RelPath>,
    /// Bytes allocated on disk.
    pub allocated: u64,
    /// A regular file of at least 1 MiB with less than a quarter of
    /// its size allocated.
    pub sparse: bool,
}

/// One attribute in which a copy differs from its reference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Difference {
    /// The entry's relative path, escaped (see [`escape`]).
    pub path: String,
    /// `exists`, `type`, `mode`, `owner`, `mtime`, `size`, `content`,
    /// `target`, `links` or `sparse`.
    pub attr: &'static str,
    /// The reference's value (rsync's, or the source's).
    pub reference: String,
    /// The copy's value.
    pub actual: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: reference {}, copy {}",
            self.path, self.attr, self.reference, self.actual
        )
    }
}

/// `/proc/self/fd/N/NAME` for `name` in the open directory `dir`: a
/// short path to an entry whose full path may exceed PATH_MAX.
pub fn at(dir: &File, name: impl AsRef<OsStr>) -> PathBuf {
    Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name.as_ref())
}

/// A path's bytes shown on one line: printable ASCII as is, `\\`,
/// `\n`, `\t`, `\xHH` for any other byte (and for `{`), and a run of
/// 16 or more of one byte as `{B*N}` (so 255-byte names and deep
/// paths stay readable).
pub fn escape(bytes: &[u8]) -> String {
    fn one(b: u8, out: &mut String) {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'{' => out.push_str("\\x7b"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let run = bytes[i..].iter().take_while(|&&c| c == b).count();
        if run >= 16 {
            out.push('{');
            one(b, &mut out);
            out.push_str(&format!("*{run}}}"));
            i += run;
        } else {
            one(b, &mut out);
            i += 1;
        }
    }
    out
}

fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_symlink() {
        "symlink"
    } else if t.is_dir() {
        "dir"
    } else if t.is_file() {
        "file"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "char-device"
    } else if t.is_block_device() {
        "block-device"
    } else {
        "unknown"
    }
}

/// Digest of a file's content (two SipHash passes, 128 bits: plenty
/// to tell copies apart that are not made to collide).
fn digest(path: &Path) -> std::io::Result<u128> {
    let mut f = File::open(path)?;
    let mut a = std::hash::DefaultHasher::new();
    let mut b = std::hash::DefaultHasher::new();
    b.write_u8(0x5a);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        a.write(&buf[..n]);
        b.write(&buf[..n]);
    }
    Ok((u128::from(a.finish()) << 64) | u128::from(b.finish()))
}

fn entry(path: &Path, m: &std::fs::Metadata) -> std::io::Result<Entry> {
    let kind = kind_of(m.file_type());
    let size = if kind == "file" { m.size() } else { 0 };
    Ok(Entry {
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime: (m.mtime(), m.mtime_nsec() as u32),
        size,
        digest: if kind == "file" {
            Some(digest(path)?)
        } else {
            None
        },
        target: if kind == "symlink" {
            Some(std::fs::read_link(path)?.as_os_str().as_bytes().to_vec())
        } else {
            None
        },
        links: Vec::new(),
        allocated: m.blocks() * 512,
        sparse: kind == "file" && size >= 1 << 20 && m.blocks() * 512 < size / 4,
    })
}

fn join(rel: &[u8], name: &[u8]) -> RelPath {
    if rel == b"." {
        name.to_vec()
    } else {
        [rel, b"/", name].concat()
    }
}

fn walk(
    dir: &File,
    rel: &[u8],
    out: &mut Tree,
    inodes: &mut BTreeMap<(u64, u64), Vec<RelPath>>,
) -> std::io::Result<()> {
    let here = at(dir, "");
    for e in std::fs::read_dir(&here)? {
        let e = e?;
        let name = e.file_name();
        let path = at(dir, &name);
        let rel = join(rel, name.as_bytes());
        let m = std::fs::symlink_metadata(&path)?;
        let entry = entry(&path, &m)?;
        if entry.kind == "dir" {
            let sub = File::open(&path)?;
            out.insert(rel.clone(), entry);
            walk(&sub, &rel, out, inodes)?;
        } else {
            inodes
                .entry((m.dev(), m.ino()))
                .or_default()
                .push(rel.clone());
            out.insert(rel, entry);
        }
    }
    Ok(())
}

/// Every entry beneath `root` (and `root` itself, as `.`), by relative
/// path.
pub fn scan(root: &Path) -> std::io::Result<Tree> {
    let m = std::fs::symlink_metadata(root)?;
    let mut out = Tree::new();
    out.insert(b".".to_vec(), entry(root, &m)?);
    let mut inodes = BTreeMap::new();
    if m.is_dir() {
        walk(&File::open(root)?, b".", &mut out, &mut inodes)?;
    }
    for names in inodes.values() {
        for name in names {
            let mut others: Vec<RelPath> = names.iter().filter(|n| *n != name).cloned().collect();
            others.sort();
            out.get_mut(name).unwrap().links = others;
        }
    }
    Ok(out)
}

/// [`scan`], panicking with the path when it fails.
pub fn scan_or_panic(root: &Path) -> Tree {
    scan(root).unwrap_or_else(|e| panic!("cannot scan {}: {e}", root.display()))
}

/// An mtime as decimal seconds (`stat`'s (-5, 250000000) is -4.75 s,
/// shown `-4.750000000`), as `touch -d @…` takes it.
pub fn show_mtime((s, ns): (i64, u32)) -> String {
    if s >= 0 || ns == 0 {
        format!("{s}.{ns:09}")
    } else {
        format!("-{}.{:09}", -(s + 1), 1_000_000_000 - ns)
    }
}

fn show_links(links: &[RelPath]) -> String {
    if links.is_empty() {
        "none".into()
    } else {
        let names: Vec<String> = links.iter().map(|l| escape(l)).collect();
        names.join(", ")
    }
}

/// How `actual` differs from `reference`, attribute by attribute, in
/// path order: entries missing or extra (`exists`), then for entries
/// in both their type, and if the type agrees every attribute that
/// type has (directories: mode, owner, mtime; files also size,
/// content, links, sparse; symlinks also target and links).
pub fn diff(reference: &Tree, actual: &Tree) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut push = |rel: &[u8], attr, r: String, a: String| {
        out.push(Difference {
            path: escape(rel),
            attr,
            reference: r,
            actual: a,
        })
    };
    let keys: std::collections::BTreeSet<&RelPath> =
        reference.keys().chain(actual.keys()).collect();
    for rel in keys {
        let (r, a) = match (reference.get(rel), actual.get(rel)) {
            (Some(r), Some(a)) => (r, a),
            (Some(r), None) => {
                push(rel, "exists", r.kind.into(), "absent".into());
                continue;
            }
            (None, Some(a)) => {
                push(rel, "exists", "absent".into(), a.kind.into());
                continue;
            }
            (None, None) => unreachable!(),
        };
        if r.kind != a.kind {
            push(rel, "type", r.kind.into(), a.kind.into());
            continue;
        }
        if r.mode != a.mode {
            push(
                rel,
                "mode",
                format!("{:04o}", r.mode),
                format!("{:04o}", a.mode),
            );
        }
        if (r.uid, r.gid) != (a.uid, a.gid) {
            push(
                rel,
                "owner",
                format!("{}:{}", r.uid, r.gid),
                format!("{}:{}", a.uid, a.gid),
            );
        }
        if r.mtime != a.mtime {
            push(rel, "mtime", show_mtime(r.mtime), show_mtime(a.mtime));
        }
        if r.size != a.size {
            push(rel, "size", r.size.to_string(), a.size.to_string());
        }
        if r.digest != a.digest {
            let hex = |d: Option<u128>| d.map_or("none".into(), |d| format!("{d:032x}"));
            push(rel, "content", hex(r.digest), hex(a.digest));
        }
        if r.target != a.target {
            let show = |t: &Option<Vec<u8>>| t.as_deref().map_or("none".into(), escape);
            push(rel, "target", show(&r.target), show(&a.target));
        }
        if r.links != a.links {
            push(rel, "links", show_links(&r.links), show_links(&a.links));
        }
        if r.sparse != a.sparse {
            let show = |e: &Entry| {
                format!(
                    "{} ({} of {} bytes allocated)",
                    if e.sparse { "sparse" } else { "not sparse" },
                    e.allocated,
                    e.size
                )
            };
            push(rel, "sparse", show(r), show(a));
        }
    }
    out
}

/// [`diff`] of the trees at two paths.
pub fn compare(reference: &Path, actual: &Path) -> Vec<Difference> {
    diff(&scan_or_panic(reference), &scan_or_panic(actual))
}

/// Entries of directory `dir` other than `expected` (by name), each as
/// a difference `../NAME exists: absent vs KIND`: what a copy left
/// beside its destination (temporary directories, partial files,
/// journals, markers).
pub fn extra_beside(dir: &Path, expected: &[&str]) -> Vec<Difference> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if expected.iter().any(|x| OsStr::new(x) == name) {
            continue;
        }
        let kind = kind_of(e.file_type().unwrap());
        out.push(Difference {
            path: format!("../{}", escape(name.as_bytes())),
            attr: "exists",
            reference: "absent".into(),
            actual: kind.into(),
        });
    }
    out.sort();
    out
}

/// Lists differences one per line, for assertion messages.
pub fn show(diffs: &[Difference]) -> String {
    if diffs.is_empty() {
        return "  (none)\n".into();
    }
    diffs.iter().map(|d| format!("  {d}\n")).collect()
}

/// The `SystemTime` of `stat`'s (seconds, nanoseconds), seconds
/// negative before 1970.
pub fn system_time((s, ns): (i64, u32)) -> SystemTime {
    let base = if s >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(s.unsigned_abs())
    };
    base + Duration::from_nanos(u64::from(ns))
}

/// Sets the mtime (and atime) of the entry at `path` without following
/// a symlink: a regular file or directory through a handle (so `path`
/// may be an [`at`] path), anything else with `touch -h`.
pub fn set_mtime(path: &Path, mtime: (i64, u32)) {
    let m = std::fs::symlink_metadata(path).unwrap();
    let t = system_time(mtime);
    if m.is_file() || m.is_dir() {
        let f = File::open(path).unwrap();
        f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
            .unwrap_or_else(|e| panic!("set mtime of {}: {e}", path.display()));
    } else {
        // Symlinks and FIFOs: touch -h (utimensat without following,
        // and without opening a FIFO); a short path only.
        let ok = std::process::Command::new("touch")
            .arg("-h")
            .arg("-d")
            .arg(format!("@{}", show_mtime(mtime)))
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok, "touch -h {}", path.display());
    }
}
