//! The sender's streams coming and going: the first ones starting as they
//! join, the stream-count controller's growth and retirements, and streams
//! whose writes stalled given up (and replaced).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::SendShared;
use crate::Error;
use crate::data::channel::Tasks;
use crate::data::stall::Watch;
use crate::data::supply::{PendingJoins, Want};
use crate::data::tuning::Sampler;
use tern_drs::StreamChange;
use tokio::sync::mpsc;

/// How long a sender may have no live data stream at all (every one was
/// given up and no replacement joined) before the session fails.
const NO_STREAM_GRACE: Duration = Duration::from_secs(15);

/// Starts each of the first streams as it joins; the first that cannot
/// join fails the session. Returns whether they all joined (not when the
/// session ended first).
pub(super) async fn first_joins(
    shared: &Arc<SendShared>,
    tasks: &Tasks,
    sampler: &Sampler,
    pending: PendingJoins,
) -> bool {
    let joined = join_all_first(shared, tasks, sampler, pending).await;
    // A stream lost while the others joined was only dropped: with none
    // left now and none to come, the session cannot go on.
    shared.first_joining.store(false, Ordering::SeqCst);
    let s = shared.session.lock().expect("session");
    if s.live_streams() == 0 && !s.is_complete() && shared.wanted.is_none() {
        drop(s);
        let e = Error::PeerGone("all data streams lost".into());
        shared.failure.fail(e, &shared.wake);
    }
    joined
}

/// [`first_joins`] without the reckoning at the end.
async fn join_all_first(
    shared: &Arc<SendShared>,
    tasks: &Tasks,
    sampler: &Sampler,
    mut pending: PendingJoins,
) -> bool {
    loop {
        tokio::select! {
            joined = pending.next() => match joined {
                None => return true,
                Some(Ok(j)) => shared.start_worker(tasks, sampler, j),
                Some(Err(e)) => {
                    shared.failure.fail(e, &shared.wake);
                    return false;
                }
            },
            () = shared.ended() => return false,
        }
    }
}

/// Gives up streams whose writes stalled (they are then replaced), and
/// fails the session when it has been left without any stream.
pub(super) async fn watchdog(shared: Arc<SendShared>, watch: Arc<Watch>) {
    let mut streamless_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(watch.period()).await;
        if shared.failure.is_set() {
            return;
        }
        for k in watch.stalled_writers() {
            tracing::warn!(
                "data stream {k} stalled: a write made no progress for {:?} while other streams moved data; giving it up",
                watch.timeout()
            );
            shared.streams.stalled.fetch_add(1, Ordering::Relaxed);
            shared.lose_stream(k);
        }
        let (live, complete) = {
            let s = shared.session.lock().expect("session");
            (s.live_streams(), s.is_complete())
        };
        if complete {
            return;
        }
        if live > 0 {
            streamless_since = None;
        } else if streamless_since.get_or_insert_with(Instant::now).elapsed()
            > NO_STREAM_GRACE.max(watch.timeout())
        {
            return shared.failure.fail(
                Error::PeerGone("every data stream was lost and none could be replaced".into()),
                &shared.wake,
            );
        }
    }
}

/// Carries out the stream-count controller's changes on the sending side:
/// retires streams, and passes growth on to [`supply_streams`](crate::data::supply).
pub(super) async fn sender_changes(
    shared: Arc<SendShared>,
    mut changes: mpsc::UnboundedReceiver<StreamChange>,
    wanted: mpsc::UnboundedSender<Want>,
) {
    while let Some(change) = changes.recv().await {
        match change {
            StreamChange::Retire(n) => {
                shared.retire_from.store(usize::from(n), Ordering::SeqCst);
                shared.wake.notify_waiters();
            }
            StreamChange::Grow(n) => {
                let _ = wanted.send(Want::Total(n));
            }
        }
    }
}
