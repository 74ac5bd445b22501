//! Client and daemon over real TCP on loopback: the must-have transfers,
//! identity checks, confinement, and failures.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern_drs::StreamChange;
use tern_engine::client::{self, ClientOptions, Endpoint};
use tern_engine::fault::{CorruptAt, StallAfter};
use tern_engine::server::{ServerOptions, serve};
use tern_engine::session::SPARE_STREAMS;
use tern_engine::tls::ServerIdentity;
use tern_engine::transfer::{BoxStream, Progress};
use tern_engine::{ErrorKind, StreamWrap};
use tern_proto::Protect;
use tern_proto::data::HEADER_LEN;
use tern_testkit::client as kit;
use tern_testkit::files::{file_difference, seeded_random_file};
use tern_testkit::net::free_port;
use tokio::io::AsyncWriteExt;

struct Daemon {
    ep: Endpoint,
    fingerprint: String,
    task: tokio::task::JoinHandle<()>,
    _state: tempfile::TempDir,
}

async fn daemon(root: &Path) -> Daemon {
    daemon_with(ServerOptions::new(root.to_path_buf())).await
}

async fn daemon_with(opts: ServerOptions) -> Daemon {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let fingerprint = identity.fingerprint.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        serve(listener, &identity, opts, std::future::pending())
            .await
            .unwrap();
    });
    Daemon {
        ep: Endpoint {
            host: "127.0.0.1".into(),
            port,
        },
        fingerprint,
        task,
        _state: state,
    }
}

/// Client options of these tests: blocks of 1 MiB.
fn opts(streams: u16, protect: Protect) -> ClientOptions {
    kit::options(streams, protect, 1 << 20)
}

