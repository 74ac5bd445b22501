//! What the service answers about a mesh and its paths: meshes in and
//! out, series per pair, events, the newest routes and the bottleneck
//! groups they form.

use serde::{Deserialize, Serialize};

use super::Service;
use crate::Error;
use crate::mesh::Mesh;
use crate::model::{Kind, Measurement, now_ms, validate_group, validate_host};
use crate::store::{Event, PairSeries, SeriesPoint};
use crate::tomography::{BottleneckGroup, PathRoute, groups};

/// Most points a series answer holds.
pub const MAX_POINTS: u32 = 10_000;

/// A series of one pair and kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairSeriesAnswer {
    /// The site that measured.
    pub from: String,
    /// The target.
    pub to: String,
    /// What.
    pub kind: Kind,
    /// The values' unit.
    pub unit: String,
    /// `raw`, or `ewma` with its weight.
    pub smoothing: String,
    /// Oldest first.
    pub points: Vec<SeriesPoint>,
}

/// A path's newest route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteAnswer {
    /// The site that measured.
    pub from: String,
    /// The target.
    pub to: String,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// Whether it reached the target.
    pub reached: bool,
    /// The hops: `ttl`, `addr` (null when silent), `rtt_ms`.
    pub hops: serde_json::Value,
}

fn route_of(m: &Measurement) -> RouteAnswer {
    RouteAnswer {
        from: m.from.clone(),
        to: m.host.clone(),
        at_ms: m.at_ms,
        reached: m.details.get("reached") == Some(&serde_json::Value::Bool(true)),
        hops: m.details.get("hops").cloned().unwrap_or_default(),
    }
}

/// Exponentially weighted moving average of `values`, one output per
/// input: what the estimators smooth with.
fn ewma(points: &[SeriesPoint], weight: f64) -> Vec<SeriesPoint> {
    let mut level: Option<f64> = None;
    points
        .iter()
        .map(|p| {
            let l = level.map_or(p.value, |l| l + weight * (p.value - l));
            level = Some(l);
            SeriesPoint {
                at_ms: p.at_ms,
                value: l,
            }
        })
        .collect()
}

impl Service {
    /// Stores a mesh and adds its hosts as targets.
    pub async fn put_mesh(&self, mesh: &Mesh) -> Result<(), Error> {
        mesh.validate()?;
        let definition = serde_json::to_value(mesh).map_err(|e| Error::Store(e.to_string()))?;
        let now = now_ms();
        self.store.put_mesh(&mesh.name, &definition, now).await?;
        for t in mesh.targets() {
            self.store.upsert_target(&t, now).await?;
        }
        self.changed();
        Ok(())
    }

    /// Every mesh in the archive.
    pub async fn meshes(&self) -> Result<Vec<Mesh>, Error> {
        self.store
            .meshes()
            .await?
            .into_iter()
            .map(|(name, v)| {
                serde_json::from_value(v)
                    .map_err(|e| Error::Store(format!("mesh {name} in the archive: {e}")))
            })
            .collect()
    }

    /// Removes a mesh. Its hosts that no other mesh lists go back to
    /// ageing like discovered targets; no measurement is deleted (in a
    /// shared archive they are every site's).
    pub async fn delete_mesh(&self, name: &str) -> Result<(), Error> {
        validate_group(name)?;
        let gone = self
            .meshes()
            .await?
            .into_iter()
            .find(|m| m.name == name)
            .ok_or_else(|| Error::NotFound(format!("no mesh {name}")))?;
        self.store.delete_mesh(name).await?;
        let rest = self.meshes().await?;
        let kept: std::collections::HashSet<String> = rest
            .iter()
            .flat_map(|m| m.hosts.iter().map(|h| h.name.clone()))
            .collect();
        for h in gone.hosts.iter().filter(|h| !kept.contains(&h.name)) {
            self.store.release_mesh_target(&h.name).await?;
        }
        self.changed();
        Ok(())
    }

    /// A pair's series of one kind in a time range, raw or smoothed.
    #[allow(clippy::too_many_arguments)]
    pub async fn pair_series(
        &self,
        from: Option<&str>,
        to: &str,
        kind: Kind,
        since_ms: Option<i64>,
        until_ms: Option<i64>,
        limit: Option<u32>,
        ewma_weight: Option<f64>,
    ) -> Result<PairSeriesAnswer, Error> {
        validate_host(to)?;
        let from = from.unwrap_or(self.store.site()).to_string();
        if let Some(w) = ewma_weight
            && !(w > 0.0 && w <= 1.0)
        {
            return Err(Error::BadRequest(format!(
                "ewma must be above 0 and at most 1, not {w}"
            )));
        }
        let rows = self
            .store
            .pair_series(
                &from,
                to,
                kind,
                since_ms.unwrap_or(0),
                until_ms.unwrap_or(i64::MAX),
                limit.unwrap_or(1000).clamp(1, MAX_POINTS),
            )
            .await?;
        let raw: Vec<SeriesPoint> = rows
            .iter()
            .map(|m| SeriesPoint {
                at_ms: m.at_ms,
                value: m.value,
            })
            .collect();
        let (points, smoothing) = match ewma_weight {
            Some(w) => (ewma(&raw, w), format!("ewma {w}")),
            None => (raw, "raw".to_string()),
        };
        Ok(PairSeriesAnswer {
            from,
            to: to.to_string(),
            kind,
            unit: kind.unit().to_string(),
            smoothing,
            points,
        })
    }

