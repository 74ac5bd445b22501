//! The `netlab` command.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use netlab::lab::{self, Host, LabConfig, PathSpec, Reply, Request};

/// Emulated WAN paths between two network namespaces (run as root).
#[derive(Debug, Parser)]
#[command(name = "netlab", version, after_help = ADDRESSES)]
struct Cli {
    /// Lab name: namespaces are NAME-a and NAME-b.
    #[arg(long, global = true, default_value = "netlab")]
    lab: String,
    #[command(subcommand)]
    command: Cmd,
}

const ADDRESSES: &str = "\
Addresses: path i (0-based) joins host A at 10.47.i.1 to host B at 10.47.i.2.
Example:
  netlab up --rtt 100 --rate 500 --tcp-rmem '4096 131072 67108864'
  netlab exec A ping -c 5 10.47.0.2
  netlab exec B iperf3 -s -D; netlab exec A iperf3 -c 10.47.0.2 -t 10
  netlab set --rate 250
  netlab status --json
  netlab down";

#[derive(Debug, clap::Args)]
struct PathArgs {
    /// Round-trip time in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    rtt: f64,
    /// Link rate in Mbit/s (0: unlimited).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Random loss per packet and direction: a fraction (0.0001) or a percentage (0.01%).
    #[arg(long, default_value = "0", value_parser = parse_loss)]
    loss: f64,
    /// Queue limit: a number of packets, or 'bdp' for one bandwidth-delay product.
    #[arg(long, default_value = "bdp", value_parser = parse_queue)]
    queue: Queue,
}

/// A queue limit as given on the command line.
#[derive(Debug, Clone, Copy)]
struct Queue(Option<u64>);

