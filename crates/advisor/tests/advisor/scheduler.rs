//! The scheduler with fake probes that watch each other (exclusivity, the
//! budget) and with the built-in RTT probe against a real listener.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_advisor::aggregate::AggregationPolicy;
use tern_advisor::probe::TcpConnectRtt;
use tern_advisor::scheduler::{ScheduleStatus, Scheduler, SchedulerOptions};
use tern_advisor::store::{NewTarget, Store};
use tern_advisor::{
    Concurrency, Grant, Kind, Origin, Probe, ProbeFuture, ProbeTarget, Sample, TargetSource,
};

use crate::fixtures::{self, quick};

/// What every fake probe reports to: load and per-path occupancy now,
/// and the worst seen.
#[derive(Default)]
struct Watch {
    load: AtomicU64,
    max_load: AtomicU64,
    running: AtomicUsize,
    max_running: AtomicUsize,
    /// Per path: (light running, exclusive running); any overlap of an
    /// exclusive run with another run on its path is recorded.
    paths: Mutex<std::collections::HashMap<String, (usize, usize)>>,
    overlaps: AtomicUsize,
    runs: AtomicUsize,
}

struct Fake {
    name: &'static str,
    class: Concurrency,
    load: u64,
    takes: Duration,
    watch: Arc<Watch>,
}

impl Probe for Fake {
    fn name(&self) -> &'static str {
        self.name
    }
    fn class(&self) -> Concurrency {
        self.class
    }
    fn load_bps(&self, _: &ProbeTarget, _: u64) -> u64 {
        self.load
    }
    fn run<'a>(&'a self, t: &'a ProbeTarget, grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            assert_eq!(grant.load_bps, self.load);
            let w = &self.watch;
            let load = w.load.fetch_add(self.load, Ordering::SeqCst) + self.load;
            w.max_load.fetch_max(load, Ordering::SeqCst);
            let n = w.running.fetch_add(1, Ordering::SeqCst) + 1;
            w.max_running.fetch_max(n, Ordering::SeqCst);
            {
                let mut paths = w.paths.lock().unwrap();
                let e = paths.entry(t.host.clone()).or_default();
                match self.class {
                    Concurrency::Light => e.0 += 1,
                    Concurrency::ExclusivePerPath => e.1 += 1,
                }
                if e.1 > 1 || (e.1 == 1 && e.0 > 0) {
                    w.overlaps.fetch_add(1, Ordering::SeqCst);
                }
            }
            tokio::time::sleep(self.takes).await;
            {
                let mut paths = w.paths.lock().unwrap();
                let e = paths.get_mut(&t.host).unwrap();
                match self.class {
                    Concurrency::Light => e.0 -= 1,
                    Concurrency::ExclusivePerPath => e.1 -= 1,
                }
            }
            w.running.fetch_sub(1, Ordering::SeqCst);
            w.load.fetch_sub(self.load, Ordering::SeqCst);
            w.runs.fetch_add(1, Ordering::SeqCst);
            Ok(vec![Sample::rtt_ms(1.0)])
        })
    }
}

async fn store_with_targets(hosts: &[(&str, &str, u64)]) -> (fixtures::TestDb, Store) {
    let grouped: Vec<(&str, &str, u64, Option<&str>)> =
        hosts.iter().map(|&(h, a, i)| (h, a, i, None)).collect();
    store_with_grouped_targets(&grouped).await
}

/// Targets with an address, an interval and maybe a bottleneck group.
async fn store_with_grouped_targets(
    hosts: &[(&str, &str, u64, Option<&str>)],
) -> (fixtures::TestDb, Store) {
    let db = fixtures::sqlite();
    let s = db.open(quick()).await;
    for (host, addr, interval, group) in hosts {
        let t = NewTarget {
            host: host.to_string(),
            port: Some(4747),
            address: Some(addr.to_string()),
            source: TargetSource::Api,
            interval_s: *interval,
            group: group.map(str::to_string),
            probes: None,
        };
        s.upsert_target(&t, 1).await.unwrap();
    }
    (db, s)
}

