use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::*;
use crate::ErrorKind;
use crate::store::fsio::DiscardSink;

fn req(sources: &[&str], recursive: bool) -> Requested {
    Requested::new(sources.iter().map(|s| s.as_bytes()), recursive)
}

fn admit_all(r: &mut Requested, announced: &[(&str, Kind)]) {
    for (path, kind) in announced {
        if let Err(e) = r.admit(path.as_bytes(), *kind) {
            panic!("{path:?} ({kind:?}) was refused: {e}");
        }
    }
}

fn refused(r: &mut Requested, path: &str, kind: Kind) -> String {
    match r.admit(path.as_bytes(), kind) {
        Ok(()) => panic!("{path:?} ({kind:?}) was admitted"),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Permission, "{e}");
            e.to_string()
        }
    }
}

#[test]
fn names_are_derived_as_the_server_derives_them() {
    let name = |s: &str| derived_name(s.as_bytes()).map(|n| String::from_utf8(n).unwrap());
    assert_eq!(name("report.pdf").as_deref(), Some("report.pdf"));
    assert_eq!(name("a/b/").as_deref(), Some("b"));
    assert_eq!(name("a/./b/.").as_deref(), Some("b"));
    assert_eq!(name("/abs/x").as_deref(), Some("x"));
    assert_eq!(name("~/x").as_deref(), Some("x"));
    assert_eq!(name("x/~").as_deref(), Some("~"));
    assert_eq!(
        name("a/..").as_deref(),
        Some("a"),
        "Path::components' last Normal"
    );
    for none in ["", ".", "/", "//", "~", "~/", "./."] {
        assert_eq!(name(none), None, "{none:?}");
    }
}

#[test]
fn a_single_file_pull_takes_its_one_file_once() {
    let mut r = req(&["docs/report.pdf"], false);
    for planted in [
        ".ssh/authorized_keys",
        ".bashrc",
        "../x",
        "/etc/passwd",
        "",
        "report.pdf/",
        "./report.pdf",
        "report.pdf/x",
        "a//b",
    ] {
        refused(&mut r, planted, Kind::File);
    }
    refused(&mut r, ".ssh", Kind::Dir);
    refused(&mut r, "report.pdf", Kind::Dir);
    r.admit(b"report.pdf", Kind::File).unwrap();
    let again = refused(&mut r, "report.pdf", Kind::File);
    assert!(again.contains("received already"), "{again}");
    refused(&mut r, ".bashrc", Kind::File);
}

#[test]
fn the_refusal_says_what_was_announced_and_what_was_asked() {
    let mut r = req(&["report.pdf"], false);
    let msg = refused(&mut r, ".ssh/authorized_keys", Kind::File);
    assert!(
        msg.starts_with(".ssh/authorized_keys: permission denied"),
        "{msg}"
    );
    assert!(msg.contains("not requested"), "{msg}");
    assert!(msg.contains("asked for report.pdf without -r"), "{msg}");
    let odd = refused(&mut r, "caf\u{e9}\n", Kind::File);
    assert!(odd.starts_with("caf\u{e9}\\n: permission denied"), "{odd}");
    let bytes = r.admit(b"x\xff", Kind::File).unwrap_err().to_string();
    assert!(bytes.starts_with("x\\xff: permission denied"), "{bytes}");
}

#[test]
fn a_recursive_pull_takes_only_names_beneath_its_top() {
    let mut r = req(&["exp/data"], true);
    refused(&mut r, "data/early", Kind::File);
    admit_all(
        &mut r,
        &[
            ("data", Kind::Dir),
            ("data/a", Kind::File),
            ("data/sub", Kind::Dir),
            ("data/sub/b", Kind::File),
            ("data/.hidden", Kind::File),
            // Directories may be announced again (their times, at the end).
            ("data/sub", Kind::Dir),
            ("data", Kind::Dir),
        ],
    );
    for planted in [
        "other",
        ".bashrc",
        "data2/x",
        "data/../x",
        "data/./x",
        "/data/x",
    ] {
        refused(&mut r, planted, Kind::File);
    }
    refused(&mut r, "other", Kind::Dir);
    let second = refused(&mut r, "data", Kind::File);
    assert!(second.contains("received already"), "{second}");
}

#[test]
fn a_recursive_pull_of_a_file_has_nothing_beneath_it() {
    let mut r = req(&["f"], true);
    r.admit(b"f", Kind::File).unwrap();
    refused(&mut r, "f/x", Kind::File);
    refused(&mut r, "f", Kind::Dir);
}