fn big_size() -> u64 {
    std::env::var("TERN_TEST_BIG_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2 << 30)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_random_file_round_trips_through_a_daemon_with_8_streams_despite_corruption() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = work.path().join("big.bin");
    let size = big_size();
    seeded_random_file(&src, size, 42);
    let d = daemon(&root).await;

    // One payload byte of the third block on stream 5 is flipped in flight.
    let target = 2 * (HEADER_LEN as u64 + (1 << 20)) + HEADER_LEN as u64 + 77;
    let wrap: StreamWrap = Arc::new(move |k, s: BoxStream| -> BoxStream {
        if k == 5 {
            Box::new(CorruptAt::new(s, target))
        } else {
            s
        }
    });
    let mut o = opts(8, Protect::Clear);
    o.wrap = Some(wrap);
    let up = client::push(
        &d.ep,
        &o,
        vec![src.clone()],
        false,
        "big.bin".into(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        file_difference(&src, root.join("big.bin")),
        None,
        "uploaded copy differs"
    );
    assert_eq!(
        up.stats.blocks_retransmitted, 1,
        "the corrupted block was re-sent once"
    );
    assert_eq!(up.stats.bytes, size);
    assert_eq!(
        up.stats.per_stream_bytes.len(),
        8 + usize::from(SPARE_STREAMS),
        "8 streams and the spare indices that replace stalled ones"
    );
    assert_eq!(up.stats.per_stream_bytes[8..], [0; 4], "nothing stalled");

    let back = work.path().join("back.bin");
    let down = client::pull(
        &d.ep,
        &opts(8, Protect::Private),
        vec!["big.bin".into()],
        false,
        back.clone(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        file_difference(&src, &back),
        None,
        "downloaded copy differs"
    );
    assert_eq!(down.stats.files.len(), 1);
    assert_eq!(down.stats.files[0].digest, up.stats.files[0].digest);
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_go_up_and_come_back_in_every_protection_mode() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let tree = work.path().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    seeded_random_file(&tree.join("a/one"), 3_000_000, 1);
    seeded_random_file(&tree.join("a/b/two"), 10, 2);
    let d = daemon(&root).await;
    for protect in [Protect::Clear, Protect::Safe, Protect::Private] {
        let name = protect.name().to_string();
        client::push(
            &d.ep,
            &opts(3, protect),
            vec![tree.clone()],
            true,
            name.clone(),
            Arc::new(Progress::default()),
        )
        .await
        .unwrap();
        assert_eq!(
            file_difference(tree.join("a/one"), root.join(&name).join("a/one")),
            None
        );
        let back = work.path().join(format!("back-{name}"));
        client::pull(
            &d.ep,
            &opts(2, protect),
            vec![name.clone()],
            true,
            back.clone(),
            Arc::new(Progress::default()),
        )
        .await
        .unwrap();
        assert_eq!(
            file_difference(tree.join("a/b/two"), back.join("a/b/two")),
            None
        );
    }
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_runs_both_ways_and_for_a_time() {
    let root = tempfile::tempdir().unwrap();
    let d = daemon(root.path()).await;
    let fwd = client::perf(
        &d.ep,
        &opts(2, Protect::Clear),
        Some(50 << 20),
        None,
        false,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(fwd.stats.bytes, 50 << 20);
    let rev = client::perf(
        &d.ep,
        &opts(2, Protect::Safe),
        Some(20 << 20),
        None,
        true,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(rev.stats.bytes, 20 << 20);
    let timed = client::perf(
        &d.ep,
        &opts(1, Protect::Private),
        None,
        Some(Duration::from_millis(300)),
        false,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert!(timed.stats.bytes > 0);
    assert_eq!(timed.stats.bytes % (1 << 20), 0, "whole blocks only");
    assert_eq!(
        std::fs::read_dir(root.path()).unwrap().count(),
        0,
        "perf writes nothing"
    );
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_identity_is_recorded_then_enforced() {
    let root = tempfile::tempdir().unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let src = cfg.path().join("f");
    std::fs::write(&src, b"hello").unwrap();
    let d = daemon(root.path()).await;
    let o = kit::recording(opts(1, Protect::Clear), &cfg.path().join("known_hosts"));
    let first = client::push(
        &d.ep,
        &o,
        vec![src.clone()],
        false,
        "f".into(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(first.fingerprint, d.fingerprint);
    assert!(first.recorded.is_some(), "first contact is recorded");
    let second = client::push(
        &d.ep,
        &o,
        vec![src.clone()],
        false,
        "g".into(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert!(
        second.recorded.is_none(),
        "known host is not recorded again"
    );

    // Same address, new identity: a hard error that names the file to fix.
    d.task.abort();
    let _ = d.task.await;
    let state = tempfile::tempdir().unwrap();
    let other = ServerIdentity::load_or_create(state.path()).unwrap();
    // The port is free again once the aborted daemon's socket is dropped;
    // on a busy host another socket may hold it for a moment.
    let mut tries = 0;
    let listener = loop {
        match tokio::net::TcpListener::bind(("127.0.0.1", d.ep.port)).await {
            Ok(l) => break l,
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("port {} busy ({e}), trying again", d.ep.port);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("port {} stayed busy: {e}", d.ep.port),
        }
    };
    let opts2 = ServerOptions::new(root.path().to_path_buf());
    let task = tokio::spawn(async move {
        serve(listener, &other, opts2, std::future::pending())
            .await
            .unwrap();
    });
    let err = client::push(
        &d.ep,
        &o,
        vec![src.clone()],
        false,
        "h".into(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Security);
    assert!(err.to_string().contains("known_hosts"), "{err}");
    assert!(!root.path().join("h").exists());

    // An explicit pin of the wrong value fails too.
    let pinned = kit::pinned(opts(1, Protect::Clear), &d.fingerprint);
    let err = client::push(
        &d.ep,
        &pinned,
        vec![src],
        false,
        "i".into(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Security);
    task.abort();
}

/// In `private` mode the TLS AEAD checks every block on the wire, so the
/// blocks carry no XXH3 check of their own (`AEAD_CHECKS`): a byte changed
/// above TLS (a bug or bad memory, never the network) passes the block and
/// is caught by the whole-file digest; in `clear` mode the same change is
/// caught by the block's check and repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_blocks_are_checked_by_tls_and_the_digest_not_a_second_hash() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = work.path().join("f.bin");
    seeded_random_file(&src, 3 << 20, 7);
    let d = daemon(&root).await;
    let corrupt: StreamWrap = Arc::new(|_, s: BoxStream| -> BoxStream {
        Box::new(CorruptAt::new(s, HEADER_LEN as u64 + 1000))
    });
    let mut clear = opts(1, Protect::Clear);
    clear.wrap = Some(corrupt.clone());
    let repaired = push_file(&d, &clear, &src, "clear.bin").await;
    assert_eq!(repaired.stats.blocks_retransmitted, 1);
    assert_eq!(file_difference(&src, root.join("clear.bin")), None);

    let mut private = opts(1, Protect::Private);
    private.wrap = Some(corrupt);
    let err = client::push(
        &d.ep,
        &private,
        vec![src.clone()],
        false,
        "private.bin".into(),
        Arc::new(Progress::default()),
    )
    .await
    .expect_err("the digest catches what no block check looked for");
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert!(err.to_string().contains("digest"), "{err}");
    assert!(
        !root.join("private.bin").exists(),
        "nothing at the final name"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_outside_the_root_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(work.path().join("secret"), b"secret").unwrap();
    std::os::unix::fs::symlink(work.path(), root.join("link")).unwrap();
    let src = work.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let d = daemon(&root).await;
    let o = opts(1, Protect::Clear);
    for dest in ["../escaped", "/tmp/escaped", "link/escaped"] {
        let err = client::push(
            &d.ep,
            &o,
            vec![src.clone()],
            false,
            dest.into(),
            Arc::new(Progress::default()),
        )
        .await
        .unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Permission), "{dest}: {err}");
    }
    assert!(!work.path().join("escaped").exists());
    for source in ["../secret", "/etc/passwd", "link/secret"] {
        let out = work.path().join("stolen");
        let err = client::pull(
            &d.ep,
            &o,
            vec![source.into()],
            false,
            out.clone(),
            Arc::new(Progress::default()),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permission, "{source}: {err}");
        assert!(!out.exists());
    }
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_port_is_dropped_and_other_sessions_go_on() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("f");
    seeded_random_file(&src, 30 << 20, 3);
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let d = daemon(&root).await;
    let addr = format!("127.0.0.1:{}", d.ep.port);
    let ep = d.ep.clone();
    let good = tokio::spawn(async move {
        client::push(
            &ep,
            &opts(4, Protect::Clear),
            vec![src],
            false,
            "f".into(),
            Arc::new(Progress::default()),
        )
        .await
    });
    for garbage in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        &[0x16, 3, 1, 0, 5, 1, 2, 3, 4, 5][..],
        b"TERD0123456789abcdefghijklmnop",
        b"TERN\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    ] {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let _ = s.write_all(garbage).await;
        let _ = s.shutdown().await;
    }
    good.await.unwrap().unwrap();
    assert_eq!(std::fs::metadata(root.join("f")).unwrap().len(), 30 << 20);
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_a_connect_error() {
    let port = free_port();
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port,
    };
    let err = client::perf(
        &ep,
        &opts(1, Protect::Clear),
        Some(1),
        None,
        false,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect);
    assert!(err.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_transfer_leaves_only_a_partial_file() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    seeded_random_file(&root.join("big"), 400 << 20, 4);
    let d = daemon(&root).await;
    let dest = work.path().join("big.copy");
    let progress = Arc::new(Progress::default());
    let ep = d.ep.clone();
    let (p2, dest2) = (progress.clone(), dest.clone());
    // Paced (8 s for the file), so a busy host cannot finish the copy
    // before the kill comes.
    let mut o = opts(2, Protect::Clear);
    o.rate_limit = Some(400_000_000);
    let pull =
        tokio::spawn(
            async move { client::pull(&ep, &o, vec!["big".into()], false, dest2, p2).await },
        );
    while progress.bytes.load(std::sync::atomic::Ordering::Relaxed) < (8 << 20) {
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(!pull.is_finished(), "transfer finished before the kill");
    }
    d.task.abort();
    let err = pull.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Network, "{err}");
    assert!(!dest.exists(), "nothing at the final name");
    assert!(
        work.path()
            .join(tern_engine::fsio::partial_name("big.copy".as_ref()))
            .exists(),
        "partial kept for resume"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_run_at_once() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let d = daemon(&root).await;
    let mut sessions = Vec::new();
    for i in 0..6u64 {
        let src = work.path().join(format!("src{i}"));
        seeded_random_file(&src, (3 << 20) + i * 1000, 100 + i);
        let ep = d.ep.clone();
        let protect = [Protect::Clear, Protect::Safe, Protect::Private][i as usize % 3];
        sessions.push(tokio::spawn(async move {
            client::push(
                &ep,
                &opts(2, protect),
                vec![src],
                false,
                format!("dst{i}"),
                Arc::new(Progress::default()),
            )
            .await
        }));
    }
    for s in sessions {
        s.await.unwrap().unwrap();
    }
    for i in 0..6 {
        assert_eq!(
            file_difference(
                work.path().join(format!("src{i}")),
                root.join(format!("dst{i}"))
            ),
            None
        );
    }
    d.task.abort();
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_join_and_retire_while_a_session_runs_both_ways() {
    let root = tempfile::tempdir().unwrap();
    let mut server = ServerOptions::new(root.path().to_path_buf());
    // When the daemon sends, it asks the client for streams (MoreStreams).
    server.stream_script = vec![(ms(200), StreamChange::Grow(4))];
    let d = daemon_with(server).await;
    for protect in [Protect::Private, Protect::Clear] {
        let mut o = opts(1, protect);
        o.max_streams = 4;
        // When the client sends, it opens the streams itself.
        // Each late stream has well over a second to join (a TLS handshake
        // in Private mode) and carry a block, even on a busy host.
        o.tuning.script = vec![
            (ms(200), StreamChange::Grow(3)),
            (ms(2000), StreamChange::Retire(2)),
        ];
        let out = client::perf(
            &d.ep,
            &o,
            None,
            Some(ms(3000)),
            false,
            Arc::new(Progress::default()),
        )
        .await
        .unwrap();
        assert_eq!(out.streams, 3, "{protect:?}");
        let per = &out.stats.per_stream_bytes;
        assert_eq!(per.len(), 4 + usize::from(SPARE_STREAMS));
        assert!(
            per[1] > 0 && per[2] > 0,
            "late streams carried data: {per:?}"
        );
        assert_eq!(per[3], 0);
        // Every block was sent once, but for the endgame's copies of the
        // last ones still on their way.
        let copied = out.stats.blocks_copied.expect("the sender counts copies");
        let extra = per.iter().sum::<u64>() - out.stats.bytes;
        assert!(
            extra <= copied * u64::from(o.block_size),
            "{extra} bytes beyond the blocks, {copied} copies"
        );

        let back = client::perf(
            &d.ep,
            &o,
            None,
            Some(ms(2500)),
            true,
            Arc::new(Progress::default()),
        )
        .await
        .unwrap();
        assert_eq!(back.streams, 4, "{protect:?}");
        assert!(back.stats.per_stream_bytes[3] > 0);
    }
    d.task.abort();
}

/// Pushes one file to the daemon as `dest`.
async fn push_file(d: &Daemon, o: &ClientOptions, file: &Path, dest: &str) -> client::Outcome {
    client::push(
        &d.ep,
        o,
        vec![file.to_path_buf()],
        false,
        dest.into(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap()
}

/// Data stream 0 at `rate` bytes/s, the others untouched.
fn slow_first_stream(rate: u64) -> StreamWrap {
    Arc::new(move |k, s| {
        if k == 0 {
            Box::new(tern_engine::fault::Throttle::new(s, rate)) as BoxStream
        } else {
            s
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_arrives_intact_over_streams_that_came_and_went() {
    let root = tempfile::tempdir().unwrap();
    let d = daemon(root.path()).await;
    let src = tempfile::tempdir().unwrap();
    let file = src.path().join("data.bin");
    seeded_random_file(&file, 96 << 20, 9);
    let mut o = opts(1, Protect::Safe);
    o.max_streams = 6;
    o.tuning.script = vec![
        (ms(1), StreamChange::Grow(6)),
        (ms(250), StreamChange::Retire(2)),
    ];
    // Slow the first stream so the transfer outlives the script.
    o.wrap = Some(slow_first_stream(64 << 20));
    let out = push_file(&d, &o, &file, "copy.bin").await;
    assert!(out.streams >= 2, "streams used: {}", out.streams);
    assert_eq!(file_difference(&file, root.path().join("copy.bin")), None);
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_stream_carries_less_and_the_file_arrives_intact() {
    let root = tempfile::tempdir().unwrap();
    let d = daemon(root.path()).await;
    let src = tempfile::tempdir().unwrap();
    let file = src.path().join("data.bin");
    seeded_random_file(&file, 64 << 20, 11);
    let mut o = opts(4, Protect::Safe);
    // One stream of four at 2 MiB/s, the others as fast as loopback goes:
    // the slow one reaches an eighth of the file only if the copy takes
    // about 4 s, which even a busy 2-core host beats by far.
    o.wrap = Some(slow_first_stream(2 << 20));
    let out = push_file(&d, &o, &file, "copy.bin").await;
    assert_eq!(file_difference(&file, root.path().join("copy.bin")), None);
    // Streams pull blocks as they send them, so the split follows each
    // stream's speed: the slow one carries well under an even quarter.
    let per_stream = &out.stats.per_stream_bytes;
    let total: u64 = per_stream.iter().sum();
    assert!(
        per_stream[0] * 8 < total && per_stream[1..4].iter().all(|&b| b > per_stream[0]),
        "the slow stream's share: {per_stream:?}"
    );
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn congestion_control_and_fixed_windows_are_applied_on_the_sockets() {
    let root = tempfile::tempdir().unwrap();
    let d = daemon(root.path()).await;
    let mut o = opts(2, Protect::Clear);
    o.tuning.congestion = "reno".into();
    o.tuning.window = tern_drs::WindowMode::Fixed(256 << 10);
    let out = client::perf(
        &d.ep,
        &o,
        Some(32 << 20),
        None,
        false,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    let t = out.stats.tuning.expect("TCP streams are measured");
    assert_eq!(t.congestion_control, "reno");
    assert_eq!(t.window, "262144");
    assert_eq!(
        t.send_buffer_peak_bytes,
        2 * (256 << 10),
        "locked, never grown"
    );
    assert_eq!(t.receive_buffer_peak_bytes, 2 * (256 << 10));

    o.tuning.congestion = "no-such-algorithm".into();
    let refused = client::perf(
        &d.ep,
        &o,
        Some(1 << 20),
        None,
        false,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("not available on the server"),
        "{refused}"
    );
    d.task.abort();
}

/// Stalls stream `stream` for good once `bytes` went through it each way.
fn stall_stream(stream: usize, bytes: u64) -> StreamWrap {
    Arc::new(move |k, s: BoxStream| -> BoxStream {
        if k == stream {
            Box::new(StallAfter::new(s, bytes))
        } else {
            s
        }
    })
}

/// A work directory with a daemon serving `root/` and a random file `src`
/// of `len` bytes.
struct Bench {
    work: tempfile::TempDir,
    d: Daemon,
}

impl Bench {
    async fn new(len: u64, seed: u64) -> Bench {
        let work = tempfile::tempdir().unwrap();
        std::fs::create_dir(work.path().join("root")).unwrap();
        seeded_random_file(&work.path().join("src.bin"), len, seed);
        let d = daemon(&work.path().join("root")).await;
        Bench { work, d }
    }

    fn p(&self, rel: &str) -> std::path::PathBuf {
        self.work.path().join(rel)
    }

    async fn push(&self, o: &ClientOptions, name: &str) -> tern_engine::Result<client::Outcome> {
        let progress = Arc::new(Progress::default());
        client::push(
            &self.d.ep,
            o,
            vec![self.p("src.bin")],
            false,
            name.into(),
            progress,
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_is_replaced_and_the_copy_completes_both_ways() {
    let b = Bench::new(24 << 20, 7).await;
    let block = HEADER_LEN as u64 + (1 << 20);
    let mut o = opts(4, Protect::Clear);
    o.choices.stall_timeout = Some(Duration::from_secs(1));
    // Four seconds for each copy: the stall is seen (after a second) and
    // its replacement joins while most of the file is still to go.
    o.rate_limit = Some(48_000_000);
    // Modest socket buffers, as on a real path: a receiver reading slowly
    // into tens of megabytes reopens its window in steps of a second or
    // more, which a one-second stall timeout would mistake for stalls.
    o.tuning.window = tern_drs::WindowMode::Fixed(512 << 10);

    // Push: the client's writes on stream 2 stop in its second block, early
    // enough that the replacement has seconds of the file left to carry.
    o.wrap = Some(stall_stream(2, block + 1000));
    let up = b.push(&o, "up.bin").await.unwrap();
    assert_eq!(
        file_difference(b.p("src.bin"), b.p("root/up.bin")),
        None,
        "uploaded copy differs"
    );
    let s = &up.stats;
    // At least the stalled stream (a loaded test host can make a healthy
    // stream wait a second too, and that one is replaced as well).
    assert!(s.streams_stalled >= 1 && s.streams_replaced >= 1, "{s:?}");
    assert!(s.blocks_retransmitted >= 1, "the torn block was sent again");
    assert!(
        s.per_stream_bytes[4] > 0,
        "the replacement (spare index 4) carried data"
    );
    assert!(s.streams_used >= 5);

    // Pull: the client's reads on stream 1 stop; the daemon's writes then
    // wait, and it replaces the stream (the client opens the spare it asks for).
    o.wrap = Some(stall_stream(1, block + 1000));
    let down = client::pull(
        &b.d.ep,
        &o,
        vec!["up.bin".into()],
        false,
        b.p("back.bin"),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        file_difference(b.p("src.bin"), b.p("back.bin")),
        None,
        "downloaded copy differs"
    );
    let s = &down.stats;
    // The client saw its stream stall (the frames written to it never
    // came) and the daemon's replacement join on the spare index.
    assert!(s.streams_stalled >= 1 && s.streams_replaced >= 1, "{s:?}");
    assert!(
        s.per_stream_bytes[4] > 0,
        "the replacement carried data: {s:?}"
    );
    b.d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_stall_timeout_a_stream_stalled_at_the_end_is_overtaken() {
    // No watchdog on either end: the block a stalled stream holds would be
    // awaited for good, but once every block is out the other streams
    // carry a copy of it (the endgame), and the copy completes.
    let b = Bench::new(12 << 20, 8).await;
    let mut o = opts(4, Protect::Clear);
    o.choices.stall_timeout = None;
    // Whichever stream first writes 1 MiB stalls, in the middle of its
    // first block (its handshake went before). A fixed stream could have
    // taken no block at all while the others carried the whole file.
    let claim = Arc::new(std::sync::atomic::AtomicBool::new(false));
    o.wrap = Some(Arc::new(move |_, s: BoxStream| -> BoxStream {
        Box::new(StallAfter::first_of(s, 1 << 20, claim.clone()))
    }));
    let out = tokio::time::timeout(Duration::from_secs(60), b.push(&o, "x.bin"))
        .await
        .expect("the copy did not hang")
        .unwrap();
    assert_eq!(
        file_difference(b.p("src.bin"), b.p("root/x.bin")),
        None,
        "the copy differs"
    );
    assert!(out.stats.blocks_copied.unwrap() >= 1, "{:?}", out.stats);
    assert_eq!(out.stats.streams_stalled, 0, "no watchdog gave it up");
    b.d.task.abort();
}

/// A client cannot make a daemon create privileged files, nor a daemon a
/// client: set-user-ID, set-group-ID and sticky bits arrive only when the
/// receiving side allowed them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_bits_arrive_only_where_the_receiver_allows_them() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("tool");
    std::fs::write(&src, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let mode_of = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let mut asking = opts(1, Protect::Private);
    asking.choices.keep_special_bits = true;
    for allow in [false, true] {
        let root = work.path().join(format!("root-{allow}"));
        std::fs::create_dir(&root).unwrap();
        let mut server = ServerOptions::new(root.clone());
        server.allow_special_bits = allow;
        let d = daemon_with(server).await;
        // A client that sends the bits (as any client can).
        push_file(&d, &asking, &src, "tool").await;
        let want = if allow { 0o4755 } else { 0o755 };
        assert_eq!(
            mode_of(&root.join("tool")),
            want,
            "push, daemon allows: {allow}"
        );
        // The daemon sends them only when allowed; the client keeps them
        // only when it asked.
        for (client, keep) in [(&opts(1, Protect::Private), false), (&asking, true)] {
            let back = work.path().join(format!("back-{allow}-{keep}"));
            client::pull(
                &d.ep,
                client,
                vec!["tool".into()],
                false,
                back.clone(),
                Arc::new(Progress::default()),
            )
            .await
            .unwrap();
            let want = if allow && keep { 0o4755 } else { 0o755 };
            assert_eq!(
                mode_of(&back),
                want,
                "pull, daemon allows {allow}, client keeps {keep}"
            );
        }
        d.task.abort();
    }
}

/// Partial files of other transfers (and their journals, and resume
/// markers) are not files a daemon serves: not by name, not in a tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_files_of_other_transfers_are_never_served() {
    let root = tempfile::tempdir().unwrap();
    let tree = root.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("done"), b"done").unwrap();
    let internal = [
        tern_engine::fsio::partial_name("busy".as_ref()),
        tern_engine::fsio::journal_name("busy".as_ref()),
        ".busy.tern-partial".into(),
        tern_engine::fsio::RESUME_MARKER.into(),
    ];
    for name in &internal {
        std::fs::write(tree.join(name), b"half").unwrap();
    }
    let d = daemon(root.path()).await;
    let work = tempfile::tempdir().unwrap();
    for name in &internal {
        let asked = format!("tree/{}", name.to_str().unwrap());
        let err = client::pull(
            &d.ep,
            &opts(1, Protect::Clear),
            vec![asked.clone()],
            false,
            work.path().join("one"),
            Arc::new(Progress::default()),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{asked}: {err}");
    }
    let got = client::pull(
        &d.ep,
        &opts(1, Protect::Clear),
        vec!["tree".into()],
        true,
        work.path().join("all"),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    let names: Vec<&str> = got.stats.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(names, vec!["tree/done"]);
    let listed: Vec<_> = std::fs::read_dir(work.path().join("all"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, vec![std::ffi::OsString::from("done")]);
    d.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_hello_opens_the_session_early_and_a_changed_one_opens_it_again() {
    let root = tempfile::tempdir().unwrap();
    let d = daemon(root.path()).await;
    let src = tempfile::tempdir().unwrap();
    let file = src.path().join("data.bin");
    seeded_random_file(&file, 3 << 20, 11);
    for protect in [Protect::Private, Protect::Clear] {
        let mut o = opts(2, protect);
        let first = push_file(&d, &o, &file, "first.bin").await;
        assert!(!first.opened_early, "nothing remembered: the usual opening");
        assert_eq!(file_difference(&file, root.path().join("first.bin")), None);

        o.daemon_hello = first.daemon_hello;
        let early = push_file(&d, &o, &file, "early.bin").await;
        assert!(
            early.opened_early,
            "{protect:?}: the opening went with the hello"
        );
        assert_eq!(early.daemon_hello, first.daemon_hello);
        assert_eq!(file_difference(&file, root.path().join("early.bin")), None);

        // A daemon that has lost a feature since: the early opening was
        // written for the wrong negotiation, so the session opens again.
        let mut changed = first.daemon_hello.expect("a daemon's hello");
        changed.features =
            tern_proto::Features(changed.features.0 & !tern_proto::Features::TUNING.0);
        o.daemon_hello = Some(changed);
        let again = push_file(&d, &o, &file, "again.bin").await;
        assert!(
            !again.opened_early,
            "{protect:?}: opened again the usual way"
        );
        assert_eq!(file_difference(&file, root.path().join("again.bin")), None);
    }
    d.task.abort();
}
