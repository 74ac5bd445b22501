//! The keys of one direction of a TLS 1.3 connection after its handshake:
//! the traffic secret, the AEAD key and IV derived from it (RFC 8446
//! §7.3), the record sequence number that makes each nonce, and the next
//! generation a `KeyUpdate` moves to (§7.2).
//!
//! rustls hands over the key, IV and sequence number
//! (`dangerous_extract_secrets`) but not the traffic secret, without which
//! a key update cannot be followed; [`SecretCapture`] takes the secret
//! from rustls's key log hook, for the one connection it is given to.

use std::sync::{Arc, Mutex};

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hkdf;
use rustls::{CipherSuite, ConnectionTrafficSecrets, SupportedCipherSuite};

/// Length of a TLS 1.3 AEAD nonce (and of the IV it is made from).
const NONCE_LEN: usize = 12;

/// A TLS 1.3 cipher suite the record layer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Suite {
    aead: &'static aead::Algorithm,
    hkdf: hkdf::Algorithm,
    hash_len: usize,
    /// Records one key may seal (AES-GCM's confidentiality limit).
    pub(crate) limit: u64,
}

impl Suite {
    /// `suite`, if it is a TLS 1.3 suite the record layer knows.
    pub(crate) fn of(suite: SupportedCipherSuite) -> Option<Suite> {
        let SupportedCipherSuite::Tls13(s) = suite else {
            return None;
        };
        let limit = s.common.confidentiality_limit;
        let (aead, hkdf, hash_len) = match s.common.suite {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => (&aead::AES_128_GCM, hkdf::HKDF_SHA256, 32),
            CipherSuite::TLS13_AES_256_GCM_SHA384 => (&aead::AES_256_GCM, hkdf::HKDF_SHA384, 48),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => {
                (&aead::CHACHA20_POLY1305, hkdf::HKDF_SHA256, 32)
            }
            _ => return None,
        };
        Some(Suite {
            aead,
            hkdf,
            hash_len,
            limit,
        })
    }
}

/// One direction's keys and where its record sequence stands.
pub(crate) struct Keys {
    suite: Suite,
    secret: Vec<u8>,
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
    /// The sequence number of the next record.
    pub(crate) seq: u64,
    /// Key updates since the handshake.
    pub(crate) generation: u32,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("generation", &self.generation)
            .field("seq", &self.seq)
            .finish()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.secret.fill(0);
        self.iv.fill(0);
    }
}

/// Why keys could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("the traffic secret has the wrong length for the cipher suite")]
    SecretLength,
    #[error("the keys rustls derived differ from the record layer's")]
    Mismatch,
}

impl Keys {
    /// The keys of `secret` (an application traffic secret), from record
    /// `seq` on.
    pub(crate) fn new(suite: Suite, secret: &[u8], seq: u64) -> Result<Keys, KeyError> {
        if secret.len() != suite.hash_len {
            return Err(KeyError::SecretLength);
        }
        let mut key = vec![0u8; suite.aead.key_len()];
        expand_label(suite.hkdf, secret, b"key", &mut key);
        let mut iv = [0u8; NONCE_LEN];
        expand_label(suite.hkdf, secret, b"iv", &mut iv);
        let unbound = UnboundKey::new(suite.aead, &key);
        key.fill(0);
        let unbound = unbound.map_err(|_| KeyError::SecretLength)?;
        Ok(Keys {
            suite,
            secret: secret.to_vec(),
            key: LessSafeKey::new(unbound),
            iv,
            seq,
            generation: 0,
        })
    }

