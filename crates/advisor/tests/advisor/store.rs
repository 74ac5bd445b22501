//! The store suite: every query on every backend.

use std::time::Duration;

use sqlx::Connection;
use tern_advisor::store::{NewTarget, Store, StoreOptions};
use tern_advisor::{Error, Kind, Origin, Sample, TargetSource};

use crate::fixtures::{self, Relay, every_db, quick};

fn target(host: &str, source: TargetSource, port: u16) -> NewTarget {
    NewTarget {
        host: host.into(),
        port: Some(port),
        address: None,
        source,
        interval_s: 3600,
        group: None,
        probes: None,
    }
}

#[tokio::test]
async fn migrations_run_once_and_reopen_cleanly() {
    for db in every_db().await {
        let s = db.open(quick()).await;
        assert_eq!(s.schema_version().await.unwrap(), 4, "{}", db.name);
        s.upsert_target(&target("a", TargetSource::Api, 1), 1)
            .await
            .unwrap();
        s.close().await;
        let again = db.open(quick()).await;
        assert_eq!(again.schema_version().await.unwrap(), 4, "{}", db.name);
        assert_eq!(
            again.targets().await.unwrap().len(),
            1,
            "{}: data survives",
            db.name
        );
    }
}

#[tokio::test]
async fn a_stronger_source_wins_and_use_is_remembered() {
    for db in every_db().await {
        let s = db.open(quick()).await;
        let n = db.name;
        let t = s
            .upsert_target(&target("h", TargetSource::Discovered, 4747), 100)
            .await
            .unwrap();
        assert_eq!(
            (t.source, t.port, t.added_ms, t.last_used_ms),
            (TargetSource::Discovered, 4747, 100, 100),
            "{n}"
        );
        // The API's settings replace what discovery guessed.
        let t = s
            .upsert_target(&target("h", TargetSource::Api, 5000), 200)
            .await
            .unwrap();
        assert_eq!(
            (t.source, t.port, t.last_used_ms),
            (TargetSource::Api, 5000, 200),
            "{n}"
        );
        // Discovery again: the port stays the API's, the use is recorded.
        let mut d = target("h", TargetSource::Discovered, 4747);
        d.address = Some("192.0.2.5".into());
        let t = s.upsert_target(&d, 300).await.unwrap();
        assert_eq!(
            (t.source, t.port, t.last_used_ms),
            (TargetSource::Api, 5000, 300),
            "{n}"
        );
        assert_eq!(t.address.as_deref(), Some("192.0.2.5"), "{n}");
        assert_eq!(t.added_ms, 100, "{n}");
        // Config beats the API; an older timestamp never moves last use back.
        let t = s
            .upsert_target(&target("h", TargetSource::Config, 6000), 250)
            .await
            .unwrap();
        assert_eq!(
            (t.source, t.port, t.last_used_ms),
            (TargetSource::Config, 6000, 300),
            "{n}"
        );
        s.touch("h", 400).await.unwrap();
        assert_eq!(
            s.target("h").await.unwrap().unwrap().last_used_ms,
            400,
            "{n}"
        );
        // Found by its address too.
        assert_eq!(
            s.find_target("192.0.2.5").await.unwrap().unwrap().host,
            "h",
            "{n}"
        );
        assert!(s.find_target("192.0.2.6").await.unwrap().is_none(), "{n}");
        // Bad host names never reach the table.
        let bad = s
            .upsert_target(&target("a b", TargetSource::Api, 1), 1)
            .await;
        assert!(matches!(bad, Err(Error::BadRequest(_))), "{n}");
    }
}

