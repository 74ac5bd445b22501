//! The command line: one options struct per command, defaults included.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tern_engine::server::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_JOIN_TIMEOUT, DEFAULT_MAX_HANDSHAKES,
    DEFAULT_MAX_HANDSHAKES_PER_ADDRESS, DEFAULT_MAX_SESSIONS_PER_ADDRESS,
};

use crate::exit::Exit;

mod probe;
mod values;
use crate::size::parse_size;
pub use probe::ProbeArgs;
pub(crate) use values::positive_secs;
pub use values::{ChecksumArg, CompressArg, ProtectArg, SkipArg, Streams, TpcArg, WindowArg};
use values::{non_negative_secs, parse_streams, parse_window, positive_days, stall_secs};

/// `tern --version`: the package's version and the commit it was built
/// from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TERN_COMMIT"),
    ")"
);

/// Move large data sets over long, fast networks at the speed the path allows.
#[derive(Debug, Parser)]
#[command(name = "tern", version = VERSION, after_help = Exit::help_table())]
pub struct Cli {
    /// More log output (-v info, -vv debug); TERN_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Log filter for the verbosity asked for.
    pub fn log_level(&self) -> &'static str {
        match (self.verbose, &self.command) {
            // A once server's stderr goes back through ssh: warnings only.
            (0, Command::Serve(args)) if args.once => "warn",
            (0, Command::Serve(_) | Command::Advisor(_)) => "info",
            (0, _) => "warn",
            (1, _) => "info",
            _ => "debug",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Copy files and trees to, from or between places.
    #[command(after_help = CP_HELP)]
    Cp(CpArgs),
    /// Run the daemon that `tern cp` and `tern perf` connect to.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Measure memory-to-memory throughput to a daemon (like iperf3).
    #[command(after_help = PERF_HELP)]
    Perf(PerfArgs),
    /// Measure the path to a daemon: round-trip time, bottleneck capacity
    /// both ways, and (with --throughput) a short throughput test.
    #[command(after_help = PROBE_HELP)]
    Probe(ProbeArgs),
    /// Tuning advice for the path to a host: buffer size, streams, expected rate.
    #[command(after_help = ADVISE_HELP)]
    Advise(AdviseArgs),
    /// Run the advisor alone (without a daemon): HTTP API, probes, archive.
    #[command(after_help = ADVISOR_HELP)]
    Advisor(AdvisorCmdArgs),
    /// Write the manual pages (tern.1, tern-cp.1, …) into a directory.
    #[command(hide = true, after_help = MAN_HELP)]
    Man(ManArgs),
    /// Print a shell's completion script for tern on stdout.
    #[command(hide = true, after_help = COMPLETIONS_HELP)]
    Completions(CompletionsArgs),
}

const MAN_HELP: &str = "\
Example:
  sudo tern man /usr/local/share/man/man1";

const COMPLETIONS_HELP: &str = "\
Examples:
  tern completions bash | sudo tee /etc/bash_completion.d/tern
  tern completions zsh > ~/.zfunc/_tern
  tern completions fish > ~/.config/fish/completions/tern.fish";

const CP_HELP: &str = "\
Locations are local paths, tern://HOST[:PORT]/PATH (PATH under the daemon's
root; default port 4747; IPv6 as tern://[::1]/PATH), or [USER@]HOST:PATH as
with scp: tern logs in with ssh, starts `tern serve --once` there and moves
the data over its own connections (PATH relative to the remote home, or
absolute; a colon after a slash, as in ./a:b, keeps a path local). Like scp:
with one source, DST may be a new name; with several, DST must be an existing
directory.

Every block is checked on arrival and sent again if damaged; each file is
written to .tern.HASH.partial beside its final name and renamed into place
only after its whole-file digest matched. A failed transfer leaves no file at
the final name, and running the same command again resumes it.

With -r, trees are copied as rsync -a copies them: names as bytes, modes and
nanosecond times of files and directories, symbolic links as links, named
pipes; not hard links, sparseness, owners or (unless --keep-special-bits)
set-user-ID, set-group-ID and sticky bits. An entry that cannot be copied is
listed and the rest is copied (exit 23).

Examples:
  tern cp run42.root alice@dtn.example.org:incoming/
  tern cp -r --ssh 'ssh -p 2222' dtn.example.org:/data/runs/2026 ./runs
  tern cp run42.root tern://dtn.example.org/incoming/
  tern cp -r -P 8 tern://dtn.example.org/runs/2026 ./runs
  tern cp --checksum adler32 --json big.h5 tern://[2001:db8::7]:4747/data/
  tern cp tern://dtn1.site-a.org/runs/42.h5 tern://dtn2.site-b.org/incoming/

Between two daemons the copy is third-party: the data goes straight from the
first to the second over their own streams; this host signs a delegation
valid for those files, that direction and a minute, and only gives the
order; the daemons' session runs with this command's transfer options (-P,
--protect, --checksum, --rate-limit, ...) (docs/THIRD-PARTY.md).

The first connection to a daemon records its certificate fingerprint in
~/.config/tern/known_hosts (like ssh); a later change is refused.

With -z (--reverse-connect), for when only this side may accept connections:
this tern listens and the remote one connects to it.

A received file of 16 MiB or more is written past the page cache (O_DIRECT)
where the file system takes it; TERN_DIRECT_IO=never in the receiving end's
environment (this one's for a pull, the daemon's for a push) writes through
the page cache, for storage whose direct I/O is slow.

Exit codes: 0 ok, 2 usage, 3 source missing, 4 permission/outside root,
5 disk full, 6 I/O, 7 cannot connect, 8 fingerprint/TLS, 9 connection lost,
10 integrity, 11 protocol, 12 ssh login or remote tern failed, 130 interrupted.";

const SERVE_HELP: &str = "\
Everything uses one port: a TLS control connection per session plus its data
connections. Only paths beneath --root can be read or written. On first start
a self-signed certificate is created in the state directory; its fingerprint
is printed so clients can pin it (--fingerprint). SIGINT/SIGTERM stop
accepting and let running sessions finish for --grace seconds.

With --once, tern serves one session for a client that started it through
ssh (tern cp FILE USER@HOST:PATH does): it prints one line (port, one-time
token, certificate fingerprint) on stdout, serves the client that presents
the token, and exits when that session ends, when stdin closes or when no
client came within --once-timeout. Paths are relative to the home directory
or absolute.

Limits keep floods from locking clients out: a connection holds a handshake
slot (--max-handshakes, --max-handshakes-per-address) until it has
authenticated, at most --handshake-timeout seconds; one that gets no slot is
closed at once. Only then does its session count (--max-sessions,
--max-sessions-per-address). Each limit that bites is logged (one line per
limit every 10 s at most). The open-files limit is raised to its hard limit
at start.

A received file of 16 MiB or more is written past the page cache (O_DIRECT)
where the file system takes it; TERN_DIRECT_IO=never in the daemon's
environment writes through the page cache, for storage whose direct I/O is
slow (some network file systems, RAID without a write cache).

Example:
  tern serve --listen 0.0.0.0:4747 --root /data/export";

const PERF_HELP: &str = "\
Sends generated data through the full engine (framing, per-block checks,
protection) and discards it at the far end, like bbcp /dev/zero→/dev/null or
iperf3. --reverse makes the daemon send.

