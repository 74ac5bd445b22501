//! Super-packets: TCP segmentation offload frames as a TUN device with
//! `IFF_VNET_HDR` hands them over, and what they stand for on the wire.
//!
//! With offloads on, the kernel passes the emulator a `virtio_net_hdr`
//! followed by one IP packet of up to 64 KiB whose TCP payload is to be cut
//! into segments of `gso_size` bytes, each carried with a copy of the IP
//! and TCP headers. This module owns that arithmetic: [`Shape`] says how
//! many wire packets a frame stands for and how long each is (the link
//! model charges them one by one), and [`build_chunk`] cuts a run of
//! consecutive segments out of a frame as a frame of its own (smaller
//! super-packet or plain packet), for when some segments are dropped or
//! must be delivered at other times than the rest.
//!
//! Headers are fixed up as the kernel's own segmentation does
//! (`tcp_gso_segment`): sequence number advanced, IPv4 total length, id
//! and header checksum, IPv6 payload length, CWR kept on the first segment
//! only, FIN and PSH on the last only. The transport checksum stays
//! offloaded (`VIRTIO_NET_HDR_F_NEEDS_CSUM`, the field holding the
//! pseudo-header sum over the chunk's length), as in the frame read.

/// Size of `struct virtio_net_hdr` (no `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_ECN` (a flag on the type).
pub const GSO_ECN: u8 = 0x80;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// `struct virtio_net_hdr`, in the host's byte order (TUN's legacy default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`.
    pub gso_type: u8,
    /// Length of the headers every segment carries.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the transport checksum's coverage starts (the L4 header).
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads the header at the start of `frame` (which must hold one).
    pub fn parse(frame: &[u8]) -> VnetHdr {
        let u16_at = |i: usize| u16::from_ne_bytes([frame[i], frame[i + 1]]);
        VnetHdr {
            flags: frame[0],
            gso_type: frame[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }

    /// Writes the header into the first [`VNET_HDR_LEN`] bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        out[0] = self.flags;
        out[1] = self.gso_type;
        out[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        out[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        out[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        out[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }
}

/// What one frame stands for on the wire: `segments` packets, each with
/// `headers` bytes of IP and TCP headers and `seg` bytes of payload (the
/// last one the rest). A plain packet is one segment of its own length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Header bytes each segment carries (IP and TCP, options included).
    pub headers: usize,
    /// Payload bytes in the whole frame.
    pub payload: usize,
    /// Payload bytes per segment (all but the last).
    pub seg: usize,
    /// Wire packets the frame stands for (at least 1).
    pub segments: usize,
    /// Whether [`build_chunk`] can cut it (a TCP super-packet it parsed).
    pub splittable: bool,
}

impl Shape {
    /// A plain packet of `len` bytes: one segment, not to be cut.
    pub fn single(len: usize) -> Shape {
        Shape {
            headers: len,
            payload: 0,
            seg: 0,
            segments: 1,
            splittable: false,
        }
    }

    /// Length on the wire of segment `i` (0-based), headers included.
    pub fn wire_len(&self, i: usize) -> usize {
        if self.segments == 1 {
            return self.headers + self.payload;
        }
        let rest = self.payload - i * self.seg;
        self.headers + rest.min(self.seg)
    }

    /// Bytes of all its wire packets together.
    pub fn wire_bytes(&self) -> usize {
        self.headers * self.segments + self.payload
    }
}

/// The shape of `frame` (virtio header, then the IP packet). Anything but
/// a well-formed TCP super-packet counts as one packet of its IP length.
pub fn shape(frame: &[u8]) -> Shape {
    let ip_len = frame.len().saturating_sub(VNET_HDR_LEN);
    if frame.len() < VNET_HDR_LEN {
        return Shape::single(ip_len);
    }
    let h = VnetHdr::parse(frame);
    let kind = h.gso_type & !GSO_ECN;
    if kind == GSO_NONE || h.gso_size == 0 {
        return Shape::single(ip_len);
    }
    let packet = &frame[VNET_HDR_LEN..];
    let l4 = usize::from(h.csum_start);
    let ip_ok = match (kind, packet.first().map(|b| b >> 4)) {
        (GSO_TCPV4, Some(4)) => l4 >= 20 && packet.get(9) == Some(&6),
        (GSO_TCPV6, Some(6)) => l4 >= 40,
        _ => false,
    };
    if !ip_ok || h.flags & F_NEEDS_CSUM == 0 || packet.len() < l4 + 20 {
        return Shape::single(ip_len);
    }
    let headers = l4 + usize::from(packet[l4 + 12] >> 4) * 4;
    if headers < l4 + 20 || headers >= packet.len() {
        return Shape::single(ip_len);
    }
    let (payload, seg) = (packet.len() - headers, usize::from(h.gso_size));
    Shape {
        headers,
        payload,
        seg,
        segments: payload.div_ceil(seg),
        splittable: true,
    }
}

/// Appends to `out` (cleared first) a frame carrying segments
/// `first..first + count` of `frame`, whose shape is `s` (splittable).
/// One segment comes out as a plain packet, several as a super-packet.
pub fn build_chunk(frame: &[u8], s: &Shape, first: usize, count: usize, out: &mut Vec<u8>) {
    debug_assert!(s.splittable && count >= 1 && first + count <= s.segments);
    let h = VnetHdr::parse(frame);
    let packet = &frame[VNET_HDR_LEN..];
    let l4 = usize::from(h.csum_start);
    let start = s.headers + first * s.seg;
    let end = (start + count * s.seg).min(packet.len());
    out.clear();
    out.extend_from_slice(&frame[..VNET_HDR_LEN + s.headers]);
    out.extend_from_slice(&packet[start..end]);
    let last = first + count == s.segments;
    let hdr = VnetHdr {
        gso_type: if count > 1 { h.gso_type } else { GSO_NONE },
        gso_size: if count > 1 { h.gso_size } else { 0 },
        hdr_len: s.headers as u16,
        ..h
    };
    hdr.write(out);
    let p = &mut out[VNET_HDR_LEN..];
    let (ip_len, l4_len) = (p.len(), p.len() - l4);
    if p[0] >> 4 == 4 {
        p[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        let id = u16::from_be_bytes([p[4], p[5]]).wrapping_add(first as u16);
        p[4..6].copy_from_slice(&id.to_be_bytes());
        let ihl = usize::from(p[0] & 0x0f) * 4;
        p[10..12].fill(0);
        let sum = !fold(sum16(&p[..ihl], 0));
        p[10..12].copy_from_slice(&sum.to_be_bytes());
    } else {
        p[4..6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
    }
    let tcp = &mut p[l4..];
    let seq =
        u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]).wrapping_add((first * s.seg) as u32);
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    if first > 0 {
        tcp[13] &= !TCP_CWR;
    }
    if !last {
        tcp[13] &= !(TCP_FIN | TCP_PSH);
    }
    let pseudo = fold(pseudo_sum(p, l4_len));
    let at = l4 + usize::from(h.csum_offset);
    p[at..at + 2].copy_from_slice(&pseudo.to_be_bytes());
}

/// The ones'-complement sum of the TCP pseudo-header of IP packet `p`
/// (IPv4 or IPv6) for a TCP segment of `l4_len` bytes, unfolded.
fn pseudo_sum(p: &[u8], l4_len: usize) -> u32 {
    let addrs = if p[0] >> 4 == 4 {
        &p[12..20]
    } else {
        &p[8..40]
    };
    let len = l4_len as u32;
    sum16(addrs, 6 + (len >> 16) + (len & 0xffff))
}

/// Adds the big-endian 16-bit words of `data` (a last odd byte padded) to
/// `acc`, without folding.
pub fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        acc += u32::from(*b) << 8;
    }
    acc
}

/// Folds a 32-bit ones'-complement sum into 16 bits.
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: usize = 1448;

    /// A TCP super-packet as the kernel hands it over: `payload` bytes
    /// (byte i is `i % 251`), 32-byte TCP header, sequence 1000, flags
    /// ACK|PSH|FIN|CWR, checksum field holding the pseudo-header sum.
    fn super_packet(v6: bool, payload: usize) -> Vec<u8> {
        let l4 = if v6 { 40 } else { 20 };
        let mut p = vec![0u8; l4 + 32 + payload];
        let total = p.len();
        if v6 {
            p[0] = 0x60;
            p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
            p[6] = 6;
            p[7] = 64;
            p[8..24].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            p[24..40].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        } else {
            p[0] = 0x45;
            p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
            p[6] = 0x40;
            p[8] = 64;
            p[9] = 6;
            p[12..16].copy_from_slice(&[10, 47, 0, 1]);
            p[16..20].copy_from_slice(&[10, 47, 0, 2]);
            let sum = !fold(sum16(&p[..20], 0));
            p[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        p[l4 + 4..l4 + 8].copy_from_slice(&1000u32.to_be_bytes());
        p[l4 + 12] = 8 << 4;
        p[l4 + 13] = 0x10 | TCP_PSH | TCP_FIN | TCP_CWR;
        for (i, b) in p[l4 + 32..].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let pseudo = fold(pseudo_sum(&p, total - l4));
        p[l4 + 16..l4 + 18].copy_from_slice(&pseudo.to_be_bytes());
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: if v6 { GSO_TCPV6 } else { GSO_TCPV4 },
            hdr_len: (l4 + 32) as u16,
            gso_size: SEG as u16,
            csum_start: l4 as u16,
            csum_offset: 16,
        };
        let mut frame = vec![0u8; VNET_HDR_LEN];
        hdr.write(&mut frame);
        frame.extend_from_slice(&p);
        frame
    }

    /// Finishes the offloaded checksum as the kernel would and checks it,
    /// and the IPv4 header checksum; returns (seq, flags, payload).
    fn check_segment(frame: &[u8]) -> (u32, u8, Vec<u8>) {
        let h = VnetHdr::parse(frame);
        assert_eq!(h.flags, F_NEEDS_CSUM);
        let mut p = frame[VNET_HDR_LEN..].to_vec();
        let l4 = usize::from(h.csum_start);
        if p[0] >> 4 == 4 {
            assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
            assert_eq!(fold(sum16(&p[..20], 0)), 0xffff, "IPv4 header checksum");
        } else {
            assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])), p.len() - 40);
        }
        let at = l4 + usize::from(h.csum_offset);
        let done = !fold(sum16(&p[l4..], 0));
        p[at..at + 2].copy_from_slice(&done.to_be_bytes());
        let full = sum16(&p[l4..], pseudo_sum(&p, p.len() - l4));
        assert_eq!(fold(full), 0xffff, "TCP checksum");
        let tcp = &p[l4..];
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        (seq, tcp[13], tcp[32..].to_vec())
    }

    #[test]
    fn a_super_packet_stands_for_its_segments_with_their_headers() {
        let frame = super_packet(false, 10_000);
        let s = shape(&frame);
        assert_eq!((s.headers, s.seg, s.segments), (52, SEG, 7));
        assert!(s.splittable);
        assert_eq!(s.wire_len(0), 1500);
        assert_eq!(s.wire_len(6), 52 + 10_000 - 6 * SEG);
        assert_eq!(s.wire_bytes(), 10_000 + 7 * 52);
        assert_eq!(
            (0..s.segments).map(|i| s.wire_len(i)).sum::<usize>(),
            s.wire_bytes()
        );
    }

    #[test]
    fn plain_and_malformed_frames_count_as_one_packet() {
        let mut frame = super_packet(false, 1000);
        frame[1] = GSO_NONE;
        assert_eq!(shape(&frame), Shape::single(frame.len() - VNET_HDR_LEN));
        let mut frame = super_packet(false, 5000);
        frame[VNET_HDR_LEN + 9] = 17; // not TCP
        assert_eq!(shape(&frame).segments, 1);
        assert!(!shape(&frame).splittable);
        assert_eq!(shape(&[1, 2, 3]), Shape::single(0));
    }

    #[test]
    fn cutting_every_segment_gives_valid_packets_carrying_the_payload() {
        for v6 in [false, true] {
            let frame = super_packet(v6, 10_000);
            let s = shape(&frame);
            let mut payload = Vec::new();
            let mut out = Vec::new();
            for i in 0..s.segments {
                build_chunk(&frame, &s, i, 1, &mut out);
                let h = VnetHdr::parse(&out);
                assert_eq!((h.gso_type, h.gso_size), (GSO_NONE, 0));
                assert_eq!(out.len() - VNET_HDR_LEN, s.wire_len(i));
                let (seq, flags, data) = check_segment(&out);
                assert_eq!(seq, 1000 + (i * SEG) as u32);
                assert_eq!(flags & TCP_CWR != 0, i == 0, "CWR on the first only");
                let last = i == s.segments - 1;
                assert_eq!(
                    flags & (TCP_FIN | TCP_PSH) != 0,
                    last,
                    "FIN/PSH on the last"
                );
                if !v6 {
                    let id = u16::from_be_bytes([out[VNET_HDR_LEN + 4], out[VNET_HDR_LEN + 5]]);
                    assert_eq!(id, 0x1234 + i as u16);
                }
                payload.extend(data);
            }
            assert_eq!(payload, frame[VNET_HDR_LEN + s.headers..]);
        }
    }

    #[test]
    fn a_run_of_segments_stays_a_super_packet() {
        let frame = super_packet(false, 10_000);
        let s = shape(&frame);
        let mut out = Vec::new();
        build_chunk(&frame, &s, 2, 3, &mut out);
        let h = VnetHdr::parse(&out);
        assert_eq!((h.gso_type, usize::from(h.gso_size)), (GSO_TCPV4, SEG));
        assert_eq!(out.len() - VNET_HDR_LEN, 52 + 3 * SEG);
        let (seq, flags, data) = check_segment(&out);
        assert_eq!(seq, 1000 + 2 * SEG as u32);
        assert_eq!(flags & (TCP_FIN | TCP_PSH | TCP_CWR), 0);
        assert_eq!(data, frame[VNET_HDR_LEN + 52 + 2 * SEG..][..3 * SEG]);
        let again = shape(&out);
        assert_eq!((again.segments, again.headers), (3, 52));
    }
}
