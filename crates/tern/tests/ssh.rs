//! `tern cp` and `tern perf` to `[USER@]HOST:` locations through a real
//! OpenSSH sshd on loopback, with no tern daemon running anywhere.
//!
//! Each test starts its own sshd (as root, in the foreground, with a host
//! key and an authorized key made here, `StrictModes no`, `PidFile none`)
//! whose sessions get a private HOME and state directory. The client's
//! `--remote-tern` is a symlink to the built binary inside the test's
//! directory, so every process of the test (ssh, the remote shell, the
//! remote `tern serve --once`) carries that path in its command line and
//! can be found afterwards: none may be left.
//!
//! The tests skip, saying why, when not root or when OpenSSH is missing
//! (`scripts/setup.sh` installs it).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::TERN;
use tern_testkit::files::{content_difference, file_difference, random_file};
use tern_testkit::net::free_port;
use tern_testkit::skip::{have, is_root, skip};

const SSHD: &str = "/usr/sbin/sshd";

/// Why these tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    if !is_root() {
        return Some("not root (sshd must run as root)".into());
    }
    if !Path::new(SSHD).exists() {
        return Some(format!("{SSHD} missing (apt-get install openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen"] {
        if !have(tool) {
            return Some(format!("{tool} missing (apt-get install openssh-client)"));
        }
    }
    None
}

/// A private sshd and everything the client needs to log in to it.
struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

macro_rules! sshd_or_skip {
    () => {
        match Sshd::start() {
            Some(s) => s,
            None => return,
        }
    };
}

fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "ssh-keygen {}", path.display());
}

/// Whether something on `port` at loopback sends an SSH version line.
fn greets_as_ssh(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut banner = [0u8; 4];
    s.read_exact(&mut banner).is_ok() && &banner == b"SSH-"
}