Examples:
  tern perf tern://dtn.example.org --time 10 -P 4
  tern perf alice@dtn.example.org: --time 10
  tern perf tern://[::1] --size 4G --protect clear --json";

const PROBE_HELP: &str = "\
The round-trip time comes from TCP connects to the daemon's port (5, the
first discarded). The capacity comes from trains of MTU-sized UDP packets
sent back to back to the daemon's probe responder (same port number, UDP)
and answered back to back: the spacing the narrowest link imposes gives
its rate, both ways, within the average load --probe-load. --throughput
then runs `tern perf` for --time seconds with the connection options given.
See docs/PROBES.md.

A measurement that fails (no answer, or no usable train in one direction)
is reported with what was measured, and tern exits with its code: 7 when
nothing answers, 6 when trains came back but none could be used.

Examples:
  tern probe dtn.example.org
  tern probe tern://dtn.example.org:4747 --throughput --time 5 -P 4 --json";
const ADVISE_HELP: &str = "\
Asks an advisor (tern serve --http, or tern advisor) what the path from it to
HOST needs: the TCP buffer per stream (RTT x bottleneck, split over streams
where the host's caps hold one socket back), the stream count, the rate to
expect, and the measurements behind it: how many, how old, passive (real
transfers) or active (probes).

Examples:
  tern advise dtn.example.org
  tern advise 198.51.100.7 --server http://dtn.example.org:4748 --json

Exit codes: 0 ok, 2 bad host name, 3 the advisor does not know HOST or has
no measurements of it yet, 7 the advisor cannot be reached.";

const ADVISOR_HELP: &str = "\
The advisor of tern serve --http, without a daemon: it keeps targets (from
--targets, the API, and transfers that report to it), measures them within
--probe-budget, and answers GET /api/v1/advice/HOST. The API is described at
/api/v1/openapi.json; docs/ADVISOR.md explains how advice is computed.

