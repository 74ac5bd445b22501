//! The resume journal: which byte ranges of a partial file are verified and
//! on disk, so that a transfer that died continues where it stopped.
//!
//! Beside its partial file (`.tern.HASH.partial`, see [`crate::store::fsio`]) the
//! receiver keeps `.tern.HASH.partial.journal`, a text file:
//!
//! ```text
//! tern-journal 2 size=1073741824 mtime=1700000000.123456789 block=1048576 boot=6f0c…
//! 0 1048576 9a3f0c11d2e4b5a6
//! 3145728 1048576 0b7e55aa01c3d4e2
//! synced
//! 1048576 1048576 77aa01c3d4e20b7e
//! ```
//!
//! The first line names the version of the source the partial belongs to
//! (its size and modification time), the block size, and the boot the
//! journal was written in (`/proc/sys/kernel/random/boot_id`). Every further
//! line is either `OFFSET LENGTH HASH`, a block that passed its check and
//! was written to the partial file before the line was, with the XXH3-64
//! of its bytes, or `synced`:
//! the partial file was flushed to stable storage (`fdatasync`) after every
//! range above it was written.
//!
//! Reading it back: a header that does not match the announced file (the
//! source changed) or the block size discards the journal and its partial,
//! and the file starts over. In the same boot every complete line counts —
//! a killed process loses nothing the page cache holds. After a reboot only
//! the ranges above the last `synced` count, since data not flushed before
//! a power loss may be gone while its journal line survived. A torn last
//! line (a crash mid-write) is ignored, as is any range that is not
//! block-aligned or lies outside the file. Last, every block is read back
//! and kept only if its bytes still hash as recorded ([`still_intact`]):
//! a partial file changed between two runs (by hand, or by a failing disk)
//! costs the blocks that changed, never a wrong file or a rerun that fails
//! the same way forever.

use std::fs::File;
use std::io::{self, Write};
use std::time::{Duration, Instant};

/// How often the partial file is flushed and a `synced` line written.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// Suffix of a journal, after the partial file's name.
pub const JOURNAL_SUFFIX: &str = ".journal";

/// The first line of a journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Size of the file being received.
    pub size: u64,
    /// Its modification time at the source, seconds.
    pub mtime_s: i64,
    /// … and nanoseconds.
    pub mtime_ns: u32,
    /// Block size of the session that wrote the journal.
    pub block_size: u32,
    /// The boot the journal was written in.
    pub boot: String,
}

impl Header {
    fn line(&self) -> String {
        format!(
            "tern-journal 2 size={} mtime={}.{:09} block={} boot={}\n",
            self.size, self.mtime_s, self.mtime_ns, self.block_size, self.boot
        )
    }

    fn parse(line: &str) -> Option<Header> {
        let mut words = line.split(' ');
        if words.next()? != "tern-journal" || words.next()? != "2" {
            return None;
        }
        let mut field = |name: &str| {
            words
                .next()
                .and_then(|w| w.strip_prefix(name))
                .and_then(|w| w.strip_prefix('='))
                .map(str::to_string)
        };
        let size = field("size")?.parse().ok()?;
        let mtime = field("mtime")?;
        let block_size = field("block")?.parse().ok()?;
        let boot = field("boot")?;
        let (s, ns) = mtime.split_once('.')?;
        Some(Header {
            size,
            mtime_s: s.parse().ok()?,
            mtime_ns: ns.parse().ok()?,
            block_size,
            boot,
        })
    }

    /// Same file version and block size (the boot may differ).
    fn same_file(&self, other: &Header) -> bool {
        self.size == other.size
            && self.mtime_s == other.mtime_s
            && self.mtime_ns == other.mtime_ns
            && self.block_size == other.block_size
    }
}

/// This boot's identity, or "unknown" (then nothing survives a reboot).
/// Read once per process: every received file's journal header names it.
pub fn boot_id() -> String {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    })
    .clone()
}

