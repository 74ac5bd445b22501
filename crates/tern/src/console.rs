//! Where and how tern talks to its user: one [`Console`] per command says
//! whether results are for people or one JSON object for scripts, whether
//! remarks along the way are kept quiet, and whether a progress bar is
//! drawn. Results go to stdout; summaries, remarks and warnings to
//! stderr.

use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use tern_engine::client::{self, Endpoint};
use tern_engine::transfer::Progress;

use crate::cli::{AdviseArgs, AdvisorCmdArgs, ServeArgs, TransferArgs};
use crate::report::{self, FailedEntry, FailureReport, Report};
use crate::size::{human_bytes, human_rate};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Summaries for people (on stderr for transfers).
    Human,
    /// One JSON object on stdout (`--json`).
    Json,
}

/// Whether a progress bar is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressBars {
    /// When stderr is a terminal and the output is not JSON.
    Auto,
    /// Always (`--progress`).
    Always,
    /// Never (`--no-progress`).
    Never,
}

/// Whether this process printed its result (a run prints one).
static REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The output of one command.
#[derive(Debug, Clone, Copy)]
pub struct Console {
    format: Format,
    /// Remarks along the way (what the advisor said) are not printed.
    quiet: bool,
    progress: ProgressBars,
}

impl Console {
    /// Prints in `format`; remarks are kept quiet under JSON, whose
    /// readers want the one object.
    pub fn new(format: Format, progress: ProgressBars) -> Console {
        Console {
            format,
            quiet: format == Format::Json,
            progress,
        }
    }

    fn with_json_flag(json: bool, progress: ProgressBars) -> Console {
        let format = if json { Format::Json } else { Format::Human };
        Console::new(format, progress)
    }

    /// The console of `tern cp` and `perf`: `--json`,
    /// `--progress` and `--no-progress`.
    pub fn for_transfer(t: &TransferArgs) -> Console {
        let progress = if t.no_progress {
            ProgressBars::Never
        } else if t.progress {
            ProgressBars::Always
        } else {
            ProgressBars::Auto
        };
        Console::with_json_flag(t.json, progress)
    }

    /// The console of `tern serve`.
    pub fn for_serve(args: &ServeArgs) -> Console {
        Console::with_json_flag(args.json, ProgressBars::Never)
    }

    /// The console of `tern advisor`.
    pub fn for_advisor(args: &AdvisorCmdArgs) -> Console {
        Console::with_json_flag(args.json, ProgressBars::Never)
    }

    /// The console of `tern advise`.
    pub fn for_advise(args: &AdviseArgs) -> Console {
        Console::with_json_flag(args.json, ProgressBars::Never)
    }

    /// Prints a server's startup lines on stdout (`json` as one line, or
    /// `human` as it is), best effort: a daemon whose stdout was closed
    /// must keep serving, not die of a broken pipe.
    pub fn banner(&self, json: serde_json::Value, human: String) {
        let text = match self.format {
            Format::Json => format!("{json}\n"),
            Format::Human => human,
        };
        banner_line(&text);
    }

    /// Prints a command's result on stdout: `json` as one line, or what
    /// `human` writes.
    pub fn result<T: Serialize + ?Sized>(&self, json: &T, human: impl FnOnce() -> String) {
        REPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.format {
            Format::Json => result_text(&format!(
                "{}\n",
                serde_json::to_string(json).expect("result serializes")
            )),
            Format::Human => result_text(&human()),
        }
    }

    /// Prints a transfer's report: the JSON object on stdout, or a
    /// summary on stderr. What was not copied goes to stderr whatever the
    /// format, as rsync's errors do.
    pub fn report(&self, r: &Report) {
        REPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.format {
            Format::Json => {
                result_text(&format!(
                    "{}\n",
                    serde_json::to_string(r).expect("report serializes")
                ));
                self.failures(&r.failed);
            }
            Format::Human => {
                for line in r.human_lines() {
                    say(&line);
                }
            }
        }
    }

    /// Prints, under `--json`, the object of a copy that failed before it
    /// could report (the error itself goes to stderr either way); nothing
    /// when this run printed its report (stdout holds one object).
    pub fn failure(&self, r: &FailureReport) {
        if self.format == Format::Json && !REPORTED.load(std::sync::atomic::Ordering::Relaxed) {
            result_text(&format!(
                "{}\n",
                serde_json::to_string(r).expect("report serializes")
            ));
        }
    }

