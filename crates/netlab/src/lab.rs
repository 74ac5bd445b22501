//! A lab: two or three hosts (network namespaces `LAB-a`, `LAB-b`,
//! `LAB-c`) joined by one or more emulated paths, and the commands that
//! manage it.
//!
//! Addresses are fixed so tests and scripts can name them: path `i`
//! (0-based) joins its first host at `10.47.i.1` to its second at
//! `10.47.i.2` (A and B unless the path says otherwise), through device
//! `nl{i}` in each of the two namespaces. State lives in
//! `/run/netlab/LAB/`: the configuration, the emulator's pid, its control
//! socket and its log. The configuration's types are in [`crate::spec`].

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::link::LinkCounters;
pub use crate::spec::{Dir, Host, LabConfig, PathSpec};

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
    cfg.validate()?;
    for host in Host::ALL {
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
    for host in cfg.hosts() {
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
    for (i, path) in cfg.paths.iter().enumerate() {
        for (end, host) in path.between.iter().enumerate() {
            let (ns, dev) = (cfg.netns(*host), device(i));
            let local = crate::spec::path_addr(i, end).to_string();
            let remote = crate::spec::path_addr(i, 1 - end).to_string();
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
    for host in cfg.hosts() {
        accept_any_source(&cfg.netns(host))?;
    }
    for (key, value) in sysctls {
        set_sysctl(cfg, key, value)?;
    }
    Ok(())
}

/// Turns reverse-path filtering off for every interface of namespace `ns`
/// (`all`, `default` and each device), and checks it: a host has routes to
/// its peers only, so with the filter on it would drop the ICMP answers of
/// the routers along a path, whose addresses it has no route to.
fn accept_any_source(ns: &str) -> Result<()> {
    let script = "for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > \"$f\"; done; \
                  grep -H . /proc/sys/net/ipv4/conf/*/rp_filter";
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", script])
        .output()
        .context("running ip netns exec")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let still: Vec<&str> = text.lines().filter(|l| !l.ends_with(":0")).collect();
    if !out.status.success() || !still.is_empty() || !text.contains("/all/") {
        bail!(
            "cannot turn rp_filter off in {ns}: {}{}",
            still.join(", "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Sets a sysctl in every host and reads it back; `sysctl -w` exits 0
/// even when refused, so only the read-back tells.
pub fn set_sysctl(cfg: &LabConfig, key: &str, value: &str) -> Result<()> {
    for host in cfg.hosts() {
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

/// Removes everything the lab made (every host's namespace, whatever the
/// configuration says). Idempotent; works after a crash.
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
    for host in Host::ALL {
        let ns = format!("{name}-{}", host.suffix());
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
    /// Replace one path's configuration, both directions and its routers
    /// at once; its hosts (`between`) must stay as they are.
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
    /// The path's configuration in force (hops included).
    pub spec: PathSpec,
    /// Whether the emulator gets TCP super-packets from the devices
    /// (offloads on) or forwards packet by packet.
    #[serde(default)]
    pub offload: bool,
    /// Forward counters: first host → second (A → B on a default path).
    #[serde(alias = "a_to_b")]
    pub fwd: LinkCounters,
    /// Reverse counters: second host → first.
    #[serde(alias = "b_to_a")]
    pub rev: LinkCounters,
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