    /// Checks that these are the keys rustls uses (`theirs`): the secret
    /// taken from the key log belongs to this connection and direction.
    pub(crate) fn check(&self, theirs: &ConnectionTrafficSecrets) -> Result<(), KeyError> {
        let (key, iv) = match theirs {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv }
            | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
            | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv),
            _ => return Err(KeyError::Mismatch),
        };
        let mut ours = vec![0u8; self.suite.aead.key_len()];
        expand_label(self.suite.hkdf, &self.secret, b"key", &mut ours);
        let same = ours == key.as_ref() && self.iv[..] == *iv.as_ref();
        ours.fill(0);
        if same {
            Ok(())
        } else {
            Err(KeyError::Mismatch)
        }
    }

    /// The next generation, after a `KeyUpdate` (§7.2): its sequence
    /// starts at 0.
    pub(crate) fn next(&self) -> Keys {
        let mut secret = vec![0u8; self.suite.hash_len];
        expand_label(self.suite.hkdf, &self.secret, b"traffic upd", &mut secret);
        let mut next = Keys::new(self.suite, &secret, 0).expect("a secret of the suite's length");
        secret.fill(0);
        next.generation = self.generation + 1;
        next
    }

    /// The nonce of the next record (§5.3); advances the sequence.
    fn nonce(&mut self) -> Nonce {
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        self.seq += 1;
        Nonce::assume_unique_for_key(nonce)
    }

    /// Encrypts `in_out` in place as the next record with header `aad`.
    pub(crate) fn seal(&mut self, aad: [u8; 5], in_out: &mut [u8]) -> aead::Tag {
        let nonce = self.nonce();
        self.key
            .seal_in_place_separate_tag(nonce, Aad::from(aad), in_out)
            .expect("AES-GCM and ChaCha20 seal any record-sized input")
    }

    /// Decrypts the next record (header `aad`, `ciphertext` then `tag`)
    /// into `out` (as long as the ciphertext); false if it is not
    /// authentic.
    pub(crate) fn open(
        &mut self,
        aad: [u8; 5],
        ciphertext: &[u8],
        tag: &[u8],
        out: &mut [u8],
    ) -> bool {
        let nonce = self.nonce();
        self.key
            .open_separate_gather(nonce, Aad::from(aad), ciphertext, tag, out)
            .is_ok()
    }
}

/// HKDF-Expand-Label(secret, label, "", out.len()) (RFC 8446 §7.1).
fn expand_label(alg: hkdf::Algorithm, secret: &[u8], label: &[u8], out: &mut [u8]) {
    struct Len(usize);
    impl hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    let length = u16::try_from(out.len())
        .expect("short output")
        .to_be_bytes();
    let label_len = [u8::try_from(6 + label.len()).expect("short label")];
    let info: [&[u8]; 5] = [&length, &label_len, b"tls13 ", label, &[0]];
    hkdf::Prk::new_less_safe(alg, secret)
        .expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .expect("HKDF output within 255 hash lengths");
}

/// The application traffic secrets of one connection, as rustls's key log
/// hook gives them: a [`rustls::KeyLog`] for one connection's config.
#[derive(Debug, Clone, Default)]
pub(crate) struct SecretCapture(Arc<Mutex<Captured>>);

#[derive(Default)]
struct Captured {
    client: Option<Vec<u8>>,
    server: Option<Vec<u8>>,
}

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Captured")
            .field("client", &self.client.is_some())
            .field("server", &self.server.is_some())
            .finish()
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        for s in [&mut self.client, &mut self.server].into_iter().flatten() {
            s.fill(0);
        }
    }
}

/// A traffic secret, zeroed when dropped.
pub(crate) struct Secret(pub(crate) Vec<u8>);

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.fill(0);
    }
}

const CLIENT_TRAFFIC: &str = "CLIENT_TRAFFIC_SECRET_0";
const SERVER_TRAFFIC: &str = "SERVER_TRAFFIC_SECRET_0";

impl SecretCapture {
    /// The client's and the server's first application traffic secrets,
    /// once the handshake has made them.
    pub(crate) fn take(&self) -> Option<(Secret, Secret)> {
        let mut c = self.0.lock().expect("secret capture");
        let (client, server) = (c.client.take().map(Secret), c.server.take().map(Secret));
        Some((client?, server?))
    }
}

impl rustls::KeyLog for SecretCapture {
    fn log(&self, label: &str, _client_random: &[u8], secret: &[u8]) {
        let mut c = self.0.lock().expect("secret capture");
        let slot = match label {
            CLIENT_TRAFFIC => &mut c.client,
            SERVER_TRAFFIC => &mut c.server,
            _ => return,
        };
        if let Some(old) = slot.as_mut() {
            old.fill(0);
        }
        *slot = Some(secret.to_vec());
    }

    fn will_log(&self, label: &str) -> bool {
        matches!(label, CLIENT_TRAFFIC | SERVER_TRAFFIC)
    }
}
