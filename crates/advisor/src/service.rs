//! The advisor as a whole: options, the operations the API offers, the
//! feed of completed transfers, the ageing of targets, and starting it.
//!
//! [`Service`] holds the store and does the work behind every route, so
//! the HTTP layer ([`crate::api`]) only translates; the daemon's session
//! hook and `tern cp`'s reports end in the same [`Service::report`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_drs::HostCaps;
use tokio::sync::mpsc;

use crate::Error;
pub use crate::model::{ReportOutcome, TargetRequest};

mod mesh;
use crate::adapters::UdpTrainCapacity;
use crate::advice::{Advice, AdviceConfig, Evidence, OtherPath, advise};
use crate::model::{
    DEFAULT_PORT, Kind, Measurement, Origin, Target, TargetSource, now_ms, validate_host,
};
use crate::probe::{Probe, TcpConnectRtt};
use crate::report::TransferReport;
use crate::scheduler::{ScheduleStatus, Scheduler, SchedulerOptions};
use crate::store::{NewTarget, Store, StoreOptions};
pub use mesh::{MAX_POINTS, PairSeriesAnswer, RouteAnswer};

/// Measurements of one kind read to form an estimate (the estimators use
/// the newest ten after change detection; the rest feeds the detector).
const SERIES_READ: u32 = 100;

/// Everything the advisor can be told.
#[derive(Debug, Clone)]
pub struct AdvisorOptions {
    /// The archive: a PostgreSQL URL, an `sqlite:` URL or an SQLite file.
    pub db: String,
    /// Targets file: one `HOST[:PORT] [INTERVAL_SECS] [group=NAME]` per line.
    pub targets_file: Option<PathBuf>,
    /// Seconds between active measurements of a target unless it says.
    pub default_interval: Duration,
    /// Targets (other than the file's) unused this long are purged.
    pub max_age: Duration,
    /// The probe scheduler.
    pub scheduler: SchedulerOptions,
    /// Run active probes at all.
    pub probes_enabled: bool,
    /// Advice settings.
    pub advice: AdviceConfig,
    /// Store timeouts.
    pub store: StoreOptions,
    /// Largest request body the API reads, bytes.
    pub body_limit: usize,
    /// This advisor's site name: what it measures is labelled with it, and
    /// in a mesh it is the host it measures from (empty: unlabelled).
    pub site: String,
    /// A mesh definition (JSON) to store in the archive at start.
    pub mesh_file: Option<PathBuf>,
    /// Alert rules and their webhook (JSON, see [`crate::alerts`]).
    pub alerts_file: Option<PathBuf>,
}

impl AdvisorOptions {
    /// Defaults for an archive at `db`.
    pub fn new(db: impl Into<String>) -> AdvisorOptions {
        AdvisorOptions {
            db: db.into(),
            targets_file: None,
            default_interval: Duration::from_secs(6 * 3600),
            max_age: Duration::from_secs(30 * 86_400),
            scheduler: SchedulerOptions::default(),
            probes_enabled: true,
            advice: AdviceConfig::default(),
            store: StoreOptions::default(),
            body_limit: 64 << 10,
            site: String::new(),
            mesh_file: None,
            alerts_file: None,
        }
    }
}

/// The operations behind the API.
#[derive(Debug, Clone)]
pub struct Service {
    store: Store,
    caps: Arc<HostCaps>,
    opts: Arc<AdvisorOptions>,
    scheduler: Option<Scheduler>,
    /// Checked after every stored report too.
    alerts: Option<crate::alerts::Alerts>,
    /// A daemon feeds this advisor its completed sessions.
    beside_daemon: Arc<AtomicBool>,
}

/// Whether `host` names this machine: it resolves to an address a socket
/// here can bind.
pub async fn is_own(host: &str) -> bool {
    let Some(ip) = resolve(host).await.and_then(|a| a.parse::<IpAddr>().ok()) else {
        return false;
    };
    std::net::UdpSocket::bind(std::net::SocketAddr::new(ip, 0)).is_ok()
}

/// The address a host name stands for: itself when it is one, else the
/// first it resolves to (within 3 s), else none.
pub async fn resolve(host: &str) -> Option<String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(ip.to_string());
    }
    tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::lookup_host((bare, DEFAULT_PORT)),
    )
    .await
    .ok()?
    .ok()?
    .map(|a| a.ip().to_string())
    .next()
}

