//! What the `tern` test binaries share beyond `tern-testkit`: the binary
//! cargo built for them, and daemons of it as most of them start one.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tern_testkit::daemon::{Daemon, Serve};

/// The `tern` binary under test.
pub const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// A command running it.
pub fn tern() -> Command {
    Command::new(TERN)
}

/// `tern serve` of it on an ephemeral port of 127.0.0.1, serving `root`
/// with its certificate in `state` and its log in `STATE.log`, with a
/// grace of 1 s; `.start()` starts it.
pub fn serve(root: &Path, state: &Path) -> Serve {
    Serve::new(TERN, root, state).grace(1)
}

/// splitmix64: small, seeded, good enough to pick kill points.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in [lo, hi).
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The seed of a test: TERN_TEST_SEED if set, else the clock; printed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("TERN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test}: seed {seed} (TERN_TEST_SEED={seed} repeats it)");
    seed
}

/// A scratch directory for one test: `root/` for a daemon to serve,
/// `cfg/` and `xdg-state/` as the client's configuration and state.
pub struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("root")).unwrap();
        std::fs::create_dir(dir.path().join("cfg")).unwrap();
        Env { dir }
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// [`Env::p`] as a string, for command lines.
    pub fn s(&self, rel: &str) -> String {
        self.p(rel).to_str().unwrap().to_string()
    }

    /// A daemon serving `root/`, with a grace of 2 s.
    pub fn server(&self) -> Daemon {
        Serve::new(TERN, self.p("root"), self.p("state"))
            .grace(2)
            .start()
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = tern();
        c.args(args)
            .env("XDG_CONFIG_HOME", self.p("cfg"))
            .env("XDG_STATE_HOME", self.p("xdg-state"));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }
}
