//! The dashboard's must-show (issue 18), end to end on netlab: host A runs
//! `tern serve --http` (daemon, advisor, dashboard, `/metrics`) measuring
//! two paths to host B's daemon; then
//! - `/metrics` parses with the Prometheus project's OpenMetrics parser,
//!   has at least 8 `tern_` families, and its received-bytes counter
//!   counts a copy made just before;
//! - in headless Chromium the grid has one cell per pair, a keyboard
//!   "click" opens the path page, and its charts hold the measured points;
//! - a capacity cut made with `netlab set --rate` fires an alert to a
//!   webhook;
//! - a reroute made with `netlab set --hops` is listed on the path page;
//! - the route graph draws and names the bottleneck group (both paths
//!   pass router 10.48.0.1);
//! - the world map places the hosts a mesh gives coordinates and draws
//!   each measured path between them;
//! - the transfers view updates while a copy runs, with its streams,
//!   paths and tuning, and lists it among the recent transfers once done.
//!
//! Screenshots go to a temporary directory, or to `TERN_SCREENSHOTS`
//! (docs/ holds the committed ones). Needs root, the tern binary, Chromium
//! and Python's playwright and prometheus_client (scripts/setup.sh
//! installs them); skips otherwise, fails under TERN_TEST_STRICT.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Lab;
use serde_json::Value;
use tern_testkit::daemon::{KillOnDrop, Serve};
use tern_testkit::skip::skip;

const LAB: &str = "dash1";
const BASE: &str = "http://127.0.0.1:4748";
const INTERVAL_S: u64 = 5;

