//! The opening without sockets: a [`ClientOpen`] and a [`ServerOpen`]
//! pumped into each other in memory, from the features two `Hello`s
//! negotiate (PROTOCOL.md §3, §5, §8.2), and each machine fed the wrong
//! message in every state it has.

use std::time::Duration;

use tern_proto::hello::Hello;
use tern_proto::{
    ChecksumAlg, Compression, ControlMsg, EntryKind, EntryMeta, ErrorCode, Existing, FileMeta,
    MAX_CONTROL_FRAME, Protect, SkipExisting, TuningRequest, Window, encode_control,
};

use tern_proto::delegation::{Dialer, Party, SignedDelegation, TpcRole};

use super::*;
use crate::delegation::Issuer;

const TOKEN: Token = [0x5e; 16];
const ONCE: Token = [0x0c; 16];
const MIB: u32 = 1 << 20;

/// What the server's half of a handshake with a peer offering `features`
/// settles on: this build's `Hello` against the peer's.
fn negotiated(features: Features) -> Negotiated {
    let peer = Hello {
        version: 1,
        min_version: 1,
        features,
    };
    Hello::ours().negotiate(&peer).expect("one common version")
}

/// Every feature this build has but `missing`.
fn all_but(missing: Features) -> Features {
    Features(Features::ALL.0 & !missing.0)
}

fn policy() -> ServerPolicy {
    ServerPolicy {
        congestion: CongestionPolicy {
            preferred: "cubic".into(),
            usable: vec!["cubic".into(), "bbr".into(), "reno".into()],
        },
        once_token: None,
    }
}

fn once_policy() -> ServerPolicy {
    ServerPolicy {
        once_token: Some(ONCE),
        ..policy()
    }
}

fn push() -> SessionMode {
    SessionMode::Push {
        dest: "in/here".into(),
        top_level: 2,
    }
}

fn request() -> ClientRequest {
    ClientRequest {
        mode: push(),
        streams: 4,
        max_streams: 8,
        block_size: MIB,
        checksum: ChecksumAlg::Blake3,
        protect: Protect::Safe,
        window: Window::Fixed(8 << 20),
        congestion: "bbr".into(),
        choices: Choices::default(),
        once_token: None,
        peer: None,
    }
}

fn session_open(streams: u16, block_size: u32, protect: Protect) -> SessionOpen {
    SessionOpen {
        mode: push(),
        streams,
        block_size,
        checksum: ChecksumAlg::Blake3,
        protect,
    }
}

fn tuning(max_streams: u16, window: Window, congestion: &str) -> TuningRequest {
    TuningRequest {
        max_streams,
        window,
        congestion: congestion.into(),
    }
}

