//! The host's TCP buffer caps, read from `/proc/sys`.

use serde::Serialize;

/// Limits the kernel puts on socket buffers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct HostCaps {
    /// `net.ipv4.tcp_rmem` (min, default, max) bytes.
    pub tcp_rmem: [u64; 3],
    /// `net.ipv4.tcp_wmem` (min, default, max) bytes.
    pub tcp_wmem: [u64; 3],
    /// `net.core.rmem_max`: cap on explicit `SO_RCVBUF`.
    pub rmem_max: u64,
    /// `net.core.wmem_max`: cap on explicit `SO_SNDBUF`.
    pub wmem_max: u64,
    /// `net.ipv4.tcp_congestion_control`: the namespace's default.
    pub congestion_control: String,
    /// `net.ipv4.tcp_available_congestion_control`: built or loaded.
    pub congestion_available: Vec<String>,
    /// `net.ipv4.tcp_allowed_congestion_control`: usable without privilege.
    pub congestion_allowed: Vec<String>,
}

fn read(key: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn triple(s: &str) -> [u64; 3] {
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    match v[..] {
        [a, b, c] => [a, b, c],
        _ => [0; 3],
    }
}

impl HostCaps {
    /// Reads the caps of the current network namespace.
    pub fn read() -> HostCaps {
        HostCaps {
            tcp_rmem: triple(&read("net.ipv4.tcp_rmem")),
            tcp_wmem: triple(&read("net.ipv4.tcp_wmem")),
            rmem_max: read("net.core.rmem_max").parse().unwrap_or(0),
            wmem_max: read("net.core.wmem_max").parse().unwrap_or(0),
            congestion_control: read("net.ipv4.tcp_congestion_control"),
            congestion_available: words(&read("net.ipv4.tcp_available_congestion_control")),
            congestion_allowed: words(&read("net.ipv4.tcp_allowed_congestion_control")),
        }
    }

    /// Whether this process may put sockets on congestion control `name`.
    pub fn may_use_congestion(&self, name: &str, privileged: bool) -> bool {
        let list = if privileged {
            &self.congestion_available
        } else {
            &self.congestion_allowed
        };
        list.iter().any(|c| c == name)
    }

    /// The congestion control tern picks when not told: BBR where the
    /// kernel lets this process use it, because on long paths with random
    /// loss a loss-based algorithm (CUBIC, Reno) collapses to a fraction of
    /// the rate (1 Gbit/s × 100 ms, 0.01 % loss: CUBIC 61 Mbit/s, BBR 946)
    /// while BBR paces at the measured bottleneck rate; else the default.
    pub fn preferred_congestion(&self, privileged: bool) -> String {
        if self.may_use_congestion("bbr", privileged) {
            "bbr".into()
        } else {
            self.congestion_control.clone()
        }
    }
}

/// The congestion controls this process may set on its sockets, and the
/// one it picks when not told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableCongestion {
    /// The one picked when none is named ([`HostCaps::preferred_congestion`]).
    pub preferred: String,
    /// Every one this process may set: all the kernel has when privileged,
    /// else those it allows unprivileged users.
    pub usable: Vec<String>,
}

/// [`UsableCongestion`] of this process, read from the kernel once: every
/// session of a daemon is judged by the same list.
pub fn usable_congestion() -> &'static UsableCongestion {
    static USABLE: std::sync::OnceLock<UsableCongestion> = std::sync::OnceLock::new();
    USABLE.get_or_init(|| {
        let caps = HostCaps::read();
        let privileged = crate::socket::privileged();
        UsableCongestion {
            preferred: caps.preferred_congestion(privileged),
            usable: if privileged {
                caps.congestion_available.clone()
            } else {
                caps.congestion_allowed.clone()
            },
        }
    })
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Socket-buffer memory all of this process's streams may commit together:
/// 1/8 of RAM, between 64 MiB and 2 GiB.
pub fn host_budget() -> u64 {
    (mem_total() / 8).clamp(64 << 20, 2 << 30)
}

/// Send-buffer memory one session may commit: 1/16 of RAM, at most 1 GiB.
pub fn session_budget() -> u64 {
    (mem_total() / 16).clamp(64 << 20, 1 << 30)
}

fn mem_total() -> u64 {
    let total_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(4 << 20);
    total_kib * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_caps() {
        let caps = HostCaps::read();
        assert!(caps.tcp_wmem[2] > 0 && caps.tcp_rmem[2] > 0, "{caps:?}");
        assert!(!caps.congestion_control.is_empty());
        assert!(caps.congestion_available.contains(&caps.congestion_control));
        assert!(
            caps.may_use_congestion("reno", false),
            "reno is always allowed"
        );
        let pick = caps.preferred_congestion(false);
        assert!(pick == "bbr" || pick == caps.congestion_control);
        assert_eq!(triple("4096\t16384 4194304"), [4096, 16384, 4194304]);
        assert_eq!(triple("garbage"), [0; 3]);
    }
}