Examples:
  tern advisor --http 4748
  tern advisor --http 0.0.0.0:4748 --db postgres://advisor@db.example.org/tern";

/// How the data connections of a transfer are made, secured and tuned:
/// every command that moves data through the engine (`cp`, `perf`, and
/// `probe --throughput`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection options")]
pub struct EngineArgs {
    /// Parallel TCP streams: a number, or `auto` to start from the path's
    /// RTT (one per 12.5 ms, rounded up to a power of two: 1 below 25 ms,
    /// 8 from 87.5 ms; a copy to a daemon starts where the last one ended),
    /// then add streams while the aggregate rate grows and retire an
    /// addition that did not pay (up to --max-streams).
    #[arg(short = 'P', long, default_value = "auto", value_name = "N|auto", value_parser = parse_streams)]
    pub streams: Streams,
    /// With --streams auto: never use more streams than this on one path
    /// (over several paths, this many on each).
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=128))]
    pub max_streams: u16,
    /// TCP buffer sizing: `auto` (kernel autotuning, and tern sizes buffers
    /// itself where the kernel's caps fall short), `kernel` (the kernel's
    /// autotuning alone), or a SIZE that locks the send and receive buffers
    /// of every data socket on both ends (like iperf3 -w) [default: auto].
    #[arg(long, value_name = "auto|kernel|SIZE", value_parser = parse_window)]
    pub window: Option<WindowArg>,
    /// Congestion control of the data sockets on both ends: `auto` (BBR
    /// where the kernel allows it, else the kernel's default) or a name
    /// such as cubic, reno, bbr.
    #[arg(long = "cc", default_value = "auto", value_name = "auto|NAME")]
    pub congestion: String,
    /// Block size: the unit of scheduling, checking and repair.
    #[arg(long, default_value = "1M", value_name = "SIZE", value_parser = parse_size)]
    pub block_size: u64,
    /// Data-channel protection; never downgraded silently.
    #[arg(long, value_enum, default_value_t = ProtectArg::Private)]
    pub protect: ProtectArg,
    /// Expect exactly this server certificate (SHA256:… as printed by `tern serve`).
    #[arg(long, value_name = "SHA256:…")]
    pub fingerprint: Option<String>,
    /// Where server fingerprints are remembered [default: $XDG_CONFIG_HOME/tern/known_hosts].
    #[arg(long, value_name = "FILE")]
    pub known_hosts: Option<PathBuf>,
    /// Verify the daemon's certificate chain and host name against these
    /// CAs (a PEM file, or a directory of them) instead of its fingerprint.
    #[arg(long, value_name = "FILE|DIR")]
    pub ca: Option<PathBuf>,
    /// Present this certificate (PEM, with intermediates) to a site daemon.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key of --cert (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Move data no faster than RATE bits per second over all streams, with
    /// decimal suffixes like iperf3's -b (500M = 500 Mbit/s). This end
    /// paces what it sends, or what it reads when it receives.
    #[arg(long, value_name = "RATE", value_parser = crate::size::parse_rate)]
    pub rate_limit: Option<u64>,
    /// Give up on a peer that stays silent this many seconds (exit code 9).
    #[arg(long, default_value_t = 60.0, value_name = "SECS", value_parser = positive_secs)]
    pub io_timeout: f64,
    /// Paths to a daemon: `auto` starts on the address given and adds
    /// streams over every other address the daemon names while the
    /// transfer runs, keeping them where they raise the rate; `off` uses
    /// the address given alone.
    #[arg(long = "paths", id = "paths_mode", value_enum, default_value_t = PathsArg::Auto)]
    pub paths_mode: PathsArg,
    /// A path named by hand, besides the address given: the daemon's
    /// address on it, this host's address to leave from (for a
    /// multi-homed host), and a rate reserved on it (a circuit): one
    /// stream goes there, paced at R, its window locked at R × RTT, and no
    /// more are added; the other paths take what is left. Repeatable;
    /// replaces the daemon's own list.
    #[arg(long = "path", value_name = "[SRC=]DST[,rate=R]", value_parser = crate::addr::parse_path_spec)]
    pub path: Vec<tern_engine::paths::PathSpec>,
    /// Dial every connection as MPTCP, so that the kernel spreads each over
    /// the paths its path manager knows (`ip mptcp endpoint`) instead of
    /// tern; implies --paths off unless --path is given. The daemon must
    /// listen with `tern serve --mptcp`, or the connections are plain TCP.
    /// TCP_INFO sees one subflow of an MPTCP connection, so the kernel
    /// sizes the buffers (--window kernel unless a size is given) and the
    /// stream count stays where --streams auto starts it.
    #[arg(long)]
    pub mptcp: bool,
}

