//! Running probes: when, how many at once, and how much load.
//!
//! Three parts, the first two pure:
//! - [`Admission`] decides whether a probe may start now: a worker must be
//!   free, the sum of the running probes' loads plus its own must stay
//!   within the budget (bits/s; never exceeded, a property test checks),
//!   and an exclusive probe runs alone on its path (a throughput test and
//!   anything else on the same path would spoil each other) while light
//!   probes share.
//! - [`Planner`] keeps each (target, probe) pair's next due time: the
//!   first one a short random jitter after the target appears (so a
//!   restart or a batch of new targets does not probe everything in the
//!   same instant), then one interval after each run, give or take
//!   [`SLIP`].
//! - [`Scheduler`] runs them: a loop that reads targets from the store,
//!   asks the planner what is due, skips what aggregation (a subnet or
//!   a declared bottleneck group) covers, admits what fits, runs probes as tasks and stores their
//!   samples. [`Scheduler::status`] answers "how busy am I?".

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::aggregate::AggregationPolicy;
use crate::model::{Origin, Target, now_ms};
use crate::probe::{Concurrency, Grant, Probe, ProbeTarget};
use crate::store::Store;

mod planner;
pub use planner::{Planner, SLIP, slipped};

/// Why a probe may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every worker is busy.
    NoWorker,
    /// It would take the load over the budget; wait for others to finish.
    Budget,
    /// An exclusive probe holds the path, or this one needs it alone.
    PathBusy,
    /// Its load alone exceeds the budget: it can never run.
    NeverFits,
}

/// One admitted run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Admitted {
    id: u64,
    path: String,
    class: Concurrency,
    load_bps: u64,
}

/// The admission rules. Pure.
#[derive(Debug, Clone)]
pub struct Admission {
    workers: usize,
    budget_bps: u64,
    running: Vec<Admitted>,
    next_id: u64,
}

impl Admission {
    /// Rules for `workers` concurrent probes within `budget_bps`.
    pub fn new(workers: usize, budget_bps: u64) -> Admission {
        Admission {
            workers: workers.max(1),
            budget_bps,
            running: Vec::new(),
            next_id: 0,
        }
    }

    /// Admits a run on `path` or says why not; the id frees it later.
    pub fn try_admit(
        &mut self,
        path: &str,
        class: Concurrency,
        load_bps: u64,
    ) -> Result<u64, Refusal> {
        if load_bps > self.budget_bps {
            return Err(Refusal::NeverFits);
        }
        let on_path = |r: &&Admitted| r.path == path;
        let path_ok = match class {
            Concurrency::ExclusivePerPath => !self.running.iter().any(|r| on_path(&r)),
            Concurrency::Light => !self
                .running
                .iter()
                .filter(on_path)
                .any(|r| r.class == Concurrency::ExclusivePerPath),
        };
        if !path_ok {
            return Err(Refusal::PathBusy);
        }
        if self.running.len() >= self.workers {
            return Err(Refusal::NoWorker);
        }
        if self.load_bps().saturating_add(load_bps) > self.budget_bps {
            return Err(Refusal::Budget);
        }
        self.next_id += 1;
        self.running.push(Admitted {
            id: self.next_id,
            path: path.to_string(),
            class,
            load_bps,
        });
        Ok(self.next_id)
    }

    /// Frees an admitted run.
    pub fn finish(&mut self, id: u64) {
        self.running.retain(|r| r.id != id);
    }

    /// The load of everything running, bits/s.
    pub fn load_bps(&self) -> u64 {
        self.running.iter().map(|r| r.load_bps).sum()
    }

    /// Runs admitted and not finished.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The budget, bits/s.
    pub fn budget_bps(&self) -> u64 {
        self.budget_bps
    }
}

/// A (target, probe) pair's place in the plan; times are since the
/// scheduler started.
/// How the scheduler runs probes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SchedulerOptions {
    /// Probes running at once, at most.
    pub workers: usize,
    /// Bits/s all running probes together may put on the network.
    pub budget_bps: u64,
    /// A new target's first measurement waits a random time up to this
    /// (or up to its interval, if shorter): seconds, so that advice comes
    /// soon after a target appears, spread a little so that many added at
    /// once do not all start together (the workers and the budget bound
    /// the load anyway).
    pub start_jitter: Duration,
    /// How often the target list is read again from the store (changes
    /// through the API are seen at once).
    pub refresh: Duration,
    /// Aggregation by subnet and by declared bottleneck group.
    pub aggregation: AggregationPolicy,
}

