//! `known_hosts`: where a client remembers the daemons it has met, like
//! ssh's `StrictHostKeyChecking=accept-new`, safe against many clients
//! meeting new hosts at once.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Where the client remembers server identities, like ssh's
/// `StrictHostKeyChecking=accept-new`. One `HOST:PORT SHA256:…` per line.
///
/// Many clients may meet new hosts at once (threads of one process, or
/// processes): [`KnownHosts::record`] updates the file under an exclusive
/// `flock` on `known_hosts.lock` beside it, from what the file holds at
/// that moment, and replaces it whole (a temporary file renamed over it),
/// so a host is recorded once and a reader sees the old file or the new
/// one, never half a line.
#[derive(Debug, Clone)]
pub struct KnownHosts {
    /// The file.
    pub path: PathBuf,
}

/// The fingerprint `text` (a known_hosts file) records for `host_port`.
fn recorded<'t>(text: &'t str, host_port: &str) -> Option<&'t str> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next()) {
            (Some(h), Some(fp)) if h == host_port && !line.starts_with('#') => Some(fp),
            _ => None,
        }
    })
}

/// An exclusive `flock` on `path` (created if need be), held until the
/// file is dropped. Locks of separate opens exclude each other in one
/// process as across processes.
fn lock_exclusive(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("open lock", path, e))?;
    loop {
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(f),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io("lock", path, e.into())),
        }
    }
}

