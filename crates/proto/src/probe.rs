//! Probe packets: the UDP datagrams between the capacity client and the
//! responder of `tern-probe`. Pure: bytes in, typed packets out, no I/O.
//!
//! A client sends a *train*: `count` requests, numbered `seq` 0..count,
//! back to back. The responder answers each request that arrived with one
//! reply of exactly the request's length (so a reply is never larger than
//! what caused it), carrying when that request arrived relative to the
//! first of its train. Layout (big-endian, [`HEADER_LEN`] bytes, then
//! padding up to `len`):
//!
//! ```text
//!  0  magic "TRNP"          4
//!  4  version (1)           1
//!  5  kind (1 req, 2 reply) 1
//!  6  reserved, zero        2
//!  8  len: datagram length  2   must equal the UDP payload length
//! 10  seq                   2   < count
//! 12  count                 2   2..=MAX_TRAIN
//! 14  received              2   reply: requests of the train that arrived
//! 16  nonce                 8   chosen by the client per measurement
//! 24  train                 4   train number within the measurement
//! 28  reserved, zero        4
//! 32  offset_ns             8   reply: arrival of `seq` after the first
//! 40  sent_ns               4   reply: when the responder handed this reply
//!                               to its kernel, after the train's first
//!                               reply (0: not told)
//! 44  padding (ignored)
//! ```
//!
//! Requests carry zero in `received` and `offset_ns`; a decoder refuses
//! anything else, so that junk that happens to start with the magic is
//! still turned away. `sent_ns` lies in what version 1 first called
//! padding, which was always zero: a responder that does not stamp its
//! replies is read as "not told", and a client that does not read the
//! stamp ignores it. It tells how fast the responder got its replies out,
//! the reverse trains' ceiling: a slow responder host, not the path, may
//! have set their rate.
//!
//! An [`Echo`] is the loss probe's packet (kinds 3 and 4): one request,
//! answered at once by one reply of the same length, in the manner of
//! TWAMP. The reply says how many echoes of the measurement have arrived
//! so far, which splits the losses by direction, and when this one
//! arrived, which gives the delay variation of each direction. Same
//! header, other fields:
//!
//! ```text
//!  0  magic, version        5
//!  5  kind (3 echo, 4 echo reply)
//!  6  reserved, zero        2
//!  8  len                   2   ECHO_MIN..=MAX_PACKET
//! 10  reserved, zero        6
//! 16  nonce                 8
//! 24  seq                   4   the echo's number in the measurement
//! 28  received              4   reply: echoes of this nonce arrived so far
//! 32  offset_ns             8   reply: arrival after the first that arrived
//! ```

/// First bytes of every probe packet.
pub const MAGIC: [u8; 4] = *b"TRNP";
/// The one version spoken.
pub const VERSION: u8 = 1;
/// Bytes before the padding (an echo's whole header; a train packet's
/// `sent_ns` follows).
pub const HEADER_LEN: usize = 40;
/// Where a train reply's `sent_ns` lies.
const SENT_AT: usize = HEADER_LEN;
/// Smallest probe datagram: smaller packets measure per-packet overheads,
/// not capacity.
pub const MIN_PACKET: usize = 256;
/// Largest probe datagram: a 9000-byte jumbo frame less IPv4 and UDP
/// headers.
pub const MAX_PACKET: usize = 9000 - 28;
/// Longest train.
pub const MAX_TRAIN: u16 = 512;
/// Smallest echo: the header alone (a loss probe wants light packets).
pub const ECHO_MIN: usize = HEADER_LEN;

/// What a probe packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Client to responder: one packet of a train.
    Request,
    /// Responder to client: the answer to one request.
    Reply,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Request => 1,
            Kind::Reply => 2,
        }
    }
}

/// One decoded probe packet (its padding is not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Request or reply.
    pub kind: Kind,
    /// Datagram length in bytes, header and padding.
    pub len: u16,
    /// Position in the train.
    pub seq: u16,
    /// Packets in the train.
    pub count: u16,
    /// Reply: how many of the train's requests reached the responder.
    pub received: u16,
    /// The client's measurement, so replies of another one are told apart.
    pub nonce: u64,
    /// Train number.
    pub train: u32,
    /// Reply: nanoseconds from the arrival of the train's first received
    /// request to the arrival of this one.
    pub offset_ns: u64,
    /// Reply: nanoseconds from the responder handing the train's first
    /// reply to its kernel to handing this one (0: not told).
    pub sent_ns: u32,
}

