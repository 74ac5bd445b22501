//! The command line turned into engine options, in one place: every
//! converter from the CLI's enums to the protocol's and engine's, and
//! every construction of [`ClientOptions`] (for a daemon, over ssh, with
//! the advisor's advice), [`TransferParams`] of a local copy,
//! [`ServerOptions`], [`OnceOptions`] and [`AdvisorOptions`].
//!
//! [`client_options`] is the only place a `ClientOptions` is built; the
//! few functions below it that change one (the copy's choices, the
//! advice, the trust ssh vouched for) are here too.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tern_advisor::AdvisorOptions;
use tern_advisor::aggregate::AggregationPolicy;
use tern_advisor::scheduler::SchedulerOptions;
use tern_drs::WindowMode;
use tern_engine::client::ClientOptions;
use tern_engine::client::{Callback, Reach, Trust};
use tern_engine::once::OnceOptions;
use tern_engine::paths::{Advertise, PathChoice};
use tern_engine::server::ServerOptions;
use tern_engine::session::Choices;
use tern_engine::tls::{ClientCert, KnownHosts, load_roots};
use tern_engine::transfer::TransferParams;
use tern_engine::tuning::{AUTO_START_STREAMS, Tuning};
use tern_proto::{ChecksumAlg, Compression, OnceLine, Protect, SkipExisting};

use crate::cli::{
    AdvisorArgs, ChecksumArg, CompressArg, CpArgs, EngineArgs, PathsArg, ProtectArg, ServeArgs,
    SkipArg, SshArgs, Streams, TransferArgs, WindowArg,
};
use crate::error::usage;
use crate::ssh::SshOptions;

/// `--protect`.
pub fn protect_of(p: ProtectArg) -> Protect {
    match p {
        ProtectArg::Private => Protect::Private,
        ProtectArg::Safe => Protect::Safe,
        ProtectArg::Clear => Protect::Clear,
    }
}

/// `--checksum`.
pub fn checksum_of(c: ChecksumArg) -> ChecksumAlg {
    match c {
        ChecksumArg::Xxh3 => ChecksumAlg::Xxh3,
        ChecksumArg::Blake3 => ChecksumAlg::Blake3,
        ChecksumArg::Crc32c => ChecksumAlg::Crc32c,
        ChecksumArg::Adler32 => ChecksumAlg::Adler32,
        ChecksumArg::Md5 => ChecksumAlg::Md5,
        ChecksumArg::Sha256 => ChecksumAlg::Sha256,
    }
}

fn compression_of(c: CompressArg) -> Compression {
    match c {
        CompressArg::Auto => Compression::Auto,
        CompressArg::Zstd => Compression::Zstd,
        CompressArg::Lz4 => Compression::Lz4,
        CompressArg::None => Compression::None,
    }
}

/// What the user chose about compression and stalls; skipping files and
/// special bits are for `cp` to add ([`copy_choices`]): `perf` has no
/// destination.
fn choices_of(t: &TransferArgs) -> Choices {
    Choices {
        compression: compression_of(t.compress),
        skip_existing: SkipExisting::Never,
        stall_timeout: (t.stall_timeout > 0.0).then(|| Duration::from_secs_f64(t.stall_timeout)),
        keep_special_bits: false,
    }
}

/// A copy's choices: the transfer's, `--skip-existing` and
/// `--keep-special-bits`.
fn copy_choices(args: &CpArgs) -> Choices {
    Choices {
        skip_existing: skip_of(args.skip_existing),
        keep_special_bits: args.keep_special_bits,
        ..choices_of(&args.transfer)
    }
}

/// `--skip-existing`.
fn skip_of(skip: SkipArg) -> SkipExisting {
    match skip {
        SkipArg::Size => SkipExisting::Size,
        SkipArg::Mtime => SkipExisting::Mtime,
        SkipArg::Digest => SkipExisting::Digest,
        SkipArg::Never => SkipExisting::Never,
    }
}

/// `--block-size`, within what the protocol allows.
fn block_size(t: &EngineArgs) -> Result<u32> {
    let bs = t.block_size;
    if !(u64::from(tern_engine::server::MIN_BLOCK_SIZE)..=u64::from(tern_proto::MAX_BLOCK_SIZE))
        .contains(&bs)
    {
        return Err(usage(format!(
            "--block-size must be between 4K and 64M, not {bs}"
        )));
    }
    Ok(bs as u32)
}

