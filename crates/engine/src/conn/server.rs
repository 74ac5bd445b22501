//! `tern serve`: the daemon.
//!
//! One listening port carries everything. The first bytes of a connection
//! tell what it is: a TLS ClientHello (`0x16`) is a control connection or a
//! `private` data connection (told apart by the magic inside TLS); the
//! magic `TERD` is a plain data connection joining a session by its token.
//! Anything else is logged and dropped without disturbing other sessions.
//!
//! A site daemon ([`SiteAuth`]) demands a client certificate from its CAs
//! on every TLS connection and serves each session only within the grants
//! the authorization file gives the certificate's subject ([`crate::conn::authz`]);
//! a subject with no grant gets an error before anything is touched.
//!
//! Like mini-redis, [`serve`] takes a bound listener and a shutdown future:
//! on shutdown it stops accepting, lets running sessions finish for a grace
//! period, then aborts them.
//!
//! A connection is a stranger until it has authenticated: it holds a
//! handshake slot from a small pool, a few per address, for a short time
//! ([`limits`]), and only a validated session request turns it into a
//! session, of which each address may hold a bounded number and all
//! together `max_sessions` at once (a semaphore; more wait). So neither
//! idle connections nor sessions that never join their streams lock
//! legitimate clients out.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_proto::data::{JOIN_LEN, JOIN_MAGIC};
use tern_proto::delegation::{SignedDelegation, TpcRole};
use tern_proto::hello::{HELLO_LEN, HELLO_MAGIC};
use tern_proto::{DataJoin, FileMeta, Hello, JoinReply, Protect, SessionMode, SessionOpen, Token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::conn::aligned::{Aligned, DATA_READ_BUFFER};
use crate::conn::authz::{Access, Authz, Grants, Subject};
use crate::conn::gate::{Claim, Gate};
use crate::conn::open::{self, Linger, Step};
use crate::conn::paths::Advertise;
use crate::conn::records::{self, SecretCapture};
use crate::conn::tls::{BLOCK_MAC_LABEL, ServerIdentity, bind_token};
use crate::data::FirstStreams;
use crate::data::transfer::{self, BoxStream, Control, Progress, TransferParams};
use crate::data::tuning::{Joined, StreamSupply, Tuning};
use crate::integrity::BlockCheck;
use crate::store::fsio::{
    DiscardSink, FsSink, FsSource, GenSource, Root, Sink, Source, checked_relative,
};
use crate::{Error, Result};
use tern_drs::WindowMode;
use tern_session::open::{CongestionPolicy, ServerEvent, ServerOpen, ServerPolicy, SessionRequest};

pub mod observe;
pub use limits::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_JOIN_TIMEOUT, DEFAULT_MAX_HANDSHAKES,
    DEFAULT_MAX_HANDSHAKES_PER_ADDRESS, DEFAULT_MAX_SESSIONS_PER_ADDRESS, Limit, Refusals,
    raise_open_file_limit,
};
pub use observe::{
    LiveGuard, LiveSession, LiveSessions, LiveTpc, LiveTuning, RecentSession, SessionDone,
    SessionHook, WatchedStream,
};

mod auth;
mod join;
pub(crate) mod limits;
mod role;
mod tpc;

use auth::{KeyExporter, authorize, export_key_fn, peek_exact};
use role::{Role, params_of, prepare_role, run_role};
use tpc::{ConnFacts, Tpc};

use join::{Admission, Joining, admit_streams, data_join};

use limits::{Handshake, Handshaking, Limiter};

