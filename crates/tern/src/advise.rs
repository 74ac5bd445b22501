//! The advisor in the binary: running it (`tern serve --http`, `tern
//! advisor`), asking it (`tern advise`), and the advice `tern cp` and
//! `tern perf --advisor` start from and report back to.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tern_advisor::{
    Advice, Advisor, AdvisorClient, EngineSweep, EngineThroughput, Probe, TransferReport,
};
use tern_engine::client::Endpoint;
use tern_engine::transfer::TransferStats;
use tokio::sync::watch;

use crate::cli::{AdviseArgs, AdvisorArgs, AdvisorCmdArgs, Streams, TransferArgs, WindowArg};
use crate::console::Console;
use crate::options::Advised;
use crate::report::AdvisorUse;
use crate::size::{human_bytes, human_rate};

/// Becomes true once on shutdown; every part of a server watches it.
pub type Stop = watch::Receiver<bool>;

/// A future that completes when `stop` turns true.
pub async fn stopped(mut stop: Stop) {
    let _ = stop.wait_for(|s| *s).await;
}

/// `--http`: `ADDR:PORT`, or a bare `PORT` on loopback.
pub fn http_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("--http wants ADDR:PORT or PORT (e.g. 4748, 127.0.0.1:4748, [::1]:4748), not '{s}'")
    })
}

/// The default probes, and the throughput test and the sweep when asked:
/// `tern perf` runs with the defaults of `tern perf` (trust on first use,
/// in the usual known_hosts).
fn probes(args: &AdvisorArgs) -> Result<Vec<Arc<dyn Probe>>> {
    let mut probes = tern_advisor::service::default_probes();
    if args.probe_throughput <= 0.0 && args.probe_sweep <= 0.0 {
        return Ok(probes);
    }
    let options = crate::options::default_measure_options()?;
    if args.probe_throughput > 0.0 {
        probes.push(Arc::new(EngineThroughput {
            options: options.clone(),
            duration: Duration::from_secs_f64(args.probe_throughput),
        }));
    }
    if args.probe_sweep > 0.0 {
        probes.push(Arc::new(EngineSweep::new(
            options,
            Duration::from_secs_f64(args.probe_sweep),
        )));
    }
    Ok(probes)
}

/// An advisor serving its API.
pub struct Running {
    /// The advisor (for the daemon's session hook).
    pub advisor: Advisor,
    /// Where the API listens.
    pub addr: SocketAddr,
}

/// Starts the advisor and its API on `http`; both stop with `stop`.
pub async fn start(
    args: &AdvisorArgs,
    http: &str,
    state_dir: &Path,
    stop: Stop,
) -> Result<Running> {
    let want = http_addr(http).map_err(crate::cmd::usage)?;
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("create the state directory {}", state_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(want)
        .await
        .with_context(|| format!("advisor: cannot listen on {want}"))?;
    let addr = listener.local_addr()?;
    let advisor = Advisor::start_with_probes(
        crate::options::advisor_options(args, state_dir),
        probes(args)?,
        stopped(stop.clone()),
    )
    .await?;
    let service = advisor.service().clone();
    tokio::spawn(async move {
        if let Err(e) = tern_advisor::api::serve(listener, service, stopped(stop)).await {
            tracing::error!("advisor API stopped: {e}");
        }
    });
    Ok(Running { advisor, addr })
}

/// `tern advisor`: the advisor without a daemon.
pub async fn advisor_cmd(args: AdvisorCmdArgs, state_dir: &Path, stop: Stop) -> Result<()> {
    let running = start(&args.advisor, &args.http, state_dir, stop.clone()).await?;
    let store = running.advisor.service().store().location().to_string();
    Console::for_advisor(&args).banner(
        serde_json::json!({"http": running.addr.to_string(), "db": store}),
        format!("tern advisor: http://{} (archive {store})\n", running.addr),
    );
    stopped(stop).await;
    Ok(())
}

/// The advisor URL `tern advise` asks when not told.
fn default_server() -> String {
    std::env::var("TERN_ADVISOR")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| tern_advisor::client::DEFAULT_URL.to_string())
}

