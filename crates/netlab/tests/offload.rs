//! The emulator with TCP segmentation offloads (super-packets) and
//! without: bulk TCP arrives intact through loss and through super-packets
//! cut into runs, the rate limit charges every wire packet with its
//! headers, the endpoints still see the configured MTU, and the per-packet
//! fallback (`NETLAB_OFFLOAD=0`) still forwards. Need root; skip without.

mod common;

use std::path::Path;

use common::Lab;
use serde_json::Value;
use tern_testkit::skip::{have, is_root, skip};

fn can_run(test: &str) -> bool {
    let root = is_root();
    let tun = Path::new("/dev/net/tun").exists();
    let tools = ["ip", "ping", "iperf3", "python3", "timeout"]
        .iter()
        .all(|t| have(t));
    if !(root && tun && tools) {
        skip(
            test,
            &format!(
                "needs root, /dev/net/tun, ip, ping, iperf3, python3 and timeout (root={root}, tun={tun}, tools={tools})"
            ),
        );
        return false;
    }
    true
}

/// Receives one TCP connection on 10.47.0.2:5302, prints byte count and SHA-256.
const SINK: &str = "
import socket, hashlib
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('10.47.0.2', 5302))
s.listen(1)
c, _ = s.accept()
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    h.update(d)
    n += len(d)
print(n, h.hexdigest())
";

/// Sends argv[1] MiB of seeded random bytes to 10.47.0.2:5302, prints byte count and SHA-256.
const SOURCE: &str = "
import socket, hashlib, random, sys
data = random.Random(14).randbytes(int(sys.argv[1]) << 20)
c = socket.create_connection(('10.47.0.2', 5302))
c.sendall(data)
c.close()
print(len(data), hashlib.sha256(data).hexdigest())
";

