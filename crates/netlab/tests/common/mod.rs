//! What the netlab test binaries share: a lab of the test's own name,
//! brought up for one test and torn down after it (also after a failed
//! assertion), its emulator given real-time priority, one lab at a time
//! in a test binary; the tern binary, and a tern daemon in host B.
//!
//! Each test uses its own lab name, so it never collides with another
//! test's or another binary's lab.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tern_testkit::daemon::{Daemon, Serve, tern_bin};
use tern_testkit::net::wait_until_listening_via;
use tern_testkit::skip::{is_root, skip};

pub fn netlab_bin() -> &'static str {
    env!("CARGO_BIN_EXE_netlab")
}

/// `netlab --lab NAME ARGS…`.
pub fn netlab(name: &str, args: &[&str]) -> Command {
    let mut c = Command::new(netlab_bin());
    c.args(["--lab", name]).args(args);
    c
}

/// Why a test that needs root, a TUN device and tern cannot run here.
pub fn cannot_run() -> Option<String> {
    let root = is_root();
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

/// The tern binary's path, or `None` after skipping `test`, saying why.
pub fn tern_or_skip(test: &str) -> Option<String> {
    if let Some(why) = cannot_run() {
        skip(test, &why);
        return None;
    }
    tern_bin().map(|p| p.to_string_lossy().into_owned())
}

/// Labs run one at a time: each has its own emulator process, and several
/// at once on two cores would measure the host's load, not the emulator.
static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A lab, torn down when dropped.
pub struct Lab {
    name: String,
    _turn: MutexGuard<'static, ()>,
}

impl Lab {
    /// `netlab --lab NAME up ARGS…` (after a `down` of whatever was left
    /// under that name), the emulator at real-time priority.
    pub fn up(name: &str, args: &[&str]) -> Lab {
        Lab::up_with_env(name, args, &[])
    }

    /// [`Lab::up`] with the emulator at normal priority: for a test that
    /// moves many small packets, where a real-time emulator busy with
    /// them starves the endpoints (their socket buffers overflow, which
    /// looks like loss), and the µs timing real-time buys is not needed.
    pub fn up_at_normal_priority(name: &str, args: &[&str]) -> Lab {
        Lab::start(name, args, &[], false)
    }

    /// [`Lab::up`] with environment variables for `netlab up` (and so for
    /// the emulator it starts).
    pub fn up_with_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Lab {
        Lab::start(name, args, env, true)
    }

    fn start(name: &str, args: &[&str], env: &[(&str, &str)], realtime: bool) -> Lab {
        let turn = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let _ = netlab(name, &["down"]).status();
        let out = netlab(name, &["up"])
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "netlab up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if realtime {
            prioritize_emulator(name);
        }
        Lab {
            name: name.into(),
            _turn: turn,
        }
    }

    /// `netlab --lab NAME exec HOST`: the prefix that runs a command in
    /// host `A`, `B` or `C`.
    pub fn prefix(&self, host: &str) -> Vec<String> {
        [netlab_bin(), "--lab", &self.name, "exec", host]
            .map(String::from)
            .to_vec()
    }

    /// A command run in host `A`, `B` or `C`.
    pub fn command(&self, host: &str, cmd: &[&str]) -> Command {
        let mut c = netlab(&self.name, &["exec", host]);
        c.args(cmd);
        c
    }

    /// Runs `cmd` in `host` to its end.
    pub fn exec(&self, host: &str, cmd: &[&str]) -> Output {
        self.command(host, cmd).output().unwrap()
    }

    /// Starts `cmd` in `host`, its stdout piped and stderr discarded.
    pub fn spawn(&self, host: &str, cmd: &[&str]) -> Child {
        self.command(host, cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// `netlab --lab NAME ARGS…` run to its end.
    pub fn netlab(&self, args: &[&str]) -> Output {
        netlab(&self.name, args).output().unwrap()
    }

    /// `netlab status --json`.
    pub fn status(&self) -> Value {
        let out = self.netlab(&["status", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Starts `tern serve` in B on 10.47.0.2:4747 with `extra` flags, root
    /// `work/root` (created), state `work/state`, log `work/state.log`;
    /// returns once it listens.
    pub fn serve_tern(&self, tern: &str, work: &Path, extra: &[&str]) -> Daemon {
        let root = work.join("root");
        std::fs::create_dir_all(&root).unwrap();
        Serve::new(tern, root, work.join("state"))
            .listen("10.47.0.2:4747")
            .args(extra)
            .via(self.prefix("B"))
            .start()
    }

    /// Waits until something in `host` listens on TCP `port` (a server
    /// just spawned there); fails the test after 20 s.
    pub fn wait_until_listening(&self, host: &str, port: u16) {
        wait_until_listening_via(&self.prefix(host), port, Duration::from_secs(20));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = netlab(&self.name, &["down"]).status();
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
