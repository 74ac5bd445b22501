//! The data path and its tuning: blocks from a source to a sink over N
//! streams.
//!
//! - [`transfer`]: the async driver of one `tern-session` sender or
//!   receiver: the control channel, one worker per data stream, the
//!   shared state between them;
//! - [`channel`]: byte streams, the framed control channel, a transfer's
//!   tasks;
//! - [`compress`]: block compression and when it pays;
//! - [`pace`]: the rate limit;
//! - [`tuning`]: live tuning of data sockets and the stream count; stalled
//!   streams are seen and given up in `stall`, and replaced through
//!   `supply`, which also holds a session's first streams
//!   ([`FirstStreams`]: joined, or still joining while a sender starts).

pub mod channel;
pub mod compress;
mod fold;
pub mod pace;
mod stall;
mod supply;
pub mod transfer;
pub mod tuning;

pub use supply::{FirstStreams, PendingJoins};
