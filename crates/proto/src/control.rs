//! Control messages: what the two ends say to each other on the control
//! connection once the handshake is done.
//!
//! A control frame is a 4-byte big-endian body length followed by the body,
//! a [`ControlMsg`] encoded with postcard (a stable, compact serde format:
//! varint integers, length-prefixed strings and byte strings, enum variants
//! by index). Variants are only ever appended, never reordered, so the index
//! of an existing message never changes.

use serde::{Deserialize, Serialize};

use crate::delegation::{SignedDelegation, TpcRole};
use crate::{DecodeError, MAX_CONTROL_FRAME, RelPath, Token};

/// Algorithm for the end-to-end (whole-file) digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChecksumAlg {
    /// XXH3 128-bit: the default; far faster than any network or disk.
    Xxh3,
    /// BLAKE3 256-bit: cryptographic.
    Blake3,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// Adler-32, as stored in many HEP file catalogues.
    Adler32,
    /// MD5, as stored in many HEP file catalogues.
    Md5,
    /// SHA-256.
    Sha256,
}

impl ChecksumAlg {
    /// All algorithms, in a stable order.
    pub const ALL: [ChecksumAlg; 6] = [
        ChecksumAlg::Xxh3,
        ChecksumAlg::Blake3,
        ChecksumAlg::Crc32c,
        ChecksumAlg::Adler32,
        ChecksumAlg::Md5,
        ChecksumAlg::Sha256,
    ];

    /// The lower-case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlg::Xxh3 => "xxh3",
            ChecksumAlg::Blake3 => "blake3",
            ChecksumAlg::Crc32c => "crc32c",
            ChecksumAlg::Adler32 => "adler32",
            ChecksumAlg::Md5 => "md5",
            ChecksumAlg::Sha256 => "sha256",
        }
    }
}

/// Protection of the data connections, like GridFTP's `PROT` levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protect {
    /// Plain TCP; blocks carry an unkeyed checksum.
    Clear,
    /// Plain TCP; blocks carry a MAC keyed from the control connection's TLS
    /// session, so injected or altered data is detected.
    Safe,
    /// Every data connection runs TLS: encrypted and authenticated.
    Private,
}

impl Protect {
    /// The lower-case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Protect::Clear => "clear",
            Protect::Safe => "safe",
            Protect::Private => "private",
        }
    }
}

/// What a session is for. The client chooses; the server either accepts or
/// answers with an [`ControlMsg::Error`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionMode {
    /// The client sends files; the server writes them under `dest`.
    Push {
        /// Destination path, relative to the server's root.
        dest: String,
        /// Number of top-level sources the client will send (scp rule: more
        /// than one requires `dest` to be a directory).
        top_level: u32,
    },
    /// The server sends the named files or trees to the client.
    Pull {
        /// Source paths, relative to the server's root.
        sources: Vec<String>,
        /// Descend into directories.
        recursive: bool,
    },
    /// Memory-to-memory test: generated data, discarded at the receiver.
    Perf {
        /// True when the server sends (`tern perf --reverse`).
        server_sends: bool,
        /// Bytes to send, or 0 to send for `seconds`.
        bytes: u64,
        /// Duration when `bytes` is 0, in milliseconds.
        millis: u64,
    },
}

/// The client's request to open a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOpen {
    /// What the session does.
    pub mode: SessionMode,
    /// Data connections the client will open.
    pub streams: u16,
    /// Block payload size in bytes.
    pub block_size: u32,
    /// Whole-file digest algorithm.
    pub checksum: ChecksumAlg,
    /// Data connection protection.
    pub protect: Protect,
}

/// The server's acceptance of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAccept {
    /// Secret that data connections present to join this session.
    pub token: Token,
    /// Data connections the server expects (may be lower than asked).
    pub streams: u16,
    /// Block size in force (may be lower than asked).
    pub block_size: u32,
}

