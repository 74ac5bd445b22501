//! The emulator process: moves packets between the TUN devices of each
//! path's two hosts through a [`Link`] per path and direction, past the
//! path's routers ([`crate::hops`]).
//!
//! Per direction, one thread takes frames from the source device, asks the
//! link what becomes of them and queues the survivors with their delivery
//! times; between reads it writes each queued frame that is due to the
//! destination device, and when there is nothing to read it sleeps in
//! `ppoll` until the next frame is due or a frame arrives. (One thread
//! rather than a reader and a writer: the hand-over between two threads
//! cost a futex wake and a context switch per frame, a third of the
//! emulator's CPU at 10 Gbit/s.) Sleeping is coarse (tens of µs) but
//! harmless: delivery times are computed from the link model, so rates and
//! delays hold on average and no packet is delivered early.
//!
//! With offloads (the default; see [`crate::sys::create_tun_in`]) a frame
//! is a TCP super-packet of up to 64 KiB standing for many wire packets
//! ([`gso::Shape`]): the link charges each wire packet, and the frame is
//! written on whole, still a super-packet, when all its packets survive and
//! are due within [`MAX_SPREAD`] of each other. Otherwise it is cut
//! ([`gso::build_chunk`]) into runs of consecutive surviving packets due
//! within `MAX_SPREAD`, each run delivered at its last packet's time. Frame
//! buffers are recycled through a pool, so the steady state allocates
//! nothing per packet.
//!
//! A path with routers (hops) first shows each IPv4 packet to them: one
//! whose TTL runs out at a router never reaches the link; the router's
//! ICMP Time Exceeded is queued instead, to be written back to the sending
//! device after the router's share of the round trip ([`hops::answer_delay`]),
//! outside the link's rate and loss. The others go on with their TTL
//! lowered by the number of routers.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::gso::{self, Shape, VNET_HDR_LEN, VnetHdr};
use crate::hops;
use crate::lab::{self, Dir, Host, LabConfig, PathSpec, PathStatus, Reply, Request};
use crate::link::{Fate, Link};

/// The longest a wire packet waits past its own delivery time so that it
/// can be delivered together with later packets of its super-packet. A
/// 64 KiB super-packet at 10 Gbit/s spans 52 µs, so it stays whole; at
/// lower rates super-packets are cut into runs this long.
pub const MAX_SPREAD: Duration = Duration::from_micros(100);

/// Frames up to this size are copied into small buffers (ACKs, pings), so
/// that a queue of them does not hold a 64 KiB buffer each.
const SMALL: usize = 2048;

/// Environment variable that, set to `0`, turns offloads off (per-packet
/// forwarding, as on kernels without them).
pub const OFFLOAD_ENV: &str = "NETLAB_OFFLOAD";

/// A frame due for delivery: when, its buffer, and how many bytes of it.
struct Frame {
    at: Instant,
    buf: Vec<u8>,
    len: usize,
}

/// Spare buffers: what the writes give back, the reads take again. Small
/// ones are [`SMALL`] bytes long, big ones `big_cap` (more than `SMALL`).
struct Pool {
    small: Vec<Vec<u8>>,
    big: Vec<Vec<u8>>,
    big_cap: usize,
}

/// How many spare buffers of each size a pool keeps at most.
const POOL_MAX: usize = 1024;

impl Pool {
    fn new(big_cap: usize) -> Pool {
        assert!(big_cap > SMALL);
        Pool {
            small: Vec::new(),
            big: Vec::new(),
            big_cap,
        }
    }

    /// A buffer of length [`SMALL`] (contents unspecified).
    fn small(&mut self) -> Vec<u8> {
        self.small.pop().unwrap_or_else(|| vec![0; SMALL])
    }

    /// A buffer of length `big_cap` (contents unspecified).
    fn big(&mut self) -> Vec<u8> {
        self.big.pop().unwrap_or_else(|| vec![0; self.big_cap])
    }

    /// Takes back a buffer that came from [`Pool::small`] or [`Pool::big`].
    fn give(&mut self, mut buf: Vec<u8>) {
        let (list, len) = if buf.capacity() >= self.big_cap {
            (&mut self.big, self.big_cap)
        } else {
            (&mut self.small, SMALL)
        };
        if list.len() < POOL_MAX && buf.capacity() >= len {
            buf.resize(len, 0);
            list.push(buf);
        }
    }
}

/// Router answers waiting for their time, at most: beyond, routers stay
/// silent (as real ones rate-limit their ICMP).
const MAX_ANSWERS: usize = 1024;

/// What one direction does to packets, changed together by `set`.
struct Leg {
    link: Link,
    /// The routers in this direction's order.
    hops: Vec<Ipv4Addr>,
    /// The path's round-trip time, for the routers' answers.
    rtt: Duration,
}

