//! The UDP responder that `tern serve` runs on its port number: it times
//! the arrival of each probe train and answers it.
//!
//! Split like the rest of tern: [`Responder`] is the logic, with no
//! sockets and no clocks (time is an argument), and [`UdpResponder`] runs it
//! on a socket. When the last request of a train arrives, every request of
//! that train that arrived is answered, back to back, by a reply of the
//! same length that carries its arrival offset. So one exchange measures
//! both directions: the offsets time the forward train, and the replies
//! themselves form the reverse train.
//!
//! Loss probes send [`Echo`]es instead: each is answered at once, with
//! how many echoes of its measurement have arrived so far and when this
//! one did (relative to the first), so the client can tell forward from
//! reverse losses and time each direction's delay variation. The
//! responder keeps one small counter per measurement for that.
//!
//! Abuse: only well-formed requests are answered (see [`crate::wire`]); a
//! reply is exactly as long as its request, one per request, so the
//! responder never amplifies; and every request is charged, before it is
//! kept, to a token bucket of its source address and to one shared by all
//! sources. What the buckets refuse is dropped, which leaves its train
//! incomplete.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::wire::{Echo, Kind, MAX_PACKET, Probe, stamp_sent};
use crate::{Error, Result, sys};

/// Limits of a responder.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponderConfig {
    /// Average request (and so reply) rate one source may use (an IPv4
    /// address, or an IPv6 /64).
    pub per_source_bps: u64,
    /// Bytes one source may send in a burst (at least one whole train).
    pub per_source_burst: u64,
    /// Average rate over all sources.
    pub total_bps: u64,
    /// Burst over all sources.
    pub total_burst: u64,
    /// Trains being collected at once, over all sources.
    pub max_trains: usize,
    /// Trains being collected at once from one source address; its
    /// oldest is given up for a new one.
    pub max_trains_per_source: usize,
    /// A train whose last request has not come by then is forgotten.
    pub train_timeout: Duration,
    /// Source addresses whose buckets are remembered at once.
    pub max_sources: usize,
    /// Loss measurements (echo counters) kept at once, over all sources;
    /// one source keeps at most `max_trains_per_source` of them.
    pub max_echo_sessions: usize,
    /// An echo counter not used for this long is forgotten.
    pub echo_idle: Duration,
}

impl Default for ResponderConfig {
    fn default() -> ResponderConfig {
        ResponderConfig {
            per_source_bps: 16_000_000,
            per_source_burst: 2 << 20,
            total_bps: 128_000_000,
            total_burst: 8 << 20,
            max_trains: 64,
            max_trains_per_source: 4,
            train_timeout: Duration::from_secs(2),
            max_sources: 4096,
            max_echo_sessions: 4096,
            echo_idle: Duration::from_secs(10),
        }
    }
}

/// Counters of a responder, readable while it runs.
#[derive(Debug, Default)]
pub struct ResponderStats {
    /// Datagrams that were well-formed requests.
    pub requests: AtomicU64,
    /// Datagrams ignored: not a request, wrong size, or malformed.
    pub malformed: AtomicU64,
    /// Requests dropped by a rate limit.
    pub rate_limited: AtomicU64,
    /// Requests dropped because too many trains were open.
    pub busy: AtomicU64,
    /// Replies sent.
    pub replies: AtomicU64,
    /// Trains forgotten because their last request never came (in time,
    /// or before the same source began too many others).
    pub expired: AtomicU64,
}

impl ResponderStats {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: u64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst as f64,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant, bps: u64, burst: u64) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * bps as f64 / 8.0).min(burst as f64);
        self.at = now;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TrainKey {
    from: SocketAddr,
    nonce: u64,
    train: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct EchoKey {
    from: SocketAddr,
    nonce: u64,
}

#[derive(Debug)]
struct EchoCounter {
    first_ns: u64,
    received: u32,
    last_seen: Instant,
}

#[derive(Debug)]
struct Collecting {
    request: Probe,
    /// Arrival ns of each seq, and its datagram length.
    arrivals: Vec<Option<(u64, u16)>>,
    last_seen: Instant,
}

/// A datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Where to.
    pub to: SocketAddr,
    /// The datagram.
    pub bytes: Vec<u8>,
    /// A train reply: stamp when it is handed to the kernel
    /// ([`stamp_sent`]), so the client learns how fast this host got the
    /// reverse train out.
    pub stamp_sent: bool,
}