/// Who sizes the data sockets' buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Window {
    /// Each end's dynamic right-sizing.
    Auto,
    /// The kernel's autotuning alone.
    Kernel,
    /// Send and receive buffers locked at this many bytes on both ends.
    Fixed(u32),
}

/// The client's tuning request, sent right after `SessionOpen` when both
/// ends have [`crate::Features::TUNING`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TuningRequest {
    /// Most data streams the session may grow to (at least
    /// `SessionOpen.streams`).
    pub max_streams: u16,
    /// Buffer sizing.
    pub window: Window,
    /// Congestion control for the data sockets; empty: each end chooses.
    pub congestion: String,
}

/// How the sending end compresses block payloads (needs `COMPRESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Compression {
    /// Never: every block is sent as it is.
    None,
    /// Where it pays: blocks that do not shrink, files that do not
    /// compress, and a network faster than the compressor are sent raw.
    Auto,
    /// Every block with zstd, unless it does not shrink.
    Zstd,
    /// Every block with LZ4, unless it does not shrink.
    Lz4,
}

impl Compression {
    /// The lower-case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Auto => "auto",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
        }
    }
}

/// When a file already at the destination counts as complete and is not
/// sent (needs `SKIP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SkipExisting {
    /// Never: every file is sent.
    Never,
    /// Same size.
    Size,
    /// Same size and the same modification time, to the nanosecond.
    Mtime,
    /// Same size and the same whole-file digest (both ends read their copy).
    Digest,
}

impl SkipExisting {
    /// The lower-case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            SkipExisting::Never => "never",
            SkipExisting::Size => "size",
            SkipExisting::Mtime => "mtime",
            SkipExisting::Digest => "digest",
        }
    }
}

/// The client's choices for the transfer, sent right after its session
/// request (and `Tuning`) when both ends have [`crate::Features::OPTIONS`].
/// Each end applies the ones that concern it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferOptions {
    /// What the sending end does with block payloads (only with `COMPRESS`).
    pub compression: Compression,
    /// What the receiving end skips (only with `SKIP`).
    pub skip_existing: SkipExisting,
    /// A data stream whose I/O waits this long (milliseconds) is replaced;
    /// 0: never.
    pub stall_timeout_ms: u32,
    /// Of `TuningAccept.max_streams`, this many indices (the highest) are
    /// kept to replace streams that stalled or failed, never to grow.
    pub spare_streams: u16,
}

/// What the receiver found at an announced file's final name (`FileCheck`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Existing {
    /// Nothing that counts as complete: send the file.
    Absent,
    /// A complete copy that matches by the skip policy: the file is skipped.
    Same,
    /// A copy of the same size whose whole-file digest is this (policy
    /// `Digest`): the sender compares it with its own.
    Digest(Vec<u8>),
}

/// Metadata of a file the sender is about to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    /// Session-unique identifier used by data frames.
    pub file_id: u32,
    /// Path relative to the transfer's top, `/`-separated, no `..`; any
    /// bytes with `ENTRIES`, UTF-8 otherwise.
    pub path: RelPath,
    /// Size in bytes; [`FileMeta::UNKNOWN_SIZE`] for perf streams of unknown length.
    pub size: u64,
    /// Unix permission bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_s: i64,
    /// Modification time, nanoseconds part.
    pub mtime_ns: u32,
}

impl FileMeta {
    /// Size of a generated perf stream whose length is set by a deadline.
    pub const UNKNOWN_SIZE: u64 = u64::MAX;
}

/// What kind of entry an [`EntryMeta`] announces (needs `ENTRIES`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryKind {
    /// A directory: created at once, its mode and time applied once
    /// everything in it has arrived.
    Dir,
    /// A symbolic link with this target (bytes, not interpreted).
    Symlink {
        /// What the link points to, exactly as `readlink` gave it.
        target: RelPath,
    },
    /// A named pipe.
    Fifo,
}

