//! Test hooks, not for users, compiled only with the `fault-injection`
//! feature: `TERN_FAULT_CORRUPT=STREAM:BYTE` flips the byte at that
//! position of that data stream, to show repair end to end;
//! `TERN_FAULT_STALL=STREAM:BYTE` lets that stream carry that many bytes
//! each way and then stalls it forever, to show it being replaced.
//! Without the feature there are no hooks and the binary reads no such
//! variable.

use tern_engine::StreamWrap;

/// The wrapper of data streams the environment asks for, if any.
pub fn from_env() -> Option<StreamWrap> {
    #[cfg(feature = "fault-injection")]
    {
        hooks::from_env()
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        None
    }
}

#[cfg(feature = "fault-injection")]
mod hooks {
    use std::sync::Arc;

    use tern_engine::StreamWrap;

    pub fn from_env() -> Option<StreamWrap> {
        let hook = |var: &str| -> Option<(usize, u64)> {
            let spec = std::env::var(var).ok()?;
            let (stream, byte) = spec.split_once(':')?;
            Some((stream.parse().ok()?, byte.parse().ok()?))
        };
        if let Some((stream, byte)) = hook("TERN_FAULT_STALL") {
            tracing::warn!("test hook: stalling data stream {stream} after {byte} bytes");
            return Some(Arc::new(move |k, s| {
                if k == stream {
                    Box::new(tern_engine::fault::StallAfter::new(s, byte))
                } else {
                    s
                }
            }));
        }
        let (stream, byte) = hook("TERN_FAULT_CORRUPT")?;
        tracing::warn!("test hook: corrupting byte {byte} of data stream {stream}");
        Some(Arc::new(move |k, s| {
            if k == stream {
                Box::new(tern_engine::fault::CorruptAt::new(s, byte))
            } else {
                s
            }
        }))
    }
}
