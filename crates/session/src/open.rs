//! Opening a session, both ends, without I/O (PROTOCOL.md §4–§5).
//!
//! After TLS and the hello exchange (fixed-size, done by the engine, which
//! hands over the [`Negotiated`] result), the client asks and the server
//! answers over the control channel:
//!
//! ```text
//! client                                   server
//! [TokenAuth]         (once servers only)  ──▶  check the token
//! SessionOpen
//! [Tuning]            (TUNING)
//! [TransferOptions]   (OPTIONS)            ──▶  validate, agree
//!                                          ◀──  SessionAccept, [TuningAccept],
//!                                               [Paths]   (PATHS)
//!                                               or Error (refused)
//! ```
//!
//! [`ClientOpen`] and [`ServerOpen`] are the two ends as state machines in
//! the style of `quinn-proto`: the driver sends what
//! [`poll_transmit`](ClientOpen::poll_transmit) gives, feeds every control
//! message received to `handle`, and is told when the session is agreed.
//! A message out of order, a refusal or an impossible request is an
//! [`Error`]; the server's refusals are queued as `Error` messages for the
//! client before the error is returned, so every refusal is explained on
//! the wire. What a server cannot judge here (who may read which path, how
//! many sessions an address holds) it judges between
//! [`ServerOpen::handle`] returning the request and [`ServerOpen::accept`]
//! or [`ServerOpen::refuse`].

use std::collections::VecDeque;
use std::net::SocketAddr;

use tern_proto::{
    ChecksumAlg, ControlMsg, ErrorCode, Features, MAX_BLOCK_SIZE, Protect, SessionAccept,
    SessionMode, SessionOpen, Token, TransferOptions, TuningRequest, Window,
};

use tern_proto::delegation::{Delegation, SignedDelegation, TpcRole};
use tern_proto::hello::Negotiated;

use crate::options::{Agreed, Choices, SPARE_STREAMS};
use crate::{Error, Result};

/// Most data streams one session may open.
pub const MAX_STREAMS: u16 = 128;
/// Smallest block size a session may ask for.
pub const MIN_BLOCK_SIZE: u32 = 4 << 10;

/// The message that tells the peer why this end gives up.
pub fn refusal(code: ErrorCode, message: String) -> ControlMsg {
    ControlMsg::Error {
        code,
        message,
        file_id: None,
    }
}

/// The first word of a message's debug form (`SessionOpen`, `Hello`…),
/// to name it without echoing what it carried.
fn name_of(msg: &ControlMsg) -> String {
    let text = format!("{msg:?}");
    text.split(['(', ' ', '{'])
        .next()
        .unwrap_or("?")
        .to_string()
}

/// Longest excerpt of an unexpected message quoted in an error: a refusal
/// must fit a control frame however large the message it refuses.
const QUOTE_MAX: usize = 200;

/// An error for a message that came where another was due.
fn unexpected(expected: &str, got: &ControlMsg) -> Error {
    Error::Protocol(format!("expected {expected}, got {}", quote(got)))
}

/// At most [`QUOTE_MAX`] bytes of `value`'s debug form, without building
/// the rest: a peer that has not authenticated may send megabytes.
fn quote(value: &impl std::fmt::Debug) -> String {
    struct Bounded(String);
    impl std::fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = QUOTE_MAX - self.0.len();
            if s.len() <= room {
                self.0.push_str(s);
                return Ok(());
            }
            let mut cut = room;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            self.0.push_str(&s[..cut]);
            self.0.push('…');
            Err(std::fmt::Error)
        }
    }
    let mut out = Bounded(String::new());
    let _ = std::fmt::write(&mut out, format_args!("{value:?}"));
    out.0
}

/// What a client asks of a session.
#[derive(Debug, Clone)]
pub struct ClientRequest {
    /// What the session does.
    pub mode: SessionMode,
    /// Data streams to start with.
    pub streams: u16,
    /// Data streams the session may grow to.
    pub max_streams: u16,
    /// Block size.
    pub block_size: u32,
    /// Whole-file digest.
    pub checksum: ChecksumAlg,
    /// Data protection.
    pub protect: Protect,
    /// Buffer sizing asked of the server's data sockets.
    pub window: Window,
    /// Congestion control asked of the server (empty: its choice).
    pub congestion: String,
    /// Compression, skipping, stall timeout.
    pub choices: Choices,
    /// The one-time token of a `tern serve --once`, presented first.
    pub once_token: Option<Token>,
    /// A third-party copy's dialing daemon: the delegation and ticket that
    /// admit this session at the other daemon, presented first
    /// (`PeerOpen`).
    pub peer: Option<PeerPass>,
}