/// Why bytes are not a probe packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the header.
    #[error("{0} bytes: shorter than a probe header")]
    Truncated(usize),
    /// Not a tern probe at all.
    #[error("bad magic")]
    Magic,
    /// A version this end does not speak.
    #[error("probe version {0}, only {VERSION} is spoken")]
    Version(u8),
    /// Neither request nor reply.
    #[error("unknown packet kind {0}")]
    Kind(u8),
    /// The length field and the datagram disagree.
    #[error("length field {field} but {actual} bytes arrived")]
    Length {
        /// What the header says.
        field: u16,
        /// What arrived.
        actual: usize,
    },
    /// Outside `MIN_PACKET..=MAX_PACKET`.
    #[error("{0} bytes: probe packets are {MIN_PACKET} to {MAX_PACKET} bytes")]
    Size(usize),
    /// `count` outside `2..=MAX_TRAIN`, or `seq` not below it.
    #[error("seq {seq} of {count}: trains are 2 to {MAX_TRAIN} packets")]
    Train {
        /// Position.
        seq: u16,
        /// Train length.
        count: u16,
    },
    /// A reserved field, or a reply-only field in a request, is not zero.
    #[error("reserved field not zero")]
    Reserved,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Checks what every probe packet shares: length, magic, version, and
/// the length field; returns the kind code.
fn check_header(b: &[u8], min: usize) -> Result<u8, WireError> {
    if b.len() < HEADER_LEN {
        return Err(WireError::Truncated(b.len()));
    }
    if b[..4] != MAGIC {
        return Err(WireError::Magic);
    }
    if b[4] != VERSION {
        return Err(WireError::Version(b[4]));
    }
    let len = u16_at(b, 8);
    if usize::from(len) != b.len() {
        return Err(WireError::Length {
            field: len,
            actual: b.len(),
        });
    }
    if !(min..=MAX_PACKET).contains(&b.len()) {
        return Err(WireError::Size(b.len()));
    }
    Ok(b[5])
}

/// A loss probe's packet: an echo request or its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    /// A reply (else a request).
    pub reply: bool,
    /// Datagram length in bytes.
    pub len: u16,
    /// The client's measurement.
    pub nonce: u64,
    /// The echo's number in the measurement.
    pub seq: u32,
    /// Reply: echoes of this nonce that reached the responder so far,
    /// this one included.
    pub received: u32,
    /// Reply: nanoseconds from the arrival of the measurement's first
    /// echo to this one's (the responder's clock).
    pub offset_ns: u64,
}

impl Echo {
    /// An echo request.
    pub fn request(nonce: u64, seq: u32, len: u16) -> Echo {
        Echo {
            reply: false,
            len,
            nonce,
            seq,
            received: 0,
            offset_ns: 0,
        }
    }

    /// The reply to this request.
    pub fn answer(&self, received: u32, offset_ns: u64) -> Echo {
        Echo {
            reply: true,
            received,
            offset_ns,
            ..*self
        }
    }

    /// Checks and decodes one datagram.
    pub fn decode(b: &[u8]) -> Result<Echo, WireError> {
        let reply = match check_header(b, ECHO_MIN)? {
            3 => false,
            4 => true,
            k => return Err(WireError::Kind(k)),
        };
        let e = Echo {
            reply,
            len: u16_at(b, 8),
            nonce: u64_at(b, 16),
            seq: u32_at(b, 24),
            received: u32_at(b, 28),
            offset_ns: u64_at(b, 32),
        };
        let reserved_zero = u16_at(b, 6) == 0 && b[10..16].iter().all(|&x| x == 0);
        let request_clean = reply || (e.received == 0 && e.offset_ns == 0);
        if !(reserved_zero && request_clean) {
            return Err(WireError::Reserved);
        }
        Ok(e)
    }

    /// Encodes into a datagram of `self.len` bytes (zero padding).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; usize::from(self.len).max(HEADER_LEN)];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = if self.reply { 4 } else { 3 };
        b[8..10].copy_from_slice(&self.len.to_be_bytes());
        b[16..24].copy_from_slice(&self.nonce.to_be_bytes());
        b[24..28].copy_from_slice(&self.seq.to_be_bytes());
        b[28..32].copy_from_slice(&self.received.to_be_bytes());
        b[32..40].copy_from_slice(&self.offset_ns.to_be_bytes());
        b
    }
}

impl Probe {
    /// A request: packet `seq` of a train of `count`, `len` bytes long.
    pub fn request(nonce: u64, train: u32, seq: u16, count: u16, len: u16) -> Probe {
        Probe {
            kind: Kind::Request,
            len,
            seq,
            count,
            received: 0,
            nonce,
            train,
            offset_ns: 0,
            sent_ns: 0,
        }
    }

    /// The reply to this request.
    pub fn reply(&self, received: u16, offset_ns: u64) -> Probe {
        Probe {
            kind: Kind::Reply,
            received,
            offset_ns,
            ..*self
        }
    }

