//! Property tests of every decoder and encoder in tern-proto.
//!
//! - Arbitrary values of every frame type survive encode → decode unchanged.
//! - Decoders never panic, whatever bytes they are given, and whatever they
//!   accept re-encodes to the same bytes (fixed layouts) or to a message that
//!   decodes to the same value (control messages).
//! - A block header announcing more than `MAX_BLOCK_SIZE` is always refused.
//!
//! The `fuzz/` targets explore the same decoders with coverage guidance; these
//! tests run on every `cargo test`.

use proptest::collection::vec;
use proptest::prelude::*;

use tern_proto::control::control_body_len;
use tern_proto::data::{HEADER_LEN, JOIN_LEN, JOIN_REPLY_LEN};
use tern_proto::delegation::{SignedDelegation, TpcRole};
use tern_proto::hello::HELLO_LEN;
use tern_proto::{
    BlockFlags, BlockHeader, ChecksumAlg, Codec, Compression, ControlMsg, DataFrame, DataJoin,
    DecodeError, EntryKind, EntryMeta, ErrorCode, Existing, Features, FileMeta, Hello, JoinReply,
    MAX_BLOCK_SIZE, MAX_CONTROL_FRAME, OnceLine, Protect, RawLen, RelPath, SessionAccept,
    SessionMode, SessionOpen, SkipExisting, TpcSession, TransferOptions, TuningRequest, Window,
    decode_control, encode_control,
};

// ---------------------------------------------------------------- strategies

fn hello() -> impl Strategy<Value = Hello> {
    (any::<u16>(), any::<u16>(), any::<u64>()).prop_map(|(version, min_version, f)| Hello {
        version,
        min_version,
        features: Features(f),
    })
}

fn data_join() -> impl Strategy<Value = DataJoin> {
    (any::<u16>(), any::<u16>(), any::<[u8; 16]>()).prop_map(|(version, stream, token)| DataJoin {
        version,
        stream,
        token,
    })
}

fn join_reply() -> impl Strategy<Value = JoinReply> {
    prop_oneof![Just(JoinReply::Accepted), Just(JoinReply::Refused)]
}

fn block_header() -> impl Strategy<Value = BlockHeader> {
    (
        prop_oneof![Just(BlockFlags::default()), Just(BlockFlags::REPAIR)],
        prop_oneof![Just(None), Just(Some(Codec::Zstd)), Just(Some(Codec::Lz4))],
    )
        .prop_flat_map(|(flags, codec)| {
            // A compressed payload holds at least its raw length prefix.
            let min_len = if codec.is_some() { 4 } else { 0 };
            (
                Just(flags.with_codec(codec)),
                any::<u32>(),
                any::<u64>(),
                min_len..=MAX_BLOCK_SIZE,
                any::<[u8; 16]>(),
            )
        })
        .prop_map(|(flags, file_id, offset, length, check)| BlockHeader {
            flags,
            file_id,
            offset,
            length,
            check,
        })
}

fn data_frame() -> impl Strategy<Value = DataFrame> {
    prop_oneof![
        4 => block_header().prop_map(DataFrame::Block),
        1 => Just(DataFrame::StreamEnd),
    ]
}

fn checksum_alg() -> impl Strategy<Value = ChecksumAlg> {
    proptest::sample::select(ChecksumAlg::ALL.to_vec())
}

fn protect() -> impl Strategy<Value = Protect> {
    // Fails to compile when a variant is added, so this list stays complete.
    fn _exhaustive(p: Protect) {
        match p {
            Protect::Clear | Protect::Safe | Protect::Private => {}
        }
    }
    prop_oneof![
        Just(Protect::Clear),
        Just(Protect::Safe),
        Just(Protect::Private)
    ]
}

const ERROR_CODES: [ErrorCode; 9] = [
    ErrorCode::NotFound,
    ErrorCode::PermissionDenied,
    ErrorCode::NoSpace,
    ErrorCode::Io,
    ErrorCode::BadRequest,
    ErrorCode::DigestMismatch,
    ErrorCode::Protocol,
    ErrorCode::Aborted,
    ErrorCode::TooManyRetries,
];

