//! One memory budget for the socket buffers of every stream of every
//! session in this process (a daemon serves many at once), so that tuning
//! one transfer never starves the host or the other transfers.
//!
//! Each stream holds a [`Reservation`] sized to the buffers it has; growing
//! a buffer first grows its reservation, and what the pool cannot give is
//! not taken. Dropping the reservation (the stream ends) gives it back.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A budget of bytes shared by reservations.
#[derive(Debug)]
pub struct Pool {
    limit: u64,
    used: AtomicU64,
}

impl Pool {
    /// A pool of `limit` bytes.
    pub const fn new(limit: u64) -> Pool {
        Pool {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// The process-wide pool: 1/8 of RAM, at most 2 GiB.
    pub fn global() -> &'static Pool {
        static GLOBAL: OnceLock<Pool> = OnceLock::new();
        GLOBAL.get_or_init(|| Pool::new(crate::host::host_budget()))
    }

    /// Bytes the pool may hand out in total.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held by reservations now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty reservation.
    pub fn reserve(&self) -> Reservation<'_> {
        Reservation {
            pool: self,
            held: 0,
        }
    }

    /// Takes up to `want` bytes; returns what it took.
    fn take(&self, want: u64) -> u64 {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let granted = want.min(self.limit.saturating_sub(used));
            match self.used.compare_exchange_weak(
                used,
                used + granted,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return granted,
                Err(now) => used = now,
            }
        }
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Bytes one stream holds from a [`Pool`].
#[derive(Debug)]
pub struct Reservation<'p> {
    pool: &'p Pool,
    held: u64,
}

impl Reservation<'_> {
    /// Bytes held.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Resizes the reservation towards `bytes`; returns the size reached,
    /// which is less than asked when the pool runs short.
    pub fn resize(&mut self, bytes: u64) -> u64 {
        if bytes <= self.held {
            self.pool.give_back(self.held - bytes);
            self.held = bytes;
        } else {
            self.held += self.pool.take(bytes - self.held);
        }
        self.held
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.pool.give_back(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reservations_share_the_limit_and_give_back_on_drop() {
        let pool = Pool::new(100);
        let mut a = pool.reserve();
        let mut b = pool.reserve();
        assert_eq!(a.resize(70), 70);
        assert_eq!(b.resize(70), 30, "only what is left");
        assert_eq!(pool.used(), 100);
        assert_eq!(a.resize(20), 20);
        assert_eq!(b.resize(70), 70);
        drop(b);
        assert_eq!(pool.used(), 20);
        drop(a);
        assert_eq!(pool.used(), 0);
    }

    proptest! {
        #[test]
        fn the_pool_is_never_overdrawn(
            limit in 0u64..1_000_000,
            steps in proptest::collection::vec((0usize..4, 0u64..600_000), 1..100),
        ) {
            let pool = Pool::new(limit);
            let mut held: Vec<_> = (0..4).map(|_| pool.reserve()).collect();
            for (who, want) in steps {
                let got = held[who].resize(want);
                prop_assert!(got <= want.max(got));
                prop_assert!(pool.used() <= limit);
                prop_assert_eq!(pool.used(), held.iter().map(Reservation::held).sum::<u64>());
            }
            drop(held);
            prop_assert_eq!(pool.used(), 0);
        }
    }
}
