//! `tern cp tern://A/PATH tern://B/PATH`: a third-party copy, straight
//! from daemon A to daemon B; this host only orders it (PROTOCOL.md §8.13).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::json;
use tern_engine::client::Endpoint;
use tern_engine::tpc::{DEFAULT_TTL, TpcMode, TpcOptions, TpcOutcome, TpcRequest, third_party};
use tern_engine::transfer::Progress;

use crate::cli::{CpArgs, TpcArg};
use crate::console::Console;
use crate::error::usage;
use crate::options;
use crate::size::{count, human_bytes, human_rate};

/// Copies `sources` at `source` to `dest_path` at `dest`.
pub async fn run(
    args: &CpArgs,
    (source, sources): (Endpoint, Vec<String>),
    (dest, dest_path): (Endpoint, String),
    progress: &Arc<Progress>,
    console: &Console,
    started: Instant,
) -> Result<()> {
    if args.transfer.engine.fingerprint.is_some() {
        bail!(usage(
            "--fingerprint names one daemon, and a third-party copy has two: trust them \
             through known_hosts (copy with each once) or --ca"
        ));
    }
    if args.transfer.engine.mptcp || !args.transfer.engine.path.is_empty() {
        bail!(usage(
            "--mptcp and --path name this host's connections, and a third-party copy's data \
             connections are the daemons' own: leave them out (the daemons use every path they \
             advertise to each other)"
        ));
    }
    let req = TpcRequest {
        source,
        sources,
        recursive: args.recursive,
        dest,
        dest_path,
    };
    let opts = TpcOptions {
        client: options::third_party_options(args)?,
        ttl: DEFAULT_TTL,
        mode: match args.tpc {
            TpcArg::Pull => TpcMode::Pull,
            TpcArg::Push => TpcMode::Push,
            TpcArg::Auto => TpcMode::Auto,
        },
    };
    let display = console.progress(progress, None);
    let outcome = third_party(&req, &opts, progress.clone()).await;
    display.finish();
    let outcome = outcome?;
    let elapsed = started.elapsed();
    let chosen = if args.tpc == TpcArg::Auto {
        "auto"
    } else {
        "--tpc"
    };
    console.result(
        &report_json(&req, &outcome, chosen, elapsed.as_secs_f64()),
        || human(&req, &outcome, elapsed.as_secs_f64()),
    );
    Ok(())
}

fn rate_bps(o: &TpcOutcome) -> f64 {
    let secs = o.network_elapsed.as_secs_f64();
    if secs > 0.0 {
        o.bytes as f64 * 8.0 / secs
    } else {
        0.0
    }
}

fn report_json(
    req: &TpcRequest,
    o: &TpcOutcome,
    chosen: &str,
    elapsed_s: f64,
) -> serde_json::Value {
    json!({
        "command": "cp",
        "direction": "third-party",
        "tpc": {
            "mode": o.direction,
            "dialer": if o.direction == "pull" { "destination" } else { "source" },
            "chosen_by": chosen,
            "pull_failed": o.pull_failed,
            "source": {
                "endpoint": req.source.host_port(),
                "address": o.source_address,
                "fingerprint": o.source_fingerprint,
            },
            "dest": {
                "endpoint": req.dest.host_port(),
                "address": o.dest_address,
                "fingerprint": o.dest_fingerprint,
            },
            "data_path": if o.direction == "pull" {
                json!({"from": o.data_path.1, "to": o.data_path.0})
            } else {
                json!({"from": o.data_path.0, "to": o.data_path.1})
            },
            "client_bytes": o.client_bytes,
        },
        "bytes": o.bytes,
        "files": o.files,
        "streams": o.streams,
        "network_elapsed_s": o.network_elapsed.as_secs_f64(),
        "rate_bps": rate_bps(o),
        "setup_s": o.setup.as_secs_f64(),
        "elapsed_s": elapsed_s,
    })
}

fn human(req: &TpcRequest, o: &TpcOutcome, elapsed_s: f64) -> String {
    let how = match (o.direction, &o.pull_failed) {
        ("pull", _) => format!("{} pulled from {}", o.data_path.0.ip(), o.data_path.1),
        (_, Some(why)) => format!(
            "{} pushed to {} (the destination could not reach the source: {why})",
            o.data_path.0.ip(),
            o.data_path.1
        ),
        _ => format!("{} pushed to {}", o.data_path.0.ip(), o.data_path.1),
    };
    format!(
        "copied {} in {} from {} to {} directly: {how} over {} at {} \
         ({:.1} s on the network, {:.1} s in all)\nthis host only gave the order: {} on its two \
         control connections\n",
        human_bytes(o.bytes),
        count(o.files as usize, "file"),
        req.source.host_port(),
        req.dest.host_port(),
        count(usize::from(o.streams), "stream"),
        human_rate(rate_bps(o)),
        o.network_elapsed.as_secs_f64(),
        elapsed_s,
        human_bytes(o.client_bytes),
    )
}
