//! The `netlab` command: parses the command line into the lab's typed
//! configuration ([`netlab::spec`]) and hands it to [`netlab::lab`].

use std::net::Ipv4Addr;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use netlab::lab::{self, Host, LabConfig, PathSpec, Reply, Request};
use netlab::spec::{parse_hops, parse_loss, parse_queue};

/// Emulated WAN paths between network namespaces (run as root).
#[derive(Debug, Parser)]
#[command(name = "netlab", version, after_help = ADDRESSES)]
struct Cli {
    /// Lab name: namespaces are NAME-a, NAME-b (and NAME-c).
    #[arg(long, global = true, default_value = "netlab")]
    lab: String,
    #[command(subcommand)]
    command: Cmd,
}

const ADDRESSES: &str = "\
Addresses: path i (0-based) joins its first host at 10.47.i.1 to its second at
10.47.i.2: host A and host B unless the path says between=B-C or the like.
Forward is from a path's first host to its second.
Examples:
  netlab up --rtt 100 --rate 500 --tcp-rmem '4096 131072 67108864'
  netlab exec A ping -c 5 10.47.0.2
  netlab exec B iperf3 -s -D; netlab exec A iperf3 -c 10.47.0.2 -t 10
  netlab set --rate 250 --loss-fwd 1%
  netlab status --json
  netlab down
  netlab --lab tri up --hosts 3 --path between=A-B,rtt=10 \\
      --path between=A-C,rtt=20,hops=10.48.0.1+10.48.1.1 --path between=B-C,rtt=30
  netlab --lab tri exec A ping -c 1 -t 1 10.47.1.2   # Time to live exceeded from 10.48.0.1
  netlab --lab tri set --path 1 --hops 10.48.5.1+10.48.6.1 --rtt 40
  netlab --lab tri exec C ping -c 1 10.47.2.1";

#[derive(Debug, clap::Args)]
struct PathArgs {
    /// Round-trip time in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    rtt: f64,
    /// Link rate in Mbit/s (0: unlimited).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Random loss per packet in both directions: a fraction (0.0001) or a percentage (0.01%).
    #[arg(long, default_value = "0", value_parser = parse_loss)]
    loss: f64,
    /// Loss from A to B only (overrides --loss that way).
    #[arg(long, value_parser = parse_loss)]
    loss_fwd: Option<f64>,
    /// Loss from B to A only (overrides --loss that way).
    #[arg(long, value_parser = parse_loss)]
    loss_rev: Option<f64>,
    /// Queue limit: a number of packets, or 'bdp' for one bandwidth-delay product.
    #[arg(long, default_value = "bdp", value_parser = |s: &str| parse_queue(s).map(Queue))]
    queue: Queue,
    /// Routers along the path, from A toward B: IPV4+IPV4+… (or 'none').
    #[arg(long, value_parser = hop_list)]
    hops: Option<Hops>,
}

/// A queue limit as given on the command line (`None`: one BDP). A
/// newtype, so that clap takes it as one value rather than an optional one.
#[derive(Debug, Clone, Copy)]
struct Queue(Option<u64>);

/// A list of routers as given on the command line (a newtype, so that
/// clap takes it as one value rather than many).
#[derive(Debug, Clone)]
struct Hops(Vec<Ipv4Addr>);

fn hop_list(s: &str) -> Result<Hops, String> {
    parse_hops(s).map(Hops)
}