    /// The newest measurement of every (site, target, kind).
    pub async fn latest(&self) -> Result<Vec<Measurement>, Error> {
        self.store.latest().await
    }

    /// Every (site, target, kind) with measurements.
    pub async fn pairs(&self) -> Result<Vec<PairSeries>, Error> {
        self.store.pairs().await
    }

    /// Events, newest first.
    pub async fn events(
        &self,
        from: Option<&str>,
        to: Option<&str>,
        since_ms: Option<i64>,
        limit: Option<u32>,
    ) -> Result<Vec<Event>, Error> {
        if let Some(h) = to {
            validate_host(h)?;
        }
        self.store
            .events(
                from,
                to,
                since_ms.unwrap_or(0),
                limit.unwrap_or(100).clamp(1, MAX_POINTS),
            )
            .await
    }

    /// The newest route of every pair (of one site, one target, or all).
    pub async fn routes(
        &self,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<Vec<RouteAnswer>, Error> {
        Ok(self
            .store
            .latest_routes()
            .await?
            .iter()
            .filter(|m| from.is_none_or(|f| m.from == f) && to.is_none_or(|t| m.host == t))
            .map(route_of)
            .collect())
    }

    /// Advice for `target` from another of this site's paths whose route
    /// shares a router with its route beyond their first hop (every path
    /// of a site leaves through its own gateway, which says nothing about
    /// where they go), when neither it nor a subnet or declared neighbour
    /// has numbers; `NotFound(missing)` otherwise.
    pub(super) async fn advice_by_route(
        &self,
        target: &crate::model::Target,
        host: &str,
        now: i64,
        missing: String,
    ) -> Result<crate::advice::Advice, Error> {
        let site = self.store.site().to_string();
        let routes: Vec<PathRoute> = self
            .path_routes()
            .await?
            .into_iter()
            .filter(|r| r.from == site)
            .collect();
        let Some(mine) = routes.iter().find(|r| r.to == target.host) else {
            return Err(Error::NotFound(missing));
        };
        let far: std::collections::HashSet<&str> = mine.routers().skip(1).collect();
        for other in routes.iter().filter(|r| r.to != target.host) {
            let shared: Vec<&str> = other
                .routers()
                .skip(1)
                .filter(|h| far.contains(h))
                .collect();
            if shared.is_empty() {
                continue;
            }
            if let Ok(mut a) = self.advice_from(&other.to, host, now).await {
                a.notes.push(format!(
                    "no measurements of {host} yet: this is the advice for {}, whose route \
                     shares router {} with it",
                    other.to,
                    shared.join(", ")
                ));
                a.aggregated_from = Some(other.to.clone());
                a.aggregated_by = Some(format!("shared router {} (routes)", shared[0]));
                return Ok(a);
            }
        }
        Err(Error::NotFound(missing))
    }

    /// The newest route of every pair, as tomography reads them.
    async fn path_routes(&self) -> Result<Vec<PathRoute>, Error> {
        Ok(self
            .store
            .latest_routes()
            .await?
            .iter()
            .map(|m| PathRoute {
                from: m.from.clone(),
                to: m.host.clone(),
                hops: m
                    .details
                    .get("signature")
                    .and_then(|s| serde_json::from_value(s.clone()).ok())
                    .unwrap_or_default(),
                reached: m.details.get("reached") == Some(&serde_json::Value::Bool(true)),
            })
            .collect())
    }

    /// Paths that share routers, from the newest routes.
    pub async fn bottleneck_groups(&self) -> Result<Vec<BottleneckGroup>, Error> {
        Ok(groups(&self.path_routes().await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_follows_a_step_by_its_weight() {
        let p = |v| SeriesPoint { at_ms: 0, value: v };
        let out: Vec<f64> = ewma(&[p(10.0), p(20.0), p(20.0)], 0.5)
            .iter()
            .map(|p| p.value)
            .collect();
        assert_eq!(out, [10.0, 15.0, 17.5]);
    }
}
