//! The client side: connect to a daemon, check its identity, open a session
//! and its data streams, then run the engine as sender or receiver.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_proto::data::JOIN_REPLY_LEN;
use tern_proto::hello::HELLO_LEN;
use tern_proto::{
    ChecksumAlg, ControlMsg, DataJoin, FileMeta, Hello, JoinReply, Protect, SessionAccept,
    SessionMode, SessionOpen,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::fsio::{DiscardSink, FsSink, FsSource, GenSource, Root};
use crate::integrity::BlockCheck;
use crate::server::bind_token;
use crate::tls::{BLOCK_MAC_LABEL, KnownHosts, PinVerifier, server_name};
use crate::transfer::{self, BoxStream, Control, Progress, TransferParams, TransferStats};
use crate::{Error, Result, StreamWrap};

/// Where a daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Endpoint {
    /// `host:port`, with brackets around IPv6 addresses; the key in
    /// `known_hosts`.
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// How the client connects and what it asks for.
#[derive(Clone)]
pub struct ClientOptions {
    /// Data streams.
    pub streams: u16,
    /// Block size.
    pub block_size: u32,
    /// Whole-file digest.
    pub checksum: ChecksumAlg,
    /// Data protection.
    pub protect: Protect,
    /// Expected server fingerprint (`--fingerprint`); overrides known_hosts.
    pub pin: Option<String>,
    /// Where first-seen fingerprints are recorded and later checked.
    pub known_hosts: Option<KnownHosts>,
    /// Wraps each data stream (fault injection in tests).
    pub wrap: Option<StreamWrap>,
    /// Give up connecting after this long.
    pub connect_timeout: Duration,
    /// Fail a connection whose peer stays silent this long.
    pub io_timeout: Duration,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("streams", &self.streams)
            .field("block_size", &self.block_size)
            .field("checksum", &self.checksum)
            .field("protect", &self.protect)
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
    /// Streams used.
    pub streams: u16,
}

struct Opened {
    control: Control,
    streams: Vec<BoxStream>,
    params: TransferParams,
    fingerprint: String,
    recorded: Option<PathBuf>,
    setup: Duration,
}

async fn tcp_connect(ep: &Endpoint, timeout: Duration, io_timeout: Duration) -> Result<TcpStream> {
    let addr = ep.host_port();
    let fail = |source: std::io::Error| Error::Connect {
        addr: addr.clone(),
        source,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((ep.host.as_str(), ep.port))
        .await
        .map_err(fail)?
        .collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                crate::net::prepare(&s, io_timeout);
                return Ok(s);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
        }
    }
    Err(fail(last))
}

