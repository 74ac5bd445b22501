//! A lab: two hosts (network namespaces `LAB-a` and `LAB-b`) joined by one
//! or more emulated paths, and the commands that manage it.
//!
//! Addresses are fixed so tests and scripts can name them: path `i`
//! (0-based) joins A at `10.47.i.1` to B at `10.47.i.2`, through device
//! `nl{i}` in each namespace. State lives in `/run/netlab/LAB/`: the
//! configuration, the emulator's pid, its control socket and its log.

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::link::{LinkConfig, LinkCounters};

/// One emulated path, the same in both directions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PathSpec {
    /// Round-trip time in ms (half of it each way).
    pub rtt_ms: f64,
    /// Rate in Mbit/s; 0 for unlimited.
    pub rate_mbit: f64,
    /// Random loss probability per packet, each direction.
    pub loss: f64,
    /// Queue limit: packets, or `None` for one bandwidth-delay product.
    pub queue_packets: Option<u64>,
}

impl PathSpec {
    /// The per-direction link configuration for an MTU.
    pub fn link_config(&self, mtu: u32) -> LinkConfig {
        let rate_bps = (self.rate_mbit * 1e6) as u64;
        let bdp = (self.rate_mbit * 1e6 / 8.0 * self.rtt_ms / 1e3) as u64;
        let queue_bytes = match self.queue_packets {
            Some(p) => p * u64::from(mtu),
            None => bdp.max(64 * u64::from(mtu)),
        };
        LinkConfig {
            delay: Duration::from_secs_f64(self.rtt_ms / 2e3),
            rate_bps,
            queue_bytes,
            loss: self.loss,
        }
    }
}

/// A whole lab's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabConfig {
    /// Lab name; namespaces are `NAME-a` and `NAME-b`.
    pub name: String,
    /// MTU of the path devices.
    pub mtu: u32,
    /// The paths.
    pub paths: Vec<PathSpec>,
}

impl LabConfig {
    /// Namespace of host `A` or `B`.
    pub fn netns(&self, host: Host) -> String {
        format!("{}-{}", self.name, host.suffix())
    }
}

/// One of the two hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// The client side.
    A,
    /// The server side.
    B,
}

impl Host {
    fn suffix(self) -> &'static str {
        match self {
            Host::A => "a",
            Host::B => "b",
        }
    }

    /// Parses `A`/`B` (any case).
    pub fn parse(s: &str) -> Result<Host> {
        match s {
            "A" | "a" => Ok(Host::A),
            "B" | "b" => Ok(Host::B),
            _ => bail!("host must be A or B, not '{s}'"),
        }
    }

    /// This host's address on path `i`.
    pub fn addr(self, path: usize) -> Ipv4Addr {
        let last = match self {
            Host::A => 1,
            Host::B => 2,
        };
        Ipv4Addr::new(10, 47, path as u8, last)
    }
}

/// Frames a path device holds for the emulator to read (the kernel's
/// default is 500). A TUN device drops what overflows it, before the link
/// model sees it: at 10 Gbit/s and 50 ms a sender's burst, or a reader
/// descheduled for a few ms on a busy host, overflowed 500 super-packets
/// and showed as losses the path was not configured with.
pub const TXQUEUELEN: u32 = 5000;

/// Name of path `i`'s device (in both namespaces).
pub fn device(path: usize) -> String {
    format!("nl{path}")
}

/// `/run/netlab/NAME`.
pub fn state_dir(name: &str) -> PathBuf {
    PathBuf::from("/run/netlab").join(name)
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args))
}

fn netns_exists(ns: &str) -> bool {
    Path::new("/var/run/netns").join(ns).exists()
}

