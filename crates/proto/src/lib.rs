//! The tern wire format, and nothing else.
//!
//! This crate owns every byte tern puts on the wire: the handshake
//! ([`hello`]), the control messages exchanged on the TLS control connection
//! ([`control`]), the frames carried by data connections ([`data`]), and
//! the one line `tern serve --once` prints for its ssh client ([`once`]),
//! the delegation a client signs for a third-party copy ([`delegation`]),
//! and the UDP packets of the capacity probe ([`probe`]).
//! It performs no I/O and keeps no state: callers hand it bytes and get typed
//! frames back, or hand it frames and get bytes. That keeps it small enough to
//! fuzz exhaustively (see `fuzz/`) and lets the engine's session state
//! machines be tested without sockets.
//!
//! The normative description, with golden byte vectors that are also tests,
//! is `docs/PROTOCOL.md`.

pub mod control;
pub mod data;
pub mod delegation;
pub mod hello;
pub mod once;
pub mod path;
pub mod probe;

pub use control::MAX_PATHS;
pub use control::{
    ChecksumAlg, Compression, ControlMsg, EntryKind, EntryMeta, ErrorCode, Existing, FileMeta,
    Protect, SessionAccept, SessionMode, SessionOpen, SkipExisting, TpcSession, TransferOptions,
    TuningRequest, Window, decode_control, encode_control,
};
pub use data::{BlockFlags, BlockHeader, Codec, DataFrame, DataJoin, JoinReply, RawLen};
pub use hello::{Features, Hello};
pub use once::OnceLine;
pub use path::RelPath;

/// Highest protocol version this build speaks. Peers use `min(ours, theirs)`.
pub const PROTOCOL_VERSION: u16 = 1;

/// Lowest protocol version this build still accepts.
pub const MIN_PROTOCOL_VERSION: u16 = 1;

/// TCP port `tern serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 4747;

/// Largest block payload a decoder accepts (64 MiB). Larger lengths are
/// rejected before any allocation, so a hostile peer cannot make a receiver
/// reserve unbounded memory.
pub const MAX_BLOCK_SIZE: u32 = 64 << 20;

/// Largest control frame body a decoder accepts (4 MiB).
pub const MAX_CONTROL_FRAME: u32 = 4 << 20;

/// Files a sender keeps in flight at most, unless both ends said
/// [`Features::MANY_FILES`].
pub const FILES_IN_FLIGHT: usize = 1024;

/// Files a sender keeps in flight at most when both ends said
/// [`Features::MANY_FILES`]: many small files over a long path need them
/// (each is in flight from its announcement through the receiver's group
/// commit to its `FileDone`).
pub const MANY_FILES_IN_FLIGHT: usize = 4096;

/// Size of a session token, shared by the control and data connections.
pub const TOKEN_LEN: usize = 16;

/// Size of the per-block check field (xxh3-128 or a truncated keyed BLAKE3).
pub const BLOCK_CHECK_LEN: usize = 16;

/// A secret that lets a data connection join a session.
pub type Token = [u8; TOKEN_LEN];

/// Why bytes could not be decoded. Every variant means the peer sent
/// something this build does not understand; the connection should be
/// dropped, never retried as is.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the fixed part of the frame needs.
    #[error("frame truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the fixed part needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The magic bytes that open a handshake or join were wrong: not a tern peer.
    #[error("bad magic {0:02x?}: not a tern peer")]
    BadMagic([u8; 4]),
    /// A frame kind byte this version does not know.
    #[error("unknown frame kind 0x{0:02x}")]
    UnknownKind(u8),
    /// A length field exceeds the protocol maximum.
    #[error("length {len} exceeds the maximum {max}")]
    TooLong {
        /// The length that was announced.
        len: u64,
        /// The largest accepted.
        max: u64,
    },
    /// Bits that must be zero were set.
    #[error("reserved bits set: 0x{0:x}")]
    Reserved(u32),
    /// A control message body did not decode.
    #[error("malformed control message: {0}")]
    Control(String),
    /// The line `tern serve --once` printed is not a once line.
    #[error("malformed once line: {0}")]
    OnceLine(String),
    /// A third-party-copy delegation's body did not decode.
    #[error("malformed delegation: {0}")]
    Delegation(String),
}
