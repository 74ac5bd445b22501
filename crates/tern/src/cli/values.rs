//! The values of `tern`'s options that are more than a number or a path:
//! the named choices, and the parsers that check ranges and say what they
//! take.

use clap::ValueEnum;

use crate::size::parse_size;

/// Data-channel protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtectArg {
    /// Encrypted and authenticated (TLS on every stream).
    Private,
    /// Authenticated, not encrypted: a keyed MAC on every block.
    Safe,
    /// Plain TCP with an unkeyed checksum per block.
    Clear,
}

/// Whole-file digest algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChecksumArg {
    /// XXH3-128: default; far faster than any disk or network.
    Xxh3,
    /// BLAKE3-256, cryptographic.
    Blake3,
    /// CRC-32C.
    Crc32c,
    /// Adler-32 (as in many HEP file catalogues).
    Adler32,
    /// MD5 (as in many HEP file catalogues).
    Md5,
    /// SHA-256.
    Sha256,
}

/// `--compress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompressArg {
    /// Compress where it pays.
    Auto,
    /// zstd on every block that shrinks.
    Zstd,
    /// LZ4 on every block that shrinks.
    Lz4,
    /// Never compress.
    None,
}

/// `--skip-existing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SkipArg {
    /// Same size.
    Size,
    /// Same size and modification time (to the nanosecond).
    Mtime,
    /// Same size and whole-file digest.
    Digest,
    /// Send every file.
    Never,
}

/// `--tpc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TpcArg {
    /// The destination dials the source.
    Pull,
    /// The source dials the destination.
    Push,
    /// Pull; push when the destination cannot reach the source.
    Auto,
}

/// `--streams`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// Decided while the transfer runs.
    Auto,
    /// Exactly this many.
    Fixed(u16),
}

pub(super) fn parse_streams(s: &str) -> Result<Streams, String> {
    if s == "auto" {
        return Ok(Streams::Auto);
    }
    match s.parse::<u16>() {
        Ok(n) if (1..=128).contains(&n) => Ok(Streams::Fixed(n)),
        _ => Err(format!(
            "'{s}' is neither 'auto' nor a stream count from 1 to 128"
        )),
    }
}

/// `--window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowArg {
    /// tern's dynamic right-sizing.
    Auto,
    /// The kernel's autotuning alone.
    Kernel,
    /// Locked at this many bytes.
    Fixed(u64),
}

pub(super) fn parse_window(s: &str) -> Result<WindowArg, String> {
    match s {
        "auto" => Ok(WindowArg::Auto),
        "kernel" => Ok(WindowArg::Kernel),
        _ => match parse_size(s) {
            Ok(n) if (4096..=1 << 30).contains(&n) => Ok(WindowArg::Fixed(n)),
            Ok(n) => Err(format!("a window of {n} bytes; 4K to 1G allowed")),
            Err(e) => Err(format!("'{s}' is not auto, kernel or a size: {e}")),
        },
    }
}

pub(super) fn non_negative_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a number of seconds between 0 and 86400"
        )),
    }
}

pub(super) fn stall_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v == 0.0 || (0.1..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not 0 (never) or a number of seconds between 0.1 and 86400"
        )),
    }
}

pub(super) fn positive_days(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 36_500.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of days above 0")),
    }
}

pub(crate) fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (1.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a number of seconds between 1 and 86400"
        )),
    }
}
