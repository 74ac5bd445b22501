//! The client side: connect to a daemon, check its identity, open a session
//! and its data streams, then run the engine as sender or receiver.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_proto::hello::{HELLO_LEN, Negotiated};
use tern_proto::{ChecksumAlg, FileMeta, Hello, Protect, SessionMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use crate::conn::open::{self, Linger, Step};
use crate::conn::paths::{self, PathChoice, PathPlan, PathReport};
use crate::conn::route::Route;
pub use crate::conn::route::{Callback, Endpoint, Reach};
pub use crate::conn::tls::{BLOCK_MAC_LABEL, ClientCert, PinVerifier, bind_token, server_name};
pub use crate::conn::trust::Trust;
use crate::data::transfer::{self, BoxStream, Control, Progress, TransferParams, TransferStats};
use crate::data::tuning::{Connector, DEFAULT_MAX_STREAMS, PathWatch, StreamSupply, Tuning};
use crate::data::{FirstStreams, PendingJoins};
use crate::store::fsio::{DiscardSink, FsSink, FsSource, GenSource, Root};
use crate::{Error, Result, StreamWrap};
use tern_session::Choices;

mod join;
mod plan;
use join::{Dialer, EarlyStreams, Joiner};
use plan::{block_check_of, dials_early, first_streams, params_of, path_plan, request_of};
use tern_session::open::ClientOpen;

/// How the client connects and what it asks for.
#[derive(Clone)]
pub struct ClientOptions {
    /// Data streams to start with.
    pub streams: u16,
    /// Data streams the session may grow to (the controller decides when
    /// `tuning.auto_streams`).
    pub max_streams: u16,
    /// Buffer sizing, congestion control, stream-count control.
    pub tuning: Tuning,
    /// Move payload no faster than this many bits per second (this end
    /// paces its sends, or its reads when receiving).
    pub rate_limit: Option<u64>,
    /// Block size.
    pub block_size: u32,
    /// Whole-file digest.
    pub checksum: ChecksumAlg,
    /// Data protection.
    pub protect: Protect,
    /// How the daemon is recognised.
    pub trust: Trust,
    /// Certificate presented to a daemon that asks for one (`--cert`).
    pub client_cert: Option<ClientCert>,
    /// Wraps each data stream (fault injection in tests).
    pub wrap: Option<StreamWrap>,
    /// Give up connecting after this long.
    pub connect_timeout: Duration,
    /// Fail a connection whose peer stays silent this long.
    pub io_timeout: Duration,
    /// The one-time token of a `tern serve --once` started through ssh,
    /// presented before the session opens.
    pub once_token: Option<tern_proto::Token>,
    /// A third-party copy's dialing daemon: the delegation and ticket
    /// presented before the session opens (`PeerOpen`).
    pub peer_pass: Option<tern_session::open::PeerPass>,
    /// Dial the daemon, or take the connections it dials back here.
    pub reach: Reach,
    /// Compression, skipping files the destination has, stall timeout.
    pub choices: Choices,
    /// Which paths to the daemon data streams may take.
    pub paths: PathChoice,
    /// Dial every connection as MPTCP (the kernel's path manager then
    /// spreads each over the paths it knows).
    pub mptcp: bool,
    /// The daemon's `Hello` as an earlier session saw it: the session's
    /// opening then goes with this end's `Hello`, a round trip sooner
    /// (opened again the usual way if the daemon's hello has changed).
    pub daemon_hello: Option<Hello>,
}

impl ClientOptions {
    /// Defaults that suit a test or a first try: 4 streams (growing to
    /// [`DEFAULT_MAX_STREAMS`] as the path needs), 4 MiB blocks, BLAKE3
    /// digests, `private` protection, dialling out, and the transfer
    /// choices' defaults; the daemon recognised by `trust`.
    pub fn new(trust: Trust) -> ClientOptions {
        ClientOptions {
            streams: 4,
            max_streams: DEFAULT_MAX_STREAMS,
            tuning: Tuning::default(),
            rate_limit: None,
            block_size: 4 << 20,
            checksum: ChecksumAlg::Blake3,
            protect: Protect::Private,
            trust,
            client_cert: None,
            wrap: None,
            connect_timeout: Duration::from_secs(15),
            io_timeout: crate::conn::net::DEFAULT_IO_TIMEOUT,
            once_token: None,
            peer_pass: None,
            reach: Reach::Dial,
            choices: Choices::default(),
            paths: PathChoice::default(),
            mptcp: false,
            daemon_hello: None,
        }
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("streams", &self.streams)
            .field("max_streams", &self.max_streams)
            .field("tuning", &self.tuning)
            .field("block_size", &self.block_size)
            .field("checksum", &self.checksum)
            .field("protect", &self.protect)
            .field("trust", &self.trust)
            .field("reach", &self.reach)
            .field("choices", &self.choices)
            .field("daemon_hello", &self.daemon_hello)
            .finish_non_exhaustive()
    }
}

/// What a client-side transfer did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The engine's numbers.
    pub stats: TransferStats,
    /// The server's fingerprint.
    pub fingerprint: String,
    /// Set when the server was seen for the first time and recorded.
    pub recorded: Option<PathBuf>,
    /// From starting to connect until every data stream had joined.
    pub setup: Duration,
    /// Streams used (the most at any time).
    pub streams: u16,
    /// Each path's share, when the session had more than one.
    pub paths: Vec<PathReport>,
    /// With `--mptcp`: whether the connections were MPTCP (the daemon took
    /// it) or fell back to plain TCP.
    pub mptcp: Option<bool>,
    /// The control connection's address at this end.
    pub local: Option<SocketAddr>,
    /// The daemon's address the control connection reached.
    pub peer: Option<SocketAddr>,
    /// The daemon's `Hello`, for [`ClientOptions::daemon_hello`] next time
    /// (none for a copy without one).
    pub daemon_hello: Option<Hello>,
    /// The session's opening went with the client's `Hello`.
    pub opened_early: bool,
}

