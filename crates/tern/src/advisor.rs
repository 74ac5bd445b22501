//! The advisor run by the binary (`tern serve --http`, `tern advisor`):
//! its probes, its archive, and its HTTP listener, which serves the API,
//! the dashboard and `/metrics`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tern_advisor::{Advisor, EngineSweep, EngineThroughput, Probe};
use tern_dashboard::Dashboard;
use tern_engine::server::LiveSessions;

use crate::addr::http_addr;
use crate::cli::AdvisorArgs;
use crate::error::usage;
use crate::options;
use crate::signals::{Stop, stopped};

/// The default probes, and the throughput test and the sweep when asked:
/// `tern perf` runs with the defaults of `tern perf` (trust on first use,
/// in the usual known_hosts).
fn probes(args: &AdvisorArgs) -> Result<Vec<Arc<dyn Probe>>> {
    let mut probes = tern_advisor::service::default_probes();
    if args.probe_throughput <= 0.0 && args.probe_sweep <= 0.0 {
        return Ok(probes);
    }
    let options = options::default_measure_options()?;
    if args.probe_throughput > 0.0 {
        probes.push(Arc::new(EngineThroughput {
            options: options.clone(),
            duration: Duration::from_secs_f64(args.probe_throughput),
        }));
    }
    if args.probe_sweep > 0.0 {
        probes.push(Arc::new(EngineSweep::new(
            options,
            Duration::from_secs_f64(args.probe_sweep),
        )));
    }
    Ok(probes)
}

/// An advisor serving its API.
pub struct Running {
    /// The advisor (for the daemon's session hook).
    pub advisor: Advisor,
    /// Where the API listens.
    pub addr: SocketAddr,
}

/// Starts the advisor and its HTTP listener on `http` (the API, the
/// dashboard and `/metrics`, with the daemon's sessions when `live` is
/// given); both stop with `stop`.
pub async fn start(
    args: &AdvisorArgs,
    http: &str,
    state_dir: &Path,
    live: Option<Arc<LiveSessions>>,
    stop: Stop,
) -> Result<Running> {
    let want = http_addr(http).map_err(usage)?;
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("create the state directory {}", state_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(want)
        .await
        .with_context(|| format!("advisor: cannot listen on {want}"))?;
    let addr = listener.local_addr()?;
    let advisor = Advisor::start_with_probes(
        options::advisor_options(args, state_dir),
        probes(args)?,
        stopped(stop.clone()),
    )
    .await?;
    let service = advisor.service().clone();
    let dashboard = Dashboard {
        advisor: Some(service.clone()),
        live,
    };
    let app = tern_advisor::api::router(service).merge(dashboard.router());
    tokio::spawn(async move {
        if let Err(e) = tern_advisor::api::serve_router(listener, app, stopped(stop)).await {
            tracing::error!("advisor API stopped: {e}");
        }
    });
    Ok(Running { advisor, addr })
}
