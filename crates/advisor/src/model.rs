//! The advisor's vocabulary: targets (the far ends of paths), what is
//! measured about them, and where each number came from.
//!
//! A measurement is one number with a kind and a unit; anything more a
//! probe knows (the dispersion of a capacity estimate, the stream count of
//! a throughput test) rides along in `details`, a JSON object, so a new
//! probe needs no schema change.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Error;

/// What a measurement measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Round-trip time, milliseconds.
    Rtt,
    /// Bottleneck capacity of the path, bits per second.
    Capacity,
    /// Rate a transfer or throughput test achieved, bits per second.
    Throughput,
    /// Packets lost from the measuring host to the target, percent.
    Loss,
    /// Packets lost from the target back to the measuring host, percent.
    LossReverse,
    /// Delay variation from the measuring host to the target (mean
    /// difference of consecutive one-way delays), milliseconds.
    Jitter,
    /// Delay variation back, milliseconds.
    JitterReverse,
    /// The route: the number of hops, the hop list in the details.
    Route,
}

impl Kind {
    /// Every kind, in the order reports list them.
    pub const ALL: [Kind; 8] = [
        Kind::Rtt,
        Kind::Capacity,
        Kind::Throughput,
        Kind::Loss,
        Kind::LossReverse,
        Kind::Jitter,
        Kind::JitterReverse,
        Kind::Route,
    ];

    /// Its name in the store and the API.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Rtt => "rtt",
            Kind::Capacity => "capacity",
            Kind::Throughput => "throughput",
            Kind::Loss => "loss",
            Kind::LossReverse => "loss_reverse",
            Kind::Jitter => "jitter",
            Kind::JitterReverse => "jitter_reverse",
            Kind::Route => "route",
        }
    }

    /// The unit its values are in.
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Rtt | Kind::Jitter | Kind::JitterReverse => "ms",
            Kind::Capacity | Kind::Throughput => "bit/s",
            Kind::Loss | Kind::LossReverse => "%",
            Kind::Route => "hops",
        }
    }
}

/// The fastest rate a measurement may report, bits/s: 10 Tbit/s, beyond
/// any one path today (and far beyond a host's NICs). A larger number is
/// a bug or a lie, and would make every figure derived from it absurd.
pub const MAX_RATE_BPS: f64 = 1e13;

/// The longest round trip a measurement may report, ms: 10 minutes,
/// beyond any path TCP can hold (a geostationary hop is 0.6 s).
pub const MAX_RTT_MS: f64 = 600_000.0;

/// The longest a reported transfer may have taken, seconds: a year.
pub const MAX_DURATION_S: f64 = 366.0 * 86_400.0;

/// The most bytes a path can hold in flight within the bounds above
/// ([`MAX_RTT_MS`] × [`MAX_RATE_BPS`]): what advice derives stays below.
pub const MAX_BDP_BYTES: u64 = (MAX_RTT_MS / 1e3 * MAX_RATE_BPS / 8.0) as u64;

/// A number for a message: in scientific notation when plain digits would
/// run long (`1e300`, not 301 digits).
pub fn shown(v: f64) -> String {
    if v.is_finite() && v != 0.0 && !(1e-6..1e16).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Checks that `v`, the field `field`, is above 0 and at most `max`
/// (`what_max` says the bound for people).
pub fn check_positive(field: &str, v: f64, max: f64, what_max: &str) -> Result<f64, Error> {
    if v.is_finite() && v > 0.0 && v <= max {
        Ok(v)
    } else {
        Err(Error::BadRequest(format!(
            "{field} must be above 0 and at most {} ({what_max}), not {}",
            shown(max),
            shown(v)
        )))
    }
}

impl Kind {
    /// The largest value a measurement of this kind may have: the
    /// smallest is above 0.
    pub fn max(self) -> f64 {
        match self {
            Kind::Rtt | Kind::Jitter | Kind::JitterReverse => MAX_RTT_MS,
            Kind::Capacity | Kind::Throughput => MAX_RATE_BPS,
            Kind::Loss | Kind::LossReverse => 100.0,
            Kind::Route => 255.0,
        }
    }

    /// Whether 0 is a value of this kind (no loss, no delay variation);
    /// rates, round trips and routes are above 0.
    pub fn admits_zero(self) -> bool {
        matches!(
            self,
            Kind::Loss | Kind::LossReverse | Kind::Jitter | Kind::JitterReverse
        )
    }

    /// Whether a measurement of this kind may have the value `v`.
    pub fn admits(self, v: f64) -> bool {
        v.is_finite() && (v > 0.0 || (v == 0.0 && self.admits_zero())) && v <= self.max()
    }

    /// Checks that `v`, the field `field`, is a value of this kind.
    pub fn check(self, field: &str, v: f64) -> Result<f64, Error> {
        let what_max = match self {
            Kind::Rtt | Kind::Jitter | Kind::JitterReverse => "10 min",
            Kind::Capacity | Kind::Throughput => "10 Tbit/s",
            Kind::Loss | Kind::LossReverse => "100 %",
            Kind::Route => "255 hops",
        };
        if self.admits(v) {
            return Ok(v);
        }
        if self.admits_zero() {
            return Err(Error::BadRequest(format!(
                "{field} must be 0 to {} ({what_max}), not {}",
                shown(self.max()),
                shown(v)
            )));
        }
        check_positive(field, v, self.max(), what_max)
    }
}

/// Whether a number came from watching real transfers or from a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Recorded by a real transfer (tern cp, the daemon's sessions).
    Passive,
    /// Measured by a probe the scheduler ran.
    Active,
}

