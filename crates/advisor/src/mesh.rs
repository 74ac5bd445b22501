//! Meshes: sets of hosts that measure each other, as perfSONAR's meshes
//! do. A mesh lists its hosts and groups them; the hosts of a group run
//! the group's tests between every pair of them at the group's interval.
//!
//! A mesh lives in the archive, so every advisor that shares one (a
//! PostgreSQL archive) reads the same definition, whether it came from a
//! `--mesh` file or `PUT /api/v1/meshes/{name}`. Each advisor knows itself
//! by its site name (`--site`): it measures the hosts that share a group
//! with it, from itself, and labels what it stores with that name. Its
//! probe budget stays its own, so joining a mesh of N sites does not
//! multiply any site's outgoing probe load by N: more peers stretch the
//! queue, not the budget. The file format is JSON, as pSConfig's is.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::model::{Target, TargetSource, validate_group, validate_host};
use crate::store::{NewTarget, Store};

/// The tests a group may run.
pub const TESTS: [&str; 6] = ["rtt", "capacity", "loss", "route", "throughput", "sweep"];

/// Most hosts in one mesh.
pub const MAX_HOSTS: usize = 256;

/// A mesh definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mesh {
    /// Its name (letters, digits and `.-_`).
    pub name: String,
    /// Its hosts.
    pub hosts: Vec<MeshHost>,
    /// Who measures whom, how and how often.
    pub groups: Vec<MeshGroup>,
}

/// A host of a mesh: a tern daemon (with its advisor) at a site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeshHost {
    /// Its name as every other host resolves it; also its advisor's
    /// `--site`.
    pub name: String,
    /// The daemon's port (default 4747).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Where it is, degrees north (−90 to 90): places it on the
    /// dashboard's world map. Give both or neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat: Option<f64>,
    /// Where it is, degrees east (−180 to 180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lon: Option<f64>,
}

/// Hosts that measure each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeshGroup {
    /// Its name.
    pub name: String,
    /// Host names, from `hosts`.
    pub members: Vec<String>,
    /// Tests run between every pair of members: `rtt`, `capacity`,
    /// `loss`, `route`, `throughput`, `sweep`.
    pub tests: Vec<String>,
    /// Seconds between runs of each test on each pair.
    pub interval_s: u64,
}

impl Mesh {
    /// Reads and checks a definition.
    pub fn parse(json: &str) -> Result<Mesh, Error> {
        let mesh: Mesh = serde_json::from_str(json)
            .map_err(|e| Error::BadRequest(format!("mesh definition: {e}")))?;
        mesh.validate()?;
        Ok(mesh)
    }

    /// Checks names, references, tests and intervals.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::BadRequest(format!("mesh '{}': {m}", self.name)));
        validate_group(&self.name)?;
        if self.hosts.is_empty() || self.hosts.len() > MAX_HOSTS {
            return bad(format!("1 to {MAX_HOSTS} hosts, not {}", self.hosts.len()));
        }
        let mut names = HashSet::new();
        for h in &self.hosts {
            validate_host(&h.name)?;
            if h.port == Some(0) {
                return bad(format!("host {}: port 0", h.name));
            }
            match (h.lat, h.lon) {
                (None, None) => {}
                (Some(lat), Some(lon))
                    if (-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lon) => {}
                (Some(_), Some(_)) => {
                    return bad(format!(
                        "host {}: lat must be −90 to 90 and lon −180 to 180",
                        h.name
                    ));
                }
                _ => {
                    return bad(format!(
                        "host {}: give both lat and lon, or neither",
                        h.name
                    ));
                }
            }
            if !names.insert(h.name.as_str()) {
                return bad(format!("host {} listed twice", h.name));
            }
        }
        for g in &self.groups {
            validate_group(&g.name)?;
            if let Some(m) = g.members.iter().find(|m| !names.contains(m.as_str())) {
                return bad(format!("group {}: {m} is not one of the hosts", g.name));
            }
            if g.members.len() < 2 {
                return bad(format!("group {}: at least two members", g.name));
            }
            if let Some(t) = g.tests.iter().find(|t| !TESTS.contains(&t.as_str())) {
                return bad(format!(
                    "group {}: unknown test '{t}' (known: {})",
                    g.name,
                    TESTS.join(", ")
                ));
            }
            if g.tests.is_empty() {
                return bad(format!("group {}: no test", g.name));
            }
            if !(1..=366 * 86_400).contains(&g.interval_s) {
                return bad(format!(
                    "group {}: interval_s {}: 1 s to a year allowed",
                    g.name, g.interval_s
                ));
            }
        }
        Ok(())
    }

    /// The hosts `site` measures: those that share a group with it.
    pub fn peers_of(&self, site: &str) -> BTreeSet<String> {
        self.groups
            .iter()
            .filter(|g| g.members.iter().any(|m| m == site))
            .flat_map(|g| g.members.iter().filter(|m| *m != site).cloned())
            .collect()
    }

    /// The archive's targets for this mesh: every host in a group, with
    /// the union of its groups' tests and the shortest of their intervals.
    pub fn targets(&self) -> Vec<NewTarget> {
        let mut tests: BTreeMap<&str, (BTreeSet<&str>, u64)> = BTreeMap::new();
        for g in &self.groups {
            for m in &g.members {
                let e = tests.entry(m).or_insert((BTreeSet::new(), u64::MAX));
                e.0.extend(g.tests.iter().map(String::as_str));
                e.1 = e.1.min(g.interval_s);
            }
        }
        self.hosts
            .iter()
            .filter_map(|h| {
                let (t, interval) = tests.get(h.name.as_str())?;
                Some(NewTarget {
                    host: h.name.clone(),
                    port: h.port,
                    address: None,
                    source: TargetSource::Mesh,
                    interval_s: *interval,
                    group: None,
                    probes: Some(t.iter().map(|s| s.to_string()).collect()),
                })
            })
            .collect()
    }
}

