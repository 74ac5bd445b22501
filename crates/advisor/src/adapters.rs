//! The measurements of `tern-probe` as advisor plug-ins: the UDP
//! packet-train capacity probe, the short throughput test through the
//! engine, and the window × streams sweep of such tests. Each adapter only
//! translates: options and the scheduler's grant in, named [`Sample`]s
//! out; method, accuracy and limits are the probe crate's
//! (`docs/PROBES.md`).

use std::time::Duration;

use tern_drs::WindowMode;
use tern_engine::client::{ClientOptions, Endpoint};
use tern_probe::{CapacityOptions, DirectionCapacity, LossOptions, RouteOptions, Throughput};

use crate::model::{Kind, Sample};
use crate::probe::{
    Concurrency, Grant, Probe, ProbeError, ProbeFuture, ProbeTarget, TcpConnectRtt,
};

fn failed(e: tern_probe::Error) -> ProbeError {
    match e {
        tern_probe::Error::Resolve { .. }
        | tern_probe::Error::Connect { .. }
        | tern_probe::Error::NoResponder { .. } => ProbeError::Unreachable(e.to_string()),
        tern_probe::Error::Engine(ref inner) if inner.kind() == tern_engine::ErrorKind::Connect => {
            ProbeError::Unreachable(e.to_string())
        }
        _ => ProbeError::Failed(e.to_string()),
    }
}

/// Interquartile range over this is a normal distribution's σ.
const IQR_PER_SIGMA: f64 = 1.349;

/// Bottleneck capacity from UDP packet trains to the daemon's responder
/// (same port number, UDP). Light: a train is a few milliseconds at line
/// rate and the average stays within its grant, so it runs beside the RTT
/// probe; a throughput test on the same path still keeps it away.
#[derive(Debug, Clone, Default)]
pub struct UdpTrainCapacity {
    /// The probe's options; `max_load_bps` is the most it asks for each
    /// way, the grant may lower it.
    pub options: CapacityOptions,
}

impl Probe for UdpTrainCapacity {
    fn name(&self) -> &'static str {
        "capacity_udp_train"
    }

    fn class(&self) -> Concurrency {
        Concurrency::Light
    }

    /// Both directions count: the trains out and the replies back.
    fn load_bps(&self, _target: &ProbeTarget, budget_bps: u64) -> u64 {
        self.options.max_load_bps.saturating_mul(2).min(budget_bps)
    }

    fn can_run(&self, target: &ProbeTarget) -> Result<(), String> {
        target.addr().map(|_| ()).map_err(|e| e.to_string())
    }

    fn run<'a>(&'a self, target: &'a ProbeTarget, grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            let opts = CapacityOptions {
                max_load_bps: (grant.load_bps / 2).clamp(1, self.options.max_load_bps),
                ..self.options.clone()
            };
            let c = tern_probe::capacity(target.addr()?, &opts)
                .await
                .map_err(failed)?;
            let (Some(bps), Some(spread)) = (c.forward.estimate_bps, c.forward.spread) else {
                let floor = c.forward.lower_bound_bps.map_or(String::new(), |f| {
                    format!("; at least {:.0} Mbit/s", f / 1e6)
                });
                return Err(ProbeError::Failed(format!(
                    "no usable train toward {} of {} sent ({}){floor}",
                    c.target,
                    c.trains_sent,
                    discarded(&c.forward)
                )));
            };
            let lower_bound = c.forward.lower_bound_bps.is_some();
            Ok(vec![
                Sample::capacity_bps(bps, (spread.p75 - spread.p25) / IQR_PER_SIGMA)
                    .with("method", "udp_packet_train")
                    .with("direction", "forward")
                    .with("spread_bps", spread)
                    .with("trains_used", c.forward.trains_used)
                    .with("trains_sent", c.trains_sent)
                    .with("reverse_bps", c.reverse.estimate_bps)
                    .with("send_bps", c.send_bps)
                    .with("responder_send_bps", c.responder_send_bps)
                    .with("reverse_lower_bound_bps", c.reverse.lower_bound_bps)
                    .with("lower_bound", lower_bound)
                    .with("lower_bound_reason", &c.forward.lower_bound_reason)
                    .with("packet_bytes", c.packet_bytes)
                    .with("load_bps", c.load_bps),
            ])
        })
    }
}