/// `tern advise HOST`.
pub async fn advise_cmd(args: AdviseArgs) -> Result<()> {
    tern_advisor::model::validate_host(&args.host)?;
    let console = Console::for_advise(&args);
    let client = AdvisorClient::new(&args.server.unwrap_or_else(default_server))?;
    let answer = client.advice_json(&args.host).await?;
    let advice: Advice = serde_json::from_value(answer.clone()).context("the advisor's answer")?;
    // Nothing no network can do is printed or acted on.
    let advice = client.checked(advice)?;
    console.result(&answer, || describe(&advice, client.url()));
    Ok(())
}

fn age(secs: f64) -> String {
    match secs {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} days", s / 86_400.0),
    }
}

/// Milliseconds, with the precision a loopback RTT needs.
fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.3} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn source(s: tern_advisor::advice::Source) -> &'static str {
    match s {
        tern_advisor::advice::Source::Passive => "passive",
        tern_advisor::advice::Source::Active => "active",
        tern_advisor::advice::Source::Mixed => "passive and active",
    }
}

/// Advice for people.
pub fn describe(a: &Advice, url: &str) -> String {
    use std::fmt::Write;
    use tern_advisor::advice::CapacityBasis;
    let mut out = String::new();
    let streams = match a.streams {
        1 => "1 stream".to_string(),
        n => format!("{n} streams"),
    };
    let _ = writeln!(out, "advice for {} from {url}", a.host);
    let _ = writeln!(
        out,
        "  buffer     {} per stream, {streams}   (tern: --window {} -P {})",
        human_bytes(a.buffer_bytes),
        a.tern_window_bytes,
        a.streams
    );
    let _ = writeln!(
        out,
        "  expected   {}",
        human_rate(a.expected_throughput_bps)
    );
    let _ = writeln!(
        out,
        "  path       RTT {} x capacity {} = {} in flight",
        ms(a.rtt_ms),
        human_rate(a.capacity_bps),
        human_bytes(a.bdp_bytes)
    );
    let capacity_from = match a.capacity_basis {
        CapacityBasis::Capacity => "capacity probes",
        CapacityBasis::Throughput => "transfers the network limited",
        CapacityBasis::ThroughputLowerBound => "the best transfer (a lower bound)",
    };
    let _ = writeln!(
        out,
        "  evidence   {} samples ({}), the staler quantity {} old",
        a.samples,
        source(a.source),
        age(a.age_s)
    );
    let evidence = |b: &tern_advisor::advice::Basis, ewma: String| {
        format!(
            "{} of {}, EWMA {ewma}, {}, newest {} old",
            b.method.replace('_', " "),
            b.samples,
            source(b.source),
            age(b.age_s)
        )
    };
    let _ = writeln!(out, "    RTT        {}", evidence(&a.rtt, ms(a.rtt.ewma)));
    let _ = writeln!(
        out,
        "    capacity   from {capacity_from}: {}",
        evidence(&a.capacity, human_rate(a.capacity.ewma))
    );
    if a.host_limit.limited {
        let _ = writeln!(
            out,
            "  host caps  one socket gets at most {} on the advisor's host; to let one stream carry the path:",
            human_bytes(a.host_limit.socket_window_max_bytes)
        );
        for s in &a.host_limit.sysctls {
            let _ = writeln!(out, "    {s}");
        }
    }
    if let Some(sw) = a.sweep.as_ref().filter(|sw| sw.followed) {
        let _ = writeln!(
            out,
            "  sweep      best of {} cells {} old: {} streams, window {}, {} (the formula expected {})",
            sw.cells,
            age(sw.age_s),
            sw.best_streams,
            sw.best_window,
            human_rate(sw.best_bps),
            human_rate(sw.formula_bps)
        );
    }
    if let Some(from) = &a.aggregated_from {
        let by = a.aggregated_by.as_deref().unwrap_or("same subnet");
        let _ = writeln!(out, "  from       {from} ({by})");
    }
    for n in &a.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

/// The advice a transfer starts from.
pub struct Consulted {
    client: Option<AdvisorClient>,
    used: AdvisorUse,
}

/// How long a transfer waits for its advisor before going without.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the advisor at `url` about `host`; a transfer never fails for
/// want of advice (it says why and starts from the defaults).
pub async fn consult(url: &str, host: &str, console: &Console) -> Consulted {
    let mut used = AdvisorUse {
        url: url.to_string(),
        streams: None,
        window_bytes: None,
        advice: None,
        advice_error: None,
        reported: false,
        report_error: None,
    };
    let client = match AdvisorClient::new(url) {
        Ok(c) => c.with_timeout(ASK_TIMEOUT),
        Err(e) => {
            used.advice_error = Some(e.to_string());
            return Consulted { client: None, used };
        }
    };
    match client.advice(host).await {
        Ok(a) => used.advice = Some(a),
        Err(e) => {
            console.note(format!(
                "advisor: no advice for {host} ({e}); starting from the defaults"
            ));
            used.advice_error = Some(e.to_string());
        }
    }
    Consulted {
        client: Some(client),
        used,
    }
}

impl Consulted {
    /// Sets the transfer's starting point from the advice: the stream
    /// count (when `--streams auto`) and the window (unless `--window`).
    pub fn apply(&mut self, t: &TransferArgs, console: &Console) -> Option<Advised> {
        let a = self.used.advice.as_ref()?;
        let (mut advised, mut advised_window) = (
            a.streams.clamp(1, tern_engine::server::MAX_STREAMS),
            a.tern_window_bytes.clamp(4096, 1 << 30),
        );
        if t.window.is_none() {
            (advised, advised_window) = fit_to_this_host(t, advised, advised_window, console);
        }
        let (streams, starting) = match t.streams {
            Streams::Auto => (Some(advised), advised),
            Streams::Fixed(n) => (None, n),
        };
        self.used.streams = streams;
        let window = match t.window {
            Some(w) => w,
            None => {
                self.used.window_bytes = Some(advised_window);
                WindowArg::Fixed(advised_window)
            }
        };
        console.note(format!(
                "advisor: starting with {} streams, window {} (RTT {}, capacity {}; {} samples, {}, {} old)",
                starting,
                match window {
                    WindowArg::Fixed(n) => human_bytes(n),
                    WindowArg::Auto => "auto".into(),
                    WindowArg::Kernel => "kernel".into(),
                },
                ms(a.rtt_ms),
                human_rate(a.capacity_bps),
                a.samples,
                source(a.source),
                age(a.age_s)
            ));
        Some(Advised { streams, window })
    }

    /// Reports what the transfer achieved; returns what to put in the
    /// `--json` report.
    pub async fn report(
        mut self,
        ep: &Endpoint,
        stats: &TransferStats,
        command: &str,
        direction: &str,
        console: &Console,
    ) -> AdvisorUse {
        let Some(client) = &self.client else {
            return self.used;
        };
        let mut report = TransferReport::from_stats(&ep.host, stats, command, direction);
        report.port = Some(ep.port);
        match client.report(&report).await {
            Ok(outcome) => {
                self.used.reported = true;
                let rate = report.throughput_bps.map_or("no rate".into(), human_rate);
                console.note(format!(
                    "advisor: reported {rate} to {} ({} measurement(s) stored{})",
                    client.url(),
                    outcome.stored,
                    if outcome.ignored.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", outcome.ignored.join("; "))
                    }
                ));
            }
            Err(e) => {
                console.note(format!(
                    "advisor: could not report to {}: {e}",
                    client.url()
                ));
                self.used.report_error = Some(e.to_string());
            }
        }
        self.used
    }
}