/// What the server does with a valid request.
#[derive(Clone, Copy)]
enum Judge {
    Accept,
    /// The driver refuses it (a path it will not serve, a full server).
    Refuse(ErrorCode, &'static str),
}

/// Everything both ends said and concluded.
#[derive(Debug)]
struct Pumped {
    to_server: Vec<ControlMsg>,
    to_client: Vec<ControlMsg>,
    events: Vec<ServerEvent>,
    /// The server's error, when its opening failed.
    server: Option<Error>,
    /// The client's conclusion (`None`: it was still waiting).
    client: Option<Result<ClientAgreed>>,
}

/// Passes messages between the two ends until neither has more to say,
/// as the engine's `open::expect` does: a server that fails stops reading
/// (its refusal still goes out), a client that concludes stops too.
fn pump(client: &mut ClientOpen, server: &mut ServerOpen, judge: Judge) -> Pumped {
    let mut out = Pumped {
        to_server: vec![],
        to_client: vec![],
        events: vec![],
        server: None,
        client: None,
    };
    loop {
        let mut moved = false;
        while let Some(msg) = client.poll_transmit() {
            moved = true;
            out.to_server.push(msg.clone());
            if out.server.is_some() {
                continue; // The server hung up; the message is lost.
            }
            match server.handle(msg) {
                Ok(None) => {}
                Ok(Some(event)) => {
                    out.events.push(event.clone());
                    if let ServerEvent::Request(request) = event {
                        match judge {
                            Judge::Accept => server.accept(&request, TOKEN, &[]),
                            Judge::Refuse(code, why) => server.refuse_with(code, why.into()),
                        }
                    }
                }
                Err(e) => out.server = Some(e),
            }
        }
        while let Some(msg) = server.poll_transmit() {
            moved = true;
            out.to_client.push(msg.clone());
            if out.client.is_some() {
                continue;
            }
            match client.handle(msg) {
                Ok(None) => {}
                Ok(Some(agreed)) => out.client = Some(Ok(agreed)),
                Err(e) => out.client = Some(Err(e)),
            }
        }
        if !moved {
            return out;
        }
    }
}

/// Opens a session between a client and a server whose hellos agreed on
/// `features`.
fn open_with(
    request: ClientRequest,
    features: Features,
    policy: ServerPolicy,
    judge: Judge,
) -> Pumped {
    let mut client = ClientOpen::new(request, negotiated(features)).expect("client");
    let mut server = ServerOpen::new(negotiated(features), policy).expect("server");
    let pumped = pump(&mut client, &mut server, judge);
    assert!(server.is_done() || pumped.server.is_none());
    pumped
}

fn agreed(p: &Pumped) -> &ClientAgreed {
    match &p.client {
        Some(Ok(agreed)) => agreed,
        other => panic!("the client did not agree: {other:?}\n{p:#?}"),
    }
}

fn requested(p: &Pumped) -> &SessionRequest {
    match p.events.last() {
        Some(ServerEvent::Request(r)) => r,
        _ => panic!("no request reached the server: {p:#?}"),
    }
}

fn options(opts: Option<TransferOptions>, features: Features, streams: u16, max: u16) -> Agreed {
    Agreed::new(opts.as_ref(), features, streams, max).expect("valid options")
}

#[test]
fn with_every_feature_both_ends_agree_on_everything() {
    let p = open_with(request(), Features::ALL, policy(), Judge::Accept);
    // 8 streams at most, and 4 spare indices for replacing stalled ones.
    let sent_options = TransferOptions {
        compression: Compression::Auto,
        skip_existing: SkipExisting::Mtime,
        stall_timeout_ms: 20_000,
        spare_streams: SPARE_STREAMS,
    };
    assert_eq!(
        p.to_server,
        vec![
            ControlMsg::SessionOpen(session_open(4, MIB, Protect::Safe)),
            ControlMsg::Tuning(tuning(12, Window::Fixed(8 << 20), "bbr")),
            ControlMsg::TransferOptions(sent_options.clone()),
        ]
    );
    let agreed_options = options(Some(sent_options), Features::ALL, 4, 12);
    assert_eq!(
        p.events,
        vec![ServerEvent::Request(Box::new(SessionRequest {
            open: session_open(4, MIB, Protect::Safe),
            tuning: AgreedTuning {
                max_streams: 12,
                window: Some(Window::Fixed(8 << 20)),
                congestion: "bbr".into(),
                requested: true,
            },
            options: agreed_options,
            version: 1,
            features: Features::ALL,
        }))]
    );
    assert_eq!(
        p.to_client,
        vec![
            ControlMsg::SessionAccept(SessionAccept {
                token: TOKEN,
                streams: 4,
                block_size: MIB,
            }),
            ControlMsg::TuningAccept {
                max_streams: 12,
                congestion: "bbr".into(),
            },
            ControlMsg::Paths {
                addresses: Vec::new()
            },
        ]
    );
    assert_eq!(
        *agreed(&p),
        ClientAgreed {
            version: 1,
            features: Features::ALL,
            token: TOKEN,
            streams: 4,
            max_streams: 12,
            block_size: MIB,
            options: agreed_options,
            paths: Vec::new(),
        }
    );
    let o = agreed(&p).options;
    assert_eq!(o.compression(), Compression::Auto);
    assert!(o.accept_compressed());
    assert_eq!(o.skip_existing(), SkipExisting::Mtime);
    assert_eq!(o.stall_timeout(), Some(Duration::from_secs(20)));
    assert_eq!(o.spare_streams(), 4);
    assert_eq!(p.server, None);
}

#[test]
fn the_servers_preferred_congestion_control_when_the_client_names_none() {
    let p = open_with(
        ClientRequest {
            congestion: String::new(),
            window: Window::Auto,
            ..request()
        },
        Features::ALL,
        policy(),
        Judge::Accept,
    );
    let r = requested(&p);
    assert_eq!(r.tuning.congestion, "cubic");
    assert_eq!(r.tuning.window, Some(Window::Auto));
    assert_eq!(
        p.to_client[1],
        ControlMsg::TuningAccept {
            max_streams: 12,
            congestion: "cubic".into()
        }
    );
    assert_eq!(agreed(&p).max_streams, 12);
}

#[test]
fn spare_indices_fit_under_the_stream_limit_and_need_a_stall_timeout() {
    let spares = |max_streams: u16, stall: Option<Duration>| {
        let req = ClientRequest {
            streams: 2,
            max_streams,
            choices: Choices {
                stall_timeout: stall,
                ..Choices::default()
            },
            ..request()
        };
        let p = open_with(req, Features::ALL, policy(), Judge::Accept);
        let a = agreed(&p);
        assert_eq!(a.max_streams, requested(&p).tuning.max_streams);
        (a.max_streams, a.options.spare_streams())
    };
    assert_eq!(spares(8, Some(Duration::from_secs(1))), (12, 4));
    assert_eq!(spares(126, Some(Duration::from_secs(1))), (128, 2));
    assert_eq!(spares(MAX_STREAMS, Some(Duration::from_secs(1))), (128, 0));
    assert_eq!(
        spares(8, None),
        (8, 0),
        "no stall watch, nothing to replace"
    );
    // A cap below the streams asked for is the streams asked for.
    assert_eq!(spares(0, None), (2, 0));
}

#[test]
fn a_perf_session_neither_skips_nor_compresses_unless_named() {
    let perf = SessionMode::Perf {
        server_sends: false,
        bytes: 0,
        millis: 1000,
    };
    let p = open_with(
        ClientRequest {
            mode: perf.clone(),
            ..request()
        },
        Features::ALL,
        policy(),
        Judge::Accept,
    );
    let o = agreed(&p).options;
    assert_eq!(o.compression(), Compression::None);
    assert_eq!(o.skip_existing(), SkipExisting::Never);
    assert_eq!(requested(&p).options, o);
    let zstd = Choices {
        compression: Compression::Zstd,
        ..Choices::default()
    };
    let p = open_with(
        ClientRequest {
            mode: perf,
            choices: zstd,
            ..request()
        },
        Features::ALL,
        policy(),
        Judge::Accept,
    );
    assert_eq!(agreed(&p).options.compression(), Compression::Zstd);
}

#[test]
fn a_peer_without_tuning_gets_no_tuning_and_no_room_to_grow() {
    let features = all_but(Features::TUNING);
    let p = open_with(request(), features, policy(), Judge::Accept);
    let sent = TransferOptions {
        compression: Compression::Auto,
        skip_existing: SkipExisting::Mtime,
        stall_timeout_ms: 20_000,
        spare_streams: 0,
    };
    assert_eq!(
        p.to_server,
        vec![
            ControlMsg::SessionOpen(session_open(4, MIB, Protect::Safe)),
            ControlMsg::TransferOptions(sent.clone()),
        ]
    );
    assert_eq!(
        requested(&p).tuning,
        AgreedTuning {
            max_streams: 4,
            window: None,
            congestion: String::new(),
            requested: false,
        }
    );
    // No TuningAccept: the client did not ask.
    assert_eq!(
        p.to_client,
        vec![
            ControlMsg::SessionAccept(SessionAccept {
                token: TOKEN,
                streams: 4,
                block_size: MIB,
            }),
            ControlMsg::Paths {
                addresses: Vec::new()
            },
        ]
    );
    let a = agreed(&p);
    assert_eq!((a.streams, a.max_streams), (4, 4));
    assert_eq!(a.options, options(Some(sent), features, 4, 4));
    assert_eq!(a.options.spare_streams(), 0);
    assert_eq!(a.options.stall_timeout(), Some(Duration::from_secs(20)));
    assert_eq!(a.features, features);
}

#[test]
fn a_peer_without_options_gets_every_option_off() {
    let features = all_but(Features::OPTIONS);
    let p = open_with(request(), features, policy(), Judge::Accept);
    assert_eq!(
        p.to_server,
        vec![
            ControlMsg::SessionOpen(session_open(4, MIB, Protect::Safe)),
            // No spares without options to announce them.
            ControlMsg::Tuning(tuning(8, Window::Fixed(8 << 20), "bbr")),
        ]
    );
    let a = agreed(&p);
    assert_eq!((a.streams, a.max_streams), (4, 8));
    assert_eq!(a.options, options(None, features, 4, 8));
    assert_eq!(a.options.compression(), Compression::None);
    assert!(a.options.accept_compressed(), "the peer may still compress");
    assert_eq!(a.options.skip_existing(), SkipExisting::Never);
    assert_eq!(a.options.stall_timeout(), None);
    assert_eq!(a.options.spare_streams(), 0);
    assert_eq!(requested(&p).options, a.options);
}

#[test]
fn a_peer_without_compress_or_skip_turns_those_options_off() {
    let p = open_with(
        request(),
        all_but(Features::COMPRESS),
        policy(),
        Judge::Accept,
    );
    let a = agreed(&p).options;
    assert_eq!(a.compression(), Compression::None);
    assert!(!a.accept_compressed());
    assert_eq!(a.skip_existing(), SkipExisting::Mtime);
    assert_eq!(requested(&p).options, a);
    // The request itself still says what the user chose.
    assert!(
        p.to_server
            .contains(&ControlMsg::TransferOptions(TransferOptions {
                compression: Compression::Auto,
                skip_existing: SkipExisting::Mtime,
                stall_timeout_ms: 20_000,
                spare_streams: 4,
            }))
    );

    let p = open_with(request(), all_but(Features::SKIP), policy(), Judge::Accept);
    let a = agreed(&p).options;
    assert_eq!(a.skip_existing(), SkipExisting::Never);
    assert_eq!(a.compression(), Compression::Auto);
    assert_eq!(requested(&p).options, a);
}

#[test]
fn without_token_auth_no_token_can_be_used_and_none_is_needed() {
    let features = all_but(Features::TOKEN_AUTH);
    // No token on either side: an ordinary session.
    let p = open_with(request(), features, policy(), Judge::Accept);
    assert_eq!(agreed(&p).streams, 4);
    assert!(
        !p.to_server
            .iter()
            .any(|m| matches!(m, ControlMsg::TokenAuth { .. }))
    );
    // A once server cannot let in a client that cannot present its token.
    let e = ServerOpen::new(negotiated(features), once_policy()).unwrap_err();
    assert_eq!(
        e,
        Error::Unauthorized("the client cannot present a one-time token".into())
    );
    assert_eq!(e.wire_code(), ErrorCode::PermissionDenied);
    // A client holding a token will not open a session that ignores it.
    let with_token = ClientRequest {
        once_token: Some(ONCE),
        peer: None,
        ..request()
    };
    let e = ClientOpen::new(with_token, negotiated(features)).unwrap_err();
    assert_eq!(
        e,
        Error::Protocol(
            "the far end does not take one-time tokens (is its tern older than this one?)".into()
        )
    );
}

#[test]
fn the_right_once_token_is_presented_first_and_opens_the_session() {
    let req = ClientRequest {
        once_token: Some(ONCE),
        peer: None,
        ..request()
    };
    let p = open_with(req, Features::ALL, once_policy(), Judge::Accept);
    assert_eq!(p.to_server[0], ControlMsg::TokenAuth { token: ONCE });
    assert!(matches!(p.to_server[1], ControlMsg::SessionOpen(_)));
    assert_eq!(p.events.len(), 2, "{:?}", p.events);
    assert_eq!(p.events[0], ServerEvent::TokenPresented);
    assert!(matches!(p.events[1], ServerEvent::Request(_)));
    assert_eq!(agreed(&p).token, TOKEN);
}

#[test]
fn a_wrong_once_token_is_refused_and_explained() {
    let req = ClientRequest {
        once_token: Some([0x0d; 16]),
        peer: None,
        ..request()
    };
    let p = open_with(req, Features::ALL, once_policy(), Judge::Accept);
    assert_eq!(
        p.server,
        Some(Error::Unauthorized("wrong one-time token".into()))
    );
    assert!(p.events.is_empty());
    let why = "not authorized: wrong one-time token";
    assert_eq!(
        p.to_client,
        vec![refusal(ErrorCode::PermissionDenied, why.into())]
    );
    assert_eq!(
        p.client,
        Some(Err(Error::Peer {
            code: ErrorCode::PermissionDenied,
            message: why.into()
        }))
    );
}

#[test]
fn a_missing_once_token_is_refused_naming_what_came_instead() {
    // The client has no token: its SessionOpen comes first.
    let p = open_with(request(), Features::ALL, once_policy(), Judge::Accept);
    let why = "this server needs its one-time token first, got SessionOpen";
    assert_eq!(p.server, Some(Error::Unauthorized(why.into())));
    let said = format!("not authorized: {why}");
    assert_eq!(
        p.to_client,
        vec![refusal(ErrorCode::PermissionDenied, said.clone())]
    );
    assert!(
        !said.contains("in/here"),
        "what the message carried is not echoed"
    );
    assert_eq!(
        p.client,
        Some(Err(Error::Peer {
            code: ErrorCode::PermissionDenied,
            message: said
        }))
    );
}

#[test]
fn a_request_the_driver_refuses_reaches_the_client_with_its_code() {
    let p = open_with(
        request(),
        Features::ALL,
        policy(),
        Judge::Refuse(ErrorCode::NotFound, "in/here: no such directory"),
    );
    assert_eq!(
        p.server, None,
        "the driver's refusal is not the machine's error"
    );
    assert_eq!(
        p.to_client,
        vec![refusal(
            ErrorCode::NotFound,
            "in/here: no such directory".into()
        )]
    );
    assert_eq!(
        p.client,
        Some(Err(Error::Peer {
            code: ErrorCode::NotFound,
            message: "in/here: no such directory".into()
        }))
    );
}

#[test]
fn refuse_gives_the_error_back_and_tells_the_client() {
    let mut server = ServerOpen::new(negotiated(Features::ALL), policy()).unwrap();
    let e = server.refuse(Error::BadRequest("two sources into a file".into()));
    assert_eq!(e, Error::BadRequest("two sources into a file".into()));
    assert!(server.is_done());
    assert_eq!(
        server.poll_transmit(),
        Some(refusal(
            ErrorCode::BadRequest,
            "two sources into a file".into()
        ))
    );
    assert_eq!(server.poll_transmit(), None);
}

// ---- wrong messages in every state ----

/// The variant's index on the wire (PROTOCOL.md §5.2). No wildcard: a new
/// variant must be added to [`every_kind`] too.
fn wire_index(msg: &ControlMsg) -> usize {
    match msg {
        ControlMsg::SessionOpen(_) => 0,
        ControlMsg::SessionAccept(_) => 1,
        ControlMsg::DirAnnounce { .. } => 2,
        ControlMsg::FileAnnounce(_) => 3,
        ControlMsg::BlockRequest { .. } => 4,
        ControlMsg::FileSent { .. } => 5,
        ControlMsg::FileDone { .. } => 6,
        ControlMsg::Error { .. } => 7,
        ControlMsg::Close { .. } => 8,
        ControlMsg::Tuning(_) => 9,
        ControlMsg::TuningAccept { .. } => 10,
        ControlMsg::MoreStreams { .. } => 11,
        ControlMsg::FileHave { .. } => 12,
        ControlMsg::TokenAuth { .. } => 13,
        ControlMsg::TransferOptions(_) => 14,
        ControlMsg::FileCheck { .. } => 15,
        ControlMsg::EntryAnnounce(_) => 16,
        ControlMsg::EntryFailed { .. } => 17,
        ControlMsg::Paths { .. } => 18,
        ControlMsg::TpcOpen { .. } => 19,
        ControlMsg::TpcAccept { .. } => 20,
        ControlMsg::TpcDial { .. } => 21,
        ControlMsg::PeerOpen { .. } => 22,
        ControlMsg::TpcProgress { .. } => 23,
        ControlMsg::TpcDone { .. } => 24,
        ControlMsg::TpcUnreachable { .. } => 25,
        ControlMsg::PathRate { .. } => 26,
    }
}

fn a_signed_delegation() -> SignedDelegation {
    SignedDelegation {
        body: vec![1, 2, 3],
        key: [4; 32],
        signature: vec![5; 64],
    }
}

/// One message of every kind, each valid as a message of its kind.
fn every_kind() -> Vec<ControlMsg> {
    let all = vec![
        ControlMsg::SessionOpen(session_open(4, MIB, Protect::Safe)),
        ControlMsg::SessionAccept(SessionAccept {
            token: TOKEN,
            streams: 4,
            block_size: MIB,
        }),
        ControlMsg::DirAnnounce {
            path: "d".into(),
            mode: 0o755,
        },
        ControlMsg::FileAnnounce(FileMeta {
            file_id: 1,
            path: "d/f".into(),
            size: 10,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
        }),
        ControlMsg::BlockRequest {
            file_id: 1,
            ranges: vec![(0, 10)],
        },
        ControlMsg::FileSent {
            file_id: 1,
            size: 10,
            digest: vec![1; 32],
            stream_marks: vec![1, 0, 0, 0],
        },
        ControlMsg::FileDone {
            file_id: 1,
            digest: vec![1; 32],
        },
        ControlMsg::Error {
            code: ErrorCode::Io,
            message: "disk on fire".into(),
            file_id: None,
        },
        ControlMsg::Close {
            per_stream_bytes: vec![10, 0, 0, 0],
        },
        ControlMsg::Tuning(tuning(8, Window::Auto, "")),
        ControlMsg::TuningAccept {
            max_streams: 8,
            congestion: "cubic".into(),
        },
        ControlMsg::MoreStreams { total: 6 },
        ControlMsg::FileHave {
            file_id: 1,
            ranges: vec![(0, 10)],
        },
        ControlMsg::TokenAuth { token: ONCE },
        ControlMsg::TransferOptions(Choices::default().wire(0)),
        ControlMsg::FileCheck {
            file_id: 1,
            existing: Existing::Absent,
        },
        ControlMsg::EntryAnnounce(EntryMeta {
            path: "d/l".into(),
            kind: EntryKind::Symlink { target: "f".into() },
            mode: 0o777,
            mtime_s: 0,
            mtime_ns: 0,
        }),
        ControlMsg::EntryFailed {
            path: "d/g".into(),
            file_id: None,
            code: ErrorCode::PermissionDenied,
            message: "no".into(),
        },
        ControlMsg::Paths {
            addresses: vec!["10.47.1.2:4747".parse().unwrap()],
        },
        ControlMsg::TpcOpen {
            role: TpcRole::Source,
            delegation: a_signed_delegation(),
        },
        ControlMsg::TpcAccept {
            ticket: ONCE,
            addresses: vec![],
        },
        ControlMsg::TpcDial {
            host: "a".into(),
            port: 4747,
            addresses: vec![],
            ticket: ONCE,
            session: Box::new(a_tpc_session()),
        },
        ControlMsg::PeerOpen {
            delegation: a_signed_delegation(),
            ticket: ONCE,
        },
        ControlMsg::TpcProgress {
            bytes: 1,
            total: 2,
            files_done: 0,
        },
        ControlMsg::TpcDone {
            bytes: 1,
            files: 1,
            streams: 1,
            network_elapsed_ms: 1,
            dialer_address: "10.47.0.2:40000".parse().unwrap(),
            peer_address: "10.47.0.1:4747".parse().unwrap(),
            bytes_resumed: 0,
        },
        ControlMsg::TpcUnreachable {
            reason: "no route".into(),
        },
        ControlMsg::PathRate { bps: 1_000_000_000 },
    ];
    let mut seen: Vec<usize> = all.iter().map(wire_index).collect();
    seen.dedup();
    assert_eq!(
        seen,
        (0..27).collect::<Vec<_>>(),
        "one of each kind, in order"
    );
    all
}

/// A variant's name, as the server names what came instead of a token.
fn kind_name(msg: &ControlMsg) -> &'static str {
    [
        "SessionOpen",
        "SessionAccept",
        "DirAnnounce",
        "FileAnnounce",
        "BlockRequest",
        "FileSent",
        "FileDone",
        "Error",
        "Close",
        "Tuning",
        "TuningAccept",
        "MoreStreams",
        "FileHave",
        "TokenAuth",
        "TransferOptions",
        "FileCheck",
        "EntryAnnounce",
        "EntryFailed",
        "Paths",
        "TpcOpen",
        "TpcAccept",
        "TpcDial",
        "PeerOpen",
        "TpcProgress",
        "TpcDone",
        "TpcUnreachable",
        "PathRate",
    ][wire_index(msg)]
}