/// What a dialing daemon presents to the other (`PeerOpen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPass {
    /// The client's delegation.
    pub delegation: SignedDelegation,
    /// The ticket the other daemon gave the client.
    pub ticket: Token,
}

/// What a client and the server agreed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAgreed {
    /// The version both speak.
    pub version: u16,
    /// Features both have.
    pub features: Features,
    /// The secret data connections present to join the session.
    pub token: Token,
    /// Data streams to open now.
    pub streams: u16,
    /// Stream indices the session may use, spares included.
    pub max_streams: u16,
    /// Block size.
    pub block_size: u32,
    /// The transfer options in force.
    pub options: Agreed,
    /// Other addresses of the server that data connections may join at
    /// (`PATHS`; empty without it).
    pub paths: Vec<SocketAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ClientState {
    AwaitAccept,
    AwaitTuningAccept(SessionAccept),
    /// The session is agreed; the server's addresses are still to come.
    AwaitPaths(Box<ClientAgreed>),
    Done,
}

/// The client's end of the opening.
#[derive(Debug)]
pub struct ClientOpen {
    negotiated: Negotiated,
    /// What was asked: streams to start, block size, the stream cap.
    asked: (u16, u32, u16),
    outbox: VecDeque<ControlMsg>,
    /// The options sent, when `OPTIONS` was negotiated.
    sent_options: Option<TransferOptions>,
    state: ClientState,
}

impl ClientOpen {
    /// Queues the request: the token (when one is given), the session
    /// request, tuning and options as far as `negotiated` allows.
    pub fn new(request: ClientRequest, negotiated: Negotiated) -> Result<ClientOpen> {
        let features = negotiated.features;
        let mut outbox = VecDeque::new();
        if let Some(token) = request.once_token {
            if !features.contains(Features::TOKEN_AUTH) {
                return Err(Error::Protocol(
                    "the far end does not take one-time tokens (is its tern older than this one?)"
                        .into(),
                ));
            }
            outbox.push_back(ControlMsg::TokenAuth { token });
        }
        if let Some(pass) = request.peer {
            if !features.contains(Features::TPC) {
                return Err(Error::Protocol(
                    "the other daemon does not do third-party copies (is its tern older?)".into(),
                ));
            }
            outbox.push_back(ControlMsg::PeerOpen {
                delegation: pass.delegation,
                ticket: pass.ticket,
            });
        }
        outbox.push_back(ControlMsg::SessionOpen(SessionOpen {
            mode: request.mode.clone(),
            streams: request.streams,
            block_size: request.block_size,
            checksum: request.checksum,
            protect: request.protect,
        }));
        let tuned = features.contains(Features::TUNING);
        let optioned = features.contains(Features::OPTIONS);
        let choices = session_choices(&request.choices, &request.mode);
        let max_asked = request.max_streams.max(request.streams);
        // Spare indices replace stalled streams; only a session that can
        // grow while it runs can take them.
        let spares = if optioned && tuned && choices.stall_timeout.is_some() {
            SPARE_STREAMS.min(MAX_STREAMS.saturating_sub(max_asked))
        } else {
            0
        };
        if tuned {
            outbox.push_back(ControlMsg::Tuning(TuningRequest {
                max_streams: max_asked + spares,
                window: request.window,
                congestion: request.congestion,
            }));
        }
        let sent_options = optioned.then(|| choices.wire(spares));
        if let Some(o) = &sent_options {
            outbox.push_back(ControlMsg::TransferOptions(o.clone()));
        }
        let cap = if tuned {
            max_asked + spares
        } else {
            request.streams
        };
        Ok(ClientOpen {
            negotiated,
            asked: (request.streams, request.block_size, cap),
            outbox,
            sent_options,
            state: ClientState::AwaitAccept,
        })
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<ControlMsg> {
        self.outbox.pop_front()
    }

    /// What the client waits for, for messages about a silent server.
    pub fn awaiting(&self) -> &'static str {
        match self.state {
            ClientState::AwaitAccept => "SessionAccept",
            ClientState::AwaitTuningAccept(_) => "TuningAccept",
            ClientState::AwaitPaths(_) => "Paths",
            ClientState::Done => "nothing",
        }
    }

