//! The measurement archive: targets and measurements in SQLite (a file in
//! the state directory, the default) or PostgreSQL (a shared archive).
//!
//! One set of migrations and queries serves both, through sqlx's `Any`
//! driver: plain SQL both dialects accept (`$1` placeholders, which SQLite
//! reads as numbered parameters; `BIGINT`, `DOUBLE PRECISION` and `TEXT`
//! columns; `INSERT … ON CONFLICT … DO UPDATE`), times as integer
//! milliseconds and details as JSON text, so no type needs a per-backend
//! mapping. Queries are checked by the test suite against both backends
//! rather than by compile-time macros, which would need a live database
//! at build time.
//!
//! Every change that touches more than one row runs in a transaction, and
//! SQLite runs in WAL mode: a crash or a failed request leaves the archive
//! as it was before, never half-written. A database that is locked or
//! unreachable surfaces as [`Error::Unavailable`] (the API's 503).
//!
//! An SQLite file is created once, when the store opens. An open
//! connection would go on writing into a file that was since removed or
//! moved away (and everything it wrote would be lost), and a new one would
//! quietly create an empty archive in its place; so every connection is
//! checked before use to still see the file it was opened on, and new
//! ones never create it. While the file is gone the store is unavailable;
//! once it is back the store works again.

use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use crate::Error;

mod mesh;
use crate::model::{DEFAULT_PORT, Kind, Measurement, Origin, Sample, Target, TargetSource};
pub use mesh::{Event, EventKind, PairSeries, SeriesPoint};

/// Which database is behind a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A file, in WAL mode.
    Sqlite,
    /// A server.
    Postgres,
}

/// How a store waits for a busy or unreachable database.
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// Longest wait for a connection from the pool (PostgreSQL down).
    pub acquire_timeout: Duration,
    /// Longest wait for SQLite's write lock held by someone else.
    pub busy_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            acquire_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(3),
        }
    }
}

/// The schema, in order; each step runs once, in a transaction, and is
/// recorded in `schema_version`. Statements must be valid on both backends.
const MIGRATIONS: &[(i64, &[&str])] = &[
    (
        1,
        &[
            "CREATE TABLE IF NOT EXISTS targets (
            host TEXT PRIMARY KEY,
            port BIGINT NOT NULL,
            address TEXT,
            source TEXT NOT NULL,
            interval_s BIGINT NOT NULL,
            added_ms BIGINT NOT NULL,
            last_used_ms BIGINT NOT NULL
        )",
            "CREATE TABLE IF NOT EXISTS measurements (
            host TEXT NOT NULL,
            kind TEXT NOT NULL,
            value DOUBLE PRECISION NOT NULL,
            unit TEXT NOT NULL,
            origin TEXT NOT NULL,
            producer TEXT NOT NULL,
            at_ms BIGINT NOT NULL,
            details TEXT NOT NULL
        )",
            "CREATE INDEX IF NOT EXISTS measurements_by_host_kind_time
            ON measurements (host, kind, at_ms)",
        ],
    ),
    (2, &["ALTER TABLE targets ADD COLUMN group_name TEXT"]),
    (
        3,
        &["CREATE TABLE IF NOT EXISTS host_paths (
            host TEXT NOT NULL,
            path_host TEXT NOT NULL,
            seen_ms BIGINT NOT NULL,
            PRIMARY KEY (host, path_host)
        )"],
    ),
    (
        4,
        &[
            "ALTER TABLE measurements ADD COLUMN from_site TEXT NOT NULL DEFAULT ''",
            "CREATE INDEX IF NOT EXISTS measurements_by_pair
            ON measurements (from_site, host, kind, at_ms)",
            "CREATE TABLE IF NOT EXISTS events (
            from_site TEXT NOT NULL,
            host TEXT NOT NULL,
            kind TEXT NOT NULL,
            event TEXT NOT NULL,
            at_ms BIGINT NOT NULL,
            details TEXT NOT NULL
        )",
            "CREATE INDEX IF NOT EXISTS events_by_time ON events (at_ms)",
            "CREATE TABLE IF NOT EXISTS meshes (
            name TEXT PRIMARY KEY,
            definition TEXT NOT NULL,
            updated_ms BIGINT NOT NULL
        )",
            "ALTER TABLE targets ADD COLUMN probes TEXT",
        ],
    ),
];

/// Ranks target sources: a stronger source's settings win over a weaker
/// one's when the same host comes from two places.
/// A mesh ranks below the API: a target someone added by hand keeps its
/// settings when a mesh lists it too, and is not the mesh's to remove.
const RANK: &str = "CASE %s WHEN 'config' THEN 0 WHEN 'api' THEN 1 WHEN 'mesh' THEN 2 ELSE 3 END";

