//! Loss, delay variation and reordering in each direction, from a paced
//! stream of UDP echoes to a [`responder`](crate::responder), in the
//! manner of TWAMP.
//!
//! Every echo is answered at once with the number of echoes of this
//! measurement the responder has seen so far and the arrival time of this
//! one (its clock, relative to the first). So a reply that comes back
//! tells both directions apart: the responder's count against the echoes
//! sent is the forward loss, the replies it sent against those that
//! arrived here is the reverse loss. Delay variation needs no synchronised
//! clocks: one-way delays measured across two clocks are off by a
//! constant, which their differences cancel.
//!
//! [`analyse`] is the arithmetic, pure and tested on made-up exchanges;
//! [`loss`] sends and receives.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::wire::{ECHO_MIN, Echo, MAX_PACKET};
use crate::{Error, Result, sys};

/// How to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct LossOptions {
    /// Echoes to send.
    pub count: u32,
    /// Echoes per second (sent in small bursts every millisecond).
    pub rate_pps: u32,
    /// UDP payload per echo, bytes.
    pub packet_size: u16,
    /// How long to wait for replies after the last echo.
    pub reply_timeout: Duration,
}

impl Default for LossOptions {
    /// 1000 echoes at 200 per second: 5 s at about 110 kbit/s each way.
    /// One run tells 1 % loss within about ±0.3 points; the archive's
    /// history narrows it (for ±0.05 points at 1 %, some 400 000 echoes).
    fn default() -> LossOptions {
        LossOptions {
            count: 1000,
            rate_pps: 200,
            packet_size: 64,
            reply_timeout: Duration::from_secs(1),
        }
    }
}

impl LossOptions {
    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::BadOptions(m));
        if self.count < 2 {
            return bad(format!("at least 2 echoes, not {}", self.count));
        }
        if self.rate_pps == 0 || self.rate_pps > 100_000 {
            return bad(format!("1 to 100000 echoes/s, not {}", self.rate_pps));
        }
        if !(ECHO_MIN..=MAX_PACKET).contains(&usize::from(self.packet_size)) {
            return bad(format!(
                "echoes of {ECHO_MIN} to {MAX_PACKET} bytes, not {}",
                self.packet_size
            ));
        }
        Ok(())
    }

    /// Bits/s each way, IP headers included.
    pub fn load_bps(&self, ip_headers: usize) -> u64 {
        let bits = (usize::from(self.packet_size) + ip_headers) as u64 * 8;
        bits * u64::from(self.rate_pps)
    }
}

/// One direction's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectionLoss {
    /// Packets whose fate is known in this direction.
    pub packets: u64,
    /// Of them, lost.
    pub lost: u64,
    /// `lost / packets`, percent.
    pub loss_pct: f64,
    /// Packets that arrived after one sent later.
    pub reordered: u64,
    /// Packets that arrived twice.
    pub duplicates: u64,
    /// Mean absolute difference of consecutive packets' one-way delays
    /// (RFC 3550's jitter without its smoothing), ms.
    pub ipdv_ms: Option<f64>,
    /// 95th percentile of one-way delay above the smallest (RFC 5481's
    /// packet delay variation), ms.
    pub pdv_p95_ms: Option<f64>,
}

/// A loss measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Loss {
    /// The responder measured to.
    pub target: SocketAddr,
    /// From here to the target.
    pub forward: DirectionLoss,
    /// From the target to here.
    pub reverse: DirectionLoss,
    /// Echoes sent.
    pub sent: u32,
    /// Reply datagrams received.
    pub replies: u32,
    /// Echoes after the last one answered: lost one way or the other, no
    /// reply says which, so they are in neither direction's figures. Many
    /// of them mean the path went away during the run.
    pub unresolved: u32,
    /// IP packet size, bytes.
    pub packet_bytes: usize,
    /// Echoes per second asked for.
    pub rate_pps: u32,
    /// Smallest and median round-trip time of the echoes, ms.
    pub rtt_min_ms: Option<f64>,
    /// Median round-trip time, ms.
    pub rtt_median_ms: Option<f64>,
    /// Replies carried kernel arrival times (else user-space times).
    pub kernel_timestamps: bool,
    /// How long the measurement took, s.
    pub elapsed_s: f64,
}

