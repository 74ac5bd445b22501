//! The handshake both ends send first on the control connection.
//!
//! Each side sends one fixed-size [`Hello`] naming the highest version it
//! speaks, the lowest it still accepts, and the optional features it
//! supports. Both then compute the same result with [`Hello::negotiate`]:
//! the smaller of the two versions and the intersection of the features, so
//! neither side needs to wait for the other's decision.
//!
//! Layout (16 bytes, big-endian):
//!
//! ```text
//! 0..4   magic  "TERN"
//! 4..6   version (highest spoken)
//! 6..8   min_version (lowest accepted)
//! 8..16  features (bit set, see Features)
//! ```

use crate::DecodeError;

/// Magic that opens every control connection.
pub const HELLO_MAGIC: [u8; 4] = *b"TERN";

/// Encoded size of a [`Hello`].
pub const HELLO_LEN: usize = 16;

/// Optional protocol features, one bit each. Unknown bits from a newer peer
/// are ignored by intersection, which is what makes adding features safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(pub u64);

impl Features {
    /// The receiver may ask for blocks again (`BlockRequest`).
    pub const REPAIR: Features = Features(1 << 0);
    /// Data connections may run in `safe` mode (keyed MAC per block).
    pub const PROTECT_SAFE: Features = Features(1 << 1);
    /// Data connections may run in `private` mode (TLS on every stream).
    pub const PROTECT_PRIVATE: Features = Features(1 << 2);
    /// Memory-to-memory throughput sessions (`tern perf`).
    pub const PERF: Features = Features(1 << 3);
    /// Transport tuning: `Tuning`/`TuningAccept` after the session
    /// handshake, streams joining a running session, `MoreStreams`.
    pub const TUNING: Features = Features(1 << 4);
    /// Resume: the receiver may tell the sender which ranges of a file it
    /// already holds (`FileHave`).
    pub const RESUME: Features = Features(1 << 5);
    /// One-time tokens: the client may prove with `TokenAuth`, before
    /// `SessionOpen`, that it holds the token a `tern serve --once` printed
    /// on the ssh channel; such a server requires it.
    pub const TOKEN_AUTH: Features = Features(1 << 6);
    /// Transfer options: the client sends `TransferOptions` right after its
    /// session request (compression and skip policies, stall timeout, spare
    /// stream indices for replacing stalled streams).
    pub const OPTIONS: Features = Features(1 << 7);
    /// Block payloads may be compressed (block flags `ZSTD`, `LZ4`).
    pub const COMPRESS: Features = Features(1 << 8);
    /// Files already at the destination may be skipped: the receiver
    /// answers each announcement with `FileCheck`.
    pub const SKIP: Features = Features(1 << 9);
    /// Whole trees: paths may hold any bytes (not only UTF-8); the sender
    /// announces directories with their times, symbolic links and named
    /// pipes (`EntryAnnounce`); either end reports an entry it could not
    /// copy (`EntryFailed`) and the session goes on.
    pub const ENTRIES: Features = Features(1 << 10);
    /// In `private` mode the data connection's TLS AEAD, which checks every
    /// record before its bytes are read, is the per-block check: block
    /// headers carry a zero check and no second hash is made. A peer
    /// without this bit gets XXH3 checks as before.
    pub const AEAD_CHECKS: Features = Features(1 << 11);
    /// The server tells the client, at the end of the opening, the
    /// addresses its data connections may go to (`Paths`): the client may
    /// spread its streams over every path between the two hosts.
    pub const PATHS: Features = Features(1 << 12);
    /// Third-party copies: `TpcOpen`, `TpcAccept`, `TpcDial`, `PeerOpen`,
    /// `TpcProgress`, `TpcDone`.
    pub const TPC: Features = Features(1 << 13);
    /// This end can hold [`MANY_FILES_IN_FLIGHT`](crate::MANY_FILES_IN_FLIGHT)
    /// more files open at once (the descriptors left under its limit, with
    /// what it has open when it says `Hello`, allow it): with the bit at
    /// both ends a sender may keep that many files in flight, without it at
    /// most [`FILES_IN_FLIGHT`](crate::FILES_IN_FLIGHT). An end with less
    /// room leaves the bit out of its `Hello`.
    pub const MANY_FILES: Features = Features(1 << 14);
    /// A sending client may tell the receiving server the rate it last saw
    /// on this path (`PathRate`), before its first announcement; the
    /// receiver may start its data sockets' receive buffers sized for it
    /// instead of growing them a round trip at a time.
    pub const PATH_RATE: Features = Features(1 << 15);