    /// Lists on stderr the entries that could not be copied.
    pub fn failures(&self, failed: &[FailedEntry]) {
        for line in report::failed_lines(failed) {
            say(&line);
        }
    }

    /// A remark along the way (`tern: …` on stderr), unless quiet.
    pub fn note(&self, msg: impl Display) {
        if !self.quiet {
            say(&format!("tern: {msg}"));
        }
    }

    /// A warning (`tern: …` on stderr), whatever the format.
    pub fn warn(&self, msg: impl Display) {
        say(&format!("tern: {msg}"));
    }

    /// Says where the fingerprint of a daemon met for the first time was
    /// recorded.
    pub fn first_contact(&self, outcome: &client::Outcome, ep: &Endpoint) {
        if let Some(path) = &outcome.recorded {
            self.warn(format!(
                "first contact with {}: recorded its fingerprint {} in {}",
                ep.host_port(),
                outcome.fingerprint,
                path.display()
            ));
        }
    }

    /// Starts a progress bar fed from `progress`, when this console draws
    /// one. A transfer for a time (`tern perf --time`) passes it: the bar
    /// then fills with time.
    pub fn progress(&self, progress: &Arc<Progress>, timed: Option<Duration>) -> ProgressDisplay {
        let enabled = match self.progress {
            ProgressBars::Always => true,
            ProgressBars::Never => false,
            ProgressBars::Auto => self.format == Format::Human && std::io::stderr().is_terminal(),
        };
        if enabled {
            ProgressDisplay::start(progress, timed)
        } else {
            ProgressDisplay {
                bar: None,
                task: None,
            }
        }
    }
}

/// Writes a result to stdout. A reader that went away (`tern … | head`)
/// is no failure of the command, which has done its work: nothing is
/// said; any other failure to write is said on stderr.
fn result_text(text: &str) {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => say(&format!("tern: cannot write the result to stdout: {e}")),
    }
}

/// Writes one line to stderr; a closed stderr (`tern cp … 2>&1 | head -1`)
/// is no reason to fail a copy, as `eprintln!`'s panic made it.
pub fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Writes `text` to stdout and flushes, ignoring failures.
fn banner_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// A progress bar fed from the engine's counters. Rates are in bits per
/// second, as in the summary. While the total is unknown it is a spinner
/// with the time spent; once known, a bar with the time left.
pub struct ProgressDisplay {
    bar: Option<ProgressBar>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The rate is measured over about this long.
const RATE_WINDOW: Duration = Duration::from_secs(2);
const TICK: Duration = Duration::from_millis(200);

/// What one redraw shows.
#[derive(Debug, Clone, PartialEq)]
enum Frame {
    /// Bytes moved; how much in all is not known yet.
    Counting { bytes: u64 },
    /// Bytes of a known total.
    OfTotal { bytes: u64, total: u64 },
    /// Everything moved: digests, renames and syncs remain.
    Finishing { total: u64 },
    /// A timed run: so far, of its time.
    Timed {
        bytes: u64,
        elapsed: Duration,
        of: Duration,
    },
}

impl Frame {
    fn of(bytes: u64, total: u64, elapsed: Duration, timed: Option<Duration>) -> Frame {
        match timed {
            Some(of) => Frame::Timed {
                bytes,
                elapsed: elapsed.min(of),
                of,
            },
            None if total == 0 => Frame::Counting { bytes },
            None if bytes >= total => Frame::Finishing { total },
            None => Frame::OfTotal { bytes, total },
        }
    }

    fn template(&self) -> &'static str {
        match self {
            Frame::Counting { .. } => "{spinner} {elapsed:>4} {msg}",
            Frame::OfTotal { .. } => "{msg} {bar:30} ETA {eta}",
            Frame::Finishing { .. } => "{spinner} {elapsed:>4} {msg}",
            Frame::Timed { .. } => "{msg} {bar:30}",
        }
    }

    /// The words beside the bar, with `rate` in bits per second.
    fn message(&self, rate: f64) -> String {
        let rate = human_rate(rate);
        match self {
            Frame::Counting { bytes } => format!("{} so far, {rate}", human_bytes(*bytes)),
            Frame::OfTotal { bytes, total } => {
                format!(
                    "{:>10} / {:<10} {rate:>14}",
                    human_bytes(*bytes),
                    human_bytes(*total)
                )
            }
            Frame::Finishing { total } => format!(
                "{} moved; verifying and putting files in place",
                human_bytes(*total)
            ),
            Frame::Timed { bytes, elapsed, of } => format!(
                "{:>5.1} s / {:.0} s {:>10} {rate:>14}",
                elapsed.as_secs_f64(),
                of.as_secs_f64(),
                human_bytes(*bytes)
            ),
        }
    }

