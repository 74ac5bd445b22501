//! The opening state machines (`tern_session::open`): a `ServerOpen` and a
//! `ClientOpen` fed arbitrary control messages, or an honest pair opening
//! an arbitrary request. Neither may panic; after an error (or, for the
//! server, after it accepted or refused) nothing more is accepted; every
//! server error is explained by exactly one `Error` message; and a server
//! emits `SessionAccept` only for a request it validated, which is checked
//! here against the rules of PROTOCOL.md §5.2 and §8.2 written out anew.
//!
//! Input: 4 header bytes, then (raw mode) control frames as on the wire.
//!
//! ```text
//! 0..2  features     u16 big-endian, masked to the features this build has
//! 2     flags        bit 0: a once server (its token is 00 01 … 0f, the
//!                           token of PROTOCOL.md's token_auth vector)
//!                    bit 1: pump mode (an honest client and server)
//!                    bit 2: the driver refuses a valid request
//!                    bit 3: the client holds a one-time token (pump mode)
//!                    bit 4: … the wrong one (pump mode)
//! 3     congestion   bits 0..2: which of cubic, bbr, reno the server can
//!                    use; bit 3: its preferred one is bbr
//! 4..   raw mode:  frames: u32 big-endian length, body; the length's top
//!                  bit set sends the message to the client, else to the
//!                  server (so the spec's golden frames go to the server)
//!       pump mode: the client's request, drawn with `arbitrary`
//! ```
#![no_main]

use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use tern_proto::hello::Negotiated;
use tern_proto::{
    ChecksumAlg, Compression, ControlMsg, Features, MAX_BLOCK_SIZE, Protect, SessionAccept,
    SessionMode, SessionOpen, SkipExisting, Token, TransferOptions, TuningRequest, Window,
    decode_control,
};
use tern_session::open::{
    ClientAgreed, ClientOpen, ClientRequest, CongestionPolicy, MAX_STREAMS, MIN_BLOCK_SIZE,
    ServerEvent, ServerOpen, ServerPolicy, SessionRequest, refusal,
};
use tern_session::{Choices, Error};

/// The once server's token.
const ONCE: Token = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
/// The session token a server accepts under.
const SESSION: Token = [0xa5; 16];

struct Setup {
    negotiated: Negotiated,
    policy: ServerPolicy,
    refuse: bool,
}

fn setup(header: [u8; 4]) -> Setup {
    let features = Features(
        u64::from(u16::from_be_bytes([header[0], header[1]]))
                & Features::ALL.0
                // The last step, Paths, is left to the machines' unit tests.
                & !Features::PATHS.0,
    );
    let names = ["cubic", "bbr", "reno"];
    let usable: Vec<String> = (0..3)
        .filter(|i| header[3] & (1 << i) != 0)
        .map(|i| names[i].to_string())
        .collect();
    let preferred = if header[3] & 8 != 0 { "bbr" } else { "cubic" };
    Setup {
        negotiated: Negotiated {
            version: 1,
            features,
        },
        policy: ServerPolicy {
            congestion: CongestionPolicy {
                preferred: preferred.into(),
                usable,
            },
            once_token: (header[2] & 1 != 0).then_some(ONCE),
        },
        refuse: header[2] & 4 != 0,
    }
}

/// A server with everything it said and did, checked at every step.
struct Server {
    s: ServerOpen,
    features: Features,
    policy: ServerPolicy,
    version: u16,
    refuse: bool,
    /// The opening ended: refused, failed, accepted.
    ended: bool,
    /// Messages the server took without complaint, in order.
    taken: Vec<ControlMsg>,
    /// What it validated and what the driver decided.
    outcome: Option<Result<SessionRequest, Error>>,
}

impl Server {
    fn new(setup: &Setup) -> Option<Server> {
        let features = setup.negotiated.features;
        match ServerOpen::new(setup.negotiated, setup.policy.clone()) {
            Ok(s) => {
                assert!(
                    setup.policy.once_token.is_none() || features.contains(Features::TOKEN_AUTH)
                );
                assert!(!s.is_done());
                Some(Server {
                    s,
                    features,
                    policy: setup.policy.clone(),
                    version: setup.negotiated.version,
                    refuse: setup.refuse,
                    ended: false,
                    taken: vec![],
                    outcome: None,
                })
            }
            Err(e) => {
                assert!(
                    setup.policy.once_token.is_some() && !features.contains(Features::TOKEN_AUTH)
                );
                assert!(matches!(e, Error::Unauthorized(_)), "{e:?}");
                None
            }
        }
    }

