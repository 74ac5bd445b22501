//! `tern cp tern://A/PATH tern://B/PATH`: a third-party copy, straight
//! from daemon A to daemon B; this host only orders it (PROTOCOL.md §8.13).
//! Either end may be an ssh location: ssh starts a tern there (`tern
//! serve --once`), which takes its part of the copy from this host as a
//! daemon would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::json;
use tern_engine::client::{ClientOptions, Endpoint};
use tern_engine::tpc::{DEFAULT_TTL, TpcMode, TpcOptions, TpcOutcome, TpcRequest, third_party};
use tern_engine::transfer::Progress;

use crate::cli::{CpArgs, TpcArg};
use crate::console::Console;
use crate::error::usage;
use crate::location::SshTarget;
use crate::options;
use crate::retry::with_retries;
use crate::size::{count, human_bytes, human_rate};
use crate::ssh_session::{connect_of, with_once_server, with_two_once_servers};

/// One end of a third-party copy.
pub enum End {
    /// A daemon (`tern://HOST[:PORT]/PATH`).
    Daemon(Endpoint),
    /// A host reached through ssh (`[USER@]HOST:PATH`).
    Ssh(SshTarget),
}

impl End {
    fn ssh(&self) -> Option<&SshTarget> {
        match self {
            End::Ssh(t) => Some(t),
            End::Daemon(_) => None,
        }
    }
}

/// Copies `sources` at `source` to `dest_path` at `dest`.
pub async fn run(
    args: &CpArgs,
    (source, sources): (End, Vec<String>),
    (dest, dest_path): (End, String),
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
    let opts = TpcOptions {
        client: options::third_party_options(args)?,
        ttl: DEFAULT_TTL,
        mode: match args.tpc {
            TpcArg::Pull => TpcMode::Pull,
            TpcArg::Push => TpcMode::Push,
            TpcArg::Auto => TpcMode::Auto,
        },
        // Set once ssh has started the tern at an ssh end.
        source_once: None,
        dest_once: None,
    };
    let unknown = || Endpoint {
        host: String::new(),
        port: 0,
    };
    let endpoint = |end: &End| match end {
        End::Daemon(ep) => ep.clone(),
        End::Ssh(_) => unknown(),
    };
    let mut req = TpcRequest {
        source: endpoint(&source),
        sources,
        recursive: args.recursive,
        dest: endpoint(&dest),
        dest_path,
    };
    let display = console.progress(progress, None);
    // Each ssh end's once server, as the client reaches it.
    let ordered = |source_once: Option<(Endpoint, ClientOptions)>,
                   dest_once: Option<(Endpoint, ClientOptions)>| {
        let (mut req, mut opts) = (req.clone(), opts.clone());
        if let Some((ep, once)) = source_once {
            (req.source, opts.source_once) = (ep, Some(once));
        }
        if let Some((ep, once)) = dest_once {
            (req.dest, opts.dest_once) = (ep, Some(once));
        }
        let progress = progress.clone();
        async move {
            let outcome = third_party(&req, &opts, progress).await?;
            Ok((outcome, req))
        }
    };
    let ssh = options::copy_ssh_options(args)?;
    let connect = connect_of(&args.ssh);
    let attempt = || async {
        match (source.ssh(), dest.ssh()) {
            (None, None) => ordered(None, None)
                .await
                .map(|ran| (ran, Duration::ZERO))
                .map_err(anyhow::Error::from),
            (Some(target), None) => {
                let run = |ep, once| ordered(Some((ep, once)), None);
                with_once_server(target, &ssh, connect, &opts.client, run).await
            }
            (None, Some(target)) => {
                let run = |ep, once| ordered(None, Some((ep, once)));
                with_once_server(target, &ssh, connect, &opts.client, run).await
            }
            (Some(a), Some(b)) => {
                let run = |at_a, at_b| ordered(Some(at_a), Some(at_b));
                with_two_once_servers((a, b), &ssh, &opts.client, run).await
            }
        }
    };
    // A lost connection runs the copy again, as for any copy: the
    // destination resumes its partial files.
    let ran = with_retries(args.retries, console, |_| None, attempt).await;
    let outcome = ran.map(
        |((mut outcome, ran), ssh_time): ((TpcOutcome, TpcRequest), Duration)| {
            outcome.setup += ssh_time;
            req = ran;
            outcome
        },
    );
    display.finish();
    let outcome = outcome?;
    let elapsed = started.elapsed();
    let chosen = if args.tpc == TpcArg::Auto {
        "auto"
    } else {
        "--tpc"
    };
    let names = Names {
        source: name_of(&source, &req.source),
        dest: name_of(&dest, &req.dest),
        ssh: [("source", &source), ("destination", &dest)]
            .into_iter()
            .filter_map(|(role, end)| end.ssh().map(|_| role))
            .collect(),
    };
    console.result(
        &report_json(&req, &names, &outcome, chosen, elapsed.as_secs_f64()),
        || human(&names, &outcome, elapsed.as_secs_f64()),
    );
    Ok(())
}

