//! Third-party copies with an end that is a once server, as ssh starts it
//! for a `[USER@]HOST:PATH` location (in process, without ssh): the once
//! end takes the client's token, then its part of the copy as a daemon
//! would; it dials the other end, or lets the other end's session in on
//! the delegation, the ticket and that end's certificate.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern_engine::client::{ClientOptions, Endpoint};
use tern_engine::fsio::{FsSink, Root};
use tern_engine::once::{OnceOptions, OnceServer};
use tern_engine::server::{ServerOptions, serve};
use tern_engine::session::open::PeerPass;
use tern_engine::tls::ServerIdentity;
use tern_engine::tpc::{
    DEFAULT_TTL, Dialing, Leg, TpcMode, TpcOptions, TpcRequest, delegation, dial, sign, third_party,
};
use tern_engine::transfer::Progress;
use tern_proto::Protect;
use tern_proto::delegation::{Dialer, TpcRole};
use tern_testkit::client as kit;
use tern_testkit::files::{file_difference, seeded_random_file};
use tokio::task::JoinHandle;

fn client() -> ClientOptions {
    kit::options(4, Protect::Private, 1 << 20)
}

async fn daemon(root: &Path, state: &Path) -> Endpoint {
    let identity = ServerIdentity::load_or_create(state).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let opts = ServerOptions::new(root.to_path_buf());
    tokio::spawn(async move {
        serve(listener, &identity, opts, std::future::pending())
            .await
            .unwrap();
    });
    Endpoint {
        host: "127.0.0.1".into(),
        port,
    }
}

/// A once server whose home is `home`, and how its client reaches it.
struct Once {
    ep: Endpoint,
    client: ClientOptions,
    run: JoinHandle<tern_engine::Result<()>>,
    _state: tempfile::TempDir,
}

async fn once(home: &Path) -> Once {
    let state = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(state.path()).unwrap();
    let mut opts = OnceOptions::new(home.to_path_buf());
    opts.server.handshake_timeout = Duration::from_secs(5);
    let server = OnceServer::listen("127.0.0.1:0".parse().unwrap(), &identity, opts)
        .await
        .unwrap();
    let line = server.line().clone();
    let mut client = kit::pinned(client(), &line.fingerprint);
    client.once_token = Some(line.token);
    Once {
        ep: Endpoint {
            host: "127.0.0.1".into(),
            port: line.port.unwrap(),
        },
        client,
        run: tokio::spawn(server.run(std::future::pending())),
        _state: state,
    }
}

impl Once {
    async fn ended(self) -> tern_engine::Result<()> {
        tokio::time::timeout(Duration::from_secs(10), self.run)
            .await
            .expect("the once server ends with its one copy")
            .unwrap()
    }
}

/// A daemon's root and state, a once server's home, `big.bin` of `size`
/// bytes at the one named `at`, `in/` at the other.
struct Sites {
    daemon_root: tempfile::TempDir,
    home: tempfile::TempDir,
    daemon_state: tempfile::TempDir,
}

impl Sites {
    fn new(size: u64, source_is_once: bool) -> Sites {
        let s = Sites {
            daemon_root: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            daemon_state: tempfile::tempdir().unwrap(),
        };
        let (src, dst) = if source_is_once {
            (s.home.path(), s.daemon_root.path())
        } else {
            (s.daemon_root.path(), s.home.path())
        };
        seeded_random_file(&src.join("big.bin"), size, 11);
        std::fs::create_dir(dst.join("in")).unwrap();
        s
    }
}

