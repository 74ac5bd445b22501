//! Socket options every tern TCP connection gets.
//!
//! A peer that vanishes without a word (a cut path, a frozen host) sends
//! no FIN or RST; without these options a transfer would wait forever.
//! `TCP_USER_TIMEOUT` fails a connection whose sent data stays unacknowledged
//! for `io_timeout`, and keepalive probes cover connections with nothing to
//! send (a receiver waiting for blocks).

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

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
