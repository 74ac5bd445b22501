//! A session's data connections joining it: each is dialled over the path
//! the plan gives it, secured like the session asks, and presents the
//! session's token and its index ([`DataJoin`]). The daemon's answer is
//! not waited for: data follows the join at once (PROTOCOL.md §8.2), one
//! round trip sooner, and [`Unanswered`] reads the answer on the way.

use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use tern_proto::data::JOIN_REPLY_LEN;
use tern_proto::{DataJoin, JoinReply, Protect};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use super::{ClientCert, Endpoint, PinVerifier, gone, server_name};
use crate::conn::aligned::{Aligned, DATA_READ_BUFFER};
use crate::conn::paths::{self, Leg, PathPlan};
use crate::conn::records::{self, SecretCapture};
use crate::conn::route::Route;
use crate::data::transfer::BoxStream;
use crate::data::tuning::Joined;
use crate::{Error, Result, StreamWrap};

/// A path other than the control connection's gets this long to connect
/// before its stream goes over the control path.
const OTHER_PATH_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How a data connection reaches the daemon and is secured before it
/// joins: shared by the joins and the connections dialled early.
#[derive(Clone)]
pub(super) struct Dialer {
    pub(super) ep: Endpoint,
    pub(super) route: Route,
    pub(super) connect_timeout: Duration,
    pub(super) io_timeout: Duration,
    pub(super) protect: Protect,
    pub(super) fingerprint: String,
    /// Presented on `private` data connections too: a site daemon asks on
    /// every TLS connection.
    pub(super) client_cert: Option<ClientCert>,
    pub(super) mptcp: bool,
}

/// A data connection ready for its join, and a duplicate of its socket.
type Secured = (BoxStream, Option<OwnedFd>);

impl Dialer {
    /// Secures `tcp` as the session asks (TLS in `private` mode).
    async fn secure(&self, tcp: TcpStream) -> Result<Secured> {
        // Without it the join waits behind the TLS Finished for a round
        // trip (Nagle's algorithm); cleared once joined.
        let _ = tcp.set_nodelay(true);
        let probe = {
            use std::os::fd::AsFd;
            tcp.as_fd().try_clone_to_owned().ok()
        };
        let s: BoxStream = if self.protect == Protect::Private {
            // rustls does the handshake; tern's record layer the rest.
            let v = PinVerifier::new(Some(self.fingerprint.clone()));
            let capture = SecretCapture::default();
            let config =
                records::capturing_client(v.client_config(self.client_cert.as_ref())?, &capture);
            let tls = TlsConnector::from(config)
                .connect(server_name(&self.ep.host), Aligned::new(tcp))
                .await
                .map_err(|e| Error::Tls(format!("data connection: {e}")))?;
            let (io, conn) = tls.into_inner();
            let records = records::take_over(io, conn.into(), &capture, DATA_READ_BUFFER)
                .map_err(|e| Error::Tls(format!("data connection: {e}")))?;
            Box::new(records)
        } else {
            Box::new(tcp)
        };
        Ok((s, probe))
    }

    /// A connection over the control connection's path, secured.
    async fn control_path(self) -> Result<Secured> {
        let tcp = self
            .route
            .connect(self.connect_timeout, self.io_timeout, self.mptcp)
            .await?;
        self.secure(tcp).await
    }
}

/// Data connections dialled while the session opens, on a long path where
/// the opening went with the hello: the daemon has accepted the session
/// by the time they reach it (it counts them as that session's), and they
/// are up a round trip sooner. One per first stream, on the control
/// connection's path; a join takes its own, and one that failed is dialled
/// again the usual way.
pub(super) struct EarlyStreams {
    dialled: Mutex<Vec<Option<JoinHandle<Result<Secured>>>>>,
    /// When they were dialled: a daemon that held the session request (all
    /// its session slots busy) closes them at its handshake deadline.
    since: Instant,
}

/// Early connections older than this when the session is accepted are
/// closed and dialled again: a daemon closes a connection that has not
/// joined within its handshake timeout (5 s by default).
pub(super) const EARLY_STREAMS_FRESH: Duration = Duration::from_secs(2);

impl EarlyStreams {
    /// Dials `n` connections in the background.
    pub(super) fn start(dialer: &Dialer, n: u16) -> EarlyStreams {
        tracing::debug!("dialling {n} data connections while the session opens");
        let dialled = (0..n)
            .map(|_| Some(tokio::spawn(dialer.clone().control_path())))
            .collect();
        EarlyStreams {
            dialled: Mutex::new(dialled),
            since: Instant::now(),
        }
    }

    /// Whether they are still fresh enough to join with.
    pub(super) fn fresh(&self) -> bool {
        self.since.elapsed() <= EARLY_STREAMS_FRESH
    }

