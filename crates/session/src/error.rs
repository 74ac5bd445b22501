//! What can go wrong in the protocol's logic.
//!
//! Only what a state machine itself can see: the peer broke the protocol,
//! reported an error, went away, or the data could not be verified. The
//! engine turns each into its own error of the same name and words
//! (`tern_engine::Error: From<tern_session::Error>`), which also carries
//! the errors of I/O.

use tern_proto::ErrorCode;

/// A session failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The peer broke the protocol in a way that decodes but makes no sense.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The request makes no sense, or asks for more than this end allows.
    #[error("{0}")]
    BadRequest(String),
    /// The client did not prove it may use this server.
    #[error("not authorized: {0}")]
    Unauthorized(String),
    /// The peer reported an error.
    #[error("peer: {message}")]
    Peer {
        /// The peer's code.
        code: ErrorCode,
        /// The peer's words.
        message: String,
    },
    /// The connection to the peer was lost.
    #[error("connection to the peer lost: {0}")]
    PeerGone(String),
    /// The whole-file digest did not match.
    #[error("{path}: digest mismatch (sender {sender}, receiver {receiver})")]
    DigestMismatch {
        /// File concerned.
        path: String,
        /// Sender's digest, hex.
        sender: String,
        /// Receiver's digest, hex.
        receiver: String,
    },
    /// Blocks stayed missing or corrupt after the repair limit.
    #[error("{path}: blocks still bad after {rounds} repair rounds")]
    TooManyRetries {
        /// File concerned.
        path: String,
        /// Rounds tried.
        rounds: u32,
    },
}

impl Error {
    /// The code to tell the peer about this error.
    pub fn wire_code(&self) -> ErrorCode {
        match self {
            Error::Protocol(_) => ErrorCode::Protocol,
            Error::BadRequest(_) => ErrorCode::BadRequest,
            Error::Unauthorized(_) => ErrorCode::PermissionDenied,
            Error::Peer { code, .. } => *code,
            Error::PeerGone(_) => ErrorCode::Io,
            Error::DigestMismatch { .. } => ErrorCode::DigestMismatch,
            Error::TooManyRetries { .. } => ErrorCode::TooManyRetries,
        }
    }
}

/// Result with the session's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
