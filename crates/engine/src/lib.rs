//! The tern engine: everything on the data path.
//!
//! The daemon (`tern serve`) and the client (`tern cp`, `tern perf`) are two
//! uses of this one engine. Layers inside it, bottom up:
//!
//! - [`integrity`]: per-block checks and whole-file digests;
//! - [`compress`]: block compression and when it pays;
//! - [`session`]: sans-I/O sender and receiver state machines;
//! - [`fsio`]: data sources and sinks (files under a root, generated data,
//!   the discard sink) behind one pair of traits;
//! - [`transfer`]: the async driver that runs a session over a control
//!   channel and N data streams;
//! - [`tuning`]: live tuning of data sockets and the stream count; stalled
//!   streams are seen and given up in `stall`, and replaced through `supply`;
//! - [`options`], [`skip`]: the client's transfer options, and files the
//!   destination already has;
//! - [`tls`], [`server`], [`client`]: connections, identity and the daemon;
//! - [`once`]: `tern serve --once`, the one-session server ssh starts.

pub mod authz;
pub mod client;
pub mod compress;
pub mod error;
pub mod expect;
pub mod fault;
pub mod fsio;
pub mod integrity;
pub mod journal;
pub mod local;
pub mod net;
pub mod observe;
pub mod once;
pub mod options;
pub mod pace;
pub mod server;
pub mod session;
pub mod skip;
mod stall;
mod supply;
pub mod tls;
pub mod transfer;
pub mod tuning;

pub use error::{Error, ErrorKind, Result};

/// Wraps a data stream before use; tests inject faults with it.
pub type StreamWrap =
    std::sync::Arc<dyn Fn(usize, transfer::BoxStream) -> transfer::BoxStream + Send + Sync>;
