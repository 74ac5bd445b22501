//! Bottleneck capacity in both directions, from UDP packet trains to a
//! [`responder`](crate::responder).
//!
//! Each train is `train_len` packets of the path's MTU sent back to back.
//! The responder stamps their arrivals (forward dispersion) and, once the
//! last has come, answers them all back to back with replies of the same
//! size, whose arrivals here give the reverse dispersion. Trains go one at
//! a time, each after the previous one's replies, spaced so that a train
//! starts at most every `train bits / max_load_bps` seconds in each
//! direction; when too few trains were usable, a few more are sent (up to
//! `max_trains`). The estimators are in [`crate::estimate`].

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::estimate::{
    DISTURBED_SHARE, Spread, TrainOutcome, examine_train, spread, train_rate_bps,
};
use crate::responder::ResponderConfig;
use crate::wire::{Kind, MAX_PACKET, MAX_TRAIN, MIN_PACKET, Probe};
use crate::{Error, Result, sys};

/// How to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityOptions {
    /// Trains sent at least.
    pub trains: u16,
    /// Trains sent at most: after `trains`, more are sent while either
    /// direction has fewer than `min_usable` usable ones (a busy host or
    /// path spoils some).
    pub max_trains: u16,
    /// Usable trains wanted in each direction.
    pub min_usable: usize,
    /// Packets per train.
    pub train_len: u16,
    /// UDP payload per packet; `None` for the route's MTU less headers.
    pub packet_size: Option<u16>,
    /// Average rate the measurement may send in each direction, bits/s.
    pub max_load_bps: u64,
    /// How long to wait for a train's replies.
    pub reply_timeout: Duration,
    /// How far an arrival may stray from its train's line, as a share of
    /// the train's span, before the train is discarded as disturbed.
    pub max_stray: f64,
}

impl Default for CapacityOptions {
    fn default() -> CapacityOptions {
        CapacityOptions {
            trains: 10,
            max_trains: 20,
            min_usable: 5,
            train_len: 100,
            packet_size: None,
            max_load_bps: 8_000_000,
            reply_timeout: Duration::from_secs(2),
            max_stray: DISTURBED_SHARE,
        }
    }
}

impl CapacityOptions {
    fn check(&self, payload: usize) -> Result<()> {
        let bad = |m: String| Err(Error::BadOptions(m));
        if !(2..=MAX_TRAIN).contains(&self.train_len) {
            return bad(format!(
                "trains of 2 to {MAX_TRAIN} packets, not {}",
                self.train_len
            ));
        }
        if self.trains == 0 || self.max_trains < self.trains {
            return bad(format!(
                "at least one train, and at most as many as at least ({} and {})",
                self.trains, self.max_trains
            ));
        }
        if !(MIN_PACKET..=MAX_PACKET).contains(&payload) {
            return bad(format!(
                "packets of {MIN_PACKET} to {MAX_PACKET} bytes, not {payload}"
            ));
        }
        let burst = ResponderConfig::default().per_source_burst;
        if payload as u64 * u64::from(self.train_len) > burst {
            return bad(format!(
                "a train of {} × {payload} bytes is more than a responder takes at once ({burst} bytes)",
                self.train_len
            ));
        }
        if self.max_load_bps == 0 {
            return bad("a load budget of 0 bits/s".into());
        }
        if self.max_stray.is_nan() || self.max_stray <= 0.0 {
            return bad(format!("a stray limit of {}", self.max_stray));
        }
        Ok(())
    }
}

