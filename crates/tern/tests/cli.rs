//! The `tern` binary as users run it: commands, JSON reports, and every
//! documented exit code.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tern_testkit::daemon::{Daemon, Serve, signal};
use tern_testkit::files::{
    content_difference, file_difference, random_file, random_file_streamed, written_bytes,
};
use tern_testkit::net::free_port;
use tern_testkit::skip::{is_root, skip};

mod common;
use common::{Env, TERN, tern};

/// How these tests start a daemon: `tern serve` on an ephemeral port of
/// 127.0.0.1 with a grace of 2 s, its log in `STATE.log`.
fn serve(root: &Path, state: &Path) -> Serve {
    Serve::new(TERN, root, state).grace(2)
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "tern failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Whether the binary has the TERN_FAULT_* test hooks (the
/// `fault-injection` feature); skips `test` when not.
fn fault_hooks(test: &str) -> bool {
    if cfg!(feature = "fault-injection") {
        return true;
    }
    skip(
        test,
        "tern was built without its test hooks (cargo test --features tern/fault-injection)",
    );
    false
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Everything a run printed, stdout then stderr.
fn said(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(out))
}

#[test]
fn push_and_pull_report_what_they_did() {
    let env = Env::new();
    let data = random_file(&env.p("src.bin"), 5 << 20);
    let server = env.server();
    let up = json(&env.run(&[
        "cp",
        "--json",
        "-P",
        "3",
        env.p("src.bin").to_str().unwrap(),
        &server.url("up.bin"),
    ]));
    assert_eq!(content_difference(env.p("root/up.bin"), &data), None);
    for key in [
        "bytes",
        "files",
        "elapsed_s",
        "network_elapsed_s",
        "throughput_bps",
        "network_throughput_bps",
        "streams",
        "per_stream",
        "checksum",
        "blocks_retransmitted",
        "protect",
    ] {
        assert!(up.get(key).is_some(), "missing {key} in {up}");
    }
    assert_eq!(up["bytes"], 5 << 20);
    assert_eq!(up["files"], 1);
    assert_eq!(up["streams"], 3);
    assert_eq!(up["protect"], "private");
    assert_eq!(up["per_stream"].as_array().unwrap().len(), 3);
    let per_stream_total: u64 = up["per_stream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(per_stream_total, 5 << 20);
    assert_eq!(up["checksum"][0]["algorithm"], "xxh3");
    assert!(up["elapsed_s"].as_f64().unwrap() >= up["network_elapsed_s"].as_f64().unwrap());
    assert_eq!(up["server_fingerprint"], server.fingerprint());

    let down = json(&env.run(&[
        "cp",
        "--json",
        "--checksum",
        "md5",
        &server.url("up.bin"),
        env.p("down.bin").to_str().unwrap(),
    ]));
    assert_eq!(content_difference(env.p("down.bin"), &data), None);
    assert_eq!(down["checksum"][0]["algorithm"], "md5");
    assert_eq!(down["checksum"][0]["digest"].as_str().unwrap().len(), 32);
    let known = std::fs::read_to_string(env.p("cfg/tern/known_hosts")).unwrap();
    assert!(known.contains(server.fingerprint()), "{known}");
}

#[test]
fn trees_copy_recursively_and_locally() {
    let env = Env::new();
    std::fs::create_dir_all(env.p("tree/sub")).unwrap();
    let a = random_file(&env.p("tree/a"), 100_000);
    let b = random_file(&env.p("tree/sub/b"), 3);
    let server = env.server();
    let out = env.run(&["cp", env.p("tree").to_str().unwrap(), &server.url("")]);
    assert_eq!(
        code(&out),
        2,
        "a directory without -r is a usage error: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("-r"), "{}", stderr(&out));
    json(&env.run(&[
        "cp",
        "-r",
        "--json",
        "--protect",
        "safe",
        env.p("tree").to_str().unwrap(),
        &server.url(""),
    ]));
    assert_eq!(content_difference(env.p("root/tree/sub/b"), &b), None);
    json(&env.run(&[
        "cp",
        "-r",
        "--json",
        &server.url("tree"),
        env.p("back").to_str().unwrap(),
    ]));
    assert_eq!(content_difference(env.p("back/a"), &a), None);
    let local = json(&env.run(&[
        "cp",
        "-r",
        "--json",
        env.p("tree").to_str().unwrap(),
        env.p("local").to_str().unwrap(),
    ]));
    assert_eq!(local["files"], 2);
    assert_eq!(content_difference(env.p("local/sub/b"), &b), None);
}

#[test]
fn a_reader_that_went_away_is_no_failure_of_the_copy() {
    let env = Env::new();
    let data = random_file(&env.p("run.bin"), 1 << 20);
    // `tern cp --json … | head -c0`: the reader is gone before the report.
    let mut child = tern()
        .args(["cp", "--json", &env.s("run.bin"), &env.s("copy.bin")])
        .env("XDG_CONFIG_HOME", env.p("cfg"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(content_difference(env.p("copy.bin"), &data), None);
    // `tern cp … 2>&1 | head -1`: the summary's reader is gone too (it
    // exited 101, a panic in eprintln!, after the copy was done).
    for failing in [false, true] {
        let mut child = tern()
            .args(["cp", &env.s("run.bin")])
            .arg(if failing {
                env.p("no/such/dir/x")
            } else {
                env.p("copy2.bin")
            })
            .env("XDG_CONFIG_HOME", env.p("cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(if failing { 3 } else { 0 }), "{status}");
    }
    assert_eq!(content_difference(env.p("copy2.bin"), &data), None);
}

#[test]
fn a_block_corrupted_in_flight_is_counted_in_the_report() {
    if !fault_hooks("a_block_corrupted_in_flight_is_counted_in_the_report") {
        return;
    }
    let env = Env::new();
    let data = random_file(&env.p("src.bin"), 6 << 20);
    let server = env.server();
    // Byte 1000 of the only stream lies in the payload of its first block.
    let out = env.run_env(
        &[
            "cp",
            "--json",
            "-P",
            "1",
            "--protect",
            "clear",
            env.p("src.bin").to_str().unwrap(),
            &server.url("x.bin"),
        ],
        &[("TERN_FAULT_CORRUPT", "0:1000")],
    );
    let report = json(&out);
    assert_eq!(report["blocks_retransmitted"], 1, "{report}");
    assert_eq!(content_difference(env.p("root/x.bin"), &data), None);
}

/// A copy to a daemon starts where the last one to it ended (rate and
/// streams, kept in the state directory), and says so; one that moved data
/// too briefly is not remembered, and an explicit stream count wins.
#[test]
fn a_copy_starts_where_the_last_copy_to_its_daemon_ended() {
    let env = Env::new();
    random_file(&env.p("src.bin"), 6 << 20);
    let server = env.server();
    let n = std::cell::Cell::new(0);
    let copy = |extra: &[&str]| {
        let mut args = vec!["cp", "--json", "--no-progress"];
        args.extend_from_slice(extra);
        n.set(n.get() + 1);
        let (src, dst) = (env.p("src.bin"), server.url(&format!("x{}.bin", n.get())));
        args.extend([src.to_str().unwrap(), dst.as_str()]);
        json(&env.run(&args))
    };
    copy(&[]);
    let first = copy(&[]);
    assert!(
        first.get("started_from_last_copy").is_none(),
        "a copy of well under 2 s is not remembered: {first}"
    );
    // About 2.5 s at 20 Mbit/s: long enough to tell the path's rate.
    let slow = copy(&["--rate-limit", "20M"]);
    assert!(slow["network_elapsed_s"].as_f64().unwrap() >= 2.0, "{slow}");
    let next = copy(&[]);
    let from = &next["started_from_last_copy"];
    let rate = from["rate_bps"].as_f64().unwrap();
    assert!(
        (15e6..=30e6).contains(&rate),
        "the last copy's rate: {next}"
    );
    assert_eq!(from["streams"], slow["streams"], "{next}");
    let fixed = copy(&["-P", "2"]);
    assert!(fixed.get("started_from_last_copy").is_none(), "{fixed}");
    assert!(env.p("xdg-state/tern/paths.json").exists());
}

#[test]
fn perf_reports_throughput_both_ways() {
    let env = Env::new();
    let server = env.server();
    let url = format!("tern://127.0.0.1:{}", server.port());
    let fwd = json(&env.run(&[
        "perf",
        &url,
        "--size",
        "64M",
        "-P",
        "2",
        "--protect",
        "clear",
        "--json",
    ]));
    assert_eq!(fwd["bytes"], 64 << 20);
    assert!(fwd["network_throughput_bps"].as_f64().unwrap() > 0.0);
    assert_eq!(fwd["command"], "perf");
    let rev = json(&env.run(&["perf", &url, "--time", "0.5", "--reverse", "--json"]));
    assert!(rev["bytes"].as_u64().unwrap() > 0);
    assert_eq!(rev["direction"], "receive");
    assert!(
        std::fs::read_dir(env.p("root")).unwrap().next().is_none(),
        "perf leaves nothing"
    );
}

#[test]
fn mptcp_is_used_when_both_ends_take_it_and_said_when_the_daemon_does_not() {
    let mptcp_here =
        std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_ok_and(|v| v.trim() == "1");
    if !mptcp_here {
        skip(
            "mptcp_is_used_when_both_ends_take_it_and_said_when_the_daemon_does_not",
            "this kernel offers no MPTCP (net.mptcp.enabled)",
        );
        return;
    }
    let env = Env::new();
    let server = Serve::new(TERN, env.p("root"), env.p("state"))
        .grace(2)
        .args(["--mptcp"])
        .start();
    let url = format!("tern://127.0.0.1:{}", server.port());
    let both = json(&env.run(&["perf", &url, "--size", "8M", "--mptcp", "--json"]));
    assert_eq!(both["mptcp"], true, "{both}");
    assert_eq!(both["bytes"], 8 << 20);
    let words = env.run(&["perf", &url, "--size", "8M", "--mptcp", "--no-progress"]);
    let text = said(&words);
    assert!(text.contains("connections: MPTCP"), "{text}");
    // Without --mptcp the client speaks plain TCP to the same daemon.
    let plain = json(&env.run(&["perf", &url, "--size", "8M", "--json"]));
    assert!(plain.get("mptcp").is_none(), "{plain}");

    // A daemon without --mptcp: the client falls back to TCP and says why.
    let tcp_only = env.server();
    let url = format!("tern://127.0.0.1:{}", tcp_only.port());
    let out = env.run(&["perf", &url, "--size", "8M", "--mptcp", "--json"]);
    let fell_back = json(&out);
    assert_eq!(fell_back["mptcp"], false, "{fell_back}");
    let words = env.run(&["perf", &url, "--size", "8M", "--mptcp", "--no-progress"]);
    let text = said(&words);
    assert!(text.contains("plain TCP"), "{text}");
    assert!(!text.contains("connections: MPTCP"), "{text}");
}

#[test]
fn a_reserved_path_without_a_stream_of_its_own_or_with_mptcp_is_refused() {
    let env = Env::new();
    let url = format!("tern://127.0.0.1:{}", free_port());
    for (args, says) in [
        (
            vec!["-P", "1", "--path", "10.47.1.2,rate=10M"],
            "allow 2 or more",
        ),
        (
            vec!["--max-streams", "1", "--path", "10.47.1.2,rate=10M"],
            "allow 2 or more",
        ),
        (
            vec!["--mptcp", "--path", "10.47.1.2,rate=10M"],
            "use one or the other",
        ),
    ] {
        let mut all = vec!["perf", url.as_str(), "--time", "1"];
        all.extend(args.iter().copied());
        let out = env.run(&all);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn exit_codes_mean_what_the_help_says() {
    let env = Env::new();
    let help = tern().args(["cp", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "Exit codes",
        "3 source missing",
        "7 cannot connect",
        "8 fingerprint",
    ] {
        assert!(help.contains(needle), "cp --help lacks {needle:?}");
    }
    random_file(&env.p("src.bin"), 1000);
    let server = env.server();
    let src = env.p("src.bin");
    let src = src.to_str().unwrap();

    let missing = env.run(&["cp", env.p("nope").to_str().unwrap(), &server.url("x")]);
    assert_eq!(code(&missing), 3, "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("no such file"),
        "{}",
        stderr(&missing)
    );

    let escape = env.run(&["cp", src, &server.url("../escape")]);
    assert_eq!(code(&escape), 4, "{}", stderr(&escape));
    assert!(!env.p("escape").exists());

    let pinned = env.run(&[
        "cp",
        "--fingerprint",
        "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        src,
        &server.url("x"),
    ]);
    assert_eq!(code(&pinned), 8, "{}", stderr(&pinned));
    assert!(stderr(&pinned).contains("SHA256:"), "{}", stderr(&pinned));

    let port = free_port();
    let refused = env.run(&["cp", src, &format!("tern://127.0.0.1:{port}/x")]);
    assert_eq!(code(&refused), 7, "{}", stderr(&refused));

    let usage = env.run(&["cp", "--block-size", "1", src, &server.url("x")]);
    assert_eq!(code(&usage), 2);
    let usage = env.run(&["cp", "--streams", "0", src, &server.url("x")]);
    assert_eq!(code(&usage), 2);
}

#[test]
fn a_rate_limit_holds_both_ways() {
    let env = Env::new();
    let server = env.server();
    let url = format!("tern://127.0.0.1:{}", server.port());
    for reverse in [false, true] {
        let mut args = vec![
            "perf",
            &url,
            "--size",
            "64M",
            "-P",
            "3",
            "--rate-limit",
            "100M",
            "--protect",
            "clear",
            "--json",
        ];
        if reverse {
            args.push("--reverse");
        }
        let r = json(&env.run(&args));
        assert_eq!(r["bytes"], 64 << 20);
        let bps = r["network_throughput_bps"].as_f64().unwrap();
        // 64 MiB at 100 Mbit/s takes 5.4 s; a burst of about one block
        // (1 MiB) may go ahead of the pace, a 3 % excess at most here.
        assert!(bps <= 100e6 * 1.08, "reverse={reverse}: {bps}");
        assert!(
            bps >= 50e6,
            "reverse={reverse}: the limit is not a stall: {bps}"
        );
    }
    let bad = env.run(&["perf", &url, "--size", "1M", "--rate-limit", "fast"]);
    assert_eq!(code(&bad), 2);
}

#[test]
fn tuning_flags_are_checked_and_reported() {
    let env = Env::new();
    let server = env.server();
    let url = format!("tern://127.0.0.1:{}", server.port());
    for (flag, value, says) in [
        ("--streams", "many", "neither 'auto' nor"),
        ("--window", "1", "4K to 1G"),
        ("--window", "huge", "not auto, kernel or a size"),
        ("--cc", "no-such-cc", "not usable here"),
    ] {
        let out = env.run(&["perf", &url, "--size", "1M", flag, value]);
        assert_eq!(code(&out), 2, "{flag} {value}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(says),
            "{flag} {value}: {}",
            stderr(&out)
        );
    }
    let fixed = json(&env.run(&[
        "perf", &url, "--size", "16M", "-P", "3", "--window", "1M", "--cc", "reno", "--json",
    ]));
    assert_eq!(fixed["streams"], 3);
    assert_eq!(fixed["tuning"]["window"], "1048576");
    assert_eq!(fixed["tuning"]["congestion_control"], "reno");
    assert_eq!(fixed["tuning"]["send_buffer_peak_bytes"], 3 << 20);
    let auto = json(&env.run(&["perf", &url, "--size", "16M", "--json"]));
    assert_eq!(auto["tuning"]["window"], "auto");
    assert_eq!(auto["tuning"]["stream_steps"][0]["streams"], 1);
    assert_eq!(auto["tuning"]["stream_steps"][0]["reason"], "start");
}

/// A certificate that is not the one expected gets advice true to where
/// the expectation came from: a pinned `--fingerprint` is checked against
/// what the daemon prints, a recorded one is removed from known_hosts.
#[test]
fn a_wrong_fingerprint_gets_advice_for_where_it_came_from() {
    let env = Env::new();
    random_file(&env.p("src.bin"), 1000);
    let src = env.p("src.bin");
    let src = src.to_str().unwrap();
    let server = env.server();
    let host = format!("127.0.0.1:{}", server.port());
    let wrong = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    let pinned = env.run(&["cp", "--fingerprint", wrong, src, &server.url("x")]);
    assert_eq!(code(&pinned), 8, "{}", stderr(&pinned));
    let err = stderr(&pinned);
    assert!(
        err.contains(&format!(
            "{host} presented the certificate {}, but --fingerprint named {wrong}",
            server.fingerprint()
        )),
        "{err}"
    );
    assert!(err.contains("the fingerprint the daemon prints"), "{err}");
    assert!(!err.contains("remove the line"), "{err}");
    assert!(
        !env.p("cfg/tern/known_hosts").exists(),
        "a pin records nothing"
    );

    let known_hosts = env.p("cfg/tern/known_hosts");
    std::fs::create_dir_all(known_hosts.parent().unwrap()).unwrap();
    std::fs::write(&known_hosts, format!("{host} {wrong}\n")).unwrap();
    let recorded = env.run(&["cp", src, &server.url("x")]);
    assert_eq!(code(&recorded), 8, "{}", stderr(&recorded));
    let err = stderr(&recorded);
    assert!(
        err.contains(&format!("expected {wrong}, got {}", server.fingerprint())),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "remove the line for {host} from {}",
            known_hosts.display()
        )),
        "{err}"
    );
    assert!(!err.contains("--fingerprint named"), "{err}");
    assert!(!env.p("root/x").exists());
}

#[test]
fn a_changed_server_identity_is_refused_with_advice() {
    let env = Env::new();
    random_file(&env.p("src.bin"), 1000);
    let src = env.p("src.bin");
    let first = env.server();
    let port = first.port();
    json(&env.run(&["cp", "--json", src.to_str().unwrap(), &first.url("a")]));
    drop(first);
    // Same port, new state dir: a new certificate.
    let second = Serve::new(TERN, env.p("root"), env.p("state2"))
        .port(port)
        .start();
    let out = env.run(&[
        "cp",
        src.to_str().unwrap(),
        &format!("tern://127.0.0.1:{port}/b"),
    ]);
    drop(second);
    assert_eq!(code(&out), 8, "{}", stderr(&out));
    assert!(stderr(&out).contains("known_hosts"), "{}", stderr(&out));
    assert!(!env.p("root/b").exists());
}

#[test]
fn garbage_on_the_port_is_logged_and_dropped() {
    let env = Env::new();
    let data = random_file(&env.p("src.bin"), 100_000);
    let server = env.server();
    for garbage in [
        &b"SSH-2.0-OpenSSH_9.2\r\n"[..],
        &[0u8; 64][..],
        b"\x16\x03\x01\x00\x02\x01\x00",
    ] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        let _ = s.write_all(garbage);
    }
    json(&env.run(&[
        "cp",
        "--json",
        env.p("src.bin").to_str().unwrap(),
        &server.url("after"),
    ]));
    assert_eq!(content_difference(env.p("root/after"), &data), None);
    let (status, log) = server.stop();
    assert!(
        status.success(),
        "SIGTERM stops the daemon cleanly; log:\n{log}"
    );
    assert!(log.contains("not a tern client"), "{log}");
}

#[test]
fn a_killed_daemon_leaves_no_file_at_the_final_name() {
    let env = Env::new();
    random_file(&env.p("root/big"), 300 << 20);
    let server = env.server();
    let dest = env.p("copy");
    let url = server.url("big");
    // Paced (about 8 s for the file), so a busy host cannot finish the copy
    // before the kill comes.
    let args = [
        "cp",
        "--protect",
        "clear",
        "-P",
        "2",
        "--rate-limit",
        "320M",
        &url,
        dest.to_str().unwrap(),
    ];
    let partial = partial_of(&env.p("copy"));
    let _restarted = kill_daemon_mid_copy(&env, server, &args, &partial, 4 << 20);
    assert!(!dest.exists(), "nothing at the final name");
    assert!(partial.exists(), "partial file kept for resume");
}

fn mount_tmpfs(dir: &Path, opts: &str) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn umount(dir: &Path) {
    let _ = Command::new("umount").arg(dir).status();
}

#[test]
fn a_full_disk_at_the_receiver_is_exit_5_and_loses_nothing() {
    if !is_root() {
        skip(
            "a_full_disk_at_the_receiver",
            "needs root to mount a small tmpfs",
        );
        return;
    }
    let env = Env::new();
    let small = env.p("small");
    if !mount_tmpfs(&small, "size=2m") {
        skip("a_full_disk_at_the_receiver", "mount -t tmpfs failed");
        return;
    }
    random_file(&env.p("src.bin"), 6 << 20);
    let server = serve(&small, &env.p("state")).start();
    let out = env.run(&[
        "cp",
        "--protect",
        "clear",
        env.p("src.bin").to_str().unwrap(),
        &server.url("x.bin"),
    ]);
    // Pull into the full file system too.
    std::fs::copy(env.p("src.bin"), env.p("root/y.bin")).unwrap();
    let root_server = env.server();
    let pulled = env.run(&[
        "cp",
        &root_server.url("y.bin"),
        small.join("y.bin").to_str().unwrap(),
    ]);
    drop(server);
    drop(root_server);
    // And a local copy, both of whose ends are here: no "peer" to blame.
    let local = env.run(&[
        "cp",
        &env.s("src.bin"),
        small.join("z.bin").to_str().unwrap(),
    ]);
    let present = ["x.bin", "y.bin", "z.bin"]
        .iter()
        .any(|n| small.join(n).exists());
    umount(&small);
    assert_eq!(code(&out), 5, "push: {}", stderr(&out));
    assert!(stderr(&out).contains("no space"), "{}", stderr(&out));
    assert_eq!(code(&pulled), 5, "pull: {}", stderr(&pulled));
    assert_eq!(code(&local), 5, "local: {}", stderr(&local));
    let said_local = stderr(&local);
    assert!(
        said_local.contains("tern: ") && said_local.contains("no space"),
        "{said_local}"
    );
    assert!(!said_local.contains("peer"), "{said_local}");
    assert!(!present, "nothing at the final names");
}

#[test]
fn an_unwritable_destination_is_exit_4() {
    let env = Env::new();
    random_file(&env.p("root/f"), 1000);
    let server = env.server();
    let ro = env.p("ro");
    let mounted = is_root() && mount_tmpfs(&ro, "ro,size=1m");
    if !mounted {
        if is_root() {
            skip(
                "an_unwritable_destination",
                "mount failed and root ignores modes",
            );
            return;
        }
        std::fs::create_dir(&ro).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let out = env.run(&["cp", &server.url("f"), ro.join("f").to_str().unwrap()]);
    if mounted {
        umount(&ro);
    }
    assert_eq!(code(&out), 4, "{}", stderr(&out));
}

#[test]
fn ipv6_literals_work_end_to_end() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("SKIP ipv6_literals_work_end_to_end: no IPv6 loopback here");
        return;
    }
    let env = Env::new();
    let data = random_file(&env.p("src.bin"), 200_000);
    let server = Serve::new(TERN, env.p("root"), env.p("state"))
        .listen("[::1]:0")
        .start();
    let listen = server.banner.json["listen"].as_str().unwrap().to_string();
    assert!(listen.starts_with("[::1]:"), "{listen}");
    let out = env.run(&[
        "cp",
        "--json",
        env.p("src.bin").to_str().unwrap(),
        &format!("tern://{listen}/v6.bin"),
    ]);
    drop(server);
    json(&out);
    assert_eq!(content_difference(env.p("root/v6.bin"), &data), None);
    let known = std::fs::read_to_string(env.p("cfg/tern/known_hosts")).unwrap();
    assert!(
        known.starts_with(&listen),
        "known_hosts keys IPv6 hosts as [addr]:port: {known}"
    );
}

/// The partial file a file is received under.
fn partial_of(file: &Path) -> PathBuf {
    file.with_file_name(tern_engine::fsio::partial_name(file.file_name().unwrap()))
}

/// The resume journal kept beside it.
fn journal_of(file: &Path) -> PathBuf {
    file.with_file_name(tern_engine::fsio::journal_name(file.file_name().unwrap()))
}

/// Waits until `partial` holds `bytes` while `client` is still copying.
fn wait_for_partial(client: &mut Child, partial: &Path, bytes: u64) {
    let start = Instant::now();
    while written_bytes(partial) < bytes {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "transfer never got going"
        );
        assert!(
            client.try_wait().unwrap().is_none(),
            "finished before the kill"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Kills the daemon with SIGKILL once `partial` holds `bytes`, while
/// `client` is still copying; returns how to start it again on its port.
fn kill_daemon_at(server: Daemon, client: &mut Child, partial: &Path, bytes: u64) -> Serve {
    wait_for_partial(client, partial, bytes);
    server.kill9()
}

/// Kills the client with SIGKILL once `partial` holds `bytes`; returns
/// the bytes the partial file then held.
fn kill_client_at(client: &mut Child, partial: &Path, bytes: u64) -> u64 {
    wait_for_partial(client, partial, bytes);
    signal(client.id(), "KILL");
    let status = client.wait().unwrap();
    assert_eq!(status.code(), None, "killed by a signal");
    written_bytes(partial)
}

/// Runs `tern ARGS` and kills `server` with SIGKILL once `partial` holds
/// `at` bytes; checks that the copy failed as a lost connection (exit 9),
/// and with `--json` that its object says so and how far it got; returns
/// what had arrived, and the daemon started again on the same port with
/// the same state.
fn kill_daemon_mid_copy(
    env: &Env,
    server: Daemon,
    args: &[&str],
    partial: &Path,
    at: u64,
) -> (u64, Daemon) {
    let mut client = tern()
        .args(args)
        .env("XDG_CONFIG_HOME", env.p("cfg"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let again = kill_daemon_at(server, &mut client, partial, at);
    let status = client.wait().unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    client
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    client
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(9), "{err}");
    let arrived = written_bytes(partial);
    if args.contains(&"--json") {
        let failed: Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {out}"));
        assert_eq!(failed["exit_code"], 9, "{failed}");
        let why = failed["error"].as_str().unwrap();
        assert!(err.contains(&format!("tern: {why}")), "{failed}\n{err}");
        let moved = failed["bytes"].as_u64().unwrap();
        assert!(moved > 0 && moved < 1 << 30, "{failed}");
        assert_eq!(failed["bytes_resumed"], 0, "a first run: {failed}");
    }
    (arrived, again.start())
}

#[test]
fn a_copy_that_fails_says_why_in_its_json_too() {
    let env = Env::new();
    random_file(&env.p("a.bin"), 1024);
    let dead = format!("tern://127.0.0.1:{}/a.bin", free_port());
    let cases = [
        (
            vec![env.s("missing.bin"), env.s("b.bin")],
            3,
            "no such file",
        ),
        (vec![env.s("a.bin"), dead], 7, "cannot connect"),
        (
            vec![env.s("a.bin"), "tern://127.0.0.1:99999/x".into()],
            2,
            "bad port",
        ),
    ];
    for (paths, exit, says) in cases {
        let mut args = vec!["cp", "--json", "--no-progress"];
        args.extend(paths.iter().map(String::as_str));
        let out = env.run(&args);
        assert_eq!(code(&out), exit, "{args:?}: {}", said(&out));
        let failed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: stdout is not one JSON object ({e}): {}",
                said(&out)
            )
        });
        assert_eq!(failed["command"], "cp", "{failed}");
        assert_eq!(failed["exit_code"], exit, "{failed}");
        let why = failed["error"].as_str().unwrap();
        assert!(why.contains(says), "{args:?}: {failed}");
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
        assert_eq!(
            (failed["bytes"].as_u64(), failed["files"].as_u64()),
            (Some(0), Some(0))
        );
    }
    // A single file that could not land is reported (one object, not the
    // report and then another), with the code the process exits with.
    std::fs::create_dir_all(env.p("dd/a.bin")).unwrap();
    let out = env.run(&[
        "cp",
        "--json",
        "--no-progress",
        &env.s("a.bin"),
        &env.s("dd/"),
    ]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {}", said(&out)));
    assert_eq!(report["exit_code"], code(&out), "{report}");
    assert_ne!(code(&out), 0, "{report}");
    assert_eq!(report["failed"].as_array().unwrap().len(), 1, "{report}");
    // Two that could not land, and nothing else to copy: their own code,
    // not 23's "everything else was".
    random_file(&env.p("c.bin"), 10);
    std::fs::create_dir_all(env.p("dd/c.bin")).unwrap();
    let (a, c, dd) = (env.s("a.bin"), env.s("c.bin"), env.s("dd/"));
    let out = env.run(&["cp", "--json", "--no-progress", &a, &c, &dd]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (code(&out), &report["exit_code"]),
        (2, &Value::from(2)),
        "{report}"
    );
    assert!(
        stderr(&out).contains("(and 1 more entry, listed above)"),
        "{}",
        stderr(&out)
    );
    let ok = env.run(&[
        "cp",
        "--json",
        "--no-progress",
        &env.s("a.bin"),
        &env.s("b.bin"),
    ]);
    assert_eq!(json(&ok)["exit_code"], 0);
}

#[test]
fn an_interrupted_copy_says_so_keeps_its_partial_file_and_resumes() {
    let env = Env::new();
    let src = env.p("big.bin");
    random_file_streamed(&src, 256 << 20);
    let dest = env.p("copy.bin");
    let partial = partial_of(&dest);
    for sig in ["INT", "TERM"] {
        let mut args: Vec<&str> = SLOW_COPY.to_vec();
        args.extend(["--json", src.to_str().unwrap(), dest.to_str().unwrap()]);
        let mut child = tern()
            .arg("cp")
            .args(&args)
            .env("XDG_CONFIG_HOME", env.p("cfg"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let had = written_bytes(&partial);
        wait_for_partial(&mut child, &partial, had + (8 << 20));
        signal(child.id(), sig);
        let out = child.wait_with_output().unwrap();
        assert_eq!(code(&out), 130, "SIG{sig}: {}", said(&out));
        let stopped: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("SIG{sig}: not one JSON object ({e}): {}", said(&out)));
        assert_eq!(stopped["exit_code"], 130, "{stopped}");
        let why = stopped["error"].as_str().unwrap();
        assert!(why.contains("interrupted"), "{stopped}");
        assert!(
            stderr(&out).contains("tern: interrupted"),
            "{}",
            stderr(&out)
        );
        assert!(!dest.exists(), "SIG{sig}: nothing at the final name");
        assert!(partial.exists() && journal_of(&dest).exists());
    }
    let again = env.run(&[
        "cp",
        "--json",
        "--no-progress",
        &env.s("big.bin"),
        &env.s("copy.bin"),
    ]);
    let report = json(&again);
    assert!(
        report["bytes_resumed"].as_u64().unwrap() >= 8 << 20,
        "{report}"
    );
    assert_eq!(file_difference(&src, &dest), None);
}

/// Options of a copy slow enough (40 MB/s) to be killed in the middle.
const SLOW_COPY: [&str; 7] = [
    "-P",
    "4",
    "--rate-limit",
    "320M",
    "--retries",
    "0",
    "--no-progress",
];

/// Starts `tern cp ARGS` in the background, its report going nowhere.
fn spawn_cp(env: &Env, args: &[&str]) -> Child {
    tern()
        .arg("cp")
        .args(args)
        .env("XDG_CONFIG_HOME", env.p("cfg"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A slow push of `first.bin` (96 MiB) to `same.bin` on a daemon, under
/// way (4 MiB written), and `second.bin` (3 MiB) to send to the same name.
struct Race {
    env: Env,
    _server: Daemon,
    url: String,
    first: PathBuf,
    second: PathBuf,
    slow: Child,
}

impl Race {
    fn start() -> Race {
        let env = Env::new();
        let (first, second) = (env.p("first.bin"), env.p("second.bin"));
        random_file_streamed(&first, 96 << 20);
        random_file(&second, 3 << 20);
        let server = env.server();
        let url = server.url("same.bin");
        let mut args: Vec<&str> = SLOW_COPY.to_vec();
        args.extend([first.to_str().unwrap(), &url]);
        let mut slow = spawn_cp(&env, &args);
        wait_for_partial(&mut slow, &partial_of(&env.p("root/same.bin")), 4 << 20);
        Race {
            env,
            _server: server,
            url,
            first,
            second,
            slow,
        }
    }
}

#[test]
fn a_second_copy_to_a_name_being_written_is_refused_and_harms_nothing() {
    let Race {
        env,
        _server,
        url,
        first,
        second,
        mut slow,
    } = Race::start();
    // Before partial files were locked, this one replaced the first's
    // partial file, which the first then renamed into place half written
    // and reported as copied.
    let second_now = [
        "cp",
        "--no-progress",
        "--retries",
        "0",
        &env.s("second.bin"),
        &url,
    ];
    let out = env.run(&second_now);
    assert_eq!(code(&out), 6, "{}", said(&out));
    assert!(
        stderr(&out).contains("another copy to this name is in progress"),
        "{}",
        stderr(&out)
    );
    let status = slow.wait().unwrap();
    assert!(status.success(), "the first copy: {status}");
    assert_eq!(file_difference(&first, env.p("root/same.bin")), None);
    // Once it has ended, the name is free.
    let out = env.run(&["cp", "--no-progress", &env.s("second.bin"), &url]);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(file_difference(&second, env.p("root/same.bin")), None);
}

#[test]
fn with_retries_a_copy_refused_for_another_one_s_name_runs_once_that_has_ended() {
    let Race {
        env,
        _server,
        url,
        second,
        mut slow,
        ..
    } = Race::start();
    let out = env.run(&[
        "cp",
        "--no-progress",
        "--retries",
        "4",
        &env.s("second.bin"),
        &url,
    ]);
    assert!(out.status.success(), "{}", said(&out));
    let err = stderr(&out);
    assert!(
        err.contains("another copy to this name is in progress; trying again in 1 s"),
        "{err}"
    );
    assert!(slow.wait().unwrap().success());
    // The second came last: its bytes are at the name.
    assert_eq!(file_difference(&second, env.p("root/same.bin")), None);
}

#[test]
fn a_push_cut_by_a_killed_daemon_resumes_where_it_stopped() {
    let env = Env::new();
    let src = env.p("big.bin");
    random_file_streamed(&src, 1 << 30);
    let server = env.server();
    let url = server.url("big.bin");
    let args = [
        "cp",
        "-P",
        "8",
        "--retries",
        "0",
        "--json",
        "--no-progress",
        src.to_str().unwrap(),
        &url,
    ];
    let partial = partial_of(&env.p("root/big.bin"));
    let (arrived, _server) = kill_daemon_mid_copy(&env, server, &args, &partial, 256 << 20);
    assert!(!env.p("root/big.bin").exists());
    assert!(arrived < 1 << 30, "the kill came before the end");

    // Same command again, to the daemon restarted.
    let again = env.run(&args);
    assert!(again.status.success(), "{}", stderr(&again));
    let report = json(&again);
    let resumed = report["bytes_resumed"].as_u64().unwrap();
    assert!(
        resumed as f64 >= 0.8 * arrived as f64,
        "resumed {resumed} of {arrived} bytes that had arrived"
    );
    assert!(resumed < 1 << 30);
    assert_eq!(
        file_difference(&src, env.p("root/big.bin")),
        None,
        "byte-identical"
    );
    assert!(!partial.exists());
    assert!(!journal_of(&env.p("root/big.bin")).exists());
}

#[test]
fn a_lost_connection_is_retried_and_the_copy_resumes_by_itself() {
    let env = Env::new();
    let src = env.p("mid.bin");
    random_file_streamed(&src, 512 << 20);
    let server = env.server();
    let mut client = tern()
        .args(["cp", "-P", "4", "--retries", "3", "--json", "--no-progress"])
        .arg(&src)
        .arg(server.url("mid.bin"))
        .env("XDG_CONFIG_HOME", env.p("cfg"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let partial = partial_of(&env.p("root/mid.bin"));
    let again = kill_daemon_at(server, &mut client, &partial, 128 << 20);
    // Back within the client's first back-off (1 s).
    let _server = again.start();
    let out = client.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("trying again"), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["bytes_resumed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(file_difference(&src, env.p("root/mid.bin")), None);
}

#[test]
fn a_tree_of_100_000_files_goes_up_intact() {
    let env = Env::new();
    let top = env.p("many");
    let mut expected = Vec::new();
    for d in 0..100 {
        let dir = top.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..1000 {
            let body = format!("{d}/{f} {}", "x".repeat((d * 7 + f) % 61));
            std::fs::write(dir.join(format!("f{f:04}")), &body).unwrap();
            if f % 97 == 0 {
                expected.push((format!("d{d:03}/f{f:04}"), body));
            }
        }
    }
    let server = env.server();
    let out = env.run(&[
        "cp",
        "-r",
        "--json",
        "--no-progress",
        top.to_str().unwrap(),
        &server.url(""),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["files"], 100_000);
    let dst = env.p("root/many");
    let dirs = std::fs::read_dir(&dst).unwrap().count();
    assert_eq!(dirs, 100);
    let files: usize = std::fs::read_dir(&dst)
        .unwrap()
        .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum();
    assert_eq!(files, 100_000, "every file, and no partial or journal left");
    for (rel, body) in expected {
        assert_eq!(
            std::fs::read_to_string(dst.join(&rel)).unwrap(),
            body,
            "{rel}"
        );
    }
}

/// Short trains; loopback has no bottleneck to space them, so the stray
/// limit is lifted to see numbers come out.
const SMALL_PROBE: [&str; 10] = [
    "--trains",
    "3",
    "--train-len",
    "20",
    "--packet-size",
    "1200",
    "--probe-load",
    "50M",
    "--max-stray",
    "10",
];

#[test]
fn probe_measures_rtt_capacity_and_throughput_of_a_daemon() {
    let env = Env::new();
    let server = env.server();
    let target = format!("127.0.0.1:{}", server.port());
    let mut args = vec!["probe", &target, "--json", "--throughput", "--time", "1"];
    args.extend(SMALL_PROBE);
    args.extend(["-P", "2", "--protect", "clear", "--rate-limit", "200M"]);
    let v = json(&env.run(&args));
    assert_eq!(v["target"], target.as_str());
    assert_eq!(v["rtt"]["samples"], 4);
    let rtt = v["rtt"]["median_ms"].as_f64().unwrap();
    assert!(rtt > 0.0 && rtt < 1000.0, "{v}");
    // Three trains, more (up to six) while a busy host reorders too many
    // for the two usable the options ask; every train sent is answered.
    let sent = v["capacity"]["trains_sent"].as_u64().unwrap();
    assert!((3..=6).contains(&sent), "{v}");
    assert_eq!(v["capacity"]["trains_answered"], sent);
    assert_eq!(v["capacity"]["packet_bytes"], 1228);
    for dir in ["forward", "reverse"] {
        let bps = v["capacity"][dir]["estimate_bps"].as_f64().unwrap();
        assert!(bps > 1e6, "{dir}: {v}");
    }
    assert_eq!(v["throughput"]["streams"], 2);
    assert!(v["throughput"]["bits_per_second"].as_f64().unwrap() > 0.0);
    assert_eq!(v["errors"], serde_json::json!({}));
    // For people: one line per measurement.
    let url = format!("tern://{target}");
    let mut args = vec!["probe", &url];
    args.extend(SMALL_PROBE);
    let out = env.run(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    for want in ["rtt ", "capacity →", "capacity ←", "probe load"] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
}

#[test]
fn probe_of_a_daemon_without_udp_responder_reports_rtt_and_exits_7() {
    let env = Env::new();
    let server = serve(&env.p("root"), &env.p("state"))
        .arg("--no-udp-probe")
        .start();
    let target = format!("127.0.0.1:{}", server.port());
    let mut args = vec!["probe", &target, "--json"];
    args.extend(SMALL_PROBE);
    let out = env.run(&args);
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["rtt"]["median_ms"].as_f64().is_some(), "{v}");
    assert!(v["capacity"].is_null());
    let why = v["errors"]["capacity"].as_str().unwrap();
    assert!(why.contains("no answer to UDP probes"), "{why}");
}

#[test]
fn probe_whose_trains_are_all_unusable_exits_6_after_its_report() {
    let env = Env::new();
    let server = env.server();
    let target = format!("127.0.0.1:{}", server.port());
    let mut args = vec!["probe", &target, "--json"];
    args.extend(&SMALL_PROBE[..8]);
    // No train keeps its arrivals within a billionth of its span.
    args.extend(["--max-stray", "0.000000001"]);
    let out = env.run(&args);
    assert_eq!(code(&out), 6, "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["rtt"]["median_ms"].as_f64().is_some(), "{v}");
    assert!(v["capacity"]["forward"]["estimate_bps"].is_null(), "{v}");
    let why = v["errors"]["capacity"].as_str().unwrap();
    assert!(why.contains("no usable train"), "{why}");
    assert!(stderr(&out).contains("no usable train"), "{}", stderr(&out));
}

#[test]
fn probe_refuses_bad_targets_and_reports_a_dead_one() {
    let env = Env::new();
    let bad = env.run(&["probe", "tern://127.0.0.1/some/path"]);
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    let dead_port = free_port();
    let dead = env.run(&["probe", &format!("127.0.0.1:{dead_port}"), "--json"]);
    assert_eq!(code(&dead), 7, "{}", stderr(&dead));
    let v: Value = serde_json::from_slice(&dead.stdout).unwrap();
    assert!(v["rtt"].is_null() && v["capacity"].is_null());
    assert!(
        v["errors"]["rtt"]
            .as_str()
            .unwrap()
            .contains("cannot connect")
    );
}

#[test]
fn a_copy_whose_client_was_killed_resumes_when_run_again() {
    let env = Env::new();
    let src = env.p("big.bin");
    random_file_streamed(&src, 96 << 20);
    std::fs::copy(&src, env.p("root/big.bin")).unwrap();
    let server = env.server();
    let common = SLOW_COPY;
    let up = server.url("up.bin");
    let down = env.p("down.bin");
    let cases = [
        // Push: the daemon keeps what arrived before the client died.
        (
            src.to_str().unwrap(),
            up.as_str(),
            partial_of(&env.p("root/up.bin")),
            env.p("root/up.bin"),
        ),
        // Pull: the killed client's own journal, never flushed, counts in
        // the same boot.
        (
            &server.url("big.bin"),
            down.to_str().unwrap(),
            partial_of(&env.p("down.bin")),
            down.clone(),
        ),
    ];
    for (from, to, partial, dest) in cases {
        let args: Vec<&str> = common.iter().copied().chain([from, to]).collect();
        let mut client = spawn_cp(&env, &args);
        let arrived = kill_client_at(&mut client, &partial, 24 << 20);
        assert!(!dest.exists(), "{to}: nothing at the final name");
        assert!(arrived < 96 << 20, "{to}: the kill came before the end");
        // The daemon notices the client is gone and closes its session.
        std::thread::sleep(Duration::from_millis(300));
        let mut again: Vec<&str> = vec!["cp", "--json"];
        again.extend(&args);
        let report = json(&env.run(&again));
        let resumed = report["bytes_resumed"].as_u64().unwrap();
        assert!(
            resumed as f64 >= 0.8 * arrived as f64 && resumed < 96 << 20,
            "{to}: resumed {resumed} of {arrived} bytes that had arrived"
        );
        assert_eq!(file_difference(&src, &dest), None, "{to}: byte-identical");
        assert!(!partial.exists(), "{to}: partial file gone");
    }
}

#[test]
fn a_pull_cut_by_a_killed_daemon_resumes_where_it_stopped() {
    let env = Env::new();
    let src = env.p("root/big.bin");
    random_file_streamed(&src, 96 << 20);
    let server = env.server();
    let dest = env.p("big.bin");
    let url = server.url("big.bin");
    let args: Vec<&str> = ["cp", "--json"]
        .into_iter()
        .chain(SLOW_COPY)
        .chain([url.as_str(), dest.to_str().unwrap()])
        .collect();
    let partial = partial_of(&env.p("big.bin"));
    let (arrived, _server) = kill_daemon_mid_copy(&env, server, &args, &partial, 24 << 20);
    assert!(!dest.exists(), "nothing at the final name");
    assert!(arrived < 96 << 20, "the kill came before the end");

    let report = json(&env.run(&args));
    let resumed = report["bytes_resumed"].as_u64().unwrap();
    assert!(
        resumed as f64 >= 0.8 * arrived as f64 && resumed < 96 << 20,
        "resumed {resumed} of {arrived} bytes that had arrived"
    );
    assert_eq!(file_difference(&src, &dest), None, "byte-identical");
    assert!(!partial.exists());
}

#[test]
fn a_source_changed_between_runs_is_sent_again_whole() {
    let env = Env::new();
    let src = env.p("src.bin");
    let server = env.server();
    let url = server.url("up.bin");
    let partial = partial_of(&env.p("root/up.bin"));
    let slow: Vec<&str> = SLOW_COPY
        .into_iter()
        .chain([src.to_str().unwrap(), url.as_str()])
        .collect();
    type Change = fn(&Path);
    let changes: [(&str, Change); 2] = [
        ("grown", |p| {
            let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
            f.write_all(&[1u8; 4096]).unwrap();
        }),
        ("rewritten in place, same size", |p| {
            let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.write_all(&[2u8; 4096]).unwrap();
            let later = std::time::SystemTime::now() + Duration::from_secs(5);
            f.set_modified(later).unwrap();
        }),
    ];
    for (what, change) in changes {
        random_file_streamed(&src, 96 << 20);
        let mut client = spawn_cp(&env, &slow);
        let arrived = kill_client_at(&mut client, &partial, 24 << 20);
        assert!(arrived < 96 << 20, "{what}: the kill came before the end");
        std::thread::sleep(Duration::from_millis(300));
        change(&src);
        let report =
            json(&env.run(&["cp", "--json", "--no-progress", src.to_str().unwrap(), &url]));
        assert_eq!(report["bytes_resumed"], 0, "{what}: nothing spliced");
        assert_eq!(
            file_difference(&src, env.p("root/up.bin")),
            None,
            "{what}: the new version"
        );
        assert!(!partial.exists(), "{what}: partial file gone");
        std::fs::remove_file(env.p("root/up.bin")).unwrap();
    }
}

#[test]
fn a_disk_that_fills_during_a_resumed_copy_is_exit_5_and_a_later_run_completes() {
    if !is_root() {
        skip(
            "a_disk_that_fills_during_a_resumed_copy",
            "needs root to mount a small tmpfs",
        );
        return;
    }
    let env = Env::new();
    let small = env.p("small");
    if !mount_tmpfs(&small, "size=16m") {
        skip(
            "a_disk_that_fills_during_a_resumed_copy",
            "mount -t tmpfs failed",
        );
        return;
    }
    let src = env.p("src.bin");
    random_file_streamed(&src, 10 << 20);
    std::fs::copy(&src, env.p("root/src.bin")).unwrap();
    let small_server = serve(&small, &env.p("state")).start();
    let root_server = env.server();
    let slow = [
        "-P",
        "2",
        "--rate-limit",
        "40M",
        "--retries",
        "0",
        "--no-progress",
    ];
    let into_small = small_server.url("up.bin");
    let pulled = small.join("down.bin");
    let cases = [
        // The daemon receives into the small file system.
        (
            src.to_str().unwrap(),
            into_small.as_str(),
            partial_of(&small.join("up.bin")),
            small.join("up.bin"),
        ),
        // The client does.
        (
            &root_server.url("src.bin"),
            pulled.to_str().unwrap(),
            partial_of(&small.join("down.bin")),
            pulled.clone(),
        ),
    ];
    let mut outcomes = Vec::new();
    for (from, to, partial, dest) in cases {
        let run_args: Vec<&str> = slow.iter().copied().chain([from, to]).collect();
        // An interrupted first run leaves a partial file to resume.
        let mut client = spawn_cp(&env, &run_args);
        let arrived = kill_client_at(&mut client, &partial, 3 << 20);
        std::thread::sleep(Duration::from_millis(300));
        // Then the disk fills up: 2 MiB stay free, the copy needs more.
        let filler = small.join("filler");
        let fill = free_bytes(&small) - (2 << 20);
        std::fs::write(&filler, vec![7u8; fill as usize]).unwrap();
        let mut resume: Vec<&str> = vec!["cp", "--json"];
        resume.extend(&run_args);
        let full = env.run(&resume);
        let at_final_name = dest.exists();
        // Space is freed; the same command completes, resuming again.
        std::fs::remove_file(&filler).unwrap();
        let done = env.run(&resume);
        let identical = if dest.exists() {
            file_difference(&src, &dest)
        } else {
            Some(format!("{} is absent", dest.display()))
        };
        let partial_left = partial.exists();
        let _ = std::fs::remove_file(&dest);
        outcomes.push((
            to.to_string(),
            arrived,
            full,
            at_final_name,
            done,
            identical,
            partial_left,
        ));
    }
    drop(small_server);
    drop(root_server);
    umount(&small);
    for (to, arrived, full, at_final_name, done, identical, partial_left) in outcomes {
        assert_eq!(code(&full), 5, "{to}: {}", stderr(&full));
        assert!(
            stderr(&full).contains("no space"),
            "{to}: {}",
            stderr(&full)
        );
        assert!(
            !at_final_name,
            "{to}: nothing at the final name when the disk is full"
        );
        let report = json(&done);
        let resumed = report["bytes_resumed"].as_u64().unwrap();
        // At most the blocks in flight are sent again: one per stream (two
        // of 1 MiB), whole on disk but not yet in the journal at the kill.
        assert!(
            resumed > 0 && resumed + (2 << 20) >= arrived,
            "{to}: resumed {resumed} of {arrived}"
        );
        assert_eq!(
            identical, None,
            "{to}: byte-identical after the space came back"
        );
        assert!(!partial_left, "{to}: no partial file left");
    }
}

/// Bytes free on the file system of `dir` (from df).
fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("df: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Text-like bytes that compress well.
fn text_file(path: &Path, len: usize) -> Vec<u8> {
    let words = ["event ", "run 42 ", "muon pt=13.7 ", "jet eta=-1.2\n"];
    let mut data = Vec::with_capacity(len);
    let mut i = 0usize;
    while data.len() < len {
        data.extend_from_slice(words[(i * 7 + i / 5) % words.len()].as_bytes());
        i += 1;
    }
    data.truncate(len);
    std::fs::write(path, &data).unwrap();
    data
}

#[test]
fn compression_and_skipping_are_reported() {
    let env = Env::new();
    let text = text_file(&env.p("run.log"), 5 << 20);
    let server = env.server();
    let log = env.p("run.log");
    let url = server.url("run.log");
    let push = |extra: &[&str]| {
        let mut args = vec!["cp", "--json", "--protect", "clear"];
        args.extend(extra);
        args.extend([log.to_str().unwrap(), url.as_str()]);
        json(&env.run(&args))
    };
    let zstd = push(&["--compress", "zstd"]);
    assert_eq!(content_difference(env.p("root/run.log"), &text), None);
    let c = &zstd["compression"];
    assert_eq!(
        (&c["mode"], &c["codec"]),
        (&"zstd".into(), &"zstd".into()),
        "{zstd}"
    );
    assert_eq!(c["bytes_raw"], 5 << 20);
    assert!(c["ratio"].as_f64().unwrap() < 0.2, "{c}");
    assert_eq!(c["blocks_compressed"], 5);
    assert_eq!(zstd["files_skipped"], 0);

    // The same command again: the daemon has the file (size and mtime).
    let again = push(&["--compress", "zstd"]);
    assert_eq!(
        (&again["files"], &again["files_skipped"]),
        (&0.into(), &1.into()),
        "{again}"
    );
    assert_eq!(again["bytes_skipped"], 5 << 20);
    assert_eq!(again["per_stream"][0]["bytes"], 0, "nothing was sent");
    let forced = push(&["--skip-existing", "never", "--compress", "none"]);
    assert_eq!(forced["files"], 1);
    assert_eq!(forced["compression"]["codec"], "none");
    assert_eq!(forced["compression"]["ratio"], 1.0);

    // Pull with LZ4: the receiving client counts what came compressed.
    let pulled = env.p("back.log");
    let down = json(&env.run(&[
        "cp",
        "--json",
        "--compress",
        "lz4",
        &server.url("run.log"),
        pulled.to_str().unwrap(),
    ]));
    assert_eq!(content_difference(&pulled, &text), None);
    assert_eq!(down["compression"]["codec"], "lz4", "{down}");
    // The pulled copy got the source's mtime: pulling again skips it, and a
    // digest check agrees without sending it.
    for policy in ["mtime", "digest"] {
        let again = json(&env.run(&[
            "cp",
            "--json",
            "--skip-existing",
            policy,
            &server.url("run.log"),
            pulled.to_str().unwrap(),
        ]));
        assert_eq!(again["files_skipped"], 1, "{policy}: {again}");
    }
    for (flag, value) in [
        ("--compress", "gzip"),
        ("--skip-existing", "sometimes"),
        ("--stall-timeout", "0.01"),
    ] {
        let out = env.run(&["cp", flag, value, log.to_str().unwrap(), &server.url("x")]);
        assert_eq!(code(&out), 2, "{flag} {value}: {}", stderr(&out));
    }
}

#[test]
fn a_stalled_stream_is_replaced_and_reported() {
    if !fault_hooks("a_stalled_stream_is_replaced_and_reported") {
        return;
    }
    let env = Env::new();
    random_file_streamed(&env.p("src.bin"), 24 << 20);
    let server = env.server();
    // Stream 1 stalls for good after 3 MB; four seconds of copy at 48 Mbit/s.
    let out = env.run_env(
        &[
            "cp",
            "--json",
            "-P",
            "4",
            "--protect",
            "clear",
            "--stall-timeout",
            "1",
            "--rate-limit",
            "48M",
            "--window",
            "512K",
            env.p("src.bin").to_str().unwrap(),
            &server.url("x.bin"),
        ],
        &[("TERN_FAULT_STALL", "1:3000000")],
    );
    let report = json(&out);
    assert!(report["streams_stalled"].as_u64().unwrap() >= 1, "{report}");
    assert!(
        report["streams_replaced"].as_u64().unwrap() >= 1,
        "{report}"
    );
    assert_eq!(file_difference(env.p("src.bin"), env.p("root/x.bin")), None);
    assert!(
        stderr(&out).contains("stalled"),
        "the stall is logged: {}",
        stderr(&out)
    );
}

/// A partial file changed between a kill and the rerun (by hand, or by a
/// failing disk): the rerun sends again only the blocks that changed and
/// completes; it never fails the same way run after run.
#[test]
fn a_partial_file_damaged_between_runs_is_repaired_by_the_rerun() {
    let env = Env::new();
    let src = env.p("big.bin");
    random_file_streamed(&src, 64 << 20);
    let server = env.server();
    let up = server.url("up.bin");
    let partial = partial_of(&env.p("root/up.bin"));
    let args: Vec<&str> = SLOW_COPY
        .iter()
        .copied()
        .chain([src.to_str().unwrap(), up.as_str()])
        .collect();
    let mut client = spawn_cp(&env, &args);
    let arrived = kill_client_at(&mut client, &partial, 16 << 20);
    assert!(arrived < 64 << 20, "the kill came before the end");
    // The daemon writes what was still on its way, then notices the
    // client is gone: wait until the partial file stops growing.
    let mut held = written_bytes(&partial);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = written_bytes(&partial);
        if now == held {
            break;
        }
        held = now;
    }
    // Overwrite 1 MiB at the start of the kept data.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&partial)
            .unwrap();
        f.write_all_at(&vec![0x5a; 1 << 20], 0).unwrap();
    }
    let mut again: Vec<&str> = vec!["cp", "--json"];
    again.extend(&args);
    let out = env.run(&again);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        file_difference(&src, env.p("root/up.bin")),
        None,
        "byte-identical"
    );
    let resumed = json(&out)["bytes_resumed"].as_u64().unwrap();
    assert!(resumed > 0, "the intact blocks were kept");
    assert!(
        resumed <= held - (1 << 20),
        "the damaged blocks were not kept: resumed {resumed} of {held}"
    );
}

/// The bytes a receiver's debug log says it wrote with direct I/O; `None`
/// when it wrote nothing that way.
fn direct_bytes_logged(log: &str) -> Option<u64> {
    let line = log
        .lines()
        .find(|l| l.contains("bytes written with direct I/O"))?;
    let before = line.split(" bytes written with direct I/O").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

#[test]
fn a_big_file_goes_past_the_page_cache_at_either_receiver_unless_told_not_to() {
    let env = Env::new();
    let data = random_file(&env.p("src.bin"), 20 << 20);
    let debug = [("TERN_LOG", "tern_engine=debug")];
    for direct in [true, false] {
        let name = if direct { "direct" } else { "buffered" };
        let serve = serve(&env.p("root"), &env.p(&format!("state-{name}")));
        let mut cmd = serve.command();
        cmd.env("TERN_LOG", "tern_engine=debug");
        if !direct {
            cmd.env("TERN_DIRECT_IO", "never");
        }
        let log = env.p(&format!("{name}.log"));
        let server = Daemon::spawn(cmd, &log);
        // A push: the daemon receives.
        json(&env.run(&[
            "cp",
            "--json",
            env.p("src.bin").to_str().unwrap(),
            &server.url(name),
        ]));
        assert_eq!(
            content_difference(env.p(&format!("root/{name}")), &data),
            None
        );
        drop(server);
        let daemon_log = std::fs::read_to_string(&log).unwrap();
        // A pull: the client receives.
        let mut client_env = debug.to_vec();
        if !direct {
            client_env.push(("TERN_DIRECT_IO", "never"));
        }
        let server = serve.start();
        let pulled = env.p(&format!("pulled-{name}"));
        let out = env.run_env(
            &["cp", &server.url(name), pulled.to_str().unwrap()],
            &client_env,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(content_difference(&pulled, &data), None);
        let client_log = stderr(&out);
        for (end, said) in [("daemon", &daemon_log), ("client", &client_log)] {
            if !direct {
                assert_eq!(direct_bytes_logged(said), None, "{end}: {said}");
            } else if said.contains("no direct I/O") {
                skip(
                    "a_big_file_goes_past_the_page_cache_at_either_receiver_unless_told_not_to",
                    "the test directory's file system takes no direct I/O",
                );
            } else {
                assert_eq!(direct_bytes_logged(said), Some(20 << 20), "{end}: {said}");
            }
        }
    }
}

#[test]
fn a_daemon_at_its_handshake_limit_is_a_lost_connection_not_a_certificate_failure() {
    let env = Env::new();
    random_file(&env.p("a.bin"), 1 << 20);
    let server = env.server();
    // More connections from this address than a daemon lets authenticate
    // at once, saying nothing.
    let idle: Vec<std::net::TcpStream> = (0..12)
        .map(|_| std::net::TcpStream::connect(server.addr()).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let url = server.url("a.bin");
    let out = env.run(&["cp", "--json", "--retries", "0", &env.s("a.bin"), &url]);
    assert_eq!(code(&out), 9, "{}", said(&out));
    let err = stderr(&out);
    assert!(
        err.contains("closed the connection during the TLS handshake"),
        "{err}"
    );
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));
    let out = env.run(&["cp", "--retries", "0", &env.s("a.bin"), &url]);
    assert!(out.status.success(), "{}", said(&out));
}
