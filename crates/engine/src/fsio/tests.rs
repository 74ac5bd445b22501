//! Source and sink conformance, and the daemon root's confinement.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::ErrorKind;

/// Every source: what `list` announces can be opened and read whole.
fn source_conformance(source: &dyn Source) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for item in source.list().unwrap() {
        if let SendEntry::File(meta) = &item.entry {
            assert!(!meta.path.starts_with('/'), "{} is relative", meta.path);
            let reader = source.open(&item).unwrap();
            // Read block by block, as stream workers do.
            let mut data = vec![0u8; meta.size as usize];
            for (i, block) in data.chunks_mut(1024).enumerate() {
                reader.read_at(i as u64 * 1024, block).unwrap();
            }
            let mut tail = vec![0u8; 1];
            assert!(
                meta.size == 0
                    || reader.read_at(meta.size, &mut tail).is_err()
                    || reader.is_constant()
            );
            files.push((meta.path.clone(), data));
        }
    }
    files
}

/// Every sink: blocks written out of order and committed read back (where
/// the sink keeps data) as written.
fn sink_conformance(sink: &dyn Sink, name: &str) -> Arc<dyn BlockWrite> {
    let meta = FileMeta {
        file_id: 1,
        path: name.into(),
        size: 10,
        mode: 0o640,
        mtime_s: 1_600_000_000,
        mtime_ns: 5,
    };
    let (w, kept) = sink.create_file(&meta, 5, true).unwrap();
    assert!(kept.is_empty());
    w.write_at(5, b"56789").unwrap();
    w.write_at(0, b"01234").unwrap();
    if sink.digests() {
        let mut back = [0u8; 10];
        w.read_at(0, &mut back).unwrap();
        assert_eq!(&back, b"0123456789");
    }
    w.commit().unwrap();
    w
}

#[test]
fn file_source_lists_trees_in_order_and_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("run");
    std::fs::create_dir_all(top.join("b/c")).unwrap();
    std::fs::write(top.join("a.dat"), b"alpha").unwrap();
    std::fs::write(top.join("b/c/d.dat"), b"delta!").unwrap();
    std::fs::create_dir(top.join("empty")).unwrap();
    let src = FsSource::new(Root::Ambient, vec![top.clone()], true);
    let files = source_conformance(&src);
    assert_eq!(
        files,
        vec![
            ("run/a.dat".to_string(), b"alpha".to_vec()),
            ("run/b/c/d.dat".to_string(), b"delta!".to_vec())
        ]
    );
    let dirs: Vec<String> = src
        .list()
        .unwrap()
        .into_iter()
        .filter_map(|i| match i.entry {
            SendEntry::Dir { path, .. } => Some(path),
            _ => None,
        })
        .collect();
    assert_eq!(dirs, vec!["run", "run/b", "run/b/c", "run/empty"]);
    let flat = FsSource::new(Root::Ambient, vec![top], false);
    assert_eq!(flat.list().unwrap_err().kind(), ErrorKind::Usage);
}

#[test]
fn generated_source_is_constant_and_sized() {
    let src = GenSource::new(3000, 1024);
    let files = source_conformance(&src);
    assert_eq!(files[0].1.len(), 3000);
    assert_eq!(files[0].1[..1024], files[0].1[1024..2048], "blocks repeat");
    assert_ne!(
        files[0].1[..16],
        [0u8; 16],
        "the pattern is random, not zeros"
    );
}

#[test]
fn file_sink_renames_only_on_commit_and_keeps_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FsSink::new(Root::Ambient, dir.path().join("out.dat"), 1).unwrap();
    let meta = FileMeta {
        file_id: 1,
        path: "src.dat".into(),
        size: 3,
        mode: 0o640,
        mtime_s: 1_600_000_000,
        mtime_ns: 0,
    };
    let (w, _) = sink.create_file(&meta, 1 << 20, true).unwrap();
    w.write_at(0, b"abc").unwrap();
    assert!(
        !dir.path().join("out.dat").exists(),
        "nothing at the final name before commit"
    );
    assert!(dir.path().join(".out.dat.tern-partial").exists());
    assert!(
        !dir.path().join(".out.dat.tern-partial.journal").exists(),
        "one block: nothing to resume, no journal"
    );
    w.commit().unwrap();
    let m = std::fs::metadata(dir.path().join("out.dat")).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o640);
    assert_eq!(m.mtime(), 1_600_000_000);
    assert!(!dir.path().join(".out.dat.tern-partial").exists());
    sink_conformance(&sink, "src.dat");
    sink_conformance(&DiscardSink, "x");
}