impl Service {
    /// A service over an open store, with this host's caps.
    pub fn new(store: Store, caps: HostCaps, opts: AdvisorOptions) -> Service {
        Service {
            store,
            caps: Arc::new(caps),
            opts: Arc::new(opts),
            scheduler: None,
            alerts: None,
            beside_daemon: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The options.
    pub fn options(&self) -> &AdvisorOptions {
        &self.opts
    }

    /// Marks the service as fed by the daemon beside it, which records
    /// every session itself.
    pub fn fed_by_daemon(&self) {
        self.beside_daemon.store(true, Ordering::Relaxed);
    }

    fn changed(&self) {
        if let Some(s) = &self.scheduler {
            s.targets_changed();
        }
    }

    /// Advice for a host as a client at `caller` asks for it: when the
    /// host is the advisor's own (a client asking the advisor beside the
    /// daemon it talks to), the path in question is the one to the caller.
    pub async fn advice_for(&self, host: &str, caller: Option<IpAddr>) -> Result<Advice, Error> {
        validate_host(host)?;
        if let Some(me) = self.caller_instead(host, caller).await {
            let mut a = self.advice(&me).await?;
            a.notes.push(format!(
                "{host} is this advisor's own host: this is the advice for the path to you ({me})"
            ));
            return Ok(a);
        }
        self.advice(host).await
    }

    /// The caller's address, when `host` names this machine.
    async fn caller_instead(&self, host: &str, caller: Option<IpAddr>) -> Option<String> {
        let caller = caller?;
        is_own(host)
            .await
            .then(|| caller.to_canonical().to_string())
    }

    /// Advice for a host (by name or address); from a neighbour in its
    /// subnet or bottleneck group when it has no numbers of its own.
    pub async fn advice(&self, host: &str) -> Result<Advice, Error> {
        validate_host(host)?;
        let target = self.store.find_target(host).await?.ok_or_else(|| {
            Error::NotFound(format!(
                "unknown host {host}: add it with POST /api/v1/targets, or run a transfer with --advisor"
            ))
        })?;
        let now = now_ms();
        let mut advice = self.advice_of(&target, host, now).await?;
        advice.paths = self.other_paths(&target.host, now).await?;
        Ok(advice)
    }

    /// The host's other addresses multi-path transfers went over, each
    /// with its own figures when it has measurements.
    async fn other_paths(&self, host: &str, now: i64) -> Result<Vec<OtherPath>, Error> {
        let mut out = Vec::new();
        for path in self.store.paths_of(host).await? {
            let own = self.advice_from(&path, &path, now).await.ok();
            out.push(OtherPath {
                rtt_ms: own.as_ref().map(|a| a.rtt_ms),
                capacity_bps: own.as_ref().map(|a| a.capacity_bps),
                expected_throughput_bps: own.as_ref().map(|a| a.expected_throughput_bps),
                host: path,
            });
        }
        Ok(out)
    }

    /// Advice for `target` (asked for as `host`), from a neighbour in its
    /// subnet or bottleneck group when it has no numbers of its own.
    async fn advice_of(&self, target: &Target, host: &str, now: i64) -> Result<Advice, Error> {
        // Best effort: a store that is locked for writing can still answer.
        if let Err(e) = self.store.touch(&target.host, now).await {
            tracing::debug!("advisor: not marking {} as used: {e}", target.host);
        }
        let own = self.advice_from(&target.host, host, now).await;
        let Err(Error::NotFound(missing)) = own else {
            return own;
        };
        let policy = &self.opts.scheduler.aggregation;
        let Some(group) = policy.group_of_target(target) else {
            return self.advice_by_route(target, host, now, missing).await;
        };
        let mut neighbours: Vec<Target> = self
            .store
            .targets()
            .await?
            .into_iter()
            .filter(|t| t.host != target.host)
            .filter(|t| policy.group_of_target(t).as_ref() == Some(&group))
            .collect();
        neighbours.sort_by_key(|t| std::cmp::Reverse(t.last_used_ms));
        for n in neighbours {
            if let Ok(mut a) = self.advice_from(&n.host, host, now).await {
                a.notes.push(format!(
                    "no measurements of {host} yet: this is the advice for {}, in the same {group}",
                    n.host
                ));
                a.aggregated_from = Some(n.host);
                a.aggregated_by = Some(group.to_string());
                return Ok(a);
            }
        }
        self.advice_by_route(target, host, now, missing).await
    }

    async fn advice_from(&self, measured: &str, asked: &str, now: i64) -> Result<Advice, Error> {
        // A route change invalidates what was measured on the old route.
        let since = self
            .store
            .last_event(measured, Kind::Route, crate::store::EventKind::RouteChange)
            .await?
            .map_or(i64::MIN, |e| e.at_ms);
        let on_this_route = |v: Vec<Measurement>| -> Vec<Measurement> {
            v.into_iter().filter(|m| m.at_ms >= since).collect()
        };
        let rtt = on_this_route(self.store.series(measured, Kind::Rtt, SERIES_READ).await?);
        let capacity = on_this_route(
            self.store
                .series(measured, Kind::Capacity, SERIES_READ)
                .await?,
        );
        let throughput = on_this_route(
            self.store
                .series(measured, Kind::Throughput, SERIES_READ)
                .await?,
        );
        let ev = Evidence {
            rtt: &rtt,
            capacity: &capacity,
            throughput: &throughput,
        };
        advise(asked, &ev, &self.caps, &self.opts.advice, now)
    }

    /// Measurements of a host, newest first.
    pub async fn history(
        &self,
        host: &str,
        kind: Option<Kind>,
        limit: u32,
    ) -> Result<Vec<Measurement>, Error> {
        validate_host(host)?;
        let target = self
            .store
            .find_target(host)
            .await?
            .ok_or_else(|| Error::NotFound(format!("unknown host {host}")))?;
        self.store
            .history(&target.host, kind, limit.clamp(1, 10_000))
            .await
    }

    /// Every target.
    pub async fn targets(&self) -> Result<Vec<Target>, Error> {
        self.store.targets().await
    }

    /// Adds or updates a target.
    pub async fn add_target(
        &self,
        req: &TargetRequest,
        source: TargetSource,
    ) -> Result<Target, Error> {
        validate_host(&req.host)?;
        if req.port == Some(0) {
            return Err(Error::BadRequest("port 0 cannot be probed".into()));
        }
        let interval = req
            .interval_s
            .unwrap_or(self.opts.default_interval.as_secs());
        if !(1..=366 * 86_400).contains(&interval) {
            return Err(Error::BadRequest(format!(
                "interval_s {interval}: 1 s to a year allowed"
            )));
        }
        if let Some(g) = &req.group {
            crate::model::validate_group(g)?;
        }
        let t = NewTarget {
            host: req.host.clone(),
            port: req.port,
            address: resolve(&req.host).await,
            source,
            interval_s: interval,
            group: req.group.clone(),
            probes: None,
        };
        let target = self.store.upsert_target(&t, now_ms()).await?;
        self.changed();
        Ok(target)
    }

    /// Removes a target and its measurements.
    pub async fn delete_target(&self, host: &str) -> Result<(), Error> {
        validate_host(host)?;
        if !self.store.delete_target(host).await? {
            return Err(Error::NotFound(format!("unknown target {host}")));
        }
        self.changed();
        Ok(())
    }

    /// Records a report a client at `caller` sent. A report about this
    /// machine is about the path to the caller: it is filed under the
    /// caller's address, or left out when the daemon beside this advisor
    /// records its sessions itself (the same transfer would count twice).
    pub async fn report_from(
        &self,
        r: &TransferReport,
        caller: Option<IpAddr>,
    ) -> Result<ReportOutcome, Error> {
        r.extract()?;
        let Some(me) = self.caller_instead(&r.host, caller).await else {
            return self.report(r).await;
        };
        if self.beside_daemon.load(Ordering::Relaxed) {
            return Ok(ReportOutcome {
                host: me,
                stored: 0,
                ignored: vec![
                    "the daemon beside this advisor recorded this transfer itself".into(),
                ],
            });
        }
        let rekeyed = TransferReport {
            host: me,
            port: None,
            ..r.clone()
        };
        self.report(&rekeyed).await
    }

    /// Records what a finished transfer achieved; its far end becomes a
    /// discovered target if it was not one.
    pub async fn report(&self, r: &TransferReport) -> Result<ReportOutcome, Error> {
        let extracted = r.extract()?;
        let existing = self.store.find_target(&r.host).await?;
        let host = existing.as_ref().map_or(r.host.clone(), |t| t.host.clone());
        let discovered = NewTarget {
            host: host.clone(),
            port: r.port,
            address: match &existing {
                Some(t) if t.address.is_some() => t.address.clone(),
                _ => resolve(&r.host).await,
            },
            source: TargetSource::Discovered,
            interval_s: self.opts.default_interval.as_secs(),
            group: None,
            probes: None,
        };
        let stored = self
            .store
            .record(
                &host,
                Origin::Passive,
                &r.producer(),
                &extracted.samples,
                now_ms(),
                Some(&discovered),
            )
            .await?;
        if !r.paths.is_empty() {
            self.store.record_paths(&host, &r.paths, now_ms()).await?;
        }
        if existing.is_none() {
            self.changed();
        }
        self.look_for_events(&host, &extracted.samples).await;
        Ok(ReportOutcome {
            host,
            stored,
            ignored: extracted.ignored,
        })
    }

    /// Events and alerts after a report's samples were stored: best
    /// effort, the report is stored whatever they find.
    async fn look_for_events(&self, host: &str, samples: &[crate::model::Sample]) {
        let found = crate::events::after_record(&self.store, host, samples)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!("events of {host}: {e}");
                Default::default()
            });
        if let Some(alerts) = &self.alerts {
            let kinds: Vec<Kind> = samples.iter().map(|s| s.kind).collect();
            if let Err(e) = alerts
                .after_record(&self.store, host, &kinds, &found.kinds())
                .await
            {
                tracing::warn!("alerts of {host}: {e}");
            }
        }
    }

