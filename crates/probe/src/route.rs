//! The routers on the way to a host, without privileges, the way
//! `tracepath` finds them: UDP datagrams with a growing TTL (hop limit)
//! and the ICMP errors they cause, read from the socket's error queue
//! (`IP_RECVERR`/`IPV6_RECVERR`, `recvmsg(MSG_ERRQUEUE)`).
//!
//! A probe whose TTL runs out at a router comes back as ICMP time exceeded,
//! and the kernel names that router (`SO_EE_OFFENDER`). A probe that gets
//! to the destination finds no one on its high UDP port and comes back as
//! port unreachable from the destination itself (or, where something does
//! listen, as a reply): the route is complete at that TTL. Raw sockets, and
//! so privileges, are never needed.
//!
//! Every probe has its own connected socket, so the kernel hands each error
//! to the socket whose datagram caused it: answers are told apart by the
//! socket (its local port), never by the order they arrive in, and the
//! payload the ICMP error quotes, when it quotes any, is checked against
//! the probe's. The probes of up to [`RouteOptions::parallel_hops`] TTLs are
//! in flight at once; hops are concluded in TTL order.
//!
//! Parsing the error queue's control data (`parse_extended_err`), building
//! a [`Hop`] from its probes' answers and deciding which TTL to probe next
//! and when to stop are pure and tested without a network; only
//! [`route()`] and the probe task do I/O. `docs/PROBES.md` ("Route")
//! describes the method and its limits.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::task::JoinSet;

use crate::{Error, Result, sys};

/// First destination port of the default probes, as in traceroute: each
/// probe goes to the next port up (33434, 33435, ...), a range where
/// nothing usually listens.
pub const BASE_PORT: u16 = 33434;

/// Consecutive hops without an answer after which no more TTLs are probed
/// (the probes already in flight are still waited for): past a firewall
/// that drops them, probes of higher TTLs would only wait out their
/// timeouts too.
pub const SILENT_HOPS: u8 = 5;

/// Most probes per hop.
pub const MAX_PROBES_PER_HOP: u8 = 10;

/// Bytes of UDP payload in a probe.
const PROBE_BYTES: usize = 40;

/// The name of the method, for reports.
const METHOD: &str = "udp-recverr";

/// How to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteOptions {
    /// Highest TTL (IPv6 hop limit) probed.
    pub max_hops: u8,
    /// Probes sent with each TTL (1 to [`MAX_PROBES_PER_HOP`]).
    pub probes_per_hop: u8,
    /// How long a probe waits for its answer.
    pub reply_timeout: Duration,
    /// Destination UDP port of every probe. `None`: like traceroute, probe
    /// `i` (counting from 0, TTL by TTL) goes to [`BASE_PORT`] + `i`, the
    /// range starting just above the target's own port instead when it
    /// would contain it. Never the target's port itself: a tern daemon's
    /// UDP responder there drops unknown packets, so the destination would
    /// never answer.
    pub port: Option<u16>,
    /// TTLs probed at once (1: one after the other, like tracepath).
    pub parallel_hops: u8,
}

impl Default for RouteOptions {
    fn default() -> RouteOptions {
        RouteOptions {
            max_hops: 30,
            probes_per_hop: 3,
            reply_timeout: Duration::from_secs(1),
            port: None,
            parallel_hops: 4,
        }
    }
}

impl RouteOptions {
    fn check(&self, target: SocketAddr) -> Result<()> {
        let bad = |m: String| Err(Error::BadOptions(m));
        if self.max_hops == 0 {
            return bad("a route of at most 0 hops".into());
        }
        if !(1..=MAX_PROBES_PER_HOP).contains(&self.probes_per_hop) {
            return bad(format!(
                "1 to {MAX_PROBES_PER_HOP} probes per hop, not {}",
                self.probes_per_hop
            ));
        }
        if self.reply_timeout.is_zero() {
            return bad("a reply timeout of 0".into());
        }
        if self.parallel_hops == 0 {
            return bad("0 hops probed at once".into());
        }
        match self.port {
            Some(0) => bad("probes to port 0".into()),
            Some(p) if p == target.port() => bad(format!(
                "probes to the target's own port {p}: its daemon answers no traceroute probe"
            )),
            _ => Ok(()),
        }
    }