/// The responder's logic, without I/O.
#[derive(Debug)]
pub struct Responder {
    config: ResponderConfig,
    stats: Arc<ResponderStats>,
    sources: HashMap<IpAddr, Bucket>,
    total: Bucket,
    trains: HashMap<TrainKey, Collecting>,
    echoes: HashMap<EchoKey, EchoCounter>,
}

impl Responder {
    /// A responder with these limits, its buckets full at `now`.
    pub fn new(config: ResponderConfig, now: Instant) -> Responder {
        Responder {
            total: Bucket::full(config.total_burst, now),
            config,
            stats: Arc::new(ResponderStats::default()),
            sources: HashMap::new(),
            trains: HashMap::new(),
            echoes: HashMap::new(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> Arc<ResponderStats> {
        self.stats.clone()
    }

    /// Takes one datagram from `from` that arrived at `arrival_ns` (any
    /// clock in ns, the same for a whole train); returns what to send.
    pub fn handle(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        arrival_ns: u64,
    ) -> Vec<Outgoing> {
        match Echo::decode(datagram) {
            Ok(e) if !e.reply => return self.echo(now, from, e, arrival_ns),
            Ok(_) => {
                ResponderStats::bump(&self.stats.malformed);
                return Vec::new();
            }
            Err(_) => {}
        }
        let request = match Probe::decode(datagram) {
            Ok(p) if p.kind == Kind::Request => p,
            _ => {
                ResponderStats::bump(&self.stats.malformed);
                return Vec::new();
            }
        };
        ResponderStats::bump(&self.stats.requests);
        let key = TrainKey {
            from,
            nonce: request.nonce,
            train: request.train,
        };
        if !self.trains.contains_key(&key) && !self.room_for_train(now, from) {
            ResponderStats::bump(&self.stats.busy);
            return Vec::new();
        }
        if !self.charge(now, source_of(from), u64::from(request.len)) {
            ResponderStats::bump(&self.stats.rate_limited);
            return Vec::new();
        }
        let train = self.trains.entry(key).or_insert_with(|| Collecting {
            request,
            arrivals: vec![None; usize::from(request.count)],
            last_seen: now,
        });
        if train.request.count != request.count {
            // The same train cannot change its length; a liar gets nothing.
            ResponderStats::bump(&self.stats.malformed);
            return Vec::new();
        }
        train.last_seen = now;
        let slot = &mut train.arrivals[usize::from(request.seq)];
        if slot.is_none() {
            *slot = Some((arrival_ns, request.len));
        }
        if request.seq + 1 < request.count {
            return Vec::new();
        }
        let done = self.trains.remove(&key).expect("just inserted");
        let replies = answer(&done, from);
        self.stats
            .replies
            .fetch_add(replies.len() as u64, Ordering::Relaxed);
        replies
    }

    /// Answers one echo at once, counting it in its measurement.
    fn echo(&mut self, now: Instant, from: SocketAddr, e: Echo, arrival_ns: u64) -> Vec<Outgoing> {
        ResponderStats::bump(&self.stats.requests);
        let key = EchoKey {
            from,
            nonce: e.nonce,
        };
        if !self.echoes.contains_key(&key) && !self.room_for_echo(now, from) {
            ResponderStats::bump(&self.stats.busy);
            return Vec::new();
        }
        // Echoes are small: charge their IP and UDP headers too, so a flood
        // of tiny ones cannot make the responder send more than its limit.
        let headers = if from.is_ipv6() { 48 } else { 28 };
        if !self.charge(now, source_of(from), u64::from(e.len) + headers) {
            ResponderStats::bump(&self.stats.rate_limited);
            return Vec::new();
        }
        let counter = self.echoes.entry(key).or_insert(EchoCounter {
            first_ns: arrival_ns,
            received: 0,
            last_seen: now,
        });
        counter.received = counter.received.wrapping_add(1);
        counter.last_seen = now;
        let offset = arrival_ns.saturating_sub(counter.first_ns);
        ResponderStats::bump(&self.stats.replies);
        vec![Outgoing {
            to: from,
            bytes: e.answer(counter.received, offset).encode(),
            stamp_sent: false,
        }]
    }

    /// Makes room for a new echo counter, as [`Self::room_for_train`] does
    /// for trains.
    fn room_for_echo(&mut self, now: Instant, from: SocketAddr) -> bool {
        if self.echoes.len() >= self.config.max_echo_sessions {
            self.expire(now);
        }
        let source = source_of(from);
        let mine: Vec<(EchoKey, Instant)> = self
            .echoes
            .iter()
            .filter(|(k, _)| source_of(k.from) == source)
            .map(|(k, c)| (*k, c.last_seen))
            .collect();
        if mine.len() >= self.config.max_trains_per_source
            && let Some((oldest, _)) = mine.iter().min_by_key(|(_, seen)| *seen)
        {
            self.echoes.remove(oldest);
            ResponderStats::bump(&self.stats.expired);
        }
        self.echoes.len() < self.config.max_echo_sessions
    }

    /// Forgets trains whose last request is overdue, idle echo counters,
    /// and idle sources.
    pub fn expire(&mut self, now: Instant) {
        let timeout = self.config.train_timeout;
        let before = self.trains.len();
        self.trains
            .retain(|_, t| now.saturating_duration_since(t.last_seen) < timeout);
        let expired = (before - self.trains.len()) as u64;
        self.stats.expired.fetch_add(expired, Ordering::Relaxed);
        let idle = self.config.echo_idle;
        self.echoes
            .retain(|_, c| now.saturating_duration_since(c.last_seen) < idle);
        let (bps, burst) = (self.config.per_source_bps, self.config.per_source_burst);
        self.sources.retain(|_, b| {
            b.refill(now, bps, burst);
            b.tokens < burst as f64
        });
    }

    /// Trains being collected.
    pub fn open_trains(&self) -> usize {
        self.trains.len()
    }

    /// Makes room for a new train from `from`: a source at its own limit
    /// loses its oldest train (it can only hurt itself that way; a client
    /// sends one train at a time, so an older one was given up), but when
    /// all sources together are at the limit the new train is refused.
    fn room_for_train(&mut self, now: Instant, from: SocketAddr) -> bool {
        if self.trains.len() >= self.config.max_trains {
            self.expire(now);
        }
        let source = source_of(from);
        let mine = || {
            self.trains
                .iter()
                .filter(move |(k, _)| source_of(k.from) == source)
        };
        if mine().count() >= self.config.max_trains_per_source {
            let oldest = mine().min_by_key(|(_, t)| t.last_seen).map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.trains.remove(&k);
                ResponderStats::bump(&self.stats.expired);
            }
        }
        self.trains.len() < self.config.max_trains
    }

    fn charge(&mut self, now: Instant, ip: IpAddr, bytes: u64) -> bool {
        let c = self.config.clone();
        if !self.sources.contains_key(&ip) && self.sources.len() >= c.max_sources {
            self.expire(now);
            if self.sources.len() >= c.max_sources {
                return false;
            }
        }
        let source = self
            .sources
            .entry(ip)
            .or_insert_with(|| Bucket::full(c.per_source_burst, now));
        source.refill(now, c.per_source_bps, c.per_source_burst);
        self.total.refill(now, c.total_bps, c.total_burst);
        let cost = bytes as f64;
        if source.tokens < cost || self.total.tokens < cost {
            return false;
        }
        source.tokens -= cost;
        self.total.tokens -= cost;
        true
    }
}

/// The source a request is charged to: its IPv4 address, or the /64 of
/// its IPv6 address (one host can use a whole /64 at will).
fn source_of(from: SocketAddr) -> IpAddr {
    match from.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
        v4 => v4,
    }
}

fn answer(train: &Collecting, to: SocketAddr) -> Vec<Outgoing> {
    let first = train
        .arrivals
        .iter()
        .flatten()
        .map(|(ns, _)| *ns)
        .min()
        .unwrap_or(0);
    let received = train.arrivals.iter().flatten().count() as u16;
    train
        .arrivals
        .iter()
        .enumerate()
        .filter_map(|(seq, a)| a.map(|(ns, len)| (seq as u16, ns, len)))
        .map(|(seq, ns, len)| {
            let request = Probe {
                seq,
                len,
                ..train.request
            };
            Outgoing {
                to,
                bytes: request.reply(received, ns - first).encode(),
                stamp_sent: true,
            }
        })
        .collect()
}

/// A [`Responder`] on a UDP socket.
#[derive(Debug)]
pub struct UdpResponder {
    socket: UdpSocket,
    logic: Responder,
}

impl UdpResponder {
    /// Runs `config` on `socket`, asking the kernel for arrival timestamps.
    pub fn new(socket: UdpSocket, config: ResponderConfig) -> Result<UdpResponder> {
        sys::enable_rx_timestamps(&socket).map_err(|e| Error::Io {
            what: "enabling receive timestamps",
            source: e,
        })?;
        // Room for a few whole trains, so a burst is not dropped while this
        // task is busy; best effort (without privileges the kernel caps it).
        let (fd, privileged) = (socket.as_raw_fd(), tern_drs::socket::privileged());
        let room = 4 * config.per_source_burst;
        let _ = tern_drs::socket::set_rcvbuf(fd, room, privileged);
        let _ = tern_drs::socket::set_sndbuf(fd, room, privileged);
        Ok(UdpResponder {
            socket,
            logic: Responder::new(config, Instant::now()),
        })
    }

