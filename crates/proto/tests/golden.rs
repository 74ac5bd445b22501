//! Golden byte vectors: every ```` ```golden name=… ```` block of
//! `docs/PROTOCOL.md` is a test.
//!
//! For each named vector this file builds the Rust value and checks both
//! directions: `encode(value) == bytes` and `decode(bytes) == value`. The
//! test fails when the document lacks a vector this file knows, when the
//! document has a vector this file does not know, or when a name appears
//! twice, so the spec and the code cannot drift apart silently.
//!
//! Block format: the opening fence is ```` ```golden name=NAME ````; inside,
//! bytes are whitespace-separated pairs of hex digits, and `#` starts a
//! comment that runs to the end of the line.

use std::collections::BTreeMap;

use tern_proto::control::control_body_len;
use tern_proto::data::HEADER_LEN;
use tern_proto::{
    BlockFlags, BlockHeader, ChecksumAlg, Codec, Compression, ControlMsg, DataFrame, DataJoin,
    EntryKind, EntryMeta, ErrorCode, Existing, Features, FileMeta, Hello, JoinReply, OnceLine,
    Protect, RawLen, RelPath, SessionAccept, SessionMode, SessionOpen, SkipExisting,
    TransferOptions, TuningRequest, Window, decode_control, encode_control,
};

/// What a golden vector encodes.
enum Golden {
    Hello(Hello),
    Join(DataJoin),
    Reply(JoinReply),
    Frame(DataFrame),
    /// A complete control frame: 4-byte length prefix and postcard body.
    Control(ControlMsg),
    /// The line `tern serve --once` prints, as ASCII, without its newline.
    Once(OnceLine),
    /// A compressed block: header, raw length prefix and compressed bytes
    /// that decompress to `raw` (the compressed bytes themselves depend on
    /// the compressor, so only the header and prefix are re-encoded).
    Compressed {
        header: BlockHeader,
        raw: Vec<u8>,
    },
    /// The clear/private block check's seed: XXH3-64 of the block's
    /// position (`file_id | offset | length`), as a big-endian `u64`.
    Xxh3Seed {
        header: BlockHeader,
    },
    /// The clear/private block check: XXH3-128 of the payload with that
    /// seed, big-endian.
    Xxh3Check {
        header: BlockHeader,
        payload: &'static [u8],
    },
    /// Safe-mode key derivation, step 2: BLAKE3 keyed with the exported
    /// material, over the session token.
    MacKey {
        material: [u8; 32],
        token: [u8; 16],
    },
    /// The safe-mode block check: keyed BLAKE3 over the header fields and
    /// the payload, truncated to 16 bytes.
    SafeMac {
        key: [u8; 32],
        header: BlockHeader,
        payload: &'static [u8],
    },
}

/// The session token used by every vector: bytes 0x00..=0x0f.
const TOKEN: [u8; 16] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
];

/// The payload of the example block.
const PAYLOAD: &[u8] = b"tern";

/// The example whole-file digest (arbitrary 16 bytes).
const DIGEST: [u8; 16] = [
    0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
];

/// The 16 bytes every block check binds: `file_id | offset | length`, all
/// big-endian (header bytes 4..20). Computed here from the spec, not with
/// the engine's code, so the vectors check the engine rather than echo it.
fn position(file_id: u32, offset: u64, length: u32) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..4].copy_from_slice(&file_id.to_be_bytes());
    p[4..12].copy_from_slice(&offset.to_be_bytes());
    p[12..].copy_from_slice(&length.to_be_bytes());
    p
}

fn xxh3_seed(file_id: u32, offset: u64, length: u32) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&position(file_id, offset, length))
}

fn xxh3_check(file_id: u32, offset: u64, payload: &[u8]) -> [u8; 16] {
    let seed = xxh3_seed(file_id, offset, payload.len() as u32);
    xxhash_rust::xxh3::xxh3_128_with_seed(payload, seed).to_be_bytes()
}

fn safe_mac(key: &[u8; 32], h: &BlockHeader, payload: &[u8]) -> [u8; 16] {
    let mut hasher = blake3::Hasher::new_keyed(key);
    hasher.update(&position(h.file_id, h.offset, h.length));
    hasher.update(payload);
    let full = hasher.finalize();
    full.as_bytes()[..16].try_into().expect("16 bytes")
}

