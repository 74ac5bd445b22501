//! tern-probe: active measurements of a path to a tern daemon, as plain
//! async functions with typed results.
//!
//! - [`rtt()`]: round-trip time from TCP connects to the daemon's port, no
//!   privileges needed (5 samples, the first discarded, like Enable's ping);
//! - [`capacity()`]: bottleneck capacity in both directions from UDP packet
//!   trains, answered by the [`responder`] that `tern serve` runs on the
//!   same port number;
//! - [`loss()`]: loss, delay variation and reordering in each direction
//!   from a paced stream of UDP echoes to the same responder;
//! - [`throughput()`] and [`sweep()`]: a short `tern perf` through the
//!   engine, and a window × streams grid of them.
//!
//! The estimators ([`estimate`]) and the wire format ([`wire`]) are pure;
//! the responder's logic is sans-I/O. This crate knows nothing of the
//! advisor, which calls it through adapters and owns scheduling and the
//! load budget. `docs/PROBES.md` describes method, load and accuracy.

pub mod capacity;
pub mod estimate;
pub mod loss;
pub mod responder;
pub mod route;
pub mod rtt;
mod sys;
pub mod throughput;

/// The probe packets' wire format, which lives with tern's other wire
/// formats in `tern-proto` (pure, fuzzed).
pub use tern_proto::probe as wire;

use std::net::SocketAddr;

pub use capacity::{Capacity, CapacityOptions, DirectionCapacity, capacity};
pub use loss::{DirectionLoss, Loss, LossOptions, loss};
pub use responder::{ResponderConfig, ResponderStats, UdpResponder, serve_udp};
pub use route::{Hop, Route, RouteOptions, route};
pub use rtt::{Rtt, RttOptions, rtt};
pub use throughput::{Sweep, SweepCell, Throughput, sweep, throughput};

/// Everything a measurement can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The host name did not resolve.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The name.
        host: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A TCP connect was refused or timed out: nothing listens there, or
    /// the path is down.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// The OS error (or a timeout).
        #[source]
        source: std::io::Error,
    },
    /// No probe train was answered: no responder (a daemon run with
    /// `--no-udp-probe`, an older one, a firewall dropping UDP).
    #[error(
        "no answer to UDP probes from {addr} in {waited:?}: no responder there, or UDP is filtered"
    )]
    NoResponder {
        /// Where the probes went.
        addr: SocketAddr,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// Options that cannot work (e.g. a train of one packet).
    #[error("{0}")]
    BadOptions(String),
    /// A local socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The throughput test failed in the engine.
    #[error("throughput test: {0}")]
    Engine(#[from] tern_engine::Error),
}

impl Error {
    /// Worth trying again later: the path or the peer may come back.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::NoResponder { .. } | Error::Resolve { .. } => true,
            Error::Engine(e) => e.is_retryable(),
            Error::BadOptions(_) | Error::Io { .. } => false,
        }
    }
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Resolves `host` and `port` to the addresses to probe, in the resolver's
/// order.
pub async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>> {
    let fail = |source| Error::Resolve {
        host: host.to_string(),
        source,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(fail)?
        .collect();
    if addrs.is_empty() {
        return Err(fail(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no address",
        )));
    }
    Ok(addrs)
}
