//! Advice for one path from its measurements. Pure.
//!
//! The TCP window a path needs is its bandwidth-delay product, RTT ×
//! bottleneck capacity (the formula the Enable service used). A socket
//! cannot hold more than the host lets it, so when the product is larger
//! than one socket's largest window the advice splits it over parallel
//! streams and names the sysctls that would let one stream carry it.
//!
//! What counts as the bottleneck, in order of preference:
//! 1. capacity measurements (packet trains between tern ends);
//! 2. achieved rates of transfers the network itself limited (their
//!    `limit` detail is `network`): the path gave what it had;
//! 3. otherwise the best achieved rate, marked as a lower bound: those
//!    transfers were held back by a buffer, the disk or the far end.
//!
//! Every number says how many samples it rests on, how old the newest is
//! and whether it came from real transfers (passive) or probes (active).
//!
//! The formula predicts; a window × streams sweep ([`crate::EngineSweep`])
//! measures. When the newest sweep is recent and its best cell beat what
//! the formula expects, the stream count (and a locked window) follow
//! that cell, and [`Advice::sweep`] says so.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use tern_drs::HostCaps;

use crate::Error;
use crate::estimate::{Estimate, EstimatorConfig, estimate};
use crate::model::{Kind, MAX_BDP_BYTES, MAX_RATE_BPS, Measurement, Origin, check_positive, shown};

/// Where the numbers behind a piece of advice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Real transfers only.
    Passive,
    /// Probes only.
    Active,
    /// Both.
    Mixed,
}

impl Source {
    fn of(measurements: &[&Measurement]) -> Source {
        let passive = measurements.iter().any(|m| m.origin == Origin::Passive);
        let active = measurements.iter().any(|m| m.origin == Origin::Active);
        match (passive, active) {
            (true, true) => Source::Mixed,
            (true, false) => Source::Passive,
            _ => Source::Active,
        }
    }

    fn merge(self, other: Source) -> Source {
        if self == other { self } else { Source::Mixed }
    }
}

/// How a capacity figure was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityBasis {
    /// Capacity measurements.
    Capacity,
    /// Rates of transfers the network limited.
    Throughput,
    /// The best rate of transfers something else held back: a lower bound.
    ThroughputLowerBound,
}

/// One number advice rests on, and its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Basis {
    /// The value used.
    pub value: f64,
    /// Its unit.
    pub unit: String,
    /// The kind of measurement it was taken from.
    pub kind: Kind,
    /// `trimmed_mean`, or `max` for a lower bound.
    pub method: String,
    /// Measurements it rests on.
    pub samples: usize,
    /// Of those, dropped by the trimmed mean.
    pub trimmed: usize,
    /// Standard deviation of the samples.
    pub stddev: f64,
    /// EWMA since the last detected change, for display.
    pub ewma: f64,
    /// Older values were discarded because the path changed.
    pub change_detected: bool,
    /// When the newest sample was taken, ms since the epoch.
    pub newest_at_ms: i64,
    /// How old the newest sample is, seconds.
    pub age_s: f64,
    /// Passive, active or mixed.
    pub source: Source,
}

/// What the host's kernel lets one socket have, and how to lift it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostLimit {
    /// Largest TCP window one socket can get without privileges: half the
    /// autotuning maximum (`tcp_rmem`/`tcp_wmem`, which count the
    /// kernel's bookkeeping) or `rmem_max`/`wmem_max` for an explicit
    /// buffer, whichever is larger. 0 when the caps could not be read.
    pub socket_window_max_bytes: u64,
    /// The bandwidth-delay product does not fit one socket.
    pub limited: bool,
    /// `net.ipv4.tcp_rmem` maximum, bytes.
    pub tcp_rmem_max: u64,
    /// `net.ipv4.tcp_wmem` maximum, bytes.
    pub tcp_wmem_max: u64,
    /// `net.core.rmem_max`, bytes.
    pub rmem_max: u64,
    /// `net.core.wmem_max`, bytes.
    pub wmem_max: u64,
    /// Commands that would let one stream hold the whole product.
    pub sysctls: Vec<String>,
}