fn error_code() -> impl Strategy<Value = ErrorCode> {
    // Fails to compile when a variant is added, so ERROR_CODES stays complete.
    fn _exhaustive(c: ErrorCode) {
        match c {
            ErrorCode::NotFound
            | ErrorCode::PermissionDenied
            | ErrorCode::NoSpace
            | ErrorCode::Io
            | ErrorCode::BadRequest
            | ErrorCode::DigestMismatch
            | ErrorCode::Protocol
            | ErrorCode::Aborted
            | ErrorCode::TooManyRetries => {}
        }
    }
    proptest::sample::select(ERROR_CODES.to_vec())
}

/// Any string, including multi-byte UTF-8, kept short.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("(?s).{0,40}").expect("valid regex")
}

fn session_mode() -> impl Strategy<Value = SessionMode> {
    prop_oneof![
        (text(), any::<u32>()).prop_map(|(dest, top_level)| SessionMode::Push { dest, top_level }),
        (vec(text(), 0..5), any::<bool>())
            .prop_map(|(sources, recursive)| SessionMode::Pull { sources, recursive }),
        (any::<bool>(), any::<u64>(), any::<u64>()).prop_map(|(server_sends, bytes, millis)| {
            SessionMode::Perf {
                server_sends,
                bytes,
                millis,
            }
        }),
    ]
}

fn file_meta() -> impl Strategy<Value = FileMeta> {
    (
        any::<u32>(),
        vec(any::<u8>(), 0..40),
        any::<u64>(),
        any::<u32>(),
        any::<i64>(),
        any::<u32>(),
    )
        .prop_map(|(file_id, path, size, mode, mtime_s, mtime_ns)| FileMeta {
            file_id,
            path: RelPath(path),
            size,
            mode,
            mtime_s,
            mtime_ns,
        })
}