/// The advice's `streams` × `window` as this process can hold them (see
/// [`fit_to_cap`]), saying so when they change.
fn fit_to_this_host(t: &TransferArgs, streams: u16, window: u64, console: &Console) -> (u16, u64) {
    let cap = (!tern_drs::socket::privileged())
        .then(|| tern_advisor::advice::fixed_window_max(&tern_drs::HostCaps::read()))
        .flatten();
    let room = if t.streams == Streams::Auto {
        t.max_streams.max(streams)
    } else {
        streams
    };
    let (fitted_streams, fitted_window) = fit_to_cap(streams, window, cap, room);
    if (fitted_streams, fitted_window) != (streams, window) {
        console.note(format!(
            "advisor: a window of {} is over what this unprivileged process may set ({}, twice net.core.wmem_max/rmem_max); {}",
            human_bytes(window),
            human_bytes(fitted_window),
            if fitted_streams > streams {
                format!(
                    "{fitted_streams} streams of {} instead",
                    human_bytes(fitted_window)
                )
            } else {
                "the transfer may hold less in flight than advised".to_string()
            }
        ));
    }
    (fitted_streams, fitted_window)
}

/// Fits advised `streams` × `window` to a fixed-window `cap` of this host.
/// The advice comes from the advisor's host (often privileged, or with
/// larger caps); here the kernel would clamp each window silently and the
/// transfer would hold less in flight than advised. So the same bytes in
/// flight are spread over more streams, up to `max_streams`, each window
/// within the cap (rounded up to 4 KiB). No cap (privileged, or caps
/// unknown): the advice as it is.
fn fit_to_cap(streams: u16, window: u64, cap: Option<u64>, max_streams: u16) -> (u16, u64) {
    let Some(cap) = cap.filter(|&c| window > c) else {
        return (streams, window);
    };
    let in_flight = u64::from(streams) * window;
    let most = u64::from(max_streams.max(streams));
    let needed = in_flight.div_ceil(cap).clamp(u64::from(streams), most);
    let each = in_flight.div_ceil(needed).div_ceil(4096) * 4096;
    (needed as u16, each.min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_addresses() {
        assert_eq!(
            http_addr("4748").unwrap(),
            "127.0.0.1:4748".parse().unwrap()
        );
        assert_eq!(
            http_addr("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(http_addr("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert!(http_addr("localhost").is_err());
        assert!(http_addr("99999").is_err());
    }

    #[test]
    fn advice_over_the_fixed_window_cap_is_spread_over_more_streams() {
        const MIB: u64 = 1 << 20;
        // 8 × 11 MiB advised where 8 MiB is the most a window may be: the
        // 88 MiB in flight need 11 streams of 8 MiB.
        assert_eq!(fit_to_cap(8, 11 * MIB, Some(8 * MIB), 16), (11, 8 * MIB));
        // Spread evenly, rounded up to 4 KiB: 2 × 10 MiB over 3 streams.
        let (n, each) = fit_to_cap(2, 10 * MIB, Some(8 * MIB), 8);
        assert_eq!(n, 3);
        assert_eq!(each, (20 * MIB).div_ceil(3).div_ceil(4096) * 4096);
        assert!(u64::from(n) * each >= 20 * MIB && each <= 8 * MIB);
        // No more than max_streams: then each window is the cap.
        assert_eq!(fit_to_cap(8, 32 * MIB, Some(8 * MIB), 16), (16, 8 * MIB));
        // Streams fixed by the user (max = the advised count): clamped.
        assert_eq!(fit_to_cap(4, 12 * MIB, Some(8 * MIB), 4), (4, 8 * MIB));
        // Within the cap, or privileged or caps unknown (no cap): unchanged.
        assert_eq!(fit_to_cap(8, 2 * MIB, Some(8 * MIB), 16), (8, 2 * MIB));
        assert_eq!(fit_to_cap(8, 11 * MIB, None, 16), (8, 11 * MIB));
    }

    #[test]
    fn ages_read_well() {
        assert_eq!(age(3.2), "3 s");
        assert_eq!(age(600.0), "10 min");
        assert_eq!(age(3.0 * 3600.0), "3.0 h");
        assert_eq!(age(3.0 * 86_400.0), "3.0 days");
    }
}
