//! Issuing and judging third-party-copy delegations, without I/O.
//!
//! A client issues a [`SignedDelegation`] with a key pair of its own for
//! this one copy ([`Issuer`]; the caller brings the random seed and the
//! time). Each daemon judges it on the client's control connection before
//! anything else happens ([`Ledger::accept`]): the signature, that it is
//! meant for this daemon and this very connection, the client identity,
//! its lifetime, and that its nonce was never accepted before; it answers
//! with a ticket of its own, which the client hands only to the other
//! daemon. The daemon the other one dials then admits the data session
//! only once, only with the same delegation and that ticket, only before
//! it expires, only from the end the delegation lets dial
//! ([`Ledger::present`]), and only for what the delegation covers
//! ([`covers`]).
//!
//! Every refusal is a [`Refusal`] whose text says what was wrong; the
//! engine sends it to whoever asked and moves no data.

use std::collections::HashMap;

use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use tern_proto::SessionMode;
pub use tern_proto::delegation::TpcRole;
use tern_proto::delegation::{Delegation, Dialer, MAX_LIFE_MS, SignedDelegation, signing_input};

/// How far the clocks of client and daemon may disagree, ms.
pub const MAX_SKEW_MS: u64 = 120_000;

/// Most delegations a daemon remembers at once (each costs a client an
/// authenticated session, so session limits bound how fast they come).
pub const MAX_REMEMBERED: usize = 4096;

fn role_name(role: TpcRole) -> &'static str {
    match role {
        TpcRole::Source => "source",
        TpcRole::Dest => "destination",
    }
}

/// Why a delegation is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The bytes are not a delegation.
    #[error("the delegation does not decode: {0}")]
    Malformed(String),
    /// The signature does not verify with the key it came with.
    #[error("the delegation's signature does not verify")]
    BadSignature,
    /// It names another daemon in this role.
    #[error("the delegation names {named} as the {role}, but this daemon is {own}")]
    OtherDaemon {
        /// The role this daemon plays.
        role: &'static str,
        /// The fingerprint it names.
        named: String,
        /// This daemon's.
        own: String,
    },
    /// It was made for another control connection.
    #[error("the delegation was made on another connection (a replay, or a copy of it)")]
    OtherConnection,
    /// The client identity on this connection is not the one it names.
    #[error("the delegation's issuer is {named:?}, but this connection's client is {here:?}")]
    OtherIssuer {
        /// What it names.
        named: Option<String>,
        /// Who is on this connection.
        here: Option<String>,
    },
    /// Valid for longer than allowed.
    #[error("the delegation is valid for {life_ms} ms; at most {MAX_LIFE_MS} ms are allowed")]
    TooLong {
        /// Its validity, ms.
        life_ms: u64,
    },
    /// Issued in the future.
    #[error("the delegation was issued {ahead_ms} ms in this daemon's future: check the clocks")]
    NotYetValid {
        /// By how much.
        ahead_ms: u64,
    },
    /// Expired.
    #[error("the delegation expired {ago_ms} ms ago")]
    Expired {
        /// How long ago.
        ago_ms: u64,
    },
    /// Its nonce was accepted before, or it was already used.
    #[error("the delegation was already used")]
    Replayed,
    /// Presented with the wrong ticket, or by the end that may not dial.
    #[error("{0}")]
    WrongPeer(String),
    /// The session asked for is not what it covers.
    #[error("the delegation covers {covered}, not {asked}")]
    NotCovered {
        /// What it covers.
        covered: String,
        /// What was asked.
        asked: String,
    },
    /// Never accepted here.
    #[error("this daemon was never given that delegation")]
    Unknown,
    /// Too many remembered already.
    #[error("this daemon holds {MAX_REMEMBERED} delegations already; try again shortly")]
    Busy,
}

/// A client's signing key for one copy.
pub struct Issuer {
    keys: Ed25519KeyPair,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Issuer")
    }
}

impl Issuer {
    /// A key pair from 32 random bytes (the caller's randomness).
    pub fn from_seed(seed: &[u8; 32]) -> Issuer {
        Issuer {
            keys: Ed25519KeyPair::from_seed_unchecked(seed).expect("any 32 bytes are a seed"),
        }
    }

