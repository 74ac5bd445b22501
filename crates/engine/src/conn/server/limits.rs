//! What connections may hold of the daemon before and after they
//! authenticate, so that neither one peer nor a crowd of unauthenticated
//! ones can lock legitimate clients out.
//!
//! Every new connection first needs a *handshake slot*, taken when it is
//! accepted and before anything is read: one from a small pool shared by
//! all peers, and within that at most a few per address. It holds the slot
//! until it has authenticated — a control connection through TLS, the
//! client certificate's grants (site daemon) or the one-time token
//! (`serve --once`), and a validated session request; a data connection
//! until it has presented a live session's token — or until the short
//! handshake timeout ends it. A connection that gets no slot is closed at
//! once, not queued: queued connections are what held file descriptors by
//! the ten thousand.
//!
//! Only an authenticated session counts against the session limit, and
//! each address may hold a bounded number of sessions, so sessions that
//! never join their data streams starve no one else. A session also
//! *entitles* its address to handshake slots for its own data connections
//! (up to [`ENTITLED_PER_ADDRESS`]), outside the shared pool: a client
//! opening 128 streams at once is not refused by the per-address limit,
//! and a flood of unauthenticated connections cannot crowd them out.
//!
//! [`Limiter`] owns the accounting: a mutex over per-address counts, held
//! for bookkeeping only; an address has an entry only while it holds
//! something, so spraying addresses cannot grow it without bound.
//! [`Handshake`] and [`SessionSlot`] are guards that give their slots back
//! when dropped, however a connection ends. Refusals are counted per
//! [`Limit`] ([`Refusals`], for metrics) and reported in the log at most
//! once per [`REPORT_EVERY`] per limit, so a flood does not flood the log.
//!
//! [`raise_open_file_limit`] is the other half of surviving a flood: the
//! soft `RLIMIT_NOFILE` raised to the hard limit, as servers do.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default pool of connections still authenticating, all peers together.
pub const DEFAULT_MAX_HANDSHAKES: usize = 32;
/// Default share of that pool one address may hold.
pub const DEFAULT_MAX_HANDSHAKES_PER_ADDRESS: usize = 8;
/// Default number of authenticated sessions one address may hold.
pub const DEFAULT_MAX_SESSIONS_PER_ADDRESS: usize = 16;
/// Default time a new connection has to authenticate.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time an accepted session's data streams have to join.
pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(20);
/// Handshake slots the sessions of one address entitle it to, at most,
/// beyond the shared pool: one session's largest burst of data connections.
pub const ENTITLED_PER_ADDRESS: usize = super::MAX_STREAMS as usize;
/// A limit is reported in the log at most this often.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// A limit that can refuse or end a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Connections still authenticating, all peers together.
    Handshakes,
    /// Connections still authenticating from one address.
    HandshakesPerAddress,
    /// Authenticated sessions of one address.
    SessionsPerAddress,
    /// A connection that did not authenticate within the handshake timeout.
    HandshakeTimeout,
}

impl Limit {
    const COUNT: usize = 4;

    fn index(self) -> usize {
        match self {
            Limit::Handshakes => 0,
            Limit::HandshakesPerAddress => 1,
            Limit::SessionsPerAddress => 2,
            Limit::HandshakeTimeout => 3,
        }
    }
}

/// Connections refused or ended by each limit since the daemon started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Refusals {
    /// Closed at accept: the pool of connections still authenticating was
    /// full.
    pub handshakes: u64,
    /// Closed at accept: their address had as many connections still
    /// authenticating as it may.
    pub handshakes_per_address: u64,
    /// Refused after authenticating: their address held as many sessions
    /// as it may.
    pub sessions_per_address: u64,
    /// Closed for not authenticating within the handshake timeout.
    pub handshake_timeouts: u64,
}

impl Refusals {
    /// The count of one limit.
    pub fn of(&self, limit: Limit) -> u64 {
        match limit {
            Limit::Handshakes => self.handshakes,
            Limit::HandshakesPerAddress => self.handshakes_per_address,
            Limit::SessionsPerAddress => self.sessions_per_address,
            Limit::HandshakeTimeout => self.handshake_timeouts,
        }
    }
}

/// The limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    pub(crate) handshakes: usize,
    pub(crate) handshakes_per_address: usize,
    pub(crate) sessions_per_address: usize,
    pub(crate) entitled_per_address: usize,
    pub(crate) handshake_timeout: Duration,
}

