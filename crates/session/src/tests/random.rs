//! Whole transfers from seeds: random file sets (empty, one byte, block
//! multiples and one off), stream counts, latencies, rates and jitter,
//! streams cut (each end hearing of it at its own time), corrupt blocks,
//! a stalling control channel, files the receiver partly holds or already
//! has; half of them measure the links, so the sender's endgame copies
//! blocks. Every seed must end, within bounded simulated time, either with
//! every file in place byte for byte, or with an error its faults explain:
//! `PeerGone` only when every stream was cut, `TooManyRetries` only for a
//! file that lost more transmissions than it had repair rounds. Never a
//! hang, a panic, or a file silently missing or different.
//!
//! `TERN_SIM_SEEDS=N` runs seeds 0..N instead of the CI's 500;
//! `TERN_SIM_SEED=S` runs seed S alone.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rand::SeedableRng;
use tern_proto::{EntryKind, EntryMeta};

use super::*;

/// Seeds run by default (CI).
const CI_SEEDS: u64 = 500;

/// Simulated time every seed must end within: over 20 times the longest
/// of seeds 0..20 000 (5.6 s).
const BUDGET_MS: u64 = 120_000;

/// One seed's transfer and what it must come to.
struct Scenario {
    sim: Sim,
    /// Files in push order: path and content.
    files: Vec<(String, Vec<u8>)>,
    dirs: Vec<String>,
    /// Files the receiver already has whole: the session must keep them.
    have: BTreeSet<String>,
    /// Bytes of each file the receiver holds from an earlier session.
    kept_bytes: BTreeMap<String, u64>,
    /// Files the receiver cannot create.
    refused: BTreeSet<String>,
    max_rounds: u32,
    /// Every stream is cut at some point.
    all_cut: bool,
    /// For the failure message.
    summary: String,
}

/// Sizes around the block size, where off-by-ones live.
fn size(rng: &mut StdRng) -> u64 {
    let bs = u64::from(BS);
    match rng.gen_range(0..9) {
        0 => 0,
        1 => 1,
        2 => bs - 1,
        3 => bs,
        4 => bs + 1,
        5 | 6 => rng.gen_range(2..=40) * bs + rng.gen_range(0..=2) - 1,
        _ => rng.gen_range(0..=40 * bs),
    }
}

/// Block-aligned runs of a file of `size` bytes, about `share` of them.
fn some_ranges(rng: &mut StdRng, size: u64, share: f64) -> Vec<(u64, u64)> {
    let bs = u64::from(BS);
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for b in 0..size.div_ceil(bs) {
        if !rng.gen_bool(share) {
            continue;
        }
        let (offset, len) = (b * bs, (size - b * bs).min(bs));
        match ranges.last_mut() {
            Some(last) if last.0 + last.1 == offset => last.1 += len,
            _ => ranges.push((offset, len)),
        }
    }
    ranges
}