/// Tuning advice for one path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// The host asked about.
    pub host: String,
    /// TCP buffer per stream, bytes: what to give `setsockopt`
    /// (`SO_SNDBUF`/`SO_RCVBUF`), iperf3 `-w` or globus-url-copy
    /// `-tcp-bs`. With one stream it is the bandwidth-delay product.
    pub buffer_bytes: u64,
    /// Parallel streams.
    pub streams: u16,
    /// The value for `tern --window`: twice `buffer_bytes`, because tern
    /// (like the kernel's own accounting) counts buffer bookkeeping in it.
    pub tern_window_bytes: u64,
    /// RTT × capacity, bytes: the window the whole path needs.
    pub bdp_bytes: u64,
    /// What a transfer with this advice should reach, bits/s.
    pub expected_throughput_bps: f64,
    /// The RTT used, ms.
    pub rtt_ms: f64,
    /// The bottleneck capacity used, bits/s.
    pub capacity_bps: f64,
    /// How the capacity was obtained.
    pub capacity_basis: CapacityBasis,
    /// Measurements behind the advice (RTT and capacity together).
    pub samples: usize,
    /// Age of the staler of the two quantities' newest samples, seconds.
    pub age_s: f64,
    /// Passive, active or mixed.
    pub source: Source,
    /// The RTT and its evidence.
    pub rtt: Basis,
    /// The capacity and its evidence.
    pub capacity: Basis,
    /// The host's socket-buffer caps and how they shaped the advice.
    pub host_limit: HostLimit,
    /// The newest recent window × streams sweep, and whether the advice
    /// followed its best cell.
    #[serde(default)]
    pub sweep: Option<SweepBasis>,
    /// The advice is another target's on the same subnet or in the same
    /// bottleneck group (no own numbers).
    pub aggregated_from: Option<String>,
    /// What the two share: `subnet 192.0.2.0/24` or `bottleneck group NAME`.
    #[serde(default)]
    pub aggregated_by: Option<String>,
    /// The host's other addresses that multi-path transfers also used,
    /// with what is known of each path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<OtherPath>,
    /// Remarks for people.
    pub notes: Vec<String>,
}

/// Another address of the host a multi-path transfer went over, and its
/// own advice's figures when it has measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherPath {
    /// The host's address on that path.
    pub host: String,
    /// The path's RTT, ms.
    #[serde(default)]
    pub rtt_ms: Option<f64>,
    /// Its bottleneck capacity, bits/s.
    #[serde(default)]
    pub capacity_bps: Option<f64>,
    /// What a transfer over it alone should reach, bits/s.
    #[serde(default)]
    pub expected_throughput_bps: Option<f64>,
}

/// The oldest a figure behind advice may be, seconds: a century.
const MAX_AGE_S: f64 = 100.0 * 366.0 * 86_400.0;

impl Advice {
    /// Checks that every figure is one a network can have (the bounds of
    /// [`crate::model`]), as a client should before acting on or
    /// printing an answer: an advisor of another version, or something
    /// else on its port, may send anything. The error names the field.
    pub fn check(&self) -> Result<(), Error> {
        Kind::Rtt.check("rtt_ms", self.rtt_ms)?;
        Kind::Capacity.check("capacity_bps", self.capacity_bps)?;
        let rate = |field: &str, v: f64| check_positive(field, v, MAX_RATE_BPS, "10 Tbit/s");
        rate("expected_throughput_bps", self.expected_throughput_bps)?;
        Kind::Rtt.check("rtt.value", self.rtt.value)?;
        Kind::Rtt.check("rtt.ewma", self.rtt.ewma)?;
        let capacity_kind = self.capacity.kind;
        capacity_kind.check("capacity.value", self.capacity.value)?;
        capacity_kind.check("capacity.ewma", self.capacity.ewma)?;
        if let Some(sw) = &self.sweep {
            rate("sweep.best_bps", sw.best_bps)?;
            rate("sweep.formula_bps", sw.formula_bps)?;
        }
        for (field, v, max) in [
            ("bdp_bytes", self.bdp_bytes, MAX_BDP_BYTES),
            ("buffer_bytes", self.buffer_bytes, MAX_BDP_BYTES),
            (
                "tern_window_bytes",
                self.tern_window_bytes,
                2 * MAX_BDP_BYTES,
            ),
        ] {
            if !(1..=max).contains(&v) {
                return Err(Error::BadRequest(format!(
                    "{field} must be 1 to {max} (RTT 10 min x 10 Tbit/s), not {v}"
                )));
            }
        }
        if self.streams == 0 {
            return Err(Error::BadRequest(
                "streams must be at least 1, not 0".into(),
            ));
        }
        let sweep_age = self.sweep.as_ref().map_or(0.0, |sw| sw.age_s);
        for (field, v) in [
            ("age_s", self.age_s),
            ("rtt.age_s", self.rtt.age_s),
            ("capacity.age_s", self.capacity.age_s),
            ("sweep.age_s", sweep_age),
        ] {
            if !(v.is_finite() && (0.0..=MAX_AGE_S).contains(&v)) {
                return Err(Error::BadRequest(format!(
                    "{field} must be at least 0 and at most {} (a century), not {}",
                    shown(MAX_AGE_S),
                    shown(v)
                )));
            }
        }
        Ok(())
    }
}

