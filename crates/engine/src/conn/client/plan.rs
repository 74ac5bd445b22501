//! What a client asks of a session and how it lays the session out: the
//! streams to start with, the request, how blocks are checked, which path
//! each data stream takes, and the data phase's parameters.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tern_proto::{Features, Protect, SessionMode};
use tern_session::open::{ClientAgreed, ClientRequest};

use super::{ClientOptions, bind_token};
use crate::conn::paths::{OtherPath, PathChoice, PathPlan};
use crate::conn::route::{Callback, Route};
use crate::data::transfer::TransferParams;
use crate::integrity::BlockCheck;
use crate::{Error, Result};

/// How many streams to ask for at first: from the RTT the TLS and hello
/// round trips gave the kernel (with `-P auto`), and at least one beside
/// each reserved path (a reservation holds from the start, not from when
/// the controller would add its stream).
pub(super) fn first_streams(opts: &ClientOptions, control_fd: std::os::fd::RawFd) -> u16 {
    let streams = if opts.tuning.streams_from_rtt {
        tern_drs::session::start_streams(control_rtt(control_fd), opts.max_streams)
            .max(opts.streams)
    } else {
        opts.streams
    };
    let reservations = reservations(opts);
    streams
        .max(
            u16::try_from(reservations)
                .unwrap_or(u16::MAX)
                .saturating_add(1),
        )
        .min(opts.max_streams.max(opts.streams))
}

/// The control connection's round-trip time so far (zero if unknown).
fn control_rtt(control_fd: std::os::fd::RawFd) -> Duration {
    tern_drs::TcpInfo::read(control_fd)
        .map(|i| i.path_rtt())
        .unwrap_or_default()
}

fn reservations(opts: &ClientOptions) -> usize {
    match &opts.paths {
        PathChoice::Given(specs) => specs.iter().filter(|s| s.reserved_bps.is_some()).count(),
        _ => 0,
    }
}

/// Paths this long and longer get their first data connections dialled
/// while the session opens: the daemon has accepted the session a round
/// trip before they reach it, so it counts them as that session's (on a
/// short path they could arrive first and count against the handshake
/// limits of their address), and a round trip saved is worth having.
const EARLY_DIAL_RTT: Duration = Duration::from_millis(20);

/// Whether a session whose opening went with the hello dials its first
/// data connections at once: when they all take the control connection's
/// path (no reservations, dialled rather than dialled back) and that path
/// is long.
pub(super) fn dials_early(opts: &ClientOptions, control_fd: std::os::fd::RawFd) -> bool {
    matches!(opts.reach, super::Reach::Dial)
        && reservations(opts) == 0
        && control_rtt(control_fd) >= EARLY_DIAL_RTT
}

/// How each block is checked, from `--protect` and what was agreed.
pub(super) fn block_check_of(
    opts: &ClientOptions,
    material: Option<&[u8; 32]>,
    agreed: &ClientAgreed,
) -> Result<BlockCheck> {
    Ok(match opts.protect {
        Protect::Safe => match material {
            Some(material) => BlockCheck::KeyedBlake3(bind_token(material, &agreed.token)),
            None => return Err(Error::Tls("cannot export keying material".into())),
        },
        Protect::Private if agreed.features.contains(Features::AEAD_CHECKS) => BlockCheck::Aead,
        Protect::Clear | Protect::Private => BlockCheck::Xxh3,
    })
}

/// The data phase's parameters: what was agreed, the client's tuning, and
/// the stream limit over every path.
pub(super) fn params_of(
    opts: &ClientOptions,
    agreed: &ClientAgreed,
    plan: Option<&Arc<PathPlan>>,
    block_check: BlockCheck,
) -> TransferParams {
    let mut params = TransferParams::new(agreed.streams, agreed.block_size, opts.checksum);
    params.max_streams = agreed.max_streams;
    params.tuning = opts.tuning.clone();
    params.tuning.other_paths = plan.map_or(0, |p| p.others() as u16);
    params.tuning.reserved = plan.map_or_else(Vec::new, |p| p.reserved());
    // Reserved paths hold one stream each and take no more.
    let best_effort_others = params
        .tuning
        .other_paths
        .saturating_sub(params.tuning.reserved.len() as u16);
    params.tuning.stream_limit = Some(
        opts.max_streams
            .saturating_mul(1 + best_effort_others)
            .saturating_add(params.tuning.reserved.len() as u16),
    );
    params.apply_agreed(&agreed.options);
    params.limit_files_in_flight(agreed.features);
    params.block_check = block_check;
    params.resume = agreed.features.contains(Features::RESUME);
    params.entries = agreed.features.contains(Features::ENTRIES);
    params.tell_path_rate = agreed.features.contains(Features::PATH_RATE);
    params.pace = opts.rate_limit.map(|bps| {
        Arc::new(crate::data::pace::Pace::new(
            bps,
            u64::from(agreed.block_size),
        ))
    });
    params
}

