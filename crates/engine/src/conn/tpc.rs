//! Third-party copies, from the client's side and the dialer's: the
//! client holds a control connection to each daemon ([`Leg`]), signs one
//! delegation for both, has each judge it, and tells one to dial the
//! other ([`third_party`]): the destination, which pulls, or the source,
//! which pushes, or (`auto`) the destination and, when it cannot reach
//! the source, the source. The dialing daemon runs an ordinary session
//! with the other, presenting the delegation and the other's ticket first
//! ([`dial`]). The data never passes through the client. The daemons'
//! side is `conn::server::tpc`; PROTOCOL.md §8.13 is the protocol.
//!
//! Either end may be a once server that ssh started (`[USER@]HOST:PATH`,
//! `conn::once`): it takes the client's token first and then the copy as
//! a daemon would; the other end's session it lets in on the delegation,
//! the ticket and that end's certificate instead of the token.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tern_drs::WindowMode;
use tern_proto::delegation::{Delegation, Dialer, Party, SignedDelegation, TpcRole};
use tern_proto::{ControlMsg, Features, Token, TpcSession, TuningRequest, Window};
use tern_session::delegation::Issuer;
use tern_session::open::PeerPass;

use super::client::{self, ClientOptions, Outcome};
use super::route::Endpoint;
use crate::data::channel::Control;
use crate::data::transfer::Progress;
use crate::store::fsio::{Sink, Source};
use crate::{Error, Result};

/// How long a delegation is valid unless told otherwise: the time the
/// destination has to open its session with the source.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// What a third-party copy copies.
#[derive(Debug, Clone)]
pub struct TpcRequest {
    /// The daemon the data comes from.
    pub source: Endpoint,
    /// Paths under its root.
    pub sources: Vec<String>,
    /// Descend into directories.
    pub recursive: bool,
    /// The daemon the data goes to.
    pub dest: Endpoint,
    /// The path under its root.
    pub dest_path: String,
}

/// Which daemon opens the data connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TpcMode {
    /// The destination dials the source and pulls.
    Pull,
    /// The source dials the destination and pushes.
    Push,
    /// The destination first; the source when the destination cannot
    /// reach it.
    Auto,
}

/// How the client goes about it.
#[derive(Debug, Clone)]
pub struct TpcOptions {
    /// How both daemons are trusted, the client certificate, timeouts.
    pub client: ClientOptions,
    /// How long the delegation is valid.
    pub ttl: Duration,
    /// Who dials.
    pub mode: TpcMode,
    /// How the source is reached when it is a once server started over
    /// ssh (its certificate as ssh vouched for it, its token), instead of
    /// `client`.
    pub source_once: Option<ClientOptions>,
    /// The same for the destination.
    pub dest_once: Option<ClientOptions>,
}

/// What a third-party copy did.
#[derive(Debug, Clone)]
pub struct TpcOutcome {
    /// Payload bytes delivered at the destination.
    pub bytes: u64,
    /// Files delivered.
    pub files: u64,
    /// Data streams between the daemons.
    pub streams: u16,
    /// From all streams up to the end.
    pub network_elapsed: Duration,
    /// The source's certificate fingerprint.
    pub source_fingerprint: String,
    /// The destination's.
    pub dest_fingerprint: String,
    /// The source's address the client reached.
    pub source_address: Option<SocketAddr>,
    /// The destination's.
    pub dest_address: Option<SocketAddr>,
    /// The data path: the destination's end of its session with the
    /// source, and the source's address it reached.
    pub data_path: (SocketAddr, SocketAddr),
    /// Bytes this client sent and received on its two control
    /// connections, as the kernel counted them.
    pub client_bytes: u64,
    /// How the data went: `pull` (the destination dialed) or `push`.
    pub direction: &'static str,
    /// Under `auto`, why the destination could not dial first.
    pub pull_failed: Option<String>,
    /// From starting to connect until the destination dialed.
    pub setup: Duration,
    /// Bytes already at the destination from an earlier attempt (resumed
    /// partial files), not sent again.
    pub bytes_resumed: u64,
}

