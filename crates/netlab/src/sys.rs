//! The system calls netlab needs that std does not offer: entering a
//! network namespace and creating a TUN device there, with or without
//! offloads (virtio headers, so the kernel passes TCP super-packets).
//!
//! Both are done on a short-lived thread, because `setns` changes only the
//! calling thread's namespace: the thread enters the namespace, creates the
//! device, and exits; the file descriptor it returns keeps working from any
//! thread, in any namespace.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

/// `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `_IOW('T', 216, int)`.
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
/// `IFF_VNET_HDR`: every packet read or written starts with a virtio_net_hdr.
const IFF_VNET_HDR: libc::c_int = 0x4000;
/// `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN`: the kernel may
/// hand over packets with the transport checksum still to do and TCP
/// super-packets (IPv4, IPv6, with ECN).
const TUN_OFFLOADS: libc::c_uint = 0x01 | 0x02 | 0x04 | 0x08;

/// Creates TUN device `name` (no packet information header) inside the
/// network namespace at `netns` (e.g. `/var/run/netns/lab-a`). With
/// `offload`, packets carry a virtio_net_hdr
/// ([`crate::gso::VNET_HDR_LEN`] bytes) and checksum and TCP segmentation
/// offloads are on; an error then means this kernel cannot (the caller
/// may retry without).
pub fn create_tun_in(netns: PathBuf, name: &str, offload: bool) -> io::Result<File> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let name = name.to_string();
    std::thread::spawn(move || -> io::Result<File> {
        let ns = File::open(&netns)?;
        // SAFETY: `ns` is an open namespace file; setns only affects this
        // thread, which exits right after creating the device.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let tun = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        let vnet = if offload { IFF_VNET_HDR } else { 0 };
        ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | vnet) as libc::c_short;
        // SAFETY: TUNSETIFF reads an initialized ifreq through a valid pointer.
        if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF, &mut ifr) } < 0 {
            return Err(io::Error::last_os_error());
        }
        if offload {
            let size = crate::gso::VNET_HDR_LEN as libc::c_int;
            // SAFETY: TUNSETVNETHDRSZ reads an int through a valid pointer.
            if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETVNETHDRSZ, &size) } < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: TUNSETOFFLOAD takes its argument by value.
            if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETOFFLOAD, TUN_OFFLOADS) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(tun)
    })
    .join()
    .map_err(|_| io::Error::other("TUN creation thread panicked"))?
}

/// Makes reads from `file` return `WouldBlock` instead of waiting. (The
/// flag belongs to the open file, so clones of it share it; writes to a
/// TUN device never wait anyway.)
pub fn set_nonblocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on an open descriptor, no pointers.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Waits until `fd` is readable or `timeout` (`None`: forever) has
/// passed, whichever comes first, to the nanosecond (`ppoll`, not
/// `poll`'s milliseconds). Signals and errors just end the wait.
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
    // SAFETY: one valid pollfd, a valid or null timespec, no signal mask.
    unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
}

/// True when running as root (needed for namespaces and TUN devices).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
