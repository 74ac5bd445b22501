//! Where a running session's data streams come from: the first ones
//! ([`FirstStreams`]), growth the stream-count controller asks for, and
//! replacements for streams given up.
//!
//! A session's stream indices are `0..max`. The first `cap` grow in order
//! as the controller asks; the rest are spares, taken one at a time, in
//! order, to replace a stream that stalled or failed (PROTOCOL.md §6.1).
//! The client opens streams itself through its connector; a sending server
//! asks the client with `MoreStreams`, whose total tells growth (at most
//! `cap`) from a spare (above `cap`).

use std::ops::Range;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::data::channel::Tasks;
use crate::data::tuning::{Connector, Joined, PathWatch, StreamSupply};

/// How often a client looks for paths that are down and due a try.
const REJOIN_CHECK: Duration = Duration::from_secs(1);

/// The data streams a session starts with.
///
/// A sending client does not wait for its streams before it starts: it
/// announces its first files on the control connection while they connect
/// and join, so the receiver's answers (`FileCheck`) arrive with the joins
/// instead of a round trip after them.
pub enum FirstStreams {
    /// All joined before the transfer started.
    Joined(Vec<Joined>),
    /// Still connecting: each starts as it joins, and the first that
    /// cannot join fails the session, as it would have failed its opening.
    Joining(PendingJoins),
}

impl From<Vec<Joined>> for FirstStreams {
    fn from(streams: Vec<Joined>) -> FirstStreams {
        FirstStreams::Joined(streams)
    }
}

impl std::fmt::Debug for FirstStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FirstStreams::Joined(streams) => write!(f, "Joined({} streams)", streams.len()),
            FirstStreams::Joining(pending) => pending.fmt(f),
        }
    }
}

impl FirstStreams {
    /// Waits for every stream to join (an end that needs them all before
    /// it starts: a receiver).
    pub async fn all(self) -> crate::Result<Vec<Joined>> {
        match self {
            FirstStreams::Joined(streams) => Ok(streams),
            FirstStreams::Joining(mut pending) => {
                let mut streams = Vec::with_capacity(pending.set.len());
                while let Some(joined) = pending.next().await {
                    streams.push(joined?);
                }
                streams.sort_by_key(|j| j.index);
                Ok(streams)
            }
        }
    }
}

/// Data streams connecting in the background, and when the last of them
/// joined (the end of the session's setup, for its report).
pub struct PendingJoins {
    /// Each join's outcome, and when it came.
    set: JoinSet<(crate::Result<Joined>, Instant)>,
    /// When the latest of those that joined did.
    latest: Option<Instant>,
    all_joined: Arc<OnceLock<Instant>>,
}

impl std::fmt::Debug for PendingJoins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingJoins({} joining)", self.set.len())
    }
}

impl PendingJoins {
    /// Runs `joins` in the background.
    pub fn new<F>(joins: impl IntoIterator<Item = F>) -> PendingJoins
    where
        F: Future<Output = crate::Result<Joined>> + Send + 'static,
    {
        let mut set = JoinSet::new();
        for join in joins {
            set.spawn(async move { (join.await, Instant::now()) });
        }
        PendingJoins {
            set,
            latest: None,
            all_joined: Arc::default(),
        }
    }

    /// When the last of them joined, once every one has (as it happened,
    /// however late it is looked at).
    pub fn all_joined(&self) -> Arc<OnceLock<Instant>> {
        self.all_joined.clone()
    }

    /// The next stream that joined or failed to; `None` once all have.
    pub async fn next(&mut self) -> Option<crate::Result<Joined>> {
        let next = match self.set.join_next().await? {
            Ok((joined, at)) => {
                if joined.is_ok() {
                    self.latest = self.latest.max(Some(at));
                }
                joined
            }
            Err(e) => Err(crate::Error::Protocol(format!("connect task: {e}"))),
        };
        if let (true, true, Some(at)) = (self.set.is_empty(), next.is_ok(), self.latest) {
            let _ = self.all_joined.set(at);
        }
        Some(next)
    }
}

/// What a session asks its supply for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Bring the session up to this many streams: growth up to `cap`, or,
    /// above it, the spares below this index (a peer's `MoreStreams`).
    Total(u16),
    /// One more stream in place of one that was given up.
    Replace,
}

/// The stream indices a session has handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Indices {
    grown: u16,
    cap: u16,
    next_spare: u16,
    max: u16,
}

impl Indices {
    /// A session that started with `initial` streams, grows to `cap` and
    /// has indices up to `max`.
    pub(crate) fn new(initial: u16, cap: u16, max: u16) -> Indices {
        let max = max.max(cap);
        Indices {
            grown: initial.min(cap),
            cap,
            next_spare: cap,
            max,
        }
    }