    /// Takes the server's answer; `Some` once the session is agreed.
    pub fn handle(&mut self, msg: ControlMsg) -> Result<Option<ClientAgreed>> {
        if let ControlMsg::Error { code, message, .. } = msg {
            self.state = ClientState::Done;
            return Err(Error::Peer { code, message });
        }
        match (std::mem::replace(&mut self.state, ClientState::Done), msg) {
            (ClientState::AwaitAccept, ControlMsg::SessionAccept(accept)) => {
                if self.negotiated.features.contains(Features::TUNING) {
                    self.state = ClientState::AwaitTuningAccept(accept);
                    return Ok(None);
                }
                let streams = accept.streams;
                self.agreed(accept, streams)
            }
            (
                ClientState::AwaitTuningAccept(accept),
                ControlMsg::TuningAccept { max_streams, .. },
            ) => {
                let max_streams = max_streams.max(accept.streams);
                self.agreed(accept, max_streams)
            }
            (ClientState::AwaitPaths(mut agreed), ControlMsg::Paths { mut addresses }) => {
                addresses.retain(is_path_address);
                addresses.truncate(tern_proto::MAX_PATHS);
                agreed.paths = addresses;
                Ok(Some(*agreed))
            }
            (state, other) => {
                let expected = match state {
                    ClientState::AwaitAccept => "SessionAccept",
                    ClientState::AwaitTuningAccept(_) => "TuningAccept",
                    ClientState::AwaitPaths(_) => "Paths",
                    ClientState::Done => "nothing more during the opening",
                };
                Err(unexpected(expected, &other))
            }
        }
    }

    /// The session as agreed, or, when the server will name its
    /// addresses, nothing until it has.
    fn agreed(&mut self, accept: SessionAccept, max_streams: u16) -> Result<Option<ClientAgreed>> {
        let agreed = self.check(accept, max_streams)?;
        if self.negotiated.features.contains(Features::PATHS) {
            self.state = ClientState::AwaitPaths(Box::new(agreed));
            return Ok(None);
        }
        Ok(Some(agreed))
    }

    fn check(&mut self, accept: SessionAccept, max_streams: u16) -> Result<ClientAgreed> {
        self.state = ClientState::Done;
        // The server may grant less than asked, never more (§5.2).
        let (streams, block_size, cap) = self.asked;
        if !(1..=streams).contains(&accept.streams)
            || !(MIN_BLOCK_SIZE..=block_size).contains(&accept.block_size)
            || !(accept.streams..=cap).contains(&max_streams)
        {
            return Err(Error::Protocol(format!(
                "the server accepted {} streams of {} bytes growing to {max_streams}; \
                 asked for {streams} streams of {block_size} bytes growing to {cap}",
                accept.streams, accept.block_size
            )));
        }
        let options = Agreed::new(
            self.sent_options.as_ref(),
            self.negotiated.features,
            accept.streams,
            max_streams,
        )?;
        Ok(ClientAgreed {
            version: self.negotiated.version,
            features: self.negotiated.features,
            token: accept.token,
            streams: accept.streams,
            max_streams,
            block_size: accept.block_size,
            options,
            paths: Vec::new(),
        })
    }
}

/// The choices that make sense for a session: a perf test measures the
/// path, so it neither skips nor (unless asked by name) compresses.
fn session_choices(choices: &Choices, mode: &SessionMode) -> Choices {
    match mode {
        SessionMode::Perf { .. } => Choices {
            compression: match choices.compression {
                tern_proto::Compression::Auto => tern_proto::Compression::None,
                c => c,
            },
            skip_existing: tern_proto::SkipExisting::Never,
            stall_timeout: choices.stall_timeout,
            keep_special_bits: false,
        },
        _ => *choices,
    }
}

/// The congestion controls a server's data sockets may use, found once
/// per process by the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CongestionPolicy {
    /// Used when the client names none.
    pub preferred: String,
    /// Every one this process may set.
    pub usable: Vec<String>,
}

/// What a server allows, and whom it expects.
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    /// Congestion controls the server can grant.
    pub congestion: CongestionPolicy,
    /// A once server's token: the first message must present it.
    pub once_token: Option<Token>,
}

/// The session's tuning, as the server agreed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreedTuning {
    /// Stream indices the session may use (the streams asked for, when the
    /// client sent no tuning request).
    pub max_streams: u16,
    /// Buffer sizing of the server's data sockets; `None`: the server's
    /// default (an older client asked nothing).
    pub window: Option<Window>,
    /// Congestion control; empty when the client asked nothing.
    pub congestion: String,
    /// Whether the client asked (and so expects a `TuningAccept`).
    pub requested: bool,
}

