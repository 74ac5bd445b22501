//! Test data and byte comparison.
//!
//! The generators are the ones the tests have always used, each under a
//! name of its own, so a test's data is what it was before the kit:
//! [`random_bytes`] (xorshift, one byte a step, seeded by the length),
//! [`random_file_streamed`] (the same xorshift eight bytes a step, for
//! files too big to hold), [`seeded_random_file`] (`StdRng` from a seed),
//! [`fresh_random_file`] (new bytes every call, for a test that rewrites a
//! file with other content of the same length) and [`hashed_bytes`] (a
//! multiplicative hash of the offset).
//!
//! The comparisons return `None` when the contents are equal, or a line
//! saying where they first differ, so that `assert_eq!(…, None, "what")`
//! fails with an offset instead of megabytes of `Vec` debug output.
//!
//! [`written_bytes`] is how far a copy got: the bytes a partial file
//! holds, not its size, which a receiver moves ahead of its writes.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use rand::{RngCore, SeedableRng};

/// `len` bytes of xorshift64 output, one byte a step, seeded by `len`
/// (distinct lengths give distinct contents).
pub fn random_bytes(len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    data
}

/// Writes [`random_bytes`]`(len)` to `path` and returns them.
pub fn random_file(path: &Path, len: usize) -> Vec<u8> {
    let data = random_bytes(len);
    std::fs::write(path, &data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    data
}

/// Writes `len` bytes of xorshift64 output to `path`, eight bytes a step
/// (little-endian), seeded by `len`, without holding them in memory. Not
/// the same bytes as [`random_file`] of the same length.
pub fn random_file_streamed(path: &Path, len: u64) {
    let mut f = BufWriter::new(create(path));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        for chunk in buf[..n].chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        f.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
    f.flush().unwrap();
}

/// Writes `len` bytes from `rand`'s `StdRng` seeded with `seed` to
/// `path`, streaming (bounded memory).
pub fn seeded_random_file(path: &Path, len: u64, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut f = BufWriter::new(create(path));
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill_bytes(&mut buf[..n]);
        f.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
    f.flush().unwrap();
}

/// Writes `len` bytes from the thread's random generator to `path` and
/// returns them: different bytes on every call, so a file rewritten with
/// the same length really changes.
pub fn fresh_random_file(path: &Path, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    rand::thread_rng().fill_bytes(&mut data);
    std::fs::write(path, &data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    data
}

/// `len` bytes where byte `i` is `(i × 2654435761) >> 13` (32-bit
/// wrapping): cheap, deterministic and without short repeats.
pub fn hashed_bytes(len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn create(path: &Path) -> File {
    File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()))
}

fn open(path: &Path) -> File {
    File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// Where `actual` first differs from `expected`, or `None` when they are
/// the same bytes: `first difference at byte N of M (expected 0xAA, got
/// 0xBB)`, or a length mismatch with the first differing offset.
pub fn difference(expected: &[u8], actual: &[u8]) -> Option<String> {
    let common = expected.len().min(actual.len());
    let at = expected[..common]
        .iter()
        .zip(&actual[..common])
        .position(|(a, b)| a != b);
    describe(
        expected.len() as u64,
        actual.len() as u64,
        at.map(|i| (i as u64, expected[i], actual[i])),
    )
}

/// Where the file `actual` first differs from the file `expected`, or
/// `None` when they hold the same bytes; compared a chunk at a time, so
/// files of any size can be.
pub fn file_difference(expected: impl AsRef<Path>, actual: impl AsRef<Path>) -> Option<String> {
    let (expected, actual) = (expected.as_ref(), actual.as_ref());
    let (mut fa, mut fb) = (open(expected), open(actual));
    let (la, lb) = (len_of(&fa, expected), len_of(&fb, actual));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut offset = 0u64;
    loop {
        let na = read_full(&mut fa, &mut ba);
        let nb = read_full(&mut fb, &mut bb);
        let n = na.min(nb);
        if let Some(i) = ba[..n].iter().zip(&bb[..n]).position(|(a, b)| a != b) {
            return describe(la, lb, Some((offset + i as u64, ba[i], bb[i])))
                .map(|d| format!("{} vs {}: {d}", expected.display(), actual.display()));
        }
        if na != nb || n == 0 {
            // One ended (or both did): equal only if both did at once.
            return describe(offset + na as u64, offset + nb as u64, None)
                .map(|d| format!("{} vs {}: {d}", expected.display(), actual.display()));
        }
        offset += n as u64;
    }
}

/// Where the file at `path` first differs from `expected`, or `None`.
pub fn content_difference(path: impl AsRef<Path>, expected: impl AsRef<[u8]>) -> Option<String> {
    let path = path.as_ref();
    let actual = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    difference(expected.as_ref(), &actual).map(|d| format!("{}: {d}", path.display()))
}

fn len_of(f: &File, path: &Path) -> u64 {
    f.metadata()
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .len()
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(f: &mut File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]).unwrap() {
            0 => break,
            k => n += k,
        }
    }
    n
}

