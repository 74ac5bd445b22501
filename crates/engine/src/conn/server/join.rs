//! Data connections joining a session: a connection presents a session
//! token and a stream index, is matched to the session waiting for it,
//! and is admitted once per index; a session starts while its first
//! streams join, and takes later ones as it grows.

use super::*;
use crate::data::PendingJoins;
use observe::LiveWatcher;

/// A data connection waiting to be taken by its session.
pub(super) struct Joining {
    stream: BoxStream,
    /// A duplicate of the socket, for `TCP_INFO` sampling.
    probe: Option<std::os::fd::OwnedFd>,
    index: u16,
    version: u16,
    tls: bool,
    peer: SocketAddr,
}

pub(super) async fn data_join(
    ctx: Arc<Context>,
    mut stream: BoxStream,
    probe: Option<std::os::fd::OwnedFd>,
    consumed: [u8; 4],
    tls: bool,
    handshaking: Handshaking,
) {
    let peer = handshaking.peer;
    let mut buf = [0u8; JOIN_LEN];
    let start = if tls {
        buf[..4].copy_from_slice(&consumed);
        4
    } else {
        0
    };
    match handshaking
        .in_time(stream.read_exact(&mut buf[start..]))
        .await
    {
        Some(Ok(_)) => {}
        Some(Err(_)) => return tracing::warn!("{peer}: data connection dropped before joining"),
        None => return,
    }
    let join = match DataJoin::decode(&buf) {
        Ok(j) => j,
        Err(e) => return tracing::warn!("{peer}: dropped, bad data join: {e}"),
    };
    let session = ctx
        .pending
        .lock()
        .expect("pending")
        .get(&join.token)
        .cloned();
    let Some(session) = session else {
        tracing::warn!("{peer}: refused a data connection for an unknown session");
        // Still holding its handshake slot: refusals cannot pile up.
        return refuse(stream).await;
    };
    // It knew a live session's token: from here it is that session's.
    drop(handshaking);
    let _ = session
        .send(Joining {
            stream,
            probe,
            index: join.stream,
            version: join.version,
            tls,
            peer,
        })
        .await;
}

/// How long a refused data connection is drained so that its client reads
/// the refusal.
const REFUSAL_LINGER: Duration = Duration::from_secs(2);
/// The most a refused data connection is drained of.
const REFUSAL_DRAIN_BYTES: usize = 16 << 20;

/// Refuses a join so that the client reads why: its data may already
/// follow the join (PROTOCOL.md §8.2), and closing with that unread would
/// reset the connection and lose the answer. What comes is read and
/// dropped for a short, bounded while.
async fn refuse(mut stream: BoxStream) {
    let _ = stream.write_all(&JoinReply::Refused.encode()).await;
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
    let drain = async {
        let mut sink = vec![0u8; 64 << 10];
        let mut left = REFUSAL_DRAIN_BYTES;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
}

/// What a data connection must match to join a session.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admission {
    pub(super) tls: bool,
    pub(super) version: u16,
    pub(super) protect: Protect,
}

impl Admission {
    /// Answers a join: `Accepted` when the connection matches the session
    /// and its index is free in `taken` (which it then takes), else
    /// `Refused` (and the connection is dropped).
    pub(super) async fn admit(&self, joining: Joining, taken: &mut [bool]) -> Option<Joined> {
        let Joining {
            mut stream,
            probe,
            index,
            version,
            tls,
            peer,
        } = joining;
        let slot = taken.get_mut(usize::from(index));
        let acceptable =
            tls == self.tls && version == self.version && slot.as_ref().is_some_and(|t| !**t);
        if !acceptable {
            tracing::warn!(
                "{peer}: refused data connection {index} ({}, version {version}; session wants {}, version {})",
                if tls { "TLS" } else { "plain" },
                self.protect.name(),
                self.version
            );
            tokio::spawn(refuse(stream));
            return None;
        }
        let replied = match stream.write_all(&JoinReply::Accepted.encode()).await {
            Ok(()) => stream.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = replied {
            tracing::warn!("{peer}: data connection {index} dropped while joining: {e}");
            return None;
        }
        *slot.expect("checked") = true;
        Some(Joined {
            index,
            stream,
            probe,
        })
    }
}

/// A session's data connections as they come: the first `initial` are
/// the pending joins the session starts with (those not in when the join
/// time runs out fail with that), later ones (growth, spares) come through
/// the receiver returned. The task admitting them ends with the session
/// (abort the handle).
pub(super) fn admit_streams(
    mut rx: mpsc::Receiver<Joining>,
    want: Admission,
    (initial, mut taken): (u16, Vec<bool>),
    timeout: Duration,
    live: Option<LiveWatcher>,
) -> (
    PendingJoins,
    mpsc::Receiver<Joined>,
    tokio::task::JoinHandle<()>,
) {
    let watch = move |j: &Joined| {
        if let Some(live) = &live {
            live.watch(WatchedStream::of(j.index, j.probe.as_ref()));
        }
    };
    let initial_slots = usize::from(initial).min(taken.len());
    let (mut firsts, pending): (Vec<_>, Vec<_>) = (0..initial_slots)
        .map(|_| {
            let (tx, rx) = tokio::sync::oneshot::channel::<Result<Joined>>();
            let join = async move {
                rx.await
                    .unwrap_or_else(|_| Err(Error::PeerGone("the session ended".into())))
            };
            (Some(tx), join)
        })
        .unzip();
    let (more_tx, more_rx) = mpsc::channel(taken.len().max(1));
    let task = tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut joined = 0;
        while joined < initial_slots {
            let joining = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(j)) => j,
                _ => {
                    // Told to the client, which is still there to hear it.
                    let why = format!(
                        "only {joined} of {initial} data connections joined within {timeout:?}"
                    );
                    for tx in firsts.iter_mut().filter_map(Option::take) {
                        let _ = tx.send(Err(Error::Io {
                            context: why.clone(),
                            source: std::io::ErrorKind::TimedOut.into(),
                        }));
                    }
                    return;
                }
            };
            let Some(j) = want.admit(joining, &mut taken[..initial_slots]).await else {
                continue;
            };
            watch(&j);
            if let Some(tx) = firsts.get_mut(usize::from(j.index)).and_then(Option::take) {
                joined += 1;
                let _ = tx.send(Ok(j));
            }
        }
        // Streams that join later (the session grows) go through here.
        while let Some(joining) = rx.recv().await {
            if let Some(j) = want.admit(joining, &mut taken).await {
                watch(&j);
                if more_tx.send(j).await.is_err() {
                    return;
                }
            }
        }
    });
    (PendingJoins::new(pending), more_rx, task)
}
