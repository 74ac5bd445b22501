//! A lab's typed configuration: its hosts, its paths and what each path
//! does, with the parsers for how they are written on the command line and
//! the checks that make a configuration usable.
//!
//! This is what `config.json` holds and what the control socket's `Set`
//! carries, so every field added after the first release has a serde
//! default: an older `config.json` still loads. The address plan lives
//! here too, so that callers ask [`LabConfig::addr`] instead of computing
//! addresses themselves: path `i` gives its first host `10.47.i.1` and its
//! second `10.47.i.2`.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::link::LinkConfig;

/// The most routers a path may have (a TTL is a byte; traceroute stops at 30).
pub const MAX_HOPS: usize = 30;

/// The most paths a lab may have.
pub const MAX_PATHS: usize = 16;

/// One of a lab's hosts (network namespaces `NAME-a`, `NAME-b`, `NAME-c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Host {
    /// The first host (the client side in two-host labs).
    A,
    /// The second host (the server side in two-host labs).
    B,
    /// The third host, present with `up --hosts 3`.
    C,
}

impl Host {
    /// Every host a lab can have, in order.
    pub const ALL: [Host; 3] = [Host::A, Host::B, Host::C];

    /// 0 for A, 1 for B, 2 for C.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The suffix of its namespace's name: `a`, `b` or `c`.
    pub fn suffix(self) -> &'static str {
        match self {
            Host::A => "a",
            Host::B => "b",
            Host::C => "c",
        }
    }

    /// Parses `A`, `B` or `C` (any case).
    pub fn parse(s: &str) -> Result<Host> {
        match s {
            "A" | "a" => Ok(Host::A),
            "B" | "b" => Ok(Host::B),
            "C" | "c" => Ok(Host::C),
            _ => bail!("host must be A, B or C, not '{s}'"),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// A direction of a path: forward is from its first host to its second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// First host → second host (A → B on a default path).
    Fwd,
    /// Second host → first host.
    Rev,
}

impl Dir {
    /// Both directions, forward first (the emulator's order).
    pub const BOTH: [Dir; 2] = [Dir::Fwd, Dir::Rev];
}

fn default_between() -> [Host; 2] {
    [Host::A, Host::B]
}

/// One emulated path: its hosts, its routers and how it carries packets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathSpec {
    /// Round-trip time in ms (half of it each way).
    pub rtt_ms: f64,
    /// Rate in Mbit/s; 0 for unlimited.
    pub rate_mbit: f64,
    /// Random loss probability per packet, in both directions unless
    /// [`PathSpec::loss_fwd`] or [`PathSpec::loss_rev`] overrides it.
    pub loss: f64,
    /// Loss from the first host to the second, if not `loss`.
    #[serde(default)]
    pub loss_fwd: Option<f64>,
    /// Loss from the second host to the first, if not `loss`.
    #[serde(default)]
    pub loss_rev: Option<f64>,
    /// Queue limit: packets, or `None` for one bandwidth-delay product.
    pub queue_packets: Option<u64>,
    /// The hosts it joins, first one first (they get `.1` and `.2`).
    #[serde(default = "default_between")]
    pub between: [Host; 2],
    /// Routers along it, in order from the first host to the second.
    #[serde(default)]
    pub hops: Vec<Ipv4Addr>,
}

impl Default for PathSpec {
    /// What `--path` starts from: A–B, 0 ms, 1000 Mbit/s, no loss, a BDP
    /// of queue, no routers.
    fn default() -> PathSpec {
        PathSpec {
            rtt_ms: 0.0,
            rate_mbit: 1000.0,
            loss: 0.0,
            loss_fwd: None,
            loss_rev: None,
            queue_packets: None,
            between: default_between(),
            hops: Vec::new(),
        }
    }
}

impl PathSpec {
    /// The loss probability of one direction.
    pub fn loss_of(&self, dir: Dir) -> f64 {
        match dir {
            Dir::Fwd => self.loss_fwd,
            Dir::Rev => self.loss_rev,
        }
        .unwrap_or(self.loss)
    }

    /// Sets the loss of both directions, dropping per-direction values.
    pub fn set_loss(&mut self, p: f64) {
        self.loss = p;
        self.loss_fwd = None;
        self.loss_rev = None;
    }

    /// The routers a packet travelling in `dir` meets, in its order.
    pub fn hops_toward(&self, dir: Dir) -> Vec<Ipv4Addr> {
        let mut hops = self.hops.clone();
        if dir == Dir::Rev {
            hops.reverse();
        }
        hops
    }

    /// The round-trip time.
    pub fn rtt(&self) -> Duration {
        Duration::from_secs_f64(self.rtt_ms / 1e3)
    }

