//! Active measurements as plug-ins.
//!
//! Like Enable's tests (`init`, `can_I_run`, `run`), a probe is a small
//! object the scheduler knows only through [`Probe`]: whether it can run
//! against a target now, how it shares the network (its
//! [`Concurrency`] class and the load it puts on the path), and `run`,
//! which yields named [`Sample`]s (`rtt_ms`, `capacity_bps` with its
//! dispersion, `throughput_bps` with streams and window, …). The
//! scheduler stores them, so a probe neither sees the store nor the
//! schedule; wrapping a measurement from another crate is a few lines
//! ([`crate::adapters`] does it for `tern-probe`'s packet trains and
//! throughput test).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::model::Sample;

/// How a probe shares a path with others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Concurrency {
    /// Loads the path little on average: runs beside other light probes.
    /// RTT probes are, and so are packet trains: each train is a few
    /// milliseconds at line rate and their average stays within the
    /// grant, so a train meeting another light probe disturbs one train,
    /// which the capacity estimate's filters drop.
    Light,
    /// Fills the path for its whole run (a throughput test, a window x
    /// streams sweep): nothing else, light or not, runs on the same path
    /// meanwhile, or both results would be wrong.
    ExclusivePerPath,
}

/// The target as a probe sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// Host name or address, as the target was given.
    pub host: String,
    /// Port to connect to (a tern daemon's).
    pub port: u16,
    /// The addresses it resolved to, first preferred.
    pub addrs: Vec<SocketAddr>,
}

impl ProbeTarget {
    /// The address to measure.
    pub fn addr(&self) -> Result<SocketAddr, ProbeError> {
        self.addrs
            .first()
            .copied()
            .ok_or_else(|| ProbeError::Unreachable(format!("{} did not resolve", self.host)))
    }
}

/// What the scheduler granted a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Bits/s the run may put on the network (what [`Probe::load_bps`]
    /// asked for); a probe that can pace itself should stay below it.
    pub load_bps: u64,
}

/// Why a probe produced nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The target cannot be reached (no address, no route, no answer).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The measurement did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The measurement ran but failed.
    #[error("failed: {0}")]
    Failed(String),
}

/// What [`Probe::run`] returns.
pub type ProbeFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Sample>, ProbeError>> + Send + 'a>>;

/// An active measurement.
pub trait Probe: Send + Sync {
    /// A stable name: stored with every sample, shown in the schedule.
    fn name(&self) -> &'static str;

    /// How it shares a path with other probes.
    fn class(&self) -> Concurrency;

    /// Bits/s it puts on the network while running against `target`, given
    /// the scheduler's whole budget; the scheduler never lets the sum over
    /// running probes exceed the budget.
    fn load_bps(&self, target: &ProbeTarget, budget_bps: u64) -> u64;

    /// Whether it can run against `target` now (Enable's `can_I_run`):
    /// `Err` says why not (no responder there, no privilege, …).
    fn can_run(&self, _target: &ProbeTarget) -> Result<(), String> {
        Ok(())
    }

    /// Runs the measurement.
    fn run<'a>(&'a self, target: &'a ProbeTarget, grant: Grant) -> ProbeFuture<'a>;
}

/// The test a probe is, as a mesh or a target names it: its name up to
/// the first `_` (`rtt_tcp_connect` is `rtt`).
pub fn test_name(probe: &str) -> &str {
    probe.split('_').next().unwrap_or(probe)
}

/// RTT from TCP connection setup, unprivileged: the time `connect()` takes
/// is one round trip (SYN out, SYN-ACK or RST back). Like Enable's ping it
/// takes 5 samples and discards the first, which pays for ARP, route and
/// neighbour lookups; the result is the mean of the rest.
#[derive(Debug, Clone)]
pub struct TcpConnectRtt {
    /// Connections made per run.
    pub samples: usize,
    /// Leading samples discarded.
    pub discard: usize,
    /// Give up on one connection after this long.
    pub timeout: Duration,
    /// Pause between connections.
    pub gap: Duration,
}

impl Default for TcpConnectRtt {
    fn default() -> TcpConnectRtt {
        TcpConnectRtt {
            samples: 5,
            discard: 1,
            timeout: Duration::from_secs(3),
            gap: Duration::from_millis(50),
        }
    }
}

/// Bits/s one TCP handshake probe costs at most: a handful of 60–80 byte
/// segments per connection, a connection every gap (Enable's ping tests
/// were 12 kbit/s each).
const CONNECT_PROBE_LOAD_BPS: u64 = 16_000;

