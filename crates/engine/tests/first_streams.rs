//! A sender announces its files while its first data streams are still
//! joining (`FirstStreams::Joining`), so the receiver's answers come back
//! with the joins instead of a round trip after them; a stream that cannot
//! join fails the session with its own error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_engine::data::{FirstStreams, PendingJoins};
use tern_engine::fsio::{BlockWrite, Created, Found, FsSink, FsSource, Root, Sink};
use tern_engine::session::EntryFailure;
use tern_engine::transfer::{Control, Progress, TransferParams, run_receiver, run_sender};
use tern_engine::tuning::{Joined, StreamSupply};
use tern_engine::{Error, Result};
use tern_proto::{ChecksumAlg, FileMeta, RelPath, SkipExisting};
use tern_testkit::files::{content_difference, fresh_random_file};
use tokio::sync::oneshot;

const BS: u32 = 64 << 10;

/// A sink that says when the receiver opened its first file: the moment a
/// `FileAnnounce` has been acted on.
struct TellsOfAnnounce {
    inner: FsSink,
    opened: Mutex<Option<oneshot::Sender<()>>>,
}

impl Sink for TellsOfAnnounce {
    fn create_dir(&self, path: &RelPath, mode: u32) -> Result<()> {
        self.inner.create_dir(path, mode)
    }
    fn create_file(&self, meta: &FileMeta, block_size: u32, resume: bool) -> Result<Created> {
        if let Some(tx) = self.opened.lock().unwrap().take() {
            let _ = tx.send(());
        }
        self.inner.create_file(meta, block_size, resume)
    }
    fn digests(&self) -> bool {
        self.inner.digests()
    }
    fn existing(&self, path: &RelPath) -> Result<Option<Found>> {
        self.inner.existing(path)
    }
    fn commit_group(&self, files: &[Arc<dyn BlockWrite>]) -> Result<()> {
        self.inner.commit_group(files)
    }
    fn finish(&self) -> Vec<EntryFailure> {
        self.inner.finish()
    }
}

