//! The strict-skip rule, once: a test that cannot run on this host (not
//! root, a tool missing, no PostgreSQL) says why and returns; under
//! `TERN_TEST_STRICT` (set by `scripts/test.sh` as root, as in CI) it
//! fails instead, so that no test passes there unseen.

use std::process::{Command, Stdio};

/// Whether `TERN_TEST_STRICT` is set and not empty: every test must run.
pub fn strict() -> bool {
    std::env::var_os("TERN_TEST_STRICT").is_some_and(|v| !v.is_empty())
}

/// Says why `test` (a test's name, or the part of one that cannot run)
/// cannot run here, as `SKIP test: why`; panics instead under
/// [`strict`]. The caller returns after it.
#[track_caller]
pub fn skip(test: &str, why: &str) {
    if strict() {
        panic!("{test} cannot run: {why} (TERN_TEST_STRICT is set: no test may skip)");
    }
    eprintln!("SKIP {test}: {why}");
}

/// Whether this process runs as root (real uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether `program` can be run (found on `PATH`, or a path that exists
/// and is executable): it is started with `--version`, whatever it answers.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}
