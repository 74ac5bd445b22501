//! A site daemon: X.509 mutual TLS and the authorization file, end to end
//! through the `tern` binary. Certificates are made by the test (rcgen):
//! a site CA, the daemon's host certificate, users the authorization file
//! names and users it does not, an expired one and one from another CA.

use std::path::{Path, PathBuf};
use std::process::Output;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

mod common;
use common::tern;
use tern_testkit::daemon::Daemon;
use tern_testkit::files::content_difference;

/// A CA that signs certificates into PEM files.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    fn write(&self, path: &Path) {
        std::fs::write(path, self.cert.pem()).unwrap();
    }

    /// Signs a certificate; writes NAME.pem and NAME.key into `dir`.
    fn issue(&self, dir: &Path, name: &str, params: CertificateParams) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    fn user(&self, dir: &Path, name: &str, cn: &str) -> (PathBuf, PathBuf) {
        self.issue(dir, name, user_params(cn))
    }
}

fn user_params(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::OrganizationName, "Example");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p
}

struct Site {
    dir: tempfile::TempDir,
    ca: Ca,
    daemon: Daemon,
}

const AUTHZ: &str = r#"
# SUBJECT                      PATH       RIGHTS
"/O=Example/CN=Alice"          alice      rw
"/O=Example/CN=Alice"          public     r
"CN=Reader,O=Example"          public     r
"/O=Example/CN=Dropbox"        inbox      w
"#;

impl Site {
    fn start() -> Site {
        Site::start_trusting(&[])
    }