/// The example MAC key (and exported material): bytes 0x00..=0x1f.
fn mac_key() -> [u8; 32] {
    std::array::from_fn(|i| i as u8)
}

/// The example block: `PAYLOAD` of file 7 at offset 4 GiB, with its
/// clear/private check.
fn repair_block() -> BlockHeader {
    let (file_id, offset) = (7, 0x1_0000_0000);
    BlockHeader {
        flags: BlockFlags::REPAIR,
        file_id,
        offset,
        length: PAYLOAD.len() as u32,
        check: xxh3_check(file_id, offset, PAYLOAD),
    }
}

/// The example compressed block: `"tern"` 16 times of file 7 at 8 MiB,
/// with the check of those raw bytes; `wire` is its payload length.
fn compressed_block(codec: Codec, wire: u32) -> (BlockHeader, Vec<u8>) {
    let raw = PAYLOAD.repeat(16);
    let (file_id, offset) = (7, 8 << 20);
    let header = BlockHeader {
        flags: BlockFlags::default().with_codec(Some(codec)),
        file_id,
        offset,
        length: wire,
        check: xxh3_check(file_id, offset, &raw),
    };
    (header, raw)
}

/// Every vector the document must contain.
fn known() -> Vec<(&'static str, Golden)> {
    vec![
        ("hello_v1", Golden::Hello(Hello::ours())),
        (
            "hello_future",
            Golden::Hello(Hello {
                version: 0x0102,
                min_version: 1,
                features: Features(0x8000_0000_0000_0005),
            }),
        ),
        (
            "data_join",
            Golden::Join(DataJoin {
                version: 1,
                stream: 3,
                token: TOKEN,
            }),
        ),
        ("join_reply_accepted", Golden::Reply(JoinReply::Accepted)),
        ("join_reply_refused", Golden::Reply(JoinReply::Refused)),
        (
            "block_repair",
            Golden::Frame(DataFrame::Block(repair_block())),
        ),
        ("stream_end", Golden::Frame(DataFrame::StreamEnd)),
        ("block_lz4", {
            let (header, raw) = compressed_block(Codec::Lz4, 4 + 15);
            Golden::Compressed { header, raw }
        }),
        ("block_zstd", {
            let (header, raw) = compressed_block(Codec::Zstd, 4 + 19);
            Golden::Compressed { header, raw }
        }),
        (
            "block_check_xxh3_seed",
            Golden::Xxh3Seed {
                header: repair_block(),
            },
        ),
        (
            "block_check_xxh3",
            Golden::Xxh3Check {
                header: repair_block(),
                payload: PAYLOAD,
            },
        ),
        (
            "block_mac_key",
            Golden::MacKey {
                material: mac_key(),
                token: TOKEN,
            },
        ),
        (
            "block_check_safe",
            Golden::SafeMac {
                key: mac_key(),
                header: BlockHeader {
                    flags: BlockFlags::default(),
                    ..repair_block()
                },
                payload: PAYLOAD,
            },
        ),
        (
            "session_open_push",
            Golden::Control(ControlMsg::SessionOpen(SessionOpen {
                mode: SessionMode::Push {
                    dest: "data/run42".into(),
                    top_level: 2,
                },
                streams: 8,
                block_size: 4 << 20,
                checksum: ChecksumAlg::Xxh3,
                protect: Protect::Safe,
            })),
        ),
        (
            "session_open_pull",
            Golden::Control(ControlMsg::SessionOpen(SessionOpen {
                mode: SessionMode::Pull {
                    sources: vec!["a.root".into(), "logs".into()],
                    recursive: true,
                },
                streams: 4,
                block_size: 1 << 20,
                checksum: ChecksumAlg::Adler32,
                protect: Protect::Private,
            })),
        ),
        (
            "session_open_perf",
            Golden::Control(ControlMsg::SessionOpen(SessionOpen {
                mode: SessionMode::Perf {
                    server_sends: true,
                    bytes: 0,
                    millis: 10_000,
                },
                streams: 16,
                block_size: 256 << 10,
                checksum: ChecksumAlg::Blake3,
                protect: Protect::Clear,
            })),
        ),
        (
            "session_accept",
            Golden::Control(ControlMsg::SessionAccept(SessionAccept {
                token: TOKEN,
                streams: 8,
                block_size: 4 << 20,
            })),
        ),
        (
            "dir_announce",
            Golden::Control(ControlMsg::DirAnnounce {
                path: "run42/raw".into(),
                mode: 0o755,
            }),
        ),
        (
            "file_announce",
            Golden::Control(ControlMsg::FileAnnounce(FileMeta {
                file_id: 1,
                path: "run42/raw/f0.dat".into(),
                size: 1_000_000_000,
                mode: 0o644,
                mtime_s: 1_700_000_000,
                mtime_ns: 123_456_789,
            })),
        ),
        (
            "file_announce_perf",
            Golden::Control(ControlMsg::FileAnnounce(FileMeta {
                file_id: 1,
                path: "perf".into(),
                size: FileMeta::UNKNOWN_SIZE,
                mode: 0,
                mtime_s: -1,
                mtime_ns: 0,
            })),
        ),
        (
            "block_request",
            Golden::Control(ControlMsg::BlockRequest {
                file_id: 1,
                ranges: vec![(0, 4 << 20), (12 << 20, 1 << 20)],
            }),
        ),
        (
            "file_sent",
            Golden::Control(ControlMsg::FileSent {
                file_id: 1,
                size: 1_000_000_000,
                digest: DIGEST.to_vec(),
                stream_marks: vec![60, 59, 130, 0],
            }),
        ),
        (
            "file_done",
            Golden::Control(ControlMsg::FileDone {
                file_id: 1,
                digest: DIGEST.to_vec(),
            }),
        ),
        (
            "error_file",
            Golden::Control(ControlMsg::Error {
                code: ErrorCode::DigestMismatch,
                message: "digest mismatch".into(),
                file_id: Some(1),
            }),
        ),
        (
            "error_session",
            Golden::Control(ControlMsg::Error {
                code: ErrorCode::NotFound,
                message: "no such file".into(),
                file_id: None,
            }),
        ),
        (
            "close_sender",
            Golden::Control(ControlMsg::Close {
                per_stream_bytes: vec![],
            }),
        ),
        (
            "close_receiver",
            Golden::Control(ControlMsg::Close {
                per_stream_bytes: vec![300, 1 << 32],
            }),
        ),
        (
            "tuning_auto",
            Golden::Control(ControlMsg::Tuning(TuningRequest {
                max_streams: 8,
                window: Window::Auto,
                congestion: String::new(),
            })),
        ),
        (
            "tuning_fixed",
            Golden::Control(ControlMsg::Tuning(TuningRequest {
                max_streams: 4,
                window: Window::Fixed(65536),
                congestion: "cubic".into(),
            })),
        ),
        (
            "tuning_accept",
            Golden::Control(ControlMsg::TuningAccept {
                max_streams: 8,
                congestion: "bbr".into(),
            }),
        ),
        (
            "more_streams",
            Golden::Control(ControlMsg::MoreStreams { total: 4 }),
        ),
        (
            "file_have",
            Golden::Control(ControlMsg::FileHave {
                file_id: 7,
                ranges: vec![(0, 4 << 20), (8 << 20, 1000)],
            }),
        ),
        (
            "token_auth",
            Golden::Control(ControlMsg::TokenAuth { token: TOKEN }),
        ),
        (
            "once_line",
            Golden::Once(OnceLine {
                port: Some(40123),
                addr: Some("192.0.2.7".parse().unwrap()),
                token: TOKEN,
                // SHA-256 of the empty string, as an example.
                fingerprint: "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU".into(),
            }),
        ),
        (
            "transfer_options",
            Golden::Control(ControlMsg::TransferOptions(TransferOptions {
                compression: Compression::Auto,
                skip_existing: SkipExisting::Mtime,
                stall_timeout_ms: 20_000,
                spare_streams: 4,
            })),
        ),
        (
            "file_check_absent",
            Golden::Control(ControlMsg::FileCheck {
                file_id: 3,
                existing: Existing::Absent,
            }),
        ),
        (
            "file_check_same",
            Golden::Control(ControlMsg::FileCheck {
                file_id: 3,
                existing: Existing::Same,
            }),
        ),
        (
            "file_check_digest",
            Golden::Control(ControlMsg::FileCheck {
                file_id: 3,
                existing: Existing::Digest(DIGEST.to_vec()),
            }),
        ),
        (
            "entry_announce_symlink",
            Golden::Control(ControlMsg::EntryAnnounce(EntryMeta {
                path: "run42/latest".into(),
                kind: EntryKind::Symlink {
                    target: "raw/f0.dat".into(),
                },
                mode: 0o777,
                mtime_s: 1_700_000_000,
                mtime_ns: 0,
            })),
        ),
        (
            "entry_announce_dir",
            Golden::Control(ControlMsg::EntryAnnounce(EntryMeta {
                path: RelPath(b"caf\xe9".to_vec()),
                kind: EntryKind::Dir,
                mode: 0o555,
                mtime_s: -86_400,
                mtime_ns: 500_000_000,
            })),
        ),
        (
            "entry_failed",
            Golden::Control(ControlMsg::EntryFailed {
                path: "run42/raw/f1.dat".into(),
                file_id: Some(2),
                code: ErrorCode::PermissionDenied,
                message: "denied".into(),
            }),
        ),
        (
            "paths",
            Golden::Control(ControlMsg::Paths {
                addresses: vec!["10.47.1.2:4747".parse().unwrap()],
            }),
        ),
        (
            "path_rate",
            Golden::Control(ControlMsg::PathRate { bps: 1_000_000_000 }),
        ),
    ]
}

