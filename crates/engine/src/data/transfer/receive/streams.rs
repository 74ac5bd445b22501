//! The receiver's streams coming and going: the first ones starting as
//! they join (the control tasks answer announcements meanwhile), then the
//! ones the sender asks for or that replace streams given up, and streams
//! whose frames stopped coming given up.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::RecvShared;
use crate::data::channel::Tasks;
use crate::data::stall::Watch;
use crate::data::supply::{Indices, PendingJoins, Want, supply_streams};
use crate::data::tuning::{Sampler, StreamSupply};

/// How long a first stream that could not join waits for the session to
/// turn out complete before it fails the session: a small copy may be
/// done before its last stream could join, its sender gone meanwhile.
const DONE_WITHOUT_IT: Duration = Duration::from_secs(2);

/// Starts each of the first streams as it joins. One that cannot join
/// fails the session, as it would have failed its opening (its sender may
/// already have written to it, and counts it), unless the session is
/// complete without it. Returns whether they all joined.
pub(super) async fn first_joins(
    shared: &Arc<RecvShared>,
    tasks: &Tasks,
    sampler: &Arc<Sampler>,
    mut pending: PendingJoins,
) -> bool {
    while let Some(next) = pending.next().await {
        match next {
            Ok(j) => shared.start_reader(tasks, sampler, j),
            Err(e) => {
                if !complete_within(shared, DONE_WITHOUT_IT).await {
                    shared.failure.fail(e, &shared.wake);
                }
                return false;
            }
        }
    }
    true
}

/// Whether the session completes within `grace` (false once it failed).
async fn complete_within(shared: &RecvShared, grace: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let notified = shared.wake.notified();
        if shared.session.lock().expect("session").is_complete() {
            return true;
        }
        if shared.failure.is_set() || tokio::time::timeout_at(deadline, notified).await.is_err() {
            return false;
        }
    }
}

/// Once the first streams are in: takes the streams the sender asks for
/// (and replacements), and with a stall timeout watches them all.
pub(super) async fn more_streams(
    shared: Arc<RecvShared>,
    tasks: Tasks,
    sampler: Arc<Sampler>,
    (supply, wanted): (StreamSupply, mpsc::UnboundedReceiver<Want>),
    watch: Option<Arc<Watch>>,
) {
    if let Some(w) = watch {
        tasks.spawn(watchdog(shared.clone(), w));
    }
    let indices = Indices::new(shared.first_streams, shared.growth_cap, shared.max_streams);
    let (sh, tk) = (shared.clone(), tasks.clone());
    supply_streams(
        tasks,
        supply,
        indices,
        wanted,
        |total| tracing::warn!("the sender asked for {total} streams; this end cannot open any"),
        move |j| sh.start_reader(&tk, &sampler, j),
    )
    .await;
}

/// Gives up streams whose read has waited past the stall timeout for
/// frames the sender's marks say are on their way.
pub(super) async fn watchdog(shared: Arc<RecvShared>, watch: Arc<Watch>) {
    loop {
        tokio::time::sleep(watch.period()).await;
        if shared.failure.is_set() {
            return;
        }
        // A stream whose last block is still being written waits on the
        // disk: its next frame is not late. (Taken before the counts: a
        // write leaves this set only after its block was counted.)
        let writing = shared.writing.lock().expect("writing").clone();
        let due = {
            let s = shared.session.lock().expect("session");
            if s.is_complete() {
                return;
            }
            s.awaited_streams()
        };
        let awaited = |k: usize| due.get(k).copied().unwrap_or(false) && !writing.contains(&k);
        for k in watch.stalled_readers(awaited) {
            tracing::warn!(
                "data stream {k} stalled: frames written to it did not come for {:?}; giving it up",
                watch.timeout()
            );
            shared.streams.stalled.fetch_add(1, Ordering::Relaxed);
            shared.streams.lose(k);
            let lost = shared.session.lock().expect("session").stream_lost(k);
            shared.wake.notify_waiters();
            if let Err(e) = lost {
                return shared.failure.fail(e, &shared.wake);
            }
        }
    }
}