/// An entry that is not a regular file: a directory with its time, a
/// symbolic link or a named pipe (needs `ENTRIES`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMeta {
    /// Path relative to the transfer's top, as in [`FileMeta::path`].
    pub path: RelPath,
    /// What it is.
    pub kind: EntryKind,
    /// Unix permission bits (ignored for symbolic links).
    pub mode: u32,
    /// Modification time, seconds since the epoch (signed).
    pub mtime_s: i64,
    /// Modification time, nanoseconds part.
    pub mtime_ns: u32,
}

/// Why a session or file failed, as told to the peer. Codes are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// A path does not exist.
    NotFound,
    /// A path is outside the root or otherwise not allowed.
    PermissionDenied,
    /// The destination ran out of space.
    NoSpace,
    /// Some other I/O failure.
    Io,
    /// The request makes no sense (e.g. several sources into a file).
    BadRequest,
    /// The whole-file digest did not match after all repairs.
    DigestMismatch,
    /// The peer broke the protocol.
    Protocol,
    /// The session ended early (shutdown, interrupt).
    Aborted,
    /// A block stayed bad after the repair limit.
    TooManyRetries,
}

/// Every message of the control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlMsg {
    /// Client → server: open a session.
    SessionOpen(SessionOpen),
    /// Server → client: session accepted.
    SessionAccept(SessionAccept),
    /// Sender → receiver: a directory to create (possibly empty).
    DirAnnounce {
        /// Path relative to the transfer's top.
        path: RelPath,
        /// Unix permission bits.
        mode: u32,
    },
    /// Sender → receiver: a file whose blocks will follow on data connections.
    FileAnnounce(FileMeta),
    /// Receiver → sender: send these ranges again (missing or corrupt).
    BlockRequest {
        /// File the ranges belong to.
        file_id: u32,
        /// `(offset, length)` pairs.
        ranges: Vec<(u64, u32)>,
    },
    /// Sender → receiver: every block of the file (or of the last repair
    /// round) has been written to a data connection.
    FileSent {
        /// The file.
        file_id: u32,
        /// Final size (differs from the announced size only for perf streams).
        size: u64,
        /// Whole-file digest computed by the sender.
        digest: Vec<u8>,
        /// Per stream, how many data frames had been written to it when this
        /// message was sent. The receiver waits until each live stream has
        /// delivered that many before judging what is missing.
        stream_marks: Vec<u64>,
    },
    /// Receiver → sender: the file is complete, verified and in place.
    FileDone {
        /// The file.
        file_id: u32,
        /// Whole-file digest computed by the receiver.
        digest: Vec<u8>,
    },
    /// Either side: something failed.
    Error {
        /// What failed, for the peer's program.
        code: ErrorCode,
        /// What failed, for a person.
        message: String,
        /// The file concerned, if one.
        file_id: Option<u32>,
    },
    /// Sender → receiver: no more files. Receiver → sender: all done, with
    /// what the receiver counted.
    Close {
        /// Payload bytes received or sent per stream.
        per_stream_bytes: Vec<u64>,
    },
    /// Client → server, right after `SessionOpen` (needs `TUNING`).
    Tuning(TuningRequest),
    /// Server → client, right after `SessionAccept` (needs `TUNING`).
    TuningAccept {
        /// Most data streams the session may grow to.
        max_streams: u16,
        /// Congestion control the server's data sockets use.
        congestion: String,
    },
    /// Sending server → receiving client: open data connections until the
    /// session has `total` streams (needs `TUNING`).
    MoreStreams {
        /// Streams wanted in all.
        total: u16,
    },
    /// Receiver → sender: of an announced file, these byte ranges are
    /// already verified at the destination (a resumed partial file); do not
    /// send them (needs `RESUME`).
    FileHave {
        /// The file.
        file_id: u32,
        /// `(offset, length)` pairs, block-aligned.
        ranges: Vec<(u64, u64)>,
    },
    /// Client → server, right after the handshake and before `SessionOpen`:
    /// the one-time token that `tern serve --once` printed on the ssh
    /// channel, proving the client is the one ssh authenticated (needs
    /// `TOKEN_AUTH`).
    TokenAuth {
        /// The token from the once line.
        token: Token,
    },
    /// Client → server, right after `SessionOpen` (and `Tuning`): the
    /// transfer's options (needs `OPTIONS`).
    TransferOptions(TransferOptions),
    /// Receiver → sender: what is at an announced file's final name; the
    /// sender hands out no block of the file before it (needs `SKIP`, and
    /// a skip policy other than `Never`).
    FileCheck {
        /// The file.
        file_id: u32,
        /// What was found.
        existing: Existing,
    },
    /// Sender → receiver: a directory (with its time), symbolic link or
    /// named pipe (needs `ENTRIES`).
    EntryAnnounce(EntryMeta),
    /// Either side: one entry could not be copied; the session goes on
    /// without it (needs `ENTRIES`).
    EntryFailed {
        /// The entry, relative to the transfer's top.
        path: RelPath,
        /// The announced file it was, if any: the sender stops sending it.
        file_id: Option<u32>,
        /// Why, for the peer's program.
        code: ErrorCode,
        /// Why, for a person.
        message: String,
    },
    /// Server → client, last message of the opening (needs `PATHS`): the
    /// addresses, besides the one the client reached, at which data
    /// connections may join this session. Empty when there are none.
    Paths {
        /// Addresses and ports, at most [`MAX_PATHS`].
        addresses: Vec<std::net::SocketAddr>,
    },
    /// Client → daemon, instead of `SessionOpen` (needs `TPC`): be one end
    /// of a third-party copy under this delegation. The daemon judges it
    /// (`tern_session::delegation`) and whether this client may read (as
    /// the source) or write (as the destination) what it covers, and
    /// answers `TpcAccept` or `Error`.
    TpcOpen {
        /// The end this daemon is.
        role: TpcRole,
        /// What the client signed.
        delegation: SignedDelegation,
    },
    /// Daemon → client: the delegation is accepted.
    TpcAccept {
        /// A one-time secret the other daemon must present with the
        /// delegation when it dials this one (`PeerOpen`): the client
        /// hands it only to that daemon.
        ticket: Token,
        /// Addresses at which the other daemon may reach this one
        /// (besides the one the client reached), at most [`MAX_PATHS`].
        addresses: Vec<std::net::SocketAddr>,
    },
    /// Client → the daemon that dials: open the data session with the
    /// other daemon now.
    TpcDial {
        /// The other daemon's host, as the client reached it.
        host: String,
        /// Its port.
        port: u16,
        /// Its other addresses, from its `TpcAccept`.
        addresses: Vec<std::net::SocketAddr>,
        /// Its ticket, from its `TpcAccept`.
        ticket: Token,
        /// How the client wants the session run (boxed: the other
        /// messages are much smaller).
        session: Box<TpcSession>,
    },
    /// Dialing daemon → the other, right after the handshake and before
    /// `SessionOpen` (needs `TPC`): the delegation and ticket that admit
    /// this one data session.
    PeerOpen {
        /// The delegation, as the client signed it.
        delegation: SignedDelegation,
        /// The ticket the daemon dialed gave the client.
        ticket: Token,
    },
    /// Dialing daemon → client, about once a second while the copy runs.
    TpcProgress {
        /// Payload bytes moved.
        bytes: u64,
        /// Payload bytes expected (0 when unknown).
        total: u64,
        /// Files completed.
        files_done: u64,
    },
    /// Dialing daemon → client: the copy is over (failures come as
    /// `Error`).
    TpcDone {
        /// Payload bytes delivered.
        bytes: u64,
        /// Files delivered.
        files: u64,
        /// Data streams used.
        streams: u16,
        /// From all streams up to the end, ms.
        network_elapsed_ms: u64,
        /// The data connection's local address at the dialer.
        dialer_address: std::net::SocketAddr,
        /// The address it reached at the other daemon.
        peer_address: std::net::SocketAddr,
        /// Bytes already at the destination from an earlier attempt
        /// (resumed partial files), not sent again.
        bytes_resumed: u64,
    },
    /// Daemon told to dial → client: it could not reach the other daemon
    /// at any address it was given; it still holds its end, so the other
    /// may be told to dial instead.
    TpcUnreachable {
        /// What was tried, and why each failed.
        reason: String,
    },
    /// Sending client → receiving server (`PATH_RATE`), at most once and
    /// before its first announcement: the rate, bits/s, of its last copy
    /// over this path. Advice only: the receiver may size its data
    /// sockets' first receive buffers for it.
    PathRate {
        /// Bits per second.
        bps: u64,
    },
}