fn control_msg() -> impl Strategy<Value = ControlMsg> {
    // Fails to compile when a variant is added, so the list below stays complete.
    fn _exhaustive(m: &ControlMsg) {
        match m {
            ControlMsg::SessionOpen(_)
            | ControlMsg::SessionAccept(_)
            | ControlMsg::DirAnnounce { .. }
            | ControlMsg::FileAnnounce(_)
            | ControlMsg::BlockRequest { .. }
            | ControlMsg::FileSent { .. }
            | ControlMsg::FileDone { .. }
            | ControlMsg::Error { .. }
            | ControlMsg::Close { .. }
            | ControlMsg::Tuning(_)
            | ControlMsg::TuningAccept { .. }
            | ControlMsg::MoreStreams { .. }
            | ControlMsg::FileHave { .. }
            | ControlMsg::TokenAuth { .. }
            | ControlMsg::TransferOptions(_)
            | ControlMsg::FileCheck { .. }
            | ControlMsg::EntryAnnounce(_)
            | ControlMsg::EntryFailed { .. }
            | ControlMsg::Paths { .. }
            | ControlMsg::TpcOpen { .. }
            | ControlMsg::TpcAccept { .. }
            | ControlMsg::TpcDial { .. }
            | ControlMsg::PeerOpen { .. }
            | ControlMsg::TpcProgress { .. }
            | ControlMsg::TpcDone { .. }
            | ControlMsg::TpcUnreachable { .. }
            | ControlMsg::PathRate { .. } => {}
        }
    }
    prop_oneof![
        (
            session_mode(),
            any::<u16>(),
            any::<u32>(),
            checksum_alg(),
            protect()
        )
            .prop_map(|(mode, streams, block_size, checksum, protect)| {
                ControlMsg::SessionOpen(SessionOpen {
                    mode,
                    streams,
                    block_size,
                    checksum,
                    protect,
                })
            }),
        (any::<[u8; 16]>(), any::<u16>(), any::<u32>()).prop_map(|(token, streams, block_size)| {
            ControlMsg::SessionAccept(SessionAccept {
                token,
                streams,
                block_size,
            })
        }),
        (text(), any::<u32>()).prop_map(|(path, mode)| ControlMsg::DirAnnounce {
            path: path.into(),
            mode
        }),
        file_meta().prop_map(ControlMsg::FileAnnounce),
        (any::<u32>(), vec(any::<(u64, u32)>(), 0..20))
            .prop_map(|(file_id, ranges)| ControlMsg::BlockRequest { file_id, ranges }),
        (
            any::<u32>(),
            any::<u64>(),
            vec(any::<u8>(), 0..33),
            vec(any::<u64>(), 0..20)
        )
            .prop_map(
                |(file_id, size, digest, stream_marks)| ControlMsg::FileSent {
                    file_id,
                    size,
                    digest,
                    stream_marks,
                }
            ),
        (any::<u32>(), vec(any::<u8>(), 0..33))
            .prop_map(|(file_id, digest)| ControlMsg::FileDone { file_id, digest }),
        (error_code(), text(), any::<Option<u32>>()).prop_map(|(code, message, file_id)| {
            ControlMsg::Error {
                code,
                message,
                file_id,
            }
        }),
        vec(any::<u64>(), 0..20)
            .prop_map(|per_stream_bytes| ControlMsg::Close { per_stream_bytes }),
        (
            any::<u16>(),
            prop_oneof![
                Just(Window::Auto),
                Just(Window::Kernel),
                any::<u32>().prop_map(Window::Fixed)
            ],
            text()
        )
            .prop_map(|(max_streams, window, congestion)| {
                ControlMsg::Tuning(TuningRequest {
                    max_streams,
                    window,
                    congestion,
                })
            }),
        (any::<u16>(), text()).prop_map(|(max_streams, congestion)| ControlMsg::TuningAccept {
            max_streams,
            congestion
        }),
        any::<u16>().prop_map(|total| ControlMsg::MoreStreams { total }),
        (any::<u32>(), vec((any::<u64>(), any::<u64>()), 0..20))
            .prop_map(|(file_id, ranges)| ControlMsg::FileHave { file_id, ranges }),
        any::<[u8; 16]>().prop_map(|token| ControlMsg::TokenAuth { token }),
        (
            proptest::sample::select(vec![
                Compression::None,
                Compression::Auto,
                Compression::Zstd,
                Compression::Lz4
            ]),
            proptest::sample::select(vec![
                SkipExisting::Never,
                SkipExisting::Size,
                SkipExisting::Mtime,
                SkipExisting::Digest
            ]),
            any::<u32>(),
            any::<u16>()
        )
            .prop_map(
                |(compression, skip_existing, stall_timeout_ms, spare_streams)| {
                    ControlMsg::TransferOptions(TransferOptions {
                        compression,
                        skip_existing,
                        stall_timeout_ms,
                        spare_streams,
                    })
                }
            ),
        (
            any::<u32>(),
            prop_oneof![
                Just(Existing::Absent),
                Just(Existing::Same),
                vec(any::<u8>(), 0..33).prop_map(Existing::Digest)
            ]
        )
            .prop_map(|(file_id, existing)| ControlMsg::FileCheck { file_id, existing }),
        (
            vec(any::<u8>(), 0..40),
            prop_oneof![
                Just(EntryKind::Dir),
                Just(EntryKind::Fifo),
                vec(any::<u8>(), 0..40).prop_map(|t| EntryKind::Symlink { target: RelPath(t) })
            ],
            any::<u32>(),
            any::<i64>(),
            any::<u32>()
        )
            .prop_map(|(path, kind, mode, mtime_s, mtime_ns)| {
                ControlMsg::EntryAnnounce(EntryMeta {
                    path: RelPath(path),
                    kind,
                    mode,
                    mtime_s,
                    mtime_ns,
                })
            }),
        (
            vec(any::<u8>(), 0..40),
            any::<Option<u32>>(),
            error_code(),
            text()
        )
            .prop_map(|(path, file_id, code, message)| ControlMsg::EntryFailed {
                path: RelPath(path),
                file_id,
                code,
                message,
            }),
        // Flow labels and scope ids are not on the wire.
        vec(
            any::<std::net::SocketAddr>().prop_map(|a| std::net::SocketAddr::new(a.ip(), a.port())),
            0..20
        )
        .prop_map(|addresses| ControlMsg::Paths { addresses }),
        tpc_message(),
    ]
}