fn describe(expected_len: u64, actual_len: u64, first: Option<(u64, u8, u8)>) -> Option<String> {
    match first {
        Some((at, e, a)) => Some(format!(
            "first difference at byte {at} (expected 0x{e:02x}, got 0x{a:02x}); \
             lengths {expected_len} expected, {actual_len} got"
        )),
        None if expected_len != actual_len => Some(format!(
            "lengths differ: {expected_len} expected, {actual_len} got \
             (equal up to byte {})",
            expected_len.min(actual_len)
        )),
        None => None,
    }
}

/// Bytes of `path` that hold written data: the sum of its data extents
/// (`SEEK_DATA`/`SEEK_HOLE`). A receiver allocates a big file ahead of its
/// writes, and that space, like a hole, holds no data yet, so neither the
/// file's size nor its allocated blocks say how much arrived. 0 when the
/// file is missing.
pub fn written_bytes(path: impl AsRef<Path>) -> u64 {
    use rustix::fs::{SeekFrom, seek};
    let Ok(file) = File::open(path) else {
        return 0;
    };
    let (mut at, mut total) = (0, 0);
    // Past the last data extent SEEK_DATA fails (ENXIO).
    while let Ok(data) = seek(&file, SeekFrom::Data(at)) {
        let hole = seek(&file, SeekFrom::Hole(data)).unwrap_or(data);
        if hole <= data {
            break;
        }
        total += hole - data;
        at = hole;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_first_offset() {
        assert_eq!(difference(b"abc", b"abc"), None);
        let d = difference(b"abcd", b"abXd").unwrap();
        assert!(
            d.contains("byte 2") && d.contains("0x63") && d.contains("0x58"),
            "{d}"
        );
        let d = difference(b"abc", b"ab").unwrap();
        assert!(
            d.contains("lengths differ") && d.contains("up to byte 2"),
            "{d}"
        );
    }

    #[test]
    fn files_compare_across_chunks() {
        let dir = std::env::temp_dir().join(format!("testkit-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        random_file_streamed(&a, (3 << 20) + 5);
        std::fs::copy(&a, &b).unwrap();
        assert_eq!(file_difference(&a, &b), None);
        let mut data = std::fs::read(&b).unwrap();
        data[(2 << 20) + 1] ^= 1;
        std::fs::write(&b, &data).unwrap();
        let d = file_difference(&a, &b).unwrap();
        assert!(d.contains(&format!("byte {}", (2 << 20) + 1)), "{d}");
        data.pop();
        data[(2 << 20) + 1] ^= 1;
        std::fs::write(&b, &data).unwrap();
        let d = file_difference(&a, &b).unwrap();
        assert!(d.contains("lengths differ"), "{d}");
        assert_eq!(content_difference(&b, &data), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generators_are_the_old_ones() {
        // First bytes of the generators as the tests had them, so that a
        // test's data is what it was before the kit.
        assert_eq!(random_bytes(4), [0xa9, 0x70, 0x12, 0xf0]);
        assert_eq!(hashed_bytes(4), [0, 187, 119, 51]);
        let dir = std::env::temp_dir().join(format!("testkit-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        random_file_streamed(&dir.join("s"), 16);
        let streamed = std::fs::read(dir.join("s")).unwrap();
        assert_eq!(streamed[..8], 0xdc1b_77aa_03d1_49bd_u64.to_le_bytes());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
