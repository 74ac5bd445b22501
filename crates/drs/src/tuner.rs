//! Tuning one socket: the adapter between [`crate::policy`] and the
//! kernel. Each [`SocketTuner::tick`] samples `TCP_INFO` and the buffer
//! sizes, feeds the estimator, and — in [`WindowMode::Auto`] — applies the
//! policy: the send buffer and unsent mark of a sending socket, the receive
//! buffer (or window clamp) of a receiving one, every byte accounted in the
//! process-wide [`Pool`].

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::estimate::{Interval, StreamEstimate, StreamEstimator};
use crate::policy::{self, BufferBudget, SendDecision, SendTuner};
use crate::pool::{Pool, Reservation};
use crate::{HostCaps, TcpInfo, socket};

/// Who decides a socket's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowMode {
    /// tern: kernel autotuning first, explicit sizes where it falls short.
    Auto,
    /// The kernel's autotuning alone; tern only measures.
    Kernel,
    /// Both buffers locked at this many bytes when the socket is set up.
    Fixed(u64),
}

/// Which way the socket's payload flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// This end writes the data.
    Send,
    /// This end reads the data.
    Receive,
}

/// Settings shared by the tuners of one transfer.
#[derive(Debug, Clone)]
pub struct TunerConfig {
    /// Who decides buffer sizes.
    pub mode: WindowMode,
    /// Which way data flows.
    pub direction: Direction,
    /// Buffer bytes one stream may have, and whether the kernel caps apply.
    pub budget: BufferBudget,
    /// The host's caps.
    pub caps: HostCaps,
}

impl TunerConfig {
    /// A configuration for this host and process.
    pub fn new(mode: WindowMode, direction: Direction, per_stream: u64) -> TunerConfig {
        let caps = HostCaps::read();
        TunerConfig {
            mode,
            direction,
            budget: BufferBudget {
                per_stream,
                privileged: socket::privileged(),
                wmem_max: caps.wmem_max,
            },
            caps,
        }
    }
}

/// Locks both buffers of a socket at `bytes` (`--window SIZE`).
pub fn fix_buffers(fd: RawFd, bytes: u64, privileged: bool) -> io::Result<()> {
    socket::set_sndbuf(fd, bytes, privileged)?;
    socket::set_rcvbuf(fd, bytes, privileged)
}

/// A peer's full window counts as capped once it has not grown for this
/// long (or four RTTs): until then the receiver may still be opening it.
const WINDOW_SETTLE: Duration = Duration::from_millis(400);

/// Live tuning state of one socket.
#[derive(Debug)]
pub struct SocketTuner {
    fd: RawFd,
    cfg: TunerConfig,
    estimator: StreamEstimator,
    send: SendTuner,
    owned_sndbuf: bool,
    owned_rcvbuf: bool,
    lowat: u64,
    clamp: Option<u64>,
    reservation: Reservation<'static>,
    last: Option<Interval>,
    at_cap: bool,
    slow_reader: bool,
    growing: bool,
    /// The send buffer follows the session's share ([`crate::session`]).
    shared: bool,
    /// The share the session last asked for, bytes.
    share_wanted: u64,
    /// Send buffer at the last tick, before the policy acted, bytes.
    pub seen_sndbuf: u64,
    /// Receive buffer at the last tick, before the policy acted, bytes.
    pub seen_rcvbuf: u64,
    /// Largest send buffer seen, bytes.
    pub peak_sndbuf: u64,
    /// Largest receive buffer seen, bytes.
    pub peak_rcvbuf: u64,
    /// Buffer changes made.
    pub adjustments: u32,
    /// The send buffer tern set last, if it took the buffer over.
    pub raised_sndbuf: Option<u64>,
    /// The receive buffer tern set last, if it took the buffer over.
    pub raised_rcvbuf: Option<u64>,
}

