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
//! [`crate::server`] context with a [`Gate`] in it. In reverse mode the
//! server dials the client instead of listening ([`Incoming::Dial`]); on
//! every such connection the client still speaks first and is the TLS
//! client. The server keeps [`SPARES`] dialled connections idle ahead of use
//! and dials another whenever the client starts using one, so the client can
//! take a connection whenever it needs one — for the control connection, the
//! initial data streams, and streams added while the session runs.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_proto::{ControlMsg, Features, OnceLine, Token};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{Endpoint, tcp_connect};
use crate::server::{Context, ServerOptions, handle_connection};
use crate::tls::ServerIdentity;
use crate::transfer::Control;
use crate::{Error, Result};

/// Connections a reverse-mode server keeps dialled and idle ahead of use.
pub const SPARES: usize = 4;

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

/// Lets exactly one session in: the first whose client presents the token.
#[derive(Debug)]
pub(crate) struct Gate {
    token: Token,
    /// Set by the first session that presented the token.
    claimed: AtomicBool,
    /// `Some(succeeded)` once the claimed session ended.
    done: watch::Sender<Option<bool>>,
}

/// The one session's hold on the [`Gate`]; tells [`OnceServer::run`] when
/// the session ended, and how.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    gate: &'a Gate,
    ok: bool,
}

impl Claim<'_> {
    /// The session ended well.
    pub(crate) fn succeeded(mut self) {
        self.ok = true;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.gate.done.send_replace(Some(self.ok));
    }
}

impl Gate {
    fn new(token: Token) -> Gate {
        Gate {
            token,
            claimed: AtomicBool::new(false),
            done: watch::channel(None).0,
        }
    }

    /// Reads the client's first control frame, which must be `TokenAuth`
    /// with our token, and claims the one session for it. Anything else is
    /// answered with an error and ends this connection only.
    pub(crate) async fn admit(
        &self,
        control: &mut Control,
        features: Features,
        timeout: Duration,
    ) -> Result<Claim<'_>> {
        if !features.contains(Features::TOKEN_AUTH) {
            return refuse(
                control,
                Error::Unauthorized("the client cannot present a one-time token".into()),
            )
            .await;
        }
        let presented = match tokio::time::timeout(timeout, control.recv()).await {
            Ok(Ok(ControlMsg::TokenAuth { token })) => token,
            Ok(Ok(other)) => {
                let first = format!("{other:?}");
                let first = first.split(['(', ' ', '{']).next().unwrap_or("?");
                return refuse(
                    control,
                    Error::Unauthorized(format!(
                        "this server needs its one-time token first, got {first}"
                    )),
                )
                .await;
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(Error::PeerGone("no token presented".into())),
        };
        if !same_token(&presented, &self.token) {
            return refuse(control, Error::Unauthorized("wrong one-time token".into())).await;
        }
        if self.claimed.swap(true, Ordering::SeqCst) {
            return refuse(
                control,
                Error::Unauthorized("this server has served its one session".into()),
            )
            .await;
        }
        Ok(Claim {
            gate: self,
            ok: false,
        })
    }
}