/// What one address holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Peer {
    /// Connections still authenticating on slots of the shared pool.
    handshakes: usize,
    /// Connections still authenticating on slots its sessions entitle it to.
    entitled_handshakes: usize,
    /// Authenticated sessions.
    sessions: usize,
    /// Data connections its sessions may open (the sum of their stream caps).
    entitlement: usize,
}

impl Peer {
    fn is_idle(&self) -> bool {
        *self == Peer::default()
    }
}

/// Which kind of slot a connection in its handshake holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// One of the shared pool.
    Pool,
    /// One its address's sessions entitle it to.
    Entitled,
}

/// The counts, without the locking: every decision is made here.
#[derive(Debug, Default)]
struct Ledger {
    /// Pool slots taken, all addresses together.
    handshakes: usize,
    peers: HashMap<IpAddr, Peer>,
}

impl Ledger {
    /// A handshake slot for a new connection from `ip`, or the limit that
    /// refuses it.
    fn admit(&mut self, caps: &Caps, ip: IpAddr) -> Result<Slot, Limit> {
        let peer = self.peers.entry(ip).or_default();
        let entitled = peer.entitlement.min(caps.entitled_per_address);
        let decision = if peer.entitled_handshakes < entitled {
            peer.entitled_handshakes += 1;
            Ok(Slot::Entitled)
        } else if peer.handshakes >= caps.handshakes_per_address {
            Err(Limit::HandshakesPerAddress)
        } else if self.handshakes >= caps.handshakes {
            Err(Limit::Handshakes)
        } else {
            peer.handshakes += 1;
            self.handshakes += 1;
            Ok(Slot::Pool)
        };
        if decision.is_err() {
            self.forget_if_idle(ip);
        }
        decision
    }

    fn release(&mut self, ip: IpAddr, slot: Slot) {
        let Some(peer) = self.peers.get_mut(&ip) else {
            return;
        };
        match slot {
            Slot::Pool => {
                peer.handshakes = peer.handshakes.saturating_sub(1);
                self.handshakes = self.handshakes.saturating_sub(1);
            }
            Slot::Entitled => {
                peer.entitled_handshakes = peer.entitled_handshakes.saturating_sub(1);
            }
        }
        self.forget_if_idle(ip);
    }

    /// A session of `ip`, authenticated, that may open `streams` data
    /// connections; or the limit that refuses it.
    fn open_session(&mut self, caps: &Caps, ip: IpAddr, streams: usize) -> Result<(), Limit> {
        let peer = self.peers.entry(ip).or_default();
        if peer.sessions >= caps.sessions_per_address {
            self.forget_if_idle(ip);
            return Err(Limit::SessionsPerAddress);
        }
        peer.sessions += 1;
        peer.entitlement += streams;
        Ok(())
    }

    fn close_session(&mut self, ip: IpAddr, streams: usize) {
        let Some(peer) = self.peers.get_mut(&ip) else {
            return;
        };
        peer.sessions = peer.sessions.saturating_sub(1);
        peer.entitlement = peer.entitlement.saturating_sub(streams);
        self.forget_if_idle(ip);
    }

    fn forget_if_idle(&mut self, ip: IpAddr) {
        if self.peers.get(&ip).is_some_and(Peer::is_idle) {
            self.peers.remove(&ip);
        }
    }
}

/// When refusals are written to the log: the first of a limit at once,
/// then at most one line per [`REPORT_EVERY`], saying how many went
/// unlogged in between.
#[derive(Debug, Default)]
struct Reporter {
    last: [Option<Instant>; Limit::COUNT],
    unlogged: [u64; Limit::COUNT],
}

impl Reporter {
    /// `Some(unlogged since the last line)` when a refusal by `limit` at
    /// `now` is to be logged; `None` when it is only counted.
    fn note(&mut self, limit: Limit, now: Instant) -> Option<u64> {
        let i = limit.index();
        match self.last[i] {
            Some(t) if now.saturating_duration_since(t) < REPORT_EVERY => {
                self.unlogged[i] += 1;
                None
            }
            _ => {
                self.last[i] = Some(now);
                Some(std::mem::take(&mut self.unlogged[i]))
            }
        }
    }
}

#[derive(Debug)]
struct Inner {
    caps: Caps,
    ledger: Mutex<Ledger>,
    refused: [AtomicU64; Limit::COUNT],
    reporter: Mutex<Reporter>,
}

