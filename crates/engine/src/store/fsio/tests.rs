//! Source and sink conformance, and the daemon root's confinement.

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::ErrorKind;

/// Every source: what `list` announces can be opened and read whole.
fn source_conformance(source: &dyn Source) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for item in source.list().unwrap() {
        if let SendEntry::File(meta) = &item.entry {
            assert!(!meta.path.0.starts_with(b"/"), "{} is relative", meta.path);
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
            files.push((meta.path.display(), data));
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
            SendEntry::Entry(EntryMeta {
                path,
                kind: EntryKind::Dir,
                ..
            }) => Some(path.display()),
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
    let partial = dir.path().join(partial_name(OsStr::new("out.dat")));
    assert!(partial.exists());
    assert!(
        !dir.path()
            .join(journal_name(OsStr::new("out.dat")))
            .exists(),
        "one block: nothing to resume, no journal"
    );
    w.commit().unwrap();
    let m = std::fs::metadata(dir.path().join("out.dat")).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o640);
    assert_eq!(m.mtime(), 1_600_000_000);
    assert!(!partial.exists());
    sink_conformance(&sink, "src.dat");
    sink_conformance(&DiscardSink, "x");
}

#[test]
fn sink_resolves_destinations_like_scp() {
    let dir = tempfile::tempdir().unwrap();
    // Existing directory: sources go inside it.
    let sink = FsSink::new(Root::Ambient, dir.path().to_path_buf(), 2).unwrap();
    sink.create_dir(&"tree".into(), 0o755).unwrap();
    sink_conformance(&sink, "tree/f");
    assert!(dir.path().join("tree/f").is_file());
    // New name, one source tree: the tree is renamed.
    let sink = FsSink::new(Root::Ambient, dir.path().join("copy"), 1).unwrap();
    sink.create_dir(&"tree".into(), 0o755).unwrap();
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
    let partial = dir.path().join(partial_name(OsStr::new("big.dat")));
    let journal = dir.path().join(journal_name(OsStr::new("big.dat")));
    assert!(partial.exists());
    assert!(journal.exists());

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
    assert!(!journal.exists());
    assert_eq!(
        std::fs::read(dir.path().join("big.dat")).unwrap(),
        b"0123456789"
    );
}

#[test]
fn two_copies_to_one_name_exclude_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FsSink::new(Root::Ambient, dir.path().join("one.dat"), 1).unwrap();
    let meta = file_meta(b"one.dat", 10, 0o644);
    let other = FileMeta {
        mtime_ns: 1,
        ..meta.clone()
    };
    let refused = |r: Result<Created>| {
        let e = r.err().expect("a second copy to the name is refused");
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(e.to_string().contains("another copy to this name"), "{e}");
    };
    let (first, _) = sink.create_file(&meta, 4, true).unwrap();
    first.write_at(0, b"0123").unwrap();
    // The same source again (a retry overlapping the first run), another
    // version of it, or no resume: none may take the partial file over.
    refused(sink.create_file(&meta, 4, true));
    refused(sink.create_file(&other, 4, true));
    refused(sink.create_file(&meta, 4, false));
    first.write_at(4, b"456789").unwrap();
    first.commit().unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("one.dat")).unwrap(),
        b"0123456789"
    );

    // A partial file whose session ended is free to resume.
    let (left, _) = sink.create_file(&meta, 4, true).unwrap();
    left.write_at(0, b"abcd").unwrap();
    drop(left);
    let (again, kept) = sink.create_file(&meta, 4, true).unwrap();
    assert_eq!(kept, vec![(0, 4)]);
    // A file put at the partial name behind its writer's back (by hand,
    // or by a tern before locks) is neither renamed into place nor removed.
    let partial = dir.path().join(partial_name(OsStr::new("one.dat")));
    std::fs::remove_file(&partial).unwrap();
    std::fs::write(&partial, b"not theirs").unwrap();
    again.write_at(4, b"efghij").unwrap();
    let e = again.commit().unwrap_err();
    assert!(e.to_string().contains("another copy to this name"), "{e}");
    assert_eq!(
        std::fs::read(dir.path().join("one.dat")).unwrap(),
        b"0123456789"
    );
    again.discard().unwrap();
    assert_eq!(std::fs::read(&partial).unwrap(), b"not theirs");
    // A partial file made at the name between a look and a create is
    // another copy's: never removed to make room.
    let e = beneath::create_exclusive(
        std::fs::File::open(dir.path()).unwrap(),
        partial.file_name().unwrap(),
    )
    .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    assert_eq!(std::fs::read(&partial).unwrap(), b"not theirs");
}

