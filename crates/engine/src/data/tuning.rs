//! Live tuning of a session's data sockets, and the streams a running
//! session gains or retires.
//!
//! A [`Sampler`] owns one [`tern_drs::SocketTuner`] per TCP data stream. It
//! puts each socket on the session's congestion control and window mode as
//! the stream joins, ticks every tuner every [`SAMPLE_EVERY`] (which
//! measures, and in `auto` mode resizes buffers), and on the sending side
//! feeds the aggregate to the stream-count controller, whose decisions go
//! to the driver as [`StreamChange`]s. At the end it turns what it saw into
//! the `tuning` diagnosis of the report.

use std::future::Future;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_drs::session::{LONG_PATH_RTT, SessionSample, SessionSizer};
use tern_drs::streams::Observation;
use tern_drs::{Diagnosis, Direction, SocketTuner, StreamChange, StreamController, WindowMode};
use tokio::sync::mpsc;

use crate::Result;
use crate::data::channel::{BoxStream, Tasks};

mod groups;
mod start;

use start::start_budget;

use groups::{PathGroup, path_ends};

/// How often data sockets are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// Streams `--streams auto` starts with.
pub const AUTO_START_STREAMS: u16 = 1;

/// Streams `--streams auto` may grow to unless told (`--max-streams`).
pub const DEFAULT_MAX_STREAMS: u16 = 8;

/// A data stream that joined a session.
pub struct Joined {
    /// Its index in the session.
    pub index: u16,
    /// The connection, after the join.
    pub stream: BoxStream,
    /// A duplicate of its TCP socket, for `TCP_INFO` (none for pipes).
    pub probe: Option<OwnedFd>,
}

impl Joined {
    /// A stream with no socket behind it (pipes in local copies and tests).
    pub fn pipe(index: u16, stream: BoxStream) -> Joined {
        Joined {
            index,
            stream,
            probe: None,
        }
    }
}

impl std::fmt::Debug for Joined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Joined({})", self.index)
    }
}

/// Opens data stream `k` of a running session (the client's side).
pub type Connector =
    Arc<dyn Fn(u16) -> Pin<Box<dyn Future<Output = Result<Joined>> + Send>> + Send + Sync>;

/// A client's watch over the paths to a daemon (multi-path): told of
/// every stream lost, it now and then tries the paths that went down, and
/// says when one is back so that a stream can rejoin there.
pub trait PathWatch: Send + Sync + std::fmt::Debug {
    /// Stream `k` stalled or ended without its end marker.
    fn lost(&self, k: u16);
    /// Tries the paths that are down and due a try; true when one
    /// answered: the next stream opened goes over it.
    fn retry(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>>;
}

/// Where a running session gets more data streams from.
pub enum StreamSupply {
    /// Nowhere: the streams it started with are all it has.
    Fixed,
    /// This end connects them (the client), over the paths `watch` keeps
    /// an eye on when there are several.
    Connect(Connector, Option<Arc<dyn PathWatch>>),
    /// The peer connects them; they arrive here once joined (the server).
    Accept(mpsc::Receiver<Joined>),
}

impl StreamSupply {
    /// The watch over the paths, when this end connects over several.
    pub(crate) fn watch(&self) -> Option<Arc<dyn PathWatch>> {
        match self {
            StreamSupply::Connect(_, watch) => watch.clone(),
            _ => None,
        }
    }
}

impl std::fmt::Debug for StreamSupply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StreamSupply::Fixed => "Fixed",
            StreamSupply::Connect(..) => "Connect",
            StreamSupply::Accept(_) => "Accept",
        })
    }
}

/// Buffer sizing as a request carries it.
pub(crate) fn wire_window(window: WindowMode) -> tern_proto::Window {
    use tern_proto::Window;
    match window {
        WindowMode::Auto => Window::Auto,
        WindowMode::Kernel => Window::Kernel,
        WindowMode::Fixed(n) => Window::Fixed(n.min(u64::from(u32::MAX)) as u32),
    }
}

