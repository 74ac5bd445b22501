//! What a mesh adds to the archive, on every backend: several advisors
//! opening one archive at once, measurements labelled and read back per
//! site, events, routes and the groups they form, and meshes through the
//! service and the API.

use serde_json::json;
use tern_advisor::mesh::Mesh;
use tern_advisor::model::{Kind, Origin, Sample, TargetSource};
use tern_advisor::service::{AdvisorOptions, Service};
use tern_advisor::store::{EventKind, NewTarget, Store};

use crate::fixtures::{every_db, quick};

fn target(host: &str) -> NewTarget {
    NewTarget {
        host: host.into(),
        port: None,
        address: None,
        source: TargetSource::Api,
        interval_s: 60,
        group: None,
        probes: None,
    }
}

fn route(sig: &[&str]) -> Sample {
    Sample::new(Kind::Route, sig.len() as f64)
        .with("signature", sig)
        .with("reached", true)
        .with("hops", json!([]))
}

#[tokio::test]
async fn three_advisors_open_one_fresh_archive_at_once() {
    for db in every_db().await {
        let opened = tokio::join!(
            Store::open(&db.url, quick()),
            Store::open(&db.url, quick()),
            Store::open(&db.url, quick())
        );
        for s in [opened.0, opened.1, opened.2] {
            let s = s.unwrap_or_else(|e| panic!("{}: {e}", db.name));
            assert_eq!(s.schema_version().await.unwrap(), 4, "{}", db.name);
        }
    }
}

#[tokio::test]
async fn measurements_are_labelled_by_site_and_read_back_per_pair() {
    for db in every_db().await {
        let a = db.open(quick()).await.with_site("a.mesh");
        let c = db.open(quick()).await.with_site("c.mesh");
        a.upsert_target(&target("b.mesh"), 1).await.unwrap();
        for (store, rtt, at) in [(&a, 10.0, 1), (&c, 30.0, 2), (&a, 11.0, 3)] {
            store
                .record(
                    "b.mesh",
                    Origin::Active,
                    "t",
                    &[Sample::rtt_ms(rtt)],
                    at,
                    None,
                )
                .await
                .unwrap();
        }
        let from_a = a
            .pair_series("a.mesh", "b.mesh", Kind::Rtt, 0, i64::MAX, 10)
            .await
            .unwrap();
        let values: Vec<f64> = from_a.iter().map(|m| m.value).collect();
        assert_eq!(values, [10.0, 11.0], "{}", db.name);
        assert!(from_a.iter().all(|m| m.from == "a.mesh"));
        // Advice reads its own site's measurements.
        let own: Vec<f64> = c
            .series("b.mesh", Kind::Rtt, 10)
            .await
            .unwrap()
            .iter()
            .map(|m| m.value)
            .collect();
        assert_eq!(own, [30.0], "{}", db.name);
        let pairs = a.pairs().await.unwrap();
        assert_eq!(pairs.len(), 2, "{}: {pairs:?}", db.name);
        assert_eq!((pairs[0].from.as_str(), pairs[0].count), ("a.mesh", 2));
        // A time range cuts.
        let late = a
            .pair_series("a.mesh", "b.mesh", Kind::Rtt, 2, i64::MAX, 10)
            .await
            .unwrap();
        assert_eq!(late.len(), 1);
    }
}

#[tokio::test]
async fn events_and_newest_routes_per_pair() {
    for db in every_db().await {
        let a = db.open(quick()).await.with_site("a");
        for h in ["b", "c"] {
            a.upsert_target(&target(h), 1).await.unwrap();
        }
        a.record(
            "b",
            Origin::Active,
            "route_udp",
            &[route(&["r1", "b"])],
            1,
            None,
        )
        .await
        .unwrap();
        a.record(
            "b",
            Origin::Active,
            "route_udp",
            &[route(&["r9", "b"])],
            5,
            None,
        )
        .await
        .unwrap();
        a.record(
            "c",
            Origin::Active,
            "route_udp",
            &[route(&["r1", "r2", "c"])],
            2,
            None,
        )
        .await
        .unwrap();
        let routes = a.latest_routes().await.unwrap();
        assert_eq!(routes.len(), 2, "{}", db.name);
        assert_eq!(
            routes[0].details["signature"],
            json!(["r9", "b"]),
            "{}",
            db.name
        );
        a.record_event(
            "b",
            Kind::Route,
            EventKind::RouteChange,
            5,
            &json!({"x": 1}),
        )
        .await
        .unwrap();
        a.record_event("c", Kind::Rtt, EventKind::LevelShift, 7, &json!({}))
            .await
            .unwrap();
        let all = a.events(None, None, 0, 10).await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].event, EventKind::LevelShift, "newest first");
        let to_b = a.events(Some("a"), Some("b"), 0, 10).await.unwrap();
        assert_eq!((to_b.len(), to_b[0].details["x"].as_i64()), (1, Some(1)));
        assert!(a.events(Some("z"), None, 0, 10).await.unwrap().is_empty());
        let last = a
            .last_event("b", Kind::Route, EventKind::RouteChange)
            .await
            .unwrap();
        assert_eq!(last.map(|e| e.at_ms), Some(5));
    }
}