impl Default for SchedulerOptions {
    fn default() -> SchedulerOptions {
        SchedulerOptions {
            workers: 4,
            budget_bps: 100_000_000,
            start_jitter: Duration::from_secs(2),
            refresh: Duration::from_secs(60),
            aggregation: AggregationPolicy::default(),
        }
    }
}

/// A probe run in progress, as the schedule shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningProbe {
    /// Target host.
    pub host: String,
    /// Probe name.
    pub probe: String,
    /// Its concurrency class.
    pub class: Concurrency,
    /// Load granted, bits/s.
    pub load_bps: u64,
    /// Seconds since it started.
    pub running_s: f64,
}

/// A probe that failed, or could not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeProblem {
    /// Target host.
    pub host: String,
    /// Probe name.
    pub probe: String,
    /// What happened.
    pub error: String,
    /// When, ms since the epoch.
    pub at_ms: i64,
}

/// A probe as the schedule lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeInfo {
    /// Its name.
    pub name: String,
    /// Its concurrency class.
    pub class: Concurrency,
}

/// "How busy am I?": the answer of `GET /api/v1/schedule`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleStatus {
    /// Probes that may run at once.
    pub workers: usize,
    /// Probes running now.
    pub busy_workers: usize,
    /// Load budget, bits/s.
    pub budget_bps: u64,
    /// Load of the running probes, bits/s (never above the budget).
    pub load_bps: u64,
    /// `load_bps / budget_bps`.
    pub utilization: f64,
    /// What is running.
    pub running: Vec<RunningProbe>,
    /// Runs due but waiting for a worker, the budget or their path.
    pub waiting: usize,
    /// Seconds until the next run falls due (0 when some are waiting).
    pub next_due_in_s: Option<f64>,
    /// Targets scheduled.
    pub targets: usize,
    /// Probes known.
    pub probes: Vec<ProbeInfo>,
    /// Runs that produced samples.
    pub completed: u64,
    /// Runs that failed.
    pub failed: u64,
    /// Runs skipped because a neighbour in the subnet or bottleneck group
    /// was measured.
    pub skipped_covered: u64,
    /// The latest failures and refusals (at most 20).
    pub recent_problems: Vec<ProbeProblem>,
}

impl ScheduleStatus {
    /// The status before anything ran (or with probes off: no workers).
    pub fn idle(workers: usize, budget_bps: u64, probes: Vec<ProbeInfo>) -> ScheduleStatus {
        ScheduleStatus {
            workers,
            busy_workers: 0,
            budget_bps,
            load_bps: 0,
            utilization: 0.0,
            running: Vec::new(),
            waiting: 0,
            next_due_in_s: None,
            targets: 0,
            probes,
            completed: 0,
            failed: 0,
            skipped_covered: 0,
            recent_problems: Vec::new(),
        }
    }
}

const PROBLEMS_KEPT: usize = 20;

struct Shared {
    status: ScheduleStatus,
    running_since: HashMap<u64, (RunningProbe, Instant)>,
}

/// The running scheduler.
#[derive(Clone)]
pub struct Scheduler {
    /// The status the loop publishes.
    shared: Arc<Mutex<Shared>>,
    /// Wakes the loop when targets changed.
    wake: Arc<Notify>,
    /// Checked after every stored run.
    alerts: Option<crate::alerts::Alerts>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scheduler")
    }
}

fn problem(shared: &Mutex<Shared>, host: &str, probe: &str, error: String) {
    let mut s = shared.lock().expect("schedule status");
    let list = &mut s.status.recent_problems;
    list.push(ProbeProblem {
        host: host.to_string(),
        probe: probe.to_string(),
        error,
        at_ms: now_ms(),
    });
    if list.len() > PROBLEMS_KEPT {
        list.remove(0);
    }
}