impl SocketTuner {
    /// Tunes `fd`, which the caller keeps open for the tuner's lifetime.
    pub fn new(fd: RawFd, cfg: TunerConfig) -> SocketTuner {
        SocketTuner {
            fd,
            cfg,
            estimator: StreamEstimator::default(),
            send: SendTuner::default(),
            owned_sndbuf: false,
            owned_rcvbuf: false,
            lowat: policy::notsent_lowat(None),
            clamp: None,
            reservation: Pool::global().reserve(),
            last: None,
            at_cap: false,
            slow_reader: false,
            growing: false,
            shared: false,
            share_wanted: 0,
            seen_sndbuf: 0,
            seen_rcvbuf: 0,
            peak_sndbuf: 0,
            peak_rcvbuf: 0,
            adjustments: 0,
            raised_sndbuf: None,
            raised_rcvbuf: None,
        }
    }

    /// Samples the socket at `at` and, when `act`, applies the policy.
    /// Returns the sample.
    pub fn tick(&mut self, at: Duration, act: bool) -> io::Result<TcpInfo> {
        let info = TcpInfo::read(self.fd)?;
        self.estimator.add(at, info);
        let sndbuf = socket::sndbuf(self.fd)?;
        let rcvbuf = socket::rcvbuf(self.fd)?;
        self.seen_sndbuf = sndbuf;
        self.seen_rcvbuf = rcvbuf;
        self.peak_sndbuf = self.peak_sndbuf.max(sndbuf);
        self.peak_rcvbuf = self.peak_rcvbuf.max(rcvbuf);
        self.last = self.estimator.last_interval();
        self.growing = false;
        self.at_cap = false;
        self.slow_reader = false;
        if !act || self.cfg.mode != WindowMode::Auto {
            return Ok(info);
        }
        match self.cfg.direction {
            Direction::Send => self.tune_send(at, sndbuf)?,
            Direction::Receive => self.tune_receive(&info, rcvbuf)?,
        }
        Ok(info)
    }

    fn tune_send(&mut self, at: Duration, sndbuf: u64) -> io::Result<()> {
        let Some(interval) = self.last else {
            return Ok(());
        };
        if interval.busy_share >= 0.5 && interval.acked_rate > 0.0 {
            let lowat = policy::notsent_lowat(Some(interval.acked_rate));
            if lowat.abs_diff(self.lowat) * 4 > self.lowat {
                socket::set_notsent_lowat(self.fd, lowat as u32)?;
                self.lowat = lowat;
            }
        }
        if self.shared {
            // The session sizes this buffer (`apply_share`); it is at its cap
            // when the share wanted is more than the budget allows.
            let granted = self.raised_sndbuf.unwrap_or(sndbuf);
            self.at_cap = policy::is_sndbuf_limited(&interval) && self.share_wanted > granted;
            self.judge_peer_window(at, &interval);
            return Ok(());
        }
        let budget = self.cfg.budget;
        let decision = self.send.decide(
            at,
            &interval,
            sndbuf,
            self.owned_sndbuf,
            self.lowat,
            &budget,
        );
        match decision {
            Some(SendDecision::Grow(want)) => {
                let granted = self.reservation.resize(want);
                if granted > sndbuf {
                    socket::set_sndbuf(self.fd, granted, budget.privileged)?;
                    self.owned_sndbuf = true;
                    self.raised_sndbuf = Some(granted);
                    self.adjustments += 1;
                    self.growing = true;
                }
                self.at_cap = granted < want || granted >= budget.cap();
            }
            Some(SendDecision::Shrink(to)) => {
                socket::set_sndbuf(self.fd, to, budget.privileged)?;
                self.reservation.resize(to);
                self.raised_sndbuf = Some(to);
                self.adjustments += 1;
            }
            None => {
                if !self.owned_sndbuf {
                    self.reservation.resize(sndbuf);
                }
                // Limited but not grown: at the cap only if the cap is why
                // (not while waiting for the last step to show, and not
                // while the stream queues: then the path is full).
                self.at_cap = policy::is_sndbuf_limited(&interval) && sndbuf >= budget.cap();
            }
        }
        self.judge_peer_window(at, &interval);
        Ok(())
    }

