//! Reading `TCP_INFO` from a socket.
//!
//! The kernel returns as many bytes of `struct tcp_info` as it knows; older
//! kernels return fewer. Fields beyond the returned length are `None`, never
//! a misleading zero.
#![allow(unsafe_code)]

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::RawFd;

/// `struct tcp_info` from `linux/tcp.h`, field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    app_limited_bits: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
}

/// What one `TCP_INFO` read said, in plain units.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TcpInfo {
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Sender MSS, bytes.
    pub snd_mss: u32,
    /// Segments sent and not yet acknowledged.
    #[serde(default)]
    pub unacked: u32,
    /// Bytes acknowledged so far.
    pub bytes_acked: u64,
    /// Bytes received so far.
    pub bytes_received: u64,
    /// Bytes written but not yet sent.
    pub notsent_bytes: Option<u32>,
    /// Minimum RTT seen, µs.
    pub min_rtt_us: Option<u32>,
    /// Latest delivery-rate sample, bytes/s.
    pub delivery_rate: Option<u64>,
    /// Time busy sending, µs.
    pub busy_us: Option<u64>,
    /// Time limited by the peer's receive window, µs.
    pub rwnd_limited_us: Option<u64>,
    /// Time limited by our send buffer, µs.
    pub sndbuf_limited_us: Option<u64>,
    /// Bytes retransmitted.
    pub bytes_retrans: Option<u64>,
    /// The peer's advertised window, bytes.
    pub snd_wnd: Option<u32>,
    /// Our receive-space estimate (the kernel's DRS), bytes.
    pub rcv_space: u32,
    /// Our window scale (fixed at connection setup): the window we can
    /// advertise is at most 65535 << this.
    #[serde(default)]
    pub rcv_wscale: u8,
}

impl TcpInfo {
    /// The path's round-trip time: the kernel's minimum where it reports
    /// one, else its smoothed RTT.
    pub fn path_rtt(&self) -> std::time::Duration {
        std::time::Duration::from_micros(u64::from(self.min_rtt_us.unwrap_or(self.rtt_us)))
    }

    /// Bytes written to the socket and not yet delivered: not sent, or
    /// sent and not acknowledged.
    pub fn undelivered_bytes(&self) -> u64 {
        u64::from(self.notsent_bytes.unwrap_or(0))
            + u64::from(self.unacked) * u64::from(self.snd_mss)
    }

    /// Reads `TCP_INFO` from a TCP socket.
    pub fn read(fd: RawFd) -> io::Result<TcpInfo> {
        let mut raw = RawTcpInfo::default();
        let mut len = size_of::<RawTcpInfo>() as libc::socklen_t;
        // SAFETY: `raw` is a plain repr(C) struct of `len` bytes; the kernel
        // writes at most `len` bytes and reports how many it wrote.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut raw as *mut RawTcpInfo).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self::from_raw(&raw, len as usize))
    }

    fn from_raw(r: &RawTcpInfo, len: usize) -> TcpInfo {
        macro_rules! has {
            ($f:ident) => {
                (len >= offset_of!(RawTcpInfo, $f) + std::mem::size_of_val(&r.$f)).then_some(r.$f)
            };
        }
        TcpInfo {
            rtt_us: r.rtt,
            snd_cwnd: r.snd_cwnd,
            snd_mss: r.snd_mss,
            unacked: r.unacked,
            bytes_acked: has!(bytes_acked).unwrap_or(0),
            bytes_received: has!(bytes_received).unwrap_or(0),
            notsent_bytes: has!(notsent_bytes),
            min_rtt_us: has!(min_rtt),
            delivery_rate: has!(delivery_rate),
            busy_us: has!(busy_time),
            rwnd_limited_us: has!(rwnd_limited),
            sndbuf_limited_us: has!(sndbuf_limited),
            bytes_retrans: has!(bytes_retrans),
            snd_wnd: has!(snd_wnd),
            rcv_space: r.rcv_space,
            // Bitfield: tcpi_snd_wscale in the low four bits.
            rcv_wscale: r.wscale >> 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_short_answer_leaves_newer_fields_unknown() {
        let raw = RawTcpInfo {
            busy_time: 5,
            sndbuf_limited: 7,
            ..RawTcpInfo::default()
        };
        let old = TcpInfo::from_raw(&raw, offset_of!(RawTcpInfo, busy_time));
        assert_eq!(old.busy_us, None);
        assert_eq!(old.sndbuf_limited_us, None);
        let new = TcpInfo::from_raw(&raw, size_of::<RawTcpInfo>());
        assert_eq!(new.busy_us, Some(5));
        assert_eq!(new.sndbuf_limited_us, Some(7));
    }

    #[test]
    fn a_live_socket_reports_its_traffic() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7u8; 100_000]).unwrap();
        let mut buf = vec![0u8; 100_000];
        server.read_exact(&mut buf).unwrap();
        let info = TcpInfo::read(client.as_raw_fd()).unwrap();
        assert!(info.bytes_acked >= 100_000 || info.busy_us.is_some());
        assert!(info.snd_mss > 0);
        let theirs = TcpInfo::read(server.as_raw_fd()).unwrap();
        assert!(theirs.bytes_received >= 100_000);
        assert!(TcpInfo::read(-1).is_err());
    }
}