impl PathArgs {
    fn spec(&self) -> PathSpec {
        PathSpec {
            rtt_ms: self.rtt,
            rate_mbit: self.rate,
            loss: self.loss,
            queue_packets: self.queue.0,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create hosts A and B and the paths between them.
    Up {
        #[command(flatten)]
        path: PathArgs,
        /// Extra paths: rtt=MS,rate=MBIT[,loss=P][,queue=PKTS|bdp]; replaces the single path.
        #[arg(long = "path", value_parser = parse_path_spec)]
        paths: Vec<PathSpec>,
        /// MTU of the path devices.
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// net.ipv4.tcp_rmem in both hosts, e.g. '4096 131072 67108864'.
        #[arg(long)]
        tcp_rmem: Option<String>,
        /// net.ipv4.tcp_wmem in both hosts.
        #[arg(long)]
        tcp_wmem: Option<String>,
    },
    /// Change a path while traffic flows.
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
        /// New loss.
        #[arg(long, value_parser = parse_loss)]
        loss: Option<f64>,
    },
    /// Run a command on host A or B.
    Exec {
        /// A or B.
        host: String,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Set sysctls (KEY=VALUE) in both hosts and report what is in force.
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

fn parse_loss(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (s, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad loss '{s}'"))?;
    let p = v * scale;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!(
            "loss '{s}' is not between 0 and 1 (or 0% and 100%)"
        ));
    }
    Ok(p)
}

fn parse_queue(s: &str) -> Result<Queue, String> {
    if s.eq_ignore_ascii_case("bdp") {
        return Ok(Queue(None));
    }
    s.parse()
        .map(|p| Queue(Some(p)))
        .map_err(|_| format!("queue must be packets or 'bdp', not '{s}'"))
}

fn parse_path_spec(s: &str) -> Result<PathSpec, String> {
    let mut spec = PathSpec {
        rtt_ms: 0.0,
        rate_mbit: 1000.0,
        loss: 0.0,
        queue_packets: None,
    };
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or(format!("'{part}' is not KEY=VALUE"))?;
        match k {
            "rtt" => spec.rtt_ms = v.parse().map_err(|_| format!("bad rtt '{v}'"))?,
            "rate" => spec.rate_mbit = v.parse().map_err(|_| format!("bad rate '{v}'"))?,
            "loss" => spec.loss = parse_loss(v)?,
            "queue" => spec.queue_packets = parse_queue(v)?.0,
            _ => return Err(format!("unknown path key '{k}' (rtt, rate, loss, queue)")),
        }
    }
    Ok(spec)
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
        } => {
            lab::load(&cli.lab)?;
            if rtt.is_some_and(|v| v.is_nan() || v < 0.0)
                || rate.is_some_and(|v| v.is_nan() || v < 0.0)
            {
                bail!("rtt and rate must be zero or positive");
            }
            let Reply::Status(now) = lab::query(&cli.lab, &Request::Status)? else {
                bail!("the emulator did not answer");
            };
            let mut spec = now
                .get(index)
                .with_context(|| format!("no path {index}"))?
                .spec;
            if let Some(v) = rtt {
                spec.rtt_ms = v;
            }
            if let Some(v) = rate {
                spec.rate_mbit = v;
            }
            if let Some(v) = loss {
                spec.loss = v;
            }
            match lab::query(&cli.lab, &Request::Set { path: index, spec })? {
                Reply::Ok => Ok(()),
                Reply::Error(e) => bail!(e),
                Reply::Status(_) => bail!("unexpected reply"),
            }
        }
        Cmd::Exec { host, command } => {
            use std::os::unix::process::CommandExt;
            let cfg = lab::load(&cli.lab)?;
            let ns = cfg.netns(Host::parse(&host)?);
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
    let cfg = lab::load(name)?;
    let Reply::Status(paths) = lab::query(name, &Request::Status)? else {
        bail!("the emulator did not answer");
    };
    let mut sysctls = serde_json::Map::new();
    for host in [Host::A, Host::B] {
        let ns = cfg.netns(host);
        let mut m = serde_json::Map::new();
        for key in lab::REPORTED_SYSCTLS {
            m.insert(
                key.into(),
                lab::read_sysctl(&ns, key).unwrap_or_default().into(),
            );
        }
        sysctls.insert(format!("{host:?}"), m.into());
    }
    if json {
        let paths: Vec<serde_json::Value> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                serde_json::json!({
                    "index": i, "a": Host::A.addr(i).to_string(), "b": Host::B.addr(i).to_string(),
                    "device": lab::device(i), "rtt_ms": p.spec.rtt_ms, "rate_mbit": p.spec.rate_mbit,
                    "loss": p.spec.loss, "queue_packets": p.spec.queue_packets, "offload": p.offload,
                    "queue_bytes": p.spec.link_config(cfg.mtu).queue_bytes,
                    "a_to_b": p.a_to_b, "b_to_a": p.b_to_a,
                })
            })
            .collect();
        let out = serde_json::json!({
            "lab": cfg.name, "mtu": cfg.mtu,
            "hosts": {"A": cfg.netns(Host::A), "B": cfg.netns(Host::B)},
            "paths": paths, "sysctls": sysctls,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "lab {} (hosts A = netns {}, B = netns {}), MTU {}",
        cfg.name,
        cfg.netns(Host::A),
        cfg.netns(Host::B),
        cfg.mtu
    );
    for (i, p) in paths.iter().enumerate() {
        println!(
            "  path {i}: A {} <-> B {}  rtt {} ms, rate {} Mbit/s, loss {}, queue {} bytes, offload {}",
            Host::A.addr(i),
            Host::B.addr(i),
            p.spec.rtt_ms,
            p.spec.rate_mbit,
            p.spec.loss,
            p.spec.link_config(cfg.mtu).queue_bytes,
            if p.offload { "on" } else { "off" }
        );
        println!(
            "    A->B {} pkts, {} drops (queue {}, random {});  B->A {} pkts, {} drops",
            p.a_to_b.packets,
            p.a_to_b.queue_drops + p.a_to_b.random_drops,
            p.a_to_b.queue_drops,
            p.a_to_b.random_drops,
            p.b_to_a.packets,
            p.b_to_a.queue_drops + p.b_to_a.random_drops
        );
    }
    for (host, m) in &sysctls {
        println!("  host {host}: {m}");
    }
    Ok(())
}
