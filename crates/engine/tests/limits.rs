//! The daemon under the load a hostile peer can put on it: floods of
//! connections that never authenticate, and sessions that authenticate and
//! never join their streams, must not keep a legitimate client out; each
//! limit is counted when it bites; a control frame that is too long or
//! does not decode is answered with `Error{Protocol}`.
//!
//! Flooders connect from 127.0.0.2 (loopback on Linux), the legitimate
//! client from 127.0.0.1. Every load loop is bounded in count and time.
//! The daemons run with a long handshake (and join) timeout, so that a slot
//! a flooder held would be held far longer than the 2 s a copy is allowed:
//! without the limits the copy waits a minute, and the test fails at its
//! bound instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tern_engine::client::{self, ClientOptions, Endpoint};
use tern_engine::server::{Daemon, Refusals, ServerOptions};
use tern_engine::tls::{PinVerifier, ServerIdentity};
use tern_engine::transfer::{BoxStream, Control, Progress};
use tern_proto::hello::HELLO_LEN;
use tern_proto::{
    ChecksumAlg, ControlMsg, DataJoin, ErrorCode, Features, Hello, JoinReply, MAX_CONTROL_FRAME,
    Protect, SessionMode, SessionOpen, decode_control, encode_control,
};
use tern_testkit::client as kit;
use tern_testkit::files::content_difference;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

/// How long a slot a flooder holds would be held without the limits.
const LONG: Duration = Duration::from_secs(60);
/// The bound: a legitimate copy starts (and, being small,
/// finishes) within this.
const MUST_START: Duration = Duration::from_secs(2);
/// How long the test waits for a copy before calling it locked out.
const LOCKED_OUT: Duration = Duration::from_secs(15);

struct Running {
    daemon: Daemon,
    target: Target,
    root: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
    _state: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a daemon listens, and its certificate.
#[derive(Debug, Clone)]
struct Target {
    addr: SocketAddr,
    fingerprint: String,
}

impl Target {
    /// A TLS connection from `from`, the daemon's certificate pinned.
    async fn tls_from(&self, from: [u8; 4]) -> std::io::Result<BoxStream> {
        let tcp = connect_from(from, self.addr).await?;
        let name = tern_engine::tls::server_name("127.0.0.1");
        let tls = tokio::time::timeout(
            Duration::from_secs(5),
            connector(&self.fingerprint).connect(name, tcp),
        )
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
        Ok(Box::new(tls))
    }

    /// A control connection from `from`, through TLS and the hellos,
    /// having offered only `PERF` (so that no `Tuning` or options follow a
    /// session request).
    async fn control_from(&self, from: [u8; 4]) -> std::io::Result<BoxStream> {
        let mut s = self.tls_from(from).await?;
        let hello = Hello {
            features: Features::PERF,
            ..Hello::ours()
        };
        s.write_all(&hello.encode()).await?;
        let mut theirs = [0u8; HELLO_LEN];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut theirs))
            .await
            .map_err(|_| std::io::ErrorKind::TimedOut)??;
        Ok(s)
    }
}

async fn start(configure: impl FnOnce(&mut ServerOptions)) -> Running {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let mut opts = ServerOptions::new(root.path().to_path_buf());
    configure(&mut opts);
    let daemon = Daemon::new(&identity, opts).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = daemon.clone();
    let task = tokio::spawn(async move {
        serving.run(listener, std::future::pending()).await.unwrap();
    });
    Running {
        daemon,
        target: Target {
            addr,
            fingerprint: identity.fingerprint.clone(),
        },
        root,
        task,
        _state: state,
    }
}

/// Client options of these tests: safe, blocks of 64 KiB.
fn client_opts(streams: u16) -> ClientOptions {
    kit::options(streams, Protect::Safe, 64 << 10)
}

/// Copies a small file to the daemon from 127.0.0.1 and checks it arrived;
/// returns how long it took, or fails after [`LOCKED_OUT`].
async fn legit_copy(d: &Running, streams: u16, name: &str) -> Duration {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("small.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let o = kit::pinned(client_opts(streams), &d.target.fingerprint);
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port: d.target.addr.port(),
    };
    let started = Instant::now();
    let copy = client::push(
        &ep,
        &o,
        vec![src],
        false,
        name.into(),
        Arc::new(Progress::default()),
    );
    let outcome = tokio::time::timeout(LOCKED_OUT, copy).await;
    let took = started.elapsed();
    let outcome = outcome
        .unwrap_or_else(|_| panic!("locked out: the copy did not even finish in {LOCKED_OUT:?}"));
    outcome.unwrap();
    assert_eq!(content_difference(d.root.path().join(name), &data), None);
    took
}