/// The client's control connection to one daemon of the copy.
pub struct Leg {
    control: Control,
    control_fd: RawFd,
    name: String,
    fingerprint: String,
    binding: [u8; 32],
    address: Option<SocketAddr>,
    /// A once server's token, presented before the copy is offered.
    once_token: Option<Token>,
}

impl std::fmt::Debug for Leg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leg")
            .field("name", &self.name)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// What a daemon answered a delegation with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The ticket the other daemon must present.
    pub ticket: Token,
    /// Its other addresses.
    pub addresses: Vec<SocketAddr>,
}

impl Leg {
    /// Connects to the daemon at `ep`, trusted as `opts` says, and checks
    /// that it takes third-party copies.
    pub async fn open(ep: &Endpoint, opts: &ClientOptions) -> Result<Leg> {
        let name = ep.host_port();
        let c = client::connect(ep, opts).await?;
        if !c.negotiated.features.contains(Features::TPC) {
            return Err(Error::BadRequest(format!(
                "{name} does not take third-party copies (is its tern older than this one?)"
            )));
        }
        let binding = c
            .binding
            .ok_or_else(|| Error::Tls(format!("{name}: cannot export keying material")))?;
        Ok(Leg {
            control: Control::new(c.stream),
            control_fd: c.control_fd,
            name,
            fingerprint: c.fingerprint,
            binding,
            address: c.peer,
            once_token: opts.once_token,
        })
    }

    /// How the delegation names this daemon.
    pub fn party(&self) -> Party {
        Party {
            fingerprint: self.fingerprint.clone(),
            name: self.name.clone(),
            binding: self.binding,
        }
    }

    /// Asks the daemon to be `role` under `signed`.
    pub async fn offer(&mut self, role: TpcRole, signed: &SignedDelegation) -> Result<Accepted> {
        if let Some(token) = self.once_token {
            self.control.send(&ControlMsg::TokenAuth { token }).await?;
        }
        self.control
            .send(&ControlMsg::TpcOpen {
                role,
                delegation: signed.clone(),
            })
            .await?;
        match self.control.recv().await? {
            ControlMsg::TpcAccept { ticket, addresses } => Ok(Accepted { ticket, addresses }),
            ControlMsg::Error { code, message, .. } => Err(Error::Peer {
                code,
                message: format!(
                    "the {} {} refused: {message}",
                    match role {
                        TpcRole::Source => "source",
                        TpcRole::Dest => "destination",
                    },
                    self.name
                ),
            }),
            other => Err(self.refused(other)),
        }
    }

    /// The daemon's answer, as the error it is.
    fn refused(&self, msg: ControlMsg) -> Error {
        match msg {
            ControlMsg::Error { code, message, .. } => Error::Peer {
                code,
                message: format!("{} refused: {message}", self.name),
            },
            other => Error::Protocol(format!(
                "{}: expected TpcAccept, got {:?}",
                self.name,
                std::mem::discriminant(&other)
            )),
        }
    }

    /// Bytes sent and received on this connection, as the kernel counts
    /// them.
    fn bytes(&self) -> u64 {
        tern_drs::TcpInfo::read(self.control_fd)
            .map(|i| i.bytes_acked + i.bytes_received)
            .unwrap_or(0)
    }
}

/// Now, ms since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The delegation for `req` between the daemons of `source` and `dest`,
/// valid for `ttl` from now, letting `dialer` dial.
pub fn delegation(
    req: &TpcRequest,
    (source, dest): (&Leg, &Leg),
    dialer: Dialer,
    issuer: Option<String>,
    ttl: Duration,
) -> Delegation {
    let now = now_ms();
    Delegation {
        nonce: rand::random(),
        issued_at_ms: now,
        not_after_ms: now + ttl.as_millis() as u64,
        issuer,
        source: source.party(),
        dest: dest.party(),
        dialer,
        sources: req.sources.clone(),
        recursive: req.recursive,
        dest_path: req.dest_path.clone(),
        top_level: req.sources.len() as u32,
    }
}

/// Signs `d` with a key made for it alone.
pub fn sign(d: &Delegation) -> SignedDelegation {
    Issuer::from_seed(&rand::random()).sign(d)
}