/// Loss, delay variation and reordering each way, from a paced stream of
/// UDP echoes to the daemon's responder. Light: 1000 small echoes over
/// 5 s by default, some 110 kbit/s each way.
#[derive(Debug, Clone, Default)]
pub struct UdpEchoLoss {
    /// The probe's options.
    pub options: LossOptions,
}

impl Probe for UdpEchoLoss {
    fn name(&self) -> &'static str {
        "loss_udp_echo"
    }

    fn class(&self) -> Concurrency {
        Concurrency::Light
    }

    /// Both directions count.
    fn load_bps(&self, target: &ProbeTarget, _budget_bps: u64) -> u64 {
        let headers = if target.addrs.first().is_some_and(|a| a.is_ipv6()) {
            48
        } else {
            28
        };
        self.options.load_bps(headers).saturating_mul(2)
    }

    fn can_run(&self, target: &ProbeTarget) -> Result<(), String> {
        target.addr().map(|_| ()).map_err(|e| e.to_string())
    }

    fn run<'a>(&'a self, target: &'a ProbeTarget, _grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            let l = tern_probe::loss(target.addr()?, &self.options)
                .await
                .map_err(failed)?;
            // A path that went away during the run leaves its last echoes
            // unanswered; the losses before it would read as a healthy 0 %.
            if u64::from(l.unresolved) * 10 > u64::from(l.sent) {
                return Err(ProbeError::Failed(format!(
                    "{} of {} echoes unanswered at the end of the run: the path went away during it",
                    l.unresolved, l.sent
                )));
            }
            let direction = |kind, d: &tern_probe::DirectionLoss, way: &str| {
                Sample::new(kind, d.loss_pct)
                    .with("direction", way)
                    .with("packets", d.packets)
                    .with("lost", d.lost)
                    .with("reordered", d.reordered)
                    .with("duplicates", d.duplicates)
                    .with("pdv_p95_ms", d.pdv_p95_ms)
                    .with("unresolved", l.unresolved)
                    .with("packet_bytes", l.packet_bytes)
                    .with("method", "udp_echo")
            };
            let mut samples = vec![
                direction(Kind::Loss, &l.forward, "forward"),
                direction(Kind::LossReverse, &l.reverse, "reverse"),
            ];
            for (kind, d) in [
                (Kind::Jitter, &l.forward),
                (Kind::JitterReverse, &l.reverse),
            ] {
                if let Some(ms) = d.ipdv_ms {
                    samples.push(
                        Sample::new(kind, ms)
                            .with("pdv_p95_ms", d.pdv_p95_ms)
                            .with("method", "udp_echo"),
                    );
                }
            }
            Ok(samples)
        })
    }
}

/// The route to the target: the routers on the way and their round-trip
/// times, by UDP with growing TTL (unprivileged, like tracepath). Light: a
/// few dozen small datagrams.
#[derive(Debug, Clone, Default)]
pub struct UdpTraceRoute {
    /// The probe's options.
    pub options: RouteOptions,
}

/// What a traceroute costs at most, bits/s: a few 68-byte datagrams per
/// hop within a second.
const ROUTE_LOAD_BPS: u64 = 64_000;

impl Probe for UdpTraceRoute {
    fn name(&self) -> &'static str {
        "route_udp"
    }

    fn class(&self) -> Concurrency {
        Concurrency::Light
    }

    fn load_bps(&self, _target: &ProbeTarget, budget_bps: u64) -> u64 {
        ROUTE_LOAD_BPS.min(budget_bps)
    }

    fn can_run(&self, target: &ProbeTarget) -> Result<(), String> {
        target.addr().map(|_| ()).map_err(|e| e.to_string())
    }

    fn run<'a>(&'a self, target: &'a ProbeTarget, _grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            let r = tern_probe::route(target.addr()?, &self.options)
                .await
                .map_err(failed)?;
            if r.hops.is_empty() {
                return Err(ProbeError::Failed("no hop answered".into()));
            }
            let hops: Vec<serde_json::Value> = r
                .hops
                .iter()
                .map(|h| {
                    serde_json::json!({
                        "ttl": h.ttl,
                        "addr": h.addr.map(|a| a.to_string()),
                        "rtt_ms": h.rtt_ms,
                        "reached": h.reached,
                    })
                })
                .collect();
            let signature = r.signature();
            Ok(vec![
                Sample::new(Kind::Route, signature.len().max(1) as f64)
                    .with("hops", hops)
                    .with("signature", signature)
                    .with("reached", r.reached)
                    .with("method", r.method),
            ])
        })
    }
}