pub use tern_session::open::{MAX_STREAMS, MIN_BLOCK_SIZE};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Only paths beneath this directory are served.
    pub root: PathBuf,
    /// Authenticated sessions at once, at most; more wait.
    pub max_sessions: usize,
    /// Authenticated sessions (running or waiting) one client address may
    /// hold; more are refused.
    pub max_sessions_per_address: usize,
    /// Connections still authenticating, all clients together; more are
    /// closed at once.
    pub max_handshakes: usize,
    /// Of those, from one client address at most (beyond the data
    /// connections its sessions may open); more are closed at once.
    pub max_handshakes_per_address: usize,
    /// Time a new connection has to authenticate: a control connection to
    /// have its session request validated (TLS, hello, token, request), a
    /// data connection to join its session.
    pub handshake_timeout: Duration,
    /// Time an accepted session's data streams have to join.
    pub join_timeout: Duration,
    /// On shutdown, how long running sessions may go on.
    pub grace: Duration,
    /// Fail a connection whose peer stays silent this long.
    pub io_timeout: Duration,
    /// Stream-count changes at fixed times when this end sends, instead of
    /// the controller's (tests and experiments).
    pub stream_script: Vec<(Duration, tern_drs::StreamChange)>,
    /// Site mode: client certificates and an authorization file. `None`:
    /// every client may read and write the whole root.
    pub site: Option<SiteAuth>,
    /// Told about every completed session (the advisor's discovery feed).
    pub on_session_done: Option<SessionHook>,
    /// Keeps the running sessions and counts of all (a live view, metrics).
    pub live: Option<Arc<LiveSessions>>,
    /// Apply set-user-ID, set-group-ID and sticky bits that clients send
    /// (`--allow-special-bits`), and send those of served files; without
    /// it they are dropped both ways.
    pub allow_special_bits: bool,
    /// Which of its addresses the daemon names to clients for their data
    /// connections (multi-path).
    pub advertise: Advertise,
}

/// What a site daemon demands of its clients.
#[derive(Debug, Clone)]
pub struct SiteAuth {
    /// CAs whose client certificates are accepted (`--client-ca`).
    pub client_roots: Arc<rustls::RootCertStore>,
    /// Who may read and write where (`--authz`).
    pub authz: Arc<Authz>,
}

/// What the client of one control connection may do.
#[derive(Debug)]
enum Authorization {
    /// No site mode: the whole root.
    Open,
    /// Only within these grants.
    Granted(Grants),
    /// Nothing; the subject, for the refusal.
    Denied(String),
}

impl ServerOptions {
    /// Defaults for a root.
    pub fn new(root: PathBuf) -> ServerOptions {
        ServerOptions {
            root,
            max_sessions: 64,
            max_sessions_per_address: DEFAULT_MAX_SESSIONS_PER_ADDRESS,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            max_handshakes_per_address: DEFAULT_MAX_HANDSHAKES_PER_ADDRESS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            join_timeout: DEFAULT_JOIN_TIMEOUT,
            grace: Duration::from_secs(10),
            io_timeout: crate::conn::net::DEFAULT_IO_TIMEOUT,
            stream_script: Vec::new(),
            site: None,
            on_session_done: None,
            live: None,
            allow_special_bits: false,
            advertise: Advertise::default(),
        }
    }
}

/// What every connection of a server shares.
pub(crate) struct Context {
    root: Root,
    /// Each accepted connection's is this with its own key log.
    tls_config: Arc<rustls::ServerConfig>,
    pub(crate) opts: ServerOptions,
    /// Sessions waiting for their data connections, by token.
    pending: Mutex<HashMap<Token, mpsc::Sender<Joining>>>,
    /// Caps concurrent sessions.
    sessions: Semaphore,
    /// Handshake slots and sessions per address.
    limiter: Limiter,
    /// Set for `tern serve --once`: its one-time token and one session.
    once: Option<Arc<Gate>>,
    /// The address the daemon listens on, once it does.
    pub(crate) bound: std::sync::OnceLock<SocketAddr>,
    /// This daemon's certificate fingerprint.
    fingerprint: String,
    /// Its certificate, to present when it dials another daemon.
    dial_cert: crate::conn::tls::ClientCert,
    /// The third-party copies it takes part in.
    tpc: Tpc,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("root", &self.root)
            .field("once", &self.once.is_some())
            .finish_non_exhaustive()
    }
}