impl Origin {
    /// Its name in the store and the API.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Passive => "passive",
            Origin::Active => "active",
        }
    }
}

/// How a target became known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetSource {
    /// Listed in the targets file; never aged out.
    Config,
    /// Added through `POST /api/v1/targets`.
    Api,
    /// Seen in a completed transfer (the daemon's sessions, reports).
    Discovered,
    /// A host of a mesh (`--mesh`, `PUT /api/v1/meshes/{name}`); never
    /// aged out.
    Mesh,
}

impl TargetSource {
    /// Its name in the store and the API.
    pub fn name(self) -> &'static str {
        match self {
            TargetSource::Config => "config",
            TargetSource::Api => "api",
            TargetSource::Discovered => "discovered",
            TargetSource::Mesh => "mesh",
        }
    }
}

macro_rules! parse_by_name {
    ($ty:ty, $what:literal, [$($v:expr),+]) => {
        impl FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                [$($v),+]
                    .into_iter()
                    .find(|v| v.name() == s)
                    .ok_or_else(|| Error::BadRequest(format!(concat!("unknown ", $what, " '{}'"), s)))
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

parse_by_name!(
    Kind,
    "measurement kind",
    [
        Kind::Rtt,
        Kind::Capacity,
        Kind::Throughput,
        Kind::Loss,
        Kind::LossReverse,
        Kind::Jitter,
        Kind::JitterReverse,
        Kind::Route
    ]
);
parse_by_name!(Origin, "origin", [Origin::Passive, Origin::Active]);
parse_by_name!(
    TargetSource,
    "target source",
    [
        TargetSource::Config,
        TargetSource::Api,
        TargetSource::Discovered,
        TargetSource::Mesh
    ]
);

/// One number a probe or a transfer produced, before it is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// What it measures.
    pub kind: Kind,
    /// The value, in the kind's unit.
    pub value: f64,
    /// Whatever else the producer knows, as a JSON object.
    #[serde(default = "empty_object")]
    pub details: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

impl Sample {
    /// A sample with no details.
    pub fn new(kind: Kind, value: f64) -> Sample {
        Sample {
            kind,
            value,
            details: empty_object(),
        }
    }

    /// A round-trip time in milliseconds.
    pub fn rtt_ms(ms: f64) -> Sample {
        Sample::new(Kind::Rtt, ms)
    }

    /// A bottleneck capacity in bits/s and the dispersion of the estimate
    /// (a standard deviation, bits/s).
    pub fn capacity_bps(bps: f64, dispersion_bps: f64) -> Sample {
        Sample::new(Kind::Capacity, bps).with("dispersion_bps", dispersion_bps)
    }

    /// An achieved rate in bits/s with the stream count and window it used
    /// (`auto`, `kernel` or a byte count).
    pub fn throughput_bps(bps: f64, streams: u16, window: &str) -> Sample {
        Sample::new(Kind::Throughput, bps)
            .with("streams", streams)
            .with("window", window)
    }

    /// Adds one detail.
    pub fn with(mut self, key: &str, value: impl Serialize) -> Sample {
        if let (serde_json::Value::Object(map), Ok(v)) =
            (&mut self.details, serde_json::to_value(value))
        {
            map.insert(key.to_string(), v);
        }
        self
    }

    /// Checks that the value makes sense for its kind: above 0 and within
    /// what a network can do ([`Kind::max`]).
    pub fn validate(&self) -> Result<(), Error> {
        self.kind.check(self.kind.name(), self.value)?;
        if !self.details.is_object() {
            return Err(Error::BadRequest("details must be a JSON object".into()));
        }
        Ok(())
    }
}

/// A stored measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// The target it is about.
    pub host: String,
    /// What it measures.
    pub kind: Kind,
    /// The value.
    pub value: f64,
    /// The unit of `value`.
    pub unit: String,
    /// Passive (a real transfer) or active (a probe).
    pub origin: Origin,
    /// Who produced it: a probe's name, or the reporting command.
    pub producer: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// Where it was measured from: the site name of the advisor that
    /// recorded it (empty in archives from before sites were named).
    #[serde(default)]
    pub from: String,
    /// Whatever else the producer knows.
    pub details: serde_json::Value,
}

/// The far end of a path the advisor knows about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// Host name or address, as given.
    pub host: String,
    /// Port probes connect to (a tern daemon listens on 4747).
    pub port: u16,
    /// An address the host resolved to, used to group targets by subnet.
    pub address: Option<String>,
    /// The bottleneck group the operator put it in: targets of one group
    /// are measured and answered for as one path.
    #[serde(default)]
    pub group: Option<String>,
    /// The tests run against it, by name (`rtt`, `capacity`, `loss`,
    /// `route`, `throughput`, `sweep`); `None` runs every one configured.
    /// A mesh sets them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<Vec<String>>,
    /// How it became known.
    pub source: TargetSource,
    /// Seconds between active measurements of it.
    pub interval_s: u64,
    /// When it was added, ms since the epoch.
    pub added_ms: i64,
    /// When advice was last asked for it or a transfer used it.
    pub last_used_ms: i64,
}

