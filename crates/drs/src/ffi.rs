//! libdrs: the C ABI. `include/drs.h` is generated from this file by
//! cbindgen (`scripts/gen-drs-header.sh`) and committed.
//!
//! Attach to a connected TCP socket, then either call [`drs_tune`] when you
//! like or [`drs_start`] a background thread that tunes periodically; read
//! what it measured with [`drs_estimate`]; [`drs_detach`] when done (it
//! never closes your socket).
#![allow(unsafe_code, non_camel_case_types)]

use std::os::raw::{c_int, c_uint};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::estimate::Limit;
use crate::tuner::{Direction, SocketTuner, TunerConfig, WindowMode};
use crate::{TcpInfo, socket};

/// What libdrs measured on a socket.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct drs_estimate_t {
    /// Lowest RTT seen, ms.
    pub min_rtt_ms: f64,
    /// Smoothed RTT, ms.
    pub srtt_ms: f64,
    /// Highest delivery rate seen, bits/s.
    pub delivery_rate_bps: f64,
    /// Bandwidth-delay product, bytes.
    pub bdp_bytes: u64,
    /// Share of time busy sending.
    pub busy_share: f64,
    /// Share of busy time limited by the peer's receive window.
    pub rwnd_limited_share: f64,
    /// Share of busy time limited by the send buffer.
    pub sndbuf_limited_share: f64,
    /// 0 unknown, 1 receive window, 2 send buffer, 3 network, 4 application,
    /// 5 receiver (its window had room for the path twice over, and filled).
    pub limit: c_int,
    /// Current send buffer, bytes (as the kernel counts it).
    pub sndbuf_bytes: u64,
    /// Times libdrs grew the send buffer.
    pub adjustments: u32,
}

struct Inner {
    fd: c_int,
    tuner: SocketTuner,
    started: Instant,
}

/// An attached socket (opaque to C).
pub struct drs_t {
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for drs_t {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("drs_t")
    }
}

impl Inner {
    fn tune(&mut self) -> c_int {
        let before = self.tuner.adjustments;
        match self.tuner.tick(self.started.elapsed(), true) {
            Ok(_) => c_int::from(self.tuner.adjustments != before),
            Err(_) => -1,
        }
    }
}

/// Attaches to a connected TCP socket. Returns NULL if `fd` is not one.
#[unsafe(no_mangle)]
pub extern "C" fn drs_attach(fd: c_int) -> *mut drs_t {
    if TcpInfo::read(fd).is_err() {
        return std::ptr::null_mut();
    }
    let cfg = TunerConfig::new(
        WindowMode::Auto,
        Direction::Send,
        crate::host::session_budget(),
    );
    let inner = Inner {
        fd,
        tuner: SocketTuner::new(fd, cfg),
        started: Instant::now(),
    };
    let handle = drs_t {
        inner: Arc::new(Mutex::new(inner)),
        stop: Arc::new(AtomicBool::new(false)),
        thread: None,
    };
    Box::into_raw(Box::new(handle))
}

/// Samples the socket now and resizes its send buffer (and unsent-data
/// mark) if the policy says so. Returns 1 if something changed, 0 if not,
/// -1 on error.
///
/// # Safety
/// `d` must come from [`drs_attach`] and not be detached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn drs_tune(d: *mut drs_t) -> c_int {
    // SAFETY: the caller passes a live handle from drs_attach.
    let Some(d) = (unsafe { d.as_ref() }) else {
        return -1;
    };
    d.inner.lock().map_or(-1, |mut i| i.tune())
}

/// Starts a background thread that tunes every `interval_ms` (at least 10).
/// Returns 0, or -1 if already started or on error.
///
/// # Safety
/// `d` must come from [`drs_attach`] and not be detached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn drs_start(d: *mut drs_t, interval_ms: c_uint) -> c_int {
    // SAFETY: the caller passes a live handle from drs_attach.
    let Some(d) = (unsafe { d.as_mut() }) else {
        return -1;
    };
    if d.thread.is_some() {
        return -1;
    }
    let (inner, stop) = (d.inner.clone(), d.stop.clone());
    let every = Duration::from_millis(u64::from(interval_ms.max(10)));
    d.thread = Some(std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            if let Ok(mut i) = inner.lock() {
                i.tune();
            }
        }
    }));
    0
}

/// Fills `out` with the current estimate. Returns 0, or -1 on error.
///
/// # Safety
/// `d` must come from [`drs_attach`]; `out` must point to writable memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn drs_estimate(d: *const drs_t, out: *mut drs_estimate_t) -> c_int {
    // SAFETY: the caller passes a live handle and a valid out pointer.
    let (Some(d), Some(out)) = (unsafe { d.as_ref() }, unsafe { out.as_mut() }) else {
        return -1;
    };
    let Ok(i) = d.inner.lock() else {
        return -1;
    };
    let e = i.tuner.estimate();
    *out = drs_estimate_t {
        min_rtt_ms: e.min_rtt_ms,
        srtt_ms: e.srtt_ms,
        delivery_rate_bps: e.delivery_rate_bps,
        bdp_bytes: e.bdp_bytes,
        busy_share: e.busy_share,
        rwnd_limited_share: e.rwnd_limited_share,
        sndbuf_limited_share: e.sndbuf_limited_share,
        limit: match e.limit {
            Limit::Unknown => 0,
            Limit::ReceiveWindow => 1,
            Limit::SendBuffer => 2,
            Limit::Network => 3,
            Limit::Application => 4,
            Limit::Receiver => 5,
        },
        sndbuf_bytes: socket::sndbuf(i.fd).unwrap_or(0),
        adjustments: i.tuner.adjustments,
    };
    0
}

/// Stops tuning and frees the handle. The socket stays open.
///
/// # Safety
/// `d` must come from [`drs_attach`] and is invalid afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn drs_detach(d: *mut drs_t) {
    if d.is_null() {
        return;
    }
    // SAFETY: the handle was created by Box::into_raw in drs_attach.
    let mut d = unsafe { Box::from_raw(d) };
    d.stop.store(true, Ordering::Relaxed);
    if let Some(t) = d.thread.take() {
        let _ = t.join();
    }
}