    /// Closes those the session will not use: from index `n` on.
    pub(super) fn keep(&self, n: u16) {
        let mut dialled = self.dialled.lock().expect("early streams");
        for task in dialled
            .iter_mut()
            .skip(usize::from(n))
            .filter_map(Option::take)
        {
            task.abort();
        }
    }

    fn take(&self, k: u16) -> Option<JoinHandle<Result<Secured>>> {
        let mut dialled = self.dialled.lock().expect("early streams");
        dialled.get_mut(usize::from(k)).and_then(Option::take)
    }
}

impl Drop for EarlyStreams {
    fn drop(&mut self) {
        self.keep(0);
    }
}

/// Opens data connections of one session.
pub(super) struct Joiner {
    /// Which path each stream takes, when there are several.
    pub(super) plan: Option<Arc<PathPlan>>,
    pub(super) dialer: Dialer,
    pub(super) token: tern_proto::Token,
    pub(super) version: u16,
    pub(super) max_streams: u16,
    pub(super) wrap: Option<StreamWrap>,
    /// Connections dialled while the session opened.
    pub(super) early: Option<EarlyStreams>,
}

impl Joiner {
    /// Connects data stream `k` and joins it to the session.
    pub(super) async fn join(self: Arc<Self>, k: u16) -> Result<Joined> {
        if k >= self.max_streams {
            return Err(Error::Protocol(format!(
                "stream {k} asked for; the session allows {}",
                self.max_streams
            )));
        }
        let leg = self.plan.as_ref().map(|plan| plan.leg(k));
        let other_path = matches!(leg, Some(Leg::Path { .. }));
        let early = match self.early.as_ref().and_then(|e| e.take(k)) {
            Some(task) if !other_path => match task.await {
                Ok(Ok(secured)) => Some(secured),
                Ok(Err(e)) => {
                    tracing::debug!("data connection {k} dialled early: {e}; dialling again");
                    None
                }
                Err(_) => None,
            },
            Some(task) => {
                task.abort();
                None
            }
            None => None,
        };
        let (mut s, probe) = match early {
            Some(secured) => secured,
            None => {
                let tcp = self.dial(k, leg).await?;
                self.dialer.secure(tcp).await?
            }
        };
        let join = DataJoin {
            version: self.version,
            stream: k,
            token: self.token,
        };
        s.write_all(&join.encode()).await.map_err(gone)?;
        s.flush().await.map_err(gone)?;
        if let Some(fd) = &probe {
            // Data frames are large writes: let the kernel coalesce their
            // short tails again, as for any bulk stream.
            let _ = socket2::SockRef::from(fd).set_nodelay(false);
        }
        // Data may follow the join at once: the answer is read on the way.
        let s: BoxStream = Box::new(Unanswered::new(s, k));
        Ok(Joined {
            index: k,
            stream: match &self.wrap {
                Some(w) => w(usize::from(k), s),
                None => s,
            },
            probe,
        })
    }
}

impl Joiner {
    /// The TCP connection of stream `k`, over the path the plan gave it
    /// (`leg`); over the control connection's path when that one cannot be
    /// reached.
    async fn dial(&self, k: u16, leg: Option<Leg>) -> Result<TcpStream> {
        let d = &self.dialer;
        if let (
            Some(plan),
            Some(Leg::Path {
                index,
                remote,
                local,
            }),
        ) = (&self.plan, leg)
        {
            let timeout = d.connect_timeout.min(OTHER_PATH_CONNECT_TIMEOUT);
            let tcp = match (d.route.callback(), remote, local) {
                (Some(callback), _, Some(at)) => {
                    callback.accept(Some(at), timeout, d.io_timeout).await
                }
                (None, Some(remote), _) => {
                    paths::connect(remote, local, timeout, d.io_timeout, d.mptcp).await
                }
                _ => Err(Error::Protocol(format!("path {index} has no address"))),
            };
            match tcp {
                Ok(tcp) => {
                    if let (Some(_), Ok(peer)) = (d.route.callback(), tcp.peer_addr()) {
                        plan.arrived(index, peer);
                    }
                    return Ok(tcp);
                }
                Err(e) => {
                    tracing::info!("path {index}: {e}; stream {k} takes the first path");
                    plan.unreachable(index, k, e.to_string());
                }
            }
        }
        d.route
            .connect(d.connect_timeout, d.io_timeout, d.mptcp)
            .await
    }
}