fn params(skip: SkipExisting) -> TransferParams {
    let mut p = TransferParams::new(1, BS, ChecksumAlg::Xxh3);
    p.skip_existing = skip;
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_announced_before_the_first_stream_has_joined() {
    for skip in [SkipExisting::Mtime, SkipExisting::Never] {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("data.bin");
        let data = fresh_random_file(&src, 3 * BS as usize + 17);
        let dest = dir.path().join("out.bin");
        let (opened_tx, opened_rx) = oneshot::channel();
        let sink = Arc::new(TellsOfAnnounce {
            inner: FsSink::new(Root::Ambient, dest.clone(), 1).unwrap(),
            opened: Mutex::new(Some(opened_tx)),
        });
        let source = Arc::new(FsSource::new(Root::Ambient, vec![src], false));
        let (ca, cb) = tokio::io::duplex(1 << 16);
        let (da, db) = tokio::io::duplex(1 << 20);
        // The sender's only stream joins once the receiver has opened the
        // file: a sender that waited for its streams before announcing
        // would never see it join.
        let join = async move {
            match tokio::time::timeout(Duration::from_secs(10), opened_rx).await {
                Ok(Ok(())) => Ok(Joined::pipe(0, Box::new(da))),
                _ => Err(Error::PeerGone(
                    "no file was announced before the join".into(),
                )),
            }
        };
        let joining = FirstStreams::Joining(PendingJoins::new([join]));
        let joined = joining_done(&joining);
        let s = run_sender(
            Control::new(Box::new(ca)),
            joining,
            StreamSupply::Fixed,
            source,
            params(skip),
            Arc::new(Progress::default()),
        );
        let r = run_receiver(
            Control::new(Box::new(cb)),
            vec![Joined::pipe(0, Box::new(db))],
            StreamSupply::Fixed,
            sink,
            params(skip),
            Arc::new(Progress::default()),
        );
        let (s, r) = tokio::join!(s, r);
        let (s, r) = (s.unwrap(), r.unwrap());
        assert_eq!(content_difference(&dest, &data), None, "{skip:?}");
        assert_eq!(s.files.len(), 1);
        assert_eq!(r.files[0].digest, s.files[0].digest);
        assert!(joined.get().is_some(), "the join's time is kept ({skip:?})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_cannot_join_fails_the_session_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    fresh_random_file(&src, 2 * BS as usize);
    let source = Arc::new(FsSource::new(Root::Ambient, vec![src], false));
    let (ca, _cb) = tokio::io::duplex(1 << 16);
    let refused = async {
        Err(Error::Protocol(
            "the server refused data connection 0".into(),
        ))
    };
    let s = tokio::time::timeout(
        Duration::from_secs(10),
        run_sender(
            Control::new(Box::new(ca)),
            FirstStreams::Joining(PendingJoins::new([refused])),
            StreamSupply::Fixed,
            source,
            params(SkipExisting::Never),
            Arc::new(Progress::default()),
        ),
    )
    .await
    .expect("the session ends when its stream cannot join");
    let e = s.expect_err("no stream, no copy");
    assert!(
        e.to_string().contains("refused data connection 0"),
        "the join's own error: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_waits_for_every_first_stream() {
    let (a, _b) = tokio::io::duplex(64);
    let (c, _d) = tokio::io::duplex(64);
    let slow = async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(Joined::pipe(1, Box::new(c)))
    };
    let pending = PendingJoins::new([
        Box::pin(async move { Ok(Joined::pipe(0, Box::new(a))) })
            as std::pin::Pin<Box<dyn Future<Output = Result<Joined>> + Send>>,
        Box::pin(slow),
    ]);
    let all_joined = pending.all_joined();
    let streams = FirstStreams::Joining(pending).all().await.unwrap();
    let indices: Vec<u16> = streams.iter().map(|j| j.index).collect();
    assert_eq!(indices, [0, 1], "all of them, in order");
    assert!(all_joined.get().is_some());
}

/// When the first streams had all joined, once they have.
fn joining_done(streams: &FirstStreams) -> Arc<std::sync::OnceLock<std::time::Instant>> {
    match streams {
        FirstStreams::Joining(pending) => pending.all_joined(),
        FirstStreams::Joined(_) => unreachable!("built as joining"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_lost_while_the_others_join_is_no_end_of_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    let data = fresh_random_file(&src, 4 * BS as usize + 5);
    let dest = dir.path().join("out.bin");
    let source = Arc::new(FsSource::new(Root::Ambient, vec![src], false));
    let sink = Arc::new(FsSink::new(Root::Ambient, dest.clone(), 1).unwrap());
    let (ca, cb) = tokio::io::duplex(1 << 16);
    // Stream 0 is broken from the start at both ends; stream 1 joins later.
    let (broken_a, _) = tokio::io::duplex(1 << 10);
    let (_, broken_b) = tokio::io::duplex(1 << 10);
    let (da, db) = tokio::io::duplex(1 << 20);
    let first = async move { Ok(Joined::pipe(0, Box::new(broken_a))) };
    let later = async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(Joined::pipe(1, Box::new(da)))
    };
    let pending = PendingJoins::new([
        Box::pin(first) as std::pin::Pin<Box<dyn Future<Output = Result<Joined>> + Send>>,
        Box::pin(later),
    ]);
    let mut p = params(SkipExisting::Never);
    p.streams = 2;
    p.max_streams = 2;
    let s = run_sender(
        Control::new(Box::new(ca)),
        FirstStreams::Joining(pending),
        StreamSupply::Fixed,
        source,
        p.clone(),
        Arc::new(Progress::default()),
    );
    let r = run_receiver(
        Control::new(Box::new(cb)),
        vec![
            Joined::pipe(0, Box::new(broken_b)),
            Joined::pipe(1, Box::new(db)),
        ],
        StreamSupply::Fixed,
        sink,
        p,
        Arc::new(Progress::default()),
    );
    let (s, r) = tokio::time::timeout(Duration::from_secs(20), async { tokio::join!(s, r) })
        .await
        .expect("no hang");
    let (s, r) = (s.expect("the sender goes on over stream 1"), r.unwrap());
    assert_eq!(content_difference(&dest, &data), None);
    assert_eq!(r.files[0].digest, s.files[0].digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answers_announcements_before_its_first_stream_has_joined() {
    // Both ends start joining; the stream reaches either end only once the
    // receiver has acted on the announcement (opened the file): a receiver
    // that waited for its streams before reading the control connection
    // would never see it join, under `--skip-existing mtime` (the sender
    // waits for the receiver's FileCheck) and without it.
    for skip in [SkipExisting::Mtime, SkipExisting::Never] {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("data.bin");
        let data = fresh_random_file(&src, 3 * BS as usize + 17);
        let dest = dir.path().join("out.bin");
        let (opened_tx, opened_rx) = oneshot::channel();
        let sink = Arc::new(TellsOfAnnounce {
            inner: FsSink::new(Root::Ambient, dest.clone(), 1).unwrap(),
            opened: Mutex::new(Some(opened_tx)),
        });
        let source = Arc::new(FsSource::new(Root::Ambient, vec![src], false));
        let (ca, cb) = tokio::io::duplex(1 << 16);
        let (da, db) = tokio::io::duplex(1 << 20);
        let (acted_tx, acted_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(10), opened_rx).await {
                let _ = acted_tx.send(true);
            }
        });
        let stream_after_announce = |end: tokio::io::DuplexStream| {
            let mut acted = acted_rx.clone();
            async move {
                match tokio::time::timeout(Duration::from_secs(10), acted.wait_for(|a| *a)).await {
                    Ok(Ok(_)) => Ok(Joined::pipe(0, Box::new(end))),
                    _ => Err(Error::PeerGone(
                        "the receiver acted on no announcement before its stream joined".into(),
                    )),
                }
            }
        };
        let sending = FirstStreams::Joining(PendingJoins::new([stream_after_announce(da)]));
        let receiving = FirstStreams::Joining(PendingJoins::new([stream_after_announce(db)]));
        let received_at = joining_done(&receiving);
        let s = run_sender(
            Control::new(Box::new(ca)),
            sending,
            StreamSupply::Fixed,
            source,
            params(skip),
            Arc::new(Progress::default()),
        );
        let r = run_receiver(
            Control::new(Box::new(cb)),
            receiving,
            StreamSupply::Fixed,
            sink,
            params(skip),
            Arc::new(Progress::default()),
        );
        let (s, r) = tokio::join!(s, r);
        let (s, r) = (s.unwrap(), r.unwrap());
        assert_eq!(content_difference(&dest, &data), None, "{skip:?}");
        assert_eq!(r.files[0].digest, s.files[0].digest);
        assert!(
            received_at.get().is_some(),
            "the receiver's stream joined ({skip:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_s_stream_that_cannot_join_fails_an_unfinished_session() {
    // Its sender may already have written to it (data follows the join),
    // so a receiver cannot go on without it: the session fails with the
    // join's own error, as it would have failed its opening.
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(FsSink::new(Root::Ambient, dir.path().join("out.bin"), 1).unwrap());
    let (cb, _sender_control) = tokio::io::duplex(1 << 16);
    let (_a, b) = tokio::io::duplex(1 << 16);
    let joined = async move { Ok(Joined::pipe(0, Box::new(b))) };
    let refused = async {
        Err(Error::Protocol(
            "the server refused data connection 1".into(),
        ))
    };
    let pending = PendingJoins::new([
        Box::pin(joined) as std::pin::Pin<Box<dyn Future<Output = Result<Joined>> + Send>>,
        Box::pin(refused),
    ]);
    let mut p = params(SkipExisting::Never);
    p.streams = 2;
    p.max_streams = 2;
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        run_receiver(
            Control::new(Box::new(cb)),
            FirstStreams::Joining(pending),
            StreamSupply::Fixed,
            sink,
            p,
            Arc::new(Progress::default()),
        ),
    )
    .await
    .expect("the session ends");
    let e = r.expect_err("no session without its stream");
    assert!(e.to_string().contains("refused data connection 1"), "{e}");
}
