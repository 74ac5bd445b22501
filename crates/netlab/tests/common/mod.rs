//! What the netlab tests that run tern share: a lab of their own name,
//! brought up for one test and torn down after it (also after a failed
//! assertion), the emulator given real-time priority, and tern processes
//! killed when the test ends.
//!
//! Each test file uses its own lab name, so it never collides with the
//! fixed names of `tests/lab.rs` or with another file's lab.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::Value;

/// Says why `test` cannot run here and skips it; when `TERN_TEST_STRICT`
/// is set (CI, as root) fails it instead, since there every test must run.
pub fn skip(test: &str, why: &str) {
    if std::env::var_os("TERN_TEST_STRICT").is_some_and(|v| !v.is_empty()) {
        panic!("{test} cannot run: {why} (TERN_TEST_STRICT is set: no test may skip)");
    }
    eprintln!("SKIP {test}: {why}");
}

pub fn netlab_bin() -> &'static str {
    env!("CARGO_BIN_EXE_netlab")
}

/// The tern binary beside netlab, when it was built.
pub fn tern_bin() -> Option<PathBuf> {
    let p = Path::new(netlab_bin()).with_file_name("tern");
    p.exists().then_some(p)
}

/// Why a test that needs root, a TUN device and tern cannot run here.
pub fn cannot_run() -> Option<String> {
    let root = netlab::sys::is_root();
    let tun = Path::new("/dev/net/tun").exists();
    if !(root && tun) {
        return Some(format!(
            "needs root and /dev/net/tun (root={root}, tun={tun})"
        ));
    }
    if tern_bin().is_none() {
        return Some("build the tern binary first (cargo build --release -p tern)".into());
    }
    None
}

/// The tern binary's path, or `None` after printing why `test` skips.
pub fn tern_or_skip(test: &str) -> Option<String> {
    if let Some(why) = cannot_run() {
        skip(test, &why);
        return None;
    }
    tern_bin().map(|p| p.to_string_lossy().into_owned())
}

/// A lab, torn down when dropped.
pub struct Lab {
    name: &'static str,
}

impl Lab {
    /// `netlab --lab NAME ARGS…`.
    pub fn netlab(name: &str, args: &[&str]) -> Command {
        let mut c = Command::new(netlab_bin());
        c.args(["--lab", name]).args(args);
        c
    }

    pub fn up(name: &'static str, args: &[&str]) -> Lab {
        let _ = Lab::netlab(name, &["down"]).status();
        let out = Lab::netlab(name, &["up"]).args(args).output().unwrap();
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "netlab up: {why}");
        Lab { name }
    }

    /// Gives the emulator's threads real-time priority (see
    /// [`prioritize_emulator`]).
    pub fn prioritize_emulator(&self) {
        prioritize_emulator(self.name);
    }

    /// A command run in host `A` or `B`.
    pub fn command(&self, host: &str, cmd: &[&str]) -> Command {
        let mut c = Lab::netlab(self.name, &["exec", host]);
        c.args(cmd);
        c
    }

    pub fn status(&self) -> Value {
        let out = Lab::netlab(self.name, &["status", "--json"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Lab::netlab(self.name, &["down"]).status();
    }
}

/// A process killed when the test ends.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Gives lab `name`'s emulator threads real-time priority, so a busy host
/// does not deschedule it for milliseconds (a late ping, a rate under the
/// configured one); says so when it cannot.
pub fn prioritize_emulator(name: &str) {
    let pid = std::fs::read_to_string(format!("/run/netlab/{name}/emulator.pid")).unwrap();
    let ok = Command::new("chrt")
        .args(["-a", "-f", "-p", "50", pid.trim()])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("note: could not give the emulator real-time priority (chrt)");
    }
}

/// Waits until something in `host` of lab `name` listens on TCP `port`
/// (a daemon just spawned there); fails the test after 20 s.
pub fn wait_until_listening(name: &str, host: &str, port: u16) {
    let filter = format!("sport = :{port}");
    let listening = || {
        let out = Lab::netlab(name, &["exec", host, "ss", "-Hltn", &filter])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    let up_by = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !listening() {
        assert!(
            std::time::Instant::now() < up_by,
            "nothing listens on port {port} in {host} after 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