struct Opened {
    /// The control connection's two ends: this one, the daemon's.
    ends: (Option<SocketAddr>, Option<SocketAddr>),
    plan: Option<Arc<PathPlan>>,
    control: Control,
    /// Still joining: a sender announces its files meanwhile.
    streams: FirstStreams,
    supply: StreamSupply,
    params: TransferParams,
    fingerprint: String,
    recorded: Option<PathBuf>,
    setup: Setup,
    mptcp: bool,
    mptcp_asked: bool,
    daemon_hello: Hello,
    opened_early: bool,
}

/// When a session's setup began, and when its first data streams had all
/// joined (they join in the background, see [`FirstStreams`]).
struct Setup {
    started: Instant,
    all_joined: Arc<std::sync::OnceLock<Instant>>,
}

impl Setup {
    /// From starting to connect until every first data stream had joined
    /// (until now, for a session that ended before they had).
    fn elapsed(&self) -> Duration {
        match self.all_joined.get() {
            Some(joined) => joined.saturating_duration_since(self.started),
            None => self.started.elapsed(),
        }
    }
}

/// The control connection, verified and past the hello exchange.
pub(crate) struct Connected {
    pub(crate) stream: BoxStream,
    /// The daemon's `Hello`.
    theirs: Hello,
    /// Whether an early opening went with the client's `Hello`.
    early: Early,
    /// Data connections dialled while that opening is answered.
    early_streams: Option<EarlyStreams>,
    /// How data connections reach the daemon.
    dialer: Dialer,
    /// The TCP socket under it, for an RTT sample.
    pub(crate) control_fd: std::os::fd::RawFd,
    /// Where the session's data connections come from.
    route: Route,
    /// The daemon's address the control connection reached.
    pub(crate) peer: Option<SocketAddr>,
    /// This end's address of the control connection.
    pub(crate) local: Option<SocketAddr>,
    pub(crate) negotiated: Negotiated,
    pub(crate) fingerprint: String,
    recorded: Option<PathBuf>,
    /// Keying material for `safe` block MACs, when TLS could export it.
    material: Option<[u8; 32]>,
    /// The connection's third-party-copy binding, when TLS could export it.
    pub(crate) binding: Option<[u8; 32]>,
    /// The control connection is MPTCP.
    mptcp: bool,
}

/// Connects to the daemon, checks that it is the one `opts.trust` names,
/// and exchanges hellos.
pub(crate) async fn connect(ep: &Endpoint, opts: &ClientOptions) -> Result<Connected> {
    connect_with(ep, opts, None).await
}

