//! `tern serve --once`: one session for a client that came through ssh,
//! and the client's side of that bootstrap.
//!
//! ssh has already authenticated both ends, so the server needs no
//! configuration: it prints a once line (port, one-time token, certificate
//! fingerprint) that ssh carries back to the client, serves the one client
//! that presents the token (`TokenAuth`, before anything is looked at), and
//! exits when that session ends, when the client goes away, or when no
//! client came in time. Paths are scp's: relative to the ssh user's home, or
//! absolute; the ssh login is the authorization.
//!
//! The daemon's connection handling is reused unchanged: a once server is a
//! [`crate::conn::server`] context with a gate (`gate.rs`) in it. In reverse mode the
//! server dials the client instead of listening ([`Incoming::Dial`]); on
//! every such connection the client still speaks first and is the TLS
//! client. The server keeps [`SPARES`] dialled connections idle ahead of use
//! and dials another whenever the client starts using one, so the client can
//! take a connection whenever it needs one — for the control connection, the
//! initial data streams, and streams added while the session runs.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tern_proto::{OnceLine, Token};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::conn::gate::Gate;
use crate::conn::route::{Endpoint, tcp_connect};
use crate::conn::server::{Context, ServerOptions, handle_connection};
use crate::conn::tls::ServerIdentity;
use crate::{Error, Result};

/// Connections a reverse-mode server keeps dialled and idle ahead of use.
pub const SPARES: usize = 4;

/// Connections kept dialled and idle over each other path to the client.
const PATH_SPARES: usize = 2;

/// Failures in a row of connections over another path (the path down, or
/// the client closed them as dead; each dialled again, waiting longer each
/// time) before the path is given up: with two spares failing in turn,
/// about five minutes.
const PATH_REDIALS: u32 = 24;

/// The first wait before dialling a failed path again; doubled each time,
/// up to [`PATH_REDIAL_MAX_WAIT`].
const PATH_REDIAL_WAIT: Duration = Duration::from_secs(1);
const PATH_REDIAL_MAX_WAIT: Duration = Duration::from_secs(30);

/// Another path to the client in reverse mode: its address there, and this
/// host's address to dial from when given (`tern serve --connect-paths`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DialPath {
    pub to: IpAddr,
    pub from: Option<IpAddr>,
}

/// How a once server runs.
#[derive(Debug, Clone)]
pub struct OnceOptions {
    /// Timeouts as for the daemon; `root` is the directory relative paths
    /// start from (the ssh user's home).
    pub server: ServerOptions,
    /// Exit when no client has been accepted within this long.
    pub wait: Duration,
}

impl OnceOptions {
    /// Defaults, with relative paths starting from `home`.
    pub fn new(home: PathBuf) -> OnceOptions {
        OnceOptions {
            server: ServerOptions::new(home),
            wait: Duration::from_secs(60),
        }
    }
}

/// Where a once server's connections come from.
#[derive(Debug)]
enum Incoming {
    /// The client connects to this listener.
    Listen(TcpListener),
    /// The server dials the client here (reverse mode), and at `others`
    /// (its addresses on other paths) once it reached it.
    Dial {
        target: Endpoint,
        others: Vec<DialPath>,
    },
}

/// A `tern serve --once` server, ready to print its once line and run.
#[derive(Debug)]
pub struct OnceServer {
    ctx: Arc<Context>,
    gate: Arc<Gate>,
    incoming: Incoming,
    line: OnceLine,
    wait: Duration,
}