/// Compares tokens without an early exit, so timing tells nothing.
fn same_token(a: &Token, b: &Token) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Tells the client why, then reads what it had already sent (its
/// `SessionOpen`) until it hangs up, so that closing does not reset the
/// connection before the client has read the error.
async fn refuse<T>(control: &mut Control, e: Error) -> Result<T> {
    let refused = crate::server::refuse(control, e).await;
    let drain = async { while control.recv().await.is_ok() {} };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    Err(refused.expect_err("refusing always fails"))
}

/// Where a path from the client lands, as with scp: absolute paths as they
/// are, others beneath `home` (`""`, `~` and `~/…` included).
pub(crate) fn scp_path(home: &Path, path: &str) -> PathBuf {
    let rel = match path {
        "~" => "",
        _ => path.strip_prefix("~/").unwrap_or(path),
    };
    if rel.starts_with('/') {
        PathBuf::from(rel)
    } else if rel.is_empty() {
        home.to_path_buf()
    } else {
        home.join(rel)
    }
}

/// Where a once server's connections come from.
#[derive(Debug)]
enum Incoming {
    /// The client connects to this listener.
    Listen(TcpListener),
    /// The server dials the client here (reverse mode).
    Dial(Endpoint),
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
        OnceServer::new(
            Incoming::Listen(listener),
            Some(bound.port()),
            shown,
            identity,
            opts,
        )
    }

    /// Connects out to the client at `target` for every connection
    /// (reverse mode).
    pub fn dial(
        target: Endpoint,
        identity: &ServerIdentity,
        opts: OnceOptions,
    ) -> Result<OnceServer> {
        OnceServer::new(Incoming::Dial(target), None, None, identity, opts)
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
            crate::fsio::Root::Ambient,
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
            Incoming::Dial(target) => Some(Dialler::start(target.clone(), &self.ctx.opts)),
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
                () = &mut waited, if !self.gate.claimed.load(Ordering::SeqCst) => {
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
        Incoming::Dial(_) => std::future::pending().await,
    }
}

async fn next_dialled(dialler: &mut Option<Dialler>) -> Result<(TcpStream, SocketAddr)> {
    match dialler {
        Some(d) => d.next().await,
        None => std::future::pending().await,
    }
}

/// Reverse mode: keeps [`SPARES`] connections to the client dialled and
/// idle, and hands one on as soon as the client speaks on it.
#[derive(Debug)]
struct Dialler {
    target: Endpoint,
    connect_timeout: Duration,
    io_timeout: Duration,
    /// Connections dialled and waiting for the client's first bytes.
    spares: JoinSet<Result<(TcpStream, SocketAddr)>>,
    /// Dials left before the server stops adding spares.
    budget: usize,
    /// True once any dial succeeded.
    reached: bool,
}

impl Dialler {
    fn start(target: Endpoint, opts: &ServerOptions) -> Dialler {
        let mut d = Dialler {
            target,
            connect_timeout: opts.join_timeout,
            io_timeout: opts.io_timeout,
            spares: JoinSet::new(),
            // A control connection, every stream a session may have, and
            // the spares left over at the end.
            budget: 1 + usize::from(crate::server::MAX_STREAMS) + 2 * SPARES,
            reached: false,
        };
        for _ in 0..SPARES {
            d.dial_one();
        }
        d
    }

    fn dial_one(&mut self) {
        if self.budget == 0 {
            return;
        }
        self.budget -= 1;
        let (target, timeout, io_timeout) =
            (self.target.clone(), self.connect_timeout, self.io_timeout);
        self.spares.spawn(async move {
            let conn = tcp_connect(&target, timeout, io_timeout).await?;
            let peer = conn.peer_addr().map_err(|e| Error::Connect {
                addr: target.host_port(),
                source: e,
            })?;
            // Idle until the client uses it; no timeout, spares wait for
            // the whole session.
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
        });
    }

    /// The next connection the client started using.
    async fn next(&mut self) -> Result<(TcpStream, SocketAddr)> {
        loop {
            let Some(joined) = self.spares.join_next().await else {
                return std::future::pending().await;
            };
            match joined.map_err(|e| Error::Protocol(format!("dial task: {e}")))? {
                Ok(used) => {
                    self.reached = true;
                    self.dial_one();
                    return Ok(used);
                }
                Err(e) if !self.reached && self.spares.is_empty() => {
                    return Err(e);
                }
                Err(e) => tracing::debug!("spare connection to the client: {e}"),
            }
        }
    }
}

/// Client side, reverse mode: the port the far end dials, and a filter
/// that takes data connections only from where the control connection came.
#[derive(Debug)]
pub struct Callback {
    listener: TcpListener,
    /// Set when the far end is known to be gone: waiting stops.
    closed: watch::Sender<bool>,
}

impl Callback {
    /// Takes connections from `listener`.
    pub fn new(listener: TcpListener) -> Callback {
        Callback {
            listener,
            closed: watch::channel(false).0,
        }
    }

    /// The far end is gone (its ssh ended): connections waited for now or
    /// later fail at once instead of at their timeout.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// The port the far end is told to dial.
    pub fn port(&self) -> Result<u16> {
        self.listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| Error::io("listen", "callback", e))
    }

    /// The next connection from `from` (any address when `None`); others
    /// are logged and dropped.
    async fn accept(
        &self,
        from: Option<IpAddr>,
        timeout: Duration,
        io_timeout: Duration,
    ) -> Result<TcpStream> {
        let port = self.port().unwrap_or(0);
        let waited = async {
            loop {
                let (conn, peer) = self.listener.accept().await.map_err(|e| Error::Connect {
                    addr: format!("callback port {port}"),
                    source: e,
                })?;
                let ip = peer.ip().to_canonical();
                match from {
                    Some(want) if want != ip => {
                        tracing::warn!(
                            "dropped a connection from {peer}: the session's peer is {want}"
                        );
                    }
                    _ => return Ok::<TcpStream, Error>(conn),
                }
            }
        };
        let fail = |kind, why: String| Error::Connect {
            addr: format!("callback port {port}"),
            source: std::io::Error::new(kind, why),
        };
        let mut closed = self.closed.subscribe();
        let conn = tokio::select! {
            waited = tokio::time::timeout(timeout, waited) => waited.map_err(|_| {
                fail(
                    std::io::ErrorKind::TimedOut,
                    format!("the far end did not connect back within {timeout:?}"),
                )
            })??,
            _ = closed.wait_for(|c| *c) => {
                return Err(fail(
                    std::io::ErrorKind::ConnectionAborted,
                    "the far end ended without connecting back".into(),
                ));
            }
        };
        crate::net::prepare(&conn, io_timeout);
        Ok(conn)
    }
}