    /// How busy the scheduler is (an idle status when probes are off).
    pub fn schedule(&self) -> ScheduleStatus {
        match &self.scheduler {
            Some(s) => s.status(),
            None => ScheduleStatus::idle(0, self.opts.scheduler.budget_bps, Vec::new()),
        }
    }

    /// Purges targets unused for longer than the maximum age.
    pub async fn age_out(&self) -> Result<Vec<String>, Error> {
        let before = now_ms() - self.opts.max_age.as_millis().min(i64::MAX as u128) as i64;
        let gone = self.store.purge_unused(before).await?;
        if !gone.is_empty() {
            tracing::info!(
                "advisor: aged out {} unused target(s): {}",
                gone.len(),
                gone.join(" ")
            );
            self.changed();
        }
        Ok(gone)
    }

    /// Loads the targets file: its targets become `config` ones.
    pub async fn load_targets_file(&self, path: &Path) -> Result<usize, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("read targets file {}", path.display()), e))?;
        let entries =
            parse_targets(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        for req in &entries {
            self.add_target(req, TargetSource::Config).await?;
        }
        Ok(entries.len())
    }
}

/// Parses a targets file: one `HOST[:PORT] [INTERVAL_SECS] [group=NAME]`
/// per line (`[v6addr]:PORT` for IPv6 with a port; the interval and the
/// bottleneck group in either order), `#` starts a comment.
pub fn parse_targets(text: &str) -> Result<Vec<TargetRequest>, String> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |msg: String| format!("line {}: {msg}", n + 1);
        let mut words = line.split_whitespace();
        let spec = words.next().expect("not empty");
        let (mut interval_s, mut group) = (None, None);
        for w in words {
            if let Some(name) = w.strip_prefix("group=") {
                if group.is_some() {
                    return Err(at(format!("unexpected '{w}': one group per target")));
                }
                crate::model::validate_group(name).map_err(|e| at(e.to_string()))?;
                group = Some(name.to_string());
            } else if interval_s.is_none() {
                let secs = w
                    .parse::<u64>()
                    .map_err(|_| at(format!("'{w}' is not a number of seconds")))?;
                interval_s = Some(secs);
            } else {
                return Err(at(format!("unexpected '{w}'")));
            }
        }
        let (host, port) = split_host_port(spec).map_err(at)?;
        validate_host(&host).map_err(|e| at(e.to_string()))?;
        out.push(TargetRequest {
            host,
            port,
            interval_s,
            group,
        });
    }
    Ok(out)
}

