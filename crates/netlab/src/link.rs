//! The link model: what happens to one packet in one direction of a path.
//!
//! Pure and clock-free (time is an argument), so it is tested with
//! simulated time. A packet is first subject to random loss, then to a
//! drop-tail queue in front of a serializer running at the link rate, then
//! to the one-way propagation delay:
//!
//! ```text
//! offered ──loss──▶ [queue ≤ limit bytes] ──rate──▶ wire (delay) ──▶ delivered
//! ```
//!
//! Serialization is computed, not slept: each packet's transmit end is
//! `max(now, previous end) + size / rate`, so rates hold exactly over time
//! whatever the OS timer granularity. The queue holds the packets whose
//! transmission has not started; its occupancy in bytes is what the
//! drop-tail limit applies to.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::gso::Shape;

/// How one direction of a path behaves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Link rate in bits per second; 0 means unlimited.
    pub rate_bps: u64,
    /// Drop-tail queue limit in bytes (packets waiting to be serialized).
    pub queue_bytes: u64,
    /// Probability that a packet is lost at random, 0.0..=1.0.
    pub loss: f64,
}

/// What became of an offered packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Deliver at this time.
    Deliver(Instant),
    /// Dropped: the queue was full.
    QueueFull,
    /// Dropped: random loss.
    Lost,
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    /// Packets offered.
    pub packets: u64,
    /// Bytes offered.
    pub bytes: u64,
    /// Packets delivered (scheduled for delivery).
    pub delivered: u64,
    /// Packets dropped because the queue was full.
    pub queue_drops: u64,
    /// Packets dropped by random loss.
    pub random_drops: u64,
    /// Bytes delivered (scheduled for delivery).
    #[serde(default)]
    pub delivered_bytes: u64,
    /// Super-packets read (offloaded frames standing for several of the
    /// packets counted above).
    #[serde(default)]
    pub super_packets: u64,
    /// Wire packets whose TTL ran out at one of the path's routers (not
    /// offered to the link, so not in `packets`).
    #[serde(default)]
    pub expired: u64,
    /// ICMP Time Exceeded answers the routers sent for them.
    #[serde(default)]
    pub time_exceeded: u64,
}

/// One direction of a path.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    /// When the serializer is free again.
    tx_free_at: Option<Instant>,
    /// Transmit start times and sizes of queued packets (not yet started).
    queued: VecDeque<(Instant, u64)>,
    queued_bytes: u64,
    counters: LinkCounters,
}

impl Link {
    /// A link with this configuration.
    pub fn new(cfg: LinkConfig) -> Link {
        Link {
            cfg,
            tx_free_at: None,
            queued: VecDeque::new(),
            queued_bytes: 0,
            counters: LinkCounters::default(),
        }
    }

    /// Changes the configuration; packets already scheduled keep their times.
    pub fn set(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
    }

    /// The configuration in force.
    pub fn config(&self) -> LinkConfig {
        self.cfg
    }

    /// Counters so far.
    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    /// Counts `packets` wire packets that expired at a router before the
    /// link, and whether a router answered them.
    pub fn count_expired(&mut self, packets: u64, answered: bool) {
        self.counters.expired += packets;
        self.counters.time_exceeded += u64::from(answered);
    }

    /// Offers the wire packets a frame of shape `s` stands for, one by one
    /// as back-to-back arrivals at `now`, each with its own loss draw from
    /// `uniform`; their fates, in segment order, replace `fates`.
    pub fn offer_frame(
        &mut self,
        now: Instant,
        s: &Shape,
        mut uniform: impl FnMut() -> f64,
        fates: &mut Vec<Fate>,
    ) {
        fates.clear();
        if s.segments > 1 {
            self.counters.super_packets += 1;
        }
        fates.extend((0..s.segments).map(|i| self.offer(now, s.wire_len(i), uniform())));
    }

