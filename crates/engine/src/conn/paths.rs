//! Every path between two hosts: which addresses a daemon tells its
//! clients about, and which path each of a client's data streams takes.
//!
//! A daemon reachable at several addresses (two providers, a routed path
//! and a circuit) names them at the end of the opening (`Paths`,
//! PROTOCOL.md §5). With `--streams auto` the client keeps every stream it
//! opens at the start on the path it reached the daemon by (path 0), which
//! the control connection proves alive; streams it adds while the transfer
//! runs go to the other paths first, so the stream-count controller keeps them where
//! they raise the aggregate rate and retires them where they do not. A
//! fixed stream count is spread over the paths from the start. The
//! blocks follow each stream's speed, so the data splits by each path's
//! rate without a plan. A path whose connection cannot be made is marked
//! failed and its stream goes over path 0; replacements for streams given
//! up go over path 0 too, since the path that lost them may be dead.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::net::TcpStream;

use crate::data::transfer::LostStream;
use crate::{Error, Result};

/// Which addresses a daemon advertises to its clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Advertise {
    /// Its interfaces' addresses, when it listens on every address (not to
    /// a client that came over loopback: that one is on this host).
    #[default]
    Interfaces,
    /// These (`tern serve --advertise`), e.g. behind NAT.
    Addresses(Vec<SocketAddr>),
    /// None.
    Off,
}

impl Advertise {
    /// The addresses to name to a client whose control connection arrived
    /// at `local`, on a daemon bound to `bound`: of the client's address
    /// family, without `local` itself.
    pub(crate) fn for_client(
        &self,
        bound: Option<SocketAddr>,
        local: SocketAddr,
    ) -> Vec<SocketAddr> {
        let local_ip = local.ip().to_canonical();
        let candidates: Vec<SocketAddr> = match self {
            Advertise::Off => Vec::new(),
            Advertise::Addresses(list) => list.clone(),
            Advertise::Interfaces => {
                let everywhere = bound.is_some_and(|b| b.ip().is_unspecified());
                if !everywhere || local_ip.is_loopback() {
                    return Vec::new();
                }
                interface_addresses()
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, local.port()))
                    .collect()
            }
        };
        let mut out: Vec<SocketAddr> = Vec::new();
        for a in candidates {
            let ip = a.ip().to_canonical();
            let same_family = ip.is_ipv4() == local_ip.is_ipv4();
            if same_family && ip != local_ip && !out.contains(&a) {
                out.push(a);
            }
        }
        out.truncate(tern_proto::MAX_PATHS);
        out
    }
}

/// This host's addresses a peer elsewhere could reach: not loopback, not
/// link-local, not unspecified.
fn interface_addresses() -> Vec<IpAddr> {
    let Ok(interfaces) = if_addrs::get_if_addrs() else {
        return Vec::new();
    };
    interfaces
        .into_iter()
        .map(|i| i.ip())
        .filter(|ip| {
            !ip.is_loopback()
                && !ip.is_unspecified()
                && match ip {
                    IpAddr::V4(v4) => !v4.is_link_local(),
                    IpAddr::V6(v6) => !v6.is_unicast_link_local(),
                }
        })
        .collect()
}

/// How a client uses the paths to a daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PathChoice {
    /// The path it reached the daemon by, and those the daemon advertises.
    #[default]
    Auto,
    /// Only the path it reached the daemon by.
    Off,
    /// The path it reached the daemon by, and these.
    Given(Vec<PathSpec>),
}

/// One path named by hand: where data connections go, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSpec {
    /// The daemon's address on this path (its port: the daemon's).
    pub remote: IpAddr,
    /// This host's address to connect from, for a multi-homed client.
    pub local: Option<IpAddr>,
    /// The rate reserved for this path (a circuit), bits/s: its stream is
    /// paced at it, its window locked at it × RTT, and the stream-count
    /// controller adds nothing there.
    pub reserved_bps: Option<u64>,
}

/// What became of a path, in a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathState {
    /// It carried streams to the end.
    Active,
    /// Its streams were retired: it did not add to the rate, or it was
    /// not needed.
    Dropped,
    /// It could not be connected, or lost every stream it had.
    Failed,
    /// A path with a reserved rate, which carried its stream to the end.
    Reserved,
}

