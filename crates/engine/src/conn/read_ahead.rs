//! Read-ahead under TLS on data connections.
//!
//! rustls reads its socket one record at a time (at most 16 KiB, often
//! 4 KiB), so a `private` data stream made a `recv` per record. Each of
//! those costs a system call, and each read that frees receive buffer
//! space sends the peer a window update: on a fast path, and above all on
//! loopback where the update's processing (and the sender's next
//! transmission) runs in the reader's context, that was a fifth of a
//! receiving daemon's CPU under `tern perf`. [`ReadAhead`] sits between
//! the socket and rustls and, once turned on, takes whatever the socket
//! holds (up to its capacity) in one `recv`, then hands rustls its small
//! reads from memory: one more copy of the ciphertext, in cache, for a
//! tenth of the system calls and window updates.
//!
//! It starts off, so a connection still in its handshake (possibly from
//! anyone) holds no buffer; the owner turns it on once the connection is
//! known to carry bulk data. A daemon turns it on once a connection says
//! JOIN: until its join names a live session the connection holds its
//! handshake slot, so the handshake limits bound those buffers; after
//! that, only a holder of the session's token has one. Writes pass
//! straight through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a data connection reads ahead: several TLS records per `recv`.
pub(crate) const DATA_READ_AHEAD: usize = 256 << 10;

/// A stream that, once [`ReadAhead::read_ahead`] turned it on, reads
/// into its own buffer in large pieces and serves small reads from it.
pub(crate) struct ReadAhead<S> {
    inner: S,
    /// Empty while off.
    buf: Box<[u8]>,
    /// The unread bytes are `buf[pos..filled]`.
    pos: usize,
    filled: usize,
}

impl<S> ReadAhead<S> {
    /// `inner`, read without a buffer until turned on.
    pub(crate) fn new(inner: S) -> ReadAhead<S> {
        ReadAhead {
            inner,
            buf: Box::default(),
            pos: 0,
            filled: 0,
        }
    }

    /// Reads ahead up to `capacity` bytes from now on. Nothing is
    /// buffered while it is off, so no byte changes place.
    pub(crate) fn read_ahead(&mut self, capacity: usize) {
        if self.buf.is_empty() {
            self.buf = vec![0; capacity].into_boxed_slice();
        }
    }

    /// The stream underneath.
    #[cfg(test)]
    fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for ReadAhead<S> {
    // Not the buffer: it holds a peer's ciphertext.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAhead")
            .field("inner", &self.inner)
            .field("capacity", &self.buf.len())
            .field("buffered", &(self.filled - self.pos))
            .finish()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.pos == this.filled {
            // Empty: a read as large as the buffer (or with read-ahead
            // off) goes straight to the caller, saving the copy.
            if out.remaining() >= this.buf.len() {
                return Pin::new(&mut this.inner).poll_read(cx, out);
            }
            let mut fill = ReadBuf::new(&mut this.buf);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut fill))?;
            this.pos = 0;
            this.filled = fill.filled().len();
        }
        let n = out.remaining().min(this.filled - this.pos);
        out.put_slice(&this.buf[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadAhead<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads from `r` in `piece`-byte reads until the end.
    async fn read_all_in(r: &mut (impl AsyncRead + Unpin), piece: usize) -> Vec<u8> {
        let mut all = Vec::new();
        let mut chunk = vec![0u8; piece];
        loop {
            let n = r.read(&mut chunk).await.unwrap();
            if n == 0 {
                return all;
            }
            all.extend_from_slice(&chunk[..n]);
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[tokio::test]
    async fn every_byte_arrives_once_and_in_order_with_read_ahead_off_and_on() {
        let data = pattern(300_000);
        for (capacity, piece) in [
            (0, 4096),
            (1024, 100),
            (1024, 1024),
            (1024, 5000),
            (65536, 16_389),
        ] {
            let (mut w, r) = tokio::io::duplex(7_000);
            let sent = data.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&sent).await.unwrap();
                w.shutdown().await.unwrap();
            });
            let mut r = ReadAhead::new(r);
            // Some bytes before read-ahead is turned on, as after a handshake.
            let mut head = [0u8; 10];
            r.read_exact(&mut head).await.unwrap();
            if capacity > 0 {
                r.read_ahead(capacity);
            }
            let mut got = head.to_vec();
            got.extend(read_all_in(&mut r, piece).await);
            writer.await.unwrap();
            assert_eq!(got, data, "capacity {capacity}, reads of {piece}");
        }
    }

    #[tokio::test]
    async fn small_reads_are_served_from_one_large_read_of_the_socket() {
        // A reader that counts the reads that reach it.
        struct Counting<R>(R, usize);
        impl<R: AsyncRead + Unpin> AsyncRead for Counting<R> {
            fn poll_read(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                self.1 += 1;
                Pin::new(&mut self.0).poll_read(cx, buf)
            }
        }
        let data = pattern(64 << 10);
        let mut r = ReadAhead::new(Counting(&data[..], 0));
        r.read_ahead(DATA_READ_AHEAD);
        let got = read_all_in(&mut r, 4096).await;
        assert_eq!(got, data);
        // One read took all 64 KiB, one more saw the end; without the
        // read-ahead the 4 KiB reads would have reached it 17 times.
        assert_eq!(r.get_ref().1, 2);
    }

    #[tokio::test]
    async fn writes_pass_through_whole() {
        let (w, mut r) = tokio::io::duplex(1 << 20);
        let mut w = ReadAhead::new(w);
        w.read_ahead(1024);
        let data = pattern(100_000);
        w.write_all(&data).await.unwrap();
        w.shutdown().await.unwrap();
        assert_eq!(read_all_in(&mut r, 8192).await, data);
    }
}