/// How the report names the two ends, and which ones ssh reached.
struct Names {
    source: String,
    dest: String,
    ssh: Vec<&'static str>,
}

fn name_of(end: &End, reached: &Endpoint) -> String {
    match end {
        End::Daemon(ep) => ep.host_port(),
        End::Ssh(t) => format!("{} (ssh, tern at {})", t.destination(), reached.host_port()),
    }
}

/// What went over the network (not what a resume found already there),
/// over the network time.
fn rate_bps(o: &TpcOutcome) -> f64 {
    let secs = o.network_elapsed.as_secs_f64();
    if secs > 0.0 {
        o.bytes.saturating_sub(o.bytes_resumed) as f64 * 8.0 / secs
    } else {
        0.0
    }
}

fn report_json(
    req: &TpcRequest,
    names: &Names,
    o: &TpcOutcome,
    chosen: &str,
    elapsed_s: f64,
) -> serde_json::Value {
    json!({
        "command": "cp",
        "direction": "third-party",
        // A copy that did not complete fails before its report.
        "exit_code": 0,
        "tpc": {
            "mode": o.direction,
            "dialer": if o.direction == "pull" { "destination" } else { "source" },
            "chosen_by": chosen,
            "pull_failed": o.pull_failed,
            "ssh_ends": names.ssh,
            "source": {
                "endpoint": req.source.host_port(),
                "name": names.source,
                "address": o.source_address,
                "fingerprint": o.source_fingerprint,
            },
            "dest": {
                "endpoint": req.dest.host_port(),
                "name": names.dest,
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
        "bytes_resumed": o.bytes_resumed,
        "files": o.files,
        "streams": o.streams,
        "network_elapsed_s": o.network_elapsed.as_secs_f64(),
        "rate_bps": rate_bps(o),
        "setup_s": o.setup.as_secs_f64(),
        "elapsed_s": elapsed_s,
    })
}

fn human(names: &Names, o: &TpcOutcome, elapsed_s: f64) -> String {
    let how = match (o.direction, &o.pull_failed) {
        ("pull", _) => format!("{} pulled from {}", o.data_path.0.ip(), o.data_path.1),
        (_, Some(why)) => format!(
            "{} pushed to {} (the destination could not reach the source: {why})",
            o.data_path.0.ip(),
            o.data_path.1
        ),
        _ => format!("{} pushed to {}", o.data_path.0.ip(), o.data_path.1),
    };
    let resumed = match o.bytes_resumed {
        0 => String::new(),
        n => format!(
            " ({} of it resumed from an earlier attempt)",
            human_bytes(n)
        ),
    };
    format!(
        "copied {}{resumed} in {} from {} to {} directly: {how} over {} at {} \
         ({:.1} s on the network, {:.1} s in all)\nthis host only gave the order: {} on its two \
         control connections\n",
        human_bytes(o.bytes),
        count(o.files as usize, "file"),
        names.source,
        names.dest,
        count(usize::from(o.streams), "stream"),
        human_rate(rate_bps(o)),
        o.network_elapsed.as_secs_f64(),
        elapsed_s,
        human_bytes(o.client_bytes),
    )
}