/// How a transfer's data sockets are tuned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Who sizes the buffers.
    pub window: WindowMode,
    /// Congestion control for the data sockets; empty for the kernel's
    /// default.
    pub congestion: String,
    /// The sending side may add and retire streams.
    pub auto_streams: bool,
    /// The client picks the starting count from the RTT of its control
    /// connection ([`tern_drs::session::start_streams`]), at least the
    /// count it asked for and at most its maximum.
    pub streams_from_rtt: bool,
    /// Stream-count changes at fixed times, applied by the sending side
    /// instead of the controller's (tests and experiments).
    pub script: Vec<(Duration, StreamChange)>,
    /// The path's rate as last seen (an earlier transfer to the same
    /// daemon), bits/s: on a long path the sending side's buffers start
    /// sized for it instead of growing from a guess while the streams ramp.
    pub known_rate_bps: Option<u64>,
    /// An earlier transfer to the same daemon settled the stream count
    /// this one starts with (its next addition did not pay): the
    /// controller makes no probes ([`StreamController::settled`]).
    pub streams_settled: bool,
    /// Paths to the peer besides the control connection's: while there are
    /// some, the stream-count controller adds streams (which go over them)
    /// even when the streams it has fill the first path.
    pub other_paths: u16,
    /// Paths with a reserved rate: the peer's address on each, and the
    /// rate in bits/s. A stream to one is paced at the rate and its
    /// buffers locked at rate × RTT; no sizer or budget touches it.
    pub reserved: Vec<(IpAddr, u64)>,
    /// The most streams the controller grows to, when lower than the
    /// session's cap: a client asks for room for several paths before it
    /// knows how many there are, then allows its `--max-streams` on each.
    pub stream_limit: Option<u16>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            window: WindowMode::Auto,
            congestion: String::new(),
            auto_streams: false,
            streams_from_rtt: false,
            script: Vec::new(),
            known_rate_bps: None,
            streams_settled: false,
            other_paths: 0,
            reserved: Vec::new(),
            stream_limit: None,
        }
    }
}

impl Tuning {
    /// The window mode's name in reports.
    pub fn window_name(&self) -> String {
        match self.window {
            WindowMode::Auto => "auto".into(),
            WindowMode::Kernel => "kernel".into(),
            WindowMode::Fixed(n) => n.to_string(),
        }
    }
}

struct Slot {
    // Declared before `probe`: the tuner holds the probe's raw fd.
    tuner: SocketTuner,
    _probe: OwnedFd,
    retired: bool,
    /// The path group whose budget sizes its send buffer (multi-path).
    group: Option<usize>,
    /// The peer's address at the other end of the socket: its path.
    peer: IpAddr,
    /// What the socket held undelivered at the last tick, and how fast
    /// it delivered: the sender's endgame works from it.
    flight: Option<tern_session::Flight>,
}

struct Tuners {
    tuning: Tuning,
    direction: Direction,
    per_stream: u64,
    slots: Vec<Option<Slot>>,
    controller: Option<StreamController>,
    /// Sizes the send buffers of the streams together on a long path.
    sizer: SessionSizer,
    /// The share the sizer gave last.
    share: u64,
    /// Streams the session has (or is about to have), for first shares.
    streams: u16,
    /// With other paths: one budget per path instead of `sizer`.
    groups: Vec<PathGroup>,
    changes: Option<mpsc::UnboundedSender<StreamChange>>,
    congestion_seen: Option<String>,
    started: Instant,
    trace: Option<std::io::BufWriter<std::fs::File>>,
    /// The most the open streams' (send, receive) buffers held at one tick.
    peak_together: (u64, u64),
    /// The receive buffer streams started at, for a known rate.
    receive_started: Option<u64>,
}

#[derive(Debug)]
/// One line of a `TCP_INFO` trace (`TERN_TCP_TRACE=FILE`): what a tuner saw
/// and did at one tick. The policy tests replay such traces.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct TraceLine {
    /// Stream index.
    pub stream: usize,
    /// Milliseconds since the session started.
    pub t_ms: u64,
    /// The sample.
    pub info: tern_drs::TcpInfo,
    /// Send buffer when sampled, before the policy acted.
    pub sndbuf: u64,
    /// Receive buffer when sampled, before the policy acted.
    pub rcvbuf: u64,
}