/// One reply as it arrived, for [`analyse`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplyRecord {
    /// The echo it answers.
    pub seq: u32,
    /// The responder's count when it answered.
    pub received: u32,
    /// The echo's arrival at the responder, ns after the first's.
    pub offset_ns: u64,
    /// Its arrival here, ns on this host's clock (the same clock as the
    /// send times).
    pub arrival_ns: u64,
}

/// What [`analyse`] finds.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// From here to the responder.
    pub forward: DirectionLoss,
    /// Back.
    pub reverse: DirectionLoss,
    /// Round-trip times of the first reply to each echo, ms, in seq order.
    pub rtts_ms: Vec<f64>,
}

/// Splits losses, reordering and delay variation by direction, from the
/// send times of the echoes (by seq, ns) and the replies in the order they
/// arrived. Echoes after the last one the responder is known to have
/// counted are left out: whether they were lost on the way there or back,
/// no reply says.
pub fn analyse(sent_ns: &[u64], replies: &[ReplyRecord]) -> Analysis {
    let mut first_reply: Vec<Option<ReplyRecord>> = vec![None; sent_ns.len()];
    let (mut forward_dups, mut reverse_dups) = (0u64, 0u64);
    let mut datagrams = 0u64;
    for r in replies {
        let Some(slot) = first_reply.get_mut(r.seq as usize) else {
            continue;
        };
        datagrams += 1;
        match slot {
            None => *slot = Some(*r),
            // The same count again: the network doubled the reply.
            Some(first) if first.received == r.received => reverse_dups += 1,
            // Counted twice by the responder: the echo came twice.
            Some(_) => forward_dups += 1,
        }
    }
    // The responder's newest count, over every reply (a doubled echo's
    // second reply is its newest); every echo up to the highest one
    // answered had its fate decided by then, reordered ones included.
    let counted = replies
        .iter()
        .filter(|r| (r.seq as usize) < sent_ns.len())
        .map(|r| r.received)
        .max()
        .unwrap_or(0);
    let window = first_reply
        .iter()
        .rposition(Option::is_some)
        .map_or(0, |s| s as u64 + 1);
    let arrived_there = u64::from(counted).saturating_sub(forward_dups).min(window);
    let delivered_back = datagrams
        .saturating_sub(reverse_dups)
        .min(u64::from(counted));
    let answered: Vec<ReplyRecord> = first_reply.iter().flatten().copied().collect();

    let forward_delays: Vec<f64> = answered
        .iter()
        .map(|r| r.offset_ns as f64 - sent_ns[r.seq as usize] as f64)
        .collect();
    let reverse_delays: Vec<f64> = answered
        .iter()
        .map(|r| r.arrival_ns as f64 - r.offset_ns as f64)
        .collect();
    let mut by_responder_order = answered.clone();
    by_responder_order.sort_by_key(|r| r.received);
    let forward_reordered = late(by_responder_order.iter().map(|r| r.seq));
    let reverse_reordered = late(replies.iter().map(|r| r.received));

    let direction = |packets: u64, arrived: u64, reordered, duplicates, delays: &[f64]| {
        let lost = packets - arrived;
        DirectionLoss {
            packets,
            lost,
            loss_pct: if packets == 0 {
                0.0
            } else {
                100.0 * lost as f64 / packets as f64
            },
            reordered,
            duplicates,
            ipdv_ms: ipdv_ms(delays),
            pdv_p95_ms: pdv_p95_ms(delays),
        }
    };
    Analysis {
        forward: direction(
            window,
            arrived_there,
            forward_reordered,
            forward_dups,
            &forward_delays,
        ),
        reverse: direction(
            u64::from(counted),
            delivered_back,
            reverse_reordered,
            reverse_dups,
            &reverse_delays,
        ),
        rtts_ms: answered
            .iter()
            .map(|r| r.arrival_ns.saturating_sub(sent_ns[r.seq as usize]) as f64 / 1e6)
            .collect(),
    }
}

