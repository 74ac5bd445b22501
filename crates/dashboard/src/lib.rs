//! tern-dashboard: what people and Prometheus look at, served beside the
//! advisor's API on the `--http` listener.
//!
//! - `/` and `/assets/…`: the web dashboard (mesh grid, path pages with
//!   time series and events, the route graph, live transfers), every file
//!   embedded ([`assets`]); the page reads the advisor's API and the live
//!   view below, and draws with vendored libraries.
//! - `/metrics`: Prometheus exposition ([`metrics`]).
//! - `/api/v1/live` and `/api/v1/live/stream`: the daemon's running
//!   sessions, once or as server-sent events every second.
//!
//! Everything here only reads: the dashboard has the API's authorization
//! (none beyond where the listener binds, loopback unless told otherwise).

pub mod assets;
pub mod metrics;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tern_advisor::service::Service;
use tern_engine::server::{LiveSession, LiveSessions, RecentSession};

use crate::metrics::{DaemonCounts, ProbeCounts, Snapshot};

/// Every route this crate serves.
pub const ROUTES: &[&str] = &[
    "/",
    "/assets/{*name}",
    "/metrics",
    "/api/v1/live",
    "/api/v1/live/stream",
];

/// What the dashboard reads.
#[derive(Debug, Clone, Default)]
pub struct Dashboard {
    /// The advisor, when one runs here.
    pub advisor: Option<Service>,
    /// The daemon's sessions, when a daemon runs here.
    pub live: Option<Arc<LiveSessions>>,
}

/// The live view: sessions running now and the daemon's counts.
#[derive(Debug, Clone, Serialize)]
pub struct LiveView {
    /// Whether a daemon runs here at all.
    pub daemon: bool,
    /// Its running sessions.
    pub sessions: Vec<LiveSession>,
    /// The sessions that ended last, newest first.
    pub recent: Vec<RecentSession>,
    /// Sessions completed and failed so far.
    pub completed: u64,
    /// Sessions that failed.
    pub failed: u64,
}

impl Dashboard {
    /// The routes, to merge with the API's.
    pub fn router(self) -> Router {
        Router::new()
            .route(ROUTES[0], get(index))
            .route(ROUTES[1], get(asset))
            .route(ROUTES[2], get(metrics_text))
            .route(ROUTES[3], get(live))
            .route(ROUTES[4], get(live_stream))
            .with_state(self)
    }

    /// What a scrape shows now.
    pub async fn snapshot(&self) -> Snapshot {
        let daemon = self.live.as_ref().map(|l| {
            let refusals = l.refusals();
            DaemonCounts {
                started: LiveSessions::get(&l.started),
                completed: LiveSessions::get(&l.completed),
                failed: LiveSessions::get(&l.failed),
                sent_bytes: LiveSessions::get(&l.bytes_sent),
                received_bytes: LiveSessions::get(&l.bytes_received),
                blocks_retransmitted: LiveSessions::get(&l.blocks_retransmitted),
                sessions_active: l.running() as u64,
                streams_active: l.streams(),
                refused: vec![
                    ("handshakes", refusals.handshakes),
                    ("handshakes_per_address", refusals.handshakes_per_address),
                    ("sessions_per_address", refusals.sessions_per_address),
                    ("handshake_timeout", refusals.handshake_timeouts),
                ],
            }
        });
        let (probes, latest) = match &self.advisor {
            Some(a) => {
                let s = a.schedule();
                let probes = ProbeCounts {
                    runs: s.completed + s.failed,
                    failures: s.failed,
                    targets: s.targets as u64,
                    running: s.busy_workers as u64,
                };
                let latest = a.latest().await.unwrap_or_else(|e| {
                    tracing::warn!("metrics: the archive did not answer: {e}");
                    Vec::new()
                });
                (Some(probes), latest)
            }
            None => (None, Vec::new()),
        };
        Snapshot {
            daemon,
            probes,
            latest,
        }
    }

    /// The live view now.
    pub fn live_view(&self) -> LiveView {
        match &self.live {
            Some(l) => LiveView {
                daemon: true,
                sessions: l.snapshot(),
                recent: l.recent(),
                completed: LiveSessions::get(&l.completed),
                failed: LiveSessions::get(&l.failed),
            },
            None => LiveView {
                daemon: false,
                sessions: Vec::new(),
                recent: Vec::new(),
                completed: 0,
                failed: 0,
            },
        }
    }
}

fn file(a: &assets::Asset) -> Response {
    (
        [
            (header::CONTENT_TYPE, a.content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        a.bytes,
    )
        .into_response()
}

async fn index() -> Response {
    file(&assets::INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match assets::find(&name) {
        Some(a) => file(a),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

async fn metrics_text(State(d): State<Dashboard>) -> Response {
    let text = d.snapshot().await.encode();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn live(State(d): State<Dashboard>) -> Response {
    axum::Json(d.live_view()).into_response()
}

/// How often the live stream sends.
pub const LIVE_EVERY: Duration = Duration::from_secs(1);

async fn live_stream(State(d): State<Dashboard>) -> Response {
    let ticks = tokio::time::interval(LIVE_EVERY);
    let stream = futures_util::stream::unfold((d, ticks), |(d, mut ticks)| async move {
        ticks.tick().await;
        let event = Event::default()
            .event("sessions")
            .json_data(d.live_view())
            .unwrap_or_else(|_| Event::default().comment("unencodable"));
        Some((Ok::<_, Infallible>(event), (d, ticks)))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
