//! The two system calls netlab needs that std does not offer: entering a
//! network namespace and creating a TUN device there.
//!
//! Both are done on a short-lived thread, because `setns` changes only the
//! calling thread's namespace: the thread enters the namespace, creates the
//! device, and exits; the file descriptor it returns keeps working from any
//! thread, in any namespace.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Creates TUN device `name` (no packet information header) inside the
/// network namespace at `netns` (e.g. `/var/run/netns/lab-a`).
pub fn create_tun_in(netns: PathBuf, name: &str) -> io::Result<File> {
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
        ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads an initialized ifreq through a valid pointer.
        if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF, &mut ifr) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(tun)
    })
    .join()
    .map_err(|_| io::Error::other("TUN creation thread panicked"))?
}

/// True when running as root (needed for namespaces and TUN devices).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
