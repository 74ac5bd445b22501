//! `--advisor` of `tern cp` and `tern perf`: the advice a transfer with a
//! daemon starts from, and the report of what it achieved.

use std::time::Duration;

use tern_advisor::{AdvisorClient, TransferReport};
use tern_engine::client::{ClientOptions, Endpoint};
use tern_engine::transfer::TransferStats;
use tern_proto::Hello;

use crate::advice::{age, ms, source};
use crate::cli::{Streams, TransferArgs, WindowArg};
use crate::console::Console;
use crate::options::{self, Advised};
use crate::path_memory::{self, PathMemory};
use crate::report::{AdvisorUse, LastCopy};
use crate::size::{count, human_bytes, human_rate};

/// The options of a transfer with a daemon at `ep`: `opts`, started
/// from the advisor's advice with `--advisor`.
pub async fn remote_options(
    t: &TransferArgs,
    mut opts: ClientOptions,
    ep: &Endpoint,
    console: &Console,
) -> (ClientOptions, Option<Consulted>) {
    let Some(url) = &t.advisor else {
        return (opts, None);
    };
    let mut consulted = consult(url, &ep.host, console).await;
    if let Some(advised) = consulted.apply(t, console) {
        options::apply_advice(&mut opts, advised);
    }
    (opts, Some(consulted))
}

/// Starts a copy to `ep` where the last copy to it ended (its streams, and
/// buffers sized for its rate: `path_memory`), unless the user chose the
/// streams, the window or an advisor. `sending`: this client sends (a
/// push), so the stream controller a settled count steers is its own.
pub fn remembered_start(
    t: &TransferArgs,
    opts: &mut ClientOptions,
    ep: &Endpoint,
    console: &Console,
    sending: bool,
) -> Option<LastCopy> {
    let remembered = PathMemory::default_place().and_then(|m| m.recall(ep))?;
    path_memory::apply_hello(opts, &remembered);
    let chosen =
        t.advisor.is_some() || t.engine.streams != Streams::Auto || t.engine.window.is_some();
    if chosen || remembered.rate_bps == 0 {
        return None;
    }
    path_memory::apply(opts, &remembered, sending);
    let settled = opts.tuning.streams_settled;
    console.note(format!(
        "the last copy to {}:{} moved {} with {}; starting there{}",
        ep.host,
        ep.port,
        human_rate(remembered.rate_bps as f64),
        count(usize::from(remembered.streams), "stream"),
        if settled {
            " (more did not pay: no probes)"
        } else {
            ""
        }
    ));
    Some(LastCopy {
        rate_bps: remembered.rate_bps,
        streams: remembered.streams,
        settled,
    })
}

/// Keeps what a copy to `ep` showed of the path, for the next one.
pub fn remember_path(ep: &Endpoint, stats: &TransferStats, daemon_hello: Option<Hello>) {
    if let Some(memory) = PathMemory::default_place() {
        if let Err(e) = memory.remember(ep, stats, daemon_hello) {
            tracing::debug!("path to {}:{} not remembered: {e}", ep.host, ep.port);
        }
    }
}

/// Says that `--advisor` is ignored over ssh: only daemons are asked about.
pub fn warn_advisor_over_ssh(t: &TransferArgs, console: &Console) {
    if t.advisor.is_some() {
        console.warn("--advisor is for transfers with a daemon; ignored over ssh");
    }
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
        if t.engine.window.is_none() {
            (advised, advised_window) = fit_to_this_host(t, advised, advised_window, console);
        }
        let (streams, starting) = match t.engine.streams {
            Streams::Auto => (Some(advised), advised),
            Streams::Fixed(n) => (None, n),
        };
        self.used.streams = streams;
        let window = match t.engine.window {
            Some(w) => w,
            None => {
                self.used.window_bytes = Some(advised_window);
                WindowArg::Fixed(advised_window)
            }
        };
        let window_text = match window {
            WindowArg::Fixed(n) => human_bytes(n),
            WindowArg::Auto => "auto".into(),
            WindowArg::Kernel => "kernel".into(),
        };
        console.note(format!(
            "advisor: starting with {}, window {window_text} (RTT {}, capacity {}; {} samples, {}, {} old)",
            count(usize::from(starting), "stream"),
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
        outcome: &tern_engine::client::Outcome,
        command: &str,
        direction: &str,
        console: &Console,
    ) -> AdvisorUse {
        let stats = &outcome.stats;
        let Some(client) = &self.client else {
            return self.used;
        };
        let mut report = TransferReport::from_stats(&ep.host, stats, command, direction);
        report.port = Some(ep.port);
        // Each path of a multi-path session is a measurement of its own,
        // under the daemon's address on it; the first (the address the
        // session started on) under the daemon's name, which names the
        // others so that its advice lists them. The sum of the paths is
        // no path's figure.
        let others: Vec<TransferReport> = outcome
            .paths
            .iter()
            .skip(1)
            .filter_map(|p| report.for_path(p))
            .collect();
        if let Some(first) = outcome.paths.first().and_then(|p| report.for_path(p)) {
            report = TransferReport {
                host: ep.host.clone(),
                port: Some(ep.port),
                paths: others.iter().map(|o| o.host.clone()).collect(),
                ..first
            };
        }
        let mut paths_stored = 0;
        for path in &others {
            match client.report(path).await {
                Ok(o) => paths_stored += o.stored,
                Err(e) => {
                    console.note(format!("advisor: could not report path {}: {e}", path.host))
                }
            }
        }
        if paths_stored > 0 {
            console.note(format!(
                "advisor: {paths_stored} measurement(s) of the other {} stored under their own addresses",
                crate::size::count(others.len(), "path")
            ));
        }
        let mut answer = client.report(&report).await;
        if answer
            .as_ref()
            .is_err_and(|e| e.to_string().contains("paths"))
        {
            // An advisor from before multi-path: the report without them.
            report.paths.clear();
            answer = client.report(&report).await;
        }
        match answer {
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
    let room = if t.engine.streams == Streams::Auto {
        t.engine.max_streams.max(streams)
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
}
