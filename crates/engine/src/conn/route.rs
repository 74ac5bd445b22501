//! Where a client's connections go: it dials the server at an
//! [`Endpoint`], or (reverse mode, for a far end behind a firewall that
//! lets only outgoing connections through) it takes the connections the
//! server dials back to a [`Callback`] port. A [`Route`] is either, and
//! every connection of a session, control and data, comes through one.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

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

/// Client side, reverse mode: the port the far end dials, the
/// connections it dialled that wait for a path to ask for them, and the
/// far end's addresses that connections are taken from.
///
/// With several paths the far end dials each of this host's addresses;
/// a connection is taken for the path whose address it arrived at, and
/// one that arrived at another path's address waits for that path.
#[derive(Debug)]
pub struct Callback {
    listener: TcpListener,
    /// Set when the far end is known to be gone: waiting stops.
    closed: watch::Sender<bool>,
    /// Connections that arrived for another path than the one waited for.
    waiting: Mutex<Vec<Arrived>>,
    /// A connection went to `waiting`.
    arrived: Notify,
    /// Whom connections are taken from.
    admit: Mutex<Admit>,
    /// This host's addresses the far end is asked to dial besides the one
    /// it reaches first, one path each.
    paths: Vec<IpAddr>,
}

/// Whom a callback takes connections from: anyone until the control
/// connection came; then, at the control path's address here, only the
/// control connection's peer, and at other paths' addresses that peer and
/// the far end's other addresses.
#[derive(Debug, Default)]
struct Admit {
    /// The control connection's address here, and its peer.
    control: Option<(Option<IpAddr>, Option<IpAddr>)>,
    /// The far end's other addresses.
    others: Vec<IpAddr>,
}

impl Admit {
    fn admits(&self, peer: IpAddr, arrived_at: IpAddr) -> bool {
        let Some((control_at, control_peer)) = self.control else {
            return true;
        };
        let peer = peer.to_canonical();
        control_peer == Some(peer)
            || (control_at != Some(arrived_at) && self.others.contains(&peer))
    }
}

/// A dialled connection not yet taken.
#[derive(Debug)]
struct Arrived {
    conn: TcpStream,
    /// This host's address it arrived at.
    at: IpAddr,
    when: Instant,
}

/// Connections kept waiting for one path at most; older ones are closed.
const MAX_WAITING: usize = 16;

impl Callback {
    /// Takes connections from `listener`.
    pub fn new(listener: TcpListener) -> Callback {
        Callback {
            listener,
            closed: watch::channel(false).0,
            waiting: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            admit: Mutex::new(Admit::default()),
            paths: Vec::new(),
        }
    }

    /// The far end is asked to dial `paths` too (this host's addresses),
    /// one path each.
    pub fn with_paths(mut self, paths: Vec<IpAddr>) -> Callback {
        self.paths = paths.into_iter().map(|ip| ip.to_canonical()).collect();
        self
    }