/// The capacity in one direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectionCapacity {
    /// Median of the usable trains' rates, bits/s (IP packets, as a link
    /// counts them); `None` when no train was usable.
    pub estimate_bps: Option<f64>,
    /// Spread of the usable trains' rates.
    pub spread: Option<Spread>,
    /// Trains that gave a rate.
    pub trains_used: usize,
    /// Trains discarded because packets were missing.
    pub trains_lost: usize,
    /// Trains discarded because packets came out of order.
    pub trains_reordered: usize,
    /// Trains that arrived faster than the clock could tell.
    pub trains_unresolved: usize,
    /// Trains whose arrivals were not a line (a stall, or cross traffic).
    pub trains_disturbed: usize,
    /// Every usable train's rate, bits/s, in the order sent.
    pub per_train_bps: Vec<f64>,
    /// The capacity is at least this, bits/s, and may be more: set when
    /// the estimate is only a lower bound, or when there is no estimate
    /// but the trains still show a floor. `lower_bound_reason` says why.
    pub lower_bound_bps: Option<f64>,
    /// Why the figure is only a lower bound.
    pub lower_bound_reason: Option<String>,
}

/// Usable trains whose quartiles differ by more than this factor were
/// spread by something besides the path.
pub const DISAGREE: f64 = 1.2;

/// A forward estimate above this share of the rate at which this host
/// got its trains out says more about the sender than the path.
pub const LOWER_BOUND_SHARE: f64 = 0.8;

/// The rate at which a complete, in-order train arrived from its first
/// packet to its last: however its arrivals were bunched or stalled on
/// the way, at most one packet of it left the bottleneck per
/// serialization time, and a stall only spreads them further.
fn overall_rate_bps(arrivals: &[Option<u64>], packet_bytes: usize) -> Option<f64> {
    let times: Vec<u64> = arrivals.iter().copied().collect::<Option<Vec<u64>>>()?;
    let (first, last) = (*times.first()?, *times.last()?);
    if times.windows(2).any(|w| w[1] < w[0]) || last <= first {
        return None;
    }
    Some(train_rate_bps(
        packet_bytes,
        times.len(),
        Duration::from_nanos(last - first),
    ))
}

impl DirectionCapacity {
    fn from_trains(
        trains: &[Vec<Option<u64>>],
        packet_bytes: usize,
        max_stray: f64,
    ) -> DirectionCapacity {
        let mut d = DirectionCapacity {
            estimate_bps: None,
            spread: None,
            trains_used: 0,
            trains_lost: 0,
            trains_reordered: 0,
            trains_unresolved: 0,
            trains_disturbed: 0,
            per_train_bps: Vec::new(),
            lower_bound_bps: None,
            lower_bound_reason: None,
        };
        for arrivals in trains {
            match examine_train(arrivals, max_stray) {
                TrainOutcome::Dispersion(dispersion) => {
                    d.per_train_bps
                        .push(train_rate_bps(packet_bytes, arrivals.len(), dispersion))
                }
                TrainOutcome::Lost { .. } => d.trains_lost += 1,
                TrainOutcome::Reordered => d.trains_reordered += 1,
                TrainOutcome::Unresolved => d.trains_unresolved += 1,
                TrainOutcome::Disturbed { .. } => d.trains_disturbed += 1,
            }
        }
        d.trains_used = d.per_train_bps.len();
        d.spread = spread(&d.per_train_bps);
        d.estimate_bps = d.spread.map(|s| s.median);
        if let Some(sp) = d.spread
            && d.trains_used >= 3
            && sp.p75 > DISAGREE * sp.p25
        {
            d.lower_bound_bps = Some(sp.p75);
            d.lower_bound_reason = Some(format!(
                "the usable trains disagree (quartiles {:.0} to {:.0} Mbit/s): something besides \
                 the path, a busy sender or cross traffic, spread some of them, and a train is \
                 only ever spread, so the capacity is at least the upper quartile",
                sp.p25 / 1e6,
                sp.p75 / 1e6
            ));
        }
        if d.estimate_bps.is_none() && d.trains_disturbed > 0 {
            let overall: Vec<f64> = trains
                .iter()
                .filter_map(|a| overall_rate_bps(a, packet_bytes))
                .collect();
            if let Some(s) = spread(&overall) {
                d.lower_bound_bps = Some(s.median);
                d.lower_bound_reason = Some(format!(
                    "no train arrived evenly spaced ({} of {} came in bursts or with stalls, as \
                     when a host, an emulator or a NIC batches deliveries): the rate the trains \
                     arrived at overall is a floor",
                    d.trains_disturbed,
                    trains.len()
                ));
            }
        }
        d
    }

