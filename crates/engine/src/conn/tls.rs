//! TLS for the control connection (and the data connections in `private`
//! mode): the daemon's identity, how a client checks it, and client
//! certificates.
//!
//! Two ways to know a daemon. By default it generates a self-signed
//! certificate on first start and keeps it in its state directory; clients
//! identify it by the SHA-256 of the certificate (printed as `SHA256:` +
//! unpadded base64, like ssh), recorded on first contact in `known_hosts`
//! or pinned with `--fingerprint`, and names are not checked. A site daemon
//! instead presents a certificate issued by a CA (`--tls-cert`,
//! `--tls-key`); a client given that CA (`--ca`) verifies the chain and the
//! host name as any TLS client would, and skips `known_hosts`.
//!
//! A site daemon may also demand client certificates (`--client-ca`): the
//! handshake then fails for a certificate of another CA, an expired one or
//! none at all, and what a verified subject may do is decided by
//! [`crate::conn::authz`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tern_proto::Token;

use base64::Engine as _;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::Digest as _;

use crate::{Error, Result};

/// Label for the keying material that keys `safe`-mode block MACs.
pub const BLOCK_MAC_LABEL: &[u8] = b"EXPORTER-tern-block-mac";

/// aws-lc-rs's suites, AES-128-GCM first: as safe for bulk data as AES-256
/// and markedly faster, and the data path of `private` mode is TLS-bound.
fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites.sort_by_key(|s| match s.suite() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 1,
        _ => 2,
    });
    Arc::new(p)
}

/// The SHA-256 fingerprint of a certificate, as `SHA256:<base64>`.
pub fn fingerprint(cert: &[u8]) -> String {
    let hash = sha2::Sha256::digest(cert);
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash)
    )
}

/// The daemon's certificate and key.
#[derive(Debug)]
pub struct ServerIdentity {
    /// The daemon's certificate first, then any intermediates.
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// `SHA256:…` of the certificate.
    pub fingerprint: String,
    /// Where the certificate is kept.
    pub cert_path: PathBuf,
}

impl ServerIdentity {
    /// Loads the identity from `state_dir`, creating it (and the directory,
    /// mode 0700) on first start.
    pub fn load_or_create(state_dir: &Path) -> Result<ServerIdentity> {
        let cert_path = state_dir.join("server-cert.der");
        let key_path = state_dir.join("server-key.der");
        if !cert_path.exists() || !key_path.exists() {
            std::fs::create_dir_all(state_dir)
                .map_err(|e| Error::io("create state dir", state_dir, e))?;
            set_mode(state_dir, 0o700)?;
            let host = hostname();
            let made = rcgen::generate_simple_self_signed(vec!["tern".to_string(), host])
                .map_err(|e| Error::Tls(format!("generating a certificate: {e}")))?;
            write_private(&key_path, &made.key_pair.serialize_der())?;
            std::fs::write(&cert_path, made.cert.der())
                .map_err(|e| Error::io("write certificate", &cert_path, e))?;
        }
        let cert = std::fs::read(&cert_path).map_err(|e| Error::io("read", &cert_path, e))?;
        let key = std::fs::read(&key_path).map_err(|e| Error::io("read", &key_path, e))?;
        Ok(ServerIdentity {
            fingerprint: fingerprint(&cert),
            chain: vec![CertificateDer::from(cert)],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
            cert_path,
        })
    }

    /// A CA-issued identity from PEM files (`--tls-cert`, `--tls-key`): the
    /// certificate file holds the daemon's certificate and any
    /// intermediates; the key must belong to that certificate.
    pub fn from_pem(cert_path: &Path, key_path: &Path) -> Result<ServerIdentity> {
        let chain = load_certs(cert_path)?;
        let key = load_key(key_path)?;
        let identity = ServerIdentity {
            fingerprint: fingerprint(&chain[0]),
            chain,
            key,
            cert_path: cert_path.to_path_buf(),
        };
        // Fails here, at startup, when the key does not match.
        identity.server_config(None)?;
        Ok(identity)
    }

    /// The same certificate and key, to present as a client (a daemon
    /// dialing another for a third-party copy).
    pub fn as_client(&self) -> ClientCert {
        ClientCert {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            always: true,
        }
    }

    /// A rustls server configuration presenting this identity; with
    /// `client_roots`, clients must present a certificate those CAs issued.
    pub fn server_config(
        &self,
        client_roots: Option<Arc<RootCertStore>>,
    ) -> Result<Arc<rustls::ServerConfig>> {
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?;
        let builder = match client_roots {
            Some(roots) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| Error::Tls(format!("client CA: {e}")))?,
            ),
            None => builder.with_client_cert_verifier(Arc::new(AnyClientCert {
                algorithms: provider().signature_verification_algorithms,
            })),
        };
        let config = builder
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| Error::Tls(format!("certificate and key: {e}")))?;
        Ok(Arc::new(config))
    }
}