    /// Everything this build implements.
    pub const ALL: Features = Features(
        Self::REPAIR.0
            | Self::PROTECT_SAFE.0
            | Self::PROTECT_PRIVATE.0
            | Self::PERF.0
            | Self::TUNING.0
            | Self::RESUME.0
            | Self::TOKEN_AUTH.0
            | Self::OPTIONS.0
            | Self::COMPRESS.0
            | Self::SKIP.0
            | Self::ENTRIES.0
            | Self::AEAD_CHECKS.0
            | Self::PATHS.0
            | Self::TPC.0
            | Self::MANY_FILES.0
            | Self::PATH_RATE.0,
    );

    /// True when every bit of `other` is set in `self`.
    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitAnd for Features {
    type Output = Features;
    fn bitand(self, rhs: Features) -> Features {
        Features(self.0 & rhs.0)
    }
}

/// One side's opening message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Highest protocol version this side speaks.
    pub version: u16,
    /// Lowest protocol version this side accepts.
    pub min_version: u16,
    /// Features this side supports.
    pub features: Features,
}

/// What both ends agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The version both will speak: the smaller of the two offered.
    pub version: u16,
    /// Features both support.
    pub features: Features,
}

/// The two sides have no protocol version in common.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no common protocol version: we speak {ours_min}..={ours}, the peer {theirs_min}..={theirs}"
)]
pub struct VersionMismatch {
    /// Our highest version.
    pub ours: u16,
    /// Our lowest version.
    pub ours_min: u16,
    /// The peer's highest version.
    pub theirs: u16,
    /// The peer's lowest version.
    pub theirs_min: u16,
}

impl Hello {
    /// The hello this build sends.
    pub fn ours() -> Hello {
        Hello {
            version: crate::PROTOCOL_VERSION,
            min_version: crate::MIN_PROTOCOL_VERSION,
            features: Features::ALL,
        }
    }

    /// Encodes to the fixed 16-byte layout.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[0..4].copy_from_slice(&HELLO_MAGIC);
        out[4..6].copy_from_slice(&self.version.to_be_bytes());
        out[6..8].copy_from_slice(&self.min_version.to_be_bytes());
        out[8..16].copy_from_slice(&self.features.0.to_be_bytes());
        out
    }

    /// Decodes the fixed layout; `buf` may be longer than needed.
    pub fn decode(buf: &[u8]) -> Result<Hello, DecodeError> {
        if buf.len() < HELLO_LEN {
            return Err(DecodeError::Truncated {
                need: HELLO_LEN,
                have: buf.len(),
            });
        }
        let magic: [u8; 4] = buf[0..4].try_into().expect("4 bytes");
        if magic != HELLO_MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        let version = u16::from_be_bytes([buf[4], buf[5]]);
        let min_version = u16::from_be_bytes([buf[6], buf[7]]);
        let features = Features(u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes")));
        Ok(Hello {
            version,
            min_version,
            features,
        })
    }

    /// The version and features both sides will use, computed identically on
    /// both ends: `min` of the versions, intersection of the features.
    pub fn negotiate(&self, peer: &Hello) -> Result<Negotiated, VersionMismatch> {
        let version = self.version.min(peer.version);
        if version < self.min_version.max(peer.min_version) {
            return Err(VersionMismatch {
                ours: self.version,
                ours_min: self.min_version,
                theirs: peer.version,
                theirs_min: peer.min_version,
            });
        }
        Ok(Negotiated {
            version,
            features: self.features & peer.features,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_takes_the_smaller_version_and_common_features() {
        let a = Hello {
            version: 3,
            min_version: 1,
            features: Features(0b1011),
        };
        let b = Hello {
            version: 2,
            min_version: 2,
            features: Features(0b0110),
        };
        let n = a.negotiate(&b).unwrap();
        assert_eq!(n, b.negotiate(&a).unwrap());
        assert_eq!(n.version, 2);
        assert_eq!(n.features, Features(0b0010));
    }

    #[test]
    fn negotiation_fails_without_a_common_version() {
        let a = Hello {
            version: 1,
            min_version: 1,
            features: Features::ALL,
        };
        let b = Hello {
            version: 4,
            min_version: 3,
            features: Features::ALL,
        };
        assert!(a.negotiate(&b).is_err());
        assert!(b.negotiate(&a).is_err());
    }

    #[test]
    fn wrong_magic_is_rejected() {
        let mut bytes = Hello::ours().encode();
        bytes[0] = b'X';
        assert!(matches!(
            Hello::decode(&bytes),
            Err(DecodeError::BadMagic(_))
        ));
    }
}