impl TcpConnectRtt {
    /// One connection's round trip; a refused connection counts too (the
    /// RST came back in one round trip).
    async fn once(&self, addr: SocketAddr) -> Result<Duration, ProbeError> {
        let started = Instant::now();
        match tokio::time::timeout(self.timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_conn)) => Ok(started.elapsed()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                Ok(started.elapsed())
            }
            Ok(Err(e)) => Err(ProbeError::Unreachable(format!("{addr}: {e}"))),
            Err(_) => Err(ProbeError::Timeout(self.timeout)),
        }
    }
}

impl Probe for TcpConnectRtt {
    fn name(&self) -> &'static str {
        "rtt_tcp_connect"
    }

    fn class(&self) -> Concurrency {
        Concurrency::Light
    }

    fn load_bps(&self, _target: &ProbeTarget, _budget_bps: u64) -> u64 {
        CONNECT_PROBE_LOAD_BPS
    }

    fn can_run(&self, target: &ProbeTarget) -> Result<(), String> {
        if target.addrs.is_empty() {
            return Err(format!("{} has no address", target.host));
        }
        Ok(())
    }

    fn run<'a>(&'a self, target: &'a ProbeTarget, _grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            let addr = target.addr()?;
            let mut rtts = Vec::with_capacity(self.samples);
            for k in 0..self.samples {
                if k > 0 {
                    tokio::time::sleep(self.gap).await;
                }
                rtts.push(self.once(addr).await?);
            }
            let kept: Vec<f64> = rtts
                .iter()
                .skip(self.discard)
                .map(|d| d.as_secs_f64() * 1e3)
                .collect();
            if kept.is_empty() {
                return Err(ProbeError::Failed("no samples kept".into()));
            }
            let mean = kept.iter().sum::<f64>() / kept.len() as f64;
            let all_ms: Vec<f64> = rtts.iter().map(|d| d.as_secs_f64() * 1e3).collect();
            Ok(vec![
                Sample::rtt_ms(mean)
                    .with("method", "tcp_connect")
                    .with("address", addr.to_string())
                    .with("samples_ms", all_ms)
                    .with("discarded", self.discard),
            ])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(addrs: Vec<SocketAddr>) -> ProbeTarget {
        ProbeTarget {
            host: "t".into(),
            port: addrs.first().map_or(0, |a| a.port()),
            addrs,
        }
    }

    /// The median of the samples an RTT probe kept.
    fn median_ms(details: &serde_json::Value) -> f64 {
        let discarded = details["discarded"].as_u64().unwrap() as usize;
        let mut kept: Vec<f64> = details["samples_ms"].as_array().unwrap()[discarded..]
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        kept.sort_by(f64::total_cmp);
        kept[kept.len() / 2]
    }

    #[tokio::test]
    async fn connect_rtt_to_a_listener_and_to_a_closed_port() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        let probe = TcpConnectRtt::default();
        let grant = Grant { load_bps: 16_000 };
        let s = probe.run(&target(vec![open]), grant).await.unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].kind, crate::model::Kind::Rtt);
        assert!(s[0].value > 0.0, "{}", s[0].value);
        assert_eq!(s[0].details["samples_ms"].as_array().unwrap().len(), 5);
        // Loopback is fast: the median (one connect may wait on a busy
        // host, and the mean with it).
        assert!(median_ms(&s[0].details) < 100.0, "{}", s[0].details);
        assert_eq!(s[0].details["discarded"], 1);
        // A closed port answers with a reset: still one round trip.
        drop(listener);
        let s = probe.run(&target(vec![open]), grant).await.unwrap();
        assert!(s[0].value > 0.0);
    }

    #[tokio::test]
    async fn no_address_cannot_run() {
        let probe = TcpConnectRtt::default();
        let t = target(vec![]);
        assert!(probe.can_run(&t).is_err());
        let e = probe.run(&t, Grant { load_bps: 1 }).await.unwrap_err();
        assert!(matches!(e, ProbeError::Unreachable(_)));
    }

    #[tokio::test]
    async fn a_silent_peer_times_out() {
        // A listener whose accept queue is full drops further SYNs: the
        // next connect hears nothing back.
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        sock.listen(0).unwrap();
        let addr = sock.local_addr().unwrap().as_socket().unwrap();
        let _queued = std::net::TcpStream::connect(addr).unwrap();
        let probe = TcpConnectRtt {
            timeout: Duration::from_millis(300),
            ..TcpConnectRtt::default()
        };
        let e = probe
            .run(&target(vec![addr]), Grant { load_bps: 1 })
            .await
            .unwrap_err();
        assert_eq!(e, ProbeError::Timeout(Duration::from_millis(300)));
    }
}