/// The server's states, each with how to reach it from a fresh machine
/// and the message it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Token,
    Open,
    Tuning,
    Options,
    Judging,
    Accepted,
    Refused,
}

const SERVER_STATES: [At; 7] = [
    At::Token,
    At::Open,
    At::Tuning,
    At::Options,
    At::Judging,
    At::Accepted,
    At::Refused,
];

fn server_at(at: At) -> ServerOpen {
    let policy = if at == At::Token {
        once_policy()
    } else {
        policy()
    };
    let mut s = ServerOpen::new(negotiated(Features::ALL), policy).unwrap();
    let steps: Vec<ControlMsg> = vec![
        ControlMsg::SessionOpen(session_open(4, MIB, Protect::Clear)),
        ControlMsg::Tuning(tuning(8, Window::Auto, "")),
        ControlMsg::TransferOptions(Choices::default().wire(4)),
    ];
    let fed = match at {
        At::Token => 0,
        At::Open => 0,
        At::Tuning => 1,
        At::Options => 2,
        At::Judging | At::Accepted | At::Refused => 3,
    };
    let mut request = None;
    for msg in steps.into_iter().take(fed) {
        if let Some(ServerEvent::Request(r)) = s.handle(msg).unwrap() {
            request = Some(r);
        }
    }
    match at {
        At::Accepted => s.accept(&request.expect("judged"), TOKEN, &[]),
        At::Refused => s.refuse_with(ErrorCode::Aborted, "busy".into()),
        _ => {}
    }
    while s.poll_transmit().is_some() {}
    assert_eq!(s.is_done(), matches!(at, At::Accepted | At::Refused));
    s
}

