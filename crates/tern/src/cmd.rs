//! The commands: turn parsed options into engine calls and reports.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tern_engine::authz::Authz;
use tern_engine::client::{self, ClientOptions, Endpoint};
use tern_engine::fsio::{FsSink, FsSource, Root};
use tern_engine::local;
use tern_engine::once::{Callback, OnceOptions, OnceServer};
use tern_engine::server::{SiteAuth, serve};
use tern_engine::tls::{ServerIdentity, load_roots};
use tern_engine::transfer::Progress;
use tern_proto::Protect;

use crate::advise::{self, Consulted};
use crate::cli::{Cli, Command, CpArgs, PerfArgs, ServeArgs, SshArgs, TransferArgs};
use crate::console::Console;
use crate::error::{Partial, Retry, SshFailure};
use crate::location::{self, Location, SshTarget};
use crate::options;
use crate::report::{Connect, Report, ReportInput, Via};
use crate::ssh::{Remote, SshOptions};

/// Runs the parsed command.
pub async fn run(cli: Cli, started: Instant) -> Result<()> {
    match cli.command {
        Command::Cp(args) => cp(args, started).await,
        Command::Serve(args) => serve_cmd(args).await,
        Command::Perf(args) => perf(args, started).await,
        Command::Probe(args) => crate::probe::run(args).await,
        Command::Advise(args) => advise::advise_cmd(args).await,
        Command::Advisor(args) => {
            let state_dir = match &args.state_dir {
                Some(d) => d.clone(),
                None => default_state_dir()?,
            };
            advise::advisor_cmd(args, &state_dir, stop_on_signal()).await
        }
    }
}

pub(crate) use crate::error::usage;

/// The options of a transfer with a daemon at `ep`: `opts`, started
/// from the advisor's advice with `--advisor`.
async fn remote_options(
    t: &TransferArgs,
    mut opts: ClientOptions,
    ep: &Endpoint,
    console: &Console,
) -> (ClientOptions, Option<Consulted>) {
    let Some(url) = &t.advisor else {
        return (opts, None);
    };
    let mut consulted = advise::consult(url, &ep.host, console).await;
    if let Some(advised) = consulted.apply(t, console) {
        options::apply_advice(&mut opts, advised);
    }
    (opts, Some(consulted))
}

/// Options for a transfer over ssh: the advisor is asked only about daemons.
fn warn_advisor_over_ssh(t: &TransferArgs, console: &Console) {
    if t.advisor.is_some() {
        console.warn("--advisor is for transfers with a daemon; ignored over ssh");
    }
}

/// Runs a copy, and again up to `retries` times after a connection was
/// lost (backing off 1 s, 2 s, 4 s, … up to 30 s); every run resumes the
/// partial files of the one before. A peer that cannot be reached on the
/// first try is not retried (a wrong address or login stays wrong). When
/// every run fails, the error that broke the first is the one reported.
async fn with_retries<T, F, Fut>(retries: u32, mut run: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut first: Option<anyhow::Error> = None;
    let mut attempt = 0u32;
    loop {
        let e = match run().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let (retryable, reaching) = retry_class(&e);
        let never_connected = first.is_none() && reaching;
        if attempt >= retries || !retryable || never_connected {
            return Err(match first {
                Some(f) if retryable => f,
                _ => e,
            });
        }
        attempt += 1;
        let wait = retry_backoff(attempt);
        eprintln!(
            "tern: {e:#}; trying again in {} s (retry {attempt} of {retries})",
            wait.as_secs()
        );
        first.get_or_insert(e);
        tokio::time::sleep(wait).await;
    }
}

/// The wait before retry `attempt` (1, 2, …): 1 s, doubling, at most 30 s.
fn retry_backoff(attempt: u32) -> Duration {
    Duration::from_secs((1u64 << attempt.saturating_sub(1).min(5)).min(30))
}

/// Whether running again may help, and whether the failure was in reaching
/// the peer at all.
fn retry_class(e: &anyhow::Error) -> (bool, bool) {
    if let Some(f) = e.downcast_ref::<SshFailure>() {
        return (f.retry == Retry::May, true);
    }
    match e.downcast_ref::<tern_engine::Error>() {
        Some(e) => (
            e.is_retryable(),
            e.kind() == tern_engine::ErrorKind::Connect,
        ),
        None => (false, false),
    }
}

