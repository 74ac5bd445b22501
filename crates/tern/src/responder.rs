//! The UDP probe responder that `tern serve` runs beside its TCP
//! listener, answering the packet trains of `tern probe`.

use std::net::SocketAddr;

use tokio::sync::oneshot;

/// Stops the UDP probe responder when dropped.
pub struct Responder {
    _stop: oneshot::Sender<()>,
}

/// Starts the UDP probe responder on the daemon's address and port. A
/// port that UDP cannot have is a warning: the daemon serves without it.
pub async fn start_responder(addr: SocketAddr) -> Option<Responder> {
    let socket = match tokio::net::UdpSocket::bind(addr).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("UDP probe responder not started: cannot bind udp {addr}: {e}");
            return None;
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = tern_probe::serve_udp(socket, shutdown).await {
            tracing::warn!("UDP probe responder stopped: {e}");
        }
    });
    tracing::info!("UDP probe responder on udp {addr}");
    Some(Responder { _stop: stop })
}
