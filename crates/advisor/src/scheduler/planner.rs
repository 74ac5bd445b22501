//! When each (target, probe) pair is due: the first run a short random
//! jitter after the target appears, then one interval after each run,
//! give or take [`SLIP`]. Pure: the caller passes the time.

use std::collections::HashMap;
use std::time::Duration;

use rand::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    next: Duration,
    last_run: Option<Duration>,
    running: bool,
}

/// Due times per (target, probe). Pure: the caller passes the time.
#[derive(Debug, Default)]
pub struct Planner {
    slots: HashMap<(String, usize), Slot>,
}

impl Planner {
    /// Makes sure a pair has a slot; a new one is due after a random part
    /// of `jitter`.
    pub fn ensure(
        &mut self,
        host: &str,
        probe: usize,
        now: Duration,
        jitter: Duration,
        rng: &mut impl Rng,
    ) {
        self.slots
            .entry((host.to_string(), probe))
            .or_insert_with(|| {
                let max = jitter.as_millis() as u64;
                let delay = if max == 0 { 0 } else { rng.gen_range(0..=max) };
                Slot {
                    next: now + Duration::from_millis(delay),
                    last_run: None,
                    running: false,
                }
            });
    }

    /// Forgets the pairs of targets that are gone.
    pub fn retain_hosts(&mut self, keep: impl Fn(&str) -> bool) {
        self.slots.retain(|(h, _), _| keep(h));
    }

    /// Pairs due at `now`, earliest first.
    pub fn due(&self, now: Duration) -> Vec<(String, usize)> {
        let mut due: Vec<_> = self
            .slots
            .iter()
            .filter(|(_, s)| !s.running && s.next <= now)
            .map(|(k, s)| (s.next, k.clone()))
            .collect();
        due.sort();
        due.into_iter().map(|(_, k)| k).collect()
    }

    /// The earliest due time of a pair not running.
    pub fn next_due(&self) -> Option<Duration> {
        self.slots
            .values()
            .filter(|s| !s.running)
            .map(|s| s.next)
            .min()
    }

    /// A pair started.
    pub fn started(&mut self, host: &str, probe: usize) {
        if let Some(s) = self.slots.get_mut(&(host.to_string(), probe)) {
            s.running = true;
        }
    }

    /// A pair ran (successfully or not) and is due again after `interval`.
    pub fn ran(&mut self, host: &str, probe: usize, now: Duration, interval: Duration) {
        if let Some(s) = self.slots.get_mut(&(host.to_string(), probe)) {
            s.running = false;
            s.last_run = Some(now);
            s.next = now + interval;
        }
    }

    /// A pair is put off for `interval` without running.
    pub fn postpone(&mut self, host: &str, probe: usize, now: Duration, interval: Duration) {
        if let Some(s) = self.slots.get_mut(&(host.to_string(), probe)) {
            s.next = now + interval;
        }
    }

    /// Every pair of `host` not running is due at `now` (its route
    /// changed: what was measured before may no longer hold).
    pub fn due_now(&mut self, host: &str, now: Duration) {
        for ((h, _), s) in self.slots.iter_mut() {
            if h == host && !s.running {
                s.next = s.next.min(now);
            }
        }
    }

    /// When a pair last ran.
    pub fn last_run(&self, host: &str, probe: usize) -> Option<Duration> {
        self.slots
            .get(&(host.to_string(), probe))
            .and_then(|s| s.last_run)
    }
}

/// Runs after the first come every interval, give or take this share of
/// it at random, so targets added together drift apart.
pub const SLIP: f64 = 0.1;

/// `interval`, moved by up to ±[`SLIP`] of itself.
pub fn slipped(interval: Duration, rng: &mut impl Rng) -> Duration {
    interval.mul_f64(1.0 + rng.gen_range(-SLIP..=SLIP))
}