impl OnceServer {
    /// Listens on `addr` (port 0 for an ephemeral port).
    pub async fn listen(
        addr: SocketAddr,
        identity: &ServerIdentity,
        opts: OnceOptions,
    ) -> Result<OnceServer> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io("listen", addr.to_string(), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::io("listen", addr.to_string(), e))?;
        let shown = Some(bound.ip()).filter(|ip| !ip.is_unspecified());
        let server = OnceServer::new(
            Incoming::Listen(listener),
            Some(bound.port()),
            shown,
            identity,
            opts,
        )?;
        // Bound to every address, it names the others to its client (its
        // paths), as a daemon does.
        let _ = server.ctx.bound.set(bound);
        Ok(server)
    }

    /// Names `addr` in the once line when it names no address yet (a
    /// server listening on every address, that ssh reached at `addr`).
    pub fn showing(mut self, addr: Option<IpAddr>) -> OnceServer {
        self.line.addr = self.line.addr.or(addr);
        self
    }

    /// Connects out to the client at `target` for every connection
    /// (reverse mode), and over `others` (its addresses on other paths) for
    /// the data connections the client takes there.
    pub fn dial(
        target: Endpoint,
        others: Vec<DialPath>,
        identity: &ServerIdentity,
        opts: OnceOptions,
    ) -> Result<OnceServer> {
        let others = if others.is_empty() {
            others
        } else {
            // It names its own other addresses, from which the client then
            // takes connections.
            OnceServer::advertised(&target, others)
        };
        let incoming = Incoming::Dial { target, others };
        let server = OnceServer::new(incoming, None, None, identity, opts)?;
        if let Incoming::Dial { others, .. } = &server.incoming {
            if !others.is_empty() {
                let everywhere = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0));
                let _ = server.ctx.bound.set(everywhere);
            }
        }
        Ok(server)
    }

    /// The paths of `others` worth dialling besides `target`: of its
    /// family, not `target` itself, none to a client on this host.
    fn advertised(target: &Endpoint, others: Vec<DialPath>) -> Vec<DialPath> {
        // A target named, not numbered: of any family.
        let first = target
            .host
            .parse::<IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical());
        if first.is_some_and(|ip| ip.is_loopback()) {
            return Vec::new();
        }
        let mut kept: Vec<DialPath> = Vec::new();
        for path in others {
            let to = path.to.to_canonical();
            if first.is_none_or(|first| to.is_ipv4() == first.is_ipv4() && to != first)
                && !to.is_loopback()
                && !to.is_unspecified()
                && kept.iter().all(|k| k.to != to)
            {
                kept.push(DialPath {
                    to,
                    from: path.from,
                });
            }
        }
        kept.truncate(tern_proto::MAX_PATHS);
        kept
    }

    fn new(
        incoming: Incoming,
        port: Option<u16>,
        addr: Option<IpAddr>,
        identity: &ServerIdentity,
        opts: OnceOptions,
    ) -> Result<OnceServer> {
        let token: Token = rand::random();
        let gate = Arc::new(Gate::new(token));
        let ctx = Context::new(
            crate::store::fsio::Root::Ambient,
            identity,
            opts.server,
            Some(gate.clone()),
        )?;
        Ok(OnceServer {
            ctx,
            gate,
            incoming,
            line: OnceLine {
                port,
                addr,
                token,
                fingerprint: identity.fingerprint.clone(),
            },
            wait: opts.wait,
        })
    }

    /// The line to print for the client.
    pub fn line(&self) -> &OnceLine {
        &self.line
    }

    /// Serves the one session. Returns when it ended (its error, if it
    /// failed), when `client_gone` completes, or when no client presented
    /// the token within the wait.
    pub async fn run(self, client_gone: impl Future<Output = ()>) -> Result<()> {
        let mut done = self.gate.done.subscribe();
        let mut tasks = JoinSet::new();
        let mut dialler = match &self.incoming {
            Incoming::Dial { target, others } => Some(Dialler::start(
                target.clone(),
                others.clone(),
                &self.ctx.opts,
            )),
            Incoming::Listen(_) => None,
        };
        let waited = tokio::time::sleep(self.wait);
        tokio::pin!(waited, client_gone);
        loop {
            tokio::select! {
                accepted = accept(&self.incoming) => match accepted {
                    Ok((conn, peer)) => {
                        tasks.spawn(handle_connection(self.ctx.clone(), conn, peer));
                    }
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                dialled = next_dialled(&mut dialler) => match dialled {
                    Ok((conn, peer)) => {
                        tasks.spawn(handle_connection(self.ctx.clone(), conn, peer));
                    }
                    Err(e) => return Err(e),
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                changed = done.changed() => {
                    let outcome = *done.borrow();
                    return match (changed, outcome) {
                        (_, Some(true)) => Ok(()),
                        (_, Some(false)) => Err(Error::PeerGone("the session failed".into())),
                        (Err(_), None) => Err(Error::Aborted),
                        (Ok(()), None) => continue,
                    };
                }
                () = &mut waited, if !self.gate.is_claimed() => {
                    return Err(Error::PeerGone(format!(
                        "no client presented the one-time token within {:?}",
                        self.wait
                    )));
                }
                () = &mut client_gone => {
                    return Err(Error::PeerGone("the client went away (ssh closed)".into()));
                }
            }
        }
    }
}

async fn accept(incoming: &Incoming) -> std::io::Result<(TcpStream, SocketAddr)> {
    match incoming {
        Incoming::Listen(l) => l.accept().await,
        Incoming::Dial { .. } => std::future::pending().await,
    }
}

async fn next_dialled(dialler: &mut Option<Dialler>) -> Result<(TcpStream, SocketAddr)> {
    match dialler {
        Some(d) => d.next().await,
        None => std::future::pending().await,
    }
}

/// Reverse mode: keeps [`SPARES`] connections to the client dialled and
/// idle, and hands one on as soon as the client speaks on it; once the
/// client was reached, keeps [`PATH_SPARES`] over each other path too, and
/// dials a path again (waiting longer each time) when its connection fails.
#[derive(Debug)]
struct Dialler {
    target: Endpoint,
    others: Vec<DialPath>,
    connect_timeout: Duration,
    io_timeout: Duration,
    /// Connections dialled and waiting for the client's first bytes, each
    /// with its path (0: `target`; then `others`).
    spares: JoinSet<(usize, Result<(TcpStream, SocketAddr)>)>,
    /// Dials left on each path before the server stops adding spares there.
    budgets: Vec<usize>,
    /// True once any dial succeeded.
    reached: bool,
    /// Failures in a row of each path's connections.
    failures: Vec<u32>,
}

impl Dialler {
    fn start(target: Endpoint, others: Vec<DialPath>, opts: &ServerOptions) -> Dialler {
        let paths = others.len();
        let streams = usize::from(crate::conn::server::MAX_STREAMS);
        // The first path: a control connection, every stream a session may
        // have, and the spares left over at the end. Each other path: every
        // stream, its spares, and their redials.
        let mut budgets = vec![1 + streams + 2 * SPARES];
        budgets.extend(std::iter::repeat_n(
            streams + 2 * PATH_SPARES + PATH_REDIALS as usize,
            paths,
        ));
        let mut d = Dialler {
            target,
            others,
            connect_timeout: opts.join_timeout,
            io_timeout: opts.io_timeout,
            spares: JoinSet::new(),
            budgets,
            reached: false,
            failures: vec![0; 1 + paths],
        };
        for _ in 0..SPARES {
            d.dial_one(0, Duration::ZERO);
        }
        d
    }

    /// Dials path `path` after `wait`.
    fn dial_one(&mut self, path: usize, wait: Duration) {
        let Some(budget) = self.budgets.get_mut(path).filter(|b| **b > 0) else {
            return;
        };
        *budget -= 1;
        let (timeout, io_timeout) = (self.connect_timeout, self.io_timeout);
        let to = path.checked_sub(1).map(|i| self.others[i]);
        let target = self.target.clone();
        self.spares.spawn(async move {
            tokio::time::sleep(wait).await;
            let conn = match to {
                None => tcp_connect(&target, timeout, io_timeout, false).await,
                Some(p) => {
                    let remote = SocketAddr::new(p.to, target.port);
                    crate::conn::paths::connect(remote, p.from, timeout, io_timeout, false).await
                }
            };
            (path, spare(conn).await)
        });
    }

    /// The next connection the client started using.
    async fn next(&mut self) -> Result<(TcpStream, SocketAddr)> {
        loop {
            let Some(joined) = self.spares.join_next().await else {
                return std::future::pending().await;
            };
            let (path, used) = joined.map_err(|e| Error::Protocol(format!("dial task: {e}")))?;
            match used {
                Ok(used) => {
                    if !self.reached {
                        self.reached = true;
                        for other in 1..=self.others.len() {
                            for _ in 0..PATH_SPARES {
                                self.dial_one(other, Duration::ZERO);
                            }
                        }
                    }
                    self.failures[path] = 0;
                    self.dial_one(path, Duration::ZERO);
                    return Ok(used);
                }
                Err(e) if !self.reached && self.spares.is_empty() => {
                    return Err(e);
                }
                Err(e) if path > 0 => {
                    let failures = &mut self.failures[path];
                    *failures += 1;
                    let failures = *failures;
                    tracing::debug!("a connection over path {path} to the client: {e}");
                    if failures <= PATH_REDIALS {
                        let wait = PATH_REDIAL_WAIT
                            .saturating_mul(1 << (failures - 1).min(8))
                            .min(PATH_REDIAL_MAX_WAIT);
                        self.dial_one(path, wait);
                    } else if failures == PATH_REDIALS + 1 {
                        tracing::info!(
                            "path {path} to the client ({}) failed {PATH_REDIALS} times in a \
                             row: no more connections over it ({e})",
                            self.others[path - 1].to
                        );
                    }
                }
                Err(e) => tracing::debug!("spare connection to the client: {e}"),
            }
        }
    }
}

/// A connection dialled to the client, once the client speaks on it.
async fn spare(conn: Result<TcpStream>) -> Result<(TcpStream, SocketAddr)> {
    let conn = conn?;
    let peer = conn
        .peer_addr()
        .map_err(|e| Error::PeerGone(format!("a spare connection: {e}")))?;
    // Idle until the client uses it; no timeout, spares wait for the whole
    // session (keepalive ends one whose path died).
    let n = conn
        .peek(&mut [0u8; 1])
        .await
        .map_err(|e| Error::PeerGone(e.to_string()))?;
    if n == 0 {
        return Err(Error::PeerGone(
            "the client closed a spare connection".into(),
        ));
    }
    Ok((conn, peer))
}