    /// Signs `delegation`.
    pub fn sign(&self, delegation: &Delegation) -> SignedDelegation {
        let body = delegation.encode();
        let signature = self.keys.sign(&signing_input(&body)).as_ref().to_vec();
        let key = self
            .keys
            .public_key()
            .as_ref()
            .try_into()
            .expect("an Ed25519 public key is 32 bytes");
        SignedDelegation {
            body,
            key,
            signature,
        }
    }
}

/// Checks the signature and decodes the body.
pub fn verify(signed: &SignedDelegation) -> Result<Delegation, Refusal> {
    // Hashing a body is the work a stranger can ask for: bounded first.
    if signed.body.len() > tern_proto::delegation::MAX_BODY {
        return Err(Refusal::Malformed(format!(
            "{} bytes (at most {})",
            signed.body.len(),
            tern_proto::delegation::MAX_BODY
        )));
    }
    UnparsedPublicKey::new(&ED25519, &signed.key)
        .verify(&signing_input(&signed.body), &signed.signature)
        .map_err(|_| Refusal::BadSignature)?;
    Delegation::decode(&signed.body).map_err(|e| Refusal::Malformed(e.to_string()))
}

/// What a daemon knows of the control connection a delegation came on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection<'a> {
    /// The daemon's role in the copy, as the client asks.
    pub role: TpcRole,
    /// The daemon's own certificate fingerprint.
    pub own_fingerprint: &'a str,
    /// The connection's binding exporter value.
    pub binding: [u8; 32],
    /// The client certificate's fingerprint on this connection, if any.
    pub client: Option<&'a str>,
    /// Whether this daemon asks clients for certificates (site mode): only
    /// then can it hold the delegation's issuer to the connection's.
    pub knows_clients: bool,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
}

/// What a daemon holds for a delegation it accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    /// SHA-256 of the signed body.
    digest: [u8; 32],
    /// The ticket given for it.
    ticket: [u8; 16],
    /// Until when it may be presented, ms since the Unix epoch.
    until_ms: u64,
    /// Presented already.
    used: bool,
}

/// The delegations a daemon accepted: each once, each presented once.
#[derive(Debug, Default)]
pub struct Ledger {
    held: HashMap<([u8; 16], TpcRole), Held>,
}

fn digest(body: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, body)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

impl Ledger {
    /// Judges `signed`, given on the client's control connection `conn`;
    /// remembers it with `ticket` (the caller's random bytes, which it
    /// sends the client) when it is good.
    pub fn accept(
        &mut self,
        signed: &SignedDelegation,
        conn: &Connection<'_>,
        ticket: [u8; 16],
    ) -> Result<Delegation, Refusal> {
        let d = verify(signed)?;
        let party = match conn.role {
            TpcRole::Source => &d.source,
            TpcRole::Dest => &d.dest,
        };
        if party.fingerprint != conn.own_fingerprint {
            return Err(Refusal::OtherDaemon {
                role: role_name(conn.role),
                named: party.fingerprint.clone(),
                own: conn.own_fingerprint.into(),
            });
        }
        if !constant_time_eq(&party.binding, &conn.binding) {
            return Err(Refusal::OtherConnection);
        }
        if conn.knows_clients && d.issuer.as_deref() != conn.client {
            return Err(Refusal::OtherIssuer {
                named: d.issuer.clone(),
                here: conn.client.map(String::from),
            });
        }
        let until_ms = valid_until(&d, conn.now_ms)?;
        self.forget_expired(conn.now_ms);
        let key = (d.nonce, conn.role);
        if self.held.contains_key(&key) {
            return Err(Refusal::Replayed);
        }
        if self.held.len() >= MAX_REMEMBERED {
            return Err(Refusal::Busy);
        }
        self.held.insert(
            key,
            Held {
                digest: digest(&signed.body),
                ticket,
                until_ms,
                used: false,
            },
        );
        Ok(d)
    }