/// A daemon without a client CA: a client may show a certificate (it must
/// prove it holds the key), and needs none. Only its fingerprint is used:
/// the daemon dialing for a third-party copy shows its own, which the
/// delegation names (`conn::server::tpc`).
#[derive(Debug)]
struct AnyClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let text = std::fs::read(path).map_err(|e| Error::io("read certificate", path, e))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Tls(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Tls(format!(
            "{}: no PEM certificate (-----BEGIN CERTIFICATE-----) found",
            path.display()
        )));
    }
    Ok(certs)
}

/// Reads the private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let text = std::fs::read(path).map_err(|e| Error::io("read key", path, e))?;
    PrivateKeyDer::from_pem_slice(&text)
        .map_err(|e| Error::Tls(format!("{}: no usable private key: {e}", path.display())))
}

/// Trust anchors from a PEM file, or from every `*.pem`/`*.crt` file of a
/// directory (like a grid `certificates/` directory).
pub fn load_roots(path: &Path) -> Result<Arc<RootCertStore>> {
    let files = if path.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| Error::io("read CA dir", path, e))? {
            let p = entry.map_err(|e| Error::io("read CA dir", path, e))?.path();
            if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pem" | "crt" | "0")
            ) {
                files.push(p);
            }
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut roots = RootCertStore::empty();
    for f in &files {
        for cert in load_certs(f)? {
            roots
                .add(cert)
                .map_err(|e| Error::Tls(format!("{}: not a usable CA: {e}", f.display())))?;
        }
    }
    if roots.is_empty() {
        return Err(Error::Tls(format!(
            "{}: no CA certificates found",
            path.display()
        )));
    }
    Ok(Arc::new(roots))
}

/// The certificate a client presents to a site daemon.
#[derive(Debug)]
pub struct ClientCert {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// Shown to every server that asks, not only to one that names the
    /// CAs it trusts: a daemon's own identity when it dials for a
    /// third-party copy, which the other daemon checks whatever its mode.
    always: bool,
}

impl Clone for ClientCert {
    fn clone(&self) -> ClientCert {
        ClientCert {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            always: self.always,
        }
    }
}

impl ClientCert {
    /// `SHA256:…` of the certificate.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.chain[0])
    }

    /// From PEM files (`--cert`, `--key`).
    pub fn from_pem(cert_path: &Path, key_path: &Path) -> Result<ClientCert> {
        Ok(ClientCert {
            chain: load_certs(cert_path)?,
            key: load_key(key_path)?,
            always: false,
        })
    }
}

/// Derives the per-session block MAC key from exported keying material and
/// the session token (both ends do the same).
pub fn bind_token(material: &[u8; 32], token: &Token) -> [u8; 32] {
    *blake3::keyed_hash(material, token).as_bytes()
}

/// How a client decides the daemon is the right one.
#[derive(Debug, Clone)]
pub enum ServerTrust {
    /// Its certificate has this fingerprint; `None`: trust on first use.
    Pin(Option<String>),
    /// Its certificate chains to one of these CAs and names the host.
    Ca(Arc<RootCertStore>),
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io("chmod", path, e))
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("create key", path, e))?;
    f.write_all(data)
        .map_err(|e| Error::io("write key", path, e))
}

