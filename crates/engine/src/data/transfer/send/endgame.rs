//! Feeds the session's endgame what each data socket still holds.

use std::sync::Arc;
use std::time::Instant;

use super::SendShared;
use crate::data::tuning::{SAMPLE_EVERY, Sampler};

/// Tells the session what each stream's socket still holds, every
/// sample, and wakes the workers: once every block is handed out, an
/// idle one may now take a copy of a block a slower stream still carries.
pub(super) async fn endgame_feed(shared: Arc<SendShared>, sampler: Arc<Sampler>) {
    loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let flights = sampler.flights();
        let now = Instant::now();
        let done = {
            let mut s = shared.session.lock().expect("session");
            for (k, flight) in flights {
                s.stream_measured(k, flight, now);
            }
            s.is_complete()
        };
        if done || shared.failure.is_set() {
            return;
        }
        shared.wake.notify_waiters();
    }
}