    /// The counters, readable while [`run`](Self::run) goes on.
    pub fn stats(&self) -> Arc<ResponderStats> {
        self.logic.stats()
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.socket.local_addr().map_err(|e| Error::Io {
            what: "reading the responder's address",
            source: e,
        })
    }

    /// Answers probes until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        // One byte more than the largest probe, so an oversized datagram is
        // seen as such rather than cut to a valid length.
        let mut buf = vec![0u8; MAX_PACKET + 1];
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let fd = self.socket.as_raw_fd();
        let clock = Instant::now();
        loop {
            let got = tokio::select! {
                () = &mut shutdown => return Ok(()),
                _ = tick.tick() => {
                    self.logic.expire(Instant::now());
                    continue;
                }
                got = self.socket.async_io(Interest::READABLE, || sys::recv_timestamped(fd, &mut buf)) => got,
            };
            let r = match got {
                Ok(r) => r,
                Err(e) => {
                    // ICMP errors surface here (e.g. a client that left).
                    tracing::debug!("probe responder: receive failed: {e}");
                    continue;
                }
            };
            let now = Instant::now();
            if r.truncated {
                ResponderStats::bump(&self.logic.stats.malformed);
                continue;
            }
            let arrival = r
                .kernel_ns
                .unwrap_or_else(|| now.duration_since(clock).as_nanos() as u64);
            let mut first_sent = None;
            for mut out in self.logic.handle(now, r.from, &buf[..r.len], arrival) {
                if out.stamp_sent {
                    let first = *first_sent.get_or_insert_with(Instant::now);
                    let ns = u32::try_from(first.elapsed().as_nanos()).unwrap_or(u32::MAX);
                    stamp_sent(&mut out.bytes, ns);
                }
                if let Err(e) = self.socket.send_to(&out.bytes, out.to).await {
                    tracing::debug!("probe responder: reply to {} failed: {e}", out.to);
                    break;
                }
            }
        }
    }
}

/// Answers capacity probes on `socket` with the default limits until
/// `shutdown` completes (what `tern serve` runs beside its TCP listener).
pub async fn serve_udp(socket: UdpSocket, shutdown: impl Future<Output = ()>) -> Result<()> {
    UdpResponder::new(socket, ResponderConfig::default())?
        .run(shutdown)
        .await
}

#[cfg(test)]
mod tests;
