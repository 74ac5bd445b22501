//! Round-trip time without privileges: the time a TCP connect to the
//! daemon's port takes (SYN out, SYN-ACK back) is one round trip.
//!
//! Like Enable's ping, five samples are taken and the first is discarded:
//! it pays for route, neighbour and cache setup along the way. Each
//! connection is closed with a reset at once, so the daemon sees a peer
//! that left before saying anything (logged at debug level only) and no
//! socket lingers in TIME_WAIT here.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::net::TcpSocket;

use crate::estimate::{RttStats, rtt_stats};
use crate::{Error, Result};

/// How to sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RttOptions {
    /// Connects made, the discarded ones included.
    pub samples: usize,
    /// Leading samples discarded.
    pub discard: usize,
    /// Give up on one connect after this long.
    pub timeout: Duration,
    /// Pause between connects.
    pub pause: Duration,
}

impl Default for RttOptions {
    fn default() -> RttOptions {
        RttOptions {
            samples: 5,
            discard: 1,
            timeout: Duration::from_secs(5),
            pause: Duration::from_millis(50),
        }
    }
}

/// A measured round-trip time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rtt {
    /// Where it was measured to.
    pub target: SocketAddr,
    /// Statistics of the kept samples.
    #[serde(flatten)]
    pub stats: RttStats,
    /// The kept samples, ms, in order.
    pub samples_ms: Vec<f64>,
}

/// Measures the round-trip time to a TCP port that accepts connections.
pub async fn rtt(target: SocketAddr, opts: &RttOptions) -> Result<Rtt> {
    if opts.samples <= opts.discard {
        return Err(Error::BadOptions(format!(
            "{} RTT samples with {} discarded leaves none",
            opts.samples, opts.discard
        )));
    }
    let mut kept = Vec::new();
    for i in 0..opts.samples {
        if i > 0 {
            tokio::time::sleep(opts.pause).await;
        }
        let took = connect_time(target, opts.timeout).await?;
        if i >= opts.discard {
            kept.push(took);
        }
    }
    let stats = rtt_stats(&kept).expect("at least one sample kept");
    Ok(Rtt {
        target,
        stats,
        samples_ms: kept.iter().map(|d| d.as_secs_f64() * 1e3).collect(),
    })
}

async fn connect_time(target: SocketAddr, timeout: Duration) -> Result<Duration> {
    let io = |what| move |source| Error::Io { what, source };
    let socket = match target {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(io("creating a TCP socket"))?;
    let started = Instant::now();
    match tokio::time::timeout(timeout, socket.connect(target)).await {
        Ok(Ok(stream)) => {
            let took = started.elapsed();
            // Close with a reset: no FIN exchange, no TIME_WAIT left
            // behind. A zero linger never blocks.
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            drop(stream);
            Ok(took)
        }
        Ok(Err(source)) => Err(Error::Connect {
            addr: target,
            source,
        }),
        Err(_) => Err(Error::Connect {
            addr: target,
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer in {timeout:?}"),
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_rtt_is_small_and_counts_the_kept_samples() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepting = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                drop(s);
            }
        });
        let r = rtt(addr, &RttOptions::default()).await.unwrap();
        accepting.abort();
        assert_eq!(r.stats.samples, 4);
        assert_eq!(r.samples_ms.len(), 4);
        // The median, not the maximum: one connect may wait on a busy host.
        assert!(r.stats.min_ms > 0.0 && r.stats.median_ms < 100.0, "{r:?}");
        assert!(r.stats.min_ms <= r.stats.median_ms && r.stats.median_ms <= r.stats.max_ms);
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connect_error() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let e = rtt(addr, &RttOptions::default()).await.unwrap_err();
        assert!(matches!(e, Error::Connect { .. }), "{e}");
        assert!(e.is_retryable());
    }

    #[tokio::test]
    async fn options_that_keep_no_sample_are_refused() {
        let opts = RttOptions {
            samples: 1,
            ..RttOptions::default()
        };
        let e = rtt("127.0.0.1:9".parse().unwrap(), &opts)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadOptions(_)), "{e}");
    }
}