impl Context {
    pub(crate) fn new(
        root: Root,
        identity: &ServerIdentity,
        opts: ServerOptions,
        once: Option<Arc<Gate>>,
    ) -> Result<Arc<Context>> {
        let limiter = Limiter::new(limits::Caps {
            handshakes: opts.max_handshakes,
            handshakes_per_address: opts.max_handshakes_per_address,
            sessions_per_address: opts.max_sessions_per_address,
            entitled_per_address: limits::ENTITLED_PER_ADDRESS,
            handshake_timeout: opts.handshake_timeout,
        });
        if let Some(live) = &opts.live {
            live.watch_limits(limiter.clone());
        }
        Ok(Arc::new(Context {
            root,
            tls_config: identity
                .server_config(opts.site.as_ref().map(|s| s.client_roots.clone()))?,
            sessions: Semaphore::new(opts.max_sessions),
            limiter,
            pending: Mutex::new(HashMap::new()),
            opts,
            once,
            bound: std::sync::OnceLock::new(),
            fingerprint: identity.fingerprint.clone(),
            dial_cert: identity.as_client(),
            tpc: Tpc::default(),
        }))
    }

    /// A path the client named: under the root for the daemon; as with scp
    /// (from the home directory, or absolute) for a once server.
    fn place(&self, path: &str) -> Result<PathBuf> {
        match &self.once {
            Some(_) => Ok(crate::conn::gate::scp_path(&self.opts.root, path)),
            None => checked_relative(path, true),
        }
    }
}

/// Serves until `shutdown` completes, then drains sessions.
pub async fn serve(
    listener: TcpListener,
    identity: &ServerIdentity,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    Daemon::new(identity, opts)?.run(listener, shutdown).await
}

/// A daemon ready to serve; what it refused can be read while it runs
/// (clones share one daemon).
#[derive(Debug, Clone)]
pub struct Daemon {
    ctx: Arc<Context>,
}

impl Daemon {
    /// A daemon of `identity` serving `opts.root`.
    pub fn new(identity: &ServerIdentity, opts: ServerOptions) -> Result<Daemon> {
        let ctx = Context::new(Root::confined(&opts.root)?, identity, opts, None)?;
        Ok(Daemon { ctx })
    }

    /// Connections refused or ended by each limit so far.
    pub fn refusals(&self) -> Refusals {
        self.ctx.limiter.refusals()
    }

