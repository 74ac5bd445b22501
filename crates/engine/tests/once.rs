//! `tern serve --once` in process, without ssh: the one-time token is
//! required before anything is touched, paths are scp's, the server ends
//! with its one session, and reverse mode (the server dials) carries whole
//! sessions, streams added on the way included.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_drs::StreamChange;
use tern_engine::client::{self, ClientOptions, Endpoint};
use tern_engine::client::{Callback, Reach};
use tern_engine::once::{OnceOptions, OnceServer};
use tern_engine::tls::ServerIdentity;
use tern_engine::transfer::Progress;
use tern_engine::{Error, ErrorKind};
use tern_proto::{OnceLine, Protect};
use tern_testkit::client as kit;
use tern_testkit::files::content_difference;
use tokio::task::JoinHandle;

struct Once {
    line: OnceLine,
    run: JoinHandle<tern_engine::Result<()>>,
    /// Completing it tells the server its client went away.
    gone: Option<tokio::sync::oneshot::Sender<()>>,
    _state: tempfile::TempDir,
}

fn options(home: &Path) -> OnceOptions {
    let mut o = OnceOptions::new(home.to_path_buf());
    o.server.handshake_timeout = Duration::from_secs(5);
    o
}

fn start(server: OnceServer, state: tempfile::TempDir) -> Once {
    let line = server.line().clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    Once {
        line,
        run,
        gone: Some(tx),
        _state: state,
    }
}

async fn listening(opts: OnceOptions) -> Once {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let server = OnceServer::listen("127.0.0.1:0".parse().unwrap(), &identity, opts)
        .await
        .unwrap();
    start(server, state)
}

impl Once {
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            host: "127.0.0.1".into(),
            port: self.line.port.expect("a listening server prints its port"),
        }
    }

    fn client(&self, streams: u16) -> ClientOptions {
        let mut o = kit::pinned(client_options(streams), &self.line.fingerprint);
        o.once_token = Some(self.line.token);
        o
    }

    async fn ended(mut self) -> tern_engine::Result<()> {
        let result = tokio::time::timeout(Duration::from_secs(10), &mut self.run)
            .await
            .expect("the once server ends with its session")
            .unwrap();
        drop(self.gone.take());
        result
    }
}