    /// A stream held back by the peer's window: the peer reads too slowly
    /// ([`StreamEstimator::peer_reads_slowly`]), or else the window is at
    /// its cap (this end cannot grow it; more streams add windows) once it
    /// has stopped growing. While it still grows, the receiver is opening
    /// it: neither yet.
    fn judge_peer_window(&mut self, at: Duration, interval: &Interval) {
        if interval.busy_share < 0.5 || interval.rwnd_limited_share < 0.2 {
            return;
        }
        if self.estimator.peer_reads_slowly() {
            self.slow_reader = true;
            return;
        }
        let settle = WINDOW_SETTLE.max(Duration::from_micros(u64::from(interval.srtt_us)) * 4);
        self.at_cap |= self.estimator.peer_window_settled(at, settle);
    }

    /// The most tern may set a receive buffer to: the stream's budget share,
    /// and without privilege `rmem_max`.
    fn rcvbuf_cap(&self) -> u64 {
        let budget = self.cfg.budget;
        if budget.privileged {
            budget.per_stream
        } else {
            budget.per_stream.min(self.cfg.caps.rmem_max)
        }
    }

    /// Starts the receive buffer at `bytes` (as the kernel reports it), for
    /// a rate known before the first byte: the kernel's autotuning would
    /// grow it from `tcp_rmem[1]` about 2× per round trip, holding the
    /// window below the path for the first several. tern owns the buffer
    /// from then on and keeps growing it while the stream fills it. Setting
    /// it ends the kernel's autotuning for good, so it is left to the kernel
    /// (false) unless in `auto` mode, with a cap at least the kernel's own
    /// (`tcp_rmem[2]`: never a lower ceiling than autotuning had), for at
    /// most that much, more than the buffer has, and only when the pool
    /// grants all of it.
    pub fn start_rcvbuf(&mut self, bytes: u64) -> io::Result<bool> {
        let kernel_max = self.cfg.caps.tcp_rmem[2];
        if self.cfg.mode != WindowMode::Auto || self.owned_rcvbuf || self.rcvbuf_cap() < kernel_max
        {
            return Ok(false);
        }
        let max_window = 65535u64 << TcpInfo::read(self.fd)?.rcv_wscale.min(14);
        let want = bytes.min(kernel_max).min(max_window.saturating_mul(2));
        let current = socket::rcvbuf(self.fd)?;
        if want <= current {
            return Ok(false);
        }
        let granted = self.reservation.resize(want);
        if granted < want {
            self.reservation.resize(current);
            return Ok(false);
        }
        socket::set_rcvbuf(self.fd, granted, self.cfg.budget.privileged)?;
        socket::set_window_clamp(self.fd, granted.min(max_window))?;
        self.owned_rcvbuf = true;
        self.raised_rcvbuf = Some(granted);
        self.adjustments += 1;
        Ok(true)
    }

    fn tune_receive(&mut self, info: &TcpInfo, rcvbuf: u64) -> io::Result<()> {
        let budget = self.cfg.budget;
        let cap = self.rcvbuf_cap();
        let rmem_max = self.cfg.caps.tcp_rmem[2];
        let max_window = 65535u64 << info.rcv_wscale.min(14);
        if let Some(want) = policy::next_rcvbuf(
            u64::from(info.rcv_space),
            rcvbuf,
            self.owned_rcvbuf,
            rmem_max,
            cap,
            max_window,
        ) {
            let granted = self.reservation.resize(want);
            if granted > rcvbuf {
                socket::set_rcvbuf(self.fd, granted, budget.privileged)?;
                // Setting the buffer does not move the window clamp that
                // autotuning left behind; without this the window stays.
                socket::set_window_clamp(self.fd, granted.min(max_window))?;
                self.owned_rcvbuf = true;
                self.raised_rcvbuf = Some(granted);
                self.adjustments += 1;
            }
            return Ok(());
        }
        if !self.owned_rcvbuf {
            // The kernel grew the buffer on its own: account for it, and
            // when the pool cannot cover it, bound the window instead of
            // locking the buffer.
            let covered = self.reservation.resize(rcvbuf);
            if covered < rcvbuf && self.clamp.is_none_or(|c| c > covered / 2) {
                socket::set_window_clamp(self.fd, covered / 2)?;
                self.clamp = Some(covered / 2);
                self.adjustments += 1;
            }
        }
        Ok(())
    }