impl Leg {
    fn new(spec: &PathSpec, mtu: u32, dir: Dir) -> Leg {
        Leg {
            link: Link::new(spec.link_config(mtu, dir)),
            hops: spec.hops_toward(dir),
            rtt: spec.rtt(),
        }
    }

    fn set(&mut self, spec: &PathSpec, mtu: u32, dir: Dir) {
        self.link.set(spec.link_config(mtu, dir));
        self.hops = spec.hops_toward(dir);
        self.rtt = spec.rtt();
    }
}

struct Direction {
    leg: Mutex<Leg>,
    /// Frames start with a virtio header and may be super-packets.
    offload: bool,
    /// Size of the reader's buffers: the largest frame the device hands over.
    frame_cap: usize,
}

/// Runs the emulator for a lab until its devices disappear.
pub fn run(name: &str) -> Result<()> {
    let cfg = lab::load(name)?;
    let want_offload = std::env::var(OFFLOAD_ENV).map_or(true, |v| v != "0");
    let mut paths = Vec::new();
    for (i, spec) in cfg.paths.iter().enumerate() {
        let [first, second] = spec.between;
        let dev = lab::device(i);
        let open = |host: Host, offload: bool| {
            let ns = Path::new("/var/run/netns").join(cfg.netns(host));
            crate::sys::create_tun_in(ns, &dev, offload)
                .with_context(|| format!("creating {dev} in {}", cfg.netns(host)))
        };
        let with_offload = if want_offload {
            match open(first, true).and_then(|a| Ok((a, open(second, true)?))) {
                Ok(pair) => Some(pair),
                Err(e) => {
                    eprintln!(
                        "netlab: offloads unavailable on {dev} ({e:#}); forwarding packet by packet"
                    );
                    None
                }
            }
        } else {
            eprintln!("netlab: {OFFLOAD_ENV}=0: forwarding packet by packet on {dev}");
            None
        };
        let offload = with_offload.is_some();
        let (tun_first, tun_second) = match with_offload {
            Some(pair) => pair,
            None => (open(first, false)?, open(second, false)?),
        };
        let frame_cap = if offload {
            VNET_HDR_LEN + 65_536
        } else {
            (cfg.mtu as usize + 64).max(2 * SMALL)
        };
        let dirs = Dir::BOTH.map(|dir| {
            Arc::new(Direction {
                leg: Mutex::new(Leg::new(spec, cfg.mtu, dir)),
                offload,
                frame_cap,
            })
        });
        spawn_direction(
            tun_first.try_clone()?,
            tun_second.try_clone()?,
            dirs[0].clone(),
        );
        spawn_direction(tun_second, tun_first, dirs[1].clone());
        paths.push((spec.clone(), dirs));
    }
    let paths = Arc::new(Mutex::new(paths));
    control(&cfg, paths)
}

/// A run of consecutive surviving segments `start..end` of a frame, the
/// first due at `first`, the last at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First segment.
    pub start: usize,
    /// One past the last segment.
    pub end: usize,
    /// Delivery time of the first segment.
    pub first: Instant,
    /// Delivery time of the last segment: the run's.
    pub at: Instant,
}

/// Groups the segments delivered in `fates` into runs of consecutive
/// segments due within [`MAX_SPREAD`] of the run's first; replaces `runs`.
pub fn runs_of(fates: &[Fate], runs: &mut Vec<Run>) {
    runs.clear();
    for (i, fate) in fates.iter().enumerate() {
        let Fate::Deliver(at) = *fate else { continue };
        match runs.last_mut() {
            Some(r) if r.end == i && at.saturating_duration_since(r.first) <= MAX_SPREAD => {
                r.end = i + 1;
                r.at = at;
            }
            _ => runs.push(Run {
                start: i,
                end: i + 1,
                first: at,
                at,
            }),
        }
    }
}

fn spawn_direction(from: File, to: File, dir: Arc<Direction>) {
    std::thread::spawn(move || {
        if let Err(e) = crate::sys::set_nonblocking(&from) {
            eprintln!("netlab: {e}");
            std::process::exit(1);
        }
        let frame_cap = dir.frame_cap;
        Forwarder {
            dir,
            from,
            to,
            buf: Vec::new(),
            pool: Pool::new(frame_cap),
            pending: VecDeque::new(),
            answers: VecDeque::new(),
            fates: Vec::new(),
            runs: Vec::new(),
        }
        .run()
    });
}