fn split_host_port(spec: &str) -> Result<(String, Option<u16>), String> {
    let port = |p: &str| p.parse::<u16>().map_err(|_| format!("'{p}' is not a port"));
    if let Some(rest) = spec.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("'{spec}': no closing ]"))?;
        return match after.strip_prefix(':') {
            Some(p) => Ok((host.to_string(), Some(port(p)?))),
            None if after.is_empty() => Ok((host.to_string(), None)),
            None => Err(format!("'{spec}': junk after ]")),
        };
    }
    match spec.matches(':').count() {
        1 => {
            let (h, p) = spec.split_once(':').expect("one colon");
            Ok((h.to_string(), Some(port(p)?)))
        }
        _ => Ok((spec.to_string(), None)),
    }
}

/// A running advisor: the service, its scheduler and its background tasks.
#[derive(Debug, Clone)]
pub struct Advisor {
    service: Service,
    /// Completed transfers waiting to be recorded.
    feed: mpsc::Sender<TransferReport>,
}

/// Completed transfers the feed holds before dropping new ones (the
/// daemon never waits for the advisor).
const FEED_DEPTH: usize = 1024;

impl Advisor {
    /// Opens the store, loads the targets file, and starts the scheduler,
    /// the ageing task and the transfer feed; they stop with `shutdown`.
    pub async fn start(
        opts: AdvisorOptions,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<Advisor, Error> {
        Self::start_with_probes(opts, default_probes(), shutdown).await
    }

    /// As [`Advisor::start`], with these probes.
    pub async fn start_with_probes(
        opts: AdvisorOptions,
        probes: Vec<Arc<dyn Probe>>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<Advisor, Error> {
        if !opts.site.is_empty() {
            validate_host(&opts.site)
                .map_err(|e| Error::Config(format!("--site {}: {e}", opts.site)))?;
        }
        let store = Store::open(&opts.db, opts.store)
            .await?
            .with_site(&opts.site);
        let mut service = Service::new(store.clone(), HostCaps::read(), opts.clone());
        if let Some(path) = &opts.mesh_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Config(format!("reading the mesh {}: {e}", path.display())))?;
            let mesh = crate::mesh::Mesh::parse(&text)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            if !mesh.hosts.iter().any(|h| h.name == opts.site) {
                return Err(Error::Config(format!(
                    "--site {} is not a host of mesh {} ({}): name this site as the mesh does",
                    opts.site,
                    mesh.name,
                    path.display()
                )));
            }
            service.put_mesh(&mesh).await?;
            tracing::info!("advisor: mesh {} from {}", mesh.name, path.display());
        }
        if let Some(path) = &opts.targets_file {
            let n = service.load_targets_file(path).await?;
            tracing::info!("advisor: {n} target(s) from {}", path.display());
        }
        let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
        let stopped = {
            let tx = stop_tx.clone();
            async move {
                shutdown.await;
                let _ = tx.send(());
            }
        };
        tokio::spawn(stopped);
        let until_stop = |tx: &tokio::sync::broadcast::Sender<()>| {
            let mut rx = tx.subscribe();
            async move {
                let _ = rx.recv().await;
            }
        };
        let alerts = match &opts.alerts_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Config(format!("reading the alert rules {}: {e}", path.display()))
                })?;
                let config = crate::alerts::AlertConfig::parse(&text)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
                Some(crate::alerts::Alerts::new(config))
            }
            None => None,
        };
        service.alerts = alerts.clone();
        if let Some(alerts) = alerts.clone() {
            tokio::spawn(crate::alerts::watch_silence(
                alerts,
                store.clone(),
                until_stop(&stop_tx),
            ));
        }
        if opts.probes_enabled && !probes.is_empty() {
            service.scheduler = Some(Scheduler::spawn_with_alerts(
                store,
                probes,
                opts.scheduler,
                alerts,
                until_stop(&stop_tx),
            ));
        }
        let (feed, mut rx) = mpsc::channel::<TransferReport>(FEED_DEPTH);
        let fed = service.clone();
        let stop = until_stop(&stop_tx);
        tokio::spawn(async move {
            tokio::pin!(stop);
            loop {
                tokio::select! {
                    Some(r) = rx.recv() => {
                        if let Err(e) = fed.report(&r).await {
                            tracing::warn!("advisor: transfer with {} not recorded: {e}", r.host);
                        }
                    }
                    () = &mut stop => break,
                }
            }
        });
        let aging = service.clone();
        let stop = until_stop(&stop_tx);
        let every = (opts.max_age / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600));
        tokio::spawn(async move {
            tokio::pin!(stop);
            loop {
                if let Err(e) = aging.age_out().await {
                    tracing::warn!("advisor: ageing targets: {e}");
                }
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = &mut stop => break,
                }
            }
        });
        Ok(Advisor { service, feed })
    }

    /// The service, for the HTTP API.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// Hands a completed transfer to the advisor without waiting; dropped
    /// (and logged) when the advisor is far behind.
    pub fn observe(&self, report: TransferReport) {
        if let Err(e) = self.feed.try_send(report) {
            tracing::warn!("advisor: dropping a transfer report: {e}");
        }
    }

    /// The hook the daemon calls after each completed session: the peer
    /// becomes a discovered target and the session's rate and RTT passive
    /// measurements.
    pub fn session_hook(&self) -> tern_engine::server::SessionHook {
        self.service.fed_by_daemon();
        let advisor = self.clone();
        tern_engine::server::SessionHook::new(move |done| {
            let direction = if done.sent { "send" } else { "receive" };
            let report = TransferReport::from_stats(
                &done.peer.ip().to_canonical().to_string(),
                done.stats,
                "tern serve",
                direction,
            );
            advisor.observe(report);
        })
    }
}

