//! Rate limiting (`--rate-limit`): one budget of bytes per second shared by
//! every stream of a transfer.
//!
//! A generic cell-rate algorithm: the limiter keeps the time at which the
//! bytes handed out so far will have been "paid for" at the rate; a stream
//! that wants `n` more bytes waits until that time is no further ahead than
//! the burst allowance (50 ms of the rate, at least one block), then pushes
//! it on by `n / rate`. The sending side paces its writes; a receiving
//! client paces its reads, and TCP's flow control carries the pace back to
//! the sender, so a limit needs nothing from the peer.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Paced streams move this many bytes at a time, so that every stream of
/// a transfer moves a little at a time: a stream left waiting for a whole
/// block's worth of the rate would look stalled to the other end.
pub const PACE_CHUNK: usize = 16 << 10;

/// Shared pace of one transfer.
#[derive(Debug)]
pub struct Pace {
    bytes_per_sec: f64,
    burst: Duration,
    paid_until: Mutex<Option<Instant>>,
}

impl Pace {
    /// A pace of `bits_per_sec`, allowing bursts of `burst_bytes` (at
    /// least 50 ms of the rate).
    pub fn new(bits_per_sec: u64, burst_bytes: u64) -> Pace {
        let bytes_per_sec = (bits_per_sec as f64 / 8.0).max(1.0);
        let burst = Duration::from_secs_f64(burst_bytes as f64 / bytes_per_sec)
            .max(Duration::from_millis(50));
        Pace {
            bytes_per_sec,
            burst,
            paid_until: Mutex::new(None),
        }
    }

    /// How long to wait before moving `bytes`, as of `now`; the bytes are
    /// then counted as moved.
    pub fn reserve(&self, bytes: u64, now: Instant) -> Duration {
        let mut paid = self.paid_until.lock().expect("pace");
        let start = paid.map_or(now, |p| p.max(now));
        let wait = start.saturating_duration_since(now + self.burst);
        *paid = Some(start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec));
        wait
    }

    /// Waits until `bytes` may move.
    pub async fn acquire(&self, bytes: u64) {
        let wait = self.reserve(bytes, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Writes all of `data`, paced by `pace` (in [`PACE_CHUNK`]s) when there
/// is one.
pub async fn write_all<S: AsyncWrite + Unpin + ?Sized>(
    stream: &mut S,
    data: &[u8],
    pace: Option<&Pace>,
) -> std::io::Result<()> {
    let Some(pace) = pace else {
        return stream.write_all(data).await;
    };
    for chunk in data.chunks(PACE_CHUNK) {
        pace.acquire(chunk.len() as u64).await;
        stream.write_all(chunk).await?;
    }
    Ok(())
}

/// Fills `buf`, paced by `pace` (in [`PACE_CHUNK`]s) when there is one.
pub async fn read_exact<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    buf: &mut [u8],
    pace: Option<&Pace>,
) -> std::io::Result<()> {
    let Some(pace) = pace else {
        return stream.read_exact(buf).await.map(|_| ());
    };
    for chunk in buf.chunks_mut(PACE_CHUNK) {
        pace.acquire(chunk.len() as u64).await;
        stream.read_exact(chunk).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        // 80 Mbit/s = 10 MB/s; burst 1 MB = 100 ms.
        let p = Pace::new(80_000_000, 1_000_000);
        let t0 = Instant::now();
        assert_eq!(p.reserve(1_000_000, t0), Duration::ZERO);
        assert_eq!(p.reserve(1_000_000, t0), Duration::ZERO, "within the burst");
        // Two blocks are paid until t0 + 200 ms; the third waits 100 ms.
        assert_eq!(p.reserve(1_000_000, t0), Duration::from_millis(100));
    }

    proptest! {
        #[test]
        fn over_any_span_no_more_than_rate_times_span_plus_burst(
            sizes in proptest::collection::vec(1u64..2_000_000, 1..200),
            gaps_ms in proptest::collection::vec(0u64..50, 1..200),
        ) {
            let p = Pace::new(80_000_000, 1_000_000);
            let t0 = Instant::now();
            let mut now = t0;
            let mut moved = 0u64;
            for (i, n) in sizes.iter().enumerate() {
                now += Duration::from_millis(gaps_ms[i % gaps_ms.len()]);
                now += p.reserve(*n, now);
                moved += n;
                let allowed = 10e6 * (now - t0).as_secs_f64() + 1_000_000.0 + *n as f64;
                prop_assert!(moved as f64 <= allowed + 1.0, "{moved} > {allowed}");
            }
        }
    }
}