fn upsert_target_sql() -> String {
    let new = RANK.replace("%s", "excluded.source");
    let old = RANK.replace("%s", "targets.source");
    let stronger_or_same = format!("{new} <= {old}");
    format!(
        "INSERT INTO targets (host, port, address, source, interval_s, added_ms, last_used_ms, group_name, probes)
         VALUES ($1, COALESCE($2, {DEFAULT_PORT}), $3, $4, $5, $6, $6, $7, $8)
         ON CONFLICT (host) DO UPDATE SET
            port = CASE WHEN {stronger_or_same} AND $2 IS NOT NULL
                THEN excluded.port ELSE targets.port END,
            interval_s = CASE WHEN {stronger_or_same} THEN excluded.interval_s ELSE targets.interval_s END,
            source = CASE WHEN {stronger_or_same} THEN excluded.source ELSE targets.source END,
            group_name = CASE WHEN {stronger_or_same} THEN excluded.group_name ELSE targets.group_name END,
            probes = CASE WHEN {stronger_or_same} THEN excluded.probes ELSE targets.probes END,
            address = COALESCE(excluded.address, targets.address),
            last_used_ms = CASE WHEN excluded.last_used_ms > targets.last_used_ms
                THEN excluded.last_used_ms ELSE targets.last_used_ms END"
    )
}

const TARGET_COLUMNS: &str =
    "host, port, address, source, interval_s, added_ms, last_used_ms, group_name, probes";
const MEASUREMENT_COLUMNS: &str =
    "host, kind, value, unit, origin, producer, at_ms, details, from_site";

/// A target to add or refresh.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTarget {
    /// Host name or address.
    pub host: String,
    /// Port probes connect to; `None` keeps what is known (or the
    /// default, 4747, for a new target).
    pub port: Option<u16>,
    /// A resolved address, if known.
    pub address: Option<String>,
    /// Where it comes from.
    pub source: TargetSource,
    /// Seconds between active measurements.
    pub interval_s: u64,
    /// Its bottleneck group; a source as strong or stronger replaces it
    /// (`None` clears it), a weaker one leaves it.
    pub group: Option<String>,
    /// The tests to run against it (`None`: all); replaced like `group`.
    pub probes: Option<Vec<String>>,
}

/// The archive.
#[derive(Debug, Clone)]
pub struct Store {
    /// Connections; cloning the store shares them.
    pool: AnyPool,
    backend: Backend,
    /// The location for messages (a PostgreSQL password is not shown).
    shown: String,
    /// This advisor's site name: what it records is labelled with it, and
    /// what it reads back for advice is its own (and unlabelled rows).
    site: String,
}

/// Turns `--db` into a connection URL: `postgres://…`/`postgresql://…`
/// and `sqlite:…` as given, anything else is a path to an SQLite file.
pub fn database_url(db: &str) -> (String, Backend) {
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        return (db.to_string(), Backend::Postgres);
    }
    if db.starts_with("sqlite:") {
        return (db.to_string(), Backend::Sqlite);
    }
    let abs = std::path::absolute(db).unwrap_or_else(|_| db.into());
    let encoded: String = abs
        .to_string_lossy()
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'.' | b'_' | b'-' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    (format!("sqlite://{encoded}?mode=rwc"), Backend::Sqlite)
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// A plain file path given as `--db`: an SQLite file the store watches.
fn sqlite_file(db: &str) -> Option<std::path::PathBuf> {
    let url = db.starts_with("postgres://")
        || db.starts_with("postgresql://")
        || db.starts_with("sqlite:");
    (!url).then(|| std::path::absolute(db).unwrap_or_else(|_| db.into()))
}

/// Which file a path names now (device and inode); `None` when there is
/// none.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Creates the SQLite file behind `url` (a `mode=rwc` URL) if missing.
async fn create_sqlite(url: &str, shown: &str) -> Result<(), Error> {
    use sqlx::Connection;
    let conn = sqlx::AnyConnection::connect(url)
        .await
        .map_err(|e| Error::Unavailable(format!("cannot open {shown}: {e}")))?;
    conn.close().await?;
    Ok(())
}