fn discarded(d: &DirectionCapacity) -> String {
    format!(
        "{} lost, {} reordered, {} disturbed, {} unresolved",
        d.trains_lost, d.trains_reordered, d.trains_disturbed, d.trains_unresolved
    )
}

/// A test reaching this share of its grant was held back by the pacing.
const PACED_SHARE: f64 = 0.9;

/// What the engine's tests share as probes: they fill the path (exclusive
/// on it), so each asks for the whole budget and paces itself to its grant.
macro_rules! engine_test_probe {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn class(&self) -> Concurrency {
            Concurrency::ExclusivePerPath
        }

        fn load_bps(&self, _target: &ProbeTarget, budget_bps: u64) -> u64 {
            budget_bps
        }
    };
}

/// A short `tern perf` to the target's daemon. Exclusive on its path; it
/// asks for the whole budget and paces itself to its grant (the engine's
/// rate limit), so the budget holds: on a path faster than the budget the
/// result is the budget, recorded with the limit the engine saw, and the
/// advice takes capacity from the packet trains instead.
#[derive(Clone)]
pub struct EngineThroughput {
    /// How to connect (trust, protection, streams, window).
    pub options: ClientOptions,
    /// How long each test runs.
    pub duration: Duration,
}

impl Probe for EngineThroughput {
    engine_test_probe!("throughput_tern_perf");

    fn run<'a>(&'a self, target: &'a ProbeTarget, grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            let ep = endpoint(target)?;
            let t = tern_probe::throughput(&ep, &paced(&self.options, grant), self.duration)
                .await
                .map_err(failed)?;
            if t.bits_per_second <= 0.0 {
                return Err(ProbeError::Failed(format!(
                    "nothing moved in {:.1} s",
                    t.elapsed_s
                )));
            }
            Ok(vec![throughput_sample(&t, "tern_perf", grant)])
        })
    }
}

/// The daemon at a target, as the engine dials it.
fn endpoint(target: &ProbeTarget) -> Result<Endpoint, ProbeError> {
    Ok(Endpoint {
        host: target.addr()?.ip().to_string(),
        port: target.port,
    })
}

/// `options` held to the grant: the engine paces its sends to it.
fn paced(options: &ClientOptions, grant: Grant) -> ClientOptions {
    let mut opts = options.clone();
    opts.rate_limit = Some(opts.rate_limit.unwrap_or(u64::MAX).min(grant.load_bps));
    opts
}

/// A throughput test's sample, with what limited it.
fn throughput_sample(t: &Throughput, method: &str, grant: Grant) -> Sample {
    let mut s = Sample::throughput_bps(t.bits_per_second, t.streams, &t.window)
        .with("method", method)
        .with("bytes", t.bytes)
        .with("duration_s", t.elapsed_s)
        .with("rate_limit_bps", grant.load_bps)
        .with("blocks_retransmitted", t.blocks_retransmitted);
    // Held to the grant, the test measured the budget, whatever TCP_INFO
    // says about the path.
    if t.bits_per_second >= PACED_SHARE * grant.load_bps as f64 {
        s = s.with("limit", "probe_budget");
    } else if let Some(limit) = t.limit {
        s = s.with("limit", limit);
    }
    if let Some(cc) = &t.congestion_control {
        s = s.with("congestion_control", cc);
    }
    s
}

impl std::fmt::Debug for EngineThroughput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineThroughput")
            .field("streams", &self.options.streams)
            .field("window", &self.options.tuning.window_name())
            .field("duration", &self.duration)
            .finish_non_exhaustive()
    }
}

/// The stream counts a sweep tries unless told otherwise: the powers of
/// two up to the advice's own cap of 8.
pub const SWEEP_STREAMS: [u16; 4] = [1, 2, 4, 8];

/// The smallest window a sweep locks: below it a fixed window holds less
/// than the kernel's own starting buffers and measures nothing useful.
const SWEEP_WINDOW_MIN: u64 = 64 << 10;

/// The largest window `tern --window` takes.
const SWEEP_WINDOW_MAX: u64 = 1 << 30;

