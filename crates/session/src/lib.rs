//! tern's protocol logic without I/O: how a session opens, what to send,
//! what is missing, when a file is complete.
//!
//! Like `quinn-proto` beside `quinn`, this crate decides and the engine
//! (`tern-engine`) acts: it depends on the wire format (`tern-proto`) and
//! pure libraries only, never on tokio, rustls, sockets, files or clocks.
//!
//! - [`open`]: the opening of a session, both ends ([`ClientOpen`],
//!   [`ServerOpen`]): hello features, the session request, tuning and
//!   transfer options, the server's acceptance or refusal;
//! - [`SenderSession`] and [`ReceiverSession`]: the data phase;
//! - [`delegation`]: issuing and judging a third-party copy's delegation.
//!
//! All are deterministic state machines: the driver (`tern_engine::transfer`
//! and `tern_engine::conn::open`) feeds them events (control messages, blocks that
//! arrived or were written, streams that died, the time) and carries out
//! the actions they emit (control messages to send, files to open or put in
//! place). They own no sockets, files or clocks, so scheduling, repair and
//! completion logic are tested in memory (`tests` below) with simulated
//! latency, reordering, dropped streams and corrupt blocks.
//!
//! Completion without acknowledgements: the sender's `FileSent` carries,
//! per stream, how many frames it had handed to that stream. The receiver
//! waits until every stream still alive has delivered that many, and only
//! then judges what is missing; whatever a dead stream took with it is then
//! simply requested again.

pub mod delegation;
mod error;
pub mod open;
mod options;
mod receiver;
mod sender;

pub use error::{Error, Result};
pub use open::{ClientAgreed, ClientOpen, ClientRequest, ServerOpen, ServerPolicy, SessionRequest};
pub use options::{Agreed, Choices, DEFAULT_STALL_TIMEOUT, SPARE_STREAMS};
pub use receiver::{BlockVerdict, ReceiverConfig, ReceiverSession, RecvAction};
pub use sender::{
    BYTES_IN_FLIGHT, DigestNeed, FEW_FILES, Flight, SendEntry, SenderConfig, SenderSession,
};

use tern_proto::{ErrorCode, RelPath};

/// Default number of repair rounds before a file is declared bad.
pub const DEFAULT_MAX_REPAIR_ROUNDS: u32 = 8;

/// What one finished file looked like, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOutcome {
    /// Path relative to the transfer's top.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Whole-file digest (empty when digests are off, as in perf).
    pub digest: Vec<u8>,
}

/// An entry that could not be copied; the rest of the tree was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFailure {
    /// Path relative to the transfer's top.
    pub path: RelPath,
    /// What kind of failure, as on the wire.
    pub code: ErrorCode,
    /// Why, for a person.
    pub message: String,
    /// Which end saw it: `true` when the peer reported it.
    pub by_peer: bool,
}

/// What went wrong with one entry at this end, as the peer will be told:
/// the driver makes it from its own (I/O) error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What kind of failure, as on the wire.
    pub code: ErrorCode,
    /// Why, for a person.
    pub message: String,
}

impl EntryFailure {
    /// A failure seen at this end.
    pub fn here(path: RelPath, problem: Problem) -> EntryFailure {
        EntryFailure {
            path,
            code: problem.code,
            message: problem.message,
            by_peer: false,
        }
    }

    /// A failure the peer reported (`EntryFailed`), checked against the
    /// file ids announced so far (`below`: every id under it was).
    pub(crate) fn from_peer(
        msg: (RelPath, Option<u32>, ErrorCode, String),
        below: u32,
    ) -> Result<(EntryFailure, Option<u32>)> {
        let (path, file_id, code, message) = msg;
        if let Some(id) = file_id.filter(|&id| id >= below) {
            return Err(Error::Protocol(format!(
                "failure reported for file {id}, which was never announced"
            )));
        }
        let failure = EntryFailure {
            path,
            code,
            message,
            by_peer: true,
        };
        Ok((failure, file_id))
    }

    /// The message that tells the peer about a failure seen here.
    pub(crate) fn to_wire(&self, file_id: Option<u32>) -> tern_proto::ControlMsg {
        tern_proto::ControlMsg::EntryFailed {
            path: self.path.clone(),
            file_id,
            code: self.code,
            message: self.message.clone(),
        }
    }
}

/// One block a stream worker should read and send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockTask {
    /// File the block belongs to.
    pub file_id: u32,
    /// Offset in the file.
    pub offset: u64,
    /// Payload length.
    pub len: u32,
    /// The block was asked for again.
    pub repair: bool,
    /// A second copy of a block still on its way on a slower stream (the
    /// endgame): it moves nothing new.
    pub copy: bool,
}

/// A growable set of block indices.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlockSet {
    words: Vec<u64>,
}

impl BlockSet {
    pub(crate) fn insert(&mut self, index: u64) -> bool {
        let (w, b) = ((index / 64) as usize, index % 64);
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let fresh = self.words[w] & (1 << b) == 0;
        self.words[w] |= 1 << b;
        fresh
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.words.iter().all(|&word| word == 0)
    }

    pub(crate) fn contains(&self, index: u64) -> bool {
        let (w, b) = ((index / 64) as usize, index % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Number of indices from `start` on that are all present.
    pub(crate) fn run_from(&self, start: u64) -> u64 {
        let mut i = start;
        while self.contains(i) {
            i += 1;
        }
        i - start
    }
}

#[cfg(test)]
mod tests;