    /// Offers a packet of `len` bytes at `now`; `uniform` is a random number
    /// in `0.0..1.0` for the loss decision.
    pub fn offer(&mut self, now: Instant, len: usize, uniform: f64) -> Fate {
        let len = len as u64;
        self.counters.packets += 1;
        self.counters.bytes += len;
        if uniform < self.cfg.loss {
            self.counters.random_drops += 1;
            return Fate::Lost;
        }
        // Packets whose transmission has started by now have left the queue.
        while let Some(&(start, size)) = self.queued.front() {
            if start > now {
                break;
            }
            self.queued.pop_front();
            self.queued_bytes -= size;
        }
        let start = self.tx_free_at.map_or(now, |t| t.max(now));
        if start > now && self.queued_bytes + len > self.cfg.queue_bytes {
            self.counters.queue_drops += 1;
            return Fate::QueueFull;
        }
        let tx = (len * 8 * 1_000_000_000)
            .checked_div(self.cfg.rate_bps)
            .map_or(Duration::ZERO, Duration::from_nanos);
        let end = start + tx;
        self.tx_free_at = Some(end);
        if start > now {
            self.queued.push_back((start, len));
            self.queued_bytes += len;
        }
        self.counters.delivered += 1;
        self.counters.delivered_bytes += len;
        Fate::Deliver(end + self.cfg.delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(delay_ms: u64, mbit: u64, queue: u64, loss: f64) -> LinkConfig {
        LinkConfig {
            delay: Duration::from_millis(delay_ms),
            rate_bps: mbit * 1_000_000,
            queue_bytes: queue,
            loss,
        }
    }

    #[test]
    fn an_idle_link_delivers_after_serialization_plus_delay() {
        let t0 = Instant::now();
        let mut l = Link::new(cfg(50, 100, 1 << 20, 0.0));
        // 1250 bytes at 100 Mbit/s = 100 µs.
        assert_eq!(
            l.offer(t0, 1250, 0.5),
            Fate::Deliver(t0 + Duration::from_micros(100) + Duration::from_millis(50))
        );
    }

    #[test]
    fn a_burst_leaves_at_the_link_rate() {
        let t0 = Instant::now();
        let mut l = Link::new(cfg(10, 8, 1 << 30, 0.0));
        // 1000 packets of 1000 bytes at 8 Mbit/s: one per ms.
        let mut last = t0;
        for _ in 0..1000 {
            match l.offer(t0, 1000, 0.9) {
                Fate::Deliver(at) => last = at,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(last, t0 + Duration::from_millis(1000 + 10));
    }

    #[test]
    fn the_queue_drops_its_tail_when_full_and_drains_over_time() {
        let t0 = Instant::now();
        // 10 packets of queue.
        let mut l = Link::new(cfg(0, 8, 10_000, 0.0));
        let fates: Vec<Fate> = (0..20).map(|_| l.offer(t0, 1000, 0.9)).collect();
        let delivered = fates
            .iter()
            .filter(|f| matches!(f, Fate::Deliver(_)))
            .count();
        // One in transmission plus ten queued.
        assert_eq!(delivered, 11);
        assert_eq!(l.counters().queue_drops, 9);
        // 5 ms later five have left the queue: room for five more.
        let later = t0 + Duration::from_millis(5);
        let more = (0..10)
            .filter(|_| matches!(l.offer(later, 1000, 0.9), Fate::Deliver(_)))
            .count();
        assert_eq!(more, 5);
    }

    #[test]
    fn random_loss_follows_the_configured_probability() {
        let t0 = Instant::now();
        let mut l = Link::new(cfg(0, 0, 0, 0.01));
        let n = 100_000;
        for i in 0..n {
            // A deterministic uniform sequence.
            let u = (i as f64 * 0.618_033_988_75).fract();
            let _ = l.offer(t0, 100, u);
        }
        let lost = l.counters().random_drops as f64 / n as f64;
        assert!((lost - 0.01).abs() < 0.001, "lost {lost}");
    }

    #[test]
    fn changing_the_rate_changes_later_packets_only() {
        let t0 = Instant::now();
        let mut l = Link::new(cfg(0, 8, 1 << 20, 0.0));
        assert_eq!(
            l.offer(t0, 1000, 0.9),
            Fate::Deliver(t0 + Duration::from_millis(1))
        );
        l.set(cfg(0, 16, 1 << 20, 0.0));
        assert_eq!(
            l.offer(t0, 1000, 0.9),
            Fate::Deliver(t0 + Duration::from_micros(1500))
        );
    }

    /// A 64 KiB super-packet at MTU 1500: 46 segments of 1448 B payload
    /// (the last 376 B), 52 B of headers each.
    fn super_packet() -> Shape {
        Shape {
            headers: 52,
            payload: 45 * 1448 + 376,
            seg: 1448,
            segments: 46,
            splittable: true,
        }
    }

    #[test]
    fn a_super_packet_is_charged_as_its_wire_packets() {
        let t0 = Instant::now();
        let s = super_packet();
        let mut l = Link::new(cfg(5, 10, 1 << 30, 0.0));
        let mut twin = Link::new(cfg(5, 10, 1 << 30, 0.0));
        let mut fates = Vec::new();
        l.offer_frame(t0, &s, || 0.5, &mut fates);
        let c = l.counters();
        assert_eq!((c.packets, c.delivered, c.super_packets), (46, 46, 1));
        assert_eq!(c.bytes, 45 * 1500 + 52 + 376);
        assert_eq!(c.delivered_bytes, c.bytes);
        // Each segment leaves when the same packets sent one by one would.
        for (i, fate) in fates.iter().enumerate() {
            assert_eq!(*fate, twin.offer(t0, s.wire_len(i), 0.5), "segment {i}");
        }
        // 45 × 1500 B + 428 B at 10 Mbit/s: 54.3424 ms, plus 5 ms.
        assert_eq!(
            fates[45],
            Fate::Deliver(t0 + Duration::from_nanos(54_342_400) + Duration::from_millis(5))
        );
        // A plain packet is one packet and no super-packet.
        l.offer_frame(t0, &Shape::single(60), || 0.5, &mut fates);
        assert_eq!(fates.len(), 1);
        assert_eq!((l.counters().packets, l.counters().super_packets), (47, 1));
    }

    #[test]
    fn loss_hits_single_segments_of_a_super_packet() {
        let t0 = Instant::now();
        let s = super_packet();
        let mut l = Link::new(cfg(0, 0, 0, 0.01));
        let mut fates = Vec::new();
        let mut i = 0u64;
        let mut draw = || {
            i += 1;
            (i as f64 * 0.618_033_988_75).fract()
        };
        let mut lost_segments = 0;
        for _ in 0..2000 {
            l.offer_frame(t0, &s, &mut draw, &mut fates);
            let lost = fates.iter().filter(|f| **f == Fate::Lost).count();
            assert!(lost < s.segments, "a whole super-packet lost");
            lost_segments += lost;
        }
        let c = l.counters();
        assert_eq!(c.packets, 2000 * 46);
        assert_eq!(c.random_drops, lost_segments as u64);
        assert_eq!(c.delivered + c.random_drops, c.packets);
        let rate = c.random_drops as f64 / c.packets as f64;
        assert!((rate - 0.01).abs() < 0.001, "lost {rate}");
    }

    #[test]
    fn a_full_queue_takes_the_head_of_a_super_packet_and_drops_the_tail() {
        let t0 = Instant::now();
        // Room for ten 1500 B packets behind the one serializing.
        let mut l = Link::new(cfg(0, 8, 15_000, 0.0));
        let mut fates = Vec::new();
        l.offer_frame(t0, &super_packet(), || 0.5, &mut fates);
        let kept = fates
            .iter()
            .take_while(|f| matches!(f, Fate::Deliver(_)))
            .count();
        assert_eq!(kept, 11);
        assert!(fates[kept..].iter().all(|f| *f == Fate::QueueFull));
        assert_eq!(l.counters().queue_drops, 46 - 11);
        assert_eq!(l.counters().delivered_bytes, 11 * 1500);
    }
}
