//! The emulator process: moves packets between the TUN devices of the two
//! namespaces through a [`Link`] per path and direction.
//!
//! Per direction, a reader thread takes packets from the source device and
//! asks the link what becomes of them; a writer thread hands each surviving
//! packet to the destination device at its delivery time. Sleeping is
//! coarse (tens of µs) but harmless: delivery times are computed from the
//! link model, so rates and delays hold on average and no packet is
//! delivered early.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::lab::{self, Host, LabConfig, PathStatus, Reply, Request};
use crate::link::Link;

/// Packets waiting for their delivery time, in order.
type Pending = (Mutex<VecDeque<(Instant, Vec<u8>)>>, Condvar);

struct Direction {
    link: Mutex<Link>,
    pending: Pending,
}

/// Runs the emulator for a lab until its devices disappear.
pub fn run(name: &str) -> Result<()> {
    let cfg = lab::load(name)?;
    let mut paths = Vec::new();
    for (i, spec) in cfg.paths.iter().enumerate() {
        let dev = lab::device(i);
        let open = |host: Host| {
            let ns = Path::new("/var/run/netns").join(cfg.netns(host));
            crate::sys::create_tun_in(ns, &dev)
                .with_context(|| format!("creating {dev} in {}", cfg.netns(host)))
        };
        let (tun_a, tun_b) = (open(Host::A)?, open(Host::B)?);
        let link_cfg = spec.link_config(cfg.mtu);
        let dirs = [
            Arc::new(new_direction(link_cfg)),
            Arc::new(new_direction(link_cfg)),
        ];
        spawn_direction(
            tun_a.try_clone()?,
            tun_b.try_clone()?,
            dirs[0].clone(),
            cfg.mtu,
        );
        spawn_direction(tun_b, tun_a, dirs[1].clone(), cfg.mtu);
        paths.push((*spec, dirs));
    }
    let paths = Arc::new(Mutex::new(paths));
    control(&cfg, paths)
}

fn new_direction(cfg: crate::link::LinkConfig) -> Direction {
    Direction {
        link: Mutex::new(Link::new(cfg)),
        pending: (Mutex::new(VecDeque::new()), Condvar::new()),
    }
}

fn spawn_direction(mut from: File, mut to: File, dir: Arc<Direction>, mtu: u32) {
    let reader_dir = dir.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; mtu as usize + 64];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => std::process::exit(0),
                Ok(n) => n,
            };
            let now = Instant::now();
            let uniform: f64 = rand::random();
            let fate = reader_dir.link.lock().expect("link").offer(now, n, uniform);
            if let crate::link::Fate::Deliver(at) = fate {
                let (queue, cv) = &reader_dir.pending;
                queue
                    .lock()
                    .expect("queue")
                    .push_back((at, buf[..n].to_vec()));
                cv.notify_one();
            }
        }
    });
    std::thread::spawn(move || {
        let (queue, cv) = &dir.pending;
        let mut q = queue.lock().expect("queue");
        loop {
            let Some(at) = q.front().map(|(at, _)| *at) else {
                q = cv.wait(q).expect("queue");
                continue;
            };
            let now = Instant::now();
            if at > now {
                q = cv.wait_timeout(q, at - now).expect("queue").0;
                continue;
            }
            let (_, packet) = q.pop_front().expect("front exists");
            drop(q);
            // A write can fail while a namespace is being torn down.
            let _ = to.write(&packet);
            q = queue.lock().expect("queue");
        }
    });
}

type Paths = Arc<Mutex<Vec<(lab::PathSpec, [Arc<Direction>; 2])>>>;

fn control(cfg: &LabConfig, paths: Paths) -> Result<()> {
    let sock = lab::state_dir(&cfg.name).join("ctl.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock)?;
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        if BufReader::new(&conn).read_line(&mut line).is_err() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Err(e) => Reply::Error(format!("bad request: {e}")),
            Ok(Request::Status) => {
                let paths = paths.lock().expect("paths");
                Reply::Status(
                    paths
                        .iter()
                        .map(|(spec, dirs)| PathStatus {
                            spec: *spec,
                            a_to_b: dirs[0].link.lock().expect("link").counters(),
                            b_to_a: dirs[1].link.lock().expect("link").counters(),
                        })
                        .collect(),
                )
            }
            Ok(Request::Set { path, spec }) => {
                let mut paths = paths.lock().expect("paths");
                match paths.get_mut(path) {
                    None => Reply::Error(format!("no path {path}")),
                    Some((current, dirs)) => {
                        *current = spec;
                        for d in dirs.iter() {
                            d.link.lock().expect("link").set(spec.link_config(cfg.mtu));
                        }
                        Reply::Ok
                    }
                }
            }
        };
        let mut out = serde_json::to_string(&reply)?;
        out.push('\n');
        let _ = conn.write_all(out.as_bytes());
    }
    Ok(())
}