    fn drain(&mut self) -> Vec<ControlMsg> {
        std::iter::from_fn(|| self.s.poll_transmit()).collect()
    }

    /// Feeds one message; returns what the server sent.
    fn feed(&mut self, msg: ControlMsg) -> Vec<ControlMsg> {
        let result = self.s.handle(msg.clone());
        let sent = self.drain();
        let event = match result {
            Err(e) => {
                assert!(self.s.is_done(), "failed but not done: {e:?}");
                assert!(
                    matches!(
                        e,
                        Error::Protocol(_) | Error::BadRequest(_) | Error::Unauthorized(_)
                    ),
                    "{e:?}"
                );
                assert_eq!(
                    sent,
                    vec![refusal(e.wire_code(), e.to_string())],
                    "every error is explained once"
                );
                // A message out of place is quoted, never whole: the refusal
                // fits a frame however large the message. (A refused
                // congestion control is still quoted whole: the ignored test
                // a_refused_congestion_control_is_quoted_within_a_frame.)
                if let Error::Protocol(why) = &e {
                    assert!(why.len() <= 400, "{} bytes quoted", why.len());
                }
                if !self.ended {
                    self.ended = true;
                    self.outcome = Some(Err(e));
                }
                return sent;
            }
            Ok(event) => event,
        };
        assert!(!self.ended, "{msg:?} was taken after the opening ended");
        assert!(
            sent.is_empty(),
            "nothing is sent before a request is judged: {sent:?}"
        );
        self.taken.push(msg);
        match event {
            None => {
                assert!(!self.s.is_done());
                vec![]
            }
            Some(ServerEvent::TokenPresented) => {
                assert_eq!(self.taken, vec![ControlMsg::TokenAuth { token: ONCE }]);
                assert_eq!(self.policy.once_token, Some(ONCE));
                vec![]
            }
            // A third-party copy's opening: this driver takes none.
            Some(ServerEvent::Tpc(..) | ServerEvent::PeerPresented(_)) => {
                assert!(
                    self.features.contains(Features::TPC),
                    "a third-party opening without TPC"
                );
                let e = self
                    .s
                    .refuse(Error::Unauthorized("no third-party copies here".into()));
                let sent = self.drain();
                assert_eq!(sent, vec![refusal(e.wire_code(), e.to_string())]);
                self.ended = true;
                self.outcome = Some(Err(e));
                sent
            }
            Some(ServerEvent::Request(request)) => {
                self.check_request(&request);
                self.ended = true;
                if self.refuse {
                    self.s
                        .refuse_with(tern_proto::ErrorCode::NotFound, "no".into());
                    let sent = self.drain();
                    assert_eq!(
                        sent,
                        vec![refusal(tern_proto::ErrorCode::NotFound, "no".into())]
                    );
                    assert!(self.s.is_done());
                    self.outcome = Some(Ok(*request));
                    return sent;
                }
                self.s.accept(&request, SESSION, &[]);
                let sent = self.drain();
                let mut want = vec![ControlMsg::SessionAccept(SessionAccept {
                    token: SESSION,
                    streams: request.open.streams,
                    block_size: request.open.block_size,
                })];
                if request.tuning.requested {
                    want.push(ControlMsg::TuningAccept {
                        max_streams: request.tuning.max_streams,
                        congestion: request.tuning.congestion.clone(),
                    });
                }
                assert_eq!(sent, want);
                assert!(self.s.is_done());
                self.outcome = Some(Ok(*request));
                sent
            }
        }
    }