    /// Serves until `shutdown` completes, then drains sessions.
    pub async fn run(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<()> {
        run_daemon(self.ctx.clone(), listener, shutdown).await
    }
}

async fn run_daemon(
    ctx: Arc<Context>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let mut tasks = JoinSet::new();
    if let Ok(bound) = listener.local_addr() {
        let _ = ctx.bound.set(bound);
    }
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                // Admitted here, in the order of arrival and before a task
                // is spent on it: a refused connection is closed at once.
                Ok((conn, peer)) => if let Some(handshake) = ctx.limiter.admit(peer) {
                    let ctx = ctx.clone();
                    tasks.spawn(serve_connection(ctx, conn, peer, handshake));
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    let running = tasks.len();
    if running > 0 {
        tracing::info!(
            "shutting down: waiting up to {:?} for {running} connection(s)",
            ctx.opts.grace
        );
    }
    let drained = tokio::time::timeout(ctx.opts.grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("shutting down: aborting {} connection(s)", tasks.len());
        tasks.shutdown().await;
    }
    Ok(())
}

/// A TLS connection as the daemon accepts it.
type ServerTls = tokio_rustls::server::TlsStream<Aligned<TcpStream>>;

/// Serves one connection of any kind (§2.1 of the protocol), if the limits
/// let it in.
pub(crate) async fn handle_connection(ctx: Arc<Context>, conn: TcpStream, peer: SocketAddr) {
    if let Some(handshake) = ctx.limiter.admit(peer) {
        serve_connection(ctx, conn, peer, handshake).await;
    }
}

/// Serves one connection that holds a handshake slot.
async fn serve_connection(
    ctx: Arc<Context>,
    conn: TcpStream,
    peer: SocketAddr,
    handshake: Handshake,
) {
    crate::conn::net::prepare(&conn, ctx.opts.io_timeout);
    let probe = {
        use std::os::fd::AsFd;
        conn.as_fd().try_clone_to_owned().ok()
    };
    // One deadline for the whole handshake, so that a peer dribbling bytes
    // cannot stretch it step by step.
    let handshaking = Handshaking {
        peer,
        local: conn.local_addr().ok(),
        handshake,
        deadline: tokio::time::Instant::now() + ctx.opts.handshake_timeout,
    };
    let mut first = [0u8; 4];
    match handshaking.in_time(peek_exact(&conn, &mut first)).await {
        Some(Ok(())) => {}
        Some(Err(e)) => return tracing::debug!("{peer}: closed before saying anything: {e}"),
        None => return,
    }
    if first[0] == 0x16 {
        let _ = conn.set_nodelay(true);
        // Read a record at a time, so that a data connection can be taken
        // over by tern's record layer once it has said JOIN.
        let capture = SecretCapture::default();
        let acceptor = TlsAcceptor::from(records::capturing_server(&ctx.tls_config, &capture));
        let mut tls = match handshaking
            .in_time(acceptor.accept(Aligned::new(conn)))
            .await
        {
            Some(Ok(tls)) => tls,
            Some(Err(e)) => return tracing::warn!("{peer}: TLS handshake failed: {e}"),
            None => return,
        };
        let mut magic = [0u8; 4];
        match handshaking.in_time(tls.read_exact(&mut magic)).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => return tracing::debug!("{peer}: closed after the TLS handshake: {e}"),
            None => return,
        }
        if magic == HELLO_MAGIC {
            drop(capture.take());
            tls.get_mut().0.unalign();
            let key = export_key_fn(&tls);
            let authorization = authorize(&ctx, &tls, peer);
            let facts = ConnFacts::of(&tls);
            let conn = Conn {
                key,
                authorization,
                facts,
            };
            return control_session(ctx, Box::new(tls), conn, handshaking).await;
        }
        if magic == JOIN_MAGIC {
            // Its session tickets sent, so that rustls holds nothing.
            match handshaking.in_time(tls.flush()).await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    return tracing::debug!("{peer}: closed after the TLS handshake: {e}");
                }
                None => return,
            }
            let (io, conn) = tls.into_inner();
            let records = match records::take_over(io, conn.into(), &capture, DATA_READ_BUFFER) {
                Ok(records) => records,
                Err(e) => return tracing::warn!("{peer}: data connection: {e}"),
            };
            return data_join(ctx, Box::new(records), probe, magic, true, handshaking).await;
        }
        return tracing::warn!(
            "{peer}: dropped, not a tern client (first bytes inside TLS {magic:02x?})"
        );
    }
    if first == JOIN_MAGIC {
        return data_join(ctx, Box::new(conn), probe, [0; 4], false, handshaking).await;
    }
    tracing::warn!("{peer}: dropped, not a tern client (first bytes {first:02x?})");
}

/// What the TLS handshake established about a control connection.
struct Conn {
    key: KeyExporter,
    authorization: Authorization,
    facts: ConnFacts,
}

async fn control_session(
    ctx: Arc<Context>,
    stream: BoxStream,
    conn: Conn,
    handshaking: Handshaking,
) {
    let peer = handshaking.peer;
    match run_control(&ctx, stream, conn, handshaking).await {
        Ok(()) => {}
        Err(e) => tracing::warn!("{peer}: session failed: {e}"),
    }
}

