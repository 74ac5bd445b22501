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
//! With the `COMPRESS` feature a block's flags may name a codec (`ZSTD` or
//! `LZ4`); its payload is then a 4-byte big-endian uncompressed length
//! ([`RawLen`]) followed by the compressed bytes, and `length` counts both.
//! The block check still covers the uncompressed bytes at their offset.
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
    /// The payload is a [`RawLen`] and a zstd frame (needs `COMPRESS`).
    pub const ZSTD: BlockFlags = BlockFlags(1 << 1);
    /// The payload is a [`RawLen`] and an LZ4 block (needs `COMPRESS`).
    pub const LZ4: BlockFlags = BlockFlags(1 << 2);
    /// Bits this version defines; others must be zero.
    pub const KNOWN: u8 = Self::REPAIR.0 | Self::ZSTD.0 | Self::LZ4.0;

    /// True when `flag` is set.
    pub fn contains(self, flag: BlockFlags) -> bool {
        self.0 & flag.0 == flag.0
    }

    /// The codec the payload is compressed with, if any.
    pub fn codec(self) -> Option<Codec> {
        if self.contains(Self::ZSTD) {
            Some(Codec::Zstd)
        } else if self.contains(Self::LZ4) {
            Some(Codec::Lz4)
        } else {
            None
        }
    }

    /// These flags with the codec bits set for `codec` (cleared for `None`).
    pub fn with_codec(self, codec: Option<Codec>) -> BlockFlags {
        let rest = self.0 & !(Self::ZSTD.0 | Self::LZ4.0);
        BlockFlags(match codec {
            None => rest,
            Some(Codec::Zstd) => rest | Self::ZSTD.0,
            Some(Codec::Lz4) => rest | Self::LZ4.0,
        })
    }
}

/// How a block's payload is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// One zstd frame (RFC 8878).
    Zstd,
    /// One LZ4 block (the LZ4 block format, no frame).
    Lz4,
}

impl Codec {
    /// The lower-case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Zstd => "zstd",
            Codec::Lz4 => "lz4",
        }
    }
}

/// Size of the uncompressed-length prefix of a compressed payload.
pub const RAW_LEN_LEN: usize = 4;

/// The uncompressed length that opens a compressed block's payload: the
/// length of the block in the file, which its check covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawLen(pub u32);

impl RawLen {
    /// Encodes as 4 big-endian bytes.
    pub fn encode(self) -> [u8; RAW_LEN_LEN] {
        self.0.to_be_bytes()
    }

    /// Decodes the prefix; a length of 0 or above `MAX_BLOCK_SIZE` is an
    /// error (no block is empty or larger).
    pub fn decode(buf: &[u8]) -> Result<RawLen, DecodeError> {
        let Some(prefix) = buf.first_chunk::<RAW_LEN_LEN>() else {
            return Err(DecodeError::Truncated {
                need: RAW_LEN_LEN,
                have: buf.len(),
            });
        };
        let len = u32::from_be_bytes(*prefix);
        if len == 0 || len > MAX_BLOCK_SIZE {
            return Err(DecodeError::TooLong {
                len: len.into(),
                max: MAX_BLOCK_SIZE.into(),
            });
        }
        Ok(RawLen(len))
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
                let both_codecs = BlockFlags::ZSTD.0 | BlockFlags::LZ4.0;
                let bad = (flags & !BlockFlags::KNOWN)
                    | if flags & both_codecs == both_codecs {
                        both_codecs
                    } else {
                        0
                    };
                if bad != 0 || reserved != 0 {
                    return Err(DecodeError::Reserved(
                        u32::from(bad) << 16 | u32::from(reserved),
                    ));
                }
                let length = u32::from_be_bytes(buf[16..20].try_into().expect("4 bytes"));
                if length > MAX_BLOCK_SIZE {
                    return Err(DecodeError::TooLong {
                        len: length.into(),
                        max: MAX_BLOCK_SIZE.into(),
                    });
                }
                if flags & both_codecs != 0 && (length as usize) < RAW_LEN_LEN {
                    return Err(DecodeError::Truncated {
                        need: RAW_LEN_LEN,
                        have: length as usize,
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
    fn a_block_names_at_most_one_codec() {
        let h = BlockHeader {
            flags: BlockFlags::REPAIR.with_codec(Some(Codec::Lz4)),
            file_id: 1,
            offset: 0,
            length: 9,
            check: [0; 16],
        };
        let mut bytes = DataFrame::Block(h).encode();
        assert_eq!(DataFrame::decode(&bytes), Ok(DataFrame::Block(h)));
        assert_eq!(h.flags.codec(), Some(Codec::Lz4));
        assert!(h.flags.contains(BlockFlags::REPAIR));
        bytes[1] |= BlockFlags::ZSTD.0;
        assert!(matches!(
            DataFrame::decode(&bytes),
            Err(DecodeError::Reserved(_))
        ));
    }

    #[test]
    fn a_compressed_block_holds_at_least_its_length_prefix() {
        let mut bytes = DataFrame::Block(BlockHeader {
            flags: BlockFlags::ZSTD,
            file_id: 1,
            offset: 0,
            length: 3,
            check: [0; 16],
        })
        .encode();
        assert!(matches!(
            DataFrame::decode(&bytes),
            Err(DecodeError::Truncated { .. })
        ));
        bytes[1] = 0;
        assert!(DataFrame::decode(&bytes).is_ok(), "3 raw bytes are fine");
        assert_eq!(RawLen::decode(&RawLen(77).encode()), Ok(RawLen(77)));
        assert!(RawLen::decode(&[0, 0, 0, 0]).is_err());
        assert!(RawLen::decode(&(MAX_BLOCK_SIZE + 1).to_be_bytes()).is_err());
        assert!(RawLen::decode(&[1, 2]).is_err());
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