/// Makes room for `n` open files in this process.
fn fd_room(n: u64) {
    let (_, soft) = tern_engine::server::raise_open_file_limit().unwrap();
    assert!(
        soft >= n,
        "this test needs {n} open files; RLIMIT_NOFILE allows {soft}"
    );
}

/// A TCP connection from `from` (a loopback address) to `to`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::from((from, 0)))?;
    tokio::time::timeout(Duration::from_secs(5), sock.connect(to))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)?
}

fn connector(fingerprint: &str) -> TlsConnector {
    let verifier = PinVerifier::new(Some(fingerprint.to_string()));
    TlsConnector::from(verifier.client_config(None).unwrap())
}

/// Reads one control frame, within 5 s.
async fn read_frame(s: &mut BoxStream) -> Option<ControlMsg> {
    let read = async {
        let mut prefix = [0u8; 4];
        s.read_exact(&mut prefix).await.ok()?;
        let len = tern_proto::control::control_body_len(prefix).ok()?;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.ok()?;
        decode_control(&body).ok()
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten()
}

/// Asks for a perf session the daemon receives, on one clear stream.
async fn request_session(s: &mut BoxStream) -> std::io::Result<()> {
    let open = ControlMsg::SessionOpen(SessionOpen {
        mode: SessionMode::Perf {
            server_sends: false,
            bytes: 1 << 20,
            millis: 0,
        },
        streams: 1,
        block_size: 64 << 10,
        checksum: ChecksumAlg::Xxh3,
        protect: Protect::Clear,
    });
    s.write_all(&encode_control(&open)).await?;
    s.flush().await
}

/// What the daemon answered a session request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Accepted(tern_proto::Token),
    Refused(ErrorCode),
    Nothing,
}

async fn answer(s: &mut BoxStream) -> Answer {
    match read_frame(s).await {
        Some(ControlMsg::SessionAccept(a)) => Answer::Accepted(a.token),
        Some(ControlMsg::Error { code, .. }) => Answer::Refused(code),
        _ => Answer::Nothing,
    }
}

/// True when the daemon closes `s` (reading gives end of file or an
/// error) within 5 s; false when it keeps it open.
async fn closed_by_daemon(s: &mut (impl AsyncRead + Unpin)) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Waits (at most 5 s) until the daemon's refusals satisfy `done`.
async fn refusals_until(d: &Running, done: impl Fn(&Refusals) -> bool) -> Refusals {
    refusals_within(d, Duration::from_secs(5), done).await
}