    /// The destination port of probe `probe` (from 0) of TTL `ttl` (from 1).
    fn dest_port(&self, target_port: u16, ttl: u8, probe: u8) -> u16 {
        if let Some(p) = self.port {
            return p;
        }
        let n = u16::from(self.probes_per_hop);
        let count = u16::from(self.max_hops) * n;
        // At most 255 × 10 ports: from either base they stay below 65535.
        let base = if (BASE_PORT..BASE_PORT + count).contains(&target_port) {
            target_port + 1
        } else {
            BASE_PORT
        };
        base + (u16::from(ttl) - 1) * n + u16::from(probe)
    }
}

/// One TTL's answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hop {
    /// The TTL (hop limit) its probes were sent with, from 1.
    pub ttl: u8,
    /// Who answered: the router whose ICMP time exceeded came back, or the
    /// destination. The first answer in the order the probes were sent;
    /// `None` when no probe was answered ("*").
    pub addr: Option<IpAddr>,
    /// Other addresses that answered probes of this TTL (ECMP: parallel
    /// links or routers share the hop), in the order of the probes.
    pub alternates: Vec<IpAddr>,
    /// Round-trip time of each answered probe, ms, in the order sent.
    pub rtt_ms: Vec<f64>,
    /// A probe got to the destination: port unreachable (or a reply) came
    /// back, or any destination unreachable from the target's address.
    pub reached: bool,
    /// An ICMP destination unreachable other than "port" ("net", "host",
    /// "protocol", "prohibited", "other"): a router (or the target) refused
    /// the probe, and the trace ends at this hop.
    pub unreachable: Option<&'static str>,
}

/// A traced route.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    /// Where it was traced to (the port is the target's, not the probes').
    pub target: SocketAddr,
    /// One per TTL probed, from 1, up to the destination, a refusal, the
    /// last TTL allowed, or the end of a silent run.
    pub hops: Vec<Hop>,
    /// The last hop is the destination.
    pub reached: bool,
    /// The trace ended early, after [`SILENT_HOPS`] (or more) hops in a row
    /// gave no answer, before reaching the destination or `max_hops`.
    pub gave_up: bool,
    /// How it was traced: `"udp-recverr"`.
    pub method: &'static str,
    /// How long it took, s.
    pub elapsed_s: f64,
}

impl Route {
    /// The hop addresses as a comparable path signature: Some(addr) per
    /// answered hop, "*" gaps kept only where a hop never answered; used to
    /// detect route changes.
    ///
    /// Hops that never answered at the end (a silent destination, or the
    /// run that ended the trace) are left out: they are not gaps, and how
    /// many of them were probed depends on timing; so are silent hops just
    /// before a destination that answered (see below). Alternates are left out
    /// too, so a hop behind per-flow ECMP may change its address from one
    /// trace to the next without the route changing.
    pub fn signature(&self) -> Vec<String> {
        let answered = self
            .hops
            .iter()
            .rposition(|h| h.addr.is_some())
            .map_or(0, |i| i + 1);
        let mut sig: Vec<String> = self.hops[..answered]
            .iter()
            .map(|h| h.addr.map_or_else(|| "*".to_string(), |a| a.to_string()))
            .collect();
        // Silent hops just before the destination were most likely the
        // destination itself, its ICMP rate limit spent (Linux answers 6 at
        // once, then one a second): kept, they would differ from run to run
        // and look like route changes.
        if self.reached && sig.len() > 1 {
            let last = sig.pop().expect("more than one");
            while sig.last().is_some_and(|h| h == "*") {
                sig.pop();
            }
            sig.push(last);
        }
        sig
    }
}

