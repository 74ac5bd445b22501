//! What earlier copies to a daemon learned about the path: its rate and the
//! streams their measurements bore out, kept in the state directory (`paths.json`), so
//! that the next copy to the same daemon starts where the last one ended
//! instead of ramping up from a guess.
//!
//! On a long path the ramp is what separates a copy from the physical
//! limit: each stream's buffers grow from a guess in steps that wait for
//! evidence, a second or more at 100 ms. With the rate known, the sending
//! side sizes its buffers for it from the first round trip
//! (`Tuning::known_rate_bps`) and opens as many streams as last time.
//!
//! The memory only advises: a missing, unreadable or stale entry means the
//! usual start, explicit `--streams`, `--window` or `--advisor` win, and a
//! file that cannot be written is never an error of the copy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tern_drs::StepReason;
use tern_drs::streams::LAN_RTT;
use tern_engine::client::{ClientOptions, Endpoint};
use tern_engine::transfer::TransferStats;
use tern_proto::{Features, Hello};

/// Older entries are ignored: paths change.
const FRESH_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// Entries kept, the newest.
const MAX_ENTRIES: usize = 512;

/// A copy whose data moved for less than this says little about the
/// path's rate: it is not remembered.
const MIN_NETWORK_TIME: Duration = Duration::from_secs(2);

/// The same on a LAN, where nothing ramps up for longer than milliseconds
/// (a copy of 1.2 s there has made and judged its stream probe).
const MIN_LAN_NETWORK_TIME: Duration = Duration::from_millis(500);

/// A count settled by a copy whose next addition did not pay is started
/// from without probes for this long; then a copy probes again, as the
/// path and the hosts' load change.
///
/// It takes two copies in a row finding that the same addition did not
/// pay to settle a count: a judgment made over a fraction of a second
/// (a LAN copy's probe) can be noise, and one wrong verdict held for an
/// hour. On this repository's loopback bench, 2 streams move ~12 % more
/// than 1, just over the controller's gain threshold, and a single
/// verdict of "no gain" left every later copy on 1 stream.
const SETTLED_FOR: Duration = Duration::from_secs(3600);

/// The file beside the daemon identity and the advisor archive.
const FILE_NAME: &str = "paths.json";

/// One daemon's path as the last copy to it left it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remembered {
    /// Payload rate over the copy's data phase, bits/s.
    pub rate_bps: u64,
    /// Streams at the end of the copy.
    pub streams: u16,
    /// When a copy last found that more streams than these did not pay,
    /// seconds since the Unix epoch (copies that started from the count
    /// and kept it carry the time on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_at_unix: Option<u64>,
    /// The last copy found that more streams than these did not pay, but
    /// that alone settles nothing: the next copy probes again, and settles
    /// the count if it finds the same.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_gain_once: bool,
    /// When, seconds since the Unix epoch.
    pub at_unix: u64,
    /// The daemon's `Hello`, so that the next session's opening can go
    /// with the client's (`ClientOptions::daemon_hello`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hello: Option<DaemonHello>,
}

/// A daemon's `Hello`, as kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonHello {
    /// Highest protocol version it speaks.
    pub version: u16,
    /// Lowest it accepts.
    pub min_version: u16,
    /// Its feature bits.
    pub features: u64,
}

impl From<Hello> for DaemonHello {
    fn from(h: Hello) -> DaemonHello {
        DaemonHello {
            version: h.version,
            min_version: h.min_version,
            features: h.features.0,
        }
    }
}

impl From<DaemonHello> for Hello {
    fn from(h: DaemonHello) -> Hello {
        Hello {
            version: h.version,
            min_version: h.min_version,
            features: Features(h.features),
        }
    }
}

/// The memory file.
#[derive(Debug, Clone)]
pub struct PathMemory {
    file: PathBuf,
}

impl PathMemory {
    /// The memory in the default state directory; `None` when there is no
    /// home to keep it in.
    pub fn default_place() -> Option<PathMemory> {
        let dir = crate::host::state_dir(None).ok()?;
        Some(PathMemory::at(&dir.join(FILE_NAME)))
    }

    /// The memory kept in `file`.
    pub fn at(file: &Path) -> PathMemory {
        PathMemory {
            file: file.to_path_buf(),
        }
    }