/// The message the server waits for in `at`, if any.
fn server_wants(at: At) -> Option<(&'static str, ControlMsg)> {
    match at {
        At::Token => Some(("TokenAuth", ControlMsg::TokenAuth { token: ONCE })),
        At::Open => Some((
            "SessionOpen",
            ControlMsg::SessionOpen(session_open(4, MIB, Protect::Clear)),
        )),
        At::Tuning => Some(("Tuning", ControlMsg::Tuning(tuning(8, Window::Auto, "")))),
        At::Options => Some((
            "TransferOptions",
            ControlMsg::TransferOptions(Choices::default().wire(4)),
        )),
        At::Judging | At::Accepted | At::Refused => None,
    }
}

#[test]
fn the_server_refuses_a_wrong_message_in_every_state_and_then_everything() {
    for at in SERVER_STATES {
        let wanted = server_wants(at);
        for msg in every_kind() {
            if wanted
                .as_ref()
                .is_some_and(|(_, w)| wire_index(w) == wire_index(&msg))
            {
                continue;
            }
            // A third-party copy's openings are due here too (tested below).
            let due_here = match at {
                At::Open => matches!(
                    msg,
                    ControlMsg::TpcOpen { .. } | ControlMsg::PeerOpen { .. }
                ),
                // The other end of a once server's third-party copy.
                At::Token => matches!(msg, ControlMsg::PeerOpen { .. }),
                _ => false,
            };
            if due_here {
                continue;
            }
            let mut s = server_at(at);
            let err = s.handle(msg.clone()).unwrap_err();
            let (code, want_err) = match at {
                At::Token => (
                    ErrorCode::PermissionDenied,
                    Error::Unauthorized(format!(
                        "this server needs its one-time token first, got {}",
                        kind_name(&msg)
                    )),
                ),
                _ => {
                    let expected = wanted
                        .as_ref()
                        .map_or("nothing during the opening", |w| w.0);
                    (
                        ErrorCode::Protocol,
                        Error::Protocol(format!("expected {expected}, got {}", quote(&msg))),
                    )
                }
            };
            assert_eq!(err, want_err, "{at:?} fed {msg:?}");
            assert_eq!(
                s.poll_transmit(),
                Some(refusal(code, want_err.to_string())),
                "{at:?} fed {msg:?}: the refusal is explained"
            );
            assert_eq!(s.poll_transmit(), None, "{at:?}: exactly one refusal");
            assert!(s.is_done());
            // Nothing more is accepted, not even what was due.
            let due = wanted.as_ref().map_or_else(
                || ControlMsg::SessionOpen(session_open(4, MIB, Protect::Clear)),
                |w| w.1.clone(),
            );
            let again = s.handle(due.clone()).unwrap_err();
            assert_eq!(
                again,
                Error::Protocol(format!("expected nothing during the opening, got {due:?}")),
                "{at:?} after {msg:?}"
            );
            assert!(s.is_done());
        }
    }
}

