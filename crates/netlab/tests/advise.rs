//! The advisor's must-show (issue 6), measured end to end: on a netlab
//! path of 500 Mbit/s × 180 ms, after the advisor has measured the path
//! with its default probes, `GET /api/v1/advice/{host}` gives an RTT
//! within 5 % and a capacity within 10 % of the configured values, both
//! from active probes. Needs root and the tern binary; skips otherwise.
//!
//! Deployment: a client-side advisor (`tern advisor` in A) measuring
//! toward the data server (`tern serve` in B). The capacity probe needs a
//! tern daemon at the far end to answer its UDP trains, and data servers
//! run one while clients need not; the forward direction of the trains
//! (A → B) is then the direction `tern cp`/`tern perf` from A push in, and
//! the advice is asked for by the server's name, as `--advisor` does.
//!
//! Lab `wire1` (its own name, see `common`), emulator at real-time
//! priority as in `tests/probe.rs`.

mod common;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::Lab;
use serde_json::Value;
use tern_testkit::daemon::KillOnDrop;

const LAB: &str = "wire1";
const RTT_MS: f64 = 180.0;
const RATE_MBIT: f64 = 500.0;
const SERVER: &str = "10.47.0.2";
const ADVISOR: &str = "http://127.0.0.1:4748";

fn spawn_quiet(mut c: std::process::Command) -> KillOnDrop {
    KillOnDrop(
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn text(out: &Output) -> String {
    format!(
        "{}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn advice_after_the_advisor_measured_500mbit_180ms_is_within_5_and_10_percent() {
    let name = "advice_after_the_advisor_measured_500mbit_180ms_is_within_5_and_10_percent";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    let tern = tern.as_str();
    let work = tempfile::tempdir().unwrap();
    let dir = |d: &str| work.path().join(d).to_str().unwrap().to_string();
    std::fs::write(work.path().join("targets"), format!("{SERVER}:4747 20\n")).unwrap();
    let (rtt, rate) = (RTT_MS.to_string(), RATE_MBIT.to_string());
    let lab = Lab::up(LAB, &["--rtt", &rtt, "--rate", &rate]);
    // The advisor probes at once, and a failed probe waits for the next
    // interval: start it once the daemon listens (on {SERVER}:4747).
    let _daemon = lab.serve_tern(tern, work.path(), &[]);
    let advisor_state = dir("advisor-state");
    let targets = dir("targets");
    let _advisor = spawn_quiet(lab.command(
        "A",
        &[
            tern,
            "advisor",
            "--http",
            "127.0.0.1:4748",
            "--state-dir",
            &advisor_state,
            "--targets",
            &targets,
            "--probe-jitter",
            "0",
        ],
    ));
    // Asked before anything is measured: exit 3 (or 7 while it starts).
    let advise = || {
        lab.command(
            "A",
            &[tern, "advise", SERVER, "--server", ADVISOR, "--json"],
        )
        .output()
        .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let advice: Value = loop {
        let out = advise();
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["capacity"]["kind"] == "capacity" {
                break v;
            }
        } else {
            assert!(
                matches!(out.status.code(), Some(3 | 7)),
                "tern advise: {}",
                text(&out)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no advice with a measured capacity: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    let rtt_ms = advice["rtt"]["value"].as_f64().unwrap();
    let cap_mbit = advice["capacity"]["value"].as_f64().unwrap() / 1e6;
    eprintln!(
        "configured {RTT_MS} ms, {RATE_MBIT} Mbit/s; advice: rtt {rtt_ms:.2} ms ({:+.2} %), \
         capacity {cap_mbit:.1} Mbit/s ({:+.1} %), {} streams of {} bytes, expected {:.1} Mbit/s",
        (rtt_ms / RTT_MS - 1.0) * 100.0,
        (cap_mbit / RATE_MBIT - 1.0) * 100.0,
        advice["streams"],
        advice["buffer_bytes"],
        advice["expected_throughput_bps"]
            .as_f64()
            .unwrap_or(f64::NAN)
            / 1e6,
    );
    assert!(
        (rtt_ms - RTT_MS).abs() <= 0.05 * RTT_MS,
        "rtt {rtt_ms} ms for {RTT_MS}: {advice}"
    );
    assert!(
        (cap_mbit - RATE_MBIT).abs() <= 0.10 * RATE_MBIT,
        "capacity {cap_mbit} Mbit/s for {RATE_MBIT}: {advice}"
    );
    assert_eq!(advice["source"], "active", "{advice}");
    assert_eq!(advice["capacity"]["source"], "active", "{advice}");
    // The advice covers the product: buffers × streams hold RTT × capacity.
    let bdp = rtt_ms / 1e3 * cap_mbit * 1e6 / 8.0;
    let held = advice["buffer_bytes"].as_f64().unwrap() * advice["streams"].as_f64().unwrap();
    assert!(
        held >= bdp * 0.99,
        "{held} bytes in flight for a BDP of {bdp}: {advice}"
    );
}

/// Issue 17's must-show: a target added over the API has advice within
/// 15 s (its first probes run within seconds of it appearing, not after a
/// start jitter of minutes). Default scheduler settings.
#[test]
fn a_target_added_over_the_api_has_advice_within_15_s() {
    let name = "a_target_added_over_the_api_has_advice_within_15_s";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    let tern = tern.as_str();
    let work = tempfile::tempdir().unwrap();
    let lab = Lab::up("nlprompt", &["--rtt", "20", "--rate", "100"]);
    let _daemon = lab.serve_tern(tern, work.path(), &[]);
    let state = work.path().join("advisor-state");
    let _advisor = spawn_quiet(lab.command(
        "A",
        &[
            tern,
            "advisor",
            "--http",
            "127.0.0.1:4750",
            "--state-dir",
            state.to_str().unwrap(),
        ],
    ));
    let url = "http://127.0.0.1:4750";
    let advise = || {
        lab.command("A", &[tern, "advise", SERVER, "--server", url, "--json"])
            .output()
            .unwrap()
    };
    // The advisor answers (not yet knowing the host: exit 3).
    let up_by = Instant::now() + Duration::from_secs(30);
    while advise().status.code() != Some(3) {
        assert!(Instant::now() < up_by, "the advisor did not come up");
        std::thread::sleep(Duration::from_millis(200));
    }
    let post = format!(
        "import urllib.request; urllib.request.urlopen(urllib.request.Request(\
         '{url}/api/v1/targets', data=b'{{\"host\": \"{SERVER}\", \"port\": 4747}}', \
         headers={{'Content-Type': 'application/json'}}, method='POST')).read()"
    );
    let added = lab.exec("A", &["python3", "-c", &post]);
    assert!(
        added.status.success(),
        "POST /api/v1/targets: {}",
        text(&added)
    );
    let since = Instant::now();
    let out = loop {
        let out = advise();
        if out.status.success() {
            break out;
        }
        assert!(
            since.elapsed() < Duration::from_secs(15),
            "no advice 15 s after the target was added: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let advice: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rtt = advice["rtt_ms"].as_f64().unwrap();
    assert!((20.0..25.0).contains(&rtt), "{advice}");
    assert_eq!(advice["source"], "active", "{advice}");
}
