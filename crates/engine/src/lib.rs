//! The tern engine: every I/O of a transfer, around the protocol's logic
//! in `tern-session`.
//!
//! The daemon (`tern serve`) and the client (`tern cp`, `tern perf`) are two
//! uses of this one engine. It is grouped by concern, bottom up:
//!
//! - [`error`], [`integrity`]: the engine's error, and per-block checks
//!   and whole-file digests (the storage's skip rules and the data path
//!   both compute them);
//! - [`store`]: where blocks come from and go to: sources and sinks (files
//!   under a root, generated data, the discard sink), the resume journal,
//!   the skip rules, and the guard that a pull receives only what it asked
//!   for;
//! - [`data`]: the data path and its tuning: the async driver that runs a
//!   `tern-session` sender or receiver over a control channel and N data
//!   streams, compression, pacing, live tuning of sockets
//!   and the stream count, stalled streams and their replacements;
//! - [`conn`]: connections and identity: TLS, certificates and
//!   `known_hosts`, site authorization, opening a session (the pump around
//!   `tern-session`'s opening state machines), the client, the daemon and
//!   `tern serve --once`;
//! - [`local`]: a copy with both ends in this process.
//!
//! `store` imports nothing above it, `data` imports `store`, and `conn`
//! imports both; `ARCHITECTURE.md` at the repository root draws the whole
//! map.

pub mod conn;
pub mod data;
pub mod error;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod integrity;
pub mod local;
pub mod store;

pub use conn::{authz, client, net, once, paths, server, tls, tpc};
pub use data::{compress, pace, transfer, tuning};
pub use error::{Error, ErrorKind, Result};
pub use store::{fsio, journal, skip};
pub use tern_session as session;

/// Wraps a data stream before use; tests inject faults with it.
pub type StreamWrap = std::sync::Arc<
    dyn Fn(usize, data::transfer::BoxStream) -> data::transfer::BoxStream + Send + Sync,
>;