/// A socket address as the wire carries it (no flow label or scope id).
fn wire_addr() -> impl Strategy<Value = std::net::SocketAddr> {
    any::<std::net::SocketAddr>().prop_map(|a| std::net::SocketAddr::new(a.ip(), a.port()))
}

fn signed_delegation() -> impl Strategy<Value = SignedDelegation> {
    (
        vec(any::<u8>(), 0..200),
        any::<[u8; 32]>(),
        vec(any::<u8>(), 0..70),
    )
        .prop_map(|(body, key, signature)| SignedDelegation {
            body,
            key,
            signature,
        })
}

/// A third-party copy's session choices.
fn tpc_session() -> impl Strategy<Value = TpcSession> {
    (
        (any::<u16>(), any::<bool>(), any::<bool>(), any::<u32>()),
        (checksum_alg(), protect(), any::<u64>()),
        (any::<u16>(), any::<u32>(), text()),
        (any::<u32>(), any::<u16>()),
    )
        .prop_map(
            |(
                (streams, streams_from_rtt, auto_streams, block_size),
                (checksum, protect, rate_limit_bps),
                (max_streams, fixed, congestion),
                (stall_timeout_ms, spare_streams),
            )| TpcSession {
                streams,
                streams_from_rtt,
                auto_streams,
                block_size,
                checksum,
                protect,
                rate_limit_bps,
                tuning: TuningRequest {
                    max_streams,
                    window: Window::Fixed(fixed),
                    congestion,
                },
                options: TransferOptions {
                    compression: Compression::Zstd,
                    skip_existing: SkipExisting::Digest,
                    stall_timeout_ms,
                    spare_streams,
                },
            },
        )
}

/// The third-party-copy messages.
fn tpc_message() -> impl Strategy<Value = ControlMsg> {
    let role = prop_oneof![Just(TpcRole::Source), Just(TpcRole::Dest)];
    prop_oneof![
        (role, signed_delegation())
            .prop_map(|(role, delegation)| ControlMsg::TpcOpen { role, delegation }),
        (any::<[u8; 16]>(), vec(wire_addr(), 0..4))
            .prop_map(|(ticket, addresses)| ControlMsg::TpcAccept { ticket, addresses }),
        (
            text(),
            any::<u16>(),
            vec(wire_addr(), 0..4),
            any::<[u8; 16]>(),
            tpc_session()
        )
            .prop_map(
                |(host, port, addresses, ticket, session)| ControlMsg::TpcDial {
                    host,
                    port,
                    addresses,
                    ticket,
                    session: Box::new(session),
                }
            ),
        (signed_delegation(), any::<[u8; 16]>())
            .prop_map(|(delegation, ticket)| ControlMsg::PeerOpen { delegation, ticket }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(bytes, total, files_done)| {
            ControlMsg::TpcProgress {
                bytes,
                total,
                files_done,
            }
        }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u16>(),
            any::<u64>(),
            wire_addr(),
            wire_addr(),
            any::<u64>(),
        )
            .prop_map(
                |(
                    bytes,
                    files,
                    streams,
                    network_elapsed_ms,
                    dialer_address,
                    peer_address,
                    bytes_resumed,
                )| {
                    ControlMsg::TpcDone {
                        bytes,
                        files,
                        streams,
                        network_elapsed_ms,
                        dialer_address,
                        peer_address,
                        bytes_resumed,
                    }
                },
            ),
        text().prop_map(|reason| ControlMsg::TpcUnreachable { reason }),
        any::<u64>().prop_map(|bps| ControlMsg::PathRate { bps }),
    ]
}

/// Arbitrary bytes, biased towards the lengths of the fixed layouts.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..64),
        vec(any::<u8>(), HEADER_LEN..=HEADER_LEN),
        vec(any::<u8>(), 0..1024),
    ]
}

/// Valid bytes for `prefix` with random bytes after it, so the decoder gets
/// past its magic or kind check.
fn with_prefix(prefix: &'static [u8], len: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=len).prop_map(move |tail| {
        let mut b = prefix.to_vec();
        b.extend(tail);
        b
    })
}

