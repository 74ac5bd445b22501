//! The advisor as users meet it: `tern serve --http`, `tern advisor`,
//! `tern advise`, `tern cp`/`tern perf --advisor`, and the Python client,
//! on SQLite and (when `TERN_TEST_PG` is set) PostgreSQL.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tern_testkit::daemon::Daemon;
use tern_testkit::net::closed_addr;
use tern_testkit::skip::skip;

mod common;
use common::tern;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A server process (`tern serve` or `tern advisor`) that prints one JSON
/// line on start, run in a directory of its own holding `root/`.
struct Proc {
    daemon: Daemon,
    _dir: tempfile::TempDir,
}

impl Proc {
    fn start(args: &[&str]) -> Proc {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("root")).unwrap();
        let mut cmd = tern();
        cmd.args(args)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--json")
            .current_dir(dir.path());
        Proc {
            daemon: Daemon::spawn(cmd, &dir.path().join("log")),
            _dir: dir,
        }
    }

    /// `tern serve --http` with the advisor beside the daemon.
    fn serve(db: Option<&str>) -> Proc {
        Proc::serve_with(db, &[])
    }

    /// The same with more arguments.
    fn serve_with(db: Option<&str>, extra: &[&str]) -> Proc {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--root",
            "root",
            "--probe-jitter",
            "0",
        ];
        if let Some(db) = db {
            args.extend(["--db", db]);
        }
        args.extend_from_slice(extra);
        Proc::start(&args)
    }

    fn http(&self) -> String {
        self.daemon.http_url()
    }

    fn daemon(&self) -> String {
        format!("tern://{}", self.daemon.addr())
    }
}

/// One HTTP/1.1 request; returns the status and the JSON body.
fn http(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = TcpStream::connect(authority).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let payload = &raw[raw.find("\r\n\r\n").unwrap() + 4..];
    (status, serde_json::from_str(payload).unwrap_or(Value::Null))
}

/// The measurements of a host, newest first.
fn history(url: &str, host: &str) -> Vec<Value> {
    let (status, h) = http("GET", &format!("{url}/api/v1/history/{host}"), None);
    assert_eq!(status, 200, "{h}");
    h["measurements"].as_array().unwrap().clone()
}

/// Runs tern with a config dir of its own: tests run in parallel and a port
/// one test's daemon used may be reused by another daemon with another
/// certificate, which a shared `known_hosts` would rightly refuse.
fn run(args: &[&str]) -> Output {
    let cfg = tempfile::tempdir().unwrap();
    tern()
        .args(args)
        .env("XDG_CONFIG_HOME", cfg.path())
        .output()
        .unwrap()
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Waits until `f` holds, or fails saying `what`.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A fresh database in the cluster `TERN_TEST_PG` names, or `None` (with
/// a message) when it is not set.
fn fresh_pg() -> Option<String> {
    let base = std::env::var("TERN_TEST_PG").ok().filter(|v| !v.is_empty());
    let Some(base) = base else {
        skip(
            "PostgreSQL half",
            "TERN_TEST_PG is not set; ran on SQLite only",
        );
        return None;
    };
    let name = format!("tern_cli_{:016x}", rand_u64());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let mut c = sqlx::AnyConnection::connect(&base)
            .await
            .expect("connect to TERN_TEST_PG");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut c)
            .await
            .unwrap();
    });
    Some(format!("{}/{name}", &base[..base.rfind('/').unwrap()]))
}

fn rand_u64() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)
}

/// Advice minus what changes between two asks a moment apart (ages).
fn without_ages(mut v: Value) -> Value {
    for key in ["rtt", "capacity"] {
        v[key].as_object_mut().unwrap().remove("age_s");
    }
    v.as_object_mut().unwrap().remove("age_s");
    v
}

fn python3() -> Option<Command> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("Python half", "no python3 (scripts/setup.sh installs it)");
        return None;
    }
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", repo_root().join("python/src"));
    Some(c)
}