impl Inner {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().expect("limits ledger")
    }

    /// Counts a refusal and reports it, rate-limited.
    fn refused(&self, limit: Limit, peer: SocketAddr) {
        self.refused[limit.index()].fetch_add(1, Ordering::Relaxed);
        let logged = self
            .reporter
            .lock()
            .expect("limits reporter")
            .note(limit, Instant::now());
        let Some(unlogged) = logged else {
            return;
        };
        let caps = &self.caps;
        let what = match limit {
            Limit::Handshakes => format!(
                "closed: {} connections are still authenticating, the most the server takes \
                 (max handshakes)",
                caps.handshakes
            ),
            Limit::HandshakesPerAddress => format!(
                "closed: {} connections from this address are still authenticating \
                 (max handshakes per address)",
                caps.handshakes_per_address
            ),
            Limit::SessionsPerAddress => format!(
                "session refused: this address holds {} sessions (max sessions per address)",
                caps.sessions_per_address
            ),
            Limit::HandshakeTimeout => format!(
                "closed: did not authenticate within {:?} (handshake timeout)",
                caps.handshake_timeout
            ),
        };
        let more = match unlogged {
            0 => String::new(),
            n => format!("; {n} more by this limit since the last report"),
        };
        tracing::warn!("{peer}: {what}{more}");
    }
}

/// The daemon's accounting of handshakes and sessions per address.
#[derive(Debug, Clone)]
pub(crate) struct Limiter(Arc<Inner>);

impl Limiter {
    pub(crate) fn new(caps: Caps) -> Limiter {
        Limiter(Arc::new(Inner {
            caps,
            ledger: Mutex::new(Ledger::default()),
            refused: Default::default(),
            reporter: Mutex::new(Reporter::default()),
        }))
    }

    /// A handshake slot for a connection just accepted from `peer`; `None`
    /// (counted and reported) when a limit refuses it, and the connection
    /// is to be closed at once.
    pub(crate) fn admit(&self, peer: SocketAddr) -> Option<Handshake> {
        let ip = peer.ip().to_canonical();
        let admitted = self.0.ledger().admit(&self.0.caps, ip);
        match admitted {
            Ok(slot) => Some(Handshake {
                limiter: self.0.clone(),
                peer,
                ip,
                slot,
            }),
            Err(limit) => {
                self.0.refused(limit, peer);
                None
            }
        }
    }

    /// Refusals so far, by limit.
    pub(crate) fn refusals(&self) -> Refusals {
        let n = |l: Limit| self.0.refused[l.index()].load(Ordering::Relaxed);
        Refusals {
            handshakes: n(Limit::Handshakes),
            handshakes_per_address: n(Limit::HandshakesPerAddress),
            sessions_per_address: n(Limit::SessionsPerAddress),
            handshake_timeouts: n(Limit::HandshakeTimeout),
        }
    }
}

/// A connection's handshake slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Handshake {
    limiter: Arc<Inner>,
    peer: SocketAddr,
    ip: IpAddr,
    slot: Slot,
}

impl Handshake {
    /// The connection did not authenticate in time: counted and reported
    /// (rate-limited), so the caller logs nothing more.
    pub(crate) fn timed_out(&self) {
        self.limiter.refused(Limit::HandshakeTimeout, self.peer);
    }

    /// The connection authenticated a session that may open `streams` data
    /// connections: its handshake slot is given back for a session slot of
    /// its address, or the limit that refuses it (counted and reported).
    pub(crate) fn authenticate(self, streams: u16) -> Result<SessionSlot, Limit> {
        let streams = usize::from(streams);
        let opened = self
            .limiter
            .ledger()
            .open_session(&self.limiter.caps, self.ip, streams);
        match opened {
            Ok(()) => Ok(SessionSlot {
                limiter: self.limiter.clone(),
                ip: self.ip,
                streams,
            }),
            Err(limit) => {
                self.limiter.refused(limit, self.peer);
                Err(limit)
            }
        }
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        self.limiter.ledger().release(self.ip, self.slot);
    }
}

/// An authenticated session's place in its address's share, given back
/// when dropped.
#[derive(Debug)]
pub(crate) struct SessionSlot {
    limiter: Arc<Inner>,
    ip: IpAddr,
    streams: usize,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.limiter.ledger().close_session(self.ip, self.streams);
    }
}