/// [`connect`], sending `early`'s opening behind the client's `Hello`.
async fn connect_with(
    ep: &Endpoint,
    opts: &ClientOptions,
    early: Option<&mut EarlyOpen<'_>>,
) -> Result<Connected> {
    let host_port = ep.host_port();
    let expected = opts.trust.expect(&host_port)?;
    let verifier = PinVerifier::for_trust(&expected.verify)?;
    let connector = TlsConnector::from(verifier.client_config(opts.client_cert.as_ref())?);
    let route = Route::new(ep, &opts.reach);
    let tcp = route
        .connect(opts.connect_timeout, opts.io_timeout, opts.mptcp)
        .await?;
    let mptcp = opts.mptcp && crate::conn::net::mptcp_subflows(&tcp).is_some();
    if opts.mptcp && !mptcp {
        tracing::warn!(
            "{host_port} answered in plain TCP, not MPTCP: start the daemon with `tern serve --mptcp`"
        );
    }
    let control_fd = std::os::fd::AsRawFd::as_raw_fd(&tcp);
    let peer = tcp.peer_addr().ok();
    let local = tcp.local_addr().ok();
    let route = route.for_data(&tcp);
    let _ = tcp.set_nodelay(true);
    let tls = connector
        .connect(server_name(&ep.host), tcp)
        .await
        .map_err(|e| {
            let seen = verifier.seen();
            let mismatch = seen.and_then(|seen| expected.mismatch(&host_port, &seen));
            mismatch.unwrap_or_else(|| tls_failure(&host_port, &e))
        })?;
    let fingerprint = verifier
        .seen()
        .ok_or_else(|| Error::Tls("no server certificate".into()))?;
    let recorded = expected.record_first_use(&opts.trust, &host_port, &fingerprint)?;
    let mut material = [0u8; 32];
    let exported = tls
        .get_ref()
        .1
        .export_keying_material(&mut material, BLOCK_MAC_LABEL, None)
        .is_ok();
    let mut binding = [0u8; 32];
    let bound = tls
        .get_ref()
        .1
        .export_keying_material(&mut binding, tern_proto::delegation::BINDING_LABEL, None)
        .is_ok();
    let mut stream: BoxStream = Box::new(tls);
    let ours = Hello {
        features: crate::data::transfer::offered_features(),
        ..Hello::ours()
    };
    let mut first = ours.encode().to_vec();
    let (assumed, early_streams) = match early {
        Some(e) => (e.queue(&ours, control_fd, &mut first), e.streams),
        None => (None, None),
    };
    // One write: the hello and an early opening leave in one flight.
    stream.write_all(&first).await.map_err(gone)?;
    stream.flush().await.map_err(gone)?;
    let dialer = Dialer {
        ep: ep.clone(),
        route: route.clone(),
        connect_timeout: opts.connect_timeout,
        io_timeout: opts.io_timeout,
        protect: opts.protect,
        fingerprint: fingerprint.clone(),
        client_cert: opts.client_cert.clone(),
        mptcp: opts.mptcp,
    };
    let early_streams = match (assumed, early_streams) {
        (Some(_), Some(n)) if dials_early(opts, control_fd) => {
            Some(EarlyStreams::start(&dialer, n))
        }
        _ => None,
    };
    let mut theirs = [0u8; HELLO_LEN];
    // Under TLS 1.3 the server judges our certificate after our side of
    // the handshake is done: its refusal arrives as the first read.
    stream
        .read_exact(&mut theirs)
        .await
        .map_err(|e| match crate::conn::tls::explain(&e) {
            Some(_) => tls_failure(&host_port, &e),
            None => gone(e),
        })?;
    let theirs = Hello::decode(&theirs)?;
    let negotiated = ours
        .negotiate(&theirs)
        .map_err(|e| Error::Protocol(e.to_string()))?;
    let early = match assumed {
        None => Early::NotSent,
        Some(assumed) if assumed == negotiated => Early::Sent,
        Some(_) => Early::Mismatch,
    };
    Ok(Connected {
        stream,
        theirs,
        early,
        early_streams: early_streams.filter(|_| early == Early::Sent),
        dialer,
        control_fd,
        route,
        peer,
        local,
        negotiated,
        fingerprint,
        recorded,
        material: exported.then_some(material),
        binding: bound.then_some(binding),
        mptcp,
    })
}

