//! The emulator against its configuration, and tern over an emulated long
//! path. These need root (namespaces, TUN devices); without it they skip
//! with a message. They check behaviour against configured values, with
//! tolerances from the issue (RTT within max(1 ms, 3%), rate within 5%).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Lab;
use serde_json::Value;
use tern_testkit::daemon::tern_bin;
use tern_testkit::files::{content_difference, hashed_bytes};
use tern_testkit::skip::{have, is_root, skip};

fn can_run(test: &str) -> bool {
    let root = is_root();
    let tun = Path::new("/dev/net/tun").exists();
    let tools = ["ip", "ping", "iperf3"].iter().all(|t| have(t));
    if !(root && tun && tools) {
        skip(
            test,
            &format!(
                "needs root, /dev/net/tun, ip, ping and iperf3 (root={root}, tun={tun}, tools={tools})"
            ),
        );
        return false;
    }
    true
}

/// Round-trip times from `ping` in A, in ms (min, avg, max, mdev), and
/// how many replies came.
fn ping(lab: &Lab, count: u32, interval: &str, to: &str) -> (Vec<f64>, u32) {
    let out = lab.exec(
        "A",
        &[
            "ping",
            "-n",
            "-q",
            "-c",
            &count.to_string(),
            "-i",
            interval,
            "-W",
            "3",
            to,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let received: u32 = text
        .split(", ")
        .find_map(|p| {
            p.strip_suffix(" received")
                .map(|n| n.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no ping summary in {text}"));
    let rtts = text
        .lines()
        .find(|l| l.starts_with("rtt"))
        .map(|l| {
            l.split(" = ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .split('/')
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .unwrap_or_default();
    (rtts, received)
}

/// iperf3 throughput A→B in Mbit/s (omitting the first seconds).
fn iperf3(lab: &Lab, to: &str, secs: u32, extra: &[&str]) -> f64 {
    let mut server = lab.spawn("B", &["iperf3", "-s", "-1", "-p", "5301"]);
    lab.wait_until_listening("B", 5301);
    let t = secs.to_string();
    let mut args = vec!["iperf3", "-c", to, "-p", "5301", "-t", &t, "-O", "2", "-J"];
    args.extend_from_slice(extra);
    let out = lab.exec("A", &args);
    let _ = server.kill();
    let _ = server.wait();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("iperf3: {}", String::from_utf8_lossy(&out.stdout)));
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .expect("bits_per_second")
        / 1e6
}

/// TCP payload share of a full-size packet: what a goodput can reach.
fn goodput_share(mtu: f64) -> f64 {
    (mtu - 52.0) / mtu
}

#[test]
fn rtt_rate_and_status_match_the_configuration() {
    if !can_run("rtt_rate_and_status_match_the_configuration") {
        return;
    }
    let lab = Lab::up(
        "nltest1",
        &[
            "--rtt",
            "40",
            "--rate",
            "200",
            "--tcp-rmem",
            "4096 131072 33554432",
            "--tcp-wmem",
            "4096 16384 33554432",
        ],
    );
    let (rtts, received) = ping(&lab, 10, "0.1", "10.47.0.2");
    assert_eq!(received, 10);
    // The configured delay is a floor; the minimum shows the emulator's
    // accuracy, the average adds the host's scheduling noise.
    let (min, avg) = (rtts[0], rtts[1]);
    assert!(
        (min - 40.0).abs() <= (40.0f64 * 0.03).max(1.0),
        "ping min {min} ms for 40 ms"
    );
    assert!(avg - 40.0 <= 4.0, "ping avg {avg} ms for 40 ms");

    let mbit = iperf3(&lab, "10.47.0.2", 6, &[]);
    let target = 200.0 * goodput_share(1500.0);
    assert!(
        (mbit - target).abs() / target <= 0.05,
        "iperf3 {mbit:.1} Mbit/s, path allows {target:.1}"
    );

    let st = lab.status();
    assert_eq!(st["paths"][0]["rtt_ms"], 40.0);
    assert_eq!(st["paths"][0]["b"], "10.47.0.2");
    assert!(st["paths"][0]["a_to_b"]["packets"].as_u64().unwrap() > 10_000);
    assert_eq!(
        st["sysctls"]["A"]["net.ipv4.tcp_rmem"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .last(),
        Some("33554432")
    );
    assert!(
        st["sysctls"]["B"]["net.ipv4.tcp_congestion_control"]
            .as_str()
            .is_some()
    );

    // `set` changes the path under a running lab.
    let out = lab.netlab(&["set", "--rtt", "80"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (rtts, _) = ping(&lab, 5, "0.1", "10.47.0.2");
    assert!((rtts[0] - 80.0).abs() <= 2.4, "after set: {} ms", rtts[0]);
}

#[test]
fn random_loss_is_within_statistical_bounds() {
    if !can_run("random_loss_is_within_statistical_bounds") {
        return;
    }
    let lab = Lab::up("nltest2", &["--rtt", "2", "--rate", "100", "--loss", "5%"]);
    let n = 1000;
    let (_, received) = ping(&lab, n, "0.002", "10.47.0.2");
    // A round trip survives with probability 0.95²; allow 4 standard deviations.
    let p = 1.0 - 0.95f64 * 0.95;
    let sigma = (p * (1.0 - p) / f64::from(n)).sqrt();
    let lost = 1.0 - f64::from(received) / f64::from(n);
    assert!(
        (lost - p).abs() <= 4.0 * sigma,
        "lost {lost:.4}, expected {p:.4} ± {:.4}",
        4.0 * sigma
    );
    let st = lab.status();
    assert!(st["paths"][0]["a_to_b"]["random_drops"].as_u64().unwrap() > 0);
}

#[test]
fn several_paths_and_down_is_idempotent() {
    if !can_run("several_paths_and_down_is_idempotent") {
        return;
    }
    let lab = Lab::up(
        "nltest3",
        &[
            "--path",
            "rtt=10,rate=100",
            "--path",
            "rtt=30,rate=50",
            "--mtu",
            "9000",
        ],
    );
    let (r0, _) = ping(&lab, 3, "0.1", "10.47.0.2");
    let (r1, _) = ping(&lab, 3, "0.1", "10.47.1.2");
    assert!((r0[0] - 10.0).abs() <= 1.0, "path 0: {}", r0[0]);
    assert!((r1[0] - 30.0).abs() <= 1.0, "path 1: {}", r1[0]);
    let st = lab.status();
    assert_eq!(st["mtu"], 9000);
    assert_eq!(st["paths"].as_array().unwrap().len(), 2);
    for _ in 0..2 {
        assert!(lab.netlab(&["down"]).status.success());
    }
    assert!(!Path::new("/var/run/netns/nltest3-a").exists());
    assert!(
        !lab.netlab(&["status"]).status.success(),
        "status of a lab that is down fails"
    );
}

#[test]
fn tern_copies_and_measures_over_a_50ms_path() {
    if !can_run("tern_copies_and_measures_over_a_50ms_path") {
        return;
    }
    let Some(tern) = tern_bin() else {
        skip(
            "tern_copies_and_measures_over_a_50ms_path",
            "build the tern binary first (cargo build -p tern)",
        );
        return;
    };
    let tern = tern.to_str().unwrap().to_string();
    let work = tempfile_dir("nltern");
    std::fs::create_dir_all(work.join("root")).unwrap();
    // Long enough uncompressed (2.7 s at 200 Mbit/s) for the path memory
    // to keep the first copy.
    let data = hashed_bytes(64 << 20);
    std::fs::write(work.join("src.bin"), &data).unwrap();
    let lab = Lab::up(
        "nltest4",
        &[
            "--rtt",
            "50",
            "--rate",
            "200",
            "--tcp-rmem",
            "4096 131072 16777216",
            "--tcp-wmem",
            "4096 16384 16777216",
        ],
    );
    let root = work.join("root");
    let server = lab.serve_tern(&tern, &work, &[]);
    let cfg = work.join("cfg");
    let env_cfg = format!("XDG_CONFIG_HOME={}", cfg.display());
    // This test's own path memory: other tests' copies to the same
    // address must not decide what the second copy starts from.
    let env_state = format!("XDG_STATE_HOME={}", work.join("state").display());
    let src = work.join("src.bin");
    let cp = |extra: &[&str], dest: &str| {
        let mut args = vec![
            "env",
            &env_cfg,
            &env_state,
            "TERN_LOG=tern_engine=debug",
            &tern,
            "cp",
            "--json",
        ];
        args.extend_from_slice(extra);
        args.extend([src.to_str().unwrap(), dest]);
        lab.exec("A", &args)
    };
    let out = cp(
        &["-P", "4", "--compress", "none"],
        "tern://10.47.0.2/copy.bin",
    );
    // The second copy starts from the first (path memory) and tells the
    // daemon its rate: the daemon's receive buffers start sized for it.
    let again = cp(&[], "tern://10.47.0.2/again.bin");
    let perf = lab.exec(
        "A",
        &[
            "env",
            &env_cfg,
            &tern,
            "perf",
            "tern://10.47.0.2",
            "--time",
            "3",
            "--protect",
            "clear",
            "--json",
        ],
    );
    let daemon_log = server.log_text();
    drop(server);
    assert!(
        out.status.success(),
        "tern cp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["bytes"], 64 << 20);
    assert!(
        again.status.success(),
        "second tern cp: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    let again_log = String::from_utf8_lossy(&again.stderr).into_owned();
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert!(again["started_from_last_copy"].is_object(), "{again}");
    // It also knew the daemon's hello: the opening went with it, and over
    // 50 ms the data connections were dialled meanwhile (PROTOCOL.md §8.2).
    assert!(
        again_log.contains("while the session opens"),
        "second copy's log: {again_log}"
    );
    assert_eq!(content_difference(root.join("again.bin"), &data), None);
    let started: Vec<&str> = daemon_log
        .lines()
        .filter(|l| l.contains("receive buffers start at"))
        .collect();
    assert_eq!(started.len(), 1, "only the copy from memory: {daemon_log}");
    assert_eq!(
        content_difference(root.join("copy.bin"), &data),
        None,
        "byte-identical over the emulated path"
    );
    assert!(
        perf.status.success(),
        "tern perf: {}",
        String::from_utf8_lossy(&perf.stderr)
    );
    let perf: Value = serde_json::from_slice(&perf.stdout).unwrap();
    assert!(perf["bytes"].as_u64().unwrap() > 0);
    let _ = std::fs::remove_dir_all(&work);
}

fn tempfile_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_path_that_goes_silent_fails_the_transfer_with_exit_9() {
    if !can_run("a_path_that_goes_silent_fails_the_transfer_with_exit_9") {
        return;
    }
    let Some(tern) = tern_bin() else {
        skip(
            "a_path_that_goes_silent",
            "build the tern binary first (cargo build -p tern)",
        );
        return;
    };
    let tern = tern.to_str().unwrap().to_string();
    let work = tempfile_dir("nlsilent");
    std::fs::create_dir_all(work.join("root")).unwrap();
    let lab = Lab::up("nltest5", &["--rtt", "10", "--rate", "100"]);
    let server = lab.serve_tern(&tern, &work, &["--io-timeout", "3"]);
    let env_cfg = format!("XDG_CONFIG_HOME={}", work.join("cfg").display());
    let started = std::time::Instant::now();
    let client = lab.spawn(
        "A",
        &[
            "env",
            &env_cfg,
            &tern,
            "perf",
            "tern://10.47.0.2",
            "--time",
            "120",
            "--io-timeout",
            "3",
            "--protect",
            "clear",
        ],
    );
    // Cut only once data flows: cut while the client still connects, the
    // failure would be a refused connection (exit 7).
    let sent = |lab: &Lab| {
        lab.status()["paths"][0]["a_to_b"]["packets"]
            .as_u64()
            .unwrap()
    };
    let (before, flowing_by) = (
        sent(&lab),
        std::time::Instant::now() + Duration::from_secs(20),
    );
    while sent(&lab) < before + 2_000 {
        assert!(
            std::time::Instant::now() < flowing_by,
            "tern perf never sent"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The path now drops everything, in both directions: no FIN, no RST.
    assert!(lab.netlab(&["set", "--loss", "100%"]).status.success());
    let out = client.wait_with_output().unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(&work);
    assert_eq!(
        out.status.code(),
        Some(9),
        "a silent peer is a lost connection"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "gave up within the I/O timeout, not at --time"
    );
}

#[test]
fn a_send_buffer_limit_on_a_long_fat_path_is_diagnosed() {
    if !can_run("a_send_buffer_limit_on_a_long_fat_path_is_diagnosed") {
        return;
    }
    let Some(tern) = tern_bin() else {
        skip(
            "a_send_buffer_limit_on_a_long_fat_path_is_diagnosed",
            "build the tern binary first",
        );
        return;
    };
    let tern = tern.to_str().unwrap().to_string();
    let work = tempfile_dir("nldiag");
    // 1 Gbit/s × 100 ms is 12.5 MB in flight; tcp_wmem's 4 MiB cap cannot hold it.
    let lab = Lab::up(
        "nltest6",
        &[
            "--rtt",
            "100",
            "--rate",
            "1000",
            "--mtu",
            "9000",
            "--tcp-rmem",
            "4096 131072 67108864",
            "--tcp-wmem",
            "4096 16384 4194304",
        ],
    );
    let root = work.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let server = lab.serve_tern(&tern, &work, &[]);
    let env_cfg = format!("XDG_CONFIG_HOME={}", work.join("cfg").display());
    let out = lab.exec(
        "A",
        &[
            "env",
            &env_cfg,
            &tern,
            "perf",
            "tern://10.47.0.2",
            "--time",
            "5",
            "--protect",
            "clear",
            "--json",
        ],
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&work);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tuning = &report["tuning"];
    assert_eq!(tuning["limit"], "send_buffer", "{tuning}");
    assert!(
        tuning["sysctls"][0]
            .as_str()
            .unwrap()
            .contains("net.ipv4.tcp_wmem"),
        "{tuning}"
    );
    assert_eq!(tuning["host"]["tcp_wmem"][2], 4194304);
    // As root tern may exceed the cap itself (SO_SNDBUFFORCE), and says so.
    assert!(
        !tuning["actions"].as_array().unwrap().is_empty(),
        "{tuning}"
    );
    assert!(
        tuning["summary"]
            .as_str()
            .unwrap()
            .contains("worked around"),
        "{tuning}"
    );
    assert!(tuning["streams"][0]["min_rtt_ms"].as_f64().unwrap() >= 99.0);
    // With no flags, the workaround is more streams whose buffers tern
    // sized together: it names them and stays near twice the BDP.
    let streams = report["streams"].as_u64().unwrap();
    assert!(streams >= 2, "{report}");
    assert!(
        tuning["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("over {streams} streams")),
        "{tuning}"
    );
    let bdp = 12_500_000.0;
    let peak = tuning["send_buffer_peak_bytes"].as_f64().unwrap();
    assert!(peak <= 2.5 * bdp, "{tuning}");
}

/// Runs `tern perf` on A against the lab's daemon; returns the JSON report.
fn tern_perf_json(lab: &Lab, tern: &str, work: &Path, prefix: &[&str], extra: &[&str]) -> Value {
    let env_cfg = format!("XDG_CONFIG_HOME={}", work.join("cfg").display());
    let mut cmd: Vec<&str> = prefix.to_vec();
    cmd.extend_from_slice(&["env", &env_cfg, tern, "perf", "tern://10.47.0.2"]);
    cmd.extend_from_slice(&["--protect", "clear", "--json"]);
    cmd.extend_from_slice(extra);
    let out = lab.exec("A", &cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn capped_buffers_bring_more_streams_and_a_capped_receiver_is_taken_over() {
    let test = "capped_buffers_bring_more_streams_and_a_capped_receiver_is_taken_over";
    if !can_run(test) {
        return;
    }
    let Some(tern) = tern_bin() else {
        skip(test, "build the tern binary first");
        return;
    };
    let work = tempfile_dir("nlcaps");
    // A copy any user may run, and a config dir any user may write.
    let tern_copy = work.join("tern");
    std::fs::copy(&tern, &tern_copy).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (p, mode) in [(&work, 0o755), (&tern_copy, 0o755)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::create_dir_all(work.join("cfg")).unwrap();
    std::fs::set_permissions(work.join("cfg"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let tern = tern_copy.to_str().unwrap().to_string();
    // 20 ms: long enough for tern to size the buffers of a session
    // together, short enough that it starts with one stream.
    let lab = Lab::up(
        "nltest7",
        &["--rtt", "20", "--rate", "2000", "--mtu", "9000"],
    );
    let server = lab.serve_tern(&tern, &work, &[]);

    // An unprivileged sender cannot pass wmem_max (4 MiB) with one stream
    // when the path needs twice its 5 MB: tern adds streams, and says why.
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let report = tern_perf_json(&lab, &tern, &work, &nobody, &["--time", "6"]);
    let steps = report["tuning"]["stream_steps"].as_array().unwrap();
    assert!(
        steps.iter().any(|s| s["reason"] == "limited"),
        "{}",
        report["tuning"]
    );
    assert!(report["streams"].as_u64().unwrap() >= 2, "{report}");

    // A receiver whose tcp_rmem stops at 3 MiB: the kernel's autotuning
    // halts there, tern takes the buffer over and says so.
    let set = lab.exec(
        "A",
        &["sysctl", "-w", "net.ipv4.tcp_rmem=4096 131072 3145728"],
    );
    assert!(set.status.success());
    let report = tern_perf_json(
        &lab,
        &tern,
        &work,
        &[],
        &["--time", "5", "--reverse", "-P", "1"],
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&work);
    let tuning = &report["tuning"];
    assert_eq!(tuning["host"]["tcp_rmem"][2], 3145728, "{tuning}");
    assert!(
        tuning["receive_buffer_peak_bytes"].as_u64().unwrap() > 3145728,
        "{tuning}"
    );
    assert!(
        tuning["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains("receive buffer")),
        "{tuning}"
    );
}