async fn open(ep: &Endpoint, opts: &ClientOptions, mode: SessionMode) -> Result<Opened> {
    let started = Instant::now();
    let host_port = ep.host_port();
    let (expected, from_known_hosts) = match (&opts.pin, &opts.known_hosts) {
        (Some(pin), _) => (Some(pin.clone()), false),
        (None, Some(kh)) => (kh.lookup(&host_port)?, true),
        (None, None) => (None, false),
    };
    let verifier = PinVerifier::new(expected.clone());
    let connector = TlsConnector::from(verifier.client_config()?);
    let tcp = tcp_connect(ep, opts.connect_timeout, opts.io_timeout).await?;
    let _ = tcp.set_nodelay(true);
    let tls = connector
        .connect(server_name(&ep.host), tcp)
        .await
        .map_err(|e| match (verifier.seen(), &expected) {
            (Some(seen), Some(want)) if seen != *want => Error::FingerprintMismatch {
                host: host_port.clone(),
                expected: want.clone(),
                actual: seen,
                known_hosts: match (&opts.known_hosts, from_known_hosts) {
                    (Some(kh), true) => kh.path.display().to_string(),
                    _ => "--fingerprint".into(),
                },
            },
            _ => Error::Tls(format!("handshake with {host_port} failed: {e}")),
        })?;
    let fingerprint = verifier
        .seen()
        .ok_or_else(|| Error::Tls("no server certificate".into()))?;
    let mut recorded = None;
    if expected.is_none() {
        if let Some(kh) = &opts.known_hosts {
            kh.record(&host_port, &fingerprint)?;
            recorded = Some(kh.path.clone());
        }
    }
    let mut material = [0u8; 32];
    let exported = tls
        .get_ref()
        .1
        .export_keying_material(&mut material, BLOCK_MAC_LABEL, None)
        .is_ok();

    let mut stream: BoxStream = Box::new(tls);
    let ours = Hello::ours();
    stream.write_all(&ours.encode()).await.map_err(gone)?;
    let mut theirs = [0u8; HELLO_LEN];
    stream.read_exact(&mut theirs).await.map_err(gone)?;
    let negotiated = ours
        .negotiate(&Hello::decode(&theirs)?)
        .map_err(|e| Error::Protocol(e.to_string()))?;
    let mut control = Control::new(stream);
    control
        .send(&ControlMsg::SessionOpen(SessionOpen {
            mode,
            streams: opts.streams,
            block_size: opts.block_size,
            checksum: opts.checksum,
            protect: opts.protect,
        }))
        .await?;
    let accept: SessionAccept = match control.recv().await? {
        ControlMsg::SessionAccept(a) => a,
        ControlMsg::Error { code, message, .. } => return Err(Error::Peer { code, message }),
        other => {
            return Err(Error::Protocol(format!(
                "expected SessionAccept, got {other:?}"
            )));
        }
    };

    let mut joins = tokio::task::JoinSet::new();
    for k in 0..accept.streams {
        let ep = ep.clone();
        let timeout = opts.connect_timeout;
        let io_timeout = opts.io_timeout;
        let protect = opts.protect;
        let fp = fingerprint.clone();
        let join = DataJoin {
            version: negotiated.version,
            stream: k,
            token: accept.token,
        };
        joins.spawn(async move {
            let tcp = tcp_connect(&ep, timeout, io_timeout).await?;
            let probe = {
                use std::os::fd::AsFd;
                tcp.as_fd().try_clone_to_owned().ok()
            };
            let mut s: BoxStream = if protect == Protect::Private {
                let v = PinVerifier::new(Some(fp));
                let tls = TlsConnector::from(v.client_config()?)
                    .connect(server_name(&ep.host), tcp)
                    .await
                    .map_err(|e| Error::Tls(format!("data connection: {e}")))?;
                Box::new(tls)
            } else {
                Box::new(tcp)
            };
            s.write_all(&join.encode()).await.map_err(gone)?;
            s.flush().await.map_err(gone)?;
            let mut reply = [0u8; JOIN_REPLY_LEN];
            s.read_exact(&mut reply).await.map_err(gone)?;
            match JoinReply::decode(&reply)? {
                JoinReply::Accepted => Ok((k, s, probe)),
                JoinReply::Refused => Err(Error::Protocol(format!(
                    "the server refused data connection {k}"
                ))),
            }
        });
    }
    let mut slots: Vec<Option<BoxStream>> = (0..accept.streams).map(|_| None).collect();
    let mut probes: Vec<Option<std::os::fd::OwnedFd>> = (0..accept.streams).map(|_| None).collect();
    while let Some(joined) = joins.join_next().await {
        let (k, s, probe) = joined.map_err(|e| Error::Protocol(format!("connect task: {e}")))??;
        probes[usize::from(k)] = probe;
        slots[usize::from(k)] = Some(match &opts.wrap {
            Some(w) => w(usize::from(k), s),
            None => s,
        });
    }
    let streams = slots.into_iter().map(|s| s.expect("joined")).collect();
    let block_check = match opts.protect {
        Protect::Safe if exported => BlockCheck::KeyedBlake3(bind_token(&material, &accept.token)),
        Protect::Safe => return Err(Error::Tls("cannot export keying material".into())),
        Protect::Clear | Protect::Private => BlockCheck::Xxh3,
    };
    Ok(Opened {
        control,
        streams,
        params: TransferParams {
            streams: accept.streams,
            block_size: accept.block_size,
            checksum: opts.checksum,
            block_check,
            deadline: None,
            max_files_in_flight: 32,
            max_repair_rounds: crate::session::DEFAULT_MAX_REPAIR_ROUNDS,
            probes: Arc::new(
                probes
                    .into_iter()
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default(),
            ),
        },
        fingerprint,
        recorded,
        setup: started.elapsed(),
    })
}

fn gone(e: std::io::Error) -> Error {
    Error::PeerGone(e.to_string())
}

/// What is left of an [`Opened`] session once its connections are in use.
struct Identity {
    fingerprint: String,
    recorded: Option<PathBuf>,
    setup: Duration,
    streams: u16,
}

impl Opened {
    fn split(self) -> (Control, Vec<BoxStream>, TransferParams, Identity) {
        let id = Identity {
            fingerprint: self.fingerprint,
            recorded: self.recorded,
            setup: self.setup,
            streams: self.params.streams,
        };
        (self.control, self.streams, self.params, id)
    }
}

fn outcome(id: Identity, stats: TransferStats) -> Outcome {
    Outcome {
        stats,
        fingerprint: id.fingerprint,
        recorded: id.recorded,
        setup: id.setup,
        streams: id.streams,
    }
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
    for s in &sources {
        let meta = std::fs::metadata(s).map_err(|e| Error::io("stat", s, e))?;
        if meta.is_dir() && !recursive {
            return Err(Error::BadRequest(format!(
                "{}: is a directory (use -r to copy it)",
                s.display()
            )));
        }
    }
    let mode = SessionMode::Push {
        dest,
        top_level: sources.len() as u32,
    };
    let (control, streams, params, id) = open(ep, opts, mode).await?.split();
    let source = Arc::new(FsSource::new(Root::Ambient, sources, recursive));
    let stats = transfer::run_sender(control, streams, source, params, progress).await?;
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
    let sink = Arc::new(FsSink::new(Root::Ambient, dest, sources.len() as u32)?);
    let opened = open(ep, opts, SessionMode::Pull { sources, recursive }).await?;
    let (control, streams, params, id) = opened.split();
    let stats = transfer::run_receiver(control, streams, sink, params, progress).await?;
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
    let (control, streams, mut params, id) = open(ep, opts, mode).await?.split();
    let stats = if reverse {
        transfer::run_receiver(control, streams, Arc::new(DiscardSink), params, progress).await?
    } else {
        let size = bytes.unwrap_or(FileMeta::UNKNOWN_SIZE);
        params.deadline = duration.map(|d| Instant::now() + d);
        let source = Arc::new(GenSource::new(size, params.block_size));
        transfer::run_sender(control, streams, source, params, progress).await?
    };
    Ok(outcome(id, stats))
}