    /// Marks an estimate close to the rate the trains left their sender
    /// at (`sender`: "this host" forward, "the responder" reverse): the
    /// path may be faster than that host could send. A floor found
    /// otherwise is kept when it is higher.
    fn bounded_by_sender(&mut self, send_bps: Option<f64>, sender: &str) {
        if let (Some(est), Some(sent)) = (self.estimate_bps, send_bps)
            && est > LOWER_BOUND_SHARE * sent
            && self.lower_bound_bps.is_none_or(|floor| floor <= est)
        {
            self.lower_bound_bps = Some(est);
            self.lower_bound_reason = Some(format!(
                "the trains left {sender} at {:.0} Mbit/s, no faster than they arrived: \
                 the path may be faster than {sender} sends",
                sent / 1e6
            ));
        }
    }
}

/// A capacity measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    /// The responder measured to.
    pub target: SocketAddr,
    /// From here to the target: what a push crosses.
    pub forward: DirectionCapacity,
    /// From the target to here: what a pull crosses.
    pub reverse: DirectionCapacity,
    /// IP packet size the rates count, bytes.
    pub packet_bytes: usize,
    /// Packets per train.
    pub train_len: u16,
    /// Trains sent.
    pub trains_sent: u16,
    /// Trains with at least one reply.
    pub trains_answered: u16,
    /// Replies carried kernel arrival times (else user-space times).
    pub kernel_timestamps: bool,
    /// Median rate at which this host got its trains out, bits/s. A
    /// forward estimate close to it is a lower bound: the train left no
    /// faster than it arrived.
    pub send_bps: Option<f64>,
    /// Median rate at which the responder got its replies out, bits/s,
    /// when it said (it stamps each reply as it sends it): the same
    /// ceiling for the reverse estimate.
    pub responder_send_bps: Option<f64>,
    /// IP bytes sent in each direction.
    pub bytes_each_way: u64,
    /// Average rate sent in each direction over the measurement, bits/s.
    pub load_bps: f64,
    /// How long the measurement took, s.
    pub elapsed_s: f64,
}

