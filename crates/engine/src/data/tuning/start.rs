//! Where a long path's buffers start when its rate is known from an
//! earlier transfer (`Tuning::known_rate_bps`): the sending side's budget
//! for its send buffers, and each receiving socket's first receive buffer.
//! Split from the parent for size; `Tuners` is the parent's.

use std::os::fd::AsRawFd;
use std::time::Duration;

use tern_drs::Direction;
use tern_drs::session::{FACTOR, LONG_PATH_RTT};

use super::Tuners;

/// The send-buffer budget a long-path session starts with: what one
/// autotuned stream could have (`wmem_max`), or, with a rate known from an
/// earlier transfer, the session's rule (`FACTOR` × that rate × the RTT)
/// from the start, within what `streams` sockets can hold.
pub(super) fn start_budget(
    known_rate_bps: Option<u64>,
    rtt: Duration,
    wmem_max: u64,
    streams: u16,
) -> u64 {
    let known = known_rate_bps.map_or(0, |bps| {
        (tern_drs::session::FACTOR * bps as f64 / 8.0 * rtt.as_secs_f64()) as u64
    });
    known
        .min(wmem_max * u64::from(streams.max(1)))
        .max(wmem_max)
}

/// A receiving stream's first receive buffer, as the kernel reports it, on
/// a path of known rate: its share of the session's rule (`FACTOR` × rate
/// × RTT over `streams`).
fn receive_start(known_rate_bps: u64, rtt: Duration, streams: u16) -> u64 {
    (FACTOR * known_rate_bps as f64 / 8.0 * rtt.as_secs_f64()) as u64 / u64::from(streams.max(1))
}

impl Tuners {
    /// The sending client told the path's rate: the receive buffers of the
    /// streams joined so far start sized for it, and so will those to come.
    pub(super) fn know_rate(&mut self, bps: u64) {
        self.tuning.known_rate_bps = Some(bps);
        for k in 0..self.slots.len() {
            self.start_receive(k);
        }
    }

    /// On a long path of known rate, starts receiving stream `k`'s receive
    /// buffer at its share (`SocketTuner::start_rcvbuf`): the kernel would
    /// grow it from its default about 2× per round trip, and the window
    /// with it, while the sender could already send at the path's rate.
    pub(super) fn start_receive(&mut self, k: usize) {
        let (Some(bps), Direction::Receive) = (self.tuning.known_rate_bps, self.direction) else {
            return;
        };
        let streams = self.streams;
        let Some(slot) = self.slots.get_mut(k).and_then(Option::as_mut) else {
            return;
        };
        let rtt = tern_drs::TcpInfo::read(slot._probe.as_raw_fd())
            .map(|i| i.path_rtt())
            .unwrap_or_default();
        if rtt < LONG_PATH_RTT {
            return;
        }
        let bytes = receive_start(bps, rtt, streams);
        match slot.tuner.start_rcvbuf(bytes) {
            Ok(true) => {
                let first = self.receive_started.is_none();
                self.receive_started = slot.tuner.raised_rcvbuf;
                if let (true, Some(each)) = (first, self.receive_started) {
                    tracing::info!(
                        "receive buffers start at {:.1} MiB a stream, for the client's last rate \
                         over this path ({:.0} Mbit/s)",
                        each as f64 / f64::from(1 << 20),
                        bps as f64 / 1e6
                    );
                }
            }
            Ok(false) => {}
            Err(e) => tracing::debug!("stream {k}: cannot start the receive buffer: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_rate_sizes_the_start_within_what_the_sockets_hold() {
        let (rtt, cap) = (Duration::from_millis(100), 4u64 << 20);
        // Unknown: one autotuned stream's cap, as before.
        assert_eq!(start_budget(None, rtt, cap, 8), cap);
        // 1 Gbit/s × 100 ms = 12.5 MB; twice that for 8 streams of 4 MiB.
        assert_eq!(start_budget(Some(1_000_000_000), rtt, cap, 8), 25_000_000);
        // More than the sockets can hold: their caps.
        assert_eq!(start_budget(Some(10_000_000_000), rtt, cap, 8), 8 * cap);
        // A slow earlier transfer never starts below the default.
        assert_eq!(start_budget(Some(1_000_000), rtt, cap, 8), cap);
    }

    #[test]
    fn a_receiving_stream_starts_at_its_share_of_twice_the_bdp() {
        let rtt = Duration::from_millis(100);
        // 1 Gbit/s × 100 ms = 12.5 MB; twice that over 8 streams.
        assert_eq!(receive_start(1_000_000_000, rtt, 8), 3_125_000);
        assert_eq!(receive_start(1_000_000_000, rtt, 1), 25_000_000);
        assert_eq!(
            receive_start(1_000_000_000, rtt, 0),
            25_000_000,
            "no division by 0"
        );
    }
}
