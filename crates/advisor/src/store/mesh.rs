//! What measuring across a mesh adds to the archive: measurements read by
//! pair (where from, to which host), events (route changes, level shifts)
//! with their time, the latest route of every pair, and the mesh
//! definitions themselves, so that every advisor sharing one archive
//! reads the same mesh.

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{MEASUREMENT_COLUMNS, Store, measurement_of};
use crate::Error;
use crate::model::{Kind, Measurement};

/// What happened to a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The hop list of a path changed.
    RouteChange,
    /// A series moved to another level and stayed there (a drop in
    /// capacity or throughput, a rise in RTT or loss).
    LevelShift,
    /// An alert rule fired ([`crate::alerts`]).
    Alert,
}

impl EventKind {
    /// Its name in the store and the API.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::RouteChange => "route_change",
            EventKind::LevelShift => "level_shift",
            EventKind::Alert => "alert",
        }
    }

    fn parse(s: &str) -> Result<EventKind, Error> {
        match s {
            "route_change" => Ok(EventKind::RouteChange),
            "level_shift" => Ok(EventKind::LevelShift),
            "alert" => Ok(EventKind::Alert),
            _ => Err(Error::Store(format!("unknown event '{s}' in store"))),
        }
    }
}

/// One event on a path's series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Where the path starts: the site that measured it.
    pub from: String,
    /// Where it ends: the target.
    pub host: String,
    /// The series it happened to.
    pub kind: Kind,
    /// What happened.
    pub event: EventKind,
    /// When it was seen, ms since the Unix epoch.
    pub at_ms: i64,
    /// Before and after, as the detector saw them.
    pub details: serde_json::Value,
}

fn event_of(r: &AnyRow) -> Result<Event, Error> {
    let details: String = r.try_get("details")?;
    Ok(Event {
        from: r.try_get("from_site")?,
        host: r.try_get("host")?,
        kind: r.try_get::<String, _>("kind")?.parse()?,
        event: EventKind::parse(&r.try_get::<String, _>("event")?)?,
        at_ms: r.try_get("at_ms")?,
        details: serde_json::from_str(&details)
            .map_err(|e| Error::Store(format!("details of an event: {e}")))?,
    })
}

/// A pair and kind the archive has measurements of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairSeries {
    /// The site that measured.
    pub from: String,
    /// The target.
    pub to: String,
    /// What was measured.
    pub kind: Kind,
    /// How many measurements.
    pub count: i64,
    /// The newest, ms since the Unix epoch.
    pub last_ms: i64,
}

/// One point of a series as the API gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// The value (raw, or the EWMA up to this point).
    pub value: f64,
}

const EVENT_COLUMNS: &str = "from_site, host, kind, event, at_ms, details";

