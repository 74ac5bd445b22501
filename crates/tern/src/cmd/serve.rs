//! `tern serve`: the daemon, and (`--once`) the one-session server that a
//! client starts through ssh.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use tern_engine::authz::Authz;
use tern_engine::client::Endpoint;
use tern_engine::once::{DialPath, OnceOptions, OnceServer};
use tern_engine::server::{LiveSessions, SiteAuth, serve};
use tern_engine::tls::{ServerIdentity, load_roots};

use crate::addr::{http_addr, listen_addr};
use crate::advisor::Running;
use crate::cli::ServeArgs;
use crate::console::Console;
use crate::error::usage;
use crate::location;
use crate::options;
use crate::signals::{self, shutdown_signal, stdin_closed, stopped};
use crate::{host, responder};

/// Runs the daemon until SIGINT or SIGTERM (and its grace), or with
/// `--once` one session.
pub async fn run(args: ServeArgs) -> Result<()> {
    host::raise_open_files();
    if args.once {
        return serve_once(args).await;
    }
    if let Some(http) = &args.http {
        http_addr(http).map_err(usage)?;
    }
    let state_dir = host::state_dir(args.state_dir.as_deref())?;
    let listen = args.listen.as_deref().unwrap_or("[::]:4747");
    let addr = listen_addr(listen)?;
    let root = root_of(&args)?;
    let identity = identity_of(&args)?;
    let site = site_of(&args)?;
    let listener = tern_engine::net::listen(addr, args.mptcp)
        .await
        .map_err(|e| tern_engine::Error::io("listen", listen, e))?;
    let bound = listener.local_addr()?;
    let stop = signals::stop_on_signal();
    let live = Arc::new(LiveSessions::default());
    let advisor = match &args.http {
        Some(http) => Some(
            crate::advisor::start(
                &args.advisor,
                http,
                &state_dir,
                Some(live.clone()),
                stop.clone(),
            )
            .await?,
        ),
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
    opts.advertise = options::advertise_of(&args, bound.port())?;
    let _udp_probe = if args.no_udp_probe {
        None
    } else {
        responder::start_responder(bound).await
    };
    opts.on_session_done = advisor.as_ref().map(|a| a.advisor.session_hook());
    opts.live = Some(live);
    serve(listener, &identity, opts, stopped(stop)).await?;
    tracing::info!("stopped");
    Ok(())
}

/// `--root`, which must be a directory.
fn root_of(args: &ServeArgs) -> Result<PathBuf> {
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
    Ok(root)
}

/// Site mode (`--client-ca` and `--authz`), when asked for.
fn site_of(args: &ServeArgs) -> Result<Option<SiteAuth>> {
    let (Some(ca), Some(authz)) = (&args.client_ca, &args.authz) else {
        return Ok(None);
    };
    let authz = Authz::load(authz)?;
    if authz.is_empty() {
        tracing::warn!("--authz grants nothing: every client will be refused");
    }
    Ok(Some(SiteAuth {
        client_roots: load_roots(ca)?,
        authz: Arc::new(authz),
    }))
}

/// The daemon's startup lines: where it listens, its fingerprint, site
/// mode, and the advisor when it runs one.
fn serve_banner(
    console: &Console,
    bound: SocketAddr,
    root: &Path,
    fingerprint: &str,
    site_rules: Option<usize>,
    advisor: Option<&Running>,
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

/// The certificate and key: `--tls-cert` and `--tls-key`, or the
/// self-signed pair of the state directory (made on first start).
fn identity_of(args: &ServeArgs) -> Result<ServerIdentity> {
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        return Ok(ServerIdentity::from_pem(cert, key)?);
    }
    let state_dir = host::state_dir(args.state_dir.as_deref())?;
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
            let others = args
                .connect_paths
                .iter()
                .map(|p| dial_path(p))
                .collect::<Result<Vec<_>>>()?;
            OnceServer::dial(target, others, &identity, opts)?
        }
        None if args.every_address => {
            let server = once_listener(None, None, &identity, opts).await?;
            // The client may know this host only by an ssh alias.
            server.showing(ssh_connection_ip(ssh.as_deref(), 2))
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

/// One of `--connect-paths`: `ADDR` or `ADDR@FROM`.
fn dial_path(arg: &str) -> Result<DialPath> {
    let ip = |s: &str| {
        s.trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .map_err(|_| usage(format!("--connect-paths {arg}: '{s}' is not an IP address")))
    };
    Ok(match arg.split_once('@') {
        Some((to, from)) => DialPath {
            to: ip(to)?,
            from: Some(ip(from)?),
        },
        None => DialPath {
            to: ip(arg)?,
            from: None,
        },
    })
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