/// One path of a finished session, for the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathReport {
    pub index: usize,
    /// The address data connections came from, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// The daemon's address on this path.
    pub remote: String,
    /// Streams that went over it.
    pub streams: usize,
    /// Payload bytes they carried.
    pub bytes: u64,
    /// Those bytes over the session's network time, bits/s.
    pub rate_bps: f64,
    pub state: PathState,
    /// The smallest RTT its streams saw, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    /// What held most of its streams back, as `TCP_INFO` told this end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<tern_drs::Limit>,
    /// The rate reserved for it, bits/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_bps: Option<u64>,
    /// Seconds into the transfer the path was found dead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_after_s: Option<f64>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A path besides the control connection's, as a plan takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OtherPath {
    pub remote: SocketAddr,
    pub local: Option<IpAddr>,
    pub reserved_bps: Option<u64>,
}

#[derive(Debug)]
struct Path {
    remote: SocketAddr,
    local: Option<IpAddr>,
    reserved_bps: Option<u64>,
    streams: Vec<u16>,
    /// A connection could not be made: why, and when.
    unreachable: Option<(String, Duration)>,
}

/// Which path each data stream of one session takes.
#[derive(Debug)]
pub(crate) struct PathPlan {
    paths: Mutex<Vec<Path>>,
    /// Streams below this index take the control path.
    first_on_control: u16,
    /// Indices from here on replace streams given up (path 0).
    spares_from: u16,
    started: std::time::Instant,
}

/// Where one data stream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leg {
    /// The way the control connection went.
    Control,
    /// Path `index` of the plan, at this address.
    Path {
        index: usize,
        remote: SocketAddr,
        local: Option<IpAddr>,
    },
}

impl PathPlan {
    /// A plan over the control path (`control`, the daemon's address the
    /// client reached) and `others`; the streams below `first_on_control`
    /// and the spares from `spares_from` on take the control path.
    pub(crate) fn new(
        control: SocketAddr,
        others: Vec<OtherPath>,
        first_on_control: u16,
        spares_from: u16,
    ) -> PathPlan {
        let mut paths = vec![Path {
            remote: control,
            local: None,
            reserved_bps: None,
            streams: Vec::new(),
            unreachable: None,
        }];
        for other in others {
            if let Some(bps) = other
                .reserved_bps
                .filter(|_| other.remote.ip() == control.ip())
            {
                tracing::warn!(
                    "{}: the session started on this address, so its {bps} bit/s reservation \
                     is not applied (name another address of the daemon)",
                    other.remote.ip()
                );
            }
            if paths.iter().all(|p| p.remote.ip() != other.remote.ip()) {
                paths.push(Path {
                    remote: other.remote,
                    local: other.local,
                    reserved_bps: other.reserved_bps,
                    streams: Vec::new(),
                    unreachable: None,
                });
            }
        }
        PathPlan {
            paths: Mutex::new(paths),
            first_on_control,
            spares_from,
            started: std::time::Instant::now(),
        }
    }

    /// The paths besides the control path.
    pub(crate) fn others(&self) -> usize {
        self.paths.lock().expect("paths").len() - 1
    }

    /// The reserved paths: the daemon's address on each, and its rate.
    pub(crate) fn reserved(&self) -> Vec<(IpAddr, u64)> {
        let paths = self.paths.lock().expect("paths");
        paths
            .iter()
            .filter_map(|p| Some((p.remote.ip(), p.reserved_bps?)))
            .collect()
    }

    /// The path for stream `k`: the control path for the first stream and
    /// for replacements; then a reserved path that has no stream yet (one
    /// stream carries a reservation); then the control path up to
    /// `first_on_control`; else the reachable best-effort path with the
    /// fewest streams (other paths first, on a tie).
    pub(crate) fn leg(&self, k: u16) -> Leg {
        let mut paths = self.paths.lock().expect("paths");
        let usable = |p: &Path| p.unreachable.is_none();
        let unserved_reservation = (1..paths.len()).find(|&i| {
            paths[i].reserved_bps.is_some() && usable(&paths[i]) && paths[i].streams.is_empty()
        });
        let index = if k == 0 || k >= self.spares_from {
            0
        } else if let Some(i) = unserved_reservation {
            i
        } else if k < self.first_on_control {
            0
        } else {
            (0..paths.len())
                .filter(|&i| usable(&paths[i]) && paths[i].reserved_bps.is_none())
                .min_by_key(|&i| (paths[i].streams.len(), i == 0, i))
                .unwrap_or(0)
        };
        paths[index].streams.push(k);
        if index == 0 {
            Leg::Control
        } else {
            Leg::Path {
                index,
                remote: paths[index].remote,
                local: paths[index].local,
            }
        }
    }

