//! What a transfer runs over: byte streams of any kind ([`BoxStream`]:
//! TCP, TLS, an in-memory pipe), the framed control channel
//! ([`Control`]), and the tasks bound to one transfer ([`Tasks`]). The
//! lowest layer of the data path: the driver, the tuning and the stream
//! supply all build on it.

use std::sync::{Arc, Mutex};

use tern_proto::{ControlMsg, decode_control, encode_control};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;

use crate::{Error, Result};

/// A byte stream a session can run over: TCP, TLS over TCP, or an
/// in-memory pipe (local copies and tests).
pub trait DataStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> DataStream for T {}

/// A boxed [`DataStream`].
pub type BoxStream = Box<dyn DataStream>;

/// The control connection, framed.
pub struct Control {
    rd: ControlReader,
    wr: ControlWriter,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

/// Receiving half of a [`Control`].
pub struct ControlReader(tokio::io::BufReader<ReadHalf<BoxStream>>);
/// Sending half of a [`Control`].
pub struct ControlWriter(WriteHalf<BoxStream>);

impl std::fmt::Debug for ControlReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlReader")
    }
}

impl std::fmt::Debug for ControlWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlWriter")
    }
}

impl Control {
    /// Frames control messages over `stream`.
    pub fn new(stream: BoxStream) -> Control {
        let (rd, wr) = tokio::io::split(stream);
        Control {
            rd: ControlReader(tokio::io::BufReader::new(rd)),
            wr: ControlWriter(wr),
        }
    }

    /// Sends one message.
    pub async fn send(&mut self, msg: &ControlMsg) -> Result<()> {
        self.wr.send(msg).await
    }

    /// Receives one message. A frame that is too long or does not decode
    /// is answered with `Error{Protocol}` (best effort, PROTOCOL §4) before
    /// the error is returned, for the caller to close. (Once split, the
    /// session's failure handling tells the peer.)
    pub async fn recv(&mut self) -> Result<ControlMsg> {
        let received = self.rd.recv().await;
        if let Err(e @ Error::Decode(_)) = &received {
            let _ = self
                .wr
                .send(&ControlMsg::Error {
                    code: e.wire_code(),
                    message: e.to_string(),
                    file_id: None,
                })
                .await;
        }
        received
    }

    /// Splits into halves for concurrent use.
    pub fn split(self) -> (ControlReader, ControlWriter) {
        (self.rd, self.wr)
    }
}

impl ControlWriter {
    /// Sends one message.
    pub async fn send(&mut self, msg: &ControlMsg) -> Result<()> {
        self.send_all(std::slice::from_ref(msg)).await
    }

    /// Sends messages in one write (one TLS record and one system call
    /// for many small messages, such as a tree's announcements).
    pub async fn send_all(&mut self, msgs: &[ControlMsg]) -> Result<()> {
        let mut frames = Vec::new();
        for msg in msgs {
            frames.extend_from_slice(&encode_control(msg));
        }
        self.0.write_all(&frames).await.map_err(gone)?;
        self.0.flush().await.map_err(gone)
    }
}

impl ControlReader {
    /// Receives one message.
    pub async fn recv(&mut self) -> Result<ControlMsg> {
        let mut prefix = [0u8; 4];
        self.0.read_exact(&mut prefix).await.map_err(gone)?;
        let len = tern_proto::control::control_body_len(prefix)?;
        let mut body = vec![0u8; len];
        self.0.read_exact(&mut body).await.map_err(gone)?;
        Ok(decode_control(&body)?)
    }
}

fn gone(e: std::io::Error) -> Error {
    let what = match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the peer closed the connection".to_string(),
        _ => e.to_string(),
    };
    Error::PeerGone(what)
}

/// Spawns a session's tasks and keeps their abort handles; tasks spawned
/// later (streams that join a running session) go into the same list.
#[derive(Default, Clone)]
pub(crate) struct Tasks(Arc<Mutex<Vec<tokio::task::AbortHandle>>>);

impl Tasks {
    pub(crate) fn spawn<F>(&self, f: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = tokio::spawn(f);
        self.0.lock().expect("tasks").push(handle.abort_handle());
        handle
    }
}

/// Aborts a session's tasks when the session's future is dropped (a
/// daemon shutting down, a caller giving up), so none outlives it.
#[derive(Default)]
pub(crate) struct TaskGuard(pub(crate) Tasks);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        for h in self.0.0.lock().expect("tasks").iter() {
            h.abort();
        }
    }
}