    /// The request reached the driver only as PROTOCOL.md allows: after the
    /// token (once servers), `SessionOpen`, `Tuning` exactly with `TUNING`,
    /// `TransferOptions` exactly with `OPTIONS`, nothing else; and it is
    /// valid.
    fn check_request(&self, r: &SessionRequest) {
        let f = self.features;
        let mut taken = self.taken.iter();
        if self.policy.once_token.is_some() {
            assert_eq!(taken.next(), Some(&ControlMsg::TokenAuth { token: ONCE }));
        }
        let Some(ControlMsg::SessionOpen(open)) = taken.next() else {
            panic!("a request without SessionOpen: {:?}", self.taken);
        };
        let tuning = if f.contains(Features::TUNING) {
            let Some(ControlMsg::Tuning(t)) = taken.next() else {
                panic!("a tuned request without Tuning: {:?}", self.taken);
            };
            Some(t)
        } else {
            None
        };
        let options = if f.contains(Features::OPTIONS) {
            let Some(ControlMsg::TransferOptions(o)) = taken.next() else {
                panic!("a request without its options: {:?}", self.taken);
            };
            Some(o)
        } else {
            None
        };
        assert_eq!(taken.next(), None, "more than a request: {:?}", self.taken);
        assert_eq!(&r.open, open);
        assert_eq!((r.version, r.features), (self.version, f));
        let rules = valid(open, tuning, options, f, &self.policy.congestion);
        assert_eq!(
            rules,
            Ok(()),
            "a request the rules refuse reached the driver: {r:?}"
        );
        // The agreement follows from what was asked.
        let t = &r.tuning;
        match tuning {
            Some(asked) => {
                assert!(t.requested);
                assert_eq!(t.max_streams, asked.max_streams);
                assert_eq!(t.window, Some(asked.window));
                let want = if asked.congestion.is_empty() {
                    &self.policy.congestion.preferred
                } else {
                    &asked.congestion
                };
                assert_eq!(&t.congestion, want);
            }
            None => {
                assert!(!t.requested);
                assert_eq!((t.max_streams, t.window), (open.streams, None));
                assert!(t.congestion.is_empty());
            }
        }
        let o = &r.options;
        assert_eq!(o.accept_compressed(), f.contains(Features::COMPRESS));
        match options {
            Some(x) => {
                let compress = f.contains(Features::COMPRESS);
                let skip = f.contains(Features::SKIP);
                assert_eq!(
                    o.compression(),
                    if compress {
                        x.compression
                    } else {
                        Compression::None
                    }
                );
                assert_eq!(
                    o.skip_existing(),
                    if skip {
                        x.skip_existing
                    } else {
                        SkipExisting::Never
                    }
                );
                assert_eq!(o.stall_timeout().is_some(), x.stall_timeout_ms > 0);
                assert_eq!(o.spare_streams(), x.spare_streams);
            }
            None => {
                assert_eq!(o.compression(), Compression::None);
                assert_eq!(o.skip_existing(), SkipExisting::Never);
                assert_eq!((o.stall_timeout(), o.spare_streams()), (None, 0));
            }
        }
    }
}

/// PROTOCOL.md's rules for a session request, written out apart from
/// `open.rs`; `Err` names the rule broken.
fn valid(
    open: &SessionOpen,
    tuning: Option<&TuningRequest>,
    options: Option<&TransferOptions>,
    f: Features,
    congestion: &CongestionPolicy,
) -> Result<(), &'static str> {
    if open.streams == 0 || open.streams > MAX_STREAMS {
        return Err("streams");
    }
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&open.block_size) {
        return Err("block size");
    }
    if matches!(open.mode, SessionMode::Perf { .. }) && !f.contains(Features::PERF) {
        return Err("perf");
    }
    match open.protect {
        Protect::Safe if !f.contains(Features::PROTECT_SAFE) => return Err("safe"),
        Protect::Private if !f.contains(Features::PROTECT_PRIVATE) => return Err("private"),
        _ => {}
    }
    let mut max = open.streams;
    if let Some(t) = tuning {
        if !(open.streams..=MAX_STREAMS).contains(&t.max_streams) {
            return Err("stream cap");
        }
        if let Window::Fixed(n) = t.window {
            if !(4096..=1 << 30).contains(&n) {
                return Err("window");
            }
        }
        if !t.congestion.is_empty() && !congestion.usable.contains(&t.congestion) {
            return Err("congestion");
        }
        max = t.max_streams;
    }
    if let Some(o) = options {
        if o.spare_streams > max - open.streams {
            return Err("spares");
        }
    }
    Ok(())
}