    fn load(&self) -> BTreeMap<String, Remembered> {
        std::fs::read(&self.file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// What the last copy to `ep` left, if it is recent (its rate is 0
    /// when only the daemon's hello is known).
    pub fn recall(&self, ep: &Endpoint) -> Option<Remembered> {
        let found = self.load().remove(&key(ep))?;
        let age = now_unix().saturating_sub(found.at_unix);
        (Duration::from_secs(age) <= FRESH_FOR).then_some(found)
    }

    /// Keeps what a copy to `ep` showed, when it moved data long enough to
    /// say something; says why not otherwise.
    pub fn remember(
        &self,
        ep: &Endpoint,
        stats: &TransferStats,
        hello: Option<Hello>,
    ) -> Result<(), String> {
        let streams = streams_to_remember(stats.tuning.as_ref(), stats.streams_used);
        let copy = CopySeen {
            bytes: stats.bytes,
            network_elapsed: stats.network_elapsed,
            lan: stats.tuning.as_ref().is_some_and(on_a_lan),
            streams,
            settling: settling_of(stats.tuning.as_ref()),
        };
        self.keep(ep, copy, hello)
    }

    /// Keeps what `copy` to `ep` showed, and the daemon's `hello`.
    fn keep(&self, ep: &Endpoint, copy: CopySeen, hello: Option<Hello>) -> Result<(), String> {
        let CopySeen {
            bytes,
            network_elapsed,
            lan,
            streams,
            settling,
        } = copy;
        let mut all = self.load();
        let min_time = if lan {
            MIN_LAN_NETWORK_TIME
        } else {
            MIN_NETWORK_TIME
        };
        let too_short = network_elapsed < min_time || bytes == 0;
        let earlier = all.get(&key(ep));
        let same_count = earlier.filter(|e| e.streams == streams);
        // "Two copies in a row": a verdict older than a settling's hour
        // does not count as the first of two.
        let recent_no_gain = same_count.is_some_and(|e| {
            e.no_gain_once
                && Duration::from_secs(now_unix().saturating_sub(e.at_unix)) < SETTLED_FOR
        });
        let (settled_at_unix, no_gain_once) = match settling {
            Settling::Open => (None, false),
            Settling::Found if recent_no_gain => (Some(now_unix()), false),
            Settling::Found => (None, true),
            Settling::Stayed => (earlier.and_then(|e| e.settled_at_unix), false),
            // A pull (the daemon's controller) or a fixed count: what an
            // earlier copy found holds while the count is the same.
            Settling::Unknown => (
                same_count.and_then(|e| e.settled_at_unix),
                same_count.is_some_and(|e| e.no_gain_once),
            ),
        };
        let remembered = match (too_short, earlier) {
            // Any session tells the daemon's hello; a short one keeps what
            // an earlier one learnt of the rate.
            (true, Some(earlier)) if hello.is_some() => Remembered {
                hello: hello.map(DaemonHello::from),
                ..earlier.clone()
            },
            (true, None) if hello.is_some() => Remembered {
                rate_bps: 0,
                streams: 0,
                settled_at_unix: None,
                no_gain_once: false,
                at_unix: now_unix(),
                hello: hello.map(DaemonHello::from),
            },
            (true, _) => return Err("too short to tell the path's rate".into()),
            (false, _) => Remembered {
                rate_bps: (bytes as f64 * 8.0 / network_elapsed.as_secs_f64()) as u64,
                streams: streams.max(1),
                settled_at_unix,
                no_gain_once,
                at_unix: now_unix(),
                hello: hello.map(DaemonHello::from),
            },
        };
        all.insert(key(ep), remembered);
        while all.len() > MAX_ENTRIES {
            let oldest = all
                .iter()
                .min_by_key(|(_, r)| r.at_unix)
                .map(|(k, _)| k.clone())
                .expect("not empty");
            all.remove(&oldest);
        }
        let text = serde_json::to_vec_pretty(&all).map_err(|e| e.to_string())?;
        let dir = self.file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        // Whole or not at all: concurrent copies may write at once, and the
        // last one wins.
        let tmp = dir.join(format!(".{FILE_NAME}.{}", std::process::id()));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &self.file))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                e.to_string()
            })
    }
}

/// What one copy showed, as the memory keeps it.
#[derive(Debug, Clone, Copy)]
struct CopySeen {
    bytes: u64,
    network_elapsed: Duration,
    /// Every stream's smoothed RTT was below [`LAN_RTT`].
    lan: bool,
    /// The count its measurements bore out.
    streams: u16,
    settling: Settling,
}