/// How many items come after a larger one.
fn late<T: Ord + Copy>(order: impl Iterator<Item = T>) -> u64 {
    let mut highest: Option<T> = None;
    let mut late = 0;
    for x in order {
        match highest {
            Some(h) if x < h => late += 1,
            _ => highest = Some(x),
        }
    }
    late
}

fn ipdv_ms(delays_ns: &[f64]) -> Option<f64> {
    if delays_ns.len() < 2 {
        return None;
    }
    let sum: f64 = delays_ns.windows(2).map(|w| (w[1] - w[0]).abs()).sum();
    Some(sum / (delays_ns.len() - 1) as f64 / 1e6)
}

fn pdv_p95_ms(delays_ns: &[f64]) -> Option<f64> {
    let mut d = delays_ns.to_vec();
    d.sort_by(f64::total_cmp);
    let min = *d.first()?;
    let p95 = d[((d.len() - 1) as f64 * 0.95).round() as usize];
    Some((p95 - min) / 1e6)
}

fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

/// No reply this long after the first echo: nobody answers.
const NO_ANSWER: Duration = Duration::from_secs(3);

/// Measures loss, delay variation and reordering to and from the responder
/// at `target`.
pub async fn loss(target: SocketAddr, opts: &LossOptions) -> Result<Loss> {
    opts.check()?;
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
    let fd = socket.as_raw_fd();
    let privileged = tern_drs::socket::privileged();
    let _ = tern_drs::socket::set_rcvbuf(fd, 4 << 20, privileged);
    sys::enable_rx_timestamps(&socket).map_err(io("enabling receive timestamps"))?;

    let nonce: u64 = rand::random();
    let period = Duration::from_secs_f64(1.0 / f64::from(opts.rate_pps));
    let clock = Instant::now();
    let since = |t: Instant| t.duration_since(clock).as_nanos() as u64;
    let mut sent_ns: Vec<u64> = Vec::with_capacity(opts.count as usize);
    let mut records = Vec::new();
    let mut kernel = true;
    let mut kernel_offset: Option<i128> = None;
    let mut buf = vec![0u8; MAX_PACKET + 1];
    let mut last_sent = clock;
    loop {
        let seq = sent_ns.len() as u32;
        let sending = seq < opts.count;
        let wake = if sending {
            clock + period * seq
        } else {
            last_sent + opts.reply_timeout
        };
        if !sending && (records.len() >= sent_ns.len() || Instant::now() >= wake) {
            break;
        }
        if records.is_empty() && clock.elapsed() > NO_ANSWER {
            return Err(Error::NoResponder {
                addr: target,
                waited: clock.elapsed(),
            });
        }
        tokio::select! {
            got = socket.async_io(Interest::READABLE, || sys::recv_timestamped(fd, &mut buf)) => {
                let got = match got {
                    Ok(got) => got,
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        return Err(Error::NoResponder { addr: target, waited: clock.elapsed() });
                    }
                    Err(e) => return Err(io("receiving echo replies")(e)),
                };
                let here = since(Instant::now());
                let Ok(reply) = Echo::decode(&buf[..got.len]) else { continue };
                // A responder that answers more than twice per echo is
                // not measured further.
                if got.truncated || !reply.reply || reply.nonce != nonce
                    || reply.seq as usize >= sent_ns.len()
                    || records.len() >= 2 * opts.count as usize {
                    continue;
                }
                // Kernel times are on another clock: carry them onto this
                // one by the first reply's offset, so delays stay exact
                // relative to each other.
                let arrival_ns = match got.kernel_ns {
                    Some(k) => {
                        let off = *kernel_offset.get_or_insert(i128::from(here) - i128::from(k));
                        (i128::from(k) + off).max(0) as u64
                    }
                    None => {
                        kernel = false;
                        here
                    }
                };
                records.push(ReplyRecord {
                    seq: reply.seq,
                    received: reply.received,
                    offset_ns: reply.offset_ns,
                    arrival_ns,
                });
            }
            () = tokio::time::sleep_until(wake.into()) => {
                if !sending {
                    break;
                }
                let now = Instant::now();
                while (sent_ns.len() as u32) < opts.count && clock + period * (sent_ns.len() as u32) <= now {
                    let seq = sent_ns.len() as u32;
                    let bytes = Echo::request(nonce, seq, opts.packet_size).encode();
                    last_sent = Instant::now();
                    sent_ns.push(since(last_sent));
                    match socket.try_send(&bytes) {
                        Ok(_) => {}
                        // A full socket buffer drops it like a lossy
                        // host would; it counts as lost.
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                            return Err(Error::NoResponder { addr: target, waited: clock.elapsed() });
                        }
                        Err(e) => return Err(io("sending echoes")(e)),
                    }
                }
            }
        }
    }
    if records.is_empty() {
        return Err(Error::NoResponder {
            addr: target,
            waited: clock.elapsed(),
        });
    }
    let mut a = analyse(&sent_ns, &records);
    let unresolved = (sent_ns.len() as u64).saturating_sub(a.forward.packets) as u32;
    let headers = match target {
        SocketAddr::V4(_) => 28,
        SocketAddr::V6(_) => 48,
    };
    Ok(Loss {
        target,
        sent: sent_ns.len() as u32,
        replies: records.len() as u32,
        unresolved,
        packet_bytes: usize::from(opts.packet_size) + headers,
        rate_pps: opts.rate_pps,
        rtt_min_ms: a.rtts_ms.iter().copied().min_by(f64::total_cmp),
        rtt_median_ms: median(&mut a.rtts_ms),
        forward: a.forward,
        reverse: a.reverse,
        kernel_timestamps: kernel && !records.is_empty(),
        elapsed_s: clock.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exchange: echo `seq` sent at `seq` ms; `there` says whether it
    /// reached the responder, `back` whether its reply came back; one-way
    /// delays of 10 ms (+ `extra` ms on the way there for some).
    fn exchange(
        n: u32,
        there: impl Fn(u32) -> bool,
        back: impl Fn(u32) -> bool,
        extra: impl Fn(u32) -> u64,
    ) -> (Vec<u64>, Vec<ReplyRecord>) {
        let ms = 1_000_000;
        let sent: Vec<u64> = (0..n).map(|s| u64::from(s) * ms).collect();
        let mut replies = Vec::new();
        for (counted, seq) in (1..).zip((0..n).filter(|&s| there(s))) {
            let at_responder = sent[seq as usize] + 10 * ms + extra(seq) * ms;
            if back(seq) {
                replies.push(ReplyRecord {
                    seq,
                    received: counted,
                    offset_ns: at_responder - 10 * ms,
                    arrival_ns: at_responder + 10 * ms,
                });
            }
        }
        (sent, replies)
    }

    #[test]
    fn losses_are_told_apart_by_direction() {
        let (sent, replies) = exchange(1000, |s| s % 50 != 7, |s| s % 100 != 3, |_| 0);
        let a = analyse(&sent, &replies);
        assert_eq!((a.forward.packets, a.forward.lost), (1000, 20));
        assert_eq!((a.reverse.packets, a.reverse.lost), (980, 10));
        assert!((a.forward.loss_pct - 2.0).abs() < 1e-9);
        assert_eq!(a.forward.ipdv_ms, Some(0.0), "constant delays");
        assert_eq!((a.forward.reordered, a.reverse.reordered), (0, 0));
        assert!(a.rtts_ms.iter().all(|&r| (r - 20.0).abs() < 1e-9));
    }

    #[test]
    fn the_tail_after_the_last_counted_echo_is_left_out() {
        // The last 5 echoes were lost one way or the other: no reply says which.
        let (sent, replies) = exchange(100, |s| s < 97, |s| s < 95, |_| 0);
        let a = analyse(&sent, &replies);
        assert_eq!((a.forward.packets, a.forward.lost), (95, 0));
        assert_eq!((a.reverse.packets, a.reverse.lost), (95, 0));
    }

    #[test]
    fn delay_variation_belongs_to_the_direction_that_had_it() {
        // Every other echo waits 4 ms more on the way there.
        let (sent, replies) = exchange(101, |_| true, |_| true, |s| u64::from(s % 2) * 4);
        let a = analyse(&sent, &replies);
        assert!((a.forward.ipdv_ms.unwrap() - 4.0).abs() < 1e-9);
        assert!((a.forward.pdv_p95_ms.unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(a.reverse.ipdv_ms, Some(0.0));
        assert_eq!(a.reverse.pdv_p95_ms, Some(0.0));
    }

    #[test]
    fn reordering_and_duplicates_are_told_apart_by_direction() {
        let r = |seq, received| ReplyRecord {
            seq,
            received,
            offset_ns: 0,
            arrival_ns: 0,
        };
        let sent = vec![0; 5];
        // Forward: echo 2 overtook 1 (the responder counted 2 before 1).
        // Reverse: the reply counted 5 came back before the one counted 4.
        let forward_swap = [r(0, 1), r(2, 2), r(1, 3), r(4, 5), r(3, 4)];
        let a = analyse(&sent, &forward_swap);
        assert_eq!(a.forward.reordered, 1, "1 reached the responder after 2");
        assert_eq!(a.reverse.reordered, 1, "count 4 came back after count 5");
        assert_eq!((a.forward.lost, a.reverse.lost), (0, 0));
        // A reply twice (same count) is a reverse duplicate; an echo
        // counted twice is a forward duplicate.
        let dups = [r(0, 1), r(0, 1), r(1, 2), r(1, 3), r(2, 4)];
        let a = analyse(&sent[..3], &dups);
        assert_eq!((a.forward.duplicates, a.reverse.duplicates), (1, 1));
        assert_eq!((a.forward.lost, a.reverse.lost), (0, 0));
        assert_eq!((a.forward.packets, a.reverse.packets), (3, 4));
    }

    #[test]
    fn a_doubled_last_echo_is_no_loss_and_reordering_does_not_hide_one() {
        let r = |seq, received| ReplyRecord {
            seq,
            received,
            offset_ns: 0,
            arrival_ns: 0,
        };
        // 0..9 all arrive, 9 twice (counted 10 and 11), every reply back.
        let mut doubled: Vec<_> = (0..10).map(|s| r(s, s + 1)).collect();
        doubled.push(r(9, 11));
        let a = analyse(&[0; 10], &doubled);
        assert_eq!((a.forward.lost, a.forward.duplicates), (0, 1), "{a:?}");
        assert_eq!((a.reverse.packets, a.reverse.lost), (11, 0), "{a:?}");
        // 5 lost on the way there; 9 overtook 8 (counted 8th, 8 counted 9th).
        let order = [
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 4),
            (4, 5),
            (6, 6),
            (7, 7),
            (9, 8),
            (8, 9),
        ];
        let reordered: Vec<_> = order.iter().map(|&(s, c)| r(s, c)).collect();
        let a = analyse(&[0; 10], &reordered);
        assert_eq!((a.forward.packets, a.forward.lost), (10, 1), "{a:?}");
        assert_eq!(a.forward.reordered, 1);
    }

    #[test]
    fn nothing_answered_is_no_packets_not_a_division_by_zero() {
        let a = analyse(&[0, 1, 2], &[]);
        assert_eq!((a.forward.packets, a.forward.loss_pct), (0, 0.0));
        assert_eq!(a.forward.ipdv_ms, None);
    }

    #[test]
    fn options_out_of_bounds_are_refused() {
        for bad in [
            LossOptions {
                count: 1,
                ..LossOptions::default()
            },
            LossOptions {
                rate_pps: 0,
                ..LossOptions::default()
            },
            LossOptions {
                packet_size: 39,
                ..LossOptions::default()
            },
        ] {
            assert!(matches!(bad.check(), Err(Error::BadOptions(_))), "{bad:?}");
        }
        assert_eq!(LossOptions::default().load_bps(28), 200 * 92 * 8);
    }
}