/// A client with everything it was told, checked at every step.
struct Client {
    c: ClientOpen,
    features: Features,
    version: u16,
    ended: bool,
    accept: Option<SessionAccept>,
    outcome: Option<Result<ClientAgreed, Error>>,
    /// What it asked: streams to start, block size, the stream cap.
    asked: (u16, u32, u16),
}

impl Client {
    /// Starts a client; returns it and what it sends first.
    fn new(request: ClientRequest, negotiated: Negotiated) -> Option<(Client, Vec<ControlMsg>)> {
        let f = negotiated.features;
        let token = request.once_token;
        let asked = request.clone();
        let mut c = match ClientOpen::new(request, negotiated) {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    token.is_some() && !f.contains(Features::TOKEN_AUTH),
                    "{e:?}"
                );
                return None;
            }
        };
        let sent: Vec<ControlMsg> = std::iter::from_fn(|| c.poll_transmit()).collect();
        let mut i = sent.iter();
        if let Some(token) = token {
            assert_eq!(i.next(), Some(&ControlMsg::TokenAuth { token }));
        }
        let Some(ControlMsg::SessionOpen(open)) = i.next() else {
            panic!("{sent:?}");
        };
        assert_eq!(
            (open.streams, open.block_size, open.checksum, open.protect),
            (
                asked.streams,
                asked.block_size,
                asked.checksum,
                asked.protect
            )
        );
        let mut cap = asked.streams;
        if f.contains(Features::TUNING) {
            let Some(ControlMsg::Tuning(t)) = i.next() else {
                panic!("{sent:?}");
            };
            assert!(t.max_streams >= asked.max_streams.max(asked.streams));
            assert_eq!((t.window, &t.congestion), (asked.window, &asked.congestion));
            cap = t.max_streams;
        }
        if f.contains(Features::OPTIONS) {
            let Some(ControlMsg::TransferOptions(_)) = i.next() else {
                panic!("{sent:?}");
            };
        }
        assert_eq!(i.next(), None, "{sent:?}");
        assert_eq!(c.awaiting(), "SessionAccept");
        let client = Client {
            c,
            features: f,
            version: negotiated.version,
            ended: false,
            accept: None,
            outcome: None,
            asked: (asked.streams, asked.block_size, cap),
        };
        Some((client, sent))
    }

    fn feed(&mut self, msg: ControlMsg) {
        let result = self.c.handle(msg.clone());
        assert_eq!(self.c.poll_transmit(), None, "a client answers nothing");
        if self.ended {
            assert!(result.is_err(), "{msg:?} was taken after the opening ended");
            return;
        }
        match result {
            Err(e) => {
                match &msg {
                    ControlMsg::Error { code, message, .. } => assert_eq!(
                        e,
                        Error::Peer {
                            code: *code,
                            message: message.clone()
                        }
                    ),
                    _ => assert!(
                        matches!(e, Error::Protocol(_) | Error::BadRequest(_)),
                        "{e:?}"
                    ),
                }
                self.ended = true;
                self.outcome = Some(Err(e));
                assert_eq!(self.c.awaiting(), "nothing");
            }
            Ok(None) => {
                let ControlMsg::SessionAccept(a) = msg else {
                    panic!("{msg:?} taken as a SessionAccept");
                };
                assert!(self.features.contains(Features::TUNING) && self.accept.is_none());
                self.accept = Some(a);
                assert_eq!(self.c.awaiting(), "TuningAccept");
            }
            Ok(Some(agreed)) => {
                let (accept, max) = match (self.accept.take(), msg) {
                    (Some(accept), ControlMsg::TuningAccept { max_streams, .. }) => {
                        let max = max_streams.max(accept.streams);
                        (accept, max)
                    }
                    (None, ControlMsg::SessionAccept(accept)) => {
                        assert!(!self.features.contains(Features::TUNING));
                        let streams = accept.streams;
                        (accept, streams)
                    }
                    (_, other) => panic!("agreed on {other:?}"),
                };
                assert_eq!(
                    (
                        agreed.token,
                        agreed.streams,
                        agreed.block_size,
                        agreed.max_streams
                    ),
                    (accept.token, accept.streams, accept.block_size, max)
                );
                assert_eq!(
                    (agreed.version, agreed.features),
                    (self.version, self.features)
                );
                // The server granted at most what was asked (§5.2).
                let (streams, block_size, cap) = self.asked;
                assert!((1..=streams).contains(&agreed.streams), "{agreed:?}");
                assert!(
                    (MIN_BLOCK_SIZE..=block_size).contains(&agreed.block_size),
                    "{agreed:?}"
                );
                assert!(
                    (agreed.streams..=cap).contains(&agreed.max_streams),
                    "{agreed:?}"
                );
                assert!(agreed.options.spare_streams() <= max - accept.streams);
                self.ended = true;
                self.outcome = Some(Ok(agreed));
                assert_eq!(self.c.awaiting(), "nothing");
            }
        }
    }
}