/// Raises this process's soft limit on open files (`RLIMIT_NOFILE`) to its
/// hard limit, as servers do: the soft default (often 1024) is far below
/// what a daemon holding many sessions of many streams needs, and every
/// connection costs a descriptor or two. Returns the soft limit before and
/// after.
pub fn raise_open_file_limit() -> std::io::Result<(u64, u64)> {
    let (soft, hard) = rlimit::Resource::NOFILE.get()?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    rlimit::Resource::NOFILE.set(hard, hard)?;
    Ok((soft, hard))
}

/// A connection that has not authenticated yet.
pub(super) struct Handshaking {
    pub(super) peer: SocketAddr,
    /// Where it arrived: the client's path to this daemon.
    pub(super) local: Option<SocketAddr>,
    /// Its handshake slot.
    pub(super) handshake: Handshake,
    /// When its handshake time is up.
    pub(super) deadline: tokio::time::Instant,
}

impl Handshaking {
    /// Runs one step of the handshake; `None` when the handshake time ran
    /// out first (counted and reported by the limiter).
    pub(super) async fn in_time<T>(&self, step: impl Future<Output = T>) -> Option<T> {
        match tokio::time::timeout_at(self.deadline, step).await {
            Ok(done) => Some(done),
            Err(_) => {
                self.handshake.timed_out();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            handshakes: 5,
            handshakes_per_address: 2,
            sessions_per_address: 2,
            entitled_per_address: 8,
            handshake_timeout: Duration::from_secs(5),
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn one_address_gets_its_share_of_handshakes_and_no_more() {
        let (c, mut l) = (caps(), Ledger::default());
        assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Pool));
        assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Pool));
        assert_eq!(l.admit(&c, ip(1)), Err(Limit::HandshakesPerAddress));
        // Others are not affected by it.
        assert_eq!(l.admit(&c, ip(2)), Ok(Slot::Pool));
        // A slot given back is free again.
        l.release(ip(1), Slot::Pool);
        assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Pool));
    }

    #[test]
    fn the_pool_is_shared_by_all_addresses() {
        let (c, mut l) = (caps(), Ledger::default());
        for k in 1..=5 {
            assert_eq!(l.admit(&c, ip(k)), Ok(Slot::Pool), "address {k}");
        }
        assert_eq!(l.admit(&c, ip(6)), Err(Limit::Handshakes));
        l.release(ip(3), Slot::Pool);
        assert_eq!(l.admit(&c, ip(6)), Ok(Slot::Pool));
    }

    #[test]
    fn sessions_are_limited_per_address() {
        let (c, mut l) = (caps(), Ledger::default());
        assert_eq!(l.open_session(&c, ip(1), 1), Ok(()));
        assert_eq!(l.open_session(&c, ip(1), 1), Ok(()));
        assert_eq!(l.open_session(&c, ip(1), 1), Err(Limit::SessionsPerAddress));
        assert_eq!(l.open_session(&c, ip(2), 1), Ok(()));
        l.close_session(ip(1), 1);
        assert_eq!(l.open_session(&c, ip(1), 1), Ok(()));
    }

    #[test]
    fn a_session_entitles_its_address_to_handshakes_for_its_streams() {
        let (c, mut l) = (caps(), Ledger::default());
        // The pool is full, partly by this address.
        for k in 1..=3 {
            l.admit(&c, ip(k)).unwrap();
        }
        l.admit(&c, ip(1)).unwrap();
        l.admit(&c, ip(2)).unwrap();
        assert_eq!(l.admit(&c, ip(1)), Err(Limit::HandshakesPerAddress));
        // A session of 3 streams: 3 more, outside the pool, then no more.
        l.open_session(&c, ip(1), 3).unwrap();
        for _ in 0..3 {
            assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Entitled));
        }
        assert_eq!(l.admit(&c, ip(1)), Err(Limit::HandshakesPerAddress));
        // Another address has no such entitlement.
        assert_eq!(l.admit(&c, ip(4)), Err(Limit::Handshakes));
        // Entitled slots come back as streams join.
        l.release(ip(1), Slot::Entitled);
        assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Entitled));
    }

    #[test]
    fn entitlement_is_capped_and_ends_with_its_sessions() {
        let (c, mut l) = (caps(), Ledger::default());
        l.open_session(&c, ip(1), 100).unwrap();
        for _ in 0..c.entitled_per_address {
            assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Entitled));
        }
        assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Pool), "then the pool");
        for _ in 0..c.entitled_per_address {
            l.release(ip(1), Slot::Entitled);
        }
        l.close_session(ip(1), 100);
        assert_eq!(l.admit(&c, ip(1)), Ok(Slot::Pool));
        assert_eq!(l.admit(&c, ip(1)), Err(Limit::HandshakesPerAddress));
    }

    #[test]
    fn an_address_is_forgotten_once_it_holds_nothing() {
        let (c, mut l) = (caps(), Ledger::default());
        l.admit(&c, ip(1)).unwrap();
        l.open_session(&c, ip(1), 4).unwrap();
        assert!(l.admit(&c, ip(9)).is_ok());
        l.release(ip(9), Slot::Pool);
        l.release(ip(1), Slot::Pool);
        assert_eq!(l.peers.len(), 1, "the session is still held");
        l.close_session(ip(1), 4);
        assert!(l.peers.is_empty());
        assert_eq!(l.handshakes, 0);
        // Refused addresses leave nothing behind either.
        let tight = Caps {
            handshakes: 0,
            ..caps()
        };
        assert_eq!(l.admit(&tight, ip(7)), Err(Limit::Handshakes));
        assert!(l.peers.is_empty());
    }

    #[test]
    fn guards_give_their_slots_back_and_refusals_are_counted() {
        let limiter = Limiter::new(caps());
        let peer = |k: u8, port: u16| SocketAddr::new(ip(k), port);
        let a = limiter.admit(peer(1, 1)).unwrap();
        let b = limiter.admit(peer(1, 2)).unwrap();
        assert!(limiter.admit(peer(1, 3)).is_none());
        let session = a.authenticate(2).unwrap();
        // `a`'s pool slot is back, and the session entitles two more.
        let c = limiter.admit(peer(1, 4)).unwrap();
        let d = limiter.admit(peer(1, 5)).unwrap();
        let e = limiter.admit(peer(1, 6)).unwrap();
        assert!(limiter.admit(peer(1, 7)).is_none());
        let second = b.authenticate(1).unwrap();
        assert_eq!(c.authenticate(1).unwrap_err(), Limit::SessionsPerAddress);
        d.timed_out();
        drop((d, e, session, second));
        assert!(limiter.0.ledger().peers.is_empty());
        assert_eq!(
            limiter.refusals(),
            Refusals {
                handshakes: 0,
                handshakes_per_address: 2,
                sessions_per_address: 1,
                handshake_timeouts: 1,
            }
        );
    }

    #[test]
    fn a_flood_of_refusals_is_logged_once_per_interval_with_its_count() {
        let mut r = Reporter::default();
        let t0 = Instant::now();
        assert_eq!(r.note(Limit::Handshakes, t0), Some(0));
        for k in 1..=500 {
            assert_eq!(
                r.note(Limit::Handshakes, t0 + Duration::from_millis(k)),
                None
            );
        }
        // Each limit is reported on its own.
        assert_eq!(r.note(Limit::SessionsPerAddress, t0), Some(0));
        assert_eq!(r.note(Limit::Handshakes, t0 + REPORT_EVERY), Some(500));
        assert_eq!(r.note(Limit::Handshakes, t0 + REPORT_EVERY * 2), Some(0));
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        let (_, hard) = rlimit::Resource::NOFILE.get().unwrap();
        // One below the hard limit: enough to see it raised, harmless to
        // the tests running beside this one.
        rlimit::Resource::NOFILE.set(hard - 1, hard).unwrap();
        assert_eq!(raise_open_file_limit().unwrap(), (hard - 1, hard));
        assert_eq!(rlimit::Resource::NOFILE.get().unwrap(), (hard, hard));
        assert_eq!(raise_open_file_limit().unwrap(), (hard, hard));
    }

    #[test]
    fn ipv4_mapped_addresses_count_as_their_ipv4_address() {
        let limiter = Limiter::new(caps());
        let v4 = SocketAddr::from(([192, 0, 2, 1], 1));
        let mapped: SocketAddr = "[::ffff:192.0.2.1]:2".parse().unwrap();
        let _a = limiter.admit(v4).unwrap();
        let _b = limiter.admit(mapped).unwrap();
        assert!(limiter.admit(v4).is_none());
    }
}
