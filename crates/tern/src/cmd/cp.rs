//! `tern cp`: copy files and trees to, from or between places (local
//! paths, daemons, hosts reached through ssh), and between two remote
//! places through this host (`--via-client`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use tern_engine::client::{self, Endpoint};
use tern_engine::fsio::{FsSink, FsSource, Root};
use tern_engine::local;
use tern_engine::transfer::{Progress, TransferStats};
use tern_proto::Protect;

use crate::cli::CpArgs;
use crate::console::Console;
use crate::consult::{
    Consulted, remember_path, remembered_start, remote_options, warn_advisor_over_ssh,
};
use crate::error::{Interrupted, Partial, describe, usage};
use crate::exit::Exit;
use crate::host;
use crate::location::{self, Location, SshTarget};
use crate::options;
use crate::report::{FailureReport, LastCopy, Report, ReportInput, Via};
use crate::retry::with_retries;
use crate::signals;
use crate::size::human_bytes;
use crate::ssh_session::{connect_of, over_ssh};

mod third_party;

use third_party::End;

/// The sources of a copy: all local, or all at one place.
enum Sources {
    Local(Vec<PathBuf>),
    Daemon(Endpoint, Vec<String>),
    Ssh(SshTarget, Vec<String>),
}

fn sources_of(srcs: &[Location]) -> Result<Sources> {
    let mut out = match &srcs[0] {
        Location::Local(_) => Sources::Local(Vec::new()),
        Location::Remote { endpoint, .. } => Sources::Daemon(endpoint.clone(), Vec::new()),
        Location::Ssh { target, .. } => Sources::Ssh(target.clone(), Vec::new()),
    };
    for s in srcs {
        match (&mut out, s) {
            (Sources::Local(v), Location::Local(p)) => v.push(p.clone()),
            (Sources::Daemon(ep, v), Location::Remote { endpoint, path }) if ep == endpoint => {
                v.push(path.clone())
            }
            (Sources::Ssh(t, v), Location::Ssh { target, path }) if t == target => {
                v.push(path.clone())
            }
            _ => {
                return Err(usage(
                    "sources must be all local, or all on one daemon or ssh host",
                ));
            }
        }
    }
    Ok(out)
}

