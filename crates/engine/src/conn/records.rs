//! tern's own TLS 1.3 record layer for `private` data connections.
//!
//! rustls does the handshake; then [`RecordStream`] takes the
//! connection's keys and seals and opens the records itself
//! (RFC 8446 §5), the same bytes on the wire as rustls would send, so the
//! peer may be either. It exists for speed: rustls copies every plaintext
//! byte into and out of its own buffers (three copies per byte received:
//! into its record buffer, into a fresh vector once decrypted, into the
//! reader's buffer), where this layer opens each record from its read
//! buffer straight into the caller's (a block buffer), and seals into one
//! reusable buffer written in large pieces.
//!
//! What it keeps of TLS after the handshake: application data; alerts
//! (`close_notify` ends the stream, any other alert is an error); key
//! updates in both directions (it sends one before a key reaches its
//! suite's confidentiality limit, and follows the peer's); session
//! tickets are ignored. A record that fails authentication, is too long,
//! or is of a kind TLS 1.3 does not allow here ends the stream with an
//! error; so does an end of stream without `close_notify`.
//!
//! [`take_over`] makes one from a connection rustls has just finished the
//! handshake of. For it to be exact, rustls must not hold a partial record
//! (so the socket is read a record at a time until then: `conn::aligned`) and must have sent all it had queued (its tickets).

mod keys;
#[cfg(test)]
mod tests;

use std::io::{self, Read as _};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub(crate) use keys::SecretCapture;
use keys::{Keys, Suite};

use crate::conn::aligned::Aligned;

/// Most plaintext one record carries (§5.1).
const MAX_PLAINTEXT: usize = 1 << 14;
/// Most ciphertext one record carries (§5.2): the inner plaintext with its
/// content type and padding, and the tag.
const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;
const HEADER_LEN: usize = 5;
const TAG_LEN: usize = 16;
/// A whole record at most.
const MAX_RECORD: usize = HEADER_LEN + MAX_CIPHERTEXT;

const APPLICATION_DATA: u8 = 23;
const HANDSHAKE: u8 = 22;
const ALERT: u8 = 21;
const KEY_UPDATE: u8 = 24;
const NEW_SESSION_TICKET: u8 = 4;

/// What is sealed and not yet written, at most (16 full records).
const WRITE_BUFFER: usize = 16 * (HEADER_LEN + MAX_PLAINTEXT + 1 + TAG_LEN) + 64;

/// A TLS 1.3 connection after its handshake, with tern's record layer.
pub(crate) struct RecordStream<S> {
    io: S,
    side: Side,
    rx: Keys,
    tx: Keys,
    /// Records sealed under one key before the next key update.
    tx_limit: u64,
    /// Ciphertext read; the unread records are `inbuf[start..end]`.
    inbuf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Plaintext opened and not yet read: `plain[plain_pos..]`.
    plain: Vec<u8>,
    plain_pos: usize,
    /// Records sealed; the unwritten bytes are `outbuf[out_pos..]`.
    outbuf: Vec<u8>,
    out_pos: usize,
    /// The peer asked for our keys to be updated too.
    update_asked: bool,
    /// `close_notify` came: reads see the end.
    peer_closed: bool,
    /// `close_notify` sealed.
    closed: bool,
    /// A read failed for good: every later read and write fails so.
    broken: Option<(io::ErrorKind, String)>,
    /// Records in a row that carried no data for the reader.
    empty_in_a_row: u8,
    /// A write failed after its bytes were taken: told on the next call.
    write_error: Option<io::Error>,
}

/// Records in a row without data for the reader (key updates, tickets,
/// empty or padding-only records) a peer may send, as rustls allows: more
/// would let it keep a reader busy without ever giving it a byte.
const MAX_EMPTY_IN_A_ROW: u8 = 32;

impl<S> std::fmt::Debug for RecordStream<S> {
    // Not the buffers: they hold the peer's ciphertext and plaintext.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStream")
            .field("rx", &self.rx)
            .field("tx", &self.tx)
            .field("buffered", &(self.end - self.start))
            .finish()
    }
}