#[test]
fn a_server_without_a_token_takes_a_token_as_any_unexpected_message() {
    // PROTOCOL.md §5.2 TokenAuth: "A server without one answers a TokenAuth
    // with Error{Protocol}".
    let mut s = server_at(At::Open);
    let e = s.handle(ControlMsg::TokenAuth { token: ONCE }).unwrap_err();
    assert_eq!(e.wire_code(), ErrorCode::Protocol);
    let Some(ControlMsg::Error { code, message, .. }) = s.poll_transmit() else {
        panic!("no refusal");
    };
    assert_eq!(code, ErrorCode::Protocol);
    assert!(message.starts_with("protocol error: expected SessionOpen, got TokenAuth"));
}

/// The client's states: (name, how to get there, the message it waits for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAt {
    Accept,
    AcceptUntuned,
    TuningAccept,
    Paths,
    Agreed,
    Failed,
}

fn accept_msg() -> ControlMsg {
    ControlMsg::SessionAccept(SessionAccept {
        token: TOKEN,
        streams: 4,
        block_size: MIB,
    })
}

fn tuning_accept_msg() -> ControlMsg {
    ControlMsg::TuningAccept {
        max_streams: 12,
        congestion: "bbr".into(),
    }
}

fn paths_msg() -> ControlMsg {
    ControlMsg::Paths {
        addresses: vec!["10.47.1.2:4747".parse().unwrap()],
    }
}

fn client_at(at: ClientAt) -> ClientOpen {
    let features = match at {
        ClientAt::AcceptUntuned => all_but(Features(Features::TUNING.0 | Features::PATHS.0)),
        _ => Features::ALL,
    };
    let mut c = ClientOpen::new(request(), negotiated(features)).unwrap();
    while c.poll_transmit().is_some() {}
    match at {
        ClientAt::Accept | ClientAt::AcceptUntuned => {}
        ClientAt::TuningAccept => assert_eq!(c.handle(accept_msg()), Ok(None)),
        ClientAt::Paths => {
            assert_eq!(c.handle(accept_msg()), Ok(None));
            assert_eq!(c.handle(tuning_accept_msg()), Ok(None));
        }
        ClientAt::Agreed => {
            assert_eq!(c.handle(accept_msg()), Ok(None));
            assert_eq!(c.handle(tuning_accept_msg()), Ok(None));
            let agreed = c.handle(paths_msg()).unwrap().expect("agreed");
            assert_eq!(agreed.paths, vec!["10.47.1.2:4747".parse().unwrap()]);
        }
        ClientAt::Failed => {
            let e = c.handle(ControlMsg::TuningAccept {
                max_streams: 1,
                congestion: String::new(),
            });
            assert!(e.is_err());
        }
    }
    c
}

fn client_wants(at: ClientAt) -> Option<(&'static str, ControlMsg)> {
    match at {
        ClientAt::Accept | ClientAt::AcceptUntuned => Some(("SessionAccept", accept_msg())),
        ClientAt::TuningAccept => Some(("TuningAccept", tuning_accept_msg())),
        ClientAt::Paths => Some(("Paths", paths_msg())),
        ClientAt::Agreed | ClientAt::Failed => None,
    }
}

#[test]
fn the_client_refuses_a_wrong_message_in_every_state_and_then_everything() {
    let states = [
        ClientAt::Accept,
        ClientAt::AcceptUntuned,
        ClientAt::TuningAccept,
        ClientAt::Paths,
        ClientAt::Agreed,
        ClientAt::Failed,
    ];
    for at in states {
        let wanted = client_wants(at);
        assert_eq!(
            client_at(at).awaiting(),
            wanted.as_ref().map_or("nothing", |w| w.0)
        );
        for msg in every_kind() {
            let is_wanted = wanted
                .as_ref()
                .is_some_and(|(_, w)| wire_index(w) == wire_index(&msg));
            if is_wanted || matches!(msg, ControlMsg::Error { .. }) {
                continue;
            }
            let mut c = client_at(at);
            let expected = wanted
                .as_ref()
                .map_or("nothing more during the opening", |w| w.0);
            assert_eq!(
                c.handle(msg.clone()),
                Err(Error::Protocol(format!(
                    "expected {expected}, got {}",
                    quote(&msg)
                ))),
                "{at:?} fed {msg:?}"
            );
            assert_eq!(c.poll_transmit(), None, "a client refuses by hanging up");
            assert_eq!(c.awaiting(), "nothing");
            let due = wanted.as_ref().map_or_else(accept_msg, |w| w.1.clone());
            assert_eq!(
                c.handle(due.clone()),
                Err(Error::Protocol(format!(
                    "expected nothing more during the opening, got {due:?}"
                ))),
                "{at:?} after {msg:?}"
            );
        }
    }
}

#[test]
fn the_client_turns_a_server_error_into_a_peer_error_in_every_state() {
    for at in [
        ClientAt::Accept,
        ClientAt::AcceptUntuned,
        ClientAt::TuningAccept,
        ClientAt::Paths,
        ClientAt::Agreed,
        ClientAt::Failed,
    ] {
        for code in [
            ErrorCode::BadRequest,
            ErrorCode::NoSpace,
            ErrorCode::Aborted,
        ] {
            let mut c = client_at(at);
            let e = c.handle(ControlMsg::Error {
                code,
                message: "no room".into(),
                file_id: Some(3),
            });
            assert_eq!(
                e,
                Err(Error::Peer {
                    code,
                    message: "no room".into()
                }),
                "{at:?}"
            );
            assert_eq!(e.unwrap_err().wire_code(), code);
            assert_eq!(c.awaiting(), "nothing");
            assert!(c.handle(accept_msg()).is_err(), "{at:?}: nothing after");
        }
    }
}

#[test]
fn an_untuned_client_agrees_on_session_accept_alone() {
    let mut c = client_at(ClientAt::AcceptUntuned);
    let a = c.handle(accept_msg()).unwrap().expect("agreed");
    assert_eq!((a.streams, a.max_streams, a.block_size), (4, 4, MIB));
    assert_eq!(a.token, TOKEN);
    assert!(c.handle(tuning_accept_msg()).is_err());
}