fn agree_on(db: Option<&str>, label: &str) {
    let serve = Proc::serve(db);
    let url = serve.http();
    // Real traffic: the daemon records the session (discovery, passive
    // RTT and rate); the RTT probe then measures the new target.
    let perf = run(&[
        "perf",
        &serve.daemon(),
        "--time",
        "1",
        "--protect",
        "clear",
        "--advisor",
        &url,
        "--json",
    ]);
    let report = stdout_json(&perf);
    assert_eq!(report["advisor"]["reported"], true, "{label}: {report}");
    wait_until("the session recorded and both default probes run", || {
        let (_, s) = http("GET", &format!("{url}/api/v1/schedule"), None);
        let (_, h) = http("GET", &format!("{url}/api/v1/history/127.0.0.1"), None);
        let kinds: Vec<&str> = h["measurements"].as_array().map_or(vec![], |m| {
            m.iter().filter_map(|m| m["kind"].as_str()).collect()
        });
        s["completed"].as_u64().unwrap_or(0) + s["failed"].as_u64().unwrap_or(0) >= 2
            && s["running"].as_array().is_some_and(|r| r.is_empty())
            && kinds.contains(&"throughput")
    });
    let (status, api) = http("GET", &format!("{url}/api/v1/advice/127.0.0.1"), None);
    assert_eq!(status, 200, "{label}: {api}");
    assert_eq!(
        api["source"], "mixed",
        "{label}: passive session and active probe: {api}"
    );
    let cli = stdout_json(&run(&["advise", "127.0.0.1", "--server", &url, "--json"]));
    assert_eq!(
        without_ages(cli),
        without_ages(api.clone()),
        "{label}: tern advise --json and the API"
    );
    if let Some(mut py) = python3() {
        let out = py
            .args(["-c", "import json, sys; from tern_advisor import Advisor; a = Advisor(sys.argv[1]); \
                          print(json.dumps({'advice': a.advice('127.0.0.1'), 'buffer': a.buffer_size('127.0.0.1'), \
                                            'history': a.history('127.0.0.1')}))"])
            .arg(&url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            without_ages(got["advice"].clone()),
            without_ages(api.clone()),
            "{label}: Python and the API"
        );
        assert_eq!(got["buffer"], api["buffer_bytes"], "{label}");
        let measured = history(&url, "127.0.0.1");
        assert!(measured.len() >= 2, "{label}: {measured:?}");
        assert_eq!(
            got["history"],
            Value::Array(measured),
            "{label}: Python's history and the API's"
        );
    }
    let human = run(&["advise", "127.0.0.1", "--server", &url]);
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("advice for 127.0.0.1"), "{text}");
    assert!(
        text.contains(&format!(
            "--window {} -P {}",
            api["tern_window_bytes"], api["streams"]
        )),
        "{label}: {text}"
    );
}

#[test]
fn the_api_the_python_client_and_tern_advise_agree_on_sqlite_and_postgres() {
    agree_on(None, "sqlite");
    if let Some(pg) = fresh_pg() {
        agree_on(Some(&pg), "postgres");
    }
}