/// A session's opening sent behind the client's `Hello`, before the
/// daemon's has come: the one the daemon's hello as last seen
/// (`ClientOptions::daemon_hello`) makes. A round trip less on every copy
/// to a daemon seen before; when the daemon's hello has changed, the
/// connection is dropped and the session opened again the usual way.
struct EarlyOpen<'a> {
    expected: Hello,
    opts: &'a ClientOptions,
    mode: SessionMode,
    /// The opening, its first messages sent.
    queued: Option<ClientOpen>,
    /// The streams it asks for.
    streams: Option<u16>,
}

impl EarlyOpen<'_> {
    /// Appends the opening's first messages to `first` (our `Hello`) and
    /// gives the negotiation they were written for; none when the
    /// expected hello does not make one.
    fn queue(
        &mut self,
        ours: &Hello,
        control_fd: std::os::fd::RawFd,
        first: &mut Vec<u8>,
    ) -> Option<Negotiated> {
        let assumed = ours.negotiate(&self.expected).ok()?;
        let streams = first_streams(self.opts, control_fd);
        let request = request_of(self.opts, self.mode.clone(), streams);
        let mut opening = ClientOpen::new(request, assumed).ok()?;
        while let Some(msg) = opening.poll_transmit() {
            first.extend_from_slice(&tern_proto::encode_control(&msg));
        }
        self.queued = Some(opening);
        self.streams = Some(streams);
        Some(assumed)
    }
}

/// Whether the session's opening went with the client's `Hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Early {
    NotSent,
    /// Sent, and the daemon's hello is the one it was written for.
    Sent,
    /// Sent for a hello the daemon no longer gives.
    Mismatch,
}

async fn open(ep: &Endpoint, opts: &ClientOptions, mode: SessionMode) -> Result<Opened> {
    let started = Instant::now();
    // Not with a one-time token or a delegation: a connection dropped for
    // a changed hello would have spent them.
    let may_open_early = opts.once_token.is_none() && opts.peer_pass.is_none();
    let mut early = opts
        .daemon_hello
        .filter(|_| may_open_early)
        .map(|expected| EarlyOpen {
            expected,
            opts,
            mode: mode.clone(),
            queued: None,
            streams: None,
        });
    let mut connected = connect_with(ep, opts, early.as_mut()).await?;
    if connected.early == Early::Mismatch {
        // The daemon read the early opening under other features than it
        // was written for: start over the usual way.
        tracing::info!(
            "{}: the daemon's hello is not the last session's; opening again",
            ep.host_port()
        );
        connected = connect(ep, opts).await?;
    }
    let opened_early = connected.early == Early::Sent;
    let Connected {
        stream,
        theirs,
        early_streams,
        dialer,
        control_fd,
        route,
        peer,
        local,
        negotiated,
        fingerprint,
        recorded,
        material,
        mptcp,
        ..
    } = connected;
    let mut control = Control::new(stream);
    let mut opening = match early.and_then(|e| e.queued).filter(|_| opened_early) {
        Some(opening) => opening,
        None => {
            let streams = first_streams(opts, control_fd);
            ClientOpen::new(request_of(opts, mode, streams), negotiated)?
        }
    };
    // The server may hold a valid request until a session slot is free:
    // the client waits as long as it takes.
    let agreed = match open::expect(&mut control, &mut opening, None, Linger::No).await? {
        Step::Event(agreed) => agreed,
        Step::Expired => unreachable!("no deadline was set"),
    };
    let max_streams = agreed.max_streams;
    let accept_streams = agreed.streams;
    let plan = path_plan(opts, &route, (local, peer), &agreed);
    // A session the daemon held (busy) may have outlived them.
    let early_streams = early_streams.filter(|e| {
        if !e.fresh() {
            tracing::debug!(
                "the session was accepted late: its early data connections are dialled again"
            );
        }
        e.fresh()
    });
    if let Some(early) = &early_streams {
        early.keep(accept_streams);
    }
    let joiner = Arc::new(Joiner {
        plan: plan.clone(),
        dialer,
        token: agreed.token,
        version: agreed.version,
        max_streams,
        wrap: opts.wrap.clone(),
        early: early_streams,
    });
    let joins = PendingJoins::new((0..accept_streams).map(|k| joiner.clone().join(k)));
    let setup = Setup {
        started,
        all_joined: joins.all_joined(),
    };
    let streams = FirstStreams::Joining(joins);
    let supply = if max_streams > accept_streams {
        let connector: Connector = Arc::new(move |k| Box::pin(joiner.clone().join(k)));
        let watch = plan.clone().map(|p| p as Arc<dyn PathWatch>);
        StreamSupply::Connect(connector, watch)
    } else {
        StreamSupply::Fixed
    };
    let block_check = block_check_of(opts, material.as_ref(), &agreed)?;
    let params = params_of(opts, &agreed, plan.as_ref(), block_check);
    Ok(Opened {
        ends: (local, peer),
        plan,
        control,
        streams,
        supply,
        params,
        fingerprint,
        recorded,
        setup,
        mptcp,
        mptcp_asked: opts.mptcp,
        daemon_hello: theirs,
        opened_early,
    })
}

