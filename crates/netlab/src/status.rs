//! What `netlab status` shows: the configuration in force (as the emulator
//! reports it, so after `set`), the TCP settings of each host and the
//! counters of each path and direction, as text for people or as one line
//! of JSON for scripts and tests. `docs/NETLAB.md` documents the JSON
//! keys; the ones of two-host labs keep their old names and meanings.

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};

use crate::lab::{self, Dir, LabConfig, PathStatus, Reply, Request};
use crate::link::LinkCounters;

/// The status of running lab `name`, as JSON (`json`) or text.
pub fn show(name: &str, json: bool) -> Result<String> {
    let cfg = lab::load(name)?;
    let Reply::Status(paths) = lab::query(name, &Request::Status)? else {
        bail!("the emulator did not answer");
    };
    let sysctls = sysctls(&cfg);
    Ok(if json {
        to_json(&cfg, &paths, sysctls).to_string()
    } else {
        to_text(&cfg, &paths, &sysctls)
    })
}

/// The [`lab::REPORTED_SYSCTLS`] of each host (`""` if unreadable).
fn sysctls(cfg: &LabConfig) -> Map<String, Value> {
    let mut all = Map::new();
    for host in cfg.hosts() {
        let ns = cfg.netns(host);
        let mut m = Map::new();
        for key in lab::REPORTED_SYSCTLS {
            m.insert(
                key.into(),
                lab::read_sysctl(&ns, key).unwrap_or_default().into(),
            );
        }
        all.insert(host.to_string(), m.into());
    }
    all
}

/// The JSON of `status --json`.
pub fn to_json(cfg: &LabConfig, paths: &[PathStatus], sysctls: Map<String, Value>) -> Value {
    let hosts: Map<String, Value> = cfg
        .hosts()
        .map(|h| (h.to_string(), cfg.netns(h).into()))
        .collect();
    let paths: Vec<Value> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| path_json(cfg, i, p))
        .collect();
    json!({
        "lab": cfg.name, "mtu": cfg.mtu, "hosts": hosts,
        "paths": paths, "sysctls": sysctls,
    })
}

fn path_json(cfg: &LabConfig, i: usize, p: &PathStatus) -> Value {
    let s = &p.spec;
    let ends = s.between.map(|h| cfg.addr(h, i).map(|a| a.to_string()));
    let addrs: Map<String, Value> = s
        .between
        .iter()
        .zip(&ends)
        .map(|(h, a)| (h.to_string(), a.clone().into()))
        .collect();
    let hops: Vec<String> = s.hops.iter().map(|h| h.to_string()).collect();
    json!({
        "index": i, "between": s.between, "addrs": addrs, "a": ends[0], "b": ends[1],
        "device": lab::device(i), "rtt_ms": s.rtt_ms, "rate_mbit": s.rate_mbit,
        "loss": s.loss, "loss_fwd": s.loss_of(Dir::Fwd), "loss_rev": s.loss_of(Dir::Rev),
        "hops": hops, "queue_packets": s.queue_packets,
        "queue_bytes": s.link_config(cfg.mtu, Dir::Fwd).queue_bytes, "offload": p.offload,
        "fwd": p.fwd, "rev": p.rev, "a_to_b": p.fwd, "b_to_a": p.rev,
    })
}

/// The text of `status`.
pub fn to_text(cfg: &LabConfig, paths: &[PathStatus], sysctls: &Map<String, Value>) -> String {
    let hosts: Vec<String> = cfg
        .hosts()
        .map(|h| format!("{h} = netns {}", cfg.netns(h)))
        .collect();
    let mut out = format!(
        "lab {} (hosts {}), MTU {}\n",
        cfg.name,
        hosts.join(", "),
        cfg.mtu
    );
    for (i, p) in paths.iter().enumerate() {
        out += &path_text(cfg, i, p);
    }
    for (host, m) in sysctls {
        out += &format!("  host {host}: {m}\n");
    }
    out.truncate(out.trim_end().len());
    out
}

fn path_text(cfg: &LabConfig, i: usize, p: &PathStatus) -> String {
    let s = &p.spec;
    let [first, second] = s.between;
    let addr = |h| cfg.addr(h, i).map_or(String::new(), |a| a.to_string());
    let (fwd, rev) = (s.loss_of(Dir::Fwd), s.loss_of(Dir::Rev));
    let loss = if fwd == rev {
        format!("{fwd}")
    } else {
        format!("{fwd} {first}->{second}, {rev} {second}->{first}")
    };
    let hops = if s.hops.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = s.hops.iter().map(|h| h.to_string()).collect();
        format!(", hops {}", list.join(" > "))
    };
    format!(
        "  path {i}: {first} {} <-> {second} {}  rtt {} ms, rate {} Mbit/s, loss {loss}, queue {} bytes, offload {}{hops}\n    {}->{} {};  {}->{} {}\n",
        addr(first),
        addr(second),
        s.rtt_ms,
        s.rate_mbit,
        s.link_config(cfg.mtu, Dir::Fwd).queue_bytes,
        if p.offload { "on" } else { "off" },
        first,
        second,
        counters_text(&p.fwd),
        second,
        first,
        counters_text(&p.rev),
    )
}

fn counters_text(c: &LinkCounters) -> String {
    let mut t = format!(
        "{} pkts, {} drops (queue {}, random {})",
        c.packets,
        c.queue_drops + c.random_drops,
        c.queue_drops,
        c.random_drops
    );
    if c.expired > 0 {
        t += &format!(", {} expired ({} answered)", c.expired, c.time_exceeded);
    }
    t
}