/// The port a target gets when none is given: tern's.
pub const DEFAULT_PORT: u16 = 4747;

/// Checks a name: 1 to `max_len` characters of letters, digits and
/// `extra`; `what` names what it should have been.
fn check_name(name: &str, max_len: usize, extra: &str, what: &str) -> Result<(), Error> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || extra.contains(c);
    if name.is_empty() || name.len() > max_len || !name.chars().all(ok_char) {
        let shown: String = name.chars().take(64).collect();
        return Err(Error::BadRequest(format!("'{shown}' is not {what}")));
    }
    Ok(())
}

/// Checks a host name or address given by a user or a peer: 1 to 253
/// characters of letters, digits and `.-:_%` (names, IPv4, IPv6 with a
/// zone), so nothing odd reaches the store, the logs or a URL.
pub fn validate_host(host: &str) -> Result<(), Error> {
    check_name(host, 253, ".-:_%", "a host name or address")
}

/// Checks a bottleneck group's name: 1 to 64 letters, digits and `.-_`.
pub fn validate_group(group: &str) -> Result<(), Error> {
    check_name(
        group,
        64,
        ".-_",
        "a group name (1 to 64 letters, digits and .-_)",
    )
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A target as the API takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetRequest {
    /// Host name or address.
    pub host: String,
    /// Port probes connect to [default: 4747].
    #[serde(default)]
    pub port: Option<u16>,
    /// Seconds between measurements [default: the advisor's].
    #[serde(default)]
    pub interval_s: Option<u64>,
    /// The bottleneck group it shares with other targets [default: none].
    #[serde(default)]
    pub group: Option<String>,
}

/// What `POST /api/v1/report` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportOutcome {
    /// The target the report was filed under.
    pub host: String,
    /// Measurements stored.
    pub stored: usize,
    /// Parts left out, and why.
    pub ignored: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>().unwrap(), k);
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.name())
            );
        }
        assert_eq!("api".parse::<TargetSource>().unwrap(), TargetSource::Api);
        assert!("bogus".parse::<Origin>().is_err());
    }

    #[test]
    fn hosts_are_checked() {
        for good in ["dtn.example.org", "10.0.0.1", "::1", "fe80::1%eth0", "a_b"] {
            validate_host(good).unwrap();
        }
        for bad in ["", "a b", "x/../y", "<script>", &"a".repeat(254)] {
            assert!(validate_host(bad).is_err(), "{bad}");
        }
        for good in ["wan-east", "site_2.uplink"] {
            validate_group(good).unwrap();
        }
        for bad in ["", "a b", "a:b", &"g".repeat(65)] {
            assert!(validate_group(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn samples_are_checked() {
        assert!(Sample::rtt_ms(0.0).validate().is_err());
        assert!(Sample::rtt_ms(f64::NAN).validate().is_err());
        assert!(Sample::rtt_ms(-1.0).validate().is_err());
        assert!(Sample::rtt_ms(600_001.0).validate().is_err());
        Sample::rtt_ms(600_000.0).validate().unwrap();
        assert!(Sample::capacity_bps(1.0001e13, 0.0).validate().is_err());
        Sample::capacity_bps(1e13, 0.0).validate().unwrap();
        let e = Sample::throughput_bps(1e300, 1, "auto").validate();
        let e = e.unwrap_err().to_string();
        assert!(e.contains("throughput") && e.contains("1e300"), "{e}");
        assert!(e.len() < 200, "a short message: {e}");
        assert_eq!(MAX_BDP_BYTES, 750_000_000_000_000);
        let s = Sample::capacity_bps(5e8, 1e7);
        s.validate().unwrap();
        assert_eq!(s.details["dispersion_bps"], 1e7);
        let t = Sample::throughput_bps(4e8, 3, "auto");
        assert_eq!(t.details["streams"], 3);
        assert_eq!(t.details["window"], "auto");
    }
}
