//! The policy replayed on `TCP_INFO` traces recorded from real transfers
//! over netlab paths (`tests/traces/*.jsonl`, one sample per stream every
//! 200 ms, written by `TERN_TCP_TRACE=FILE tern …`; docs/DRS.md says how
//! each was made). Replays are open-loop: the trace shows what the socket
//! did, and the test checks what the policy decides on that evidence.

use std::time::Duration;

use serde::Deserialize;
use tern_drs::TcpInfo;
use tern_drs::estimate::{Limit, StreamEstimator};
use tern_drs::policy::{self, BufferBudget, SendDecision, SendTuner};

#[derive(Deserialize)]
struct Line {
    stream: usize,
    t_ms: u64,
    info: TcpInfo,
    sndbuf: u64,
    rcvbuf: u64,
}

fn load(name: &str) -> Vec<Line> {
    let path = format!("{}/tests/traces/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Line> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Line| l.stream == 0)
        .collect();
    assert!(lines.len() > 20, "{path}: too short");
    lines
}

const MIB: u64 = 1 << 20;

/// Replays a sending stream; returns each decision with its time.
fn replay_send(
    lines: &[Line],
    budget: &BufferBudget,
    owned: impl Fn(&Line) -> bool,
) -> Vec<(u64, SendDecision)> {
    let mut est = StreamEstimator::default();
    let mut tuner = SendTuner::default();
    let mut out = Vec::new();
    for l in lines {
        let at = Duration::from_millis(l.t_ms);
        est.add(at, l.info);
        let Some(iv) = est.last_interval() else {
            continue;
        };
        let lowat = policy::notsent_lowat(Some(iv.acked_rate));
        if let Some(d) = tuner.decide(at, &iv, l.sndbuf, owned(l), lowat, budget) {
            out.push((l.t_ms, d));
        }
    }
    out
}

#[test]
fn a_kernel_tuned_stream_at_the_tcp_wmem_cap_is_diagnosed_and_grown() {
    // 1 Gbit/s × 100 ms, MTU 9000, tcp_wmem[2] = 4 MiB, --window kernel:
    // the buffer stops at 4 MiB and the stream crawls at ~180 Mbit/s.
    let lines = load("sndbuf_limited_1g_100ms_kernel");
    let mut est = StreamEstimator::default();
    for l in &lines {
        est.add(Duration::from_millis(l.t_ms), l.info);
    }
    assert_eq!(est.estimate().limit, Limit::SendBuffer);
    assert!(lines.iter().all(|l| l.sndbuf <= 4 * MIB));

    let root = BufferBudget {
        per_stream: 128 * MIB,
        privileged: true,
        wmem_max: 4 * MIB,
    };
    let grown = replay_send(&lines, &root, |_| false);
    let first = grown.first().expect("the policy grows the buffer");
    assert!(first.0 < 2000, "grows within two seconds: {grown:?}");
    for (_, d) in &grown {
        match *d {
            SendDecision::Grow(n) => assert!(n > 4 * MIB && n <= root.per_stream),
            SendDecision::Shrink(_) => panic!("a kernel-tuned buffer is never shrunk"),
        }
    }

    // Without privilege the 4 MiB wmem_max is the ceiling: nothing to do
    // (the stream controller adds streams instead).
    let user = BufferBudget {
        privileged: false,
        ..root
    };
    assert!(replay_send(&lines, &user, |_| false).is_empty());
}

#[test]
fn after_a_reroute_to_a_shorter_path_the_buffer_shrinks() {
    // tern's default over 1 Gbit/s × 100 ms; at ~3.6 s the path's RTT
    // drops to 30 ms (netlab set). The recorded run had grown the buffer
    // to 25 MiB by 1.4 s.
    let lines = load("rtt_drop_100_to_30ms_auto");
    let drop_at = lines
        .windows(2)
        .find(|w| w[1].info.rtt_us * 2 < w[0].info.rtt_us)
        .map(|w| w[1].t_ms)
        .expect("the trace has the RTT drop");
    let budget = BufferBudget {
        per_stream: 128 * MIB,
        privileged: true,
        wmem_max: 4 * MIB,
    };
    let decisions = replay_send(&lines, &budget, |l| l.sndbuf > 4 * MIB);
    let shrinks: Vec<_> = decisions
        .iter()
        .filter_map(|(t, d)| match d {
            SendDecision::Shrink(n) => Some((*t, *n)),
            SendDecision::Grow(_) => None,
        })
        .collect();
    let (t, n) = *shrinks.first().expect("the policy shrinks after the drop");
    assert!(
        t > drop_at,
        "no shrink before the drop at {drop_at} ms: {shrinks:?}"
    );
    let before = lines.iter().find(|l| l.t_ms == t).unwrap().sndbuf;
    assert!(n < before * 3 / 4, "{n} vs {before}");
    // What it keeps still holds the new path's flight: 1 Gbit/s × 30 ms.
    assert!(n > 125_000_000 / 1000 * 30);
}

#[test]
fn a_receiver_at_the_tcp_rmem_cap_is_taken_over_within_its_window_scale() {
    // The receiving daemon of a 1 Gbit/s × 100 ms path whose tcp_rmem[2]
    // is 3 MiB, tern's default: autotuning stops at 3 MiB, tern goes on.
    let lines = load("receiver_rmem_3mib_auto");
    let rmem_max = 3 * MIB;
    let first = lines
        .iter()
        .find_map(|l| {
            let max_window = 65535u64 << l.info.rcv_wscale;
            policy::next_rcvbuf(
                u64::from(l.info.rcv_space),
                l.rcvbuf,
                l.rcvbuf > rmem_max,
                rmem_max,
                64 * MIB,
                max_window,
            )
            .map(|n| (l, n, max_window))
        })
        .expect("the policy takes the buffer over");
    let (line, next, max_window) = first;
    assert_eq!(line.rcvbuf, rmem_max, "taken over at the kernel's cap");
    assert!(next > rmem_max && next <= 2 * max_window);
    // The recorded run never went past what the window scale allows.
    let top = lines.iter().map(|l| l.rcvbuf).max().unwrap();
    assert!(top <= 2 * (65535u64 << line.info.rcv_wscale), "{top}");
}
