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
//!
//! A subnet is only a guess at a shared bottleneck. The operator, who
//! knows that several sites sit behind one WAN link, can say so: targets
//! with the same declared bottleneck group ([`Group::Declared`]) are one
//! group whatever their addresses, and whether or not subnets are grouped.
//! Finding shared bottlenecks by themselves, from the routes, awaits route
//! measurements.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::Target;

/// What a target is grouped by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Group {
    /// A bottleneck group the operator declared (`group=NAME` in the
    /// targets file, `group` in the API).
    Declared(String),
    /// The subnet of its address, like `192.0.2.0/24`.
    Subnet(String),
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Group::Declared(name) => write!(f, "bottleneck group {name}"),
            Group::Subnet(net) => write!(f, "subnet {net}"),
        }
    }
}

/// How targets are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregationPolicy {
    /// Group targets by subnet (declared groups count regardless).
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

    /// The group of a target: the bottleneck group it was put in, else
    /// its subnet when subnets are grouped.
    pub fn group_of_target(&self, target: &Target) -> Option<Group> {
        if let Some(name) = &target.group {
            return Some(Group::Declared(name.clone()));
        }
        let address = target.address.as_deref()?;
        self.group_of(address).map(Group::Subnet)
    }

    /// Whether a due measurement of a target may be skipped because its
    /// group covers it. Times are on any one clock (e.g. since start):
    /// `own_last` is when the target itself was last measured, `group_last`
    /// the latest measurement of any other member of its group (`None`
    /// when it has no group).
    pub fn covered(
        &self,
        now: Duration,
        interval: Duration,
        own_last: Option<Duration>,
        group_last: Option<Duration>,
    ) -> bool {
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
        // No other member: nothing covers it.
        assert!(!p.covered(at(10), h, Some(at(9)), None));
    }

    fn target(address: &str, group: Option<&str>) -> Target {
        Target {
            host: address.into(),
            port: 4747,
            address: Some(address.into()),
            group: group.map(str::to_string),
            probes: None,
            source: crate::model::TargetSource::Api,
            interval_s: 3600,
            added_ms: 0,
            last_used_ms: 0,
        }
    }

    #[test]
    fn a_declared_group_replaces_the_subnet_and_survives_subnets_off() {
        let p = AggregationPolicy::default();
        let east = Group::Declared("wan-east".into());
        // Different subnets, one declared bottleneck.
        let a = target("192.0.2.1", Some("wan-east"));
        let b = target("198.51.100.1", Some("wan-east"));
        assert_eq!(p.group_of_target(&a), Some(east.clone()));
        assert_eq!(p.group_of_target(&a), p.group_of_target(&b));
        // A subnet neighbour outside the group is not in it.
        let c = target("192.0.2.2", None);
        assert_eq!(
            p.group_of_target(&c),
            Some(Group::Subnet("192.0.2.0/24".into()))
        );
        assert_ne!(p.group_of_target(&a), p.group_of_target(&c));
        let off = AggregationPolicy {
            enabled: false,
            ..p
        };
        assert_eq!(off.group_of_target(&b), Some(east.clone()));
        assert_eq!(off.group_of_target(&c), None);
        assert_eq!(east.to_string(), "bottleneck group wan-east");
        assert_eq!(
            p.group_of_target(&c).unwrap().to_string(),
            "subnet 192.0.2.0/24"
        );
    }
}
