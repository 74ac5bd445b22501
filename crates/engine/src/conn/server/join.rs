//! Data connections joining a session: a connection presents a session
//! token and a stream index, is matched to the session waiting for it,
//! and is admitted once per index; a session starts when its first streams
//! have all joined, and takes later ones as it grows.

use super::*;

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

/// Waits for streams `0..initial` to join.
pub(super) async fn collect_streams(
    rx: &mut mpsc::Receiver<Joining>,
    want: &Admission,
    initial: u16,
    taken: &mut [bool],
    timeout: Duration,
) -> Result<Vec<Joined>> {
    let mut joined = Vec::with_capacity(usize::from(initial));
    let deadline = tokio::time::Instant::now() + timeout;
    let initial_slots = usize::from(initial).min(taken.len());
    while joined.len() < initial_slots {
        let joining = match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(j)) => j,
            _ => {
                return Err(Error::PeerGone(format!(
                    "only {} of {initial} data connections joined within {timeout:?}",
                    joined.len()
                )));
            }
        };
        if let Some(j) = want.admit(joining, &mut taken[..initial_slots]).await {
            joined.push(j);
        }
    }
    joined.sort_by_key(|j| j.index);
    Ok(joined)
}
