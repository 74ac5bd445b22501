//! The client's transfer options (`TransferOptions`, PROTOCOL.md §5.2):
//! compression, the skip policy, the stall timeout and spare stream
//! indices, and what both ends agree on ([`Agreed`]); the engine puts the
//! agreement into its transfer parameters.
//!
//! The client chooses; whichever end sends compresses, whichever end
//! receives skips, and both watch for stalls. A feature the peer lacks
//! turns its option off rather than failing the session: compression and
//! skipping are optimisations, never needed for a correct copy.

use std::time::Duration;

use tern_proto::{Compression, Features, SkipExisting, TransferOptions as WireOptions};

use crate::{Error, Result};

/// Spare stream indices a client asks for to replace stalled streams.
pub const SPARE_STREAMS: u16 = 4;

/// Default `--stall-timeout`.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(20);

/// What the user chose (`--compress`, `--skip-existing`,
/// `--stall-timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choices {
    /// What the sending end does with block payloads.
    pub compression: Compression,
    /// When the receiving end keeps a file it already has.
    pub skip_existing: SkipExisting,
    /// Give up and replace a data stream stalled this long; `None`: never.
    pub stall_timeout: Option<Duration>,
    /// Send and apply set-user-ID, set-group-ID and sticky bits
    /// (`--keep-special-bits`); this end's own choice, not sent.
    pub keep_special_bits: bool,
}

impl Default for Choices {
    fn default() -> Choices {
        Choices {
            compression: Compression::Auto,
            skip_existing: SkipExisting::Mtime,
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
            keep_special_bits: false,
        }
    }
}

impl Choices {
    /// Nothing optional: no compression, no skipping, no stall watch (what
    /// a peer without `OPTIONS` gets).
    pub fn off() -> Choices {
        Choices {
            compression: Compression::None,
            skip_existing: SkipExisting::Never,
            stall_timeout: None,
            keep_special_bits: false,
        }
    }

    /// The options a client sends, keeping `spare_streams` indices.
    pub fn wire(&self, spare_streams: u16) -> WireOptions {
        WireOptions {
            compression: self.compression,
            skip_existing: self.skip_existing,
            stall_timeout_ms: self
                .stall_timeout
                .map_or(0, |t| t.as_millis().clamp(1, u128::from(u32::MAX)) as u32),
            spare_streams,
        }
    }
}

/// What both ends agreed: the options received (or sent), within what
/// both ends' features allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed {
    compression: Compression,
    accept_compressed: bool,
    skip_existing: SkipExisting,
    stall_timeout: Option<Duration>,
    spare_streams: u16,
}

impl Agreed {
    /// Checks `opts` (absent when `OPTIONS` was not negotiated) against a
    /// session of `streams` streams growing to `max_streams` indices.
    pub fn new(
        opts: Option<&WireOptions>,
        features: Features,
        streams: u16,
        max_streams: u16,
    ) -> Result<Agreed> {
        let compress = features.contains(Features::COMPRESS);
        let Some(o) = opts else {
            return Ok(Agreed {
                compression: Compression::None,
                accept_compressed: compress,
                skip_existing: SkipExisting::Never,
                stall_timeout: None,
                spare_streams: 0,
            });
        };
        let room = if features.contains(Features::TUNING) {
            max_streams.saturating_sub(streams)
        } else {
            0
        };
        if o.spare_streams > room {
            return Err(Error::BadRequest(format!(
                "{} spare streams asked for; the session has room for {room}",
                o.spare_streams
            )));
        }
        Ok(Agreed {
            compression: if compress {
                o.compression
            } else {
                Compression::None
            },
            accept_compressed: compress,
            skip_existing: if features.contains(Features::SKIP) {
                o.skip_existing
            } else {
                SkipExisting::Never
            },
            stall_timeout: (o.stall_timeout_ms > 0)
                .then(|| Duration::from_millis(o.stall_timeout_ms.into())),
            spare_streams: o.spare_streams,
        })
    }

    /// What the sending end does with block payloads.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Whether the receiving end takes compressed blocks.
    pub fn accept_compressed(&self) -> bool {
        self.accept_compressed
    }

    /// When the receiving end keeps a file it already has.
    pub fn skip_existing(&self) -> SkipExisting {
        self.skip_existing
    }

    /// Give up and replace a data stream stalled this long.
    pub fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// Stream indices kept for replacing stalled streams.
    pub fn spare_streams(&self) -> u16 {
        self.spare_streams
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(spare_streams: u16) -> WireOptions {
        Choices::default().wire(spare_streams)
    }

    #[test]
    fn a_feature_the_peer_lacks_turns_its_option_off() {
        let all = Features::ALL;
        let a = Agreed::new(Some(&wire(4)), all, 2, 12).unwrap();
        assert_eq!(a.compression, Compression::Auto);
        assert_eq!(a.skip_existing, SkipExisting::Mtime);
        assert_eq!(a.stall_timeout, Some(DEFAULT_STALL_TIMEOUT));
        let no_compress = Features(all.0 & !Features::COMPRESS.0);
        let b = Agreed::new(Some(&wire(4)), no_compress, 2, 12).unwrap();
        assert_eq!(b.compression, Compression::None);
        assert!(!b.accept_compressed);
        let no_skip = Features(all.0 & !Features::SKIP.0);
        let c = Agreed::new(Some(&wire(4)), no_skip, 2, 12).unwrap();
        assert_eq!(c.skip_existing, SkipExisting::Never);
        let none = Agreed::new(None, all, 2, 2).unwrap();
        assert_eq!(none.stall_timeout, None);
        assert!(none.accept_compressed, "a peer may still compress");
    }

    #[test]
    fn spares_must_fit_the_session() {
        assert!(Agreed::new(Some(&wire(4)), Features::ALL, 4, 8).is_ok());
        let e = Agreed::new(Some(&wire(5)), Features::ALL, 4, 8).unwrap_err();
        assert!(matches!(e, Error::BadRequest(_)), "{e}");
        let untuned = Features(Features::ALL.0 & !Features::TUNING.0);
        assert!(Agreed::new(Some(&wire(1)), untuned, 4, 8).is_err());
    }
}
