//! `tern probe`: the active measurements of tern-probe against a daemon,
//! printed for people or as one JSON object.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use tern_engine::client::Endpoint;
use tern_probe::{
    Capacity, CapacityOptions, DirectionCapacity, DirectionLoss, Loss, LossOptions, Route,
    RouteOptions, Rtt, RttOptions, Throughput,
};

use crate::cli::ProbeArgs;
use crate::console::{Console, Format, ProgressBars};
use crate::error::usage;
use crate::location::{self, Location};
use crate::options;
use crate::size::{count, human_bytes, human_rate};

/// `HOST`, `HOST:PORT` or `tern://HOST[:PORT]`.
fn endpoint_of(target: &str) -> Result<Endpoint, String> {
    if target.contains("://") {
        return match location::parse(target)? {
            Location::Remote { endpoint, path } if path.is_empty() => Ok(endpoint),
            _ => Err(format!(
                "'{target}': tern probe takes HOST[:PORT] or tern://HOST[:PORT], without a path"
            )),
        };
    }
    location::parse_endpoint(target).map_err(|e| format!("'{target}': {e}"))
}

/// The `--json` object.
#[derive(Debug, Serialize)]
struct ProbeReport {
    target: String,
    address: SocketAddr,
    rtt: Option<Rtt>,
    capacity: Option<Capacity>,
    loss: Option<Loss>,
    route: Option<Route>,
    throughput: Option<Throughput>,
    /// Measurement name → why it failed.
    errors: std::collections::BTreeMap<&'static str, String>,
}

/// Runs the measurements asked for; the first that failed decides the
/// exit code, after everything measured has been printed.
pub async fn run(args: ProbeArgs) -> Result<()> {
    let endpoint = endpoint_of(&args.target).map_err(usage)?;
    let throughput_opts = if args.throughput {
        Some(options::probe_options(&args.engine)?)
    } else {
        None
    };
    let address = tern_probe::resolve(&endpoint.host, endpoint.port).await?[0];
    let mut report = ProbeReport {
        target: endpoint.host_port(),
        address,
        rtt: None,
        capacity: None,
        loss: None,
        route: None,
        throughput: None,
        errors: Default::default(),
    };
    let mut first_error: Option<tern_probe::Error> = None;
    let mut failed = |name, e: tern_probe::Error, report: &mut ProbeReport| {
        report.errors.insert(name, e.to_string());
        first_error.get_or_insert(e);
    };
    match tern_probe::rtt(address, &RttOptions::default()).await {
        Ok(r) => report.rtt = Some(r),
        Err(e) => failed("rtt", e, &mut report),
    }
    // Without a TCP answer the path or the daemon is down: nothing more.
    if let Some(rtt) = &report.rtt {
        // Replies come a round trip and two trains' time after a train
        // left; what is late beyond that is as good as lost.
        let wait = 3.0 * rtt.stats.max_ms / 1e3 + 0.5;
        let opts = CapacityOptions {
            trains: args.trains,
            max_trains: args.trains.saturating_mul(2),
            min_usable: usize::from(args.trains).div_ceil(2),
            train_len: args.train_len,
            packet_size: args.packet_size,
            max_load_bps: args.probe_load,
            reply_timeout: Duration::from_secs_f64(wait.clamp(1.0, 3.0)),
            max_stray: args.max_stray,
        };
        match tern_probe::capacity(address, &opts).await {
            Ok(c) => {
                if let Some(e) = no_estimate(&c) {
                    failed("capacity", e, &mut report);
                }
                report.capacity = Some(c);
            }
            Err(e) => failed("capacity", e, &mut report),
        }
        if args.loss {
            let opts = LossOptions {
                count: args.echoes,
                rate_pps: args.echo_rate,
                packet_size: args.echo_size,
                reply_timeout: Duration::from_secs_f64(wait.clamp(1.0, 3.0)),
            };
            match tern_probe::loss(address, &opts).await {
                Ok(l) => report.loss = Some(l),
                Err(e) => failed("loss", e, &mut report),
            }
        }
        if args.route {
            match tern_probe::route(address, &RouteOptions::default()).await {
                Ok(r) => report.route = Some(r),
                Err(e) => failed("route", e, &mut report),
            }
        }
        if let Some(opts) = &throughput_opts {
            let time = Duration::from_secs_f64(args.time);
            match tern_probe::throughput(&endpoint, opts, time).await {
                Ok(t) => report.throughput = Some(t),
                Err(e) => failed("throughput", e, &mut report),
            }
        }
    }
    let format = if args.json {
        Format::Json
    } else {
        Format::Human
    };
    Console::new(format, ProgressBars::Never).result(&report, || human(&report));
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// The failure of a capacity measurement whose trains were answered but
/// left a direction without an estimate (every train lost, reordered,
/// disturbed or too fast for the clock): an I/O failure of the path.
fn no_estimate(c: &Capacity) -> Option<tern_probe::Error> {
    let unknown: Vec<&str> = [
        (&c.forward, "from this host to the daemon"),
        (&c.reverse, "from the daemon to this host"),
    ]
    .into_iter()
    .filter(|(d, _)| d.estimate_bps.is_none())
    .map(|(_, whom)| whom)
    .collect();
    if unknown.is_empty() {
        return None;
    }
    Some(tern_probe::Error::Io {
        what: "capacity",
        source: std::io::Error::other(format!("no usable train {}", unknown.join(", nor "))),
    })
}

fn direction_line(arrow: &str, d: &DirectionCapacity, whom: &str) -> String {
    let tried = d.trains_used
        + d.trains_lost
        + d.trains_reordered
        + d.trains_unresolved
        + d.trains_disturbed;
    match (d.estimate_bps, d.spread) {
        (Some(bps), Some(s)) => format!(
            "  capacity {arrow}  {} (quartiles {} to {}, {} of {tried} trains), {whom}",
            human_rate(bps),
            human_rate(s.p25),
            human_rate(s.p75),
            d.trains_used,
        ),
        _ => format!(
            "  capacity {arrow}  unknown: no usable train of {tried} ({} lost, {} reordered, {} disturbed, {} too fast for the clock), {whom}",
            d.trains_lost, d.trains_reordered, d.trains_disturbed, d.trains_unresolved
        ),
    }
}

fn loss_line(arrow: &str, d: &DirectionLoss, whom: &str) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "?".into(), |v| format!("{v:.3} ms"));
    format!(
        "  loss {arrow}      {:.3} % ({} of {}), jitter {} (p95 delay variation {}), {} reordered, {} duplicated, {whom}",
        d.loss_pct,
        d.lost,
        d.packets,
        ms(d.ipdv_ms),
        ms(d.pdv_p95_ms),
        d.reordered,
        d.duplicates,
    )
}

