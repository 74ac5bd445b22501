//! The gate of a `tern serve --once` server: exactly one session gets in,
//! the first whose client presented the one-time token (checked by
//! `tern-session`'s `ServerOpen`), and the server learns when and how that
//! session ended. Paths of such a session are taken as scp takes them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use tern_proto::Token;
use tokio::sync::watch;

/// Lets exactly one session in: the first whose client presents the token.
#[derive(Debug)]
pub(crate) struct Gate {
    token: Token,
    /// Set by the first session that presented the token.
    claimed: AtomicBool,
    /// `Some(succeeded)` once the claimed session ended.
    pub(crate) done: watch::Sender<Option<bool>>,
}

/// The one session's hold on the [`Gate`]; tells [`OnceServer::run`] when
/// the session ended, and how.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    gate: &'a Gate,
    ok: bool,
}

impl Claim<'_> {
    /// The session ended well.
    pub(crate) fn succeeded(mut self) {
        self.ok = true;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.gate.done.send_replace(Some(self.ok));
    }
}

impl Gate {
    pub(crate) fn new(token: Token) -> Gate {
        Gate {
            token,
            claimed: AtomicBool::new(false),
            done: watch::channel(None).0,
        }
    }

    /// The token the client must present first.
    pub(crate) fn token(&self) -> Token {
        self.token
    }

    /// Whether a session has claimed the gate.
    pub(crate) fn is_claimed(&self) -> bool {
        self.claimed.load(Ordering::SeqCst)
    }

    /// Claims the one session for a client that presented the token;
    /// `None` when another already has.
    pub(crate) fn claim(&self) -> Option<Claim<'_>> {
        if self.claimed.swap(true, Ordering::SeqCst) {
            return None;
        }
        Some(Claim {
            gate: self,
            ok: false,
        })
    }
}

/// Where a path from the client lands, as with scp: absolute paths as they
/// are, others beneath `home` (`""`, `~` and `~/…` included).
pub(crate) fn scp_path(home: &Path, path: &str) -> PathBuf {
    let rel = match path {
        "~" => "",
        _ => path.strip_prefix("~/").unwrap_or(path),
    };
    if rel.starts_with('/') {
        PathBuf::from(rel)
    } else if rel.is_empty() {
        home.to_path_buf()
    } else {
        home.join(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_as_scp_takes_them() {
        let home = Path::new("/home/ada");
        assert_eq!(scp_path(home, ""), home);
        assert_eq!(scp_path(home, "~"), home);
        assert_eq!(scp_path(home, "data/x"), home.join("data/x"));
        assert_eq!(scp_path(home, "~/data"), home.join("data"));
        assert_eq!(scp_path(home, "/tmp/x"), Path::new("/tmp/x"));
        assert_eq!(scp_path(home, "../bob/x"), home.join("../bob/x"));
    }

    #[test]
    fn one_session_claims_the_gate() {
        let gate = Gate::new([7; 16]);
        let first = gate.claim().expect("the first claim");
        assert!(gate.claim().is_none(), "a second session is refused");
        first.succeeded();
        assert_eq!(*gate.done.borrow(), Some(true));
    }
}