#[test]
fn tern_advise_exit_codes() {
    let serve = Proc::serve(None);
    let url = serve.http();
    let out = run(&["advise", "unknown.example", "--server", &url]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown host"));
    let out = run(&["advise", "not/a/host", "--server", &url]);
    assert_eq!(out.status.code(), Some(2));
    let closed = closed_addr();
    let out = run(&[
        "advise",
        "h.example",
        "--server",
        &format!("http://{closed}"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["advise", "h.example", "--server", "https://x"]);
    assert_eq!(out.status.code(), Some(2));
    let state = tempfile::tempdir().unwrap();
    let out = run(&[
        "serve",
        "--root",
        ".",
        "--http",
        "nonsense",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An advisor of its own (not beside the daemon), seeded with what an
/// earlier transfer to this host achieved over a path of `rtt_ms`; and
/// its advice for the host.
fn seeded_advisor(rtt_ms: f64) -> (Proc, Value) {
    let advisor = Proc::start(&["advisor", "--http", "127.0.0.1:0", "--no-probes"]);
    let url = advisor.http();
    let seed = json!({"host": "127.0.0.1", "rtt_ms": rtt_ms, "throughput_bps": 4e8,
                      "bytes": 500_000_000u64, "duration_s": 10.0, "limit": "network",
                      "command": "seed"});
    let (status, out) = http("POST", &format!("{url}/api/v1/report"), Some(&seed));
    assert_eq!(status, 201, "{out}");
    let (status, advice) = http("GET", &format!("{url}/api/v1/advice/127.0.0.1"), None);
    assert_eq!(status, 200, "{advice}");
    (advisor, advice)
}

/// An advisor on a port of its own that answers `answers` requests with
/// `body` (200, JSON), whatever they ask: stands in for one of another
/// version, or for something else on the advisor's port.
fn fake_advisor(body: String, answers: usize) -> (String, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        for _ in 0..answers {
            let (mut s, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
                request.push(byte[0]);
            }
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
    });
    (url, server)
}

/// Advice no network can have (a capacity of 1e300 bit/s, a product of
/// 2^64 - 1 bytes) is refused by `tern advise`, naming the field and the
/// bound, and nothing of it is printed.
#[test]
fn tern_advise_refuses_advice_no_network_can_have() {
    let (_advisor, mut advice) = seeded_advisor(20.0);
    advice["capacity_bps"] = json!(1e300);
    advice["capacity"]["value"] = json!(1e300);
    advice["bdp_bytes"] = json!(u64::MAX);
    let (url, server) = fake_advisor(advice.to_string(), 2);
    for json_flag in [None, Some("--json")] {
        let mut args = vec!["advise", "127.0.0.1", "--server", &url];
        args.extend(json_flag);
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("advice out of range"), "{args:?}: {err}");
        assert!(
            err.contains("capacity_bps") && err.contains("10 Tbit/s"),
            "{args:?}: {err}"
        );
        assert!(err.len() < 400, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: {:?}", out.stdout);
    }
    server.join().unwrap();
}

/// A transfer's `--json` report shows it started from `advice` (streams,
/// and the window locked at it) and reported back.
fn started_from(report: &Value, advice: &Value) {
    let used = &report["advisor"];
    assert_eq!(used["streams"], advice["streams"], "{report}");
    assert_eq!(
        used["window_bytes"], advice["tern_window_bytes"],
        "{report}"
    );
    assert_eq!(
        report["tuning"]["window"],
        advice["tern_window_bytes"].to_string(),
        "the window was locked at the advice: {report}"
    );
    assert!(
        report["streams"].as_u64().unwrap() >= advice["streams"].as_u64().unwrap(),
        "{report}"
    );
    assert_eq!(used["reported"], true, "{report}");
}

#[test]
fn cp_starts_from_the_advice_and_reports_back() {
    let (advisor, advice) = seeded_advisor(20.0);
    let url = advisor.http();
    let serve = Proc::start(&["serve", "--listen", "127.0.0.1:0", "--root", "root"]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("f");
    std::fs::write(&src, vec![7u8; 3 << 20]).unwrap();
    let dst = format!("{}/f", serve.daemon());
    let cp = stdout_json(&run(&[
        "cp",
        "--advisor",
        &url,
        "--protect",
        "clear",
        "--json",
        src.to_str().unwrap(),
        &dst,
    ]));
    started_from(&cp, &advice);
    let h = history(&url, "127.0.0.1");
    assert!(h.iter().any(|m| m["producer"] == "tern cp"), "{h:?}");
    // --window wins over the advice, and -P too.
    let cp = stdout_json(&run(&[
        "cp",
        "--advisor",
        &url,
        "--window",
        "kernel",
        "-P",
        "2",
        "--protect",
        "clear",
        "--json",
        src.to_str().unwrap(),
        &dst,
    ]));
    assert_eq!(cp["advisor"]["window_bytes"], Value::Null, "{cp}");
    assert_eq!(cp["advisor"]["streams"], Value::Null, "{cp}");
    assert_eq!(cp["tuning"]["window"], "kernel", "{cp}");
    // An advisor that is not there: the copy goes ahead from the defaults.
    let closed = closed_addr();
    let out = run(&[
        "cp",
        "--advisor",
        &format!("http://{closed}"),
        "--protect",
        "clear",
        src.to_str().unwrap(),
        &dst,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no advice") && err.contains("could not report"),
        "{err}"
    );
}

#[test]
fn perf_starts_from_the_advice_and_reports_back() {
    // 100 ms x 400 Mbit/s: the ramp asks for several streams, so the
    // stream count is the advice's and not tern's default.
    let (advisor, advice) = seeded_advisor(100.0);
    let url = advisor.http();
    assert!(advice["streams"].as_u64().unwrap() > 1, "{advice}");
    let before = history(&url, "127.0.0.1").len();
    let serve = Proc::start(&["serve", "--listen", "127.0.0.1:0", "--root", "root"]);
    let perf = stdout_json(&run(&[
        "perf",
        &serve.daemon(),
        "--time",
        "2",
        "--advisor",
        &url,
        "--protect",
        "clear",
        "--json",
    ]));
    started_from(&perf, &advice);
    let h = history(&url, "127.0.0.1");
    assert!(h.len() > before, "the report added to the history: {h:?}");
    let reported: Vec<&Value> = h.iter().filter(|m| m["producer"] == "tern perf").collect();
    assert!(!reported.is_empty(), "{h:?}");
    let rate = reported.iter().find(|m| m["kind"] == "throughput").unwrap();
    assert_eq!(rate["details"]["streams"], perf["streams"], "{rate}");
}

#[test]
fn the_daemon_feeds_its_advisor_and_targets_come_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let targets = dir.path().join("targets");
    std::fs::write(&targets, "# config\n192.0.2.77:4747 600\n").unwrap();
    let serve = Proc::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--root",
        "root",
        "--http",
        "127.0.0.1:0",
        "--no-probes",
        "--targets",
        targets.to_str().unwrap(),
    ]);
    let url = serve.http();
    let src = dir.path().join("f");
    std::fs::write(&src, vec![1u8; 1 << 20]).unwrap();
    let out = run(&[
        "cp",
        "--protect",
        "clear",
        src.to_str().unwrap(),
        &format!("{}/f", serve.daemon()),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the session discovered", || {
        let (_, t) = http("GET", &format!("{url}/api/v1/targets"), None);
        t["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["host"] == "127.0.0.1")
    });
    let (_, t) = http("GET", &format!("{url}/api/v1/targets"), None);
    let sources: Vec<(String, String)> = t["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["host"].as_str().unwrap().to_string(),
                t["source"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [
            ("127.0.0.1".to_string(), "discovered".to_string()),
            ("192.0.2.77".to_string(), "config".to_string())
        ]
    );
    let h = history(&url, "127.0.0.1");
    assert!(
        h.iter()
            .all(|m| m["producer"] == "tern serve" && m["origin"] == "passive"),
        "{h:?}"
    );
    let (status, doc) = http("GET", &format!("{url}/api/v1/openapi.json"), None);
    assert_eq!(status, 200);
    assert!(doc["paths"].as_object().unwrap().len() >= 6);
    // A bad targets file stops the daemon with a clear message.
    std::fs::write(&targets, "host:notaport\n").unwrap();
    let out = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--root",
        ".",
        "--http",
        "0",
        "--targets",
        targets.to_str().unwrap(),
        "--state-dir",
        dir.path().join("s").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn loopback_target(addr: std::net::SocketAddr) -> tern_advisor::ProbeTarget {
    tern_advisor::ProbeTarget {
        host: addr.ip().to_string(),
        port: addr.port(),
        addrs: vec![addr],
    }
}

fn listen_addr(p: &Proc) -> std::net::SocketAddr {
    p.daemon.addr()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Short trains of small packets. Loopback delivers them in bunches the
/// system calls and the scheduler make, far from a line, so the stray
/// limit is lifted (as in tern-probe's own loopback tests).
fn loopback_capacity() -> tern_advisor::UdpTrainCapacity {
    tern_advisor::UdpTrainCapacity {
        options: tern_probe::CapacityOptions {
            train_len: 20,
            packet_size: Some(1200),
            trains: 4,
            max_trains: 8,
            min_usable: 2,
            max_stray: 10.0,
            ..tern_probe::CapacityOptions::default()
        },
    }
}

fn perf_probe(duration: Duration) -> tern_advisor::EngineThroughput {
    tern_advisor::EngineThroughput {
        options: tern_testkit::client::options(2, tern_proto::Protect::Clear, 1 << 20),
        duration,
    }
}

/// The engine paces to the grant after a burst of one block, and the test
/// counts up to a block more in flight: 2 blocks over the grant at most.
fn within_grant(t: &tern_advisor::Sample, grant_bps: f64) {
    let bytes = t.details["bytes"].as_f64().unwrap();
    let secs = t.details["duration_s"].as_f64().unwrap();
    assert!(
        bytes <= grant_bps / 8.0 * secs + 2.0 * f64::from(1u32 << 20) + 65536.0,
        "over the grant of {grant_bps} bit/s: {t:?}"
    );
}

/// The probe crate's measurements as advisor plug-ins, against a real
/// `tern serve` on loopback (which answers UDP probes on its port): the
/// samples they name, the load they declare, and their errors.
#[test]
fn the_probe_adapters_measure_a_real_daemon() {
    use tern_advisor::{Concurrency, Grant, Kind, Probe, ProbeError};
    let serve = Proc::start(&["serve", "--listen", "127.0.0.1:0", "--root", "root"]);
    let mute = Proc::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--root",
        "root",
        "--no-udp-probe",
    ]);
    let daemon = loopback_target(listen_addr(&serve));
    let no_udp = loopback_target(listen_addr(&mute));
    runtime().block_on(async {
        let capacity = loopback_capacity();
        assert_eq!(capacity.class(), Concurrency::Light);
        // Trains out and replies back both count, within the budget.
        assert_eq!(capacity.load_bps(&daemon, 1_000_000_000), 16_000_000);
        assert_eq!(capacity.load_bps(&daemon, 5_000_000), 5_000_000);
        let grant = Grant {
            load_bps: 10_000_000,
        };
        let s = capacity.run(&daemon, grant).await.unwrap();
        assert_eq!(s.len(), 1, "{s:?}");
        let c = &s[0];
        assert_eq!(c.kind, Kind::Capacity);
        assert!(c.value.is_finite() && c.value > 1e6, "{c:?}");
        assert_eq!(c.details["method"], "udp_packet_train");
        assert_eq!(c.details["direction"], "forward");
        assert!(c.details["lower_bound"].is_boolean(), "{c:?}");
        assert!(c.details["dispersion_bps"].as_f64().unwrap() >= 0.0);
        assert!(c.details["trains_used"].as_u64().unwrap() >= 2, "{c:?}");
        assert!(c.details["reverse_bps"].as_f64().unwrap() > 1e6, "{c:?}");
        // Paced to half the grant each way.
        let load = c.details["load_bps"].as_f64().unwrap();
        assert!(load > 0.0 && load <= 5e6 * 1.05, "{c:?}");
        let e = capacity.run(&no_udp, grant).await.unwrap_err();
        assert!(
            matches!(&e, ProbeError::Unreachable(m) if m.contains("UDP")),
            "{e}"
        );

        let throughput = perf_probe(Duration::from_millis(1500));
        assert_eq!(throughput.class(), Concurrency::ExclusivePerPath);
        assert_eq!(throughput.load_bps(&daemon, 50_000_000), 50_000_000);
        let grant = Grant {
            load_bps: 50_000_000,
        };
        let s = throughput.run(&daemon, grant).await.unwrap();
        assert_eq!(s.len(), 1, "{s:?}");
        let t = &s[0];
        assert_eq!(t.kind, Kind::Throughput);
        assert!(t.value > 1e6, "{t:?}");
        within_grant(t, 50e6);
        assert_eq!(t.details["streams"], 2);
        assert_eq!(t.details["method"], "tern_perf");
        if t.value >= 45e6 {
            assert_eq!(t.details["limit"], "probe_budget", "{t:?}");
        }
        let closed = loopback_target(closed_addr());
        let e = throughput.run(&closed, grant).await.unwrap_err();
        assert!(matches!(e, ProbeError::Unreachable(_)), "{e}");
    });
}

/// The window x streams sweep as a plug-in against a real daemon: a
/// sample per cell, each paced to the grant, the fastest marked best.
#[test]
fn the_sweep_adapter_measures_a_real_daemon() {
    use tern_advisor::{Concurrency, EngineSweep, Grant, Kind, Probe, ProbeError};
    let serve = Proc::start(&["serve", "--listen", "127.0.0.1:0", "--root", "root"]);
    let daemon = loopback_target(listen_addr(&serve));
    runtime().block_on(async {
        let sweep = EngineSweep {
            streams: vec![1, 2],
            ..EngineSweep::new(
                perf_probe(Duration::ZERO).options,
                Duration::from_millis(600),
            )
        };
        assert_eq!(sweep.class(), Concurrency::ExclusivePerPath);
        assert_eq!(sweep.load_bps(&daemon, 30_000_000), 30_000_000);
        let grant = Grant {
            load_bps: 30_000_000,
        };
        let cells = sweep.run(&daemon, grant).await.unwrap();
        assert_eq!(cells.len(), 4, "2 stream counts x 2 windows: {cells:?}");
        let mut grid: Vec<(u64, String)> = cells
            .iter()
            .map(|c| {
                let s = &c.details["sweep"];
                (s["streams"].as_u64().unwrap(), s["window"].to_string())
            })
            .collect();
        grid.sort();
        // The locked window is twice the product at the grant for the RTT
        // the sweep measured once, in 4 KiB steps from 64 KiB: the floor on
        // a quiet loopback, more when a connect was slow on a busy host.
        let rtt_ms = cells[0].details["sweep"]["rtt_ms"].as_f64().unwrap();
        assert!(
            cells.iter().all(|c| c.details["sweep"]["rtt_ms"] == rtt_ms),
            "one RTT for the whole sweep: {cells:?}"
        );
        let product = (2.0 * rtt_ms / 1e3 * 30e6 / 8.0).ceil() as u64;
        let locked = format!("\"{}\"", product.div_ceil(4096).max(16) * 4096);
        assert_eq!(
            grid,
            [
                (1, locked.clone()),
                (1, "\"auto\"".to_string()),
                (2, locked),
                (2, "\"auto\"".to_string())
            ],
            "RTT {rtt_ms} ms"
        );
        for c in &cells {
            assert_eq!(c.kind, Kind::Throughput);
            assert!(c.value > 1e6, "{c:?}");
            within_grant(c, 30e6);
            assert_eq!(c.details["method"], "tern_perf_sweep");
            assert_eq!(c.details["sweep"]["cells"], 4);
            assert_eq!(c.details["streams"], c.details["sweep"]["streams"]);
            assert_eq!(c.details["window"], c.details["sweep"]["window"]);
        }
        let best: Vec<&tern_advisor::Sample> = cells
            .iter()
            .filter(|c| c.details["sweep"]["best"] == true)
            .collect();
        assert_eq!(best.len(), 1, "{cells:?}");
        let fastest = cells.iter().map(|c| c.value).fold(0.0, f64::max);
        assert_eq!(best[0].value, fastest);
        let closed = loopback_target(closed_addr());
        let e = sweep.run(&closed, grant).await.unwrap_err();
        assert!(matches!(e, ProbeError::Unreachable(_)), "{e}");
    });
}

/// Through the scheduler: the probes' samples land in the store, and
/// advice takes its capacity from the packet trains, marked active.
#[test]
fn advice_takes_capacity_from_the_packet_train_probe() {
    use std::sync::Arc;
    use tern_advisor::service::TargetRequest;
    use tern_advisor::{Advisor, AdvisorOptions, Kind, Probe, TargetSource};
    let serve = Proc::start(&["serve", "--listen", "127.0.0.1:0", "--root", "root"]);
    let port = listen_addr(&serve).port();
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mut opts = AdvisorOptions::new(dir.path().join("a.db").to_str().unwrap());
        opts.scheduler.start_jitter = Duration::ZERO;
        opts.scheduler.budget_bps = 40_000_000;
        let probes: Vec<Arc<dyn Probe>> = vec![
            Arc::new(tern_advisor::probe::TcpConnectRtt::default()),
            Arc::new(loopback_capacity()),
            Arc::new(perf_probe(Duration::from_secs(1))),
        ];
        let advisor = Advisor::start_with_probes(opts, probes, std::future::pending())
            .await
            .unwrap();
        let svc = advisor.service();
        let req = TargetRequest {
            host: "127.0.0.1".into(),
            port: Some(port),
            // A probe that failed on a busy host runs again well within
            // the deadline.
            interval_s: Some(10),
            group: None,
        };
        svc.add_target(&req, TargetSource::Api).await.unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        let history = loop {
            let h = svc.history("127.0.0.1", None, 100).await.unwrap();
            let kinds = [Kind::Rtt, Kind::Capacity, Kind::Throughput];
            if kinds.iter().all(|k| h.iter().any(|m| m.kind == *k)) {
                break h;
            }
            let status = svc.schedule();
            assert!(Instant::now() < until, "probes did not all run: {status:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let cap = history.iter().find(|m| m.kind == Kind::Capacity).unwrap();
        assert_eq!(cap.producer, "capacity_udp_train");
        assert_eq!(cap.origin, tern_advisor::Origin::Active);
        let thr = history.iter().find(|m| m.kind == Kind::Throughput).unwrap();
        assert_eq!(thr.producer, "throughput_tern_perf");
        within_grant(
            &tern_advisor::Sample {
                kind: thr.kind,
                value: thr.value,
                details: thr.details.clone(),
            },
            40e6,
        );
        let a = serde_json::to_value(svc.advice("127.0.0.1").await.unwrap()).unwrap();
        assert_eq!(a["capacity"]["kind"], "capacity", "{a}");
        assert_eq!(a["capacity"]["source"], "active", "{a}");
        assert_eq!(a["capacity"]["value"], json!(cap.value), "{a}");
        assert_eq!(a["source"], "active", "{a}");
    });
}

/// `--probe-throughput` and `--probe-sweep` add the engine test and the
/// sweep to the default probes, and their samples reach the archive
/// through the binary.
#[test]
fn the_binary_runs_the_capacity_throughput_and_sweep_probes() {
    let serve = Proc::serve_with(
        None,
        &[
            "--probe-budget",
            "40M",
            "--probe-throughput",
            "1",
            "--probe-sweep",
            "0.3",
        ],
    );
    let url = serve.http();
    let port = listen_addr(&serve).port();
    let (status, t) = http(
        "POST",
        &format!("{url}/api/v1/targets"),
        Some(&json!({"host": "127.0.0.1", "port": port})),
    );
    assert_eq!(status, 201, "{t}");
    let (_, s) = http("GET", &format!("{url}/api/v1/schedule"), None);
    let probes: Vec<(&str, &str)> = s["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["class"].as_str().unwrap()))
        .collect();
    assert_eq!(
        probes,
        [
            ("rtt_tcp_connect", "light"),
            ("capacity_udp_train", "light"),
            ("loss_udp_echo", "light"),
            ("route_udp", "light"),
            ("throughput_tern_perf", "exclusive_per_path"),
            ("sweep_tern_perf", "exclusive_per_path")
        ],
        "{s}"
    );
    wait_until("the throughput test and the sweep stored samples", || {
        let h = history(&url, "127.0.0.1");
        let by = |probe: &str| h.iter().filter(|m| m["producer"] == probe).count();
        by("throughput_tern_perf") >= 1 && by("sweep_tern_perf") == 8
    });
    let out = run(&[
        "serve",
        "--probe-throughput",
        "-1",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(2), "a negative duration is refused");
}