#[test]
fn a_source_without_a_name_binds_the_first_one_announced() {
    for root in ["", "/", "~", "."] {
        let mut r = req(&[root], true);
        refused(&mut r, "srv/x", Kind::File);
        r.admit(b"srv", Kind::Dir).unwrap();
        r.admit(b"srv/x", Kind::File).unwrap();
        let msg = refused(&mut r, "evil", Kind::Dir);
        assert!(msg.contains("srv (named by the server)"), "{msg}");
        refused(&mut r, "evil/.bashrc", Kind::File);
    }
    let mut single = req(&["~"], false);
    single.admit(b"anything", Kind::File).unwrap();
    refused(&mut single, "second", Kind::File);
}

#[test]
fn sources_of_the_same_name_each_take_one() {
    let mut r = req(&["x/f", "y/f"], false);
    admit_all(&mut r, &[("f", Kind::File), ("f", Kind::File)]);
    refused(&mut r, "f", Kind::File);
    let mut named_and_root = req(&["", "data"], true);
    admit_all(
        &mut named_and_root,
        &[
            ("data", Kind::Dir),
            ("home", Kind::Dir),
            ("home/x", Kind::File),
            ("data/y", Kind::File),
        ],
    );
    refused(&mut named_and_root, "third", Kind::Dir);
}

#[test]
fn nothing_comes_beneath_a_link() {
    let mut r = req(&["data", "l"], true);
    admit_all(&mut r, &[("data", Kind::Dir), ("data/link", Kind::Other)]);
    let msg = refused(&mut r, "data/link/.bashrc", Kind::File);
    assert!(msg.contains("beneath data/link"), "{msg}");
    refused(&mut r, "data/link/d", Kind::Dir);
    r.admit(b"data/linked", Kind::File).unwrap();
    r.admit(b"l", Kind::Other).unwrap();
    refused(&mut r, "l/x", Kind::File);
    let mut single = req(&["l"], false);
    single.admit(b"l", Kind::Other).unwrap();
    refused(&mut single, "l", Kind::Other);
}

/// A sink that records what reached it.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Sink for Recorder {
    fn create_dir(&self, path: &RelPath, _mode: u32) -> Result<()> {
        self.0.lock().unwrap().push(format!("dir {path}"));
        Ok(())
    }

    fn create_file(&self, meta: &FileMeta, bs: u32, resume: bool) -> Result<Created> {
        self.0.lock().unwrap().push(format!("file {}", meta.path));
        DiscardSink.create_file(meta, bs, resume)
    }

    fn digests(&self) -> bool {
        true
    }

    fn existing(&self, path: &RelPath) -> Result<Option<Found>> {
        self.0.lock().unwrap().push(format!("look {path}"));
        Ok(None)
    }
}

fn p(path: &str) -> RelPath {
    RelPath::from(path)
}

fn meta(path: &str) -> FileMeta {
    FileMeta {
        file_id: 1,
        path: path.into(),
        size: 0,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
    }
}

#[test]
fn the_guard_forwards_only_what_it_admits() {
    let seen = Arc::new(Recorder::default());
    let sink = GuardedSink::new(seen.clone(), req(&["a", "t"], true));
    assert!(sink.digests());
    sink.create_dir(&p("t"), 0o755).unwrap();
    assert!(sink.create_dir(&p(".ssh"), 0o700).is_err());
    // Looking at a file and then opening it is one announcement.
    assert!(sink.existing(&p("a")).unwrap().is_none());
    sink.create_file(&meta("a"), 1 << 20, false).unwrap();
    assert!(
        sink.existing(&p("a")).is_err(),
        "a second announcement of a"
    );
    assert!(sink.create_file(&meta("a"), 1 << 20, false).is_err());
    assert!(sink.existing(&p(".bashrc")).is_err());
    assert!(sink.create_file(&meta(".bashrc"), 1 << 20, false).is_err());
    sink.create_file(&meta("t/x"), 1 << 20, false).unwrap();
    assert_eq!(
        *seen.0.lock().unwrap(),
        ["dir t", "look a", "file a", "file t/x"]
    );
}