/// Runs one session against a `tern serve --once` that ssh starts on
/// `target`: pins the certificate and presents the token from its once
/// line, and ends the ssh session afterwards. In reverse mode this side
/// listens and the remote tern connects to it. ssh's time counts as setup.
async fn over_ssh<F, Fut>(
    target: &SshTarget,
    ssh: &SshOptions,
    connect: Connect,
    base: &ClientOptions,
    session: F,
) -> Result<client::Outcome>
where
    F: FnOnce(Endpoint, ClientOptions) -> Fut,
    Fut: std::future::Future<Output = tern_engine::Result<client::Outcome>>,
{
    let started = Instant::now();
    let callback = match connect {
        Connect::Reverse => Some(Arc::new(Callback::new(listen_any().await?))),
        Connect::Forward => None,
    };
    let connect_back = match &callback {
        Some(cb) => Some(cb.port()?),
        None => None,
    };
    let mut remote = Remote::start(target, ssh, connect_back).await?;
    let opts = match options::vouched_by_ssh(base, &target.host, &remote.line, callback.clone()) {
        Ok(opts) => opts,
        Err(e) => {
            remote.finish().await;
            return Err(e.into());
        }
    };
    let ep = remote.endpoint().await;
    let ssh_time = started.elapsed();
    let session = session(ep, opts);
    tokio::pin!(session);
    let result = match &callback {
        // A remote tern that ended cannot connect back: stop waiting for it.
        Some(cb) => tokio::select! {
            r = &mut session => r,
            () = remote.ended() => {
                cb.close();
                session.await
            }
        },
        None => session.await,
    };
    let said = remote.finish().await;
    match result {
        Ok(mut outcome) => {
            outcome.setup += ssh_time;
            Ok(outcome)
        }
        // The peer's own error message says it all; otherwise what the
        // remote logged may tell why the connection failed.
        Err(e) if said.trim().is_empty() || matches!(e, tern_engine::Error::Peer { .. }) => {
            Err(e.into())
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "via ssh to {} (the remote tern said: {})",
            target.host,
            said.trim().replace('\n', " | ")
        ))),
    }
}

/// `-z`.
fn connect_of(args: &SshArgs) -> Connect {
    if args.reverse_connect {
        Connect::Reverse
    } else {
        Connect::Forward
    }
}

/// A listener for reverse mode, on every address (IPv6 and IPv4 where the
/// host has both): the remote tern dials whichever its ssh came from.
async fn listen_any() -> Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind("[::]:0").await {
        Ok(l) => Ok(l),
        Err(_) => tokio::net::TcpListener::bind("0.0.0.0:0")
            .await
            .map_err(|e| tern_engine::Error::io("listen", "0.0.0.0:0", e).into()),
    }
}

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