/// The probe's view of a target: its stored address, else what its name
/// resolves to now.
async fn probe_target(t: &Target) -> ProbeTarget {
    let mut addrs = Vec::new();
    if let Some(ip) = t.address.as_deref().and_then(|a| a.parse::<IpAddr>().ok()) {
        addrs.push(SocketAddr::new(ip, t.port));
    } else if let Ok(Ok(found)) = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::lookup_host((t.host.as_str(), t.port)),
    )
    .await
    {
        addrs.extend(found);
    }
    ProbeTarget {
        host: t.host.clone(),
        port: t.port,
        addrs,
    }
}

/// What the scheduler knows of its targets and their runs between two
/// turns of its loop.
struct Plan {
    /// Who may run now, within the workers and the budget.
    admission: Admission,
    /// When each (target, probe) is due.
    planner: Planner,
    /// The targets, with how probes see each.
    targets: HashMap<String, (Target, ProbeTarget)>,
}

/// The probe runs under way.
#[derive(Default)]
struct Runs {
    tasks: JoinSet<Finished>,
    /// What each running task holds, to free it should the task panic.
    held: HashMap<tokio::task::Id, Finished>,
}

struct Finished {
    id: u64,
    host: String,
    probe: usize,
    outcome: Result<usize, String>,
    route_changed: bool,
}