impl PathArgs {
    fn spec(&self) -> PathSpec {
        PathSpec {
            rtt_ms: self.rtt,
            rate_mbit: self.rate,
            loss: self.loss,
            loss_fwd: self.loss_fwd,
            loss_rev: self.loss_rev,
            queue_packets: self.queue.0,
            hops: self.hops.clone().map(|h| h.0).unwrap_or_default(),
            ..PathSpec::default()
        }
    }
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create the hosts (A and B, or A, B and C) and the paths between them.
    Up {
        #[command(flatten)]
        path: PathArgs,
        /// Paths: rtt=MS,rate=MBIT[,loss=P][,loss_fwd=P][,loss_rev=P][,queue=PKTS|bdp]
        /// [,between=A-B|A-C|B-C…][,hops=IPV4+IPV4…]; replaces the single path of the flags.
        #[arg(long = "path")]
        paths: Vec<PathSpec>,
        /// How many hosts: 2 (A, B) or 3 (A, B, C).
        #[arg(long, default_value_t = 2)]
        hosts: usize,
        /// MTU of the path devices.
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// net.ipv4.tcp_rmem in every host, e.g. '4096 131072 67108864'.
        #[arg(long)]
        tcp_rmem: Option<String>,
        /// net.ipv4.tcp_wmem in every host.
        #[arg(long)]
        tcp_wmem: Option<String>,
    },
    /// Change a path while traffic flows (what is given, in one step).
    Set {
        /// Which path (0-based).
        #[arg(long = "path", default_value_t = 0)]
        index: usize,
        /// New round-trip time in ms.
        #[arg(long)]
        rtt: Option<f64>,
        /// New rate in Mbit/s.
        #[arg(long)]
        rate: Option<f64>,
        /// New loss, both directions (clears per-direction values).
        #[arg(long, value_parser = parse_loss)]
        loss: Option<f64>,
        /// New loss from the path's first host to its second.
        #[arg(long, value_parser = parse_loss)]
        loss_fwd: Option<f64>,
        /// New loss from the path's second host to its first.
        #[arg(long, value_parser = parse_loss)]
        loss_rev: Option<f64>,
        /// New routers, from the first host toward the second: IPV4+IPV4+…, or 'none'.
        #[arg(long, value_parser = hop_list)]
        hops: Option<Hops>,
    },
    /// Run a command on host A, B or C.
    Exec {
        /// A, B or C.
        host: String,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Set sysctls (KEY=VALUE) in every host and report what is in force.
    Sysctl {
        /// e.g. net.ipv4.tcp_rmem='4096 131072 67108864'
        settings: Vec<String>,
    },
    /// Show the configuration, the TCP settings in force and the counters.
    Status {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove everything the lab made (idempotent).
    Down,
    /// Run the emulator (started by `up`).
    #[command(hide = true)]
    Emulate,
}

/// What `set` changes; `None` keeps the value in force.
#[derive(Debug)]
struct Change {
    rtt: Option<f64>,
    rate: Option<f64>,
    loss: Option<f64>,
    loss_fwd: Option<f64>,
    loss_rev: Option<f64>,
    hops: Option<Hops>,
}

impl Change {
    /// Applies the change to `spec`; `--loss` first, so that the
    /// per-direction values given with it win.
    fn apply(self, spec: &mut PathSpec) {
        if let Some(v) = self.rtt {
            spec.rtt_ms = v;
        }
        if let Some(v) = self.rate {
            spec.rate_mbit = v;
        }
        if let Some(v) = self.loss {
            spec.set_loss(v);
        }
        if let Some(v) = self.loss_fwd {
            spec.loss_fwd = Some(v);
        }
        if let Some(v) = self.loss_rev {
            spec.loss_rev = Some(v);
        }
        if let Some(v) = self.hops {
            spec.hops = v.0;
        }
    }
}

/// `netlab set`: reads the path's spec in force, changes it, sends it back.
fn set(name: &str, index: usize, change: Change) -> Result<()> {
    lab::load(name)?;
    let Reply::Status(now) = lab::query(name, &Request::Status)? else {
        bail!("the emulator did not answer");
    };
    let mut spec = now
        .get(index)
        .with_context(|| format!("no path {index}"))?
        .spec
        .clone();
    change.apply(&mut spec);
    match lab::query(name, &Request::Set { path: index, spec })? {
        Reply::Ok => Ok(()),
        Reply::Error(e) => bail!(e),
        Reply::Status(_) => bail!("unexpected reply"),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("netlab: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Up {
            path,
            paths,
            hosts,
            mtu,
            tcp_rmem,
            tcp_wmem,
        } => {
            let paths = if paths.is_empty() {
                vec![path.spec()]
            } else {
                paths
            };
            let cfg = LabConfig {
                name: cli.lab.clone(),
                mtu,
                hosts,
                paths,
            };
            let mut sysctls = Vec::new();
            if let Some(v) = tcp_rmem {
                sysctls.push(("net.ipv4.tcp_rmem".to_string(), v));
            }
            if let Some(v) = tcp_wmem {
                sysctls.push(("net.ipv4.tcp_wmem".to_string(), v));
            }
            lab::up(&cfg, &sysctls)?;
            print_status(&cli.lab, false)
        }
        Cmd::Set {
            index,
            rtt,
            rate,
            loss,
            loss_fwd,
            loss_rev,
            hops,
        } => {
            let change = Change {
                rtt,
                rate,
                loss,
                loss_fwd,
                loss_rev,
                hops,
            };
            set(&cli.lab, index, change)
        }
        Cmd::Exec { host, command } => {
            use std::os::unix::process::CommandExt;
            let cfg = lab::load(&cli.lab)?;
            let ns = cfg.netns(cfg.host(Host::parse(&host)?)?);
            let err = std::process::Command::new("ip")
                .args(["netns", "exec", &ns])
                .args(&command)
                .exec();
            bail!("cannot run ip netns exec: {err}")
        }
        Cmd::Sysctl { settings } => {
            let cfg = lab::load(&cli.lab)?;
            for s in &settings {
                let (k, v) = s
                    .split_once('=')
                    .with_context(|| format!("'{s}' is not KEY=VALUE"))?;
                lab::set_sysctl(&cfg, k, v)?;
            }
            print_status(&cli.lab, false)
        }
        Cmd::Status { json } => print_status(&cli.lab, json),
        Cmd::Down => lab::down(&cli.lab),
        Cmd::Emulate => netlab::emulator::run(&cli.lab),
    }
}

fn print_status(name: &str, json: bool) -> Result<()> {
    println!("{}", netlab::status::show(name, json)?);
    Ok(())
}
