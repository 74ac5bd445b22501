//! What the `tern` test binaries share beyond `tern-testkit`: the binary
//! cargo built for them, and daemons of it as most of them start one.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use tern_testkit::daemon::Serve;

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
