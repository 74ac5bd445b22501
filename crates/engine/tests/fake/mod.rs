//! Scripted peers for hostile-peer tests: a fake daemon that a real client
//! connects to (or that dials a client in reverse mode, as `tern serve
//! --once --connect` does), and a fake client that opens a session with a
//! real daemon.
//!
//! Both do everything the protocol asks before a transfer starts, as tern
//! itself does it (TLS, `Hello`, `TokenAuth`, `SessionOpen` with `Tuning`
//! and `TransferOptions`, `SessionAccept` with `TuningAccept`, data joins
//! with `JoinReply`, in `clear`, `safe` or `private` mode), and then hand
//! the test a [`Session`]: the sending end of the session, which sends
//! whatever the test scripts — any control message, any path in an
//! announcement, data blocks whose checks are computed so the receiver
//! accepts them, `FileSent` with the right digest and stream marks — and
//! reads what the real peer answers.
//!
//! A fake daemon is started with its script, an async closure that gets
//! the [`Session`] once the client has joined its streams:
//!
//! ```ignore
//! let d = FakeDaemon::start(|mut s: Session| async move {
//!     s.send_file(&FileSpec::new(".bashrc", "evil")).await?;
//!     s.close().await
//! })
//! .await;
//! let outcome = client::pull(&d.ep, &d.client_options(), …).await;
//! let fake_saw = d.finished().await; // what the script returned
//! ```
//!
//! [`Setup`] makes it a once server (a one-time token is required, as
//! `tern serve --once` requires it; [`FakeDaemon::once_line`] is the line to
//! hand the client) or a dialling one (reverse mode). [`FakeClient::open`]
//! does the client's half against a real daemon and returns the same
//! [`Session`] (for a push: the fake client sends).

#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use tern_engine::client::{ClientOptions, Endpoint};
use tern_engine::integrity::{BlockCheck, digest_of};
use tern_engine::tls::bind_token;
use tern_engine::tls::{BLOCK_MAC_LABEL, PinVerifier, ServerIdentity, server_name};
use tern_engine::transfer::{BoxStream, Control};
use tern_engine::{Error, Result};
use tern_proto::data::{JOIN_LEN, JOIN_REPLY_LEN};
use tern_proto::hello::{HELLO_LEN, HELLO_MAGIC};
use tern_proto::path::RelPath;
use tern_proto::{
    BlockFlags, BlockHeader, ChecksumAlg, Compression, ControlMsg, DataFrame, DataJoin, ErrorCode,
    Existing, Features, FileMeta, Hello, JoinReply, OnceLine, Protect, SessionAccept, SessionMode,
    SessionOpen, SkipExisting, Token, TransferOptions, TuningRequest, Window,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// How long a fake waits for its peer at any one step; a test that hangs
/// fails after this instead.
pub const WAIT: Duration = Duration::from_secs(30);

/// A path as announcements carry it.
pub fn wire_path(path: &[u8]) -> RelPath {
    RelPath::from(path.to_vec())
}

/// A file to announce and send.
#[derive(Debug, Clone)]
pub struct FileSpec {
    /// As announced: any bytes, `/`-separated (nothing checks it here).
    pub path: Vec<u8>,
    /// The contents.
    pub data: Vec<u8>,
    /// Announced mode bits (setuid and friends included, if asked).
    pub mode: u32,
    /// Announced modification time.
    pub mtime_s: i64,
    /// … nanoseconds.
    pub mtime_ns: u32,
}

impl FileSpec {
    /// A file of mode 0644, modified at 1 700 000 000 s.
    pub fn new(path: impl AsRef<[u8]>, data: impl Into<Vec<u8>>) -> FileSpec {
        FileSpec {
            path: path.as_ref().to_vec(),
            data: data.into(),
            mode: 0o644,
            mtime_s: 1_700_000_000,
            mtime_ns: 0,
        }
    }

    /// The same file, announced with `mode`.
    pub fn mode(self, mode: u32) -> FileSpec {
        FileSpec { mode, ..self }
    }

    /// The same file, announced as modified at `s`.`ns`.
    pub fn mtime(self, s: i64, ns: u32) -> FileSpec {
        FileSpec {
            mtime_s: s,
            mtime_ns: ns,
            ..self
        }
    }
}

/// How the receiver answered a file sent with [`Session::send_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `FileDone`: the file is in place.
    Done,
    /// `FileCheck{Same}`: the receiver kept the copy it had.
    Skipped,
    /// `EntryFailed`: the receiver could not take this one file and the
    /// session goes on without it.
    Failed {
        /// The receiver's code.
        code: ErrorCode,
        /// The receiver's words.
        message: String,
    },
}

