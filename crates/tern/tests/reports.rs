//! What tern tells its user must be true and agree with itself: the
//! summaries of skipped, local and measured runs, the stream counts of one
//! run, sysctl advice against the host's values, entries left out, and
//! errors said once.

use std::process::Output;

use serde_json::Value;
use tern_testkit::files::random_file;
use tern_testkit::net::free_port;

mod common;
use common::Env;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "tern failed: {}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// The maximum of `net.ipv4.NAME` on this host.
fn host_max(name: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).unwrap();
    text.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Every `sysctl -w net.ipv4.tcp_?mem="MIN DEF MAX"` in `text` raises
/// the host's maximum.
fn assert_advice_only_raises(text: &str) {
    for line in text.lines().filter(|l| l.contains("sysctl -w")) {
        let name = if line.contains("tcp_rmem") {
            "tcp_rmem"
        } else {
            "tcp_wmem"
        };
        let set: u64 = line
            .split('"')
            .nth(1)
            .and_then(|v| v.split_whitespace().nth(2))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("unreadable advice: {line}"));
        assert!(set > host_max(name), "advice lowers {name}: {line}");
    }
}

#[test]
fn a_skipped_rerun_says_nothing_moved_and_no_more() {
    let env = Env::new();
    random_file(&env.p("a.bin"), 3 << 20);
    let server = env.server();
    let first = env.run(&["cp", &env.s("a.bin"), &server.url("a.bin")]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_advice_only_raises(&stderr(&first));
    let again = env.run(&["cp", &env.s("a.bin"), &server.url("a.bin")]);
    assert!(again.status.success(), "{}", stderr(&again));
    let said = stderr(&again);
    assert!(
        said.contains("nothing to move, 1 file (3.00 MiB) already complete at the destination"),
        "{said}"
    );
    for absent in ["bit/s", "streams", "TCP_INFO", "sysctl", "receiving end"] {
        assert!(!said.contains(absent), "{absent}: {said}");
    }
}

#[test]
fn one_stream_one_file_and_perf_summaries_read_right_and_advise_no_lowering() {
    let env = Env::new();
    random_file(&env.p("a.bin"), 2 << 20);
    let server = env.server();
    let out = env.run(&["cp", "-P", "1", &env.s("a.bin"), &server.url("a.bin")]);
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("in 1 file,"), "{said}");
    assert!(said.contains(" 1 stream,"), "{said}");
    assert!(!said.contains("1 streams"), "{said}");
    // A pusher sends: the caveat of a receiving end is not its own.
    assert!(!said.contains("only at its sending end"), "{said}");
    // A puller received: it says so, not that too little data moved.
    let pulled = env.run(&["cp", "-P", "1", &server.url("a.bin"), &env.s("back.bin")]);
    let said_pulled = stderr(&pulled);
    assert!(pulled.status.success(), "{said_pulled}");
    assert!(said_pulled.contains("This end received"), "{said_pulled}");
    assert!(!said_pulled.contains("too little data"), "{said_pulled}");
    assert_advice_only_raises(&said);
    let url = format!("tern://127.0.0.1:{}", server.port());
    let out = env.run(&["perf", &url, "--time", "1", "-P", "2"]);
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    let head = said
        .lines()
        .find(|l| l.starts_with("tern perf:"))
        .expect(&said);
    assert!(!head.contains("file"), "{head}");
    assert_advice_only_raises(&said);
}

#[test]
fn one_run_gives_one_stream_story_in_every_part_of_its_report() {
    let env = Env::new();
    let server = env.server();
    let url = format!("tern://127.0.0.1:{}", server.port());
    let report = json(&env.run(&["perf", &url, "--time", "2", "--json"]));
    let count = &report["stream_count"];
    let (peak, at_end) = (
        count["peak"].as_u64().unwrap(),
        count["at_end"].as_u64().unwrap(),
    );
    let steps: Vec<u64> = report["tuning"]["stream_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["streams"].as_u64().unwrap())
        .collect();
    assert_eq!(Some(peak), steps.iter().copied().max(), "{report}");
    assert_eq!(Some(at_end), steps.last().copied(), "{report}");
    // The diagnosis counts the streams open at the end.
    let summary = report["tuning"]["summary"].as_str().unwrap();
    let measured = report["tuning"]["streams"].as_array().unwrap().len() as u64;
    assert_eq!(measured, at_end, "{report}");
    let says = if at_end == 1 {
        "its one stream".to_string()
    } else {
        format!("{at_end} streams")
    };
    assert!(
        summary.contains(&says) || summary.contains("TCP_INFO gave too little"),
        "{summary} (at the end: {at_end})"
    );
}

#[test]
fn a_local_tree_copy_counts_what_it_left_out_and_speaks_of_no_network() {
    let env = Env::new();
    std::fs::create_dir_all(env.p("tree/a")).unwrap();
    std::fs::write(env.p("tree/a/x"), b"hi\n").unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(env.p("tree/a/sock")).unwrap();
    let out = env.run(&["cp", "-r", &env.s("tree"), &env.s("copy")]);
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(23), "{said}");
    assert!(said.contains("not copied: 1 entry"), "{said}");
    assert!(said.contains("tree/a/sock: a socket, not copied"), "{said}");
    for absent in ["stream", "protect", "network", "at the peer", "WARN"] {
        assert!(!said.contains(absent), "{absent}: {said}");
    }
    let out = env.run(&["cp", "-r", "--json", &env.s("tree"), &env.s("copy2")]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = report["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0]["path"], "tree/a/sock");
    assert!(
        failed[0]["error"].as_str().unwrap().contains("socket"),
        "{report}"
    );
}

#[test]
fn an_error_says_its_cause_once() {
    let env = Env::new();
    random_file(&env.p("a.bin"), 1024);
    let port = free_port();
    let out = env.run(&[
        "cp",
        "--retries",
        "0",
        &env.s("a.bin"),
        &format!("tern://127.0.0.1:{port}/a.bin"),
    ]);
    let said = stderr(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("cannot connect to"), "{said}");
    assert_eq!(said.matches("refused").count(), 1, "{said}");
}

#[test]
fn a_port_after_an_scp_host_gets_a_hint_towards_tern_urls() {
    let env = Env::new();
    random_file(&env.p("a.bin"), 1024);
    let out = env.run(&["cp", "--ssh", "false", &env.s("a.bin"), "127.0.0.1:4800/x"]);
    let said = stderr(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("write tern://127.0.0.1:4800/x"), "{said}");
}

#[test]
fn a_missing_source_over_ssh_is_said_before_ssh_is_run() {
    let env = Env::new();
    std::fs::create_dir(env.p("dir")).unwrap();
    // An "ssh" that records that it ran: it must not.
    let ran = env.p("ssh-ran");
    let fake_ssh = env.p("fake-ssh");
    std::fs::write(
        &fake_ssh,
        format!("#!/bin/sh\ntouch {}\nexit 255\n", ran.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake_ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (source, code, says) in [
        (
            env.s("missing.bin"),
            3,
            "missing.bin: no such file or directory",
        ),
        (env.s("dir"), 2, "is a directory (use -r to copy it)"),
    ] {
        let out = env.run(&[
            "cp",
            "--ssh",
            fake_ssh.to_str().unwrap(),
            &source,
            "somehost:/tmp/x",
        ]);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{said}");
        assert!(said.contains(says), "{said}");
        assert!(!ran.exists(), "ssh ran for {source}");
    }
}