/// `--window` (or the advisor's window).
fn window_mode(w: WindowArg) -> WindowMode {
    match w {
        WindowArg::Auto => WindowMode::Auto,
        WindowArg::Kernel => WindowMode::Kernel,
        WindowArg::Fixed(n) => WindowMode::Fixed(n),
    }
}

/// The tuning asked for on the command line; a congestion control this
/// process cannot use is a usage error, caught before connecting.
fn tuning_of(t: &EngineArgs) -> Result<Tuning> {
    // TCP_INFO of an MPTCP socket describes one subflow, so neither
    // tern's buffer sizing nor its stream-count controller can read the
    // connection's rate: the kernel sizes MPTCP's buffers, and the count
    // stays where it starts.
    let window = match t.window.unwrap_or(WindowArg::Auto) {
        WindowArg::Auto if t.mptcp => WindowMode::Kernel,
        w => window_mode(w),
    };
    let congestion = if t.congestion == "auto" {
        String::new()
    } else {
        let usable = &tern_drs::host::usable_congestion().usable;
        if !usable.contains(&t.congestion) {
            let privileged = tern_drs::socket::privileged();
            return Err(usage(format!(
                "--cc {}: not usable here (usable: {}{})",
                t.congestion,
                usable.join(" "),
                if privileged {
                    ""
                } else {
                    "; root may use any of net.ipv4.tcp_available_congestion_control"
                }
            )));
        }
        t.congestion.clone()
    };
    Ok(Tuning {
        window,
        congestion,
        auto_streams: t.streams == Streams::Auto && !t.mptcp,
        streams_from_rtt: t.streams == Streams::Auto,
        script: Vec::new(),
        known_rate_bps: None,
        streams_settled: false,
        // Set once the daemon has named its paths.
        other_paths: 0,
        reserved: Vec::new(),
        stream_limit: None,
    })
}

/// Reserved paths need a stream each besides the first, and pacing that
/// MPTCP sockets do not take.
fn check_reservations(t: &EngineArgs) -> Result<()> {
    let reserved = t.path.iter().filter(|p| p.reserved_bps.is_some()).count();
    if reserved == 0 {
        return Ok(());
    }
    if t.mptcp {
        return Err(usage(
            "--mptcp with a reserved path (rate=): MPTCP spreads each connection itself, so \
             no stream could be held to the reserved path; use one or the other",
        ));
    }
    let most = match t.streams {
        Streams::Fixed(n) => n,
        Streams::Auto => t.max_streams,
    };
    {
        let n = most;
        if usize::from(n) <= reserved {
            return Err(usage(format!(
                "{n} stream(s) at most with {reserved} reserved path(s): each reserved path \
                 takes a stream of its own besides the first; allow {} or more (-P or \
                 --max-streams)",
                reserved + 1
            )));
        }
    }
    Ok(())
}

/// The options of a transfer with a daemon (and, adapted by
/// [`vouched_by_ssh`], over ssh): the only construction of
/// [`ClientOptions`].
fn client_options(
    t: &EngineArgs,
    checksum: ChecksumAlg,
    choices: Choices,
) -> Result<ClientOptions> {
    check_reservations(t)?;
    let known_hosts = t
        .known_hosts
        .clone()
        .or_else(KnownHosts::default_path)
        .map(|path| KnownHosts { path });
    if let Some(fp) = &t.fingerprint {
        if !fp.starts_with("SHA256:") {
            return Err(usage(format!(
                "--fingerprint must look like SHA256:…, not '{fp}'"
            )));
        }
    }
    let (streams, max_streams) = match t.streams {
        Streams::Auto => (AUTO_START_STREAMS.min(t.max_streams), t.max_streams),
        Streams::Fixed(n) => (n, n),
    };
    Ok(ClientOptions {
        streams,
        max_streams,
        tuning: tuning_of(t)?,
        rate_limit: t.rate_limit,
        block_size: block_size(t)?,
        checksum,
        protect: protect_of(t.protect),
        trust: Trust::choose(
            t.ca.as_deref().map(load_roots).transpose()?,
            t.fingerprint.clone(),
            known_hosts,
        ),
        client_cert: match (&t.cert, &t.key) {
            (Some(cert), Some(key)) => Some(ClientCert::from_pem(cert, key)?),
            _ => None,
        },
        wrap: crate::fault::from_env(),
        daemon_hello: None,
        connect_timeout: Duration::from_secs(15),
        io_timeout: Duration::from_secs_f64(t.io_timeout),
        once_token: None,
        peer_pass: None,
        reach: Reach::Dial,
        choices,
        paths: match (t.paths_mode, t.path.is_empty()) {
            (PathsArg::Off, _) => PathChoice::Off,
            // MPTCP spreads each connection itself.
            (PathsArg::Auto, true) if t.mptcp => PathChoice::Off,
            (PathsArg::Auto, true) => PathChoice::Auto,
            (PathsArg::Auto, false) => PathChoice::Given(t.path.clone()),
        },
        mptcp: t.mptcp,
    })
}

