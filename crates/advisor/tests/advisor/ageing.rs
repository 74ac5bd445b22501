//! Target ageing end to end: a running advisor's background task purges
//! targets from the API and from transfers once they go unused, with
//! their measurements, and never those of the targets file.

use std::time::{Duration, Instant};

use tern_advisor::service::TargetRequest;
use tern_advisor::{Advisor, AdvisorOptions, TargetSource, TransferReport};

use crate::fixtures::{self, quick};

async fn hosts(advisor: &Advisor) -> Vec<String> {
    let targets = advisor.service().targets().await.unwrap();
    targets.into_iter().map(|t| t.host).collect()
}

#[tokio::test]
async fn unused_api_and_discovered_targets_age_out_and_config_ones_stay() {
    let db = fixtures::sqlite();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("targets");
    std::fs::write(&file, "192.0.2.1 3600\n").unwrap();
    let mut opts = AdvisorOptions::new(db.url.clone());
    opts.targets_file = Some(file);
    opts.probes_enabled = false;
    opts.store = quick();
    // Checked every second (a tenth of the age, at least a second); long
    // enough that a busy host adds and lists the targets well within it.
    opts.max_age = Duration::from_secs(6);
    let advisor = Advisor::start(opts, std::future::pending()).await.unwrap();
    let svc = advisor.service();
    let api = TargetRequest {
        host: "192.0.2.2".into(),
        port: None,
        interval_s: None,
        group: None,
    };
    svc.add_target(&api, TargetSource::Api).await.unwrap();
    for host in ["192.0.2.1", "192.0.2.3"] {
        let report: TransferReport =
            serde_json::from_value(serde_json::json!({"host": host, "rtt_ms": 5.0})).unwrap();
        svc.report(&report).await.unwrap();
    }
    assert_eq!(
        hosts(&advisor).await,
        ["192.0.2.1", "192.0.2.2", "192.0.2.3"],
        "fresh targets stay"
    );
    assert_eq!(svc.store().measurement_count().await.unwrap(), 2);
    let until = Instant::now() + Duration::from_secs(30);
    while hosts(&advisor).await.len() > 1 {
        assert!(
            Instant::now() < until,
            "not aged out: {:?}",
            svc.targets().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(hosts(&advisor).await, ["192.0.2.1"]);
    let kept = svc.targets().await.unwrap();
    assert_eq!(kept[0].source, TargetSource::Config);
    // The config target's own measurement stays; the discovered one's went.
    assert_eq!(svc.store().measurement_count().await.unwrap(), 1);
    assert_eq!(svc.history("192.0.2.1", None, 10).await.unwrap().len(), 1);
}
