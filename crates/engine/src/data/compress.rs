//! Block compression: the codecs, and when compressing pays.
//!
//! The sending end compresses one block at a time, after reading it and
//! before writing it, so the block check (over the uncompressed bytes at
//! their offset) and repair work as for raw blocks. A block that does not
//! shrink is sent raw.
//!
//! `--compress auto` ([`Compression::Auto`]) decides per block with a
//! [`Policy`] shared by the session's stream workers, from what they
//! measured: the compressor's time per raw byte, the bytes it saved, and the
//! time the network takes per wire byte (a block write waits while the
//! connection drains, so that time is what a saved byte saves). A worker
//! reads, compresses and writes in turn, so compressing a block pays when
//! it costs less time than the write time it saves. The network's cost is
//! a slowly decaying maximum rather than an average: while compression
//! keeps the link from filling, writes go quickly, but the link is no
//! faster for it, and sending raw would fill it again. The policy
//!
//! - gives up on a file after [`GIVE_UP_AFTER`] blocks in a row that did
//!   not shrink (already compressed data), trying again one block in
//!   [`PROBE_EVERY`];
//! - stops compressing while the network is faster than the compressor
//!   (the saved write time is below the compression time), again trying one
//!   block in [`PROBE_EVERY`] so that it notices when the network slows;
//! - asks a block to save at least 1/16 of its bytes, or it is sent raw.
//!
//! Explicit `zstd` or `lz4` compress every block and send raw only those
//! that do not shrink at all.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tern_proto::data::RAW_LEN_LEN;
use tern_proto::{Codec, Compression};

/// zstd level for `--compress zstd`: zstd's default, a good ratio.
const ZSTD_LEVEL: i32 = 3;
/// zstd level for `--compress auto`: its fastest regular level.
const AUTO_ZSTD_LEVEL: i32 = 1;
/// Blocks in a row that did not shrink before `auto` gives up on a file.
pub const GIVE_UP_AFTER: u32 = 4;
/// While `auto` has given up (on a file, or because the network is fast),
/// one block in this many is still compressed, to notice a change.
pub const PROBE_EVERY: u64 = 32;
/// Blocks measured before `auto` trusts its estimates.
const WARM_UP: u64 = 8;
/// Weight of a new sample in the running estimates.
const EWMA_WEIGHT: f64 = 0.125;
/// Share of the network's cost per byte forgotten with every write.
const WIRE_DECAY: f64 = 1.0 / 8.0;

/// Most bytes a compressed payload (raw length prefix included) may take
/// for a block of `block_size`: the buffer a sender needs.
pub fn max_payload(block_size: usize) -> usize {
    RAW_LEN_LEN
        + zstd::zstd_safe::compress_bound(block_size)
            .max(lz4_flex::block::get_maximum_output_size(block_size))
}

/// One worker's compressor; keeps the zstd context between blocks.
pub struct BlockCompressor {
    zstd: Option<zstd::bulk::Compressor<'static>>,
    level: i32,
}

impl std::fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockCompressor(level {})", self.level)
    }
}

impl BlockCompressor {
    /// A compressor for blocks chosen under `mode`.
    pub fn new(mode: Compression) -> BlockCompressor {
        BlockCompressor {
            zstd: None,
            level: if mode == Compression::Auto {
                AUTO_ZSTD_LEVEL
            } else {
                ZSTD_LEVEL
            },
        }
    }

    /// Compresses `raw` with `codec` into `out` (at least
    /// [`max_payload`]`(raw.len())` long) as a compressed payload: the raw
    /// length, then the compressed bytes. Returns the payload's length
    /// when it is at most `limit`, `None` when it is longer (or the codec
    /// failed): the block is then sent raw.
    pub fn compress(
        &mut self,
        codec: Codec,
        raw: &[u8],
        out: &mut [u8],
        limit: usize,
    ) -> Option<usize> {
        let (prefix, body) = out.split_at_mut(RAW_LEN_LEN);
        prefix.copy_from_slice(&tern_proto::RawLen(raw.len() as u32).encode());
        let n = match codec {
            Codec::Zstd => {
                if self.zstd.is_none() {
                    self.zstd = zstd::bulk::Compressor::new(self.level).ok();
                }
                self.zstd.as_mut()?.compress_to_buffer(raw, body).ok()?
            }
            Codec::Lz4 => lz4_flex::block::compress_into(raw, body).ok()?,
        };
        (RAW_LEN_LEN + n <= limit).then_some(RAW_LEN_LEN + n)
    }
}