#[test]
fn links_pipes_and_directories_with_times_are_judged_too() {
    let seen = Arc::new(Recorder::default());
    let sink = GuardedSink::new(seen.clone(), req(&["t"], true));
    let entry = |path: &str, kind: EntryKind| EntryMeta {
        path: p(path),
        kind,
        mode: 0o755,
        mtime_s: 0,
        mtime_ns: 0,
    };
    sink.create_entry(&entry("t", EntryKind::Dir)).unwrap();
    let home = EntryKind::Symlink {
        target: p("/home/u"),
    };
    sink.create_entry(&entry("t/l", home.clone())).unwrap();
    assert!(
        sink.create_file(&meta("t/l/.bashrc"), 1 << 20, false)
            .is_err()
    );
    assert!(sink.create_entry(&entry("t/l/x", EntryKind::Fifo)).is_err());
    assert!(sink.create_entry(&entry("u", home)).is_err());
    assert!(sink.finish().is_empty());
    // The default create_entry makes the directory through create_dir.
    assert_eq!(*seen.0.lock().unwrap(), ["dir t"]);
}

#[test]
fn a_refusal_ends_the_session_with_a_permission_error() {
    let e = req(&["a"], false)
        .admit(b".bashrc", Kind::File)
        .unwrap_err();
    assert!(matches!(e, Error::NotRequested { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Permission);
    assert_eq!(e.wire_code(), tern_proto::ErrorCode::PermissionDenied);
    assert!(
        !e.is_per_entry(),
        "not one entry's failure: the peer is not trusted further"
    );
    assert!(!e.is_retryable());
}

#[test]
fn a_file_kept_as_it_was_still_counts_as_received() {
    let seen = Arc::new(Recorder::default());
    let sink = GuardedSink::new(seen.clone(), req(&["a"], false));
    // The destination had it (no create_file follows); a second
    // announcement is still refused.
    sink.existing(&p("a")).unwrap();
    assert!(sink.existing(&p("a")).is_err());
    assert!(sink.create_file(&meta("b"), 1 << 20, false).is_err());
    assert_eq!(*seen.0.lock().unwrap(), ["look a"]);
}

// Properties: an honest server's announcements are always admitted, and
// nothing a request could not have matched ever is.

/// A name component: from a few common names (so that sources collide) or
/// any bytes a file name may hold.
fn component() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec!["a", "b", "data", ".ssh", "~", "-x", "report.pdf"])
            .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(
            any::<u8>().prop_filter("no / or NUL", |b| *b != b'/' && *b != 0),
            1..6
        )
        .prop_filter("no . or ..", |c| c != b"." && c != b".."),
    ]
}

/// A source as a user may write it: a path of names, maybe with `./`, a
/// trailing slash or `~/`, or one of the nameless sources.
fn source() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => named_source(),
        1 => prop::sample::select(vec!["", "/", "~", "."]).prop_map(|s| s.as_bytes().to_vec()),
    ]
}

/// A source with a name of its own.
fn named_source() -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(component(), 1..4), 0..4u8)
        .prop_map(|(parts, style)| {
            let joined = parts.join(&b'/');
            match style {
                0 => joined,
                1 => [b"./".as_slice(), &joined].concat(),
                2 => [joined.as_slice(), b"/"].concat(),
                _ => [b"~/".as_slice(), &joined].concat(),
            }
        })
        // `~` alone is the home directory, which has no name of its own.
        .prop_filter("a name of its own", |s| derived_name(s).is_some())
}

/// One source's entries as tern's server lists them: its top, then (for a
/// directory, with -r) entries beneath it, directories before their
/// contents, and links and pipes last.
#[derive(Debug, Clone)]
struct Listing {
    top_dir: bool,
    /// Paths beneath the top, relative to it, with their kinds.
    beneath: Vec<(Vec<Vec<u8>>, Kind)>,
    others: usize,
    /// The name the server gives a nameless source.
    server_name: Vec<u8>,
}

fn listing() -> impl Strategy<Value = Listing> {
    (
        any::<bool>(),
        prop::collection::vec(
            (prop::collection::vec(component(), 1..4), any::<bool>()),
            0..6,
        ),
        0..3usize,
        component(),
    )
        .prop_map(|(top_dir, entries, others, server_name)| Listing {
            top_dir,
            beneath: entries
                .into_iter()
                .map(|(p, dir)| (p, if dir { Kind::Dir } else { Kind::File }))
                .collect(),
            others,
            server_name,
        })
}

