//! A third-party copy on netlab (issue 19): host C, the client, sits on
//! 10 Mbit/s paths to both sites, A and B, which share a 200 Mbit/s × 20 ms
//! path. The copy from A to B runs at 0.9 or more of what a direct copy
//! from A to B reaches on that path in the same run, C's own paths carry
//! only the orders and reports, and killing the client stops the copy at
//! both ends.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Lab;
use serde_json::Value;
use tern_testkit::daemon::Serve;
use tern_testkit::files::{file_difference, seeded_random_file, written_bytes};

const LAB: &str = "tpc3";
const SIZE: u64 = 160 << 20;

/// IP bytes both ways on path `i` so far.
fn path_bytes(status: &Value, i: usize) -> u64 {
    let p = &status["paths"][i];
    p["fwd"]["bytes"].as_u64().unwrap() + p["rev"]["bytes"].as_u64().unwrap()
}

/// Bytes written to everything under `dir` (partial files included).
fn sizes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| written_bytes(e.unwrap().path()))
        .sum()
}

#[test]
fn a_third_party_copy_runs_at_the_sites_rate_and_stops_with_its_client() {
    let name = "a_third_party_copy_runs_at_the_sites_rate_and_stops_with_its_client";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let p = |rel: &str| work.path().join(rel);
    let lab = Lab::up(
        LAB,
        &[
            "--hosts",
            "3",
            "--path",
            "between=A-B,rtt=20,rate=200",
            "--path",
            "between=A-C,rtt=40,rate=10",
            "--path",
            "between=B-C,rtt=40,rate=10",
        ],
    );
    for d in [
        "a/root",
        "b/root/in",
        "b/root/direct",
        "b/root/killed",
        "c/cfg",
        "a/cfg",
    ] {
        std::fs::create_dir_all(p(d)).unwrap();
    }
    seeded_random_file(&p("a/root/big.bin"), SIZE, 3);
    let daemon = |host: &str, dir: &str| {
        Serve::new(&tern, p(&format!("{dir}/root")), p(&format!("{dir}/state")))
            .listen("0.0.0.0:4747")
            .via(lab.prefix(host))
            .start()
    };
    let (_a, b) = (daemon("A", "a"), daemon("B", "b"));
    let cfg = |dir: &str| format!("XDG_CONFIG_HOME={}", p(dir).display());
    let json = |out: std::process::Output| -> Value {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };

    // What A reaches B with, directly, on the same path.
    let src = p("a/root/big.bin");
    let direct = json(lab.exec(
        "A",
        &[
            "env",
            &cfg("a/cfg"),
            &tern,
            "cp",
            "--json",
            src.to_str().unwrap(),
            "tern://10.47.0.2/direct/",
        ],
    ));
    let direct_bps =
        direct["bytes"].as_f64().unwrap() * 8.0 / direct["network_elapsed_s"].as_f64().unwrap();

    // The same from C, which names A and B by its own paths to them.
    let before = lab.status();
    let tpc = json(lab.exec(
        "C",
        &[
            "env",
            &cfg("c/cfg"),
            &tern,
            "cp",
            "--json",
            "tern://10.47.1.1/big.bin",
            "tern://10.47.2.1/in/",
        ],
    ));
    let after = lab.status();
    assert_eq!(file_difference(&src, p("b/root/in/big.bin")), None);
    let tpc_bps = tpc["rate_bps"].as_f64().unwrap();
    let client_ip_bytes = path_bytes(&after, 1) + path_bytes(&after, 2)
        - path_bytes(&before, 1)
        - path_bytes(&before, 2);
    eprintln!(
        "direct {:.1} Mbit/s, third-party {:.1} Mbit/s ({:.3}), data path {}, C's paths carried {} bytes",
        direct_bps / 1e6,
        tpc_bps / 1e6,
        tpc_bps / direct_bps,
        tpc["tpc"]["data_path"],
        client_ip_bytes
    );
    assert!(tpc_bps >= 0.9 * direct_bps, "{tpc}\n{direct}");
    assert_eq!(
        tpc["tpc"]["data_path"]["from"], "10.47.0.1:4747",
        "B reached A over their own path: {tpc}"
    );
    assert!(
        client_ip_bytes < 1 << 20,
        "{client_ip_bytes} bytes on C's paths"
    );

    // Killing the client mid-copy stops it at both ends.
    let mut client = lab
        .command(
            "C",
            &[
                "env",
                &cfg("c/cfg"),
                &tern,
                "cp",
                "tern://10.47.1.1/big.bin",
                "tern://10.47.2.1/killed/",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while sizes(&p("b/root/killed")) < 8 << 20 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the copy never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A kill, not SIGINT: `tern cp` leaves SIGINT at its default, and a
    // test run started in the background by a non-interactive shell
    // inherits it ignored, so the copy would run on to its end.
    client.kill().unwrap();
    let _ = client.wait();
    std::thread::sleep(Duration::from_secs(2));
    let (held, ab) = (sizes(&p("b/root/killed")), path_bytes(&lab.status(), 0));
    std::thread::sleep(Duration::from_secs(2));
    let (later, ab_later) = (sizes(&p("b/root/killed")), path_bytes(&lab.status(), 0));
    assert_eq!(held, later, "B stopped writing");
    assert!(held < SIZE, "the copy did not finish: {held}");
    assert!(
        ab_later - ab < 1 << 20,
        "A stopped sending: {} bytes in 2 s",
        ab_later - ab
    );
    let (_, log) = b.stop();
    assert!(log.contains("the client went away"), "{log}");
}