/// Decompresses a compressed payload's body into `out`, which has the
/// block's raw length. False when the bytes are not a valid stream of
/// `codec` or do not make exactly `out.len()` bytes: the block then counts
/// as damaged.
pub fn decompress(codec: Codec, body: &[u8], out: &mut [u8]) -> bool {
    let made = match codec {
        Codec::Zstd => zstd::bulk::decompress_to_buffer(body, out).ok(),
        Codec::Lz4 => lz4_flex::block::decompress_into(body, out).ok(),
    };
    made == Some(out.len())
}

/// What compression did in a transfer, as this end counted it.
#[derive(Debug, Default)]
pub struct Counters {
    /// Payload bytes of the blocks, uncompressed.
    pub bytes_raw: AtomicU64,
    /// Payload bytes of the blocks as they went over the wire.
    pub bytes_wire: AtomicU64,
    /// Blocks sent compressed with zstd.
    pub blocks_zstd: AtomicU64,
    /// Blocks sent compressed with LZ4.
    pub blocks_lz4: AtomicU64,
    /// Blocks sent raw (not tried, or did not shrink).
    pub blocks_raw: AtomicU64,
    /// Blocks compressed for nothing: they did not shrink enough and went
    /// raw (sender only).
    pub blocks_not_shrunk: AtomicU64,
}

impl Counters {
    /// Counts one block of `raw` bytes that took `wire` bytes with `codec`.
    pub fn block(&self, codec: Option<Codec>, raw: u64, wire: u64) {
        self.bytes_raw.fetch_add(raw, Ordering::Relaxed);
        self.bytes_wire.fetch_add(wire, Ordering::Relaxed);
        let blocks = match codec {
            Some(Codec::Zstd) => &self.blocks_zstd,
            Some(Codec::Lz4) => &self.blocks_lz4,
            None => &self.blocks_raw,
        };
        blocks.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot for the report.
    pub fn report(&self, mode: Compression) -> CompressionStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CompressionStats {
            mode,
            bytes_raw: get(&self.bytes_raw),
            bytes_wire: get(&self.bytes_wire),
            blocks_zstd: get(&self.blocks_zstd),
            blocks_lz4: get(&self.blocks_lz4),
            blocks_raw: get(&self.blocks_raw),
            blocks_not_shrunk: get(&self.blocks_not_shrunk),
        }
    }
}

/// What compression did, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressionStats {
    /// What was asked for.
    pub mode: Compression,
    /// Payload bytes, uncompressed.
    pub bytes_raw: u64,
    /// Payload bytes on the wire.
    pub bytes_wire: u64,
    /// Blocks sent with zstd.
    pub blocks_zstd: u64,
    /// Blocks sent with LZ4.
    pub blocks_lz4: u64,
    /// Blocks sent raw.
    pub blocks_raw: u64,
    /// Blocks compressed in vain and sent raw (known to the sender only).
    pub blocks_not_shrunk: u64,
}

impl CompressionStats {
    /// The codec(s) blocks were sent with: `zstd`, `lz4`, `zstd+lz4` or
    /// `none`.
    pub fn codec(&self) -> &'static str {
        match (self.blocks_zstd > 0, self.blocks_lz4 > 0) {
            (true, true) => "zstd+lz4",
            (true, false) => "zstd",
            (false, true) => "lz4",
            (false, false) => "none",
        }
    }
}

/// A running average.
#[derive(Debug, Default, Clone, Copy)]
struct Ewma(Option<f64>);

impl Ewma {
    fn add(&mut self, x: f64) {
        self.0 = Some(match self.0 {
            Some(v) => v + EWMA_WEIGHT * (x - v),
            None => x,
        });
    }
}

#[derive(Debug, Default)]
struct FileState {
    blocks: u64,
    misses_in_row: u32,
}

#[derive(Debug, Default)]
struct Estimates {
    /// Compressor time per raw byte, in nanoseconds.
    cpu_ns_per_byte: Ewma,
    /// Share of the raw bytes compression saved (0 for a block sent raw).
    saving: Ewma,
    /// Time a write took per wire byte, in nanoseconds: the largest of
    /// late, decaying by [`WIRE_DECAY`] with every write.
    wire_ns_per_byte: Option<f64>,
    tried: u64,
    written: u64,
    blocks: u64,
    files: HashMap<u32, FileState>,
}

/// Which blocks a sender compresses, and how. Shared by the stream
/// workers of one session.
#[derive(Debug)]
pub struct Policy {
    mode: Compression,
    /// The estimates `auto` decides from; held only to update numbers.
    state: Mutex<Estimates>,
    /// What was done, for the report.
    pub counters: Counters,
}

impl Policy {
    /// A policy for `mode`.
    pub fn new(mode: Compression) -> Policy {
        Policy {
            mode,
            state: Mutex::new(Estimates::default()),
            counters: Counters::default(),
        }
    }

