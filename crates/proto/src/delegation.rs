//! The third-party-copy delegation: what a client signs so that daemon B
//! may copy from daemon A (or A to B) on its behalf, without the client's
//! long-term credential leaving the client.
//!
//! The client makes a fresh Ed25519 key pair for one copy attempt, signs a
//! [`Delegation`] with it, and hands the [`SignedDelegation`] (body, public
//! key, signature) to each daemon over its own authenticated control
//! connection. The body names both daemons by certificate fingerprint, ties
//! itself to those two connections (`binding`: a TLS exporter value of each),
//! says who dials whom, covers exactly one set of sources and one
//! destination, and expires. The checks a daemon makes are in
//! `tern_session::delegation`; `docs/PROTOCOL.md` §8.13 is normative.
//!
//! The body is carried as bytes and signed as bytes, so verifying never
//! re-encodes: the signing input is [`SIGNING_CONTEXT`] followed by the
//! body.

use serde::{Deserialize, Serialize};

use crate::DecodeError;

/// What is signed before the body, so that a signature over a delegation
/// can never be taken for a signature over anything else.
pub const SIGNING_CONTEXT: &[u8] = b"tern delegation v1\0";

/// The TLS exporter label of a control connection's `binding` value.
pub const BINDING_LABEL: &[u8] = b"EXPORTER-tern-tpc-binding";

/// Longest a delegation may be valid, from issue to expiry, ms.
pub const MAX_LIFE_MS: u64 = 300_000;

/// Largest encoded body accepted, bytes (paths included).
pub const MAX_BODY: usize = 64 * 1024;

/// Which end of a third-party copy a daemon is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TpcRole {
    /// The data comes from here.
    Source,
    /// The data goes here.
    Dest,
}

/// Which end opens the data connection between the two daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dialer {
    /// The destination dials the source and pulls.
    Dest,
    /// The source dials the destination and pushes.
    Source,
    /// Either (`--tpc auto`): the client tells one to dial, then maybe the
    /// other.
    Either,
}

/// One daemon as the client knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Party {
    /// Its certificate's fingerprint, `SHA256:…`, as the client saw it.
    pub fingerprint: String,
    /// How the client named it (`host:port`); informative.
    pub name: String,
    /// The [`BINDING_LABEL`] exporter value of the client's control
    /// connection to it: proof that the delegation was made by whoever is
    /// at the other end of that very connection.
    pub binding: [u8; 32],
}

/// What the client authorizes: one copy from `source` to `dest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delegation {
    /// Random, once per delegation: it is accepted only once.
    pub nonce: [u8; 16],
    /// When the client issued it, ms since the Unix epoch.
    pub issued_at_ms: u64,
    /// After this, no daemon accepts it (at most [`MAX_LIFE_MS`] after
    /// `issued_at_ms`).
    pub not_after_ms: u64,
    /// Fingerprint of the client's certificate on both control
    /// connections, when it has one.
    pub issuer: Option<String>,
    /// The daemon the data comes from.
    pub source: Party,
    /// The daemon the data goes to.
    pub dest: Party,
    /// Who opens the data connection.
    pub dialer: Dialer,
    /// Source paths at `source`, relative to its root.
    pub sources: Vec<String>,
    /// Descend into directories.
    pub recursive: bool,
    /// Destination path at `dest`, relative to its root.
    pub dest_path: String,
    /// Top-level sources (the scp rule, as in a push).
    pub top_level: u32,
}

/// A delegation as it travels: the encoded body, the key that signed it,
/// and the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedDelegation {
    /// `postcard(Delegation)`.
    pub body: Vec<u8>,
    /// Ed25519 public key, 32 bytes.
    pub key: [u8; 32],
    /// Ed25519 signature over [`SIGNING_CONTEXT`] ‖ `body`, 64 bytes.
    pub signature: Vec<u8>,
}

impl Delegation {
    /// The encoded body.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("encoding into a Vec cannot fail")
    }

    /// Decodes a body: the whole of it, within [`MAX_BODY`].
    pub fn decode(body: &[u8]) -> Result<Delegation, DecodeError> {
        if body.len() > MAX_BODY {
            return Err(DecodeError::Delegation(format!(
                "{} bytes (at most {MAX_BODY})",
                body.len()
            )));
        }
        let (d, rest) = postcard::take_from_bytes::<Delegation>(body)
            .map_err(|e| DecodeError::Delegation(e.to_string()))?;
        if !rest.is_empty() {
            return Err(DecodeError::Delegation(format!(
                "{} bytes after the body",
                rest.len()
            )));
        }
        Ok(d)
    }
}

/// What the signature covers: [`SIGNING_CONTEXT`] ‖ `body`.
pub fn signing_input(body: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(SIGNING_CONTEXT.len() + body.len());
    input.extend_from_slice(SIGNING_CONTEXT);
    input.extend_from_slice(body);
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Delegation {
        Delegation {
            nonce: [7; 16],
            issued_at_ms: 1_800_000_000_000,
            not_after_ms: 1_800_000_060_000,
            issuer: None,
            source: Party {
                fingerprint: "SHA256:source".into(),
                name: "a.example:4747".into(),
                binding: [1; 32],
            },
            dest: Party {
                fingerprint: "SHA256:dest".into(),
                name: "b.example:4747".into(),
                binding: [2; 32],
            },
            dialer: Dialer::Dest,
            sources: vec!["data/run1.h5".into()],
            recursive: false,
            dest_path: "incoming/".into(),
            top_level: 1,
        }
    }

    #[test]
    fn a_body_round_trips_and_nothing_may_follow_it() {
        let d = sample();
        let body = d.encode();
        assert_eq!(Delegation::decode(&body), Ok(d));
        let mut longer = body.clone();
        longer.push(0);
        assert!(Delegation::decode(&longer).is_err());
        assert!(Delegation::decode(&body[..body.len() - 1]).is_err());
        assert!(Delegation::decode(&vec![0; MAX_BODY + 1]).is_err());
    }

    #[test]
    fn the_signing_input_starts_with_the_context() {
        let input = signing_input(b"xyz");
        assert_eq!(&input[..SIGNING_CONTEXT.len()], SIGNING_CONTEXT);
        assert_eq!(&input[SIGNING_CONTEXT.len()..], b"xyz");
    }
}