/// A validated session request, for the server to judge and accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    /// What the client asked.
    pub open: SessionOpen,
    /// The stream cap, window and congestion control agreed.
    pub tuning: AgreedTuning,
    /// The transfer options in force.
    pub options: Agreed,
    /// The version both speak.
    pub version: u16,
    /// Features both have.
    pub features: Features,
}

/// What the server's opening has to tell its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// The once token presented was right: the driver claims the one
    /// session (or refuses when it was taken).
    TokenPresented,
    /// The request is valid: the driver judges it (paths, limits) and
    /// then calls [`ServerOpen::accept`] or [`ServerOpen::refuse`].
    Request(Box<SessionRequest>),
    /// A client asks this daemon to be one end of a third-party copy: the
    /// driver judges the delegation and the client's rights, then calls
    /// [`ServerOpen::accept_tpc`] or [`ServerOpen::refuse`].
    Tpc(TpcRole, Box<SignedDelegation>),
    /// The other daemon of a third-party copy presents its pass: the
    /// driver admits it ([`ServerOpen::delegated`]) or refuses it; the
    /// `SessionOpen` that follows must be what the delegation covers.
    PeerPresented(Box<PeerPass>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ServerState {
    AwaitToken(Token),
    AwaitOpen,
    AwaitTuning(SessionOpen),
    AwaitOptions(SessionOpen, Option<TuningRequest>),
    Judging,
    Done,
}

/// The server's end of the opening.
#[derive(Debug)]
pub struct ServerOpen {
    negotiated: Negotiated,
    congestion: CongestionPolicy,
    outbox: VecDeque<ControlMsg>,
    state: ServerState,
    /// A `PeerOpen` came: the session must be admitted by it.
    peer_presented: bool,
    /// What the admitted delegation covers, and this daemon's end.
    delegated: Option<(TpcRole, Delegation)>,
}

impl ServerOpen {
    /// Starts waiting for the client's request (or, for a once server,
    /// its token). A once server refuses a client that cannot present one:
    /// the driver tells it why.
    pub fn new(negotiated: Negotiated, policy: ServerPolicy) -> Result<ServerOpen> {
        let state = match policy.once_token {
            Some(_) if !negotiated.features.contains(Features::TOKEN_AUTH) => {
                return Err(Error::Unauthorized(
                    "the client cannot present a one-time token".into(),
                ));
            }
            Some(token) => ServerState::AwaitToken(token),
            None => ServerState::AwaitOpen,
        };
        Ok(ServerOpen {
            negotiated,
            congestion: policy.congestion,
            outbox: VecDeque::new(),
            state,
            peer_presented: false,
            delegated: None,
        })
    }

    /// The other daemon's `PeerOpen` was admitted for delegation `d`, of
    /// which this daemon is `role`: only the session it covers may open.
    pub fn delegated(&mut self, role: TpcRole, d: Delegation) {
        self.delegated = Some((role, d));
    }

    /// Accepts a third-party-copy request: queues `TpcAccept`.
    pub fn accept_tpc(&mut self, ticket: Token, addresses: &[SocketAddr]) {
        if self.state != ServerState::Judging {
            return;
        }
        self.state = ServerState::Done;
        let addresses = addresses
            .iter()
            .take(tern_proto::MAX_PATHS)
            .copied()
            .collect();
        self.outbox
            .push_back(ControlMsg::TpcAccept { ticket, addresses });
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<ControlMsg> {
        self.outbox.pop_front()
    }

    /// Whether the opening has ended (accepted or refused).
    pub fn is_done(&self) -> bool {
        self.state == ServerState::Done
    }

    /// Takes the client's next message.
    pub fn handle(&mut self, msg: ControlMsg) -> Result<Option<ServerEvent>> {
        let features = self.negotiated.features;
        let state = std::mem::replace(&mut self.state, ServerState::Done);
        match (state, msg) {
            (ServerState::AwaitToken(want), ControlMsg::TokenAuth { token }) => {
                if !same_token(&token, &want) {
                    return Err(self.refuse(Error::Unauthorized("wrong one-time token".into())));
                }
                self.state = ServerState::AwaitOpen;
                Ok(Some(ServerEvent::TokenPresented))
            }
            // The other end of a third-party copy this once server's client
            // ordered presents its delegation and ticket instead of the
            // token (the driver checks them, and the dialer's certificate).
            (
                ServerState::AwaitToken(_) | ServerState::AwaitOpen,
                ControlMsg::PeerOpen { delegation, ticket },
            ) if features.contains(Features::TPC) && !self.peer_presented => {
                self.peer_presented = true;
                self.state = ServerState::AwaitOpen;
                Ok(Some(ServerEvent::PeerPresented(Box::new(PeerPass {
                    delegation,
                    ticket,
                }))))
            }
            (ServerState::AwaitToken(_), other) => Err(self.refuse(Error::Unauthorized(format!(
                "this server needs its one-time token first, got {}",
                name_of(&other)
            )))),
            (ServerState::AwaitOpen, ControlMsg::TpcOpen { role, delegation })
                if features.contains(Features::TPC) && !self.peer_presented =>
            {
                self.state = ServerState::Judging;
                Ok(Some(ServerEvent::Tpc(role, Box::new(delegation))))
            }
            (ServerState::AwaitOpen, ControlMsg::SessionOpen(open)) => {
                if features.contains(Features::TUNING) {
                    self.state = ServerState::AwaitTuning(open);
                    return Ok(None);
                }
                self.after_tuning(open, None)
            }
            (ServerState::AwaitTuning(open), ControlMsg::Tuning(t)) => {
                self.after_tuning(open, Some(t))
            }
            (ServerState::AwaitOptions(open, tuning), ControlMsg::TransferOptions(o)) => {
                self.judge(open, tuning, Some(o)).map(Some)
            }
            (state, other) => {
                let expected = match state {
                    ServerState::AwaitOpen | ServerState::AwaitToken(_) => "SessionOpen",
                    ServerState::AwaitTuning(_) => "Tuning",
                    ServerState::AwaitOptions(..) => "TransferOptions",
                    ServerState::Judging | ServerState::Done => "nothing during the opening",
                };
                Err(self.refuse(unexpected(expected, &other)))
            }
        }
    }

    fn after_tuning(
        &mut self,
        open: SessionOpen,
        tuning: Option<TuningRequest>,
    ) -> Result<Option<ServerEvent>> {
        if self.negotiated.features.contains(Features::OPTIONS) {
            self.state = ServerState::AwaitOptions(open, tuning);
            return Ok(None);
        }
        self.judge(open, tuning, None).map(Some)
    }

    fn judge(
        &mut self,
        open: SessionOpen,
        tuning: Option<TuningRequest>,
        options: Option<TransferOptions>,
    ) -> Result<ServerEvent> {
        let features = self.negotiated.features;
        let admitted = match (&self.delegated, self.peer_presented) {
            (Some((role, d)), _) => crate::delegation::covers(d, *role, &open.mode)
                .map_err(|r| Error::Unauthorized(r.to_string())),
            (None, true) => Err(Error::Unauthorized(
                "the other daemon's delegation was not admitted".into(),
            )),
            (None, false) => Ok(()),
        };
        let checked = admitted
            .and_then(|()| validate(&open, features))
            .and_then(|()| agree_tuning(&open, tuning.as_ref(), &self.congestion))
            .and_then(|tuning| {
                let options =
                    Agreed::new(options.as_ref(), features, open.streams, tuning.max_streams)?;
                Ok((tuning, options))
            });
        let (tuning, options) = checked.map_err(|e| self.refuse(e))?;
        self.state = ServerState::Judging;
        Ok(ServerEvent::Request(Box::new(SessionRequest {
            open,
            tuning,
            options,
            version: self.negotiated.version,
            features,
        })))
    }

    /// Accepts the request under `token`: queues `SessionAccept` and, when
    /// the client asked about tuning, `TuningAccept`.
    pub fn accept(&mut self, request: &SessionRequest, token: Token, paths: &[SocketAddr]) {
        if self.state != ServerState::Judging {
            // Refused already, or no request yet: nothing to accept.
            return;
        }
        self.state = ServerState::Done;
        self.outbox
            .push_back(ControlMsg::SessionAccept(SessionAccept {
                token,
                streams: request.open.streams,
                block_size: request.open.block_size,
            }));
        if request.tuning.requested {
            self.outbox.push_back(ControlMsg::TuningAccept {
                max_streams: request.tuning.max_streams,
                congestion: request.tuning.congestion.clone(),
            });
        }
        if request.features.contains(Features::PATHS) {
            let addresses = paths.iter().take(tern_proto::MAX_PATHS).copied().collect();
            self.outbox.push_back(ControlMsg::Paths { addresses });
        }
    }

    /// Refuses the session for `error` (queues its `Error` message) and
    /// gives the error back.
    pub fn refuse(&mut self, error: Error) -> Error {
        self.refuse_with(error.wire_code(), error.to_string());
        error
    }

    /// Refuses the session with a code and message of the driver's own.
    pub fn refuse_with(&mut self, code: ErrorCode, message: String) {
        self.state = ServerState::Done;
        self.outbox.push_back(refusal(code, message));
    }
}

/// Compares tokens without an early exit, so timing tells nothing.
pub fn same_token(a: &Token, b: &Token) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn validate(open: &SessionOpen, features: Features) -> Result<()> {
    if open.streams == 0 || open.streams > MAX_STREAMS {
        return Err(Error::BadRequest(format!(
            "{} streams requested; 1 to {MAX_STREAMS} allowed",
            open.streams
        )));
    }
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&open.block_size) {
        return Err(Error::BadRequest(format!(
            "block size {} outside {MIN_BLOCK_SIZE}..={MAX_BLOCK_SIZE}",
            open.block_size
        )));
    }
    if matches!(open.mode, SessionMode::Perf { .. }) && !features.contains(Features::PERF) {
        return Err(Error::BadRequest(
            "throughput tests (perf) are not supported by both ends".into(),
        ));
    }
    let needed = match open.protect {
        Protect::Clear => Features(0),
        Protect::Safe => Features::PROTECT_SAFE,
        Protect::Private => Features::PROTECT_PRIVATE,
    };
    if !features.contains(needed) {
        // Never downgrade silently: refuse what was asked for.
        return Err(Error::BadRequest(format!(
            "protection '{}' is not supported by both ends",
            open.protect.name()
        )));
    }
    Ok(())
}

/// Checks a third-party copy's session (`TpcDial`'s `TpcSession`) by the
/// rules a server applies to a client's `SessionOpen` and `Tuning`, for the
/// daemon about to dial with it: what no session may ask is refused before
/// the one-time delegation is spent. Returns the congestion control to use
/// (this daemon's preferred one when none is named).
pub fn check_tpc_session(
    s: &tern_proto::TpcSession,
    congestion: &CongestionPolicy,
) -> Result<String> {
    let open = SessionOpen {
        mode: SessionMode::Pull {
            sources: Vec::new(),
            recursive: false,
        },
        streams: s.streams,
        block_size: s.block_size,
        checksum: s.checksum,
        protect: s.protect,
    };
    validate(&open, Features::ALL)?;
    Ok(agree_tuning(&open, Some(&s.tuning), congestion)?.congestion)
}

/// Settles the session's tuning from the client's request (or its absence,
/// with an older client): the stream cap, the window, and the congestion
/// control, which must be one the server may use.
fn agree_tuning(
    open: &SessionOpen,
    requested: Option<&TuningRequest>,
    congestion: &CongestionPolicy,
) -> Result<AgreedTuning> {
    let Some(req) = requested else {
        return Ok(AgreedTuning {
            max_streams: open.streams,
            window: None,
            congestion: String::new(),
            requested: false,
        });
    };
    if req.max_streams < open.streams || req.max_streams > MAX_STREAMS {
        return Err(Error::BadRequest(format!(
            "at most {} streams asked for with {} to start; {}..={MAX_STREAMS} allowed",
            req.max_streams, open.streams, open.streams
        )));
    }
    if let Window::Fixed(n) = req.window {
        if !(4096..=1 << 30).contains(&n) {
            return Err(Error::BadRequest(format!(
                "window of {n} bytes; 4 KiB to 1 GiB allowed"
            )));
        }
    }
    let chosen = if req.congestion.is_empty() {
        congestion.preferred.clone()
    } else if congestion.usable.contains(&req.congestion) {
        req.congestion.clone()
    } else {
        return Err(Error::BadRequest(format!(
            "congestion control '{}' is not available on the server (usable: {})",
            quote(&format_args!("{}", req.congestion)),
            congestion.usable.join(" ")
        )));
    };
    Ok(AgreedTuning {
        max_streams: req.max_streams,
        window: Some(req.window),
        congestion: chosen,
        requested: true,
    })
}

/// Whether an address a server names could be another path to it: a
/// unicast address and a port. A server that names this host's loopback,
/// a multicast group or port 0 would send the client's data connections
/// (and their join tokens) somewhere no path leads; such names are
/// dropped.
fn is_path_address(addr: &std::net::SocketAddr) -> bool {
    use std::net::IpAddr;
    let ip = addr.ip().to_canonical();
    let unicast = match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_link_local())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    };
    unicast && addr.port() != 0
}

#[cfg(test)]
mod tests;
