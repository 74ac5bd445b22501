//! The measurements of `tern-probe` as advisor plug-ins: the UDP
//! packet-train capacity probe and the short throughput test through the
//! engine. Each adapter only translates: options and the scheduler's grant
//! in, named [`Sample`]s out; method, accuracy and limits are the probe
//! crate's (`docs/PROBES.md`).

use std::time::Duration;

use tern_engine::client::{ClientOptions, Endpoint};
use tern_probe::{CapacityOptions, DirectionCapacity};

use crate::model::Sample;
use crate::probe::{Concurrency, Grant, Probe, ProbeError, ProbeFuture, ProbeTarget};

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

/// A forward estimate above this share of the rate at which this host got
/// its trains out says more about the sender than the path.
const LOWER_BOUND_SHARE: f64 = 0.8;

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
                return Err(ProbeError::Failed(format!(
                    "no usable train toward {} of {} sent ({})",
                    c.target,
                    c.trains_sent,
                    discarded(&c.forward)
                )));
            };
            let lower_bound = c.send_bps.is_some_and(|s| bps > LOWER_BOUND_SHARE * s);
            Ok(vec![
                Sample::capacity_bps(bps, (spread.p75 - spread.p25) / IQR_PER_SIGMA)
                    .with("method", "udp_packet_train")
                    .with("direction", "forward")
                    .with("spread_bps", spread)
                    .with("trains_used", c.forward.trains_used)
                    .with("trains_sent", c.trains_sent)
                    .with("reverse_bps", c.reverse.estimate_bps)
                    .with("send_bps", c.send_bps)
                    .with("lower_bound", lower_bound)
                    .with("packet_bytes", c.packet_bytes)
                    .with("load_bps", c.load_bps),
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
    fn name(&self) -> &'static str {
        "throughput_tern_perf"
    }

    fn class(&self) -> Concurrency {
        Concurrency::ExclusivePerPath
    }

    fn load_bps(&self, _target: &ProbeTarget, budget_bps: u64) -> u64 {
        budget_bps
    }

    fn run<'a>(&'a self, target: &'a ProbeTarget, grant: Grant) -> ProbeFuture<'a> {
        Box::pin(async move {
            let ep = Endpoint {
                host: target.addr()?.ip().to_string(),
                port: target.port,
            };
            let mut opts = self.options.clone();
            opts.rate_limit = Some(opts.rate_limit.unwrap_or(u64::MAX).min(grant.load_bps));
            let t = tern_probe::throughput(&ep, &opts, self.duration)
                .await
                .map_err(failed)?;
            if t.bits_per_second <= 0.0 {
                return Err(ProbeError::Failed(format!(
                    "nothing moved in {:.1} s",
                    t.elapsed_s
                )));
            }
            let mut s = Sample::throughput_bps(t.bits_per_second, t.streams, &t.window)
                .with("method", "tern_perf")
                .with("bytes", t.bytes)
                .with("duration_s", t.elapsed_s)
                .with("rate_limit_bps", grant.load_bps)
                .with("blocks_retransmitted", t.blocks_retransmitted);
            // Held to the grant, the test measured the budget, whatever
            // TCP_INFO says about the path.
            if t.bits_per_second >= PACED_SHARE * grant.load_bps as f64 {
                s = s.with("limit", "probe_budget");
            } else if let Some(limit) = t.limit {
                s = s.with("limit", limit);
            }
            if let Some(cc) = t.congestion_control {
                s = s.with("congestion_control", cc);
            }
            Ok(vec![s])
        })
    }
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