/// Kinds of ICMP destination unreachable, IPv4 and IPv6 alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreachable {
    /// Nothing listens on the port: the probe got to the destination.
    Port,
    /// No route to the network.
    Net,
    /// The host does not answer (ARP/ND failed) or its address is unknown.
    Host,
    /// UDP is not spoken there (IPv4 only).
    Protocol,
    /// Administratively prohibited: a filter.
    Prohibited,
    /// Any other code.
    Other,
}

impl Unreachable {
    fn from_icmp4(code: u8) -> Unreachable {
        match code {
            0 | 6 | 11 => Unreachable::Net,
            1 | 7 | 12 => Unreachable::Host,
            2 => Unreachable::Protocol,
            3 => Unreachable::Port,
            9 | 10 | 13 => Unreachable::Prohibited,
            _ => Unreachable::Other,
        }
    }

    fn from_icmp6(code: u8) -> Unreachable {
        match code {
            0 => Unreachable::Net,
            1 | 5 | 6 => Unreachable::Prohibited,
            3 => Unreachable::Host,
            4 => Unreachable::Port,
            _ => Unreachable::Other,
        }
    }

    /// A short name for reports.
    fn label(self) -> &'static str {
        match self {
            Unreachable::Port => "port",
            Unreachable::Net => "net",
            Unreachable::Host => "host",
            Unreachable::Protocol => "protocol",
            Unreachable::Prohibited => "prohibited",
            Unreachable::Other => "other",
        }
    }
}

/// What came back for one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// ICMP time exceeded from a router on the way.
    TimeExceeded(IpAddr),
    /// ICMP destination unreachable, and from whom.
    Unreachable(IpAddr, Unreachable),
    /// A datagram from the destination: something listens on the port and
    /// answered.
    Reply(IpAddr),
}

impl Answer {
    /// Who answered.
    fn from(self) -> IpAddr {
        match self {
            Answer::TimeExceeded(a) | Answer::Unreachable(a, _) | Answer::Reply(a) => a,
        }
    }

    /// No probe with a higher TTL can tell more: the destination answered,
    /// or someone said it cannot be reached.
    fn ends_route(self) -> bool {
        !matches!(self, Answer::TimeExceeded(_))
    }
}

/// A probe's answer and its round-trip time; `None` when none came in
/// time.
type Answered = Option<(Answer, Duration)>;

const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
const ICMP6_DST_UNREACH: u8 = 1;
const ICMP6_TIME_EXCEEDED: u8 = 3;
/// `sizeof(struct sock_extended_err)`: the offender's address follows it.
const EXTENDED_ERR_BYTES: usize = 16;

/// Reads an error-queue control message: `level` and `kind` its
/// `cmsg_level` and `cmsg_type`, `data` its payload, a `sock_extended_err`
/// (errno, then origin, ICMP type and code at bytes 4 to 6) and the
/// offender's `sockaddr_in`/`sockaddr_in6` after its 16 bytes.
///
/// `None` for anything that is not an ICMP time exceeded or destination
/// unreachable with a known sender: other control messages, local errors
/// (`SO_EE_ORIGIN_LOCAL`: a neighbour that did not resolve, a datagram
/// over the MTU), other ICMP types, short data.
fn parse_extended_err(level: i32, kind: i32, data: &[u8]) -> Option<Answer> {
    let ours = (level == libc::IPPROTO_IP && kind == libc::IP_RECVERR)
        || (level == libc::IPPROTO_IPV6 && kind == libc::IPV6_RECVERR);
    if !ours || data.len() < EXTENDED_ERR_BYTES {
        return None;
    }
    let (origin, icmp_type, code) = (data[4], data[5], data[6]);
    let from = parse_sockaddr(&data[EXTENDED_ERR_BYTES..])?;
    match (origin, icmp_type) {
        (libc::SO_EE_ORIGIN_ICMP, ICMP_TIME_EXCEEDED)
        | (libc::SO_EE_ORIGIN_ICMP6, ICMP6_TIME_EXCEEDED) => Some(Answer::TimeExceeded(from)),
        (libc::SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH) => {
            Some(Answer::Unreachable(from, Unreachable::from_icmp4(code)))
        }
        (libc::SO_EE_ORIGIN_ICMP6, ICMP6_DST_UNREACH) => {
            Some(Answer::Unreachable(from, Unreachable::from_icmp6(code)))
        }
        _ => None,
    }
}