const MESH: &str = r#"{"name": "lab",
  "hosts": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "z"}],
  "groups": [{"name": "abc", "members": ["a", "b", "c"], "tests": ["rtt", "route"], "interval_s": 30}]}"#;

#[tokio::test]
async fn a_mesh_in_the_archive_gives_each_site_its_peers() {
    for db in every_db().await {
        let mut opts = AdvisorOptions::new(db.url.clone());
        opts.site = "a".into();
        let store = db.open(quick()).await.with_site("a");
        let service = Service::new(store.clone(), tern_drs::HostCaps::read(), opts);
        service.put_mesh(&Mesh::parse(MESH).unwrap()).await.unwrap();
        let mine: Vec<String> = tern_advisor::mesh::targets_of_site(&store)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.host)
            .collect();
        assert_eq!(
            mine,
            ["b", "c"],
            "{}: not itself, not z (in no group)",
            db.name
        );
        // Another site sharing the archive reads the same mesh.
        let b = db.open(quick()).await.with_site("b");
        let theirs: Vec<String> = tern_advisor::mesh::targets_of_site(&b)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.host)
            .collect();
        assert_eq!(theirs, ["a", "c"], "{}", db.name);
        let t = store.target("c").await.unwrap().unwrap();
        assert_eq!((t.source, t.interval_s), (TargetSource::Mesh, 30));
        assert_eq!(t.probes, Some(vec!["route".to_string(), "rtt".into()]));
        assert_eq!(service.meshes().await.unwrap().len(), 1);
        store
            .record("c", Origin::Active, "t", &[Sample::rtt_ms(9.0)], 1, None)
            .await
            .unwrap();
        service.delete_mesh("lab").await.unwrap();
        let left = store.targets().await.unwrap();
        assert!(
            left.iter()
                .all(|t| t.source == TargetSource::Discovered && t.probes.is_none()),
            "{}: its hosts age like discovered ones: {left:?}",
            db.name
        );
        assert_eq!(
            store.history("c", None, 10).await.unwrap().len(),
            1,
            "history kept"
        );
        assert!(service.delete_mesh("lab").await.is_err());
        // A target added by hand keeps its settings when a mesh lists it.
        let by_hand = NewTarget {
            interval_s: 7,
            ..target("a")
        };
        store.upsert_target(&by_hand, 2).await.unwrap();
        service.put_mesh(&Mesh::parse(MESH).unwrap()).await.unwrap();
        let a = store.target("a").await.unwrap().unwrap();
        assert_eq!(
            (a.source, a.interval_s, a.probes),
            (TargetSource::Api, 7, None),
            "{}",
            db.name
        );
    }
}