/// A window × streams sweep of short `tern perf` runs, IEPM-BW's way of
/// finding the hand-tuned best for a path: every stream count in
/// `streams` with two windows, `auto` (tern sizes the buffers) and one
/// locked at the bandwidth-delay product at the granted rate (RTT from
/// TCP connects before the sweep, doubled as `--window` counts buffer
/// bookkeeping, 64 KiB to 1 GiB): the window with which even one stream
/// can reach the grant. Exclusive on its path and paced to its grant,
/// like [`EngineThroughput`]; each successful cell is one throughput
/// sample whose `sweep` detail names the cell and marks the best.
#[derive(Clone)]
pub struct EngineSweep {
    /// How to connect (trust, protection); streams and window are the
    /// sweep's.
    pub options: ClientOptions,
    /// How long each cell runs.
    pub cell: Duration,
    /// Stream counts to try, each 1 or more.
    pub streams: Vec<u16>,
}

impl EngineSweep {
    /// The sweep with the default stream counts.
    pub fn new(options: ClientOptions, cell: Duration) -> EngineSweep {
        EngineSweep {
            options,
            cell,
            streams: SWEEP_STREAMS.to_vec(),
        }
    }

    /// The windows to try on a path of `rtt_ms` at `grant`.
    fn windows(rtt_ms: f64, grant: Grant) -> [WindowMode; 2] {
        let bdp = rtt_ms / 1e3 * grant.load_bps as f64 / 8.0;
        let window = ((2.0 * bdp).ceil() as u64)
            .div_ceil(4096)
            .saturating_mul(4096)
            .clamp(SWEEP_WINDOW_MIN, SWEEP_WINDOW_MAX);
        [WindowMode::Auto, WindowMode::Fixed(window)]
    }
}

impl Probe for EngineSweep {
    engine_test_probe!("sweep_tern_perf");

    fn run<'a>(&'a self, target: &'a ProbeTarget, grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            let ep = endpoint(target)?;
            let rtt_ms = TcpConnectRtt::default()
                .run(target, grant)
                .await?
                .first()
                .map(|s| s.value)
                .ok_or_else(|| ProbeError::Failed("no RTT before the sweep".into()))?;
            let windows = EngineSweep::windows(rtt_ms, grant);
            let sweep = tern_probe::sweep(
                &ep,
                &paced(&self.options, grant),
                &windows,
                &self.streams,
                self.cell,
            )
            .await
            .map_err(failed)?;
            let Some(best) = sweep.best else {
                let why: Vec<String> = sweep
                    .cells
                    .iter()
                    .filter_map(|c| c.result.as_ref().err())
                    .cloned()
                    .collect();
                return Err(ProbeError::Failed(format!(
                    "every cell of the sweep failed: {}",
                    why.join("; ")
                )));
            };
            let cells = sweep.cells.len();
            Ok(sweep
                .cells
                .iter()
                .enumerate()
                .filter_map(|(k, c)| {
                    let t = c.result.as_ref().ok()?;
                    let s = throughput_sample(t, "tern_perf_sweep", grant).with(
                        "sweep",
                        serde_json::json!({
                            "cell": k,
                            "cells": cells,
                            "streams": c.streams,
                            "window": c.window,
                            "best": k == best,
                            "rtt_ms": rtt_ms,
                        }),
                    );
                    // The window asked for, not what auto sizing ended at:
                    // a cell is named by its settings.
                    Some(s.with("window", &c.window).with("streams", c.streams))
                })
                .collect())
        })
    }
}

impl std::fmt::Debug for EngineSweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSweep")
            .field("streams", &self.streams)
            .field("cell", &self.cell)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_locks_one_window_at_the_product_at_its_grant() {
        let grant = Grant {
            load_bps: 100_000_000,
        };
        // 50 ms x 100 Mbit/s = 625 000 bytes, doubled for --window.
        assert_eq!(
            EngineSweep::windows(50.0, grant),
            [WindowMode::Auto, WindowMode::Fixed(1_253_376)]
        );
        // Loopback: the floor.
        assert_eq!(
            EngineSweep::windows(0.05, grant)[1],
            WindowMode::Fixed(SWEEP_WINDOW_MIN)
        );
        assert_eq!(
            EngineSweep::windows(1e6, grant)[1],
            WindowMode::Fixed(SWEEP_WINDOW_MAX)
        );
    }
}