/// Whether a copy settled its stream count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settling {
    /// Its count was not controlled here: a fixed count, or a pull (the
    /// daemon sends and decides).
    Unknown,
    /// Not shown: no probe, one that paid, or one too late to judge.
    Open,
    /// Its last addition did not pay.
    Found,
    /// It started from a settled count and kept it.
    Stayed,
}

/// Whether the copy `tuning` describes settled its stream count.
fn settling_of(tuning: Option<&tern_drs::Diagnosis>) -> Settling {
    match tuning.and_then(|d| d.stream_steps.last()).map(|s| s.reason) {
        None => Settling::Unknown,
        Some(StepReason::NoGain) => Settling::Found,
        Some(StepReason::Settled) => Settling::Stayed,
        Some(_) => Settling::Open,
    }
}

/// True when every stream of the copy saw a LAN's RTT.
fn on_a_lan(d: &tern_drs::Diagnosis) -> bool {
    // A stream never sampled shows an RTT of 0: no evidence of a LAN.
    !d.streams.is_empty()
        && d.streams
            .iter()
            .all(|s| s.srtt_ms > 0.0 && s.srtt_ms < LAN_RTT.as_secs_f64() * 1e3)
}

/// The streams a copy's measurements bore out, which the next copy starts
/// with: not an addition made too late to judge. Remembering that would
/// ratchet the count up copy by copy, each adding streams the one before
/// never showed were worth their CPU.
fn streams_to_remember(tuning: Option<&tern_drs::Diagnosis>, streams_used: u16) -> u16 {
    tuning
        .and_then(|d| match d.streams_proven {
            0 => d.stream_steps.last().map(|s| s.streams),
            proven => Some(proven),
        })
        .unwrap_or(streams_used)
}

/// Starts `opts` from `remembered`: as many streams as the last copy ended
/// with (within the maximum), buffers sized for its rate.
pub fn apply(opts: &mut ClientOptions, remembered: &Remembered, sending: bool) {
    apply_hello(opts, remembered);
    opts.streams = opts
        .streams
        .max(remembered.streams)
        .min(opts.max_streams.max(1));
    opts.tuning.known_rate_bps = Some(remembered.rate_bps);
    // The sending side's controller decides the count; on a pull that is
    // the daemon's, which this memory does not reach.
    opts.tuning.streams_settled = sending && settled(remembered);
}

/// True when `remembered`'s count was settled recently enough to start
/// from without probes.
pub fn settled(remembered: &Remembered) -> bool {
    remembered
        .settled_at_unix
        .is_some_and(|at| Duration::from_secs(now_unix().saturating_sub(at)) < SETTLED_FOR)
}

/// Lets the session's opening go with the client's `Hello`, when the
/// daemon's is remembered.
pub fn apply_hello(opts: &mut ClientOptions, remembered: &Remembered) {
    opts.daemon_hello = remembered.hello.map(Hello::from);
}