    /// Hands this send buffer to the session ([`crate::session`]): from
    /// now on it is `share` bytes, and follows [`SocketTuner::apply_share`]
    /// instead of this stream's own policy. Only in [`WindowMode::Auto`]
    /// on a sending socket; elsewhere it does nothing.
    pub fn share_with_session(&mut self, share: u64) -> io::Result<()> {
        if self.cfg.mode != WindowMode::Auto || self.cfg.direction != Direction::Send {
            return Ok(());
        }
        self.shared = true;
        self.set_share(share, true)
    }

    /// Sets a shared send buffer to the session's current `share`, unless
    /// it is already within a tenth of it.
    pub fn apply_share(&mut self, share: u64) -> io::Result<()> {
        if !self.shared {
            return Ok(());
        }
        self.share_wanted = share;
        let current = self.raised_sndbuf.unwrap_or(self.seen_sndbuf);
        if share.abs_diff(current) * 10 <= current {
            return Ok(());
        }
        self.set_share(share, false)
    }

    fn set_share(&mut self, share: u64, first: bool) -> io::Result<()> {
        self.share_wanted = share;
        let want = share.min(self.cfg.budget.cap());
        let granted = self.reservation.resize(want);
        let before = self.raised_sndbuf.unwrap_or(self.seen_sndbuf);
        socket::set_sndbuf(self.fd, granted, self.cfg.budget.privileged)?;
        self.owned_sndbuf = true;
        self.raised_sndbuf = Some(granted);
        self.peak_sndbuf = self.peak_sndbuf.max(socket::sndbuf(self.fd)?);
        if !first {
            self.adjustments += 1;
        }
        self.growing = granted > before;
        Ok(())
    }

    /// Whether the send buffer follows the session's share.
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// The last interval between two samples.
    pub fn interval(&self) -> Option<Interval> {
        self.last
    }

    /// After the last tick: limited by a buffer or window that could not
    /// grow further.
    pub fn at_cap(&self) -> bool {
        self.at_cap
    }

    /// After the last tick: held back by a peer that reads more slowly
    /// than data arrives, though its window is ample. Only trying shows
    /// whether more streams help: they do when each of the peer's streams
    /// is bound to one core's work.
    pub fn slow_reader(&self) -> bool {
        self.slow_reader
    }

    /// After the last tick: its send buffer was just grown.
    pub fn growing(&self) -> bool {
        self.growing
    }

    /// The estimate so far.
    pub fn estimate(&self) -> StreamEstimate {
        self.estimator.estimate()
    }

    /// The unsent-data mark in force.
    pub fn notsent_lowat(&self) -> u64 {
        self.lowat
    }

    /// The window clamp set, if the pool ran short.
    pub fn window_clamp(&self) -> Option<u64> {
        self.clamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::tests::sample;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_full_window_is_a_cap_once_it_stopped_growing_small_for_the_path() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let cfg = TunerConfig::new(WindowMode::Auto, Direction::Send, 64 << 20);
        // Samples 200 ms apart, busy throughout, 90 % of it waiting on the
        // peer's window; 100 MB/s at 10 ms: a 1 MB bandwidth-delay
        // product. `windows`: the peer's window at 0, 200, 400 and 600 ms.
        let judge = |windows: [u32; 4]| {
            let mut t = SocketTuner::new(client.as_raw_fd(), cfg.clone());
            for (i, window) in windows.into_iter().enumerate() {
                let ms = 200 * i as u64;
                let info = TcpInfo {
                    snd_wnd: Some(window),
                    ..sample(ms * 1000, ms * 900, 0, 100_000_000, 10_000)
                };
                t.estimator.add(Duration::from_millis(ms), info);
            }
            let interval = t.estimator.last_interval().unwrap();
            t.judge_peer_window(Duration::from_millis(600), &interval);
            (t.at_cap(), t.slow_reader())
        };
        let small = 512 << 10;
        assert_eq!(
            judge([small; 4]),
            (true, false),
            "a window short of the path that stopped growing"
        );
        assert_eq!(
            judge([small / 4, small / 2, small / 2, small]),
            (false, false),
            "a window short of the path the receiver is still opening"
        );
        assert_eq!(
            judge([small, 8 << 20, 8 << 20, 8 << 20]),
            (false, true),
            "a window past it, drained slowly"
        );
        assert_eq!(
            judge([0, 8192, 0, 0]),
            (false, true),
            "a window mostly closed: the buffer full of data not read yet"
        );
    }