fn text(out: &Output) -> String {
    format!(
        "{}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What this test needs beyond root and tern, or why it cannot run.
fn browser_missing() -> Option<String> {
    if !Path::new("/usr/bin/chromium").exists() {
        return Some("no /usr/bin/chromium (apt-get install chromium)".into());
    }
    let py = Command::new("python3")
        .args(["-c", "import playwright, prometheus_client"])
        .output();
    match py {
        Ok(o) if o.status.success() => None,
        _ => Some("python3 lacks playwright or prometheus_client (pip install playwright prometheus_client)".into()),
    }
}

/// GET `path` from the advisor in A, as JSON.
fn api(lab: &Lab, path: &str) -> Value {
    let out = lab.exec(
        "A",
        &[
            "python3",
            "-c",
            "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())",
            &format!("{BASE}{path}"),
        ],
    );
    assert!(out.status.success(), "GET {path}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

const PARSE_METRICS: &str = r#"
import json, sys, urllib.request
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
from prometheus_client.parser import text_string_to_metric_families as prom
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
families = {}
for f in om(text):
    families[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
# The classic text parser reads it too (Prometheus accepts both).
classic = sorted({f.name for f in prom(text)})
print(json.dumps({"families": families, "classic": classic}))
"#;

fn browse(lab: &Lab, shots: &Path, check: &[&str]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/dashboard.py");
    let mut args = vec!["python3", script, BASE];
    args.extend_from_slice(check);
    let shots = shots.to_str().unwrap();
    args.extend_from_slice(&["--shots", shots]);
    let out = lab.exec("A", &args);
    assert!(
        out.status.success(),
        "browser check {check:?}: {}",
        text(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> Option<Value>) -> Value {
    let started = Instant::now();
    loop {
        if let Some(v) = ready() {
            eprintln!("{what}: after {:.1?}", started.elapsed());
            return v;
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn the_dashboard_metrics_and_alerts_show_what_the_advisor_measured() {
    let name = "the_dashboard_metrics_and_alerts_show_what_the_advisor_measured";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    if let Some(why) = browser_missing() {
        skip(name, &why);
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let path = |p: &str| work.path().join(p).to_str().unwrap().to_string();
    let shots = std::env::var("TERN_SCREENSHOTS").unwrap_or_else(|_| path("shots"));
    let lab = Lab::up(
        LAB,
        &[
            "--path",
            "rtt=20,rate=100,queue=300,hops=10.48.0.1+10.48.1.1",
            "--path",
            "rtt=30,rate=100,queue=300,hops=10.48.0.1+10.48.2.1",
        ],
    );
    // B: a plain daemon (it answers the probes and serves the copies).
    std::fs::create_dir_all(path("b-root")).unwrap();
    let _b = Serve::new(&tern, path("b-root"), path("b-state"))
        .listen("0.0.0.0:4747")
        .via(lab.prefix("B"))
        .start();
    // A webhook receiver in A, appending every POST body to hook.jsonl.
    let hook_log = path("hook.jsonl");
    let receiver = format!(
        "import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n def do_POST(self):\n  n = int(self.headers['Content-Length'])\n  open({hook_log:?}, 'ab').write(self.rfile.read(n) + b'\\n')\n  self.send_response(204); self.end_headers()\n def log_message(self, *a): pass\nhttp.server.HTTPServer(('127.0.0.1', 9099), H).serve_forever()\n"
    );
    let _hook = KillOnDrop(
        lab.command("A", &["python3", "-c", &receiver])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::fs::write(
        path("targets"),
        format!("10.47.0.2:4747 {INTERVAL_S}\n10.47.1.2:4747 {INTERVAL_S}\n"),
    )
    .unwrap();
    std::fs::write(
        path("alerts.json"),
        r#"{"webhook": "http://127.0.0.1:9099/tern",
            "rules": [{"name": "capacity-cut", "target": "10.47.0.2", "kind": "capacity", "below_share": 0.6}]}"#,
    )
    .unwrap();
    // Where the hosts are, for the world map: a mesh of places only (no
    // group, so it adds no measurement to the targets file's).
    std::fs::write(
        path("places.json"),
        r#"{"name": "places", "groups": [], "hosts": [
            {"name": "a", "lat": 46.23, "lon": 6.05},
            {"name": "10.47.0.2", "lat": 41.88, "lon": -87.63},
            {"name": "10.47.1.2", "lat": 35.68, "lon": 139.77}]}"#,
    )
    .unwrap();
    std::fs::create_dir_all(path("a-root")).unwrap();
    let places = path("places.json");
    let targets = path("targets");
    let alerts = path("alerts.json");
    let _a = Serve::new(&tern, path("a-root"), path("a-state"))
        .listen("0.0.0.0:4747")
        .args([
            "--http",
            "127.0.0.1:4748",
            "--site",
            "a",
            "--targets",
            &targets,
            "--mesh",
            &places,
            "--alerts",
            &alerts,
            "--probe-jitter",
            "0",
            "--aggregate",
            "none",
        ])
        .via(lab.prefix("A"))
        .start();

    // Both paths measured (RTT, capacity, route).
    wait_for("both paths measured", Duration::from_secs(60), || {
        let v = api(&lab, "/api/v1/latest");
        let have = |host: &str, kind: &str| {
            v["latest"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["host"] == host && m["kind"] == kind)
        };
        ["10.47.0.2", "10.47.1.2"]
            .iter()
            .all(|h| have(h, "rtt") && have(h, "capacity") && have(h, "route"))
            .then_some(v)
    });

    // /metrics counts a copy made just before.
    let file = path("b-root/eight.bin");
    std::fs::write(&file, vec![7u8; 8 << 20]).unwrap();
    let cfg = format!("XDG_CONFIG_HOME={}", path("b-cfg"));
    let copy = lab.exec("B", &["env", &cfg, &tern, "cp", &file, "tern://10.47.0.1/"]);
    assert!(copy.status.success(), "copy: {}", text(&copy));
    let out = lab.exec(
        "A",
        &["python3", "-c", PARSE_METRICS, &format!("{BASE}/metrics")],
    );
    assert!(out.status.success(), "parsing /metrics: {}", text(&out));
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let families = m["families"].as_object().unwrap();
    let tern_families: Vec<&String> = families.keys().filter(|k| k.starts_with("tern_")).collect();
    eprintln!(
        "/metrics: {} tern_ families: {tern_families:?}",
        tern_families.len()
    );
    assert!(tern_families.len() >= 8, "{tern_families:?}");
    let received = &families["tern_received_bytes"];
    assert_eq!(received["type"], "counter");
    let bytes = received["samples"][0][2].as_f64().unwrap();
    assert!(
        bytes >= (8 << 20) as f64,
        "tern_received_bytes_total {bytes} after an 8 MiB copy"
    );
    assert!(
        m["classic"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "tern_received_bytes")
    );
    let rtt = &families["tern_path_rtt_seconds"]["samples"];
    assert_eq!(
        rtt.as_array().unwrap().len(),
        2,
        "one RTT gauge per path: {rtt}"
    );

    // The grid, a path page and its charts, in Chromium.
    let shots = Path::new(&shots);
    let grid = browse(&lab, shots, &["grid", "2"]);
    eprintln!("grid: {grid}");

    // A capacity cut fires the alert to the webhook.
    wait_for("a capacity baseline", Duration::from_secs(60), || {
        let s = api(&lab, "/api/v1/series?from=a&to=10.47.0.2&kind=capacity");
        (s["points"].as_array().unwrap().len() >= 4).then_some(s)
    });
    let cut = lab.netlab(&["set", "--path", "0", "--rate", "30"]);
    assert!(cut.status.success(), "{}", text(&cut));
    let notice = wait_for(
        "the alert's webhook",
        Duration::from_secs(4 * INTERVAL_S + 20),
        || {
            let log = std::fs::read_to_string(&hook_log).ok()?;
            log.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|n| n["alert"] == "capacity-cut" && n["status"] == "firing")
        },
    );
    assert_eq!(notice["target"], "10.47.0.2", "{notice}");
    assert!(notice["value"].as_f64().unwrap() < 0.6 * notice["baseline"].as_f64().unwrap());

    // A reroute is an event on the path page.
    let reroute = lab.netlab(&["set", "--path", "1", "--hops", "10.48.0.1+10.48.7.1"]);
    assert!(reroute.status.success(), "{}", text(&reroute));
    wait_for(
        "the route change",
        Duration::from_secs(3 * INTERVAL_S + 20),
        || {
            let e = api(&lab, "/api/v1/events?from=a&to=10.47.1.2");
            e["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["event"] == "route_change")
                .then_some(e)
        },
    );
    let event = browse(&lab, shots, &["event", "a", "10.47.1.2"]);
    assert!(
        event["event"].as_str().unwrap().contains("10.48.7.1"),
        "{event}"
    );

    // The route graph with its bottleneck group.
    let routes = browse(&lab, shots, &["routes"]);
    assert!(routes["groups"].as_u64().unwrap() >= 1, "{routes}");

    // The world map: three placed hosts, a line for each measured path.
    let map = browse(&lab, shots, &["map"]);
    assert_eq!(map["sites"], 3, "{map}");
    let links = map["links"].as_array().unwrap();
    assert_eq!(links.len(), 2, "a → each of the two targets: {map}");
    assert!(
        links
            .iter()
            .all(|l| l["rtt"].as_f64().is_some_and(|r| r > 0.0)),
        "{map}"
    );

    // The transfers view moves while a copy runs (rate-limited to last).
    let big = path("b-root/big.bin");
    // Random bytes: compression would shrink the wire bytes the rate
    // limit counts, and the copy would be over before it could be seen.
    let mut bytes = vec![0u8; 48 << 20];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut bytes);
    std::fs::write(&big, bytes).unwrap();
    let mut copy = lab
        .command(
            "B",
            &[
                "env",
                &cfg,
                &tern,
                "cp",
                "--rate-limit",
                "24M",
                &big,
                "tern://10.47.0.1/",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while api(&lab, "/api/v1/live")["sessions"]
        .as_array()
        .unwrap()
        .is_empty()
    {
        if started.elapsed() > Duration::from_secs(20) || copy.try_wait().unwrap().is_some() {
            let _ = copy.kill();
            let out = copy.wait_with_output().unwrap();
            panic!("the copy's session never showed: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let live = browse(&lab, shots, &["transfers"]);
    eprintln!("transfers: {live}");
    let per_stream = live["per_stream"].as_array().unwrap();
    assert!(!per_stream.is_empty(), "{live}");
    assert_eq!(
        live["paths"][0].as_str(),
        Some("10.47.0.1 ↔ 10.47.0.2"),
        "the daemon's streams take the path from A to B: {live}"
    );
    let done = copy.wait().unwrap();
    assert!(done.success(), "the watched copy failed");
    // The ended session is listed with its report.
    let recent = api(&lab, "/api/v1/live")["recent"][0].clone();
    assert_eq!(recent["outcome"], "completed", "{recent}");
    assert_eq!(recent["bytes"], 48u64 << 20, "{recent}");
    let listed = browse(&lab, shots, &["recent"]);
    assert_eq!(listed["session"], recent["id"], "{listed}");
    assert_eq!(listed["outcome"], "completed", "{listed}");
}
