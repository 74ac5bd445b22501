//! The end of a session's blocks: once every block has been handed out, a
//! stream that could take more gets a copy of a block still on its way on
//! a slower stream, so a session never waits for its slowest path.
//!
//! A block "handed out" to a stream has only been written into its
//! socket: on a slow path it may take seconds more to arrive. The driver
//! tells the session, per stream, what its connection still holds and how
//! fast it delivers ([`Flight`], from `TCP_INFO`). From that the session
//! works out when each block still queued on a stream will arrive, and
//! gives an asking stream the block that would arrive last, when the asker
//! would deliver it clearly sooner, and sooner by enough to matter. Each
//! block is copied at most once. The
//! receiver keeps whichever copy arrives first and counts the other as a
//! duplicate; it judges a file complete as soon as every block is in,
//! without waiting for the slow copy.
//!
//! A copy that would arrive only milliseconds sooner is not made
//! ([`MIN_SAVING`]): on a LAN, where a stream's whole socket buffer drains
//! in a few milliseconds, 8 streams copied 40-60 of the 2048 blocks of a
//! 2 GiB copy at its end, sending them twice to gain nothing.
//!
//! Without flights (streams that are not TCP, or a driver that does not
//! measure) there is no endgame: nothing is copied on a guess.

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use tern_proto::data::HEADER_LEN;

use super::SenderSession;
use crate::BlockTask;

/// Blocks remembered per stream at most, whatever the flights say.
const MAX_TRACKED: usize = 4096;

/// An asker takes a copy only when it would deliver it by this share of
/// the time the holder needs: a copy that gains little wastes the path.
const GAIN: f64 = 0.8;

/// A copy that saves less time than this is not worth sending a block
/// twice.
const MIN_SAVING: f64 = 0.020;

/// What a stream's connection still holds, as the driver measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flight {
    /// Bytes written to the connection and not yet delivered (not sent,
    /// or sent and not acknowledged).
    pub undelivered: u64,
    /// How fast the connection delivers, bytes per second.
    pub rate: f64,
}

#[derive(Debug, Default)]
struct Lane {
    /// Blocks handed to this stream that may not have arrived, oldest
    /// first.
    handed: VecDeque<BlockTask>,
    /// Wire bytes handed to the stream, and written into its socket.
    handed_bytes: u64,
    written_bytes: u64,
    /// The latest flight, when it was measured, and `written_bytes` then.
    flight: Option<(Flight, Instant, u64)>,
}

impl Lane {
    /// Wire bytes the stream still has to deliver at `now`: what its
    /// socket held when measured, less what it delivered since, plus
    /// what was handed to it after that (written since, or not yet).
    fn undelivered(&self, now: Instant) -> Option<f64> {
        let (flight, at, written_then) = self.flight?;
        let drained = flight.rate * now.saturating_duration_since(at).as_secs_f64();
        let held = (flight.undelivered as f64 - drained).max(0.0);
        Some(held + self.handed_bytes.saturating_sub(written_then) as f64)
    }

    fn rate(&self) -> Option<f64> {
        self.flight.map(|(f, _, _)| f.rate).filter(|&r| r > 0.0)
    }
}

fn wire(task: &BlockTask) -> u64 {
    u64::from(task.len) + HEADER_LEN as u64
}

/// The blocks each stream may still be carrying, and the copies made.
#[derive(Debug, Default)]
pub(crate) struct Endgame {
    lanes: Vec<Lane>,
    copied: BTreeSet<(u32, u64)>,
    blocks: u64,
}

impl Endgame {
    fn lane(&mut self, stream: usize) -> &mut Lane {
        if self.lanes.len() <= stream {
            self.lanes.resize_with(stream + 1, Lane::default);
        }
        &mut self.lanes[stream]
    }

    /// `task` was handed to `stream`.
    pub(crate) fn handed(&mut self, stream: usize, task: BlockTask) {
        let lane = self.lane(stream);
        lane.handed_bytes += wire(&task);
        lane.handed.push_back(task);
        if lane.handed.len() > MAX_TRACKED {
            lane.handed.pop_front();
        }
    }

    /// `stream` finished writing a block of `len` payload bytes.
    pub(crate) fn written(&mut self, stream: usize, len: u64) {
        self.lane(stream).written_bytes += len + HEADER_LEN as u64;
    }