impl KnownHosts {
    /// `$XDG_CONFIG_HOME/tern/known_hosts`, else `~/.config/tern/known_hosts`.
    pub fn default_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("tern").join("known_hosts"))
    }

    /// The file's text; empty when there is no file yet.
    fn read(path: &Path) -> Result<String> {
        match std::fs::read_to_string(path) {
            Ok(t) => Ok(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(Error::io("read", path, e)),
        }
    }

    /// The fingerprint recorded for `host_port`, if any.
    pub fn lookup(&self, host_port: &str) -> Result<Option<String>> {
        Ok(recorded(&KnownHosts::read(&self.path)?, host_port).map(str::to_string))
    }

    /// Records a fingerprint for a host seen for the first time. If
    /// another client recorded the host meanwhile, the same fingerprint is
    /// left as it is, and another one is refused
    /// ([`Error::FingerprintMismatch`]) with nothing written.
    pub fn record(&self, host_port: &str, fingerprint: &str) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // A known_hosts that is a symlink (dotfiles kept elsewhere) stays
        // one: the file it points to is the one replaced.
        let path = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(Error::BadRequest(format!(
                "{}: not a file name for known hosts",
                path.display()
            )));
        };
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
        let name = name.to_string_lossy();
        let _lock = lock_exclusive(&dir.join(format!("{name}.lock")))?;
        let mut text = KnownHosts::read(&path)?;
        match recorded(&text, host_port) {
            Some(fp) if fp == fingerprint => return Ok(()),
            Some(fp) => {
                return Err(Error::FingerprintMismatch {
                    host: host_port.to_string(),
                    expected: fp.to_string(),
                    actual: fingerprint.to_string(),
                    origin: crate::error::PinOrigin::KnownHosts(self.path.display().to_string()),
                });
            }
            None => {}
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{host_port} {fingerprint}\n"));
        let mode = std::fs::metadata(&path).map_or(0o644, |m| m.permissions().mode() & 0o7777);
        // Only the holder of the lock writes it, so one name will do.
        let tmp = dir.join(format!(".{name}.tmp"));
        let written = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(mode)
                .open(&tmp)?;
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io("write", &path, e));
        }
        // The rename lasts once the directory is on disk (best effort: not
        // every file system syncs a directory).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hosts_records_and_finds() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts {
            path: dir.path().join("sub/known_hosts"),
        };
        assert_eq!(kh.lookup("h:1").unwrap(), None);
        kh.record("h:1", "SHA256:abc").unwrap();
        kh.record("[::1]:4747", "SHA256:def").unwrap();
        assert_eq!(kh.lookup("h:1").unwrap().as_deref(), Some("SHA256:abc"));
        assert_eq!(
            kh.lookup("[::1]:4747").unwrap().as_deref(),
            Some("SHA256:def")
        );
        assert_eq!(kh.lookup("h:2").unwrap(), None);
    }

    /// Every line of a known_hosts file, as (host, fingerprint); panics on
    /// a line that is not `HOST FINGERPRINT` or a file that does not end
    /// its last line.
    fn parse(text: &str) -> Vec<(String, String)> {
        assert!(text.is_empty() || text.ends_with('\n'), "torn: {text:?}");
        text.lines()
            .map(|line| {
                let parts: Vec<&str> = line.split(' ').collect();
                assert_eq!(parts.len(), 2, "malformed line {line:?} in {text:?}");
                (parts[0].to_string(), parts[1].to_string())
            })
            .collect()
    }

    /// Each host once, and every line well-formed.
    fn assert_one_line_per_host(path: &Path) -> Vec<(String, String)> {
        let lines = parse(&std::fs::read_to_string(path).unwrap());
        let mut hosts: Vec<&str> = lines.iter().map(|(h, _)| h.as_str()).collect();
        hosts.sort();
        let all = hosts.len();
        hosts.dedup();
        assert_eq!(hosts.len(), all, "duplicate lines: {lines:?}");
        lines
    }

    #[test]
    fn known_hosts_records_a_host_once_and_refuses_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        // A hand-edited file whose last line has no newline.
        std::fs::write(&path, "# mine\nold:1 SHA256:old").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let kh = KnownHosts { path: path.clone() };
        kh.record("h:1", "SHA256:abc").unwrap();
        kh.record("h:1", "SHA256:abc").unwrap();
        let before = std::fs::read_to_string(&path).unwrap();
        assert_eq!(before, "# mine\nold:1 SHA256:old\nh:1 SHA256:abc\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the file keeps its mode");
        match kh.record("h:1", "SHA256:other") {
            Err(e @ Error::FingerprintMismatch { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("expected SHA256:abc, got SHA256:other"),
                    "{text}"
                );
                assert!(text.contains(&path.display().to_string()), "{text}");
            }
            other => panic!("another key for a recorded host: {other:?}"),
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
        // Nothing but the file and its lock is left beside it.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["known_hosts", "known_hosts.lock"]);
    }

    #[test]
    fn a_symlinked_known_hosts_stays_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("dotfiles")).unwrap();
        let real = dir.path().join("dotfiles/known_hosts");
        std::fs::write(&real, "a:1 SHA256:a\n").unwrap();
        let link = dir.path().join("known_hosts");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        KnownHosts { path: link.clone() }
            .record("b:2", "SHA256:b")
            .unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(
            std::fs::read_to_string(&real).unwrap(),
            "a:1 SHA256:a\nb:2 SHA256:b\n"
        );
    }

    /// 50 clients meeting hosts at once: every host they share, and every
    /// host of their own, is recorded once; of clients shown different
    /// keys for one host, the first wins and the others are refused; and a
    /// reader never sees a torn file.
    #[test]
    fn fifty_simultaneous_first_contacts_leave_one_line_per_host() {
        const CLIENTS: usize = 50;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/known_hosts");
        let kh = KnownHosts { path: path.clone() };
        let start = std::sync::Barrier::new(CLIENTS + 1);
        let done = std::sync::atomic::AtomicBool::new(false);
        let contested = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                start.wait();
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    if let Ok(text) = std::fs::read_to_string(&path) {
                        parse(&text);
                    }
                }
            });
            let writers: Vec<_> = (0..CLIENTS)
                .map(|i| {
                    let (kh, start, contested) = (&kh, &start, &contested);
                    scope.spawn(move || {
                        start.wait();
                        kh.record("shared:4747", "SHA256:shared").unwrap();
                        let group = i % 10;
                        kh.record(&format!("group{group}:4747"), &format!("SHA256:g{group}"))
                            .unwrap();
                        kh.record(&format!("own{i}:4747"), &format!("SHA256:o{i}"))
                            .unwrap();
                        match kh.record("contested:4747", &format!("SHA256:c{i}")) {
                            Ok(()) => {
                                contested.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(Error::FingerprintMismatch { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Release);
            reader.join().unwrap();
        });
        let lines = assert_one_line_per_host(&path);
        assert_eq!(lines.len(), 1 + 10 + CLIENTS + 1, "{lines:?}");
        // The first to record the contested host won; it alone succeeded
        // with a key of its own (later ones with the same key are none).
        assert_eq!(contested.load(std::sync::atomic::Ordering::Relaxed), 1);
        for i in 0..CLIENTS {
            let host = format!("own{i}:4747");
            assert_eq!(kh.lookup(&host).unwrap(), Some(format!("SHA256:o{i}")));
        }
    }

    /// Tells the test below that it runs as one of its writers, and how:
    /// `INDEX PATH`.
    const WRITER_ENV: &str = "TERN_TEST_KNOWN_HOSTS_WRITER";
    const WRITER_THREADS: usize = 8;

    /// Processes (this test binary, running this same test as a writer)
    /// meeting hosts at once: the lock holds across processes too.
    #[test]
    fn processes_recording_at_once_leave_one_line_per_host() {
        if let Ok(spec) = std::env::var(WRITER_ENV) {
            return known_hosts_writer_process(&spec);
        }
        const PROCESSES: usize = 6;
        use std::process::{Command, Stdio};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        // This test's name as the harness knows it (the module path
        // without the crate's name).
        let module = module_path!().split_once("::").unwrap().1;
        let name = format!("{module}::processes_recording_at_once_leave_one_line_per_host");
        let mut children: Vec<_> = (0..PROCESSES)
            .map(|i| {
                Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", name.as_str(), "--test-threads=1"])
                    .env(WRITER_ENV, format!("{i} {}", path.display()))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Each writer starts when its stdin closes: all at once.
        for c in &mut children {
            drop(c.stdin.take());
        }
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let lines = assert_one_line_per_host(&path);
        assert_eq!(lines.len(), 1 + PROCESSES * WRITER_THREADS, "{lines:?}");
    }

    /// One writer of the test above, in a process of its own: its threads
    /// record a host all share and one each of their own.
    fn known_hosts_writer_process(spec: &str) {
        let (index, path) = spec.split_once(' ').unwrap();
        let kh = KnownHosts {
            path: PathBuf::from(path),
        };
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
        std::thread::scope(|scope| {
            for t in 0..WRITER_THREADS {
                let kh = &kh;
                scope.spawn(move || {
                    kh.record("shared:4747", "SHA256:shared").unwrap();
                    kh.record(&format!("p{index}t{t}:4747"), "SHA256:own")
                        .unwrap();
                });
            }
        });
    }
}
