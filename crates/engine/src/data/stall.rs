//! Stalled data streams: telling them from slow or idle ones.
//!
//! Every data stream of a session with a stall timeout runs through a
//! [`Watched`] wrapper that notes, in its [`Activity`], when the stream last
//! moved bytes and since when an operation on it has been waiting. The
//! driver's watchdog asks [`Watch`] which streams stalled:
//!
//! - on the sending side, a stream whose write has waited longer than the
//!   timeout while another stream moved data in that time (or that is the
//!   only one): the peer or the path is not taking data on it. A stream
//!   whose writes have lately had to wait long anyway (a receiver that
//!   reads slowly into a large buffer reopens its window in big steps) is
//!   given four times its usual wait;
//! - on the receiving side, a stream whose read has waited that long while
//!   the sender's `FileSent` marks say frames are on their way on it.
//!
//! An idle stream (nothing to send, or paced by `--rate-limit`) waits in
//! neither place, so it never counts as stalled. A stalled stream is given
//! up: its socket is shut down (the tuner's duplicate of it would otherwise
//! keep the connection open, and the peer would see nothing) and the task
//! that owns it ended; the sender then replaces it.

use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::AbortHandle;

use crate::data::channel::BoxStream;

/// What one stream has been doing, in milliseconds since the session's
/// start (plus one, so that 0 means "never" / "not waiting").
#[derive(Debug)]
pub(crate) struct Activity {
    epoch: Instant,
    /// When the current operation started to wait; 0 when none waits.
    waiting_since: AtomicU64,
    /// When bytes last moved; 0 when never.
    last_progress: AtomicU64,
    /// The longest wait of late, in milliseconds (decays by 1/8 with every
    /// wait that ends).
    usual_wait: AtomicU64,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        Activity {
            epoch,
            waiting_since: AtomicU64::new(0),
            last_progress: AtomicU64::new(0),
            usual_wait: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    fn note<T>(&self, polled: &Poll<std::io::Result<T>>, moved: bool) {
        match polled {
            Poll::Pending => {
                if self.waiting_since.load(Ordering::Relaxed) == 0 {
                    self.waiting_since.store(self.now(), Ordering::Relaxed);
                }
            }
            Poll::Ready(_) => {
                let now = self.now();
                if moved {
                    self.last_progress.store(now, Ordering::Relaxed);
                }
                let since = self.waiting_since.swap(0, Ordering::Relaxed);
                if since != 0 {
                    let waited = now.saturating_sub(since);
                    let usual = self.usual_wait.load(Ordering::Relaxed);
                    self.usual_wait
                        .store(waited.max(usual - usual / 8), Ordering::Relaxed);
                }
            }
        }
    }

    /// How long the current operation has been waiting, if one is.
    fn waiting_for(&self, now: u64) -> Option<Duration> {
        match self.waiting_since.load(Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_millis(now.saturating_sub(since))),
        }
    }

    /// Whether bytes moved within `window` before `now`.
    fn moved_within(&self, now: u64, window: Duration) -> bool {
        match self.last_progress.load(Ordering::Relaxed) {
            0 => false,
            at => now.saturating_sub(at) <= window.as_millis() as u64,
        }
    }
}

/// A stream that records its [`Activity`].
pub(crate) struct Watched {
    inner: BoxStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let moved = buf.filled().len() > before;
        self.activity.note(&polled, moved);
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        let moved = matches!(polled, Poll::Ready(Ok(n)) if n > 0);
        self.activity.note(&polled, moved);
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.activity.note(&polled, false);
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

struct Slot {
    activity: Arc<Activity>,
    /// Ends the stream's task (worker or reader), which drops the stream.
    task: Option<AbortHandle>,
    /// A duplicate of the stream's socket (none for pipes), to shut the
    /// connection down when the stream is given up.
    socket: Option<OwnedFd>,
}

/// The watched streams of one session, by index.
pub(crate) struct Watch {
    epoch: Instant,
    timeout: Duration,
    /// Held only to register, look at or remove a stream.
    slots: Mutex<Vec<Option<Slot>>>,
}

impl Watch {
    /// Watches streams for stalls longer than `timeout`.
    pub(crate) fn new(timeout: Duration) -> Watch {
        Watch {
            epoch: Instant::now(),
            timeout,
            slots: Mutex::new(Vec::new()),
        }
    }