/// The answer `msg` gives about file `id`, if it is an `EntryFailed` for
/// it.
fn failed(msg: &ControlMsg, id: u32) -> Option<Answer> {
    match msg {
        ControlMsg::EntryFailed {
            file_id: Some(f),
            code,
            message,
            ..
        } if *f == id => Some(Answer::Failed {
            code: *code,
            message: message.clone(),
        }),
        _ => None,
    }
}

/// The sending end of an open session, as a script drives it. Fields are
/// public so that a script may do anything the protocol (or a hostile
/// peer) could.
pub struct Session {
    /// The control connection, after the handshake.
    pub control: Control,
    /// Data connections by stream index (`None`: not joined).
    pub streams: Vec<Option<BoxStream>>,
    /// Frames written to each stream (its stream mark), `max_streams` long.
    pub frames: Vec<u64>,
    /// What the client asked for.
    pub open: SessionOpen,
    /// What the server answered.
    pub accept: SessionAccept,
    /// Stream indices the session may use (`TuningAccept`, else
    /// `SessionAccept.streams`).
    pub max_streams: u16,
    /// The client's options, when `OPTIONS` was negotiated.
    pub options: Option<TransferOptions>,
    /// Negotiated features.
    pub features: Features,
    /// The session's block check.
    pub check: BlockCheck,
    /// Messages read while waiting for something else.
    pub seen: Vec<ControlMsg>,
    next_id: u32,
    next_stream: usize,
}

impl Session {
    /// A session whose data streams (by index, as many as it may use) have
    /// joined; `material` is the control connection's exported keying
    /// material, which `safe` mode keys its block checks with.
    fn new(
        control: Control,
        streams: Vec<Option<BoxStream>>,
        open: SessionOpen,
        accept: SessionAccept,
        options: Option<TransferOptions>,
        features: Features,
        material: Option<[u8; 32]>,
    ) -> Result<Session> {
        let check = match (open.protect, material) {
            (Protect::Safe, Some(m)) => BlockCheck::KeyedBlake3(bind_token(&m, &accept.token)),
            (Protect::Safe, None) => return Err(Error::Tls("fake: no keying material".into())),
            (Protect::Private, _) if features.contains(Features::AEAD_CHECKS) => BlockCheck::Aead,
            (Protect::Clear | Protect::Private, _) => BlockCheck::Xxh3,
        };
        Ok(Session {
            control,
            frames: vec![0; streams.len()],
            max_streams: streams.len() as u16,
            streams,
            open,
            accept,
            options,
            features,
            check,
            seen: Vec::new(),
            next_id: 0,
            next_stream: 0,
        })
    }

    /// Sends one control message.
    pub async fn send(&mut self, msg: &ControlMsg) -> Result<()> {
        self.control.send(msg).await
    }

    /// Receives one control message (an `Error` too), waiting [`WAIT`] at
    /// most.
    pub async fn recv(&mut self) -> Result<ControlMsg> {
        match tokio::time::timeout(WAIT, self.control.recv()).await {
            Ok(got) => got,
            Err(_) => Err(Error::PeerGone(format!("fake: nothing came for {WAIT:?}"))),
        }
    }

    /// Reads until a message `want` picks; an `Error` from the peer is
    /// returned as [`Error::Peer`], other messages are kept in `seen`.
    pub async fn wait_for<T>(
        &mut self,
        mut want: impl FnMut(&ControlMsg) -> Option<T>,
    ) -> Result<T> {
        loop {
            let msg = self.recv().await?;
            if let ControlMsg::Error { code, message, .. } = msg {
                return Err(Error::Peer { code, message });
            }
            if let Some(t) = want(&msg) {
                return Ok(t);
            }
            self.seen.push(msg);
        }
    }