fn scenario(seed: u64) -> Scenario {
    let mut rng = StdRng::seed_from_u64(seed);
    let streams = rng.gen_range(1..=8usize);
    let latencies: Vec<u64> = (0..streams).map(|_| rng.gen_range(0..=60)).collect();
    let rates: Vec<usize> = (0..streams).map(|_| rng.gen_range(1..=3)).collect();
    let ctrl_latency = rng.gen_range(0..=80);
    let max_rounds = [1, 3, 3, 8][rng.gen_range(0..4)];
    let in_flight = rng.gen_range(1..=8);

    // The files, and what the receiver already holds of them.
    let n_dirs = rng.gen_range(0..=2);
    let dirs: Vec<String> = (0..n_dirs).map(|i| format!("d{i}")).collect();
    let n_files = rng.gen_range(0..=12);
    let mut files = Vec::new();
    for i in 0..n_files {
        let dir = match n_dirs {
            0 => String::new(),
            n => format!("d{}/", rng.gen_range(0..n)),
        };
        let mut bytes = vec![0u8; size(&mut rng) as usize];
        rng.fill(&mut bytes[..]);
        files.push((format!("{dir}f{i}"), bytes));
    }
    let checking = rng.gen_bool(0.3);
    let mut existing = Vec::new();
    let mut at_dest = BTreeMap::new();
    let mut have = BTreeSet::new();
    let mut kept = Vec::new();
    let mut kept_bytes = BTreeMap::new();
    for (path, bytes) in &files {
        let roll = rng.gen_range(0..10);
        if checking && roll < 2 {
            // A whole copy that matches by size and time.
            existing.push((path.clone(), Existing::Same));
            at_dest.insert(path.clone(), bytes.clone());
            have.insert(path.clone());
        } else if checking && roll < 4 {
            // A copy whose digest the sender compares: the same bytes, or
            // as many other bytes (no other bytes make an empty file).
            let same = rng.gen_bool(0.5) || bytes.is_empty();
            let mut there = bytes.clone();
            if !same {
                if let Some(b) = there.last_mut() {
                    *b ^= 1;
                }
            }
            existing.push((path.clone(), Existing::Digest(digest_of(&there))));
            if same {
                have.insert(path.clone());
            }
            at_dest.insert(path.clone(), there);
        } else if roll >= 8 && !bytes.is_empty() {
            // A partial copy from an earlier session.
            let share = rng.gen_range(0.2..=1.0);
            let ranges = some_ranges(&mut rng, bytes.len() as u64, share);
            if !ranges.is_empty() {
                kept_bytes.insert(path.clone(), ranges.iter().map(|r| r.1).sum());
                kept.push((path.clone(), ranges));
            }
        }
    }

    // Entries that fail, in a third of the seeds: files the receiver cannot
    // create, files one of whose blocks cannot be read.
    let mut refused = BTreeSet::new();
    let mut unreadable = BTreeMap::new();
    let failing = rng.gen_bool(0.3);
    for (i, (path, bytes)) in files.iter().enumerate() {
        let untouched = !at_dest.contains_key(path) && !kept_bytes.contains_key(path);
        if !failing || !untouched {
            continue;
        }
        match rng.gen_range(0..8) {
            0 => {
                refused.insert(path.clone());
            }
            1 if !bytes.is_empty() => {
                let blocks = (bytes.len() as u64).div_ceil(u64::from(BS));
                unreadable.insert(i as u32 + 1, rng.gen_range(0..blocks));
            }
            _ => {}
        }
    }

    let mut sim = Sim::new(&latencies, &rates, ctrl_latency).configured(
        in_flight,
        max_rounds,
        checking.then_some(existing),
    );
    for link in &mut sim.links {
        link.period_ms = rng.gen_range(1..=4);
        link.jitter_ms = [0, 0, 5, 30][rng.gen_range(0..4)];
    }
    sim.ctrl_jitter_ms = [0, 10, 40][rng.gen_range(0..3)];
    if rng.gen_bool(0.3) {
        sim.ctrl_stall = (0.05, rng.gen_range(50..=400));
    }
    sim.corrupt_p = [0.0, 0.0, 0.005, 0.02, 0.08][rng.gen_range(0..5)];
    // Streams cut: never all but in one seed in ten.
    let all_cut = rng.gen_bool(0.1);
    let cut = if all_cut {
        streams
    } else {
        rng.gen_range(0..streams)
    };
    let mut order: Vec<usize> = (0..streams).collect();
    for i in 0..streams {
        order.swap(i, rng.gen_range(i..streams));
    }
    sim.kills = order[..cut]
        .iter()
        .map(|&stream| Kill {
            stream,
            at: rng.gen_range(0..=if all_cut { 600 } else { 1500 }),
            sender_after: rng.gen_range(0..=40),
            receiver_after: rng.gen_range(0..=40),
        })
        .collect();
    // One block in twenty seeds is damaged every time it is sent.
    let sendable: Vec<usize> = (0..files.len())
        .filter(|&i| !files[i].1.is_empty())
        .collect();
    if !sendable.is_empty() && rng.gen_bool(0.05) {
        let i = sendable[rng.gen_range(0..sendable.len())];
        let block = rng.gen_range(0..(files[i].1.len() as u64).div_ceil(u64::from(BS)));
        sim.doomed = Some((i as u32 + 1, block * u64::from(BS)));
    }
    // Half the seeds measure the links, so the endgame copies blocks.
    sim.measure = rng.gen_bool(0.5);
    sim.kept = kept;
    sim.refuse = refused.iter().cloned().collect();
    sim.unreadable = unreadable;
    sim.content = Some(Content {
        source: files.iter().cloned().collect(),
        placed: at_dest,
        ..Content::default()
    });

    let summary = format!(
        "{streams} streams (latency {latencies:?} ms, {rates:?} blocks every {:?} ms, jitter {:?} ms), \
         control {ctrl_latency} ms + {} jitter, stall {:?}; {} files {:?} bytes, {} dirs, \
         {} in flight, measured {}, {max_rounds} repair rounds, skip policy {checking}, {} partial; \
         corrupt p={}, doomed {:?}, cuts {:?}, refused {:?}, unreadable {:?}",
        sim.links.iter().map(|l| l.period_ms).collect::<Vec<_>>(),
        sim.links.iter().map(|l| l.jitter_ms).collect::<Vec<_>>(),
        sim.ctrl_jitter_ms,
        sim.ctrl_stall,
        files.len(),
        files.iter().map(|f| f.1.len()).collect::<Vec<_>>(),
        dirs.len(),
        in_flight,
        sim.measure,
        sim.kept.len(),
        sim.corrupt_p,
        sim.doomed,
        sim.kills,
        sim.refuse,
        sim.unreadable,
    );
    sim.rng = Some(StdRng::seed_from_u64(seed ^ 0x5eed));
    Scenario {
        sim,
        files,
        dirs,
        have,
        kept_bytes,
        refused,
        max_rounds,
        all_cut,
        summary,
    }
}