/// What the dialing daemon said in the end.
#[derive(Debug)]
pub enum Followed {
    /// The copy is over.
    Done(ControlMsg),
    /// It could not reach the other daemon.
    Unreachable(String),
}

impl Leg {
    /// Tells this daemon to dial `other` (`endpoint` as the client reached
    /// it, and what it answered the delegation with), running the session
    /// as `session` says.
    pub async fn order_dial(
        &mut self,
        other: &Endpoint,
        answered: &Accepted,
        session: &TpcSession,
    ) -> Result<()> {
        self.control
            .send(&ControlMsg::TpcDial {
                host: other.host.clone(),
                port: other.port,
                addresses: answered.addresses.clone(),
                ticket: answered.ticket,
                session: Box::new(session.clone()),
            })
            .await
    }

    /// Tells this daemon the client is done with the copy (it ended at the
    /// other end): a session the other opened with it finishes, where the
    /// client's leaving without a word would stop it.
    pub async fn done(&mut self) {
        let _ = self
            .control
            .send(&ControlMsg::Close {
                per_stream_bytes: Vec::new(),
            })
            .await;
    }

    /// Follows this daemon's dial until it ends, copying its counts into
    /// `progress`; `other`'s control connection ending, or an error from
    /// it, ends the copy.
    pub async fn follow(&mut self, other: &mut Leg, progress: &Progress) -> Result<Followed> {
        loop {
            tokio::select! {
                msg = self.control.recv() => match msg? {
                    ControlMsg::TpcProgress { bytes, total, files_done } => {
                        progress.bytes.store(bytes, Ordering::Relaxed);
                        progress.total.store(total, Ordering::Relaxed);
                        progress.files_done.store(files_done, Ordering::Relaxed);
                    }
                    done @ ControlMsg::TpcDone { .. } => return Ok(Followed::Done(done)),
                    ControlMsg::TpcUnreachable { reason } => return Ok(Followed::Unreachable(reason)),
                    // The copy failed (it was accepted: not a refusal).
                    ControlMsg::Error { code, message, .. } => {
                        return Err(Error::Peer { code, message: format!("{}: {message}", self.name) });
                    }
                    other => return Err(self.refused(other)),
                },
                msg = other.control.recv() => return Err(match msg {
                    Ok(ControlMsg::Error { code, message, .. }) => {
                        Error::Peer { code, message: format!("{}: {message}", other.name) }
                    }
                    Ok(m) => other.refused(m),
                    Err(e) => Error::PeerGone(format!("{}: {e}", other.name)),
                }),
            }
        }
    }
}