impl Store {
    /// Opens (creating if needed) and migrates the archive at `db`: a
    /// PostgreSQL URL, an `sqlite:` URL or a file path.
    pub async fn open(db: &str, opts: StoreOptions) -> Result<Store, Error> {
        sqlx::any::install_default_drivers();
        let (mut url, backend) = database_url(db);
        let shown = redact(&url);
        let busy_ms = opts.busy_timeout.as_millis() as i64;
        let watched = match sqlite_file(db) {
            Some(path) => {
                create_sqlite(&url, &shown).await?;
                // From now on the file must be there: never create it again.
                url = url.replace("?mode=rwc", "?mode=rw");
                let id = file_identity(&path)
                    .ok_or_else(|| Error::Unavailable(format!("{shown} vanished on opening")))?;
                Some((path, id))
            }
            None => None,
        };
        let pool = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 4 } else { 8 })
            .acquire_timeout(opts.acquire_timeout)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        let pragma = format!("PRAGMA busy_timeout = {busy_ms}");
                        sqlx::query(&pragma).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .before_acquire(move |_conn, _meta| {
                let same_file = watched
                    .as_ref()
                    .is_none_or(|(path, id)| file_identity(path) == Some(*id));
                if !same_file {
                    tracing::debug!("the advisor's archive file is gone or was replaced");
                }
                Box::pin(async move { Ok(same_file) })
            })
            .connect(&url)
            .await
            .map_err(|e| match Error::from(e) {
                Error::Unavailable(m) | Error::Store(m) => {
                    Error::Unavailable(format!("cannot open {shown}: {m}"))
                }
                other => other,
            })?;
        let store = Store {
            pool,
            backend,
            shown,
            site: String::new(),
        };
        if backend == Backend::Sqlite {
            let mode: String = sqlx::query("PRAGMA journal_mode = WAL")
                .fetch_one(&store.pool)
                .await?
                .try_get(0)?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!("{}: journal mode is {mode}, not WAL", store.shown);
            }
        }
        store.migrate().await?;
        Ok(store)
    }

    /// The same archive, labelled with this advisor's site name.
    pub fn with_site(mut self, site: &str) -> Store {
        self.site = site.to_string();
        self
    }

    /// The site name this store labels measurements with.
    pub fn site(&self) -> &str {
        &self.site
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Where it is, for messages.
    pub fn location(&self) -> &str {
        &self.shown
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction that will write. SQLite takes its write lock at the
    /// start (`BEGIN IMMEDIATE`), waiting up to the busy timeout: a
    /// deferred transaction that reads first cannot wait for the lock
    /// later and would fail at once under contention.
    async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, Error> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    async fn migrate(&self) -> Result<(), Error> {
        // Several advisors may open one PostgreSQL archive at once (a
        // mesh): each step runs under a lock and is checked again inside
        // it, so only one of them applies it. SQLite's write lock does the
        // same for a file.
        let mut tx = self.write_tx().await?;
        self.migration_lock(&mut tx).await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version BIGINT PRIMARY KEY,
                applied_ms BIGINT NOT NULL
            )",
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        for (version, statements) in MIGRATIONS {
            let mut tx = self.write_tx().await?;
            self.migration_lock(&mut tx).await?;
            let applied = sqlx::query("SELECT version FROM schema_version WHERE version = $1")
                .bind(*version)
                .fetch_optional(&mut *tx)
                .await?
                .is_some();
            if applied {
                tx.commit().await?;
                continue;
            }
            for sql in *statements {
                sqlx::query(sql).execute(&mut *tx).await?;
            }
            sqlx::query(
                "INSERT INTO schema_version (version, applied_ms) VALUES ($1, $2)
                 ON CONFLICT (version) DO NOTHING",
            )
            .bind(*version)
            .bind(crate::model::now_ms())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        }
        Ok(())
    }

    async fn migration_lock(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<(), Error> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(4747)")
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// The schema version in the database.
    pub async fn schema_version(&self) -> Result<i64, Error> {
        let v: Option<i64> = sqlx::query("SELECT MAX(version) FROM schema_version")
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        Ok(v.unwrap_or(0))
    }

    /// Adds a target, or refreshes it: a stronger source (config > api >
    /// discovered) replaces the port, interval and source; any source
    /// refreshes the address and the last use.
    pub async fn upsert_target(&self, t: &NewTarget, now_ms: i64) -> Result<Target, Error> {
        let mut tx = self.write_tx().await?;
        upsert_in(&mut tx, t, now_ms).await?;
        let target = fetch_target(&mut tx, &t.host)
            .await?
            .ok_or_else(|| Error::Store(format!("{} vanished after upsert", t.host)))?;
        tx.commit().await?;
        Ok(target)
    }

    /// One target.
    pub async fn target(&self, host: &str) -> Result<Option<Target>, Error> {
        let mut conn = self.pool.acquire().await?;
        fetch_target(&mut conn, host).await
    }

    /// Every target, by host.
    pub async fn targets(&self) -> Result<Vec<Target>, Error> {
        let sql = format!("SELECT {TARGET_COLUMNS} FROM targets ORDER BY host");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(target_of).collect()
    }

    /// Finds the target a host name or address refers to: by name, else by
    /// resolved address.
    pub async fn find_target(&self, host: &str) -> Result<Option<Target>, Error> {
        if let Some(t) = self.target(host).await? {
            return Ok(Some(t));
        }
        let sql = format!("SELECT {TARGET_COLUMNS} FROM targets WHERE address = $1 ORDER BY host");
        let row = sqlx::query(&sql)
            .bind(host)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(target_of).transpose()
    }

    /// A multi-path transfer with `host` also went over `paths`, the
    /// host's other addresses: remembered (with when) so that its advice
    /// can name them.
    pub async fn record_paths(
        &self,
        host: &str,
        paths: &[String],
        now_ms: i64,
    ) -> Result<(), Error> {
        let mut tx = self.write_tx().await?;
        for path in paths.iter().filter(|p| *p != host) {
            sqlx::query(
                "INSERT INTO host_paths (host, path_host, seen_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (host, path_host) DO UPDATE SET seen_ms = excluded.seen_ms",
            )
            .bind(host)
            .bind(path.as_str())
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The other addresses multi-path transfers with `host` went over,
    /// most recently seen first.
    pub async fn paths_of(&self, host: &str) -> Result<Vec<String>, Error> {
        let rows = sqlx::query(
            "SELECT path_host FROM host_paths WHERE host = $1 ORDER BY seen_ms DESC, path_host",
        )
        .bind(host)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>(0).map_err(Error::from))
            .collect()
    }

    /// Removes a target and its measurements; false when there was none.
    pub async fn delete_target(&self, host: &str) -> Result<bool, Error> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM measurements WHERE host = $1")
            .bind(host)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM host_paths WHERE host = $1")
            .bind(host)
            .execute(&mut *tx)
            .await?;
        let gone = sqlx::query("DELETE FROM targets WHERE host = $1")
            .bind(host)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone > 0)
    }

    /// Marks a target as used now (advice was asked for it).
    pub async fn touch(&self, host: &str, now_ms: i64) -> Result<(), Error> {
        sqlx::query("UPDATE targets SET last_used_ms = $2 WHERE host = $1 AND last_used_ms < $2")
            .bind(host)
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Stores the samples of one probe run or transfer, all or none, and
    /// adds the target first when `discovered` is given.
    pub async fn record(
        &self,
        host: &str,
        origin: Origin,
        producer: &str,
        samples: &[Sample],
        at_ms: i64,
        discovered: Option<&NewTarget>,
    ) -> Result<usize, Error> {
        for s in samples {
            s.validate()?;
        }
        let mut tx = self.write_tx().await?;
        if let Some(t) = discovered {
            upsert_in(&mut tx, t, at_ms).await?;
        }
        let known = fetch_target(&mut tx, host).await?.is_some();
        if !known {
            return Err(Error::NotFound(format!("unknown target {host}")));
        }
        let sql = format!(
            "INSERT INTO measurements ({MEASUREMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        );
        for s in samples {
            sqlx::query(&sql)
                .bind(host)
                .bind(s.kind.name())
                .bind(s.value)
                .bind(s.kind.unit())
                .bind(origin.name())
                .bind(producer)
                .bind(at_ms)
                .bind(s.details.to_string())
                .bind(&self.site)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(samples.len())
    }

    /// The newest `limit` measurements of a host, newest first, of one kind
    /// or all.
    pub async fn history(
        &self,
        host: &str,
        kind: Option<Kind>,
        limit: u32,
    ) -> Result<Vec<Measurement>, Error> {
        let rows = match kind {
            Some(k) => {
                let sql = format!(
                    "SELECT {MEASUREMENT_COLUMNS} FROM measurements WHERE host = $1 AND kind = $2
                     AND from_site IN ($4, '') ORDER BY at_ms DESC, kind LIMIT $3"
                );
                sqlx::query(&sql)
                    .bind(host)
                    .bind(k.name())
                    .bind(i64::from(limit))
                    .bind(&self.site)
                    .fetch_all(&self.pool)
                    .await?
            }
            None => {
                let sql = format!(
                    "SELECT {MEASUREMENT_COLUMNS} FROM measurements WHERE host = $1
                     AND from_site IN ($3, '') ORDER BY at_ms DESC, kind LIMIT $2"
                );
                sqlx::query(&sql)
                    .bind(host)
                    .bind(i64::from(limit))
                    .bind(&self.site)
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(measurement_of).collect()
    }

    /// The newest `limit` measurements of one kind, oldest first (the
    /// order the estimators read).
    pub async fn series(
        &self,
        host: &str,
        kind: Kind,
        limit: u32,
    ) -> Result<Vec<Measurement>, Error> {
        let mut newest_first = self.history(host, Some(kind), limit).await?;
        newest_first.reverse();
        Ok(newest_first)
    }

    /// Removes targets not used since `before_ms`, except those from the
    /// config file, with their measurements; returns their hosts.
    pub async fn purge_unused(&self, before_ms: i64) -> Result<Vec<String>, Error> {
        let mut tx = self.write_tx().await?;
        let hosts: Vec<String> = sqlx::query(
            "SELECT host FROM targets WHERE last_used_ms < $1 AND source NOT IN ('config', 'mesh') ORDER BY host",
        )
        .bind(before_ms)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get::<String, _>(0))
        .collect::<Result<_, _>>()?;
        for h in &hosts {
            sqlx::query("DELETE FROM measurements WHERE host = $1")
                .bind(h)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM targets WHERE host = $1")
                .bind(h)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(hosts)
    }

    /// How many measurements are stored (for tests and status).
    pub async fn measurement_count(&self) -> Result<i64, Error> {
        Ok(sqlx::query("SELECT COUNT(*) FROM measurements")
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?)
    }
}

async fn upsert_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    t: &NewTarget,
    now_ms: i64,
) -> Result<(), Error> {
    crate::model::validate_host(&t.host)?;
    if let Some(g) = &t.group {
        crate::model::validate_group(g)?;
    }
    sqlx::query(&upsert_target_sql())
        .bind(&t.host)
        .bind(t.port.map(i64::from))
        .bind(t.address.clone())
        .bind(t.source.name())
        .bind(t.interval_s.min(i64::MAX as u64) as i64)
        .bind(now_ms)
        .bind(t.group.clone())
        .bind(t.probes.as_ref().map(|p| p.join(",")))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn fetch_target(conn: &mut sqlx::AnyConnection, host: &str) -> Result<Option<Target>, Error> {
    let sql = format!("SELECT {TARGET_COLUMNS} FROM targets WHERE host = $1");
    let row = sqlx::query(&sql).bind(host).fetch_optional(conn).await?;
    row.as_ref().map(target_of).transpose()
}

fn target_of(r: &AnyRow) -> Result<Target, Error> {
    let port: i64 = r.try_get("port")?;
    let interval: i64 = r.try_get("interval_s")?;
    Ok(Target {
        host: r.try_get("host")?,
        port: u16::try_from(port).map_err(|_| Error::Store(format!("port {port} in store")))?,
        address: r.try_get("address")?,
        group: r.try_get("group_name")?,
        probes: r
            .try_get::<Option<String>, _>("probes")?
            .map(|p| p.split(',').map(str::to_string).collect()),
        source: r.try_get::<String, _>("source")?.parse()?,
        interval_s: interval.max(0) as u64,
        added_ms: r.try_get("added_ms")?,
        last_used_ms: r.try_get("last_used_ms")?,
    })
}

fn measurement_of(r: &AnyRow) -> Result<Measurement, Error> {
    let details: String = r.try_get("details")?;
    Ok(Measurement {
        host: r.try_get("host")?,
        kind: r.try_get::<String, _>("kind")?.parse()?,
        value: r.try_get("value")?,
        unit: r.try_get("unit")?,
        origin: r.try_get::<String, _>("origin")?.parse()?,
        producer: r.try_get("producer")?,
        at_ms: r.try_get("at_ms")?,
        from: r.try_get("from_site")?,
        details: serde_json::from_str(&details)
            .map_err(|e| Error::Store(format!("details of a measurement: {e}")))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn db_argument_becomes_a_url() {
        assert_eq!(
            database_url("postgres://u:p@h/db"),
            ("postgres://u:p@h/db".into(), Backend::Postgres)
        );
        assert_eq!(database_url("sqlite::memory:").1, Backend::Sqlite);
        let (url, b) = database_url("/var/lib/tern/advisor db.sqlite");
        assert_eq!(b, Backend::Sqlite);
        assert_eq!(url, "sqlite:///var/lib/tern/advisor%20db.sqlite?mode=rwc");
        assert_eq!(redact("postgres://u:secret@h:5/db"), "postgres://…@h:5/db");
        assert_eq!(redact("sqlite:///x"), "sqlite:///x");
    }
}
