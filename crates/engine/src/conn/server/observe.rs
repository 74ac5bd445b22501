//! Telling someone outside the engine about a daemon's sessions: each one
//! that completed ([`SessionHook`]), and those running now with counts of
//! all ([`LiveSessions`], for a live view and metrics): per stream its
//! path, bytes and what `TCP_INFO` says now, the session's tuning, and
//! the last few sessions' reports.
//!
//! The engine does not know who listens (the advisor, a metrics
//! exporter): [`super::ServerOptions`] carries an optional
//! [`SessionHook`], called once per completed session on the session's
//! task. A hook must return quickly (hand the data to a channel); it
//! must never block the daemon.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::limits::{Limiter, Refusals};
use crate::data::transfer::{Progress, TransferParams, TransferStats};

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
/// session once it is accepted ([`LiveSessions::begin`]); the
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
    /// Sessions that failed once accepted (their streams not joining in
    /// time included).
    pub failed: AtomicU64,
    /// Payload bytes this daemon sent in completed sessions.
    pub bytes_sent: AtomicU64,
    /// Payload bytes this daemon received in completed sessions.
    pub bytes_received: AtomicU64,
    /// Blocks sent again (repairs) in completed sessions.
    pub blocks_retransmitted: AtomicU64,
    /// The daemon's accounting of its limits, once it runs.
    limiter: Mutex<Option<Limiter>>,
    /// The last [`RECENT`] sessions that ended, newest last.
    recent: Mutex<VecDeque<RecentSession>>,
}

/// How many ended sessions the live view keeps.
pub const RECENT: usize = 20;

#[derive(Debug)]
struct Running {
    peer: SocketAddr,
    sent: bool,
    third_party: Option<LiveTpc>,
    /// Streams asked for, for a session whose streams are not watched (a
    /// third-party copy's dialing end).
    asked_streams: u16,
    streams: Vec<WatchedStream>,
    tuning: LiveTuning,
    started: Instant,
    started_ms: u64,
    progress: Arc<Progress>,
}

/// A data stream a live view follows: its path, and a duplicate of its
/// socket to read `TCP_INFO` from (none for pipes).
#[derive(Debug)]
pub struct WatchedStream {
    /// Its index in the session.
    pub index: u16,
    /// The path it takes, `local ↔ peer` by address (no ports).
    pub path: String,
    /// A duplicate of its TCP socket.
    pub socket: Option<OwnedFd>,
}

impl WatchedStream {
    /// Follows stream `index` on `socket` (a duplicate is kept).
    pub fn of(index: u16, socket: Option<&OwnedFd>) -> WatchedStream {
        let socket = socket.and_then(|fd| fd.try_clone().ok());
        let path = socket
            .as_ref()
            .and_then(|fd| {
                let sock = socket2::SockRef::from(fd);
                let ip = |a: socket2::SockAddr| a.as_socket().map(|a| a.ip().to_canonical());
                Some(format!(
                    "{} ↔ {}",
                    ip(sock.local_addr().ok()?)?,
                    ip(sock.peer_addr().ok()?)?
                ))
            })
            .unwrap_or_else(|| "local".into());
        WatchedStream {
            index,
            path,
            socket,
        }
    }
}

/// The tuning a session runs with: what tern decided for its sockets.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveTuning {
    /// Congestion control of the data sockets.
    pub congestion: String,
    /// Who sizes the buffers: `auto` (tern's DRS), `kernel`, or a fixed
    /// size.
    pub window: String,
    /// The sending side may change the stream count.
    pub auto_streams: bool,
    /// The most streams the session may grow to.
    pub max_streams: u16,
    /// Block size, bytes.
    pub block_size: u32,
    /// Streams it started with, or asked for.
    #[serde(skip)]
    pub streams_asked: u16,
}

impl LiveTuning {
    /// What a live view says of a session's tuning.
    pub fn of(params: &TransferParams) -> LiveTuning {
        let t = &params.tuning;
        LiveTuning {
            congestion: t.congestion.clone(),
            window: match t.window {
                tern_drs::WindowMode::Auto => "auto".into(),
                tern_drs::WindowMode::Kernel => "kernel".into(),
                tern_drs::WindowMode::Fixed(b) => format!("fixed {b} bytes"),
            },
            auto_streams: t.auto_streams,
            max_streams: params.max_streams,
            block_size: params.block_size,
            streams_asked: params.streams,
        }
    }
}

/// One stream of a running session, now.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveStream {
    /// Its index in the session.
    pub index: u16,
    /// `local ↔ peer` addresses.
    pub path: String,
    /// Payload bytes it moved so far.
    pub bytes: u64,
    /// Smoothed RTT, ms.
    pub rtt_ms: Option<f64>,
    /// Congestion window, bytes (when this end sends).
    pub cwnd_bytes: Option<u64>,
    /// The kernel's latest delivery-rate sample, bits/s (when this end
    /// sends).
    pub delivery_bps: Option<f64>,
    /// Its send buffer now, bytes (what DRS sized).
    pub send_buffer_bytes: Option<u64>,
    /// Its receive buffer now, bytes.
    pub receive_buffer_bytes: Option<u64>,
    /// Bytes retransmitted.
    pub retransmitted_bytes: Option<u64>,
}

