//! Integrity: the per-block check and the whole-file digest.
//!
//! Two different jobs, two different tools. The per-block check travels in
//! every block header and lets the receiver reject a damaged block at once
//! and ask for it again; it must be cheap, so it is XXH3-128 (tens of GB/s
//! per core), or in `safe` mode a BLAKE3 MAC keyed from the control TLS
//! session so that injected data is caught too. The whole-file digest is the
//! end-to-end proof that the bytes on the receiver's disk are the bytes read
//! from the sender's disk, in the algorithm the user asked for (HEP
//! catalogues store Adler-32 and MD5).

use md5::Digest as _;
use tern_proto::{BLOCK_CHECK_LEN, ChecksumAlg};

/// `file_id | offset | length`, big-endian: the header fields a check binds.
fn position(file_id: u32, offset: u64, len: usize) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..4].copy_from_slice(&file_id.to_be_bytes());
    p[4..12].copy_from_slice(&offset.to_be_bytes());
    p[12..].copy_from_slice(&(len as u32).to_be_bytes());
    p
}

/// Computes and verifies per-block checks.
#[derive(Clone)]
pub enum BlockCheck {
    /// XXH3-128 of the payload, seeded with the XXH3-64 of the block's
    /// position (`file_id | offset | length`).
    Xxh3,
    /// BLAKE3 keyed MAC over `file_id | offset | length | payload`.
    KeyedBlake3([u8; 32]),
    /// None in the header: the stream's TLS AEAD checked every byte of the
    /// block before it was read (`private` mode with `AEAD_CHECKS`). The
    /// header travels inside the same records, so its position is checked
    /// too; the whole-file digest still proves the file end to end.
    Aead,
}

impl std::fmt::Debug for BlockCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockCheck::Xxh3 => f.write_str("Xxh3"),
            BlockCheck::KeyedBlake3(_) => f.write_str("KeyedBlake3(..)"),
            BlockCheck::Aead => f.write_str("Aead"),
        }
    }
}

impl BlockCheck {
    /// The check of one block.
    pub fn compute(&self, file_id: u32, offset: u64, payload: &[u8]) -> [u8; BLOCK_CHECK_LEN] {
        match self {
            BlockCheck::Xxh3 => {
                // Bind the position too: a header damaged in flight must not
                // put a good payload in the wrong place. The seed costs one
                // 16-byte hash; the payload is hashed once.
                let seed = xxhash_rust::xxh3::xxh3_64(&position(file_id, offset, payload.len()));
                twox_hash::XxHash3_128::oneshot_with_seed(seed, payload).to_be_bytes()
            }
            BlockCheck::KeyedBlake3(key) => {
                let mut h = blake3::Hasher::new_keyed(key);
                h.update(&position(file_id, offset, payload.len()));
                h.update(payload);
                let mut out = [0u8; BLOCK_CHECK_LEN];
                out.copy_from_slice(&h.finalize().as_bytes()[..BLOCK_CHECK_LEN]);
                out
            }
            BlockCheck::Aead => [0; BLOCK_CHECK_LEN],
        }
    }

    /// True when `check` is the check of this block.
    pub fn verify(
        &self,
        file_id: u32,
        offset: u64,
        payload: &[u8],
        check: &[u8; BLOCK_CHECK_LEN],
    ) -> bool {
        // Constant time is not needed for the unkeyed check, and for the MAC
        // a forger learns nothing useful from timing: a failed block is
        // simply requested again over the authenticated control channel.
        &self.compute(file_id, offset, payload) == check
    }
}

/// An incremental whole-file digest.
#[derive(Clone)]
pub enum FileDigest {
    /// XXH3-128 (twox-hash: it picks AVX2 at run time where the CPU has it).
    Xxh3(Box<twox_hash::XxHash3_128>),
    /// BLAKE3-256.
    Blake3(Box<blake3::Hasher>),
    /// CRC-32C.
    Crc32c(u32),
    /// Adler-32.
    Adler32(adler2::Adler32),
    /// MD5.
    Md5(md5::Md5),
    /// SHA-256.
    Sha256(sha2::Sha256),
}

impl std::fmt::Debug for FileDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileDigest({})", self.algorithm().name())
    }
}

