//! What tern's integration tests share, kept once instead of copied into
//! every test binary. A dev-dependency only: nothing here is part of tern.
//!
//! Each module owns one thing:
//!
//! - [`skip`]: the strict-skip rule (a test that cannot run here says why
//!   and skips, but fails when `TERN_TEST_STRICT` is set, as in CI), and
//!   the questions tests ask before deciding (`is_root`, `have`).
//! - [`files`]: test data (the deterministic generators the tests have
//!   always used, so their data stays the same) and byte comparison that
//!   says where two contents first differ.
//! - [`tree`]: trees compared entry by entry the way `rsync -a` users look
//!   at a copy (type, mode, owner, mtime, content, links, sparseness).
//! - [`daemon`]: `tern serve` (or any tern server printing a `--json`
//!   banner) started for a test, its banner read, its log kept in a file,
//!   killed and restarted on its port, killed when dropped; and where the
//!   `tern` binary is for crates other than `tern`.
//! - [`net`]: waiting until something listens (on loopback, or in a
//!   network namespace through a command prefix), and a port where
//!   nothing does.
//! - [`client`] (feature `client`): the engine's `ClientOptions` as tests
//!   use them, built in one place.

pub mod daemon;
pub mod files;
pub mod net;
pub mod skip;
pub mod tree;

#[cfg(feature = "client")]
pub mod client;