/// The report for people.
fn human(r: &ProbeReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "tern probe {} ({})", r.target, r.address);
    if let Some(rtt) = &r.rtt {
        let s = &rtt.stats;
        let _ = writeln!(
            out,
            "  rtt         {:.2} ms median (min {:.2}, max {:.2}, stddev {:.2}; {} TCP connects)",
            s.median_ms, s.min_ms, s.max_ms, s.stddev_ms, s.samples
        );
    }
    if let Some(c) = &r.capacity {
        let _ = writeln!(
            out,
            "{}",
            direction_line("→", &c.forward, "this host to the daemon")
        );
        let _ = writeln!(
            out,
            "{}",
            direction_line("←", &c.reverse, "the daemon to this host")
        );
        let _ = writeln!(
            out,
            "  probe load  {} each way in {:.1} s ({} average), trains of {} × {}-byte packets sent at {}, answered at {}",
            human_bytes(c.bytes_each_way),
            c.elapsed_s,
            human_rate(c.load_bps),
            c.train_len,
            c.packet_bytes,
            c.send_bps.map_or_else(|| "?".into(), human_rate),
            c.responder_send_bps.map_or_else(|| "?".into(), human_rate),
        );
        for (arrow, d) in [("→", &c.forward), ("←", &c.reverse)] {
            if let (Some(floor), Some(why)) = (d.lower_bound_bps, &d.lower_bound_reason) {
                let _ = writeln!(
                    out,
                    "  note        {arrow} is a lower bound, at least {}: {why}",
                    human_rate(floor)
                );
            }
        }
    }
    if let Some(l) = &r.loss {
        let _ = writeln!(
            out,
            "{}",
            loss_line("→", &l.forward, "this host to the daemon")
        );
        let _ = writeln!(
            out,
            "{}",
            loss_line("←", &l.reverse, "the daemon to this host")
        );
        let _ = writeln!(
            out,
            "  echoes      {} sent, {} replies, {}-byte packets at {}/s over {:.1} s; rtt {} median",
            l.sent,
            l.replies,
            l.packet_bytes,
            l.rate_pps,
            l.elapsed_s,
            l.rtt_median_ms
                .map_or_else(|| "?".into(), |m| format!("{m:.2} ms")),
        );
    }
    if let Some(route) = &r.route {
        let _ = writeln!(
            out,
            "  route       {} hops{}",
            route.hops.len(),
            if route.reached {
                ""
            } else {
                ", destination not reached"
            }
        );
        for h in &route.hops {
            let rtts: Vec<String> = h.rtt_ms.iter().map(|r| format!("{r:.2}")).collect();
            let _ = writeln!(
                out,
                "    {:>2}  {:<39} {}",
                h.ttl,
                h.addr.map_or_else(|| "*".to_string(), |a| a.to_string()),
                if rtts.is_empty() {
                    String::new()
                } else {
                    format!("{} ms", rtts.join(" "))
                },
            );
        }
    }
    if let Some(t) = &r.throughput {
        let limit = t
            .limit
            .and_then(|l| serde_json::to_value(l).ok())
            .and_then(|v| v.as_str().map(|l| format!(", limit: {l}")))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  throughput  {} over {:.1} s, {}, window {}, {} blocks re-sent{limit}",
            human_rate(t.bits_per_second),
            t.elapsed_s,
            count(t.streams as usize, "stream"),
            t.window,
            t.blocks_retransmitted
        );
    }
    for (name, e) in &r.errors {
        let _ = writeln!(out, "  {name:<11} failed: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_hosts_with_optional_ports_or_tern_urls() {
        let ep = |h: &str, p| Endpoint {
            host: h.into(),
            port: p,
        };
        assert_eq!(
            endpoint_of("dtn.example.org"),
            Ok(ep("dtn.example.org", 4747))
        );
        assert_eq!(endpoint_of("10.0.0.1:99"), Ok(ep("10.0.0.1", 99)));
        assert_eq!(endpoint_of("tern://[::1]:5"), Ok(ep("::1", 5)));
        assert!(endpoint_of("tern://host/some/path").is_err());
        assert!(endpoint_of("http://host").is_err());
        assert!(endpoint_of("host:notaport").is_err());
    }
}