/// Extracts the golden blocks of a markdown document, by name.
fn parse_golden(doc: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut lines = doc.lines().enumerate();
    while let Some((lineno, line)) = lines.next() {
        let Some(info) = line.trim().strip_prefix("```golden") else {
            continue;
        };
        let name = info
            .split_whitespace()
            .find_map(|w| w.strip_prefix("name="))
            .unwrap_or_else(|| panic!("line {}: golden block without name=", lineno + 1))
            .to_string();
        let mut bytes = Vec::new();
        let mut closed = false;
        for (lineno, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                closed = true;
                break;
            }
            let data = line.split('#').next().unwrap_or("");
            for tok in data.split_whitespace() {
                assert!(
                    tok.len() == 2,
                    "line {}: golden {name}: {tok:?} is not one hex byte",
                    lineno + 1
                );
                let b = u8::from_str_radix(tok, 16).unwrap_or_else(|_| {
                    panic!("line {}: golden {name}: {tok:?} is not hex", lineno + 1)
                });
                bytes.push(b);
            }
        }
        assert!(closed, "golden {name}: block not closed");
        assert!(
            out.insert(name.clone(), bytes).is_none(),
            "golden {name} appears twice in the document"
        );
    }
    out
}

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROTOCOL.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Checks one vector in both directions.
fn check(name: &str, golden: &Golden, bytes: &[u8]) {
    match golden {
        Golden::Hello(v) => {
            assert_eq!(v.encode().as_slice(), bytes, "{name}: encode");
            assert_eq!(Hello::decode(bytes).unwrap(), *v, "{name}: decode");
        }
        Golden::Join(v) => {
            assert_eq!(v.encode().as_slice(), bytes, "{name}: encode");
            assert_eq!(DataJoin::decode(bytes).unwrap(), *v, "{name}: decode");
        }
        Golden::Reply(v) => {
            assert_eq!(v.encode().as_slice(), bytes, "{name}: encode");
            assert_eq!(JoinReply::decode(bytes).unwrap(), *v, "{name}: decode");
        }
        Golden::Frame(v) => {
            assert_eq!(v.encode().as_slice(), bytes, "{name}: encode");
            assert_eq!(DataFrame::decode(bytes).unwrap(), *v, "{name}: decode");
        }
        Golden::Control(v) => {
            assert_eq!(
                hex::encode(encode_control(v)),
                hex::encode(bytes),
                "{name}: encode"
            );
            assert!(bytes.len() >= 4, "{name}: shorter than the length prefix");
            let len = control_body_len(bytes[..4].try_into().unwrap()).unwrap();
            assert_eq!(len, bytes.len() - 4, "{name}: length prefix");
            assert_eq!(&decode_control(&bytes[4..]).unwrap(), v, "{name}: decode");
        }
        Golden::Once(v) => {
            assert_eq!(v.encode().as_bytes(), bytes, "{name}: encode");
            let text = std::str::from_utf8(bytes).expect("ASCII");
            assert_eq!(&OnceLine::decode(text).unwrap(), v, "{name}: decode");
        }
        Golden::Compressed { header, raw } => {
            let frame = DataFrame::Block(*header);
            assert_eq!(
                frame.encode().as_slice(),
                &bytes[..HEADER_LEN],
                "{name}: header"
            );
            assert_eq!(DataFrame::decode(bytes).unwrap(), frame, "{name}: decode");
            assert_eq!(
                header.length as usize,
                bytes.len() - HEADER_LEN,
                "{name}: length"
            );
            let payload = &bytes[HEADER_LEN..];
            let raw_len = RawLen::decode(payload).unwrap();
            assert_eq!(raw_len.0 as usize, raw.len(), "{name}: raw length");
            assert_eq!(raw_len.encode(), payload[..4], "{name}: raw length prefix");
            let mut out = vec![0u8; raw.len()];
            let n = match header.flags.codec().expect("a codec flag") {
                Codec::Zstd => zstd::bulk::decompress_to_buffer(&payload[4..], &mut out).unwrap(),
                Codec::Lz4 => lz4_flex::block::decompress_into(&payload[4..], &mut out).unwrap(),
            };
            assert_eq!(&out[..n], &raw[..], "{name}: decompresses to the raw bytes");
        }
        Golden::Xxh3Seed { header } => {
            let seed = xxh3_seed(header.file_id, header.offset, header.length);
            assert_eq!(seed.to_be_bytes().as_slice(), bytes, "{name}: xxh3-64");
        }
        Golden::Xxh3Check { header, payload } => {
            assert_eq!(header.length as usize, payload.len(), "{name}: length");
            assert_eq!(
                xxh3_check(header.file_id, header.offset, payload).as_slice(),
                bytes,
                "{name}: seeded xxh3-128"
            );
        }
        Golden::MacKey { material, token } => {
            assert_eq!(
                blake3::keyed_hash(material, token).as_bytes().as_slice(),
                bytes,
                "{name}: keyed BLAKE3 of the token"
            );
        }
        Golden::SafeMac {
            key,
            header,
            payload,
        } => {
            assert_eq!(
                safe_mac(key, header, payload).as_slice(),
                bytes,
                "{name}: keyed BLAKE3"
            );
        }
    }
}