impl LiveStream {
    /// What stream `w` shows now; the congestion window and delivery
    /// rate only where this end sends (`sent`): a receiver's are those of
    /// its acknowledgements.
    fn read(w: &WatchedStream, progress: &Progress, sent: bool) -> LiveStream {
        let fd = w.socket.as_ref().map(|s| s.as_raw_fd());
        let info = fd.and_then(|fd| tern_drs::TcpInfo::read(fd).ok());
        LiveStream {
            index: w.index,
            path: w.path.clone(),
            bytes: progress.stream_bytes(usize::from(w.index)),
            rtt_ms: info.as_ref().map(|i| f64::from(i.rtt_us) / 1e3),
            cwnd_bytes: info
                .as_ref()
                .filter(|_| sent)
                .map(|i| u64::from(i.snd_cwnd) * u64::from(i.snd_mss)),
            delivery_bps: info
                .as_ref()
                .filter(|_| sent)
                .and_then(|i| i.delivery_rate)
                .map(|r| r as f64 * 8.0),
            send_buffer_bytes: fd.and_then(|fd| tern_drs::socket::sndbuf(fd).ok()),
            receive_buffer_bytes: fd.and_then(|fd| tern_drs::socket::rcvbuf(fd).ok()),
            retransmitted_bytes: info.and_then(|i| i.bytes_retrans),
        }
    }
}

/// One path of a running session: its streams together.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LivePath {
    /// `local ↔ peer` addresses.
    pub path: String,
    /// Streams on it.
    pub streams: u16,
    /// Payload bytes they moved so far.
    pub bytes: u64,
    /// Sum of their delivery-rate samples, bits/s (when this end sends).
    pub delivery_bps: Option<f64>,
}

/// A session that ended, as the live view lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecentSession {
    /// Its number on this daemon.
    pub id: u64,
    /// The client's address.
    pub peer: SocketAddr,
    /// `send` or `receive`.
    pub direction: &'static str,
    /// Set when it was one end of a third-party copy.
    pub third_party: Option<LiveTpc>,
    /// When it began, ms since the Unix epoch.
    pub started_ms: u64,
    /// How long it ran, s.
    pub elapsed_s: f64,
    /// `completed` or `failed`.
    pub outcome: &'static str,
    /// Payload bytes delivered, or moved before it failed.
    pub bytes: u64,
    /// Files delivered.
    pub files: usize,
    /// Streams used.
    pub streams: u16,
    /// Average payload rate over the network phase, bits/s.
    pub rate_bps: f64,
    /// Blocks sent again.
    pub blocks_retransmitted: u64,
    /// Streams lost on the way.
    pub streams_lost: u16,
    /// Payload bytes per stream.
    pub per_stream_bytes: Vec<u64>,
    /// What limited it, in a sentence (DRS's diagnosis), when known.
    pub diagnosis: Option<String>,
}

/// A session that is one end of a third-party copy (PROTOCOL.md §8.13):
/// the data goes between two daemons on a client's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LiveTpc {
    /// `source` or `destination`: the end this daemon is.
    pub role: &'static str,
    /// This daemon dialed the other (else the other dialed it).
    pub dialed: bool,
}