fn key(ep: &Endpoint) -> String {
    format!("{}:{}", ep.host, ep.port)
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            features: Features(0b1011),
            ..Hello::ours()
        }
    }

    /// A copy off a LAN that settled nothing.
    fn copy(bytes: u64, network_elapsed: Duration, streams: u16) -> CopySeen {
        CopySeen {
            bytes,
            network_elapsed,
            lan: false,
            streams,
            settling: Settling::Open,
        }
    }

    fn ep(port: u16) -> Endpoint {
        Endpoint {
            host: "dtn.example".into(),
            port,
        }
    }

    #[test]
    fn a_copy_long_enough_is_recalled_for_its_daemon_only() {
        let dir = tempfile::tempdir().unwrap();
        let memory = PathMemory::at(&dir.path().join("state/paths.json"));
        assert_eq!(memory.recall(&ep(4747)), None);
        memory
            .keep(
                &ep(4747),
                copy(1 << 30, Duration::from_secs(10), 8),
                Some(hello()),
            )
            .unwrap();
        let got = memory.recall(&ep(4747)).unwrap();
        assert_eq!(got.rate_bps, (8u64 << 30) / 10);
        assert_eq!(got.streams, 8);
        assert_eq!(got.hello.map(Hello::from), Some(hello()));
        assert_eq!(memory.recall(&ep(4748)), None, "another daemon");
    }

    #[test]
    fn short_copies_and_stale_or_broken_memories_are_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("paths.json");
        let memory = PathMemory::at(&file);
        assert!(
            memory
                .keep(&ep(1), copy(1 << 20, Duration::from_secs(1), 1), None)
                .is_err()
        );
        assert_eq!(memory.recall(&ep(1)), None);
        // A short session still tells the daemon's hello, and no rate.
        memory
            .keep(
                &ep(1),
                copy(1 << 20, Duration::from_secs(1), 1),
                Some(hello()),
            )
            .unwrap();
        let only_hello = memory.recall(&ep(1)).unwrap();
        assert_eq!(
            (only_hello.rate_bps, only_hello.hello.map(Hello::from)),
            (0, Some(hello()))
        );
        let stale = Remembered {
            rate_bps: 1_000_000,
            streams: 4,
            settled_at_unix: None,
            no_gain_once: false,
            at_unix: now_unix() - 8 * 24 * 3600,
            hello: None,
        };
        let all = BTreeMap::from([(key(&ep(2)), stale)]);
        std::fs::write(&file, serde_json::to_vec(&all).unwrap()).unwrap();
        assert_eq!(memory.recall(&ep(2)), None, "a week old");
        std::fs::write(&file, b"{not json").unwrap();
        assert_eq!(memory.recall(&ep(2)), None);
        memory
            .keep(&ep(2), copy(1 << 30, Duration::from_secs(4), 2), None)
            .unwrap();
        assert!(memory.recall(&ep(2)).is_some(), "a broken file is replaced");
    }

    #[test]
    fn an_addition_too_late_to_judge_is_not_remembered() {
        use tern_drs::{StreamChange, StreamController, streams::Observation};
        let mut controller = StreamController::new(2, 8);
        let mut diagnosis = tern_drs::diagnose(Vec::new(), tern_drs::HostCaps::default(), &[]);
        // A level rate on a LAN, sampled every 200 ms: the first change.
        let level = |controller: &mut StreamController, ticks: std::ops::RangeInclusive<u64>| {
            ticks
                .filter_map(|tick| {
                    controller.observe(Observation {
                        at: Duration::from_millis(tick * 200),
                        bytes: tick * 200_000_000,
                        limited_at_cap: false,
                        growing_buffers: false,
                        worth_probing: true,
                        srtt: Duration::from_micros(80),
                    })
                })
                .next()
        };
        // A probe to 4 the copy ends before judging.
        assert_eq!(level(&mut controller, 1..=5), Some(StreamChange::Grow(4)));
        diagnosis.set_stream_steps(controller.history().to_vec());
        diagnosis.streams_proven = controller.proven();
        assert_eq!(streams_to_remember(Some(&diagnosis), 4), 2);
        assert_eq!(settling_of(Some(&diagnosis)), Settling::Open);
        // Judged after all: the addition did not pay, the count settled.
        assert_eq!(level(&mut controller, 6..=8), Some(StreamChange::Retire(2)));
        diagnosis.set_stream_steps(controller.history().to_vec());
        assert_eq!(settling_of(Some(&diagnosis)), Settling::Found);
        diagnosis.set_stream_steps(StreamController::settled(2, 8).history().to_vec());
        assert_eq!(settling_of(Some(&diagnosis)), Settling::Stayed);
        // Without a controller (a fixed count): the streams used.
        diagnosis.streams_proven = 0;
        diagnosis.set_stream_steps(Vec::new());
        assert_eq!(streams_to_remember(Some(&diagnosis), 4), 4);
        assert_eq!(settling_of(Some(&diagnosis)), Settling::Unknown);
        assert_eq!(streams_to_remember(None, 3), 3);
    }

    #[test]
    fn a_short_lan_copy_is_remembered_and_a_settled_count_is_started_without_probes() {
        let dir = tempfile::tempdir().unwrap();
        let memory = PathMemory::at(&dir.path().join("paths.json"));
        let lan = |settling| CopySeen {
            lan: true,
            settling,
            ..copy(2 << 30, Duration::from_millis(1500), 2)
        };
        // 1.5 s is too short off a LAN, long enough on one.
        assert!(
            memory
                .keep(&ep(1), copy(2 << 30, Duration::from_millis(1500), 2), None)
                .is_err()
        );
        memory.keep(&ep(1), lan(Settling::Open), None).unwrap();
        let open = memory.recall(&ep(1)).unwrap();
        assert_eq!((open.streams, open.settled_at_unix), (2, None));
        let mut opts = ClientOptions::new(tern_engine::client::Trust::Any);
        apply(&mut opts, &open, true);
        assert!(!opts.tuning.streams_settled, "nothing settled yet: probe");

        // A copy whose addition did not pay settles nothing alone: the
        // next probes again. A second in a row settles the count; a copy
        // that started from it and kept it carries the time on.
        memory.keep(&ep(1), lan(Settling::Found), None).unwrap();
        let once = memory.recall(&ep(1)).unwrap();
        assert_eq!((once.settled_at_unix, once.no_gain_once), (None, true));
        apply(&mut opts, &once, true);
        assert!(!opts.tuning.streams_settled, "one verdict: probe again");
        // A first verdict older than the hour does not count.
        let mut all = memory.load();
        all.get_mut(&key(&ep(1))).unwrap().at_unix -= 3601;
        std::fs::write(&memory.file, serde_json::to_vec(&all).unwrap()).unwrap();
        memory.keep(&ep(1), lan(Settling::Found), None).unwrap();
        let stale = memory.recall(&ep(1)).unwrap();
        assert_eq!((stale.settled_at_unix, stale.no_gain_once), (None, true));
        memory.keep(&ep(1), lan(Settling::Found), None).unwrap();
        let found = memory.recall(&ep(1)).unwrap();
        assert!(!found.no_gain_once);
        let at = found.settled_at_unix.expect("settled");
        assert!(now_unix() - at < 5);
        apply(&mut opts, &found, false);
        assert!(
            !opts.tuning.streams_settled,
            "a pull: the daemon's controller"
        );
        apply(&mut opts, &found, true);
        assert!(opts.tuning.streams_settled);
        let mut all = memory.load();
        all.get_mut(&key(&ep(1))).unwrap().settled_at_unix = Some(at - 600);
        std::fs::write(&memory.file, serde_json::to_vec(&all).unwrap()).unwrap();
        memory.keep(&ep(1), lan(Settling::Stayed), None).unwrap();
        let stayed = memory.recall(&ep(1)).unwrap();
        assert_eq!(stayed.settled_at_unix, Some(at - 600));
        assert!(settled(&stayed));
        // An hour on, the next copy probes again.
        let old = Remembered {
            settled_at_unix: Some(at - 3601),
            ..stayed.clone()
        };
        assert!(!settled(&old));
        apply(&mut opts, &old, true);
        assert!(!opts.tuning.streams_settled);
        // A pull or a fixed count keeps it while the count is the same.
        memory.keep(&ep(1), lan(Settling::Unknown), None).unwrap();
        assert_eq!(
            memory.recall(&ep(1)).unwrap().settled_at_unix,
            Some(at - 600)
        );
        let other_count = CopySeen {
            streams: 3,
            ..lan(Settling::Unknown)
        };
        memory.keep(&ep(1), other_count, None).unwrap();
        assert_eq!(memory.recall(&ep(1)).unwrap().settled_at_unix, None);
        // A copy that probed and gained forgets the settling, and a first
        // verdict of no gain.
        memory.keep(&ep(1), lan(Settling::Found), None).unwrap();
        memory.keep(&ep(1), lan(Settling::Found), None).unwrap();
        memory.keep(&ep(1), lan(Settling::Open), None).unwrap();
        assert_eq!(memory.recall(&ep(1)).unwrap().settled_at_unix, None);
        memory.keep(&ep(1), lan(Settling::Found), None).unwrap();
        memory.keep(&ep(1), lan(Settling::Open), None).unwrap();
        memory.keep(&ep(1), lan(Settling::Found), None).unwrap();
        let again = memory.recall(&ep(1)).unwrap();
        assert_eq!((again.settled_at_unix, again.no_gain_once), (None, true));
        // Nor does a verdict at another count settle this one.
        let three = CopySeen {
            streams: 3,
            ..lan(Settling::Found)
        };
        memory.keep(&ep(1), three, None).unwrap();
        assert_eq!(memory.recall(&ep(1)).unwrap().settled_at_unix, None);
    }

    #[test]
    fn applying_a_memory_keeps_within_the_stream_maximum() {
        let mut opts = ClientOptions::new(tern_engine::client::Trust::Any);
        opts.streams = 2;
        opts.max_streams = 6;
        let r = Remembered {
            rate_bps: 900_000_000,
            streams: 8,
            settled_at_unix: None,
            no_gain_once: false,
            at_unix: now_unix(),
            hello: Some(hello().into()),
        };
        apply(&mut opts, &r, true);
        assert_eq!(opts.streams, 6);
        assert_eq!(opts.tuning.known_rate_bps, Some(900_000_000));
        assert_eq!(opts.daemon_hello, Some(hello()));
    }
}
