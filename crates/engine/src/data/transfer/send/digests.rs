//! The sender's whole-file digests: folded from the blocks the stream
//! workers read (`crate::data::fold`), or read apart when a skip policy
//! needs a digest before any block goes, and read for the rest of a file
//! whose fold stopped short.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_proto::{ChecksumAlg, FileMeta};
use tern_session::DigestNeed;
use tokio::sync::mpsc;

use super::super::DIGEST_CHUNK;
use super::SendShared;
use crate::data::fold::{Folds, Standing};
use crate::integrity::FileDigest;
use crate::{Error, Result};

/// A fold that has not moved for this long after its file's last block
/// was handed out is finished by reading (its missing blocks were never
/// read: the receiver kept them).
const FOLD_STALL: Duration = Duration::from_millis(300);

pub(super) async fn sender_digests(
    shared: Arc<SendShared>,
    mut ids: mpsc::UnboundedReceiver<(u32, u64)>,
    alg: ChecksumAlg,
) {
    'files: while let Some((file_id, size)) = ids.recv().await {
        // With a skip policy the receiver may keep its own copy: its answer
        // comes first, so a skipped file is never read.
        let need = loop {
            let notified = shared.wake.notified();
            if shared.failure.is_set() {
                return;
            }
            match shared.session.lock().expect("session").digest_need(file_id) {
                DigestNeed::None => {
                    if let Some(folds) = &shared.folds {
                        folds.forget(file_id);
                    }
                    continue 'files;
                }
                DigestNeed::Wait => {}
                need => break need,
            }
            notified.await;
        };
        if !shared.source.digests() {
            set_digest(&shared, file_id, Vec::new());
            continue;
        }
        let (digest, from) = match &shared.folds {
            // Wanted before any block is read: nothing to fold from.
            Some(folds) if need == DigestNeed::Read => folds.take(file_id),
            Some(folds) if size != FileMeta::UNKNOWN_SIZE => {
                match folded(&shared, folds, file_id, size).await {
                    Folded::Done(digest) => {
                        set_digest(&shared, file_id, digest);
                        continue;
                    }
                    Folded::Rest(digest, from) => (digest, from),
                    Folded::Gone => continue,
                    Folded::Failed => return,
                }
            }
            _ => (FileDigest::new(alg), 0),
        };
        let sh = shared.clone();
        let computed = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
            let item = &sh.items[&file_id];
            let reader = sh.source.open(item)?;
            let mut digest = digest;
            let mut buf = vec![0u8; (size - from.min(size)).min(DIGEST_CHUNK as u64) as usize];
            let mut pos = from;
            while pos < size {
                let n = (size - pos).min(DIGEST_CHUNK as u64) as usize;
                reader
                    .read_at(pos, &mut buf[..n])
                    .map_err(|e| Error::io("read for digest", &item.local, e))?;
                digest.update(&buf[..n]);
                pos += n as u64;
            }
            Ok(digest.finish())
        })
        .await
        .unwrap_or_else(|e| Err(Error::Protocol(format!("digest task failed: {e}"))));
        match computed {
            Ok(digest) => set_digest(&shared, file_id, digest),
            Err(e) => {
                if !shared.give_up_file(file_id, e) {
                    return;
                }
            }
        }
    }
}

fn set_digest(shared: &SendShared, file_id: u32, digest: Vec<u8>) {
    shared
        .session
        .lock()
        .expect("session")
        .set_digest(file_id, digest);
    shared.wake.notify_waiters();
}

/// How a file's fold ended.
enum Folded {
    /// It covered the whole file.
    Done(Vec<u8>),
    /// It stopped short: the rest is read from this offset.
    Rest(FileDigest, u64),
    /// The file no longer needs a digest.
    Gone,
    /// The session failed.
    Failed,
}

/// Waits for `file_id`'s fold to cover the file. Blocks never read for
/// sending (kept by the receiver from an earlier session) leave it short:
/// once every block was handed out and the fold has not moved for
/// [`FOLD_STALL`], the rest is read.
async fn folded(shared: &SendShared, folds: &Folds, file_id: u32, size: u64) -> Folded {
    let mut handed_out_since: Option<Instant> = None;
    loop {
        let (progressed, woke) = (folds.progress.notified(), shared.wake.notified());
        if shared.failure.is_set() {
            return Folded::Failed;
        }
        if let Some(digest) = folds.finished(file_id, size) {
            return Folded::Done(digest);
        }
        let (need, handed_out) = {
            let s = shared.session.lock().expect("session");
            (s.digest_need(file_id), s.blocks_handed_out(file_id))
        };
        if need == DigestNeed::None {
            folds.forget(file_id);
            return Folded::Gone;
        }
        if need == DigestNeed::Read {
            // The receiver kept blocks of it (FileHave): they never pass.
            let (digest, from) = folds.take(file_id);
            return Folded::Rest(digest, from);
        }
        let since = handed_out.then(|| *handed_out_since.get_or_insert_with(Instant::now));
        let stalled =
            |idle: Duration| since.is_some_and(|t| t.elapsed() >= FOLD_STALL) && idle >= FOLD_STALL;
        let rest = match folds.standing(file_id) {
            Standing::Spoiled { .. } => true,
            Standing::Folding { idle, .. } => stalled(idle),
            Standing::None => size == 0 || stalled(Duration::MAX),
        };
        if rest {
            let (digest, from) = folds.take(file_id);
            return Folded::Rest(digest, from);
        }
        tokio::select! {
            () = progressed => {}
            () = woke => {}
            () = tokio::time::sleep(FOLD_STALL) => {}
        }
    }
}