impl LiveTpc {
    /// This daemon as `role`'s end, dialing or dialed.
    pub fn of(role: tern_proto::delegation::TpcRole, dialed: bool) -> LiveTpc {
        LiveTpc {
            role: match role {
                tern_proto::delegation::TpcRole::Source => "source",
                tern_proto::delegation::TpcRole::Dest => "destination",
            },
            dialed,
        }
    }
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
    /// Set when it is one end of a third-party copy.
    pub third_party: Option<LiveTpc>,
    /// Data streams it started with.
    pub streams: u16,
    /// Each of them now.
    pub stream_detail: Vec<LiveStream>,
    /// Its streams by path.
    pub paths: Vec<LivePath>,
    /// The tuning it runs with.
    pub tuning: LiveTuning,
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
    /// Registers a session (its streams as given, and those that join
    /// later through [`LiveGuard::watcher`]); it stays listed until the
    /// guard is dropped.
    pub fn begin(
        self: &Arc<Self>,
        peer: SocketAddr,
        (sent, third_party): (bool, Option<LiveTpc>),
        streams: Vec<WatchedStream>,
        tuning: LiveTuning,
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
                third_party,
                asked_streams: tuning.streams_asked,
                streams,
                tuning,
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
            .map(|(&id, r)| {
                let stream_detail: Vec<LiveStream> = r
                    .streams
                    .iter()
                    .map(|w| LiveStream::read(w, &r.progress, r.sent))
                    .collect();
                LiveSession {
                    id,
                    peer: r.peer,
                    direction: if r.sent { "send" } else { "receive" },
                    third_party: r.third_party,
                    streams: r.shown_streams(),
                    paths: by_path(&stream_detail),
                    stream_detail,
                    tuning: r.tuning.clone(),
                    started_ms: r.started_ms,
                    elapsed_s: r.started.elapsed().as_secs_f64(),
                    bytes: r.progress.bytes.load(Ordering::Relaxed),
                    total: r.progress.total.load(Ordering::Relaxed),
                    files_done: r.progress.files_done.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// The sessions that ended last, newest first.
    pub fn recent(&self) -> Vec<RecentSession> {
        let recent = self.recent.lock().expect("live sessions");
        recent.iter().rev().cloned().collect()
    }

    fn remember(&self, ended: RecentSession) {
        let mut recent = self.recent.lock().expect("live sessions");
        if recent.len() >= RECENT {
            recent.pop_front();
        }
        recent.push_back(ended);
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

    /// How many sessions run now.
    pub fn running(&self) -> usize {
        self.running.lock().expect("live sessions").len()
    }

    /// Data streams of the running sessions.
    pub fn streams(&self) -> u64 {
        let running = self.running.lock().expect("live sessions");
        running.values().map(|r| r.streams.len() as u64).sum()
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Streams grouped by path, in the order each path first appears.
fn by_path(streams: &[LiveStream]) -> Vec<LivePath> {
    let mut paths: Vec<LivePath> = Vec::new();
    for s in streams {
        let i = match paths.iter().position(|p| p.path == s.path) {
            Some(i) => i,
            None => {
                paths.push(LivePath {
                    path: s.path.clone(),
                    streams: 0,
                    bytes: 0,
                    delivery_bps: None,
                });
                paths.len() - 1
            }
        };
        let p = &mut paths[i];
        p.streams += 1;
        p.bytes += s.bytes;
        if let Some(d) = s.delivery_bps {
            *p.delivery_bps.get_or_insert(0.0) += d;
        }
    }
    paths
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
        if let Some(r) = self.ended("completed") {
            let secs = stats.network_elapsed.as_secs_f64();
            self.sessions.remember(RecentSession {
                bytes: stats.bytes,
                files: stats.files.len(),
                streams: stats.streams_used,
                rate_bps: if secs > 0.0 {
                    stats.bytes as f64 * 8.0 / secs
                } else {
                    0.0
                },
                blocks_retransmitted: stats.blocks_retransmitted,
                streams_lost: stats.streams_lost,
                per_stream_bytes: stats.per_stream_bytes.clone(),
                diagnosis: stats.tuning.as_ref().map(|d| d.summary.clone()),
                ..r
            });
        }
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

/// Adds the streams of a registered session as they join.
#[derive(Debug, Clone)]
pub(crate) struct LiveWatcher {
    sessions: Arc<LiveSessions>,
    id: u64,
}

impl LiveWatcher {
    /// Follows one more stream of the session.
    pub(crate) fn watch(&self, stream: WatchedStream) {
        let mut running = self.sessions.running.lock().expect("live sessions");
        if let Some(r) = running.get_mut(&self.id) {
            r.streams.push(stream);
        }
    }
}

impl LiveGuard {
    /// A handle that adds the session's streams as they join.
    pub(crate) fn watcher(&self) -> LiveWatcher {
        LiveWatcher {
            sessions: self.sessions.clone(),
            id: self.id,
        }
    }

    /// Takes the session off the running list; what is known of it then.
    fn ended(&self, outcome: &'static str) -> Option<RecentSession> {
        let r = self
            .sessions
            .running
            .lock()
            .expect("live sessions")
            .remove(&self.id)?;
        Some(RecentSession {
            id: self.id,
            peer: r.peer,
            direction: if r.sent { "send" } else { "receive" },
            third_party: r.third_party,
            started_ms: r.started_ms,
            elapsed_s: r.started.elapsed().as_secs_f64(),
            outcome,
            bytes: r.progress.bytes.load(Ordering::Relaxed),
            files: r.progress.files_done.load(Ordering::Relaxed) as usize,
            streams: r.shown_streams(),
            rate_bps: 0.0,
            blocks_retransmitted: 0,
            streams_lost: 0,
            per_stream_bytes: r
                .streams
                .iter()
                .map(|w| r.progress.stream_bytes(usize::from(w.index)))
                .collect(),
            diagnosis: None,
        })
    }
}

impl Running {
    /// Its streams: those watched, else those asked for.
    fn shown_streams(&self) -> u16 {
        match self.streams.len() {
            0 => self.asked_streams,
            n => n as u16,
        }
    }
}

impl LiveGuard {
    /// The session reached `peer` (a dialing end learns where only once
    /// it has connected).
    pub fn reached(&self, peer: SocketAddr) {
        if let Some(r) = self
            .sessions
            .running
            .lock()
            .expect("live sessions")
            .get_mut(&self.id)
        {
            r.peer = peer;
        }
    }

    /// Takes the session off the list without counting it: it never
    /// became one (a dial that reached nobody).
    pub fn forget(mut self) {
        self.sessions
            .running
            .lock()
            .expect("live sessions")
            .remove(&self.id);
        self.sessions.started.fetch_sub(1, Ordering::Relaxed);
        self.done = true;
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if !self.done {
            self.sessions.failed.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = self.ended("failed") {
                self.sessions.remember(r);
            }
        }
    }
}
