use super::*;
use proptest::prelude::*;

#[test]
fn admission_rules() {
    let mut a = Admission::new(3, 1000);
    let light1 = a.try_admit("p", Concurrency::Light, 100).unwrap();
    a.try_admit("p", Concurrency::Light, 100).unwrap();
    assert_eq!(
        a.try_admit("p", Concurrency::ExclusivePerPath, 100),
        Err(Refusal::PathBusy)
    );
    let ex = a
        .try_admit("q", Concurrency::ExclusivePerPath, 700)
        .unwrap();
    assert_eq!(
        a.try_admit("q", Concurrency::Light, 1),
        Err(Refusal::PathBusy)
    );
    assert_eq!(
        a.try_admit("r", Concurrency::Light, 1),
        Err(Refusal::NoWorker)
    );
    a.finish(light1);
    assert_eq!(
        a.try_admit("r", Concurrency::Light, 201),
        Err(Refusal::Budget)
    );
    assert_eq!(
        a.try_admit("r", Concurrency::Light, 1001),
        Err(Refusal::NeverFits)
    );
    a.try_admit("r", Concurrency::Light, 100).unwrap();
    assert_eq!(a.load_bps(), 900);
    a.finish(ex);
    assert_eq!(a.load_bps(), 200);
}

#[test]
fn planner_jitters_the_first_run_and_spaces_the_rest() {
    let mut p = Planner::default();
    let mut rng = rand::thread_rng();
    let t0 = Duration::ZERO;
    let jitter = Duration::from_secs(10);
    for i in 0..50 {
        p.ensure(&format!("h{i}"), 0, t0, jitter, &mut rng);
    }
    assert!(p.due(t0 + jitter).len() == 50);
    let early = p.due(Duration::from_secs(5)).len();
    assert!(
        early > 5 && early < 45,
        "jitter spreads first runs: {early} of 50 due by half time"
    );
    p.started("h0", 0);
    assert!(!p.due(jitter).contains(&("h0".to_string(), 0)));
    p.ran("h0", 0, jitter, Duration::from_secs(60));
    assert_eq!(p.last_run("h0", 0), Some(jitter));
    assert!(
        !p.due(jitter + Duration::from_secs(59))
            .contains(&("h0".to_string(), 0))
    );
    assert!(
        p.due(jitter + Duration::from_secs(60))
            .contains(&("h0".to_string(), 0))
    );
    // ensure() leaves an existing slot alone.
    p.ensure("h0", 0, t0, jitter, &mut rng);
    assert_eq!(p.last_run("h0", 0), Some(jitter));
    p.retain_hosts(|h| h == "h1");
    assert_eq!(p.due(Duration::from_secs(1000)).len(), 1);
}

#[test]
fn later_runs_slip_by_at_most_a_tenth_of_the_interval() {
    let mut rng = rand::thread_rng();
    let interval = Duration::from_secs(600);
    let runs: Vec<Duration> = (0..200).map(|_| slipped(interval, &mut rng)).collect();
    assert!(
        runs.iter()
            .all(|r| (540.0..=660.0).contains(&r.as_secs_f64()))
    );
    let (early, late) = (
        runs.iter().filter(|r| r.as_secs() < 580).count(),
        runs.iter().filter(|r| r.as_secs() > 620).count(),
    );
    assert!(early > 10 && late > 10, "{early} early, {late} late of 200");
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        path: u8,
        exclusive: bool,
        load: u64,
    },
    Finish(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, any::<bool>(), 0u64..600).prop_map(|(path, exclusive, load)| Op::Admit {
            path,
            exclusive,
            load
        }),
        (0usize..16).prop_map(Op::Finish),
    ]
}

proptest! {
    #[test]
    fn the_budget_is_never_exceeded_and_exclusive_runs_alone(
        workers in 1usize..8,
        budget in 0u64..1500,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut a = Admission::new(workers, budget);
        let mut ids: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Admit { path, exclusive, load } => {
                    let class = if exclusive { Concurrency::ExclusivePerPath } else { Concurrency::Light };
                    let before = a.load_bps();
                    match a.try_admit(&path.to_string(), class, load) {
                        Ok(id) => ids.push(id),
                        Err(Refusal::Budget) => prop_assert!(before + load > budget),
                        Err(Refusal::NeverFits) => prop_assert!(load > budget),
                        Err(_) => {}
                    }
                }
                Op::Finish(i) => {
                    if !ids.is_empty() {
                        let id = ids.remove(i % ids.len());
                        a.finish(id);
                    }
                }
            }
            prop_assert!(a.load_bps() <= budget);
            prop_assert!(a.running() <= workers);
            for r in &a.running {
                if r.class == Concurrency::ExclusivePerPath {
                    prop_assert_eq!(a.running.iter().filter(|o| o.path == r.path).count(), 1);
                }
            }
        }
    }
}