#[tokio::test]
async fn a_route_change_retires_the_advice_measured_on_the_old_route() {
    for db in every_db().await {
        let mut opts = AdvisorOptions::new(db.url.clone());
        opts.site = "a".into();
        let store = db.open(quick()).await.with_site("a");
        let service = Service::new(store.clone(), tern_drs::HostCaps::read(), opts);
        store.upsert_target(&target("b"), 1).await.unwrap();
        let now = tern_advisor::model::now_ms();
        let measure = |rtt: f64, at: i64| {
            let store = store.clone();
            async move {
                for (i, s) in [Sample::rtt_ms(rtt), Sample::capacity_bps(1e9, 1e7)]
                    .into_iter()
                    .enumerate()
                {
                    for k in 0..3 {
                        store
                            .record(
                                "b",
                                Origin::Active,
                                "t",
                                std::slice::from_ref(&s),
                                at + 10 * k + i as i64,
                                None,
                            )
                            .await
                            .unwrap();
                    }
                }
            }
        };
        measure(40.0, now - 9000).await;
        let before = service.advice("b").await.unwrap();
        assert!(
            (before.rtt_ms - 40.0).abs() < 1.0,
            "{}: {before:?}",
            db.name
        );
        store
            .record_event(
                "b",
                Kind::Route,
                EventKind::RouteChange,
                now - 6000,
                &json!({}),
            )
            .await
            .unwrap();
        // Nothing measured on the new route yet: no advice from the old one.
        assert!(
            service.advice("b").await.is_err(),
            "{}: advice from the old route survived its change",
            db.name
        );
        measure(90.0, now - 3000).await;
        let after = service.advice("b").await.unwrap();
        assert!((after.rtt_ms - 90.0).abs() < 1.0, "{}: {after:?}", db.name);
    }
}

#[tokio::test]
async fn a_path_without_numbers_borrows_advice_from_one_that_shares_its_router() {
    for db in every_db().await {
        let mut opts = AdvisorOptions::new(db.url.clone());
        opts.site = "a".into();
        let store = db.open(quick()).await.with_site("a");
        let service = Service::new(store.clone(), tern_drs::HostCaps::read(), opts);
        for h in ["b", "c", "d"] {
            store.upsert_target(&target(h), 1).await.unwrap();
        }
        let now = tern_advisor::model::now_ms();
        let rec = |h: &'static str, s: Sample, at: i64| {
            let store = store.clone();
            async move {
                store
                    .record(h, Origin::Active, "t", &[s], at, None)
                    .await
                    .unwrap()
            }
        };
        rec("b", route(&["gw", "r1", "r2", "b"]), now - 5000).await;
        rec("c", route(&["gw", "r1", "r3", "c"]), now - 5000).await;
        rec("d", route(&["gw", "r7", "d"]), now - 5000).await;
        for i in 0..3 {
            rec("b", Sample::rtt_ms(40.0), now - 4000 + i).await;
            rec("b", Sample::capacity_bps(1e9, 1e7), now - 4000 + i).await;
        }
        let a = service.advice("c").await.unwrap();
        assert_eq!(a.aggregated_from.as_deref(), Some("b"), "{}", db.name);
        assert!(
            a.aggregated_by.as_deref().is_some_and(|g| g.contains("r1")),
            "{:?}",
            a.aggregated_by
        );
        // d shares only the site's gateway with b: no advice to borrow.
        assert!(service.advice("d").await.is_err(), "{}", db.name);
    }
}

#[tokio::test]
async fn an_alert_rule_for_a_bottleneck_group_watches_each_of_its_targets_and_no_other() {
    use tern_advisor::alerts::{AlertConfig, Alerts};
    for db in every_db().await {
        let a = db.open(quick()).await.with_site("a.mesh");
        let grouped = |host: &str| NewTarget {
            group: Some("transatlantic".into()),
            ..target(host)
        };
        for t in [grouped("b.mesh"), grouped("c.mesh"), target("d.mesh")] {
            a.upsert_target(&t, 1).await.unwrap();
        }
        let alerts = Alerts::new(
            AlertConfig::parse(
                r#"{"rules": [{"name": "lossy-group", "group": "transatlantic", "kind": "loss", "above": 1.0}]}"#,
            )
            .unwrap(),
        );
        for host in ["b.mesh", "c.mesh", "d.mesh"] {
            a.record(
                host,
                Origin::Active,
                "t",
                &[Sample::new(Kind::Loss, 2.5)],
                5,
                None,
            )
            .await
            .unwrap();
            alerts
                .after_record(&a, host, &[Kind::Loss], &[])
                .await
                .unwrap();
        }
        let fired: Vec<String> = a
            .events(Some("a.mesh"), None, 0, 100)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.event == EventKind::Alert)
            .map(|e| e.host)
            .collect();
        let mut fired = fired;
        fired.sort();
        assert_eq!(fired, ["b.mesh", "c.mesh"], "{}", db.name);
    }
}