    /// Path `index` could not take stream `k`: it goes over the control
    /// path instead, and the path gets no more.
    pub(crate) fn unreachable(&self, index: usize, k: u16, why: String) {
        let mut paths = self.paths.lock().expect("paths");
        paths[index].streams.retain(|&s| s != k);
        paths[index]
            .unreachable
            .get_or_insert((why, self.started.elapsed()));
        paths[0].streams.push(k);
    }

    /// Each path's share of a finished session: `per_stream` bytes,
    /// streams `lost`, streams in use at the end (`in_use`, lower indices
    /// first), over `network` time.
    pub(crate) fn report(
        &self,
        per_stream: &[u64],
        lost: &[LostStream],
        in_use: u16,
        network: Duration,
    ) -> Vec<PathReport> {
        let paths = self.paths.lock().expect("paths");
        let secs = network.as_secs_f64();
        paths
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let bytes: u64 = p
                    .streams
                    .iter()
                    .map(|&k| per_stream.get(usize::from(k)).copied().unwrap_or(0))
                    .sum();
                let lost_here: Vec<&LostStream> = lost
                    .iter()
                    .filter(|l| p.streams.contains(&l.index))
                    .collect();
                let all_lost = !p.streams.is_empty() && lost_here.len() == p.streams.len();
                let live = p
                    .streams
                    .iter()
                    .filter(|&&k| k < in_use || k >= self.spares_from)
                    .filter(|&&k| lost.iter().all(|l| l.index != k))
                    .count();
                // A path that lost streams and has none left failed, even
                // when the controller retired some of them first (they had
                // stopped adding to the rate because the path was dying).
                let died = !lost_here.is_empty() && live == 0;
                let (state, failed_after, failure) = match (&p.unreachable, all_lost || died) {
                    (Some((why, at)), _) if p.streams.is_empty() => {
                        (PathState::Failed, Some(*at), Some(why.clone()))
                    }
                    (_, true) => (
                        PathState::Failed,
                        lost_here.iter().map(|l| l.after).max(),
                        Some(if all_lost {
                            "every stream on it stalled or was lost".to_string()
                        } else {
                            format!(
                                "{} of its {} stalled or were lost, the others were retired",
                                lost_here.len(),
                                count_streams(p.streams.len())
                            )
                        }),
                    ),
                    _ if live > 0 && p.reserved_bps.is_some() => (PathState::Reserved, None, None),
                    _ if live > 0 => (PathState::Active, None, None),
                    _ => (PathState::Dropped, None, None),
                };
                PathReport {
                    index,
                    local: p.local.map(|ip| ip.to_string()),
                    remote: p.remote.to_string(),
                    streams: p.streams.len(),
                    bytes,
                    rate_bps: if secs > 0.0 {
                        bytes as f64 * 8.0 / secs
                    } else {
                        0.0
                    },
                    state,
                    rtt_ms: None,
                    limit: None,
                    reserved_bps: p.reserved_bps,
                    failed_after_s: failed_after.map(|d| d.as_secs_f64()),
                    failure,
                }
            })
            .collect()
    }
}

fn count_streams(n: usize) -> String {
    if n == 1 {
        "1 stream".into()
    } else {
        format!("{n} streams")
    }
}

/// Puts what the tuning saw of each path (`tuning`, by the peer's
/// address) into the reports of those paths.
pub(crate) fn add_tuning(reports: &mut [PathReport], tuning: &[tern_drs::PathTuning]) {
    for report in reports {
        let Ok(remote) = report.remote.parse::<SocketAddr>() else {
            continue;
        };
        let ip = remote.ip().to_canonical();
        if let Some(t) = tuning.iter().find(|t| t.remote.to_canonical() == ip) {
            report.rtt_ms = t.min_rtt_ms;
            report.limit = Some(t.limit);
        }
    }
}

