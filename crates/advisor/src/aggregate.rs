//! Aggregation: targets that share a subnet share a path, mostly. Pure.
//!
//! Enable's scaling section describes the trade: measuring every client
//! of a data server is precise but redundant when many sit on one subnet
//! behind one bottleneck. The policy here is its "fairly conservative"
//! one: every target is measured at least once (two hosts on one subnet
//! may still differ, one on a fast LAN and one behind a slow link), then
//! while any member of its group was measured within the target's
//! interval the target itself is only re-checked every `recheck_every`
//! intervals; until it has numbers of its own, advice for it is answered
//! from its group.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How targets are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregationPolicy {
    /// Group targets at all.
    pub enabled: bool,
    /// IPv4 prefix length that makes a group (/24 by default).
    pub v4_prefix: u8,
    /// IPv6 prefix length that makes a group (/64 by default).
    pub v6_prefix: u8,
    /// A covered target is still measured itself every this many intervals.
    pub recheck_every: u32,
}

impl Default for AggregationPolicy {
    fn default() -> AggregationPolicy {
        AggregationPolicy {
            enabled: true,
            v4_prefix: 24,
            v6_prefix: 64,
            recheck_every: 4,
        }
    }
}

impl AggregationPolicy {
    /// The group (a subnet like `192.0.2.0/24`) an address belongs to, or
    /// `None` when grouping is off or the address cannot be parsed.
    pub fn group_of(&self, address: &str) -> Option<String> {
        if !self.enabled {
            return None;
        }
        let ip: IpAddr = address.parse().ok()?;
        Some(match ip {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                let keep = u32::from(self.v4_prefix.min(32));
                let mask = u32::MAX.checked_shl(32 - keep).unwrap_or(0);
                format!("{}/{keep}", std::net::Ipv4Addr::from(bits & mask))
            }
            IpAddr::V6(v6) => {
                if let Some(v4) = v6.to_ipv4_mapped() {
                    return self.group_of(&v4.to_string());
                }
                let bits = u128::from(v6);
                let keep = u32::from(self.v6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - keep).unwrap_or(0);
                format!("{}/{keep}", std::net::Ipv6Addr::from(bits & mask))
            }
        })
    }

    /// Whether a due measurement of a target may be skipped because its
    /// group covers it. Times are on any one clock (e.g. since start):
    /// `own_last` is when the target itself was last measured, `group_last`
    /// the latest measurement of any other member.
    pub fn covered(
        &self,
        now: Duration,
        interval: Duration,
        own_last: Option<Duration>,
        group_last: Option<Duration>,
    ) -> bool {
        if !self.enabled {
            return false;
        }
        let (Some(own), Some(group)) = (own_last, group_last) else {
            // Never measured itself (conservative: at least once), or no
            // other member measured: nothing covers it.
            return false;
        };
        let group_fresh = now.saturating_sub(group) < interval;
        let recheck = interval.saturating_mul(self.recheck_every.max(1));
        let own_recent = now.saturating_sub(own) < recheck;
        group_fresh && own_recent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_prefix() {
        let p = AggregationPolicy::default();
        assert_eq!(p.group_of("192.0.2.77").as_deref(), Some("192.0.2.0/24"));
        assert_eq!(p.group_of("192.0.2.1"), p.group_of("192.0.2.254"));
        assert_ne!(p.group_of("192.0.2.1"), p.group_of("192.0.3.1"));
        assert_eq!(
            p.group_of("2001:db8:1:2:aaaa::1").as_deref(),
            Some("2001:db8:1:2::/64")
        );
        assert_eq!(p.group_of("::ffff:192.0.2.9"), p.group_of("192.0.2.1"));
        assert_eq!(p.group_of("dtn.example.org"), None);
        let whole = AggregationPolicy { v4_prefix: 0, ..p };
        assert_eq!(whole.group_of("10.1.2.3").as_deref(), Some("0.0.0.0/0"));
        let off = AggregationPolicy {
            enabled: false,
            ..p
        };
        assert_eq!(off.group_of("192.0.2.1"), None);
    }

    #[test]
    fn measured_once_then_covered_then_rechecked() {
        let p = AggregationPolicy::default();
        let h = Duration::from_secs(3600);
        let at = |hours: u64| Duration::from_secs(hours * 3600);
        // Never measured itself: measure, whatever the group did.
        assert!(!p.covered(at(10), h, None, Some(at(10))));
        // Measured itself 2 h ago, a neighbour 30 min ago: skip.
        assert!(p.covered(at(10), h, Some(at(8)), Some(at(10) - h / 2)));
        // The neighbour's result is older than the interval: measure.
        assert!(!p.covered(at(10), h, Some(at(8)), Some(at(8))));
        // Its own result is older than 4 intervals: re-check it.
        assert!(!p.covered(at(10), h, Some(at(5)), Some(at(10))));
        let off = AggregationPolicy {
            enabled: false,
            ..p
        };
        assert!(!off.covered(at(10), h, Some(at(9)), Some(at(10))));
    }
}