// ---- the server's validation ----

/// Feeds the server these messages, the last of which it must refuse;
/// returns the error and checks the one refusal queued, and what a client
/// makes of it.
fn refused(features: Features, msgs: Vec<ControlMsg>) -> Error {
    let mut s = ServerOpen::new(negotiated(features), policy()).unwrap();
    let n = msgs.len();
    let mut err = None;
    for (i, msg) in msgs.into_iter().enumerate() {
        match s.handle(msg) {
            Ok(None) if i + 1 < n => {}
            Err(e) if i + 1 == n => err = Some(e),
            other => panic!("message {i} of {n}: {other:?}"),
        }
    }
    let err = err.expect("refused");
    let refusal_msg = s.poll_transmit().expect("a refusal is queued");
    assert_eq!(refusal_msg, refusal(err.wire_code(), err.to_string()));
    assert_eq!(s.poll_transmit(), None);
    assert!(s.is_done());
    // The client reads it as the server's error, with its code.
    let mut c = client_at(ClientAt::Accept);
    assert_eq!(
        c.handle(refusal_msg),
        Err(Error::Peer {
            code: err.wire_code(),
            message: err.to_string()
        })
    );
    err
}

/// The full request of a client with every feature.
fn full(open: SessionOpen, tuning: TuningRequest, spares: u16) -> Vec<ControlMsg> {
    vec![
        ControlMsg::SessionOpen(open),
        ControlMsg::Tuning(tuning),
        ControlMsg::TransferOptions(Choices::default().wire(spares)),
    ]
}

/// Whether the server takes this full request.
fn judged(open: SessionOpen, tuning: TuningRequest, spares: u16) -> SessionRequest {
    let mut s = ServerOpen::new(negotiated(Features::ALL), policy()).unwrap();
    let mut last = None;
    for msg in full(open, tuning, spares) {
        last = s.handle(msg).unwrap();
    }
    match last {
        Some(ServerEvent::Request(r)) => *r,
        other => panic!("{other:?}"),
    }
}

fn bad(why: &str) -> Error {
    Error::BadRequest(why.into())
}

#[test]
fn the_server_takes_between_1_and_128_streams() {
    let t = |max| tuning(max, Window::Auto, "");
    for n in [0, 129, u16::MAX] {
        assert_eq!(
            refused(
                Features::ALL,
                full(session_open(n, MIB, Protect::Clear), t(n.max(129)), 0)
            ),
            bad(&format!("{n} streams requested; 1 to 128 allowed"))
        );
    }
    assert_eq!(
        judged(session_open(1, MIB, Protect::Clear), t(1), 0)
            .open
            .streams,
        1
    );
    assert_eq!(
        judged(session_open(128, MIB, Protect::Clear), t(128), 0)
            .tuning
            .max_streams,
        128
    );
    // Without TUNING the request is judged on SessionOpen and TransferOptions.
    assert_eq!(
        refused(
            all_but(Features::TUNING),
            vec![
                ControlMsg::SessionOpen(session_open(0, MIB, Protect::Clear)),
                ControlMsg::TransferOptions(Choices::default().wire(0)),
            ]
        ),
        bad("0 streams requested; 1 to 128 allowed")
    );
    // And with neither, on SessionOpen alone.
    assert_eq!(
        refused(
            Features(Features::ALL.0 & !Features::TUNING.0 & !Features::OPTIONS.0),
            vec![ControlMsg::SessionOpen(session_open(
                129,
                MIB,
                Protect::Clear
            ))]
        ),
        bad("129 streams requested; 1 to 128 allowed")
    );
}

#[test]
fn the_server_takes_a_stream_cap_between_the_streams_and_128() {
    for (streams, max) in [(4, 3), (4, 129), (1, 0)] {
        assert_eq!(
            refused(
                Features::ALL,
                full(
                    session_open(streams, MIB, Protect::Clear),
                    tuning(max, Window::Auto, ""),
                    0
                )
            ),
            bad(&format!(
                "at most {max} streams asked for with {streams} to start; {streams}..=128 allowed"
            ))
        );
    }
}

#[test]
fn the_server_takes_blocks_of_4_kib_to_64_mib() {
    for size in [0, 1, 4095, (64 << 20) + 1, u32::MAX] {
        assert_eq!(
            refused(
                Features::ALL,
                full(
                    session_open(4, size, Protect::Clear),
                    tuning(8, Window::Auto, ""),
                    0
                )
            ),
            bad(&format!("block size {size} outside 4096..=67108864"))
        );
    }
    for size in [4096, 64 << 20] {
        let r = judged(
            session_open(4, size, Protect::Clear),
            tuning(8, Window::Auto, ""),
            0,
        );
        assert_eq!(r.open.block_size, size);
    }
}

#[test]
fn the_server_refuses_a_protection_the_features_lack() {
    for (protect, lacking, name) in [
        (Protect::Safe, Features::PROTECT_SAFE, "safe"),
        (Protect::Private, Features::PROTECT_PRIVATE, "private"),
    ] {
        assert_eq!(
            refused(
                all_but(lacking),
                full(
                    session_open(4, MIB, protect),
                    tuning(8, Window::Auto, ""),
                    0
                )
            ),
            bad(&format!(
                "protection '{name}' is not supported by both ends"
            ))
        );
    }
    // Clear needs nothing.
    let nothing = Features(0);
    let mut s = ServerOpen::new(negotiated(nothing), policy()).unwrap();
    let e = s
        .handle(ControlMsg::SessionOpen(session_open(
            4,
            MIB,
            Protect::Clear,
        )))
        .unwrap();
    assert!(matches!(e, Some(ServerEvent::Request(_))), "{e:?}");
}

#[test]
fn the_server_refuses_a_congestion_control_it_cannot_use_naming_those_it_can() {
    let e = refused(
        Features::ALL,
        full(
            session_open(4, MIB, Protect::Clear),
            tuning(8, Window::Auto, "vegas"),
            0,
        ),
    );
    assert_eq!(
        e,
        bad("congestion control 'vegas' is not available on the server (usable: cubic bbr reno)")
    );
    let r = judged(
        session_open(4, MIB, Protect::Clear),
        tuning(8, Window::Auto, "reno"),
        0,
    );
    assert_eq!(r.tuning.congestion, "reno");
}

#[test]
fn the_server_takes_a_fixed_window_of_4_kib_to_1_gib() {
    for n in [0, 4095, (1 << 30) + 1, u32::MAX] {
        assert_eq!(
            refused(
                Features::ALL,
                full(
                    session_open(4, MIB, Protect::Clear),
                    tuning(8, Window::Fixed(n), ""),
                    0
                )
            ),
            bad(&format!("window of {n} bytes; 4 KiB to 1 GiB allowed"))
        );
    }
    for n in [4096, 1 << 30] {
        let r = judged(
            session_open(4, MIB, Protect::Clear),
            tuning(8, Window::Fixed(n), ""),
            0,
        );
        assert_eq!(r.tuning.window, Some(Window::Fixed(n)));
    }
    let r = judged(
        session_open(4, MIB, Protect::Clear),
        tuning(8, Window::Kernel, ""),
        0,
    );
    assert_eq!(r.tuning.window, Some(Window::Kernel));
}