    /// This host's addresses the far end is asked to dial besides the
    /// first.
    pub fn paths(&self) -> &[IpAddr] {
        &self.paths
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

    /// The control connection came to `at` from `peer`: from now on the
    /// control path takes connections only from `peer` (from nobody when
    /// either is unknown), and the other paths from `peer` and the
    /// addresses [`Callback::allow`] names.
    pub(crate) fn controlled(&self, at: Option<IpAddr>, peer: Option<IpAddr>) {
        let canonical = |ip: Option<IpAddr>| ip.map(|ip| ip.to_canonical());
        self.admit.lock().expect("admit").control = Some((canonical(at), canonical(peer)));
    }

    /// The far end's other addresses, whose connections the other paths
    /// take too.
    pub(crate) fn allow(&self, peers: impl IntoIterator<Item = IpAddr>) {
        let mut admit = self.admit.lock().expect("admit");
        for ip in peers {
            let ip = ip.to_canonical();
            if !admit.others.contains(&ip) {
                admit.others.push(ip);
            }
        }
    }

    /// Whether a connection from `peer` that arrived at `at` is taken.
    fn admits(&self, peer: IpAddr, at: IpAddr) -> bool {
        self.admit.lock().expect("admit").admits(peer, at)
    }

    /// A waiting connection that arrived at `at` (any address when `None`).
    fn take(&self, at: Option<IpAddr>) -> Option<TcpStream> {
        let mut waiting = self.waiting.lock().expect("waiting");
        let i = waiting
            .iter()
            .position(|a| at.is_none_or(|at| at == a.at))?;
        Some(waiting.remove(i).conn)
    }

    /// Keeps `conn`, which arrived at `at`, until its path asks for it.
    fn keep(&self, conn: TcpStream, at: IpAddr) {
        let mut waiting = self.waiting.lock().expect("waiting");
        if waiting.iter().filter(|a| a.at == at).count() >= MAX_WAITING {
            if let Some(oldest) = waiting.iter().position(|a| a.at == at) {
                waiting.remove(oldest);
            }
        }
        waiting.push(Arrived {
            conn,
            at,
            when: Instant::now(),
        });
        drop(waiting);
        self.arrived.notify_waiters();
    }

    /// Closes the connections that arrived at `at`, waiting or still in
    /// the listener's queue: the path they came over is down, and they may
    /// be dead with it.
    pub(crate) fn discard_at(&self, at: IpAddr) {
        let listener = socket2::SockRef::from(&self.listener);
        // The listener is non-blocking: this takes what is queued now.
        while let Ok((socket, peer)) = listener.accept() {
            let queued = socket
                .set_nonblocking(true)
                .and_then(|()| TcpStream::from_std(std::net::TcpStream::from(socket)));
            let (Ok(conn), Some(peer)) = (queued, peer.as_socket()) else {
                continue;
            };
            if let Some(arrived) = arrival(&conn) {
                if arrived != at && self.admits(peer.ip(), arrived) {
                    self.keep(conn, arrived);
                }
            }
        }
        self.waiting.lock().expect("waiting").retain(|a| a.at != at);
    }

    /// Whether a connection arrived at `at` after `since`, looking at those
    /// the far end dialled within `wait` from now.
    pub(crate) async fn arrived_at(&self, at: IpAddr, since: Instant, wait: Duration) -> bool {
        let fresh = |cb: &Callback| {
            cb.waiting
                .lock()
                .expect("waiting")
                .iter()
                .any(|a| a.at == at && a.when > since)
        };
        let gathered = tokio::time::timeout(wait, async {
            loop {
                // A join waiting at the same time may take it from the
                // listener and keep it: that wakes this too.
                let kept = self.arrived.notified();
                tokio::pin!(kept);
                kept.as_mut().enable();
                if fresh(self) {
                    return;
                }
                tokio::select! {
                    accepted = self.listener.accept() => match accepted {
                        Ok((conn, peer)) => {
                            if let Some(local) = arrival(&conn) {
                                if self.admits(peer.ip(), local) {
                                    self.keep(conn, local);
                                }
                            }
                        }
                        // Out of descriptors, say: not in a tight loop.
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    },
                    () = &mut kept => {}
                }
            }
        });
        let _ = gathered.await;
        fresh(self)
    }

    /// The next connection that arrived at `at` (any address when `None`)
    /// from the far end; others are logged and dropped.
    pub(crate) async fn accept(
        &self,
        at: Option<IpAddr>,
        timeout: Duration,
        io_timeout: Duration,
    ) -> Result<TcpStream> {
        let port = self.port().unwrap_or(0);
        let waited = async {
            loop {
                let notified = self.arrived.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Some(conn) = self.take(at) {
                    return Ok::<TcpStream, Error>(conn);
                }
                tokio::select! {
                    accepted = self.listener.accept() => {
                        let (conn, peer) = accepted.map_err(|e| Error::Connect {
                            addr: format!("callback port {port}"),
                            source: e,
                        })?;
                        let Some(arrived) = arrival(&conn) else {
                            continue;
                        };
                        if !self.admits(peer.ip(), arrived) {
                            tracing::warn!(
                                "dropped a connection from {peer}: not the session's peer"
                            );
                            continue;
                        }
                        if at.is_none_or(|at| at == arrived) {
                            return Ok(conn);
                        }
                        self.keep(conn, arrived);
                    }
                    () = &mut notified => {}
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
                    match at {
                        Some(at) => format!("the far end did not connect back to {at} within {timeout:?}"),
                        None => format!("the far end did not connect back within {timeout:?}"),
                    },
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

/// This host's address `conn` arrived at.
fn arrival(conn: &TcpStream) -> Option<IpAddr> {
    conn.local_addr().ok().map(|a| a.ip().to_canonical())
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
    /// Take connections the server dialled: those that arrived at `at`
    /// once the control connection did (the control path's address here).
    Callback {
        callback: Arc<Callback>,
        at: Option<IpAddr>,
    },
}

impl Route {
    /// The route to `ep`, or from the server through `callback`.
    pub fn new(ep: &Endpoint, reach: &Reach) -> Route {
        match reach {
            Reach::Callback(callback) => Route::Callback {
                callback: callback.clone(),
                at: None,
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
            Route::Callback { callback, at } => callback.accept(*at, timeout, io_timeout).await,
        }
    }

    /// The route for the session's data connections, once the control
    /// connection `control` is up: in reverse mode only from its peer (and
    /// the peer's other addresses, [`Callback::allow`]), over its path.
    pub(crate) fn for_data(&self, control: &TcpStream) -> Route {
        match self {
            Route::Dial(_) => self.clone(),
            Route::Callback { callback, .. } => {
                callback.controlled(arrival(control), control.peer_addr().ok().map(|a| a.ip()));
                Route::Callback {
                    callback: callback.clone(),
                    at: arrival(control),
                }
            }
        }
    }

    /// The callback, in reverse mode.
    pub(crate) fn callback(&self) -> Option<&Arc<Callback>> {
        match self {
            Route::Dial(_) => None,
            Route::Callback { callback, .. } => Some(callback),
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
        let local = IpAddr::from([127, 0, 0, 1]);
        cb.controlled(Some(local), Some(local));
        let stranger = tokio::net::TcpSocket::new_v4().unwrap();
        stranger.bind(([127, 0, 0, 2], 0).into()).unwrap();
        let _stranger = stranger.connect(addr).await.unwrap();
        let _peer = TcpStream::connect(addr).await.unwrap();
        let t = Duration::from_secs(5);
        let got = cb.accept(None, t, t).await.unwrap();
        assert_eq!(got.peer_addr().unwrap().ip(), local);
        let none = cb.accept(None, Duration::from_millis(100), t).await;
        assert!(matches!(none, Err(Error::Connect { .. })), "{none:?}");
        cb.close();
        let started = std::time::Instant::now();
        let closed = cb.accept(None, t, t).await;
        assert!(matches!(closed, Err(Error::Connect { .. })), "{closed:?}");
        assert!(started.elapsed() < t, "a closed callback fails at once");
    }

    #[tokio::test]
    async fn each_path_takes_the_connections_that_arrived_at_its_address() {
        let cb = Callback::new(TcpListener::bind("0.0.0.0:0").await.unwrap());
        let port = cb.port().unwrap();
        let (path0, path1) = (IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 3]));
        let t = Duration::from_secs(5);
        let before = Instant::now();
        // Path 1's connection arrives first, while path 0 waits.
        let _one = TcpStream::connect((path1, port)).await.unwrap();
        let _zero = TcpStream::connect((path0, port)).await.unwrap();
        let got = cb.accept(Some(path0), t, t).await.unwrap();
        assert_eq!(got.local_addr().unwrap().ip(), path0);
        assert!(cb.arrived_at(path1, before, Duration::ZERO).await);
        let got = cb.accept(Some(path1), t, t).await.unwrap();
        assert_eq!(got.local_addr().unwrap().ip(), path1);
        // Nothing new at path 1 since; a connection discarded there is gone.
        let since = Instant::now();
        assert!(!cb.arrived_at(path1, since, Duration::from_millis(50)).await);
        let _again = TcpStream::connect((path1, port)).await.unwrap();
        assert!(cb.arrived_at(path1, since, t).await);
        cb.discard_at(path1);
        let none = cb.accept(Some(path1), Duration::from_millis(100), t).await;
        assert!(matches!(none, Err(Error::Connect { .. })), "{none:?}");
        // One still in the listener's queue when the path went down is
        // discarded too: it does not say the path is back.
        let _stale = TcpStream::connect((path1, port)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let since = Instant::now();
        cb.discard_at(path1);
        assert!(
            !cb.arrived_at(path1, since, Duration::from_millis(100))
                .await
        );
    }

    /// A connection to `port` at `to`, from `from`.
    async fn from(from: [u8; 4], to: IpAddr, port: u16) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).unwrap();
        socket.connect(SocketAddr::new(to, port)).await.unwrap()
    }

    #[tokio::test]
    async fn other_paths_take_the_far_ends_other_addresses_and_the_control_path_does_not() {
        let cb = Callback::new(TcpListener::bind("0.0.0.0:0").await.unwrap());
        let port = cb.port().unwrap();
        let (path0, path1) = (IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 3]));
        let (t, short) = (Duration::from_secs(5), Duration::from_millis(100));
        cb.controlled(Some(path0), Some(IpAddr::from([127, 0, 0, 2])));
        // Not the far end's: dropped on every path.
        let _stranger = from([127, 0, 0, 5], path1, port).await;
        assert!(cb.accept(Some(path1), short, t).await.is_err());
        cb.allow([IpAddr::from([127, 0, 0, 5])]);
        // Named by the far end: taken on another path, not on the control's.
        let _zero = from([127, 0, 0, 5], path0, port).await;
        assert!(cb.accept(Some(path0), short, t).await.is_err());
        let _one = from([127, 0, 0, 5], path1, port).await;
        let got = cb.accept(Some(path1), t, t).await.unwrap();
        assert_eq!(got.peer_addr().unwrap().ip(), IpAddr::from([127, 0, 0, 5]));
        // The control connection's peer: taken on both.
        let _control = from([127, 0, 0, 2], path0, port).await;
        assert!(cb.accept(Some(path0), t, t).await.is_ok());
        let _control = from([127, 0, 0, 2], path1, port).await;
        assert!(cb.accept(Some(path1), t, t).await.is_ok());
    }
}