#[tokio::test]
async fn measurements_come_back_in_order_by_kind_and_limit() {
    for db in every_db().await {
        let s = db.open(quick()).await;
        let n = db.name;
        s.upsert_target(&target("h", TargetSource::Api, 1), 1)
            .await
            .unwrap();
        for i in 0..5 {
            let samples = [
                Sample::rtt_ms(10.0 + f64::from(i)),
                Sample::capacity_bps(1e9, 1e7).with("i", i),
            ];
            let stored = s
                .record(
                    "h",
                    Origin::Active,
                    "test",
                    &samples,
                    1000 + i64::from(i),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(stored, 2);
        }
        let all = s.history("h", None, 100).await.unwrap();
        assert_eq!(all.len(), 10, "{n}");
        assert!(
            all.windows(2).all(|w| w[0].at_ms >= w[1].at_ms),
            "{n}: newest first"
        );
        let rtt = s.history("h", Some(Kind::Rtt), 3).await.unwrap();
        assert_eq!(
            rtt.iter().map(|m| m.value).collect::<Vec<_>>(),
            [14.0, 13.0, 12.0],
            "{n}"
        );
        assert_eq!(rtt[0].unit, "ms", "{n}");
        assert_eq!(rtt[0].origin, Origin::Active, "{n}");
        assert_eq!(rtt[0].producer, "test", "{n}");
        let series = s.series("h", Kind::Capacity, 100).await.unwrap();
        assert_eq!(series.len(), 5, "{n}");
        assert_eq!(series[0].details["i"], 0, "{n}: oldest first");
        assert_eq!(series[4].details["dispersion_bps"], 1e7, "{n}");
        assert_eq!(s.measurement_count().await.unwrap(), 10, "{n}");
    }
}

#[tokio::test]
async fn records_are_all_or_nothing() {
    for db in every_db().await {
        let s = db.open(quick()).await;
        let n = db.name;
        // Unknown target: nothing stored.
        let e = s
            .record(
                "nobody",
                Origin::Passive,
                "t",
                &[Sample::rtt_ms(1.0)],
                1,
                None,
            )
            .await;
        assert!(matches!(e, Err(Error::NotFound(_))), "{n}: {e:?}");
        // One bad sample spoils the lot.
        let discovered = target("d", TargetSource::Discovered, 4747);
        let e = s
            .record(
                "d",
                Origin::Passive,
                "t",
                &[Sample::rtt_ms(1.0), Sample::rtt_ms(-1.0)],
                1,
                Some(&discovered),
            )
            .await;
        assert!(matches!(e, Err(Error::BadRequest(_))), "{n}: {e:?}");
        assert_eq!(s.measurement_count().await.unwrap(), 0, "{n}");
        assert!(
            s.target("d").await.unwrap().is_none(),
            "{n}: no target either"
        );
        // Discovery and samples together.
        s.record(
            "d",
            Origin::Passive,
            "t",
            &[Sample::rtt_ms(1.0)],
            1,
            Some(&discovered),
        )
        .await
        .unwrap();
        assert_eq!(
            s.target("d").await.unwrap().unwrap().source,
            TargetSource::Discovered,
            "{n}"
        );
        assert_eq!(s.measurement_count().await.unwrap(), 1, "{n}");
    }
}

#[tokio::test]
async fn deleting_and_ageing_out_remove_measurements_too() {
    for db in every_db().await {
        let s = db.open(quick()).await;
        let n = db.name;
        for (host, source, used) in [
            ("old-api", TargetSource::Api, 10),
            ("old-found", TargetSource::Discovered, 10),
            ("old-config", TargetSource::Config, 10),
            ("fresh", TargetSource::Discovered, 1000),
        ] {
            s.upsert_target(&target(host, source, 1), used)
                .await
                .unwrap();
            s.record(
                host,
                Origin::Active,
                "t",
                &[Sample::rtt_ms(5.0)],
                used,
                None,
            )
            .await
            .unwrap();
        }
        let gone = s.purge_unused(500).await.unwrap();
        assert_eq!(gone, ["old-api", "old-found"], "{n}");
        let left: Vec<String> = s
            .targets()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.host)
            .collect();
        assert_eq!(left, ["fresh", "old-config"], "{n}");
        assert_eq!(s.measurement_count().await.unwrap(), 2, "{n}");
        assert!(s.delete_target("fresh").await.unwrap(), "{n}");
        assert!(!s.delete_target("fresh").await.unwrap(), "{n}");
        assert_eq!(s.measurement_count().await.unwrap(), 1, "{n}");
    }
}