/// A block the journal says was written, and the hash of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// Offset in the file.
    pub offset: u64,
    /// Length (the block size, or less for the file's last block).
    pub len: u64,
    /// XXH3-64 of the block's bytes.
    pub hash: u64,
}

fn block_hash(data: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(data)
}

/// A block's XXH3-64 taken piece by piece, as the block is written: each
/// piece is hashed while it is still in the cache the write just read it
/// through, instead of in a second pass over the whole block.
pub struct BlockHasher(twox_hash::XxHash3_64);

impl BlockHasher {
    /// A hasher for one block.
    pub fn new() -> BlockHasher {
        BlockHasher(twox_hash::XxHash3_64::new())
    }

    /// The next piece of the block.
    pub fn update(&mut self, piece: &[u8]) {
        std::hash::Hasher::write(&mut self.0, piece);
    }

    /// The hash of the pieces so far.
    pub fn finish(&self) -> u64 {
        std::hash::Hasher::finish(&self.0)
    }
}

impl std::fmt::Debug for BlockHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockHasher")
    }
}

impl Default for BlockHasher {
    fn default() -> BlockHasher {
        BlockHasher::new()
    }
}

/// The blocks of `text` (a journal) that can be trusted for the file
/// described by `want`, by offset (the last record of an offset wins);
/// empty when the journal belongs to another version of the file.
pub fn recover(text: &str, want: &Header) -> Vec<Recorded> {
    // Only complete lines: a torn last line has no newline.
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => return Vec::new(),
    };
    let mut lines = complete.split('\n');
    let Some(header) = lines.next().and_then(Header::parse) else {
        return Vec::new();
    };
    if !header.same_file(want) {
        return Vec::new();
    }
    let same_boot = header.boot == want.boot && want.boot != "unknown";
    let bs = u64::from(want.block_size.max(1));
    let mut trusted = Vec::new();
    let mut since_sync = Vec::new();
    for line in lines {
        if line == "synced" {
            trusted.append(&mut since_sync);
            continue;
        }
        let mut words = line.split(' ');
        let (Some(Ok(offset)), Some(Ok(len)), Some(Ok(hash)), None) = (
            words.next().map(str::parse::<u64>),
            words.next().map(str::parse::<u64>),
            words.next().map(|h| u64::from_str_radix(h, 16)),
            words.next(),
        ) else {
            continue;
        };
        let end = offset.checked_add(len);
        let whole_block = len == bs || (len < bs && end == Some(want.size));
        let fits = end.is_some_and(|e| e <= want.size);
        if len > 0 && fits && offset % bs == 0 && whole_block {
            since_sync.push(Recorded { offset, len, hash });
        }
    }
    if same_boot {
        trusted.append(&mut since_sync);
    }
    let mut by_offset = std::collections::BTreeMap::new();
    for r in trusted {
        by_offset.insert(r.offset, r);
    }
    by_offset.into_values().collect()
}

/// Of `recorded`, the blocks whose bytes in `data` still hash as they did
/// when they were written.
pub fn still_intact(recorded: &[Recorded], data: &File) -> Vec<Recorded> {
    use std::os::unix::fs::FileExt;
    let mut buf = Vec::new();
    recorded
        .iter()
        .filter(|r| {
            buf.resize(r.len as usize, 0);
            data.read_exact_at(&mut buf, r.offset).is_ok() && block_hash(&buf) == r.hash
        })
        .copied()
        .collect()
}

/// Blocks as sorted, merged `(offset, length)` ranges.
pub fn ranges(blocks: &[Recorded]) -> Vec<(u64, u64)> {
    let mut sorted: Vec<(u64, u64)> = blocks.iter().map(|r| (r.offset, r.len)).collect();
    sorted.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (offset, len) in sorted {
        match out.last_mut() {
            Some((o, l)) if offset <= *o + *l => *l = (*l).max(offset + len - *o),
            _ => out.push((offset, len)),
        }
    }
    out
}

/// Appends to a journal as blocks are written.
#[derive(Debug)]
pub struct JournalWriter {
    journal: File,
    data: File,
    last_sync: Instant,
    dirty: bool,
}