/// The window × streams sweep behind a piece of advice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepBasis {
    /// When the sweep ran, ms since the epoch.
    pub at_ms: i64,
    /// How old it is, seconds.
    pub age_s: f64,
    /// Cells that produced a rate.
    pub cells: usize,
    /// The best cell's rate, bits/s.
    pub best_bps: f64,
    /// The best cell's streams.
    pub best_streams: u16,
    /// The best cell's window: `auto`, `kernel` or bytes (`tern --window`).
    pub best_window: String,
    /// What the formula expected before the sweep was considered, bits/s.
    pub formula_bps: f64,
    /// The advice's streams (and a locked window) are the best cell's.
    pub followed: bool,
}

/// Settings of advice.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdviceConfig {
    /// The estimators.
    pub estimator: EstimatorConfig,
    /// Never advise more streams than this.
    pub max_streams: u16,
    /// A sweep older than this, seconds, is neither shown nor followed:
    /// the path may have changed since.
    pub sweep_max_age_s: f64,
}

impl Default for AdviceConfig {
    fn default() -> AdviceConfig {
        AdviceConfig {
            estimator: EstimatorConfig::default(),
            max_streams: 8,
            // Four of the default 6 h probe intervals.
            sweep_max_age_s: 86_400.0,
        }
    }
}

/// A sweep's best cell must beat the formula's expected rate by this
/// factor to be followed: cells and estimates each carry a few percent of
/// noise, and a tie is no reason to leave the formula.
const SWEEP_MARGIN: f64 = 1.05;

/// The best cell of the newest sweep among `throughput` (the samples one
/// sweep stored share their time), with the number of its cells.
fn newest_sweep(throughput: &[Measurement]) -> Option<(&Measurement, usize)> {
    let is_cell = |m: &&Measurement| m.details.get("sweep").is_some_and(|d| d.is_object());
    let at = throughput.iter().filter(is_cell).map(|m| m.at_ms).max()?;
    let cells: Vec<&Measurement> = throughput
        .iter()
        .filter(is_cell)
        .filter(|m| m.at_ms == at)
        .collect();
    let marked = cells
        .iter()
        .find(|m| m.details["sweep"]["best"].as_bool() == Some(true));
    let best = marked
        .or_else(|| cells.iter().max_by(|a, b| a.value.total_cmp(&b.value)))
        .copied()?;
    Some((best, cells.len()))
}

/// The measurements of one path, each series oldest first.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// RTT measurements.
    pub rtt: &'a [Measurement],
    /// Capacity measurements.
    pub capacity: &'a [Measurement],
    /// Throughput measurements.
    pub throughput: &'a [Measurement],
}

fn basis(series: &[&Measurement], est: &Estimate, kind: Kind, method: &str, now_ms: i64) -> Basis {
    let used = &series[series.len() - est.samples..];
    let newest_at_ms = used.iter().map(|m| m.at_ms).max().unwrap_or(now_ms);
    Basis {
        value: est.value,
        unit: kind.unit().into(),
        kind,
        method: method.into(),
        samples: est.samples,
        trimmed: est.trimmed,
        stddev: est.stddev,
        ewma: est.ewma,
        change_detected: est.change_detected,
        newest_at_ms,
        age_s: (now_ms - newest_at_ms).max(0) as f64 / 1e3,
        source: Source::of(used),
    }
}

