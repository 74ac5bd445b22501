//! Signals and other ways a run is told to stop.

use tokio::sync::watch;

/// Becomes true once on shutdown; every part of a server watches it.
pub type Stop = watch::Receiver<bool>;

/// A future that completes when `stop` turns true.
pub async fn stopped(mut stop: Stop) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A stop flag that turns true on SIGINT or SIGTERM.
pub fn stop_on_signal() -> Stop {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = tx.send(true);
    });
    rx
}

/// Completes when stdin reaches its end: ssh closed the channel. Read on a
/// plain thread, which process exit ends, unlike the runtime's blocking
/// pool, which would wait for the read.
pub async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 512];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}

/// Completes on SIGTERM or SIGINT (never, when they cannot be watched).
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