    /// What was asked for.
    pub fn mode(&self) -> Compression {
        self.mode
    }

    /// The codec to try on the next block of `file_id`, and the most bytes
    /// its payload may take (else it goes raw); `None`: send it raw.
    pub fn plan(&self, file_id: u32, raw_len: usize) -> Option<(Codec, usize)> {
        let exact = raw_len.saturating_sub(1);
        match self.mode {
            Compression::None => None,
            Compression::Zstd => Some((Codec::Zstd, exact)),
            Compression::Lz4 => Some((Codec::Lz4, exact)),
            Compression::Auto => {
                let mut s = self.state.lock().expect("compression policy");
                s.blocks += 1;
                let probe = s.blocks % PROBE_EVERY == 0;
                let file = s.files.entry(file_id).or_default();
                file.blocks += 1;
                let file_probe = file.blocks % PROBE_EVERY == 0;
                if file.misses_in_row >= GIVE_UP_AFTER && !file_probe {
                    return None;
                }
                if !s.pays() && !probe {
                    return None;
                }
                Some((Codec::Zstd, raw_len - raw_len / 16))
            }
        }
    }

    /// A block of `raw_len` bytes of `file_id` was compressed in `took`;
    /// `payload` is its compressed payload's length when it shrank enough.
    pub fn compressed(&self, file_id: u32, raw_len: usize, payload: Option<usize>, took: Duration) {
        if payload.is_none() {
            self.counters
                .blocks_not_shrunk
                .fetch_add(1, Ordering::Relaxed);
        }
        if self.mode != Compression::Auto || raw_len == 0 {
            return;
        }
        let mut s = self.state.lock().expect("compression policy");
        s.tried += 1;
        s.cpu_ns_per_byte
            .add(took.as_nanos() as f64 / raw_len as f64);
        let saved = payload.map_or(0.0, |p| 1.0 - p as f64 / raw_len as f64);
        s.saving.add(saved.max(0.0));
        if let Some(file) = s.files.get_mut(&file_id) {
            file.misses_in_row = if payload.is_some() {
                0
            } else {
                file.misses_in_row + 1
            };
        }
    }

    /// A write of `wire` bytes took `took`.
    pub fn wrote(&self, wire: usize, took: Duration) {
        if self.mode != Compression::Auto || wire == 0 {
            return;
        }
        let mut s = self.state.lock().expect("compression policy");
        s.written += 1;
        let sample = took.as_nanos() as f64 / wire as f64;
        s.wire_ns_per_byte = Some(match s.wire_ns_per_byte {
            Some(w) => sample.max(w * (1.0 - WIRE_DECAY)),
            None => sample,
        });
    }

    /// A file is done: forget what was learnt about it.
    pub fn forget(&self, file_id: u32) {
        if self.mode == Compression::Auto {
            self.state
                .lock()
                .expect("compression policy")
                .files
                .remove(&file_id);
        }
    }
}