fn estimated(
    series: &[&Measurement],
    kind: Kind,
    cfg: &EstimatorConfig,
    now_ms: i64,
) -> Option<Basis> {
    let values: Vec<f64> = series.iter().map(|m| m.value).collect();
    let est = estimate(&values, cfg)?;
    Some(basis(series, &est, kind, "trimmed_mean", now_ms))
}

fn all(s: &[Measurement]) -> Vec<&Measurement> {
    s.iter().collect()
}

fn limited_by_network(m: &Measurement) -> bool {
    m.details.get("limit").and_then(|l| l.as_str()) == Some("network")
}

/// The bottleneck capacity, by the preference in the module docs.
fn capacity(
    ev: &Evidence<'_>,
    cfg: &EstimatorConfig,
    now_ms: i64,
) -> Option<(Basis, CapacityBasis)> {
    if let Some(b) = estimated(&all(ev.capacity), Kind::Capacity, cfg, now_ms) {
        return Some((b, CapacityBasis::Capacity));
    }
    let network: Vec<&Measurement> = ev
        .throughput
        .iter()
        .filter(|m| limited_by_network(m))
        .collect();
    if let Some(b) = estimated(&network, Kind::Throughput, cfg, now_ms) {
        return Some((b, CapacityBasis::Throughput));
    }
    let recent = all(ev.throughput);
    let recent = &recent[recent.len().saturating_sub(cfg.window.max(1))..];
    let best = recent.iter().map(|m| m.value).fold(f64::NAN, f64::max);
    if best.is_nan() {
        return None;
    }
    let values: Vec<f64> = recent.iter().map(|m| m.value).collect();
    let mut est = estimate(&values, &EstimatorConfig { trim: 0.0, ..*cfg })?;
    est.samples = recent.len();
    est.trimmed = 0;
    est.value = best;
    Some((
        basis(recent, &est, Kind::Throughput, "max", now_ms),
        CapacityBasis::ThroughputLowerBound,
    ))
}

/// The largest window one socket gets without privileges; `None` when
/// the caps are unknown.
pub fn socket_window_max(caps: &HostCaps) -> Option<u64> {
    let autotuned = caps.tcp_rmem[2].min(caps.tcp_wmem[2]) / 2;
    let max = autotuned.max(explicit_window_max(caps));
    (max > 0).then_some(max)
}

/// The largest window an explicit buffer (`SO_SNDBUF`/`SO_RCVBUF`, no
/// privilege) gives: the kernel holds the request to `wmem_max`/`rmem_max`
/// and doubles it for bookkeeping, half of which is window.
fn explicit_window_max(caps: &HostCaps) -> u64 {
    caps.rmem_max.min(caps.wmem_max)
}

/// The largest fixed `--window` (`tern_window_bytes`, which counts the
/// kernel's bookkeeping, so twice the explicit buffer's window) a process
/// without privilege can set; `None` when the caps are unknown. A fixed
/// window turns autotuning off, so its maximum does not count here.
pub fn fixed_window_max(caps: &HostCaps) -> Option<u64> {
    let max = 2 * explicit_window_max(caps);
    (max > 0).then_some(max)
}

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to).saturating_mul(to)
}