/// The options of `tern cp` with a daemon or over ssh: [`client_options`]
/// with the copy's choices.
pub fn copy_options(args: &CpArgs) -> Result<ClientOptions> {
    client_options(
        &args.transfer.engine,
        checksum_of(args.checksum),
        copy_choices(args),
    )
}

/// The options a third-party copy's daemons run their session with: as
/// `copy_options`, except that `--cc` is the daemons' to judge (the dialer
/// refuses one it may not use), not this host's.
pub fn third_party_options(args: &CpArgs) -> Result<ClientOptions> {
    let mut engine = args.transfer.engine.clone();
    let named = std::mem::replace(&mut engine.congestion, "auto".into());
    let mut opts = client_options(&engine, checksum_of(args.checksum), copy_choices(args))?;
    if named != "auto" {
        opts.tuning.congestion = named;
    }
    Ok(opts)
}

/// The options of `tern perf` and the advisor's engine probes: nothing is
/// stored, so any digest does.
pub fn measure_options(t: &TransferArgs) -> Result<ClientOptions> {
    client_options(&t.engine, ChecksumAlg::Xxh3, choices_of(t))
}

/// The options of `tern probe --throughput`: [`measure_options`] with the
/// defaults of the choices `probe` does not offer.
pub fn probe_options(t: &EngineArgs) -> Result<ClientOptions> {
    let choices = Choices {
        skip_existing: SkipExisting::Never,
        ..Choices::default()
    };
    client_options(t, ChecksumAlg::Xxh3, choices)
}

/// The options of `tern perf` with its defaults (trust on first use, in
/// the usual known_hosts), as the advisor's engine probes run it.
pub fn default_measure_options() -> Result<ClientOptions> {
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        transfer: TransferArgs,
    }
    let defaults = <Defaults as clap::Parser>::try_parse_from(["tern"])?;
    measure_options(&defaults.transfer)
}

/// Where a transfer starts on an advisor's advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advised {
    /// Streams to start with (when `--streams auto`).
    pub streams: Option<u16>,
    /// The window (the advisor's unless `--window`).
    pub window: WindowArg,
}

/// Starts the transfer of `opts` from the advice.
pub fn apply_advice(opts: &mut ClientOptions, advised: Advised) {
    if let Some(streams) = advised.streams {
        opts.streams = streams;
        opts.max_streams = opts.max_streams.max(streams);
        opts.tuning.streams_from_rtt = false;
    }
    opts.tuning.window = window_mode(advised.window);
}

/// The options of one session with the `tern serve --once` that ssh
/// started on `host` and that printed `line`: ssh vouched for its
/// fingerprint, so that is pinned (no known_hosts, and a CA has nothing to
/// add), and its token is presented; in reverse mode its connections come
/// to `callback`. A `--fingerprint` that differs is refused.
pub fn vouched_by_ssh(
    base: &ClientOptions,
    ssh: &SshOptions,
    host: &str,
    line: &OnceLine,
    callback: Option<Arc<Callback>>,
) -> Result<ClientOptions, tern_engine::Error> {
    let expected = ssh.expected_fingerprint.as_deref();
    if let Some(pinned) = expected.filter(|p| *p != line.fingerprint) {
        return Err(tern_engine::Error::FingerprintMismatch {
            host: host.to_string(),
            expected: pinned.to_string(),
            actual: line.fingerprint.clone(),
            origin: tern_engine::error::PinOrigin::Flag,
        });
    }
    let mut opts = base.clone();
    opts.trust = Trust::Ssh(line.fingerprint.clone());
    opts.once_token = Some(line.token);
    opts.reach = match callback {
        Some(cb) => Reach::Callback(cb),
        None => Reach::Dial,
    };
    Ok(opts)
}