/// Why a connection could not be taken over from rustls.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TakeOverError {
    #[error("not TLS 1.3 with a cipher suite tern's record layer knows")]
    Unsupported,
    #[error("rustls did not reveal the connection's traffic secrets")]
    NoSecrets,
    #[error("the socket was not read to a record boundary")]
    NotAligned,
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
    #[error(transparent)]
    Keys(#[from] keys::KeyError),
}

/// `config` with its secrets logged to `capture` and extractable: for one
/// client connection that [`take_over`] will take. A config made for that
/// connection alone is changed in place, not copied.
pub(crate) fn capturing_client(
    config: Arc<rustls::ClientConfig>,
    capture: &SecretCapture,
) -> Arc<rustls::ClientConfig> {
    let mut config = Arc::unwrap_or_clone(config);
    config.enable_secret_extraction = true;
    config.key_log = Arc::new(capture.clone());
    Arc::new(config)
}

/// `config` with its secrets logged to `capture` and extractable: for one
/// connection a daemon accepts (which [`take_over`] takes if it joins a
/// session as a data connection).
pub(crate) fn capturing_server(
    config: &rustls::ServerConfig,
    capture: &SecretCapture,
) -> Arc<rustls::ServerConfig> {
    let mut config = config.clone();
    config.enable_secret_extraction = true;
    config.key_log = Arc::new(capture.clone());
    Arc::new(config)
}

/// Whose end of the connection this is: which secret seals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// Takes over `conn` (its handshake done, nothing queued to send) and the
/// socket under it. `capture` must be the key log of `conn`'s config.
/// `read_buffer` bytes of ciphertext are read at once.
pub(crate) fn take_over<S>(
    io: Aligned<S>,
    mut conn: rustls::Connection,
    capture: &SecretCapture,
    read_buffer: usize,
) -> Result<RecordStream<S>, TakeOverError> {
    let side = match conn {
        rustls::Connection::Client(_) => Side::Client,
        rustls::Connection::Server(_) => Side::Server,
    };
    let suite = conn
        .negotiated_cipher_suite()
        .filter(|_| conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3))
        .and_then(Suite::of)
        .ok_or(TakeOverError::Unsupported)?;
    let (client_secret, server_secret) = capture.take().ok_or(TakeOverError::NoSecrets)?;
    let io = io.into_inner().ok_or(TakeOverError::NotAligned)?;
    // Plaintext rustls has opened and nobody has read yet.
    let mut plain = Vec::new();
    let mut piece = [0u8; 4096];
    let mut peer_closed = false;
    loop {
        match conn.reader().read(&mut piece) {
            Ok(0) => {
                peer_closed = true;
                break;
            }
            Ok(n) => plain.extend_from_slice(&piece[..n]),
            Err(_) => break,
        }
    }
    #[allow(deprecated)] // It names key updates as the reason: keys.rs follows them.
    let secrets = conn.dangerous_extract_secrets()?;
    let (tx_secret, rx_secret) = match side {
        Side::Client => (client_secret, server_secret),
        Side::Server => (server_secret, client_secret),
    };
    let tx = Keys::new(suite, &tx_secret.0, secrets.tx.0)?;
    tx.check(&secrets.tx.1)?;
    let rx = Keys::new(suite, &rx_secret.0, secrets.rx.0)?;
    rx.check(&secrets.rx.1)?;
    let inbuf = vec![0u8; read_buffer.max(2 * MAX_RECORD)].into_boxed_slice();
    Ok(RecordStream {
        io,
        side,
        rx,
        tx,
        tx_limit: suite.limit.saturating_sub(1),
        end: 0,
        inbuf,
        start: 0,
        plain,
        plain_pos: 0,
        outbuf: Vec::with_capacity(WRITE_BUFFER),
        out_pos: 0,
        update_asked: false,
        peer_closed,
        closed: false,
        broken: None,
        empty_in_a_row: 0,
        write_error: None,
    })
}

