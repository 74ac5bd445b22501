//! Reading a TLS connection a record at a time until tern's record layer
//! takes it over.
//!
//! rustls reads its socket in pieces of its own choosing, so at any moment
//! it may hold the start of a record it has not yet opened. A connection
//! that tern's own record layer (`conn::records`) is to take over from
//! rustls must not: those bytes would be lost with rustls. [`Aligned`]
//! sits between the socket and rustls and never hands rustls more than the
//! rest of the record it is in (a record's 5-byte header, then its body),
//! so between two reads rustls holds no part of a record. That costs two
//! reads per record, which only the handshake and the first records pay: a
//! daemon's control connection reads freely again once it is known to be
//! one ([`Aligned::unalign`]), and a data connection is taken over.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a data connection reads at once once taken over: many records.
pub(crate) const DATA_READ_BUFFER: usize = 256 << 10;

/// A stream whose reader is given at most one TLS record per read.
#[derive(Debug)]
pub(crate) struct Aligned<S> {
    inner: S,
    /// Where the reader is in the current record; `None` once unaligned.
    record: Option<RecordCursor>,
}

/// How much of the current TLS record the reader has been given.
#[derive(Debug, Default, Clone, Copy)]
struct RecordCursor {
    header: [u8; 5],
    /// Of the header.
    have: usize,
    /// Of the body.
    left: usize,
}

impl RecordCursor {
    /// How many bytes the reader may be given before the record ends.
    fn allowed(&self) -> usize {
        if self.have < 5 {
            5 - self.have
        } else {
            self.left
        }
    }

    /// The reader was given `bytes` (no more than allowed).
    fn passed(&mut self, bytes: &[u8]) {
        if self.have < 5 {
            self.header[self.have..self.have + bytes.len()].copy_from_slice(bytes);
            self.have += bytes.len();
            if self.have == 5 {
                self.left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            }
        } else {
            self.left -= bytes.len();
        }
        if self.have == 5 && self.left == 0 {
            self.have = 0;
        }
    }

    fn at_boundary(&self) -> bool {
        self.have == 0
    }
}

impl<S> Aligned<S> {
    /// `inner`, read a record at a time.
    pub(crate) fn new(inner: S) -> Aligned<S> {
        Aligned {
            inner,
            record: Some(RecordCursor::default()),
        }
    }

    /// Reads across records from now on.
    pub(crate) fn unalign(&mut self) {
        self.record = None;
    }

    /// The stream underneath, if the reader has been given whole records
    /// only.
    pub(crate) fn into_inner(self) -> Option<S> {
        self.record?.at_boundary().then_some(self.inner)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Aligned<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let Some(mut record) = this.record else {
            return Pin::new(&mut this.inner).poll_read(cx, out);
        };
        let allowed = record.allowed().min(out.remaining());
        let mut limited = ReadBuf::new(out.initialize_unfilled_to(allowed));
        ready!(Pin::new(&mut this.inner).poll_read(cx, &mut limited))?;
        let n = limited.filled().len();
        record.passed(limited.filled());
        this.record = Some(record);
        out.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Aligned<S> {
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
    use tokio::io::AsyncReadExt;

    /// Records of these body lengths, as one byte string.
    fn records(lens: &[u16]) -> Vec<u8> {
        let mut wire = Vec::new();
        for (k, &len) in lens.iter().enumerate() {
            wire.extend_from_slice(&[23, 3, 3]);
            wire.extend_from_slice(&len.to_be_bytes());
            wire.extend(std::iter::repeat_n(k as u8, usize::from(len)));
        }
        wire
    }

    #[tokio::test]
    async fn no_read_crosses_the_end_of_a_record() {
        let lens = [100, 0, 16_400, 1, 5000];
        let wire = records(&lens);
        let mut r = Aligned::new(&wire[..]);
        let mut ends = vec![0];
        let mut at = 0;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            assert_eq!(buf[..n], wire[at..at + n]);
            at += n;
            ends.push(at);
        }
        assert_eq!(at, wire.len());
        // Each read ended at a header's or a body's end, and nowhere else.
        let mut boundaries = vec![0];
        for len in lens {
            let last = *boundaries.last().unwrap();
            boundaries.push(last + 5);
            if len > 0 {
                boundaries.push(last + 5 + usize::from(len));
            }
        }
        assert_eq!(ends, boundaries);
        assert!(r.into_inner().is_some());
    }

    #[tokio::test]
    async fn only_a_reader_between_records_can_be_taken_over() {
        let wire = records(&[100, 100]);
        let mut r = Aligned::new(&wire[..]);
        let mut part = [0u8; 50];
        r.read_exact(&mut part).await.unwrap();
        assert!(r.into_inner().is_none());
        let mut r = Aligned::new(&wire[..]);
        let mut whole = [0u8; 105];
        r.read_exact(&mut whole).await.unwrap();
        assert!(r.into_inner().is_some());
        let mut r = Aligned::new(&wire[..]);
        r.unalign();
        let mut all = vec![0u8; 210];
        r.read_exact(&mut all).await.unwrap();
        assert_eq!(all, wire);
        assert!(r.into_inner().is_none(), "unaligned: no longer known");
    }
}