/// The address in a `sockaddr_in` or `sockaddr_in6` given as bytes
/// (family in native byte order, address in network order); `None` for
/// `AF_UNSPEC` (the kernel did not know the offender) or short data.
fn parse_sockaddr(b: &[u8]) -> Option<IpAddr> {
    let family = i32::from(u16::from_ne_bytes([*b.first()?, *b.get(1)?]));
    match family {
        libc::AF_INET => {
            let a: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(IpAddr::from(a))
        }
        // An IPv6 socket names an IPv4 sender by its mapped address.
        libc::AF_INET6 => {
            let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            Some(unmapped(IpAddr::from(a)))
        }
        _ => None,
    }
}

/// A probe's payload: "TRNT", its TTL, its number within the hop, two
/// zero bytes, the trace's nonce (big-endian), zeros to [`PROBE_BYTES`].
fn probe_payload(nonce: u64, ttl: u8, probe: u8) -> [u8; PROBE_BYTES] {
    let mut p = [0u8; PROBE_BYTES];
    p[..4].copy_from_slice(b"TRNT");
    p[4] = ttl;
    p[5] = probe;
    p[8..16].copy_from_slice(&nonce.to_be_bytes());
    p
}

/// Whether the payload an ICMP error quoted can be the probe's: its start
/// (RFC 792 routers quote none of it, RFC 1812 ones and Linux most or
/// all). A mismatch is an error about some earlier datagram of a socket
/// that had the same local port.
fn quote_matches(sent: &[u8], quoted: &[u8]) -> bool {
    sent.starts_with(quoted)
}

/// Builds the hop of TTL `ttl` from its probes' answers, in the order the
/// probes were sent (`None`: no answer in time), each with its round-trip
/// time. `dest` is the target's address.
fn assemble_hop(ttl: u8, answers: &[Answered], dest: IpAddr) -> Hop {
    let mut addrs: Vec<IpAddr> = Vec::new();
    let mut hop = Hop {
        ttl,
        addr: None,
        alternates: Vec::new(),
        rtt_ms: Vec::new(),
        reached: false,
        unreachable: None,
    };
    for &(answer, rtt) in answers.iter().flatten() {
        let from = answer.from();
        if !addrs.contains(&from) {
            addrs.push(from);
        }
        hop.rtt_ms.push(rtt.as_secs_f64() * 1e3);
        match answer {
            Answer::TimeExceeded(_) => {}
            Answer::Reply(_) => hop.reached = true,
            // Only the destination's stack says "port": from another
            // address it is a firewall answering in its name, or the
            // destination's other address.
            Answer::Unreachable(_, Unreachable::Port) => hop.reached = true,
            Answer::Unreachable(from, kind) => {
                hop.reached |= from == dest;
                hop.unreachable.get_or_insert(kind.label());
            }
        }
    }
    let mut addrs = addrs.into_iter();
    hop.addr = addrs.next();
    hop.alternates = addrs.collect();
    hop
}

/// Which TTL to probe next and when the trace is over, from the hops
/// concluded so far (in TTL order). TTLs are `u16` here so that 255 + 1
/// does not wrap.
#[derive(Debug)]
struct Plan {
    /// Highest TTL worth probing: `max_hops`, or the first that ended the
    /// route.
    limit: u16,
    window: u16,
    /// The next TTL to launch.
    next: u16,
    hops: Vec<Hop>,
    /// Concluded hops without an answer, the last ones in a row.
    silent_run: u8,
}

impl Plan {
    fn new(max_hops: u8, window: u8) -> Plan {
        Plan {
            limit: u16::from(max_hops),
            window: u16::from(window.max(1)),
            next: 1,
            hops: Vec::new(),
            silent_run: 0,
        }
    }

    /// The lowest TTL not yet concluded.
    fn frontier(&self) -> u16 {
        self.hops.len() as u16 + 1
    }