#[test]
fn the_server_refuses_more_spare_streams_than_the_session_has_room_for() {
    assert_eq!(
        refused(
            Features::ALL,
            full(
                session_open(4, MIB, Protect::Clear),
                tuning(6, Window::Auto, ""),
                3
            )
        ),
        bad("3 spare streams asked for; the session has room for 2")
    );
    let r = judged(
        session_open(4, MIB, Protect::Clear),
        tuning(6, Window::Auto, ""),
        2,
    );
    assert_eq!(r.options.spare_streams(), 2);
    // Without TUNING there is no room at all.
    assert_eq!(
        refused(
            all_but(Features::TUNING),
            vec![
                ControlMsg::SessionOpen(session_open(4, MIB, Protect::Clear)),
                ControlMsg::TransferOptions(Choices::default().wire(1)),
            ]
        ),
        bad("1 spare streams asked for; the session has room for 0")
    );
}

#[test]
fn a_request_invalid_on_several_counts_is_refused_once() {
    // Streams are judged first; one refusal, however much is wrong.
    let e = refused(
        Features(0),
        vec![ControlMsg::SessionOpen(session_open(
            0,
            1,
            Protect::Private,
        ))],
    );
    assert_eq!(e, bad("0 streams requested; 1 to 128 allowed"));
}

#[test]
fn a_client_request_the_server_refuses_comes_back_as_a_peer_error() {
    let p = open_with(
        ClientRequest {
            block_size: 100,
            ..request()
        },
        Features::ALL,
        policy(),
        Judge::Accept,
    );
    let why = "block size 100 outside 4096..=67108864";
    assert_eq!(p.server, Some(bad(why)));
    assert!(p.events.is_empty());
    assert_eq!(
        p.to_client,
        vec![refusal(ErrorCode::BadRequest, why.into())]
    );
    assert_eq!(
        p.client,
        Some(Err(Error::Peer {
            code: ErrorCode::BadRequest,
            message: why.into()
        }))
    );
}

#[test]
fn tokens_compare_equal_only_when_equal() {
    assert!(same_token(&ONCE, &ONCE));
    for i in 0..16 {
        let mut t = ONCE;
        t[i] ^= 0x80;
        assert!(!same_token(&ONCE, &t), "byte {i}");
    }
}

// ---- bugs these tests found (fixed in 87ee387 unless ignored) ----

#[test]
fn a_perf_session_needs_the_perf_feature() {
    let perf = SessionOpen {
        mode: SessionMode::Perf {
            server_sends: true,
            bytes: 1 << 30,
            millis: 0,
        },
        ..session_open(4, MIB, Protect::Clear)
    };
    let e = refused(
        all_but(Features::PERF),
        full(perf, tuning(8, Window::Auto, ""), 0),
    );
    assert_eq!(e.wire_code(), ErrorCode::BadRequest);
}

#[test]
fn the_client_refuses_an_acceptance_it_did_not_ask_for() {
    // Asked: 4 streams growing to 12, blocks of 1 MiB.
    let accepts = [
        (0, MIB, 12),
        (5, MIB, 12),
        (4, 0, 12),
        (4, MIB + 1, 12),
        (4, MIB, 13),
        (4, MIB, u16::MAX),
    ];
    for (streams, block_size, max_streams) in accepts {
        let mut c = client_at(ClientAt::Accept);
        let got = c
            .handle(ControlMsg::SessionAccept(SessionAccept {
                token: TOKEN,
                streams,
                block_size,
            }))
            .and_then(|_| {
                c.handle(ControlMsg::TuningAccept {
                    max_streams,
                    congestion: "bbr".into(),
                })
            });
        assert!(
            matches!(got, Err(Error::Protocol(_))),
            "accepted {streams} streams of {block_size} bytes up to {max_streams}: {got:?}"
        );
    }
}

#[test]
fn a_refusal_fits_in_a_control_frame() {
    // A legal frame (under 4 MiB encoded) in the wrong place.
    let big = ControlMsg::FileHave {
        file_id: 1,
        ranges: vec![(0, 0); 2_000_000],
    };
    assert!(encode_control(&big).len() - 4 <= MAX_CONTROL_FRAME as usize);
    let mut s = server_at(At::Open);
    s.handle(big).unwrap_err();
    let refusal_msg = s.poll_transmit().expect("refusal");
    let body = encode_control(&refusal_msg).len() - 4;
    assert!(
        body <= MAX_CONTROL_FRAME as usize,
        "a refusal of {body} bytes cannot be sent"
    );
}

#[test]
fn a_refused_congestion_control_is_quoted_within_a_frame() {
    // The largest Tuning that fits a frame, naming no usable algorithm.
    let name = "x".repeat(MAX_CONTROL_FRAME as usize - 16);
    let asked = ControlMsg::Tuning(tuning(8, Window::Auto, &name));
    assert!(encode_control(&asked).len() - 4 <= MAX_CONTROL_FRAME as usize);
    let mut s = server_at(At::Tuning);
    assert_eq!(s.handle(asked), Ok(None));
    let options = ControlMsg::TransferOptions(Choices::default().wire(0));
    let e = s.handle(options).unwrap_err();
    assert_eq!(e.wire_code(), ErrorCode::BadRequest);
    let refusal_msg = s.poll_transmit().expect("refusal");
    let body = encode_control(&refusal_msg).len() - 4;
    assert!(
        body <= MAX_CONTROL_FRAME as usize,
        "a refusal of {body} bytes cannot be sent"
    );
}

#[test]
fn a_server_naming_loopback_multicast_or_port_zero_is_not_followed() {
    let mut c = client_at(ClientAt::Paths);
    let named = [
        "127.0.0.1:22",
        "[::1]:4747",
        "0.0.0.0:4747",
        "224.0.0.1:4747",
        "255.255.255.255:4747",
        "169.254.1.1:4747",
        "[fe80::1]:4747",
        "[ff02::1]:4747",
        "10.47.2.2:0",
        "[::ffff:127.0.0.1]:4747",
        "10.47.1.2:4747",
        "[2001:db8::2]:4747",
    ];
    let agreed = c
        .handle(ControlMsg::Paths {
            addresses: named.iter().map(|a| a.parse().unwrap()).collect(),
        })
        .unwrap()
        .expect("agreed");
    assert_eq!(
        agreed.paths,
        vec![
            "10.47.1.2:4747".parse().unwrap(),
            "[2001:db8::2]:4747".parse().unwrap()
        ]
    );
}

// ---- third-party copies ----

/// Both ends offer third-party copies.
fn tpc() -> Negotiated {
    negotiated(Features::ALL)
}

fn pull_delegation() -> Delegation {
    Delegation {
        nonce: [1; 16],
        issued_at_ms: 0,
        not_after_ms: 60_000,
        issuer: None,
        source: Party {
            fingerprint: "SHA256:a".into(),
            name: "a:4747".into(),
            binding: [1; 32],
        },
        dest: Party {
            fingerprint: "SHA256:b".into(),
            name: "b:4747".into(),
            binding: [2; 32],
        },
        dialer: Dialer::Dest,
        sources: vec!["run/big.h5".into()],
        recursive: false,
        dest_path: "in/".into(),
        top_level: 1,
    }
}