    /// The driver measured `stream`'s connection: blocks older than what
    /// it still holds (in the socket, or not yet written) have arrived
    /// and are forgotten.
    pub(crate) fn measured(&mut self, stream: usize, flight: Flight, now: Instant) {
        let lane = self.lane(stream);
        lane.flight = Some((flight, now, lane.written_bytes));
        let unwritten = lane.handed_bytes.saturating_sub(lane.written_bytes);
        let held = flight.undelivered + unwritten;
        let mut kept = 0u64;
        let keep = lane
            .handed
            .iter()
            .rev()
            .take_while(|t| {
                let inside = kept < held;
                kept += wire(t);
                inside
            })
            .count();
        let drop = lane.handed.len() - keep;
        lane.handed.drain(..drop);
    }

    /// `stream` is gone: what it carried is repaired, not copied.
    pub(crate) fn forget(&mut self, stream: usize) {
        if let Some(lane) = self.lanes.get_mut(stream) {
            *lane = Lane::default();
        }
    }

    /// A copy for `asker` of the block that would arrive last on another
    /// live stream, when `asker` would deliver it clearly sooner (flagged
    /// a copy, never a repair). `wanted` says whether a block's file still needs
    /// it.
    pub(crate) fn copy_for(
        &mut self,
        asker: usize,
        now: Instant,
        live: &[bool],
        wanted: impl Fn(&BlockTask) -> bool,
    ) -> Option<BlockTask> {
        let mine = self.lanes.get(asker)?;
        let (my_queue, my_rate) = (mine.undelivered(now)?, mine.rate()?);
        let mut best: Option<(f64, usize, usize)> = None;
        for (s, lane) in self.lanes.iter().enumerate() {
            if s == asker || !live.get(s).copied().unwrap_or(false) {
                continue;
            }
            let (Some(queue), Some(rate)) = (lane.undelivered(now), lane.rate()) else {
                continue;
            };
            // Walk back from the newest block: each arrives once those
            // before it have, i.e. when the queue has drained down to it.
            let mut after = 0.0;
            for (i, task) in lane.handed.iter().enumerate().rev() {
                if after >= queue {
                    break;
                }
                let arrives = (queue - after) / rate;
                after += wire(task) as f64;
                if self.copied.contains(&(task.file_id, task.offset)) || !wanted(task) {
                    continue;
                }
                if best.is_none_or(|(t, _, _)| arrives > t) {
                    best = Some((arrives, s, i));
                }
                break;
            }
        }
        let (arrives, s, i) = best?;
        let task = BlockTask {
            repair: false,
            copy: true,
            ..self.lanes[s].handed[i]
        };
        let mine_arrives = (my_queue + wire(&task) as f64) / my_rate;
        if mine_arrives > GAIN * arrives || arrives - mine_arrives < MIN_SAVING {
            return None;
        }
        self.copied.insert((task.file_id, task.offset));
        self.blocks += 1;
        self.lane(asker).handed_bytes += wire(&task);
        Some(task)
    }

    /// Blocks sent twice by the endgame.
    pub(crate) fn blocks(&self) -> u64 {
        self.blocks
    }
}

impl SenderSession {
    /// The driver measured what `stream`'s connection still holds: blocks
    /// on slow streams are copied to faster ones once all are handed out.
    pub fn stream_measured(&mut self, stream: usize, flight: Flight, now: Instant) {
        self.endgame.measured(stream, flight, now);
    }

    /// Blocks sent a second time at the end, on a faster stream than the
    /// one still carrying them.
    pub fn blocks_copied(&self) -> u64 {
        self.endgame.blocks()
    }

    /// A copy for `stream`, when every block of the session is out:
    /// nothing left to announce, and no file waiting to hear whether the
    /// receiver has it.
    pub(super) fn copy_at_end(&mut self, stream: usize, now: Instant) -> Option<BlockTask> {
        let all_out = self.listing_done && self.pending.is_empty();
        if !all_out || self.files.values().any(|f| f.held) {
            return None;
        }
        let files = &self.files;
        self.endgame.copy_for(stream, now, &self.stream_alive, |t| {
            files.contains_key(&t.file_id)
        })
    }
}
