//! The few socket calls the standard library and socket2 do not offer:
//! kernel receive timestamps (`SO_TIMESTAMPNS`, read from `recvmsg`
//! control messages), the route's MTU (`IP_MTU`/`IPV6_MTU`) and the
//! error queue (`IP_RECVERR`/`IPV6_RECVERR`, read with `MSG_ERRQUEUE`)
//! that tells a traceroute which router dropped a probe.
//!
//! Kernel timestamps are taken when the packet enters the stack, so a busy
//! runtime that reads the socket late does not widen a train's dispersion.
//! Everything unsafe in the crate lives here, each call with its reason.
#![allow(unsafe_code)]

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to stamp every received datagram with its arrival time.
pub fn enable_rx_timestamps(sock: &impl AsRawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid pointer to an int, with its size.
    check(unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
}

/// The MTU of the route a connected socket uses.
pub fn path_mtu(sock: &impl AsRawFd, v6: bool) -> io::Result<u32> {
    let (level, opt) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid pointer to an int and its length.
    check(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    u32::try_from(value).map_err(|_| io::Error::other("negative MTU"))
}

/// One received datagram.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes written into the buffer (a longer datagram is cut, see
    /// `truncated`).
    pub len: usize,
    /// The datagram was longer than the buffer.
    pub truncated: bool,
    /// Who sent it.
    pub from: SocketAddr,
    /// Kernel arrival time, ns since the Unix epoch, when the kernel gave
    /// one.
    pub kernel_ns: Option<u64>,
}

/// Receives one datagram without blocking (`WouldBlock` when none waits).
pub fn recv_timestamped(fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut addr = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    // Room for one timespec control message and then some; u64 for alignment.
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; zero is a valid starting value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = addr.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 16]>() as _;
    // SAFETY: every pointer in msg points at live buffers of the lengths
    // given, which outlive the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled in msg_namelen bytes of the address.
    let from = unsafe { socket_addr(addr.as_ptr(), msg.msg_namelen) }
        .ok_or_else(|| io::Error::other("datagram from an address that is not IP"))?;
    let mut kernel_ns = None;
    // SAFETY: the CMSG_* helpers walk the control buffer the kernel filled,
    // bounded by msg_controllen; a SCM_TIMESTAMPNS payload is a timespec.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                kernel_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        len: n as usize,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        from,
        kernel_ns,
    })
}

/// Queues the ICMP errors this socket's datagrams cause, each with the
/// address of the node that sent it (`IP_RECVERR`, or `IPV6_RECVERR` on an
/// IPv6 socket), to be read with [`recv_error`]. Without it a UDP socket
/// sees only some of them, as bare errno values.
pub fn enable_recv_err(sock: &impl AsRawFd, v6: bool) -> io::Result<()> {
    let (level, opt) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVERR)
    };
    let on: libc::c_int = 1;
    // SAFETY: a valid pointer to an int, with its size.
    check(unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
}

/// One control message, copied out of the kernel's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// `cmsg_level`, e.g. `IPPROTO_IP`.
    pub level: i32,
    /// `cmsg_type`, e.g. `IP_RECVERR`.
    pub kind: i32,
    /// The payload after the header.
    pub data: Vec<u8>,
}

/// One message from a socket's error queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedError {
    /// Bytes of the failed datagram's payload written into the buffer:
    /// as much of it as the ICMP error quoted (possibly none).
    pub len: usize,
    /// Its control messages; an `IP_RECVERR`/`IPV6_RECVERR` one carries a
    /// `sock_extended_err` followed by the offender's address.
    pub controls: Vec<Control>,
}

