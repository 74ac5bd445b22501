//! Where a client's connections go: it dials the server at an
//! [`Endpoint`], or (reverse mode, for a far end behind a firewall that
//! lets only outgoing connections through) it takes the connections the
//! server dials back to a [`Callback`] port. A [`Route`] is either, and
//! every connection of a session, control and data, comes through one.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::{Error, Result};

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

/// One TCP connection to `ep` (MPTCP when `mptcp`), trying each of its
/// addresses in turn.
pub(crate) async fn tcp_connect(
    ep: &Endpoint,
    timeout: Duration,
    io_timeout: Duration,
    mptcp: bool,
) -> Result<TcpStream> {
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
        let socket = match crate::conn::net::tcp_socket(a, mptcp) {
            Ok(s) => s,
            Err(e) => {
                // This family may be off on this host: try the next address.
                last = e;
                continue;
            }
        };
        match tokio::time::timeout(timeout, socket.connect(a)).await {
            Ok(Ok(s)) => {
                crate::conn::net::prepare(&s, io_timeout);
                return Ok(s);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
        }
    }
    Err(fail(last))
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
        crate::conn::net::prepare(&conn, io_timeout);
        Ok(conn)
    }
}

/// Which way a client's connections go.
#[derive(Debug, Clone, Default)]
pub enum Reach {
    /// The client dials the daemon.
    #[default]
    Dial,
    /// Reverse mode: the far end dials back to this callback port.
    Callback(Arc<Callback>),
}

/// How the client gets its TCP connections: it dials the server, or (in
/// reverse mode) takes the ones the server dialled.
#[derive(Debug, Clone)]
pub enum Route {
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
    pub fn new(ep: &Endpoint, reach: &Reach) -> Route {
        match reach {
            Reach::Callback(callback) => Route::Callback {
                callback: callback.clone(),
                from: None,
            },
            Reach::Dial => Route::Dial(ep.clone()),
        }
    }

    /// One TCP connection to the server; dialled as MPTCP when `mptcp`.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        io_timeout: Duration,
        mptcp: bool,
    ) -> Result<TcpStream> {
        match self {
            Route::Dial(ep) => tcp_connect(ep, timeout, io_timeout, mptcp).await,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