    /// The indices to open for `want`, if any are new.
    pub(crate) fn take(&mut self, want: Want) -> Option<Range<u16>> {
        let range = match want {
            Want::Total(total) if total <= self.cap => {
                let r = self.grown..total;
                self.grown = self.grown.max(total);
                r
            }
            Want::Total(total) => {
                // The peer asks for one more spare at least, even for an
                // index this end already opened itself (a rejoin).
                let end = total.max(self.next_spare + 1).min(self.max);
                let r = self.next_spare..end;
                self.next_spare = self.next_spare.max(r.end);
                r
            }
            Want::Replace => {
                let r = self.next_spare..(self.next_spare + 1).min(self.max);
                self.next_spare = self.next_spare.max(r.end);
                if r.is_empty() {
                    tracing::warn!(
                        "no spare stream index left: the session goes on with fewer streams"
                    );
                }
                r
            }
        };
        (!range.is_empty()).then_some(range)
    }
}

/// Brings a running session the streams asked for on `wanted`: opens them
/// itself when it has a connector (the client), else asks the peer
/// (`ask_peer` with the total, the server); streams the peer opened arrive
/// through an accepting supply (the server). Every stream that joins goes
/// to `start`.
pub(crate) async fn supply_streams(
    tasks: Tasks,
    supply: StreamSupply,
    mut indices: Indices,
    mut wanted: mpsc::UnboundedReceiver<Want>,
    ask_peer: impl Fn(u16) + Send,
    start: impl Fn(Joined) + Send,
) {
    let (connected_tx, mut connected) = mpsc::channel::<Joined>(8);
    let (rejoin_tx, mut rejoin) = mpsc::channel::<()>(1);
    let (connector, mut accept) = match supply {
        StreamSupply::Fixed => (None, None),
        StreamSupply::Connect(c, watch) => {
            if let Some(watch) = watch {
                tasks.spawn(retry_paths(watch, rejoin_tx));
            }
            (Some(c), None)
        }
        StreamSupply::Accept(rx) => (None, Some(rx)),
    };
    loop {
        tokio::select! {
            Some(()) = rejoin.recv() => {
                // A path is back: a spare stream goes over it.
                if let (Some(connect), Some(range)) = (&connector, indices.take(Want::Replace)) {
                    open_streams(&tasks, connect, range, &connected_tx);
                }
            },
            want = wanted.recv() => match want {
                None => return,
                Some(want) => {
                    let Some(range) = indices.take(want) else { continue };
                    match &connector {
                        Some(connect) => open_streams(&tasks, connect, range, &connected_tx),
                        None => ask_peer(range.end),
                    }
                }
            },
            j = recv_or_pending(&mut accept) => match j {
                Some(j) => start(j),
                None => accept = None,
            },
            Some(j) = connected.recv() => start(j),
        }
    }
}

/// Tries the paths that went down, now and then, and says when one is
/// back.
async fn retry_paths(watch: Arc<dyn PathWatch>, back: mpsc::Sender<()>) {
    loop {
        tokio::time::sleep(REJOIN_CHECK).await;
        if watch.retry().await && back.send(()).await.is_err() {
            return;
        }
    }
}

/// Opens streams `range` in the background; each goes to `tx` once joined.
/// A stream that cannot be opened is only logged: the session goes on with
/// the streams it has.
fn open_streams(tasks: &Tasks, connect: &Connector, range: Range<u16>, tx: &mpsc::Sender<Joined>) {
    for k in range {
        let (connect, tx) = (connect.clone(), tx.clone());
        tasks.spawn(async move {
            match connect(k).await {
                Ok(j) => {
                    let _ = tx.send(j).await;
                }
                Err(e) => tracing::warn!("cannot open data stream {k}: {e}"),
            }
        });
    }
}

/// The next item of `rx`, or never when there is no `rx`.
async fn recv_or_pending<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_stays_below_the_cap_and_spares_go_in_order() {
        let mut ix = Indices::new(2, 4, 6);
        assert_eq!(ix.take(Want::Total(3)), Some(2..3));
        assert_eq!(ix.take(Want::Total(3)), None, "a total it has is ignored");
        assert_eq!(ix.take(Want::Replace), Some(4..5));
        assert_eq!(ix.take(Want::Total(4)), Some(3..4), "growth after a spare");
        assert_eq!(ix.take(Want::Replace), Some(5..6));
        assert_eq!(ix.take(Want::Replace), None, "no spare left");
    }

    #[test]
    fn a_total_above_the_cap_asks_for_spares() {
        // What a receiving client does with the sending server's MoreStreams.
        let mut ix = Indices::new(4, 4, 8);
        assert_eq!(ix.take(Want::Total(5)), Some(4..5));
        assert_eq!(ix.take(Want::Total(7)), Some(5..7));
        // The peer's count can lag behind spares this end opened itself
        // (a path rejoined): it still gets one more.
        assert_eq!(ix.take(Want::Total(6)), Some(7..8));
        assert_eq!(ix.take(Want::Total(200)), None, "never past max");
        let mut none = Indices::new(4, 4, 4);
        assert_eq!(none.take(Want::Replace), None, "no spares at all");
    }
}
