//! End-to-end transfers through the whole engine over in-memory pipes:
//! trees, integrity, fault injection and every digest algorithm.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use tern_engine::compress::{GIVE_UP_AFTER, PROBE_EVERY};
use tern_engine::fault::{BreakAfter, CorruptAt, FillsUp, SlowDisk};
use tern_engine::fsio::{FsSink, FsSource, Root};
use tern_engine::integrity::{BlockCheck, digest_of};
use tern_engine::transfer::{BoxStream, Progress, TransferParams, TransferStats};
use tern_engine::tuning::{Joined, StreamSupply};
use tern_engine::{ErrorKind, StreamWrap, local};
use tern_proto::data::HEADER_LEN;
use tern_proto::{ChecksumAlg, Compression, SkipExisting};
use tern_testkit::files::{content_difference, fresh_random_file};

const BS: u32 = 256 << 10;

fn params(streams: u16, checksum: ChecksumAlg) -> TransferParams {
    let mut p = TransferParams::new(streams, BS, checksum);
    p.max_files_in_flight = 8;
    p.max_repair_rounds = 4;
    p
}

async fn copy(
    src: &Path,
    dest: &Path,
    p: TransferParams,
    wrap: Option<StreamWrap>,
) -> tern_engine::Result<(TransferStats, TransferStats)> {
    let source = Arc::new(FsSource::new(Root::Ambient, vec![src.to_path_buf()], true));
    let sink = Arc::new(FsSink::new(Root::Ambient, dest.to_path_buf(), 1)?);
    local::copy(
        source,
        sink,
        p,
        Arc::new(Progress::default()),
        wrap.as_ref(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_arrives_identical_with_modes_and_times() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("run");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::create_dir(src.join("empty")).unwrap();
    let big = fresh_random_file(&src.join("big.dat"), 5 * BS as usize + 123);
    let small = fresh_random_file(&src.join("sub/deeper/small.dat"), 10);
    std::fs::write(src.join("sub/zero"), b"").unwrap();
    std::fs::set_permissions(src.join("sub/zero"), std::fs::Permissions::from_mode(0o600)).unwrap();

    let dest = dir.path().join("copy");
    let (sent, received) = copy(&src, &dest, params(4, ChecksumAlg::Xxh3), None)
        .await
        .unwrap();

    assert_eq!(content_difference(dest.join("big.dat"), &big), None);
    assert_eq!(
        content_difference(dest.join("sub/deeper/small.dat"), &small),
        None
    );
    assert!(dest.join("empty").is_dir());
    let zero = std::fs::metadata(dest.join("sub/zero")).unwrap();
    assert_eq!(zero.len(), 0);
    assert_eq!(zero.permissions().mode() & 0o777, 0o600);
    let (a, b) = (
        std::fs::metadata(src.join("big.dat")).unwrap(),
        std::fs::metadata(dest.join("big.dat")).unwrap(),
    );
    assert_eq!((a.mtime(), a.mtime_nsec()), (b.mtime(), b.mtime_nsec()));
    assert_eq!(sent.files.len(), 3);
    assert_eq!(received.files.len(), 3);
    assert_eq!(received.bytes, big.len() as u64 + 10);
    assert_eq!(sent.per_stream_bytes.iter().sum::<u64>(), received.bytes);
    assert_eq!(received.blocks_retransmitted, 0);
    let leftovers: Vec<_> = walk(&dest).into_iter().filter(|p| is_ours(p)).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A partial file, journal or resume marker of tern's.
fn is_ours(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    p.file_name()
        .is_some_and(|n| tern_engine::fsio::is_internal(n.as_bytes()))
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_corrupted_in_flight_is_detected_resent_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    let data = fresh_random_file(&src, 8 * BS as usize);
    let dest = dir.path().join("out.bin");
    // Flip a payload byte of the first block. One stream, so which stream
    // carries that block does not depend on scheduling.
    let wrap: StreamWrap = Arc::new(|_, s: BoxStream| -> BoxStream {
        Box::new(CorruptAt::new(s, HEADER_LEN as u64 + 1000))
    });
    let (sent, received) = copy(&src, &dest, params(1, ChecksumAlg::Md5), Some(wrap))
        .await
        .unwrap();
    assert_eq!(content_difference(&dest, &data), None);
    assert_eq!(received.blocks_corrupt, 1);
    assert_eq!(received.blocks_retransmitted, 1);
    assert_eq!(sent.blocks_retransmitted, 1);
    assert_eq!(received.files[0].digest, digest_of(ChecksumAlg::Md5, &data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_dies_mid_transfer_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    // Enough blocks that every stream gets some whatever the scheduling, and
    // stream 2 breaks inside its very first block, so a block is torn for sure.
    let data = fresh_random_file(&src, 96 * BS as usize + 7);
    let dest = dir.path().join("out.bin");
    let wrap: StreamWrap = Arc::new(|k, s: BoxStream| -> BoxStream {
        if k == 2 {
            Box::new(BreakAfter::new(s, 500))
        } else {
            s
        }
    });
    let (sent, received) = copy(&src, &dest, params(4, ChecksumAlg::Xxh3), Some(wrap))
        .await
        .unwrap();
    assert_eq!(content_difference(&dest, &data), None);
    assert!(sent.blocks_retransmitted >= 1, "the torn block is re-sent");
    assert_eq!(
        received.per_stream_bytes[2], 0,
        "stream 2 delivered nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fills_up_is_a_clear_error_and_leaves_no_partial_file_at_a_final_name() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let small = fresh_random_file(&src.join("a-small.bin"), 100_000);
    fresh_random_file(&src.join("b-big.bin"), 4 << 20);
    let dest = dir.path().join("dest");
    let source = Arc::new(FsSource::new(Root::Ambient, vec![src.clone()], true));
    // Room for the small file and a quarter of the big one.
    let sink = FsSink::new(Root::Ambient, dest.clone(), 1).unwrap();
    let sink = Arc::new(FillsUp::new(sink, 1 << 20));
    let e = local::copy(
        source,
        sink,
        params(2, ChecksumAlg::Xxh3),
        Arc::new(Progress::default()),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
    assert!(e.to_string().contains("no space left on device"), "{e}");
    assert!(
        !dest.join("b-big.bin").exists(),
        "no partial file at its final name"
    );
    // What did arrive under a final name is whole.
    let arrived = if dest.exists() { walk(&dest) } else { vec![] };
    for path in arrived {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_file() && !name.starts_with('.') {
            assert_eq!(name, "a-small.bin");
            assert_eq!(content_difference(&path, &small), None);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_digest_algorithm_agrees_with_a_one_shot_digest() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    let data = fresh_random_file(&src, 3 * BS as usize + 99);
    for alg in ChecksumAlg::ALL {
        let dest = dir.path().join(format!("out-{}", alg.name()));
        let (_, received) = copy(&src, &dest, params(3, alg), None).await.unwrap();
        assert_eq!(
            received.files[0].digest,
            digest_of(alg, &data),
            "{}",
            alg.name()
        );
        assert_eq!(content_difference(&dest, &data), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safe_mode_rejects_blocks_under_the_wrong_key() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    let data = fresh_random_file(&src, 2 * BS as usize);
    let dest = dir.path().join("out.bin");
    let mut p = params(1, ChecksumAlg::Blake3);
    p.block_check = BlockCheck::KeyedBlake3([7; 32]);
    let (_, received) = copy(&src, &dest, p.clone(), None).await.unwrap();
    assert_eq!(content_difference(&dest, &data), None);
    assert_eq!(received.blocks_corrupt, 0);

    // A receiver with another key sees every block as forged and gives up.
    let source = Arc::new(FsSource::new(Root::Ambient, vec![src.clone()], false));
    let sink = Arc::new(FsSink::new(Root::Ambient, dir.path().join("forged.bin"), 1).unwrap());
    let (ca, cb) = tokio::io::duplex(1 << 16);
    let (da, db) = tokio::io::duplex(1 << 20);
    let mut q = p.clone();
    q.block_check = BlockCheck::KeyedBlake3([8; 32]);
    let s = tern_engine::transfer::run_sender(
        tern_engine::transfer::Control::new(Box::new(ca)),
        vec![Joined::pipe(0, Box::new(da))],
        StreamSupply::Fixed,
        source,
        p,
        Arc::new(Progress::default()),
    );
    let r = tern_engine::transfer::run_receiver(
        tern_engine::transfer::Control::new(Box::new(cb)),
        vec![Joined::pipe(0, Box::new(db))],
        StreamSupply::Fixed,
        sink,
        q,
        Arc::new(Progress::default()),
    );
    let (s, r) = tokio::join!(s, r);
    assert_eq!(r.unwrap_err().kind(), tern_engine::ErrorKind::Integrity);
    assert!(s.is_err());
    assert!(
        !dir.path().join("forged.bin").exists(),
        "nothing at the final name"
    );
    assert!(
        dir.path()
            .join(tern_engine::fsio::partial_name("forged.bin".as_ref()))
            .exists(),
        "partial kept for resume"
    );
}

/// A transport that, like TLS, keeps written bytes in its own buffer until
/// flushed.
struct HoldUntilFlush {
    inner: BoxStream,
    held: Vec<u8>,
}

impl tokio::io::AsyncWrite for HoldUntilFlush {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.held.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        while !this.held.is_empty() {
            let n =
                std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_write(cx, &this.held))?;
            this.held.drain(..n);
        }
        std::pin::Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tokio::io::AsyncRead for HoldUntilFlush {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_tls_tail_of_last_block_held_unflushed_hung_the_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    let data = fresh_random_file(&src, 3 * BS as usize + 5);
    let dest = dir.path().join("out.bin");
    let wrap: StreamWrap = Arc::new(|_, s: BoxStream| -> BoxStream {
        Box::new(HoldUntilFlush {
            inner: s,
            held: Vec::new(),
        })
    });
    let copied = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        copy(&src, &dest, params(2, ChecksumAlg::Xxh3), Some(wrap)),
    )
    .await
    .expect("the transfer must not wait for bytes the sender never flushed");
    copied.unwrap();
    assert_eq!(content_difference(&dest, &data), None);
}

/// Text-like bytes that compress well.
fn compressible(len: usize) -> Vec<u8> {
    let words = ["muon ", "jet ", "vertex ", "track ", "energy 13.6 TeV\n"];
    let mut out = Vec::with_capacity(len);
    let mut x = 1u32;
    while out.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        out.extend_from_slice(words[(x >> 16) as usize % words.len()].as_bytes());
    }
    out.truncate(len);
    out
}

fn compression_of(stats: &TransferStats) -> tern_engine::compress::CompressionStats {
    stats.compression.clone().expect("compression is counted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_blocks_arrive_identical_and_are_counted_on_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("text.log");
    let data = compressible(6 * BS as usize + 1234);
    std::fs::write(&src, &data).unwrap();
    let noise_src = dir.path().join("noise.bin");
    let noise = fresh_random_file(&noise_src, 3 * BS as usize);
    for mode in [Compression::Zstd, Compression::Lz4] {
        let mut p = params(3, ChecksumAlg::Xxh3);
        p.compression = mode;
        let dest = dir.path().join(format!("text-{}", mode.name()));
        let (sent, received) = copy(&src, &dest, p.clone(), None).await.unwrap();
        assert_eq!(content_difference(&dest, &data), None, "{mode:?}");
        let (s, r) = (compression_of(&sent), compression_of(&received));
        assert_eq!(s.codec(), mode.name());
        assert_eq!(s.blocks_zstd + s.blocks_lz4, 7, "every block shrank");
        assert_eq!((s.blocks_raw, s.blocks_not_shrunk), (0, 0));
        assert_eq!(s.bytes_raw, data.len() as u64);
        assert!(s.bytes_wire * 3 < s.bytes_raw, "{s:?}");
        assert_eq!(
            (r.bytes_raw, r.bytes_wire, r.blocks_zstd, r.blocks_lz4),
            (s.bytes_raw, s.bytes_wire, s.blocks_zstd, s.blocks_lz4),
            "the receiver counted what the sender sent"
        );
        assert_eq!(received.bytes, data.len() as u64);

        let dest = dir.path().join(format!("noise-{}", mode.name()));
        let (sent, _) = copy(&noise_src, &dest, p, None).await.unwrap();
        assert_eq!(content_difference(&dest, &noise), None);
        let s = compression_of(&sent);
        assert_eq!(s.codec(), "none", "random bytes never shrink: {s:?}");
        assert_eq!((s.blocks_raw, s.blocks_not_shrunk), (3, 3));
        assert_eq!(s.bytes_wire, s.bytes_raw);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_compressed_block_is_detected_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("text.log");
    let data = compressible(4 * BS as usize);
    std::fs::write(&src, &data).unwrap();
    let dest = dir.path().join("out.log");
    let mut p = params(1, ChecksumAlg::Xxh3);
    p.compression = Compression::Zstd;
    // A byte inside the first block's compressed bytes (past its header
    // and its 4-byte raw length).
    let wrap: StreamWrap = Arc::new(|_, s: BoxStream| -> BoxStream {
        Box::new(CorruptAt::new(s, HEADER_LEN as u64 + 4 + 40))
    });
    let (sent, received) = copy(&src, &dest, p, Some(wrap)).await.unwrap();
    assert_eq!(content_difference(&dest, &data), None);
    assert_eq!(received.blocks_corrupt, 1);
    assert_eq!(sent.blocks_retransmitted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compression_gives_up_on_data_that_does_not_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("noise.bin");
    let data = fresh_random_file(&src, 64 * BS as usize);
    let dest = dir.path().join("out.bin");
    let mut p = params(3, ChecksumAlg::Xxh3);
    p.compression = Compression::Auto;
    let (sent, _) = copy(&src, &dest, p, None).await.unwrap();
    assert_eq!(content_difference(&dest, &data), None);
    let s = compression_of(&sent);
    assert_eq!(s.blocks_raw, 64);
    // A few blocks before giving up (three streams try at once), then one
    // probe in PROBE_EVERY.
    let tried = s.blocks_not_shrunk;
    let bound = u64::from(GIVE_UP_AFTER) + 3 + 64 / PROBE_EVERY;
    assert!(
        tried >= u64::from(GIVE_UP_AFTER) && tried <= bound,
        "{tried} > {bound}"
    );
}

fn set_mtime(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    f.set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

/// Copies the tree `src` into the directory `dest` under `skip`; returns
/// the paths sent and skipped.
async fn copy_skipping(src: &Path, dest: &Path, skip: SkipExisting) -> (Vec<String>, Vec<String>) {
    let mut p = params(2, ChecksumAlg::Blake3);
    p.skip_existing = skip;
    let (sent, received) = copy(src, dest, p, None).await.unwrap();
    let names = |files: &[tern_engine::session::FileOutcome]| {
        let mut n: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
        n.sort();
        n
    };
    assert_eq!(names(&sent.files), names(&received.files));
    assert_eq!(names(&sent.skipped), names(&received.skipped));
    let moved: u64 = received.per_stream_bytes.iter().sum();
    let expected: u64 = received.files.iter().map(|f| f.size).sum();
    assert_eq!(moved, expected, "skipped files sent no block");
    (names(&received.files), names(&received.skipped))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_already_at_the_destination_are_skipped_by_each_policy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("run");
    std::fs::create_dir(&src).unwrap();
    fresh_random_file(&src.join("a"), 3 * BS as usize + 5);
    fresh_random_file(&src.join("b"), 1000);
    fresh_random_file(&src.join("c"), 2 * BS as usize);
    for f in ["a", "b", "c"] {
        set_mtime(&src.join(f), 1_600_000_000);
    }
    let dest = dir.path().join("out");
    std::fs::create_dir(&dest).unwrap();
    let all = vec!["run/a".to_string(), "run/b".into(), "run/c".into()];
    let none: Vec<String> = vec![];
    use SkipExisting::*;
    assert_eq!(
        copy_skipping(&src, &dest, Mtime).await,
        (all.clone(), none.clone())
    );
    assert_eq!(
        copy_skipping(&src, &dest, Mtime).await,
        (none.clone(), all.clone())
    );
    assert_eq!(
        copy_skipping(&src, &dest, Never).await,
        (all.clone(), none.clone())
    );

    // b changes but keeps its size and mtime: only a digest tells.
    let new_b = fresh_random_file(&src.join("b"), 1000);
    set_mtime(&src.join("b"), 1_600_000_000);
    assert_eq!(copy_skipping(&src, &dest, Size).await.0, none);
    assert_eq!(copy_skipping(&src, &dest, Mtime).await.0, none);
    assert_eq!(
        copy_skipping(&src, &dest, Digest).await,
        (
            vec!["run/b".to_string()],
            vec!["run/a".to_string(), "run/c".into()]
        )
    );
    assert_eq!(content_difference(dest.join("run/b"), &new_b), None);

    // a is touched, not changed: mtime sends it, a digest keeps it.
    set_mtime(&src.join("a"), 1_700_000_000);
    assert_eq!(copy_skipping(&src, &dest, Digest).await.0, none);
    assert_eq!(
        copy_skipping(&src, &dest, Mtime).await.0,
        vec!["run/a".to_string()]
    );
    // c grows: every policy sends it.
    fresh_random_file(&src.join("c"), 2 * BS as usize + 1);
    assert_eq!(
        copy_skipping(&src, &dest, Size).await.0,
        vec!["run/c".to_string()]
    );
    let leftovers: Vec<_> = walk(&dest).into_iter().filter(|p| is_ours(p)).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A source whose files named in `unreadable` cannot be opened (as a file
/// that vanished or lost its permissions after it was listed), and which
/// counts the bytes read from the others.
struct TestSource {
    inner: FsSource,
    unreadable: Vec<&'static str>,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl TestSource {
    fn new(src: &Path, unreadable: Vec<&'static str>) -> TestSource {
        TestSource {
            inner: FsSource::new(Root::Ambient, vec![src.to_path_buf()], true),
            unreadable,
            read: Arc::default(),
        }
    }
}

/// Counts what it reads into `read`.
struct CountingRead {
    inner: Arc<dyn tern_engine::fsio::BlockRead>,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl tern_engine::fsio::BlockRead for CountingRead {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.read
            .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.inner.read_at(offset, buf)
    }
}

impl tern_engine::fsio::Source for TestSource {
    fn list(&self) -> tern_engine::Result<Vec<tern_engine::fsio::SourceItem>> {
        self.inner.list()
    }
    fn open(
        &self,
        item: &tern_engine::fsio::SourceItem,
    ) -> tern_engine::Result<Arc<dyn tern_engine::fsio::BlockRead>> {
        let name = item
            .local
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if self.unreadable.contains(&name) {
            let denied = std::io::Error::from_raw_os_error(libc::EACCES);
            return Err(tern_engine::Error::io("open", &item.local, denied));
        }
        Ok(Arc::new(CountingRead {
            inner: self.inner.open(item)?,
            read: self.read.clone(),
        }))
    }
    fn digests(&self) -> bool {
        true
    }
}

/// A file that cannot be read after it was listed is reported, and the
/// rest of the tree arrives: the copy neither fails nor waits forever for
/// the block that was never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_file_is_reported_and_the_rest_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("run");
    std::fs::create_dir(&src).unwrap();
    for name in ["a", "b", "c"] {
        fresh_random_file(&src.join(name), 3 * BS as usize + 7);
    }
    let dest = dir.path().join("copy");
    for streams in [1, 3] {
        let _ = std::fs::remove_dir_all(&dest);
        let source = Arc::new(TestSource::new(&src, vec!["b"]));
        let sink = Arc::new(FsSink::new(Root::Ambient, dest.clone(), 1).unwrap());
        // As tern cp runs it: each file waits for the receiver's look at
        // the destination, then its digest and its blocks start together.
        let mut p = params(streams, ChecksumAlg::Xxh3);
        p.skip_existing = SkipExisting::Mtime;
        let copied = local::copy(source, sink, p, Arc::new(Progress::default()), None);
        let (sent, received) = tokio::time::timeout(std::time::Duration::from_secs(60), copied)
            .await
            .expect("the copy ended")
            .unwrap();
        let mut done: Vec<&str> = received.files.iter().map(|f| f.path.as_str()).collect();
        done.sort();
        assert_eq!(done, vec!["run/a", "run/c"], "{streams} streams");
        let failed: Vec<String> = sent.failed.iter().map(|f| f.path.display()).collect();
        assert_eq!(failed, vec!["run/b"]);
        assert_eq!(received.failed.len(), 1);
        assert!(!dest.join("b").exists());
        assert!(std::fs::read_dir(&dest).unwrap().all(|e| {
            let n = e.unwrap().file_name();
            !tern_engine::fsio::is_internal(std::os::unix::ffi::OsStrExt::as_bytes(n.as_os_str()))
        }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_reads_every_byte_once_whatever_the_skip_policy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tree");
    std::fs::create_dir_all(src.join("many")).unwrap();
    let mut files = Vec::new();
    for i in 0..40 {
        let name = format!("many/{i}");
        files.push((
            name.clone(),
            fresh_random_file(&src.join(name), 3000 + i * 17),
        ));
    }
    files.push((
        "big".into(),
        fresh_random_file(&src.join("big"), 9 * BS as usize + 77),
    ));
    let total: u64 = files.iter().map(|(_, data)| data.len() as u64).sum();
    for skip in [SkipExisting::Never, SkipExisting::Size, SkipExisting::Mtime] {
        let source = Arc::new(TestSource::new(&src, vec![]));
        let read = source.read.clone();
        let dest = dir.path().join(format!("copy-{skip:?}"));
        let sink = Arc::new(FsSink::new(Root::Ambient, dest.clone(), 1).unwrap());
        let mut p = params(3, ChecksumAlg::Xxh3);
        p.skip_existing = skip;
        local::copy(source, sink, p, Arc::new(Progress::default()), None)
            .await
            .unwrap();
        for (name, data) in &files {
            assert_eq!(content_difference(dest.join(name), data), None, "{skip:?}");
        }
        assert_eq!(
            read.load(std::sync::atomic::Ordering::Relaxed),
            total,
            "{skip:?}: the digest is folded from the blocks read for sending"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_block_waits_on_a_slow_disk_is_not_given_up_as_stalled() {
    // One block on one stream, whose write takes three times the stall
    // timeout. The stream then waits for nothing more while its block is
    // counted only once written: that is the disk, not a stall.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let data = fresh_random_file(&src, BS as usize);
    let dest = dir.path().join("dest.bin");
    let source = Arc::new(FsSource::new(Root::Ambient, vec![src.clone()], true));
    let sink = FsSink::new(Root::Ambient, dest.clone(), 1).unwrap();
    let sink = Arc::new(SlowDisk::new(sink, 0, std::time::Duration::from_secs(3)));
    let mut p = params(1, ChecksumAlg::Xxh3);
    p.stall_timeout = Some(std::time::Duration::from_secs(1));
    let (_, received) = local::copy(source, sink, p, Arc::new(Progress::default()), None)
        .await
        .unwrap();
    assert_eq!(content_difference(&dest, &data), None);
    assert_eq!(received.streams_stalled, 0, "{received:?}");
}