    /// Checks and decodes one datagram.
    pub fn decode(b: &[u8]) -> Result<Probe, WireError> {
        let kind = match check_header(b, MIN_PACKET)? {
            1 => Kind::Request,
            2 => Kind::Reply,
            k => return Err(WireError::Kind(k)),
        };
        let len = u16_at(b, 8);
        let p = Probe {
            kind,
            len,
            seq: u16_at(b, 10),
            count: u16_at(b, 12),
            received: u16_at(b, 14),
            nonce: u64_at(b, 16),
            train: u32_at(b, 24),
            offset_ns: u64_at(b, 32),
            sent_ns: if kind == Kind::Reply {
                u32_at(b, SENT_AT)
            } else {
                0
            },
        };
        if !(2..=MAX_TRAIN).contains(&p.count) || p.seq >= p.count || p.received > p.count {
            return Err(WireError::Train {
                seq: p.seq,
                count: p.count,
            });
        }
        let reserved_zero = u16_at(b, 6) == 0 && u32_at(b, 28) == 0;
        let request_clean = kind == Kind::Reply || (p.received == 0 && p.offset_ns == 0);
        if !(reserved_zero && request_clean) {
            return Err(WireError::Reserved);
        }
        Ok(p)
    }

    /// Encodes into a datagram of `self.len` bytes (zero padding).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; usize::from(self.len).max(HEADER_LEN)];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.kind.code();
        b[8..10].copy_from_slice(&self.len.to_be_bytes());
        b[10..12].copy_from_slice(&self.seq.to_be_bytes());
        b[12..14].copy_from_slice(&self.count.to_be_bytes());
        b[14..16].copy_from_slice(&self.received.to_be_bytes());
        b[16..24].copy_from_slice(&self.nonce.to_be_bytes());
        b[24..28].copy_from_slice(&self.train.to_be_bytes());
        b[32..40].copy_from_slice(&self.offset_ns.to_be_bytes());
        stamp_sent(&mut b, self.sent_ns);
        b
    }
}