/// The header of a record whose inner plaintext (content and type) is
/// `inner_len` bytes.
fn record_header(inner_len: usize) -> [u8; HEADER_LEN] {
    let [hi, lo] = u16::try_from(inner_len + TAG_LEN)
        .expect("a record's length")
        .to_be_bytes();
    [APPLICATION_DATA, 3, 3, hi, lo]
}

/// Where one whole record lies in the read buffer.
struct Record {
    header: [u8; HEADER_LEN],
    /// Its ciphertext and tag.
    body: std::ops::Range<usize>,
}

/// What one record turned out to hold.
enum Opened {
    /// Application data: this many bytes for the reader.
    Data(usize),
    /// Nothing for the reader (a key update, a ticket).
    Nothing,
    /// `close_notify`.
    Closed,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl<S> RecordStream<S> {
    /// Seals each key's records up to `limit` (tests: key updates sooner).
    #[cfg(test)]
    pub(crate) fn set_tx_limit(&mut self, limit: u64) {
        self.tx_limit = limit;
    }

    /// The next whole record in the read buffer, checked for form.
    fn next_record(&self) -> io::Result<Option<Record>> {
        let unread = &self.inbuf[self.start..self.end];
        let Some(h) = unread.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
        if h[0] != APPLICATION_DATA || h[1] != 3 {
            return Err(invalid(format!(
                "TLS: unexpected record (type {}, version {}.{})",
                h[0], h[1], h[2]
            )));
        }
        if !(TAG_LEN + 1..=MAX_CIPHERTEXT).contains(&len) {
            return Err(invalid(format!("TLS: record of {len} bytes")));
        }
        if unread.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let body = self.start + HEADER_LEN..self.start + HEADER_LEN + len;
        Ok(Some(Record { header: *h, body }))
    }

    /// Opens `rec` into `out` (at least its ciphertext's length), handles
    /// what is not application data, and consumes the record.
    fn open_into(&mut self, rec: &Record, out: &mut [u8]) -> io::Result<Opened> {
        let text_len = rec.body.len() - TAG_LEN;
        if text_len > MAX_PLAINTEXT + 1 {
            return Err(invalid(format!(
                "TLS: record of {text_len} bytes of plaintext"
            )));
        }
        let (ciphertext, tag) = self.inbuf[rec.body.clone()].split_at(text_len);
        let out = &mut out[..text_len];
        if !self.rx.open(rec.header, ciphertext, tag, out) {
            return Err(invalid(
                "TLS: a record failed authentication (bad_record_mac)",
            ));
        }
        self.start = rec.body.end;
        // The content type is the last byte that is not padding.
        let Some(type_at) = out.iter().rposition(|&b| b != 0) else {
            return Err(invalid("TLS: a record without a content type"));
        };
        let content = &out[..type_at];
        match out[type_at] {
            APPLICATION_DATA => Ok(Opened::Data(type_at)),
            ALERT => match content {
                [_, 0] => Ok(Opened::Closed),
                [_, what] => Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!("TLS: the peer sent alert {what}"),
                )),
                _ => Err(invalid("TLS: a malformed alert")),
            },
            HANDSHAKE if content.is_empty() => Err(invalid("TLS: an empty handshake record")),
            HANDSHAKE => {
                let content = content.to_vec();
                self.handshake_messages(&content)?;
                Ok(Opened::Nothing)
            }
            other => Err(invalid(format!("TLS: unexpected content type {other}"))),
        }
    }

    /// Post-handshake messages: key updates are followed, tickets
    /// ignored (this end never resumes through them).
    fn handshake_messages(&mut self, mut messages: &[u8]) -> io::Result<()> {
        while !messages.is_empty() {
            let [kind, a, b, c, rest @ ..] = messages else {
                return Err(invalid("TLS: a split handshake message"));
            };
            let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
            if rest.len() < len {
                return Err(invalid("TLS: a split handshake message"));
            }
            let (body, more) = rest.split_at(len);
            match (*kind, body) {
                (KEY_UPDATE, [asked @ (0 | 1)]) => {
                    if !more.is_empty() {
                        return Err(invalid("TLS: data after a key update in its record"));
                    }
                    self.rx = self.rx.next();
                    self.update_asked |= *asked == 1;
                }
                (NEW_SESSION_TICKET, _) if self.side == Side::Client => {}
                (kind, _) => {
                    return Err(invalid(format!("TLS: unexpected handshake message {kind}")));
                }
            }
            messages = more;
        }
        Ok(())
    }

    /// Starts a record in the write buffer: its header, filled in by
    /// [`Self::seal_record`] once the content follows it.
    fn begin_record(&mut self) -> usize {
        let at = self.outbuf.len();
        self.outbuf.extend_from_slice(&[0; HEADER_LEN]);
        at
    }

    /// Seals the record begun at `at`, whose content is all that follows
    /// its header, as `content_type`.
    fn seal_record(&mut self, at: usize, content_type: u8) {
        self.outbuf.push(content_type);
        let body = at + HEADER_LEN;
        let header = record_header(self.outbuf.len() - body);
        self.outbuf[at..body].copy_from_slice(&header);
        let tag = self.tx.seal(header, &mut self.outbuf[body..]);
        self.outbuf.extend_from_slice(tag.as_ref());
    }

    /// Seals `content` as one record of `content_type`.
    fn seal_message(&mut self, content_type: u8, content: &[u8]) {
        let at = self.begin_record();
        self.outbuf.extend_from_slice(content);
        self.seal_record(at, content_type);
    }

    /// Seals a key update first when the key is at its limit or the peer
    /// asked for one.
    fn update_keys_if_due(&mut self) {
        if self.tx.seq >= self.tx_limit || self.update_asked {
            // update_not_requested: the peer's keys are its own business.
            self.seal_message(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0]);
            self.tx = self.tx.next();
            self.update_asked = false;
        }
    }

    /// Whether the write buffer has room for one more full record (and a
    /// key update before it).
    fn has_room(&self) -> bool {
        self.outbuf.len() + 2 * (HEADER_LEN + TAG_LEN + 1) + MAX_PLAINTEXT + 5 <= WRITE_BUFFER
    }

    /// Seals as much of `bufs` as the write buffer takes, in records as
    /// full as the pieces allow; how many bytes.
    fn seal_from(&mut self, bufs: &[io::IoSlice<'_>]) -> usize {
        let mut taken = 0;
        let mut pieces = bufs.iter().map(|b| &b[..]).filter(|b| !b.is_empty());
        let mut current: Option<&[u8]> = pieces.next();
        while current.is_some() && self.has_room() {
            self.update_keys_if_due();
            let at = self.begin_record();
            let mut room = MAX_PLAINTEXT;
            while room > 0 {
                let Some(p) = current else { break };
                let n = p.len().min(room);
                self.outbuf.extend_from_slice(&p[..n]);
                room -= n;
                current = if n == p.len() {
                    pieces.next()
                } else {
                    Some(&p[n..])
                };
            }
            taken += MAX_PLAINTEXT - room;
            self.seal_record(at, APPLICATION_DATA);
        }
        taken
    }
}