/// A data connection whose join the daemon has not answered yet.
///
/// The answer comes before anything else the daemon sends on it, so reads
/// take it first; writes look for it as they go, and once it is a refusal
/// (or the connection closed unanswered) every read and write fails with
/// that reason, which is what the session reports.
pub(crate) struct Unanswered {
    inner: BoxStream,
    index: u16,
    answer: Answer,
}

enum Answer {
    Awaited {
        reply: [u8; JOIN_REPLY_LEN],
        got: usize,
    },
    Accepted,
    Refused(String),
}

impl Unanswered {
    pub(crate) fn new(inner: BoxStream, index: u16) -> Unanswered {
        Unanswered {
            inner,
            index,
            answer: Answer::Awaited {
                reply: [0; JOIN_REPLY_LEN],
                got: 0,
            },
        }
    }

    /// Reads as much of the answer as has come; ready once it is in.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let k = self.index;
            match &mut self.answer {
                Answer::Accepted => return Poll::Ready(Ok(())),
                Answer::Refused(why) => return Poll::Ready(Err(io::Error::other(why.clone()))),
                Answer::Awaited { reply, got } if *got == JOIN_REPLY_LEN => {
                    self.answer = match JoinReply::decode(reply) {
                        Ok(JoinReply::Accepted) => Answer::Accepted,
                        Ok(JoinReply::Refused) => {
                            Answer::Refused(format!("the server refused data connection {k}"))
                        }
                        Err(e) => Answer::Refused(format!(
                            "data connection {k}: the server's answer to its join: {e}"
                        )),
                    };
                }
                Answer::Awaited { reply, got } => {
                    let mut buf = ReadBuf::new(&mut reply[*got..]);
                    ready!(Pin::new(&mut self.inner).poll_read(cx, &mut buf))?;
                    let n = buf.filled().len();
                    if n == 0 {
                        self.answer = Answer::Refused(format!(
                            "the server closed data connection {k} without answering its join"
                        ));
                    } else {
                        *got += n;
                    }
                }
            }
        }
    }

    /// Fails with the refusal once one came; otherwise lets writes go on
    /// while the answer is still on its way.
    fn check_answer(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.poll_answer(cx) {
            Poll::Ready(Err(e)) => Err(e),
            Poll::Ready(Ok(())) | Poll::Pending => Ok(()),
        }
    }
}

impl AsyncRead for Unanswered {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Unanswered {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !matches!(this.answer, Answer::Accepted) {
            this.check_answer(cx)?;
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !matches!(this.answer, Answer::Accepted) {
            this.check_answer(cx)?;
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !matches!(this.answer, Answer::Accepted) {
            this.check_answer(cx)?;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> (Unanswered, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        (Unanswered::new(Box::new(ours), 3), theirs)
    }

    #[tokio::test]
    async fn data_goes_before_the_answer_comes() {
        let (mut s, mut daemon) = pair();
        tokio::time::timeout(Duration::from_secs(5), async {
            s.write_all(b"block").await.unwrap();
            s.flush().await.unwrap();
        })
        .await
        .expect("writes do not wait for the answer");
        let mut got = [0u8; 5];
        daemon.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"block");
    }

    #[tokio::test]
    async fn reads_take_the_answer_first() {
        let (mut s, mut daemon) = pair();
        daemon
            .write_all(&JoinReply::Accepted.encode())
            .await
            .unwrap();
        daemon.write_all(b"frame").await.unwrap();
        let mut got = [0u8; 5];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"frame");
        s.write_all(b"more").await.unwrap();
    }

    #[tokio::test]
    async fn a_refusal_fails_the_writes_with_its_reason() {
        let (mut s, mut daemon) = pair();
        s.write_all(b"early").await.unwrap();
        daemon
            .write_all(&JoinReply::Refused.encode())
            .await
            .unwrap();
        let mut e = None;
        for _ in 0..100 {
            if let Err(err) = s.write_all(b"block").await {
                e = Some(err);
                break;
            }
            tokio::task::yield_now().await;
        }
        let e = e.expect("a refused stream's writes fail");
        assert!(e.to_string().contains("refused data connection 3"), "{e}");
        let e = s.read(&mut [0u8; 4]).await.unwrap_err();
        assert!(e.to_string().contains("refused data connection 3"), "{e}");
    }

    #[tokio::test]
    async fn an_unanswered_close_or_garbage_is_an_error() {
        let (mut s, daemon) = pair();
        drop(daemon);
        let e = s.read(&mut [0u8; 4]).await.unwrap_err();
        assert!(e.to_string().contains("without answering"), "{e}");
        let (mut s, mut daemon) = pair();
        daemon.write_all(b"HTTP").await.unwrap();
        let e = s.read(&mut [0u8; 4]).await.unwrap_err();
        assert!(e.to_string().contains("answer to its join"), "{e}");
    }
}