/// Creates the lab: namespaces, the emulator, addresses and routes.
pub fn up(cfg: &LabConfig, sysctls: &[(String, String)]) -> Result<()> {
    if !crate::sys::is_root() {
        bail!("netlab needs root (network namespaces and TUN devices)");
    }
    if cfg.paths.is_empty() || cfg.paths.len() > 16 {
        bail!("between 1 and 16 paths, not {}", cfg.paths.len());
    }
    for (i, p) in cfg.paths.iter().enumerate() {
        if !(p.rtt_ms >= 0.0
            && p.rate_mbit >= 0.0
            && p.rtt_ms.is_finite()
            && p.rate_mbit.is_finite())
        {
            bail!("path {i}: rtt and rate must be zero or positive");
        }
    }
    if !(576..=65_535).contains(&cfg.mtu) {
        bail!("MTU {} outside 576..=65535", cfg.mtu);
    }
    for host in [Host::A, Host::B] {
        if netns_exists(&cfg.netns(host)) {
            bail!(
                "lab '{}' is already up (namespace {} exists); run `netlab down --lab {}` first",
                cfg.name,
                cfg.netns(host),
                cfg.name
            );
        }
    }
    let dir = state_dir(&cfg.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(cfg)?)?;
    for host in [Host::A, Host::B] {
        let ns = cfg.netns(host);
        ip(&["netns", "add", &ns])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
    }
    let log = std::fs::File::create(dir.join("emulator.log"))?;
    let exe = std::env::current_exe()?;
    let child = {
        use std::os::unix::process::CommandExt;
        Command::new(exe)
            .args(["emulate", "--lab", &cfg.name])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("starting the emulator")?
    };
    std::fs::write(dir.join("emulator.pid"), child.id().to_string())?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while query(&cfg.name, &Request::Status).is_err() {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("emulator.log")).unwrap_or_default();
            let _ = down(&cfg.name);
            bail!("the emulator did not start:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // From here on a failure must not leave a half-made lab behind.
    configure(cfg, sysctls).inspect_err(|_| {
        let _ = down(&cfg.name);
    })
}

fn configure(cfg: &LabConfig, sysctls: &[(String, String)]) -> Result<()> {
    for (i, _) in cfg.paths.iter().enumerate() {
        for host in [Host::A, Host::B] {
            let (ns, dev) = (cfg.netns(host), device(i));
            let peer = match host {
                Host::A => Host::B,
                Host::B => Host::A,
            };
            let (local, remote) = (host.addr(i).to_string(), peer.addr(i).to_string());
            let mtu = cfg.mtu.to_string();
            let qlen = TXQUEUELEN.to_string();
            ip(&[
                "-n",
                &ns,
                "link",
                "set",
                &dev,
                "mtu",
                &mtu,
                "txqueuelen",
                &qlen,
                "up",
            ])?;
            ip(&[
                "-n", &ns, "addr", "add", &local, "peer", &remote, "dev", &dev,
            ])?;
        }
    }
    for (key, value) in sysctls {
        set_sysctl(cfg, key, value)?;
    }
    Ok(())
}

/// Sets a sysctl in both namespaces and reads it back; `sysctl -w` exits 0
/// even when refused, so only the read-back tells.
pub fn set_sysctl(cfg: &LabConfig, key: &str, value: &str) -> Result<()> {
    for host in [Host::A, Host::B] {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let ns = cfg.netns(host);
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "sh",
                "-c",
                &format!("echo '{value}' > {path}"),
            ])
            .stderr(Stdio::null())
            .status();
        let now = read_sysctl(&ns, key)?;
        let want: Vec<&str> = value.split_whitespace().collect();
        if now.split_whitespace().collect::<Vec<_>>() != want {
            bail!("{key} in {ns} stayed '{now}' (wanted '{value}'): the kernel refused it");
        }
    }
    Ok(())
}

/// Reads a sysctl inside a namespace.
pub fn read_sysctl(ns: &str, key: &str) -> Result<String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", &path])
        .output()?;
    if !out.status.success() {
        bail!("cannot read {key} in {ns}");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The TCP sysctls reported by `status`.
pub const REPORTED_SYSCTLS: [&str; 3] = [
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
];

/// Removes everything the lab made. Idempotent; works after a crash.
pub fn down(name: &str) -> Result<()> {
    let dir = state_dir(name);
    if let Ok(pid) = std::fs::read_to_string(dir.join("emulator.pid")) {
        if let Ok(pid) = pid.trim().parse::<i32>() {
            let _ = Command::new("kill")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    }
    for suffix in ["a", "b"] {
        let ns = format!("{name}-{suffix}");
        if netns_exists(&ns) {
            // Processes started with `exec` would keep the namespace alive.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").arg(pid).stderr(Stdio::null()).status();
                }
            }
            ip(&["netns", "del", &ns])?;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Loads a running lab's configuration.
pub fn load(name: &str) -> Result<LabConfig> {
    let path = state_dir(name).join("config.json");
    let text = std::fs::read(&path)
        .with_context(|| format!("lab '{name}' is not up ({} missing)", path.display()))?;
    Ok(serde_json::from_slice(&text)?)
}

/// A request to the running emulator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// Configuration and counters.
    Status,
    /// Change one path.
    Set {
        /// Path index.
        path: usize,
        /// The new behaviour.
        spec: PathSpec,
    },
}

/// Counters and configuration of one path, both directions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathStatus {
    /// The path's configuration.
    pub spec: PathSpec,
    /// Whether the emulator gets TCP super-packets from the devices
    /// (offloads on) or forwards packet by packet.
    #[serde(default)]
    pub offload: bool,
    /// A → B counters.
    pub a_to_b: LinkCounters,
    /// B → A counters.
    pub b_to_a: LinkCounters,
}

/// The emulator's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    /// Per path.
    Status(Vec<PathStatus>),
    /// Done.
    Ok,
    /// Refused.
    Error(String),
}

/// Asks the running emulator.
pub fn query(name: &str, req: &Request) -> Result<Reply> {
    let mut s = UnixStream::connect(state_dir(name).join("ctl.sock"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    Ok(serde_json::from_str(&answer)?)
}