impl FileDigest {
    /// A fresh digest of the given algorithm.
    pub fn new(alg: ChecksumAlg) -> FileDigest {
        match alg {
            ChecksumAlg::Xxh3 => FileDigest::Xxh3(Box::new(twox_hash::XxHash3_128::new())),
            ChecksumAlg::Blake3 => FileDigest::Blake3(Box::default()),
            ChecksumAlg::Crc32c => FileDigest::Crc32c(0),
            ChecksumAlg::Adler32 => FileDigest::Adler32(adler2::Adler32::new()),
            ChecksumAlg::Md5 => FileDigest::Md5(md5::Md5::new()),
            ChecksumAlg::Sha256 => FileDigest::Sha256(sha2::Sha256::new()),
        }
    }

    /// Which algorithm this is.
    pub fn algorithm(&self) -> ChecksumAlg {
        match self {
            FileDigest::Xxh3(_) => ChecksumAlg::Xxh3,
            FileDigest::Blake3(_) => ChecksumAlg::Blake3,
            FileDigest::Crc32c(_) => ChecksumAlg::Crc32c,
            FileDigest::Adler32(_) => ChecksumAlg::Adler32,
            FileDigest::Md5(_) => ChecksumAlg::Md5,
            FileDigest::Sha256(_) => ChecksumAlg::Sha256,
        }
    }

    /// Feeds the next bytes of the file, in order.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            FileDigest::Xxh3(h) => h.write(data),
            FileDigest::Blake3(h) => {
                h.update(data);
            }
            FileDigest::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
            FileDigest::Adler32(a) => a.write_slice(data),
            FileDigest::Md5(h) => h.update(data),
            FileDigest::Sha256(h) => h.update(data),
        }
    }

    /// The digest bytes (big-endian for the integer checksums, as the
    /// usual command-line tools print them).
    pub fn finish(self) -> Vec<u8> {
        match self {
            FileDigest::Xxh3(h) => h.finish_128().to_be_bytes().to_vec(),
            FileDigest::Blake3(h) => h.finalize().as_bytes().to_vec(),
            FileDigest::Crc32c(c) => c.to_be_bytes().to_vec(),
            FileDigest::Adler32(a) => a.checksum().to_be_bytes().to_vec(),
            FileDigest::Md5(h) => h.finalize().to_vec(),
            FileDigest::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

/// Digest of a whole byte slice, for tests and small files.
pub fn digest_of(alg: ChecksumAlg, data: &[u8]) -> Vec<u8> {
    let mut d = FileDigest::new(alg);
    d.update(data);
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(alg: ChecksumAlg, data: &[u8]) -> String {
        hex::encode(digest_of(alg, data))
    }

    #[test]
    fn digests_match_the_reference_values() {
        // Reference values from the algorithms' usual command-line tools.
        assert_eq!(
            hex(ChecksumAlg::Md5, b"abc"),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            hex(ChecksumAlg::Sha256, b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(ChecksumAlg::Adler32, b"Wikipedia"), "11e60398");
        assert_eq!(hex(ChecksumAlg::Crc32c, b"123456789"), "e3069283");
        assert_eq!(
            hex(ChecksumAlg::Blake3, b""),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for alg in ChecksumAlg::ALL {
            let mut d = FileDigest::new(alg);
            for chunk in data.chunks(777) {
                d.update(chunk);
            }
            assert_eq!(d.finish(), digest_of(alg, &data), "{}", alg.name());
        }
    }

    #[test]
    fn keyed_check_binds_the_position_and_the_key() {
        let mac = BlockCheck::KeyedBlake3([1; 32]);
        let c = mac.compute(1, 0, b"data");
        assert!(mac.verify(1, 0, b"data", &c));
        assert!(!mac.verify(1, 4096, b"data", &c));
        assert!(!mac.verify(2, 0, b"data", &c));
        assert!(!BlockCheck::KeyedBlake3([2; 32]).verify(1, 0, b"data", &c));
        let x = BlockCheck::Xxh3.compute(1, 0, b"data");
        assert!(BlockCheck::Xxh3.verify(1, 0, b"data", &x));
        assert!(!BlockCheck::Xxh3.verify(1, 0, b"dat4", &x));
        assert!(
            !BlockCheck::Xxh3.verify(1, 4096, b"data", &x),
            "a moved block is caught"
        );
        assert!(
            !BlockCheck::Xxh3.verify(3, 0, b"data", &x),
            "a block of another file is caught"
        );
    }
}