impl Estimates {
    /// Whether compressing saves more write time than it costs, from what
    /// was measured; true until there is enough to tell.
    fn pays(&self) -> bool {
        if self.tried < WARM_UP || self.written < WARM_UP {
            return true;
        }
        let (Some(cpu), Some(saving), Some(wire)) =
            (self.cpu_ns_per_byte.0, self.saving.0, self.wire_ns_per_byte)
        else {
            return true;
        };
        wire * saving > cpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(len: usize) -> Vec<u8> {
        let words = ["muon ", "track ", "event ", "energy ", "calorimeter "];
        let mut out = Vec::with_capacity(len);
        let mut i = 0usize;
        while out.len() < len {
            out.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
            i += 1;
        }
        out.truncate(len);
        out
    }

    fn noise(len: usize) -> Vec<u8> {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn both_codecs_round_trip_and_noise_does_not_shrink() {
        let raw = text(100_000);
        let mut out = vec![0u8; max_payload(raw.len())];
        for mode in [Compression::Zstd, Compression::Lz4, Compression::Auto] {
            let mut c = BlockCompressor::new(mode);
            for codec in [Codec::Zstd, Codec::Lz4] {
                let n = c.compress(codec, &raw, &mut out, raw.len() - 1).unwrap();
                assert!(n < raw.len() / 3, "{codec:?} compresses text");
                assert_eq!(
                    tern_proto::RawLen::decode(&out).unwrap().0 as usize,
                    raw.len()
                );
                let mut back = vec![0u8; raw.len()];
                assert!(decompress(codec, &out[RAW_LEN_LEN..n], &mut back));
                assert_eq!(back, raw);
                let noisy = noise(100_000);
                assert_eq!(
                    c.compress(codec, &noisy, &mut out, noisy.len() - 1),
                    None,
                    "{codec:?}: random bytes do not shrink"
                );
            }
        }
    }

    #[test]
    fn damaged_or_short_payloads_do_not_decompress() {
        let raw = text(50_000);
        let mut out = vec![0u8; max_payload(raw.len())];
        let mut c = BlockCompressor::new(Compression::Zstd);
        for codec in [Codec::Zstd, Codec::Lz4] {
            let n = c.compress(codec, &raw, &mut out, raw.len()).unwrap();
            let body = out[RAW_LEN_LEN..n].to_vec();
            let mut back = vec![0u8; raw.len()];
            assert!(!decompress(codec, &body[..body.len() / 2], &mut back));
            let mut longer = vec![0u8; raw.len() + 1];
            assert!(!decompress(codec, &body, &mut longer), "must fill exactly");
            let mut shorter = vec![0u8; raw.len() - 1];
            assert!(!decompress(codec, &body, &mut shorter));
            assert!(!decompress(codec, &noise(200), &mut back));
        }
    }

    /// Feeds `auto` blocks whose compression takes `cpu_ns` per byte and
    /// saves `saving`, over a network taking `wire_ns` per byte; returns
    /// how many of `n` blocks of file 1 it chose to compress.
    fn run_auto(n: usize, cpu_ns: f64, saving: f64, wire_ns: f64) -> usize {
        let p = Policy::new(Compression::Auto);
        let bs = 1 << 20;
        let mut compressed = 0;
        for _ in 0..n {
            let wire = match p.plan(1, bs) {
                Some((_, limit)) => {
                    let payload = ((1.0 - saving) * bs as f64) as usize;
                    let kept = (payload <= limit).then_some(payload);
                    let took = Duration::from_nanos((cpu_ns * bs as f64) as u64);
                    p.compressed(1, bs, kept, took);
                    compressed += usize::from(kept.is_some());
                    kept.unwrap_or(bs)
                }
                None => bs,
            };
            p.wrote(wire, Duration::from_nanos((wire_ns * wire as f64) as u64));
        }
        compressed
    }

    #[test]
    fn auto_compresses_when_the_network_is_the_bottleneck() {
        // 100 MB/s network, 500 MB/s compressor saving half: pays.
        assert_eq!(run_auto(200, 2.0, 0.5, 10.0), 200);
    }

    #[test]
    fn auto_stops_when_the_network_is_faster_than_the_compressor() {
        // 10 GB/s network, 500 MB/s compressor: compression only slows the
        // stream; after the warm-up only probes are compressed.
        let n = run_auto(640, 2.0, 0.5, 0.1);
        assert!(n <= WARM_UP as usize + 640 / PROBE_EVERY as usize, "{n}");
    }

    #[test]
    fn auto_keeps_compressing_when_that_is_what_unloads_the_link() {
        // A 20 ns/B link that compressed blocks no longer fill: their
        // writes go at 1 ns/B, raw ones pay the link's price. An average
        // of write times would swing between the two; the link's cost
        // does not change.
        let p = Policy::new(Compression::Auto);
        let bs = 1 << 20;
        let mut compressed = 0;
        for _ in 0..400 {
            let (wire, ns_per_byte) = match p.plan(1, bs) {
                Some(_) => {
                    p.compressed(1, bs, Some(bs / 4), Duration::from_millis(2));
                    compressed += 1;
                    (bs / 4, 1.0)
                }
                None => (bs, 20.0),
            };
            p.wrote(
                wire,
                Duration::from_nanos((ns_per_byte * wire as f64) as u64),
            );
        }
        assert!(compressed > 360, "{compressed} of 400 compressed");
    }

    #[test]
    fn auto_gives_up_on_a_file_that_does_not_shrink_but_not_on_others() {
        let p = Policy::new(Compression::Auto);
        let bs = 1 << 20;
        let mut tried = 0;
        for _ in 0..64 {
            if p.plan(7, bs).is_some() {
                tried += 1;
                p.compressed(7, bs, None, Duration::from_micros(500));
            }
        }
        assert!(
            tried <= GIVE_UP_AFTER as usize + 2,
            "{tried} blocks of an incompressible file tried"
        );
        assert!(p.plan(8, bs).is_some(), "another file is tried afresh");
        assert_eq!(
            p.counters.blocks_not_shrunk.load(Ordering::Relaxed),
            tried as u64
        );
    }

    #[test]
    fn explicit_codecs_always_try_and_none_never_does() {
        assert_eq!(
            Policy::new(Compression::Lz4).plan(1, 100),
            Some((Codec::Lz4, 99))
        );
        assert_eq!(
            Policy::new(Compression::Zstd).plan(1, 100),
            Some((Codec::Zstd, 99))
        );
        assert_eq!(Policy::new(Compression::None).plan(1, 100), None);
    }
}