    /// Reads until the peer sends an `Error` (returned) or the connection
    /// ends (`None`).
    pub async fn refusal(&mut self) -> Option<(ErrorCode, String)> {
        loop {
            match self.recv().await {
                Ok(ControlMsg::Error { code, message, .. }) => return Some((code, message)),
                Ok(other) => self.seen.push(other),
                Err(_) => return None,
            }
        }
    }

    /// Announces a directory.
    pub async fn dir(&mut self, path: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        let path = wire_path(path.as_ref());
        self.send(&ControlMsg::DirAnnounce { path, mode }).await
    }

    /// Announces a file under the next file id, which it returns.
    pub async fn announce(&mut self, spec: &FileSpec) -> Result<u32> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&ControlMsg::FileAnnounce(FileMeta {
            file_id: id,
            path: wire_path(&spec.path),
            size: spec.data.len() as u64,
            mode: spec.mode,
            mtime_s: spec.mtime_s,
            mtime_ns: spec.mtime_ns,
        }))
        .await?;
        Ok(id)
    }

    /// Writes one block of `file_id` on stream `k`, with its check.
    pub async fn block(
        &mut self,
        k: usize,
        file_id: u32,
        offset: u64,
        payload: &[u8],
    ) -> Result<()> {
        let header = DataFrame::Block(BlockHeader {
            flags: BlockFlags(0),
            file_id,
            offset,
            length: payload.len() as u32,
            check: self.check.compute(file_id, offset, payload),
        });
        let s = self.streams[k]
            .as_mut()
            .ok_or_else(|| Error::Protocol(format!("fake: stream {k} has not joined")))?;
        let gone = |e: std::io::Error| Error::PeerGone(format!("fake: stream {k}: {e}"));
        s.write_all(&header.encode()).await.map_err(gone)?;
        s.write_all(payload).await.map_err(gone)?;
        s.flush().await.map_err(gone)?;
        self.frames[k] += 1;
        Ok(())
    }

    /// Writes every block of `data` as file `file_id`, taking the joined
    /// streams in turn.
    pub async fn blocks(&mut self, file_id: u32, data: &[u8]) -> Result<()> {
        let bs = self.accept.block_size as usize;
        for (i, chunk) in data.chunks(bs).enumerate() {
            let k = self.next_joined();
            self.block(k, file_id, (i * bs) as u64, chunk).await?;
        }
        Ok(())
    }

    fn next_joined(&mut self) -> usize {
        loop {
            let k = self.next_stream % self.streams.len();
            self.next_stream += 1;
            if self.streams[k].is_some() {
                return k;
            }
        }
    }

    /// Sends `FileSent` for `data` as file `file_id`: its size, its digest
    /// with the session's algorithm, the stream marks so far.
    pub async fn file_sent(&mut self, file_id: u32, data: &[u8]) -> Result<()> {
        let msg = ControlMsg::FileSent {
            file_id,
            size: data.len() as u64,
            digest: digest_of(self.open.checksum, data),
            stream_marks: self.frames.clone(),
        };
        self.send(&msg).await
    }

    /// Whether the receiver answers each announcement with `FileCheck`.
    pub fn checks_files(&self) -> bool {
        self.features.contains(Features::SKIP)
            && self
                .options
                .as_ref()
                .is_some_and(|o| o.skip_existing != SkipExisting::Never)
    }

    /// Sends a whole file as an honest sender does: announce it, wait for
    /// its `FileCheck` when one comes, send its blocks and `FileSent`, and
    /// wait for `FileDone` (or the receiver's `EntryFailed` for it).
    pub async fn send_file(&mut self, spec: &FileSpec) -> Result<Answer> {
        let id = self.announce(spec).await?;
        if self.checks_files() {
            let checked = self
                .wait_for(|m| match m {
                    ControlMsg::FileCheck { file_id, existing } if *file_id == id => {
                        Some(Ok(existing.clone()))
                    }
                    other => failed(other, id).map(Err),
                })
                .await?;
            match checked {
                Ok(Existing::Same) => return Ok(Answer::Skipped),
                Ok(_) => {}
                Err(answer) => return Ok(answer),
            }
        }
        self.blocks(id, &spec.data).await?;
        self.file_sent(id, &spec.data).await?;
        self.wait_for(|m| match m {
            ControlMsg::FileDone { file_id, .. } if *file_id == id => Some(Answer::Done),
            other => failed(other, id),
        })
        .await
    }

    /// Ends the session as a sender does: `Close`, `StreamEnd` on every
    /// stream, then the receiver's `Close`.
    pub async fn close(&mut self) -> Result<()> {
        self.send(&ControlMsg::Close {
            per_stream_bytes: Vec::new(),
        })
        .await?;
        for s in self.streams.iter_mut().flatten() {
            let _ = s.write_all(&DataFrame::StreamEnd.encode()).await;
            let _ = s.flush().await;
        }
        self.wait_for(|m| matches!(m, ControlMsg::Close { .. }).then_some(()))
            .await
    }
}