fn dialer_request(sources: &[&str]) -> ClientRequest {
    ClientRequest {
        mode: SessionMode::Pull {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            recursive: false,
        },
        peer: Some(PeerPass {
            delegation: Issuer::from_seed(&[3; 32]).sign(&pull_delegation()),
            ticket: ONCE,
        }),
        ..request()
    }
}

/// Feeds the dialer's opening to a server that admits its pass (or not).
fn dial(
    request: ClientRequest,
    admit: bool,
) -> (
    Vec<ServerEvent>,
    Result<Option<ServerEvent>>,
    Vec<ControlMsg>,
) {
    let mut client = ClientOpen::new(request, tpc()).unwrap();
    let mut server = ServerOpen::new(tpc(), policy()).unwrap();
    let mut events = Vec::new();
    let mut last = Ok(None);
    while let Some(msg) = client.poll_transmit() {
        last = server.handle(msg);
        match &last {
            Ok(Some(ServerEvent::PeerPresented(pass))) => {
                assert_eq!(pass.ticket, ONCE);
                events.push(ServerEvent::PeerPresented(pass.clone()));
                if admit {
                    server.delegated(TpcRole::Source, pull_delegation());
                }
            }
            Ok(Some(e)) => events.push(e.clone()),
            Ok(None) => {}
            Err(_) => break,
        }
    }
    let mut sent = Vec::new();
    while let Some(m) = server.poll_transmit() {
        sent.push(m);
    }
    (events, last, sent)
}

#[test]
fn a_dialing_daemon_presents_its_pass_first_and_may_open_only_what_it_covers() {
    let (events, last, _) = dial(dialer_request(&["run/big.h5"]), true);
    assert!(matches!(events[0], ServerEvent::PeerPresented(_)));
    assert!(
        matches!(last, Ok(Some(ServerEvent::Request(_)))),
        "{last:?}"
    );

    let (_, last, sent) = dial(dialer_request(&["run/other.h5"]), true);
    let want = "not authorized: the delegation covers reading run/big.h5, not reading run/other.h5";
    assert_eq!(last.unwrap_err().to_string(), want);
    assert_eq!(
        sent,
        vec![refusal(ErrorCode::PermissionDenied, want.into())]
    );

    // A pass the driver did not admit opens nothing.
    let (_, last, _) = dial(dialer_request(&["run/big.h5"]), false);
    assert!(matches!(last, Err(Error::Unauthorized(_))), "{last:?}");
}

#[test]
fn a_pass_needs_a_peer_that_does_third_party_copies() {
    let older = negotiated(all_but(Features::TPC));
    let e = ClientOpen::new(dialer_request(&["run/big.h5"]), older).unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e:?}");
}

#[test]
fn a_third_party_request_is_handed_to_the_driver_and_accepted_with_a_ticket() {
    let mut server = ServerOpen::new(tpc(), policy()).unwrap();
    let signed = a_signed_delegation();
    let event = server
        .handle(ControlMsg::TpcOpen {
            role: TpcRole::Dest,
            delegation: signed.clone(),
        })
        .unwrap();
    assert_eq!(
        event,
        Some(ServerEvent::Tpc(TpcRole::Dest, Box::new(signed)))
    );
    let addr: SocketAddr = "10.47.0.2:4747".parse().unwrap();
    server.accept_tpc(TOKEN, &[addr]);
    assert!(server.is_done());
    assert_eq!(
        server.poll_transmit(),
        Some(ControlMsg::TpcAccept {
            ticket: TOKEN,
            addresses: vec![addr]
        })
    );
    // After a PeerOpen, a TpcOpen is out of place.
    let mut server = ServerOpen::new(tpc(), policy()).unwrap();
    server
        .handle(ControlMsg::PeerOpen {
            delegation: a_signed_delegation(),
            ticket: ONCE,
        })
        .unwrap();
    assert!(
        server
            .handle(ControlMsg::TpcOpen {
                role: TpcRole::Source,
                delegation: a_signed_delegation(),
            })
            .is_err()
    );
}

#[test]
fn a_once_server_takes_the_other_end_of_its_copy_instead_of_its_token() {
    let mut server = ServerOpen::new(negotiated(Features::ALL), once_policy()).unwrap();
    let event = server
        .handle(ControlMsg::PeerOpen {
            delegation: a_signed_delegation(),
            ticket: TOKEN,
        })
        .unwrap();
    assert!(matches!(event, Some(ServerEvent::PeerPresented(_))));
    // Neither the token nor a copy of its own after that.
    let mut again = ServerOpen::new(negotiated(Features::ALL), once_policy()).unwrap();
    again
        .handle(ControlMsg::PeerOpen {
            delegation: a_signed_delegation(),
            ticket: TOKEN,
        })
        .unwrap();
    assert!(again.handle(ControlMsg::TokenAuth { token: ONCE }).is_err());
    assert!(
        server
            .handle(ControlMsg::TpcOpen {
                role: TpcRole::Source,
                delegation: a_signed_delegation(),
            })
            .is_err()
    );
}

#[test]
fn a_third_party_session_is_held_to_what_any_session_may_ask() {
    let policy = CongestionPolicy {
        preferred: "bbr".into(),
        usable: vec!["bbr".into(), "cubic".into()],
    };
    let good = a_tpc_session();
    assert_eq!(check_tpc_session(&good, &policy).unwrap(), "bbr");
    let with = |f: &dyn Fn(&mut tern_proto::TpcSession)| {
        let mut s = good.clone();
        f(&mut s);
        check_tpc_session(&s, &policy).map_err(|e| e.to_string())
    };
    assert_eq!(
        with(&|s| s.tuning.congestion = "cubic".into()),
        Ok("cubic".into())
    );
    for (what, bad) in [
        ("no streams", with(&|s| s.streams = 0)),
        ("too many", with(&|s| s.streams = MAX_STREAMS + 1)),
        ("tiny blocks", with(&|s| s.block_size = 512)),
        (
            "fewer at most than at first",
            with(&|s| s.tuning.max_streams = 2),
        ),
        (
            "a window of 4 GiB",
            with(&|s| s.tuning.window = Window::Fixed(u32::MAX)),
        ),
        (
            "an unknown congestion control",
            with(&|s| s.tuning.congestion = "nope".into()),
        ),
    ] {
        assert!(bad.is_err(), "{what}: {bad:?}");
    }
}

/// A third-party copy's session choices as a client sends them by default.
fn a_tpc_session() -> tern_proto::TpcSession {
    tern_proto::TpcSession {
        streams: 4,
        streams_from_rtt: true,
        auto_streams: true,
        block_size: MIB,
        checksum: ChecksumAlg::Blake3,
        protect: Protect::Private,
        rate_limit_bps: 0,
        tuning: TuningRequest {
            max_streams: 16,
            window: Window::Auto,
            congestion: String::new(),
        },
        options: Choices::default().wire(0),
    }
}