impl JournalWriter {
    /// The journal file itself (to tell it from another at its name).
    pub(crate) fn journal_file(&self) -> &File {
        &self.journal
    }

    /// Starts `journal` (already truncated) for `data`, the partial file,
    /// with the ranges kept from before; those are flushed first (a fresh
    /// file has nothing to flush).
    pub fn create(
        journal: File,
        data: File,
        header: &Header,
        kept: &[Recorded],
    ) -> io::Result<JournalWriter> {
        let mut text = header.line();
        if !kept.is_empty() {
            data.sync_data()?;
            for r in kept {
                text.push_str(&format!("{} {} {:016x}\n", r.offset, r.len, r.hash));
            }
            text.push_str("synced\n");
        }
        (&journal).write_all(text.as_bytes())?;
        Ok(JournalWriter {
            journal,
            data,
            last_sync: Instant::now(),
            dirty: false,
        })
    }

    /// Records a block written to the partial file.
    pub fn record(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut hasher = BlockHasher::new();
        hasher.update(data);
        self.record_hashed(offset, data.len(), &hasher)
    }

    /// Records a block of `len` bytes written to the partial file, whose
    /// bytes `hasher` took as they were written.
    pub fn record_hashed(
        &mut self,
        offset: u64,
        len: usize,
        hasher: &BlockHasher,
    ) -> io::Result<()> {
        let line = format!("{offset} {len} {:016x}\n", hasher.finish());
        (&self.journal).write_all(line.as_bytes())?;
        self.dirty = true;
        if self.last_sync.elapsed() >= SYNC_EVERY {
            self.sync()?;
        }
        Ok(())
    }

    /// Flushes the partial file, then marks the journal `synced`.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.dirty {
            self.data.sync_data()?;
            (&self.journal).write_all(b"synced\n")?;
            self.journal.sync_data()?;
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_block_hashed_in_pieces_has_the_hash_older_journals_recorded() {
        let data: Vec<u8> = (0..(3 << 20) + 17)
            .map(|i: u32| (i * 31 + i / 7) as u8)
            .collect();
        // What journals written before hold: XXH3-64 with seed 0.
        let recorded = xxhash_rust::xxh3::xxh3_64(&data);
        assert_eq!(block_hash(&data), recorded);
        for piece in [1, 4096, 128 << 10, 1 << 20] {
            let mut hasher = BlockHasher::new();
            for p in data.chunks(piece) {
                hasher.update(p);
            }
            assert_eq!(hasher.finish(), recorded, "pieces of {piece}");
        }
    }

    fn header(boot: &str) -> Header {
        Header {
            size: 10 << 20,
            mtime_s: 1_700_000_000,
            mtime_ns: 5,
            block_size: 1 << 20,
            boot: boot.into(),
        }
    }

    const MIB: u64 = 1 << 20;

    /// A journal line for the block at `offset` of `len` bytes, hash `h`.
    fn line(offset: u64, len: u64, h: u64) -> String {
        format!("{offset} {len} {h:016x}\n")
    }

    fn offsets(blocks: &[Recorded]) -> Vec<u64> {
        blocks.iter().map(|r| r.offset).collect()
    }

    #[test]
    fn the_header_round_trips() {
        let h = header("abc");
        assert_eq!(Header::parse(h.line().trim_end()), Some(h));
        assert_eq!(Header::parse("tern-journal 1 size=1"), None);
    }

    #[test]
    fn same_boot_trusts_every_complete_line() {
        let text = format!(
            "{}{}synced\n{}{}5242",
            header("b1").line(),
            line(0, MIB, 1),
            line(MIB, MIB, 2),
            line(9 * MIB, MIB, 3),
        );
        let got = recover(&text, &header("b1"));
        assert_eq!(offsets(&got), vec![0, MIB, 9 * MIB]);
        assert_eq!(ranges(&got), vec![(0, 2 * MIB), (9 * MIB, MIB)]);
        assert_eq!(got[1].hash, 2);
    }