/// How a fake daemon runs.
pub struct Setup {
    /// Require `TokenAuth` with [`FakeDaemon::token`] first, as a once
    /// server does.
    pub once: bool,
    /// Features it offers.
    pub features: Features,
    /// Dial the client at the address this yields (reverse mode) instead
    /// of listening.
    pub dial: Option<Dial>,
}

/// Where a dialling fake daemon finds its client, once it is known.
pub type Dial = Pin<Box<dyn Future<Output = SocketAddr> + Send>>;

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            once: false,
            features: Hello::ours().features,
            dial: None,
        }
    }
}

/// A scripted daemon on loopback, serving one session.
pub struct FakeDaemon<T> {
    /// Where it listens (port 0 when it dials).
    pub ep: Endpoint,
    /// Its certificate's fingerprint.
    pub fingerprint: String,
    /// Its one-time token (required with [`Setup::once`]).
    pub token: Token,
    once: bool,
    task: JoinHandle<Result<T>>,
    _state: tempfile::TempDir,
}

/// A connection, told apart as the daemon tells them apart.
enum Conn {
    Control {
        stream: BoxStream,
        hello: Hello,
        material: Option<[u8; 32]>,
    },
    Join {
        stream: BoxStream,
        join: DataJoin,
        tls: bool,
    },
}

impl<T: Send + 'static> FakeDaemon<T> {
    /// A daemon that listens and runs `script` on the first session.
    pub async fn start<F, Fut>(script: F) -> FakeDaemon<T>
    where
        F: FnOnce(Session) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        FakeDaemon::start_with(Setup::default(), script).await
    }

    /// A daemon set up as `setup` says.
    pub async fn start_with<F, Fut>(setup: Setup, script: F) -> FakeDaemon<T>
    where
        F: FnOnce(Session) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let state = tempfile::tempdir().unwrap();
        let identity = ServerIdentity::load_or_create(state.path()).unwrap();
        let acceptor = TlsAcceptor::from(identity.server_config(None).unwrap());
        let token: Token = rand::random();
        let (tx, rx) = mpsc::channel(64);
        let (port, feeder) = match setup.dial {
            None => {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let port = listener.local_addr().unwrap().port();
                (port, tokio::spawn(listen(listener, acceptor, tx)))
            }
            Some(addr) => (0, tokio::spawn(dial(addr, acceptor, tx))),
        };
        let (once, features) = (setup.once.then_some(token), setup.features);
        let task = tokio::spawn(async move {
            let _feeder = AbortOnDrop(feeder);
            let session = serve_one(rx, once, features).await?;
            script(session).await
        });
        FakeDaemon {
            ep: Endpoint {
                host: "127.0.0.1".into(),
                port,
            },
            fingerprint: identity.fingerprint.clone(),
            token,
            once: once.is_some(),
            task,
            _state: state,
        }
    }

    /// The once line a `tern serve --once` in its place would print.
    pub fn once_line(&self) -> OnceLine {
        OnceLine {
            port: (self.ep.port != 0).then_some(self.ep.port),
            addr: None,
            token: self.token,
            fingerprint: self.fingerprint.clone(),
        }
    }

    /// Client options that trust this daemon (and present its token when
    /// it is a once server).
    pub fn client_options(&self) -> ClientOptions {
        let mut o = tern_testkit::client::pinned(client_options(), &self.fingerprint);
        o.once_token = self.once.then_some(self.token);
        o
    }

    /// What the script returned (a panic in it is passed on).
    pub async fn finished(self) -> Result<T> {
        match tokio::time::timeout(4 * WAIT, self.task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => std::panic::resume_unwind(e.into_panic()),
            Err(_) => panic!("the fake daemon's script did not end"),
        }
    }
}