fn file_meta(path: &[u8], size: u64, mode: u32) -> FileMeta {
    FileMeta {
        file_id: 1,
        path: RelPath(path.to_vec()),
        size,
        mode,
        mtime_s: -86_400,
        mtime_ns: 250_000_000,
    }
}

fn receive(sink: &FsSink, meta: &FileMeta, data: &[u8]) {
    let (w, _) = sink.create_file(meta, 1 << 20, true).unwrap();
    w.write_at(0, data).unwrap();
    w.commit().unwrap();
}

#[test]
fn special_bits_are_dropped_unless_this_end_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let plain = FsSink::new(Root::Ambient, dir.path().to_path_buf(), 2).unwrap();
    receive(&plain, &file_meta(b"suid", 3, 0o6755), b"abc");
    let m = std::fs::metadata(dir.path().join("suid")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    // Times before 1970 land as they were.
    assert_eq!((m.mtime(), m.mtime_nsec()), (-86_400, 250_000_000));
    let keeping = FsSink::new(Root::Ambient, dir.path().to_path_buf(), 2)
        .unwrap()
        .keep_special_bits(true);
    receive(&keeping, &file_meta(b"kept", 3, 0o4755), b"abc");
    let m = std::fs::metadata(dir.path().join("kept")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o4755);
    // A sender strips them too unless asked.
    std::fs::set_permissions(dir.path().join("kept"), Permissions::from_mode(0o4755)).unwrap();
    let mode_sent = |keep| {
        let src = FsSource::new(Root::Ambient, vec![dir.path().join("kept")], false)
            .keep_special_bits(keep);
        match &src.list().unwrap()[0].entry {
            SendEntry::File(m) => m.mode,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(mode_sent(false), 0o755);
    assert_eq!(mode_sent(true), 0o4755);
}

#[test]
fn names_are_bytes_and_temporary_names_fit_whatever_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FsSink::new(Root::Ambient, dir.path().to_path_buf(), 2).unwrap();
    let long = vec![b'x'; 255];
    for name in [&b"caf\xe9"[..], b"new\nline", b"-dash", &long] {
        receive(&sink, &file_meta(name, 2, 0o644), b"ok");
        let at = dir.path().join(OsStr::from_bytes(name));
        assert_eq!(std::fs::read(&at).unwrap(), b"ok", "{:?}", at);
        assert!(partial_name(OsStr::from_bytes(name)).len() < 64);
    }
    let src = FsSource::new(Root::Ambient, vec![dir.path().to_path_buf()], true);
    let mut names: Vec<Vec<u8>> = src
        .list()
        .unwrap()
        .into_iter()
        .filter_map(|i| match i.entry {
            SendEntry::File(m) => Some(m.path.0),
            _ => None,
        })
        .collect();
    names.sort();
    let top = dir.path().file_name().unwrap().as_bytes().to_vec();
    let mut want: Vec<Vec<u8>> = [&b"caf\xe9"[..], b"new\nline", b"-dash", &long]
        .iter()
        .map(|n| [&top[..], b"/", n].concat())
        .collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn partial_files_and_markers_are_never_listed_or_served() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("t");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("real"), b"r").unwrap();
    for internal in [
        partial_name(OsStr::new("x")),
        journal_name(OsStr::new("x")),
        OsString::from(".old.tern-partial"),
        OsString::from(RESUME_MARKER),
    ] {
        std::fs::write(top.join(&internal), b"secret").unwrap();
        let read = FsSource::new(Root::confined(&top).unwrap(), vec![internal.into()], false);
        assert_eq!(read.list().unwrap_err().kind(), ErrorKind::NotFound);
    }
    let src = FsSource::new(Root::Ambient, vec![top], true);
    let files: Vec<String> = source_conformance(&src).into_iter().map(|f| f.0).collect();
    assert_eq!(files, vec!["t/real"]);
}

#[test]
fn a_partial_file_changed_between_runs_keeps_only_its_intact_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FsSink::new(Root::Ambient, dir.path().join("f"), 1).unwrap();
    let meta = file_meta(b"f", 12, 0o644);
    let (w, _) = sink.create_file(&meta, 4, true).unwrap();
    w.write_at(0, b"0123").unwrap();
    w.write_at(4, b"4567").unwrap();
    drop(w);
    let partial = dir.path().join(partial_name(OsStr::new("f")));
    let mut bytes = std::fs::read(&partial).unwrap();
    bytes[5] = b'X';
    std::fs::write(&partial, &bytes).unwrap();
    let (_, kept) = sink.create_file(&meta, 4, true).unwrap();
    assert_eq!(kept, vec![(0, 4)], "the changed block is sent again");
}