/// `big.bin` at `source` into `in/` at `dest`.
fn request(source: Endpoint, dest: Endpoint) -> TpcRequest {
    TpcRequest {
        source,
        sources: vec!["big.bin".into()],
        recursive: false,
        dest,
        dest_path: "in/".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_source_pushes_straight_to_the_daemon() {
    let size = 24 << 20;
    let sites = Sites::new(size, true);
    let b = daemon(sites.daemon_root.path(), sites.daemon_state.path()).await;
    let a = once(sites.home.path()).await;
    let req = request(a.ep.clone(), b);
    let opts = TpcOptions {
        client: client(),
        ttl: DEFAULT_TTL,
        mode: TpcMode::Push,
        source_once: Some(a.client.clone()),
        dest_once: None,
    };
    let progress = Arc::new(Progress::default());
    let outcome = third_party(&req, &opts, progress).await.unwrap();
    assert_eq!((outcome.bytes, outcome.files), (size, 1));
    assert_eq!(outcome.direction, "push", "the once end dials");
    assert!(outcome.pull_failed.is_none());
    assert_eq!(
        file_difference(
            sites.home.path().join("big.bin"),
            sites.daemon_root.path().join("in/big.bin")
        ),
        None
    );
    assert!(
        outcome.client_bytes < 1 << 20,
        "the client carried {} bytes",
        outcome.client_bytes
    );
    a.ended()
        .await
        .expect("the once server's one copy ended well");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_destination_pulls_straight_from_the_daemon() {
    let size = 24 << 20;
    let sites = Sites::new(size, false);
    let a = daemon(sites.daemon_root.path(), sites.daemon_state.path()).await;
    let b = once(sites.home.path()).await;
    let req = request(a, b.ep.clone());
    let opts = TpcOptions {
        client: client(),
        ttl: DEFAULT_TTL,
        mode: TpcMode::Auto,
        source_once: None,
        dest_once: Some(b.client.clone()),
    };
    let outcome = third_party(&req, &opts, Arc::new(Progress::default()))
        .await
        .unwrap();
    assert_eq!((outcome.bytes, outcome.direction), (size, "pull"));
    assert_eq!(
        file_difference(
            sites.daemon_root.path().join("big.bin"),
            sites.home.path().join("in/big.bin")
        ),
        None
    );
    b.ended()
        .await
        .expect("the once server's one copy ended well");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_dials_an_ssh_source_and_two_ssh_ends_copy_directly() {
    let size = 8 << 20;
    let sites = Sites::new(size, true);
    let b = daemon(sites.daemon_root.path(), sites.daemon_state.path()).await;
    let a = once(sites.home.path()).await;
    let opts = |mode, source_once, dest_once| TpcOptions {
        client: client(),
        ttl: DEFAULT_TTL,
        mode,
        source_once,
        dest_once,
    };
    let pulled = third_party(
        &request(a.ep.clone(), b),
        &opts(TpcMode::Auto, Some(a.client.clone()), None),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        pulled.direction, "pull",
        "the daemon dialed the once server"
    );
    assert_eq!(
        file_difference(
            sites.home.path().join("big.bin"),
            sites.daemon_root.path().join("in/big.bin")
        ),
        None
    );
    a.ended().await.expect("dialed, its copy ended well");
    // Two ssh ends: the destination's once server pulls from the source's.
    let far = tempfile::tempdir().unwrap();
    std::fs::create_dir(far.path().join("in")).unwrap();
    let (a, b) = (once(sites.home.path()).await, once(far.path()).await);
    let both = third_party(
        &request(a.ep.clone(), b.ep.clone()),
        &opts(
            TpcMode::Auto,
            Some(a.client.clone()),
            Some(b.client.clone()),
        ),
        Arc::new(Progress::default()),
    )
    .await
    .unwrap();
    assert_eq!((both.bytes, both.direction), (size, "pull"));
    assert_eq!(
        file_difference(
            sites.home.path().join("big.bin"),
            far.path().join("in/big.bin")
        ),
        None
    );
    a.ended()
        .await
        .expect("the source's once server ended well");
    b.ended()
        .await
        .expect("the destination's once server ended well");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_end_the_delegation_names_gets_into_a_once_server() {
    let sites = Sites::new(1 << 20, true);
    let a = once(sites.home.path()).await;
    let b = daemon(sites.daemon_root.path(), sites.daemon_state.path()).await;
    let mut at_a = Leg::open(&a.ep, &a.client).await.unwrap();
    let at_b = Leg::open(&b, &client()).await.unwrap();
    let req = request(a.ep.clone(), b.clone());
    let d = delegation(&req, (&at_a, &at_b), Dialer::Dest, None, DEFAULT_TTL);
    let signed = sign(&d);
    let accepted = at_a.offer(TpcRole::Source, &signed).await.unwrap();
    // The delegation and the ticket, without B's certificate: refused.
    let pass = PeerPass {
        delegation: signed,
        ticket: accepted.ticket,
    };
    let dir = tempfile::tempdir().unwrap();
    let sink = Dialing::Pull(Arc::new(
        FsSink::new(Root::Ambient, dir.path().to_path_buf(), 1).unwrap(),
    ));
    let at = (a.ep.host.as_str(), a.ep.port, &[][..]);
    let e = dial(&d, at, pass, client(), sink, Arc::new(Progress::default()))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the daemon dialing showed no certificate"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    drop(at_a);
    assert!(a.ended().await.is_err(), "its client left without a copy");
}

/// A CA of a site, and certificates it issues, as PEM files in `dir`.
struct SiteCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl SiteCa {
    fn new(dir: &Path) -> SiteCa {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Site CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
        SiteCa { cert, key }
    }

    /// NAME.pem and NAME.key in `dir`, for `cn`, usable as `ekus` say.
    fn issue(
        &self,
        dir: &Path,
        name: &str,
        cn: &str,
        ekus: Vec<rcgen::ExtendedKeyUsagePurpose>,
    ) -> (std::path::PathBuf, std::path::PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "Example");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.subject_alt_names
            .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
        p.extended_key_usages = ekus;
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_daemon_that_refuses_the_ssh_ends_certificate_pushes_to_it_instead() {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    use tern_engine::authz::Authz;
    use tern_engine::server::SiteAuth;
    use tern_engine::tls::{ClientCert, load_roots};
    let pki = tempfile::tempdir().unwrap();
    let ca = SiteCa::new(pki.path());
    let host = ca.issue(
        pki.path(),
        "host",
        "dtn.example.org",
        vec![ServerAuth, ClientAuth],
    );
    let alice = ca.issue(pki.path(), "alice", "Alice", vec![ClientAuth]);
    // The site daemon: certificates of its CA only, Alice may read public/.
    let site_root = tempfile::tempdir().unwrap();
    std::fs::create_dir(site_root.path().join("public")).unwrap();
    seeded_random_file(&site_root.path().join("public/big.bin"), 3 << 20, 5);
    let identity = ServerIdentity::from_pem(&host.0, &host.1).unwrap();
    let roots = load_roots(&pki.path().join("ca.pem")).unwrap();
    let mut opts = ServerOptions::new(site_root.path().to_path_buf());
    opts.site = Some(SiteAuth {
        client_roots: roots.clone(),
        authz: Arc::new(Authz::parse("\"/O=Example/CN=Alice\" public r\n").unwrap()),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site = Endpoint {
        host: "127.0.0.1".into(),
        port: listener.local_addr().unwrap().port(),
    };
    tokio::spawn(async move { serve(listener, &identity, opts, std::future::pending()).await });
    // Alice's client trusts the site's CA; the destination is an ssh end.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("in")).unwrap();
    let b = once(home.path()).await;
    let mut as_alice = client();
    as_alice.trust = tern_engine::client::Trust::Ca(roots);
    as_alice.client_cert = Some(ClientCert::from_pem(&alice.0, &alice.1).unwrap());
    let mut req = request(site, b.ep.clone());
    req.sources = vec!["public/big.bin".into()];
    let opts = TpcOptions {
        client: as_alice,
        ttl: DEFAULT_TTL,
        mode: TpcMode::Auto,
        source_once: None,
        dest_once: Some(b.client.clone()),
    };
    let outcome = third_party(&req, &opts, Arc::new(Progress::default()))
        .await
        .unwrap();
    // The ssh end could not get into the site daemon, and was told why;
    // the site daemon dialed it instead.
    assert_eq!(outcome.direction, "push");
    let why = outcome.pull_failed.clone().unwrap_or_default();
    assert!(why.contains("refused this end's certificate"), "{why}");
    assert_eq!(
        file_difference(
            site_root.path().join("public/big.bin"),
            home.path().join("in/big.bin")
        ),
        None
    );
    b.ended().await.expect("its copy ended well");
}
