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
}
