//! Routers along a path, as an IPv4 packet's TTL sees them.
//!
//! A path with `n` hops is still one link in the emulator, but it behaves
//! toward TTLs as `n` routers would: a packet whose TTL would run out at a
//! router (TTL ≤ n) expires at router k = TTL, counted from the sender,
//! and is answered by an ICMP Time Exceeded from that router's address; a
//! packet with a larger TTL goes through with its TTL lowered by `n`. So
//! `ping -t`, traceroute and tern's own path probes see the routers. This
//! module is the pure part: deciding a packet's fate by its TTL, rewriting
//! its header, and building the ICMP answer (RFC 792, with what RFC 1812
//! asks of routers: no errors about ICMP errors or non-first fragments,
//! the quote as long as routers commonly send). The emulator owns when
//! the answer is written (the hop's share of the round trip). Non-IPv4
//! packets (IPv6) pass untouched.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::gso::{fold, sum16};

/// How many bytes of the expired datagram an answer quotes, header
/// included (RFC 792 asks for the header and 8 bytes; routers commonly
/// send 128, as RFC 4884 suggests).
pub const QUOTE: usize = 128;

/// TTL of the answers.
pub const ANSWER_TTL: u8 = 64;

/// `IPTOS_PREC_INTERNETCONTROL`, the precedence routers give ICMP errors.
const TOS_INTERNETCONTROL: u8 = 0xc0;

const PROTO_ICMP: u8 = 1;
const ICMP_TIME_EXCEEDED: u8 = 11;
const IP_HDR: usize = 20;
const ICMP_HDR: usize = 8;

/// What the routers of a path make of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Not IPv4 (or no routers, or not a well-formed header): unchanged.
    Pass,
    /// Through all routers: its TTL is lower by their number, its header
    /// checksum fixed.
    Through,
    /// Expired at router `hop` (1-based, from the sender); `answer` says
    /// whether a router would send a Time Exceeded about it.
    Expired {
        /// Which router, 1-based from the sending side.
        hop: usize,
        /// False for packets routers never answer (ICMP errors, non-first
        /// fragments, sources that are not a unicast host).
        answer: bool,
    },
}