#[test]
fn a_tree_resumes_into_the_directory_its_first_run_created() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("dest");
    let first = FsSink::new(Root::Ambient, dest.clone(), 1).unwrap();
    first.create_dir(&"tree".into(), 0o755).unwrap();
    assert!(dest.join(RESUME_MARKER).exists());
    drop(first); // the run died before finishing
    // The same command again: dest exists now, but it is the copy of
    // "tree", so entries of "tree" land in it, not below it.
    let again = FsSink::new(Root::Ambient, dest.clone(), 1).unwrap();
    again.create_dir(&"tree".into(), 0o755).unwrap();
    receive(&again, &file_meta(b"tree/f", 1, 0o644), b"1");
    assert!(dest.join("f").is_file());
    assert!(again.finish().is_empty());
    assert!(!dest.join(RESUME_MARKER).exists(), "done: the marker goes");
    // Another source into the existing directory goes below it, as cp does.
    let other = FsSink::new(Root::Ambient, dest.clone(), 1).unwrap();
    other.create_dir(&"tree".into(), 0o755).unwrap();
    receive(&other, &file_meta(b"tree/g", 1, 0o644), b"1");
    assert!(dest.join("tree/g").is_file());
}

#[test]
fn a_link_at_the_destination_is_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
    let sink = FsSink::new(Root::Ambient, dir.path().to_path_buf(), 2).unwrap();
    assert!(
        sink.create_file(&file_meta(b"sub/evil", 1, 0o644), 4, true)
            .is_err()
    );
    assert!(sink.create_dir(&"sub/d".into(), 0o755).is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn links_and_pipes_are_listed_as_themselves_and_made_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("t");
    std::fs::create_dir(&top).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", top.join("out")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        top.join("pipe"),
        FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o640),
        0,
    )
    .unwrap();
    let src = FsSource::new(Root::Ambient, vec![top], true);
    let entries: Vec<EntryMeta> = src
        .list()
        .unwrap()
        .into_iter()
        .filter_map(|i| match i.entry {
            SendEntry::Entry(e) => Some(e),
            _ => None,
        })
        .collect();
    let dest = dir.path().join("copy");
    let sink = FsSink::new(Root::Ambient, dest.clone(), 1).unwrap();
    for e in &entries {
        sink.create_entry(e).unwrap();
    }
    assert!(
        std::fs::symlink_metadata(dest.join("out")).is_err(),
        "links wait for the end"
    );
    assert!(sink.finish().is_empty());
    assert_eq!(
        std::fs::read_link(dest.join("out")).unwrap(),
        Path::new("/etc/hostname")
    );
    let pipe = std::fs::symlink_metadata(dest.join("pipe")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&pipe.file_type()));
    assert_eq!(pipe.permissions().mode() & 0o777, 0o640);
}