fn gone(e: std::io::Error) -> Error {
    Error::PeerGone(e.to_string())
}

fn tls_failure(host_port: &str, e: &std::io::Error) -> Error {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, UnexpectedEof};
    // Closed without a TLS alert: no certificate was judged. A daemon does
    // that to a connection over its limit of handshakes from one address.
    if matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | ConnectionAborted
    ) {
        return Error::PeerGone(format!(
            "{host_port} closed the connection during the TLS handshake without saying why \
             ({e}): a daemon busy with other connections from this address still \
             authenticating, or not a tern daemon"
        ));
    }
    let why = crate::conn::tls::explain(e).unwrap_or_else(|| e.to_string());
    Error::Tls(format!("handshake with {host_port} failed: {why}"))
}

/// What is left of an [`Opened`] session once its connections are in use.
struct Identity {
    ends: (Option<SocketAddr>, Option<SocketAddr>),
    plan: Option<Arc<PathPlan>>,
    fingerprint: String,
    recorded: Option<PathBuf>,
    setup: Setup,
    mptcp: bool,
    mptcp_asked: bool,
    daemon_hello: Hello,
    opened_early: bool,
}

/// An opened session, taken apart for the driver.
type Parts = (
    Control,
    FirstStreams,
    StreamSupply,
    TransferParams,
    Identity,
);

impl Opened {
    fn split(self) -> Parts {
        let id = Identity {
            ends: self.ends,
            plan: self.plan,
            fingerprint: self.fingerprint,
            recorded: self.recorded,
            setup: self.setup,
            mptcp: self.mptcp,
            mptcp_asked: self.mptcp_asked,
            daemon_hello: self.daemon_hello,
            opened_early: self.opened_early,
        };
        (self.control, self.streams, self.supply, self.params, id)
    }
}

fn outcome(id: Identity, stats: TransferStats) -> Outcome {
    let paths = id.plan.map_or_else(Vec::new, |plan| {
        // The sending end knows how many streams were in use at the end.
        let in_use = stats
            .tuning
            .as_ref()
            .and_then(|t| t.stream_steps.last())
            .map_or(u16::MAX, |s| s.streams);
        let mut reports = plan.report(
            &stats.per_stream_bytes,
            &stats.lost_streams,
            in_use,
            stats.network_elapsed,
        );
        if let Some(t) = &stats.tuning {
            paths::add_tuning(&mut reports, &t.paths);
        }
        reports
    });
    Outcome {
        streams: stats.streams_used,
        paths,
        stats,
        fingerprint: id.fingerprint,
        recorded: id.recorded,
        setup: id.setup.elapsed(),
        mptcp: id.mptcp_asked.then_some(id.mptcp),
        local: id.ends.0,
        peer: id.ends.1,
        daemon_hello: Some(id.daemon_hello),
        opened_early: id.opened_early,
    }
}

/// Checks that local `sources` can be sent: each exists, and is a
/// directory only if `recursive`. [`push`] does; a caller that has a login
/// or a session to set up first checks before it, so that a mistyped name
/// costs nothing.
pub fn check_sources(sources: &[PathBuf], recursive: bool) -> Result<()> {
    for s in sources {
        let meta = std::fs::metadata(s).map_err(|e| Error::io("stat", s, e))?;
        if meta.is_dir() && !recursive {
            return Err(Error::BadRequest(format!(
                "{}: is a directory (use -r to copy it)",
                s.display()
            )));
        }
    }
    Ok(())
}

