//! The paths of a multi-path session as the tuning sees them: each path's
//! streams share a send-buffer budget of their own (a [`PathGroup`]), a
//! reserved path's stream is paced and locked instead of sized, and the
//! diagnosis gets each path's RTT and limit. Split from the parent for
//! size; `Tuners` is the parent's.

use std::net::IpAddr;
use std::os::fd::{OwnedFd, RawFd};
use std::time::Duration;

use tern_drs::Direction;
use tern_drs::session::SessionSizer;

use super::{Slot, Tuners, session_sample};

/// The smallest window a reserved path's stream gets, however short its
/// round trip.
pub(super) const MIN_RESERVED_WINDOW: u64 = 64 << 10;

/// The streams of one path of a multi-path session (the same pair of
/// addresses), whose send buffers share that path's budget: twice its own
/// bandwidth-delay product, as one path's streams do.
pub(super) struct PathGroup {
    pub(super) ends: (IpAddr, IpAddr),
    pub(super) sizer: SessionSizer,
    pub(super) share: u64,
}

/// The addresses at both ends of a data socket: which path it takes.
pub(super) fn path_ends(probe: &OwnedFd) -> (IpAddr, IpAddr) {
    let unknown = IpAddr::from([0, 0, 0, 0]);
    let Ok(socket) = probe.try_clone().map(std::net::TcpStream::from) else {
        return (unknown, unknown);
    };
    let ip =
        |a: std::io::Result<std::net::SocketAddr>| a.map_or(unknown, |a| a.ip().to_canonical());
    (ip(socket.local_addr()), ip(socket.peer_addr()))
}

impl Tuners {
    /// Sets up stream `k`'s socket on a path with `bps` reserved: its
    /// buffers locked at twice the reservation's bandwidth-delay product
    /// (room for `bps` × RTT of data beside the kernel's overhead), and,
    /// where this end sends, its sending paced at `bps`. Returns the
    /// buffer size.
    pub(super) fn reserve(
        &self,
        k: usize,
        fd: RawFd,
        bps: u64,
        rtt: Duration,
        privileged: bool,
    ) -> u64 {
        let bdp = (bps as f64 / 8.0 * rtt.as_secs_f64()) as u64;
        let window = (2 * bdp).max(MIN_RESERVED_WINDOW);
        if let Err(e) = tern_drs::tuner::fix_buffers(fd, window, privileged) {
            tracing::warn!("stream {k}: cannot lock the reserved path's window at {window}: {e}");
        }
        if self.direction == Direction::Send {
            if let Err(e) = tern_drs::socket::set_max_pacing_rate(fd, bps / 8) {
                tracing::warn!("stream {k}: cannot pace the reserved path at {bps} bit/s: {e}");
            }
        }
        window
    }

    /// Each path's smallest RTT and the limit most of its streams hit, for
    /// a session over several paths: `estimates` are those of the streams
    /// of `slots` not retired, in order.
    pub(super) fn path_tunings(
        &self,
        slots: &[&Slot],
        estimates: &[tern_drs::StreamEstimate],
    ) -> Vec<tern_drs::PathTuning> {
        if self.tuning.other_paths == 0 {
            return Vec::new();
        }
        let active: Vec<(&Slot, &tern_drs::StreamEstimate)> = slots
            .iter()
            .copied()
            .filter(|s| !s.retired)
            .zip(estimates)
            .collect();
        let peers: std::collections::BTreeSet<IpAddr> =
            active.iter().map(|(s, _)| s.peer).collect();
        peers
            .into_iter()
            .map(|peer| {
                let mine: Vec<tern_drs::StreamEstimate> = active
                    .iter()
                    .filter(|(s, _)| s.peer == peer)
                    .map(|(_, e)| (*e).clone())
                    .collect();
                tern_drs::PathTuning {
                    remote: peer,
                    min_rtt_ms: mine
                        .iter()
                        .map(|e| e.min_rtt_ms)
                        .filter(|&r| r > 0.0)
                        .reduce(f64::min),
                    limit: tern_drs::most_streams_limit(&mine),
                }
            })
            .collect()
    }

    /// The group of the streams between these addresses, made when there
    /// is none.
    pub(super) fn group_for(&mut self, ends: (IpAddr, IpAddr), wmem_max: u64) -> usize {
        if let Some(g) = self.groups.iter().position(|g| g.ends == ends) {
            return g;
        }
        let mut sizer = SessionSizer::default();
        sizer.start_at(wmem_max);
        self.groups.push(PathGroup {
            ends,
            sizer,
            share: 0,
        });
        self.groups.len() - 1
    }

    /// Streams of group `g` still in use.
    pub(super) fn members(&self, g: usize) -> u16 {
        let n = self
            .slots
            .iter()
            .flatten()
            .filter(|s| !s.retired && s.group == Some(g))
            .count();
        u16::try_from(n).unwrap_or(u16::MAX)
    }

    /// Feeds each path group its streams' aggregate and gives them their
    /// new share.
    pub(super) fn size_groups(&mut self, at: Duration, bytes_acked: &[u64]) {
        for g in 0..self.groups.len() {
            let members = || {
                self.slots
                    .iter()
                    .flatten()
                    .filter(move |s| !s.retired && s.group == Some(g))
            };
            let intervals: Vec<_> = members().filter_map(|s| s.tuner.interval()).collect();
            let bytes = bytes_acked.get(g).copied().unwrap_or(0);
            let sample = session_sample(at, bytes, self.members(g).max(1), &intervals);
            if let Some(share) = self.groups[g].sizer.observe(sample) {
                self.groups[g].share = share;
                self.apply_group_share(g);
            }
        }
    }

    pub(super) fn apply_group_share(&mut self, g: usize) {
        let share = self.groups[g].share;
        if share == 0 {
            return;
        }
        for (k, slot) in self.slots.iter_mut().enumerate() {
            let Some(slot) = slot.as_mut().filter(|s| !s.retired && s.group == Some(g)) else {
                continue;
            };
            if let Err(e) = slot.tuner.apply_share(share) {
                tracing::debug!("stream {k}: cannot size the send buffer: {e}");
            }
        }
    }
}
