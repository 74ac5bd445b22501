//! `tern perf`: memory-to-memory throughput through the whole engine, to
//! a daemon or to a `tern serve --once` started over ssh.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tern_engine::client::{self, Endpoint};
use tern_engine::transfer::Progress;

use crate::cli::PerfArgs;
use crate::console::Console;
use crate::consult::{remote_options, warn_advisor_over_ssh};
use crate::error::usage;
use crate::location::{self, Location, SshTarget};
use crate::options;
use crate::report::{Report, ReportInput, Via};
use crate::ssh_session::{connect_of, over_ssh};

/// The far end: a daemon, or a host to start one on through ssh.
enum Far {
    Daemon(Endpoint),
    Ssh(SshTarget),
}

fn far_of(target: &str) -> Result<Far> {
    match location::parse(target).map_err(usage)? {
        Location::Remote { endpoint, path } if path.is_empty() => Ok(Far::Daemon(endpoint)),
        Location::Ssh { target, path } if path.is_empty() => Ok(Far::Ssh(target)),
        Location::Remote { .. } | Location::Ssh { .. } => Err(usage(
            "tern perf takes tern://HOST[:PORT] or [USER@]HOST: without a path",
        )),
        Location::Local(_) => Err(usage(
            "tern perf needs a daemon (tern://HOST[:PORT]) or an ssh host ([USER@]HOST:)",
        )),
    }
}

/// How long to send: `--time`, 10 s by default, nothing with `--size`.
fn duration_of(args: &PerfArgs) -> Result<Option<Duration>> {
    match (args.size, args.time) {
        (Some(_), _) => Ok(None),
        (None, Some(secs)) if secs > 0.0 && secs < 1e6 => Ok(Some(Duration::from_secs_f64(secs))),
        (None, Some(secs)) => Err(usage(format!("--time must be positive, not {secs}"))),
        (None, None) => Ok(Some(Duration::from_secs(10))),
    }
}

/// Measures, and reports what was measured (to the advisor too, with
/// `--advisor`).
pub async fn run(args: PerfArgs, started: Instant) -> Result<()> {
    let t = &args.transfer;
    let console = Console::for_transfer(t);
    let far = far_of(&args.target)?;
    let duration = duration_of(&args)?;
    let (opts, consulted) = match &far {
        Far::Daemon(endpoint) => {
            remote_options(t, options::measure_options(t)?, endpoint, &console).await
        }
        Far::Ssh(_) => {
            warn_advisor_over_ssh(t, &console);
            (options::measure_options(t)?, None)
        }
    };
    let progress = Arc::new(Progress::default());
    let display = console.progress(&progress, duration);
    let (size, reverse) = (args.size, args.reverse);
    let result = match &far {
        Far::Daemon(endpoint) => client::perf(endpoint, &opts, size, duration, reverse, progress)
            .await
            .map_err(anyhow::Error::from),
        Far::Ssh(target) => {
            let ssh = options::ssh_options(&args.ssh, &args.transfer)?;
            over_ssh(
                target,
                &ssh,
                connect_of(&args.ssh),
                &opts,
                move |ep, o| async move {
                    client::perf(&ep, &o, size, duration, reverse, progress).await
                },
            )
            .await
        }
    };
    display.finish();
    let outcome = result?;
    let direction = if args.reverse { "receive" } else { "send" };
    let (via, advisor) = match far {
        Far::Daemon(endpoint) => {
            console.first_contact(&outcome, &endpoint);
            let advisor = match consulted {
                Some(c) => Some(
                    c.report(&endpoint, &outcome, "tern perf", direction, &console)
                        .await,
                ),
                None => None,
            };
            (Via::Daemon(endpoint), advisor)
        }
        Far::Ssh(_) => (Via::Ssh(connect_of(&args.ssh)), None),
    };
    let report = Report::new(ReportInput {
        command: "perf",
        direction,
        via: via.name(),
        stats: &outcome.stats,
        started,
        setup: outcome.setup,
        protect: options::protect_of(t.engine.protect),
        checksum: None,
        block_size: t.engine.block_size,
        fingerprint: Some(outcome.fingerprint.clone()),
        advisor,
        started_from: None,
        paths: outcome.paths.clone(),
        mptcp: outcome.mptcp,
    });
    console.report(&report);
    Ok(())
}
