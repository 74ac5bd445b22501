//! `tern cp tern://A/… tern://B/…` through the binary: a 1 GiB
//! third-party copy arrives byte-identical while the client moves almost
//! nothing, the report says so, and what is not supported is said.

use std::process::Output;

mod common;
use common::{Env, serve};
use serde_json::Value;
use tern_testkit::files::{file_difference, seeded_random_file};

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
fn one_fingerprint_for_two_daemons_and_ssh_hosts_are_refused_with_the_reason() {
    let env = Env::new();
    let a = env.server();
    let pinned = env.run(&["cp", "--fingerprint", "SHA256:x", &a.url("f"), &a.url("g")]);
    assert_eq!(pinned.status.code(), Some(2), "{}", stderr(&pinned));
    assert!(
        stderr(&pinned).contains("a third-party copy has two"),
        "{}",
        stderr(&pinned)
    );
    let ssh = env.run(&["cp", &a.url("f"), "somehost:/tmp/g"]);
    assert_eq!(ssh.status.code(), Some(2), "{}", stderr(&ssh));
    assert!(
        stderr(&ssh).contains("ssh host it is not supported yet"),
        "{}",
        stderr(&ssh)
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
    assert_eq!(v["tpc"]["dialer"], "source", "{v}");
    assert_eq!(v["tpc"]["chosen_by"], "--tpc", "{v}");
    assert_eq!(v["tpc"]["data_path"]["to"], b.addr().to_string(), "{v}");
    assert_eq!(
        file_difference(env.p("root/run.dat"), env.p("b-root/in/run.dat")),
        None
    );
    drop((a, b));
}
