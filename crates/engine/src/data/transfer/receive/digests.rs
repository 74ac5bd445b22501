//! The receiver's whole-file digests: folded from the blocks as they are
//! written (`crate::data::fold`), and read back only for what a fold could
//! not see (blocks kept from an earlier session, or a fold that gave up:
//! too many blocks ahead of its cursor, or a failed read of one).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::super::{DIGEST_CHUNK, blocking};
use super::RecvShared;
use crate::Error;
use crate::integrity::FileDigest;

pub(super) async fn receiver_digests(
    shared: Arc<RecvShared>,
    mut ids: mpsc::UnboundedReceiver<u32>,
) {
    let mut buf = Vec::new();
    while let Some(file_id) = ids.recv().await {
        let Some(writer) = shared
            .writers
            .lock()
            .expect("writers")
            .get(&file_id)
            .cloned()
        else {
            // Dropped (given up) before its turn: what its fold held goes.
            if let Some(folds) = &shared.folds {
                folds.forget(file_id);
            }
            continue;
        };
        // Folded from the blocks as they are written, until the fold is
        // short (blocks kept from an earlier session, or a fold that gave
        // up): then the rest is read back.
        let mut read_back: Option<(FileDigest, u64)> = None;
        loop {
            let notified = shared.wake.notified();
            if shared.failure.is_set() {
                return;
            }
            let (tracked, prefix, size) = {
                let s = shared.session.lock().expect("session");
                (
                    s.is_tracked(file_id),
                    s.contiguous_prefix(file_id),
                    s.final_size(file_id),
                )
            };
            if !tracked {
                // The copy at the destination was kept: nothing to hash.
                if let Some(folds) = &shared.folds {
                    folds.forget(file_id);
                }
                break;
            }
            let Some((digest, pos)) = read_back.take() else {
                let folds = shared.folds.as_ref().expect("digests are made");
                if size == Some(prefix) {
                    if let Some(digest) = folds.finished(file_id, prefix) {
                        set_received_digest(&shared, file_id, digest);
                        break;
                    }
                    read_back = Some(folds.take(file_id));
                    continue;
                }
                if folds.spoiled_now(file_id) {
                    read_back = Some(folds.take(file_id));
                    continue;
                }
                notified.await;
                continue;
            };
            if pos < prefix {
                if buf.is_empty() {
                    buf = vec![0u8; DIGEST_CHUNK];
                }
                let w = writer.clone();
                let (mut d, b) = (digest, std::mem::take(&mut buf));
                let result = blocking(move || {
                    let mut b = b;
                    let mut at = pos;
                    while at < prefix {
                        let n = (prefix - at).min(DIGEST_CHUNK as u64) as usize;
                        w.read_at(at, &mut b[..n])
                            .map_err(|e| Error::io("read back for digest", w.final_path(), e))?;
                        d.update(&b[..n]);
                        at += n as u64;
                    }
                    Ok((d, b))
                })
                .await;
                match result {
                    Ok((d, b)) => {
                        buf = b;
                        read_back = Some((d, prefix));
                    }
                    Err(e) => return shared.failure.fail(e, &shared.wake),
                }
                continue;
            }
            if size == Some(pos) {
                set_received_digest(&shared, file_id, digest.finish());
                break;
            }
            read_back = Some((digest, pos));
            notified.await;
        }
    }
}

fn set_received_digest(shared: &RecvShared, file_id: u32, digest: Vec<u8>) {
    let set = shared
        .session
        .lock()
        .expect("session")
        .set_digest(file_id, digest);
    if let Err(e) = set {
        return shared.failure.fail(e, &shared.wake);
    }
    shared.wake.notify_waiters();
}