/// One direction's thread and what it keeps between frames.
struct Forwarder {
    dir: Arc<Direction>,
    from: File,
    to: File,
    /// The buffer the next frame is read into.
    buf: Vec<u8>,
    pool: Pool,
    /// Frames waiting for their delivery time, in order.
    pending: VecDeque<Frame>,
    /// Routers' answers waiting to be written back to `from`, in time order.
    answers: VecDeque<Frame>,
    fates: Vec<Fate>,
    runs: Vec<Run>,
}

impl Forwarder {
    fn run(mut self) -> ! {
        self.buf = self.pool.big();
        loop {
            // Read while frames are there and none is overdue.
            loop {
                let n = match self.from.read(&mut self.buf) {
                    Ok(0) => std::process::exit(0),
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // The devices are gone: the lab is being taken down.
                    Err(_) => std::process::exit(0),
                };
                self.offer(n);
                if self.next_due().is_some_and(|at| at <= Instant::now()) {
                    break;
                }
            }
            let now = Instant::now();
            // A write can fail while a namespace is being torn down.
            while let Some(f) = pop_due(&mut self.pending, now) {
                let _ = self.to.write(&f.buf[..f.len]);
                self.pool.give(f.buf);
            }
            while let Some(f) = pop_due(&mut self.answers, now) {
                let _ = self.from.write(&f.buf[..f.len]);
                self.pool.give(f.buf);
            }
            let wait = self
                .next_due()
                .map(|at| at.saturating_duration_since(Instant::now()));
            if wait != Some(Duration::ZERO) {
                crate::sys::wait_readable(self.from.as_raw_fd(), wait);
            }
        }
    }

    /// When the next frame or answer is due.
    fn next_due(&self) -> Option<Instant> {
        let (a, b) = (self.pending.front(), self.answers.front());
        match (a.map(|f| f.at), b.map(|f| f.at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Puts the frame of `n` bytes just read past the routers and through
    /// the link, and queues what survives of it.
    fn offer(&mut self, n: usize) {
        let now = Instant::now();
        let dir = &*self.dir;
        let mut leg = dir.leg.lock().expect("leg");
        if !leg.hops.is_empty() {
            let frame = &mut self.buf[..n];
            if expires(
                &mut leg,
                dir.offload,
                frame,
                now,
                &mut self.pool,
                &mut self.answers,
            ) {
                return;
            }
        }
        let frame = &self.buf[..n];
        let shape = if dir.offload {
            gso::shape(frame)
        } else {
            Shape::single(n)
        };
        leg.link
            .offer_frame(now, &shape, rand::random, &mut self.fates);
        drop(leg);
        runs_of(&self.fates, &mut self.runs);
        // (A frame that is not splittable is one segment: whole if kept.)
        let whole = self.runs.len() == 1 && self.runs[0].end - self.runs[0].start == shape.segments;
        if whole {
            // A plain packet, or a super-packet intact: no cutting.
            let keep = if n <= SMALL {
                let mut small = self.pool.small();
                small[..n].copy_from_slice(frame);
                small
            } else {
                let next = self.pool.big();
                std::mem::replace(&mut self.buf, next)
            };
            self.pending.push_back(Frame {
                at: self.runs[0].at,
                buf: keep,
                len: n,
            });
            return;
        }
        for r in &self.runs {
            let size = VNET_HDR_LEN + shape.headers + (r.end - r.start) * shape.seg;
            let mut chunk = if size <= SMALL {
                self.pool.small()
            } else {
                self.pool.big()
            };
            gso::build_chunk(frame, &shape, r.start, r.end - r.start, &mut chunk);
            let len = chunk.len();
            self.pending.push_back(Frame {
                at: r.at,
                buf: chunk,
                len,
            });
        }
    }
}

/// Takes `frame` past the routers of `leg`: lowers its TTL and returns
/// false when it goes on to the link; returns true when it expired at a
/// router, after queuing that router's answer in `answers` (unless it is
/// a super-packet, or a packet routers do not answer, or too many answers
/// wait already).
fn expires(
    leg: &mut Leg,
    offload: bool,
    frame: &mut [u8],
    now: Instant,
    pool: &mut Pool,
    answers: &mut VecDeque<Frame>,
) -> bool {
    let ip_at = if offload { VNET_HDR_LEN } else { 0 };
    let Some(ip) = frame.get_mut(ip_at..) else {
        return false;
    };
    let hops::Fate::Expired { hop, answer } = hops::traverse(ip, leg.hops.len()) else {
        return false;
    };
    let segments = if offload {
        gso::shape(frame).segments
    } else {
        1
    };
    let answer = answer && segments == 1 && answers.len() < MAX_ANSWERS;
    leg.link.count_expired(segments as u64, answer);
    if answer {
        let at = now + hops::answer_delay(leg.rtt, hop, leg.hops.len());
        let mut out = pool.small();
        out.clear();
        if offload {
            out.resize(VNET_HDR_LEN, 0);
            VnetHdr::default().write(&mut out);
        }
        hops::time_exceeded(&frame[ip_at..], leg.hops[hop - 1], &mut out);
        let len = out.len();
        let i = answers.partition_point(|f| f.at <= at);
        answers.insert(i, Frame { at, buf: out, len });
    }
    true
}

/// The first frame of `queue` if it is due by `now`.
fn pop_due(queue: &mut VecDeque<Frame>, now: Instant) -> Option<Frame> {
    if queue.front().is_some_and(|f| f.at <= now) {
        queue.pop_front()
    } else {
        None
    }
}

/// Per path: its configuration in force and its two directions (forward,
/// reverse).
type Paths = Arc<Mutex<Vec<(PathSpec, [Arc<Direction>; 2])>>>;

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
            Ok(Request::Status) => status(&paths),
            Ok(Request::Set { path, spec }) => set(cfg, &paths, path, spec),
        };
        let mut out = serde_json::to_string(&reply)?;
        out.push('\n');
        let _ = conn.write_all(out.as_bytes());
    }
    Ok(())
}

