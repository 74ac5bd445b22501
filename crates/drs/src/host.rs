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
    /// `net.ipv4.tcp_congestion_control`.
    pub congestion_control: String,
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
        }
    }
}

/// Send-buffer memory one session may commit: 1/16 of RAM, at most 1 GiB.
pub fn session_budget() -> u64 {
    let total_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(4 << 20);
    (total_kib * 1024 / 16).clamp(64 << 20, 1 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_caps() {
        let caps = HostCaps::read();
        assert!(caps.tcp_wmem[2] > 0 && caps.tcp_rmem[2] > 0, "{caps:?}");
        assert!(!caps.congestion_control.is_empty());
        assert_eq!(triple("4096\t16384 4194304"), [4096, 16384, 4194304]);
        assert_eq!(triple("garbage"), [0; 3]);
    }
}
