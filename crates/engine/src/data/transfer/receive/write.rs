//! A stream's block writes run beside its reads: while one block goes to
//! disk (with direct I/O, for as long as the device takes), the stream
//! reads and checks the next. One write per stream is in flight, and the
//! next frame's verdict waits for it, so the session still counts each
//! stream's frames in order.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tern_proto::data::BlockHeader;
use tokio::sync::oneshot;

use super::RecvShared;
use crate::Error;
use crate::store::blockbuf::BlockBuf;
use crate::store::fsio::BlockWrite;
use crate::store::journal::BlockHasher;

/// A block being written; its buffer comes back when it is done.
pub(super) struct InFlight(oneshot::Receiver<Option<BlockBuf>>);

impl InFlight {
    /// Writes block `h` of stream `k` (the first `len` bytes of `buf`)
    /// to `w`, feeds it to the file's digest and counts it as written;
    /// `hashed`: the journal's hash of its bytes, when taken as they came.
    pub(super) fn start(
        shared: &Arc<RecvShared>,
        k: usize,
        w: Arc<dyn BlockWrite>,
        h: BlockHeader,
        (buf, len): (BlockBuf, usize),
        hashed: Option<BlockHasher>,
    ) -> InFlight {
        let (done, back) = oneshot::channel();
        let shared = shared.clone();
        shared.writing.lock().expect("writing").insert(k);
        // One blocking task does it all, the write and the bookkeeping
        // after it (all of it synchronous): an async task around the
        // blocking one cost a spawn and a wakeup more per block.
        tokio::task::spawn_blocking(move || {
            let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_and_count(&shared, k, &*w, &h, (buf, len), hashed.as_ref())
            }))
            .unwrap_or_else(|_| Err(Error::Protocol("a block's write task panicked".into())));
            shared.writing.lock().expect("writing").remove(&k);
            match written {
                Ok(buf) => {
                    shared.wake.notify_waiters();
                    let _ = done.send(Some(buf));
                }
                Err(e) => {
                    shared.failure.fail(e, &shared.wake);
                    let _ = done.send(None);
                }
            }
        });
        InFlight(back)
    }

    /// Waits for the write: its buffer, or `None` when the session failed.
    pub(super) async fn done(self) -> Option<BlockBuf> {
        self.0.await.ok().flatten()
    }
}

/// Writes block `h` to `w`, feeds it to the file's digest and counts it
/// as written; returns its buffer.
fn write_and_count(
    shared: &RecvShared,
    k: usize,
    w: &dyn BlockWrite,
    h: &BlockHeader,
    (buf, len): (BlockBuf, usize),
    hashed: Option<&BlockHasher>,
) -> Result<BlockBuf, Error> {
    let (offset, file_id) = (h.offset, h.file_id);
    let res = match hashed {
        Some(hashed) => w.write_hashed(offset, &buf[..len], hashed),
        None => w.write_at(offset, &buf[..len]),
    };
    if let Err(e) = res {
        return Err(Error::io("write", w.final_path(), e));
    }
    let buf = match &shared.folds {
        Some(folds) => {
            let read_back = |at: u64, into: &mut [u8]| w.read_at(at, into);
            folds.feed_owned(file_id, offset, buf, len, &read_back)
        }
        None => buf,
    };
    shared
        .progress
        .bytes
        .fetch_add(u64::from(h.length), Ordering::Relaxed);
    shared.progress.stream_moved(k, u64::from(h.length));
    let mut s = shared.session.lock().expect("session");
    s.block_written(k, h).and_then(|()| s.judge_due())?;
    Ok(buf)
}

/// Waits for the stream's write in flight, if any (before the stream's
/// end is told, so that its last block counts first).
pub(super) async fn settle(in_flight: &mut Option<InFlight>) {
    if let Some(f) = in_flight.take() {
        f.done().await;
    }
}