async fn cp(args: CpArgs, started: Instant) -> Result<()> {
    raise_open_files();
    let checksum = options::checksum_of(args.checksum);
    let t = &args.transfer;
    let (dst_arg, src_args) = args.paths.split_last().expect("clap requires two paths");
    let dst = location::parse(dst_arg).map_err(usage)?;
    let srcs = src_args
        .iter()
        .map(|s| location::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    let sources = sources_of(&srcs)?;
    let progress = Arc::new(Progress::default());
    let console = Console::for_transfer(t);
    let display = console.progress(&progress);
    let protect = options::protect_of(t.protect);
    let recursive = args.recursive;
    let reverse = connect_of(&args.ssh);
    type Copied = (client::Outcome, &'static str, Via, Option<Consulted>);
    let result: Result<Copied> = async {
        match (&dst, sources) {
            (Location::Remote { endpoint, path }, Sources::Local(sources)) => {
                let (opts, consulted) = remote_options(t, options::copy_options(&args)?, endpoint, &console).await;
                let o = with_retries(t.retries, || async {
                    Ok(client::push(endpoint, &opts, sources.clone(), recursive, path.clone(), progress.clone()).await?)
                })
                .await?;
                Ok((o, "push", Via::Daemon(endpoint.clone()), consulted))
            }
            (Location::Ssh { target, path }, Sources::Local(sources)) => {
                warn_advisor_over_ssh(t, &console);
                let opts = options::copy_options(&args)?;
                let ssh = options::copy_ssh_options(&args)?;
                let o = with_retries(t.retries, || {
                    let (sources, path, progress) = (sources.clone(), path.clone(), progress.clone());
                    over_ssh(target, &ssh, reverse, &opts, move |ep, o| async move {
                        client::push(&ep, &o, sources, recursive, path, progress).await
                    })
                })
                .await?;
                Ok((o, "push", Via::Ssh(reverse), None))
            }
            (Location::Local(dest), Sources::Daemon(endpoint, paths)) => {
                let (opts, consulted) = remote_options(t, options::copy_options(&args)?, &endpoint, &console).await;
                let o = with_retries(t.retries, || async {
                    Ok(client::pull(&endpoint, &opts, paths.clone(), recursive, dest.clone(), progress.clone()).await?)
                })
                .await?;
                Ok((o, "pull", Via::Daemon(endpoint), consulted))
            }
            (Location::Local(dest), Sources::Ssh(target, paths)) => {
                warn_advisor_over_ssh(t, &console);
                let opts = options::copy_options(&args)?;
                let ssh = options::copy_ssh_options(&args)?;
                let o = with_retries(t.retries, || {
                    let (paths, dest, progress) = (paths.clone(), dest.clone(), progress.clone());
                    over_ssh(&target, &ssh, reverse, &opts, move |ep, o| async move {
                        client::pull(&ep, &o, paths, recursive, dest, progress).await
                    })
                })
                .await?;
                Ok((o, "pull", Via::Ssh(reverse), None))
            }
            (Location::Local(dest), Sources::Local(sources)) => {
                if t.advisor.is_some() {
                    console.warn("--advisor is for transfers with a daemon; ignored for a local copy");
                }
                let o = copy_local(&sources, dest, &args, progress.clone()).await?;
                Ok((o, "local", Via::Local, None))
            }
            _ => {
                bail!(usage("copying from one remote place to another is not supported yet; copy through a local directory"))
            }
        }
    }
    .await;
    display.finish();
    let (outcome, direction, via, consulted) = result?;
    if let Via::Daemon(ep) = &via {
        console.first_contact(&outcome, ep);
    }
    let remote = !matches!(via, Via::Local);
    let advisor = match (consulted, &via) {
        (Some(c), Via::Daemon(ep)) => {
            let way = if direction == "push" {
                "send"
            } else {
                "receive"
            };
            Some(c.report(ep, &outcome.stats, "tern cp", way, &console).await)
        }
        _ => None,
    };
    let report = Report::new(ReportInput {
        command: "cp",
        direction,
        via: via.name(),
        stats: &outcome.stats,
        started,
        setup: outcome.setup,
        protect: if remote { protect } else { Protect::Clear },
        checksum: Some(checksum),
        block_size: t.block_size,
        fingerprint: remote.then(|| outcome.fingerprint.clone()),
        advisor,
    });
    console.report(&report);
    partial_result(&outcome.stats)
}

/// A copy that completed except for some entries is exit 23 (as rsync's);
/// one whose only entry failed fails as that entry did (a single file into
/// an unwritable directory is a permission error, 4, as it always was).
fn partial_result(stats: &tern_engine::transfer::TransferStats) -> Result<()> {
    match stats.failed.as_slice() {
        [] => Ok(()),
        [only] if stats.files.is_empty() && stats.skipped.is_empty() => {
            bail!(tern_engine::Error::Entry {
                code: only.code,
                message: format!("{}: {}", only.path, only.message),
            })
        }
        failed => bail!(Partial(failed.len())),
    }
}

async fn copy_local(
    sources: &[PathBuf],
    dest: &std::path::Path,
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
    })
}