/// What a sizer is fed about `streams` streams: their bytes acknowledged
/// and their last intervals.
fn session_sample(
    at: Duration,
    bytes_acked: u64,
    streams: u16,
    intervals: &[tern_drs::Interval],
) -> SessionSample {
    SessionSample {
        at,
        bytes_acked,
        min_rtt_us: intervals
            .iter()
            .map(|iv| iv.min_rtt_us)
            .filter(|&r| r > 0)
            .min()
            .unwrap_or(0),
        streams,
        buffer_limited: intervals.iter().any(tern_drs::policy::is_sndbuf_limited),
        queueing: intervals.iter().any(tern_drs::policy::is_queueing),
    }
}

impl Tuners {
    fn add(&mut self, k: usize, probe: OwnedFd) {
        let fd = probe.as_raw_fd();
        let privileged = tern_drs::socket::privileged();
        if !self.tuning.congestion.is_empty() {
            if let Err(e) = tern_drs::socket::set_congestion(fd, &self.tuning.congestion) {
                tracing::warn!(
                    "stream {k}: cannot use congestion control {}: {e}",
                    self.tuning.congestion
                );
            }
        }
        if let WindowMode::Fixed(bytes) = self.tuning.window {
            if let Err(e) = tern_drs::tuner::fix_buffers(fd, bytes, privileged) {
                tracing::warn!("stream {k}: cannot set the window to {bytes}: {e}");
            }
        }
        if self.congestion_seen.is_none() {
            self.congestion_seen = tern_drs::socket::congestion(fd).ok();
        }
        let rtt = tern_drs::TcpInfo::read(fd)
            .map(|i| i.path_rtt())
            .unwrap_or_default();
        let ends = path_ends(&probe);
        let reserved = self
            .tuning
            .reserved
            .iter()
            .find(|(ip, _)| ip.to_canonical() == ends.1)
            .map(|&(_, bps)| bps);
        let mode = match reserved {
            Some(bps) => WindowMode::Fixed(self.reserve(k, fd, bps, rtt, privileged)),
            None => self.tuning.window,
        };
        let cfg = tern_drs::TunerConfig::new(mode, self.direction, self.per_stream);
        let wmem_max = cfg.caps.tcp_wmem[2];
        let mut tuner = SocketTuner::new(fd, cfg);
        // On a long path the session sizes the send buffers together, from
        // the first byte: kernel autotuning would take each stream to its
        // cap, which over several streams is far more than the path holds.
        let mut group = None;
        if reserved.is_some() {
            // Locked and paced: no budget of a path or the session.
        } else if rtt >= LONG_PATH_RTT && self.tuning.other_paths > 0 {
            // One session-wide share, from one RTT, would starve the longer
            // paths: each path's streams share a budget of their own.
            let g = self.group_for(ends, wmem_max);
            let members = self.members(g) + 1;
            let first = self.groups[g].sizer.share(members);
            if let Err(e) = tuner.share_with_session(first) {
                tracing::debug!("stream {k}: cannot size the send buffer: {e}");
            }
            group = Some(g);
        } else if rtt >= LONG_PATH_RTT {
            if self.sizer.bdp() == 0 {
                // What one autotuned stream could have, until a rate shows;
                // with a known rate, room for it from the first round trip.
                self.sizer.start_at(start_budget(
                    self.tuning.known_rate_bps,
                    rtt,
                    wmem_max,
                    self.streams,
                ));
            }
            let first = self.sizer.share(self.streams);
            if let Err(e) = tuner.share_with_session(first) {
                tracing::debug!("stream {k}: cannot size the send buffer: {e}");
            }
        }
        if let Some(slot) = self.slots.get_mut(k) {
            *slot = Some(Slot {
                tuner,
                _probe: probe,
                retired: false,
                group,
                peer: ends.1,
                flight: None,
            });
        }
        self.start_receive(k);
        if let Some(g) = group {
            // The members before it make room: the path's budget is split
            // anew, not added to (a probe's streams joining a path
            // otherwise held a third more than its budget until the next
            // sizing).
            let share = self.groups[g].sizer.share(self.members(g));
            if share < self.groups[g].share || self.groups[g].share == 0 {
                self.groups[g].share = share;
                self.apply_group_share(g);
            }
        }
    }

