//! The receiver's commit path: a file whose blocks and digest are all in
//! goes to its final name, durably, and only then is it booked as done in
//! the session (which tells the sender, `FileDone`).
//!
//! Small files are collected into groups and committed together by the
//! sink ([`Sink::commit_group`](crate::store::fsio::Sink::commit_group):
//! one flush, the renames, one flush of each directory), since one flush
//! per file would cost more than the network; a group goes when it holds
//! [`GROUP_FILES`] files or [`GROUP_BYTES`], or [`GROUP_WAIT`] after its
//! first file came. The session cannot close before every file is
//! booked, so the last group always goes. Big files are committed one by
//! one, several at once (their data was written back as it came, so their
//! flush is short).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::{RecvShared, blocking};
use crate::store::fsio::BlockWrite;
use crate::{Error, Result};

/// Files up to this size are committed in groups.
pub const GROUP_MAX_FILE: u64 = 4 << 20;

/// A group is committed once it holds this many files…
pub const GROUP_FILES: usize = 512;

/// … or this many bytes…
pub const GROUP_BYTES: u64 = 64 << 20;

/// … or this long after its first file came.
pub const GROUP_WAIT: Duration = Duration::from_millis(5);

/// Big files committed at once, at most.
const FINALIZING: usize = 16;

/// A file waiting for its group.
struct Waiting {
    file_id: u32,
    writer: Arc<dyn BlockWrite>,
    size: u64,
}

/// Where finished files go to be committed.
pub(super) struct Commits {
    finalizing: Arc<Semaphore>,
    group: mpsc::UnboundedSender<Waiting>,
}

impl Commits {
    /// Starts the group committer of this receiver; it ends when `self`
    /// is dropped (after committing what it holds) or the session fails.
    pub(super) fn start(shared: &Arc<RecvShared>) -> Commits {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(group_committer(shared.clone(), rx));
        Commits {
            finalizing: Arc::new(Semaphore::new(FINALIZING)),
            group: tx,
        }
    }

    /// Commits the file `file_id`, whose blocks and digest are all in,
    /// and books it in the session once it is durable at its final name.
    pub(super) async fn finalize(&self, shared: &Arc<RecvShared>, file_id: u32) -> Result<bool> {
        let w = shared.writers.lock().expect("writers").remove(&file_id);
        let Some(writer) = w else {
            return Err(Error::Protocol(format!(
                "finalize of unopened file {file_id}"
            )));
        };
        let size = shared.session.lock().expect("session").final_size(file_id);
        match size {
            Some(size) if size <= GROUP_MAX_FILE && writer.member().is_some() => {
                let waiting = Waiting {
                    file_id,
                    writer,
                    size,
                };
                self.group
                    .send(waiting)
                    .map_err(|_| Error::Protocol("group committer stopped".into()))?;
                Ok(false)
            }
            _ => match self.finalizing.clone().acquire_owned().await {
                Ok(permit) => {
                    tokio::spawn(finalize_alone(shared.clone(), file_id, writer, permit));
                    Ok(false)
                }
                Err(_) => Err(Error::Protocol("finalize pool closed".into())),
            },
        }
    }
}

/// Commits one (big) file by itself and books it in the session.
async fn finalize_alone(
    shared: Arc<RecvShared>,
    file_id: u32,
    w: Arc<dyn BlockWrite>,
    _permit: OwnedSemaphorePermit,
) {
    let done = blocking(move || w.commit()).await;
    booked(&shared, done.map(|()| vec![file_id]));
}

/// Collects small files into groups and commits each group at once.
async fn group_committer(shared: Arc<RecvShared>, mut rx: mpsc::UnboundedReceiver<Waiting>) {
    while let Some(first) = rx.recv().await {
        let deadline = tokio::time::Instant::now() + GROUP_WAIT;
        let mut bytes = first.size;
        let mut group = vec![first];
        while group.len() < GROUP_FILES && bytes < GROUP_BYTES {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(w)) => {
                    bytes += w.size;
                    group.push(w);
                }
                Ok(None) | Err(_) => break,
            }
        }
        if shared.failure.is_set() {
            // The session failed: the group stays at its partial names.
            return;
        }
        let ids: Vec<u32> = group.iter().map(|w| w.file_id).collect();
        let writers: Vec<Arc<dyn BlockWrite>> = group.into_iter().map(|w| w.writer).collect();
        let sink = shared.sink.clone();
        let done = blocking(move || sink.commit_group(&writers)).await;
        if !booked(&shared, done.map(|()| ids)) {
            return;
        }
    }
}

/// Books committed files in the session (which tells the sender they are
/// done), or fails the session; whether it goes on.
fn booked(shared: &RecvShared, done: Result<Vec<u32>>) -> bool {
    let booked = done.and_then(|ids| {
        let mut session = shared.session.lock().expect("session");
        for &id in &ids {
            session.finalized(id)?;
        }
        let n = ids.len() as u64;
        shared.progress.files_done.fetch_add(n, Ordering::Relaxed);
        Ok(())
    });
    match booked {
        Ok(()) => {
            shared.wake.notify_waiters();
            true
        }
        Err(e) => {
            shared.failure.fail(e, &shared.wake);
            false
        }
    }
}