/// Checks the server's certificate as [`ServerTrust`] says, remembering
/// the fingerprint it saw either way.
#[derive(Debug)]
pub struct PinVerifier {
    expected: Option<String>,
    /// Set in CA mode: chain and name are checked by webpki instead.
    webpki: Option<Arc<WebPkiServerVerifier>>,
    /// Fingerprint presented in the last handshake; written by rustls
    /// during the handshake, read by the client right after it.
    seen: Mutex<Option<String>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinVerifier {
    /// A verifier expecting `expected`, or trusting on first use when `None`.
    pub fn new(expected: Option<String>) -> Arc<PinVerifier> {
        Arc::new(PinVerifier {
            expected,
            webpki: None,
            seen: Mutex::new(None),
            algorithms: provider().signature_verification_algorithms,
        })
    }

    /// A verifier for `trust`.
    pub fn for_trust(trust: &ServerTrust) -> Result<Arc<PinVerifier>> {
        match trust {
            ServerTrust::Pin(expected) => Ok(PinVerifier::new(expected.clone())),
            ServerTrust::Ca(roots) => {
                let webpki = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
                    .build()
                    .map_err(|e| Error::Tls(format!("CA: {e}")))?;
                Ok(Arc::new(PinVerifier {
                    expected: None,
                    webpki: Some(webpki),
                    seen: Mutex::new(None),
                    algorithms: provider().signature_verification_algorithms,
                }))
            }
        }
    }

    /// The fingerprint the server presented, once a handshake got that far.
    pub fn seen(&self) -> Option<String> {
        self.seen.lock().expect("seen").clone()
    }

    /// A rustls client configuration using this verifier, presenting
    /// `cert` when the server asks for one.
    pub fn client_config(
        self: &Arc<Self>,
        cert: Option<&ClientCert>,
    ) -> Result<Arc<rustls::ClientConfig>> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(self.clone());
        let config = match cert {
            Some(c) => {
                let key = CertifiedKey::from_der(c.chain.clone(), c.key.clone_key(), &provider())
                    .map_err(|e| Error::Tls(format!("client certificate and key: {e}")))?;
                builder.with_client_cert_resolver(Arc::new(ShowCert {
                    key: Arc::new(key),
                    always: c.always,
                }))
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let fp = fingerprint(end_entity);
        *self.seen.lock().expect("seen") = Some(fp.clone());
        if let Some(webpki) = &self.webpki {
            return webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            );
        }
        match &self.expected {
            Some(expected) if *expected != fp => Err(rustls::Error::General(format!(
                "server fingerprint {fp} is not the expected {expected}"
            ))),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Shows a client certificate to a server that asks for one naming the
/// CAs it trusts (a site daemon), or to any that asks when `always`. A
/// daemon without a client CA asks every client for an optional one and
/// names none: a user's `--cert` is not shown to it.
#[derive(Debug)]
struct ShowCert {
    key: Arc<CertifiedKey>,
    always: bool,
}

impl ResolvesClientCert for ShowCert {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        (self.always || !root_hint_subjects.is_empty()).then(|| self.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Says what went wrong when a TLS connection failed: the peer's alert or
/// our verifier's complaint, in words a user can act on. `None` when the
/// error is not a TLS one.
pub fn explain(e: &std::io::Error) -> Option<String> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    use rustls::AlertDescription as A;
    Some(match tls {
        rustls::Error::AlertReceived(alert) => match alert {
            A::UnknownCA => {
                "the server does not trust the CA of our certificate (unknown CA)".into()
            }
            A::CertificateExpired => "the server refused our certificate: it has expired".into(),
            A::CertificateRequired => {
                "the server requires a client certificate (use --cert and --key)".into()
            }
            A::BadCertificate | A::CertificateUnknown | A::UnsupportedCertificate => {
                format!("the server refused our certificate ({alert:?})")
            }
            A::AccessDenied => "the server denied access".into(),
            other => format!("the server ended the handshake ({other:?})"),
        },
        rustls::Error::InvalidCertificate(why) => {
            format!("the server's certificate is not trusted: {why:?}")
        }
        other => other.to_string(),
    })
}

/// Whether a failed handshake was the server refusing *our* certificate
/// (one of [`explain`]'s alerts about it). Under TLS 1.3 a client shows
/// its certificate only after it checked the server's, so the server had
/// already proved itself.
pub(crate) fn refused_our_certificate(e: &Error) -> bool {
    let Error::Tls(why) = e else {
        return false;
    };
    [
        "our certificate",
        "requires a client certificate",
        "denied access",
    ]
    .iter()
    .any(|said| why.contains(said))
}

/// A server name for the TLS handshake: the host itself when it parses
/// (names are checked only in CA mode), else a placeholder.
pub fn server_name(host: &str) -> ServerName<'static> {
    ServerName::try_from(host.to_string())
        .unwrap_or_else(|_| ServerName::try_from("tern").expect("static name"))
}

pub use crate::conn::known_hosts::KnownHosts;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_certificate_goes_only_to_servers_naming_their_cas() {
        let dir = tempfile::tempdir().unwrap();
        let identity = ServerIdentity::load_or_create(dir.path()).unwrap();
        let shown = |cert: ClientCert, hints: &[&[u8]]| {
            let key = CertifiedKey::from_der(cert.chain.clone(), cert.key.clone_key(), &provider())
                .unwrap();
            let resolver = ShowCert {
                key: Arc::new(key),
                always: cert.always,
            };
            resolver.resolve(hints, &[]).is_some()
        };
        let users = || ClientCert {
            always: false,
            ..identity.as_client()
        };
        let site_ca: &[&[u8]] = &[b"0\x0b1\t0\x07\x06\x03U\x04\x03\x0c\x00"];
        assert!(!shown(users(), &[]), "not to a daemon that names no CA");
        assert!(shown(users(), site_ca), "to a site daemon");
        // A daemon dialing for a third-party copy shows its own always.
        assert!(shown(identity.as_client(), &[]));
    }

    #[test]
    fn identity_is_created_once_and_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let a = ServerIdentity::load_or_create(&state).unwrap();
        let b = ServerIdentity::load_or_create(&state).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert!(a.fingerprint.starts_with("SHA256:"));
        assert_eq!(a.fingerprint.len(), 7 + 43);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.join("server-key.der"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let other = ServerIdentity::load_or_create(&dir.path().join("other")).unwrap();
        assert_ne!(a.fingerprint, other.fingerprint);
    }
}
