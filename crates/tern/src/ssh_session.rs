//! A session with a `tern serve --once` that ssh starts at the far end of
//! a `[USER@]HOST:` location.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tern_engine::client::Callback;
use tern_engine::client::{self, ClientOptions, Endpoint};
use tern_engine::paths::PathChoice;

use crate::cli::SshArgs;
use crate::location::SshTarget;
use crate::options;
use crate::report::Connect;
use crate::ssh::{CONNECT_PATHS, EVERY_ADDRESS, Remote, SshOptions};

/// Runs one session against a `tern serve --once` that ssh starts on
/// `target`: pins the certificate and presents the token from its once
/// line, and ends the ssh session afterwards. In reverse mode this side
/// listens and the remote tern connects to it. ssh's time counts as setup.
pub async fn over_ssh<F, Fut>(
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
    let (mut outcome, ssh_time) = with_once_server(target, ssh, connect, base, session).await?;
    outcome.setup += ssh_time;
    Ok(outcome)
}

/// Runs `session` against a `tern serve --once` that ssh starts on
/// `target` (as [`over_ssh`] does), and says how long ssh took to start it.
pub async fn with_once_server<T, F, Fut>(
    target: &SshTarget,
    ssh: &SshOptions,
    connect: Connect,
    base: &ClientOptions,
    session: F,
) -> Result<(T, Duration)>
where
    F: FnOnce(Endpoint, ClientOptions) -> Fut,
    Fut: std::future::Future<Output = tern_engine::Result<T>>,
{
    let started = Instant::now();
    let callback = match connect {
        Connect::Reverse => {
            let paths = match &base.paths {
                PathChoice::Auto => tern_engine::paths::interface_addresses(),
                PathChoice::Off | PathChoice::Given(_) => Vec::new(),
            };
            Some(Arc::new(
                Callback::new(listen_any().await?).with_paths(paths),
            ))
        }
        Connect::Forward => None,
    };
    let (mut remote, opts) = start_once(target, ssh, callback.clone(), base).await?;
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
    explained(result, &[(target, said)]).map(|outcome| (outcome, ssh_time))
}

/// Runs `session` against two `tern serve --once` that ssh starts on
/// `targets` (each connected to as [`with_once_server`] does, forward),
/// and says how long ssh took to start them.
pub async fn with_two_once_servers<T, F, Fut>(
    targets: (&SshTarget, &SshTarget),
    ssh: &SshOptions,
    base: &ClientOptions,
    session: F,
) -> Result<(T, Duration)>
where
    F: FnOnce((Endpoint, ClientOptions), (Endpoint, ClientOptions)) -> Fut,
    Fut: std::future::Future<Output = tern_engine::Result<T>>,
{
    let started = Instant::now();
    let (remote_a, opts_a) = start_once(targets.0, ssh, None, base).await?;
    let (remote_b, opts_b) = match start_once(targets.1, ssh, None, base).await {
        Ok(started) => started,
        Err(e) => {
            remote_a.finish().await;
            return Err(e);
        }
    };
    let a = (remote_a.endpoint().await, opts_a);
    let b = (remote_b.endpoint().await, opts_b);
    let ssh_time = started.elapsed();
    let result = session(a, b).await;
    let said = [
        (targets.0, remote_a.finish().await),
        (targets.1, remote_b.finish().await),
    ];
    explained(result, &said).map(|outcome| (outcome, ssh_time))
}

/// Starts `tern serve --once` on `target` through ssh (connecting back to
/// `callback` in reverse mode), and the options that reach it.
async fn start_once(
    target: &SshTarget,
    ssh: &SshOptions,
    callback: Option<Arc<Callback>>,
    base: &ClientOptions,
) -> Result<(Remote, ClientOptions)> {
    let connect_back = match &callback {
        Some(cb) => Some(cb.port()?),
        None => None,
    };
    let mut ssh = ssh.clone();
    ssh.every_address = callback.is_none() && base.paths != PathChoice::Off;
    if let Some(callback) = &callback {
        ssh.connect_paths = connect_paths(callback, &base.paths)?;
    }
    let remote = match Remote::start(target, &ssh, connect_back).await {
        // A remote tern from before multi-path: one path, as it can.
        Err(e) if ssh.every_address && e.message.contains(EVERY_ADDRESS) => {
            tracing::info!(
                "the tern on {} cannot listen on every address: one path",
                target.host
            );
            ssh.every_address = false;
            Remote::start(target, &ssh, connect_back).await?
        }
        Err(e) if !ssh.connect_paths.is_empty() && e.message.contains(CONNECT_PATHS) => {
            tracing::info!(
                "the tern on {} cannot dial more than one path back: one path",
                target.host
            );
            ssh.connect_paths.clear();
            Remote::start(target, &ssh, connect_back).await?
        }
        started => started?,
    };
    match options::vouched_by_ssh(base, &ssh, &target.host, &remote.line, callback) {
        Ok(opts) => Ok((remote, opts)),
        Err(e) => {
            remote.finish().await;
            Err(e.into())
        }
    }
}

/// A session's result, its error with what the remote terns logged when
/// that may tell why a connection failed.
fn explained<T>(result: tern_engine::Result<T>, said: &[(&SshTarget, String)]) -> Result<T> {
    let told: Vec<String> = said
        .iter()
        .filter(|(_, s)| !s.trim().is_empty())
        .map(|(t, s)| {
            format!(
                "via ssh to {} (the remote tern said: {})",
                t.host,
                s.trim().replace('\n', " | ")
            )
        })
        .collect();
    match result {
        Ok(outcome) => Ok(outcome),
        // The peer's own error message says it all.
        Err(e) if told.is_empty() || matches!(e, tern_engine::Error::Peer { .. }) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context(told.join("; "))),
    }
}

/// In reverse mode, what the remote tern is told to dial besides this
/// host's address ssh came from: every other address of this host
/// (`--paths auto`, the remote keeps those of the right family), or each
/// `--path SRC=DST` (it dials SRC from DST).
fn connect_paths(callback: &Callback, paths: &PathChoice) -> Result<Vec<String>> {
    match paths {
        PathChoice::Off => Ok(Vec::new()),
        PathChoice::Auto => Ok(callback.paths().iter().map(|ip| ip.to_string()).collect()),
        PathChoice::Given(specs) => {
            let own = tern_engine::paths::interface_addresses();
            specs
                .iter()
                .map(|spec| match spec.local {
                    Some(local) if !own.contains(&local) => Err(crate::error::usage(format!(
                        "--path {local}={}: with -z the remote tern dials {local}, which is not \
                         an address of this host",
                        spec.remote
                    ))),
                    Some(local) => Ok(format!("{local}@{}", spec.remote)),
                    None => Err(crate::error::usage(format!(
                        "--path {}: with -z the remote tern dials this host, so a path needs \
                     this host's address on it: --path SRC={} (SRC: this host's address)",
                        spec.remote, spec.remote
                    ))),
                })
                .collect()
        }
    }
}

/// `-z`.
pub fn connect_of(args: &SshArgs) -> Connect {
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