    /// The other daemon presents `signed` and `ticket` to open the data
    /// session with this one, on a connection where it showed the
    /// certificate `shown` (its fingerprint); the ticket says which end
    /// this one is (the one it was given for). Admits it once, and only
    /// the daemon the delegation names as the other end: a ticket alone,
    /// copied, is not enough.
    pub fn present(
        &mut self,
        signed: &SignedDelegation,
        ticket: &[u8; 16],
        now_ms: u64,
        shown: Option<&str>,
    ) -> Result<(TpcRole, Delegation), Refusal> {
        let d = verify(signed)?;
        let body = digest(&signed.body);
        let mut known = false;
        for role in [TpcRole::Source, TpcRole::Dest] {
            let Some(held) = self.held.get_mut(&(d.nonce, role)) else {
                continue;
            };
            if !constant_time_eq(&held.digest, &body) {
                continue;
            }
            known = true;
            if !constant_time_eq(&held.ticket, ticket) {
                continue;
            }
            if held.used {
                return Err(Refusal::Replayed);
            }
            if now_ms > held.until_ms {
                return Err(Refusal::Expired {
                    ago_ms: now_ms - held.until_ms,
                });
            }
            let dialer_ok = match role {
                TpcRole::Source => d.dialer != Dialer::Source,
                TpcRole::Dest => d.dialer != Dialer::Dest,
            };
            if !dialer_ok {
                return Err(Refusal::WrongPeer(format!(
                    "the delegation lets the {} dial, not the other way",
                    role_name(role)
                )));
            }
            let (other, other_role) = match role {
                TpcRole::Source => (&d.dest, TpcRole::Dest),
                TpcRole::Dest => (&d.source, TpcRole::Source),
            };
            if shown != Some(other.fingerprint.as_str()) {
                return Err(Refusal::WrongPeer(format!(
                    "the daemon dialing showed {}, not the certificate of the {} the delegation \
                     names ({})",
                    shown.unwrap_or("no certificate"),
                    role_name(other_role),
                    other.fingerprint
                )));
            }
            held.used = true;
            return Ok((role, d));
        }
        Err(if known {
            Refusal::WrongPeer(
                "the ticket presented with the delegation is not the one given for it".into(),
            )
        } else {
            Refusal::Unknown
        })
    }

    /// Drops what expired more than the allowed skew ago.
    fn forget_expired(&mut self, now_ms: u64) {
        self.held
            .retain(|_, h| h.until_ms.saturating_add(MAX_SKEW_MS) >= now_ms);
    }

    /// Delegations remembered.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// None remembered.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Until when a delegation may be used, judged at `now_ms`.
fn valid_until(d: &Delegation, now_ms: u64) -> Result<u64, Refusal> {
    let life_ms = d.not_after_ms.saturating_sub(d.issued_at_ms);
    if d.not_after_ms < d.issued_at_ms || life_ms > MAX_LIFE_MS {
        return Err(Refusal::TooLong {
            life_ms: d.not_after_ms.abs_diff(d.issued_at_ms),
        });
    }
    if d.issued_at_ms > now_ms + MAX_SKEW_MS {
        return Err(Refusal::NotYetValid {
            ahead_ms: d.issued_at_ms - now_ms,
        });
    }
    if now_ms > d.not_after_ms {
        return Err(Refusal::Expired {
            ago_ms: now_ms - d.not_after_ms,
        });
    }
    Ok(d.not_after_ms)
}

/// The session `d` lets the daemon at `role` serve: the sources read at
/// the source (the destination dials and pulls them), the destination
/// path written at the destination (the source dials and pushes to it).
pub fn session_at(d: &Delegation, role: TpcRole) -> SessionMode {
    match role {
        TpcRole::Source => SessionMode::Pull {
            sources: d.sources.clone(),
            recursive: d.recursive,
        },
        TpcRole::Dest => SessionMode::Push {
            dest: d.dest_path.clone(),
            top_level: d.top_level,
        },
    }
}

/// Whether the data session `asked` (as the dialer opens it with this
/// daemon, which plays `role`) is exactly what `d` covers.
pub fn covers(d: &Delegation, role: TpcRole, asked: &SessionMode) -> Result<(), Refusal> {
    let covered = session_at(d, role);
    if &covered == asked {
        Ok(())
    } else {
        Err(Refusal::NotCovered {
            covered: describe(&covered),
            asked: describe(asked),
        })
    }
}

fn describe(mode: &SessionMode) -> String {
    match mode {
        SessionMode::Pull { sources, recursive } => format!(
            "reading {}{}",
            sources.join(", "),
            if *recursive { " (recursively)" } else { "" }
        ),
        SessionMode::Push { dest, .. } => format!("writing to {dest}"),
        other => format!("{other:?}"),
    }
}

fn constant_time_eq<const N: usize>(a: &[u8; N], b: &[u8; N]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