/// The probes the advisor runs when not told otherwise, all light: RTT
/// from TCP connects, bottleneck capacity from UDP packet trains, loss
/// and delay variation each way from UDP echoes, and the route.
/// The throughput test ([`crate::EngineThroughput`]) needs the binary's
/// trust settings, so the binary appends it when asked.
pub fn default_probes() -> Vec<Arc<dyn Probe>> {
    vec![
        Arc::new(TcpConnectRtt::default()),
        Arc::new(UdpTrainCapacity::default()),
        Arc::new(crate::adapters::UdpEchoLoss::default()),
        Arc::new(crate::adapters::UdpTraceRoute::default()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_file_lines() {
        let text = "# data servers\n\
                    dtn1.example.org\n\
                    dtn2.example.org:4848 3600  # hourly\n\
                    \n\
                    [2001:db8::7]:4747\n\
                    2001:db8::8 600\n\
                    192.0.2.9:5000\n\
                    192.0.2.10 group=wan-east 900\n\
                    198.51.100.3:4848 group=wan-east\n";
        let t = parse_targets(text).unwrap();
        assert_eq!(t.len(), 7);
        assert_eq!(
            t[0],
            TargetRequest {
                host: "dtn1.example.org".into(),
                port: None,
                interval_s: None,
                group: None,
            }
        );
        assert_eq!(t[1].port, Some(4848));
        assert_eq!(t[1].interval_s, Some(3600));
        assert_eq!(t[2].host, "2001:db8::7");
        assert_eq!(t[2].port, Some(4747));
        assert_eq!(
            (t[3].host.as_str(), t[3].port, t[3].interval_s),
            ("2001:db8::8", None, Some(600))
        );
        assert_eq!(t[4].port, Some(5000));
        assert_eq!(
            (t[5].interval_s, t[5].group.as_deref()),
            (Some(900), Some("wan-east"))
        );
        assert_eq!(
            (t[6].port, t[6].interval_s, t[6].group.as_deref()),
            (Some(4848), None, Some("wan-east"))
        );
        for (bad, why) in [
            ("h:notaport", "line 1: 'notaport' is not a port"),
            ("h 10 extra", "line 1: unexpected 'extra'"),
            ("h group=a group=b", "line 1: unexpected 'group=b'"),
            ("h group=", "line 1: bad request"),
            ("h group=a/b", "line 1: bad request"),
            ("h ten", "line 1: 'ten' is not a number"),
            ("ok\n[::1", "line 2: '[::1': no closing ]"),
            ("bad/host", "line 1: bad request"),
        ] {
            let e = parse_targets(bad).unwrap_err();
            assert!(e.starts_with(why), "{bad}: {e}");
        }
    }
}

#[cfg(test)]
mod own_tests {
    #[tokio::test]
    async fn own_addresses() {
        assert!(super::is_own("127.0.0.1").await);
        assert!(!super::is_own("192.0.2.1").await);
        assert!(!super::is_own("no.such.host.invalid").await);
    }
}
