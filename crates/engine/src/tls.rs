//! TLS for the control connection (and the data connections in `private`
//! mode), the daemon's self-signed identity, and the client's pinning of it.
//!
//! The daemon generates a self-signed certificate on first start and keeps
//! it in its state directory; clients identify it by the SHA-256 of the
//! certificate (printed as `SHA256:` + unpadded base64, like ssh), recorded
//! on first contact in `known_hosts` or pinned with `--fingerprint`. Names
//! in the certificate are not checked: the fingerprint is the identity.
//! X.509 chains and client certificates come with the site-daemon mode.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::Digest as _;

use crate::{Error, Result};

/// Label for the keying material that keys `safe`-mode block MACs.
pub const BLOCK_MAC_LABEL: &[u8] = b"EXPORTER-tern-block-mac";

/// ring's suites, AES-128-GCM first: as safe for bulk data as AES-256 and
/// markedly faster, and the data path of `private` mode is TLS-bound.
fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
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
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
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
            cert: CertificateDer::from(cert),
            key: PrivatePkcs8KeyDer::from(key),
            cert_path,
        })
    }

    /// A rustls server configuration presenting this identity.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .map_err(|e| Error::Tls(e.to_string()))?;
        Ok(Arc::new(config))
    }
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

/// Accepts exactly one server certificate fingerprint, or (when none is
/// expected yet) any, remembering what it saw.
#[derive(Debug)]
pub struct PinVerifier {
    expected: Option<String>,
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
            seen: Mutex::new(None),
            algorithms: provider().signature_verification_algorithms,
        })
    }

    /// The fingerprint the server presented, once a handshake got that far.
    pub fn seen(&self) -> Option<String> {
        self.seen.lock().expect("seen").clone()
    }

    /// A rustls client configuration using this verifier.
    pub fn client_config(self: &Arc<Self>) -> Result<Arc<rustls::ClientConfig>> {
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(self.clone())
            .with_no_client_auth();
        Ok(Arc::new(config))
    }
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let fp = fingerprint(end_entity);
        *self.seen.lock().expect("seen") = Some(fp.clone());
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

/// A server name for the TLS handshake: the host itself when it parses
/// (names are not verified), else a placeholder.
pub fn server_name(host: &str) -> ServerName<'static> {
    ServerName::try_from(host.to_string())
        .unwrap_or_else(|_| ServerName::try_from("tern").expect("static name"))
}

/// Where the client remembers server identities, like ssh's
/// `StrictHostKeyChecking=accept-new`. One `HOST:PORT SHA256:…` per line.
#[derive(Debug, Clone)]
pub struct KnownHosts {
    /// The file.
    pub path: PathBuf,
}

impl KnownHosts {
    /// `$XDG_CONFIG_HOME/tern/known_hosts`, else `~/.config/tern/known_hosts`.
    pub fn default_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("tern").join("known_hosts"))
    }

    /// The fingerprint recorded for `host_port`, if any.
    pub fn lookup(&self, host_port: &str) -> Result<Option<String>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("read", &self.path, e)),
        };
        Ok(text.lines().find_map(|line| {
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some(h), Some(fp)) if h == host_port && !line.starts_with('#') => {
                    Some(fp.to_string())
                }
                _ => None,
            }
        }))
    }

    /// Records a fingerprint for a host seen for the first time.
    pub fn record(&self, host_port: &str, fingerprint: &str) -> Result<()> {
        use std::io::Write;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| Error::io("open", &self.path, e))?;
        writeln!(f, "{host_port} {fingerprint}").map_err(|e| Error::io("write", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn known_hosts_records_and_finds() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts {
            path: dir.path().join("sub/known_hosts"),
        };
        assert_eq!(kh.lookup("h:1").unwrap(), None);
        kh.record("h:1", "SHA256:abc").unwrap();
        kh.record("[::1]:4747", "SHA256:def").unwrap();
        assert_eq!(kh.lookup("h:1").unwrap().as_deref(), Some("SHA256:abc"));
        assert_eq!(
            kh.lookup("[::1]:4747").unwrap().as_deref(),
            Some("SHA256:def")
        );
        assert_eq!(kh.lookup("h:2").unwrap(), None);
    }
}