async fn perf(args: PerfArgs, started: Instant) -> Result<()> {
    let t = &args.transfer;
    let console = Console::for_transfer(t);
    let far = match location::parse(&args.target).map_err(usage)? {
        Location::Remote { endpoint, path } if path.is_empty() => Ok(endpoint),
        Location::Ssh { target, path } if path.is_empty() => Err(target),
        Location::Remote { .. } | Location::Ssh { .. } => {
            return Err(usage(
                "tern perf takes tern://HOST[:PORT] or [USER@]HOST: without a path",
            ));
        }
        Location::Local(_) => {
            return Err(usage(
                "tern perf needs a daemon (tern://HOST[:PORT]) or an ssh host ([USER@]HOST:)",
            ));
        }
    };
    let duration = match (args.size, args.time) {
        (Some(_), _) => None,
        (None, Some(secs)) if secs > 0.0 && secs < 1e6 => Some(Duration::from_secs_f64(secs)),
        (None, Some(secs)) => return Err(usage(format!("--time must be positive, not {secs}"))),
        (None, None) => Some(Duration::from_secs(10)),
    };
    let (opts, consulted) = match &far {
        Ok(endpoint) => remote_options(t, options::measure_options(t)?, endpoint, &console).await,
        Err(_) => {
            warn_advisor_over_ssh(t, &console);
            (options::measure_options(t)?, None)
        }
    };
    let progress = Arc::new(Progress::default());
    let display = console.progress(&progress);
    let (size, reverse) = (args.size, args.reverse);
    let result = match &far {
        Ok(endpoint) => client::perf(endpoint, &opts, size, duration, reverse, progress)
            .await
            .map_err(anyhow::Error::from),
        Err(target) => {
            let ssh = options::ssh_options(&args.ssh)?;
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
        Ok(endpoint) => {
            console.first_contact(&outcome, &endpoint);
            let advisor = match consulted {
                Some(c) => Some(
                    c.report(&endpoint, &outcome.stats, "tern perf", direction, &console)
                        .await,
                ),
                None => None,
            };
            (Via::Daemon(endpoint), advisor)
        }
        Err(_) => (Via::Ssh(connect_of(&args.ssh)), None),
    };
    let report = Report::new(ReportInput {
        command: "perf",
        direction,
        via: via.name(),
        stats: &outcome.stats,
        started,
        setup: outcome.setup,
        protect: opts.protect,
        checksum: None,
        block_size: t.block_size,
        fingerprint: Some(outcome.fingerprint.clone()),
        advisor,
    });
    console.report(&report);
    Ok(())
}

fn default_state_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(d).join("tern"));
    }
    let home =
        std::env::var_os("HOME").context("neither --state-dir, XDG_STATE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/state/tern"))
}

fn listen_addr(listen: &str) -> Result<SocketAddr> {
    listen.parse().map_err(|_| {
        usage(format!(
            "--listen wants ADDR:PORT (e.g. 0.0.0.0:4747 or [::]:4747), not '{listen}'"
        ))
    })
}

