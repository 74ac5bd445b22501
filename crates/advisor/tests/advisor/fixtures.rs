//! Databases for tests: a fresh SQLite file, and a fresh PostgreSQL
//! database in the cluster `TERN_TEST_PG` points at.

use std::sync::Once;

use sqlx::Connection;
use tempfile::TempDir;
use tern_advisor::store::{Store, StoreOptions};
use tern_testkit::skip;

/// A database a test may do anything with.
pub struct TestDb {
    /// What `--db` would be given.
    pub url: String,
    /// `sqlite` or `postgres`.
    pub name: &'static str,
    /// Keeps an SQLite file's directory alive.
    _dir: Option<TempDir>,
}

impl TestDb {
    /// The SQLite file, when it is one.
    pub fn sqlite_path(&self) -> Option<std::path::PathBuf> {
        self._dir.as_ref().map(|d| d.path().join("advisor.db"))
    }

    /// Opens a store on it.
    pub async fn open(&self, opts: StoreOptions) -> Store {
        Store::open(&self.url, opts).await.expect("open store")
    }
}

/// A fresh SQLite database in a temporary directory.
pub fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("advisor.db").to_string_lossy().into_owned();
    TestDb {
        url,
        name: "sqlite",
        _dir: Some(dir),
    }
}

/// The PostgreSQL cluster to test against, if any: without one, the
/// PostgreSQL half of the tests is skipped (said once), or fails under
/// `TERN_TEST_STRICT`.
pub fn pg_base() -> Option<String> {
    const UNSET: &str = "TERN_TEST_PG is not set; these tests ran on SQLite only \
                         (scripts/test.sh starts a cluster: eval \"$(bash \
                         scripts/pg-test.sh start)\")";
    static SAID: Once = Once::new();
    let url = std::env::var("TERN_TEST_PG").ok().filter(|u| !u.is_empty());
    if url.is_none() {
        // Every caller fails under TERN_TEST_STRICT; else it is said once.
        if skip::strict() {
            skip::skip("PostgreSQL half", UNSET);
        }
        SAID.call_once(|| skip::skip("PostgreSQL half", UNSET));
    }
    url
}

/// A fresh database in the PostgreSQL cluster, so tests running at the
/// same time never see each other's rows.
pub async fn postgres(base: &str) -> TestDb {
    sqlx::any::install_default_drivers();
    let name = format!("tern_t_{:016x}", rand::random::<u64>());
    let mut admin = sqlx::AnyConnection::connect(base)
        .await
        .expect("connect to TERN_TEST_PG");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("create database");
    admin.close().await.ok();
    let cut = base.rfind('/').expect("a database in the URL");
    TestDb {
        url: format!("{}/{name}", &base[..cut]),
        name: "postgres",
        _dir: None,
    }
}

/// SQLite, and PostgreSQL when available.
pub async fn every_db() -> Vec<TestDb> {
    let mut dbs = vec![sqlite()];
    if let Some(base) = pg_base() {
        dbs.push(postgres(&base).await);
    }
    dbs
}

/// Store options with short waits, so "unavailable" shows quickly.
pub fn quick() -> StoreOptions {
    StoreOptions {
        acquire_timeout: std::time::Duration::from_secs(2),
        busy_timeout: std::time::Duration::from_millis(300),
    }
}

/// A TCP relay from a local port to `upstream`, to cut a database off and
/// bring it back.
pub struct Relay {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Relays `listen` (port 0 for any) to `upstream`.
    pub async fn start(listen: std::net::SocketAddr, upstream: std::net::SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                conns.spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Relay { addr, task }
    }

    /// Cuts every relayed connection and stops listening.
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// A fresh PostgreSQL database reached through a [`Relay`]: the relay,
/// the URL through it, and the database's own address (to start the
/// relay again on the same port once it was stopped). `None`, and
/// `test` skipped (failed under `TERN_TEST_STRICT`), without a cluster.
pub async fn relayed_postgres(test: &str) -> Option<(Relay, String, std::net::SocketAddr)> {
    let Some(base) = pg_base() else {
        skip::skip(test, "TERN_TEST_PG not set");
        return None;
    };
    let db = postgres(&base).await;
    let at = db.url.find('@').expect("a user in the URL") + 1;
    let slash = at + db.url[at..].find('/').expect("a database in the URL");
    let upstream = tokio::net::lookup_host(&db.url[at..slash])
        .await
        .unwrap()
        .next()
        .unwrap();
    let relay = Relay::start("127.0.0.1:0".parse().unwrap(), upstream).await;
    let url = format!("{}{}{}", &db.url[..at], relay.addr, &db.url[slash..]);
    Some((relay, url, upstream))
}

/// Tries `attempt` every 100 ms for up to 5 s until it gives something
/// (a database coming back takes a moment to be reached again).
pub async fn within_5_s<T>(mut attempt: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    for _ in 0..50 {
        if let Some(v) = attempt().await {
            return Some(v);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    None
}