/// The destination and the sources named on the command line.
fn places(args: &CpArgs) -> Result<(Location, Sources)> {
    let (dst_arg, src_args) = args.paths.split_last().expect("clap requires two paths");
    let dst = location::parse(dst_arg).map_err(usage)?;
    let srcs = src_args
        .iter()
        .map(|s| location::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    Ok((dst, sources_of(&srcs)?))
}

/// What a copy did, and how.
struct Copied {
    outcome: client::Outcome,
    /// push, pull or local.
    direction: &'static str,
    via: Via,
    consulted: Option<Consulted>,
    /// The last copy to the same daemon it started from.
    started_from: Option<LastCopy>,
}

/// Copies, and reports what was copied.
pub async fn run(args: CpArgs, started: Instant) -> Result<()> {
    host::raise_open_files();
    let progress = Arc::new(Progress::default());
    let console = Console::for_transfer(&args.transfer);
    // SIGINT or SIGTERM drops the copy (its partial files and journals
    // are flushed as their writers go) and says so.
    let result = tokio::select! {
        r = run_with(&args, started, &progress, &console) => r,
        () = signals::shutdown_signal() => {
            Err(anyhow::Error::new(tern_engine::Error::Aborted).context(Interrupted))
        }
    };
    if let Err(e) = &result {
        let code = crate::exit::Exit::of(e).code();
        let report = FailureReport::new(describe(e), code, &progress, started);
        console.failure(&report);
    }
    result
}

/// The copy `args` ask for, counted in `progress`.
async fn run_with(
    args: &CpArgs,
    started: Instant,
    progress: &Arc<Progress>,
    console: &Console,
) -> Result<()> {
    let (dst, sources) = places(args)?;
    for hint in args
        .paths
        .iter()
        .filter_map(|p| location::port_like_hint(p))
    {
        console.note(hint);
    }
    let remote_to_remote =
        !matches!(dst, Location::Local(_)) && !matches!(sources, Sources::Local(_));
    // In reverse mode (-z) each tern ssh starts dials this host, so two of
    // them cannot reach each other.
    let both_ssh_reversed = args.ssh.reverse_connect
        && matches!(dst, Location::Ssh { .. })
        && matches!(sources, Sources::Ssh(..));
    if remote_to_remote && both_ssh_reversed && !args.via_client {
        console.note(
            "with -z the terns ssh starts at two ssh locations only dial this host: relaying \
             through this host, as scp -3 does (--via-client)",
        );
    }
    if args.via_client || (remote_to_remote && both_ssh_reversed) {
        return relay(args, &dst, sources, console, started).await;
    }
    if remote_to_remote {
        let source = match sources {
            Sources::Daemon(from, paths) => (End::Daemon(from), paths),
            Sources::Ssh(from, paths) => (End::Ssh(from), paths),
            Sources::Local(_) => unreachable!("a remote source"),
        };
        let dest = match &dst {
            Location::Remote { endpoint, path } => (End::Daemon(endpoint.clone()), path.clone()),
            Location::Ssh { target, path } => (End::Ssh(target.clone()), path.clone()),
            Location::Local(_) => unreachable!("a remote destination"),
        };
        return third_party::run(args, source, dest, progress, console, started).await;
    }
    let display = console.progress(progress, None);
    let result = copy(args, &dst, sources, progress, console).await;
    display.finish();
    finish(args, result?, started, console).await
}

/// Runs the copy the places call for, again after a lost connection.
async fn copy(
    args: &CpArgs,
    dst: &Location,
    sources: Sources,
    progress: &Arc<Progress>,
    console: &Console,
) -> Result<Copied> {
    let t = &args.transfer;
    match (dst, sources) {
        (Location::Remote { endpoint, path }, Sources::Local(sources)) => {
            push_to_daemon(args, endpoint, path, sources, progress, console).await
        }
        (Location::Ssh { target, path }, Sources::Local(sources)) => {
            push_over_ssh(args, target, path, sources, progress, console).await
        }
        (Location::Local(dest), Sources::Daemon(endpoint, paths)) => {
            pull_from_daemon(args, endpoint, paths, dest, progress, console).await
        }
        (Location::Local(dest), Sources::Ssh(target, paths)) => {
            pull_over_ssh(args, target, paths, dest, progress, console).await
        }
        (Location::Local(dest), Sources::Local(sources)) => {
            if t.advisor.is_some() {
                console.warn("--advisor is for transfers with a daemon; ignored for a local copy");
            }
            let outcome = copy_local(&sources, dest, args, progress.clone()).await?;
            Ok(Copied {
                outcome,
                direction: "local",
                via: Via::Local,
                consulted: None,
                started_from: None,
            })
        }
        _ => {
            bail!(usage(
                "a copy between two remote places goes straight between two daemons, or \
                 through this host (--via-client)"
            ))
        }
    }
}

/// Local `sources` to `path` under a daemon's root.
async fn push_to_daemon(
    args: &CpArgs,
    endpoint: &Endpoint,
    path: &str,
    sources: Vec<PathBuf>,
    progress: &Arc<Progress>,
    console: &Console,
) -> Result<Copied> {
    let t = &args.transfer;
    let (mut opts, consulted) =
        remote_options(t, options::copy_options(args)?, endpoint, console).await;
    let started_from = remembered_start(t, &mut opts, endpoint, console, true);
    let outcome = with_retries(args.retries, console, refused_busy, || async {
        let (sources, path) = (sources.clone(), path.to_string());
        Ok(client::push(
            endpoint,
            &opts,
            sources,
            args.recursive,
            path,
            progress.clone(),
        )
        .await?)
    })
    .await?;
    Ok(Copied {
        outcome,
        direction: "push",
        via: Via::Daemon(endpoint.clone()),
        consulted,
        started_from,
    })
}

/// Local `sources` to `path` on a host reached through ssh.
async fn push_over_ssh(
    args: &CpArgs,
    target: &SshTarget,
    path: &str,
    sources: Vec<PathBuf>,
    progress: &Arc<Progress>,
    console: &Console,
) -> Result<Copied> {
    // Before ssh asks for a password: a missing source is said at once.
    client::check_sources(&sources, args.recursive)?;
    let t = &args.transfer;
    warn_advisor_over_ssh(t, console);
    let opts = options::copy_options(args)?;
    let ssh = options::copy_ssh_options(args)?;
    let (recursive, connect) = (args.recursive, connect_of(&args.ssh));
    let outcome = with_retries(args.retries, console, refused_busy, || {
        let (sources, path, progress) = (sources.clone(), path.to_string(), progress.clone());
        over_ssh(target, &ssh, connect, &opts, move |ep, o| async move {
            client::push(&ep, &o, sources, recursive, path, progress).await
        })
    })
    .await?;
    Ok(Copied {
        outcome,
        direction: "push",
        via: Via::Ssh(connect),
        consulted: None,
        started_from: None,
    })
}

/// `paths` under a daemon's root to local `dest`.
async fn pull_from_daemon(
    args: &CpArgs,
    endpoint: Endpoint,
    paths: Vec<String>,
    dest: &Path,
    progress: &Arc<Progress>,
    console: &Console,
) -> Result<Copied> {
    let t = &args.transfer;
    let (mut opts, consulted) =
        remote_options(t, options::copy_options(args)?, &endpoint, console).await;
    let started_from = remembered_start(t, &mut opts, &endpoint, console, false);
    let outcome = with_retries(args.retries, console, refused_busy, || async {
        let (paths, dest) = (paths.clone(), dest.to_path_buf());
        Ok(client::pull(
            &endpoint,
            &opts,
            paths,
            args.recursive,
            dest,
            progress.clone(),
        )
        .await?)
    })
    .await?;
    Ok(Copied {
        outcome,
        direction: "pull",
        via: Via::Daemon(endpoint),
        consulted,
        started_from,
    })
}

/// `paths` on a host reached through ssh to local `dest`.
async fn pull_over_ssh(
    args: &CpArgs,
    target: SshTarget,
    paths: Vec<String>,
    dest: &Path,
    progress: &Arc<Progress>,
    console: &Console,
) -> Result<Copied> {
    let t = &args.transfer;
    warn_advisor_over_ssh(t, console);
    let opts = options::copy_options(args)?;
    let ssh = options::copy_ssh_options(args)?;
    let (recursive, connect) = (args.recursive, connect_of(&args.ssh));
    let outcome = with_retries(args.retries, console, refused_busy, || {
        let (paths, dest, progress) = (paths.clone(), dest.to_path_buf(), progress.clone());
        over_ssh(&target, &ssh, connect, &opts, move |ep, o| async move {
            client::pull(&ep, &o, paths, recursive, dest, progress).await
        })
    })
    .await?;
    Ok(Copied {
        outcome,
        direction: "pull",
        via: Via::Ssh(connect),
        consulted: None,
        started_from: None,
    })
}

/// Why a copy should run again: files refused because another copy to
/// their names was in progress, which may have ended by the next try.
fn refused_busy(outcome: &client::Outcome) -> Option<String> {
    let busy = tern_engine::fsio::ANOTHER_COPY;
    let refused: Vec<String> = (outcome.stats.failed.iter())
        .filter(|f| f.message.contains(busy))
        .map(|f| f.path.to_string())
        .collect();
    match refused.as_slice() {
        [] => None,
        [one] => Some(format!("{one}: {busy}")),
        many => Some(format!("{} files: {busy}", many.len())),
    }
}

/// Says what the copy did, reports it to the advisor it started from, and
/// fails as [`partial_result`] says.
async fn finish(args: &CpArgs, copied: Copied, started: Instant, console: &Console) -> Result<()> {
    let verdict = partial_result(&copied.outcome.stats);
    let mut report = report_of(args, copied, started, console).await;
    report.exit_code = exit_code_of(&verdict);
    console.report(&report);
    verdict
}

/// What a copy did, as its report says it (told to the advisor it started
/// from on the way).
async fn report_of(args: &CpArgs, copied: Copied, started: Instant, console: &Console) -> Report {
    let t = &args.transfer;
    let Copied {
        outcome,
        direction,
        via,
        consulted,
        started_from,
    } = copied;
    if let Via::Daemon(ep) = &via {
        console.first_contact(&outcome, ep);
        remember_path(ep, &outcome.stats, outcome.daemon_hello);
    }
    let remote = !matches!(via, Via::Local);
    let advisor = match (consulted, &via) {
        (Some(c), Via::Daemon(ep)) => {
            let way = if direction == "push" {
                "send"
            } else {
                "receive"
            };
            Some(c.report(ep, &outcome, "tern cp", way, console).await)
        }
        _ => None,
    };
    Report::new(ReportInput {
        command: "cp",
        direction,
        via: via.name(),
        stats: &outcome.stats,
        started,
        setup: outcome.setup,
        protect: if remote {
            options::protect_of(t.engine.protect)
        } else {
            Protect::Clear
        },
        checksum: Some(options::checksum_of(args.checksum)),
        block_size: t.engine.block_size,
        fingerprint: remote.then(|| outcome.fingerprint.clone()),
        advisor,
        started_from,
        paths: outcome.paths.clone(),
        mptcp: outcome.mptcp,
    })
}

/// A copy that completed except for some entries is exit 23 (as rsync's);
/// one whose only entry failed fails as that entry did (a single file into
/// an unwritable directory is a permission error, 4, as it always was).
fn partial_result(stats: &TransferStats) -> Result<()> {
    let nothing_copied = stats.files.is_empty() && stats.skipped.is_empty();
    match stats.failed.as_slice() {
        [] => Ok(()),
        // Nothing else was copied, so 23's "everything else was" would not
        // be true: the entries' own code, when they share one.
        [first, rest @ ..] if nothing_copied && rest.iter().all(|f| f.code == first.code) => {
            let more = match rest.len() {
                0 => String::new(),
                1 => " (and 1 more entry, listed above)".to_string(),
                n => format!(" (and {n} more entries, listed above)"),
            };
            bail!(tern_engine::Error::Entry {
                code: first.code,
                message: format!("{}: {}{more}", first.path, first.message),
            })
        }
        failed => bail!(Partial(failed.len())),
    }
}

/// A copy between local paths: both ends in this process.
async fn copy_local(
    sources: &[PathBuf],
    dest: &Path,
    args: &CpArgs,
    progress: Arc<Progress>,
) -> Result<client::Outcome> {
    let sources = sources.to_vec();
    for s in &sources {
        let meta = std::fs::metadata(s).map_err(|e| tern_engine::Error::io("stat", s, e))?;
        if meta.is_dir() && !args.recursive {
            bail!(tern_engine::Error::BadRequest(format!(
                "{}: is a directory (use -r to copy it)",
                s.display()
            )));
        }
    }
    let keep = args.keep_special_bits;
    let sink = Arc::new(
        FsSink::new(Root::Ambient, dest.to_path_buf(), sources.len() as u32)?
            .keep_special_bits(keep),
    );
    let source =
        Arc::new(FsSource::new(Root::Ambient, sources, args.recursive).keep_special_bits(keep));
    let params = options::local_params(args)?;
    let (sent, mut received) = local::copy(
        source,
        sink,
        params,
        progress,
        crate::fault::from_env().as_ref(),
    )
    .await?;
    // The sender knows what compression did (blocks compressed in vain).
    received.compression = sent.compression;
    Ok(client::Outcome {
        streams: received.streams_used,
        stats: received,
        fingerprint: String::new(),
        recorded: None,
        setup: Duration::ZERO,
        paths: Vec::new(),
        mptcp: None,
        local: None,
        peer: None,
        daemon_hello: None,
        opened_early: false,
    })
}

/// `--via-client` between two remote places (daemons or ssh hosts): the
/// data is carried through this host, pulled into a spool directory here
/// and then pushed on (for daemons that cannot reach each other, where a
/// third-party copy cannot run, and for ssh locations). Store and forward:
/// the copy needs room in the spool and takes the time of both legs, and
/// the spool goes when the command ends.
async fn relay(
    args: &CpArgs,
    dst: &Location,
    sources: Sources,
    console: &Console,
    started: Instant,
) -> Result<()> {
    let paths = match (&sources, dst) {
        (Sources::Local(_), _) | (_, Location::Local(_)) => bail!(usage(
            "--via-client carries a copy between two remote places (tern://… or HOST:…) \
             through this host; this copy has a local end already"
        )),
        (Sources::Daemon(_, paths) | Sources::Ssh(_, paths), _) => paths.clone(),
    };
    let names = paths
        .iter()
        .map(|p| last_name(p))
        .collect::<Result<Vec<_>>>()?;
    let under = args.spool.clone().unwrap_or_else(std::env::temp_dir);
    let spool = tempfile::Builder::new()
        .prefix("tern-relay.")
        .tempdir_in(&under)
        .with_context(|| format!("cannot make a spool directory in {}", under.display()))?;
    console.note(format!(
        "relaying through this host: pulling into {}, then pushing on (--via-client)",
        spool.path().display()
    ));
    let pull_started = Instant::now();
    let pulled = relay_leg(
        args,
        &Location::Local(spool.path().to_path_buf()),
        sources,
        console,
    )
    .await?;
    let pull_verdict = partial_result(&pulled.outcome.stats);
    let pulled_bytes = pulled.outcome.stats.bytes;
    let mut pull = report_of(args, pulled, pull_started, console).await;
    pull.exit_code = exit_code_of(&pull_verdict);
    let local: Vec<PathBuf> = names
        .iter()
        .map(|n| spool.path().join(n))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    if local.is_empty() {
        pull_verdict?;
        bail!("nothing arrived in the spool to push on");
    }
    let push_started = Instant::now();
    let pushed = relay_leg(args, dst, Sources::Local(local), console).await?;
    let push_verdict = partial_result(&pushed.outcome.stats);
    let pushed_bytes = pushed.outcome.stats.bytes;
    let mut push = report_of(args, pushed, push_started, console).await;
    push.exit_code = exit_code_of(&push_verdict);
    let elapsed_s = started.elapsed().as_secs_f64();
    let verdict = pull_verdict.and(push_verdict);
    console.result(
        &json!({
            "command": "cp",
            "direction": "relay",
            "via": "client",
            "exit_code": exit_code_of(&verdict),
            "bytes": pushed_bytes,
            "files": push.files,
            "elapsed_s": elapsed_s,
            "relay": {
                "spool": spool.path(),
                "pulled_bytes": pulled_bytes,
                "pushed_bytes": pushed_bytes,
                "pull": pull,
                "push": push,
            },
        }),
        || {
            let mut out = format!(
                "relayed through this host: pulled {} into {}, pushed {} on ({elapsed_s:.1} s in \
                 all)\n",
                human_bytes(pulled_bytes),
                spool.path().display(),
                human_bytes(pushed_bytes),
            );
            for (leg, r) in [("pull", &pull), ("push", &push)] {
                for line in r.human_lines() {
                    out.push_str(&format!("{leg}: {line}\n"));
                }
            }
            out
        },
    );
    console.failures(&pull.failed);
    console.failures(&push.failed);
    verdict
}

/// The code a verdict makes the process exit with.
fn exit_code_of(verdict: &Result<()>) -> u8 {
    verdict.as_ref().err().map_or(0, |e| Exit::of(e).code())
}

/// One leg, with its own progress display.
async fn relay_leg(
    args: &CpArgs,
    dst: &Location,
    sources: Sources,
    console: &Console,
) -> Result<Copied> {
    let progress = Arc::new(Progress::default());
    let display = console.progress(&progress, None);
    let copied = copy(args, dst, sources, &progress, console).await;
    display.finish();
    copied
}

/// The name a remote source takes in the spool (and then at the
/// destination), as scp names it: its last component.
fn last_name(path: &str) -> Result<PathBuf> {
    match Path::new(path.trim_end_matches('/')).file_name() {
        Some(name) => Ok(PathBuf::from(name)),
        None => bail!(usage(format!(
            "{path:?}: --via-client needs a source with a name of its own (not a root or ..)"
        ))),
    }
}
