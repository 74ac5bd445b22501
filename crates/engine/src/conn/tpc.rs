//! Third-party copies, from the client's side and the dialer's: the
//! client holds a control connection to each daemon ([`Leg`]), signs one
//! delegation for both, has each judge it, and tells the destination to
//! dial the source ([`third_party`]); the destination daemon then runs an
//! ordinary pull from the source, presenting the delegation and the
//! source's ticket first ([`dial`]). The data never passes through the
//! client. The daemons' side is `conn::server::tpc`; PROTOCOL.md §8.13
//! is the protocol.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tern_proto::delegation::{Delegation, Dialer, Party, SignedDelegation, TpcRole};
use tern_proto::{ControlMsg, Features, Token};
use tern_session::delegation::Issuer;
use tern_session::open::PeerPass;

use super::client::{self, ClientOptions, Outcome};
use super::route::Endpoint;
use crate::data::channel::Control;
use crate::data::transfer::Progress;
use crate::store::fsio::Sink;
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

/// How the client goes about it.
#[derive(Debug, Clone)]
pub struct TpcOptions {
    /// How both daemons are trusted, the client certificate, timeouts.
    pub client: ClientOptions,
    /// How long the delegation is valid.
    pub ttl: Duration,
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
    /// From starting to connect until the destination dialed.
    pub setup: Duration,
}

/// The client's control connection to one daemon of the copy.
pub struct Leg {
    control: Control,
    control_fd: RawFd,
    name: String,
    fingerprint: String,
    binding: [u8; 32],
    address: Option<SocketAddr>,
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
/// valid for `ttl` from now, the destination dialing.
pub fn delegation(
    req: &TpcRequest,
    source: &Leg,
    dest: &Leg,
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
        dialer: Dialer::Dest,
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

/// Copies `req` from its source daemon straight to its destination
/// daemon; `progress` follows the destination's count.
pub async fn third_party(
    req: &TpcRequest,
    opts: &TpcOptions,
    progress: Arc<Progress>,
) -> Result<TpcOutcome> {
    let started = Instant::now();
    let (mut a, mut b) = tokio::try_join!(
        Leg::open(&req.source, &opts.client),
        Leg::open(&req.dest, &opts.client)
    )?;
    let issuer = opts.client.client_cert.as_ref().map(|c| c.fingerprint());
    let signed = sign(&delegation(req, &a, &b, issuer, opts.ttl));
    // The source judges first: a client that may not read there never
    // involves the destination.
    let at_a = a.offer(TpcRole::Source, &signed).await?;
    b.offer(TpcRole::Dest, &signed).await?;
    b.control
        .send(&ControlMsg::TpcDial {
            host: req.source.host.clone(),
            port: req.source.port,
            addresses: at_a.addresses,
            ticket: at_a.ticket,
        })
        .await?;
    let setup = started.elapsed();
    let done = loop {
        tokio::select! {
            msg = b.control.recv() => match msg? {
                ControlMsg::TpcProgress { bytes, total, files_done } => {
                    progress.bytes.store(bytes, Ordering::Relaxed);
                    progress.total.store(total, Ordering::Relaxed);
                    progress.files_done.store(files_done, Ordering::Relaxed);
                }
                done @ ControlMsg::TpcDone { .. } => break done,
                other => return Err(b.refused(other)),
            },
            msg = a.control.recv() => match msg {
                Ok(ControlMsg::Error { code, message, .. }) => {
                    return Err(Error::Peer { code, message: format!("{}: {message}", a.name) });
                }
                Ok(other) => return Err(a.refused(other)),
                Err(e) => return Err(Error::PeerGone(format!("{}: {e}", a.name))),
            },
        }
    };
    let ControlMsg::TpcDone {
        bytes,
        files,
        streams,
        network_elapsed_ms,
        dialer_address,
        peer_address,
    } = done
    else {
        unreachable!("the loop breaks on TpcDone only")
    };
    progress.bytes.store(bytes, Ordering::Relaxed);
    progress.files_done.store(files, Ordering::Relaxed);
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
    })
}

/// The destination daemon's pull from the source: `host:port` first,
/// then each of `addresses`, trusting only the fingerprint the
/// delegation names for the source, presenting `pass`.
pub async fn dial(
    d: &Delegation,
    (host, port, addresses): (&str, u16, &[SocketAddr]),
    pass: PeerPass,
    opts: ClientOptions,
    sink: Arc<dyn Sink>,
    progress: Arc<Progress>,
) -> Result<Outcome> {
    let mut opts = opts;
    opts.trust = super::trust::Trust::Pinned(d.source.fingerprint.clone());
    opts.peer_pass = Some(pass);
    let mut candidates = vec![Endpoint {
        host: host.to_string(),
        port,
    }];
    candidates.extend(addresses.iter().map(|a| Endpoint {
        host: a.ip().to_string(),
        port: a.port(),
    }));
    let mut last = None;
    for ep in &candidates {
        // Whether it answers at all is learnt first, cheaply: a pull that
        // fails after connecting must not be retried elsewhere (the pass
        // would have been used).
        let reachable = tokio::time::timeout(
            opts.connect_timeout,
            tokio::net::TcpStream::connect((ep.host.as_str(), ep.port)),
        )
        .await;
        match reachable {
            Ok(Ok(_)) => {
                return client::pull_into(
                    ep,
                    &opts,
                    d.sources.clone(),
                    d.recursive,
                    sink,
                    progress,
                )
                .await;
            }
            Ok(Err(e)) => last = Some(format!("{}: {e}", ep.host_port())),
            Err(_) => last = Some(format!("{}: timed out", ep.host_port())),
        }
    }
    Err(Error::BadRequest(format!(
        "the source daemon could not be reached from the destination ({})",
        last.unwrap_or_else(|| "no address".into())
    )))
}