/// The request a raw-mode client sends (what it is told is the input).
fn plain_request(once: bool) -> ClientRequest {
    ClientRequest {
        mode: SessionMode::Push {
            dest: "d".into(),
            top_level: 1,
        },
        streams: 4,
        max_streams: 8,
        block_size: 1 << 20,
        checksum: ChecksumAlg::Xxh3,
        protect: Protect::Clear,
        window: Window::Auto,
        congestion: String::new(),
        choices: Choices::default(),
        once_token: once.then_some(ONCE),
        peer: None,
    }
}

fn raw(setup: &Setup, frames: &[u8]) {
    let mut server = Server::new(setup);
    let once = setup.policy.once_token.is_some()
        && setup.negotiated.features.contains(Features::TOKEN_AUTH);
    let mut client = Client::new(plain_request(once), setup.negotiated).map(|(c, _)| c);
    let mut rest = frames;
    while let Some((prefix, body)) = rest.split_first_chunk::<4>() {
        let word = u32::from_be_bytes(*prefix);
        let len = ((word & 0x7fff_ffff) as usize).min(body.len());
        let (body, after) = body.split_at(len);
        rest = after;
        let Ok(msg) = decode_control(body) else {
            continue;
        };
        if word & 0x8000_0000 != 0 {
            if let Some(c) = &mut client {
                c.feed(msg);
            }
        } else if let Some(s) = &mut server {
            s.feed(msg);
        }
    }
}

fn pick<T: Clone>(u: &mut Unstructured, items: &[T]) -> ArbResult<T> {
    Ok(u.choose(items)?.clone())
}

fn arbitrary_request(u: &mut Unstructured, token: Option<Token>) -> ArbResult<ClientRequest> {
    let mode = match u.int_in_range(0..=2u8)? {
        0 => SessionMode::Push {
            dest: u.arbitrary()?,
            top_level: u.arbitrary()?,
        },
        1 => SessionMode::Pull {
            sources: u.arbitrary()?,
            recursive: u.arbitrary()?,
        },
        _ => SessionMode::Perf {
            server_sends: u.arbitrary()?,
            bytes: u.arbitrary()?,
            millis: u.arbitrary()?,
        },
    };
    let count = |u: &mut Unstructured| -> ArbResult<u16> {
        if u.ratio(1, 8)? {
            u.arbitrary()
        } else {
            u.int_in_range(0..=130)
        }
    };
    let streams = count(u)?;
    let max_streams = count(u)?;
    let block_size = if u.ratio(1, 4)? {
        u.arbitrary()?
    } else {
        pick(u, &[0, 1, 4095, 4096, 1 << 20, 64 << 20, (64 << 20) + 1])?
    };
    let window = match u.int_in_range(0..=2u8)? {
        0 => Window::Auto,
        1 => Window::Kernel,
        _ => Window::Fixed(if u.ratio(1, 4)? {
            u.arbitrary()?
        } else {
            pick(u, &[0, 4095, 4096, 1 << 20, 1 << 30, (1 << 30) + 1])?
        }),
    };
    let congestion = pick(u, &["", "cubic", "bbr", "reno", "vegas"])?.to_string();
    let choices = Choices {
        compression: pick(
            u,
            &[
                Compression::None,
                Compression::Auto,
                Compression::Zstd,
                Compression::Lz4,
            ],
        )?,
        skip_existing: pick(
            u,
            &[
                SkipExisting::Never,
                SkipExisting::Size,
                SkipExisting::Mtime,
                SkipExisting::Digest,
            ],
        )?,
        stall_timeout: if u.arbitrary()? {
            Some(std::time::Duration::from_millis(u.arbitrary()?))
        } else {
            None
        },
        keep_special_bits: u.arbitrary()?,
    };
    Ok(ClientRequest {
        mode,
        streams,
        max_streams,
        block_size,
        checksum: pick(
            u,
            &[
                ChecksumAlg::Xxh3,
                ChecksumAlg::Blake3,
                ChecksumAlg::Crc32c,
                ChecksumAlg::Adler32,
                ChecksumAlg::Md5,
                ChecksumAlg::Sha256,
            ],
        )?,
        protect: pick(u, &[Protect::Clear, Protect::Safe, Protect::Private])?,
        window,
        congestion,
        choices,
        once_token: token,
        peer: None,
    })
}