/// One train's arrivals: forward offsets (responder clock) and reverse
/// arrival times (this host's clock), by seq.
struct TrainResult {
    forward: Vec<Option<u64>>,
    reverse: Vec<Option<u64>>,
    replies: usize,
    kernel_timestamps: bool,
    refused: bool,
    /// From the first send to the last returning.
    send_span: Duration,
    /// From the responder sending its first reply to its last, when every
    /// reply came back stamped.
    reply_span: Option<Duration>,
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

async fn open_socket(target: SocketAddr, train_bytes: u64) -> Result<UdpSocket> {
    let local: SocketAddr = match target {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local)
        .await
        .map_err(io("binding a UDP socket"))?;
    socket
        .connect(target)
        .await
        .map_err(io("connecting the UDP socket"))?;
    // Room for a whole train each way (the kernel counts overheads too);
    // best effort: without privileges the kernel caps it.
    let fd = socket.as_raw_fd();
    let room = (4 * train_bytes).max(1 << 20);
    let privileged = tern_drs::socket::privileged();
    let _ = tern_drs::socket::set_sndbuf(fd, room, privileged);
    let _ = tern_drs::socket::set_rcvbuf(fd, room, privileged);
    sys::enable_rx_timestamps(&socket).map_err(io("enabling receive timestamps"))?;
    Ok(socket)
}

fn ip_header_bytes(target: SocketAddr) -> usize {
    match target {
        SocketAddr::V4(_) => 20 + 8,
        SocketAddr::V6(_) => 40 + 8,
    }
}

/// Measures the bottleneck capacity to and from the responder at `target`.
pub async fn capacity(target: SocketAddr, opts: &CapacityOptions) -> Result<Capacity> {
    let headers = ip_header_bytes(target);
    let probe = open_socket(target, 0).await?;
    let payload = match opts.packet_size {
        Some(n) => usize::from(n),
        None => {
            let mtu = sys::path_mtu(&probe, target.is_ipv6()).unwrap_or(1500) as usize;
            (mtu.saturating_sub(headers)).min(MAX_PACKET)
        }
    };
    opts.check(payload)?;
    drop(probe);
    let packet_bytes = payload + headers;
    let train_bytes = (packet_bytes * usize::from(opts.train_len)) as u64;
    let socket = open_socket(target, train_bytes).await?;
    let nonce: u64 = rand::random();
    let min_period = Duration::from_secs_f64(train_bytes as f64 * 8.0 / opts.max_load_bps as f64);
    let started = Instant::now();
    let (mut forward, mut reverse) = (Vec::new(), Vec::new());
    let (mut sent, mut answered, mut kernel) = (0u16, 0u16, true);
    let mut train_started = started;
    let usable = |arrivals: &[Option<u64>]| {
        matches!(
            examine_train(arrivals, opts.max_stray),
            TrainOutcome::Dispersion(_)
        )
    };
    let (mut usable_forward, mut usable_reverse) = (0, 0);
    let (mut send_rates, mut reply_rates) = (Vec::new(), Vec::new());
    for train in 0u32.. {
        // Every train owns a whole period, the last one too: so the
        // average over the measurement never exceeds the budget.
        if train > 0 {
            tokio::time::sleep_until((train_started + min_period).into()).await;
        }
        let enough = usable_forward.min(usable_reverse) >= opts.min_usable;
        if sent >= opts.max_trains || (sent >= opts.trains && enough) {
            break;
        }
        train_started = Instant::now();
        let r = run_train(&socket, nonce, train, payload as u16, opts).await?;
        sent += 1;
        if r.replies > 0 {
            answered += 1;
            kernel &= r.kernel_timestamps;
        }
        send_rates.push(train_rate_bps(
            packet_bytes,
            usize::from(opts.train_len),
            r.send_span,
        ));
        if let Some(span) = r.reply_span {
            reply_rates.push(train_rate_bps(
                packet_bytes,
                usize::from(opts.train_len),
                span,
            ));
        }
        usable_forward += usize::from(usable(&r.forward));
        usable_reverse += usize::from(usable(&r.reverse));
        forward.push(r.forward);
        reverse.push(r.reverse);
        // Nothing back from the first two trains (or a port that refuses):
        // no responder, and waiting for the rest would only waste time.
        if answered == 0 && (r.refused || sent >= 2) {
            return Err(Error::NoResponder {
                addr: target,
                waited: started.elapsed(),
            });
        }
    }
    let elapsed = started.elapsed();
    let bytes_each_way = train_bytes * u64::from(sent);
    let send_bps = spread(&send_rates).map(|s| s.median);
    let responder_send_bps = spread(&reply_rates).map(|s| s.median);
    let mut forward = DirectionCapacity::from_trains(&forward, packet_bytes, opts.max_stray);
    forward.bounded_by_sender(send_bps, "this host");
    let mut reverse = DirectionCapacity::from_trains(&reverse, packet_bytes, opts.max_stray);
    reverse.bounded_by_sender(responder_send_bps, "the responder");
    Ok(Capacity {
        target,
        forward,
        reverse,
        packet_bytes,
        train_len: opts.train_len,
        trains_sent: sent,
        trains_answered: answered,
        kernel_timestamps: kernel && answered > 0,
        bytes_each_way,
        send_bps,
        responder_send_bps,
        load_bps: bytes_each_way as f64 * 8.0 / elapsed.as_secs_f64().max(1e-9),
        elapsed_s: elapsed.as_secs_f64(),
    })
}

async fn run_train(
    socket: &UdpSocket,
    nonce: u64,
    train: u32,
    payload: u16,
    opts: &CapacityOptions,
) -> Result<TrainResult> {
    let n = opts.train_len;
    let packets: Vec<Vec<u8>> = (0..n)
        .map(|seq| Probe::request(nonce, train, seq, n, payload).encode())
        .collect();
    let mut r = TrainResult {
        forward: vec![None; usize::from(n)],
        reverse: vec![None; usize::from(n)],
        replies: 0,
        kernel_timestamps: true,
        refused: false,
        send_span: Duration::ZERO,
        reply_span: None,
    };
    let mut last_sent_ns = 0u32;
    let clock = Instant::now();
    for p in &packets {
        match socket.send(p).await {
            Ok(_) => {}
            // An ICMP error from an earlier datagram surfaces on a send.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                r.refused = true;
                return Ok(r);
            }
            Err(e) => return Err(io("sending a probe train")(e)),
        }
    }
    r.send_span = clock.elapsed();
    let deadline = tokio::time::Instant::now() + opts.reply_timeout;
    let fd = socket.as_raw_fd();
    let mut buf = vec![0u8; MAX_PACKET + 1];
    let mut expected = None;
    while expected != Some(r.replies) {
        let got = tokio::time::timeout_at(
            deadline,
            socket.async_io(Interest::READABLE, || sys::recv_timestamped(fd, &mut buf)),
        )
        .await;
        let got = match got {
            Err(_) => break,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                r.refused = true;
                break;
            }
            Ok(Err(e)) => return Err(io("receiving probe replies")(e)),
            Ok(Ok(got)) => got,
        };
        let reply = match Probe::decode(&buf[..got.len]) {
            Ok(p) if !got.truncated && p.kind == Kind::Reply => p,
            _ => continue,
        };
        // Replies to an earlier, timed-out train, or to someone else.
        if reply.nonce != nonce || reply.train != train || reply.count != n || reply.len != payload
        {
            continue;
        }
        let seq = usize::from(reply.seq);
        if r.forward[seq].is_some() {
            continue;
        }
        r.kernel_timestamps &= got.kernel_ns.is_some();
        let arrival = got
            .kernel_ns
            .unwrap_or_else(|| clock.elapsed().as_nanos() as u64);
        r.forward[seq] = Some(reply.offset_ns);
        r.reverse[seq] = Some(arrival);
        r.replies += 1;
        last_sent_ns = last_sent_ns.max(reply.sent_ns);
        expected = Some(usize::from(reply.received));
    }
    if r.replies == usize::from(n) && last_sent_ns > 0 {
        r.reply_span = Some(Duration::from_nanos(u64::from(last_sent_ns)));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five trains of ten 1000-byte packets arriving `gap_us` apart.
    fn even_trains(gap_us: u64) -> Vec<Vec<Option<u64>>> {
        vec![(0..10).map(|i| Some(i * gap_us * 1000)).collect(); 5]
    }

    #[test]
    fn an_estimate_near_the_senders_rate_is_a_floor_named_for_that_sender() {
        // 8 kbit every 10 us: 800 Mbit/s.
        let mut d = DirectionCapacity::from_trains(&even_trains(10), 1000, 0.5);
        let est = d.estimate_bps.expect("even trains are usable");
        assert!((est - 800e6).abs() < 1e6, "{est}");
        d.bounded_by_sender(Some(2.0 * est), "the responder");
        assert_eq!(
            d.lower_bound_bps, None,
            "a sender twice as fast bounds nothing"
        );
        d.bounded_by_sender(Some(est / 0.9), "the responder");
        assert_eq!(d.lower_bound_bps, Some(est));
        let why = d.lower_bound_reason.clone().expect("a reason");
        assert!(why.contains("left the responder at 889 Mbit/s"), "{why}");
        d.bounded_by_sender(None, "this host");
        assert_eq!(
            d.lower_bound_bps,
            Some(est),
            "an unknown rate changes nothing"
        );
    }

    #[test]
    fn a_higher_floor_found_otherwise_is_kept() {
        let mut d = DirectionCapacity::from_trains(&even_trains(10), 1000, 0.5);
        d.lower_bound_bps = Some(1e9);
        d.lower_bound_reason = Some("quartiles".into());
        d.bounded_by_sender(d.estimate_bps, "this host");
        assert_eq!(d.lower_bound_bps, Some(1e9));
        assert_eq!(d.lower_bound_reason.as_deref(), Some("quartiles"));
    }
}
