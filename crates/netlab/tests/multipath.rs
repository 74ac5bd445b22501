//! tern over every path between two hosts: a daemon on two emulated paths
//! names its second address, the client's streams go over both, and a copy
//! survives one path going dead halfway (root; skips without it).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Lab, tern_or_skip};
use serde_json::Value;
use tern_testkit::files::{content_difference, random_file, written_bytes};

/// Starts `tern serve` in B on every address (so that it names both).
fn serve_everywhere(lab: &Lab, tern: &str, work: &Path) -> tern_testkit::daemon::Daemon {
    let root = work.join("root");
    std::fs::create_dir_all(&root).unwrap();
    tern_testkit::daemon::Serve::new(tern, root, work.join("state"))
        .listen("0.0.0.0:4747")
        .via(lab.prefix("B"))
        .start()
}

fn client(lab: &Lab, tern: &str, work: &Path, args: &[&str]) -> std::process::Command {
    let cfg = format!("XDG_CONFIG_HOME={}", work.join("cfg").display());
    let state = format!("XDG_STATE_HOME={}", work.join("xdg-state").display());
    let mut cmd = vec!["env", cfg.as_str(), state.as_str(), tern];
    cmd.extend_from_slice(args);
    lab.command("A", &cmd)
}

fn report(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "tern failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `tern perf -P 2 --json` to the daemon's first address, with `extra`.
fn perf_json(lab: &Lab, tern: &str, work: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["perf", "tern://10.47.0.2", "-P", "2", "--json"];
    args.extend_from_slice(extra);
    report(&client(lab, tern, work, &args).output().unwrap())
}

/// `tern cp --json` of `work/big.bin` to the daemon's first address, with
/// `extra` options.
fn copy_big(lab: &Lab, tern: &str, work: &Path, extra: &[&str]) -> std::process::Command {
    let src = work.join("big.bin");
    let mut args = vec!["cp"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--json", src.to_str().unwrap(), "tern://10.47.0.2/big.bin"]);
    client(lab, tern, work, &args)
}

/// Starts [`copy_big`] with its output kept, and returns once `root` holds
/// `share` of its `size` bytes.
fn copy_under_way(
    lab: &Lab,
    tern: &str,
    work: &Path,
    extra: &[&str],
    size: usize,
    share: f64,
) -> std::process::Child {
    let copy = copy_big(lab, tern, work, extra);
    started_copy_under_way(copy, &work.join("root"), size, share)
}

/// Starts `copy` with its output kept, and returns once `root` holds
/// `share` of its `size` bytes.
fn started_copy_under_way(
    mut copy: std::process::Command,
    root: &Path,
    size: usize,
    share: f64,
) -> std::process::Child {
    let mut copy = copy
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (partial_size(root) as f64) < size as f64 * share {
        assert!(
            Instant::now() < deadline,
            "the copy never got {share} of the way"
        );
        assert!(
            copy.try_wait().unwrap().is_none(),
            "the copy ended before {share} of it could be seen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    copy
}

/// `netlab set --path 1 --loss LOSS`.
fn set_loss_on_path_1(lab: &Lab, loss: &str) {
    let out = lab.netlab(&["set", "--path", "1", "--loss", loss]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The partial file being received in `root`, and the bytes written to it.
fn partial_size(root: &Path) -> u64 {
    std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(".tern."))
                .map(|e| written_bytes(e.path()))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// A lab `name` of two paths (jumbo frames) and an empty work directory.
fn two_paths(name: &str, path0: &str, path1: &str) -> (Lab, std::path::PathBuf) {
    let work = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let lab = Lab::up(name, &["--path", path0, "--path", path1, "--mtu", "9000"]);
    (lab, work)
}

#[test]
fn streams_go_over_both_paths_and_a_copy_survives_one_going_dead() {
    let test = "streams_go_over_both_paths_and_a_copy_survives_one_going_dead";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    let (lab, work) = two_paths("nltestmp", "rtt=10,rate=50", "rtt=20,rate=50");
    let _server = serve_everywhere(&lab, &tern, &work);

    // Given one address, a fixed count of streams spreads over both paths.
    let perf = perf_json(&lab, &tern, &work, &["--time", "2"]);
    let paths = perf["paths"].as_array().expect("a paths array");
    assert_eq!(paths.len(), 2, "{perf}");
    assert_eq!(paths[1]["remote"], "10.47.1.2:4747", "{perf}");
    for (p, rtt) in paths.iter().zip([10.0, 20.0]) {
        assert!(
            p["bytes"].as_u64().unwrap() > 0,
            "a path carried nothing: {perf}"
        );
        assert_eq!(p["state"], "active", "{perf}");
        // Each path's own RTT (netlab's, plus a little), and its limit.
        let seen = p["rtt_ms"].as_f64().expect("an RTT per path");
        assert!(
            seen >= rtt && seen < rtt + 5.0,
            "RTT {seen} on a {rtt} ms path: {perf}"
        );
        assert!(p["limit"].is_string(), "{perf}");
    }
    // --paths off keeps to the address given.
    let one = perf_json(&lab, &tern, &work, &["--time", "1", "--paths", "off"]);
    assert!(one.get("paths").is_none(), "{one}");

    // A copy over both paths; path 1 goes dead a third of the way in.
    let size = 48 << 20;
    let data = random_file(&work.join("big.bin"), size);
    let copy = copy_under_way(
        &lab,
        &tern,
        &work,
        &["-P", "4", "--stall-timeout", "2"],
        size,
        1.0 / 3.0,
    );
    set_loss_on_path_1(&lab, "100%");
    let root = work.join("root");
    let out = copy.wait_with_output().unwrap();
    let copied = report(&out);
    assert_eq!(content_difference(root.join("big.bin"), &data), None);
    let paths = copied["paths"].as_array().expect("a paths array");
    assert_eq!(paths.len(), 2, "{copied}");
    assert_eq!(paths[0]["state"], "active", "{copied}");
    assert_eq!(paths[1]["state"], "failed", "{copied}");
    assert!(
        paths[1]["failed_after_s"].as_f64().unwrap() > 0.0,
        "{copied}"
    );
    assert!(paths[1]["bytes"].as_u64().unwrap() > 0, "{copied}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("panicked"), "{said}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_reserved_path_carries_one_stream_at_its_rate_beside_a_best_effort_one() {
    let test = "a_reserved_path_carries_one_stream_at_its_rate_beside_a_best_effort_one";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    // Path 1 could carry 200 Mbit/s; 40 are reserved on it.
    let (lab, work) = two_paths("nltestrs", "rtt=10,rate=100", "rtt=20,rate=200");
    let _server = serve_everywhere(&lab, &tern, &work);
    let perf = perf_json(
        &lab,
        &tern,
        &work,
        &["--time", "4", "--path", "10.47.1.2,rate=40M"],
    );
    let paths = perf["paths"].as_array().expect("a paths array");
    assert_eq!(paths.len(), 2, "{perf}");
    let reserved = &paths[1];
    assert_eq!(reserved["state"], "reserved", "{perf}");
    assert_eq!(reserved["reserved_bps"], 40_000_000, "{perf}");
    assert_eq!(
        reserved["streams"], 1,
        "one stream carries a reservation: {perf}"
    );
    let rate = reserved["rate_bps"].as_f64().unwrap();
    assert!(
        rate > 0.5 * 40e6 && rate < 1.25 * 40e6,
        "the reserved path ran at {rate} bit/s, not about 40 Mbit/s: {perf}"
    );
    assert_eq!(paths[0]["state"], "active", "{perf}");
    assert!(paths[0]["bytes"].as_u64().unwrap() > 0, "{perf}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn blocks_left_on_a_slow_path_at_the_end_also_go_over_the_fast_one() {
    let test = "blocks_left_on_a_slow_path_at_the_end_also_go_over_the_fast_one";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    // A 1 MiB block takes 2 s on path 1 and 0.1 s on path 0: when the last
    // block is handed out, path 1 is still writing one.
    let (lab, work) = two_paths("nltesteg", "rtt=10,rate=100", "rtt=30,rate=4");
    let _server = serve_everywhere(&lab, &tern, &work);
    let size = 40 << 20;
    let data = random_file(&work.join("big.bin"), size);
    let out = copy_big(&lab, &tern, &work, &["-P", "2", "--block-size", "1M"])
        .output()
        .unwrap();
    let copied = report(&out);
    assert_eq!(
        content_difference(work.join("root/big.bin"), &data),
        None,
        "{copied}"
    );
    let paths = copied["paths"].as_array().expect("a paths array");
    assert_eq!(paths.len(), 2, "{copied}");
    assert!(paths[1]["bytes"].as_u64().unwrap() > 0, "{copied}");
    assert!(
        copied["blocks_copied"].as_u64().unwrap() >= 1,
        "the fast path took a copy of the slow one's last block: {copied}"
    );
    assert_eq!(copied["blocks_retransmitted"], 0, "{copied}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_path_that_comes_back_is_rejoined() {
    let test = "a_path_that_comes_back_is_rejoined";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    let (lab, work) = two_paths("nltestrj", "rtt=10,rate=20", "rtt=10,rate=20");
    let _server = serve_everywhere(&lab, &tern, &work);
    let size = 64 << 20;
    let data = random_file(&work.join("big.bin"), size);
    let copy = copy_under_way(
        &lab,
        &tern,
        &work,
        &["-P", "2", "--stall-timeout", "2"],
        size,
        0.2,
    );
    // Path 1 goes dead for 4 s: its stream stalls (2 s) and is given up,
    // then the path answers again and a stream rejoins it.
    set_loss_on_path_1(&lab, "100%");
    std::thread::sleep(Duration::from_secs(4));
    set_loss_on_path_1(&lab, "0");
    let root = work.join("root");
    let out = copy.wait_with_output().unwrap();
    let copied = report(&out);
    assert_eq!(content_difference(root.join("big.bin"), &data), None);
    let paths = copied["paths"].as_array().expect("a paths array");
    let path1 = &paths[1];
    assert_eq!(path1["state"], "active", "{copied}");
    let down = path1["failed_after_s"].as_f64().expect("it went down");
    let back = path1["rejoined_after_s"].as_f64().expect("it came back");
    assert!(back > down, "{copied}");
    // The stream that rejoined carried data: more streams than the one it
    // lost went over the path.
    assert!(path1["streams"].as_u64().unwrap() >= 2, "{copied}");
    let _ = std::fs::remove_dir_all(&work);
}

/// Two paths, a file `big.bin` of random bytes in `work`, and a "ssh"
/// that runs the remote command in B's namespace as sshd would
/// (SSH_CONNECTION names path 0's addresses, HOME is `root`).
struct OverSsh {
    lab: Lab,
    work: std::path::PathBuf,
    root: std::path::PathBuf,
    ssh: std::path::PathBuf,
    src: String,
    data: Vec<u8>,
}

impl OverSsh {
    fn new(name: &str, path0: &str, path1: &str, size: usize) -> OverSsh {
        let (lab, work) = two_paths(name, path0, path1);
        let root = work.join("root");
        std::fs::create_dir_all(&root).unwrap();
        let ssh = work.join("fake-ssh");
        let into_b = lab.prefix("B").join(" ");
        std::fs::write(
            &ssh,
            format!(
                "#!/bin/sh\nshift\nexec {into_b} env SSH_CONNECTION='10.47.0.1 40000 10.47.0.2 22' \
                 HOME={} XDG_STATE_HOME={} sh -c \"$1\"\n",
                root.display(),
                work.join("remote-state").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = random_file(&work.join("big.bin"), size);
        let src = work.join("big.bin").to_string_lossy().into_owned();
        OverSsh {
            lab,
            work,
            root,
            ssh,
            src,
            data,
        }
    }

    /// `tern cp --json ARGS…` from A through the fake ssh.
    fn cp(&self, tern: &str, args: &[&str]) -> std::process::Command {
        let mut all = vec!["cp", "--json", "--ssh", self.ssh.to_str().unwrap()];
        all.extend_from_slice(&["--remote-tern", tern]);
        all.extend_from_slice(args);
        client(&self.lab, tern, &self.work, &all)
    }

    /// [`OverSsh::cp`], which must succeed; its report.
    fn copied(&self, tern: &str, args: &[&str]) -> Value {
        report(&self.cp(tern, args).output().unwrap())
    }

    /// Whether `file` holds `big.bin`'s bytes.
    fn assert_same(&self, file: &Path) {
        assert_eq!(content_difference(file, &self.data), None);
    }
}

/// The `paths` of `copied`, checked to be two with bytes on each, path 1
/// to B's second address; path 1's object.
fn both_paths_carried(copied: &Value) -> Value {
    let paths = copied["paths"].as_array().expect("a paths array");
    assert_eq!(paths.len(), 2, "{copied}");
    assert!(
        paths[1]["remote"]
            .as_str()
            .unwrap()
            .starts_with("10.47.1.2:"),
        "{copied}"
    );
    for p in paths {
        assert!(p["bytes"].as_u64().unwrap() > 0, "{copied}");
        assert_eq!(p["state"], "active", "{copied}");
    }
    paths[1].clone()
}

#[test]
fn a_copy_over_ssh_takes_every_path_of_the_remote_host() {
    let test = "a_copy_over_ssh_takes_every_path_of_the_remote_host";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    let lab = OverSsh::new("nltestsh", "rtt=10,rate=50", "rtt=20,rate=50", 24 << 20);
    let copied = lab.copied(&tern, &["-P", "2", &lab.src, "10.47.0.2:big.bin"]);
    lab.assert_same(&lab.root.join("big.bin"));
    both_paths_carried(&copied);
    // --paths off keeps the remote tern on the address ssh came in on.
    let again = lab.copied(&tern, &["--paths", "off", &lab.src, "10.47.0.2:again.bin"]);
    assert!(again.get("paths").is_none(), "{again}");
    let _ = std::fs::remove_dir_all(&lab.work);
}

#[test]
fn a_reverse_connect_copy_takes_every_path_both_ways() {
    let test = "a_reverse_connect_copy_takes_every_path_both_ways";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    let lab = OverSsh::new("nltestrv", "rtt=10,rate=50", "rtt=20,rate=50", 24 << 20);
    // Push: B dials A at both of A's addresses; A's streams take both.
    let pushed = lab.copied(&tern, &["-z", "-P", "2", &lab.src, "10.47.0.2:big.bin"]);
    lab.assert_same(&lab.root.join("big.bin"));
    let path1 = both_paths_carried(&pushed);
    assert_eq!(path1["local"], "10.47.1.1", "{pushed}");
    // Pull, with the path named by hand: B dials 10.47.1.1 from 10.47.1.2.
    let back = lab.work.join("back.bin");
    let pulled = lab.copied(
        &tern,
        &[
            "-z",
            "-P",
            "2",
            "--path",
            "10.47.1.1=10.47.1.2",
            "10.47.0.2:big.bin",
            back.to_str().unwrap(),
        ],
    );
    lab.assert_same(&back);
    let path1 = both_paths_carried(&pulled);
    assert_eq!(path1["local"], "10.47.1.1", "{pulled}");
    // tern perf -z both ways: the same paths, memory to memory.
    for extra in [&[][..], &["--reverse"][..]] {
        let mut args = vec!["perf", "--json", "--ssh", lab.ssh.to_str().unwrap()];
        args.extend_from_slice(&["--remote-tern", &tern, "-z", "-P", "2", "--time", "2"]);
        args.extend_from_slice(extra);
        args.push("10.47.0.2:");
        let perf = report(&client(&lab.lab, &tern, &lab.work, &args).output().unwrap());
        let path1 = both_paths_carried(&perf);
        assert_eq!(path1["local"], "10.47.1.1", "{extra:?}: {perf}");
    }
    // Without this host's address, a path cannot be dialled back.
    let out = lab
        .cp(
            &tern,
            &["-z", "--path", "10.47.1.2", &lab.src, "10.47.0.2:never.bin"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--path SRC=10.47.1.2"), "{said}");
    // Nor with an address that is not this host's.
    let out = lab
        .cp(
            &tern,
            &[
                "-z",
                "--path",
                "10.99.0.1=10.47.1.2",
                &lab.src,
                "10.47.0.2:never.bin",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("not an address of this host"), "{said}");
    assert!(!lab.root.join("never.bin").exists());
    let _ = std::fs::remove_dir_all(&lab.work);
}

#[test]
fn advice_for_a_daemon_names_the_other_path_a_copy_took() {
    let test = "advice_for_a_daemon_names_the_other_path_a_copy_took";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    let (lab, work) = two_paths("nltestad", "rtt=10,rate=100", "rtt=20,rate=50");
    let _server = serve_everywhere(&lab, &tern, &work);
    // An advisor beside the client, fed by the copy's report.
    let state = work.join("advisor-state");
    let _advisor = tern_testkit::daemon::KillOnDrop(
        lab.command(
            "A",
            &[
                &tern,
                "advisor",
                "--http",
                "127.0.0.1:4749",
                "--state-dir",
                state.to_str().unwrap(),
            ],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap(),
    );
    let url = "http://127.0.0.1:4749";
    random_file(&work.join("big.bin"), 24 << 20);
    let deadline = Instant::now() + Duration::from_secs(30);
    let copied = loop {
        let out = copy_big(&lab, &tern, &work, &["-P", "2", "--advisor", url])
            .output()
            .unwrap();
        let copied = report(&out);
        if copied["advisor"]["reported"] == true {
            break copied;
        }
        // The advisor may still be starting.
        assert!(Instant::now() < deadline, "never reported: {copied}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(copied["paths"].as_array().unwrap().len(), 2, "{copied}");
    let advise = |json: bool| {
        let mut args = vec![tern.as_str(), "advise", "10.47.0.2", "--server", url];
        if json {
            args.push("--json");
        }
        lab.command("A", &args).output().unwrap()
    };
    let out = advise(true);
    let advice: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "tern advise: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let paths = advice["paths"].as_array().expect("the other paths");
    assert_eq!(paths.len(), 1, "{advice}");
    assert_eq!(paths[0]["host"], "10.47.1.2", "{advice}");
    let rtt = paths[0]["rtt_ms"].as_f64().expect("path 1's own RTT");
    assert!((20.0..25.0).contains(&rtt), "{advice}");
    // Path 0's own figures, not the sum of both paths.
    let rtt0 = advice["rtt_ms"].as_f64().unwrap();
    assert!((10.0..15.0).contains(&rtt0), "{advice}");
    let text = String::from_utf8_lossy(&advise(false).stdout).to_string();
    assert!(text.contains("also via   10.47.1.2 (RTT"), "{text}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_reverse_connect_copy_survives_a_path_going_dead_and_rejoins_it() {
    let test = "a_reverse_connect_copy_survives_a_path_going_dead_and_rejoins_it";
    let Some(tern) = tern_or_skip(test) else {
        return;
    };
    let size = 64 << 20;
    let lab = OverSsh::new("nltestrr", "rtt=10,rate=20", "rtt=10,rate=20", size);
    let args = [
        "-z",
        "-P",
        "2",
        "--stall-timeout",
        "2",
        &lab.src,
        "10.47.0.2:big.bin",
    ];
    let copy = started_copy_under_way(lab.cp(&tern, &args), &lab.root, size, 0.2);
    // Path 1 goes dead for 4 s: its stream stalls (2 s) and is given up;
    // then B's dialling gets through it again and a stream rejoins it.
    set_loss_on_path_1(&lab.lab, "100%");
    std::thread::sleep(Duration::from_secs(4));
    set_loss_on_path_1(&lab.lab, "0");
    let copied = report(&copy.wait_with_output().unwrap());
    lab.assert_same(&lab.root.join("big.bin"));
    let paths = copied["paths"].as_array().expect("a paths array");
    assert_eq!(paths.len(), 2, "{copied}");
    let path1 = &paths[1];
    assert_eq!(path1["local"], "10.47.1.1", "{copied}");
    assert_eq!(path1["state"], "active", "{copied}");
    let down = path1["failed_after_s"].as_f64().expect("it went down");
    let back = path1["rejoined_after_s"].as_f64().expect("it came back");
    assert!(back > down, "{copied}");
    assert!(path1["streams"].as_u64().unwrap() >= 2, "{copied}");
    let _ = std::fs::remove_dir_all(&lab.work);
}