    /// A TTL to launch now, if any: within the limit and the window above
    /// the frontier, and not after a silent run.
    fn launch(&mut self) -> Option<u8> {
        if self.next > self.limit
            || self.next >= self.frontier() + self.window
            || self.silent_run >= SILENT_HOPS
        {
            return None;
        }
        self.next += 1;
        Some((self.next - 1) as u8)
    }

    /// A probe of TTL `ttl` got an answer that ends the route: probe no
    /// higher.
    fn cap(&mut self, ttl: u8) {
        self.limit = self.limit.min(u16::from(ttl));
    }

    /// Concludes the frontier's hop.
    fn conclude(&mut self, hop: Hop) {
        debug_assert_eq!(u16::from(hop.ttl), self.frontier());
        if hop.reached || hop.unreachable.is_some() {
            self.cap(hop.ttl);
        }
        self.silent_run = if hop.addr.is_none() {
            self.silent_run.saturating_add(1)
        } else {
            0
        };
        self.hops.push(hop);
    }

    /// Nothing more to probe or wait for. An answer from a TTL in flight
    /// after a silent run breaks the run, and probing resumes.
    fn done(&self) -> bool {
        self.frontier() > self.limit
            || (self.silent_run >= SILENT_HOPS && self.frontier() >= self.next)
    }

    /// Ended by a silent run before the limit.
    fn gave_up(&self) -> bool {
        self.silent_run >= SILENT_HOPS && self.frontier() <= self.limit
    }
}

/// What one probe task reports.
#[derive(Debug)]
struct Outcome {
    ttl: u8,
    probe: u8,
    answer: Answered,
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

/// An IPv4-mapped IPv6 address is traced as IPv4, which it is on the wire.
fn unmapped(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        a => a,
    }
}