impl<S: AsyncWrite + Unpin> RecordStream<S> {
    /// Writes sealed records until none are left or the socket is full.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_pos < self.outbuf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.outbuf[self.out_pos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_pos += n;
        }
        self.outbuf.clear();
        self.out_pos = 0;
        Poll::Ready(Ok(()))
    }

    fn poll_write_all_of(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.write_error.take() {
            return Poll::Ready(Err(e));
        }
        if let Some((kind, what)) = &self.broken {
            return Poll::Ready(Err(io::Error::new(*kind, what.clone())));
        }
        if self.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        // Room for at least one full record, or wait for the socket.
        if !self.has_room() {
            ready!(self.poll_drain(cx))?;
        }
        let taken = self.seal_from(bufs);
        // Written now if the socket takes it; if not, the next write or
        // flush finishes it (the waker is registered). The bytes are taken
        // either way: an error is told on the next call.
        if let Poll::Ready(Err(e)) = self.poll_drain(cx) {
            if taken == 0 {
                return Poll::Ready(Err(e));
            }
            self.write_error = Some(e);
        }
        Poll::Ready(Ok(taken))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RecordStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some((kind, what)) = &this.broken {
            return Poll::Ready(Err(io::Error::new(*kind, what.clone())));
        }
        match this.poll_read_records(cx, out) {
            Poll::Ready(Err(e)) => {
                this.broken = Some((e.kind(), e.to_string()));
                Poll::Ready(Err(e))
            }
            other => other,
        }
    }
}