    fn tick(&mut self, act: bool) {
        let at = self.started.elapsed();
        let mut bytes = 0u64;
        let mut group_bytes = vec![0u64; self.groups.len()];
        let other_paths = self.tuning.other_paths > 0;
        let (mut at_cap, mut growing, mut worth_probing) = (false, false, other_paths);
        let loss_based = self
            .congestion_seen
            .as_deref()
            .is_some_and(|cc| !cc.starts_with("bbr"));
        let mut srtt = Duration::ZERO;
        for (k, slot) in self.slots.iter_mut().enumerate() {
            let Some(slot) = slot.as_mut().filter(|s| !s.retired) else {
                continue;
            };
            match slot.tuner.tick(at, act) {
                Ok(info) => {
                    if let Some(trace) = self.trace.as_mut() {
                        use std::io::Write;
                        let line = TraceLine {
                            stream: k,
                            t_ms: at.as_millis() as u64,
                            info,
                            sndbuf: slot.tuner.seen_sndbuf,
                            rcvbuf: slot.tuner.seen_rcvbuf,
                        };
                        if let Ok(text) = serde_json::to_string(&line) {
                            let _ = writeln!(trace, "{text}");
                        }
                    }
                    slot.flight = flight_of(&info, slot.tuner.interval());
                    bytes += info.bytes_acked;
                    if let Some(g) = slot.group {
                        group_bytes[g] += info.bytes_acked;
                    }
                    srtt = srtt.max(Duration::from_micros(u64::from(info.rtt_us)));
                    at_cap |= slot.tuner.at_cap();
                    growing |= slot.tuner.growing();
                    worth_probing |= slot.tuner.slow_reader();
                    if let Some(iv) = slot.tuner.interval() {
                        worth_probing |=
                            iv.busy_share < 0.8 || (loss_based && iv.retrans_bytes > 0);
                    }
                }
                Err(e) => tracing::debug!("stream {k}: cannot tune: {e}"),
            }
        }
        let open = || self.slots.iter().flatten().filter(|s| !s.retired);
        let together = (
            open().map(|s| s.tuner.seen_sndbuf).sum::<u64>(),
            open().map(|s| s.tuner.seen_rcvbuf).sum::<u64>(),
        );
        self.peak_together = (
            self.peak_together.0.max(together.0),
            self.peak_together.1.max(together.1),
        );
        if act {
            self.size_shared(at, bytes);
            self.size_groups(at, &group_bytes);
        }
        if !act || self.changes.is_none() {
            return;
        }
        while self.tuning.script.first().is_some_and(|(t, _)| *t <= at) {
            let (_, change) = self.tuning.script.remove(0);
            self.announce(change);
        }
        let Some(controller) = self.controller.as_mut() else {
            return;
        };
        let change = controller.observe(Observation {
            at,
            bytes,
            limited_at_cap: at_cap,
            growing_buffers: growing,
            worth_probing,
            srtt,
        });
        if let Some(change) = change {
            tracing::debug!("stream count: {change:?}");
            self.announce(change);
        }
    }

    /// Feeds the session's aggregate to the sizer and gives every shared
    /// send buffer its new share.
    fn size_shared(&mut self, at: Duration, bytes_acked: u64) {
        let active = || {
            self.slots
                .iter()
                .flatten()
                .filter(|s| !s.retired && s.group.is_none())
        };
        let shared = active().filter(|s| s.tuner.shared()).count();
        if shared == 0 {
            return;
        }
        let intervals: Vec<_> = active().filter_map(|s| s.tuner.interval()).collect();
        // Streams announced but not joined yet count: they will take
        // their shares as they join.
        let streams = u16::try_from(shared).unwrap_or(u16::MAX).max(self.streams);
        let sample = session_sample(at, bytes_acked, streams, &intervals);
        let Some(share) = self.sizer.observe(sample) else {
            return;
        };
        self.share = share;
        self.apply_shares();
    }

