//! What a pull asked for, and whether what the peer announces fits it.
//!
//! In a pull the peer decides which names it announces, and the receiving
//! sink writes whatever it is told beneath the destination. A hostile or
//! compromised server could answer `tern cp tern://srv/report.pdf ~/` with
//! `.ssh/authorized_keys` or `.bashrc` (the class of scp's CVE-2019-6111).
//! Confinement to the destination does not help, since the destination is
//! the user's home. So the client compares every announced name with its
//! own request before anything is created or read for it:
//!
//! - without `-r`, each source yields exactly one entry that is not a
//!   directory, once, named after the source's last path component;
//! - with `-r`, each source yields one top-level entry of that name, and
//!   only a top-level directory may have entries beneath it;
//! - a source with no last component to name it by (the served root
//!   `tern://srv/`, or `""`, `~` and `/` over ssh) is named by the server
//!   after its own directory, which the client cannot know: such a source
//!   accepts any one top-level name, bound at its first announcement;
//! - nothing may be announced beneath an entry announced as neither file
//!   nor directory (a symbolic link), so a link cannot redirect later names;
//! - empty, `.` and `..` components, absolute paths and NUL are refused
//!   whatever the request (the sink refuses them too).
//!
//! [`Requested`] is pure: it works on announced paths as bytes and keeps
//! only the state the rules need (one slot per source, and the paths of
//! non-directory, non-file entries). [`GuardedSink`] puts it in front of a
//! [`Sink`]: a name is judged before the sink is asked to look at, create
//! or open anything for it. A refusal is [`Error::NotRequested`], which
//! names the announced path and what was asked for: of the permission
//! class, but not one entry's own failure, so it ends the session instead
//! of skipping an entry of a tree and taking more from a peer that lied.
//!
//! Every pull goes through [`crate::conn::client::pull`], whichever way its
//! connections are made (a daemon, `tern serve --once` over ssh, reverse
//! connect), and that is where the guard is put.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tern_proto::{EntryKind, EntryMeta, FileMeta, RelPath};

use crate::store::fsio::{BlockWrite, Created, Found, Sink};
use crate::{Error, Result};
use tern_session::EntryFailure;

/// What an announcement says an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory (`DirAnnounce`, or `EntryAnnounce` of a directory).
    Dir,
    /// A regular file (`FileAnnounce`).
    File,
    /// Anything else (`EntryAnnounce`): a symbolic link, a named pipe.
    Other,
}

/// One source of the request.
#[derive(Debug, Clone)]
struct Slot {
    /// As the user gave it, for messages.
    source: Vec<u8>,
    /// The top-level name its entries come under; `None` for a source
    /// without a name of its own until its first announcement binds one.
    name: Option<Vec<u8>>,
    /// What its top-level entry was announced as, once it was.
    top: Option<Kind>,
}

/// The names one pull may receive: built from the request's sources and
/// `-r`, it judges each announced path in order.
#[derive(Debug, Clone)]
pub struct Requested {
    recursive: bool,
    slots: Vec<Slot>,
    /// Paths announced as [`Kind::Other`]: nothing may come beneath them.
    not_dirs: HashSet<Vec<u8>>,
}

/// The name the server gives a source's top-level entry, as it derives it
/// (the last normal component of the path, after scp's `~`); `None` when
/// the source has none (the root, the home directory, `/`).
pub fn derived_name(source: &[u8]) -> Option<Vec<u8>> {
    let path = match source {
        b"~" => b"",
        s => s.strip_prefix(b"~/").unwrap_or(s),
    };
    path.split(|&b| b == b'/')
        .rfind(|c| !matches!(*c, b"" | b"." | b".."))
        .map(<[u8]>::to_vec)
}

