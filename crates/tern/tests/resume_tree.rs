//! Recursive copies killed with SIGKILL resume (issue 12, item 5): a tree
//! of 20 files in subdirectories is copied with `tern cp -r --json`, paced
//! so that kills land mid-copy; the client or the daemon is killed at
//! random points (seeded; the seed is printed) three times in a row, each
//! time running the same command again, and a last uninterrupted run must
//! leave the tree at the destination the first run chose (`tdest/`, not
//! `tdest/tree20/`), identical to the source, with nothing else beside it,
//! having resumed bytes (`bytes_resumed` > 0). The built-in `--retries`
//! path is tested with the daemon killed and restarted under the client.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Rng, seed, tern};
use tern_testkit::daemon::{Daemon, signal};
use tern_testkit::files::random_file;
use tern_testkit::tree::{self, set_mtime};

/// Files in the tree.
const FILES: usize = 20;
/// Kills before the final run.
const KILLS: usize = 3;
/// Kills beyond those when the kills left nothing a later run could be
/// seen to resume (every kill landed between two files, or a pull's last
/// one did: through no fault of the copy).
const EXTRA_KILLS: usize = 2;
/// Pace of every copy (bits/s): about 10 MB/s, so the ~90 MiB tree takes
/// about 9 s and a kill polled every few milliseconds lands mid-copy.
const RATE: &str = "80M";
/// Block size of every run: small against the files (3 to 6 MiB), so a
/// file cut mid-copy has verified blocks to resume.
const BLOCK: u64 = 256 << 10;
/// Bound on any one wait for a copy to get somewhere or to end.
const WAIT: Duration = Duration::from_secs(90);

