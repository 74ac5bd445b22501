//! Topologies beyond one two-host link: routers along a path that answer
//! for an expiring TTL (ping, a UDP socket's error queue) from either side
//! and after their share of the round trip, a reroute while the lab runs,
//! a third host with a path to each of the others, and loss in one
//! direction only. Need root and /dev/net/tun; skip without.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;

use common::Lab;
use serde_json::Value;
use tern_testkit::skip::{have, is_root, skip};

fn can_run(test: &str) -> bool {
    let root = is_root();
    let tun = Path::new("/dev/net/tun").exists();
    let tools = ["ip", "ping", "python3", "timeout"].iter().all(|t| have(t));
    if !(root && tun && tools) {
        skip(
            test,
            &format!(
                "needs root, /dev/net/tun, ip, ping, python3 and timeout (root={root}, tun={tun}, tools={tools})"
            ),
        );
        return false;
    }
    true
}

/// `ping -c 1 -W 2 -t TTL TO` from `host`: its second line of output,
/// the reply or the error.
fn ping_ttl(lab: &Lab, host: &str, ttl: u8, to: &str) -> String {
    let out = lab.exec(
        host,
        &[
            "ping",
            "-n",
            "-c",
            "1",
            "-W",
            "2",
            "-t",
            &ttl.to_string(),
            to,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().nth(1).unwrap_or_default().to_string()
}

/// The smallest round-trip time of 3 pings from `host` to `to`, in ms.
fn min_rtt(lab: &Lab, host: &str, to: &str) -> f64 {
    let out = lab.exec(
        host,
        &["ping", "-n", "-q", "-c", "3", "-i", "0.1", "-W", "2", to],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("rtt"))
        .and_then(|l| l.split(" = ").nth(1)?.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no replies from {to} in {host}: {text}"))
}

/// Sends one UDP datagram with TTL argv[2] to argv[1] from a socket with
/// IP_RECVERR and prints what its error queue gets: errno, origin, ICMP
/// type and code, the offender's address and the ms it took.
const RECVERR: &str = r#"
import socket, select, struct, sys, time
IP_RECVERR, MSG_ERRQUEUE = 11, 0x2000
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_IP, IP_RECVERR, 1)
s.setsockopt(socket.SOL_IP, socket.IP_TTL, int(sys.argv[2]))
s.connect((sys.argv[1], 33434))
p = select.poll()
p.register(s, select.POLLERR)
t0 = time.monotonic()
s.send(b"netlab probe")
if not p.poll(3000):
    sys.exit("no error")
ms = (time.monotonic() - t0) * 1e3
_, anc, _, _ = s.recvmsg(512, 512, MSG_ERRQUEUE)
for level, kind, data in anc:
    if level == socket.SOL_IP and kind == IP_RECVERR:
        errno, origin, typ, code = struct.unpack_from("IBBB", data)
        print(errno, origin, typ, code, socket.inet_ntoa(data[20:24]), ms)
"#;

/// [`RECVERR`] run in `host`: (errno, origin, type, code, offender, ms).
fn udp_error(lab: &Lab, host: &str, to: &str, ttl: u8) -> (u32, u8, u8, u8, String, f64) {
    let out = lab.exec(
        host,
        &[
            "timeout",
            "10",
            "python3",
            "-c",
            RECVERR,
            to,
            &ttl.to_string(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let f: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(
        f.len(),
        6,
        "no error queue entry: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        f[0].parse().unwrap(),
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
        f[4].to_string(),
        f[5].parse().unwrap(),
    )
}

#[test]
fn routers_along_a_path_answer_an_expiring_ttl_from_their_side() {
    let test = "routers_along_a_path_answer_an_expiring_ttl_from_their_side";
    if !can_run(test) {
        return;
    }
    let lab = Lab::up("nlhop1", &["--path", "rtt=40,hops=10.48.0.1+10.48.0.2"]);
    for host in ["A", "B"] {
        let ns = format!("nlhop1-{}", host.to_lowercase());
        let rp = netlab::lab::read_sysctl(&ns, "net.ipv4.conf.all.rp_filter").unwrap();
        assert_eq!(rp, "0", "rp_filter in {ns}");
    }
    let t1 = ping_ttl(&lab, "A", 1, "10.47.0.2");
    assert!(
        t1.contains("From 10.48.0.1") && t1.contains("Time to live exceeded"),
        "ttl 1: {t1}"
    );
    let t2 = ping_ttl(&lab, "A", 2, "10.47.0.2");
    assert!(
        t2.contains("From 10.48.0.2") && t2.contains("Time to live exceeded"),
        "ttl 2: {t2}"
    );
    let t3 = ping_ttl(&lab, "A", 3, "10.47.0.2");
    assert!(t3.contains("bytes from 10.47.0.2"), "ttl 3: {t3}");
    // The echo went through two routers: B sees TTL 1 and its reply
    // arrives with 64 − 2.
    let full = ping_ttl(&lab, "A", 64, "10.47.0.2");
    assert!(full.contains("ttl=62"), "{full}");
    // From B the routers come in the other order.
    let back = ping_ttl(&lab, "B", 1, "10.47.0.1");
    assert!(
        back.contains("From 10.48.0.2") && back.contains("Time to live exceeded"),
        "from B, ttl 1: {back}"
    );

    // A UDP socket learns of it through its error queue, after the first
    // router's share of the round trip (40 ms / 3).
    let (errno, origin, typ, code, from, ms) = udp_error(&lab, "A", "10.47.0.2", 1);
    assert_eq!((errno, origin), (113, 2), "EHOSTUNREACH from ICMP");
    assert_eq!((typ, code), (11, 0), "time exceeded in transit");
    assert_eq!(from, "10.48.0.1");
    assert!((8.0..=25.0).contains(&ms), "hop 1 answered after {ms} ms");
    let (.., from, ms) = udp_error(&lab, "A", "10.47.0.2", 2);
    assert_eq!(from, "10.48.0.2");
    assert!((20.0..=40.0).contains(&ms), "hop 2 answered after {ms} ms");

    let st = lab.status();
    let path = &st["paths"][0];
    assert_eq!(path["hops"], serde_json::json!(["10.48.0.1", "10.48.0.2"]));
    assert!(path["fwd"]["expired"].as_u64().unwrap() >= 4, "{path}");
    assert_eq!(path["fwd"]["expired"], path["fwd"]["time_exceeded"]);
    assert!(
        path["rev"]["time_exceeded"].as_u64().unwrap() >= 1,
        "{path}"
    );
}

#[test]
fn a_path_is_rerouted_while_the_lab_runs() {
    let test = "a_path_is_rerouted_while_the_lab_runs";
    if !can_run(test) {
        return;
    }
    let lab = Lab::up("nlhop2", &["--rtt", "20", "--hops", "10.48.0.1+10.48.0.2"]);
    let out = lab.netlab(&["set", "--path", "0", "--hops", "10.48.7.1", "--rtt", "60"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t1 = ping_ttl(&lab, "A", 1, "10.47.0.2");
    assert!(
        t1.contains("From 10.48.7.1") && t1.contains("Time to live exceeded"),
        "after the reroute, ttl 1: {t1}"
    );
    let rtt = min_rtt(&lab, "A", "10.47.0.2");
    assert!((rtt - 60.0).abs() <= 3.0, "after the reroute: {rtt} ms");
    let st = lab.status();
    assert_eq!(st["paths"][0]["hops"], serde_json::json!(["10.48.7.1"]));
    assert_eq!(st["paths"][0]["rtt_ms"], 60.0);
    // No routers: the packet with TTL 1 reaches B.
    assert!(lab.netlab(&["set", "--hops", "none"]).status.success());
    let direct = ping_ttl(&lab, "A", 1, "10.47.0.2");
    assert!(direct.contains("bytes from 10.47.0.2"), "{direct}");
    assert_eq!(lab.status()["paths"][0]["hops"], serde_json::json!([]));
}

#[test]
fn three_hosts_reach_each_other_over_their_own_paths() {
    let test = "three_hosts_reach_each_other_over_their_own_paths";
    if !can_run(test) {
        return;
    }
    let lab = Lab::up(
        "nlhop3",
        &[
            "--hosts",
            "3",
            "--path",
            "between=A-B,rtt=10",
            "--path",
            "between=A-C,rtt=20",
            "--path",
            "between=B-C,rtt=30",
        ],
    );
    let pairs = [
        ("A", "10.47.0.2", 10.0),
        ("B", "10.47.0.1", 10.0),
        ("A", "10.47.1.2", 20.0),
        ("C", "10.47.1.1", 20.0),
        ("B", "10.47.2.2", 30.0),
        ("C", "10.47.2.1", 30.0),
    ];
    for (host, to, want) in pairs {
        let rtt = min_rtt(&lab, host, to);
        assert!(
            (rtt - want).abs() <= 2.0,
            "{host} to {to}: {rtt} ms, path has {want}"
        );
    }
    let out = lab.exec("C", &["ip", "-o", "-4", "addr", "show"]);
    let addrs = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        addrs.contains("10.47.1.2") && addrs.contains("10.47.2.2"),
        "{addrs}"
    );
    assert!(!addrs.contains("10.47.0."), "C is not on path 0: {addrs}");
    let st = lab.status();
    assert_eq!(st["hosts"]["C"], "nlhop3-c");
    assert_eq!(st["paths"][2]["between"], serde_json::json!(["B", "C"]));
    assert_eq!(st["paths"][2]["addrs"]["B"], "10.47.2.1");
    assert_eq!(st["paths"][2]["addrs"]["C"], "10.47.2.2");
    assert!(lab.netlab(&["down"]).status.success());
    for ns in ["nlhop3-a", "nlhop3-b", "nlhop3-c"] {
        assert!(!Path::new("/var/run/netns").join(ns).exists(), "{ns} left");
    }
}

/// In B: echoes every datagram to 10.47.0.2:5400 back; says `ready` once
/// bound, and the count once 3 s pass without one.
const ECHO: &str = "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('10.47.0.2', 5400))
s.settimeout(3)
print('ready', flush=True)
n = 0
try:
    while True:
        d, peer = s.recvfrom(2048)
        s.sendto(d, peer)
        n += 1
except socket.timeout:
    pass
print(n)
";

/// In A: sends argv[1] datagrams to 10.47.0.2:5400 in bursts of 50 every
/// 5 ms, taking the echoes in between, then waits for the last ones until
/// 1 s passes without one; prints how many came back.
const SEND: &str = "
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = 0
def drain():
    global n
    while True:
        try:
            s.recv(2048, socket.MSG_DONTWAIT)
            n += 1
        except BlockingIOError:
            return
for i in range(int(sys.argv[1])):
    s.sendto(i.to_bytes(4, 'big') * 16, ('10.47.0.2', 5400))
    if i % 50 == 49:
        time.sleep(0.005)
        drain()
s.settimeout(1)
try:
    while True:
        s.recv(2048)
        n += 1
except socket.timeout:
    pass
print(n)
";

fn counter(path: &Value, dir: &str, key: &str) -> u64 {
    path[dir][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {dir}.{key} in {path}"))
}

#[test]
fn loss_can_hit_one_direction_only() {
    let test = "loss_can_hit_one_direction_only";
    if !can_run(test) {
        return;
    }
    let lab = Lab::up(
        "nlhop4",
        &["--path", "rtt=2,rate=100,loss_fwd=5%,loss_rev=0"],
    );
    let st = lab.status();
    let before = &st["paths"][0];
    assert_eq!(
        (before["loss_fwd"].as_f64(), before["loss_rev"].as_f64()),
        (Some(0.05), Some(0.0))
    );
    let mut echo = lab.spawn("B", &["timeout", "30", "python3", "-c", ECHO]);
    let mut ready = String::new();
    BufReader::new(echo.stdout.as_mut().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    let n = 4000;
    let sent = lab.exec(
        "A",
        &["timeout", "30", "python3", "-c", SEND, &n.to_string()],
    );
    let echoed: u64 = String::from_utf8_lossy(&sent.stdout)
        .trim()
        .parse()
        .unwrap();
    let got: u64 = String::from_utf8_lossy(&echo.wait_with_output().unwrap().stdout)
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let st = lab.status();
    let after = &st["paths"][0];
    let delta = |dir, key| counter(after, dir, key) - counter(before, dir, key);
    let (fwd, fwd_lost) = (delta("fwd", "packets"), delta("fwd", "random_drops"));
    assert!(fwd >= n, "{fwd} packets forward for {n} datagrams");
    let share = fwd_lost as f64 / fwd as f64;
    assert!(
        (0.03..=0.07).contains(&share),
        "forward lost {share:.4} for 5 %"
    );
    assert_eq!(
        delta("rev", "random_drops"),
        0,
        "reverse lost some: {after}"
    );
    assert!(delta("rev", "packets") >= got, "{after}");
    // What B got, it echoed, and all of it came back.
    assert!(got as f64 >= n as f64 * 0.9, "B got {got} of {n}");
    assert_eq!(
        echoed, got,
        "echoes lost on the loss-free reverse direction"
    );
    // The old names are the forward and reverse counters.
    assert_eq!(after["a_to_b"], after["fwd"]);
    assert_eq!(after["b_to_a"], after["rev"]);
}