/// Client options as the engine tests use them: 2 streams of 64 KiB
/// blocks, private mode, nothing pinned.
pub fn client_options() -> ClientOptions {
    tern_testkit::client::options(2, Protect::Private, 64 << 10)
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn listen(listener: TcpListener, acceptor: TlsAcceptor, tx: mpsc::Sender<Conn>) {
    let mut tasks = JoinSet::new();
    while let Ok((tcp, _)) = listener.accept().await {
        tasks.spawn(classify(tcp, acceptor.clone(), tx.clone()));
    }
}

/// Reverse mode: keeps a few connections to the client dialled; one the
/// client starts speaking on is handed on and replaced.
async fn dial(addr: Dial, acceptor: TlsAcceptor, tx: mpsc::Sender<Conn>) {
    const SPARES: usize = 4;
    let addr = addr.await;
    let mut budget = 64usize;
    let mut dialled = JoinSet::new();
    let mut tasks = JoinSet::new();
    let dial_one = |set: &mut JoinSet<std::io::Result<TcpStream>>| {
        set.spawn(async move {
            let tcp = TcpStream::connect(addr).await?;
            // Used once the client speaks first.
            tcp.peek(&mut [0u8; 1]).await?;
            Ok(tcp)
        });
    };
    for _ in 0..SPARES {
        dial_one(&mut dialled);
    }
    while let Some(done) = dialled.join_next().await {
        if budget == 0 {
            continue;
        }
        budget -= 1;
        if let Ok(Ok(tcp)) = done {
            tasks.spawn(classify(tcp, acceptor.clone(), tx.clone()));
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        dial_one(&mut dialled);
    }
}

/// Tells a new connection apart (PROTOCOL.md §2.1) and passes it on.
async fn classify(tcp: TcpStream, acceptor: TlsAcceptor, tx: mpsc::Sender<Conn>) {
    if let Some(conn) = tell_apart(tcp, acceptor).await {
        let _ = tx.send(conn).await;
    }
}

async fn tell_apart(tcp: TcpStream, acceptor: TlsAcceptor) -> Option<Conn> {
    let _ = tcp.set_nodelay(true);
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).await.ok()? != 1 {
        return None;
    }
    if first[0] != 0x16 {
        let mut tcp = tcp;
        let join = DataJoin::decode(&read_after::<JOIN_LEN>(&mut tcp, &[]).await?).ok()?;
        return Some(Conn::Join {
            stream: Box::new(tcp),
            join,
            tls: false,
        });
    }
    let mut tls = acceptor.accept(tcp).await.ok()?;
    let mut material = [0u8; 32];
    let exported = tls
        .get_ref()
        .1
        .export_keying_material(&mut material, BLOCK_MAC_LABEL, None)
        .is_ok();
    let mut magic = [0u8; 4];
    tls.read_exact(&mut magic).await.ok()?;
    if magic == HELLO_MAGIC {
        let hello = Hello::decode(&read_after::<HELLO_LEN>(&mut tls, &magic).await?).ok()?;
        return Some(Conn::Control {
            stream: Box::new(tls),
            hello,
            material: exported.then_some(material),
        });
    }
    let join = DataJoin::decode(&read_after::<JOIN_LEN>(&mut tls, &magic).await?).ok()?;
    Some(Conn::Join {
        stream: Box::new(tls),
        join,
        tls: true,
    })
}

/// `N` bytes that begin with `head` (read already) and go on with what `s`
/// gives next.
async fn read_after<const N: usize>(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
    head: &[u8],
) -> Option<[u8; N]> {
    let mut buf = [0u8; N];
    buf[..head.len()].copy_from_slice(head);
    s.read_exact(&mut buf[head.len()..]).await.ok()?;
    Some(buf)
}

async fn next_conn(rx: &mut mpsc::Receiver<Conn>) -> Result<Conn> {
    match tokio::time::timeout(WAIT, rx.recv()).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(Error::PeerGone("fake: no more connections".into())),
        Err(_) => Err(Error::PeerGone(format!("fake: no connection for {WAIT:?}"))),
    }
}