/// Which paths to a daemon data streams take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PathsArg {
    Auto,
    Off,
}

/// What `cp` and `perf` add to [`EngineArgs`]: the advisor, compression,
/// stalled streams, and how results and progress are shown.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Transfer options")]
pub struct TransferArgs {
    /// Start from the advice of the advisor at URL (streams, and the
    /// window unless --window is given) and report what was achieved to it.
    #[arg(long, value_name = "URL")]
    pub advisor: Option<String>,
    /// Compress blocks on the wire: `auto` where it pays (blocks that do
    /// not shrink, and any block while the network outruns the
    /// compressor, go raw), `zstd` or `lz4` for every block that shrinks,
    /// or `none`.
    #[arg(long, value_enum, default_value_t = CompressArg::Auto)]
    pub compress: CompressArg,
    /// Replace a data stream that makes no progress for this many seconds
    /// while others do; 0 never does.
    #[arg(long, default_value_t = 20.0, value_name = "SECS", value_parser = stall_secs)]
    pub stall_timeout: f64,
    /// Print one JSON object with the results on stdout.
    #[arg(long)]
    pub json: bool,
    /// Show progress (default: when stderr is a terminal and not --json).
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,
    /// Never show progress.
    #[arg(long)]
    pub no_progress: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// How to reach a `[USER@]HOST:` location.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "ssh options")]
pub struct SshArgs {
    /// The ssh command for [USER@]HOST: locations, with its options
    /// (split like a shell would).
    #[arg(long = "ssh", default_value = "ssh", value_name = "COMMAND")]
    pub command: String,
    /// The tern program on the remote host.
    #[arg(long, default_value = "tern", value_name = "PATH")]
    pub remote_tern: String,
    /// For [USER@]HOST: locations: this side listens and the remote tern
    /// connects to it (when only this side may accept connections); unless
    /// --paths off it connects to each of this host's addresses, one path
    /// each.
    #[arg(short = 'z', long)]
    pub reverse_connect: bool,
    /// Give up when the remote tern has not answered through ssh within
    /// this many seconds (login included).
    #[arg(long, default_value_t = 60.0, value_name = "SECS", value_parser = positive_secs)]
    pub ssh_timeout: f64,
}

#[derive(Debug, Args)]
pub struct CpArgs {
    /// Sources, then the destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC… DST")]
    pub paths: Vec<String>,
    /// Copy directories recursively.
    #[arg(short, long)]
    pub recursive: bool,
    /// Whole-file digest, verified end to end.
    #[arg(long, value_enum, default_value_t = ChecksumArg::Xxh3)]
    pub checksum: ChecksumArg,
    /// Do not send a file already complete at the destination: one of the
    /// same `size`, of the same size and modification time (`mtime`), or
    /// of the same size and --checksum digest (`digest`, reads both
    /// copies); `never` sends everything.
    #[arg(long, value_enum, default_value_t = SkipArg::Mtime)]
    pub skip_existing: SkipArg,
    /// Keep set-user-ID, set-group-ID and sticky bits. They are dropped by
    /// default, as a receiver must never be made to create privileged files
    /// by its peer; a daemon applies them only when started with
    /// --allow-special-bits, and only on files its user owns.
    #[arg(long)]
    pub keep_special_bits: bool,
    /// When a copy loses its connection, run it again this many times
    /// (waiting 1 s, 2 s, 4 s, …); partial files resume where they stopped.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub retries: u32,
    /// Between two remote places: which one opens the data connections
    /// (the destination pulls, the source pushes; auto: pull, else push).
    #[arg(long, value_enum, default_value_t = TpcArg::Auto)]
    pub tpc: TpcArg,
    /// Between two remote places (daemons or ssh hosts): carry the data
    /// through this host, pulled into a spool directory here and then
    /// pushed on, for places that cannot reach each other (a copy between
    /// two ssh hosts with -z is relayed so anyway, as scp -3 does). Needs
    /// room for the copy there; the spool is removed after.
    #[arg(long)]
    pub via_client: bool,
    /// Where --via-client keeps the copy between pulling and pushing
    /// [default: $TMPDIR, else /tmp].
    #[arg(long, value_name = "DIR", requires = "via_client")]
    pub spool: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub transfer: TransferArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to listen on [default: [::]:4747; with --once the
    /// address ssh came in on (SSH_CONNECTION), any port].
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// Serve only what lies beneath this directory.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "once",
        conflicts_with = "once"
    )]
    pub root: Option<PathBuf>,
    /// Serve one session for a client that started this through ssh, then
    /// exit (see below).
    #[arg(long)]
    pub once: bool,
    /// With --once: connect to the client at HOST:PORT instead of listening
    /// (reverse mode); an empty HOST means the client's address in
    /// SSH_CONNECTION.
    #[arg(
        long,
        value_name = "HOST:PORT",
        requires = "once",
        conflicts_with = "listen"
    )]
    pub connect: Option<String>,
    /// With --connect: the client's other addresses, one path each, to
    /// dial for its data connections too once it is reached; ADDR@FROM
    /// dials from this host's address FROM (`tern cp -z` passes these).
    #[arg(
        long,
        value_name = "ADDR[@FROM],…",
        requires = "connect",
        value_delimiter = ','
    )]
    pub connect_paths: Vec<String>,
    /// With --once: listen on every address, not only the one ssh came in
    /// on, and name the others to the client so that its streams can take
    /// every path to this host (`tern cp` over ssh asks for this unless
    /// --paths off or -z).
    #[arg(long, requires = "once", conflicts_with_all = ["listen", "connect"])]
    pub every_address: bool,
    /// With --once: exit when no client came within this many seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECS", value_parser = positive_secs)]
    pub once_timeout: f64,
    /// Where the certificate is kept [default: $XDG_STATE_HOME/tern or ~/.local/state/tern].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Present this CA-issued certificate (PEM, with intermediates) instead
    /// of the self-signed one.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Site mode: demand client certificates issued by these CAs (a PEM
    /// file, or a directory of them); needs --authz.
    #[arg(
        long,
        value_name = "FILE|DIR",
        requires = "authz",
        conflicts_with = "once"
    )]
    pub client_ca: Option<PathBuf>,
    /// Site mode: which certificate subject may read or write which subtree
    /// of --root, one rule a line: SUBJECT PATH r|w|rw, e.g.
    /// `"/O=Example/CN=Alice" cms/alice rw` (README: "Site daemon"); needs
    /// --client-ca. Everything not granted is denied.
    #[arg(long, value_name = "FILE", requires = "client_ca")]
    pub authz: Option<PathBuf>,
    /// Concurrent sessions at most, counted once authenticated; more wait
    /// their turn.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub max_sessions: usize,
    /// Sessions (running or waiting) one client address may hold; more are
    /// refused.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = DEFAULT_MAX_SESSIONS_PER_ADDRESS as u32)]
    pub max_sessions_per_address: u32,
    /// Connections still authenticating, all clients together; more are
    /// closed at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = DEFAULT_MAX_HANDSHAKES as u32)]
    pub max_handshakes: u32,
    /// Connections still authenticating from one address (not counting the
    /// data connections of its sessions); more are closed at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = DEFAULT_MAX_HANDSHAKES_PER_ADDRESS as u32)]
    pub max_handshakes_per_address: u32,
    /// Close a connection that has not authenticated within this many
    /// seconds (TLS, hello, token, session request; a data connection: its
    /// join).
    #[arg(long, value_name = "SECS", value_parser = positive_secs,
          default_value_t = DEFAULT_HANDSHAKE_TIMEOUT.as_secs_f64())]
    pub handshake_timeout: f64,
    /// End a session whose data connections have not all joined within
    /// this many seconds of its acceptance.
    #[arg(long, value_name = "SECS", value_parser = positive_secs,
          default_value_t = DEFAULT_JOIN_TIMEOUT.as_secs_f64())]
    pub join_timeout: f64,
    /// Seconds running sessions may go on after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub grace: u64,
    /// Drop a client connection that stays silent this many seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECS", value_parser = positive_secs)]
    pub io_timeout: f64,
    /// Run the advisor beside the daemon, its HTTP API on ADDR:PORT (a bare
    /// PORT means 127.0.0.1:PORT); completed sessions feed it. Off unless given.
    #[arg(long, value_name = "ADDR:PORT|PORT")]
    pub http: Option<String>,
    /// Print the startup line as JSON.
    #[arg(long)]
    pub json: bool,
    /// Do not answer capacity probes (`tern probe`) on UDP at the same
    /// address and port.
    #[arg(long)]
    pub no_udp_probe: bool,
    /// Apply set-user-ID, set-group-ID and sticky bits that clients send
    /// with --keep-special-bits, and send those of served files to clients
    /// that ask. Without it they are dropped both ways, so that no client
    /// can make this daemon create privileged files.
    #[arg(long)]
    pub allow_special_bits: bool,
    /// The addresses to name to clients for their data connections, so
    /// that they can use every path to this host (ADDR or ADDR:PORT, comma
    /// separated; `none` names none). Default: this host's addresses when
    /// listening on all of them, none to a client on loopback.
    #[arg(long, value_name = "ADDR[,ADDR…]|none", value_delimiter = ',')]
    pub advertise: Vec<String>,
    /// Listen for MPTCP connections as well as TCP ones (clients that use
    /// `--mptcp`); the kernel must offer MPTCP (net.mptcp.enabled = 1).
    #[arg(long)]
    pub mptcp: bool,
    #[command(flatten)]
    pub advisor: AdvisorArgs,
}

