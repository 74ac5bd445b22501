//! Telling someone outside the engine that a daemon session completed.
//!
//! The engine does not know who listens (the advisor, a metrics
//! exporter): [`crate::conn::server::ServerOptions`] carries an optional
//! [`SessionHook`], called once per completed session on the session's
//! task. A hook must return quickly (hand the data to a channel); it
//! must never block the daemon.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::data::transfer::TransferStats;

/// A session the daemon completed.
#[derive(Debug)]
pub struct SessionDone<'a> {
    /// The client's address.
    pub peer: SocketAddr,
    /// The daemon sent the data (a pull, or a reverse perf).
    pub sent: bool,
    /// What the daemon's side measured.
    pub stats: &'a TransferStats,
}

/// Called after every completed session.
#[derive(Clone)]
pub struct SessionHook(Arc<dyn Fn(&SessionDone<'_>) + Send + Sync>);

impl SessionHook {
    /// A hook from a closure.
    pub fn new(f: impl Fn(&SessionDone<'_>) + Send + Sync + 'static) -> SessionHook {
        SessionHook(Arc::new(f))
    }

    /// Calls it.
    pub fn call(&self, done: &SessionDone<'_>) {
        (self.0)(done)
    }
}

impl std::fmt::Debug for SessionHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionHook")
    }
}