/// The sysctls that let one socket hold a window of `bdp` bytes.
fn sysctls_for(bdp: u64, caps: &HostCaps) -> Vec<String> {
    let explicit = bdp.checked_next_power_of_two().unwrap_or(u64::MAX);
    let autotuned = bdp
        .saturating_mul(2)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    let mut lines = Vec::new();
    for (name, triple) in [("tcp_rmem", caps.tcp_rmem), ("tcp_wmem", caps.tcp_wmem)] {
        if triple[2] < autotuned {
            lines.push(format!(
                "sysctl -w net.ipv4.{name}=\"{} {} {autotuned}\"",
                triple[0], triple[1]
            ));
        }
    }
    for (name, value) in [("rmem_max", caps.rmem_max), ("wmem_max", caps.wmem_max)] {
        if value < explicit {
            lines.push(format!("sysctl -w net.core.{name}={explicit}"));
        }
    }
    lines
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Time slow start may take to reach the path's rate, seconds.
const RAMP_BUDGET_S: f64 = 0.5;

/// Initial window of a flow (10 segments of a 1500-byte-MTU path; larger
/// MTUs only ramp faster), bytes.
const INITIAL_WINDOW: u64 = 10 * 1448;

/// Streams whose slow starts, doubling once per RTT from the initial
/// window, together reach `bdp` within [`RAMP_BUDGET_S`]: short paths need
/// one, long fat ones several (a 500 Mbit/s x 180 ms path eight), which is
/// what a wizard's `-P 8` on such paths buys in the first seconds.
fn ramp_streams(bdp: u64, rtt_s: f64) -> u64 {
    if rtt_s.is_nan() || rtt_s <= 0.0 {
        return 1;
    }
    let doublings = (RAMP_BUDGET_S / rtt_s).floor().clamp(0.0, 40.0) as u32;
    let reach = INITIAL_WINDOW.saturating_mul(1u64 << doublings);
    bdp.div_ceil(reach.max(1)).max(1)
}

/// The measurements of `series` whose values a network can have
/// ([`Kind::admits`]): the store may hold older ones recorded before the
/// bounds were checked, and one absurd value would make every figure
/// derived from it absurd.
fn admitted(series: &[Measurement]) -> Cow<'_, [Measurement]> {
    if series.iter().all(|m| m.kind.admits(m.value)) {
        Cow::Borrowed(series)
    } else {
        Cow::Owned(
            series
                .iter()
                .filter(|m| m.kind.admits(m.value))
                .cloned()
                .collect(),
        )
    }
}