/// Builds `tree20` in `dir`: 20 files of 3 to 6 MiB (sizes not a multiple
/// of the block) in the top directory and three subdirectories, with
/// modes and nanosecond mtimes of their own. Returns the files (relative
/// path, size).
fn build_tree20(dir: &Path, rng: &mut Rng) -> BTreeMap<Vec<u8>, u64> {
    let mut files = BTreeMap::new();
    for d in ["", "sub1", "sub1/deeper", "sub2"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for i in 0..FILES {
        let sub = match i {
            0..=5 => "",
            6..=12 => "sub1/",
            13..=16 => "sub1/deeper/",
            _ => "sub2/",
        };
        let rel = format!("{sub}f{i:02}.dat");
        let len = (3 << 20) + rng.next() % (3 << 20);
        let path = dir.join(&rel);
        // Seeded by its length: distinct lengths, distinct contents.
        random_file(&path, len as usize);
        let mode = if i % 4 == 3 { 0o600 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        set_mtime(&path, (1_600_000_000 + i as i64, 1000 * i as u32 + 7));
        files.insert(rel.into_bytes(), len);
    }
    for (d, mode, mtime) in [
        ("sub1/deeper", 0o755, (1_500_000_003, 3)),
        ("sub1", 0o755, (1_500_000_001, 1)),
        ("sub2", 0o750, (1_500_000_002, 2)),
        ("", 0o755, (1_500_000_000, 0)),
    ] {
        let p = dir.join(d);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        set_mtime(&p, mtime);
    }
    files
}

/// Progress of a copy as seen on disk in `area` (the directory holding
/// the destination, where every partial, journal or temporary file of the
/// copy lives, whatever their names): bytes allocated by all regular
/// files, and by each file that is not yet complete at its final name.
struct Watch {
    area: PathBuf,
    dest: PathBuf,
    files: BTreeMap<Vec<u8>, u64>,
}

/// Bytes on disk in all, and of each unfinished file.
type Progress = (u64, BTreeMap<PathBuf, u64>);

impl Watch {
    /// The regular files in the area now, with their metadata (entries
    /// come and go while the copy runs: what vanished is skipped).
    fn files_now(&self) -> Vec<(PathBuf, std::fs::Metadata)> {
        let mut files = Vec::new();
        let mut dirs = vec![self.area.clone()];
        while let Some(d) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                match std::fs::symlink_metadata(&p) {
                    Ok(m) if m.is_dir() => dirs.push(p),
                    Ok(m) if m.is_file() => files.push((p, m)),
                    _ => {}
                }
            }
        }
        files
    }

    fn progress(&self) -> Progress {
        let mut total = 0;
        let mut unfinished = BTreeMap::new();
        for (p, m) in self.files_now() {
            let alloc = m.blocks() * 512;
            total += alloc;
            let finished = p.strip_prefix(&self.dest).ok().is_some_and(|rel| {
                use std::os::unix::ffi::OsStrExt;
                self.files.get(rel.as_os_str().as_bytes()) == Some(&m.size())
            });
            if !finished {
                unfinished.insert(p, alloc);
            }
        }
        (total, unfinished)
    }

    /// Waits until the copy `child` has `at` bytes on disk and a file it
    /// is writing now (not one left by an earlier run) has grown by four
    /// blocks, so the kill cuts a file with verified blocks to resume;
    /// returns the bytes then, or what went wrong (the copy ended first,
    /// or never got there).
    fn wait_for(&self, child: &mut Child, at: u64) -> Result<u64, String> {
        let start = Instant::now();
        let (_, before) = self.progress();
        loop {
            let (total, unfinished) = self.progress();
            let growing = unfinished
                .iter()
                .map(|(p, a)| a.saturating_sub(before.get(p).copied().unwrap_or(0)))
                .max()
                .unwrap_or(0);
            if total >= at && growing >= 4 * BLOCK {
                return Ok(total);
            }
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!(
                    "the copy ended ({}) before the kill, at {total} of {at} bytes",
                    show(Some(status))
                ));
            }
            if start.elapsed() > WAIT {
                return Err(format!(
                    "no kill point within {WAIT:?}: {total} of {at} bytes on disk, \
                     the file growing most grew by {growing}"
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Bytes of verified blocks that the journals in the area vouch for:
    /// what a run after a kill has to resume. A kill that lands between
    /// two files (the last one committed, the next one not yet written)
    /// leaves none, and then no run can resume anything.
    fn resumable(&self) -> u64 {
        let block_bytes = |journal: &str| -> u64 {
            journal
                .lines()
                .skip(1)
                .filter_map(|l| match l.split(' ').collect::<Vec<_>>()[..] {
                    [_, len, hash] if hash.len() == 16 => len.parse::<u64>().ok(),
                    _ => None,
                })
                .sum()
        };
        self.files_now()
            .into_iter()
            .filter(|(p, _)| p.to_string_lossy().ends_with(".partial.journal"))
            .map(|(p, _)| block_bytes(&std::fs::read_to_string(&p).unwrap_or_default()))
            .sum()
    }

    /// Waits until nothing changes on disk for 300 ms (a daemon whose
    /// client was killed has stopped writing), at most 10 s.
    fn settle(&self) {
        let start = Instant::now();
        let mut last = self.progress();
        let mut since = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
            let now = self.progress();
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= Duration::from_millis(300) {
                return;
            }
        }
    }
}

/// How a run ended, for messages.
fn show(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => format!("still running after {WAIT:?}, killed"),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => format!("{s}"),
        },
    }
}

