//! The measurement mesh's must-show (issue 17), end to end: three netlab
//! hosts, each running `tern serve --http` (daemon and advisor) with its
//! own site name, all writing to one PostgreSQL archive and reading one
//! mesh definition. Then
//! - every ordered pair has RTT, loss, route and capacity series;
//! - a reroute made with `netlab set --hops` shows as a route-change event
//!   for that path within one probe interval;
//! - the two paths from A that share a router are one bottleneck group,
//!   and the B–C path is not in it.
//!
//! Needs root, the tern binary and a PostgreSQL cluster (`TERN_TEST_PG`
//! and `TERN_PG_DIR`, from `scripts/pg-test.sh`: the namespaces reach it
//! through its Unix socket, since they cannot reach the root namespace's
//! loopback). Skips, saying why, without them.
//!
//! Topology (lab `mesh3`): A–B 10 ms through routers 10.48.0.1 and
//! 10.48.1.1, with a queue of 300 packets (one BDP, 125 kB, is less than
//! a 100-packet train: its tail would be dropped and no train usable); A–C 20 ms through 10.48.0.1 and 10.48.2.1 (the shared
//! router); B–C 30 ms through 10.48.3.1. Hosts resolve each other as
//! `a.mesh`, `b.mesh`, `c.mesh` through `/etc/netns/NS/hosts`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Lab;
use serde_json::Value;
use tern_testkit::daemon::{Daemon, Serve};
use tern_testkit::skip::skip;

const LAB: &str = "mesh3";
const INTERVAL_S: u64 = 20;
const HOSTS: [(&str, &str); 3] = [("A", "a.mesh"), ("B", "b.mesh"), ("C", "c.mesh")];

/// `/etc/netns/NS/hosts` for each namespace, removed when dropped (with
/// `/etc/netns` if this made it).
struct NetnsHosts {
    dirs: Vec<PathBuf>,
    made_root: bool,
}

impl NetnsHosts {
    fn write(files: &[(&str, String)]) -> NetnsHosts {
        let root = Path::new("/etc/netns");
        let made_root = !root.exists();
        let mut dirs = Vec::new();
        for (ns, text) in files {
            let dir = root.join(ns);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("hosts"), text).unwrap();
            dirs.push(dir);
        }
        NetnsHosts { dirs, made_root }
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        if self.made_root {
            let _ = std::fs::remove_dir(Path::new("/etc/netns"));
        }
    }
}

/// A fresh database in the test cluster, and its URL through the socket.
fn archive(name: &str) -> Option<String> {
    let (Ok(base), Ok(dir)) = (std::env::var("TERN_TEST_PG"), std::env::var("TERN_PG_DIR")) else {
        let why = "TERN_TEST_PG and TERN_PG_DIR are not set (scripts/test.sh starts a cluster)";
        skip(name, why);
        return None;
    };
    let db = format!("tern_mesh_{:08x}", rand::random::<u32>());
    let out = Command::new("psql")
        .args([&base, "-q", "-c", &format!("CREATE DATABASE {db}")])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "creating {db}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = base
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("a port in TERN_TEST_PG");
    Some(format!(
        "postgres://postgres@localhost:{port}/{db}?host={dir}"
    ))
}

/// GET `path` from the advisor in `host`.
fn api(lab: &Lab, host: &str, path: &str) -> Value {
    let url = format!("http://127.0.0.1:4748{path}");
    let out = lab.exec(
        host,
        &[
            "python3",
            "-c",
            "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())",
            &url,
        ],
    );
    assert!(
        out.status.success(),
        "GET {url} in {host}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn pairs_with_kinds(lab: &Lab) -> BTreeSet<(String, String, String)> {
    api(lab, "A", "/api/v1/pairs")["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap().to_string();
            (s("from"), s("to"), s("kind"))
        })
        .collect()
}