fn opts(workers: usize, budget_bps: u64) -> SchedulerOptions {
    SchedulerOptions {
        workers,
        budget_bps,
        start_jitter: Duration::from_millis(200),
        refresh: Duration::from_millis(500),
        aggregation: AggregationPolicy {
            enabled: false,
            ..AggregationPolicy::default()
        },
    }
}

async fn wait_for(
    s: &Scheduler,
    what: &str,
    done: impl Fn(&ScheduleStatus) -> bool,
) -> ScheduleStatus {
    for _ in 0..200 {
        let st = s.status();
        if done(&st) {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: {:?}", s.status());
}

#[tokio::test]
async fn exclusive_probes_run_alone_on_their_path_and_the_budget_holds() {
    let hosts = [
        ("a", "10.9.1.1", 1),
        ("b", "10.9.2.1", 1),
        ("c", "10.9.3.1", 1),
    ];
    let (_db, store) = store_with_targets(&hosts).await;
    let watch = Arc::new(Watch::default());
    let fake = |name, class, load, ms| -> Arc<dyn Probe> {
        Arc::new(Fake {
            name,
            class,
            load,
            takes: Duration::from_millis(ms),
            watch: watch.clone(),
        })
    };
    let probes = vec![
        fake("throughput", Concurrency::ExclusivePerPath, 600, 300),
        fake("capacity", Concurrency::ExclusivePerPath, 300, 200),
        fake("rtt", Concurrency::Light, 50, 100),
        fake("rtt2", Concurrency::Light, 50, 150),
    ];
    let budget = 1000;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let s = Scheduler::spawn(store.clone(), probes, opts(4, budget), async {
        let _ = stop_rx.await;
    });
    let status = wait_for(&s, "every pair ran twice", |st| st.completed >= 24).await;
    assert_eq!(status.failed, 0, "{status:?}");
    // Small probes may fill the first runs ahead of the biggest (admission
    // keeps no place in line): wait for every probe to have stored for
    // every host, which must come within a few intervals.
    let every_probe = ["capacity", "rtt", "rtt2", "throughput"];
    let all_by = tokio::time::Instant::now() + Duration::from_secs(20);
    for host in ["a", "b", "c"] {
        while producers(&store, host).await != every_probe {
            assert!(
                tokio::time::Instant::now() < all_by,
                "{host}: every probe runs and stores: {:?}",
                producers(&store, host).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let _ = stop_tx.send(());
    assert_eq!(
        watch.overlaps.load(Ordering::SeqCst),
        0,
        "an exclusive run shared its path"
    );
    let max_load = watch.max_load.load(Ordering::SeqCst);
    assert!(
        max_load <= budget,
        "load {max_load} over the budget {budget}"
    );
    assert!(max_load > 600, "probes did run side by side ({max_load})");
    assert!(watch.max_running.load(Ordering::SeqCst) <= 4);
    assert_eq!(status.budget_bps, budget);
    assert_eq!(status.probes.len(), 4);
    assert_eq!(status.targets, 3);
    for host in ["a", "b", "c"] {
        let stored = store.history(host, Some(Kind::Rtt), 100).await.unwrap();
        assert!(stored.iter().all(|m| m.origin == Origin::Active));
    }
}

/// The probes that stored a result for `host`, sorted, once each.
async fn producers(store: &Store, host: &str) -> Vec<String> {
    let stored = store.history(host, Some(Kind::Rtt), 100).await.unwrap();
    let mut producers: Vec<String> = stored.into_iter().map(|m| m.producer).collect();
    producers.sort();
    producers.dedup();
    producers
}

#[tokio::test]
async fn a_probe_over_the_whole_budget_never_runs_and_says_so() {
    let (_db, store) = store_with_targets(&[("a", "10.9.1.1", 1)]).await;
    let watch = Arc::new(Watch::default());
    let big: Arc<dyn Probe> = Arc::new(Fake {
        name: "huge",
        class: Concurrency::ExclusivePerPath,
        load: 2_000,
        takes: Duration::ZERO,
        watch: watch.clone(),
    });
    let s = Scheduler::spawn(store, vec![big], opts(2, 1_000), std::future::pending());
    let st = wait_for(&s, "a refusal", |st| !st.recent_problems.is_empty()).await;
    assert!(
        st.recent_problems[0]
            .error
            .contains("more than the whole budget"),
        "{st:?}"
    );
    assert_eq!(watch.runs.load(Ordering::SeqCst), 0);
}

/// Runs a fast RTT fake against `hosts` (each every second) with
/// `aggregation`, until at least four runs were skipped as covered by a
/// neighbour; each host must still have been measured itself.
async fn measured_once_then_covered(
    hosts: &[(&str, &str, u64, Option<&str>)],
    aggregation: AggregationPolicy,
) {
    let (_db, store) = store_with_grouped_targets(hosts).await;
    let watch = Arc::new(Watch::default());
    let rtt: Arc<dyn Probe> = Arc::new(Fake {
        name: "rtt",
        class: Concurrency::Light,
        load: 1,
        takes: Duration::from_millis(10),
        watch: watch.clone(),
    });
    let mut o = opts(4, 1_000);
    o.aggregation = aggregation;
    let s = Scheduler::spawn(store.clone(), vec![rtt], o, std::future::pending());
    wait_for(&s, "some runs skipped as covered", |st| {
        st.skipped_covered >= 4
    })
    .await;
    for (h, ..) in hosts {
        let own = store.history(h, None, 100).await.unwrap();
        assert!(!own.is_empty(), "{h} measured at least once");
    }
}

#[tokio::test]
async fn subnet_neighbours_are_measured_once_then_covered() {
    // Without aggregation each of 3 targets would run every second; with
    // it, the subnet runs about once per second.
    let hosts = [
        ("n1", "10.7.7.1", 1, None),
        ("n2", "10.7.7.2", 1, None),
        ("n3", "10.7.7.3", 1, None),
    ];
    let subnets = AggregationPolicy {
        recheck_every: 1000,
        ..AggregationPolicy::default()
    };
    measured_once_then_covered(&hosts, subnets).await;
}

#[tokio::test]
async fn a_declared_group_is_measured_like_one_subnet() {
    // Three subnets behind one WAN link: with subnet grouping off, only
    // the declared group can cover them.
    let wan = Some("wan");
    let hosts = [
        ("g1", "10.1.0.1", 1, wan),
        ("g2", "10.2.0.1", 1, wan),
        ("g3", "10.3.0.1", 1, wan),
    ];
    let groups_only = AggregationPolicy {
        enabled: false,
        recheck_every: 1000,
        ..AggregationPolicy::default()
    };
    measured_once_then_covered(&hosts, groups_only).await;
}

#[tokio::test]
async fn the_rtt_probe_measures_a_real_listener() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let db = fixtures::sqlite();
    let store = db.open(quick()).await;
    let t = NewTarget {
        host: "localhost-test".into(),
        port: Some(port),
        address: Some("127.0.0.1".into()),
        source: TargetSource::Config,
        interval_s: 3600,
        group: None,
        probes: None,
    };
    store.upsert_target(&t, 1).await.unwrap();
    let probe: Arc<dyn Probe> = Arc::new(TcpConnectRtt::default());
    let s = Scheduler::spawn(
        store.clone(),
        vec![probe],
        opts(2, 1_000_000),
        std::future::pending(),
    );
    let st = wait_for(&s, "one RTT run", |st| st.completed >= 1).await;
    assert_eq!(st.running.len(), 0);
    assert!(
        st.next_due_in_s.unwrap() > 3000.0,
        "next run an interval later: {st:?}"
    );
    let m = store
        .history("localhost-test", Some(Kind::Rtt), 10)
        .await
        .unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].producer, "rtt_tcp_connect");
    assert!(m[0].value > 0.0, "{}", m[0].value);
    // Loopback is fast: the median (one connect may wait on a busy host,
    // and the mean with it).
    let mut kept: Vec<f64> = m[0].details["samples_ms"].as_array().unwrap()[1..]
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    kept.sort_by(f64::total_cmp);
    assert!(kept[kept.len() / 2] < 50.0, "{}", m[0].details);
    drop(listener);
}

#[tokio::test]
async fn a_target_added_later_is_picked_up_when_told() {
    let (_db, store) = store_with_targets(&[]).await;
    let watch = Arc::new(Watch::default());
    let rtt: Arc<dyn Probe> = Arc::new(Fake {
        name: "rtt",
        class: Concurrency::Light,
        load: 1,
        takes: Duration::ZERO,
        watch: watch.clone(),
    });
    let mut o = opts(1, 1_000);
    o.refresh = Duration::from_secs(3600);
    let s = Scheduler::spawn(store.clone(), vec![rtt], o, std::future::pending());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = NewTarget {
        host: "late".into(),
        port: Some(1),
        address: Some("10.1.1.1".into()),
        source: TargetSource::Api,
        interval_s: 3600,
        group: None,
        probes: None,
    };
    store.upsert_target(&t, 1).await.unwrap();
    s.targets_changed();
    wait_for(&s, "the new target measured", |st| st.completed == 1).await;
    assert_eq!(watch.runs.load(Ordering::SeqCst), 1);
}

/// The runs of [`Fixed`] probes, in order: (target, probe).
type RunLog = Arc<Mutex<Vec<(String, &'static str)>>>;

/// A probe that reports the same samples every time and logs its runs.
struct Fixed {
    name: &'static str,
    samples: Vec<Sample>,
    log: RunLog,
}

impl Probe for Fixed {
    fn name(&self) -> &'static str {
        self.name
    }
    fn class(&self) -> Concurrency {
        Concurrency::Light
    }
    fn load_bps(&self, _: &ProbeTarget, _: u64) -> u64 {
        1
    }
    fn run<'a>(&'a self, t: &'a ProbeTarget, _: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            self.log.lock().unwrap().push((t.host.clone(), self.name));
            Ok(self.samples.clone())
        })
    }
}