/// Copies `req` from its source daemon straight to its destination
/// daemon; `progress` follows the dialer's count.
pub async fn third_party(
    req: &TpcRequest,
    opts: &TpcOptions,
    progress: Arc<Progress>,
) -> Result<TpcOutcome> {
    let started = Instant::now();
    let mode = opts.mode;
    let (mut a, mut b) = tokio::try_join!(
        Leg::open(
            &req.source,
            opts.source_once.as_ref().unwrap_or(&opts.client)
        ),
        Leg::open(&req.dest, opts.dest_once.as_ref().unwrap_or(&opts.client))
    )?;
    let issuer = opts.client.client_cert.as_ref().map(|c| c.fingerprint());
    let dialer = match mode {
        TpcMode::Pull => Dialer::Dest,
        TpcMode::Push => Dialer::Source,
        TpcMode::Auto => Dialer::Either,
    };
    let signed = sign(&delegation(req, (&a, &b), dialer, issuer, opts.ttl));
    // The source judges first: a client that may not read there never
    // involves the destination.
    let at_a = a.offer(TpcRole::Source, &signed).await?;
    let at_b = b.offer(TpcRole::Dest, &signed).await?;
    let setup = started.elapsed();
    let session = session_of(&opts.client);
    let mut pull_failed = None;
    let (done, direction) = loop {
        if mode != TpcMode::Push && pull_failed.is_none() {
            b.order_dial(&req.source, &at_a, &session).await?;
            match b.follow(&mut a, &progress).await? {
                Followed::Done(done) => break (done, "pull"),
                Followed::Unreachable(why) if mode == TpcMode::Auto => {
                    tracing::info!(
                        "{} cannot reach {}: {why}; it pushes instead",
                        b.name,
                        a.name
                    );
                    pull_failed = Some(why);
                    continue;
                }
                Followed::Unreachable(why) => {
                    return Err(Error::BadRequest(format!(
                        "{} cannot reach {}: {why} (--tpc push has the source dial instead)",
                        b.name, a.name
                    )));
                }
            }
        }
        a.order_dial(&req.dest, &at_b, &session).await?;
        match a.follow(&mut b, &progress).await? {
            Followed::Done(done) => break (done, "push"),
            Followed::Unreachable(why) => {
                return Err(Error::BadRequest(format!(
                    "{} cannot reach {}: {why}{} (--via-client relays through this host)",
                    a.name,
                    b.name,
                    pull_failed.map_or(String::new(), |p| format!(", nor the other way: {p}"))
                )));
            }
        }
    };
    let ControlMsg::TpcDone {
        bytes,
        files,
        streams,
        network_elapsed_ms,
        dialer_address,
        peer_address,
        bytes_resumed,
    } = done
    else {
        unreachable!("follow ends in TpcDone only")
    };
    progress.bytes.store(bytes, Ordering::Relaxed);
    progress.files_done.store(files, Ordering::Relaxed);
    // The end that was dialed may still be closing its session: told the
    // client is done, it finishes instead of stopping as if it had left.
    let dialed = if direction == "pull" { &mut a } else { &mut b };
    dialed.done().await;
    let client_bytes = a.bytes() + b.bytes();
    Ok(TpcOutcome {
        bytes,
        files,
        streams,
        network_elapsed: Duration::from_millis(network_elapsed_ms),
        source_fingerprint: a.fingerprint.clone(),
        dest_fingerprint: b.fingerprint.clone(),
        source_address: a.address,
        dest_address: b.address,
        data_path: (dialer_address, peer_address),
        client_bytes,
        setup,
        direction,
        pull_failed,
        bytes_resumed,
    })
}

/// Why a dial did not copy.
#[derive(Debug)]
pub enum DialError {
    /// No connection could be opened to the other daemon at any address:
    /// nothing was presented, and the other may dial instead.
    Unreachable(String),
    /// The other daemon proved to be the one named, then refused this
    /// end's certificate (a site daemon and a CA that did not issue it):
    /// nothing was presented, and the other may dial instead.
    Refused(String),
    /// The session failed once it was opened (the pass is spent).
    Failed(Error),
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Unreachable(why) => write!(f, "the other daemon is unreachable: {why}"),
            DialError::Refused(why) => {
                write!(f, "the other daemon refused this end's certificate: {why}")
            }
            DialError::Failed(e) => e.fmt(f),
        }
    }
}

/// What the dialing daemon brings to the session.
pub enum Dialing {
    /// The destination: it pulls into this.
    Pull(Arc<dyn Sink>),
    /// The source: it pushes this.
    Push(Arc<dyn Source>),
}

impl std::fmt::Debug for Dialing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dialing::Pull(_) => "Pull",
            Dialing::Push(_) => "Push",
        })
    }
}