#[tokio::test]
async fn concurrent_writers_all_land() {
    for db in every_db().await {
        // The default busy timeout: writers queue for SQLite's one lock.
        let s = db.open(StoreOptions::default()).await;
        s.upsert_target(&target("h", TargetSource::Api, 1), 1)
            .await
            .unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..8 {
            let s = s.clone();
            tasks.spawn(async move {
                for i in 0..10 {
                    let host = format!("w{w}");
                    let t = NewTarget {
                        host: host.clone(),
                        ..target("x", TargetSource::Discovered, 1)
                    };
                    s.record(
                        &host,
                        Origin::Passive,
                        "t",
                        &[Sample::rtt_ms(1.0 + f64::from(i))],
                        i64::from(i),
                        Some(&t),
                    )
                    .await
                    .unwrap();
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        assert_eq!(s.measurement_count().await.unwrap(), 80, "{}", db.name);
        assert_eq!(s.targets().await.unwrap().len(), 9, "{}", db.name);
    }
}

/// A fresh SQLite archive that knows the target `h`.
async fn sqlite_knowing_h() -> (fixtures::TestDb, Store) {
    let db = fixtures::sqlite();
    let s = db.open(quick()).await;
    s.upsert_target(&target("h", TargetSource::Api, 1), 1)
        .await
        .unwrap();
    (db, s)
}

#[tokio::test]
async fn sqlite_is_in_wal_mode_and_a_locked_database_is_unavailable_then_recovers() {
    let (db, s) = sqlite_knowing_h().await;
    s.record("h", Origin::Active, "t", &[Sample::rtt_ms(1.0)], 1, None)
        .await
        .unwrap();
    let path = db.sqlite_path().unwrap();
    assert!(
        path.with_file_name("advisor.db-wal").exists(),
        "a WAL file beside the database"
    );
    // Another process holds the write lock.
    let url = format!("sqlite://{}", path.display());
    let mut other = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut other)
        .await
        .unwrap();
    let e = s
        .record("h", Origin::Active, "t", &[Sample::rtt_ms(2.0)], 2, None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    assert!(e.is_retryable());
    // Readers still read (WAL).
    assert_eq!(s.history("h", None, 10).await.unwrap().len(), 1);
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    s.record("h", Origin::Active, "t", &[Sample::rtt_ms(3.0)], 3, None)
        .await
        .unwrap();
    let values: Vec<f64> = s
        .series("h", Kind::Rtt, 10)
        .await
        .unwrap()
        .iter()
        .map(|m| m.value)
        .collect();
    assert_eq!(values, [1.0, 3.0], "the refused write left nothing behind");
}

#[tokio::test]
async fn an_sqlite_file_moved_away_is_unavailable_not_recreated_and_recovers() {
    let (db, s) = sqlite_knowing_h().await;
    let path = db.sqlite_path().unwrap();
    let away = path.with_extension("away");
    std::fs::rename(&path, &away).unwrap();
    let e = s
        .record("h", Origin::Active, "t", &[Sample::rtt_ms(1.0)], 1, None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    assert!(matches!(s.targets().await, Err(Error::Unavailable(_))));
    assert!(!path.exists(), "no empty archive was created in its place");
    std::fs::rename(&away, &path).unwrap();
    s.record("h", Origin::Active, "t", &[Sample::rtt_ms(2.0)], 2, None)
        .await
        .unwrap();
    assert_eq!(s.targets().await.unwrap().len(), 1, "the same archive");
    assert_eq!(s.measurement_count().await.unwrap(), 1);
}

#[tokio::test]
async fn postgres_gone_is_unavailable_and_the_store_recovers() {
    let test = "postgres_gone_is_unavailable_and_the_store_recovers";
    let Some((relay, url, upstream)) = fixtures::relayed_postgres(test).await else {
        return;
    };
    let via = relay.addr;
    let s = Store::open(&url, quick()).await.unwrap();
    s.upsert_target(&target("h", TargetSource::Api, 1), 1)
        .await
        .unwrap();
    relay.stop().await;
    let started = std::time::Instant::now();
    let e = s.targets().await.unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    let e = s
        .record("h", Origin::Active, "t", &[Sample::rtt_ms(1.0)], 1, None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "fails within the acquire timeout"
    );
    // The database comes back on the same address.
    let _back = Relay::start(via, upstream).await;
    let recovered = fixtures::within_5_s(async || {
        s.record("h", Origin::Active, "t", &[Sample::rtt_ms(2.0)], 2, None)
            .await
            .ok()
    })
    .await;
    assert_eq!(
        recovered,
        Some(1),
        "the store works again once the database is back"
    );
    assert_eq!(
        s.measurement_count().await.unwrap(),
        1,
        "only the write that succeeded is there"
    );
}

#[tokio::test]
async fn an_unreachable_database_fails_to_open_clearly() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let e = Store::open(&format!("postgres://nobody@127.0.0.1:{port}/none"), quick())
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Unavailable(ref m) if m.contains("cannot open")),
        "{e:?}"
    );
    assert!(
        !e.to_string().contains("nobody@"),
        "no credentials in messages: {e}"
    );
    let e = Store::open("/nonexistent-dir/x/advisor.db", quick())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cannot open"), "{e}");
}