    #[test]
    fn a_tuner_measures_a_live_socket_and_kernel_mode_changes_nothing() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let before = socket::sndbuf(client.as_raw_fd()).unwrap();
        let mut t = SocketTuner::new(
            client.as_raw_fd(),
            TunerConfig::new(WindowMode::Kernel, Direction::Send, 64 << 20),
        );
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0;
            while total < 64 << 20 {
                total += server.read(&mut buf).unwrap();
            }
        });
        for i in 0..64u64 {
            client.write_all(&vec![1u8; 1 << 20]).unwrap();
            t.tick(Duration::from_millis(i), true).unwrap();
        }
        reader.join().unwrap();
        assert!(t.peak_sndbuf >= before);
        assert_eq!(t.adjustments, 0);
        assert!(t.estimate().min_rtt_ms >= 0.0);
        assert!(t.interval().is_some());
    }

    #[test]
    fn fixed_buffers_are_locked() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        fix_buffers(s.as_raw_fd(), 64 << 10, false).unwrap();
        assert_eq!(socket::sndbuf(s.as_raw_fd()).unwrap(), 64 << 10);
        assert_eq!(socket::rcvbuf(s.as_raw_fd()).unwrap(), 64 << 10);
    }

    #[test]
    fn a_known_rate_starts_the_receive_buffer_and_tern_owns_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let fd = server.as_raw_fd();
        let before = socket::rcvbuf(fd).unwrap();
        let cfg = TunerConfig::new(WindowMode::Auto, Direction::Receive, 64 << 20);
        let kernel_max = cfg.caps.tcp_rmem[2];
        let cap = if cfg.budget.privileged {
            64 << 20
        } else {
            cfg.caps.rmem_max.min(64 << 20)
        };
        let mut t = SocketTuner::new(fd, cfg);
        if cap < kernel_max {
            // tern could not take the buffer as far as the kernel: it stays
            // the kernel's.
            assert!(!t.start_rcvbuf(2 << 20).unwrap());
            assert_eq!(socket::rcvbuf(fd).unwrap(), before);
            return eprintln!("skipped the rest: cap {cap} below tcp_rmem[2] {kernel_max}");
        }
        let start = (before + (256 << 10)).max(1 << 20).min(kernel_max);
        assert!(start > before, "tcp_rmem[2] {kernel_max} leaves no room");
        assert!(t.start_rcvbuf(start).unwrap());
        assert_eq!(socket::rcvbuf(fd).unwrap(), start);
        assert_eq!(t.raised_rcvbuf, Some(start));
        assert!(!t.start_rcvbuf(start * 2).unwrap(), "once only");

        // Never past what the kernel's autotuning could have reached.
        let (other, _) = {
            let _c = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            listener.accept().unwrap()
        };
        let ofd = other.as_raw_fd();
        let mut big = SocketTuner::new(
            ofd,
            TunerConfig::new(WindowMode::Auto, Direction::Receive, 64 << 20),
        );
        assert!(big.start_rcvbuf(u64::MAX).unwrap());
        assert!(big.raised_rcvbuf.unwrap() <= kernel_max);
        assert!(socket::rcvbuf(ofd).unwrap() <= kernel_max);

        // Kernel mode leaves every buffer alone.
        let (third, _) = {
            let _c = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            listener.accept().unwrap()
        };
        let tfd = third.as_raw_fd();
        let untouched = socket::rcvbuf(tfd).unwrap();
        let mut k = SocketTuner::new(
            tfd,
            TunerConfig::new(WindowMode::Kernel, Direction::Receive, 64 << 20),
        );
        assert!(!k.start_rcvbuf(start).unwrap());
        assert_eq!(socket::rcvbuf(tfd).unwrap(), untouched);
    }
}