/// The announcements an honest server makes for `sources`; `None` when two
/// sources of one name are of different kinds (a link and a directory at
/// one name: what is beneath the one may not go beneath the other).
fn honest(
    sources: &[Vec<u8>],
    listings: &[Listing],
    recursive: bool,
) -> Option<Vec<(Vec<u8>, Kind)>> {
    let mut out = Vec::new();
    let mut tops = std::collections::HashMap::new();
    for (src, l) in sources.iter().zip(listings) {
        let top = derived_name(src).unwrap_or_else(|| l.server_name.clone());
        let top_kind = match (recursive && l.top_dir, l.others > 0) {
            (true, _) => Kind::Dir,
            (false, true) => Kind::Other,
            (false, false) => Kind::File,
        };
        if *tops.entry(top.clone()).or_insert(top_kind) != top_kind {
            return None;
        }
        if !recursive || !l.top_dir {
            out.push((
                top,
                if l.others > 0 {
                    Kind::Other
                } else {
                    Kind::File
                },
            ));
            continue;
        }
        out.push((top.clone(), Kind::Dir));
        for (rel, kind) in &l.beneath {
            // Directories before their contents.
            for depth in 1..rel.len() {
                out.push((
                    [top.clone(), rel[..depth].join(&b'/')].join(&b'/'),
                    Kind::Dir,
                ));
            }
            out.push(([top.clone(), rel.join(&b'/')].join(&b'/'), *kind));
        }
        for i in 0..l.others {
            let link = format!("\u{1}link{i}");
            out.push(([top.as_slice(), link.as_bytes()].join(&b'/'), Kind::Other));
        }
    }
    Some(out)
}

fn kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(vec![Kind::Dir, Kind::File, Kind::Other])
}

proptest! {
    #[test]
    fn an_honest_server_is_always_admitted(
        sources in prop::collection::vec(source(), 1..4),
        listings in prop::collection::vec(listing(), 4),
        recursive in any::<bool>(),
    ) {
        let announced = honest(&sources, &listings, recursive);
        prop_assume!(announced.is_some());
        let mut r = Requested::new(sources.iter().map(Vec::as_slice), recursive);
        for (path, kind) in announced.unwrap() {
            prop_assert!(r.admit(&path, kind).is_ok(), "{:?} {:?}", shown(&path), kind);
        }
    }

    #[test]
    fn a_name_no_source_has_is_never_admitted(
        sources in prop::collection::vec(named_source(), 1..4),
        listings in prop::collection::vec(listing(), 4),
        recursive in any::<bool>(),
        top in component().prop_map(|c| [b"\xff".as_slice(), &c].concat()),
        beneath in prop::collection::vec(component(), 0..3),
        k in kind(),
        at in 0..64usize,
    ) {
        let stranger = [vec![top], beneath].concat();
        prop_assert!(sources.iter().all(|s| derived_name(s).as_deref() != Some(&stranger[0][..])));
        let announced = honest(&sources, &listings, recursive);
        prop_assume!(announced.is_some());
        let announced = announced.unwrap();
        let at = at % (announced.len() + 1);
        let mut r = Requested::new(sources.iter().map(Vec::as_slice), recursive);
        for (path, kind) in &announced[..at] {
            r.admit(path, *kind).unwrap();
        }
        prop_assert!(r.admit(&stranger.join(&b'/'), k).is_err());
    }

    #[test]
    fn a_malformed_path_is_never_admitted(
        sources in prop::collection::vec(source(), 1..4),
        recursive in any::<bool>(),
        parts in prop::collection::vec(component(), 0..3),
        bad in prop::sample::select(vec!["", ".", ".."]),
        at in 0..4usize,
        absolute in any::<bool>(),
        k in kind(),
    ) {
        let mut parts = parts;
        let at = at.min(parts.len());
        parts.insert(at, bad.as_bytes().to_vec());
        let mut path = parts.join(&b'/');
        if absolute {
            path.insert(0, b'/');
        }
        let mut r = Requested::new(sources.iter().map(Vec::as_slice), recursive);
        prop_assert!(r.admit(&path, k).is_err(), "{:?}", shown(&path));
    }

    #[test]
    fn without_r_nothing_follows_the_requested_files(
        sources in prop::collection::vec(source(), 1..4),
        listings in prop::collection::vec(listing(), 4),
        extra in prop::collection::vec(component(), 1..4),
        k in kind(),
    ) {
        let announced = honest(&sources, &listings, false);
        prop_assume!(announced.is_some());
        let mut r = Requested::new(sources.iter().map(Vec::as_slice), false);
        for (path, kind) in announced.unwrap() {
            r.admit(&path, kind).unwrap();
        }
        // Every source has had its one entry: nothing else, of any name.
        prop_assert!(r.admit(&extra.join(&b'/'), k).is_err());
        // And never a directory or a path beneath one, from the start.
        let mut fresh = Requested::new(sources.iter().map(Vec::as_slice), false);
        prop_assert!(fresh.admit(&extra[0], Kind::Dir).is_err());
        if extra.len() > 1 {
            prop_assert!(fresh.admit(&extra.join(&b'/'), k).is_err());
        }
    }
}