/// How a seed ended, when it ended as it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ending {
    Complete,
    PeerGone,
    TooManyRetries,
}

/// Runs one seed and checks its invariants.
fn run_seed(seed: u64) -> Result<Ending, String> {
    let Scenario {
        mut sim,
        files,
        dirs,
        have,
        kept_bytes,
        refused,
        max_rounds,
        all_cut,
        summary,
    } = scenario(seed);
    let fail = |what: String| Err(format!("{what}\n  scenario: {summary}"));
    for d in &dirs {
        sim.s.push(SendEntry::Entry(EntryMeta {
            path: d.as_str().into(),
            kind: EntryKind::Dir,
            mode: 0o755,
            mtime_s: 0,
            mtime_ns: 0,
        }));
    }
    for (path, bytes) in &files {
        let id = sim
            .s
            .push(Sim::file(path, bytes.len() as u64))
            .expect("a file");
        let c = sim.content.as_mut().expect("content");
        c.ids.insert(id, path.clone());
    }
    sim.s.finish_listing();

    let Some(result) = sim.try_run(BUDGET_MS) else {
        return fail(format!(
            "no end after {BUDGET_MS} ms of simulated time: sender complete {}, receiver \
             complete {}, {} finished, awaited streams {:?}",
            sim.s.is_complete(),
            sim.r.is_complete(),
            sim.r.finished().len(),
            sim.r.awaited_streams(),
        ));
    };
    // Repairs only ever answer losses.
    for (id, &asked) in &sim.requests {
        let lost = sim.losses.get(id).copied().unwrap_or(0);
        if asked > lost {
            return fail(format!(
                "file {id}: {asked} repair requests for {lost} lost transmissions"
            ));
        }
    }
    let c = sim.content.as_ref().expect("content");
    let path_of = |p: &str| {
        c.ids
            .iter()
            .find(|(_, q)| q.as_str() == p)
            .map(|(&id, _)| id)
    };
    match result {
        Ok(()) => {}
        Err(Error::PeerGone(why)) => {
            if !all_cut || !sim.links.iter().all(|l| l.dead) {
                return fail(format!("PeerGone with streams left: {why}"));
            }
            return Ok(Ending::PeerGone);
        }
        Err(Error::TooManyRetries { path, rounds }) => {
            let lost = path_of(&path).and_then(|id| sim.losses.get(&id).copied());
            if rounds != max_rounds || lost.unwrap_or(0) <= u64::from(max_rounds) {
                return fail(format!(
                    "TooManyRetries for {path} after {rounds} rounds of {max_rounds} with \
                     {lost:?} transmissions lost"
                ));
            }
            return Ok(Ending::TooManyRetries);
        }
        Err(e) => return fail(format!("unexpected error: {e:?}")),
    }

    // Complete: every file in place byte for byte, kept as it was, or
    // given up and reported at both ends; nothing else.
    let sorted = |mut v: Vec<String>| {
        v.sort_unstable();
        v
    };
    let (mut sent, mut kept_whole, mut failed) = (vec![], vec![], vec![]);
    for (id, (path, bytes)) in (1u32..).zip(&files) {
        let gave_up = sim.read_failed.contains(&id);
        if refused.contains(path) || gave_up {
            // (path, reported by the peer) at the sender and the receiver.
            failed.push((path.clone(), !gave_up, gave_up));
            if c.placed.contains_key(path) {
                return fail(format!("{path} was given up but is in place"));
            }
            continue;
        }
        if have.contains(path) {
            kept_whole.push(path.clone());
        } else {
            sent.push(path.clone());
            let due = bytes.len() as u64 - kept_bytes.get(path).copied().unwrap_or(0);
            let wrote = sim.written.get(&id).copied().unwrap_or(0);
            if wrote != due {
                return fail(format!("{path}: {wrote} bytes written for {due} missing"));
            }
        }
        match c.placed.get(path) {
            Some(placed) if placed == bytes => {}
            Some(placed) => {
                let at = placed.iter().zip(bytes).position(|(a, b)| a != b);
                return fail(format!(
                    "{path}: {} bytes in place differ from the {} sent (first at {at:?})",
                    placed.len(),
                    bytes.len()
                ));
            }
            None => return fail(format!("{path}: nothing in place")),
        }
    }
    let (sent, kept_whole) = (sorted(sent), sorted(kept_whole));
    let names =
        |outcomes: &[FileOutcome]| sorted(outcomes.iter().map(|f| f.path.clone()).collect());
    let failures = |f: &[EntryFailure], sender: bool| {
        let mut v: Vec<(String, bool)> = f.iter().map(|f| (f.path.display(), f.by_peer)).collect();
        v.sort_unstable();
        let mut want: Vec<(String, bool)> = failed
            .iter()
            .map(|(p, s, r)| (p.clone(), if sender { *s } else { *r }))
            .collect();
        want.sort_unstable();
        (v, want)
    };
    for (end, finished, skipped, failed_here) in [
        (
            "sender",
            sim.s.finished(),
            sim.s.skipped(),
            failures(sim.s.failed(), true),
        ),
        (
            "receiver",
            sim.r.finished(),
            sim.r.skipped(),
            failures(sim.r.failed(), false),
        ),
    ] {
        if names(finished) != sent || names(skipped) != kept_whole {
            return fail(format!(
                "the {end} finished {:?} and skipped {:?}; expected {sent:?} and {kept_whole:?}",
                names(finished),
                names(skipped)
            ));
        }
        for f in finished {
            let source = &c.source[&f.path];
            if f.size != source.len() as u64 || f.digest != digest_of(source) {
                return fail(format!("the {end}'s outcome for {} is {f:?}", f.path));
            }
        }
        if failed_here.0 != failed_here.1 {
            return fail(format!(
                "the {end} reports failures {:?}; expected {:?}",
                failed_here.0, failed_here.1
            ));
        }
    }
    if !c.disk.is_empty() || sim.r.unfinished().next().is_some() {
        return fail(format!(
            "temporary files left: {:?}",
            c.disk.keys().collect::<Vec<_>>()
        ));
    }
    let mut made = sim.dirs.clone();
    made.sort_unstable();
    if made != dirs {
        return fail(format!("directories made {made:?}, sent {dirs:?}"));
    }
    let written: u64 = sim.written.values().sum();
    if sim.r.stream_bytes().iter().sum::<u64>() != written
        || sim.s.peer_stream_bytes() != Some(sim.r.stream_bytes())
    {
        return fail(format!(
            "{written} bytes written, the receiver counted {:?} and told the sender {:?}",
            sim.r.stream_bytes(),
            sim.s.peer_stream_bytes()
        ));
    }
    if sim.r.blocks_corrupt() > sim.corrupt_seen {
        return fail(format!(
            "{} corrupt blocks counted, {} delivered",
            sim.r.blocks_corrupt(),
            sim.corrupt_seen
        ));
    }
    if sim.losses.is_empty() && sim.s.blocks_retransmitted() > 0 {
        return fail(format!(
            "{} blocks sent again though none was lost",
            sim.s.blocks_retransmitted()
        ));
    }
    Ok(Ending::Complete)
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number")),
    )
}