    /// A site that trusts its own CA and `partners`, all given as one
    /// directory of CA files (`--client-ca DIR`, as grid sites keep
    /// `/etc/grid-security/certificates`); with no partners, one file.
    fn start_trusting(partners: &[&Ca]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let p = |rel: &str| dir.path().join(rel);
        for d in [
            "root/alice",
            "root/inbox",
            "root/public",
            "root/private",
            "pki",
            "state",
            "cfg",
        ] {
            std::fs::create_dir_all(p(d)).unwrap();
        }
        std::fs::write(p("root/public/notes.txt"), b"public notes\n").unwrap();
        std::fs::write(p("root/private/secret.txt"), b"nobody may read this\n").unwrap();
        let ca = Ca::new("Example Site CA");
        ca.write(&p("pki/ca.pem"));
        let client_ca = if partners.is_empty() {
            p("pki/ca.pem")
        } else {
            std::fs::create_dir(p("cas")).unwrap();
            ca.write(&p("cas/site.pem"));
            for (i, partner) in partners.iter().enumerate() {
                partner.write(&p(&format!("cas/partner{i}.crt")));
            }
            // Only CA files count: a key or a note beside them is ignored.
            std::fs::write(p("cas/README"), "CA certificates, one per file\n").unwrap();
            p("cas")
        };
        let mut host = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        host.subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        host.distinguished_name
            .push(DnType::CommonName, "dtn.example.org");
        host.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let (host_cert, host_key) = ca.issue(&p("pki"), "host", host);
        std::fs::write(p("authz"), AUTHZ).unwrap();
        let daemon = common::serve(&p("root"), &p("state"))
            .arg("--tls-cert")
            .arg(host_cert)
            .arg("--tls-key")
            .arg(host_key)
            .arg("--client-ca")
            .arg(client_ca)
            .arg("--authz")
            .arg(p("authz"))
            .start();
        // Site mode: client certificates required, the file's 4 rules.
        assert_eq!(daemon.banner.authz_rules, Some(4), "{}", daemon.banner.json);
        Site { dir, ca, daemon }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn url(&self, path: &str) -> String {
        self.daemon.url(path)
    }

    /// Runs tern as the holder of `who` (cert, key), trusting the site CA.
    fn run_as(&self, who: &(PathBuf, PathBuf), args: &[&str]) -> Output {
        self.run_as_trusting(who, &self.p("pki/ca.pem"), args)
    }

    /// [`Site::run_as`] with the client trusting `ca` (a file or a
    /// directory) for the daemon's certificate.
    fn run_as_trusting(&self, who: &(PathBuf, PathBuf), ca: &Path, args: &[&str]) -> Output {
        let mut c = tern();
        c.env("XDG_CONFIG_HOME", self.p("cfg"))
            .arg(args[0])
            .arg("--cert")
            .arg(&who.0)
            .arg("--key")
            .arg(&who.1)
            .arg("--ca")
            .arg(ca)
            .args(&args[1..]);
        c.output().unwrap()
    }

    /// Stops the daemon and returns its log.
    fn stop(self) -> String {
        self.daemon.stop().1
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: &Output) {
    assert!(out.status.success(), "tern failed: {}", stderr(out));
}

/// Nothing but the files the test made, under `root`.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_granted_subject_reads_and_writes_only_where_granted() {
    let site = Site::start();
    let alice = site.ca.user(&site.p("pki"), "alice", "Alice");
    std::fs::write(site.p("data.bin"), vec![7u8; 3 << 20]).unwrap();
    let data = site.p("data.bin");
    let data = data.to_str().unwrap();

    // Writes into her own subtree, over TLS data streams that present the
    // certificate too (private), and in clear.
    ok(&site.run_as(
        &alice,
        &["cp", "-P", "2", data, &site.url("alice/run1.bin")],
    ));
    ok(&site.run_as(
        &alice,
        &[
            "cp",
            "--protect",
            "clear",
            data,
            &site.url("alice/run2.bin"),
        ],
    ));
    assert_eq!(
        std::fs::read(site.p("root/alice/run1.bin")).unwrap().len(),
        3 << 20
    );
    assert_eq!(
        std::fs::read(site.p("root/alice/run2.bin")).unwrap().len(),
        3 << 20
    );

    // Reads where she may read.
    let got = site.p("notes.txt");
    ok(&site.run_as(
        &alice,
        &["cp", &site.url("public/notes.txt"), got.to_str().unwrap()],
    ));
    assert_eq!(content_difference(&got, b"public notes\n"), None);

    // From here on every attempt is refused: nothing under the root may
    // change, not even a partial file, a journal or a directory.
    std::os::unix::fs::symlink("../private", site.p("root/alice/escape")).unwrap();
    let before = tree(&site.p("root"));

    // Writing where she may only read, and touching what is not granted.
    for (args, what) in [
        (
            vec!["cp", data, &site.url("public/x.bin")] as Vec<&str>,
            "write read-only",
        ),
        (
            vec!["cp", data, &site.url("private/x.bin")],
            "write ungranted",
        ),
        (vec!["cp", data, &site.url("x.bin")], "write the root"),
        (
            vec!["cp", data, &site.url("alice/../public/x.bin")],
            "escape with ..",
        ),
    ] {
        let out = site.run_as(&alice, &args);
        assert_eq!(code(&out), 4, "{what}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("permission denied"),
            "{what}: {}",
            stderr(&out)
        );
    }
    let dest = site.p("stolen.txt");
    let dest = dest.to_str().unwrap();
    for src in ["private/secret.txt", "alice/../private/secret.txt", ""] {
        let out = site.run_as(&alice, &["cp", "-r", &site.url(src), dest]);
        assert_eq!(code(&out), 4, "read {src:?}: {}", stderr(&out));
    }
    assert!(!Path::new(dest).exists());

    // A symlink inside her subtree leads nowhere outside it.
    let out = site.run_as(&alice, &["cp", &site.url("alice/escape/secret.txt"), dest]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    let out = site.run_as(&alice, &["cp", data, &site.url("alice/escape/planted.bin")]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert!(!site.p("root/private/planted.bin").exists());
    assert!(!Path::new(dest).exists());

    // The read-only subject: reads, never writes.
    let reader = site.ca.user(&site.p("pki"), "reader", "Reader");
    ok(&site.run_as(&reader, &["cp", &site.url("public/notes.txt"), dest]));
    let out = site.run_as(&reader, &["cp", data, &site.url("public/y.bin")]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not granted writing") && stderr(&out).contains("public (r)"),
        "the refusal says what is granted: {}",
        stderr(&out)
    );
    assert_eq!(tree(&site.p("root")), before, "refused copies left nothing");
    let log = site.stop();
    assert!(
        log.contains("certificate /O=Example/CN=Alice granted alice (rw), public (r)"),
        "{log}"
    );
    // Every refusal is in the server's log too: 4 writes and 3 reads above,
    // 2 through the symlink, 1 by the reader.
    let refusals = log
        .lines()
        .filter(|l| l.contains("permission denied"))
        .count();
    assert_eq!(refusals, 10, "{log}");
}

#[test]
fn a_ca_directory_trusts_every_ca_in_it_and_no_other() {
    let partner = Ca::new("Partner Lab CA");
    let site = Site::start_trusting(&[&partner]);
    std::fs::write(site.p("data.bin"), vec![3u8; 1 << 20]).unwrap();
    let data = site.p("data.bin");
    let data = data.to_str().unwrap();

    // The authorization file maps subjects, whichever trusted CA issued them.
    let from_partner = partner.user(&site.p("pki"), "alice-partner", "Alice");
    ok(&site.run_as(&from_partner, &["cp", data, &site.url("alice/p.bin")]));
    let from_site = site.ca.user(&site.p("pki"), "alice", "Alice");
    ok(&site.run_as(&from_site, &["cp", data, &site.url("alice/s.bin")]));
    assert!(site.p("root/alice/p.bin").exists() && site.p("root/alice/s.bin").exists());

    let rogue = Ca::new("Rogue CA").user(&site.p("pki"), "rogue", "Alice");
    let out = site.run_as(&rogue, &["cp", data, &site.url("alice/r.bin")]);
    assert_eq!(code(&out), 8, "{}", stderr(&out));
    assert!(stderr(&out).contains("unknown CA"), "{}", stderr(&out));
    assert!(!site.p("root/alice/r.bin").exists());

    // The client's --ca takes a directory as well.
    let out = site.run_as_trusting(
        &from_site,
        &site.p("cas"),
        &["cp", data, &site.url("alice/d.bin")],
    );
    ok(&out);
    assert!(site.p("root/alice/d.bin").exists());
    let log = site.stop();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("TLS handshake failed"))
            .count(),
        1,
        "only the rogue certificate was refused: {log}"
    );
}

#[test]
fn an_unauthorized_certificate_can_neither_read_nor_write() {
    let site = Site::start();
    let before = tree(&site.p("root"));
    let mallory = site.ca.user(&site.p("pki"), "mallory", "Mallory");
    std::fs::write(site.p("data.bin"), vec![1u8; 1 << 20]).unwrap();
    let data = site.p("data.bin");
    let dest = site.p("got");
    let dest = dest.to_str().unwrap();
    let attempts: Vec<Vec<String>> = vec![
        vec![
            "cp".into(),
            data.to_str().unwrap().into(),
            site.url("public/m.bin"),
        ],
        vec!["cp".into(), data.to_str().unwrap().into(), site.url("")],
        vec!["cp".into(), site.url("public/notes.txt"), dest.into()],
        vec!["cp".into(), "-r".into(), site.url(""), dest.into()],
        vec!["perf".into(), site.url(""), "--size".into(), "1M".into()],
        vec![
            "perf".into(),
            site.url(""),
            "--size".into(),
            "1M".into(),
            "--reverse".into(),
        ],
    ];
    for args in &attempts {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = site.run_as(&mallory, &args);
        assert_eq!(code(&out), 4, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("/O=Example/CN=Mallory")
                && stderr(&out).contains("not authorized on this server"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(!Path::new(dest).exists());
    assert_eq!(
        tree(&site.p("root")),
        before,
        "nothing under the root changed"
    );
    let log = site.stop();
    assert!(
        log.contains("refused: certificate /O=Example/CN=Mallory is not in the authorization file"),
        "{log}"
    );
}

#[test]
fn certificates_the_site_does_not_trust_fail_the_handshake() {
    let site = Site::start();
    std::fs::write(site.p("data.bin"), b"x").unwrap();
    let data = site.p("data.bin");
    let data = data.to_str().unwrap();
    let dest = site.url("alice/x");

    // Alice's name, but from another CA.
    let rogue_ca = Ca::new("Rogue CA");
    let rogue = rogue_ca.user(&site.p("pki"), "rogue", "Alice");
    let out = site.run_as(&rogue, &["cp", data, &dest]);
    assert_eq!(code(&out), 8, "{}", stderr(&out));
    assert!(stderr(&out).contains("unknown CA"), "{}", stderr(&out));

    // Alice's name from the right CA, but expired.
    let mut old = user_params("Alice");
    old.not_before = rcgen::date_time_ymd(2020, 1, 1);
    old.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let expired = site.ca.issue(&site.p("pki"), "expired", old);
    let out = site.run_as(&expired, &["cp", data, &dest]);
    assert_eq!(code(&out), 8, "{}", stderr(&out));
    assert!(stderr(&out).contains("expired"), "{}", stderr(&out));

    // No certificate at all.
    let out = tern()
        .env("XDG_CONFIG_HOME", site.p("cfg"))
        .args(["cp", "--ca"])
        .arg(site.p("pki/ca.pem"))
        .args([data, &dest])
        .output()
        .unwrap();
    assert_eq!(code(&out), 8, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("requires a client certificate"),
        "{}",
        stderr(&out)
    );

    // The client checks the daemon too: a CA that did not issue its
    // certificate makes the client refuse it.
    let alice = site.ca.user(&site.p("pki"), "alice", "Alice");
    rogue_ca.write(&site.p("pki/rogue-ca.pem"));
    let out = site.run_as_trusting(&alice, &site.p("pki/rogue-ca.pem"), &["cp", data, &dest]);
    assert_eq!(code(&out), 8, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("certificate is not trusted"),
        "{}",
        stderr(&out)
    );
    assert!(!site.p("root/alice/x").exists());
    let log = site.stop();
    let failed = |why: &str| {
        log.lines()
            .any(|l| l.contains("TLS handshake failed") && l.contains(why))
    };
    assert!(failed("UnknownIssuer"), "the rogue CA: {log}");
    assert!(
        failed("certificate expired"),
        "the expired certificate: {log}"
    );
    assert!(failed("peer sent no certificates"), "no certificate: {log}");
}

#[test]
fn site_options_are_checked_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let p = |rel: &str| dir.path().join(rel);
    std::fs::create_dir(p("root")).unwrap();
    let ca = Ca::new("CA");
    ca.write(&p("ca.pem"));
    let other = ca.user(dir.path(), "other", "Other");
    let mut host = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    host.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (cert, key) = ca.issue(dir.path(), "host", host);
    std::fs::write(p("bad-authz"), "\"/CN=A\" data rwx\n").unwrap();
    std::fs::write(p("good-authz"), "\"/CN=A\" . r\n").unwrap();
    let serve = |extra: &[&std::ffi::OsStr]| {
        tern()
            .args(["serve", "--listen", "127.0.0.1:0", "--root"])
            .arg(p("root"))
            .arg("--state-dir")
            .arg(p("state"))
            .args(extra)
            .output()
            .unwrap()
    };
    let os = |s: &Path| s.as_os_str().to_owned();
    let flag = |s: &str| std::ffi::OsString::from(s);
    let cases: Vec<(Vec<std::ffi::OsString>, i32, &str)> = vec![
        (vec![flag("--client-ca"), os(&p("ca.pem"))], 2, "--authz"),
        (
            vec![
                flag("--client-ca"),
                os(&p("ca.pem")),
                flag("--authz"),
                os(&p("bad-authz")),
            ],
            2,
            "line 1: rights 'rwx'",
        ),
        (
            vec![
                flag("--client-ca"),
                os(&p("root")),
                flag("--authz"),
                os(&p("good-authz")),
            ],
            8,
            "no CA certificates found",
        ),
        (
            vec![
                flag("--tls-cert"),
                os(&cert),
                flag("--tls-key"),
                os(&other.1),
            ],
            8,
            "certificate and key",
        ),
        (
            vec![
                flag("--tls-cert"),
                os(&p("missing.pem")),
                flag("--tls-key"),
                os(&key),
            ],
            3,
            "missing.pem",
        ),
    ];
    for (args, want_code, want_text) in cases {
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let out = serve(&refs);
        assert_eq!(code(&out), want_code, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(want_text),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_writer_who_may_not_read_is_not_told_what_is_there() {
    let site = Site::start();
    let alice = site.ca.user(&site.p("pki"), "alice", "Alice");
    let dropbox = site.ca.user(&site.p("pki"), "dropbox", "Dropbox");
    std::fs::write(site.p("data.bin"), vec![5u8; 2 << 20]).unwrap();
    let data = site.p("data.bin");
    let data = data.to_str().unwrap();
    let skipped = |who, dest: &str| -> serde_json::Value {
        let out = site.run_as(
            who,
            &[
                "cp",
                "--json",
                "--skip-existing",
                "digest",
                data,
                &site.url(dest),
            ],
        );
        ok(&out);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["files_skipped"].clone()
    };
    // Alice may read her subtree: the second copy is found there.
    assert_eq!(skipped(&alice, "alice/d.bin"), 0);
    assert_eq!(skipped(&alice, "alice/d.bin"), 1);
    // A write-only grant learns nothing of what is there, not even a digest:
    // the file is simply written again.
    assert_eq!(skipped(&dropbox, "inbox/d.bin"), 0);
    assert_eq!(skipped(&dropbox, "inbox/d.bin"), 0);
    assert_eq!(
        std::fs::read(site.p("root/inbox/d.bin")).unwrap().len(),
        2 << 20
    );
}

/// A site daemon for a third-party copy, under `ca`: its host certificate
/// also serves as a client certificate (clientAuth), which it presents
/// when it dials the other site.
fn tpc_site(dir: &Path, ca: &Ca, name: &str, authz: &str) -> Daemon {
    let p = |rel: &str| dir.join(name).join(rel);
    for d in ["root/public", "root/inbox", "pki", "state"] {
        std::fs::create_dir_all(p(d)).unwrap();
    }
    let mut host = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    host.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    host.distinguished_name
        .push(DnType::CommonName, format!("dtn-{name}.example.org"));
    host.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let (cert, key) = ca.issue(&p("pki"), "host", host);
    ca.write(&p("pki/ca.pem"));
    std::fs::write(p("authz"), authz).unwrap();
    common::serve(&p("root"), &p("state"))
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .arg("--client-ca")
        .arg(p("pki/ca.pem"))
        .arg("--authz")
        .arg(p("authz"))
        .start()
}

#[test]
fn a_third_party_copy_needs_read_at_the_source_and_write_at_the_destination() {
    let dir = tempfile::tempdir().unwrap();
    let p = |rel: &str| dir.path().join(rel);
    let ca = Ca::new("Example Grid CA");
    let a = tpc_site(
        dir.path(),
        &ca,
        "a",
        "\"/O=Example/CN=Alice\" public r\n\"/O=Example/CN=Reader\" public r\n",
    );
    let b = tpc_site(
        dir.path(),
        &ca,
        "b",
        "\"/O=Example/CN=Alice\" inbox w\n\"/O=Example/CN=Carol\" inbox w\n",
    );
    std::fs::write(p("a/root/public/run7.dat"), vec![5u8; 2 << 20]).unwrap();
    std::fs::create_dir_all(p("users")).unwrap();
    std::fs::create_dir_all(p("cfg")).unwrap();
    ca.write(&p("users/ca.pem"));
    let copy_as = |user: &str| {
        let who = ca.user(&p("users"), &user.to_lowercase(), user);
        let mut c = tern();
        c.env("XDG_CONFIG_HOME", p("cfg"))
            .args(["cp", "--cert"])
            .arg(&who.0)
            .arg("--key")
            .arg(&who.1)
            .arg("--ca")
            .arg(p("users/ca.pem"))
            .arg(a.url("public/run7.dat"))
            .arg(b.url(&format!("inbox/{user}.dat")));
        c.output().unwrap()
    };
    // Alice may read at A and write at B: the copy goes from A to B.
    let alice = copy_as("Alice");
    ok(&alice);
    assert_eq!(
        content_difference(p("b/root/inbox/Alice.dat"), vec![5u8; 2 << 20]),
        None
    );
    // Carol may write at B but not read at A: A refuses, B is never told
    // to dial, nothing arrives.
    let carol = copy_as("Carol");
    assert_eq!(code(&carol), 4, "{}", stderr(&carol));
    assert!(
        stderr(&carol).contains(&format!("the source {} refused", a.addr())),
        "{}",
        stderr(&carol)
    );
    // Reader may read at A but not write at B: B refuses.
    let reader = copy_as("Reader");
    assert_eq!(code(&reader), 4, "{}", stderr(&reader));
    assert!(
        stderr(&reader).contains("the destination"),
        "{}",
        stderr(&reader)
    );
    assert_eq!(tree(&p("b/root/inbox")), ["Alice.dat"]);
    drop((a, b));
}
