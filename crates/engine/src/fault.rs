//! Fault injection by wrapping a transport, never by global switches.
//!
//! Tests (and `tern`'s hidden test hooks) wrap a data stream in one of
//! these to flip a byte in flight, break the connection after some bytes,
//! slow it down or stall it for good, then check that the engine detects,
//! repairs (or replaces the stream) and reports it. [`FillsUp`] wraps the
//! receiver's sink instead: a disk that runs full, without a small file
//! system to mount (which needs root).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use tern_proto::FileMeta;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::store::fsio::{BlockWrite, Created, Found, Sink};

/// `AsyncWrite::poll_flush` and `poll_shutdown` of a wrapper that changes
/// only what is written: both go straight to its `inner` stream.
macro_rules! flush_and_shutdown_pass_through {
    () => {
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    };
}

/// `AsyncRead` for a wrapper that leaves reading alone.
macro_rules! read_pass_through {
    ($wrapper:ident) => {
        impl<S: AsyncRead + Unpin> AsyncRead for $wrapper<S> {
            fn poll_read(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                Pin::new(&mut self.inner).poll_read(cx, buf)
            }
        }
    };
}

/// Flips one byte at a given position of the written byte stream.
#[derive(Debug)]
pub struct CorruptAt<S> {
    inner: S,
    target: u64,
    pos: u64,
    done: bool,
}

impl<S> CorruptAt<S> {
    /// Corrupts the byte at stream position `target` (0-based).
    pub fn new(inner: S, target: u64) -> CorruptAt<S> {
        CorruptAt {
            inner,
            target,
            pos: 0,
            done: false,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CorruptAt<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let end = this.pos + buf.len() as u64;
        let n = if !this.done && (this.pos..end).contains(&this.target) {
            let mut copy = buf.to_vec();
            copy[(this.target - this.pos) as usize] ^= 0xff;
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &copy))?;
            if this.pos + n as u64 > this.target {
                this.done = true;
            }
            n
        } else {
            ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?
        };
        this.pos += n as u64;
        Poll::Ready(Ok(n))
    }

    flush_and_shutdown_pass_through!();
}

read_pass_through!(CorruptAt);

/// Breaks the connection after a number of written bytes: further writes
/// fail and the inner stream is dropped, so the peer sees it end.
#[derive(Debug)]
pub struct BreakAfter<S> {
    inner: Option<S>,
    left: u64,
}

impl<S> BreakAfter<S> {
    /// Lets `bytes` through, then fails.
    pub fn new(inner: S, bytes: u64) -> BreakAfter<S> {
        BreakAfter {
            inner: Some(inner),
            left: bytes,
        }
    }
}

fn broken() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "injected stream failure")
}

impl<S: AsyncWrite + Unpin> AsyncWrite for BreakAfter<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if this.left == 0 {
            this.inner = None;
            return Poll::Ready(Err(broken()));
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Err(broken()));
        };
        let allowed = buf.len().min(this.left as usize);
        let n = ready!(Pin::new(inner).poll_write(cx, &buf[..allowed]))?;
        this.left -= n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_flush(cx),
            None => Poll::Ready(Err(broken())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for BreakAfter<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_read(cx, buf),
            None => Poll::Ready(Err(broken())),
        }
    }
}

/// Writes at most `rate` bytes per second: a slow stream.
#[derive(Debug)]
pub struct Throttle<S> {
    inner: S,
    rate: u64,
    started: tokio::time::Instant,
    written: u64,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Throttle<S> {
    /// Limits `inner` to `rate` bytes per second (at least 1).
    pub fn new(inner: S, rate: u64) -> Throttle<S> {
        Throttle {
            inner,
            rate: rate.max(1),
            started: tokio::time::Instant::now(),
            written: 0,
            sleep: None,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Throttle<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        loop {
            if let Some(sleep) = this.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                this.sleep = None;
            }
            let due = this.started
                + std::time::Duration::from_secs_f64(this.written as f64 / this.rate as f64);
            if due <= tokio::time::Instant::now() {
                break;
            }
            this.sleep = Some(Box::pin(tokio::time::sleep_until(due)));
        }
        // At most 1/20 s worth per write, so the pace stays smooth.
        let chunk = buf.len().min((this.rate / 20).max(1) as usize);
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..chunk]))?;
        this.written += n as u64;
        Poll::Ready(Ok(n))
    }

    flush_and_shutdown_pass_through!();
}

read_pass_through!(Throttle);

/// Stalls a stream for good, as a black-holed path does: after `bytes`
/// bytes written (and, separately, `bytes` bytes read) every further write,
/// flush or read waits forever, and the connection stays open, so the peer
/// sees no end either. Only giving the stream up (dropping it) ends it.
#[derive(Debug)]
pub struct StallAfter<S> {
    inner: S,
    write_left: u64,
    read_left: u64,
    /// Set for [`StallAfter::first_of`]: taken by the one stream that stalls.
    claim: Option<Arc<AtomicBool>>,
}

impl<S> StallAfter<S> {
    /// Lets `bytes` through each way, then stalls.
    pub fn new(inner: S, bytes: u64) -> StallAfter<S> {
        StallAfter {
            inner,
            write_left: bytes,
            read_left: bytes,
            claim: None,
        }
    }

    /// Like [`StallAfter::new`], but of all the streams sharing `claim` only
    /// the first to reach `bytes` stalls; the others then pass everything.
    /// A test that needs a stream stalled in the middle of its work uses it,
    /// since which stream gets work first is up to the scheduler.
    pub fn first_of(inner: S, bytes: u64, claim: Arc<AtomicBool>) -> StallAfter<S> {
        StallAfter {
            claim: Some(claim),
            ..StallAfter::new(inner, bytes)
        }
    }

