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

/// The send buffer size the kernel reports (it doubles what was asked).
pub fn sndbuf(fd: RawFd) -> io::Result<u64> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid pointer to an int and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value.max(0) as u64)
    } else {
        Err(io::Error::last_os_error())
    }
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