/// A session request read within the handshake deadline.
struct Requested<'a> {
    control: Control,
    opening: ServerOpen,
    /// A session, or a client's third-party copy.
    request: Result<SessionRequest, (TpcRole, SignedDelegation)>,
    /// A once server's one session, claimed by this connection.
    claim: Option<Claim<'a>>,
    /// The third-party copy whose other end opens this session, and this
    /// daemon's end of it.
    delegated: Option<([u8; 16], TpcRole)>,
    /// When that end pushes into this one: the names the delegation lets
    /// it announce (its sources'), and nothing else.
    pushed: Option<crate::store::expect::Requested>,
}

/// Exchanges hellos and reads the session request (and a once server's
/// token) within the handshake deadline; `None` when it ran out.
async fn read_request<'a>(
    ctx: &'a Context,
    mut stream: BoxStream,
    handshaking: &Handshaking,
    shown_cert: Option<&str>,
) -> Result<Option<Requested<'a>>> {
    let mut rest = [0u8; HELLO_LEN - 4];
    let Some(read) = handshaking.in_time(stream.read_exact(&mut rest)).await else {
        return Ok(None);
    };
    read.map_err(|e| Error::PeerGone(e.to_string()))?;
    let mut hello = [0u8; HELLO_LEN];
    hello[..4].copy_from_slice(&HELLO_MAGIC);
    hello[4..].copy_from_slice(&rest);
    let theirs = Hello::decode(&hello)?;
    let ours = Hello {
        features: crate::data::transfer::offered_features(),
        ..Hello::ours()
    };
    stream
        .write_all(&ours.encode())
        .await
        .map_err(|e| Error::PeerGone(e.to_string()))?;
    let negotiated = ours
        .negotiate(&theirs)
        .map_err(|e| Error::Protocol(e.to_string()))?;
    let mut control = Control::new(stream);
    let policy = ServerPolicy {
        congestion: congestion_policy(),
        once_token: ctx.once.as_ref().map(|gate| gate.token()),
    };
    // A once server's refusals of a token wait for the client to read them.
    let linger = match &ctx.once {
        Some(_) => Linger::For(Duration::from_secs(2)),
        None => Linger::No,
    };
    let mut opening = match ServerOpen::new(negotiated, policy) {
        Ok(opening) => opening,
        Err(e) => return Err(open::refuse(&mut control, e.into(), linger).await),
    };
    let mut claim = None;
    let mut delegated = None;
    let mut pushed = None;
    loop {
        let deadline = Some(handshaking.deadline);
        match open::expect(&mut control, &mut opening, deadline, linger).await? {
            Step::Expired => {
                handshaking.handshake.timed_out();
                return Ok(None);
            }
            Step::Event(ServerEvent::TokenPresented) => {
                let gate = ctx
                    .once
                    .as_ref()
                    .expect("only once servers ask for a token");
                match gate.claim() {
                    Some(c) => claim = Some(c),
                    None => {
                        let e =
                            Error::Unauthorized("this server has served its one session".into());
                        return Err(open::refuse(&mut control, e, linger).await);
                    }
                }
            }
            Step::Event(ServerEvent::Tpc(role, signed)) => {
                return Ok(Some(Requested {
                    control,
                    opening,
                    request: Err((role, *signed)),
                    claim,
                    delegated,
                    pushed,
                }));
            }
            Step::Event(ServerEvent::PeerPresented(pass)) => {
                match ctx.tpc.present(&pass, shown_cert) {
                    Ok((role, d)) => {
                        delegated = Some((d.nonce, role));
                        if role == TpcRole::Dest {
                            let sources = d.sources.iter().map(|s| s.as_bytes());
                            let names = crate::store::expect::Requested::new(sources, d.recursive);
                            pushed = Some(names);
                        }
                        opening.delegated(role, d);
                    }
                    Err(r) => {
                        tracing::warn!("{}: third-party session refused: {r}", handshaking.peer);
                        // The dialer has sent its whole opening: read it, so
                        // the refusal is not lost to a reset.
                        let e = Error::Unauthorized(r.to_string());
                        let drain = Linger::For(Duration::from_secs(2));
                        return Err(open::refuse(&mut control, e, drain).await);
                    }
                }
            }
            Step::Event(ServerEvent::Request(request)) => {
                return Ok(Some(Requested {
                    control,
                    opening,
                    request: Ok(*request),
                    claim,
                    delegated,
                    pushed,
                }));
            }
        }
    }
}