    /// The link configuration of direction `dir` for an MTU.
    pub fn link_config(&self, mtu: u32, dir: Dir) -> LinkConfig {
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
            loss: self.loss_of(dir),
        }
    }

    /// Checks that the values are usable in a lab of `hosts` hosts.
    pub fn validate(&self, hosts: usize) -> Result<()> {
        let ok = |v: f64| v >= 0.0 && v.is_finite();
        if !(ok(self.rtt_ms) && ok(self.rate_mbit)) {
            bail!("rtt and rate must be zero or positive");
        }
        for (what, p) in [
            ("loss", Some(self.loss)),
            ("loss_fwd", self.loss_fwd),
            ("loss_rev", self.loss_rev),
        ] {
            if p.is_some_and(|p| !(0.0..=1.0).contains(&p)) {
                bail!("{what} must be between 0 and 1");
            }
        }
        let [first, second] = self.between;
        if first == second {
            bail!("a path joins two different hosts, not {first} and itself");
        }
        if let Some(h) = self.between.iter().find(|h| h.index() >= hosts) {
            bail!("host {h} is not in this lab (it has {hosts} hosts; `up --hosts 3` adds C)");
        }
        if self.hops.len() > MAX_HOPS {
            bail!("at most {MAX_HOPS} hops, not {}", self.hops.len());
        }
        Ok(())
    }
}

impl FromStr for PathSpec {
    type Err = String;

    /// `KEY=VALUE,…` with keys rtt, rate, loss, loss_fwd, loss_rev, queue,
    /// between and hops, each optional (see [`PathSpec::default`]).
    fn from_str(s: &str) -> Result<PathSpec, String> {
        let mut spec = PathSpec::default();
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or(format!("'{part}' is not KEY=VALUE"))?;
            match k {
                "rtt" => spec.rtt_ms = v.parse().map_err(|_| format!("bad rtt '{v}'"))?,
                "rate" => spec.rate_mbit = v.parse().map_err(|_| format!("bad rate '{v}'"))?,
                "loss" => spec.loss = parse_loss(v)?,
                "loss_fwd" => spec.loss_fwd = Some(parse_loss(v)?),
                "loss_rev" => spec.loss_rev = Some(parse_loss(v)?),
                "queue" => spec.queue_packets = parse_queue(v)?,
                "between" => spec.between = parse_between(v)?,
                "hops" => spec.hops = parse_hops(v)?,
                _ => {
                    return Err(format!(
                        "unknown path key '{k}' (rtt, rate, loss, loss_fwd, loss_rev, queue, between, hops)"
                    ));
                }
            }
        }
        Ok(spec)
    }
}

/// A loss probability: a fraction (`0.0001`) or a percentage (`0.01%`).
pub fn parse_loss(s: &str) -> Result<f64, String> {
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

/// A queue limit: packets, or `bdp` (`None`) for one bandwidth-delay product.
pub fn parse_queue(s: &str) -> Result<Option<u64>, String> {
    if s.eq_ignore_ascii_case("bdp") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("queue must be packets or 'bdp', not '{s}'"))
}

/// Two hosts joined by a path: `A-C` (any case).
pub fn parse_between(s: &str) -> Result<[Host; 2], String> {
    let (a, b) = s
        .split_once('-')
        .ok_or(format!("between takes two hosts like A-C, not '{s}'"))?;
    let host = |h: &str| Host::parse(h).map_err(|e| e.to_string());
    Ok([host(a)?, host(b)?])
}

/// Routers: IPv4 addresses joined by `+` (`10.48.0.1+10.48.1.1`), or
/// `none` (or nothing) for none.
pub fn parse_hops(s: &str) -> Result<Vec<Ipv4Addr>, String> {
    if s.is_empty() || s.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let hops = s
        .split('+')
        .map(|a| {
            a.parse().map_err(|_| {
                format!("hop '{a}' is not an IPv4 address (hops are A.B.C.D+A.B.C.D…)")
            })
        })
        .collect::<Result<Vec<Ipv4Addr>, String>>()?;
    if hops.len() > MAX_HOPS {
        return Err(format!("at most {MAX_HOPS} hops, not {}", hops.len()));
    }
    Ok(hops)
}

/// The address of end `end` (0: the first host, 1: the second) of path `i`.
pub fn path_addr(path: usize, end: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 47, path as u8, 1 + end as u8)
}

fn two_hosts() -> usize {
    2
}

/// A whole lab's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabConfig {
    /// Lab name; namespaces are `NAME-a`, `NAME-b` (and `NAME-c`).
    pub name: String,
    /// MTU of the path devices.
    pub mtu: u32,
    /// How many hosts: 2 (A, B) or 3 (A, B, C).
    #[serde(default = "two_hosts")]
    pub hosts: usize,
    /// The paths.
    pub paths: Vec<PathSpec>,
}

impl LabConfig {
    /// Namespace of a host.
    pub fn netns(&self, host: Host) -> String {
        format!("{}-{}", self.name, host.suffix())
    }