impl Requested {
    /// The request of a pull of `sources` (as sent in `SessionOpen`),
    /// recursive or not.
    pub fn new<'a>(sources: impl IntoIterator<Item = &'a [u8]>, recursive: bool) -> Requested {
        let slots = sources
            .into_iter()
            .map(|s| Slot {
                source: s.to_vec(),
                name: derived_name(s),
                top: None,
            })
            .collect();
        Requested {
            recursive,
            slots,
            not_dirs: HashSet::new(),
        }
    }

    /// Judges the next announcement: `path` (`/`-separated, relative to
    /// the transfer's top) as an entry of `kind`. An accepted announcement
    /// counts: a single file is accepted once, and a source without a name
    /// of its own is bound to the name it first came with.
    pub fn admit(&mut self, path: &[u8], kind: Kind) -> Result<()> {
        if let Some(why) = malformed(path) {
            return Err(self.refuse(path, why));
        }
        let (top, nested) = match path.iter().position(|&b| b == b'/') {
            Some(i) => (&path[..i], true),
            None => (path, false),
        };
        if let Some(above) = self.not_dir_above(path) {
            let why = format!(
                "it lies beneath {}, which was announced as neither a file nor a directory",
                shown(above)
            );
            return Err(self.refuse(path, &why));
        }
        if nested {
            if !self.recursive {
                return Err(self.refuse(path, "a pull without -r receives no directory contents"));
            }
            let under_dir = self
                .slots
                .iter()
                .any(|s| s.top == Some(Kind::Dir) && s.name.as_deref() == Some(top));
            if !under_dir {
                let why = format!("{} was not announced as a requested directory", shown(top));
                return Err(self.refuse(path, &why));
            }
        } else {
            self.admit_top(path, kind)?;
        }
        if kind == Kind::Other {
            self.not_dirs.insert(path.to_vec());
        }
        Ok(())
    }

    /// A top-level announcement: it takes the first source of its name
    /// that has not announced its top yet, else a source without a name.
    fn admit_top(&mut self, name: &[u8], kind: Kind) -> Result<()> {
        if kind == Kind::Dir && !self.recursive {
            return Err(self.refuse(name, "a directory, in a pull without -r"));
        }
        let fresh = |s: &&mut Slot| s.top.is_none() && s.name.as_deref() == Some(name);
        if let Some(slot) = self.slots.iter_mut().find(fresh) {
            slot.top = Some(kind);
            return Ok(());
        }
        // A directory may be announced again (its attributes); a file of a
        // source is received once.
        let again = self.slots.iter().any(|s| {
            kind == Kind::Dir && s.top == Some(Kind::Dir) && s.name.as_deref() == Some(name)
        });
        if again {
            return Ok(());
        }
        if let Some(slot) = self.slots.iter_mut().find(|s| s.name.is_none()) {
            slot.name = Some(name.to_vec());
            slot.top = Some(kind);
            return Ok(());
        }
        let named = self.slots.iter().any(|s| s.name.as_deref() == Some(name));
        let why = if named {
            "it was received already"
        } else {
            "no source of this pull has that name"
        };
        Err(self.refuse(name, why))
    }

    /// The entry announced as neither file nor directory that `path` lies
    /// beneath, if any.
    fn not_dir_above<'p>(&self, path: &'p [u8]) -> Option<&'p [u8]> {
        if self.not_dirs.is_empty() {
            return None;
        }
        path.iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'/')
            .map(|(i, _)| &path[..i])
            .find(|prefix| self.not_dirs.contains(*prefix))
    }

    /// What this pull asked for, for messages.
    fn asked(&self) -> String {
        let what = if self.recursive {
            "with -r"
        } else {
            "without -r"
        };
        let names: Vec<String> = self
            .slots
            .iter()
            .map(|s| match &s.name {
                Some(n) if derived_name(&s.source).is_some() => shown(n),
                Some(n) => format!("{} (named by the server)", shown(n)),
                None => format!("one entry named by the server for {:?}", shown(&s.source)),
            })
            .collect();
        format!("the pull asked for {} {what}", names.join(", "))
    }

    fn refuse(&self, path: &[u8], why: &str) -> Error {
        Error::NotRequested {
            path: shown(path),
            why: format!("{why}; {}", self.asked()),
        }
    }
}

/// Why `path` can be no entry's name, if it cannot.
fn malformed(path: &[u8]) -> Option<&'static str> {
    if path.is_empty() {
        return Some("an empty path");
    }
    if path.starts_with(b"/") {
        return Some("an absolute path");
    }
    if path.contains(&0) {
        return Some("a path with a NUL byte");
    }
    if path
        .split(|&b| b == b'/')
        .any(|c| matches!(c, b"" | b"." | b".."))
    {
        return Some("a path with an empty, '.' or '..' component");
    }
    None
}

/// A path for messages: UTF-8 as it is, other bytes escaped.
fn shown(path: &[u8]) -> String {
    tern_proto::path::escape(path)
}

/// A [`Sink`] that receives only what [`Requested`] admits: each name is
/// judged before the inner sink looks at, creates or opens anything for
/// it, and a refusal fails the session with nothing written for that name.
pub struct GuardedSink {
    inner: Arc<dyn Sink>,
    requested: Mutex<Requested>,
    /// The file admitted by [`Sink::existing`], whose `create_file` comes
    /// next for the same announcement.
    looked_at: Mutex<Option<Vec<u8>>>,
}

impl std::fmt::Debug for GuardedSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedSink")
            .field("requested", &self.requested)
            .finish_non_exhaustive()
    }
}

impl GuardedSink {
    /// Puts `requested` in front of `inner`.
    pub fn new(inner: Arc<dyn Sink>, requested: Requested) -> GuardedSink {
        GuardedSink {
            inner,
            requested: Mutex::new(requested),
            looked_at: Mutex::new(None),
        }
    }

    fn admit(&self, path: &[u8], kind: Kind) -> Result<()> {
        self.requested.lock().expect("requested").admit(path, kind)
    }
}

impl Sink for GuardedSink {
    fn create_dir(&self, path: &RelPath, mode: u32) -> Result<()> {
        self.admit(path.as_bytes(), Kind::Dir)?;
        self.inner.create_dir(path, mode)
    }

    fn create_entry(&self, entry: &EntryMeta) -> Result<()> {
        let kind = match entry.kind {
            EntryKind::Dir => Kind::Dir,
            EntryKind::Symlink { .. } | EntryKind::Fifo => Kind::Other,
        };
        self.admit(entry.path.as_bytes(), kind)?;
        self.inner.create_entry(entry)
    }

    fn create_file(&self, meta: &FileMeta, block_size: u32, resume: bool) -> Result<Created> {
        let path = meta.path.as_bytes();
        let looked_at = self.looked_at.lock().expect("looked_at").take();
        if looked_at.as_deref() != Some(path) {
            self.admit(path, Kind::File)?;
        }
        self.inner.create_file(meta, block_size, resume)
    }

    fn digests(&self) -> bool {
        self.inner.digests()
    }

    fn existing(&self, path: &RelPath) -> Result<Option<Found>> {
        // Looking is reading (a digest goes back to the peer): judged too.
        self.admit(path.as_bytes(), Kind::File)?;
        *self.looked_at.lock().expect("looked_at") = Some(path.as_bytes().to_vec());
        self.inner.existing(path)
    }

    fn commit_group(&self, files: &[Arc<dyn BlockWrite>]) -> Result<()> {
        // Every file was admitted when it was created.
        self.inner.commit_group(files)
    }

    fn finish(&self) -> Vec<EntryFailure> {
        self.inner.finish()
    }
}

#[cfg(test)]
mod tests;