/// The client's transfer choices for a third-party copy (`TpcDial`): the
/// dialing daemon runs its session with the other as the client would have
/// run its own, within the dialer's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpcSession {
    /// Data streams to start with.
    pub streams: u16,
    /// The dialer picks the starting count from its RTT to the other
    /// daemon (`-P auto`), at least `streams`.
    pub streams_from_rtt: bool,
    /// The sending end may add and retire streams.
    pub auto_streams: bool,
    /// Block size.
    pub block_size: u32,
    /// Whole-file digest.
    pub checksum: ChecksumAlg,
    /// Data protection between the daemons.
    pub protect: Protect,
    /// Payload no faster than this many bits per second; 0: no limit.
    pub rate_limit_bps: u64,
    /// Most streams, buffer sizing, congestion control.
    pub tuning: TuningRequest,
    /// Compression, what the destination skips, the stall timeout
    /// (`spare_streams` is the dialer's own).
    pub options: TransferOptions,
}

/// Most addresses a server advertises; a client ignores the rest.
pub const MAX_PATHS: usize = 16;

/// Encodes a message as a complete control frame (length prefix + body).
pub fn encode_control(msg: &ControlMsg) -> Vec<u8> {
    let mut frame =
        postcard::to_extend(msg, vec![0u8; 4]).expect("encoding into a Vec cannot fail");
    let len = (frame.len() - 4) as u32;
    frame[0..4].copy_from_slice(&len.to_be_bytes());
    frame
}