#[test]
fn paths_longer_than_path_max_are_listed_and_received() {
    let dir = tempfile::tempdir().unwrap();
    let name = "d".repeat(200);
    let depth = 25; // 25 × 201 bytes: past PATH_MAX (4096)
    let top = dir.path().join("deep");
    std::fs::create_dir(&top).unwrap();
    let mut fd = rustix::fs::open(
        &top,
        rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    for _ in 0..depth {
        rustix::fs::mkdirat(&fd, name.as_str(), rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(
            &fd,
            name.as_str(),
            rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
    }
    let leaf = rustix::fs::openat(
        &fd,
        "leaf",
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE,
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&leaf, b"deep").unwrap();
    let src = FsSource::new(Root::Ambient, vec![top], true);
    let items = src.list().unwrap();
    let dest = dir.path().join("copy");
    let sink = FsSink::new(Root::Ambient, dest, 1).unwrap();
    let mut files = 0;
    for item in &items {
        match &item.entry {
            SendEntry::Entry(e) => sink.create_entry(e).unwrap(),
            SendEntry::File(m) => {
                assert!(m.path.0.len() > 4096);
                let mut data = vec![0u8; m.size as usize];
                src.open(item).unwrap().read_at(0, &mut data).unwrap();
                receive(&sink, m, &data);
                files += 1;
            }
            SendEntry::Failed(f) => panic!("{f:?}"),
        }
    }
    assert_eq!(files, 1);
    assert!(sink.finish().is_empty());
}

/// Names another user (or a hostile peer) planted at the destination:
/// a resume marker or partial file that is not this user's is never
/// trusted, and a peer may not announce tern's own names at all.
#[test]
fn planted_markers_and_partials_are_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let sink = FsSink::new(Root::Ambient, shared.clone(), 1).unwrap();
    for planted in [".tern.resume", "tree/.tern.0123456789abcdef.partial"] {
        let err = sink.create_dir(&planted.into(), 0o755).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permission, "{planted}");
    }
    if beneath::euid() != 0 {
        eprintln!("planted_markers_and_partials_are_not_trusted: other users' files need root");
        return;
    }
    let nobody = 65534;
    let chown =
        |p: &Path| rustix::fs::chown(p, Some(rustix::fs::Uid::from_raw(nobody)), None).unwrap();
    std::fs::write(shared.join(RESUME_MARKER), b"tree\n").unwrap();
    chown(&shared.join(RESUME_MARKER));
    let partial = shared.join("tree").join(partial_name(OsStr::new("f")));
    std::fs::create_dir(shared.join("tree")).unwrap();
    std::fs::write(&partial, b"").unwrap();
    chown(&partial);
    let sink = FsSink::new(Root::Ambient, shared.clone(), 1).unwrap();
    sink.create_dir(&"tree".into(), 0o755).unwrap();
    receive(&sink, &file_meta(b"tree/f", 6, 0o600), b"secret");
    let landed = std::fs::metadata(shared.join("tree/f")).unwrap();
    assert_eq!(
        landed.uid(),
        0,
        "the copy is this user's, not the planter's"
    );
    assert!(
        !shared.join("f").exists(),
        "another user's marker redirects nothing"
    );
}

#[test]
fn two_sources_of_one_name_and_pipes_named_as_sources_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for d in ["a/tree", "b/tree"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    let both = FsSource::new(
        Root::Ambient,
        vec![dir.path().join("a/tree"), dir.path().join("b/tree")],
        true,
    );
    assert_eq!(both.list().unwrap_err().kind(), ErrorKind::Usage);
    let pipe = dir.path().join("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &pipe,
        FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // Opening a pipe would wait for a writer forever.
    let src = FsSource::new(Root::Ambient, vec![pipe], false);
    assert_eq!(src.list().unwrap_err().kind(), ErrorKind::Usage);
}

/// Whether `dir`'s file system takes direct I/O (statx reports its
/// alignment, for regular files only).
fn takes_direct_io(dir: &Path) -> bool {
    use rustix::fs::{AtFlags, StatxFlags, statx};
    let probe = dir.join("probe");
    std::fs::write(&probe, b"").unwrap();
    let st = statx(
        rustix::fs::CWD,
        &probe,
        AtFlags::empty(),
        StatxFlags::DIOALIGN,
    );
    std::fs::remove_file(&probe).unwrap();
    st.is_ok_and(|st| st.stx_dio_offset_align != 0)
}

/// True (after saying so) when `dir`'s file system takes no direct I/O
/// and a test of `what` must skip; fails instead under TERN_TEST_STRICT.
fn skips_without_direct_io(dir: &Path, what: &str) -> bool {
    if takes_direct_io(dir) {
        return false;
    }
    eprintln!("skipped: {} takes no direct I/O", dir.display());
    assert!(
        std::env::var_os("TERN_TEST_STRICT").is_none(),
        "{what} untested"
    );
    true
}

#[test]
fn a_big_file_s_aligned_blocks_go_direct_and_its_tail_and_unaligned_blocks_do_not() {
    use crate::store::blockbuf::BlockBuf;
    const BLOCK: usize = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    if skips_without_direct_io(dir.path(), "direct I/O") {
        return;
    }
    let size = 20 * BLOCK + 9000;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4099) as u8).collect();
    let sink = FsSink::new(Root::Ambient, dir.path().join("big.dat"), 1).unwrap();
    let meta = file_meta(b"big.dat", size as u64, 0o644);
    let (w, _) = sink.create_file(&meta, BLOCK as u32, true).unwrap();
    // Block 0 from a buffer one byte off a page: through the page cache.
    let mut off_by_one = BlockBuf::zeroed(BLOCK + 1);
    off_by_one[1..].copy_from_slice(&data[..BLOCK]);
    w.write_at(0, &off_by_one[1..]).unwrap();
    assert_eq!(
        w.direct_bytes(),
        0,
        "an unaligned buffer is written buffered"
    );
    // The rest from page-aligned buffers, last to first: direct but for the tail.
    let mut buf = BlockBuf::zeroed(BLOCK);
    for block in (1..=20).rev() {
        let at = block * BLOCK;
        let len = BLOCK.min(size - at);
        buf[..len].copy_from_slice(&data[at..at + len]);
        w.write_at(at as u64, &buf[..len]).unwrap();
    }
    assert_eq!(
        w.direct_bytes(),
        19 * BLOCK as u64 + 8192,
        "full blocks and the tail's whole pages go direct"
    );
    // The resume journal's hashes match what is on disk.
    drop(w);
    let (w, kept) = sink.create_file(&meta, BLOCK as u32, true).unwrap();
    assert_eq!(
        kept,
        vec![(0, size as u64)],
        "every block reads back intact"
    );
    w.commit().unwrap();
    assert!(std::fs::read(dir.path().join("big.dat")).unwrap() == data);
}