async fn serve_cmd(args: ServeArgs) -> Result<()> {
    raise_open_files();
    if args.once {
        return serve_once(args).await;
    }
    if let Some(http) = &args.http {
        advise::http_addr(http).map_err(usage)?;
    }
    let state_dir = match &args.state_dir {
        Some(d) => d.clone(),
        None => default_state_dir()?,
    };
    let listen = args.listen.as_deref().unwrap_or("[::]:4747");
    let addr = listen_addr(listen)?;
    let given_root = args
        .root
        .as_ref()
        .expect("clap requires --root without --once");
    let root = given_root
        .canonicalize()
        .map_err(|e| tern_engine::Error::io("open root", given_root, e))?;
    if !root.is_dir() {
        return Err(usage(format!(
            "--root {} is not a directory",
            root.display()
        )));
    }
    let identity = identity_of(&args)?;
    let site = match (&args.client_ca, &args.authz) {
        (Some(ca), Some(authz)) => {
            let authz = Authz::load(authz)?;
            if authz.is_empty() {
                tracing::warn!("--authz grants nothing: every client will be refused");
            }
            Some(SiteAuth {
                client_roots: load_roots(ca)?,
                authz: Arc::new(authz),
            })
        }
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| tern_engine::Error::io("listen", listen, e))?;
    let bound = listener.local_addr()?;
    let stop = stop_on_signal();
    let advisor = match &args.http {
        Some(http) => Some(advise::start(&args.advisor, http, &state_dir, stop.clone()).await?),
        None => None,
    };
    let site_rules = site.as_ref().map(|s| s.authz.len());
    serve_banner(
        &Console::for_serve(&args),
        bound,
        &root,
        &identity.fingerprint,
        site_rules,
        advisor.as_ref(),
    );
    let mut opts = options::server_options(&args, root);
    opts.site = site;
    let _udp_probe = if args.no_udp_probe {
        None
    } else {
        crate::probe::start_responder(bound).await
    };
    opts.on_session_done = advisor.as_ref().map(|a| a.advisor.session_hook());
    serve(listener, &identity, opts, advise::stopped(stop)).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Raises the open-files limit to the hard limit, as servers do: a daemon,
/// or a copy of many streams, needs more than the usual soft default.
fn raise_open_files() {
    match tern_engine::server::raise_open_file_limit() {
        Ok((before, after)) if after > before => {
            tracing::debug!("open files: soft limit raised from {before} to {after}");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open-files limit: {e}"),
    }
}

/// The daemon's startup lines: where it listens, its fingerprint, site
/// mode, and the advisor when it runs one.
fn serve_banner(
    console: &Console,
    bound: SocketAddr,
    root: &std::path::Path,
    fingerprint: &str,
    site_rules: Option<usize>,
    advisor: Option<&advise::Running>,
) {
    let mut line = serde_json::json!({"listen": bound.to_string(), "root": root, "fingerprint": fingerprint, "authz_rules": site_rules});
    if let Some(a) = advisor {
        line["http"] = a.addr.to_string().into();
    }
    let mut text = format!(
        "tern serve: listening on {bound}, root {}\ntern serve: certificate fingerprint {fingerprint}\n",
        root.display()
    );
    if let Some(n) = site_rules {
        text.push_str(&format!(
            "tern serve: site mode: client certificates required, {n} authorization rule(s)\n"
        ));
    }
    if let Some(a) = advisor {
        text.push_str(&format!(
            "tern serve: advisor on http://{} (archive {})\n",
            a.addr,
            a.advisor.service().store().location()
        ));
    }
    console.banner(line, text);
}

/// A stop flag that turns true on SIGINT or SIGTERM.
fn stop_on_signal() -> advise::Stop {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = tx.send(true);
    });
    rx
}

fn identity_of(args: &ServeArgs) -> Result<ServerIdentity> {
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        return Ok(ServerIdentity::from_pem(cert, key)?);
    }
    let state_dir = match &args.state_dir {
        Some(d) => d.clone(),
        None => default_state_dir()?,
    };
    Ok(ServerIdentity::load_or_create(&state_dir)?)
}

/// `tern serve --once`: prints the once line on stdout for the ssh client
/// that started it, serves its one session, and exits.
async fn serve_once(args: ServeArgs) -> Result<()> {
    let identity = identity_of(&args)?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .map_or_else(std::env::current_dir, Ok)
        .context("no home directory (HOME) and no current directory")?;
    let opts = options::once_options(&args, home);
    let ssh = std::env::var("SSH_CONNECTION").ok();
    let server = match &args.connect {
        Some(target) => {
            let target = once_dial_target(target, ssh.as_deref())?;
            OnceServer::dial(target, &identity, opts)?
        }
        None => once_listener(args.listen.as_deref(), ssh.as_deref(), &identity, opts).await?,
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", server.line().encode())
            .and_then(|()| out.flush())
            .context("printing the once line (is the client gone?)")?;
    }
    let client_gone = async {
        tokio::select! {
            () = stdin_closed() => tracing::info!("stdin closed: the client went away"),
            () = shutdown_signal() => {}
        }
    };
    server.run(client_gone).await?;
    Ok(())
}