/// The targets `store`'s site measures: in a shared archive not itself,
/// and of the meshes' hosts only those that share a group with it.
pub async fn targets_of_site(store: &Store) -> Result<Vec<Target>, Error> {
    let meshes: Vec<Mesh> = store
        .meshes()
        .await?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_value(v).ok())
        .collect();
    let site = store.site();
    let peers = peers_of(&meshes, site);
    Ok(store
        .targets()
        .await?
        .into_iter()
        .filter(|t| site.is_empty() || t.host != site)
        .filter(|t| t.source != TargetSource::Mesh || peers.contains(&t.host))
        .collect())
}

/// The hosts `site` measures over every mesh.
pub fn peers_of(meshes: &[Mesh], site: &str) -> HashSet<String> {
    meshes.iter().flat_map(|m| m.peers_of(site)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: &str = r#"{
        "name": "lab",
        "hosts": [{"name": "a.mesh"}, {"name": "b.mesh", "port": 4848}, {"name": "c.mesh"}, {"name": "d.mesh"}],
        "groups": [
            {"name": "all", "members": ["a.mesh", "b.mesh", "c.mesh"], "tests": ["rtt", "loss"], "interval_s": 60},
            {"name": "ab", "members": ["a.mesh", "b.mesh"], "tests": ["route"], "interval_s": 30}
        ]
    }"#;

    #[test]
    fn peers_and_targets_follow_the_groups() {
        let m = Mesh::parse(LAB).unwrap();
        let peers: Vec<_> = m.peers_of("a.mesh").into_iter().collect();
        assert_eq!(peers, ["b.mesh", "c.mesh"]);
        assert_eq!(m.peers_of("c.mesh").len(), 2);
        assert!(m.peers_of("d.mesh").is_empty(), "in no group");
        let t = m.targets();
        assert_eq!(t.len(), 3, "d.mesh is in no group");
        let b = t.iter().find(|t| t.host == "b.mesh").unwrap();
        assert_eq!((b.port, b.interval_s), (Some(4848), 30));
        assert_eq!(
            b.probes.as_deref(),
            Some(&["loss".to_string(), "route".into(), "rtt".into()][..])
        );
        assert_eq!(b.source, TargetSource::Mesh);
        let placed =
            Mesh::parse(&LAB.replace("\"port\": 4848", "\"lat\": 46.23, \"lon\": 6.05")).unwrap();
        let b = &placed.hosts[1];
        assert_eq!((b.lat, b.lon), (Some(46.23), Some(6.05)));
    }

    #[test]
    fn bad_meshes_are_refused_with_the_reason() {
        let cases = [
            (LAB.replace("\"loss\"", "\"ping\""), "unknown test 'ping'"),
            (
                LAB.replace("[\"a.mesh\", \"b.mesh\"]", "[\"a.mesh\", \"x\"]"),
                "x is not one of the hosts",
            ),
            (
                LAB.replace("\"interval_s\": 30", "\"interval_s\": 0"),
                "interval_s 0",
            ),
            (
                LAB.replace("{\"name\": \"d.mesh\"}", "{\"name\": \"a.mesh\"}"),
                "listed twice",
            ),
            (LAB.replace("\"groups\"", "\"grops\""), "unknown field"),
            (
                LAB.replace("\"port\": 4848", "\"lat\": 46.2"),
                "give both lat and lon",
            ),
            (
                LAB.replace("\"port\": 4848", "\"lat\": 91, \"lon\": 6.1"),
                "lat must be −90 to 90",
            ),
        ];
        for (text, why) in cases {
            let e = Mesh::parse(&text).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