/// Client options of these tests: private, blocks of 64 KiB.
fn client_options(streams: u16) -> ClientOptions {
    kit::options(streams, Protect::Private, 64 << 10)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn progress() -> Arc<Progress> {
    Arc::new(Progress::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_lands_beneath_home_and_the_server_ends_with_it() {
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    std::fs::create_dir_all(home.join("in")).unwrap();
    let src = work.path().join("a.bin");
    std::fs::write(&src, data(700_000, 1)).unwrap();
    let once = listening(options(&home)).await;
    let out = client::push(
        &once.endpoint(),
        &once.client(3),
        vec![src.clone()],
        false,
        "in/b.bin".into(),
        progress(),
    )
    .await
    .unwrap();
    assert_eq!(out.fingerprint, once.line.fingerprint);
    assert_eq!(
        content_difference(home.join("in/b.bin"), data(700_000, 1)),
        None
    );
    once.ended().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_takes_absolute_and_home_relative_paths() {
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("rel.bin"), data(5000, 2)).unwrap();
    let elsewhere = work.path().join("abs.bin");
    std::fs::write(&elsewhere, data(9000, 3)).unwrap();
    let dest = work.path().join("got");
    std::fs::create_dir(&dest).unwrap();
    let once = listening(options(&home)).await;
    client::pull(
        &once.endpoint(),
        &once.client(2),
        vec!["~/rel.bin".into(), elsewhere.display().to_string()],
        false,
        dest.clone(),
        progress(),
    )
    .await
    .unwrap();
    assert_eq!(
        content_difference(dest.join("rel.bin"), data(5000, 2)),
        None
    );
    assert_eq!(
        content_difference(dest.join("abs.bin"), data(9000, 3)),
        None
    );
    once.ended().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_refused_before_anything_is_touched() {
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let src = work.path().join("a.bin");
    std::fs::write(&src, data(1000, 4)).unwrap();
    let once = listening(options(&home)).await;

    let mut wrong = once.client(1);
    wrong.once_token = Some([0x55; 16]);
    let mut none = once.client(1);
    none.once_token = None;
    for (what, opts) in [("wrong", wrong), ("missing", none)] {
        let e = client::push(
            &once.endpoint(),
            &opts,
            vec![src.clone()],
            false,
            "x.bin".into(),
            progress(),
        )
        .await
        .expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Permission, "{what}: {e}");
        assert!(e.to_string().contains("token"), "{what}: {e}");
        assert!(!home.join("x.bin").exists(), "{what}: nothing written");
        assert!(
            !once.run.is_finished(),
            "{what}: still waiting for its client"
        );
    }

    // The right client still gets its session.
    client::push(
        &once.endpoint(),
        &once.client(1),
        vec![src],
        false,
        "x.bin".into(),
        progress(),
    )
    .await
    .unwrap();
    assert_eq!(content_difference(home.join("x.bin"), data(1000, 4)), None);
    once.ended().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_gives_up_without_a_client_and_stops_when_ssh_closes() {
    let work = tempfile::tempdir().unwrap();
    let mut opts = options(work.path());
    opts.wait = Duration::from_millis(300);
    let started = Instant::now();
    let e = listening(opts).await.ended().await.unwrap_err();
    assert!(matches!(e, Error::PeerGone(_)), "{e}");
    assert!(e.to_string().contains("no client"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));

    let mut once = listening(options(work.path())).await;
    once.gone.take().unwrap().send(()).unwrap();
    let e = once.ended().await.unwrap_err();
    assert!(e.to_string().contains("went away"), "{e}");
}

/// The client's side of reverse mode: a listener the server dials.
async fn callback() -> (Arc<Callback>, u16) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cb = Callback::new(listener);
    let port = cb.port().unwrap();
    (Arc::new(cb), port)
}

async fn dialling(home: &Path, port: u16) -> Once {
    dialling_with(options(home), port).await
}

async fn dialling_with(opts: OnceOptions, port: u16) -> Once {
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let target = Endpoint {
        host: "127.0.0.1".into(),
        port,
    };
    let server = OnceServer::dial(target, Vec::new(), &identity, opts).unwrap();
    assert_eq!(server.line().port, None, "reverse mode prints no port");
    start(server, state)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Where the client says it connects in reverse mode (not dialled).
fn nowhere() -> Endpoint {
    Endpoint {
        host: "127.0.0.1".into(),
        port: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverse_mode_carries_a_tree_both_ways() {
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let tree = work.path().join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("one.bin"), data(3 << 20, 5)).unwrap();
    std::fs::write(tree.join("sub/two.bin"), data(1 << 20, 6)).unwrap();

    let (cb, port) = callback().await;
    let once = dialling(&home, port).await;
    let mut o = once.client(4);
    o.reach = Reach::Callback(cb);
    let out = client::push(
        &nowhere(),
        &o,
        vec![tree.clone()],
        true,
        String::new(),
        progress(),
    )
    .await
    .unwrap();
    assert_eq!(out.streams, 4);
    once.ended().await.unwrap();
    assert_eq!(
        content_difference(home.join("tree/one.bin"), data(3 << 20, 5)),
        None
    );

    // Back, in safe mode (plain data connections).
    let (cb, port) = callback().await;
    let once = dialling(&home, port).await;
    let dest: PathBuf = work.path().join("back");
    let mut o = once.client(3);
    o.protect = Protect::Safe;
    o.reach = Reach::Callback(cb);
    let out = client::pull(
        &nowhere(),
        &o,
        vec!["tree".into()],
        true,
        dest.clone(),
        progress(),
    )
    .await
    .unwrap();
    assert_eq!(out.streams, 3);
    once.ended().await.unwrap();
    assert_eq!(
        content_difference(dest.join("sub/two.bin"), data(1 << 20, 6)),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverse_mode_adds_streams_while_a_session_runs_both_ways() {
    let work = tempfile::tempdir().unwrap();
    // The client sends and opens streams itself.
    let (cb, port) = callback().await;
    let once = dialling(work.path(), port).await;
    let mut o = once.client(1);
    o.max_streams = 6;
    o.tuning.script = vec![(ms(200), StreamChange::Grow(6))];
    o.reach = Reach::Callback(cb);
    let out = client::perf(&nowhere(), &o, None, Some(ms(2500)), false, progress())
        .await
        .unwrap();
    assert_eq!(out.streams, 6);
    assert!(
        out.stats.per_stream_bytes[5] > 0,
        "{:?}",
        out.stats.per_stream_bytes
    );
    once.ended().await.unwrap();

    // The server sends and asks the client for streams (MoreStreams).
    let mut opts = options(work.path());
    opts.server.stream_script = vec![(ms(200), StreamChange::Grow(6))];
    let (cb, port) = callback().await;
    let once = dialling_with(opts, port).await;
    let mut o = once.client(1);
    o.max_streams = 6;
    o.protect = Protect::Clear;
    o.reach = Reach::Callback(cb);
    let back = client::perf(&nowhere(), &o, None, Some(ms(2500)), true, progress())
        .await
        .unwrap();
    assert_eq!(back.streams, 6);
    assert!(
        back.stats.per_stream_bytes[5] > 0,
        "{:?}",
        back.stats.per_stream_bytes
    );
    once.ended().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverse_mode_fails_clearly_when_the_client_cannot_be_reached() {
    let work = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let port = tern_testkit::net::free_port();
    let e = dialling(work.path(), port).await.ended().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connect, "{e}");
}