impl Store {
    /// Stores an event seen on this site's path to `host`.
    pub async fn record_event(
        &self,
        host: &str,
        kind: Kind,
        event: EventKind,
        at_ms: i64,
        details: &serde_json::Value,
    ) -> Result<(), Error> {
        let sql = format!("INSERT INTO events ({EVENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)");
        sqlx::query(&sql)
            .bind(&self.site)
            .bind(host)
            .bind(kind.name())
            .bind(event.name())
            .bind(at_ms)
            .bind(details.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Events since `since_ms`, newest first, of one site's paths and one
    /// target or all.
    pub async fn events(
        &self,
        from: Option<&str>,
        host: Option<&str>,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<Event>, Error> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE at_ms >= $1
             AND ($2 = '' OR from_site = $2) AND ($3 = '' OR host = $3)
             ORDER BY at_ms DESC LIMIT $4"
        );
        sqlx::query(&sql)
            .bind(since_ms)
            .bind(from.unwrap_or(""))
            .bind(host.unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_of)
            .collect()
    }

    /// The newest event of a kind on this site's path to `host`.
    pub async fn last_event(
        &self,
        host: &str,
        kind: Kind,
        event: EventKind,
    ) -> Result<Option<Event>, Error> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE from_site = $1 AND host = $2
             AND kind = $3 AND event = $4 ORDER BY at_ms DESC LIMIT 1"
        );
        sqlx::query(&sql)
            .bind(&self.site)
            .bind(host)
            .bind(kind.name())
            .bind(event.name())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(event_of)
            .transpose()
    }

    /// One pair's measurements of a kind within `[since_ms, until_ms]`,
    /// oldest first; at most the newest `limit`.
    pub async fn pair_series(
        &self,
        from: &str,
        host: &str,
        kind: Kind,
        since_ms: i64,
        until_ms: i64,
        limit: u32,
    ) -> Result<Vec<Measurement>, Error> {
        let sql = format!(
            "SELECT {MEASUREMENT_COLUMNS} FROM measurements WHERE from_site = $1 AND host = $2
             AND kind = $3 AND at_ms >= $4 AND at_ms <= $5 ORDER BY at_ms DESC LIMIT $6"
        );
        let mut rows: Vec<Measurement> = sqlx::query(&sql)
            .bind(from)
            .bind(host)
            .bind(kind.name())
            .bind(since_ms)
            .bind(until_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(measurement_of)
            .collect::<Result<_, _>>()?;
        rows.reverse();
        Ok(rows)
    }

    /// Every (site, target, kind) the archive has measurements of.
    pub async fn pairs(&self) -> Result<Vec<PairSeries>, Error> {
        sqlx::query(
            "SELECT from_site, host, kind, COUNT(*) AS n, MAX(at_ms) AS last_ms
             FROM measurements GROUP BY from_site, host, kind
             ORDER BY from_site, host, kind",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(PairSeries {
                from: r.try_get("from_site")?,
                to: r.try_get("host")?,
                kind: r.try_get::<String, _>("kind")?.parse()?,
                count: r.try_get("n")?,
                last_ms: r.try_get("last_ms")?,
            })
        })
        .collect()
    }

    /// The newest measurement of every (site, target, kind).
    pub async fn latest(&self) -> Result<Vec<Measurement>, Error> {
        let sql = format!(
            "SELECT {MEASUREMENT_COLUMNS} FROM measurements m
             WHERE at_ms = (SELECT MAX(at_ms) FROM measurements n WHERE n.kind = m.kind
                 AND n.from_site = m.from_site AND n.host = m.host)
             ORDER BY from_site, host, kind"
        );
        let rows: Vec<Measurement> = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(measurement_of)
            .collect::<Result<_, _>>()?;
        let mut seen = std::collections::HashSet::new();
        Ok(rows
            .into_iter()
            .filter(|m| seen.insert((m.from.clone(), m.host.clone(), m.kind)))
            .collect())
    }

    /// The newest route measurement of every (site, target) pair.
    pub async fn latest_routes(&self) -> Result<Vec<Measurement>, Error> {
        let sql = format!(
            "SELECT {MEASUREMENT_COLUMNS} FROM measurements m WHERE kind = 'route'
             AND at_ms = (SELECT MAX(at_ms) FROM measurements n WHERE n.kind = 'route'
                 AND n.from_site = m.from_site AND n.host = m.host)
             ORDER BY from_site, host"
        );
        let rows: Vec<Measurement> = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(measurement_of)
            .collect::<Result<_, _>>()?;
        // Two at the same millisecond: keep one per pair.
        let mut seen = std::collections::HashSet::new();
        Ok(rows
            .into_iter()
            .filter(|m| seen.insert((m.from.clone(), m.host.clone())))
            .collect())
    }

    /// Stores (or replaces) a mesh definition.
    pub async fn put_mesh(
        &self,
        name: &str,
        definition: &serde_json::Value,
        now_ms: i64,
    ) -> Result<(), Error> {
        sqlx::query(
            "INSERT INTO meshes (name, definition, updated_ms) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET definition = excluded.definition,
                updated_ms = excluded.updated_ms",
        )
        .bind(name)
        .bind(definition.to_string())
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Every mesh definition, by name.
    pub async fn meshes(&self) -> Result<Vec<(String, serde_json::Value)>, Error> {
        sqlx::query("SELECT name, definition FROM meshes ORDER BY name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                let text: String = r.try_get("definition")?;
                let v = serde_json::from_str(&text)
                    .map_err(|e| Error::Store(format!("a mesh definition: {e}")))?;
                Ok((r.try_get("name")?, v))
            })
            .collect()
    }

    /// Hands a host a removed mesh listed back to ageing: its source becomes
    /// `discovered` (forgotten once unused for the maximum age) and its
    /// tests all; its history stays. Only a target the mesh owns changes.
    pub async fn release_mesh_target(&self, host: &str) -> Result<(), Error> {
        sqlx::query(
            "UPDATE targets SET source = 'discovered', probes = NULL
             WHERE host = $1 AND source = 'mesh'",
        )
        .bind(host)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes a mesh definition; whether it was there.
    pub async fn delete_mesh(&self, name: &str) -> Result<bool, Error> {
        let done = sqlx::query("DELETE FROM meshes WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}