/// The dialing daemon's session with the other: `host:port` first, then
/// each of `addresses`, trusting only the fingerprint the delegation
/// names for the other end, presenting `pass`; a pull of the delegated
/// sources, or a push to the delegated destination.
pub async fn dial(
    d: &Delegation,
    (host, port, addresses): (&str, u16, &[SocketAddr]),
    pass: PeerPass,
    opts: ClientOptions,
    dialing: Dialing,
    progress: Arc<Progress>,
) -> std::result::Result<Outcome, DialError> {
    let mut opts = opts;
    let other = match dialing {
        Dialing::Pull(_) => &d.source,
        Dialing::Push(_) => &d.dest,
    };
    opts.trust = super::trust::Trust::Pinned(other.fingerprint.clone());
    opts.peer_pass = Some(pass);
    let mut candidates = vec![Endpoint {
        host: host.to_string(),
        port,
    }];
    candidates.extend(addresses.iter().map(|a| Endpoint {
        host: a.ip().to_string(),
        port: a.port(),
    }));
    let mut tried = Vec::new();
    for ep in &candidates {
        // Whether it answers at all is learnt first, cheaply: a session
        // that fails after connecting is not tried elsewhere (the pass is
        // spent).
        let reachable = tokio::time::timeout(
            opts.connect_timeout,
            tokio::net::TcpStream::connect((ep.host.as_str(), ep.port)),
        )
        .await;
        match reachable {
            Ok(Ok(_)) => {
                let copied = match &dialing {
                    Dialing::Pull(sink) => {
                        let (sources, sink) = (d.sources.clone(), sink.clone());
                        let progress = progress.clone();
                        client::pull_into(ep, &opts, sources, d.recursive, sink, progress).await
                    }
                    Dialing::Push(source) => {
                        let to = (d.dest_path.clone(), d.top_level);
                        let (source, progress) = (source.clone(), progress.clone());
                        client::push_from(ep, &opts, source, to, progress).await
                    }
                };
                match copied {
                    // Another daemon answered here (its certificate is not
                    // the one named): nothing was presented to it, so the
                    // next address may be the one.
                    Err(Error::FingerprintMismatch { .. }) => {
                        tried.push(format!("{}: another daemon", ep.host_port()));
                    }
                    Err(e) if crate::conn::tls::refused_our_certificate(&e) => {
                        return Err(DialError::Refused(e.to_string()));
                    }
                    copied => return copied.map_err(DialError::Failed),
                }
            }
            Ok(Err(e)) => tried.push(format!("{}: {e}", ep.host_port())),
            Err(_) => tried.push(format!("{}: timed out", ep.host_port())),
        }
    }
    Err(DialError::Unreachable(tried.join("; ")))
}

/// What of the client's own options the dialing daemon's session takes
/// (`TpcDial`): streams, block size, digest, protection, rate limit,
/// buffers, congestion control, compression, skipping, stall timeout.
pub fn session_of(o: &ClientOptions) -> TpcSession {
    TpcSession {
        streams: o.streams,
        streams_from_rtt: o.tuning.streams_from_rtt,
        auto_streams: o.tuning.auto_streams,
        block_size: o.block_size,
        checksum: o.checksum,
        protect: o.protect,
        rate_limit_bps: o.rate_limit.unwrap_or(0),
        tuning: TuningRequest {
            max_streams: o.max_streams,
            window: crate::data::tuning::wire_window(o.tuning.window),
            congestion: o.tuning.congestion.clone(),
        },
        options: o.choices.wire(0),
    }
}

/// Sets the dialer's `opts` to the client's `session` choices, refusing
/// first, by the rules any server applies to a session it is asked for,
/// what no session may ask and a congestion control this daemon may not
/// set (`tern_session::open::check_tpc_session`); with none named, this
/// daemon's preferred one.
pub fn apply_session(opts: &mut ClientOptions, s: &TpcSession) -> Result<()> {
    let usable = tern_drs::host::usable_congestion();
    let policy = tern_session::open::CongestionPolicy {
        preferred: usable.preferred.clone(),
        usable: usable.usable.clone(),
    };
    let congestion = tern_session::open::check_tpc_session(s, &policy)?;
    opts.streams = s.streams;
    opts.max_streams = s.tuning.max_streams;
    opts.tuning.streams_from_rtt = s.streams_from_rtt;
    opts.tuning.auto_streams = s.auto_streams;
    opts.block_size = s.block_size;
    opts.checksum = s.checksum;
    opts.protect = s.protect;
    opts.rate_limit = (s.rate_limit_bps > 0).then_some(s.rate_limit_bps);
    opts.tuning.window = match s.tuning.window {
        Window::Auto => WindowMode::Auto,
        Window::Kernel => WindowMode::Kernel,
        Window::Fixed(n) => WindowMode::Fixed(u64::from(n)),
    };
    opts.tuning.congestion = congestion;
    let o = &s.options;
    opts.choices.compression = o.compression;
    opts.choices.skip_existing = o.skip_existing;
    opts.choices.stall_timeout =
        (o.stall_timeout_ms > 0).then(|| Duration::from_millis(u64::from(o.stall_timeout_ms)));
    Ok(())
}