#[test]
fn a_three_host_mesh_fills_one_archive_sees_a_reroute_and_groups_a_shared_router() {
    let name = "a_three_host_mesh_fills_one_archive_sees_a_reroute_and_groups_a_shared_router";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    let Some(db) = archive(name) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let lab = Lab::up(
        LAB,
        &[
            "--hosts",
            "3",
            "--path",
            "between=A-B,rtt=10,rate=100,queue=300,hops=10.48.0.1+10.48.1.1",
            "--path",
            "between=A-C,rtt=20,rate=100,hops=10.48.0.1+10.48.2.1",
            "--path",
            "between=B-C,rtt=30,rate=100,hops=10.48.3.1",
        ],
    );
    let hosts_file = |me: &str, lines: &[(&str, &str)]| {
        let mut t = format!("127.0.0.1 localhost\n127.0.1.1 {me}\n");
        for (addr, name) in lines {
            t.push_str(&format!("{addr} {name}\n"));
        }
        t
    };
    let _names = NetnsHosts::write(&[
        (
            "mesh3-a",
            hosts_file(
                "a.mesh",
                &[("10.47.0.2", "b.mesh"), ("10.47.1.2", "c.mesh")],
            ),
        ),
        (
            "mesh3-b",
            hosts_file(
                "b.mesh",
                &[("10.47.0.1", "a.mesh"), ("10.47.2.2", "c.mesh")],
            ),
        ),
        (
            "mesh3-c",
            hosts_file(
                "c.mesh",
                &[("10.47.1.1", "a.mesh"), ("10.47.2.1", "b.mesh")],
            ),
        ),
    ]);
    let mesh = serde_json::json!({
        "name": "lab",
        "hosts": HOSTS.iter().map(|(_, n)| serde_json::json!({"name": n})).collect::<Vec<_>>(),
        "groups": [{
            "name": "all",
            "members": HOSTS.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
            "tests": ["rtt", "loss", "route", "capacity"],
            "interval_s": INTERVAL_S,
        }],
    });
    let mesh_file = work.path().join("mesh.json");
    std::fs::write(&mesh_file, mesh.to_string()).unwrap();
    let _daemons: Vec<Daemon> = HOSTS
        .iter()
        .map(|(host, site)| {
            let dir = work.path().join(host);
            let root = dir.join("root");
            std::fs::create_dir_all(&root).unwrap();
            Serve::new(&tern, &root, dir.join("state"))
                .listen("0.0.0.0:4747")
                .args([
                    "--http",
                    "127.0.0.1:4748",
                    "--db",
                    &db,
                    "--site",
                    site,
                    "--mesh",
                    mesh_file.to_str().unwrap(),
                    "--probe-jitter",
                    "1",
                ])
                .via(lab.prefix(host))
                .start()
        })
        .collect();

    // 1. Every ordered pair gets RTT, loss (both ways), route and capacity.
    let wanted: BTreeSet<(String, String, String)> = HOSTS
        .iter()
        .flat_map(|(_, from)| HOSTS.iter().map(move |(_, to)| (*from, *to)))
        .filter(|(from, to)| from != to)
        .flat_map(|(from, to)| {
            ["rtt", "loss", "loss_reverse", "route", "capacity"]
                .map(|k| (from.to_string(), to.to_string(), k.to_string()))
        })
        .collect();
    let started = Instant::now();
    loop {
        let have = pairs_with_kinds(&lab);
        let missing: Vec<_> = wanted.difference(&have).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "after 90 s still missing {missing:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    eprintln!("every pair's series in {:.0?}", started.elapsed());
    // The series answer as the API promises, raw and smoothed.
    let s = api(
        &lab,
        "B",
        "/api/v1/series?from=a.mesh&to=c.mesh&kind=rtt&ewma=0.5",
    );
    let rtt = s["points"][0]["value"].as_f64().unwrap();
    assert!(
        (15.0..30.0).contains(&rtt),
        "a→c rtt {rtt} (20 ms path): {s}"
    );
    assert_eq!(s["smoothing"], "ewma 0.5");

    // 2. Paths sharing router 10.48.0.1 are one group; B–C is not in it.
    let groups = api(&lab, "C", "/api/v1/groups")["groups"].clone();
    let shared = groups
        .as_array()
        .unwrap()
        .iter()
        .find(|g| {
            g["shared_hops"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h == "10.48.0.1")
        })
        .unwrap_or_else(|| panic!("no group shares 10.48.0.1: {groups}"));
    let paths: BTreeSet<(String, String)> = shared["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()))
        .collect();
    for p in [("a.mesh", "b.mesh"), ("a.mesh", "c.mesh")] {
        assert!(
            paths.contains(&(p.0.into(), p.1.into())),
            "{p:?} not in {shared}"
        );
    }
    assert!(
        !paths.contains(&("b.mesh".into(), "c.mesh".into())),
        "b→c shares no router with a's paths: {shared}"
    );
    let route = api(&lab, "A", "/api/v1/routes?from=a.mesh&to=b.mesh")["routes"][0].clone();
    assert_eq!(route["hops"][0]["addr"], "10.48.0.1", "{route}");

    // 3. A reroute of A–B is a route-change event within one interval.
    let set = lab.netlab(&["set", "--path", "0", "--hops", "10.48.9.1", "--rtt", "14"]);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let rerouted = Instant::now();
    let limit = Duration::from_secs_f64(INTERVAL_S as f64 * 1.1 + 8.0);
    let event = loop {
        let events = api(&lab, "A", "/api/v1/events?from=a.mesh&to=b.mesh");
        let found = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event"] == "route_change")
            .cloned();
        if let Some(e) = found {
            break e;
        }
        assert!(
            rerouted.elapsed() < limit,
            "no route change a→b within {limit:?}: {events}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    eprintln!(
        "route change seen after {:.1?}: {event}",
        rerouted.elapsed()
    );
    let after = &event["details"]["after"];
    assert_eq!(after[0], "10.48.9.1", "{event}");
    assert_eq!(event["details"]["before"][0], "10.48.0.1", "{event}");
}