#[test]
fn random_transfers_end_complete_or_with_an_expected_error() {
    let (seeds, all_default) = match (env_u64("TERN_SIM_SEED"), env_u64("TERN_SIM_SEEDS")) {
        (Some(seed), _) => (seed..seed + 1, false),
        (None, Some(n)) => (0..n, n >= CI_SEEDS),
        (None, None) => (0..CI_SEEDS, true),
    };
    let rerun = |seed: u64| {
        format!(
            "rerun just this one: TERN_SIM_SEED={seed} cargo test --release -p tern-session \
             random_transfers -- --nocapture"
        )
    };
    let mut endings = BTreeMap::new();
    let mut failures = Vec::new();
    for seed in seeds {
        let outcome = catch_unwind(AssertUnwindSafe(|| run_seed(seed)));
        match outcome {
            Ok(Ok(ending)) => *endings.entry(ending).or_insert(0u64) += 1,
            Ok(Err(why)) => failures.push(format!("seed {seed}: {why}\n  {}", rerun(seed))),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let summary = catch_unwind(|| scenario(seed).summary).unwrap_or_default();
                failures.push(format!(
                    "seed {seed} panicked: {what}\n  scenario: {summary}\n  {}",
                    rerun(seed)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("random transfers: {endings:?}");
    if all_default {
        // The seeds reach every kind of ending, or the generator lost its
        // teeth.
        for ending in [Ending::Complete, Ending::PeerGone, Ending::TooManyRetries] {
            assert!(
                endings.contains_key(&ending),
                "no seed ended {ending:?}: {endings:?}"
            );
        }
    }
}
