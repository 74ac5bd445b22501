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
//!
//! In reverse mode (`-z`) the server dials: a path is then one of this
//! host's addresses that the server dials too, and its streams take the
//! connections that arrived there ([`Callback`]); the server's address on
//! it is learnt from them. A path that went down is back when a connection
//! arrives over it again (the server keeps dialling it).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::net::TcpStream;

use crate::conn::route::Callback;
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
pub fn interface_addresses() -> Vec<IpAddr> {
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
    /// The daemon's address on this path; in reverse mode, unknown (null)
    /// until a connection came over it.
    pub remote: Option<String>,
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
    /// Seconds into the transfer it answered again after it failed, and a
    /// stream rejoined it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejoined_after_s: Option<f64>,
}

/// A path besides the control connection's, as a plan takes it: where
/// the client dials (`remote`, from `local` when given), or in reverse mode
/// where the server's connections arrive (`local`; `remote`, the server's
/// address on the path, is learnt from them unless named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OtherPath {
    pub remote: Option<SocketAddr>,
    pub local: Option<IpAddr>,
    pub reserved_bps: Option<u64>,
}

#[derive(Debug)]
struct Path {
    /// The server's address on the path; unknown in reverse mode until a
    /// connection came over it.
    remote: Option<SocketAddr>,
    local: Option<IpAddr>,
    reserved_bps: Option<u64>,
    streams: Vec<u16>,
    /// A connection could not be made: why, and when.
    unreachable: Option<(String, Duration)>,
    /// Its streams that stalled or were lost.
    lost: Vec<u16>,
    /// Down (unreachable, or every stream on it lost): tried again from
    /// `retry_at` on.
    down: Option<Down>,
    /// It came back after it failed: when (a stream went over it again).
    rejoined: Option<Duration>,
    /// Times a stream rejoined it: each makes the next wait longer.
    rejoins: u32,
    /// When it first went down, and why.
    first_down: Option<(Duration, String)>,
}

/// A path that went down: when to try it again, after how many tries.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Down {
    since: Duration,
    retry_at: Duration,
    tries: u32,
}

/// A path that went down is first tried again this long after, then
/// twice as long after each try that fails, up to [`REJOIN_MAX_WAIT`].
const REJOIN_FIRST_WAIT: Duration = Duration::from_secs(3);
const REJOIN_MAX_WAIT: Duration = Duration::from_secs(60);

/// A path is rejoined this many times at most: each rejoin takes one of
/// the session's spare stream indices, which stalls need too.
const MAX_REJOINS: u32 = 2;

/// The wait before the next try of a path down, after `tries` tries.
fn wait_after(tries: u32) -> Duration {
    REJOIN_FIRST_WAIT
        .saturating_mul(1 << tries.min(8))
        .min(REJOIN_MAX_WAIT)
}

/// How long a try of a path that went down may take to connect.
const REJOIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Path {
    fn new(remote: Option<SocketAddr>, local: Option<IpAddr>, reserved_bps: Option<u64>) -> Path {
        Path {
            remote,
            local,
            reserved_bps,
            streams: Vec::new(),
            unreachable: None,
            lost: Vec::new(),
            down: None,
            rejoined: None,
            rejoins: 0,
            first_down: None,
        }
    }

    /// Where it goes, for the log.
    fn describe(&self) -> String {
        match (self.local, self.remote) {
            (_, Some(remote)) => remote.to_string(),
            (Some(local), None) => format!("to {local}"),
            (None, None) => "?".into(),
        }
    }

    /// Takes new streams: not down.
    fn usable(&self) -> bool {
        self.down.is_none()
    }

    /// It went down at `at` (true when it was not down already).
    fn went_down(&mut self, at: Duration, why: &str) -> bool {
        self.first_down.get_or_insert_with(|| (at, why.to_string()));
        if self.down.is_some() {
            return false;
        }
        // A path that keeps coming back and failing is tried less often.
        let rejoins = self.rejoins;
        self.down = Some(Down {
            since: at,
            retry_at: at + wait_after(rejoins),
            tries: rejoins,
        });
        true
    }
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
    /// A path that answered again, and when: the next spare stream goes
    /// over it.
    rejoin: Mutex<Option<(usize, Duration)>>,
    mptcp: bool,
    /// Reverse mode: where the server's connections arrive. Paths are then
    /// told apart by this host's address on each, and a path is back when
    /// the server's connection arrives over it again.
    callback: Option<Arc<Callback>>,
}