#[test]
fn every_golden_vector_in_the_spec_encodes_and_decodes() {
    let doc = parse_golden(&doc());
    let known = known();
    let mut missing = Vec::new();
    for (name, golden) in &known {
        match doc.get(*name) {
            Some(bytes) => check(name, golden, bytes),
            None => missing.push(*name),
        }
    }
    assert!(
        missing.is_empty(),
        "docs/PROTOCOL.md lacks golden vectors {missing:?}"
    );
    let unknown: Vec<&String> = doc
        .keys()
        .filter(|n| !known.iter().any(|(k, _)| k == n))
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/PROTOCOL.md has golden vectors this test does not know: {unknown:?}"
    );
}

#[test]
fn the_example_block_carries_the_check_of_its_payload() {
    // The spec's block_repair vector embeds block_check_xxh3, and both that
    // check and block_check_safe are over its header fields (bytes 4..20).
    let doc = parse_golden(&doc());
    let block = &doc["block_repair"];
    assert_eq!(block[20..36], doc["block_check_xxh3"][..]);
    assert_eq!(
        &block[20..36],
        xxh3_check(7, 0x1_0000_0000, PAYLOAD).as_slice()
    );
    assert_eq!(block[4..20], position(7, 0x1_0000_0000, 4), "header fields");
    assert_ne!(
        &block[20..36],
        xxhash_rust::xxh3::xxh3_128(PAYLOAD)
            .to_be_bytes()
            .as_slice(),
        "the check is seeded, not the plain XXH3-128 of the payload"
    );
}

#[test]
fn the_parser_reads_comments_and_rejects_duplicates() {
    let one = "x\n```golden name=a\n01 ff # one\n# whole line\n  0a\n```\n";
    assert_eq!(parse_golden(one)["a"], vec![0x01, 0xff, 0x0a]);
    let twice = format!("{one}{one}");
    assert!(std::panic::catch_unwind(|| parse_golden(&twice)).is_err());
}
