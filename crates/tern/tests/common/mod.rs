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
