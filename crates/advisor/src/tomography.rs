//! Shared bottlenecks from routes, the tomography of the iGrid 2002
//! monitoring work: paths whose routes pass through the same router can
//! be slowed by the same link, so they form one group. Pure: routes in,
//! groups out.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// One path's route, as the archive holds its newest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRoute {
    /// The site that measured.
    pub from: String,
    /// The target.
    pub to: String,
    /// Hop addresses in order (`*` for a hop that did not answer); the
    /// last is the target itself when `reached`.
    pub hops: Vec<String>,
    /// Whether the route reached the target.
    pub reached: bool,
}

impl PathRoute {
    /// The routers on the way: not the target, not silent hops.
    pub fn routers(&self) -> impl Iterator<Item = &str> {
        let end = if self.reached {
            self.hops.len().saturating_sub(1)
        } else {
            self.hops.len()
        };
        self.hops[..end]
            .iter()
            .map(String::as_str)
            .filter(|h| *h != "*")
    }
}

/// Paths that share routers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BottleneckGroup {
    /// A stable name: `shared-` and the first shared router.
    pub name: String,
    /// Its paths, as `[from, to]`.
    pub paths: Vec<[String; 2]>,
    /// Routers on two or more of its paths.
    pub shared_hops: Vec<String>,
}

/// Groups paths that share at least one router (transitively: A shares
/// with B and B with C makes one group). Paths that share nothing are in
/// no group.
pub fn groups(routes: &[PathRoute]) -> Vec<BottleneckGroup> {
    let mut parent: Vec<usize> = (0..routes.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut by_router: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, r) in routes.iter().enumerate() {
        let mine: BTreeSet<&str> = r.routers().collect();
        for h in mine {
            by_router.entry(h).or_default().push(i);
        }
    }
    for paths in by_router.values() {
        for w in paths.windows(2) {
            let (a, b) = (root(&mut parent, w[0]), root(&mut parent, w[1]));
            parent[a] = b;
        }
    }
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..routes.len() {
        let r = root(&mut parent, i);
        members.entry(r).or_default().push(i);
    }
    let mut out: Vec<BottleneckGroup> = members
        .into_values()
        .filter(|m| m.len() > 1)
        .map(|m| {
            let shared: Vec<String> = by_router
                .iter()
                .filter(|(_, paths)| paths.len() > 1 && paths.iter().all(|p| m.contains(p)))
                .map(|(h, _)| h.to_string())
                .collect();
            let mut paths: Vec<[String; 2]> = m
                .iter()
                .map(|&i| [routes[i].from.clone(), routes[i].to.clone()])
                .collect();
            paths.sort();
            BottleneckGroup {
                name: format!("shared-{}", shared.first().map_or("?", String::as_str)),
                paths,
                shared_hops: shared,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(from: &str, to: &str, hops: &[&str], reached: bool) -> PathRoute {
        PathRoute {
            from: from.into(),
            to: to.into(),
            hops: hops.iter().map(|h| h.to_string()).collect(),
            reached,
        }
    }

    #[test]
    fn paths_through_one_router_are_one_group_and_others_none() {
        let routes = [
            r("a", "b", &["10.48.0.1", "10.48.9.1", "10.47.0.2"], true),
            r("a", "c", &["10.48.0.1", "10.48.8.1", "10.47.1.2"], true),
            r("b", "c", &["10.48.5.1", "10.47.2.2"], true),
            // The target itself is no router, and silent hops share nothing.
            r("c", "b", &["*", "10.47.2.2"], true),
            r("b", "a", &["*", "10.47.0.2"], true),
        ];
        let g = groups(&routes);
        assert_eq!(g.len(), 1, "{g:?}");
        assert_eq!(g[0].name, "shared-10.48.0.1");
        assert_eq!(
            g[0].paths,
            [["a".to_string(), "b".into()], ["a".into(), "c".into()]]
        );
        assert_eq!(g[0].shared_hops, ["10.48.0.1"]);
    }

    #[test]
    fn sharing_is_transitive_and_an_unreached_routes_last_hop_counts() {
        let routes = [
            r("a", "b", &["r1", "b"], true),
            r("a", "c", &["r1", "r2", "c"], true),
            r("x", "y", &["r2", "r3"], false),
        ];
        let g = groups(&routes);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].paths.len(), 3);
        assert_eq!(g[0].shared_hops, ["r1", "r2"]);
    }
}
