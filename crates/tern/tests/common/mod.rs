//! Helpers shared by the `tern` test binaries.

use std::path::Path;

/// Says why `test` cannot run here and skips it; when `TERN_TEST_STRICT`
/// is set (CI, as root) fails it instead, since there every test must run.
pub fn skip(test: &str, why: &str) {
    if std::env::var_os("TERN_TEST_STRICT").is_some_and(|v| !v.is_empty()) {
        panic!("{test} cannot run: {why} (TERN_TEST_STRICT is set: no test may skip)");
    }
    eprintln!("SKIP {test}: {why}");
}

/// Writes `len` bytes of pseudo-random data (seeded by the length) and
/// returns them.
pub fn random_file(path: &Path, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(path, &data).unwrap();
    data
}