async fn recv(control: &mut Control) -> Result<ControlMsg> {
    match tokio::time::timeout(WAIT, control.recv()).await {
        Ok(m) => m,
        Err(_) => Err(Error::PeerGone("fake: the client went silent".into())),
    }
}

/// The next message, which must be the `what` that `pick` takes.
async fn next_is<T>(
    control: &mut Control,
    what: &str,
    pick: impl FnOnce(ControlMsg) -> std::result::Result<T, ControlMsg>,
) -> Result<T> {
    pick(recv(control).await?)
        .map_err(|other| Error::Protocol(format!("fake: expected {what}, got {other:?}")))
}

/// With `sent`, the next message, which must be the `what` that `pick`
/// takes; otherwise `None`.
async fn next_if<T>(
    control: &mut Control,
    sent: bool,
    what: &str,
    pick: impl FnOnce(ControlMsg) -> std::result::Result<T, ControlMsg>,
) -> Result<Option<T>> {
    match sent {
        true => next_is(control, what, pick).await.map(Some),
        false => Ok(None),
    }
}

/// The daemon's half of opening a session: handshake, options, accept,
/// joins.
async fn serve_one(
    mut rx: mpsc::Receiver<Conn>,
    once: Option<Token>,
    features: Features,
) -> Result<Session> {
    let (mut stream, hello, material) = loop {
        match next_conn(&mut rx).await? {
            Conn::Control {
                stream,
                hello,
                material,
            } => break (stream, hello, material),
            Conn::Join { mut stream, .. } => {
                let _ = stream.write_all(&JoinReply::Refused.encode()).await;
            }
        }
    };
    let ours = Hello {
        features,
        ..Hello::ours()
    };
    let gone = |e: std::io::Error| Error::PeerGone(e.to_string());
    stream.write_all(&ours.encode()).await.map_err(gone)?;
    stream.flush().await.map_err(gone)?;
    let negotiated = ours
        .negotiate(&hello)
        .map_err(|e| Error::Protocol(e.to_string()))?;
    let mut control = Control::new(stream);
    if let Some(token) = once {
        match recv(&mut control).await? {
            ControlMsg::TokenAuth { token: t } if t == token => {}
            other => {
                let _ = control
                    .send(&ControlMsg::Error {
                        code: ErrorCode::PermissionDenied,
                        message: "fake: one-time token first".into(),
                        file_id: None,
                    })
                    .await;
                return Err(Error::Unauthorized(format!("fake: got {other:?}")));
            }
        }
    }
    let open = next_is(&mut control, "SessionOpen", |m| match m {
        ControlMsg::SessionOpen(o) => Ok(o),
        m => Err(m),
    })
    .await?;
    let has = |f| negotiated.features.contains(f);
    let tuning = next_if(&mut control, has(Features::TUNING), "Tuning", |m| match m {
        ControlMsg::Tuning(t) => Ok(t),
        m => Err(m),
    });
    let tuning = tuning.await?;
    let options = next_if(
        &mut control,
        has(Features::OPTIONS),
        "TransferOptions",
        |m| match m {
            ControlMsg::TransferOptions(o) => Ok(o),
            m => Err(m),
        },
    );
    let options = options.await?;
    let token: Token = rand::random();
    let accept = SessionAccept {
        token,
        streams: open.streams,
        block_size: open.block_size,
    };
    control
        .send(&ControlMsg::SessionAccept(accept.clone()))
        .await?;
    let max_streams = match &tuning {
        Some(t) => {
            let max = t.max_streams.max(open.streams);
            control
                .send(&ControlMsg::TuningAccept {
                    max_streams: max,
                    congestion: String::new(),
                })
                .await?;
            max
        }
        None => open.streams,
    };
    if has(Features::PATHS) {
        control
            .send(&ControlMsg::Paths {
                addresses: Vec::new(),
            })
            .await?;
    }
    let private = open.protect == Protect::Private;
    let mut streams: Vec<Option<BoxStream>> = (0..max_streams).map(|_| None).collect();
    let mut joined = 0;
    while joined < open.streams {
        let Conn::Join {
            mut stream,
            join,
            tls,
        } = next_conn(&mut rx).await?
        else {
            continue;
        };
        let k = usize::from(join.stream);
        let fits = join.token == token
            && join.version == negotiated.version
            && tls == private
            && join.stream < open.streams
            && streams[k].is_none();
        let reply = if fits {
            JoinReply::Accepted
        } else {
            JoinReply::Refused
        };
        stream.write_all(&reply.encode()).await.map_err(gone)?;
        stream.flush().await.map_err(gone)?;
        if fits {
            streams[k] = Some(stream);
            joined += 1;
        }
    }
    Session::new(
        control,
        streams,
        open,
        accept,
        options,
        negotiated.features,
        material,
    )
}