#[test]
fn a_small_file_is_written_through_the_page_cache() {
    use crate::store::blockbuf::BlockBuf;
    let dir = tempfile::tempdir().unwrap();
    let sink = FsSink::new(Root::Ambient, dir.path().join("small"), 1).unwrap();
    let meta = file_meta(b"small", 1 << 20, 0o644);
    let (w, _) = sink.create_file(&meta, 1 << 20, true).unwrap();
    let mut buf = BlockBuf::zeroed(1 << 20);
    buf.fill(9);
    w.write_at(0, &buf).unwrap();
    assert_eq!(w.direct_bytes(), 0);
    w.commit().unwrap();
    assert!(std::fs::read(dir.path().join("small")).unwrap() == *buf);
}

#[test]
fn a_big_file_is_allocated_ahead_of_its_direct_writes_and_never_past_its_size() {
    use std::os::unix::fs::MetadataExt;

    use crate::store::blockbuf::BlockBuf;
    use crate::store::fsio::direct::ALLOCATE_AHEAD;
    const BLOCK: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    if skips_without_direct_io(dir.path(), "allocation ahead of direct writes") {
        return;
    }
    let size = 3 * ALLOCATE_AHEAD + 9000;
    let sink = FsSink::new(Root::Ambient, dir.path().join("big.dat"), 1).unwrap();
    let meta = file_meta(b"big.dat", size, 0o644);
    let (w, _) = sink.create_file(&meta, BLOCK as u32, true).unwrap();
    let partial = dir.path().join(partial_name(OsStr::new("big.dat")));
    // (length, bytes allocated on disk) of the partial file.
    let on_disk = || {
        let m = std::fs::metadata(&partial).unwrap();
        (m.len(), m.blocks() * 512)
    };
    let mut buf = BlockBuf::zeroed(BLOCK as usize);
    buf.fill(5);
    let write = |at: u64| w.write_at(at, &buf).unwrap();
    write(0);
    let first = BLOCK + ALLOCATE_AHEAD;
    let (len, allocated) = on_disk();
    assert_eq!(len, first, "allocated ahead of the first write");
    assert!(allocated >= first, "{allocated} bytes allocated");
    // Writes well inside the allocated space leave it as it is…
    write(BLOCK);
    write(ALLOCATE_AHEAD / 4);
    assert_eq!(on_disk().0, first);
    // … one within half of its end moves it.
    let near = first - ALLOCATE_AHEAD / 4;
    write(near);
    assert_eq!(on_disk().0, near + BLOCK + ALLOCATE_AHEAD);
    // An interrupted copy's partial file: at most the allocation past what
    // was written.
    assert!(on_disk().1 <= near + BLOCK + ALLOCATE_AHEAD + BLOCK);
    // Never past the file's size, and the file is whole when done.
    write(size / BLOCK * BLOCK - BLOCK);
    assert_eq!(on_disk().0, size);
    assert_eq!(w.direct_bytes(), 5 * BLOCK);
    // A partial file taken up again is allocated from where it ends.
    drop(w);
    let (w, kept) = sink.create_file(&meta, BLOCK as u32, true).unwrap();
    assert_eq!(kept.first(), Some(&(0, 2 * BLOCK)), "{kept:?}");
    w.write_at(2 * BLOCK, &buf).unwrap();
    assert_eq!(on_disk().0, size);
}
