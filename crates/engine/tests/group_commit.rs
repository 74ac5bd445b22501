//! Group commit keeps its promise when its flush fails: small files are
//! flushed as a group before any of them is renamed into place, so a group
//! whose flush fails leaves every one of its files at its partial name and
//! the session fails; the groups before it are complete at their final
//! names; a second run completes the tree.
//!
//! The flush failure is injected (`fault-injection` feature) where a disk
//! error would surface. What this proves: no rename happens before the
//! flush succeeded (a commit that renamed first would leave the failed
//! group's files at their final names, and this test fails). What it
//! cannot prove: that a successful flush really reached the platter (see
//! `crates/tern/tests/crash_commit.rs` for kills and simulated power cuts).
#![cfg(feature = "fault-injection")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern_engine::fsio::{FsSink, FsSource, Root, is_internal};
use tern_engine::local;
use tern_engine::store::commit::fail_flush;
use tern_engine::transfer::{Progress, TransferParams};
use tern_proto::ChecksumAlg;
use tern_testkit::files::fresh_random_file;

const BS: u32 = 256 << 10;

async fn copy(src: &Path, dest: &Path) -> tern_engine::Result<()> {
    let source = Arc::new(FsSource::new(Root::Ambient, vec![src.to_path_buf()], true));
    let sink = Arc::new(FsSink::new(Root::Ambient, dest.to_path_buf(), 1)?);
    let mut p = TransferParams::new(2, BS, ChecksumAlg::Xxh3);
    p.max_files_in_flight = 64;
    local::copy(source, sink, p, Arc::new(Progress::default()), None)
        .await
        .map(|_| ())
}

/// Every regular file beneath `dir`, by path relative to it.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_group_flush_leaves_its_files_at_partial_names_only() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tree");
    let mut want = BTreeMap::new();
    for i in 0..300usize {
        let rel = PathBuf::from(format!("d{}/f{i:03}", i % 4));
        std::fs::create_dir_all(src.join(&rel).parent().unwrap()).unwrap();
        let data = fresh_random_file(&src.join(&rel), 1 + (i * 7919) % (40 << 10));
        want.insert(rel, data);
    }

    // The first group's flush fails: no file may be at its final name,
    // and the group's files wait at their partial names.
    let first = dir.path().join("first");
    fail_flush(Some(1));
    let err = copy(&src, &first).await.expect_err("the flush failed");
    fail_flush(None);
    assert!(err.to_string().contains("injected fault"), "{err}");
    let got = files(&first);
    let placed: Vec<_> = got
        .keys()
        .filter(|r| !is_internal(r.file_name().unwrap().as_encoded_bytes()))
        .collect();
    assert!(
        placed.is_empty(),
        "files at their final names though no flush succeeded: {placed:?}"
    );
    assert!(
        got.len() > 1,
        "the failed group's files wait at their partial names"
    );

    // The second group's flush fails: the first group is in place.
    let dest = dir.path().join("copy");
    fail_flush(Some(2));
    let err = copy(&src, &dest).await.expect_err("the flush failed");
    fail_flush(None);
    assert!(
        err.to_string().contains("injected fault"),
        "the session fails with the flush's error, not another: {err}"
    );
    let got = files(&dest);
    let (mut at_final, mut missing) = (0, 0);
    for (rel, data) in &want {
        match got.get(rel) {
            Some(there) => {
                assert!(
                    there == data,
                    "{}: at its final name but not its content",
                    rel.display()
                );
                at_final += 1;
            }
            None => missing += 1,
        }
    }
    for rel in got.keys() {
        let name = rel.file_name().unwrap().as_encoded_bytes();
        assert!(
            want.contains_key(rel) || is_internal(name),
            "{}: neither a source file nor a partial file",
            rel.display()
        );
    }
    assert!(
        at_final > 0,
        "the first group was committed before the failure"
    );
    assert!(
        missing > 0,
        "the failed group's files are not at their final names"
    );
    let partials = got
        .keys()
        .filter(|r| is_internal(r.file_name().unwrap().as_encoded_bytes()))
        .count();
    assert!(
        partials > 0,
        "the failed group's files wait at their partial names"
    );

    // Nothing failing, the same copy completes.
    copy(&src, &dest).await.expect("the second run completes");
    let got = files(&dest);
    assert!(
        got == want,
        "the tree arrived complete and nothing else is left"
    );
}
