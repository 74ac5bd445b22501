//! Telling someone outside the engine about a daemon's sessions: each one
//! that completed ([`SessionHook`]), and those running now with counts of
//! all ([`LiveSessions`], for a live view and metrics).
//!
//! The engine does not know who listens (the advisor, a metrics
//! exporter): [`super::ServerOptions`] carries an optional
//! [`SessionHook`], called once per completed session on the session's
//! task. A hook must return quickly (hand the data to a channel); it
//! must never block the daemon.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::limits::{Limiter, Refusals};
use crate::data::transfer::{Progress, TransferStats};

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

/// The sessions a daemon is running, and counts of those it ran: what a
/// live view and a metrics endpoint read. The daemon registers each
/// session once its streams are up ([`LiveSessions::begin`]); the
/// returned guard takes it off the list when the session ends, counted as
/// completed or failed.
#[derive(Debug, Default)]
pub struct LiveSessions {
    next_id: AtomicU64,
    running: Mutex<BTreeMap<u64, Running>>,
    /// Sessions begun.
    pub started: AtomicU64,
    /// Sessions that completed.
    pub completed: AtomicU64,
    /// Sessions that failed once their streams were up.
    pub failed: AtomicU64,
    /// Payload bytes this daemon sent in completed sessions.
    pub bytes_sent: AtomicU64,
    /// Payload bytes this daemon received in completed sessions.
    pub bytes_received: AtomicU64,
    /// Blocks sent again (repairs) in completed sessions.
    pub blocks_retransmitted: AtomicU64,
    /// The daemon's accounting of its limits, once it runs.
    limiter: Mutex<Option<Limiter>>,
}

#[derive(Debug)]
struct Running {
    peer: SocketAddr,
    sent: bool,
    streams: u16,
    started: Instant,
    started_ms: u64,
    progress: Arc<Progress>,
}

/// One running session as a live view shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveSession {
    /// Its number on this daemon.
    pub id: u64,
    /// The client's address.
    pub peer: SocketAddr,
    /// `send` when the daemon sends (a pull), `receive` otherwise.
    pub direction: &'static str,
    /// Data streams it started with.
    pub streams: u16,
    /// When it began, ms since the Unix epoch.
    pub started_ms: u64,
    /// Seconds since.
    pub elapsed_s: f64,
    /// Payload bytes moved so far.
    pub bytes: u64,
    /// Payload bytes expected (0 when unknown).
    pub total: u64,
    /// Files completed.
    pub files_done: u64,
}

impl LiveSessions {
    /// Registers a session whose streams are up; it stays listed until
    /// the guard is dropped.
    pub fn begin(
        self: &Arc<Self>,
        peer: SocketAddr,
        sent: bool,
        streams: u16,
        progress: Arc<Progress>,
    ) -> LiveGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.started.fetch_add(1, Ordering::Relaxed);
        let started_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.running.lock().expect("live sessions").insert(
            id,
            Running {
                peer,
                sent,
                streams,
                started: Instant::now(),
                started_ms,
                progress,
            },
        );
        LiveGuard {
            sessions: self.clone(),
            id,
            sent,
            done: false,
        }
    }

    /// The sessions running now, oldest first.
    pub fn snapshot(&self) -> Vec<LiveSession> {
        self.running
            .lock()
            .expect("live sessions")
            .iter()
            .map(|(&id, r)| LiveSession {
                id,
                peer: r.peer,
                direction: if r.sent { "send" } else { "receive" },
                streams: r.streams,
                started_ms: r.started_ms,
                elapsed_s: r.started.elapsed().as_secs_f64(),
                bytes: r.progress.bytes.load(Ordering::Relaxed),
                total: r.progress.total.load(Ordering::Relaxed),
                files_done: r.progress.files_done.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Connections refused or ended by each limit so far (all zero
    /// before the daemon runs).
    pub fn refusals(&self) -> Refusals {
        self.limiter
            .lock()
            .expect("live sessions")
            .as_ref()
            .map(Limiter::refusals)
            .unwrap_or_default()
    }

    pub(crate) fn watch_limits(&self, limiter: Limiter) {
        *self.limiter.lock().expect("live sessions") = Some(limiter);
    }

    /// Data streams of the running sessions.
    pub fn streams(&self) -> u64 {
        let running = self.running.lock().expect("live sessions");
        running.values().map(|r| u64::from(r.streams)).sum()
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A registered session: dropped without [`LiveGuard::completed`], it
/// counts as failed.
#[derive(Debug)]
pub struct LiveGuard {
    sessions: Arc<LiveSessions>,
    id: u64,
    sent: bool,
    done: bool,
}

impl LiveGuard {
    /// The session completed with these stats.
    pub fn completed(mut self, stats: &TransferStats) {
        let s = &self.sessions;
        s.completed.fetch_add(1, Ordering::Relaxed);
        let bytes = if self.sent {
            &s.bytes_sent
        } else {
            &s.bytes_received
        };
        bytes.fetch_add(stats.bytes, Ordering::Relaxed);
        s.blocks_retransmitted
            .fetch_add(stats.blocks_retransmitted, Ordering::Relaxed);
        self.done = true;
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if !self.done {
            self.sessions.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.sessions
            .running
            .lock()
            .expect("live sessions")
            .remove(&self.id);
    }
}