#[test]
fn sink_resolves_destinations_like_scp() {
    let dir = tempfile::tempdir().unwrap();
    // Existing directory: sources go inside it.
    let sink = FsSink::new(Root::Ambient, dir.path().to_path_buf(), 2).unwrap();
    sink.create_dir("tree", 0o755).unwrap();
    sink_conformance(&sink, "tree/f");
    assert!(dir.path().join("tree/f").is_file());
    // New name, one source tree: the tree is renamed.
    let sink = FsSink::new(Root::Ambient, dir.path().join("copy"), 1).unwrap();
    sink.create_dir("tree", 0o755).unwrap();
    sink_conformance(&sink, "tree/f");
    assert!(dir.path().join("copy/f").is_file());
    // Several sources into something that is not a directory.
    let err = FsSink::new(Root::Ambient, dir.path().join("nope"), 2).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Usage);
    // Parent missing.
    let err = FsSink::new(Root::Ambient, dir.path().join("a/b/c"), 1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn peer_paths_that_escape_are_refused() {
    for bad in ["../x", "a/../../x", "/etc/passwd", "a/..", ".."] {
        let err = checked_relative(bad, true).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permission, "{bad}");
    }
    for odd in ["a//b", "./a", ""] {
        assert!(checked_relative(odd, false).is_err(), "{odd}");
    }
    assert_eq!(
        checked_relative("a/b/", false).unwrap(),
        PathBuf::from("a/b")
    );
    assert_eq!(checked_relative(".", true).unwrap(), PathBuf::from("."));
}

#[test]
fn confined_root_refuses_symlinks_that_leave_it() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    let root_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root_dir.path().join("escape")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        root_dir.path().join("secret-link"),
    )
    .unwrap();
    std::fs::write(root_dir.path().join("inside"), b"ok").unwrap();
    let root = Root::confined(root_dir.path()).unwrap();

    let read = FsSource::new(root.clone(), vec!["escape/secret".into()], false);
    assert_eq!(read.list().unwrap_err().kind(), ErrorKind::Permission);
    let read = FsSource::new(root.clone(), vec!["secret-link".into()], false);
    assert_eq!(read.list().unwrap_err().kind(), ErrorKind::Permission);
    let ok = FsSource::new(root.clone(), vec!["inside".into()], false);
    assert_eq!(source_conformance(&ok)[0].1, b"ok");

    // Writing through the escaping symlink is refused too.
    let sink = FsSink::new(root.clone(), "escape".into(), 1);
    let refused = match sink {
        Err(e) => e.kind() == ErrorKind::Permission || e.kind() == ErrorKind::NotFound,
        Ok(sink) => sink
            .create_file(
                &FileMeta {
                    file_id: 1,
                    path: "x/evil".into(),
                    size: 1,
                    mode: 0o644,
                    mtime_s: 0,
                    mtime_ns: 0,
                },
                1 << 20,
                true,
            )
            .is_err(),
    };
    assert!(refused);
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "nothing written outside"
    );
}

#[test]
fn a_partial_file_is_resumed_only_for_the_same_version_of_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FsSink::new(Root::Ambient, dir.path().join("big.dat"), 1).unwrap();
    let meta = FileMeta {
        file_id: 1,
        path: "big.dat".into(),
        size: 10,
        mode: 0o644,
        mtime_s: 1_600_000_000,
        mtime_ns: 7,
    };
    let (w, kept) = sink.create_file(&meta, 4, true).unwrap();
    assert!(kept.is_empty());
    w.write_at(0, b"0123").unwrap();
    w.write_at(8, b"89").unwrap();
    drop(w); // the transfer died: partial and journal stay
    let partial = dir.path().join(".big.dat.tern-partial");
    assert!(partial.exists());
    assert!(dir.path().join(".big.dat.tern-partial.journal").exists());

    let (w, kept) = sink.create_file(&meta, 4, true).unwrap();
    assert_eq!(kept, vec![(0, 4), (8, 2)]);
    w.write_at(4, b"4567").unwrap();
    let mut back = [0u8; 10];
    w.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"0123456789", "kept bytes are still there");
    drop(w);

    // Without resume, or for a changed source, or another block size: start over.
    assert!(sink.create_file(&meta, 4, false).unwrap().1.is_empty());
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), 0);
    let (w, _) = sink.create_file(&meta, 4, true).unwrap();
    w.write_at(0, b"0123").unwrap();
    drop(w);
    let changed = FileMeta {
        mtime_ns: 8,
        ..meta.clone()
    };
    assert!(sink.create_file(&changed, 4, true).unwrap().1.is_empty());
    let (w, _) = sink.create_file(&meta, 4, true).unwrap();
    w.write_at(0, b"0123").unwrap();
    drop(w);
    assert!(sink.create_file(&meta, 8, true).unwrap().1.is_empty());
    // Committed: the journal goes with the partial.
    let (w, _) = sink.create_file(&meta, 4, true).unwrap();
    w.write_at(0, b"0123456789").unwrap();
    w.commit().unwrap();
    assert!(!partial.exists());
    assert!(!dir.path().join(".big.dat.tern-partial.journal").exists());
    assert_eq!(
        std::fs::read(dir.path().join("big.dat")).unwrap(),
        b"0123456789"
    );
}