/// Where one data stream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leg {
    /// The way the control connection went.
    Control,
    /// Path `index` of the plan, at this address.
    Path {
        index: usize,
        remote: Option<SocketAddr>,
        local: Option<IpAddr>,
    },
}

impl PathPlan {
    /// A plan over the control path (`control`, the daemon's address the
    /// client reached; in reverse mode, with `callback`, also this host's
    /// address the server reached, `control_local`) and `others`; the
    /// streams below `first_on_control` and the spares from `spares_from`
    /// on take the control path.
    pub(crate) fn new(
        control: SocketAddr,
        others: Vec<OtherPath>,
        first_on_control: u16,
        spares_from: u16,
    ) -> PathPlan {
        PathPlan::over(control, None, None, others, first_on_control, spares_from)
    }

    /// [`PathPlan::new`] in reverse mode: paths are this host's addresses
    /// that `callback` takes the server's connections at.
    pub(crate) fn reverse(
        callback: Arc<Callback>,
        control: SocketAddr,
        control_local: IpAddr,
        others: Vec<OtherPath>,
        first_on_control: u16,
        spares_from: u16,
    ) -> PathPlan {
        let local = Some(control_local.to_canonical());
        let others = others.into_iter().filter(|o| o.local.is_some()).collect();
        PathPlan::over(
            control,
            local,
            Some(callback),
            others,
            first_on_control,
            spares_from,
        )
    }

    fn over(
        control: SocketAddr,
        control_local: Option<IpAddr>,
        callback: Option<Arc<Callback>>,
        others: Vec<OtherPath>,
        first_on_control: u16,
        spares_from: u16,
    ) -> PathPlan {
        let reverse = callback.is_some();
        let control = canonical(control);
        let mut paths = vec![Path::new(Some(control), control_local, None)];
        for other in others {
            let same = |p: &Path| {
                if reverse {
                    p.local == other.local.map(|ip| ip.to_canonical())
                } else {
                    p.remote.map(|r| r.ip()) == other.remote.map(|r| r.ip())
                }
            };
            // Streams find their reservation by the server's address: one
            // the control path shares cannot hold one.
            let shares_control = same(&paths[0])
                || other.remote.map(|r| r.ip().to_canonical()) == Some(control.ip());
            let mut reserved_bps = other.reserved_bps;
            if let Some(bps) = reserved_bps.filter(|_| shares_control) {
                tracing::warn!(
                    "{}: the session started on this address, so its {bps} bit/s reservation \
                     is not applied (name another address)",
                    other
                        .remote
                        .map_or_else(String::new, |r| r.ip().to_string())
                );
                reserved_bps = None;
            }
            if !paths.iter().any(same) {
                let local = other.local.map(|ip| ip.to_canonical());
                paths.push(Path::new(other.remote, local, reserved_bps));
            }
        }
        PathPlan {
            paths: Mutex::new(paths),
            first_on_control,
            spares_from,
            started: std::time::Instant::now(),
            rejoin: Mutex::new(None),
            mptcp: false,
            callback,
        }
    }

    /// Tries of paths that went down connect with MPTCP.
    pub(crate) fn with_mptcp(mut self, mptcp: bool) -> PathPlan {
        self.mptcp = mptcp;
        self
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
            .filter_map(|p| Some((p.remote?.ip(), p.reserved_bps?)))
            .collect()
    }