/// An honest client and server: the server takes exactly the requests
/// the rules allow, and both ends agree on the same session.
fn pump(setup: &Setup, flags: u8, input: &[u8]) -> ArbResult<()> {
    let mut u = Unstructured::new(input);
    let token = (flags & 8 != 0).then_some(if flags & 16 != 0 { [0xee; 16] } else { ONCE });
    let request = arbitrary_request(&mut u, token)?;
    let Some(mut server) = Server::new(setup) else {
        return Ok(());
    };
    let Some((mut client, first)) = Client::new(request, setup.negotiated) else {
        return Ok(());
    };
    for msg in first.clone() {
        if server.ended {
            break; // A server that refused hangs up.
        }
        for answer in server.feed(msg) {
            client.feed(answer);
        }
    }
    // What the rules say of this request.
    let once = setup.policy.once_token;
    let find = |kind: fn(&ControlMsg) -> bool| first.iter().find(|m| kind(m));
    let Some(ControlMsg::SessionOpen(open)) = find(|m| matches!(m, ControlMsg::SessionOpen(_)))
    else {
        unreachable!("checked by Client::new");
    };
    let tuning = match find(|m| matches!(m, ControlMsg::Tuning(_))) {
        Some(ControlMsg::Tuning(t)) => Some(t),
        _ => None,
    };
    let options = match find(|m| matches!(m, ControlMsg::TransferOptions(_))) {
        Some(ControlMsg::TransferOptions(o)) => Some(o),
        _ => None,
    };
    let f = setup.negotiated.features;
    let rules = valid(open, tuning, options, f, &setup.policy.congestion);
    match (&server.outcome, &client.outcome) {
        (Some(Ok(r)), client_outcome) => {
            assert_eq!(
                token, once,
                "a server without a token opened for one, or the wrong one"
            );
            assert!(rules.is_ok());
            match client_outcome {
                Some(Ok(agreed)) => {
                    assert!(!setup.refuse);
                    assert_eq!(agreed.streams, r.open.streams);
                    assert_eq!(agreed.max_streams, r.tuning.max_streams);
                    assert_eq!(agreed.block_size, r.open.block_size);
                    assert_eq!(agreed.options, r.options);
                    assert_eq!(agreed.token, SESSION);
                }
                Some(Err(Error::Peer { .. })) => assert!(setup.refuse),
                other => panic!("the server took the request, the client: {other:?}"),
            }
        }
        (Some(Err(e)), Some(Err(Error::Peer { code, message }))) => {
            assert_eq!((*code, message), (e.wire_code(), &e.to_string()));
            match (once, token) {
                (Some(_), t) if t != once => assert!(matches!(e, Error::Unauthorized(_)), "{e:?}"),
                (None, Some(_)) => assert!(matches!(e, Error::Protocol(_)), "{e:?}"),
                _ => assert!(
                    matches!(e, Error::BadRequest(_)) && rules.is_err(),
                    "refused {e:?}; the rules say {rules:?}"
                ),
            }
        }
        other => panic!("the ends disagree: {other:?}"),
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((header, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let setup = setup(*header);
    if header[2] & 2 != 0 {
        let _ = pump(&setup, header[2], rest);
    } else {
        raw(&setup, rest);
    }
});