async fn run_control(
    ctx: &Context,
    stream: BoxStream,
    conn: Conn,
    handshaking: Handshaking,
) -> Result<()> {
    let Conn {
        key,
        authorization,
        facts,
    } = conn;
    let authorization = &authorization;
    // Until the session request is validated, every step must end before
    // the handshake deadline; a step that does not ends the connection,
    // counted and reported (rate-limited) by the limiter, so `Ok(())`.
    let peer = handshaking.peer;
    let Some(Requested {
        mut control,
        mut opening,
        request,
        claim,
        delegated,
        pushed,
    }) = read_request(ctx, stream, &handshaking, facts.client.as_deref()).await?
    else {
        return Ok(());
    };
    let request = match request {
        Ok(request) => request,
        Err((role, signed)) => {
            let tpc = (role, signed);
            let opened = (control, opening);
            let (facts, claim) = (&facts, claim);
            return tpc::serve_control(ctx, opened, tpc, authorization, facts, handshaking, claim)
                .await;
        }
    };
    let max_streams = request.tuning.max_streams;
    // A third-party copy's end serves what it prepared under the client's
    // grants; any other session, what this client may.
    let prepared = match delegated {
        Some((nonce, role)) => ctx.tpc.take(&nonce, role),
        None => prepare_role(ctx, &request.open, authorization),
    };
    let role = match prepared {
        Ok(role) => role.receiving_only(pushed),
        Err(e) => return Err(open::refuse(&mut control, e, Linger::No).await),
    };
    // Authenticated: from here the session counts against its address's
    // share and the session limit, no longer against the handshake pool.
    let Ok(_session_slot) = handshaking.handshake.authenticate(max_streams) else {
        opening.refuse_with(
            tern_proto::ErrorCode::Aborted,
            format!(
                "the server refused the session: {} already holds {} sessions, the most \
                 one address may; try again when one has ended",
                peer.ip().to_canonical(),
                ctx.opts.max_sessions_per_address
            ),
        );
        let _ = open::flush(&mut control, &mut opening).await;
        return Ok(());
    };
    let _permit = ctx.sessions.acquire().await;
    let token: Token = rand::random();
    let (tx, rx) = mpsc::channel(usize::from(max_streams));
    ctx.pending.lock().expect("pending").insert(token, tx);
    let paths = handshaking.local.map_or_else(Vec::new, |local| {
        ctx.opts
            .advertise
            .for_client(ctx.bound.get().copied(), local)
    });
    opening.accept(&request, token, &paths);
    let accepted = open::flush(&mut control, &mut opening).await;
    let open = &request.open;
    let want = Admission {
        tls: open.protect == Protect::Private,
        version: request.version,
        protect: open.protect,
    };
    if let Err(e) = accepted {
        ctx.pending.lock().expect("pending").remove(&token);
        return Err(e);
    }
    let block_check = match open.protect {
        Protect::Safe => match key(&token) {
            Some(k) => BlockCheck::KeyedBlake3(k),
            None => {
                ctx.pending.lock().expect("pending").remove(&token);
                let e = Error::Tls("cannot export keying material".into());
                return Err(open::refuse(&mut control, e, Linger::No).await);
            }
        },
        Protect::Private if request.features.contains(tern_proto::Features::AEAD_CHECKS) => {
            BlockCheck::Aead
        }
        Protect::Clear | Protect::Private => BlockCheck::Xxh3,
    };
    let mut params = params_of(&request, block_check);
    params.tuning.other_paths = paths.len() as u16;
    let started = Instant::now();
    let sent = matches!(role, Role::Send(..));
    let progress = Arc::new(Progress::per_stream(max_streams));
    let live = ctx.opts.live.as_ref().map(|l| {
        let tpc = delegated.map(|(_, role)| LiveTpc::of(role, false));
        l.begin(
            peer,
            (sent, tpc),
            Vec::new(),
            LiveTuning::of(&params),
            progress.clone(),
        )
    });
    // The session starts while its streams join: a receiver answers the
    // announcements meanwhile, a sender announces (PROTOCOL.md §8.2).
    let (first, more_rx, late_joins) = admit_streams(
        rx,
        want,
        (open.streams, vec![false; usize::from(max_streams)]),
        ctx.opts.join_timeout,
        live.as_ref().map(LiveGuard::watcher),
    );
    let supply = if max_streams > open.streams {
        StreamSupply::Accept(more_rx)
    } else {
        StreamSupply::Fixed
    };
    let first = match role {
        // A timed perf run's clock starts with its streams.
        Role::Send(_, Some(_)) => match FirstStreams::Joining(first).all().await {
            Ok(streams) => FirstStreams::Joined(streams),
            Err(e) => {
                ctx.pending.lock().expect("pending").remove(&token);
                late_joins.abort();
                let drain = Linger::For(Duration::from_secs(2));
                return Err(open::refuse(&mut control, e, drain).await);
            }
        },
        _ => FirstStreams::Joining(first),
    };
    let session = run_role(ctx, role, control, first, supply, params, progress);
    // A third-party copy's session stops when its client leaves this end.
    let stop = delegated.and_then(|(nonce, role)| ctx.tpc.stop_of(&nonce, role));
    let result = match stop {
        Some(mut stop) => tokio::select! {
            r = session => r,
            // Stopped, not merely dropped (the end the client closed
            // politely drops its sender and lets the session finish).
            Ok(_) = stop.wait_for(|stopped| *stopped) => {
                Err(Error::PeerGone("the client gave the copy up".into()))
            }
        },
        None => session.await,
    };
    ctx.pending.lock().expect("pending").remove(&token);
    late_joins.abort();
    let stats = result?;
    if let Some(live) = live {
        live.completed(&stats);
    }
    if let Some(claim) = claim {
        claim.succeeded();
    }
    tracing::info!(
        "{peer}: session done: {} bytes, {} files, {} streams, {:.2?}",
        stats.bytes,
        stats.files.len(),
        stats.streams_used,
        started.elapsed()
    );
    if let Some(hook) = &ctx.opts.on_session_done {
        hook.call(&SessionDone {
            peer,
            sent,
            stats: &stats,
        });
    }
    Ok(())
}