    /// Called when a direction's allowance ran out: whether to stall now.
    fn stalls(&mut self) -> bool {
        let Some(claim) = self.claim.take() else {
            return true;
        };
        if claim.swap(true, Ordering::SeqCst) {
            // Another stream stalled first: this one goes on for good.
            self.write_left = u64::MAX;
            self.read_left = u64::MAX;
            false
        } else {
            true
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallAfter<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if this.write_left == 0 && this.stalls() {
            // Never woken: the writer waits until someone gives it up.
            return Poll::Pending;
        }
        let allowed = buf.len().min(this.write_left as usize);
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..allowed]))?;
        this.write_left -= n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.write_left == 0 && self.stalls() {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallAfter<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.read_left == 0 && this.stalls() {
            return Poll::Pending;
        }
        let want = buf.remaining().min(this.read_left as usize).min(64 << 10);
        let mut tmp = vec![0u8; want];
        let mut limited = ReadBuf::new(&mut tmp);
        ready!(Pin::new(&mut this.inner).poll_read(cx, &mut limited))?;
        let got = limited.filled().len();
        buf.put_slice(&tmp[..got]);
        this.read_left -= got as u64;
        Poll::Ready(Ok(()))
    }
}

/// What a [`Faulty`] sink does before each write of a file: `(offset,
/// length)`; an error fails the write, having written nothing.
type BeforeWrite = Arc<dyn Fn(u64, usize) -> std::io::Result<()> + Send + Sync>;

/// A sink whose files' writes go through a fault first ([`FillsUp`],
/// [`SlowDisk`]); everything else goes to `inner`.
pub struct Faulty<S> {
    inner: S,
    what: String,
    before_write: BeforeWrite,
}

impl<S> std::fmt::Debug for Faulty<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faulty")
            .field("what", &self.what)
            .finish_non_exhaustive()
    }
}

impl<S: Sink> Sink for Faulty<S> {
    fn create_dir(&self, path: &tern_proto::RelPath, mode: u32) -> crate::Result<()> {
        self.inner.create_dir(path, mode)
    }

    fn create_file(
        &self,
        meta: &FileMeta,
        block_size: u32,
        resume: bool,
    ) -> crate::Result<Created> {
        let (inner, kept) = self.inner.create_file(meta, block_size, resume)?;
        let writer = FaultyWriter {
            inner,
            before_write: self.before_write.clone(),
        };
        Ok((Arc::new(writer), kept))
    }

    fn digests(&self) -> bool {
        self.inner.digests()
    }

    fn existing(&self, path: &tern_proto::RelPath) -> crate::Result<Option<Found>> {
        self.inner.existing(path)
    }

    fn create_entry(&self, entry: &tern_proto::EntryMeta) -> crate::Result<()> {
        self.inner.create_entry(entry)
    }

    fn finish(&self) -> Vec<tern_session::EntryFailure> {
        self.inner.finish()
    }
}

/// One file's writer under a [`Faulty`] sink (committed by itself).
struct FaultyWriter {
    inner: Arc<dyn BlockWrite>,
    before_write: BeforeWrite,
}

impl BlockWrite for FaultyWriter {
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        (self.before_write)(offset, data.len())?;
        self.inner.write_at(offset, data)
    }

    fn journaled(&self) -> bool {
        self.inner.journaled()
    }

    fn write_hashed(
        &self,
        offset: u64,
        data: &[u8],
        hashed: &crate::store::journal::BlockHasher,
    ) -> std::io::Result<()> {
        (self.before_write)(offset, data.len())?;
        self.inner.write_hashed(offset, data, hashed)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }

    fn direct_bytes(&self) -> u64 {
        self.inner.direct_bytes()
    }

    fn commit(&self) -> crate::Result<()> {
        self.inner.commit()
    }

    fn discard(&self) -> crate::Result<()> {
        self.inner.discard()
    }

    fn final_path(&self) -> String {
        self.inner.final_path()
    }
}

/// A sink on a disk with `bytes` free: every file written through it
/// draws on that space, and a write that does not fit fails as a full
/// disk does (`ENOSPC`), having written nothing.
#[derive(Debug)]
pub struct FillsUp;

impl FillsUp {
    /// `inner`, with room for `bytes` more.
    #[allow(clippy::new_ret_no_self)]
    pub fn new<S>(inner: S, bytes: u64) -> Faulty<S> {
        let free = AtomicU64::new(bytes);
        Faulty {
            inner,
            what: format!("fills up after {bytes} bytes"),
            before_write: Arc::new(move |_, len| {
                free.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |free| {
                    free.checked_sub(len as u64)
                })
                .map(|_| ())
                .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOSPC))
            }),
        }
    }
}

/// A sink on a slow disk: each file's write of the block at `offset`
/// takes `delay` longer.
#[derive(Debug)]
pub struct SlowDisk;

impl SlowDisk {
    /// `inner`, whose writes at `offset` wait `delay` first.
    #[allow(clippy::new_ret_no_self)]
    pub fn new<S>(inner: S, offset: u64, delay: std::time::Duration) -> Faulty<S> {
        Faulty {
            inner,
            what: format!("writes at {offset} take {delay:?} longer"),
            before_write: Arc::new(move |at, _| {
                if at == offset {
                    std::thread::sleep(delay);
                }
                Ok(())
            }),
        }
    }
}