    /// The path for stream `k`: the control path for the first stream and
    /// for replacements; then a reserved path that has no stream yet (one
    /// stream carries a reservation); then the control path up to
    /// `first_on_control`; else the reachable best-effort path with the
    /// fewest streams (other paths first, on a tie).
    pub(crate) fn leg(&self, k: u16) -> Leg {
        let mut paths = self.paths.lock().expect("paths");
        let usable = |p: &Path| p.usable();
        let live = |p: &Path| p.streams.iter().any(|k| !p.lost.contains(k));
        let unserved_reservation = (1..paths.len())
            .find(|&i| paths[i].reserved_bps.is_some() && usable(&paths[i]) && !live(&paths[i]));
        let rejoining = (k >= self.spares_from)
            .then(|| self.rejoin.lock().expect("rejoin").take())
            .flatten();
        let index = if let Some((i, answered)) = rejoining {
            let path = &mut paths[i];
            path.down = None;
            path.rejoined = Some(answered);
            path.rejoins += 1;
            i
        } else if k == 0 || k >= self.spares_from {
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
    /// path instead, and the path gets no more until a try finds it back.
    pub(crate) fn unreachable(&self, index: usize, k: u16, why: String) {
        let at = self.started.elapsed();
        let mut paths = self.paths.lock().expect("paths");
        let path = &mut paths[index];
        path.streams.retain(|&s| s != k);
        if path.went_down(at, &why) {
            self.forget_arrivals(path);
        }
        path.unreachable.get_or_insert((why, at));
        paths[0].streams.push(k);
    }

    /// Stream `k` stalled or was lost; a path other than the control path
    /// whose every stream was lost is down.
    fn stream_lost_at(&self, k: u16, at: Duration) {
        let mut paths = self.paths.lock().expect("paths");
        let Some(index) = paths.iter().position(|p| p.streams.contains(&k)) else {
            return;
        };
        let path = &mut paths[index];
        if !path.lost.contains(&k) {
            path.lost.push(k);
        }
        if index > 0
            && path.streams.iter().all(|s| path.lost.contains(s))
            && path.went_down(at, "every stream on it stalled or was lost")
        {
            self.forget_arrivals(path);
        }
    }

    /// Reverse mode: the server's connections that came over `path` before
    /// it went down may be dead with it; only one arriving after says it
    /// is back.
    fn forget_arrivals(&self, path: &Path) {
        if let (Some(callback), Some(local)) = (&self.callback, path.local) {
            callback.discard_at(local);
        }
    }

    /// Reverse mode: a connection of path `index` came from the server's
    /// `peer`, its address on that path.
    pub(crate) fn arrived(&self, index: usize, peer: SocketAddr) {
        let mut paths = self.paths.lock().expect("paths");
        let peer = canonical(peer);
        if let Some(path) = paths.get_mut(index) {
            // A path named by hand knows the server's address, not its port.
            if path.remote.is_none_or(|r| r.ip() == peer.ip()) {
                path.remote = Some(peer);
            }
        }
    }

    /// The paths down and due a try at `at`. None while a path that
    /// answered waits for its stream.
    fn due_at(&self, at: Duration) -> Vec<Due> {
        if self.rejoin.lock().expect("rejoin").is_some() {
            return Vec::new();
        }
        let paths = self.paths.lock().expect("paths");
        paths
            .iter()
            .enumerate()
            .filter(|(_, p)| p.rejoins < MAX_REJOINS)
            .filter(|(_, p)| p.down.is_some_and(|d| d.retry_at <= at))
            .filter_map(|(index, p)| {
                Some(Due {
                    index,
                    remote: p.remote,
                    local: p.local,
                    since: p.down?.since,
                })
            })
            .collect()
    }

    /// A try of path `index` at `at` connected (`ok`) or did not: the next
    /// spare stream goes over it (it is back once one does); or it is
    /// tried again later.
    fn tried_at(&self, index: usize, ok: bool, at: Duration) {
        let mut paths = self.paths.lock().expect("paths");
        let path = &mut paths[index];
        let Some(down) = path.down.as_mut() else {
            return;
        };
        if ok {
            tracing::info!(
                "path {index} ({}) answers again: a stream rejoins it",
                path.describe()
            );
            *self.rejoin.lock().expect("rejoin") = Some((index, at));
        } else {
            down.tries += 1;
            down.retry_at = at + wait_after(down.tries);
        }
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
                // A path that came back is judged by how it ended; when and
                // why it first failed are kept.
                let (failed_after, failure) = match (&p.first_down, p.rejoined) {
                    (Some((at, why)), Some(_)) if failure.is_none() => {
                        (Some(*at), Some(why.clone()))
                    }
                    _ => (failed_after, failure),
                };
                PathReport {
                    index,
                    local: p.local.map(|ip| ip.to_string()),
                    // A path named by hand in reverse mode knows the
                    // server's address before (or without) its port.
                    remote: p.remote.map(|r| match r.port() {
                        0 => r.ip().to_string(),
                        _ => r.to_string(),
                    }),
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
                    rejoined_after_s: p.rejoined.map(|d| d.as_secs_f64()),
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

impl PathReport {
    /// The server's address on the path, when known.
    pub fn remote_ip(&self) -> Option<IpAddr> {
        let remote = self.remote.as_deref()?;
        let ip = match remote.parse::<SocketAddr>() {
            Ok(addr) => addr.ip(),
            Err(_) => remote.parse::<IpAddr>().ok()?,
        };
        Some(ip.to_canonical())
    }
}

/// Puts what the tuning saw of each path (`tuning`, by the peer's
/// address) into the reports of those paths.
pub(crate) fn add_tuning(reports: &mut [PathReport], tuning: &[tern_drs::PathTuning]) {
    for report in reports {
        let Some(ip) = report.remote_ip() else {
            continue;
        };
        if let Some(t) = tuning.iter().find(|t| t.remote.to_canonical() == ip) {
            report.rtt_ms = t.min_rtt_ms;
            report.limit = Some(t.limit);
        }
    }
}

impl crate::data::tuning::PathWatch for PathPlan {
    fn lost(&self, k: u16) {
        self.stream_lost_at(k, self.started.elapsed());
    }

    fn retry(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            for due in self.due_at(self.started.elapsed()) {
                let answered = self.try_path(&due).await;
                self.tried_at(due.index, answered, self.started.elapsed());
                if answered {
                    // One path at a time: the next spare goes to it.
                    return true;
                }
            }
            false
        })
    }
}

/// `addr` with an IPv4-mapped address as plain IPv4 (a dual-stack
/// listener's view of an IPv4 peer).
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// A path down, due a try.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Due {
    index: usize,
    remote: Option<SocketAddr>,
    local: Option<IpAddr>,
    /// When it went down, from the plan's start.
    since: Duration,
}

impl PathPlan {
    /// Whether path `due` answers: a connection over it can be made, or in
    /// reverse mode the server's dialling got through it since it went down.
    async fn try_path(&self, due: &Due) -> bool {
        if let Some(callback) = &self.callback {
            let Some(local) = due.local else {
                return false;
            };
            let since = self.started + due.since;
            return callback
                .arrived_at(local, since, REJOIN_CONNECT_TIMEOUT)
                .await;
        }
        let Some(remote) = due.remote else {
            return false;
        };
        let tried = connect(
            remote,
            due.local,
            REJOIN_CONNECT_TIMEOUT,
            REJOIN_CONNECT_TIMEOUT,
            self.mptcp,
        )
        .await;
        if let Err(e) = &tried {
            tracing::debug!("path {} ({remote}) still down: {e}", due.index);
        }
        tried.is_ok()
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
mod tests;