/// Traces the route to `target`'s address with UDP probes and ICMP errors,
/// without privileges. `target`'s port is the daemon's, which probes never
/// use (see [`RouteOptions::port`]).
///
/// Errors: `BadOptions`; `Connect` when there is no route to the target at
/// all; `Io` when a socket cannot be made. Hops that never answer are not
/// errors: they are `*` in the result.
pub async fn route(target: SocketAddr, opts: &RouteOptions) -> Result<Route> {
    opts.check(target)?;
    let dest = unmapped(target.ip());
    let nonce: u64 = rand::random();
    let started = Instant::now();
    let n = usize::from(opts.probes_per_hop);
    let mut plan = Plan::new(opts.max_hops, opts.parallel_hops);
    // Per TTL in flight (index TTL - 1), per probe: None until its task
    // reports.
    let mut flights: Vec<Vec<Option<Answered>>> = Vec::new();
    let mut tasks = JoinSet::new();
    loop {
        while let Some(ttl) = plan.launch() {
            for probe in 0..opts.probes_per_hop {
                let to = SocketAddr::new(dest, opts.dest_port(target.port(), ttl, probe));
                tasks.spawn(run_probe(to, target, ttl, probe, nonce, opts.reply_timeout));
            }
            flights.push(vec![None; n]);
        }
        while let Some(answers) = flights.get(usize::from(plan.frontier()) - 1) {
            if answers.iter().any(Option::is_none) {
                break;
            }
            let ttl = plan.frontier() as u8;
            let answers: Vec<_> = answers.iter().map(|a| a.flatten()).collect();
            plan.conclude(assemble_hop(ttl, &answers, dest));
            if plan.done() {
                break;
            }
        }
        if plan.done() {
            break;
        }
        let outcome = match tasks.join_next().await {
            Some(Ok(outcome)) => outcome?,
            Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Some(Err(e)) => return Err(io("waiting for a probe")(std::io::Error::other(e))),
            None => unreachable!("a TTL in flight has its probes' tasks"),
        };
        if outcome.answer.is_some_and(|(a, _)| a.ends_route()) {
            plan.cap(outcome.ttl);
        }
        flights[usize::from(outcome.ttl) - 1][usize::from(outcome.probe)] = Some(outcome.answer);
    }
    // Probes of higher TTLs still in flight are not needed.
    tasks.abort_all();
    let gave_up = plan.gave_up();
    let hops = plan.hops;
    Ok(Route {
        target,
        reached: hops.last().is_some_and(|h| h.reached),
        hops,
        gave_up,
        method: METHOD,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// Sends one probe to `to` with TTL `ttl` and waits up to `timeout` for
/// what comes back on its own socket.
async fn run_probe(
    to: SocketAddr,
    target: SocketAddr,
    ttl: u8,
    probe: u8,
    nonce: u64,
    timeout: Duration,
) -> Result<Outcome> {
    let socket = open_probe_socket(to, target, ttl)?;
    let payload = probe_payload(nonce, ttl, probe);
    let sent = Instant::now();
    let deadline = tokio::time::Instant::from_std(sent) + timeout;
    let mut outcome = Outcome {
        ttl,
        probe,
        answer: None,
    };
    match socket.send(&payload).await {
        Ok(_) => {}
        // The kernel knows at once that the route ends here (a local
        // unreachable or prohibit route): no network answer will come.
        Err(e) if is_path_error(&e) => return Ok(outcome),
        Err(e) => return Err(io("sending a traceroute probe")(e)),
    }
    let fd = socket.as_raw_fd();
    let mut buf = [0u8; 512];
    loop {
        let read = socket.async_io(Interest::READABLE | Interest::ERROR, || {
            read_answer(fd, &payload, &mut buf)
        });
        match tokio::time::timeout_at(deadline, read).await {
            Err(_) => return Ok(outcome),
            Ok(Ok(Some(answer))) => {
                outcome.answer = Some((answer, sent.elapsed()));
                return Ok(outcome);
            }
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => return Err(io("reading a traceroute probe's answer")(e)),
        }
    }
}

fn open_probe_socket(to: SocketAddr, target: SocketAddr, ttl: u8) -> Result<UdpSocket> {
    let v6 = to.is_ipv6();
    let socket = Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))
        .map_err(io("creating a UDP socket"))?;
    socket
        .set_nonblocking(true)
        .map_err(io("making a UDP socket non-blocking"))?;
    if v6 {
        socket.set_unicast_hops_v6(u32::from(ttl))
    } else {
        socket.set_ttl(u32::from(ttl))
    }
    .map_err(io("setting a probe's TTL"))?;
    sys::enable_recv_err(&socket, v6).map_err(io("enabling IP_RECVERR"))?;
    // Connected: the kernel hands this socket the errors about its own
    // datagrams only, and replies from the destination only.
    socket
        .connect(&to.into())
        .map_err(|source| Error::Connect {
            addr: target,
            source,
        })?;
    UdpSocket::from_std(socket.into()).map_err(io("registering a UDP socket"))
}

/// Errors that say a datagram cannot get through (pending on the socket,
/// or returned by a send), as opposed to errors in this program.
fn is_path_error(e: &std::io::Error) -> bool {
    !matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EFAULT | libc::EINVAL | libc::ENOTSOCK | libc::ENOMEM) | None
    ) && e.kind() != std::io::ErrorKind::WouldBlock
}

/// One non-blocking read: an error-queue message first, then a reply.
/// `Ok(None)`: something was read that is not this probe's answer.
fn read_answer(
    fd: std::os::fd::RawFd,
    payload: &[u8],
    buf: &mut [u8],
) -> std::io::Result<Option<Answer>> {
    match sys::recv_error(fd, buf) {
        Ok(q) => {
            if !quote_matches(payload, &buf[..q.len.min(buf.len())]) {
                return Ok(None);
            }
            let answer = q
                .controls
                .iter()
                .find_map(|c| parse_extended_err(c.level, c.kind, &c.data));
            return Ok(answer);
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    match sys::recv_timestamped(fd, buf) {
        Ok(r) => Ok(Some(Answer::Reply(unmapped(r.from.ip())))),
        // The error just read from the queue, reported once more as the
        // socket's pending error.
        Err(e) if is_path_error(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