/// How the client gets its TCP connections: it dials the server, or (in
/// reverse mode) takes the ones the server dialled.
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// Dial this endpoint.
    Dial(Endpoint),
    /// Take connections the server dialled, from `from` once known.
    Callback {
        callback: Arc<Callback>,
        from: Option<IpAddr>,
    },
}

impl Route {
    /// The route to `ep`, or from the server through `callback`.
    pub(crate) fn new(ep: &Endpoint, callback: Option<&Arc<Callback>>) -> Route {
        match callback {
            Some(callback) => Route::Callback {
                callback: callback.clone(),
                from: None,
            },
            None => Route::Dial(ep.clone()),
        }
    }

    /// One TCP connection to the server.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        io_timeout: Duration,
    ) -> Result<TcpStream> {
        match self {
            Route::Dial(ep) => tcp_connect(ep, timeout, io_timeout).await,
            Route::Callback { callback, from } => callback.accept(*from, timeout, io_timeout).await,
        }
    }

    /// The route for the session's data connections, once the control
    /// connection `control` is up: in reverse mode only from its peer.
    pub(crate) fn for_data(&self, control: &TcpStream) -> Route {
        match self {
            Route::Dial(_) => self.clone(),
            Route::Callback { callback, .. } => Route::Callback {
                callback: callback.clone(),
                from: control.peer_addr().ok().map(|a| a.ip().to_canonical()),
            },
        }
    }
}

/// Client side: presents the one-time token, the first control frame.
pub(crate) async fn present_token(
    control: &mut Control,
    token: &Token,
    features: Features,
) -> Result<()> {
    if !features.contains(Features::TOKEN_AUTH) {
        return Err(Error::Protocol(
            "the far end does not take one-time tokens (is its tern older than this one?)".into(),
        ));
    }
    control.send(&ControlMsg::TokenAuth { token: *token }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_as_scp_takes_them() {
        let home = Path::new("/home/ada");
        assert_eq!(scp_path(home, ""), home);
        assert_eq!(scp_path(home, "~"), home);
        assert_eq!(scp_path(home, "data/x"), home.join("data/x"));
        assert_eq!(scp_path(home, "~/data"), home.join("data"));
        assert_eq!(scp_path(home, "/tmp/x"), Path::new("/tmp/x"));
        assert_eq!(scp_path(home, "../bob/x"), home.join("../bob/x"));
    }

    #[tokio::test]
    async fn a_callback_takes_data_connections_only_from_the_control_peer() {
        let cb = Callback::new(TcpListener::bind("127.0.0.1:0").await.unwrap());
        let addr: SocketAddr = ([127, 0, 0, 1], cb.port().unwrap()).into();
        let stranger = tokio::net::TcpSocket::new_v4().unwrap();
        stranger.bind(([127, 0, 0, 2], 0).into()).unwrap();
        let _stranger = stranger.connect(addr).await.unwrap();
        let _peer = TcpStream::connect(addr).await.unwrap();
        let t = Duration::from_secs(5);
        let local = IpAddr::from([127, 0, 0, 1]);
        let got = cb.accept(Some(local), t, t).await.unwrap();
        assert_eq!(got.peer_addr().unwrap().ip(), local);
        let none = cb.accept(Some(local), Duration::from_millis(100), t).await;
        assert!(matches!(none, Err(Error::Connect { .. })), "{none:?}");
        cb.close();
        let started = std::time::Instant::now();
        let closed = cb.accept(None, t, t).await;
        assert!(matches!(closed, Err(Error::Connect { .. })), "{closed:?}");
        assert!(started.elapsed() < t, "a closed callback fails at once");
    }

    #[test]
    fn tokens_compare_by_every_byte() {
        let a: Token = [7; 16];
        let mut b = a;
        assert!(same_token(&a, &b));
        b[15] ^= 1;
        assert!(!same_token(&a, &b));
        b = a;
        b[0] ^= 0x80;
        assert!(!same_token(&a, &b));
    }
}
