//! Whom a client trusts to be the daemon, as one value.
//!
//! There are four ways to know a daemon, and exactly one applies to a
//! connection: a CA that issued its certificate for the host's name
//! (`--ca`), a fingerprint given on the command line (`--fingerprint`), the
//! fingerprint a `tern serve --once` printed on the ssh channel that
//! started it, or trust on first use through a `known_hosts` file. The
//! command line's precedence among them (CA, then a pin, then
//! `known_hosts`) is [`Trust::choose`]; what a mismatch means, and what to
//! do about it, depends on where the expected fingerprint came from.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;

use crate::conn::tls::{KnownHosts, ServerTrust};
use crate::error::PinOrigin;
use crate::{Error, Result};

/// How a client decides that the daemon is the right one.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Any certificate, recording nothing (no `known_hosts` file could be
    /// found, or a test).
    Any,
    /// Trust on first use: the fingerprint recorded for `host:port`, or
    /// the one seen now, then recorded.
    KnownHosts(KnownHosts),
    /// Exactly this fingerprint (`--fingerprint`).
    Pinned(String),
    /// Exactly the fingerprint that `tern serve --once` printed on the ssh
    /// channel: ssh vouched for it.
    Ssh(String),
    /// A chain to one of these CAs, naming the host (`--ca`).
    Ca(Arc<RootCertStore>),
}

impl Trust {
    /// What the command line asked for: a CA when given, else a pinned
    /// fingerprint, else the `known_hosts` file, else anyone.
    pub fn choose(
        ca: Option<Arc<RootCertStore>>,
        pin: Option<String>,
        known_hosts: Option<KnownHosts>,
    ) -> Trust {
        match (ca, pin, known_hosts) {
            (Some(roots), _, _) => Trust::Ca(roots),
            (None, Some(pin), _) => Trust::Pinned(pin),
            (None, None, Some(kh)) => Trust::KnownHosts(kh),
            (None, None, None) => Trust::Any,
        }
    }

    /// The fingerprint the user pinned, if any.
    pub fn pinned(&self) -> Option<&str> {
        match self {
            Trust::Pinned(fp) => Some(fp),
            _ => None,
        }
    }

    /// What to expect of the daemon at `host_port`.
    pub(crate) fn expect(&self, host_port: &str) -> Result<Expected> {
        let (fingerprint, origin) = match self {
            Trust::Any => (None, Origin::Nowhere),
            Trust::KnownHosts(kh) => (kh.lookup(host_port)?, Origin::KnownHosts(kh.path.clone())),
            Trust::Pinned(fp) => (Some(fp.clone()), Origin::Flag),
            Trust::Ssh(fp) => (Some(fp.clone()), Origin::Ssh),
            Trust::Ca(roots) => {
                return Ok(Expected {
                    verify: ServerTrust::Ca(roots.clone()),
                    fingerprint: None,
                    origin: Origin::Nowhere,
                });
            }
        };
        Ok(Expected {
            verify: ServerTrust::Pin(fingerprint.clone()),
            fingerprint,
            origin,
        })
    }
}

/// Where an expected fingerprint came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Nothing was expected (or a CA decides).
    Nowhere,
    /// This `known_hosts` file: recorded there at first contact, or to be.
    KnownHosts(PathBuf),
    /// `--fingerprint`.
    Flag,
    /// The once line ssh carried.
    Ssh,
}

/// What a client expects of one daemon.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    /// What the TLS verifier checks.
    pub(crate) verify: ServerTrust,
    /// The fingerprint expected, when one is.
    pub(crate) fingerprint: Option<String>,
    /// Where it came from.
    pub(crate) origin: Origin,
}

impl Expected {
    /// The error for a daemon that showed `actual` instead, when a
    /// fingerprint was expected and it differs.
    pub(crate) fn mismatch(&self, host_port: &str, actual: &str) -> Option<Error> {
        let want = self.fingerprint.as_ref().filter(|want| *want != actual)?;
        if matches!(self.verify, ServerTrust::Ca(_)) {
            return None;
        }
        Some(Error::FingerprintMismatch {
            host: host_port.to_string(),
            expected: want.clone(),
            actual: actual.to_string(),
            origin: match &self.origin {
                Origin::KnownHosts(path) => PinOrigin::KnownHosts(path.display().to_string()),
                Origin::Ssh => PinOrigin::Ssh,
                Origin::Flag | Origin::Nowhere => PinOrigin::Flag,
            },
        })
    }

    /// Records `seen` for `host_port` when this is trust on first use of a
    /// daemon not seen before; returns the file written.
    pub(crate) fn record_first_use(
        &self,
        trust: &Trust,
        host_port: &str,
        seen: &str,
    ) -> Result<Option<PathBuf>> {
        match trust {
            Trust::KnownHosts(kh) if self.fingerprint.is_none() => {
                kh.record(host_port, seen)?;
                Ok(Some(kh.path.clone()))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_precedence_is_ca_then_pin_then_known_hosts() {
        let kh = || Some(KnownHosts { path: "/k".into() });
        let roots = Some(Arc::new(RootCertStore::empty()));
        let pin = || Some("SHA256:x".to_string());
        assert!(matches!(Trust::choose(roots, pin(), kh()), Trust::Ca(_)));
        assert!(matches!(Trust::choose(None, pin(), kh()), Trust::Pinned(p) if p == "SHA256:x"));
        assert!(matches!(
            Trust::choose(None, None, kh()),
            Trust::KnownHosts(_)
        ));
        assert!(matches!(Trust::choose(None, None, None), Trust::Any));
    }

    #[test]
    fn a_mismatch_names_where_the_expected_fingerprint_came_from() {
        let dir = std::env::temp_dir().join(format!("tern-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kh = KnownHosts {
            path: dir.join("known_hosts"),
        };
        std::fs::write(&kh.path, "h:1 SHA256:old\n").unwrap();
        let expected = Trust::KnownHosts(kh.clone()).expect("h:1").unwrap();
        let e = expected.mismatch("h:1", "SHA256:new").unwrap();
        assert!(e.to_string().contains("remove the line for h:1"), "{e}");
        assert!(expected.mismatch("h:1", "SHA256:old").is_none());
        let pinned = Trust::Pinned("SHA256:want".into()).expect("h:1").unwrap();
        let e = pinned.mismatch("h:1", "SHA256:got").unwrap();
        assert!(
            e.to_string().contains("--fingerprint named SHA256:want"),
            "{e}"
        );
        let fresh = Trust::KnownHosts(kh.clone()).expect("h:2").unwrap();
        assert!(fresh.mismatch("h:2", "SHA256:any").is_none(), "first use");
        let written = fresh
            .record_first_use(&Trust::KnownHosts(kh.clone()), "h:2", "SHA256:any")
            .unwrap();
        assert_eq!(written, Some(kh.path.clone()));
        let again = Trust::KnownHosts(kh).expect("h:2").unwrap();
        assert_eq!(again.fingerprint.as_deref(), Some("SHA256:any"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