/// Reads the body length from a control frame's 4-byte prefix, refusing
/// lengths above [`MAX_CONTROL_FRAME`].
pub fn control_body_len(prefix: [u8; 4]) -> Result<usize, DecodeError> {
    let len = u32::from_be_bytes(prefix);
    if len > MAX_CONTROL_FRAME {
        return Err(DecodeError::TooLong {
            len: len.into(),
            max: MAX_CONTROL_FRAME.into(),
        });
    }
    Ok(len as usize)
}

/// Decodes a control frame body (without its length prefix). Trailing bytes
/// are an error: a frame holds exactly one message.
pub fn decode_control(body: &[u8]) -> Result<ControlMsg, DecodeError> {
    let (msg, rest) = postcard::take_from_bytes::<ControlMsg>(body)
        .map_err(|e| DecodeError::Control(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::Control(format!(
            "{} trailing bytes after the message",
            rest.len()
        )));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_through_its_prefix() {
        let msg = ControlMsg::FileDone {
            file_id: 7,
            digest: vec![1, 2, 3],
        };
        let frame = encode_control(&msg);
        let len = control_body_len(frame[0..4].try_into().unwrap()).unwrap();
        assert_eq!(len, frame.len() - 4);
        assert_eq!(decode_control(&frame[4..]).unwrap(), msg);
    }

    #[test]
    fn oversized_prefix_is_refused() {
        assert!(control_body_len((MAX_CONTROL_FRAME + 1).to_be_bytes()).is_err());
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut frame = encode_control(&ControlMsg::Close {
            per_stream_bytes: vec![],
        });
        frame.push(0);
        assert!(decode_control(&frame[4..]).is_err());
    }
}
