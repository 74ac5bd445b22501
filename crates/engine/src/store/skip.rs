//! Files already at the destination: whether one counts as complete
//! (`--skip-existing`).
//!
//! The receiver decides, because it knows its file: it compares what is at
//! the final name with the sender's announcement (size and modification
//! time are in `FileAnnounce`). A different size settles it without
//! reading anything; only the `digest` policy reads the copy, and only when
//! the size matches. The sender then compares the digest with its own
//! (PROTOCOL.md §8.10).

use tern_proto::{ChecksumAlg, Existing, FileMeta, SkipExisting};

use crate::integrity::FileDigest;
use crate::store::fsio::Sink;
use crate::{Error, Result};

/// Buffer size for hashing a copy at the destination.
const CHUNK: usize = 1 << 20;

/// What the sender should be told about `meta`'s final name under
/// `policy`; `None` when no `FileCheck` is sent at all (`Never`).
pub fn check(
    sink: &dyn Sink,
    meta: &FileMeta,
    policy: SkipExisting,
    alg: ChecksumAlg,
) -> Result<Option<Existing>> {
    if policy == SkipExisting::Never {
        return Ok(None);
    }
    let Some(found) = sink.existing(&meta.path)? else {
        return Ok(Some(Existing::Absent));
    };
    if found.size != meta.size {
        return Ok(Some(Existing::Absent));
    }
    Ok(Some(match policy {
        SkipExisting::Never => unreachable!("handled above"),
        SkipExisting::Size => Existing::Same,
        SkipExisting::Mtime if (found.mtime_s, found.mtime_ns) == (meta.mtime_s, meta.mtime_ns) => {
            Existing::Same
        }
        SkipExisting::Mtime => Existing::Absent,
        SkipExisting::Digest => {
            let mut digest = FileDigest::new(alg);
            let mut buf = vec![0u8; CHUNK.min(found.size as usize).max(1)];
            let mut at = 0u64;
            while at < found.size {
                let n = (found.size - at).min(buf.len() as u64) as usize;
                found
                    .file
                    .read_at(at, &mut buf[..n])
                    .map_err(|e| Error::io("read to compare", meta.path.display(), e))?;
                digest.update(&buf[..n]);
                at += n as u64;
            }
            Existing::Digest(digest.finish())
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::integrity::digest_of;
    use crate::store::fsio::{FsSink, Root};

    fn meta(path: &str, size: u64, mtime_s: i64) -> FileMeta {
        FileMeta {
            file_id: 1,
            path: path.into(),
            size,
            mode: 0o644,
            mtime_s,
            mtime_ns: 0,
        }
    }

    fn set_mtime(path: &std::path::Path, secs: u64) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        f.set_times(std::fs::FileTimes::new().set_modified(t))
            .unwrap();
    }

    #[test]
    fn each_policy_compares_what_it_says() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"hello").unwrap();
        set_mtime(&dir.path().join("f"), 1_000);
        let sink = FsSink::new(Root::Ambient, dir.path().to_path_buf(), 1).unwrap();
        let alg = ChecksumAlg::Xxh3;
        let same = meta("f", 5, 1_000);
        let touched = meta("f", 5, 2_000);
        let longer = meta("f", 6, 1_000);
        assert_eq!(check(&sink, &same, SkipExisting::Never, alg).unwrap(), None);
        for policy in [SkipExisting::Size, SkipExisting::Mtime] {
            assert_eq!(
                check(&sink, &same, policy, alg).unwrap(),
                Some(Existing::Same)
            );
            assert_eq!(
                check(&sink, &longer, policy, alg).unwrap(),
                Some(Existing::Absent)
            );
        }
        assert_eq!(
            check(&sink, &touched, SkipExisting::Size, alg).unwrap(),
            Some(Existing::Same)
        );
        assert_eq!(
            check(&sink, &touched, SkipExisting::Mtime, alg).unwrap(),
            Some(Existing::Absent)
        );
        assert_eq!(
            check(&sink, &touched, SkipExisting::Digest, alg).unwrap(),
            Some(Existing::Digest(digest_of(alg, b"hello")))
        );
        assert_eq!(
            check(&sink, &meta("nothing", 5, 1_000), SkipExisting::Size, alg).unwrap(),
            Some(Existing::Absent)
        );
    }

    #[test]
    fn a_directory_at_the_final_name_is_not_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let sink: Arc<dyn Sink> =
            Arc::new(FsSink::new(Root::Ambient, dir.path().to_path_buf(), 1).unwrap());
        assert_eq!(
            check(
                &*sink,
                &meta("d", 0, 0),
                SkipExisting::Size,
                ChecksumAlg::Xxh3
            )
            .unwrap(),
            Some(Existing::Absent)
        );
    }
}