/// The parameters of a copy between local paths.
pub fn local_params(args: &CpArgs) -> Result<TransferParams> {
    let t = &args.transfer.engine;
    // In-memory pipes: no TCP to tune, so a fixed count (auto means 4).
    let streams = match t.streams {
        Streams::Auto => 4,
        Streams::Fixed(n) => n,
    };
    let block_size = block_size(t)?;
    let mut params = TransferParams::new(streams, block_size, checksum_of(args.checksum));
    params.apply_local(&copy_choices(args));
    params.pace = t
        .rate_limit
        .map(|bps| Arc::new(tern_engine::pace::Pace::new(bps, block_size.into())));
    Ok(params)
}

/// How to start the remote tern of a `[USER@]HOST:` location.
pub fn ssh_options(args: &SshArgs, t: &TransferArgs) -> Result<SshOptions> {
    let mut ssh = SshOptions::from_args(args).map_err(usage)?;
    ssh.expected_fingerprint = t.engine.fingerprint.clone();
    Ok(ssh)
}

/// [`ssh_options`] of a copy: the remote tern keeps special bits when
/// this one does.
pub fn copy_ssh_options(args: &CpArgs) -> Result<SshOptions> {
    let mut ssh = ssh_options(&args.ssh, &args.transfer)?;
    ssh.allow_special_bits = args.keep_special_bits;
    Ok(ssh)
}

/// What a connection may hold before and after it authenticates, from the
/// command line (a once server's too).
fn apply_limits(args: &ServeArgs, opts: &mut ServerOptions) {
    opts.max_sessions_per_address = args.max_sessions_per_address as usize;
    opts.max_handshakes = args.max_handshakes as usize;
    opts.max_handshakes_per_address = args.max_handshakes_per_address as usize;
    opts.handshake_timeout = Duration::from_secs_f64(args.handshake_timeout);
    opts.join_timeout = Duration::from_secs_f64(args.join_timeout);
}

/// What `--advertise` asks for; ports default to the one listened on.
pub fn advertise_of(args: &ServeArgs, port: u16) -> Result<Advertise> {
    match args.advertise.as_slice() {
        [] => Ok(Advertise::Interfaces),
        [none] if none == "none" => Ok(Advertise::Off),
        list => list
            .iter()
            .map(|a| {
                a.parse::<SocketAddr>()
                    .or_else(|_| {
                        a.trim_matches(|c| c == '[' || c == ']')
                            .parse::<IpAddr>()
                            .map(|ip| SocketAddr::new(ip, port))
                    })
                    .map_err(|_| usage(format!("--advertise: '{a}' is not an address")))
            })
            .collect::<Result<Vec<_>>>()
            .map(Advertise::Addresses),
    }
}

/// The daemon's options from the command line, serving `root`.
pub fn server_options(args: &ServeArgs, root: PathBuf) -> ServerOptions {
    let mut opts = ServerOptions::new(root);
    opts.max_sessions = args.max_sessions;
    apply_limits(args, &mut opts);
    opts.grace = Duration::from_secs(args.grace);
    opts.io_timeout = Duration::from_secs_f64(args.io_timeout);
    opts.allow_special_bits = args.allow_special_bits;
    opts
}

/// A once server's options, relative paths starting from `home`.
pub fn once_options(args: &ServeArgs, home: PathBuf) -> OnceOptions {
    let mut opts = OnceOptions::new(home);
    opts.wait = Duration::from_secs_f64(args.once_timeout);
    opts.server.io_timeout = Duration::from_secs_f64(args.io_timeout);
    apply_limits(args, &mut opts.server);
    opts.server.allow_special_bits = args.allow_special_bits;
    opts
}

/// The advisor's options from the command line.
pub fn advisor_options(args: &AdvisorArgs, state_dir: &Path) -> AdvisorOptions {
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| state_dir.join("advisor.db").to_string_lossy().into_owned());
    let mut o = AdvisorOptions::new(db);
    o.targets_file = args.targets.clone();
    o.mesh_file = args.mesh.clone();
    o.alerts_file = args.alerts.clone();
    o.site = args.site.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    });
    o.default_interval = Duration::from_secs(args.probe_interval);
    o.max_age = Duration::from_secs_f64(args.target_max_age * 86_400.0);
    o.probes_enabled = !args.no_probes;
    o.scheduler = SchedulerOptions {
        workers: usize::from(args.probe_workers),
        budget_bps: args.probe_budget,
        start_jitter: Duration::from_secs_f64(args.probe_jitter),
        aggregation: AggregationPolicy {
            enabled: args.aggregate == "subnet",
            ..AggregationPolicy::default()
        },
        ..SchedulerOptions::default()
    };
    o
}