/// What a fake client asks for.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Data streams.
    pub streams: u16,
    /// Block size.
    pub block_size: u32,
    /// Whole-file digest.
    pub checksum: ChecksumAlg,
    /// Data protection.
    pub protect: Protect,
    /// Sent as `TransferOptions` when `OPTIONS` is negotiated.
    pub options: TransferOptions,
}

impl Default for Ask {
    fn default() -> Ask {
        Ask {
            streams: 2,
            block_size: 64 << 10,
            checksum: ChecksumAlg::Xxh3,
            protect: Protect::Private,
            options: TransferOptions {
                compression: Compression::None,
                skip_existing: SkipExisting::Never,
                stall_timeout_ms: 0,
                spare_streams: 0,
            },
        }
    }
}

/// A scripted client, for a real daemon.
pub struct FakeClient;

impl FakeClient {
    /// Pushes into `dest` on the daemon at `ep` (whose certificate has
    /// `fingerprint`): the returned session sends.
    pub async fn push(
        ep: &Endpoint,
        fingerprint: &str,
        dest: &str,
        top_level: u32,
        ask: &Ask,
    ) -> Result<Session> {
        let mode = SessionMode::Push {
            dest: dest.into(),
            top_level,
        };
        FakeClient::open(ep, fingerprint, mode, ask).await
    }

