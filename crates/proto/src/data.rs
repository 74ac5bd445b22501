//! Frames of the data connections.
//!
//! A data connection opens with a [`DataJoin`] naming the session token and
//! the stream's index, answered by a [`JoinReply`]. After that it carries
//! only [`DataFrame`]s in one direction, sender to receiver: a fixed 36-byte
//! [`BlockHeader`] followed by `length` payload bytes, or a `StreamEnd`
//! marker when the sender closes the stream on purpose. A connection that
//! ends without `StreamEnd` was dropped, and whatever it carried last may be
//! missing.
//!
//! The header is fixed-size and hand-encoded (not postcard) because it is on
//! the hot path: one per block, decoded without allocation.
//!
//! ```text
//! DataJoin (24 bytes)          BlockHeader (36 bytes)
//! 0..4    "TERD"               0      kind: 0xB1 block, 0xE0 stream end
//! 4..6    version              1      flags (BlockFlags)
//! 6..8    stream index         2..4   reserved, zero
//! 8..24   token                4..8   file id
//!                              8..16  offset
//!                              16..20 payload length
//!                              20..36 block check (xxh3-128 or keyed BLAKE3)
//! ```

use crate::{BLOCK_CHECK_LEN, DecodeError, MAX_BLOCK_SIZE, TOKEN_LEN, Token};

/// Magic that opens a plain (not TLS) data connection.
pub const JOIN_MAGIC: [u8; 4] = *b"TERD";
/// Encoded size of a [`DataJoin`].
pub const JOIN_LEN: usize = 8 + TOKEN_LEN;
/// Encoded size of a [`JoinReply`].
pub const JOIN_REPLY_LEN: usize = 4;
/// Encoded size of a [`BlockHeader`].
pub const HEADER_LEN: usize = 20 + BLOCK_CHECK_LEN;

const KIND_BLOCK: u8 = 0xB1;
const KIND_STREAM_END: u8 = 0xE0;

/// First message of a data connection: which session and which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataJoin {
    /// Negotiated protocol version of the session.
    pub version: u16,
    /// Index of this stream, `0..streams`.
    pub stream: u16,
    /// The session's token.
    pub token: Token,
}

impl DataJoin {
    /// Encodes to the fixed layout.
    pub fn encode(&self) -> [u8; JOIN_LEN] {
        let mut out = [0u8; JOIN_LEN];
        out[0..4].copy_from_slice(&JOIN_MAGIC);
        out[4..6].copy_from_slice(&self.version.to_be_bytes());
        out[6..8].copy_from_slice(&self.stream.to_be_bytes());
        out[8..].copy_from_slice(&self.token);
        out
    }

    /// Decodes the fixed layout.
    pub fn decode(buf: &[u8]) -> Result<DataJoin, DecodeError> {
        if buf.len() < JOIN_LEN {
            return Err(DecodeError::Truncated {
                need: JOIN_LEN,
                have: buf.len(),
            });
        }
        let magic: [u8; 4] = buf[0..4].try_into().expect("4 bytes");
        if magic != JOIN_MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        Ok(DataJoin {
            version: u16::from_be_bytes([buf[4], buf[5]]),
            stream: u16::from_be_bytes([buf[6], buf[7]]),
            token: buf[8..JOIN_LEN].try_into().expect("token"),
        })
    }
}

/// The server's answer to a [`DataJoin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinReply {
    /// The stream joined its session.
    Accepted,
    /// No session has that token, or the stream index is taken or out of range.
    Refused,
}

impl JoinReply {
    /// Encodes to 4 bytes.
    pub fn encode(self) -> [u8; JOIN_REPLY_LEN] {
        match self {
            JoinReply::Accepted => *b"TJOK",
            JoinReply::Refused => *b"TJNO",
        }
    }

    /// Decodes 4 bytes.
    pub fn decode(buf: &[u8]) -> Result<JoinReply, DecodeError> {
        if buf.len() < JOIN_REPLY_LEN {
            return Err(DecodeError::Truncated {
                need: JOIN_REPLY_LEN,
                have: buf.len(),
            });
        }
        match &buf[..4] {
            b"TJOK" => Ok(JoinReply::Accepted),
            b"TJNO" => Ok(JoinReply::Refused),
            other => Err(DecodeError::BadMagic(other.try_into().expect("4 bytes"))),
        }
    }
}