/// Writes a train reply's `sent_ns` into its encoded datagram: done by
/// the responder's I/O just before the send, so that the stamp is when
/// the reply really went, not when it was composed. Datagrams too short
/// to hold it are left alone.
pub fn stamp_sent(datagram: &mut [u8], sent_ns: u32) {
    if let Some(field) = datagram.get_mut(SENT_AT..SENT_AT + 4) {
        field.copy_from_slice(&sent_ns.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_probe() -> impl Strategy<Value = Probe> {
        (
            any::<bool>(),
            MIN_PACKET as u16..=MAX_PACKET as u16,
            2..=MAX_TRAIN,
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
        )
            .prop_flat_map(|(reply, len, count, nonce, train, offset, sent)| {
                (0..count, 0..=count).prop_map(move |(seq, received)| {
                    let req = Probe::request(nonce, train, seq, count, len);
                    if reply {
                        Probe {
                            sent_ns: sent,
                            ..req.reply(received, offset)
                        }
                    } else {
                        req
                    }
                })
            })
    }

    proptest! {
        #[test]
        fn every_valid_probe_round_trips(p in any_probe()) {
            let bytes = p.encode();
            prop_assert_eq!(bytes.len(), usize::from(p.len));
            prop_assert_eq!(Probe::decode(&bytes), Ok(p));
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_decode_only_within_bounds(
            bytes in proptest::collection::vec(any::<u8>(), 0..10_000)
        ) {
            if let Ok(p) = Probe::decode(&bytes) {
                prop_assert!((MIN_PACKET..=MAX_PACKET).contains(&bytes.len()));
                prop_assert!(p.seq < p.count && p.count <= MAX_TRAIN);
            }
        }

        #[test]
        fn flipping_any_header_byte_is_refused_or_decodes_consistently(
            p in any_probe(), at in 0..HEADER_LEN, flip in 1u8..=255
        ) {
            let mut bytes = p.encode();
            bytes[at] ^= flip;
            if let Ok(q) = Probe::decode(&bytes) {
                // Only the free fields (and a request's kind, into a reply
                // with nothing in its reply fields) may change and decode.
                prop_assert_eq!(q.encode(), bytes);
                prop_assert!(at >= 10 || (at == 5 && q.kind == Kind::Reply),
                    "magic, version and length are checked");
            }
        }

        #[test]
        fn a_probe_with_any_other_length_is_refused(p in any_probe(), cut in 1usize..64) {
            let bytes = p.encode();
            let short = &bytes[..bytes.len() - cut.min(bytes.len())];
            prop_assert!(Probe::decode(short).is_err());
            let mut long = bytes.clone();
            long.extend(std::iter::repeat_n(0u8, cut));
            prop_assert!(Probe::decode(&long).is_err());
        }
    }

    #[test]
    fn sizes_outside_the_bounds_are_refused_even_when_consistent() {
        for len in [HEADER_LEN, MIN_PACKET - 1, MAX_PACKET + 1, 65_000] {
            let b = Probe::request(1, 2, 0, 2, len as u16).encode();
            assert_eq!(Probe::decode(&b), Err(WireError::Size(len)), "{len}");
        }
    }

    #[test]
    fn requests_with_reply_fields_set_are_refused() {
        let mut b = Probe::request(1, 2, 0, 2, 512).encode();
        b[33] = 1;
        assert_eq!(Probe::decode(&b), Err(WireError::Reserved));
        let mut b = Probe::request(1, 2, 0, 2, 512).encode();
        b[6] = 1;
        assert_eq!(Probe::decode(&b), Err(WireError::Reserved));
    }

    #[test]
    fn bad_trains_are_refused() {
        for (seq, count) in [(0, 0), (0, 1), (2, 2), (0, MAX_TRAIN + 1)] {
            let b = Probe::request(1, 2, seq, count, 512).encode();
            assert!(
                matches!(Probe::decode(&b), Err(WireError::Train { .. })),
                "{seq}/{count}"
            );
        }
    }

    proptest! {
        #[test]
        fn every_echo_round_trips_and_is_never_a_train_packet(
            len in ECHO_MIN as u16..=MAX_PACKET as u16,
            nonce in any::<u64>(), seq in any::<u32>(),
            received in any::<u32>(), offset in any::<u64>(), reply in any::<bool>(),
        ) {
            let req = Echo::request(nonce, seq, len);
            let e = if reply { req.answer(received, offset) } else { req };
            let bytes = e.encode();
            prop_assert_eq!(bytes.len(), usize::from(len));
            prop_assert_eq!(Echo::decode(&bytes), Ok(e));
            prop_assert!(matches!(Probe::decode(&bytes), Err(WireError::Kind(_) | WireError::Size(_))));
        }
    }

    #[test]
    fn echoes_refuse_train_packets_reply_fields_in_requests_and_bad_sizes() {
        let train = Probe::request(1, 2, 0, 2, 512).encode();
        assert_eq!(Echo::decode(&train), Err(WireError::Kind(1)));
        let mut b = Echo::request(1, 2, 64).encode();
        b[31] = 1;
        assert_eq!(Echo::decode(&b), Err(WireError::Reserved));
        let mut b = Echo::request(1, 2, 64).encode();
        b[12] = 1;
        assert_eq!(Echo::decode(&b), Err(WireError::Reserved));
        let b = Echo::request(1, 2, 64).encode();
        assert_eq!(
            Echo::decode(&b[..50]).unwrap_err(),
            WireError::Length {
                field: 64,
                actual: 50
            }
        );
        let e = Echo::request(7, 0x0102_0304, 40).answer(5, 9);
        let b = e.encode();
        assert_eq!(&b[..6], b"TRNP\x01\x04");
        assert_eq!(&b[24..32], &[1, 2, 3, 4, 0, 0, 0, 5]);
    }

    #[test]
    fn the_layout_matches_the_documented_offsets() {
        let p = Probe::request(0x0102_0304_0506_0708, 0x0a0b_0c0d, 3, 9, 300).reply(7, 0x11);
        let b = p.encode();
        assert_eq!(&b[..6], b"TRNP\x01\x02");
        assert_eq!(&b[8..16], &[1, 44, 0, 3, 0, 9, 0, 7]);
        assert_eq!(&b[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[24..28], &[0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(b[39], 0x11);
        assert!(b[40..].iter().all(|&x| x == 0));
        let mut stamped = b.clone();
        stamp_sent(&mut stamped, 0x0102_0304);
        assert_eq!(&stamped[40..44], &[1, 2, 3, 4]);
        assert!(stamped[44..].iter().all(|&x| x == 0));
        assert_eq!(Probe::decode(&stamped).map(|q| q.sent_ns), Ok(0x0102_0304));
    }

    #[test]
    fn a_request_never_carries_a_send_stamp_and_short_datagrams_are_not_stamped() {
        // Requests ignore what lies where a reply's stamp would be: it was
        // padding to the first responders and clients.
        let mut request = Probe::request(1, 2, 0, 4, 300).encode();
        stamp_sent(&mut request, 99);
        assert_eq!(Probe::decode(&request).map(|q| q.sent_ns), Ok(0));
        let mut echo = Echo::request(1, 2, ECHO_MIN as u16).encode();
        let before = echo.clone();
        stamp_sent(&mut echo, 99);
        assert_eq!(echo, before);
    }
}