/// Waits (at most `within`) until the daemon's refusals satisfy `done`.
async fn refusals_within(
    d: &Running,
    within: Duration,
    done: impl Fn(&Refusals) -> bool,
) -> Refusals {
    let deadline = Instant::now() + within;
    loop {
        let r = d.daemon.refusals();
        if done(&r) || Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Connections a flood holds at once.
const FLOOD: usize = 1000;
/// Of those, how many get through TLS and start a control connection
/// (then say nothing more); the rest say nothing at all.
const FLOOD_TLS: usize = 100;
/// Connections each flood slot opens, at most (one is reopened when the
/// daemon closes it, after [`FLOOD_PAUSE`]).
const FLOOD_ROUNDS: usize = 20;
const FLOOD_PAUSE: Duration = Duration::from_millis(250);

/// A continuous flood of unauthenticated connections from 127.0.0.2.
struct Flood {
    stop: tokio::sync::watch::Sender<bool>,
    /// Slots that have made their first connection attempt.
    started: Arc<AtomicUsize>,
    /// TCP connections opened, all slots together.
    opened: Arc<AtomicUsize>,
    tasks: tokio::task::JoinSet<()>,
}

impl Flood {
    fn start(d: &Target) -> Flood {
        let (stop, _) = tokio::sync::watch::channel(false);
        let started = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for k in 0..FLOOD {
            let tls = (k < FLOOD_TLS).then(|| connector(&d.fingerprint));
            let (addr, mut stop) = (d.addr, stop.subscribe());
            let (started, opened) = (started.clone(), opened.clone());
            tasks.spawn(async move {
                for round in 0..FLOOD_ROUNDS {
                    let held = flood_one(addr, tls.as_ref(), &opened).await;
                    if round == 0 {
                        started.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(mut s) = held {
                        let mut buf = [0u8; 64];
                        tokio::select! {
                            _ = s.read(&mut buf) => {}
                            _ = stop.changed() => return,
                        }
                    }
                    tokio::select! {
                        () = tokio::time::sleep(FLOOD_PAUSE) => {}
                        _ = stop.changed() => return,
                    }
                }
            });
        }
        Flood {
            stop,
            started,
            opened,
            tasks,
        }
    }

    /// Waits (at most 20 s) until every slot has tried once.
    async fn wait_started(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.started.load(Ordering::SeqCst) < FLOOD && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(self.started.load(Ordering::SeqCst), FLOOD, "flood started");
    }

    /// Stops the flood; how many TCP connections it opened.
    async fn stop(mut self) -> usize {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        self.opened.load(Ordering::Relaxed)
    }
}

/// One flood connection: idle, or through TLS with the control magic sent
/// and nothing after it (counted in `opened` once TCP is up). `None` when
/// it could not be opened, or the daemon closed it during TLS.
async fn flood_one(
    addr: SocketAddr,
    tls: Option<&TlsConnector>,
    opened: &AtomicUsize,
) -> Option<BoxStream> {
    let tcp = connect_from([127, 0, 0, 2], addr).await.ok()?;
    opened.fetch_add(1, Ordering::Relaxed);
    let Some(tls) = tls else {
        return Some(Box::new(tcp));
    };
    let name = tern_engine::tls::server_name("127.0.0.1");
    let mut s = tokio::time::timeout(Duration::from_secs(5), tls.connect(name, tcp))
        .await
        .ok()?
        .ok()?;
    s.write_all(b"TERN").await.ok()?;
    s.flush().await.ok()?;
    Some(Box::new(s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_starts_within_2s_under_a_flood_of_1000_unauthenticated_connections() {
    // The flood's ends and, without the limits, the daemon's (two each).
    fd_room(4 * FLOOD as u64 + 512);
    let d = start(|o| o.handshake_timeout = LONG).await;
    let flood = Flood::start(&d.target);
    flood.wait_started().await;
    let took = legit_copy(&d, 2, "under-flood.bin").await;
    let refusals = d.daemon.refusals();
    let opened = flood.stop().await;
    assert!(
        took < MUST_START,
        "the copy took {took:?} under the flood (bound {MUST_START:?})"
    );
    assert!(opened >= FLOOD, "the flood opened {opened} connections");
    assert!(
        refusals.handshakes_per_address > 0,
        "the flood was refused by its address's limit: {refusals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_never_join_from_one_address_do_not_block_a_client_from_another() {
    const SESSIONS: usize = 70;
    let d = start(|o| {
        o.handshake_timeout = LONG;
        o.join_timeout = LONG;
    })
    .await;
    // Authenticated sessions from 127.0.0.2 whose streams never join; more
    // than the daemon has session slots. One after the other (at once, the
    // address's handshake limit would refuse most before they got that
    // far). Held open until the end.
    let mut held = Vec::new();
    for _ in 0..SESSIONS {
        // Without a per-address limit the daemon is soon full, and does
        // not answer (not even its hello): the rest would wait too.
        let Ok(mut s) = d.target.control_from([127, 0, 0, 2]).await else {
            break;
        };
        request_session(&mut s).await.unwrap();
        let answer = answer(&mut s).await;
        let waiting = answer == Answer::Nothing;
        held.push((s, answer));
        if waiting {
            break;
        }
    }
    let took = legit_copy(&d, 2, "beside-idle-sessions.bin").await;
    assert!(
        took < MUST_START,
        "the copy took {took:?} beside {SESSIONS} idle sessions (bound {MUST_START:?})"
    );
    let accepted = held
        .iter()
        .filter(|(_, a)| matches!(a, Answer::Accepted(_)))
        .count();
    let refused = held
        .iter()
        .filter(|(_, a)| *a == Answer::Refused(ErrorCode::Aborted))
        .count();
    let per_address = tern_engine::server::DEFAULT_MAX_SESSIONS_PER_ADDRESS;
    assert_eq!(
        (accepted, refused, held.len()),
        (per_address, SESSIONS - per_address, SESSIONS),
        "answers: {:?}",
        held.iter().map(|(_, a)| a).collect::<Vec<_>>()
    );
    assert_eq!(
        d.daemon.refusals().sessions_per_address,
        (SESSIONS - per_address) as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_handshake_limits_are_closed_at_once_and_counted() {
    let d = start(|o| {
        o.handshake_timeout = LONG;
        o.max_handshakes = 3;
        o.max_handshakes_per_address = 2;
    })
    .await;
    // Three idle connections from one address: two are let in, one is
    // closed at once.
    let mut from_2 = Vec::new();
    for _ in 0..3 {
        from_2.push(connect_from([127, 0, 0, 2], d.target.addr).await.unwrap());
    }
    let r = refusals_until(&d, |r| r.handshakes_per_address == 1).await;
    assert_eq!(
        r,
        Refusals {
            handshakes_per_address: 1,
            ..Refusals::default()
        }
    );
    assert!(
        closed_by_daemon(&mut from_2[2]).await,
        "the third is closed"
    );
    // The pool holds three: one more from another address, then the pool
    // is full for a third address too.
    let mut from_3 = connect_from([127, 0, 0, 3], d.target.addr).await.unwrap();
    let mut from_4 = connect_from([127, 0, 0, 4], d.target.addr).await.unwrap();
    let r = refusals_until(&d, |r| r.handshakes == 1).await;
    assert_eq!((r.handshakes, r.handshakes_per_address), (1, 1));
    assert!(closed_by_daemon(&mut from_4).await, "the pool was full");
    // Those let in are still open, waiting for their handshake.
    let mut buf = [0u8; 1];
    for s in from_2.iter_mut().take(2).chain([&mut from_3]) {
        assert!(
            matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        );
    }
    // Slots given back are free again (once the daemon has seen these
    // close): two from the same address are let in.
    drop(from_2);
    let deadline = Instant::now() + Duration::from_secs(5);
    let let_in = loop {
        let before = d.daemon.refusals().handshakes_per_address;
        let mut again = Vec::new();
        for _ in 0..2 {
            again.push(connect_from([127, 0, 0, 2], d.target.addr).await.unwrap());
        }
        // A refusal comes at accept, at once.
        let within = Duration::from_millis(500);
        let r = refusals_within(&d, within, |r| r.handshakes_per_address > before).await;
        if r.handshakes_per_address == before {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    assert!(let_in, "slots given back were not free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_authenticate_in_time_is_closed_and_counted() {
    let d = start(|o| o.handshake_timeout = Duration::from_millis(300)).await;
    let mut idle = connect_from([127, 0, 0, 2], d.target.addr).await.unwrap();
    assert!(closed_by_daemon(&mut idle).await);
    // Half a handshake does not stretch it either.
    let mut half = d.target.control_from([127, 0, 0, 2]).await.unwrap();
    assert!(closed_by_daemon(&mut half).await);
    let r = refusals_until(&d, |r| r.handshake_timeouts == 2).await;
    assert_eq!(r.handshake_timeouts, 2, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_holds_at_most_its_share_of_sessions() {
    // The first session never joins its stream; it ends at the join
    // timeout, and its slot with it.
    let d = start(|o| {
        o.max_sessions_per_address = 1;
        o.join_timeout = Duration::from_secs(2);
    })
    .await;
    let mut first = d.target.control_from([127, 0, 0, 2]).await.unwrap();
    request_session(&mut first).await.unwrap();
    assert!(matches!(answer(&mut first).await, Answer::Accepted(_)));
    let mut second = d.target.control_from([127, 0, 0, 2]).await.unwrap();
    request_session(&mut second).await.unwrap();
    match read_frame(&mut second).await {
        Some(ControlMsg::Error { code, message, .. }) => {
            assert_eq!(code, ErrorCode::Aborted);
            assert!(message.contains("127.0.0.2"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Another address is not affected.
    let mut other = d.target.control_from([127, 0, 0, 3]).await.unwrap();
    request_session(&mut other).await.unwrap();
    assert!(matches!(answer(&mut other).await, Answer::Accepted(_)));
    assert_eq!(d.daemon.refusals().sessions_per_address, 1);
    // The slot comes back when the session ends.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let accepted = loop {
        let mut third = d.target.control_from([127, 0, 0, 2]).await.unwrap();
        request_session(&mut third).await.unwrap();
        match answer(&mut third).await {
            Answer::Accepted(_) => break true,
            _ if Instant::now() > deadline => break false,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(accepted, "the address's session slot came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_streams_may_join_beyond_the_per_address_handshake_limit() {
    // One handshake at a time per address, and 16 streams joining at once.
    let d = start(|o| o.max_handshakes_per_address = 1).await;
    legit_copy(&d, 16, "many-streams.bin").await;
    assert_eq!(d.daemon.refusals(), Refusals::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_control_length_is_answered_with_a_protocol_error() {
    let d = start(|_| {}).await;
    let mut s = d.target.control_from([127, 0, 0, 1]).await.unwrap();
    s.write_all(&(MAX_CONTROL_FRAME + 1).to_be_bytes())
        .await
        .unwrap();
    match read_frame(&mut s).await {
        Some(ControlMsg::Error { code, .. }) => assert_eq!(code, ErrorCode::Protocol),
        other => panic!("expected Error{{Protocol}}, got {other:?}"),
    }
    // A frame that does not decode, likewise.
    let mut s = d.target.control_from([127, 0, 0, 1]).await.unwrap();
    s.write_all(&[0, 0, 0, 2, 0xff, 0xff]).await.unwrap();
    match read_frame(&mut s).await {
        Some(ControlMsg::Error { code, .. }) => assert_eq!(code, ErrorCode::Protocol),
        other => panic!("expected Error{{Protocol}}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_control_length_during_a_session_is_answered_with_a_protocol_error() {
    let d = start(|_| {}).await;
    let mut s = d.target.control_from([127, 0, 0, 1]).await.unwrap();
    request_session(&mut s).await.unwrap();
    let Answer::Accepted(token) = answer(&mut s).await else {
        panic!("no session");
    };
    let mut data = connect_from([127, 0, 0, 1], d.target.addr).await.unwrap();
    let join = DataJoin {
        version: 1,
        stream: 0,
        token,
    };
    data.write_all(&join.encode()).await.unwrap();
    let mut reply = [0u8; tern_proto::data::JOIN_REPLY_LEN];
    data.read_exact(&mut reply).await.unwrap();
    assert_eq!(JoinReply::decode(&reply).unwrap(), JoinReply::Accepted);
    s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    // Whatever the session sent before, its last word is Error{Protocol}.
    let mut last = None;
    for _ in 0..100 {
        match read_frame(&mut s).await {
            Some(msg) => last = Some(msg),
            None => break,
        }
    }
    match last {
        Some(ControlMsg::Error { code, .. }) => assert_eq!(code, ErrorCode::Protocol),
        other => panic!("expected Error{{Protocol}}, got {other:?}"),
    }
}

#[tokio::test]
async fn either_end_answers_an_undecodable_control_frame_before_closing() {
    // Control is what both the client and the daemon open sessions with.
    for bad in [
        (MAX_CONTROL_FRAME + 1).to_be_bytes().to_vec(),
        vec![0, 0, 0, 3, 0xff, 0xff, 0xff],
    ] {
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let mut control = Control::new(Box::new(ours));
        theirs.write_all(&bad).await.unwrap();
        let got = control.recv().await;
        assert!(matches!(got, Err(tern_engine::Error::Decode(_))), "{got:?}");
        let mut theirs: BoxStream = Box::new(theirs);
        match read_frame(&mut theirs).await {
            Some(ControlMsg::Error { code, .. }) => assert_eq!(code, ErrorCode::Protocol),
            other => panic!("expected Error{{Protocol}}, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_join_s_answer_survives_the_data_sent_after_it() {
    // A client need not wait for the answer to its join before sending
    // data (PROTOCOL.md §8.2): the refusal must still reach it, and the
    // connection end cleanly rather than be reset with the answer lost.
    let d = start(|_| {}).await;
    let mut data = connect_from([127, 0, 0, 1], d.target.addr).await.unwrap();
    let join = DataJoin {
        version: 1,
        stream: 0,
        token: [7u8; tern_proto::TOKEN_LEN],
    };
    // Data right behind the join, in the same segments, as a sending
    // client writes it: unread when the daemon answers.
    let mut early = join.encode().to_vec();
    early.extend_from_slice(&[0x5a; 32 << 10]);
    data.write_all(&early).await.unwrap();
    let mut reply = [0u8; tern_proto::data::JOIN_REPLY_LEN];
    data.read_exact(&mut reply).await.unwrap();
    assert_eq!(JoinReply::decode(&reply).unwrap(), JoinReply::Refused);
    let mut rest = [0u8; 16];
    let end = tokio::time::timeout(Duration::from_secs(10), data.read(&mut rest))
        .await
        .expect("the daemon closes a refused connection");
    assert!(
        matches!(end, Ok(0)),
        "a clean end after the refusal, not a reset: {end:?}"
    );
    drop(data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_streams_never_join_is_told_why() {
    // The session starts while its streams join (PROTOCOL.md §8.2); when
    // they do not come within the join time, the client still hears why.
    let d = start(|o| o.join_timeout = Duration::from_secs(1)).await;
    let mut s = d.target.control_from([127, 0, 0, 2]).await.unwrap();
    request_session(&mut s).await.unwrap();
    assert!(matches!(answer(&mut s).await, Answer::Accepted(_)));
    let mut told = None;
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_secs(10), read_frame(&mut s)).await {
            Ok(Some(ControlMsg::Error { message, .. })) => {
                told = Some(message);
                break;
            }
            Ok(Some(_)) => continue,
            _ => break,
        }
    }
    let told = told.expect("an error on the control connection");
    assert!(told.contains("0 of 1 data connections joined"), "{told}");
}