/// One TCP connection over a path (MPTCP when `mptcp`): from `local` when
/// given, to `remote`.
pub(crate) async fn connect(
    remote: SocketAddr,
    local: Option<IpAddr>,
    timeout: Duration,
    io_timeout: Duration,
    mptcp: bool,
) -> Result<TcpStream> {
    let fail = |source: std::io::Error| Error::Connect {
        addr: remote.to_string(),
        source,
    };
    let socket = crate::conn::net::tcp_socket(remote, mptcp).map_err(fail)?;
    if let Some(ip) = local {
        socket.bind(SocketAddr::new(ip, 0)).map_err(fail)?;
    }
    let stream = tokio::time::timeout(timeout, socket.connect(remote))
        .await
        .map_err(|_| {
            fail(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out",
            ))
        })?
        .map_err(fail)?;
    crate::conn::net::prepare(&stream, io_timeout);
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn other(remote: &str, reserved_bps: Option<u64>) -> OtherPath {
        OtherPath {
            remote: addr(remote),
            local: None,
            reserved_bps,
        }
    }

    #[test]
    fn a_daemon_names_other_addresses_of_the_clients_family_but_not_to_loopback() {
        let given = Advertise::Addresses(vec![
            addr("10.47.0.2:4747"),
            addr("10.47.1.2:4747"),
            addr("[2001:db8::2]:4747"),
            addr("10.47.1.2:4747"),
        ]);
        let bound = Some(addr("0.0.0.0:4747"));
        assert_eq!(
            given.for_client(bound, addr("10.47.0.2:4747")),
            vec![addr("10.47.1.2:4747")]
        );
        assert_eq!(
            Advertise::Interfaces.for_client(bound, addr("127.0.0.1:4747")),
            Vec::<SocketAddr>::new()
        );
        assert_eq!(
            Advertise::Interfaces.for_client(Some(addr("10.47.0.2:4747")), addr("10.47.0.2:4747")),
            Vec::<SocketAddr>::new(),
            "a daemon bound to one address is reachable at that one only"
        );
        assert!(
            Advertise::Off
                .for_client(bound, addr("10.47.0.2:4747"))
                .is_empty()
        );
    }

    #[test]
    fn added_streams_try_the_other_paths_first_and_replacements_take_the_control_path() {
        let plan = PathPlan::new(
            addr("10.47.0.2:4747"),
            vec![other("10.47.1.2:4747", None), other("10.47.2.2:4747", None)],
            2,
            8,
        );
        assert_eq!(plan.others(), 2);
        assert_eq!(plan.leg(0), Leg::Control);
        assert_eq!(plan.leg(1), Leg::Control);
        let Leg::Path { index: first, .. } = plan.leg(2) else {
            panic!("growth goes to another path")
        };
        let Leg::Path { index: second, .. } = plan.leg(3) else {
            panic!("and to the next")
        };
        assert_eq!((first, second), (1, 2));
        plan.unreachable(2, 3, "timed out".into());
        // Path 1 has one stream, path 0 three: path 1; path 2 is out.
        assert_eq!(
            plan.leg(4),
            Leg::Path {
                index: 1,
                remote: addr("10.47.1.2:4747"),
                local: None
            }
        );
        assert_eq!(plan.leg(8), Leg::Control, "a replacement");
        let reports = plan.report(
            &[10, 10, 5, 7, 5, 0, 0, 0, 3],
            &[LostStream {
                index: 2,
                after: Duration::from_secs(3),
            }],
            8,
            Duration::from_secs(1),
        );
        assert_eq!(reports[0].streams, 4, "0, 1, 3 (moved) and 8");
        assert_eq!(reports[0].bytes, 10 + 10 + 7 + 3);
        assert_eq!(reports[0].state, PathState::Active);
        assert_eq!(reports[1].bytes, 10);
        assert_eq!(reports[1].state, PathState::Active, "stream 4 still runs");
        assert_eq!(reports[2].state, PathState::Failed);
        assert_eq!(reports[2].failure.as_deref(), Some("timed out"));
        assert_eq!(reports[1].rate_bps, 80.0);
    }

    #[test]
    fn a_reserved_path_gets_one_stream_first_and_no_growth() {
        let plan = PathPlan::new(
            addr("10.47.0.2:4747"),
            vec![
                other("10.47.1.2:4747", Some(300_000_000)),
                other("10.47.2.2:4747", None),
            ],
            1,
            8,
        );
        assert_eq!(
            plan.reserved(),
            vec![("10.47.1.2".parse().unwrap(), 300_000_000)]
        );
        assert_eq!(plan.leg(0), Leg::Control);
        assert!(
            matches!(plan.leg(1), Leg::Path { index: 1, .. }),
            "the reservation first"
        );
        for k in 2..6 {
            assert!(
                !matches!(plan.leg(k), Leg::Path { index: 1, .. }),
                "stream {k} went to the reserved path"
            );
        }
        let reports = plan.report(&[1; 6], &[], 6, Duration::from_secs(1));
        assert_eq!(reports[1].state, PathState::Reserved);
        assert_eq!(reports[1].reserved_bps, Some(300_000_000));
        assert_eq!(reports[1].streams, 1);
        assert_eq!(reports[2].state, PathState::Active);
        assert_eq!(reports[2].reserved_bps, None);
    }

    #[test]
    fn a_path_whose_streams_were_lost_or_retired_failed() {
        let plan = PathPlan::new(
            addr("10.47.0.2:4747"),
            vec![other("10.47.1.2:4747", None)],
            1,
            8,
        );
        for k in 0..5 {
            plan.leg(k);
        }
        // Path 1 has streams 1, 2 and 4 (the other path first, then the
        // fewest): 2 was lost, 1 and 4 retired (one stream, 0, in use at
        // the end).
        let lost = [LostStream {
            index: 2,
            after: Duration::from_secs(12),
        }];
        let reports = plan.report(&[5, 1, 1, 5, 1], &lost, 1, Duration::from_secs(1));
        assert_eq!(reports[1].streams, 3, "{reports:?}");
        assert_eq!(reports[1].state, PathState::Failed, "{reports:?}");
        assert_eq!(reports[1].failed_after_s, Some(12.0));
        assert!(
            reports[1]
                .failure
                .as_deref()
                .is_some_and(|f| f.contains("1 of its 3 streams")),
            "{reports:?}"
        );
        // Without a lost stream, the same retirement is a drop.
        let reports = plan.report(&[5, 1, 1, 5, 1], &[], 1, Duration::from_secs(1));
        assert_eq!(reports[1].state, PathState::Dropped);
    }

    #[test]
    fn each_path_report_gets_its_own_rtt_and_limit() {
        let plan = PathPlan::new(
            addr("10.47.0.2:4747"),
            vec![other("10.47.1.2:4747", None), other("10.47.2.2:4747", None)],
            1,
            8,
        );
        for k in 0..3 {
            plan.leg(k);
        }
        let mut reports = plan.report(&[1, 1, 1], &[], 3, Duration::from_secs(1));
        let tuning = [
            tern_drs::PathTuning {
                remote: "10.47.1.2".parse().unwrap(),
                min_rtt_ms: Some(75.2),
                limit: tern_drs::Limit::SendBuffer,
            },
            tern_drs::PathTuning {
                remote: "::ffff:10.47.0.2".parse().unwrap(),
                min_rtt_ms: Some(50.1),
                limit: tern_drs::Limit::Network,
            },
        ];
        add_tuning(&mut reports, &tuning);
        assert_eq!(reports[0].rtt_ms, Some(50.1), "a mapped address matches");
        assert_eq!(reports[0].limit, Some(tern_drs::Limit::Network));
        assert_eq!(reports[1].rtt_ms, Some(75.2));
        assert_eq!(reports[1].limit, Some(tern_drs::Limit::SendBuffer));
        assert_eq!(
            (reports[2].rtt_ms, reports[2].limit),
            (None, None),
            "no streams seen"
        );
    }

    #[test]
    fn a_path_that_lost_every_stream_failed_and_one_whose_streams_were_retired_was_dropped() {
        let plan = PathPlan::new(
            addr("10.47.0.2:4747"),
            vec![other("10.47.1.2:4747", None), other("10.47.2.2:4747", None)],
            1,
            8,
        );
        for k in 0..3 {
            plan.leg(k);
        }
        let lost = [LostStream {
            index: 1,
            after: Duration::from_secs(7),
        }];
        // Streams 0..2 in use at the end: stream 2 (path 2) was retired.
        let reports = plan.report(&[1, 1, 1], &lost, 2, Duration::from_secs(1));
        assert_eq!(reports[1].state, PathState::Failed);
        assert_eq!(reports[1].failed_after_s, Some(7.0));
        assert_eq!(reports[2].state, PathState::Dropped);
    }
}