/// The address ssh came in on (`SSH_CONNECTION` = client ip, client port,
/// server ip, server port), else every address; any port unless --listen.
async fn once_listener(
    listen: Option<&str>,
    ssh_connection: Option<&str>,
    identity: &ServerIdentity,
    opts: OnceOptions,
) -> Result<OnceServer> {
    let candidates: Vec<SocketAddr> = match (listen, ssh_connection_ip(ssh_connection, 2)) {
        (Some(l), _) => vec![listen_addr(l)?],
        (None, Some(ip)) => vec![SocketAddr::new(ip, 0)],
        (None, None) => vec![
            SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
            SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)),
        ],
    };
    let mut last = None;
    for addr in candidates {
        match OnceServer::listen(addr, identity, opts.clone()).await {
            Ok(server) => return Ok(server),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one candidate").into())
}

/// Field `index` of `SSH_CONNECTION`, as an address.
fn ssh_connection_ip(ssh_connection: Option<&str>, index: usize) -> Option<std::net::IpAddr> {
    ssh_connection?.split_whitespace().nth(index)?.parse().ok()
}

/// `--connect HOST:PORT`, where an empty HOST is the client's address from
/// `SSH_CONNECTION`.
fn once_dial_target(arg: &str, ssh_connection: Option<&str>) -> Result<Endpoint> {
    match arg.strip_prefix(':') {
        Some(port) => {
            let port: u16 = port
                .parse()
                .map_err(|_| usage(format!("--connect {arg}: bad port")))?;
            let ip = ssh_connection_ip(ssh_connection, 0).ok_or_else(|| {
                usage(format!(
                    "--connect {arg} takes the host from SSH_CONNECTION, which is not set; name the host"
                ))
            })?;
            Ok(Endpoint {
                host: ip.to_string(),
                port,
            })
        }
        None => location::parse_endpoint(arg).map_err(|e| usage(format!("--connect {arg}: {e}"))),
    }
}

/// Completes when stdin reaches its end: ssh closed the channel. Read on a
/// plain thread, which process exit ends, unlike the runtime's blocking
/// pool, which would wait for the read.
async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 512];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn lost() -> anyhow::Error {
        tern_engine::Error::PeerGone("connection reset".into()).into()
    }

    fn unreachable() -> anyhow::Error {
        tern_engine::Error::Connect {
            addr: "192.0.2.1:4747".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        }
        .into()
    }

    #[test]
    fn backoff_doubles_from_one_second_up_to_thirty() {
        let waits: Vec<u64> = (1..=8).map(|a| retry_backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_connection_is_retried_with_backoff_until_it_succeeds() {
        let runs = Cell::new(0);
        let started = tokio::time::Instant::now();
        let got = with_retries(3, || {
            runs.set(runs.get() + 1);
            let n = runs.get();
            async move { if n < 3 { Err(lost()) } else { Ok(n) } }
        })
        .await
        .unwrap();
        assert_eq!(got, 3);
        // Waited 1 s then 2 s (paused time advances only by the sleeps).
        assert_eq!(started.elapsed().as_secs(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_limit_and_report_the_first_error() {
        let runs = Cell::new(0);
        let e = with_retries(2, || {
            runs.set(runs.get() + 1);
            let n = runs.get();
            async move {
                Err::<(), _>(if n == 1 {
                    lost()
                } else {
                    // Later runs fail in reaching the peer (a daemon not back yet).
                    unreachable()
                })
            }
        })
        .await
        .unwrap_err();
        assert_eq!(runs.get(), 3, "one run and two retries");
        assert!(format!("{e:#}").contains("connection reset"), "{e:#}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_never_reached_and_a_lasting_error_are_not_retried() {
        for (error, what) in [
            (unreachable as fn() -> anyhow::Error, "never reached"),
            (
                || tern_engine::Error::NoSpace("/data/x".into()).into(),
                "disk full",
            ),
        ] {
            let runs = Cell::new(0);
            let e = with_retries(5, || {
                runs.set(runs.get() + 1);
                async move { Err::<(), _>(error()) }
            })
            .await
            .unwrap_err();
            assert_eq!(runs.get(), 1, "{what}: {e:#}");
        }
    }
}
