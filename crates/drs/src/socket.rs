//! Applying buffer decisions to a socket.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

fn set_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid pointer to an int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_int(fd: RawFd, level: libc::c_int, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid pointer to an int and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The send buffer size the kernel reports (it doubles what was asked).
pub fn sndbuf(fd: RawFd) -> io::Result<u64> {
    Ok(get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)?.max(0) as u64)
}

/// The receive buffer size the kernel reports (it doubles what was asked).
pub fn rcvbuf(fd: RawFd) -> io::Result<u64> {
    Ok(get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?.max(0) as u64)
}

/// Sets the send buffer to hold `bytes`: with `SO_SNDBUFFORCE` when
/// `privileged`, else `SO_SNDBUF` (capped by the kernel at `wmem_max`).
/// The kernel doubles the value for bookkeeping, so half is asked for.
pub fn set_sndbuf(fd: RawFd, bytes: u64, privileged: bool) -> io::Result<()> {
    let half = (bytes / 2).min(i32::MAX as u64) as libc::c_int;
    let opt = if privileged {
        libc::SO_SNDBUFFORCE
    } else {
        libc::SO_SNDBUF
    };
    set_int(fd, libc::SOL_SOCKET, opt, half)
}

/// Sets the receive buffer to hold `bytes` (as [`set_sndbuf`] does for the
/// send buffer). This turns the kernel's receive autotuning off for the
/// socket.
pub fn set_rcvbuf(fd: RawFd, bytes: u64, privileged: bool) -> io::Result<()> {
    let half = (bytes / 2).min(i32::MAX as u64) as libc::c_int;
    let opt = if privileged {
        libc::SO_RCVBUFFORCE
    } else {
        libc::SO_RCVBUF
    };
    set_int(fd, libc::SOL_SOCKET, opt, half)
}

/// Paces what this socket sends at `bytes_per_sec` at most
/// (`SO_MAX_PACING_RATE`): the fq qdisc paces it where it is installed,
/// TCP's own pacing elsewhere.
pub fn set_max_pacing_rate(fd: RawFd, bytes_per_sec: u64) -> io::Result<()> {
    // SAFETY: a valid pointer to a u64 of the size passed (the kernel
    // takes a 64-bit rate when given eight bytes).
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&bytes_per_sec as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The pacing cap of this socket, bytes/s (`u64::MAX`: none).
pub fn max_pacing_rate(fd: RawFd) -> io::Result<u64> {
    let mut value: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: a valid pointer to a u64 and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SOL_MPTCP` and `MPTCP_INFO` of `<linux/mptcp.h>` (not in libc).
const SOL_MPTCP: libc::c_int = 284;
const MPTCP_INFO: libc::c_int = 1;

/// For an MPTCP socket (not fallen back to TCP), the subflows it has
/// besides the first (`mptcpi_subflows`); `None` for a plain TCP socket or
/// one that fell back.
pub fn mptcp_subflows(fd: RawFd) -> Option<u8> {
    // struct mptcp_info begins with `__u8 mptcpi_subflows`.
    let mut info = [0u8; 64];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: a valid buffer and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            SOL_MPTCP,
            MPTCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (rc == 0 && len > 0).then_some(info[0])
}

/// Bounds the window this socket advertises (`TCP_WINDOW_CLAMP`) while
/// leaving receive autotuning on below it.
pub fn set_window_clamp(fd: RawFd, bytes: u64) -> io::Result<()> {
    let value = bytes.min(i32::MAX as u64) as libc::c_int;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, value)
}

/// Chooses the socket's congestion control (`TCP_CONGESTION`). Algorithms
/// outside `net.ipv4.tcp_allowed_congestion_control` need CAP_NET_ADMIN.
pub fn set_congestion(fd: RawFd, name: &str) -> io::Result<()> {
    let bytes = name.as_bytes();
    // SAFETY: a valid pointer to `bytes.len()` bytes.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            bytes.as_ptr().cast(),
            bytes.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The socket's congestion control.
pub fn congestion(fd: RawFd) -> io::Result<String> {
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: a valid pointer to `len` writable bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let name = &buf[..(len as usize).min(buf.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// True when this process may use `SO_SNDBUFFORCE` (effective root, as a
/// stand-in for CAP_NET_ADMIN).
pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Bounds the bytes written but not yet sent (`TCP_NOTSENT_LOWAT`): the
/// socket reports writable only below it, so a writer's pace follows what
/// the connection really sends instead of filling a large send buffer.
pub fn set_notsent_lowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    let value = bytes.min(i32::MAX as u32) as libc::c_int;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn buffers_clamp_and_congestion_control_are_applied() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let fd = s.as_raw_fd();
        set_rcvbuf(fd, 256 << 10, false).unwrap();
        assert_eq!(
            rcvbuf(fd).unwrap(),
            256 << 10,
            "the kernel doubles the half asked"
        );
        set_sndbuf(fd, 128 << 10, false).unwrap();
        assert_eq!(sndbuf(fd).unwrap(), 128 << 10);
        set_window_clamp(fd, 1 << 20).unwrap();
        // reno is always built in and allowed.
        set_congestion(fd, "reno").unwrap();
        assert_eq!(congestion(fd).unwrap(), "reno");
        assert!(set_congestion(fd, "no-such-cc").is_err());
        assert!(congestion(-1).is_err());
    }

    #[test]
    fn a_pacing_cap_is_set_and_read_back() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let fd = s.as_raw_fd();
        assert_eq!(max_pacing_rate(fd).unwrap(), u64::MAX, "none at first");
        set_max_pacing_rate(fd, 37_500_000).unwrap();
        assert_eq!(max_pacing_rate(fd).unwrap(), 37_500_000);
        assert!(set_max_pacing_rate(-1, 1).is_err());
    }
}