/// The advisor's settings, shared by `tern serve --http` and `tern advisor`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Advisor options")]
pub struct AdvisorArgs {
    /// The advisor's archive: a PostgreSQL URL (postgres://USER@HOST/DB), an
    /// sqlite: URL or a file [default: advisor.db in the state directory].
    #[arg(long, value_name = "URL|FILE")]
    pub db: Option<String>,
    /// Targets to measure, one `HOST[:PORT] [INTERVAL_SECS] [group=NAME]`
    /// per line (`#` comments). Targets of one `group` share a bottleneck
    /// (a site's WAN link): one is measured and its advice answers for
    /// all, as with --aggregate subnet, even under --aggregate none.
    #[arg(long, value_name = "FILE")]
    pub targets: Option<PathBuf>,
    /// This advisor's site name: what it measures is labelled with it (the
    /// `from` of every series), and in a mesh it is the host it measures
    /// from [default: the host name].
    #[arg(long, value_name = "NAME")]
    pub site: Option<String>,
    /// A mesh to store in the archive and measure (JSON: name, hosts, and
    /// groups with members, tests and interval_s; see docs/ADVISOR.md).
    /// Every advisor sharing the archive reads it, and measures the hosts
    /// that share a group with its --site.
    #[arg(long, value_name = "FILE")]
    pub mesh: Option<PathBuf>,
    /// Alert rules and the webhook they POST to (JSON: webhook, and rules
    /// with a name, an optional target and one trigger: kind with
    /// below_share, above or jump_share; event; or no_data_intervals; see
    /// docs/DASHBOARD.md). A firing rule is an event on the dashboard and
    /// a POST, retried with backoff.
    #[arg(long, value_name = "FILE")]
    pub alerts: Option<PathBuf>,
    /// Seconds between active measurements of a target that does not say.
    #[arg(long, default_value_t = 21_600, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=31_622_400))]
    pub probe_interval: u64,
    /// Bits/s all running probes together may put on the network, with
    /// decimal suffixes (100M = 100 Mbit/s); never exceeded.
    #[arg(long, default_value = "100M", value_name = "RATE", value_parser = crate::size::parse_rate)]
    pub probe_budget: u64,
    /// Probes running at once, at most.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub probe_workers: u16,
    /// A new target's first probe waits a random time up to this many
    /// seconds (whether it came from --targets, the API or a transfer);
    /// later probes come every interval, give or take 10 %.
    #[arg(long, default_value_t = 2.0, value_name = "SECS", value_parser = non_negative_secs)]
    pub probe_jitter: f64,
    /// Do not run active probes (advice from reported transfers only).
    #[arg(long)]
    pub no_probes: bool,
    /// Also run a throughput test (a `tern perf` through the engine) of this
    /// many seconds against each target, paced to --probe-budget; 0: none.
    #[arg(long, default_value_t = 0.0, value_name = "SECS", value_parser = non_negative_secs)]
    pub probe_throughput: f64,
    /// Also run a window x streams sweep (streams 1, 2, 4, 8 x windows auto
    /// and locked at RTT x --probe-budget) against each target, this many
    /// seconds per cell, paced to --probe-budget; advice follows its best
    /// cell when that beat the formula; 0: none.
    #[arg(long, default_value_t = 0.0, value_name = "SECS", value_parser = non_negative_secs)]
    pub probe_sweep: f64,
    /// Forget targets (except --targets ones) unused for this many days.
    #[arg(long, default_value_t = 30.0, value_name = "DAYS", value_parser = positive_days)]
    pub target_max_age: f64,
    /// Group targets by subnet (/24, /64): measure one, answer for all,
    /// re-check each every 4 intervals.
    #[arg(long, default_value = "subnet", value_name = "subnet|none", value_parser = ["subnet", "none"])]
    pub aggregate: String,
}

#[derive(Debug, Args)]
pub struct AdvisorCmdArgs {
    /// Address and port of the HTTP API (a bare PORT means 127.0.0.1:PORT).
    #[arg(long, default_value = "127.0.0.1:4748", value_name = "ADDR:PORT|PORT")]
    pub http: String,
    /// Where the archive lives by default [default: $XDG_STATE_HOME/tern or ~/.local/state/tern].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print the startup line as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub advisor: AdvisorArgs,
}

#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// The host at the far end of the path.
    pub host: String,
    /// The advisor's URL [default: $TERN_ADVISOR or http://127.0.0.1:4748].
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// Print the advisor's JSON answer unchanged.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Where to write the pages.
    #[arg(default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct PerfArgs {
    /// The daemon, tern://HOST[:PORT], or [USER@]HOST: to start one over ssh.
    pub target: String,
    /// Send this much data.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "time")]
    pub size: Option<u64>,
    /// Send for this many seconds [default: 10].
    #[arg(long, value_name = "SECS")]
    pub time: Option<f64>,
    /// The daemon sends, this side receives.
    #[arg(long)]
    pub reverse: bool,
    #[command(flatten)]
    pub transfer: TransferArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}