    /// How often the watchdog should look: often enough to act within a
    /// quarter of the timeout past it.
    pub(crate) fn period(&self) -> Duration {
        (self.timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
    }

    /// The timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Starts watching stream `k`, whose socket (if any) `socket`
    /// duplicates; returns the stream to use instead.
    pub(crate) fn watch(&self, k: usize, stream: BoxStream, socket: Option<OwnedFd>) -> BoxStream {
        let activity = Arc::new(Activity::new(self.epoch));
        let mut slots = self.slots.lock().expect("watch");
        if slots.len() <= k {
            slots.resize_with(k + 1, || None);
        }
        slots[k] = Some(Slot {
            activity: activity.clone(),
            task: None,
            socket,
        });
        Box::new(Watched {
            inner: stream,
            activity,
        })
    }

    /// The task that owns stream `k`, to end it when it stalls.
    pub(crate) fn owned_by(&self, k: usize, task: AbortHandle) {
        if let Some(Some(slot)) = self.slots.lock().expect("watch").get_mut(k) {
            slot.task = Some(task);
        }
    }

    /// Stream `k` ended; it is no longer watched.
    pub(crate) fn forget(&self, k: usize) {
        if let Some(slot) = self.slots.lock().expect("watch").get_mut(k) {
            *slot = None;
        }
    }

    /// Sending side: streams whose write has waited past the timeout while
    /// another stream moved data (or that are alone). Each is forgotten and
    /// its task ended before it is returned.
    pub(crate) fn stalled_writers(&self) -> Vec<usize> {
        let now = self.now();
        self.give_up(|slots, k, a| {
            let usual = Duration::from_millis(a.usual_wait.load(Ordering::Relaxed));
            let patience = self.timeout.max(usual * 4);
            let stalled = a.waiting_for(now).is_some_and(|w| w > patience);
            let others = slots
                .iter()
                .enumerate()
                .filter(|(j, s)| *j != k && s.is_some())
                .map(|(_, s)| s.as_ref().expect("filtered"))
                .collect::<Vec<_>>();
            stalled
                && (others.is_empty()
                    || others
                        .iter()
                        .any(|o| o.activity.moved_within(now, self.timeout)))
        })
    }

    /// Receiving side: streams whose read has waited past the timeout while
    /// `expected(k)` says frames are due on them. Each is forgotten and its
    /// task ended before it is returned.
    pub(crate) fn stalled_readers(&self, expected: impl Fn(usize) -> bool) -> Vec<usize> {
        let now = self.now();
        self.give_up(|_, k, a| a.waiting_for(now).is_some_and(|w| w > self.timeout) && expected(k))
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    fn give_up(&self, stalled: impl Fn(&[Option<Slot>], usize, &Activity) -> bool) -> Vec<usize> {
        let mut slots = self.slots.lock().expect("watch");
        let found: Vec<usize> = slots
            .iter()
            .enumerate()
            .filter_map(|(k, s)| s.as_ref().map(|s| (k, s)))
            .filter(|(k, s)| stalled(&slots, *k, &s.activity))
            .map(|(k, _)| k)
            .collect();
        for &k in &found {
            let Some(slot) = slots[k].take() else {
                continue;
            };
            if let Some(socket) = &slot.socket {
                let _ = socket2::SockRef::from(socket).shutdown(std::net::Shutdown::Both);
            }
            if let Some(task) = slot.task {
                task.abort();
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A pipe whose far end nobody reads: writes wait once it is full.
    fn pipe() -> (BoxStream, tokio::io::DuplexStream) {
        let (a, b) = tokio::io::duplex(1024);
        (Box::new(a), b)
    }

    #[tokio::test]
    async fn a_write_that_waits_while_another_stream_moves_is_a_stall() {
        let watch = Arc::new(Watch::new(Duration::from_millis(100)));
        let (a, _a_far) = pipe();
        let (b, mut b_far) = pipe();
        let mut a = watch.watch(0, a, None);
        let mut b = watch.watch(1, b, None);
        let stuck = tokio::spawn(async move { a.write_all(&[0u8; 4096]).await });
        watch.owned_by(0, stuck.abort_handle());
        let moving = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                b.write_all(&buf).await.unwrap();
                b_far.read_exact(&mut buf).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        assert!(
            watch.stalled_writers().is_empty(),
            "not yet past the timeout"
        );
        // Past the timeout; polled, since a descheduled host can leave the
        // moving stream idle for a moment too, and then nothing is a stall.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let stalled = loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let stalled = watch.stalled_writers();
            if !stalled.is_empty() || tokio::time::Instant::now() > deadline {
                break stalled;
            }
        };
        assert_eq!(stalled, vec![0]);
        assert!(
            stuck.await.unwrap_err().is_cancelled(),
            "its task was ended"
        );
        assert!(watch.stalled_writers().is_empty(), "given up once");
        moving.abort();
    }

    #[test]
    fn a_stream_that_usually_waits_long_is_given_longer() {
        // Ten seconds into the session, so that waits can have begun.
        let watch = Watch {
            epoch: Instant::now() - Duration::from_secs(10),
            timeout: Duration::from_millis(100),
            slots: Mutex::new(Vec::new()),
        };
        let (a, _fa) = pipe();
        let (b, _fb) = pipe();
        let _a = watch.watch(0, a, None);
        let _b = watch.watch(1, b, None);
        let slots = watch.slots.lock().unwrap();
        let (a, b) = (
            slots[0].as_ref().unwrap().activity.clone(),
            slots[1].as_ref().unwrap().activity.clone(),
        );
        drop(slots);
        // Stream 0's writes lately waited up to 300 ms; stream 1 moves.
        a.usual_wait.store(300, Ordering::Relaxed);
        let now = watch.now();
        a.waiting_since
            .store(now.saturating_sub(500), Ordering::Relaxed);
        b.last_progress.store(now, Ordering::Relaxed);
        assert!(watch.stalled_writers().is_empty(), "500 ms < 4 x 300 ms");
        a.waiting_since
            .store(now.saturating_sub(1300), Ordering::Relaxed);
        assert_eq!(watch.stalled_writers(), vec![0]);
        // The usual wait follows the waits that end, and forgets slowly.
        a.waiting_since.store(watch.now() - 800, Ordering::Relaxed);
        a.note(&Poll::Ready(Ok(())), true);
        assert!((800..900).contains(&a.usual_wait.load(Ordering::Relaxed)));
        a.waiting_since.store(watch.now(), Ordering::Relaxed);
        a.note(&Poll::Ready(Ok(())), true);
        assert!((700..800).contains(&a.usual_wait.load(Ordering::Relaxed)));
    }

    #[tokio::test]
    async fn streams_that_all_wait_are_not_stalls_but_a_lone_one_is() {
        let watch = Watch::new(Duration::from_millis(50));
        let (a, _fa) = pipe();
        let (b, _fb) = pipe();
        let mut a = watch.watch(0, a, None);
        let mut b = watch.watch(1, b, None);
        let wa = tokio::spawn(async move { a.write_all(&[0u8; 4096]).await });
        let wb = tokio::spawn(async move { b.write_all(&[0u8; 4096]).await });
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            watch.stalled_writers().is_empty(),
            "a peer that takes nothing on any stream is not a stalled stream"
        );
        watch.forget(1);
        assert_eq!(
            watch.stalled_writers(),
            vec![0],
            "alone, waiting is stalling"
        );
        wa.abort();
        wb.abort();
    }

    #[tokio::test]
    async fn a_reader_stalls_only_when_frames_are_due() {
        let watch = Watch::new(Duration::from_millis(50));
        let (a, _fa) = pipe();
        let mut a = watch.watch(3, a, None);
        let reading = tokio::spawn(async move {
            let mut b = [0u8; 1];
            a.read_exact(&mut b).await
        });
        watch.owned_by(3, reading.abort_handle());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(watch.stalled_readers(|_| false).is_empty(), "idle is fine");
        assert_eq!(watch.stalled_readers(|k| k == 3), vec![3]);
        assert!(reading.await.unwrap_err().is_cancelled());
    }
}