impl Scheduler {
    /// Starts the scheduler loop; it stops when `shutdown` completes.
    pub fn spawn(
        store: Store,
        probes: Vec<Arc<dyn Probe>>,
        opts: SchedulerOptions,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Scheduler {
        Self::spawn_with_alerts(store, probes, opts, None, shutdown)
    }

    /// As [`Scheduler::spawn`], checking `alerts` after every stored run.
    pub fn spawn_with_alerts(
        store: Store,
        probes: Vec<Arc<dyn Probe>>,
        opts: SchedulerOptions,
        alerts: Option<crate::alerts::Alerts>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Scheduler {
        let infos = probes
            .iter()
            .map(|p| ProbeInfo {
                name: p.name().to_string(),
                class: p.class(),
            })
            .collect();
        let status = ScheduleStatus::idle(opts.workers.max(1), opts.budget_bps, infos);
        let scheduler = Scheduler {
            shared: Arc::new(Mutex::new(Shared {
                status,
                running_since: HashMap::new(),
            })),
            wake: Arc::new(Notify::new()),
            alerts,
        };
        let looped = scheduler.clone();
        tokio::spawn(async move { looped.run(store, probes, opts, shutdown).await });
        scheduler
    }

    /// Tells the loop the target list changed.
    pub fn targets_changed(&self) {
        self.wake.notify_one();
    }

    /// How busy it is.
    pub fn status(&self) -> ScheduleStatus {
        let s = self.shared.lock().expect("schedule status");
        let mut status = s.status.clone();
        let mut running: Vec<RunningProbe> = s
            .running_since
            .values()
            .map(|(r, since)| RunningProbe {
                running_s: since.elapsed().as_secs_f64(),
                ..r.clone()
            })
            .collect();
        running.sort_by(|a, b| (&a.host, &a.probe).cmp(&(&b.host, &b.probe)));
        status.running = running;
        status
    }

    async fn run(
        self,
        store: Store,
        probes: Vec<Arc<dyn Probe>>,
        opts: SchedulerOptions,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let start = Instant::now();
        let mut plan = Plan {
            admission: Admission::new(opts.workers, opts.budget_bps),
            planner: Planner::default(),
            targets: HashMap::new(),
        };
        let mut runs = Runs::default();
        let mut refreshed: Option<Instant> = None;
        let mut dirty = true;
        tokio::pin!(shutdown);
        loop {
            let now = start.elapsed();
            if dirty || refreshed.is_none_or(|r| r.elapsed() >= opts.refresh) {
                match crate::mesh::targets_of_site(&store).await {
                    Ok(list) => {
                        let mut fresh = HashMap::new();
                        for t in list {
                            let view = match plan.targets.get(&t.host) {
                                Some((old, view))
                                    if old.address == t.address && old.port == t.port =>
                                {
                                    view.clone()
                                }
                                _ => probe_target(&t).await,
                            };
                            fresh.insert(t.host.clone(), (t, view));
                        }
                        plan.targets = fresh;
                        plan.planner.retain_hosts(|h| plan.targets.contains_key(h));
                        let mut rng = rand::thread_rng();
                        for (t, _) in plan.targets.values() {
                            let interval = Duration::from_secs(t.interval_s.max(1));
                            for k in 0..probes.len() {
                                plan.planner.ensure(
                                    &t.host,
                                    k,
                                    now,
                                    opts.start_jitter.min(interval),
                                    &mut rng,
                                );
                            }
                        }
                        refreshed = Some(Instant::now());
                        dirty = false;
                    }
                    Err(e) => {
                        tracing::warn!("scheduler: cannot read targets: {e}");
                        refreshed = Some(Instant::now());
                    }
                }
            }
            let waiting = self.start_due(now, (&store, &probes, &opts), &mut plan, &mut runs);
            {
                let mut s = self.shared.lock().expect("schedule status");
                s.status.busy_workers = plan.admission.running();
                s.status.load_bps = plan.admission.load_bps();
                s.status.utilization = if opts.budget_bps > 0 {
                    plan.admission.load_bps() as f64 / opts.budget_bps as f64
                } else {
                    0.0
                };
                s.status.waiting = waiting;
                s.status.targets = plan.targets.len();
                s.status.next_due_in_s = plan
                    .planner
                    .next_due()
                    .map(|d| d.saturating_sub(now).as_secs_f64());
            }
            let until_due = plan
                .planner
                .next_due()
                .map(|d| d.saturating_sub(start.elapsed()))
                .unwrap_or(opts.refresh)
                .min(opts.refresh)
                .max(Duration::from_millis(if waiting > 0 { 200 } else { 10 }));
            tokio::select! {
                Some(joined) = runs.tasks.join_next_with_id(), if !runs.tasks.is_empty() => {
                    let done = match joined {
                        Ok((_, done)) => done,
                        Err(e) => {
                            // A probe panicked: free what it held.
                            let Some(done) = runs.held.remove(&e.id()) else { continue };
                            Finished { outcome: Err(format!("probe crashed: {e}")), route_changed: false, ..done }
                        }
                    };
                    runs.held.retain(|_, f| f.id != done.id);
                    plan.admission.finish(done.id);
                    let interval = plan.targets
                        .get(&done.host)
                        .map_or(opts.refresh, |(t, _)| Duration::from_secs(t.interval_s.max(1)));
                    let interval = slipped(interval, &mut rand::thread_rng());
                    plan.planner.ran(&done.host, done.probe, start.elapsed(), interval);
                    let name = probes[done.probe].name();
                    if done.route_changed {
                        plan.planner.due_now(&done.host, start.elapsed());
                    }
                    let mut s = self.shared.lock().expect("schedule status");
                    s.running_since.remove(&done.id);
                    match done.outcome {
                        Ok(_) => s.status.completed += 1,
                        Err(e) => {
                            s.status.failed += 1;
                            drop(s);
                            tracing::debug!("probe {name} → {}: {e}", done.host);
                            problem(&self.shared, &done.host, name, e);
                        }
                    }
                }
                () = tokio::time::sleep(until_due) => {}
                () = self.wake.notified() => dirty = true,
                () = &mut shutdown => break,
            }
        }
        runs.tasks.shutdown().await;
    }

    /// Starts every due run that may start; returns how many wait.
    fn start_due(
        &self,
        now: Duration,
        (store, probes, opts): (&Store, &[Arc<dyn Probe>], &SchedulerOptions),
        plan: &mut Plan,
        runs: &mut Runs,
    ) -> usize {
        let mut waiting = 0;
        for (host, k) in plan.planner.due(now) {
            let Some((target, view)) = plan.targets.get(&host) else {
                continue;
            };
            let probe = &probes[k];
            let interval = Duration::from_secs(target.interval_s.max(1));
            let chosen = |tests: &Vec<String>| {
                tests
                    .iter()
                    .any(|t| t == crate::probe::test_name(probe.name()))
            };
            if target.probes.as_ref().is_some_and(|tests| !chosen(tests)) {
                plan.planner.postpone(&host, k, now, interval);
                continue;
            }
            if self.covered(opts, plan, target, k, now, interval) {
                plan.planner.postpone(&host, k, now, interval);
                self.shared
                    .lock()
                    .expect("schedule status")
                    .status
                    .skipped_covered += 1;
                continue;
            }
            if let Err(why) = probe.can_run(view) {
                plan.planner.postpone(&host, k, now, interval);
                problem(
                    &self.shared,
                    &host,
                    probe.name(),
                    format!("cannot run: {why}"),
                );
                continue;
            }
            let load = probe.load_bps(view, opts.budget_bps);
            let id = match plan.admission.try_admit(&host, probe.class(), load) {
                Ok(id) => id,
                Err(Refusal::NeverFits) => {
                    plan.planner.postpone(&host, k, now, interval);
                    problem(
                        &self.shared,
                        &host,
                        probe.name(),
                        format!(
                            "needs {load} bit/s, more than the whole budget of {} bit/s",
                            opts.budget_bps
                        ),
                    );
                    continue;
                }
                Err(_) => {
                    waiting += 1;
                    continue;
                }
            };
            plan.planner.started(&host, k);
            self.shared
                .lock()
                .expect("schedule status")
                .running_since
                .insert(
                    id,
                    (
                        RunningProbe {
                            host: host.clone(),
                            probe: probe.name().to_string(),
                            class: probe.class(),
                            load_bps: load,
                            running_s: 0.0,
                        },
                        Instant::now(),
                    ),
                );
            let (probe, view, store) = (probe.clone(), view.clone(), store.clone());
            let alerts = self.alerts.clone();
            let handle = runs.tasks.spawn(async move {
                let mut route_changed = false;
                let outcome = match probe.run(&view, Grant { load_bps: load }).await {
                    Ok(samples) => {
                        let stored = store
                            .record(
                                &view.host,
                                Origin::Active,
                                probe.name(),
                                &samples,
                                now_ms(),
                                None,
                            )
                            .await
                            .map_err(|e| format!("storing: {e}"));
                        if stored.is_ok() {
                            let found = crate::events::after_record(&store, &view.host, &samples)
                                .await
                                .unwrap_or_else(|e| {
                                    tracing::warn!("events of {}: {e}", view.host);
                                    Default::default()
                                });
                            route_changed = found.route_changed;
                            if let Some(alerts) = &alerts {
                                let kinds: Vec<_> = samples.iter().map(|s| s.kind).collect();
                                let events = found.kinds();
                                let checked =
                                    alerts.after_record(&store, &view.host, &kinds, &events);
                                if let Err(e) = checked.await {
                                    tracing::warn!("alerts of {}: {e}", view.host);
                                }
                            }
                        }
                        stored
                    }
                    Err(e) => Err(e.to_string()),
                };
                Finished {
                    id,
                    host: view.host,
                    probe: k,
                    outcome,
                    route_changed,
                }
            });
            runs.held.insert(
                handle.id(),
                Finished {
                    id,
                    host: host.clone(),
                    probe: k,
                    outcome: Ok(0),
                    route_changed: false,
                },
            );
        }
        waiting
    }

    /// Whether another member of the target's group (subnet or declared
    /// bottleneck group) covers this run.
    fn covered(
        &self,
        opts: &SchedulerOptions,
        Plan {
            targets, planner, ..
        }: &Plan,
        target: &Target,
        probe: usize,
        now: Duration,
        interval: Duration,
    ) -> bool {
        let policy = &opts.aggregation;
        // A mesh asks for every pair: none answers for another.
        if target.source == crate::model::TargetSource::Mesh {
            return false;
        }
        let Some(group) = policy.group_of_target(target) else {
            return false;
        };
        let group_last = targets
            .values()
            .filter(|(t, _)| t.host != target.host)
            .filter(|(t, _)| policy.group_of_target(t).as_ref() == Some(&group))
            .filter_map(|(t, _)| planner.last_run(&t.host, probe))
            .max();
        policy.covered(
            now,
            interval,
            planner.last_run(&target.host, probe),
            group_last,
        )
    }
}

#[cfg(test)]
mod tests;