/// Which path each data stream takes, when there is more than the one
/// the control connection took (`ends`: its address here, the daemon's).
/// In reverse mode the paths are this host's addresses the server dials.
pub(super) fn path_plan(
    opts: &ClientOptions,
    route: &Route,
    ends: (Option<SocketAddr>, Option<SocketAddr>),
    agreed: &ClientAgreed,
) -> Option<Arc<PathPlan>> {
    let (Some(local), Some(peer)) = ends else {
        return None;
    };
    let callback = route.callback();
    let others: Vec<OtherPath> = match (&opts.paths, callback) {
        (PathChoice::Off, _) => return None,
        (PathChoice::Auto, None) => agreed
            .paths
            .iter()
            .map(|&remote| OtherPath {
                remote: Some(remote),
                local: None,
                reserved_bps: None,
            })
            .collect(),
        (PathChoice::Auto, Some(callback)) => callback
            .paths()
            .iter()
            .filter(|ip| ip.is_ipv4() == local.ip().to_canonical().is_ipv4())
            .map(|&ip| OtherPath {
                remote: None,
                local: Some(ip),
                reserved_bps: None,
            })
            .collect(),
        (PathChoice::Given(specs), _) => specs
            .iter()
            .map(|s| OtherPath {
                // In reverse mode the server's port is whatever it dials from.
                remote: Some(SocketAddr::new(
                    s.remote,
                    if callback.is_some() { 0 } else { peer.port() },
                )),
                local: s.local,
                reserved_bps: s.reserved_bps,
            })
            .collect(),
    };
    if let Some(callback) = callback {
        admit_the_servers_addresses(callback, &agreed.paths, &others);
    }
    let reserving = others.iter().any(|o| o.reserved_bps.is_some());
    let spares_from = agreed.max_streams - agreed.options.spare_streams();
    // Streams the controller adds try the other paths; a fixed count is
    // spread over them from the start, and so is a start that leaves the
    // controller no room to add (a copy starting where the last ended).
    let first_on_control = if opts.tuning.auto_streams && !reserving {
        agreed.streams.min((spares_from / 2).max(1))
    } else {
        1
    };
    let plan = match callback {
        Some(callback) => PathPlan::reverse(
            callback.clone(),
            peer,
            local.ip(),
            others,
            first_on_control,
            spares_from,
        ),
        None => PathPlan::new(peer, others, first_on_control, spares_from),
    };
    let plan = plan.with_mptcp(opts.mptcp);
    (plan.others() > 0).then(|| Arc::new(plan))
}

/// Reverse mode: the server may dial this host's other paths from the
/// addresses it named (not one of this host's: anyone here could connect
/// from it) and from those named by hand.
fn admit_the_servers_addresses(callback: &Callback, named: &[SocketAddr], others: &[OtherPath]) {
    let own = crate::conn::paths::interface_addresses();
    let named = named
        .iter()
        .map(|a| a.ip().to_canonical())
        .filter(|ip| !ip.is_loopback() && !own.contains(ip));
    let by_hand = others.iter().filter_map(|o| o.remote.map(|r| r.ip()));
    callback.allow(named.chain(by_hand));
}

/// Paths a client asks stream room for, before it knows how many it has.
const PATHS_ROOM: u16 = 4;

/// What the client asks of a session, from its options.
pub(super) fn request_of(opts: &ClientOptions, mode: SessionMode, streams: u16) -> ClientRequest {
    // Room for `max_streams` on each of a few paths: which paths there are
    // is known only once the session is open (the controller is held to
    // `max_streams` per path found).
    // Only a client that sends runs the controller: on a pull the daemon
    // would grow to the whole room, blind to the paths.
    let client_sends = match &mode {
        SessionMode::Push { .. } => true,
        SessionMode::Pull { .. } => false,
        SessionMode::Perf { server_sends, .. } => !server_sends,
    };
    let may_find_paths = opts.tuning.auto_streams && client_sends && opts.paths != PathChoice::Off;
    let max_streams = if may_find_paths {
        opts.max_streams
            .saturating_mul(PATHS_ROOM)
            .min(tern_session::open::MAX_STREAMS / 2)
            .max(opts.max_streams)
    } else {
        opts.max_streams
    };
    ClientRequest {
        mode,
        streams,
        max_streams,
        block_size: opts.block_size,
        checksum: opts.checksum,
        protect: opts.protect,
        window: crate::data::tuning::wire_window(opts.tuning.window),
        congestion: opts.tuning.congestion.clone(),
        choices: opts.choices,
        once_token: opts.once_token,
        peer: opts.peer_pass.clone(),
    }
}