    /// The lab's hosts, in order.
    pub fn hosts(&self) -> impl Iterator<Item = Host> + '_ {
        Host::ALL.into_iter().take(self.hosts)
    }

    /// `host` if the lab has it.
    pub fn host(&self, host: Host) -> Result<Host> {
        if host.index() >= self.hosts {
            bail!(
                "lab '{}' has no host {host} (`up --hosts 3` adds C)",
                self.name
            );
        }
        Ok(host)
    }

    /// The address of `host` on path `path`, if that path joins it.
    pub fn addr(&self, host: Host, path: usize) -> Option<Ipv4Addr> {
        let end = self
            .paths
            .get(path)?
            .between
            .iter()
            .position(|h| *h == host)?;
        Some(path_addr(path, end))
    }

    /// Checks the whole configuration before anything is made.
    pub fn validate(&self) -> Result<()> {
        if !(2..=3).contains(&self.hosts) {
            bail!("2 or 3 hosts, not {}", self.hosts);
        }
        if self.paths.is_empty() || self.paths.len() > MAX_PATHS {
            bail!("between 1 and {MAX_PATHS} paths, not {}", self.paths.len());
        }
        for (i, p) in self.paths.iter().enumerate() {
            p.validate(self.hosts)
                .map_err(|e| anyhow::anyhow!("path {i}: {e}"))?;
        }
        if !(576..=65_535).contains(&self.mtu) {
            bail!("MTU {} outside 576..=65535", self.mtu);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(hosts: usize, paths: &[&str]) -> LabConfig {
        LabConfig {
            name: "t".into(),
            mtu: 1500,
            hosts,
            paths: paths.iter().map(|p| p.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn a_path_spec_parses_every_key() {
        let p: PathSpec =
            "rtt=40,rate=100,loss=1%,loss_rev=0,queue=50,between=b-C,hops=10.48.0.1+10.48.1.1"
                .parse()
                .unwrap();
        assert_eq!(
            (p.rtt_ms, p.rate_mbit, p.queue_packets),
            (40.0, 100.0, Some(50))
        );
        assert_eq!(p.between, [Host::B, Host::C]);
        assert_eq!(
            p.hops,
            [
                "10.48.0.1".parse::<Ipv4Addr>().unwrap(),
                "10.48.1.1".parse().unwrap()
            ]
        );
        assert_eq!((p.loss_of(Dir::Fwd), p.loss_of(Dir::Rev)), (0.01, 0.0));
        assert_eq!(p.link_config(1500, Dir::Fwd).loss, 0.01);
        assert_eq!(p.link_config(1500, Dir::Rev).loss, 0.0);
        assert_eq!(p.hops_toward(Dir::Rev)[0], p.hops[1]);
        let d: PathSpec = "rtt=5".parse().unwrap();
        assert_eq!(
            (d.between, d.hops.len(), d.rate_mbit),
            ([Host::A, Host::B], 0, 1000.0)
        );
        for bad in [
            "hops=10.48.0",
            "between=A",
            "between=A-D",
            "loss_fwd=2",
            "colour=red",
            "rtt",
        ] {
            assert!(bad.parse::<PathSpec>().is_err(), "{bad}");
        }
        assert_eq!(parse_hops("none").unwrap(), Vec::<Ipv4Addr>::new());
    }

    #[test]
    fn an_old_config_without_the_new_fields_still_loads() {
        let old = r#"{"name":"x","mtu":1500,"paths":[{"rtt_ms":10.0,"rate_mbit":100.0,"loss":0.02,"queue_packets":null}]}"#;
        let cfg: LabConfig = serde_json::from_str(old).unwrap();
        assert_eq!(cfg.hosts, 2);
        let p = &cfg.paths[0];
        assert_eq!((p.between, p.hops.len()), ([Host::A, Host::B], 0));
        assert_eq!((p.loss_of(Dir::Fwd), p.loss_of(Dir::Rev)), (0.02, 0.02));
    }

    #[test]
    fn addresses_follow_each_paths_hosts() {
        let cfg = lab(3, &["between=A-B", "between=A-C", "between=C-B"]);
        cfg.validate().unwrap();
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(cfg.addr(Host::A, 0), Some(ip("10.47.0.1")));
        assert_eq!(cfg.addr(Host::B, 0), Some(ip("10.47.0.2")));
        assert_eq!(cfg.addr(Host::C, 0), None);
        assert_eq!(cfg.addr(Host::C, 1), Some(ip("10.47.1.2")));
        assert_eq!(cfg.addr(Host::C, 2), Some(ip("10.47.2.1")));
        assert_eq!(cfg.addr(Host::B, 2), Some(ip("10.47.2.2")));
        assert_eq!(cfg.addr(Host::A, 3), None);
        assert_eq!(cfg.hosts().count(), 3);
        assert!(cfg.host(Host::C).is_ok());
    }

    #[test]
    fn bad_topologies_are_refused_with_a_reason() {
        let err = |cfg: LabConfig| cfg.validate().unwrap_err().to_string();
        assert!(err(lab(3, &["between=B-b"])).contains("itself"));
        assert!(err(lab(2, &["between=A-C"])).contains("host C is not in this lab"));
        assert!(err(lab(4, &["rtt=1"])).contains("2 or 3 hosts"));
        assert!(lab(2, &["rtt=1"]).host(Host::C).is_err());
        let mut too_many = lab(2, &["rtt=1"]);
        too_many.paths[0].hops = vec![Ipv4Addr::LOCALHOST; MAX_HOPS + 1];
        assert!(err(too_many).contains("hops"));
    }
}
