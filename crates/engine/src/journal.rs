//! The resume journal: which byte ranges of a partial file are verified and
//! on disk, so that a transfer that died continues where it stopped.
//!
//! Beside `.NAME.tern-partial` the receiver keeps
//! `.NAME.tern-partial.journal`, a text file:
//!
//! ```text
//! tern-journal 1 size=1073741824 mtime=1700000000.123456789 block=1048576 boot=6f0c…
//! 0 1048576
//! 3145728 1048576
//! synced
//! 1048576 1048576
//! ```
//!
//! The first line names the version of the source the partial belongs to
//! (its size and modification time), the block size, and the boot the
//! journal was written in (`/proc/sys/kernel/random/boot_id`). Every further
//! line is either `OFFSET LENGTH`, a range whose blocks passed their check
//! and were written to the partial file before the line was, or `synced`:
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
//! block-aligned or lies outside the file.

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
            "tern-journal 1 size={} mtime={}.{:09} block={} boot={}\n",
            self.size, self.mtime_s, self.mtime_ns, self.block_size, self.boot
        )
    }

    fn parse(line: &str) -> Option<Header> {
        let mut words = line.split(' ');
        if words.next()? != "tern-journal" || words.next()? != "1" {
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
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The ranges of `text` (a journal) that can be trusted for the file
/// described by `want`, sorted and merged; empty when the journal belongs
/// to another version of the file.
pub fn recover(text: &str, want: &Header) -> Vec<(u64, u64)> {
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
        let (Some(Ok(offset)), Some(Ok(len)), None) = (
            words.next().map(str::parse::<u64>),
            words.next().map(str::parse::<u64>),
            words.next(),
        ) else {
            continue;
        };
        let end = offset.checked_add(len);
        let fits = end.is_some_and(|e| e <= want.size);
        let aligned = offset % bs == 0 && (len % bs == 0 || end == Some(want.size));
        if len > 0 && fits && aligned {
            since_sync.push((offset, len));
        }
    }
    if same_boot {
        trusted.append(&mut since_sync);
    }
    merge(trusted)
}

fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (offset, len) in ranges {
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
    /// Starts `journal` (already truncated) for `data`, the partial file,
    /// with the ranges kept from before; those are flushed first (a fresh
    /// file has nothing to flush).
    pub fn create(
        journal: File,
        data: File,
        header: &Header,
        kept: &[(u64, u64)],
    ) -> io::Result<JournalWriter> {
        let mut text = header.line();
        if !kept.is_empty() {
            data.sync_data()?;
            for (offset, len) in kept {
                text.push_str(&format!("{offset} {len}\n"));
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

    /// Records a range written to the partial file.
    pub fn record(&mut self, offset: u64, len: u64) -> io::Result<()> {
        (&self.journal).write_all(format!("{offset} {len}\n").as_bytes())?;
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

    #[test]
    fn the_header_round_trips() {
        let h = header("abc");
        assert_eq!(Header::parse(h.line().trim_end()), Some(h));
        assert_eq!(Header::parse("tern-journal 2 size=1"), None);
    }

    #[test]
    fn same_boot_trusts_every_complete_line_and_merges() {
        let text = format!(
            "{}0 {MIB}\nsynced\n{MIB} {MIB}\n{} {}\n5242",
            header("b1").line(),
            9 * MIB,
            MIB
        );
        assert_eq!(
            recover(&text, &header("b1")),
            vec![(0, 2 * MIB), (9 * MIB, MIB)]
        );
    }

    #[test]
    fn after_a_reboot_only_synced_ranges_count() {
        let text = format!("{}0 {MIB}\nsynced\n{MIB} {MIB}\n", header("b1").line());
        assert_eq!(recover(&text, &header("b2")), vec![(0, MIB)]);
    }

    #[test]
    fn another_version_of_the_file_or_bad_lines_count_for_nothing() {
        let text = format!("{}0 {MIB}\nsynced\n", header("b1").line());
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
            "{}7 {MIB}\n0 3\n{} {MIB}\nfoo bar\n0\n",
            header("b1").line(),
            10 * MIB
        );
        assert!(recover(&junk, &header("b1")).is_empty());
        assert!(recover("", &header("b1")).is_empty());
        assert!(recover("garbage\n0 1\n", &header("b1")).is_empty());
    }

    #[test]
    fn a_short_last_block_may_end_the_file() {
        let h = Header {
            size: 2 * MIB + 10,
            ..header("b1")
        };
        let text = format!("{}{} 10\n", h.line(), 2 * MIB);
        assert_eq!(recover(&text, &h), vec![(2 * MIB, 10)]);
    }

    #[test]
    fn the_writer_keeps_ranges_and_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let data = File::create(dir.path().join("d")).unwrap();
        let jpath = dir.path().join("j");
        let journal = File::create(&jpath).unwrap();
        let h = header("b1");
        let mut w = JournalWriter::create(journal, data, &h, &[(0, MIB)]).unwrap();
        w.record(3 * MIB, MIB).unwrap();
        let text = std::fs::read_to_string(&jpath).unwrap();
        assert_eq!(recover(&text, &h), vec![(0, MIB), (3 * MIB, MIB)]);
        assert_eq!(recover(&text, &header("b2")), vec![(0, MIB)]);
        w.sync().unwrap();
        let text = std::fs::read_to_string(&jpath).unwrap();
        assert_eq!(
            recover(&text, &header("b2")),
            vec![(0, MIB), (3 * MIB, MIB)]
        );
    }

    proptest! {
        #[test]
        fn recovered_ranges_lie_inside_the_file_and_never_overlap(text in ".{0,400}") {
            let h = header("b1");
            let full = format!("{}{text}", h.line());
            let ranges = recover(&full, &h);
            let mut end = 0;
            for (i, (o, l)) in ranges.iter().enumerate() {
                prop_assert!(*l > 0 && o + l <= h.size);
                prop_assert!(i == 0 || *o > end);
                end = o + l;
            }
        }
    }
}
