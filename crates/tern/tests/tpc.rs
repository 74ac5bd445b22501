//! `tern cp tern://A/… tern://B/…` through the binary: a 1 GiB
//! third-party copy arrives byte-identical while the client moves almost
//! nothing, the report says so, and what is not supported is said.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Env, serve, tern};
use serde_json::Value;
use tern_testkit::files::{file_difference, seeded_random_file, written_bytes};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_gib_goes_from_daemon_to_daemon_and_the_client_moves_under_64_mib() {
    let env = Env::new();
    std::fs::create_dir_all(env.p("b-root/in")).unwrap();
    let size: u64 = 1 << 30;
    seeded_random_file(&env.p("root/big.bin"), size, 19);
    let a = serve(&env.p("root"), &env.p("a-state")).start();
    let b = serve(&env.p("b-root"), &env.p("b-state")).start();
    let out = env.run(&["cp", "--json", &a.url("big.bin"), &b.url("in/")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["direction"], "third-party", "{v}");
    assert_eq!(v["bytes"], size, "{v}");
    assert_eq!(v["tpc"]["source"]["endpoint"], a.addr().to_string(), "{v}");
    assert_eq!(v["tpc"]["dest"]["endpoint"], b.addr().to_string(), "{v}");
    assert_eq!(
        v["tpc"]["data_path"]["from"],
        a.addr().to_string(),
        "the destination pulled from the source: {v}"
    );
    let through_client = v["tpc"]["client_bytes"].as_u64().unwrap();
    assert!(
        through_client > 0 && through_client < 64 << 20,
        "{through_client} bytes through the client: {v}"
    );
    assert_eq!(
        file_difference(env.p("root/big.bin"), env.p("b-root/in/big.bin")),
        None
    );
    drop((a, b));
}

#[test]
fn one_fingerprint_for_two_daemons_is_refused_and_reversed_ssh_ends_are_relayed() {
    let env = Env::new();
    let a = env.server();
    let pinned = env.run(&["cp", "--fingerprint", "SHA256:x", &a.url("f"), &a.url("g")]);
    assert_eq!(pinned.status.code(), Some(2), "{}", stderr(&pinned));
    assert!(
        stderr(&pinned).contains("a third-party copy has two"),
        "{}",
        stderr(&pinned)
    );
    let mptcp = env.run(&["cp", "--mptcp", &a.url("f"), &a.url("g")]);
    assert_eq!(mptcp.status.code(), Some(2), "{}", stderr(&mptcp));
    assert!(
        stderr(&mptcp).contains("the daemons' own"),
        "{}",
        stderr(&mptcp)
    );
    // Two ssh ends whose terns only dial this host (-z) cannot reach each
    // other: relayed, saying so (here ssh is `false`, so the relay's first
    // leg fails).
    let both = [
        "cp",
        "-z",
        "--ssh",
        "false",
        "somehost:/tmp/f",
        "otherhost:/tmp/g",
    ];
    let relayed = env.run(&both);
    assert!(!relayed.status.success());
    assert!(
        stderr(&relayed).contains("relaying through this host, as scp -3 does"),
        "{}",
        stderr(&relayed)
    );
    drop(a);
}

#[test]
fn tpc_push_has_the_source_dial_and_the_report_says_so() {
    let env = Env::new();
    std::fs::create_dir_all(env.p("b-root/in")).unwrap();
    seeded_random_file(&env.p("root/run.dat"), 3 << 20, 5);
    let a = serve(&env.p("root"), &env.p("a-state")).start();
    let b = serve(&env.p("b-root"), &env.p("b-state")).start();
    let out = env.run(&[
        "cp",
        "--json",
        "--tpc",
        "push",
        &a.url("run.dat"),
        &b.url("in/"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tpc"]["mode"], "push", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["tpc"]["dialer"], "source", "{v}");
    assert_eq!(v["tpc"]["chosen_by"], "--tpc", "{v}");
    assert_eq!(v["tpc"]["data_path"]["to"], b.addr().to_string(), "{v}");
    assert_eq!(
        file_difference(env.p("root/run.dat"), env.p("b-root/in/run.dat")),
        None
    );
    drop((a, b));
}

#[test]
fn via_client_carries_a_tree_through_this_host_and_says_so() {
    let env = Env::new();
    std::fs::create_dir_all(env.p("root/tree/sub")).unwrap();
    std::fs::create_dir_all(env.p("b-root/in")).unwrap();
    seeded_random_file(&env.p("root/tree/a.bin"), 3 << 20, 3);
    seeded_random_file(&env.p("root/tree/sub/b.bin"), 1 << 20, 4);
    let a = serve(&env.p("root"), &env.p("a-state")).start();
    let b = serve(&env.p("b-root"), &env.p("b-state")).start();
    let spool = env.p("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let out = env.run(&[
        "cp",
        "-r",
        "--json",
        "--via-client",
        "--spool",
        spool.to_str().unwrap(),
        &a.url("tree"),
        &b.url("in/"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["direction"], "relay", "{v}");
    let codes = [
        &v["exit_code"],
        &v["relay"]["pull"]["exit_code"],
        &v["relay"]["push"]["exit_code"],
    ];
    assert_eq!(codes, [0, 0, 0], "{v}");
    let total = (3 << 20) + (1 << 20);
    assert_eq!(v["relay"]["pulled_bytes"], total, "{v}");
    assert_eq!(v["relay"]["pushed_bytes"], total, "{v}");
    assert_eq!(v["relay"]["pull"]["direction"], "pull", "{v}");
    assert_eq!(v["relay"]["push"]["direction"], "push", "{v}");
    for f in ["a.bin", "sub/b.bin"] {
        assert_eq!(
            file_difference(
                env.p(&format!("root/tree/{f}")),
                env.p(&format!("b-root/in/tree/{f}"))
            ),
            None,
            "{f}"
        );
    }
    // The spool is gone with the command.
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0);
    // In words: what it does, while and after.
    let one = env.run(&[
        "cp",
        "--via-client",
        &a.url("tree/a.bin"),
        &b.url("in/one.bin"),
    ]);
    assert!(one.status.success(), "{}", stderr(&one));
    assert!(
        stderr(&one).contains("relaying through this host"),
        "{}",
        stderr(&one)
    );
    let said = String::from_utf8_lossy(&one.stdout);
    assert!(
        said.contains("relayed through this host: pulled 3.00 MiB"),
        "{said}"
    );
    assert_eq!(
        file_difference(env.p("root/tree/a.bin"), env.p("b-root/in/one.bin")),
        None
    );
    // A copy with a local end has nothing to relay.
    let local = env.run(&[
        "cp",
        "--via-client",
        &a.url("tree/a.bin"),
        &env.s("here.bin"),
    ]);
    assert_eq!(local.status.code(), Some(2), "{}", stderr(&local));
    assert!(
        stderr(&local).contains("has a local end"),
        "{}",
        stderr(&local)
    );
    drop((a, b));
}

#[test]
fn a_congestion_control_for_the_daemons_is_theirs_to_judge() {
    let env = Env::new();
    std::fs::create_dir_all(env.p("b-root/in")).unwrap();
    seeded_random_file(&env.p("root/f.bin"), 1 << 20, 5);
    let a = serve(&env.p("root"), &env.p("a-state")).start();
    let b = serve(&env.p("b-root"), &env.p("b-state")).start();
    let out = env.run(&["cp", "--cc", "nosuchcc", &a.url("f.bin"), &b.url("in/")]);
    let said = stderr(&out);
    assert!(!out.status.success(), "{said}");
    // Refused by the dialing daemon, in words, not by this host's list.
    assert!(
        said.contains("nosuchcc") && said.contains("not available"),
        "{said}"
    );
    assert!(!said.contains("not usable here"), "{said}");
    assert!(!env.p("b-root/in/f.bin").exists());
    drop((a, b));
}

#[test]
fn a_third_party_copy_that_could_not_place_a_file_fails_and_says_which() {
    // Before, the destination's refusal of an entry never reached the
    // client: it said "copied 0 B in 0 files" and exited 0.
    let env = Env::new();
    std::fs::create_dir_all(env.p("root/tree")).unwrap();
    seeded_random_file(&env.p("root/tree/x.bin"), 3 << 20, 7);
    seeded_random_file(&env.p("root/tree/y.bin"), 1 << 20, 8);
    std::fs::create_dir_all(env.p("b-root/in/x.bin")).unwrap();
    std::fs::create_dir_all(env.p("b-root/t/tree/x.bin")).unwrap();
    let a = serve(&env.p("root"), &env.p("a-state")).start();
    let b = serve(&env.p("b-root"), &env.p("b-state")).start();
    let one = env.run(&["cp", "--json", &a.url("tree/x.bin"), &b.url("in/")]);
    assert_eq!(one.status.code(), Some(2), "{}", stderr(&one));
    let v: Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(v["exit_code"], 2, "{v}");
    assert!(stderr(&one).contains("is a directory"), "{}", stderr(&one));
    let tree = env.run(&["cp", "-r", &a.url("tree"), &b.url("t/")]);
    assert_eq!(tree.status.code(), Some(2), "{}", stderr(&tree));
    assert!(
        stderr(&tree).contains("tree/x.bin") && stderr(&tree).contains("1 other file was copied"),
        "{}",
        stderr(&tree)
    );
    assert_eq!(
        file_difference(env.p("root/tree/y.bin"), env.p("b-root/t/tree/y.bin")),
        None
    );
    drop((a, b));
}

#[test]
fn a_third_party_copy_whose_destination_was_killed_runs_again_and_resumes() {
    let env = Env::new();
    std::fs::create_dir_all(env.p("b-root")).unwrap();
    let size: u64 = 512 << 20;
    seeded_random_file(&env.p("root/mid.bin"), size, 23);
    let a = serve(&env.p("root"), &env.p("a-state")).start();
    let b = serve(&env.p("b-root"), &env.p("b-state")).start();
    let (from, to) = (a.url("mid.bin"), b.url("mid.bin"));
    let mut client = tern()
        .args([
            "cp",
            "--retries",
            "3",
            "--json",
            "--no-progress",
            &from,
            &to,
        ])
        .env("XDG_CONFIG_HOME", env.p("cfg"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let partial = env
        .p("b-root")
        .join(tern_engine::fsio::partial_name(std::ffi::OsStr::new(
            "mid.bin",
        )));
    let start = Instant::now();
    while written_bytes(&partial) < 128 << 20 {
        assert!(start.elapsed() < Duration::from_secs(60), "never got going");
        assert!(
            client.try_wait().unwrap().is_none(),
            "ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // The destination dies and is back within the client's first wait (1 s).
    let _b = b.kill9().start();
    let out = client.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("trying again in 1 s"),
        "{}",
        stderr(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["direction"], "third-party", "{v}");
    assert!(v["bytes_resumed"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(
        file_difference(env.p("root/mid.bin"), env.p("b-root/mid.bin")),
        None
    );
    drop(a);
}

#[test]
fn a_source_missing_at_the_source_daemon_is_said_to_be_missing_there() {
    // Before, the destination (which dialed the source) was named as
    // refusing: "peer: B refused: peer: nothere.bin: no such file".
    let env = Env::new();
    std::fs::create_dir_all(env.p("b-root")).unwrap();
    let a = serve(&env.p("root"), &env.p("a-state")).start();
    let b = serve(&env.p("b-root"), &env.p("b-state")).start();
    for mode in ["pull", "push"] {
        let out = env.run(&["cp", "--tpc", mode, &a.url("nothere.bin"), &b.url("x.bin")]);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{said}");
        assert!(said.contains("nothere.bin: no such file"), "{said}");
        assert!(!said.contains("refused"), "{mode}: {said}");
        if mode == "pull" {
            // The destination dialed, and names the source as the one
            // that said so.
            let source = format!("the source daemon ({})", a.addr());
            assert!(said.contains(&source), "{said}");
        }
    }
    drop((a, b));
}
