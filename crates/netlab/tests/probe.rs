//! `tern probe` over an emulated long fat path: the measurement half of the
//! advisor's must-show (issue 6). On 500 Mbit/s × 180 ms the RTT estimate
//! must be within 5 % and the capacity estimate within 10 % of the
//! configured values. Needs root and the tern binary; skips otherwise.
//!
//! The lab is called `probe1` so it never collides with the fixed names of
//! `tests/lab.rs`; like those, it brings up one lab and tears it down.
//!
//! The emulator's threads get real-time priority (`chrt -f`). Packet trains
//! read the path at the µs scale, and the emulator delivers each packet
//! from a user-space thread: on a busy host (other labs, builds) that
//! thread is sometimes descheduled for milliseconds and then writes a
//! whole train at once, which no receiver can tell from a faster link.
//! Measured on this 2-core machine at a load average of 11: without the
//! priority most trains were disturbed (and discarded) or compressed (up
//! to 5× the configured rate); with it, 0.1–0.5 % error. The probe itself
//! runs at normal priority, as it would on a real host.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::Lab;
use serde_json::Value;

const LAB: &str = "probe1";
const RTT_MS: f64 = 180.0;
const RATE_MBIT: f64 = 500.0;

/// The probe's report. Exit 6 (a measurement failed, everything measured
/// printed) is accepted when only the capacity estimate is missing: the
/// retries below deal with spoiled trains.
fn probe_json(out: &Output) -> Value {
    let capacity_only = out.status.code() == Some(6)
        && serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|v| {
            v["errors"]
                .as_object()
                .is_some_and(|e| e.keys().all(|k| k == "capacity"))
        });
    assert!(
        out.status.success() || capacity_only,
        "tern probe failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn probe_measures_rtt_within_5_and_capacity_within_10_percent_on_500mbit_180ms() {
    let name = "probe_measures_rtt_within_5_and_capacity_within_10_percent_on_500mbit_180ms";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    let tern = tern.as_str();
    let work = tempfile::tempdir().unwrap();
    let dir = |d: &str| work.path().join(d).to_str().unwrap().to_string();
    let (rtt, rate) = (RTT_MS.to_string(), RATE_MBIT.to_string());
    let lab = Lab::up(LAB, &["--rtt", &rtt, "--rate", &rate]);
    // On 10.47.0.2:4747; a probe whose connects are refused all the same
    // (exit 7) is run again for a while.
    let _daemon = lab.serve_tern(tern, work.path(), &[]);
    let env_cfg = format!("XDG_CONFIG_HOME={}", dir("cfg"));
    let probe = |extra: &[&str]| {
        let mut args = vec!["env", &env_cfg, tern, "probe", "10.47.0.2", "--json"];
        args.extend_from_slice(extra);
        lab.command("A", &args).output().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let before = lab.status();
    let v = loop {
        let out = probe(&[]);
        if out.status.code() != Some(7) || Instant::now() > deadline {
            break probe_json(&out);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // A busy host (CI runs this after other labs) can spoil every train of
    // one direction; the probe then says "no estimate" and why, which is
    // true but not what this test measures. It gets two more tries, and
    // each spoiled run's reasons are printed.
    let mut v = v;
    for _ in 0..2 {
        let missing = ["forward", "reverse"]
            .into_iter()
            .filter(|d| v["capacity"][d]["estimate_bps"].is_null())
            .collect::<Vec<_>>();
        if missing.is_empty() {
            break;
        }
        for d in missing {
            let c = &v["capacity"][d];
            eprintln!(
                "note: no {d} estimate (trains lost {}, reordered {}, unresolved {}, \
                 disturbed {}); probing again",
                c["trains_lost"],
                c["trains_reordered"],
                c["trains_unresolved"],
                c["trains_disturbed"]
            );
        }
        v = probe_json(&probe(&[]));
    }
    let after = lab.status();
    for d in ["forward", "reverse"] {
        assert!(
            v["capacity"][d]["estimate_bps"].is_f64(),
            "three probes in a row gave no {d} capacity estimate: {v}"
        );
    }

    let rtt_ms = v["rtt"]["median_ms"].as_f64().unwrap();
    let fwd = v["capacity"]["forward"]["estimate_bps"].as_f64().unwrap() / 1e6;
    let rev = v["capacity"]["reverse"]["estimate_bps"].as_f64().unwrap() / 1e6;
    let spread = |dir: &str| {
        let s = &v["capacity"][dir]["spread"];
        format!(
            "quartiles {:.1}–{:.1}",
            s["p25"].as_f64().unwrap() / 1e6,
            s["p75"].as_f64().unwrap() / 1e6
        )
    };
    eprintln!(
        "configured {RTT_MS} ms, {RATE_MBIT} Mbit/s; measured rtt {rtt_ms:.2} ms ({:+.2} %), \
         capacity → {fwd:.1} Mbit/s ({:+.1} %, {}), ← {rev:.1} Mbit/s ({:+.1} %, {}); \
         probe load {:.2} Mbit/s over {:.1} s",
        (rtt_ms / RTT_MS - 1.0) * 100.0,
        (fwd / RATE_MBIT - 1.0) * 100.0,
        spread("forward"),
        (rev / RATE_MBIT - 1.0) * 100.0,
        spread("reverse"),
        v["capacity"]["load_bps"].as_f64().unwrap() / 1e6,
        v["capacity"]["elapsed_s"].as_f64().unwrap(),
    );
    assert!(
        (rtt_ms - RTT_MS).abs() <= 0.05 * RTT_MS,
        "rtt {rtt_ms} ms for {RTT_MS}"
    );
    assert!(
        (fwd - RATE_MBIT).abs() <= 0.10 * RATE_MBIT,
        "forward capacity {fwd} Mbit/s for {RATE_MBIT}"
    );
    assert!(
        (rev - RATE_MBIT).abs() <= 0.10 * RATE_MBIT,
        "reverse capacity {rev} Mbit/s for {RATE_MBIT}"
    );
    assert_eq!(v["capacity"]["packet_bytes"], 1500, "MTU-sized packets");
    assert_eq!(v["capacity"]["kernel_timestamps"], true);
    // The trains really crossed the emulated link, both ways, and the
    // average load kept to the default budget of 8 Mbit/s.
    let crossed = |dir: &str| {
        after["paths"][0][dir]["delivered"].as_u64().unwrap()
            - before["paths"][0][dir]["delivered"].as_u64().unwrap()
    };
    assert!(crossed("a_to_b") >= 1000 && crossed("b_to_a") >= 1000);
    assert!(v["capacity"]["load_bps"].as_f64().unwrap() <= 8e6);
}

/// Loss each way within 0.05 percentage points of netlab's, at 1 % and
/// 0.1 %: 500 000 echoes a run (the binomial σ at 1 % is 0.014 points,
/// so the bound is 3.5 σ), one run with 1 % forward and 0.1 % back, one
/// the other way round. The emulator runs at normal priority: at 50 000
/// packets/s a real-time one starved the endpoints here.
#[test]
fn loss_each_way_is_within_0_05_points_at_1_and_0_1_percent() {
    let name = "loss_each_way_is_within_0_05_points_at_1_and_0_1_percent";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let lab = Lab::up_at_normal_priority(
        "loss1",
        &[
            "--rtt",
            "10",
            "--rate",
            "200",
            "--loss-fwd",
            "1%",
            "--loss-rev",
            "0.1%",
        ],
    );
    let _daemon = lab.serve_tern(&tern, work.path(), &[]);
    let env_cfg = format!("XDG_CONFIG_HOME={}", work.path().join("cfg").display());
    for (fwd, rev) in [(1.0, 0.1), (0.1, 1.0)] {
        let (f, r) = (format!("{fwd}%"), format!("{rev}%"));
        let set = lab.netlab(&["set", "--loss-fwd", &f, "--loss-rev", &r]);
        assert!(
            set.status.success(),
            "{}",
            String::from_utf8_lossy(&set.stderr)
        );
        let out = lab
            .command(
                "A",
                &[
                    "env",
                    &env_cfg,
                    &tern,
                    "probe",
                    "10.47.0.2",
                    "--json",
                    "--loss",
                    "--trains",
                    "1",
                    "--echoes",
                    "500000",
                    "--echo-rate",
                    "25000",
                    "--echo-size",
                    "40",
                ],
            )
            .output()
            .unwrap();
        let v = probe_json(&out);
        let l = &v["loss"];
        let pct = |d: &str| l[d]["loss_pct"].as_f64().unwrap();
        eprintln!(
            "configured {fwd} % → and {rev} % ←; measured {:.4} % ({} of {}) and {:.4} % ({} of {}); \
             jitter {:.3}/{:.3} ms; {} echoes in {:.1} s",
            pct("forward"),
            l["forward"]["lost"],
            l["forward"]["packets"],
            pct("reverse"),
            l["reverse"]["lost"],
            l["reverse"]["packets"],
            l["forward"]["ipdv_ms"].as_f64().unwrap_or(f64::NAN),
            l["reverse"]["ipdv_ms"].as_f64().unwrap_or(f64::NAN),
            l["sent"],
            l["elapsed_s"].as_f64().unwrap(),
        );
        assert!(l["forward"]["packets"].as_u64().unwrap() > 490_000, "{l}");
        assert!(
            (pct("forward") - fwd).abs() <= 0.05,
            "forward {} for {fwd}: {l}",
            pct("forward")
        );
        assert!(
            (pct("reverse") - rev).abs() <= 0.05,
            "reverse {} for {rev}: {l}",
            pct("reverse")
        );
    }
}

/// Capacity above 1 Gbit/s (MTU 9000, 30 ms): on 2 and 5 Gbit/s each
/// direction's estimate is within 10 %, or is marked as a lower bound with
/// its reason, and neither claims more than the path has. (On a machine
/// too busy to send trains at the path's rate only the last is checked,
/// and the test says so.)
#[test]
fn capacity_at_2_and_5_gbit_is_within_10_percent_or_an_honest_lower_bound() {
    let name = "capacity_at_2_and_5_gbit_is_within_10_percent_or_an_honest_lower_bound";
    let Some(tern) = common::tern_or_skip(name) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let lab = Lab::up("cap1", &["--rtt", "30", "--rate", "2000", "--mtu", "9000"]);
    let _daemon = lab.serve_tern(&tern, work.path(), &[]);
    let env_cfg = format!("XDG_CONFIG_HOME={}", work.path().join("cfg").display());
    for gbit in [2.0, 5.0] {
        let rate = (gbit * 1000.0).to_string();
        let set = lab.netlab(&["set", "--rate", &rate]);
        assert!(
            set.status.success(),
            "{}",
            String::from_utf8_lossy(&set.stderr)
        );
        let out = lab
            .command(
                "A",
                &["env", &env_cfg, &tern, "probe", "10.47.0.2", "--json"],
            )
            .output()
            .unwrap();
        // Exit 6 (no estimate one way) is an answer too, when it names a floor.
        assert!(
            out.status.success() || out.status.code() == Some(6),
            "tern probe: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["capacity"]["packet_bytes"], 9000);
        // Both ends and the emulator share this machine's two cores: when
        // it cannot even get a train out at the path's rate, it cannot
        // carry one at that rate either, whatever the emulator is told, and
        // only "no more than the path" can be checked.
        let sent = v["capacity"]["send_bps"].as_f64().unwrap_or(0.0) / 1e9;
        let machine_keeps_up = sent >= gbit;
        if !machine_keeps_up {
            eprintln!(
                "{gbit} Gbit/s: this machine sent its trains at only {sent:.2} Gbit/s, so the \
                 emulated path cannot run at {gbit} Gbit/s here; checking only that no estimate \
                 or floor claims more than the path has"
            );
        }
        for d in ["forward", "reverse"] {
            let c = &v["capacity"][d];
            let est = c["estimate_bps"].as_f64().map(|b| b / 1e9);
            let floor = c["lower_bound_bps"].as_f64().map(|b| b / 1e9);
            eprintln!(
                "{gbit} Gbit/s {d}: estimate {est:?}, lower bound {floor:?} ({}), {} of {} trains",
                c["lower_bound_reason"], c["trains_used"], v["capacity"]["trains_sent"]
            );
            let within = est.is_some_and(|e| (e - gbit).abs() <= 0.1 * gbit);
            let honest = floor.is_some_and(|f| f <= 1.1 * gbit)
                && c["lower_bound_reason"]
                    .as_str()
                    .is_some_and(|r| !r.is_empty());
            let no_overclaim =
                est.is_none_or(|e| e <= 1.1 * gbit) && floor.is_none_or(|f| f <= 1.1 * gbit);
            assert!(
                no_overclaim,
                "{gbit} Gbit/s {d}: claims more than the path: {c}"
            );
            assert!(
                within || honest || !machine_keeps_up,
                "{gbit} Gbit/s {d}: neither within 10 % nor an honest floor: {c}"
            );
        }
    }
}