/// Reads one message from the error queue without blocking
/// (`WouldBlock` when it is empty).
pub fn recv_error(fd: RawFd, buf: &mut [u8]) -> io::Result<QueuedError> {
    // Room for a sock_extended_err and an IPv6 offender (44 bytes) and a
    // timestamp, with headers; u64 for alignment.
    let mut control = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; zero is a valid starting value (no
    // name wanted: the socket is connected, its peer is known).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 32]>() as _;
    // SAFETY: every pointer in msg points at live buffers of the lengths
    // given, which outlive the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut controls = Vec::new();
    // SAFETY: the CMSG_* helpers walk the control buffer the kernel filled,
    // bounded by msg_controllen; each message's payload is the cmsg_len
    // the kernel wrote less the header, inside that buffer.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let header = libc::CMSG_LEN(0) as usize;
            let len = ((*cmsg).cmsg_len as usize).saturating_sub(header);
            let data = std::slice::from_raw_parts(libc::CMSG_DATA(cmsg), len);
            controls.push(Control {
                level: (*cmsg).cmsg_level,
                kind: (*cmsg).cmsg_type,
                data: data.to_vec(),
            });
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(QueuedError {
        len: n as usize,
        controls,
    })
}

/// # Safety
/// `addr` must point at `len` initialised bytes of a socket address.
unsafe fn socket_addr(
    addr: *const libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = len as usize;
    // SAFETY (for the reads below): the family says which struct it is and
    // `len` says the kernel wrote all of it.
    unsafe {
        match i32::from((*addr).ss_family) {
            libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
                let a = &*addr.cast::<libc::sockaddr_in>();
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
                let a = &*addr.cast::<libc::sockaddr_in6>();
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_arrives_with_its_sender_and_a_kernel_timestamp() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_rx_timestamps(&rx).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        tx.send_to(&[7u8; 100], rx.local_addr().unwrap()).unwrap();
        rx.set_nonblocking(false).unwrap();
        let mut buf = [0u8; 64];
        let r = recv_timestamped(rx.as_raw_fd(), &mut buf).unwrap_or_else(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            recv_timestamped(rx.as_raw_fd(), &mut buf).unwrap()
        });
        assert_eq!(r.from, tx.local_addr().unwrap());
        assert_eq!(r.len, 64);
        assert!(r.truncated, "a 100-byte datagram does not fit 64 bytes");
        let ts = r.kernel_ns.expect("kernel timestamp");
        assert!(ts >= before.saturating_sub(1_000_000) && ts < before + 5_000_000_000);
    }

    #[test]
    fn an_empty_socket_would_block() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let err = recv_timestamped(rx.as_raw_fd(), &mut [0u8; 8]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn sock_extended_err_is_laid_out_as_the_route_parser_reads_it() {
        // route.rs reads the control message as bytes: errno (native
        // endian) at 0, origin, type, code at 4, 5, 6, the offender at 16.
        assert_eq!(size_of::<libc::sock_extended_err>(), 16);
        let ee = libc::sock_extended_err {
            ee_errno: 0x0102_0304,
            ee_origin: libc::SO_EE_ORIGIN_ICMP,
            ee_type: 11,
            ee_code: 7,
            ee_pad: 0,
            ee_info: 0,
            ee_data: 0,
        };
        // SAFETY: a plain-data struct viewed as its 16 bytes.
        let bytes: &[u8] = unsafe {
            std::slice::from_raw_parts((&ee as *const libc::sock_extended_err).cast(), 16)
        };
        assert_eq!(bytes[..4], 0x0102_0304u32.to_ne_bytes());
        assert_eq!(bytes[4..7], [libc::SO_EE_ORIGIN_ICMP, 11, 7]);
        // SAFETY: only the pointer arithmetic of the macro, not a read.
        let offender = unsafe { libc::SO_EE_OFFENDER(&ee) } as usize;
        assert_eq!(offender - (&ee as *const _ as usize), 16);
    }

    #[test]
    fn a_refused_datagram_is_queued_with_its_offender() {
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_recv_err(&s, false).unwrap();
        s.connect(addr).unwrap();
        s.send(b"quoted back").unwrap();
        let mut buf = [0u8; 64];
        let mut got = None;
        for _ in 0..100 {
            match recv_error(s.as_raw_fd(), &mut buf) {
                Ok(q) => {
                    got = Some(q);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Err(e) => panic!("{e}"),
            }
        }
        let q = got.expect("an ICMP port unreachable on loopback");
        assert_eq!(&buf[..q.len], b"quoted back");
        let c = q
            .controls
            .iter()
            .find(|c| c.level == libc::IPPROTO_IP && c.kind == libc::IP_RECVERR)
            .expect("an IP_RECVERR control message");
        assert!(c.data.len() >= 16 + size_of::<libc::sockaddr_in>(), "{c:?}");
        assert_eq!(
            c.data[4..7],
            [libc::SO_EE_ORIGIN_ICMP, 3, 3],
            "port unreachable"
        );
        assert_eq!(c.data[..4], (libc::ECONNREFUSED as u32).to_ne_bytes());
        // Then the queue is empty.
        let e = recv_error(s.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn the_loopback_route_has_an_mtu() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.connect("127.0.0.1:9").unwrap();
        assert!(path_mtu(&s, false).unwrap() >= 1500);
    }
}