    fn apply_shares(&mut self) {
        for (k, slot) in self.slots.iter_mut().enumerate() {
            let Some(slot) = slot.as_mut().filter(|s| !s.retired && s.group.is_none()) else {
                continue;
            };
            if let Err(e) = slot.tuner.apply_share(self.share) {
                tracing::debug!("stream {k}: cannot size the send buffer: {e}");
            }
        }
    }

    /// Passes a stream-count change to the driver; streams being retired
    /// stop counting for the controller at once.
    fn announce(&mut self, change: StreamChange) {
        self.streams = match change {
            StreamChange::Grow(n) | StreamChange::Retire(n) => n.max(1),
        };
        if let StreamChange::Retire(n) = change {
            for slot in self.slots.iter_mut().skip(usize::from(n)).flatten() {
                slot.retired = true;
            }
        }
        // The session's buffers are split anew at once: streams that join
        // must not add their shares on top of what the others hold.
        if self.share > 0 {
            self.share = self.sizer.share(self.streams);
            self.apply_shares();
        }
        for g in 0..self.groups.len() {
            if self.groups[g].share > 0 {
                self.groups[g].share = self.groups[g].sizer.share(self.members(g).max(1));
                self.apply_group_share(g);
            }
        }
        if let Some(tx) = &self.changes {
            let _ = tx.send(change);
        }
    }

