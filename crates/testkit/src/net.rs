//! Waiting for a listener, and ports where nothing listens.

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Waits until a TCP connect to `addr` succeeds (something was just
/// started to listen there); fails the test after `timeout`.
#[track_caller]
pub fn wait_until_listening(addr: SocketAddr, timeout: Duration) {
    let until = Instant::now() + timeout;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(_) => return,
            Err(e) => assert!(
                Instant::now() < until,
                "nothing listens on {addr} after {timeout:?} ({e})"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until something listens on TCP `port` where `prefix` runs
/// commands (another network namespace: `netlab --lab L exec B`, `ip
/// netns exec NS`), as `ss -Hltn 'sport = :PORT'` run through it sees;
/// fails the test after `timeout`.
#[track_caller]
pub fn wait_until_listening_via<S: AsRef<OsStr>>(prefix: &[S], port: u16, timeout: Duration) {
    let (program, rest) = prefix.split_first().expect("a command prefix");
    let filter = format!("sport = :{port}");
    let listening = || {
        let out = Command::new(program)
            .args(rest)
            .args(["ss", "-Hltn", &filter])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", program.as_ref()));
        !out.stdout.is_empty()
    };
    let until = Instant::now() + timeout;
    while !listening() {
        let shown: Vec<_> = prefix
            .iter()
            .map(|s| s.as_ref().to_string_lossy())
            .collect();
        assert!(
            Instant::now() < until,
            "nothing listens on port {port} in `{}` after {timeout:?}",
            shown.join(" ")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A loopback address where nothing listens (a port the kernel just gave
/// out and took back): a connect there is refused.
pub fn closed_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
}

/// The port of [`closed_addr`].
pub fn free_port() -> u16 {
    closed_addr().port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_seen_and_a_closed_port_is_not() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        wait_until_listening(l.local_addr().unwrap(), Duration::from_secs(5));
        let closed = closed_addr();
        let waited = std::panic::catch_unwind(|| {
            wait_until_listening(closed, Duration::from_millis(300));
        });
        let why = waited.expect_err("nothing listens there");
        let why = why.downcast_ref::<String>().unwrap();
        assert!(why.contains(&closed.to_string()), "{why}");
    }
}