fn status(paths: &Paths) -> Reply {
    let paths = paths.lock().expect("paths");
    let counters = |d: &Direction| d.leg.lock().expect("leg").link.counters();
    Reply::Status(
        paths
            .iter()
            .map(|(spec, [fwd, rev])| PathStatus {
                spec: spec.clone(),
                offload: fwd.offload,
                fwd: counters(fwd),
                rev: counters(rev),
            })
            .collect(),
    )
}

/// Replaces path `path`'s configuration: rate, delay, loss and routers of
/// each direction at once (under its lock). Its hosts cannot change.
fn set(cfg: &LabConfig, paths: &Paths, path: usize, spec: PathSpec) -> Reply {
    let mut paths = paths.lock().expect("paths");
    let Some((current, dirs)) = paths.get_mut(path) else {
        return Reply::Error(format!("no path {path}"));
    };
    if let Err(e) = spec.validate(cfg.hosts) {
        return Reply::Error(format!("path {path}: {e}"));
    }
    if spec.between != current.between {
        return Reply::Error(format!(
            "path {path} joins {}-{}; its hosts cannot change",
            current.between[0], current.between[1]
        ));
    }
    for (d, dir) in dirs.iter().zip(Dir::BOTH) {
        d.leg.lock().expect("leg").set(&spec, cfg.mtu, dir);
    }
    *current = spec;
    Reply::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_hands_back_the_buffers_it_was_given() {
        let mut pool = Pool::new(VNET_HDR_LEN + 65_536);
        let (big, small) = (pool.big(), pool.small());
        assert_eq!((big.len(), small.len()), (VNET_HDR_LEN + 65_536, SMALL));
        let (big_at, small_at) = (big.as_ptr(), small.as_ptr());
        // A chunk built into a buffer is shorter when it comes back.
        let mut chunk = big;
        chunk.truncate(100);
        pool.give(chunk);
        pool.give(small);
        let (big, small) = (pool.big(), pool.small());
        assert_eq!((big.as_ptr(), big.len()), (big_at, VNET_HDR_LEN + 65_536));
        assert_eq!((small.as_ptr(), small.len()), (small_at, SMALL));
        // Per-packet mode at MTU 1500: big buffers are still bigger than small.
        let mut pool = Pool::new((1500 + 64usize).max(2 * SMALL));
        let small = pool.small();
        let at = small.as_ptr();
        pool.give(small);
        let again = pool.small();
        assert_eq!(again.as_ptr(), at);
    }

    #[test]
    fn survivors_due_close_together_form_runs() {
        let t = Instant::now();
        let us = |n| Fate::Deliver(t + Duration::from_micros(n));
        let fates = [
            us(0),
            us(10),
            Fate::Lost,
            us(20),
            us(20 + 100),
            us(20 + 101),
            Fate::QueueFull,
        ];
        let mut runs = Vec::new();
        runs_of(&fates, &mut runs);
        let spans: Vec<(usize, usize)> = runs.iter().map(|r| (r.start, r.end)).collect();
        // A loss cuts a run; so does a packet due more than MAX_SPREAD
        // after the run's first.
        assert_eq!(spans, [(0, 2), (3, 5), (5, 6)]);
        assert_eq!(runs[1].at, t + Duration::from_micros(120));
        assert_eq!(runs[1].first, t + Duration::from_micros(20));
        runs_of(&[us(0), us(50), us(100)], &mut runs);
        assert_eq!(runs.len(), 1, "within MAX_SPREAD: whole");
        runs_of(&[Fate::Lost], &mut runs);
        assert!(runs.is_empty());
    }
}