    /// Where the bar stands: bytes, or milliseconds of a timed run.
    fn position(&self) -> (u64, u64) {
        match self {
            Frame::Counting { bytes } => (*bytes, 0),
            Frame::OfTotal { bytes, total } => (*bytes, *total),
            Frame::Finishing { total } => (*total, *total),
            Frame::Timed { elapsed, of, .. } => (elapsed.as_millis() as u64, of.as_millis() as u64),
        }
    }
}

/// Bits per second over the samples of the last [`RATE_WINDOW`].
fn rate_of(samples: &std::collections::VecDeque<(std::time::Instant, u64)>) -> f64 {
    match (samples.front(), samples.back()) {
        (Some(&(t0, b0)), Some(&(t1, b1))) if t1 > t0 => {
            b1.saturating_sub(b0) as f64 * 8.0 / (t1 - t0).as_secs_f64()
        }
        _ => 0.0,
    }
}

impl ProgressDisplay {
    fn start(progress: &Arc<Progress>, timed: Option<Duration>) -> ProgressDisplay {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let (b, p) = (bar.clone(), progress.clone());
        let task = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let mut samples = std::collections::VecDeque::new();
            let mut shown: Option<&'static str> = None;
            loop {
                let now = std::time::Instant::now();
                let bytes = p.bytes.load(Ordering::Relaxed);
                samples.push_back((now, bytes));
                while samples.front().is_some_and(|&(t, _)| now - t > RATE_WINDOW) {
                    samples.pop_front();
                }
                let total = p.total.load(Ordering::Relaxed);
                let frame = Frame::of(bytes, total, now - started, timed);
                let template = frame.template();
                if shown != Some(template) {
                    b.set_style(
                        ProgressStyle::with_template(template)
                            .expect("template")
                            .progress_chars("=> "),
                    );
                    shown = Some(template);
                }
                let (position, length) = frame.position();
                if length > 0 {
                    b.set_length(length);
                }
                b.set_position(position);
                b.set_message(frame.message(rate_of(&samples)));
                tokio::time::sleep(TICK).await;
            }
        });
        ProgressDisplay {
            bar: Some(bar),
            task: Some(task),
        }
    }

    /// Stops drawing and clears the bar.
    pub fn finish(self) {
        if let Some(t) = self.task {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_what_it_knows_in_bits() {
        let at = Duration::from_secs(1);
        // No total yet: a count, not "0 B / 0 B".
        let f = Frame::of(5 << 20, 0, at, None);
        assert_eq!(f, Frame::Counting { bytes: 5 << 20 });
        let words = f.message(8e6);
        assert!(words.contains("5.00 MiB so far, 8.00 Mbit/s"), "{words}");
        assert!(!words.contains("/ 0 B"), "{words}");
        // A total: bytes of it, the rate in bits as the summary has it.
        let f = Frame::of(1 << 30, 2 << 30, at, None);
        let words = f.message(2.4e9);
        assert!(words.contains("1.00 GiB / 2.00 GiB"), "{words}");
        assert!(words.contains("2.40 Gbit/s"), "{words}");
        assert!(!words.contains("MiB/s"), "{words}");
        // All moved: the end is named, not a falling rate.
        let f = Frame::of(2 << 30, 2 << 30, at, None);
        assert!(f.message(1.0).contains("verifying"), "{}", f.message(1.0));
        // A timed run fills with time.
        let f = Frame::of(
            281 << 20,
            281 << 20,
            Duration::from_secs(3),
            Some(Duration::from_secs(10)),
        );
        assert_eq!(f.position(), (3000, 10_000));
        assert!(
            f.message(1e9).contains("3.0 s / 10 s"),
            "{}",
            f.message(1e9)
        );
    }

    #[test]
    fn the_rate_is_over_the_recent_window() {
        let t0 = std::time::Instant::now();
        let samples: std::collections::VecDeque<_> =
            [(t0, 0), (t0 + Duration::from_secs(1), 125_000_000)].into();
        assert_eq!(rate_of(&samples), 1e9);
        assert_eq!(rate_of(&std::collections::VecDeque::new()), 0.0);
    }
}
