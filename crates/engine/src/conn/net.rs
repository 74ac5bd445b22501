//! Socket options every tern TCP connection gets.
//!
//! A peer that vanishes without a word (a cut path, a frozen host) sends
//! no FIN or RST; without these options a transfer would wait forever.
//! `TCP_USER_TIMEOUT` fails a connection whose sent data stays unacknowledged
//! for `io_timeout`, and keepalive probes cover connections with nothing to
//! send (a receiver waiting for blocks).
//!
//! Also where sockets are made: plain TCP, or MPTCP (`IPPROTO_MPTCP`) when
//! asked, whose subflows the kernel's path manager spreads over the paths
//! it is configured with (`ip mptcp endpoint`). An MPTCP listener takes
//! plain TCP connections too; an MPTCP connection to a plain TCP listener
//! falls back to TCP.

use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Default time a silent peer is given before its connection fails.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(60);

/// Applies keepalive and the user timeout; failures are logged, not fatal.
pub fn prepare(tcp: &TcpStream, io_timeout: Duration) {
    let sock = SockRef::from(tcp);
    let probe = (io_timeout / 4).max(Duration::from_secs(1));
    let keepalive = TcpKeepalive::new()
        .with_time(probe)
        .with_interval(probe)
        .with_retries(4);
    if let Err(e) = sock.set_tcp_keepalive(&keepalive) {
        tracing::debug!("cannot enable keepalive: {e}");
    }
    if let Err(e) = sock.set_tcp_user_timeout(Some(io_timeout)) {
        tracing::debug!("cannot set TCP_USER_TIMEOUT: {e}");
    }
    // Keep little unsent data in the kernel: a stream worker then asks for
    // its next block only when its connection is really sending, which is
    // what makes faster streams carry more, and a perf deadline is not
    // followed by seconds of queued data.
    use std::os::fd::AsRawFd;
    if let Err(e) = tern_drs::socket::set_notsent_lowat(tcp.as_raw_fd(), NOTSENT_LOWAT) {
        tracing::debug!("cannot set TCP_NOTSENT_LOWAT: {e}");
    }
}

/// Unsent bytes a data socket may hold: two default blocks.
pub const NOTSENT_LOWAT: u32 = 2 << 20;

/// A TCP socket of `addr`'s family, MPTCP when `mptcp`.
pub fn tcp_socket(addr: SocketAddr, mptcp: bool) -> std::io::Result<TcpSocket> {
    if !mptcp {
        return if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        };
    }
    Ok(TcpSocket::from_std_stream(mptcp_socket(addr)?.into()))
}

/// A non-blocking MPTCP socket of `addr`'s family.
fn mptcp_socket(addr: SocketAddr) -> std::io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(Protocol::MPTCP),
    )
    .map_err(no_mptcp)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// A listener on `addr` (address reuse on, as tokio's own), taking MPTCP
/// connections as well as TCP ones when `mptcp`.
pub async fn listen(addr: SocketAddr, mptcp: bool) -> std::io::Result<TcpListener> {
    if !mptcp {
        return TcpListener::bind(addr).await;
    }
    let socket = mptcp_socket(addr)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// Says what a refused `IPPROTO_MPTCP` socket means.
fn no_mptcp(e: std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(libc::EPROTONOSUPPORT | libc::ENOPROTOOPT | libc::EINVAL) => std::io::Error::new(
            e.kind(),
            format!("this kernel offers no MPTCP ({e}); see sysctl net.mptcp.enabled"),
        ),
        _ => e,
    }
}

/// Whether `tcp` is an MPTCP connection still (not fallen back to plain
/// TCP), and how many subflows it has besides the first.
pub fn mptcp_subflows(tcp: &TcpStream) -> Option<u8> {
    use std::os::fd::AsRawFd;
    tern_drs::socket::mptcp_subflows(tcp.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_mptcp_listener_takes_mptcp_and_plain_tcp_connections() {
        let listener = match listen("127.0.0.1:0".parse().unwrap(), true).await {
            Ok(l) => l,
            Err(e) => {
                assert!(e.to_string().contains("MPTCP"), "{e}");
                eprintln!("skipped: {e}");
                return;
            }
        };
        let addr = listener.local_addr().unwrap();
        let mptcp = tcp_socket(addr, true).unwrap().connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert_eq!(mptcp_subflows(&mptcp), Some(0), "MPTCP, one subflow");
        assert_eq!(mptcp_subflows(&accepted), Some(0));
        let plain = tcp_socket(addr, false)
            .unwrap()
            .connect(addr)
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert_eq!(mptcp_subflows(&plain), None, "plain TCP");
        assert_eq!(mptcp_subflows(&accepted), None, "fell back to TCP");
    }
}