/// Advice for `host` from its evidence and this host's caps.
pub fn advise(
    host: &str,
    ev: &Evidence<'_>,
    caps: &HostCaps,
    cfg: &AdviceConfig,
    now_ms: i64,
) -> Result<Advice, Error> {
    let (rtts, capacities, throughputs) = (
        admitted(ev.rtt),
        admitted(ev.capacity),
        admitted(ev.throughput),
    );
    let ev = &Evidence {
        rtt: &rtts,
        capacity: &capacities,
        throughput: &throughputs,
    };
    let est = &cfg.estimator;
    let rtt_series: Vec<&Measurement> = ev.rtt.iter().collect();
    let Some(rtt) = estimated(&rtt_series, Kind::Rtt, est, now_ms) else {
        return Err(Error::NotFound(format!(
            "no RTT measured for {host} yet (probes run on the target's interval; a transfer \
             with --advisor reports one)"
        )));
    };
    let Some((capacity, capacity_basis)) = capacity(ev, est, now_ms) else {
        return Err(Error::NotFound(format!(
            "RTT to {host} is {:.1} ms, but neither its capacity nor a transfer's rate is known \
             yet (a transfer with --advisor reports one)",
            rtt.value
        )));
    };
    // Both are within bounds, so the product is too; the clamp is for
    // the arithmetic's sake.
    let bdp = ((rtt.value / 1e3 * capacity.value / 8.0).ceil().max(1.0) as u64).min(MAX_BDP_BYTES);
    let window_max = socket_window_max(caps);
    let max_streams = cfg.max_streams.max(1);
    let mut notes = Vec::new();
    let (streams, buffer) = match window_max {
        Some(max) if bdp > max => {
            let needed = bdp.div_ceil(max);
            let streams = needed.min(u64::from(max_streams)) as u16;
            if needed > u64::from(max_streams) {
                notes.push(format!(
                    "the path needs {needed} streams at this host's {} per socket; advice stops \
                     at {max_streams}",
                    mib(max)
                ));
            }
            (
                streams,
                round_up(bdp.div_ceil(u64::from(streams)), 4096).min(max),
            )
        }
        _ => (1, round_up(bdp, 4096)),
    };
    // On long paths, more streams also reach the rate sooner: each flow's
    // slow start has only BDP/N to cover.
    let ramp = ramp_streams(bdp, rtt.value / 1e3).min(u64::from(max_streams)) as u16;
    let (streams, buffer) = if ramp > streams {
        notes.push(format!(
            "{ramp} streams so that slow start reaches the rate within {} ms on this {:.0} ms path",
            (RAMP_BUDGET_S * 1e3) as u64,
            rtt.value
        ));
        let per_stream = round_up(bdp.div_ceil(u64::from(ramp)), 4096);
        (
            ramp,
            window_max.map_or(per_stream, |max| per_stream.min(max)),
        )
    } else {
        (streams, buffer)
    };
    let limited = window_max.is_some_and(|max| bdp > max);
    if window_max.is_none() {
        notes.push("this host's socket-buffer caps could not be read".into());
    }
    let rtt_s = rtt.value / 1e3;
    let expected = (f64::from(streams) * buffer as f64 * 8.0 / rtt_s).min(capacity.value);
    let swept = newest_sweep(ev.throughput)
        .map(|(best, cells)| {
            let age_s = (now_ms - best.at_ms).max(0) as f64 / 1e3;
            (best, cells, age_s)
        })
        .filter(|(_, _, age_s)| *age_s <= cfg.sweep_max_age_s);
    let mut sweep = None;
    let (streams, buffer, expected) = match swept {
        Some((best, cells, age_s)) => {
            let details = &best.details;
            let best_streams = details["streams"]
                .as_u64()
                .unwrap_or(1)
                .clamp(1, u64::from(max_streams)) as u16;
            let best_window = match &details["window"] {
                serde_json::Value::String(w) => w.clone(),
                other => other.to_string(),
            };
            let followed = best.value > expected * SWEEP_MARGIN;
            sweep = Some(SweepBasis {
                at_ms: best.at_ms,
                age_s,
                cells,
                best_bps: best.value,
                best_streams,
                best_window: best_window.clone(),
                formula_bps: expected,
                followed,
            });
            if followed {
                notes.push(format!(
                    "{best_streams} streams, window {best_window}: the best cell of a window x \
                     streams sweep {age_s:.0} s ago reached {:.1} Mbit/s, more than the {:.1} \
                     Mbit/s the formula expects",
                    best.value / 1e6,
                    expected / 1e6
                ));
                let buffer = match best_window.parse::<u64>() {
                    // --window counts bookkeeping: the buffer is half.
                    Ok(locked) => (locked / 2).clamp(1, MAX_BDP_BYTES),
                    // Tern sized the cell's buffers: split what carries
                    // the best rate over its streams.
                    Err(_) => {
                        let carried =
                            ((rtt_s * best.value / 8.0).ceil() as u64).clamp(bdp, MAX_BDP_BYTES);
                        let per_stream = round_up(carried.div_ceil(u64::from(best_streams)), 4096);
                        window_max.map_or(per_stream, |max| per_stream.min(max))
                    }
                };
                (best_streams, buffer, best.value)
            } else {
                (streams, buffer, expected)
            }
        }
        None => (streams, buffer, expected),
    };
    match capacity_basis {
        CapacityBasis::Capacity => {}
        CapacityBasis::Throughput => notes.push(
            "capacity is the rate of transfers the network limited (no capacity probe yet)".into(),
        ),
        CapacityBasis::ThroughputLowerBound => notes.push(
            "capacity is a lower bound: the transfers seen were held back by buffers, disks or \
             the far end, not the network"
                .into(),
        ),
    }
    if rtt.change_detected || capacity.change_detected {
        notes.push("the path changed recently; older measurements were set aside".into());
    }
    Ok(Advice {
        host: host.to_string(),
        buffer_bytes: buffer,
        streams,
        tern_window_bytes: buffer.saturating_mul(2),
        bdp_bytes: bdp,
        expected_throughput_bps: expected,
        rtt_ms: rtt.value,
        capacity_bps: capacity.value,
        capacity_basis,
        samples: rtt.samples + capacity.samples,
        age_s: rtt.age_s.max(capacity.age_s),
        source: rtt.source.merge(capacity.source),
        host_limit: HostLimit {
            socket_window_max_bytes: window_max.unwrap_or(0),
            limited,
            tcp_rmem_max: caps.tcp_rmem[2],
            tcp_wmem_max: caps.tcp_wmem[2],
            rmem_max: caps.rmem_max,
            wmem_max: caps.wmem_max,
            sysctls: if limited {
                sysctls_for(bdp, caps)
            } else {
                Vec::new()
            },
        },
        rtt,
        capacity,
        sweep,
        aggregated_from: None,
        aggregated_by: None,
        paths: Vec::new(),
        notes,
    })
}

#[cfg(test)]
mod tests;
