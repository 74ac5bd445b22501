//! Local-to-local copies through the same engine.
//!
//! `tern cp a b` with both ends local runs a sender and a receiver session
//! connected by in-memory pipes, so a local copy gets exactly the checks,
//! atomic rename and reporting of a network copy. It is also how the engine
//! is exercised end to end in tests without sockets.

use std::sync::Arc;

use crate::data::transfer::{BoxStream, Control, Progress, TransferParams, TransferStats};
use crate::data::tuning::{Joined, StreamSupply};
use crate::store::fsio::{Sink, Source};
use crate::{Error, Result, data::transfer};

/// Pipe capacity per stream.
const PIPE_BYTES: usize = 4 << 20;

/// Runs `source` into `sink` over `params.streams` in-memory streams,
/// with an optional wrapper around each sending stream (fault injection).
pub async fn copy(
    source: Arc<dyn Source>,
    sink: Arc<dyn Sink>,
    params: TransferParams,
    progress: Arc<Progress>,
    wrap: Option<&crate::StreamWrap>,
) -> Result<(TransferStats, TransferStats)> {
    let (ctrl_a, ctrl_b) = tokio::io::duplex(64 << 10);
    let mut send_streams = Vec::new();
    let mut recv_streams = Vec::new();
    for k in 0..params.streams {
        let (a, b) = tokio::io::duplex(PIPE_BYTES);
        let a: BoxStream = Box::new(a);
        let a = match wrap {
            Some(w) => w(usize::from(k), a),
            None => a,
        };
        send_streams.push(Joined::pipe(k, a));
        recv_streams.push(Joined::pipe(k, Box::new(b)));
    }
    let sender = transfer::run_sender(
        Control::new(Box::new(ctrl_a)),
        send_streams,
        StreamSupply::Fixed,
        source,
        params.clone(),
        progress.clone(),
    );
    let receiver = transfer::run_receiver(
        Control::new(Box::new(ctrl_b)),
        recv_streams,
        StreamSupply::Fixed,
        sink,
        params,
        Arc::new(Progress::default()),
    );
    let (sent, received) = tokio::join!(sender, receiver);
    match (sent, received) {
        (Ok(s), Ok(r)) => Ok((s, r)),
        // One end's "peer: …" is the other's own error, told across: both
        // ends are here, so that one is said as it is.
        (Err(Error::Peer { .. }), Err(own)) | (Err(own), Err(Error::Peer { .. })) => Err(own),
        (Err(a), Err(b)) => Err(a.more_interesting(b)),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}