fn once_line() -> impl Strategy<Value = OnceLine> {
    (
        any::<Option<u16>>().prop_map(|p| p.filter(|p| *p != 0)),
        any::<Option<std::net::IpAddr>>(),
        any::<[u8; 16]>(),
        "[A-Za-z0-9+/]{1,60}",
    )
        .prop_map(|(port, addr, token, fp)| OnceLine {
            port,
            addr,
            token,
            fingerprint: format!("SHA256:{fp}"),
        })
}

// ---------------------------------------------------------------- round trips

proptest! {
    #[test]
    fn hello_round_trips(h in hello()) {
        prop_assert_eq!(Hello::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn data_join_round_trips(j in data_join()) {
        prop_assert_eq!(DataJoin::decode(&j.encode()), Ok(j));
    }

    #[test]
    fn join_reply_round_trips(r in join_reply()) {
        prop_assert_eq!(JoinReply::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn once_line_round_trips(l in once_line()) {
        prop_assert_eq!(OnceLine::decode(&l.encode()), Ok(l));
    }

    /// Whatever the once-line reader accepts re-encodes to a line that
    /// reads the same.
    #[test]
    fn once_line_decode_never_panics(
        text in prop_oneof![".{0,200}", "TERN-ONCE 1( [a-z]{1,12}=[ -~]{0,30}){0,6}"]
    ) {
        if let Ok(l) = OnceLine::decode(&text) {
            prop_assert_eq!(OnceLine::decode(&l.encode()), Ok(l));
        }
    }

    #[test]
    fn data_frame_round_trips(f in data_frame()) {
        prop_assert_eq!(DataFrame::decode(&f.encode()), Ok(f));
    }

    #[test]
    fn control_msg_round_trips(m in control_msg()) {
        let frame = encode_control(&m);
        let len = control_body_len(frame[..4].try_into().unwrap());
        prop_assert_eq!(len, Ok(frame.len() - 4));
        prop_assert_eq!(decode_control(&frame[4..]), Ok(m));
    }

    /// Decoding is deterministic and reads tokens in order, so a message cut
    /// short can never decode; a control frame is never mistaken for another.
    #[test]
    fn truncated_control_bodies_never_decode(m in control_msg(), cut in any::<prop::sample::Index>()) {
        let frame = encode_control(&m);
        let body = &frame[4..];
        let cut = cut.index(body.len());
        prop_assert!(decode_control(&body[..cut]).is_err());
    }

    #[test]
    fn raw_lengths_round_trip(len in 1..=MAX_BLOCK_SIZE) {
        prop_assert_eq!(RawLen::decode(&RawLen(len).encode()), Ok(RawLen(len)));
    }

    #[test]
    fn fixed_layouts_ignore_what_follows(h in hello(), j in data_join(), f in data_frame(), tail in vec(any::<u8>(), 0..16)) {
        let mut b = h.encode().to_vec();
        b.extend(&tail);
        prop_assert_eq!(Hello::decode(&b), Ok(h));
        let mut b = j.encode().to_vec();
        b.extend(&tail);
        prop_assert_eq!(DataJoin::decode(&b), Ok(j));
        let mut b = f.encode().to_vec();
        b.extend(&tail);
        prop_assert_eq!(DataFrame::decode(&b), Ok(f));
    }
}

// ---------------------------------------------------------------- never panic

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Whatever the control decoder accepts is a message that re-encodes and
    /// decodes to itself.
    #[test]
    fn decode_control_never_panics(b in bytes()) {
        if let Ok(m) = decode_control(&b) {
            let frame = encode_control(&m);
            prop_assert!(frame.len() - 4 <= b.len(), "re-encoding is never longer (shortest varints)");
            prop_assert_eq!(decode_control(&frame[4..]), Ok(m));
        }
    }

    /// Start every body with a valid variant index so the fields get decoded.
    #[test]
    fn decode_control_never_panics_past_the_variant(variant in 0u8..16, b in vec(any::<u8>(), 0..256)) {
        let mut body = vec![variant];
        body.extend(b);
        if let Ok(m) = decode_control(&body) {
            let frame = encode_control(&m);
            prop_assert_eq!(decode_control(&frame[4..]), Ok(m));
        }
    }

    #[test]
    fn control_body_len_never_panics(prefix in any::<[u8; 4]>()) {
        let len = u32::from_be_bytes(prefix);
        match control_body_len(prefix) {
            Ok(n) => prop_assert!(len <= MAX_CONTROL_FRAME && n == len as usize),
            Err(e) => {
                prop_assert!(len > MAX_CONTROL_FRAME);
                let is_too_long = matches!(e, DecodeError::TooLong { .. });
                prop_assert!(is_too_long);
            }
        }
    }

    /// Whatever a fixed-layout decoder accepts re-encodes to the same bytes:
    /// no two encodings mean the same thing.
    #[test]
    fn hello_decode_never_panics(b in prop_oneof![bytes(), with_prefix(b"TERN", 20)]) {
        match Hello::decode(&b) {
            Ok(h) => prop_assert_eq!(&h.encode()[..], &b[..HELLO_LEN]),
            Err(_) => prop_assert!(b.len() < HELLO_LEN || &b[..4] != b"TERN"),
        }
    }

    #[test]
    fn data_join_decode_never_panics(b in prop_oneof![bytes(), with_prefix(b"TERD", 30)]) {
        match DataJoin::decode(&b) {
            Ok(j) => prop_assert_eq!(&j.encode()[..], &b[..JOIN_LEN]),
            Err(_) => prop_assert!(b.len() < JOIN_LEN || &b[..4] != b"TERD"),
        }
    }

    #[test]
    fn join_reply_decode_never_panics(b in prop_oneof![bytes(), with_prefix(b"TJ", 4)]) {
        if let Ok(r) = JoinReply::decode(&b) {
            prop_assert_eq!(&r.encode()[..], &b[..JOIN_REPLY_LEN]);
        }
    }

    #[test]
    fn data_frame_decode_never_panics(b in prop_oneof![
        bytes(),
        with_prefix(&[0xB1], 40),
        with_prefix(&[0xB1, 0x01, 0, 0], 40),
        with_prefix(&[0xB1, 0x02, 0, 0], 40),
        with_prefix(&[0xB1, 0x05, 0, 0], 40),
        with_prefix(&[0xE0], 40),
    ]) {
        if let Ok(f) = DataFrame::decode(&b) {
            prop_assert_eq!(&f.encode()[..], &b[..HEADER_LEN]);
            if let DataFrame::Block(h) = f {
                prop_assert!(h.length <= MAX_BLOCK_SIZE);
                if h.flags.codec().is_some() {
                    prop_assert!(h.length >= 4, "a compressed payload holds its raw length");
                }
            }
        }
    }

    #[test]
    fn raw_length_decode_never_panics(b in vec(any::<u8>(), 0..8)) {
        match RawLen::decode(&b) {
            Ok(r) => {
                prop_assert!(r.0 >= 1 && r.0 <= MAX_BLOCK_SIZE);
                prop_assert_eq!(&r.encode()[..], &b[..4]);
            }
            Err(_) => prop_assert!(
                b.len() < 4 || !(1..=MAX_BLOCK_SIZE).contains(&u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            ),
        }
    }

    /// A header announcing more than MAX_BLOCK_SIZE is refused, whatever else
    /// it says, before any payload is read.
    #[test]
    fn oversized_blocks_are_always_refused(
        h in block_header(),
        length in (MAX_BLOCK_SIZE + 1)..=u32::MAX,
    ) {
        let mut b = DataFrame::Block(h).encode();
        b[16..20].copy_from_slice(&length.to_be_bytes());
        prop_assert_eq!(
            DataFrame::decode(&b),
            Err(DecodeError::TooLong { len: length.into(), max: MAX_BLOCK_SIZE.into() })
        );
    }

    /// Every header shorter than 36 bytes is refused as truncated.
    #[test]
    fn short_headers_are_truncated(f in data_frame(), cut in 0..HEADER_LEN) {
        let b = f.encode();
        prop_assert_eq!(
            DataFrame::decode(&b[..cut]),
            Err(DecodeError::Truncated { need: HEADER_LEN, have: cut })
        );
    }
}