/// Sends `mib` MiB from A to B over path 0 through Python sockets; returns
/// what the sender and the receiver report (bytes and SHA-256 each).
fn transfer(lab: &Lab, mib: u32) -> (String, String) {
    let sink = lab.spawn("B", &["timeout", "120", "python3", "-c", SINK]);
    lab.wait_until_listening("B", 5302);
    let sent = lab.exec(
        "A",
        &["timeout", "120", "python3", "-c", SOURCE, &mib.to_string()],
    );
    assert!(
        sent.status.success(),
        "sender: {}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let got = sink.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    (text(&sent.stdout), text(&got.stdout))
}

/// A→B counters of path 0, and whether the path runs with offloads.
fn a_to_b(lab: &Lab) -> (Value, bool) {
    let st = lab.status();
    let p = &st["paths"][0];
    (p["a_to_b"].clone(), p["offload"].as_bool().unwrap())
}

fn counter(c: &Value, key: &str) -> u64 {
    c[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {key} in {c}"))
}

/// Every counted packet is a wire packet: no larger than the MTU.
fn assert_wire_packets(c: &Value, mtu: u64) {
    let (packets, bytes) = (counter(c, "packets"), counter(c, "bytes"));
    assert!(packets > 0);
    assert!(
        bytes <= packets * mtu,
        "{bytes} B in {packets} packets: more than the MTU {mtu} each, so super-packets were counted as packets"
    );
}

#[test]
fn bulk_tcp_arrives_intact_through_loss_and_cut_super_packets() {
    let test = "bulk_tcp_arrives_intact_through_loss_and_cut_super_packets";
    if !can_run(test) {
        return;
    }
    // At 300 Mbit/s a 64 KiB super-packet spans 1.7 ms on the wire, so
    // every one is cut into runs; 0.5 % loss cuts more.
    let lab = Lab::up("nloff1", &["--rtt", "4", "--rate", "300", "--loss", "0.5%"]);
    let (sent, got) = transfer(&lab, 32);
    assert!(sent.starts_with(&format!("{} ", 32 << 20)), "sent {sent}");
    assert_eq!(got, sent, "what B received differs from what A sent");
    let (c, offload) = a_to_b(&lab);
    assert!(offload, "offloads are off on this kernel: {c}");
    assert!(counter(&c, "super_packets") > 0, "no super-packets: {c}");
    assert!(counter(&c, "random_drops") > 0, "no loss: {c}");
    assert_wire_packets(&c, 1500);
    // Every drop is one wire packet: they add up.
    assert_eq!(
        counter(&c, "delivered") + counter(&c, "random_drops") + counter(&c, "queue_drops"),
        counter(&c, "packets")
    );
}

#[test]
fn the_rate_limit_charges_every_wire_packet_and_the_mtu_holds() {
    let test = "the_rate_limit_charges_every_wire_packet_and_the_mtu_holds";
    if !can_run(test) {
        return;
    }
    let lab = Lab::up(
        "nloff2",
        &[
            "--rtt",
            "10",
            "--rate",
            "1000",
            "--tcp-rmem",
            "4096 131072 33554432",
            "--tcp-wmem",
            "4096 16384 33554432",
        ],
    );
    // The endpoints see MTU 1500: 1472 B of ICMP payload pass with DF set,
    // 1473 do not (the sender refuses them).
    let ping = |size: &str| {
        lab.exec(
            "A",
            &[
                "ping",
                "-n",
                "-q",
                "-c",
                "2",
                "-i",
                "0.2",
                "-W",
                "2",
                "-M",
                "do",
                "-s",
                size,
                "10.47.0.2",
            ],
        )
        .status
        .success()
    };
    assert!(ping("1472"), "a 1500 B packet with DF set did not pass");
    assert!(
        !ping("1473"),
        "a 1501 B packet with DF set passed an MTU 1500 path"
    );

    let before = a_to_b(&lab).0;
    let mut server = lab.spawn("B", &["iperf3", "-s", "-1", "-p", "5301"]);
    lab.wait_until_listening("B", 5301);
    let out = lab.exec(
        "A",
        &[
            "iperf3",
            "-c",
            "10.47.0.2",
            "-p",
            "5301",
            "-t",
            "4",
            "-P",
            "2",
            "-J",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("iperf3: {}", String::from_utf8_lossy(&out.stdout)));
    let end = &v["end"]["sum_received"];
    let (bits, secs) = (
        end["bits_per_second"].as_f64().unwrap(),
        end["seconds"].as_f64().unwrap(),
    );
    let (after, offload) = a_to_b(&lab);
    assert!(offload);
    assert!(counter(&after, "super_packets") > counter(&before, "super_packets"));
    assert_wire_packets(&after, 1500);
    // Wire bytes the link delivered for the test, at most what 1000 Mbit/s
    // carries in the test's time (plus the queue it may have left full and
    // 2 % for timing): were the headers of a super-packet's segments not
    // charged, TCP would get the headers' share (3.5 %) on top.
    let wire = (counter(&after, "delivered_bytes") - counter(&before, "delivered_bytes")) as f64;
    let queue = lab.status()["paths"][0]["queue_bytes"].as_f64().unwrap();
    let allowed = 1e9 / 8.0 * secs * 1.02 + queue;
    assert!(
        wire <= allowed,
        "{wire} B on the wire in {secs} s, 1000 Mbit/s allows {allowed}"
    );
    // Goodput is bounded by the payload share of full-size wire packets.
    let ceiling = 1e9 * 1448.0 / 1500.0 * 1.02;
    assert!(
        bits <= ceiling,
        "goodput {bits} b/s over the ceiling {ceiling}"
    );
    // And per wire packet the counters hold headers: bytes minus the TCP
    // payload iperf3 moved leave at least 52 B per delivered data packet.
    let payload = end["bytes"].as_f64().unwrap();
    let delivered = (counter(&after, "delivered") - counter(&before, "delivered")) as f64;
    assert!(
        wire - payload >= 40.0 * delivered * 0.9,
        "{wire} wire bytes for {payload} B of payload in {delivered} packets"
    );
}

#[test]
fn without_offloads_the_lab_forwards_packet_by_packet() {
    let test = "without_offloads_the_lab_forwards_packet_by_packet";
    if !can_run(test) {
        return;
    }
    let lab = Lab::up_with_env(
        "nloff3",
        &["--rtt", "2", "--rate", "500", "--loss", "0.1%"],
        &[("NETLAB_OFFLOAD", "0")],
    );
    let (sent, got) = transfer(&lab, 8);
    assert_eq!(got, sent, "what B received differs from what A sent");
    let (c, offload) = a_to_b(&lab);
    assert!(!offload, "NETLAB_OFFLOAD=0 left offloads on");
    assert_eq!(counter(&c, "super_packets"), 0);
    assert_wire_packets(&c, 1500);
    let log = std::fs::read_to_string("/run/netlab/nloff3/emulator.log").unwrap();
    assert!(log.contains("packet by packet"), "emulator log: {log}");
}