/// Per-block flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BlockFlags(pub u8);

impl BlockFlags {
    /// The block answers a `BlockRequest` (it was sent before).
    pub const REPAIR: BlockFlags = BlockFlags(1 << 0);
    /// Bits this version defines; others must be zero.
    pub const KNOWN: u8 = Self::REPAIR.0;

    /// True when `flag` is set.
    pub fn contains(self, flag: BlockFlags) -> bool {
        self.0 & flag.0 == flag.0
    }
}

/// Header of one block of file data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Flags.
    pub flags: BlockFlags,
    /// File the block belongs to.
    pub file_id: u32,
    /// Byte offset of the block in the file.
    pub offset: u64,
    /// Payload length that follows the header.
    pub length: u32,
    /// Check over the position (file id, offset, length) and the payload.
    pub check: [u8; BLOCK_CHECK_LEN],
}

/// One frame of a data connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFrame {
    /// A block header; `length` payload bytes follow.
    Block(BlockHeader),
    /// The sender closed this stream on purpose.
    StreamEnd,
}

impl DataFrame {
    /// Encodes the frame's fixed header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        match self {
            DataFrame::StreamEnd => out[0] = KIND_STREAM_END,
            DataFrame::Block(h) => {
                out[0] = KIND_BLOCK;
                out[1] = h.flags.0;
                out[4..8].copy_from_slice(&h.file_id.to_be_bytes());
                out[8..16].copy_from_slice(&h.offset.to_be_bytes());
                out[16..20].copy_from_slice(&h.length.to_be_bytes());
                out[20..36].copy_from_slice(&h.check);
            }
        }
        out
    }

    /// Decodes a fixed header, validating everything that can be validated
    /// without the payload: kind, reserved bits, and the length limit.
    pub fn decode(buf: &[u8]) -> Result<DataFrame, DecodeError> {
        if buf.len() < HEADER_LEN {
            return Err(DecodeError::Truncated {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        let reserved = u16::from_be_bytes([buf[2], buf[3]]);
        match buf[0] {
            KIND_STREAM_END => {
                if buf[1..HEADER_LEN].iter().any(|&b| b != 0) {
                    return Err(DecodeError::Reserved(1));
                }
                Ok(DataFrame::StreamEnd)
            }
            KIND_BLOCK => {
                let flags = buf[1];
                if flags & !BlockFlags::KNOWN != 0 || reserved != 0 {
                    return Err(DecodeError::Reserved(
                        u32::from(flags & !BlockFlags::KNOWN) << 16 | u32::from(reserved),
                    ));
                }
                let length = u32::from_be_bytes(buf[16..20].try_into().expect("4 bytes"));
                if length > MAX_BLOCK_SIZE {
                    return Err(DecodeError::TooLong {
                        len: length.into(),
                        max: MAX_BLOCK_SIZE.into(),
                    });
                }
                Ok(DataFrame::Block(BlockHeader {
                    flags: BlockFlags(flags),
                    file_id: u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")),
                    offset: u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes")),
                    length,
                    check: buf[20..36].try_into().expect("16 bytes"),
                }))
            }
            other => Err(DecodeError::UnknownKind(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_block_is_refused_before_payload() {
        let mut h = DataFrame::Block(BlockHeader {
            flags: BlockFlags::default(),
            file_id: 1,
            offset: 0,
            length: 0,
            check: [0; 16],
        })
        .encode();
        h[16..20].copy_from_slice(&(MAX_BLOCK_SIZE + 1).to_be_bytes());
        assert!(matches!(
            DataFrame::decode(&h),
            Err(DecodeError::TooLong { .. })
        ));
    }

    #[test]
    fn unknown_flags_are_refused() {
        let mut h = DataFrame::StreamEnd.encode();
        h[0] = KIND_BLOCK;
        h[1] = 0x80;
        assert!(matches!(
            DataFrame::decode(&h),
            Err(DecodeError::Reserved(_))
        ));
    }

    #[test]
    fn join_round_trips() {
        let j = DataJoin {
            version: 1,
            stream: 3,
            token: [9; 16],
        };
        assert_eq!(DataJoin::decode(&j.encode()).unwrap(), j);
        assert_eq!(
            JoinReply::decode(&JoinReply::Refused.encode()).unwrap(),
            JoinReply::Refused
        );
    }
}