    fn diagnosis(&mut self) -> Option<Diagnosis> {
        let slots: Vec<&Slot> = self.slots.iter().flatten().collect();
        if slots.is_empty() {
            return None;
        }
        // Retired streams count for memory, not for what limited the transfer.
        let active = slots.iter().filter(|s| !s.retired);
        let estimates: Vec<tern_drs::StreamEstimate> =
            active.clone().map(|s| s.tuner.estimate()).collect();
        let paths = self.path_tunings(&slots, &estimates);
        let raised: Vec<Option<u64>> = active
            .clone()
            .filter(|s| !s.tuner.shared())
            .map(|s| s.tuner.raised_sndbuf)
            .collect();
        let shared = active.filter(|s| s.tuner.shared()).count();
        let mut d = tern_drs::diagnose(estimates, tern_drs::HostCaps::read(), &raised);
        d.paths = paths;
        if d.limit == tern_drs::Limit::Unknown && self.direction == Direction::Receive {
            // The kernel keeps what limited a stream on its sending end; a
            // receiver sees none of it however much it received, so the
            // generic "too little data moved" would be untrue here.
            d.summary = "This end received: TCP_INFO tells what limited a stream only at its \
                         sending end, so the sender's report says it."
                .into();
        }
        let rcv: Vec<u64> = slots.iter().filter_map(|s| s.tuner.raised_rcvbuf).collect();
        if let Some(&largest) = rcv.iter().max() {
            d.actions.push(format!(
                "raised the receive buffer of {} of {} streams past the tcp_rmem cap, up to {:.1} MiB",
                rcv.len(),
                slots.len(),
                largest as f64 / f64::from(1 << 20)
            ));
        }
        let clamped = slots
            .iter()
            .filter(|s| s.tuner.window_clamp().is_some())
            .count();
        if clamped > 0 {
            d.actions.push(format!(
                "clamped the window of {clamped} streams: the host's buffer budget was spent"
            ));
        }
        d.congestion_control = self
            .congestion_seen
            .clone()
            .unwrap_or_else(|| d.host.congestion_control.clone());
        d.window = self.tuning.window_name();
        let groups: Vec<String> = (0..self.groups.len())
            .filter(|&g| self.groups[g].share > 0 && self.members(g) > 0)
            .map(|g| {
                let p = &self.groups[g];
                let members = self.members(g);
                format!(
                    "{members} stream{} at {:.1} ms: {:.1} MiB each",
                    if members == 1 { "" } else { "s" },
                    f64::from(p.sizer.min_rtt_us()) / 1e3,
                    p.share as f64 / f64::from(1 << 20)
                )
            })
            .collect();
        if !groups.is_empty() {
            let sized = format!(
                "sized the send buffers of each path's streams together, to twice that path's \
                 bandwidth-delay product: {}",
                groups.join("; ")
            );
            // Buffers full at the size tern chose are the path's pace, as
            // for one path (`Diagnosis::shared_sizing`), unless one stream
            // of a path could not hold its path alone.
            let cap = d.host.tcp_wmem[2];
            let beyond_one = self.groups.iter().any(|p| 2 * p.sizer.bdp() > cap);
            if d.limit == tern_drs::Limit::SendBuffer && !beyond_one {
                d.limit = tern_drs::Limit::Network;
                d.sysctls.retain(|l| !l.contains("tcp_wmem"));
                d.summary = format!(
                    "The network paths set the pace: tern {sized}, within the host's caps, and \
                     the streams kept them full."
                );
            } else if d.limit == tern_drs::Limit::SendBuffer {
                let widest = self.groups.iter().map(|p| p.sizer.bdp()).max().unwrap_or(0);
                d.summary = format!(
                    "The send buffer was the limit: the kernel's autotuning stops a stream's send \
                     buffer at the sender's tcp_wmem maximum of {:.1} MiB, while a path's bandwidth-delay \
                     product is up to {:.1} MiB and a stream needs about twice that. tern worked \
                     around it with several streams per path: it {sized}; raising tcp_wmem on the \
                     sending host removes the cap for every program.",
                    cap as f64 / f64::from(1 << 20),
                    widest as f64 / f64::from(1 << 20),
                );
            }
            d.actions.push(sized);
            d.send_buffers_sized_bytes = Some(
                (0..self.groups.len())
                    .map(|g| self.groups[g].share * u64::from(self.members(g)))
                    .sum(),
            );
        }
        if shared > 0 && self.sizer.bdp() > 0 {
            d.shared_sizing(tern_drs::SharedSizing {
                streams: shared,
                each: self.share,
                bdp: self.sizer.bdp(),
                rtt_ms: f64::from(self.sizer.min_rtt_us()) / 1e3,
            });
        }
        d.set_stream_steps(
            self.controller
                .as_ref()
                .map(|c| c.history().to_vec())
                .unwrap_or_default(),
        );
        d.streams_proven = self.controller.as_ref().map_or(0, |c| c.proven());
        if let (Some(each), Some(bps)) = (self.receive_started, self.tuning.known_rate_bps) {
            d.actions.push(format!(
                "started the receive buffers at {:.1} MiB each, sized for the rate of the last \
                 copy over this path ({:.0} Mbit/s)",
                each as f64 / f64::from(1 << 20),
                bps as f64 / 1e6
            ));
        }
        d.send_buffer_peak_bytes = slots.iter().map(|s| s.tuner.peak_sndbuf).sum();
        d.receive_buffer_peak_bytes = slots.iter().map(|s| s.tuner.peak_rcvbuf).sum();
        // A session too short for a tick has only each stream's own peak.
        let together = |sampled: u64, summed: u64| match sampled {
            0 => summed,
            n => n.min(summed),
        };
        d.send_buffers_peak_together_bytes =
            together(self.peak_together.0, d.send_buffer_peak_bytes);
        d.receive_buffers_peak_together_bytes =
            together(self.peak_together.1, d.receive_buffer_peak_bytes);
        Some(d)
    }
}

/// What a socket holds undelivered and how fast it delivers: the rate
/// acknowledged over the last interval, or the kernel's latest delivery
/// sample before there is one.
fn flight_of(
    info: &tern_drs::TcpInfo,
    interval: Option<tern_drs::Interval>,
) -> Option<tern_session::Flight> {
    let rate = interval
        .map(|iv| iv.acked_rate)
        .filter(|&r| r > 0.0)
        .or_else(|| info.delivery_rate.map(|r| r as f64))
        .filter(|&r| r > 0.0)?;
    Some(tern_session::Flight {
        undelivered: info.undelivered_bytes(),
        rate,
    })
}