impl<S: AsyncRead + Unpin> RecordStream<S> {
    fn poll_read_records(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if self.plain_pos < self.plain.len() {
                let n = out.remaining().min(self.plain.len() - self.plain_pos);
                out.put_slice(&self.plain[self.plain_pos..self.plain_pos + n]);
                self.plain_pos += n;
                if self.plain_pos == self.plain.len() {
                    self.plain.clear();
                    self.plain_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if self.peer_closed {
                return Poll::Ready(Ok(()));
            }
            let mut delivered = false;
            while let Some(rec) = self.next_record()? {
                let text_len = rec.body.len() - TAG_LEN;
                if delivered && out.remaining() < text_len {
                    break;
                }
                let opened = if out.remaining() >= text_len {
                    // Straight into the caller's buffer.
                    let dst = out.initialize_unfilled_to(text_len);
                    let opened = self.open_into(&rec, dst)?;
                    if let Opened::Data(n) = opened {
                        out.advance(n);
                    }
                    opened
                } else {
                    let mut plain = std::mem::take(&mut self.plain);
                    plain.resize(text_len, 0);
                    let opened = self.open_into(&rec, &mut plain);
                    if let Ok(Opened::Data(n)) = opened {
                        plain.truncate(n);
                    } else {
                        plain.clear();
                    }
                    self.plain = plain;
                    opened?
                };
                match opened {
                    Opened::Data(0) | Opened::Nothing => {
                        self.empty_in_a_row += 1;
                        if self.empty_in_a_row > MAX_EMPTY_IN_A_ROW {
                            return Poll::Ready(Err(invalid(
                                "TLS: too many records in a row without data",
                            )));
                        }
                        continue;
                    }
                    Opened::Data(_) if self.plain.is_empty() => {
                        self.empty_in_a_row = 0;
                        delivered = true;
                    }
                    Opened::Data(_) => {
                        self.empty_in_a_row = 0;
                        break;
                    }
                    Opened::Closed => {
                        self.peer_closed = true;
                        break;
                    }
                }
                if out.remaining() == 0 {
                    break;
                }
            }
            if delivered {
                return Poll::Ready(Ok(()));
            }
            if !self.plain.is_empty() || self.peer_closed {
                continue;
            }
            // Room for a whole record after what is buffered.
            if self.inbuf.len() - self.end < MAX_RECORD {
                self.inbuf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let mut fill = ReadBuf::new(&mut self.inbuf[self.end..]);
            ready!(Pin::new(&mut self.io).poll_read(cx, &mut fill))?;
            let n = fill.filled().len();
            if n == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    if self.start == self.end {
                        "TLS: the peer closed the connection without close_notify"
                    } else {
                        "TLS: the connection ended inside a record"
                    },
                )));
            }
            self.end += n;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RecordStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_all_of(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_all_of(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(e) = this.write_error.take() {
            return Poll::Ready(Err(e));
        }
        if this.update_asked && !this.closed {
            this.update_keys_if_due();
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.closed {
            // close_notify: a warning-level alert 0.
            ready!(this.poll_drain(cx))?;
            this.update_keys_if_due();
            this.seal_message(ALERT, &[1, 0]);
            this.closed = true;
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