/// The congestion controls this daemon may grant, found once per process.
fn congestion_policy() -> CongestionPolicy {
    let usable = tern_drs::host::usable_congestion();
    CongestionPolicy {
        preferred: usable.preferred.clone(),
        usable: usable.usable.clone(),
    }
}

/// The data sockets' tuning for an agreed request: the client's window and
/// congestion control, or this end's defaults for a client that asked
/// nothing.
fn tuning_of(request: &SessionRequest) -> Tuning {
    let agreed = &request.tuning;
    let Some(window) = agreed.window else {
        return Tuning::default();
    };
    Tuning {
        window: match window {
            tern_proto::Window::Auto => WindowMode::Auto,
            tern_proto::Window::Kernel => WindowMode::Kernel,
            tern_proto::Window::Fixed(n) => WindowMode::Fixed(u64::from(n)),
        },
        congestion: agreed.congestion.clone(),
        auto_streams: agreed.max_streams > request.open.streams,
        streams_from_rtt: false,
        script: Vec::new(),
        // What the client knows of the path does not travel (yet): a pull
        // ramps from the usual start.
        known_rate_bps: None,
        streams_settled: false,
        other_paths: 0,
        // Reservations do not travel either: on a pull the client holds a
        // reserved path to its rate with its locked receive window.
        reserved: Vec::new(),
        stream_limit: None,
    }
}