/// Samples and tunes the data sockets of one session while it runs.
pub(crate) struct Sampler {
    state: Arc<Mutex<Tuners>>,
}

impl Sampler {
    /// Starts sampling streams `0..indices`, of which the first `cap` are
    /// the session's own (the others replace streams given up). The
    /// sending side passes `changes` to run the stream-count controller
    /// (when `tuning.auto_streams`), which grows to at most `cap`.
    pub(crate) fn start(
        tasks: &Tasks,
        tuning: &Tuning,
        direction: Direction,
        initial: u16,
        cap: u16,
        indices: u16,
        changes: Option<mpsc::UnboundedSender<StreamChange>>,
    ) -> Sampler {
        let max = cap
            .min(tuning.stream_limit.unwrap_or(cap))
            .max(initial)
            .max(1);
        let controller = (tuning.auto_streams && changes.is_some() && max > initial).then(|| {
            match tuning.streams_settled {
                true => StreamController::settled(initial, max),
                false => StreamController::new(initial, max),
            }
        });
        let state = Arc::new(Mutex::new(Tuners {
            tuning: tuning.clone(),
            direction,
            per_stream: tern_drs::host::session_budget() / u64::from(max),
            slots: (0..indices.max(max)).map(|_| None).collect(),
            controller,
            sizer: SessionSizer::default(),
            groups: Vec::new(),
            share: 0,
            streams: initial.max(1),
            changes,
            congestion_seen: None,
            started: Instant::now(),
            peak_together: (0, 0),
            receive_started: None,
            trace: std::env::var_os("TERN_TCP_TRACE")
                .and_then(|p| std::fs::File::create(p).ok())
                .map(std::io::BufWriter::new),
        }));
        {
            // Each other path gets a stream from the start, rather than
            // when the rate of the first has levelled off.
            let mut tuners = state.lock().expect("tuners");
            // Reserved paths have theirs already (one of the first).
            let others = tuners
                .tuning
                .other_paths
                .saturating_sub(tuners.tuning.reserved.len() as u16);
            let opened = tuners
                .controller
                .as_mut()
                .filter(|_| others > 0)
                .and_then(|c| c.open_other_paths(Duration::ZERO, others));
            if let Some(change) = opened {
                tuners.announce(change);
            }
        }
        let ticking = state.clone();
        tasks.spawn(async move {
            loop {
                tokio::time::sleep(SAMPLE_EVERY).await;
                ticking.lock().expect("tuners").tick(true);
            }
        });
        Sampler { state }
    }

    /// Stream `k` joined; `probe` is its socket, if it has one.
    pub(crate) fn add(&self, k: u16, probe: Option<OwnedFd>) {
        if let Some(probe) = probe {
            self.state
                .lock()
                .expect("tuners")
                .add(usize::from(k), probe);
        }
    }

    /// The path's rate, told by the sending client (`PathRate`): the
    /// receive buffers of the streams start sized for it.
    pub(crate) fn know_rate(&self, bps: u64) {
        self.state.lock().expect("tuners").know_rate(bps);
    }

    /// Per TCP stream still open: what its socket held undelivered at the
    /// last tick, and how fast it delivered.
    pub(crate) fn flights(&self) -> Vec<(usize, tern_session::Flight)> {
        let state = self.state.lock().expect("tuners");
        state
            .slots
            .iter()
            .enumerate()
            .filter_map(|(k, s)| {
                let s = s.as_ref().filter(|s| !s.retired)?;
                Some((k, s.flight?))
            })
            .collect()
    }

    /// A last sample, then the diagnosis (none without TCP streams).
    pub(crate) fn finish(&self) -> Option<Diagnosis> {
        let mut state = self.state.lock().expect("tuners");
        state.tick(false);
        if let Some(trace) = state.trace.as_mut() {
            use std::io::Write;
            let _ = trace.flush();
        }
        state.diagnosis()
    }
}