/// Waits for `child` at most `WAIT`, killing it if it takes longer.
fn wait_bounded(child: &mut Child) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() > WAIT {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Victim {
    Client,
    Daemon,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Way {
    Push,
    Pull,
}

/// One test's directories, daemon and command.
struct Setup {
    dir: tempfile::TempDir,
    src: PathBuf,
    watch: Watch,
    /// None only while it is being restarted.
    daemon: Option<Daemon>,
    args: Vec<String>,
    runs: usize,
}

impl Setup {
    /// The tree, a daemon, and `tern cp -r --json … SRC DST` where DST
    /// (`tdest`) does not exist yet: pushed to the daemon's root, or pulled
    /// into `down/`.
    fn new(way: Way, rng: &mut Rng, retries: u32) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let p = |r: &str| dir.path().join(r);
        for d in ["root", "served", "down", "cfg"] {
            std::fs::create_dir(p(d)).unwrap();
        }
        let (src, area) = match way {
            Way::Push => (p("tree20"), p("root")),
            Way::Pull => (p("served/tree20"), p("down")),
        };
        let files = build_tree20(&src, rng);
        let root = if way == Way::Push {
            p("root")
        } else {
            p("served")
        };
        let daemon = common::serve(&root, &p("state")).start();
        let dest = area.join("tdest");
        let (from, to) = match way {
            Way::Push => (src.display().to_string(), daemon.url("tdest")),
            Way::Pull => (daemon.url("tree20"), dest.display().to_string()),
        };
        let mut args: Vec<String> = [
            "cp",
            "-r",
            "--json",
            "--no-progress",
            "-P",
            "4",
            "--block-size",
            "256K",
            "--rate-limit",
            RATE,
            "--retries",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend([retries.to_string(), from, to]);
        Setup {
            watch: Watch { area, dest, files },
            src,
            daemon: Some(daemon),
            args,
            runs: 0,
            dir,
        }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Starts the command; its stdout and stderr go to files (a full pipe
    /// must not stall it).
    fn spawn(&mut self) -> (Child, usize) {
        self.runs += 1;
        let n = self.runs;
        let child = tern()
            .args(&self.args)
            .env("XDG_CONFIG_HOME", self.p("cfg"))
            .stdout(File::create(self.p(&format!("run{n}.out"))).unwrap())
            .stderr(File::create(self.p(&format!("run{n}.err"))).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        (child, n)
    }

    fn out(&self, run: usize) -> String {
        std::fs::read_to_string(self.p(&format!("run{run}.out"))).unwrap_or_default()
    }

    fn err(&self, run: usize) -> String {
        std::fs::read_to_string(self.p(&format!("run{run}.err"))).unwrap_or_default()
    }

    /// `bytes_resumed` of run `run`'s report, if it printed one.
    fn resumed(&self, run: usize) -> Option<u64> {
        let v: serde_json::Value = serde_json::from_str(&self.out(run)).ok()?;
        v["bytes_resumed"].as_u64()
    }

    /// Bytes the daemon logged as kept for each file it resumed (it is the
    /// receiver of a push): "file N: resuming, B bytes kept from an
    /// earlier session".
    fn resumed_in_daemon_log(&self) -> Vec<u64> {
        let log = self
            .daemon
            .as_ref()
            .map(Daemon::log_text)
            .unwrap_or_default();
        log.lines()
            .filter_map(|l| l.split("resuming, ").nth(1))
            .filter_map(|rest| rest.split(" bytes kept").next())
            .filter_map(|n| n.parse().ok())
            .collect()
    }

    /// The last lines the daemon logged (it logs what it resumed).
    fn daemon_log_tail(&self) -> String {
        let log = self
            .daemon
            .as_ref()
            .map(Daemon::log_text)
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail: Vec<String> = lines[lines.len().saturating_sub(20)..]
            .iter()
            .map(|l| l.chars().take(200).collect())
            .collect();
        tail.join("\n")
    }

    /// Fails the test with `log`, the `problems` and the daemon's last
    /// words if there is any problem.
    fn conclude(&self, log: &str, problems: &[String]) {
        // Shown with --nocapture when all went well.
        println!("{log}");
        assert!(
            problems.is_empty(),
            "{log}problems:\n{}\ndaemon log (last lines):\n{}",
            problems.join("\n"),
            self.daemon_log_tail()
        );
    }

    /// Everything that differs between the source and the destination,
    /// and what else is beside the destination.
    fn differences(&self) -> Vec<tree::Difference> {
        let mut diffs = if self.watch.dest.exists() {
            tree::compare(&self.src, &self.watch.dest)
        } else {
            vec![tree::Difference {
                path: ".".into(),
                attr: "exists",
                reference: "dir".into(),
                actual: "absent".into(),
            }]
        };
        diffs.extend(tree::extra_beside(&self.watch.area, &["tdest"]));
        diffs
    }
}

/// Kills `victim` three times at random points of `way`, running the
/// same command again after each, then lets a last run finish; checks
/// the result.
fn kill_and_resume(test: &str, victim: Victim, way: Way) {
    let seed = seed(test);
    let mut rng = Rng(seed);
    let mut s = Setup::new(way, &mut rng, 0);
    let total: u64 = s.watch.files.values().sum();
    let mut log = format!(
        "{test}: seed {seed}; tree of {FILES} files, {total} bytes; command: tern {}\n",
        s.args.join(" ")
    );
    let mut problems = Vec::new();
    let mut last_at = 0u64;
    // Kills after which the journals vouched for blocks to resume, and
    // what the last kill left.
    let mut left_something = 0;
    let mut last_left = 0;
    let mut k = 0;
    // A push's receiving daemon logs every resume, so one kill that left
    // something shows one; a pull's receiver is the client, and a killed
    // client reports nothing, so the last kill must leave something (for
    // the final run to report).
    let shown = |left_something: usize, last_left: u64| match way {
        Way::Push => left_something > 0,
        Way::Pull => last_left > 0,
    };
    while k < KILLS || (!shown(left_something, last_left) && k < KILLS + EXTRA_KILLS) {
        // Kill k lands between 10 % + 25 % k and 30 % + 25 % k of the
        // tree, and at least 1 MiB beyond the kill before; an extra kill
        // (every one before landed between files) 1 MiB to 5 % further.
        let share = match k < KILLS {
            true => rng.between(0.10 + 0.25 * k as f64, 0.30 + 0.25 * k as f64),
            false => last_at as f64 / total as f64 + rng.between(0.0, 0.05),
        };
        let at = ((share * total as f64) as u64).max(last_at + (1 << 20));
        k += 1;
        if k > KILLS && at > total * 9 / 10 {
            break;
        }
        let (mut child, run) = s.spawn();
        match s.watch.wait_for(&mut child, at) {
            Ok(got) => {
                last_at = got;
                let status = match victim {
                    Victim::Client => {
                        signal(child.id(), "KILL");
                        let status = wait_bounded(&mut child);
                        s.watch.settle();
                        status
                    }
                    Victim::Daemon => {
                        let again = s.daemon.take().unwrap().kill9();
                        let status = wait_bounded(&mut child);
                        // Back on its port, with its root and certificate,
                        // once the client has given up.
                        s.daemon = Some(again.start());
                        status
                    }
                };
                log.push_str(&format!(
                    "run {run}: {victim:?} killed at {got} bytes on disk (aimed at {at}, {:.0} %); \
                     the client ended with {}\n",
                    100.0 * share,
                    show(status)
                ));
                let resumable = s.watch.resumable();
                log.push_str(&format!(
                    "run {run}: the journals vouch for {resumable} bytes to resume\n"
                ));
                if resumable > 0 {
                    left_something += 1;
                }
                last_left = resumable;
                if victim == Victim::Daemon && status.is_some_and(|s| s.success()) {
                    problems.push(format!(
                        "run {run}: the copy succeeded with its daemon killed"
                    ));
                }
                if let Some(r) = s.resumed(run) {
                    log.push_str(&format!("run {run}: bytes_resumed {r}\n"));
                }
            }
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                problems.push(format!(
                    "run {run} (before kill {k}): {why}; stderr:\n{}",
                    s.err(run)
                ));
                break;
            }
        }
    }
    // The same command once more, left alone.
    let (mut child, last) = s.spawn();
    let status = wait_bounded(&mut child);
    log.push_str(&format!("run {last} (final): {}\n", show(status)));
    finish(&s, status, last, &mut log, &mut problems);
    s.conclude(&log, &problems);
}

/// The checks on a final run `last`: it succeeded, some run resumed
/// bytes, the destination is the source's twin and nothing is beside it.
fn finish(
    s: &Setup,
    status: Option<ExitStatus>,
    last: usize,
    log: &mut String,
    problems: &mut Vec<String>,
) {
    if !status.is_some_and(|st| st.success()) {
        problems.push(format!(
            "the final run failed ({}); stderr:\n{}",
            show(status),
            s.err(last)
        ));
    }
    let resumed: Vec<(usize, u64)> = (1..=last)
        .filter_map(|r| s.resumed(r).map(|b| (r, b)))
        .collect();
    log.push_str(&format!(
        "bytes_resumed of the runs that reported: {resumed:?}\n"
    ));
    // A killed client reports nothing (a client whose daemon was killed
    // does: its failure's JSON object); when the last kill landed between
    // files, the final run finds nothing to resume, and an earlier run's
    // resume is seen in its report or the receiving daemon's log instead.
    let logged = s.resumed_in_daemon_log();
    log.push_str(&format!(
        "bytes the daemon logged as kept from an earlier session: {logged:?}\n"
    ));
    if !resumed.iter().any(|&(_, b)| b > 0) && !logged.iter().any(|&b| b > 0) {
        problems.push(format!(
            "no run resumed anything (bytes_resumed 0 or no report, and the daemon \
             logged no resume): {resumed:?}; final stderr:\n{}",
            s.err(last)
        ));
    }
    let diffs = s.differences();
    if !diffs.is_empty() {
        problems.push(format!(
            "the destination {} is not the source's twin, or something is beside it \
             (source's value, then the copy's):\n{}",
            s.watch.dest.display(),
            tree::show(&diffs)
        ));
    }
}

#[test]
fn a_push_whose_client_is_killed_three_times_resumes_to_the_same_tree() {
    kill_and_resume(
        "a_push_whose_client_is_killed_three_times_resumes_to_the_same_tree",
        Victim::Client,
        Way::Push,
    );
}

#[test]
fn a_push_whose_daemon_is_killed_three_times_resumes_to_the_same_tree() {
    kill_and_resume(
        "a_push_whose_daemon_is_killed_three_times_resumes_to_the_same_tree",
        Victim::Daemon,
        Way::Push,
    );
}

#[test]
fn a_pull_whose_daemon_is_killed_three_times_resumes_to_the_same_tree() {
    kill_and_resume(
        "a_pull_whose_daemon_is_killed_three_times_resumes_to_the_same_tree",
        Victim::Daemon,
        Way::Pull,
    );
}

#[test]
fn a_pull_whose_client_is_killed_three_times_resumes_to_the_same_tree() {
    kill_and_resume(
        "a_pull_whose_client_is_killed_three_times_resumes_to_the_same_tree",
        Victim::Client,
        Way::Pull,
    );
}

#[test]
fn retries_carry_a_tree_push_over_two_daemon_restarts() {
    let test = "retries_carry_a_tree_push_over_two_daemon_restarts";
    let seed = seed(test);
    let mut rng = Rng(seed);
    // Backoffs of 1, 2, 4 and 8 s: enough for two restarts.
    let mut s = Setup::new(Way::Push, &mut rng, 4);
    let total: u64 = s.watch.files.values().sum();
    let mut log = format!(
        "{test}: seed {seed}; {total} bytes; command: tern {}\n",
        s.args.join(" ")
    );
    let mut problems = Vec::new();
    let (mut child, run) = s.spawn();
    let mut last_at = 0;
    for k in 0..2 {
        let share = rng.between(0.15 + 0.35 * k as f64, 0.40 + 0.35 * k as f64);
        let at = ((share * total as f64) as u64).max(last_at + (1 << 20));
        match s.watch.wait_for(&mut child, at) {
            Ok(got) => {
                last_at = got;
                s.daemon = Some(s.daemon.take().unwrap().kill9_and_restart());
                log.push_str(&format!(
                    "daemon killed at {got} bytes on disk (aimed at {at}) and restarted\n"
                ));
            }
            Err(why) => {
                problems.push(format!("kill {}: {why}", k + 1));
                break;
            }
        }
    }
    let status = wait_bounded(&mut child);
    log.push_str(&format!("the copy ended: {}\n", show(status)));
    let err = s.err(run);
    if !err.contains("trying again") {
        problems.push(format!(
            "the client did not say it was trying again:\n{err}"
        ));
    }
    finish(&s, status, run, &mut log, &mut problems);
    s.conclude(&log, &problems);
}