/// Starts sshd on loopback `port` with its keys and config in `dir`.
fn spawn_sshd(dir: &Path, port: u16) -> Child {
    let p = |rel: &str| dir.join(rel);
    let config = format!(
        "Port {port}\n\
         ListenAddress 127.0.0.1\n\
         HostKey {host_key}\n\
         AuthorizedKeysFile {keys}\n\
         PidFile none\n\
         StrictModes no\n\
         UsePAM no\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PubkeyAuthentication yes\n\
         PermitRootLogin prohibit-password\n\
         SetEnv HOME={home} XDG_STATE_HOME={state}\n",
        host_key = p("host_key").display(),
        keys = p("authorized_keys").display(),
        home = p("home").display(),
        state = p("state").display(),
    );
    std::fs::write(p("sshd_config"), config).unwrap();
    let log = std::fs::File::create(p("sshd.log")).unwrap();
    Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(p("sshd_config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Waits until `port` greets with an SSH banner (sshd is up, and not
/// something else that took the port); why not, with sshd's log in `dir`,
/// if it exited or did not come up.
fn sshd_greets(child: &mut Child, port: u16, dir: &Path) -> Result<(), String> {
    let log = || std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !greets_as_ssh(port) {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited ({status}): {}", log()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("not up after 10 s: {}", log()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

impl Sshd {
    fn start() -> Option<Sshd> {
        if let Some(why) = unavailable() {
            skip("ssh tests", &format!("they need a real sshd: {why}"));
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = |rel: &str| dir.path().join(rel);
        for d in ["home", "state", "bin", "local"] {
            std::fs::create_dir(p(d)).unwrap();
        }
        keygen(&p("host_key"));
        keygen(&p("client_key"));
        keygen(&p("stranger_key"));
        std::fs::copy(p("client_key.pub"), p("authorized_keys")).unwrap();
        std::os::unix::fs::symlink(TERN, p("bin/tern-remote")).unwrap();
        // The privilege separation directory sshd insists on.
        std::fs::create_dir_all("/run/sshd").unwrap();
        // A port found free may be taken before sshd binds it: then sshd
        // exits saying so, and another port is tried.
        for _ in 0..5 {
            let port = free_port();
            let mut child = spawn_sshd(dir.path(), port);
            match sshd_greets(&mut child, port, dir.path()) {
                Ok(()) => return Some(Sshd { child, dir, port }),
                Err(log) if log.contains("Address already in use") => continue,
                Err(log) => panic!("sshd did not start: {log}"),
            }
        }
        panic!("sshd found no free port in five tries");
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The `--ssh` command logging in with `key`.
    fn ssh_with(&self, key: &str) -> String {
        format!(
            "ssh -p {} -i {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
             -o BatchMode=yes -o LogLevel=ERROR",
            self.port,
            self.p(key).display()
        )
    }

    /// `tern` with `--ssh` and `--remote-tern` for this sshd after `args`.
    fn tern(&self, args: &[&str]) -> Command {
        self.tern_with(args, "client_key", &self.p("bin/tern-remote"))
    }

    fn tern_with(&self, args: &[&str], key: &str, remote: &Path) -> Command {
        let mut c = Command::new(TERN);
        c.args(args)
            .arg("--ssh")
            .arg(self.ssh_with(key))
            .arg("--remote-tern")
            .arg(remote)
            .env("XDG_CONFIG_HOME", self.p("local/cfg"))
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.tern(args).output().unwrap()
    }

    /// Processes of this test still alive (not zombies), besides sshd.
    fn leftovers(&self) -> Vec<String> {
        let marker = self.dir.path().to_string_lossy().into_owned();
        let me = std::process::id().to_string();
        let sshd = self.child.id().to_string();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me || pid == sshd {
                continue;
            }
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            });
            if cmdline.contains(&marker) && !zombie && !cmdline.contains("sshd") {
                found.push(format!("{pid}: {cmdline}"));
            }
        }
        found
    }

    /// Waits until no process of this test is left.
    fn assert_nothing_left(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = self.leftovers();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "left running: {left:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "tern failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json(out: &Output) -> Value {
    ok(out);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn failed(out: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    err
}

/// A small tree with distinct modes and mtimes, an empty directory, and a
/// file larger than one block.
fn make_tree(top: &Path) {
    std::fs::create_dir_all(top.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(top.join("empty")).unwrap();
    random_file(&top.join("big.bin"), 3 << 20);
    random_file(&top.join("sub/a.txt"), 1000);
    random_file(&top.join("sub/deeper/b.bin"), 70_000);
    std::fs::write(top.join("zero"), b"").unwrap();
    std::fs::set_permissions(
        top.join("sub/a.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::set_permissions(top.join("big.bin"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(
        top.join("sub/deeper"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    for f in ["big.bin", "sub/a.txt", "zero"] {
        std::fs::File::options()
            .write(true)
            .open(top.join(f))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
}

/// Files compare byte for byte, with the same permission bits and mtimes;
/// directories the same entries and permission bits.
fn assert_same_tree(a: &Path, b: &Path) {
    let (ma, mb) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
    assert_eq!(
        ma.mode() & 0o777,
        mb.mode() & 0o777,
        "mode of {}",
        b.display()
    );
    if ma.is_dir() {
        assert!(mb.is_dir(), "{} is not a directory", b.display());
        let names = |d: &Path| {
            let mut v: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(a), names(b), "entries of {}", b.display());
        for n in names(a) {
            assert_same_tree(&a.join(&n), &b.join(&n));
        }
    } else {
        assert_eq!(file_difference(a, b), None, "{}", b.display());
        assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", b.display());
    }
}

#[test]
fn a_file_goes_to_a_real_sshd_and_back_with_no_daemon_running() {
    let s = sshd_or_skip!();
    let src = s.p("local/run42.bin");
    let data = random_file(&src, 5 << 20);
    std::fs::create_dir(s.p("home/incoming")).unwrap();

    // Relative to the remote home, as with scp.
    let src_arg = src.to_str().unwrap();
    let push = json(&s.run(&["cp", "--json", src_arg, "root@127.0.0.1:incoming/"]));
    assert_eq!(push["direction"], "push");
    assert_eq!(push["via"], "ssh");
    assert_eq!(push["bytes"], 5 << 20);
    assert_eq!(push["protect"], "private");
    assert!(
        push["server_fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("SHA256:")
    );
    assert_eq!(
        content_difference(s.p("home/incoming/run42.bin"), &data),
        None
    );
    assert!(
        !s.p("local/cfg/tern/known_hosts").exists(),
        "the fingerprint came through ssh: nothing to remember"
    );
    s.assert_nothing_left(Duration::from_secs(5));

    // Back again from an absolute path, under a new name, with options.
    let remote = format!("127.0.0.1:{}", s.p("home/incoming/run42.bin").display());
    let back = s.p("local/back.bin");
    let pull = json(&s.run(&[
        "cp",
        "--json",
        "-P",
        "3",
        "--checksum",
        "sha256",
        "--protect",
        "safe",
        &remote,
        back.to_str().unwrap(),
    ]));
    assert_eq!(pull["direction"], "pull");
    assert_eq!(pull["streams"], 3);
    assert_eq!(pull["protect"], "safe");
    assert_eq!(pull["checksum"][0]["algorithm"], "sha256");
    assert_eq!(content_difference(&back, &data), None);
    s.assert_nothing_left(Duration::from_secs(5));

    // A missing remote file is the remote's "not found" (exit 3).
    let err = failed(
        &s.run(&["cp", "127.0.0.1:no/such", s.p("local").to_str().unwrap()]),
        3,
    );
    assert!(err.contains("no/such"), "{err}");
    s.assert_nothing_left(Duration::from_secs(5));
}

#[test]
fn trees_go_both_ways_byte_identical_with_modes_and_mtimes() {
    let s = sshd_or_skip!();
    let tree = s.p("local/tree");
    make_tree(&tree);
    let up = s.run(&[
        "cp",
        "-r",
        "--json",
        tree.to_str().unwrap(),
        &format!("127.0.0.1:{}", s.p("home").display()),
    ]);
    assert_eq!(json(&up)["files"], 4);
    assert_same_tree(&tree, &s.p("home/tree"));

    let down = s.p("local/down");
    ok(&s.run(&[
        "cp",
        "-r",
        "-P",
        "2",
        "127.0.0.1:tree",
        down.to_str().unwrap(),
    ]));
    assert_same_tree(&tree, &down);

    let err = failed(&s.run(&["cp", "127.0.0.1:tree", down.to_str().unwrap()]), 2);
    assert!(err.contains("-r"), "a directory without -r: {err}");
    s.assert_nothing_left(Duration::from_secs(5));
}

#[test]
fn reverse_mode_has_the_remote_connect_back() {
    let s = sshd_or_skip!();
    let tree = s.p("local/tree");
    make_tree(&tree);
    // A remote tern behind a chatty login: lines before the once line are skipped.
    let noisy = s.p("bin/noisy-tern");
    std::fs::write(
        &noisy,
        format!(
            "#!/bin/sh\necho 'Welcome to the cluster'\nexec {} \"$@\"\n",
            TERN
        ),
    )
    .unwrap();
    std::fs::set_permissions(&noisy, std::fs::Permissions::from_mode(0o755)).unwrap();

    let up = s
        .tern_with(
            &[
                "cp",
                "-z",
                "-r",
                "--json",
                tree.to_str().unwrap(),
                "127.0.0.1:",
            ],
            "client_key",
            &noisy,
        )
        .output()
        .unwrap();
    let up = json(&up);
    assert_eq!(up["via"], "ssh-reverse");
    assert_same_tree(&tree, &s.p("home/tree"));

    let down = s.p("local/down");
    let back = json(&s.run(&[
        "cp",
        "--reverse-connect",
        "-r",
        "-P",
        "4",
        "--protect",
        "clear",
        "--json",
        "127.0.0.1:tree",
        down.to_str().unwrap(),
    ]));
    assert_eq!(back["via"], "ssh-reverse");
    // At most the 4 asked for: the session starts while its streams join
    // (each dialled back on demand here), and a tree this small may be
    // done before the last of them has.
    let streams = back["streams"].as_u64().unwrap();
    assert!((1..=4).contains(&streams), "{back}");
    assert_same_tree(&tree, &down);

    // A remote tern that cannot connect back fails the copy at once, in
    // its own words, and the client stops waiting for it.
    let misdirected = s.p("bin/misdirected-tern");
    std::fs::write(
        &misdirected,
        format!(
            "#!/bin/bash\nargs=(\"$@\")\nfor i in \"${{!args[@]}}\"; do\n  \
             [ \"${{args[$i]}}\" = --connect ] && args[$((i+1))]=127.0.0.1:1\ndone\n\
             exec {} \"${{args[@]}}\"\n",
            TERN
        ),
    )
    .unwrap();
    std::fs::set_permissions(&misdirected, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = Instant::now();
    let zero = tree.join("zero");
    let out = s
        .tern_with(
            &["cp", "-z", zero.to_str().unwrap(), "127.0.0.1:x"],
            "client_key",
            &misdirected,
        )
        .output()
        .unwrap();
    let err = failed(&out, 7);
    assert!(err.contains("127.0.0.1:1"), "the remote's words: {err}");
    assert!(err.contains("without connecting back"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "failed fast");
    assert!(!s.p("home/x").exists());

    // tern perf takes the same form, both ways.
    for extra in [&[][..], &["-z"][..]] {
        let mut args = vec!["perf", "--time", "1", "--json", "127.0.0.1:"];
        args.extend(extra);
        let perf = json(&s.run(&args));
        assert_eq!(perf["command"], "perf");
        assert!(perf["bytes"].as_u64().unwrap() > 0);
    }
    s.assert_nothing_left(Duration::from_secs(5));
}

#[test]
fn a_wrong_token_or_fingerprint_is_refused_and_nothing_is_written() {
    let s = sshd_or_skip!();
    // A remote tern whose once line reaches the client with another token.
    let forger = s.p("bin/forging-tern");
    std::fs::write(
        &forger,
        format!(
            "#!/bin/sh\n{} \"$@\" | sed -u 's/token=[A-Za-z0-9+/]*/token=AAAAAAAAAAAAAAAAAAAAAA/'\n",
            TERN
        ),
    )
    .unwrap();
    std::fs::set_permissions(&forger, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = s.p("local/f.bin");
    random_file(&src, 1000);
    let out = s
        .tern_with(
            &["cp", src.to_str().unwrap(), "127.0.0.1:f.bin"],
            "client_key",
            &forger,
        )
        .output()
        .unwrap();
    let err = failed(&out, 4);
    assert!(err.contains("token"), "{err}");
    assert!(!s.p("home/f.bin").exists());

    // A fingerprint pinned by the user must match the one ssh brought.
    let pinned = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let out = s.run(&[
        "cp",
        "--fingerprint",
        pinned,
        src.to_str().unwrap(),
        "127.0.0.1:f.bin",
    ]);
    let err = failed(&out, 8);
    assert!(err.contains(pinned), "{err}");
    assert!(!s.p("home/f.bin").exists());

    // Still so with --ca, which has nothing to say over ssh: the pin is
    // not dropped for it.
    let ca = s.p("local/ca.pem");
    let made = rcgen::generate_simple_self_signed(vec!["ca.example".into()]).unwrap();
    std::fs::write(&ca, made.cert.pem()).unwrap();
    let out = s.run(&[
        "cp",
        "--ca",
        ca.to_str().unwrap(),
        "--fingerprint",
        pinned,
        src.to_str().unwrap(),
        "127.0.0.1:f.bin",
    ]);
    let err = failed(&out, 8);
    assert!(err.contains(pinned), "{err}");
    assert!(!s.p("home/f.bin").exists());
    s.assert_nothing_left(Duration::from_secs(5));
}

#[test]
fn a_missing_remote_tern_or_a_refused_login_is_a_clear_error() {
    let s = sshd_or_skip!();
    let src = s.p("local/f.bin");
    random_file(&src, 100);
    let src = src.to_str().unwrap();

    let out = s
        .tern_with(
            &["cp", src, "127.0.0.1:f.bin"],
            "client_key",
            Path::new("/nonexistent/tern"),
        )
        .output()
        .unwrap();
    let err = failed(&out, 12);
    assert!(err.contains("/nonexistent/tern"), "{err}");
    assert!(err.contains("--remote-tern"), "{err}");

    let out = s
        .tern_with(
            &["cp", src, "127.0.0.1:f.bin"],
            "stranger_key",
            &s.p("bin/tern-remote"),
        )
        .output()
        .unwrap();
    let err = failed(&out, 12);
    assert!(err.contains("ssh to 127.0.0.1 failed"), "{err}");
    assert!(
        err.contains("Permission denied"),
        "ssh's words are quoted: {err}"
    );

    let out = Command::new(TERN)
        .args(["cp", "--ssh", "/nonexistent/ssh", src, "127.0.0.1:f.bin"])
        .output()
        .unwrap();
    let err = failed(&out, 12);
    assert!(err.contains("--ssh"), "{err}");
    assert!(!s.p("home/f.bin").exists());
    s.assert_nothing_left(Duration::from_secs(5));
}

/// Starts a push slow enough to interrupt, and waits until the remote tern
/// is writing.
fn slow_push(s: &Sshd, extra: &[&str]) -> Child {
    let src = s.p("local/slow.bin");
    random_file(&src, 16 << 20);
    // 16 MiB at 24 Mbit/s: 6 s, long enough to interrupt in the middle.
    let mut args = vec!["cp", "--rate-limit", "24M"];
    args.extend(extra);
    args.extend([src.to_str().unwrap(), "127.0.0.1:slow.bin"]);
    let client = s
        .tern(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(remote_tern(s).is_some() && s.p("home").read_dir().unwrap().next().is_some()) {
        assert!(
            Instant::now() < deadline,
            "the remote tern never started: {:#?}",
            s.leftovers()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    client
}

/// The remote `tern serve --once`, if running: `PID: COMMAND`.
fn remote_tern(s: &Sshd) -> Option<String> {
    s.leftovers()
        .into_iter()
        .find(|l| l.contains("serve --once") && !l.contains(" -p "))
}

#[test]
fn a_copy_whose_ssh_dies_is_run_again_and_resumes() {
    let s = sshd_or_skip!();
    let client = slow_push(&s, &["--retries", "2", "--json"]);
    std::thread::sleep(Duration::from_secs(2));
    kill_ssh(&s);
    let out = client.wait_with_output().unwrap();
    let report = json(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("trying again"), "{err}");
    assert!(report["bytes_resumed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(
        file_difference(s.p("home/slow.bin"), s.p("local/slow.bin")),
        None
    );
    s.assert_nothing_left(Duration::from_secs(5));
}

/// Kills the test's ssh process (the client's child), by its pid.
fn kill_ssh(s: &Sshd) {
    let ssh = s
        .leftovers()
        .into_iter()
        .find(|l| {
            l.split_once(": ")
                .is_some_and(|(_, cmd)| cmd.starts_with("ssh "))
        })
        .expect("the ssh process");
    let pid = ssh.split(':').next().unwrap();
    let killed = Command::new("kill").args(["-KILL", pid]).status().unwrap();
    assert!(killed.success());
}

#[test]
fn the_remote_tern_ends_when_the_client_is_killed() {
    let s = sshd_or_skip!();
    let mut client = slow_push(&s, &["--retries", "0"]);
    assert!(
        client.try_wait().unwrap().is_none(),
        "the client ended early"
    );
    client.kill().unwrap();
    client.wait().unwrap();
    s.assert_nothing_left(Duration::from_secs(15));
    assert!(!s.p("home/slow.bin").exists(), "no file at the final name");
}

#[test]
fn the_remote_tern_ends_when_ssh_goes_away_and_the_client_says_so() {
    let s = sshd_or_skip!();
    let client = slow_push(&s, &["--retries", "0"]);
    // Only the ssh process dies; tern's own connections are still up, so
    // the remote tern must notice through its stdin.
    kill_ssh(&s);
    let out = client.wait_with_output().unwrap();
    let err = failed(&out, 9);
    assert!(err.contains("lost"), "{err}");
    s.assert_nothing_left(Duration::from_secs(15));
    assert!(!s.p("home/slow.bin").exists(), "no file at the final name");
}

#[test]
fn a_copy_from_an_ssh_host_to_a_daemon_goes_straight_to_the_daemon() {
    let s = sshd_or_skip!();
    let size = 6 << 20;
    let data = random_file(&s.p("home/run7.bin"), size);
    std::fs::create_dir_all(s.p("daemon-root/in")).unwrap();
    let daemon = common::serve(&s.p("daemon-root"), &s.p("daemon-state")).start();
    let out = s.run(&[
        "cp",
        "--json",
        "root@127.0.0.1:run7.bin",
        &daemon.url("in/"),
    ]);
    ok(&out);
    let v = json(&out);
    assert_eq!(v["direction"], "third-party", "{v}");
    assert_eq!(
        v["tpc"]["mode"], "pull",
        "the daemon dials the ssh end: {v}"
    );
    assert_eq!(v["tpc"]["ssh_ends"], serde_json::json!(["source"]), "{v}");
    assert_eq!(v["bytes"], size, "{v}");
    // The client's two control connections, nowhere near the file.
    let through_client = v["tpc"]["client_bytes"].as_u64().unwrap();
    assert!(
        through_client < size as u64 / 8,
        "{through_client} bytes: {v}"
    );
    assert_eq!(
        content_difference(s.p("daemon-root/in/run7.bin"), &data),
        None
    );
    drop(daemon);
    s.assert_nothing_left(Duration::from_secs(5));
}

#[test]
fn a_copy_from_a_daemon_to_an_ssh_host_goes_either_way() {
    let s = sshd_or_skip!();
    std::fs::create_dir_all(s.p("daemon-root")).unwrap();
    let data = random_file(&s.p("daemon-root/run8.bin"), 2 << 20);
    std::fs::create_dir_all(s.p("home/incoming")).unwrap();
    let daemon = common::serve(&s.p("daemon-root"), &s.p("daemon-state")).start();
    let out = s.run(&["cp", &daemon.url("run8.bin"), "root@127.0.0.1:incoming/"]);
    ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("directly") && said.contains("pulled from"),
        "{said}"
    );
    assert_eq!(
        content_difference(s.p("home/incoming/run8.bin"), &data),
        None
    );
    // Told to, the daemon dials the ssh end's tern and pushes.
    let out = s.run(&[
        "cp",
        "--tpc",
        "push",
        &daemon.url("run8.bin"),
        "root@127.0.0.1:incoming/again.bin",
    ]);
    ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("pushed to"), "{said}");
    assert_eq!(
        content_difference(s.p("home/incoming/again.bin"), &data),
        None
    );
    drop(daemon);
    s.assert_nothing_left(Duration::from_secs(5));
}

#[test]
fn a_copy_between_two_ssh_hosts_goes_straight_between_them() {
    let s = sshd_or_skip!();
    let data = random_file(&s.p("home/run9.bin"), 3 << 20);
    std::fs::create_dir_all(s.p("home/copies")).unwrap();
    let out = s.run(&[
        "cp",
        "--json",
        "root@127.0.0.1:run9.bin",
        "root@127.0.0.1:copies/",
    ]);
    ok(&out);
    let v = json(&out);
    assert_eq!(v["direction"], "third-party", "{v}");
    assert_eq!(
        v["tpc"]["ssh_ends"],
        serde_json::json!(["source", "destination"]),
        "{v}"
    );
    let through_client = v["tpc"]["client_bytes"].as_u64().unwrap();
    assert!(through_client < 1 << 20, "{through_client} bytes: {v}");
    assert_eq!(content_difference(s.p("home/copies/run9.bin"), &data), None);
    s.assert_nothing_left(Duration::from_secs(5));
}