    #[test]
    fn after_a_reboot_only_synced_blocks_count() {
        let text = format!(
            "{}{}synced\n{}",
            header("b1").line(),
            line(0, MIB, 1),
            line(MIB, MIB, 2)
        );
        assert_eq!(offsets(&recover(&text, &header("b2"))), vec![0]);
    }

    #[test]
    fn another_version_of_the_file_or_bad_lines_count_for_nothing() {
        let text = format!("{}{}synced\n", header("b1").line(), line(0, MIB, 1));
        let changed = Header {
            mtime_ns: 6,
            ..header("b1")
        };
        assert!(recover(&text, &changed).is_empty());
        let other_block = Header {
            block_size: 4 << 20,
            ..header("b1")
        };
        assert!(recover(&text, &other_block).is_empty());
        let junk = format!(
            "{}7 {MIB} 1\n0 3 1\n{} {MIB} 1\n0 {MIB}\nfoo bar\n0\n{}",
            header("b1").line(),
            10 * MIB,
            line(0, 2 * MIB, 1),
        );
        assert!(recover(&junk, &header("b1")).is_empty());
        assert!(recover("", &header("b1")).is_empty());
        assert!(recover("garbage\n0 1 1\n", &header("b1")).is_empty());
    }

    #[test]
    fn a_short_last_block_may_end_the_file() {
        let h = Header {
            size: 2 * MIB + 10,
            ..header("b1")
        };
        let text = format!("{}{}", h.line(), line(2 * MIB, 10, 7));
        assert_eq!(ranges(&recover(&text, &h)), vec![(2 * MIB, 10)]);
    }

    #[test]
    fn the_writer_keeps_blocks_and_syncs_and_only_intact_blocks_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let data_path = dir.path().join("d");
        let data = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&data_path)
            .unwrap();
        let jpath = dir.path().join("j");
        let journal = File::create(&jpath).unwrap();
        let h = header("b1");
        let block0 = vec![1u8; MIB as usize];
        let block3 = vec![3u8; MIB as usize];
        use std::os::unix::fs::FileExt;
        data.write_all_at(&block0, 0).unwrap();
        let kept = [Recorded {
            offset: 0,
            len: MIB,
            hash: block_hash(&block0),
        }];
        let mut w = JournalWriter::create(journal, data.try_clone().unwrap(), &h, &kept).unwrap();
        data.write_all_at(&block3, 3 * MIB).unwrap();
        w.record(3 * MIB, &block3).unwrap();
        let text = std::fs::read_to_string(&jpath).unwrap();
        assert_eq!(offsets(&recover(&text, &h)), vec![0, 3 * MIB]);
        assert_eq!(offsets(&recover(&text, &header("b2"))), vec![0]);
        w.sync().unwrap();
        let text = std::fs::read_to_string(&jpath).unwrap();
        let all = recover(&text, &header("b2"));
        assert_eq!(offsets(&all), vec![0, 3 * MIB]);
        assert_eq!(still_intact(&all, &data), all, "nothing changed yet");
        // One byte of block 3 changes between two runs: only block 0 stays.
        data.write_all_at(b"x", 3 * MIB + 17).unwrap();
        assert_eq!(offsets(&still_intact(&all, &data)), vec![0]);
        // A file cut short loses what is gone.
        data.set_len(MIB / 2).unwrap();
        assert!(still_intact(&all, &data).is_empty());
    }

    proptest! {
        #[test]
        fn recovered_blocks_lie_inside_the_file_and_never_overlap(text in ".{0,400}") {
            let h = header("b1");
            let full = format!("{}{text}", h.line());
            let ranges = ranges(&recover(&full, &h));
            let mut end = 0;
            for (i, (o, l)) in ranges.iter().enumerate() {
                prop_assert!(*l > 0 && o + l <= h.size);
                prop_assert!(i == 0 || *o > end);
                end = o + l;
            }
        }
    }
}