    /// Opens a session of any `mode` with the daemon at `ep`: TLS pinned
    /// to `fingerprint`, `Hello`, `SessionOpen`, `Tuning` and
    /// `TransferOptions` as negotiated, and every data stream joined. A
    /// refusal is the daemon's [`Error::Peer`].
    pub async fn open(
        ep: &Endpoint,
        fingerprint: &str,
        mode: SessionMode,
        ask: &Ask,
    ) -> Result<Session> {
        let connector =
            TlsConnector::from(PinVerifier::new(Some(fingerprint.into())).client_config(None)?);
        let addr = ep.host_port();
        let connect = async || {
            TcpStream::connect(&addr).await.map_err(|e| Error::Connect {
                addr: addr.clone(),
                source: e,
            })
        };
        let gone = |e: std::io::Error| Error::PeerGone(e.to_string());
        let tls = connector
            .connect(server_name(&ep.host), connect().await?)
            .await
            .map_err(|e| Error::Tls(e.to_string()))?;
        let mut material = [0u8; 32];
        let exported = tls
            .get_ref()
            .1
            .export_keying_material(&mut material, BLOCK_MAC_LABEL, None)
            .is_ok();
        let mut stream: BoxStream = Box::new(tls);
        let ours = Hello::ours();
        stream.write_all(&ours.encode()).await.map_err(gone)?;
        let mut theirs = [0u8; HELLO_LEN];
        stream.read_exact(&mut theirs).await.map_err(gone)?;
        let negotiated = ours
            .negotiate(&Hello::decode(&theirs)?)
            .map_err(|e| Error::Protocol(e.to_string()))?;
        let mut control = Control::new(stream);
        let open = SessionOpen {
            mode,
            streams: ask.streams,
            block_size: ask.block_size,
            checksum: ask.checksum,
            protect: ask.protect,
        };
        control.send(&ControlMsg::SessionOpen(open.clone())).await?;
        let tuned = negotiated.features.contains(Features::TUNING);
        if tuned {
            control
                .send(&ControlMsg::Tuning(TuningRequest {
                    max_streams: ask.streams + ask.options.spare_streams,
                    window: Window::Auto,
                    congestion: String::new(),
                }))
                .await?;
        }
        let options = negotiated
            .features
            .contains(Features::OPTIONS)
            .then(|| ask.options.clone());
        if let Some(o) = &options {
            control
                .send(&ControlMsg::TransferOptions(o.clone()))
                .await?;
        }
        let refused = |m: ControlMsg| match m {
            ControlMsg::Error { code, message, .. } => Error::Peer { code, message },
            other => Error::Protocol(format!("fake: unexpected {other:?}")),
        };
        let accept = match control.recv().await? {
            ControlMsg::SessionAccept(a) => a,
            other => return Err(refused(other)),
        };
        let max_streams = if tuned {
            match control.recv().await? {
                ControlMsg::TuningAccept { max_streams, .. } => max_streams.max(accept.streams),
                other => return Err(refused(other)),
            }
        } else {
            accept.streams
        };
        if negotiated.features.contains(Features::PATHS) {
            match control.recv().await? {
                ControlMsg::Paths { .. } => {}
                other => return Err(refused(other)),
            }
        }
        let mut streams: Vec<Option<BoxStream>> = (0..max_streams).map(|_| None).collect();
        for k in 0..accept.streams {
            let tcp = connect().await?;
            let mut s: BoxStream = if ask.protect == Protect::Private {
                let v = PinVerifier::new(Some(fingerprint.into()));
                let tls = TlsConnector::from(v.client_config(None)?)
                    .connect(server_name(&ep.host), tcp)
                    .await
                    .map_err(|e| Error::Tls(e.to_string()))?;
                Box::new(tls)
            } else {
                Box::new(tcp)
            };
            let join = DataJoin {
                version: negotiated.version,
                stream: k,
                token: accept.token,
            };
            s.write_all(&join.encode()).await.map_err(gone)?;
            s.flush().await.map_err(gone)?;
            let mut reply = [0u8; JOIN_REPLY_LEN];
            s.read_exact(&mut reply).await.map_err(gone)?;
            if JoinReply::decode(&reply)? != JoinReply::Accepted {
                return Err(Error::Protocol(format!("fake: stream {k} refused")));
            }
            streams[usize::from(k)] = Some(s);
        }
        let material = exported.then_some(material);
        Session::new(
            control,
            streams,
            open,
            accept,
            options,
            negotiated.features,
            material,
        )
    }
}

/// Every entry beneath `dir` (hidden and partial files too), as paths
/// relative to it, sorted; directories end in `/`.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if e.file_type().unwrap().is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &e.path(), out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Writes an executable that stands in for ssh (`tern cp --ssh PATH`): it
/// starts nothing remote, prints some login noise and `line` (a once
/// line, PROTOCOL.md §2.2), records in `dir/port` the port a reverse-mode
/// client asked to be dialled on (`--connect :PORT`), and then waits for
/// its standard input to close, as ssh would.
pub fn fake_ssh(dir: &Path, line: &OnceLine) -> PathBuf {
    let script = dir.join("fake-ssh");
    let port = dir.join("port");
    let text = format!(
        "#!/bin/sh\n\
         # Stands in for: ssh HOST 'tern serve --once [--connect :PORT]'\n\
         for arg in \"$@\"; do last=$arg; done\n\
         case \"$last\" in\n\
         *--connect*) printf '%s\\n' \"$last\" | sed -n 's/.*--connect :\\([0-9][0-9]*\\).*/\\1/p' > '{port}.tmp' && mv '{port}.tmp' '{port}' ;;\n\
         esac\n\
         echo 'Welcome to a host that is not there'\n\
         echo '{line}'\n\
         exec cat > /dev/null\n",
        port = port.display(),
        line = line.encode(),
    );
    std::fs::write(&script, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// The port a reverse-mode `tern` asked [`fake_ssh`] to have it dialled
/// on, once it did.
pub async fn asked_port(dir: &Path) -> u16 {
    let file = dir.join("port");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if let Ok(port) = text.trim().parse() {
                return port;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tern never ran the fake ssh with --connect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