/// The IPv4 header length of `packet`, if it starts a well-formed one.
fn ipv4_header_len(packet: &[u8]) -> Option<usize> {
    if packet.len() < IP_HDR || packet[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    (ihl >= IP_HDR && packet.len() >= ihl).then_some(ihl)
}

/// Sets the IPv4 header checksum of the `ihl` header bytes of `packet`.
fn set_header_checksum(packet: &mut [u8], ihl: usize) {
    packet[10..12].fill(0);
    let sum = !fold(sum16(&packet[..ihl], 0));
    packet[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// Takes IP packet `packet` past `hops` routers: leaves it as it is
/// ([`Fate::Pass`]), lowers its TTL ([`Fate::Through`]) or says where it
/// expired ([`Fate::Expired`], the packet unchanged).
pub fn traverse(packet: &mut [u8], hops: usize) -> Fate {
    let Some(ihl) = ipv4_header_len(packet) else {
        return Fate::Pass;
    };
    if hops == 0 {
        return Fate::Pass;
    }
    let ttl = usize::from(packet[8]);
    if ttl > hops {
        packet[8] = (ttl - hops) as u8;
        set_header_checksum(packet, ihl);
        return Fate::Through;
    }
    Fate::Expired {
        hop: ttl.max(1),
        answer: deserves_answer(packet, ihl),
    }
}

/// Whether a router sends an ICMP error about this IPv4 packet (RFC 1812
/// 4.3.2.7): not about an ICMP error, a fragment other than the first, or
/// a packet whose source is no single host.
fn deserves_answer(packet: &[u8], ihl: usize) -> bool {
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let fragment_offset = u16::from_be_bytes([packet[6], packet[7]]) & 0x1fff;
    let icmp_error = packet[9] == PROTO_ICMP
        && packet
            .get(ihl)
            .is_some_and(|t| matches!(t, 3 | 4 | 5 | 11 | 12));
    !(icmp_error
        || fragment_offset != 0
        || src.is_unspecified()
        || src.is_multicast()
        || src.is_broadcast())
}

/// Appends to `out` the ICMP Time Exceeded (type 11, code 0) that router
/// `from` sends back to the source of `packet`, which expired there: an
/// IPv4 header (TTL [`ANSWER_TTL`]) and the ICMP message quoting the first
/// [`QUOTE`] bytes of `packet` as the router got it (TTL 1). `packet` must
/// be an IPv4 packet ([`traverse`] said [`Fate::Expired`]).
pub fn time_exceeded(packet: &[u8], from: Ipv4Addr, out: &mut Vec<u8>) {
    let ihl = ipv4_header_len(packet).expect("an IPv4 packet");
    let quote = packet.len().min(QUOTE);
    let total = IP_HDR + ICMP_HDR + quote;
    let start = out.len();
    out.resize(start + total, 0);
    let p = &mut out[start..];
    p[0] = 0x45;
    p[1] = TOS_INTERNETCONTROL;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    // id, flags and fragment offset stay 0.
    p[8] = ANSWER_TTL;
    p[9] = PROTO_ICMP;
    p[12..16].copy_from_slice(&from.octets());
    p[16..20].copy_from_slice(&packet[12..16]);
    set_header_checksum(p, IP_HDR);
    let icmp = &mut p[IP_HDR..];
    icmp[0] = ICMP_TIME_EXCEEDED;
    // Code 0 (TTL exceeded in transit); checksum and unused word 0 for now.
    let quoted = &mut icmp[ICMP_HDR..];
    quoted.copy_from_slice(&packet[..quote]);
    // The router got it with one hop left, and quotes it so.
    if quoted[8] > 1 {
        quoted[8] = 1;
        set_header_checksum(quoted, ihl.min(quote));
    }
    let sum = !fold(sum16(icmp, 0));
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
}

/// When router `hop` of `hops` answers, after the packet was sent: its
/// share of the path's round trip, `rtt × hop / (hops + 1)`.
pub fn answer_delay(rtt: Duration, hop: usize, hops: usize) -> Duration {
    rtt.mul_f64(hop as f64 / (hops + 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 4] = [10, 47, 0, 1];
    const B: [u8; 4] = [10, 47, 0, 2];

    /// A UDP datagram from A to B with `payload` bytes of payload
    /// (byte i is i), TTL `ttl`, a valid header checksum.
    fn udp(ttl: u8, payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 8 + payload];
        let total = p.len() as u16;
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[4..6].copy_from_slice(&0xbeefu16.to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = ttl;
        p[9] = 17;
        p[12..16].copy_from_slice(&A);
        p[16..20].copy_from_slice(&B);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&33434u16.to_be_bytes());
        p[24..26].copy_from_slice(&(8 + payload as u16).to_be_bytes());
        for (i, b) in p[28..].iter_mut().enumerate() {
            *b = i as u8;
        }
        set_header_checksum(&mut p, 20);
        p
    }

    fn header_ok(p: &[u8]) -> bool {
        let ihl = usize::from(p[0] & 0x0f) * 4;
        fold(sum16(&p[..ihl], 0)) == 0xffff
    }

    #[test]
    fn a_packet_beyond_the_routers_loses_one_ttl_per_router() {
        let mut p = udp(64, 100);
        let before = p.clone();
        assert_eq!(traverse(&mut p, 3), Fate::Through);
        assert_eq!(p[8], 61);
        assert!(header_ok(&p), "header checksum recomputed");
        // Nothing else changed.
        assert_eq!(p[..8], before[..8]);
        assert_eq!(p[12..], before[12..]);
        let mut q = udp(4, 10);
        assert_eq!(traverse(&mut q, 3), Fate::Through);
        assert_eq!(q[8], 1);
        assert!(header_ok(&q));
    }

    #[test]
    fn the_ttl_chooses_the_router_where_a_packet_expires() {
        for ttl in 1..=3u8 {
            let mut p = udp(ttl, 10);
            let before = p.clone();
            let fate = traverse(&mut p, 3);
            assert_eq!(
                fate,
                Fate::Expired {
                    hop: usize::from(ttl),
                    answer: true
                }
            );
            assert_eq!(p, before, "an expired packet is not rewritten");
        }
        let mut zero = udp(0, 10);
        assert_eq!(
            traverse(&mut zero, 2),
            Fate::Expired {
                hop: 1,
                answer: true
            }
        );
    }

    #[test]
    fn other_packets_pass_untouched() {
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, 17, 1];
        v6.resize(48, 7);
        let before = v6.clone();
        assert_eq!(traverse(&mut v6, 2), Fate::Pass);
        assert_eq!(v6, before);
        let mut short = vec![0x45, 0, 0];
        assert_eq!(traverse(&mut short, 2), Fate::Pass);
        let mut bad_ihl = udp(1, 10);
        bad_ihl[0] = 0x44;
        assert_eq!(traverse(&mut bad_ihl, 2), Fate::Pass);
        let mut p = udp(1, 10);
        let before = p.clone();
        assert_eq!(traverse(&mut p, 0), Fate::Pass, "no routers");
        assert_eq!(p, before);
    }

    #[test]
    fn routers_do_not_answer_icmp_errors_or_later_fragments() {
        let mut err = udp(1, 30);
        err[9] = PROTO_ICMP;
        err[20] = 3; // destination unreachable
        set_header_checksum(&mut err, 20);
        assert_eq!(
            traverse(&mut err, 2),
            Fate::Expired {
                hop: 1,
                answer: false
            }
        );
        let mut echo = err.clone();
        echo[20] = 8;
        assert!(matches!(
            traverse(&mut echo, 2),
            Fate::Expired { answer: true, .. }
        ));
        let mut frag = udp(2, 30);
        frag[6..8].copy_from_slice(&0x0010u16.to_be_bytes());
        assert!(matches!(
            traverse(&mut frag, 2),
            Fate::Expired { answer: false, .. }
        ));
        let mut from_nobody = udp(1, 30);
        from_nobody[12..16].fill(0);
        assert!(matches!(
            traverse(&mut from_nobody, 2),
            Fate::Expired { answer: false, .. }
        ));
    }

    #[test]
    fn a_time_exceeded_quotes_the_packet_with_valid_checksums() {
        let router = Ipv4Addr::new(10, 48, 0, 1);
        for payload in [0, 8, 40, 1000] {
            let packet = udp(2, payload);
            let mut out = vec![0xaa; 3]; // appended after what is there
            time_exceeded(&packet, router, &mut out);
            assert_eq!(out[..3], [0xaa; 3]);
            let ip = &out[3..];
            let quote = packet.len().min(QUOTE);
            assert_eq!(ip.len(), 20 + 8 + quote);
            assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), ip.len());
            assert_eq!((ip[0], ip[8], ip[9]), (0x45, ANSWER_TTL, PROTO_ICMP));
            assert_eq!(ip[12..16], router.octets());
            assert_eq!(ip[16..20], A, "back to the packet's source");
            assert!(header_ok(ip), "IPv4 header checksum");
            let icmp = &ip[20..];
            assert_eq!((icmp[0], icmp[1]), (11, 0));
            assert_eq!(icmp[4..8], [0; 4]);
            assert_eq!(fold(sum16(icmp, 0)), 0xffff, "ICMP checksum");
            let quoted = &icmp[8..];
            // The original header (TTL 1, as the router got it, and its
            // checksum still valid), then the first bytes of the payload.
            assert!(quoted.len() >= 28);
            assert_eq!(quoted[8], 1);
            assert!(header_ok(quoted));
            assert_eq!(quoted[..8], packet[..8]);
            assert_eq!(quoted[9..10], packet[9..10]);
            assert_eq!(quoted[12..], packet[12..quote]);
        }
    }

    #[test]
    fn each_router_answers_after_its_share_of_the_round_trip() {
        let rtt = Duration::from_millis(40);
        assert_eq!(answer_delay(rtt, 1, 1), Duration::from_millis(20));
        assert_eq!(answer_delay(rtt, 1, 3), Duration::from_millis(10));
        assert_eq!(answer_delay(rtt, 3, 3), Duration::from_millis(30));
    }
}