#[tokio::test]
async fn a_route_change_has_the_path_measured_again_at_once() {
    let (_db, store) =
        store_with_targets(&[("moved", "10.9.3.1", 3600), ("still", "10.9.3.2", 3600)]).await;
    let route = |sig: &[&str]| {
        Sample::new(Kind::Route, sig.len() as f64)
            .with("signature", sig)
            .with("reached", true)
            .with("hops", serde_json::json!([]))
    };
    // What the archive knew: "moved" went through r1, "still" already
    // through r9, the route every probe now reports.
    let then = tern_advisor::model::now_ms() - 60_000;
    for (host, via) in [("moved", "r1"), ("still", "r9")] {
        store
            .record(
                host,
                Origin::Active,
                "route",
                &[route(&[via, "far"])],
                then,
                None,
            )
            .await
            .unwrap();
    }
    let log = RunLog::default();
    let probes: Vec<Arc<dyn Probe>> = vec![
        Arc::new(Fixed {
            name: "rtt",
            samples: vec![Sample::rtt_ms(5.0)],
            log: log.clone(),
        }),
        Arc::new(Fixed {
            name: "route",
            samples: vec![route(&["r9", "far"])],
            log: log.clone(),
        }),
    ];
    let mut o = opts(1, 1_000);
    o.refresh = Duration::from_secs(3600);
    let s = Scheduler::spawn(store.clone(), probes, o, std::future::pending());
    // A first run of each, then the changed path's probes once more.
    wait_for(&s, "the first runs and the re-runs", |st| st.completed >= 5).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs = log.lock().unwrap().clone();
    let of = |host: &str| -> Vec<&'static str> {
        runs.iter()
            .filter(|(h, _)| h == host)
            .map(|r| r.1)
            .collect()
    };
    // After the route probe that saw the change, every probe of the path
    // ran again, at once (the interval is an hour); the second route run
    // found the same route and nothing more ran.
    let moved = of("moved");
    let seen = moved
        .iter()
        .position(|&p| p == "route")
        .expect("a route run");
    let after: Vec<&str> = moved[seen + 1..].to_vec();
    let mut after_sorted = after.clone();
    after_sorted.sort_unstable();
    assert_eq!(after_sorted, ["route", "rtt"], "runs of moved: {moved:?}");
    let mut still = of("still");
    still.sort_unstable();
    assert_eq!(
        still,
        ["route", "rtt"],
        "a path whose route held waits for its interval"
    );
}