/// Sends local `sources` to `dest` on the daemon.
pub async fn push(
    ep: &Endpoint,
    opts: &ClientOptions,
    sources: Vec<PathBuf>,
    recursive: bool,
    dest: String,
    progress: Arc<Progress>,
) -> Result<Outcome> {
    check_sources(&sources, recursive)?;
    let mode = SessionMode::Push {
        dest,
        top_level: sources.len() as u32,
    };
    let (control, streams, supply, params, id) = open(ep, opts, mode).await?.split();
    let source = Arc::new(
        FsSource::new(Root::Ambient, sources, recursive)
            .keep_special_bits(opts.choices.keep_special_bits),
    );
    let stats = transfer::run_sender(control, streams, supply, source, params, progress).await?;
    Ok(outcome(id, stats))
}

/// Sends what `source` holds to `dest` on the daemon (a third-party
/// copy's source daemon, pushing from beneath its root).
pub(crate) async fn push_from(
    ep: &Endpoint,
    opts: &ClientOptions,
    source: Arc<dyn crate::store::fsio::Source>,
    (dest, top_level): (String, u32),
    progress: Arc<Progress>,
) -> Result<Outcome> {
    let mode = SessionMode::Push { dest, top_level };
    let (control, streams, supply, params, id) = open(ep, opts, mode).await?.split();
    let stats = transfer::run_sender(control, streams, supply, source, params, progress).await?;
    Ok(outcome(id, stats))
}

/// Fetches `sources` (paths under the daemon's root) into local `dest`.
pub async fn pull(
    ep: &Endpoint,
    opts: &ClientOptions,
    sources: Vec<String>,
    recursive: bool,
    dest: PathBuf,
    progress: Arc<Progress>,
) -> Result<Outcome> {
    let sink = Arc::new(
        FsSink::new(Root::Ambient, dest, sources.len() as u32)?
            .keep_special_bits(opts.choices.keep_special_bits),
    );
    pull_into(ep, opts, sources, recursive, sink, progress).await
}

/// Fetches `sources` into `sink`: a local destination, or (a third-party
/// copy's destination daemon) one beneath its root.
pub(crate) async fn pull_into(
    ep: &Endpoint,
    opts: &ClientOptions,
    sources: Vec<String>,
    recursive: bool,
    sink: Arc<dyn crate::store::fsio::Sink>,
    progress: Arc<Progress>,
) -> Result<Outcome> {
    // The server chooses the names it announces: only what was asked for
    // is received (crate::store::expect).
    let requested =
        crate::store::expect::Requested::new(sources.iter().map(|s| s.as_bytes()), recursive);
    let sink = Arc::new(crate::store::expect::GuardedSink::new(sink, requested));
    let opened = open(ep, opts, SessionMode::Pull { sources, recursive }).await?;
    let (control, streams, supply, params, id) = opened.split();
    // Answers the daemon's announcements while the streams join.
    let stats = transfer::run_receiver(control, streams, supply, sink, params, progress).await?;
    Ok(outcome(id, stats))
}

/// Memory-to-memory throughput test: `bytes` bytes, or for `duration`.
pub async fn perf(
    ep: &Endpoint,
    opts: &ClientOptions,
    bytes: Option<u64>,
    duration: Option<Duration>,
    reverse: bool,
    progress: Arc<Progress>,
) -> Result<Outcome> {
    let mode = SessionMode::Perf {
        server_sends: reverse,
        bytes: bytes.unwrap_or(0),
        millis: duration.map_or(0, |d| d.as_millis() as u64),
    };
    let (control, streams, supply, mut params, id) = open(ep, opts, mode).await?.split();
    let stats = if reverse {
        let sink = Arc::new(DiscardSink);
        let streams = streams.all().await?;
        transfer::run_receiver(control, streams, supply, sink, params, progress).await?
    } else {
        let size = bytes.unwrap_or(FileMeta::UNKNOWN_SIZE);
        params.deadline = duration.map(|d| Instant::now() + d);
        let source = Arc::new(GenSource::new(size, params.block_size));
        transfer::run_sender(control, streams, supply, source, params, progress).await?
    };
    Ok(outcome(id, stats))
}
