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
use crate::report::{self, FailedEntry, Report};

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

    /// The console of `tern cp`, `perf` and `probe`: `--json`,
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
        match self.format {
            Format::Json => println!(
                "{}",
                serde_json::to_string(json).expect("result serializes")
            ),
            Format::Human => print!("{}", human()),
        }
    }

    /// Prints a transfer's report: the JSON object on stdout, or a
    /// summary on stderr. What was not copied goes to stderr whatever the
    /// format, as rsync's errors do.
    pub fn report(&self, r: &Report) {
        match self.format {
            Format::Json => {
                println!("{}", serde_json::to_string(r).expect("report serializes"));
                self.failures(&r.failed);
            }
            Format::Human => {
                for line in r.human_lines() {
                    eprintln!("{line}");
                }
            }
        }
    }

    /// Lists on stderr the entries that could not be copied.
    pub fn failures(&self, failed: &[FailedEntry]) {
        for line in report::failed_lines(failed) {
            eprintln!("{line}");
        }
    }

    /// A remark along the way (`tern: …` on stderr), unless quiet.
    pub fn note(&self, msg: impl Display) {
        if !self.quiet {
            eprintln!("tern: {msg}");
        }
    }

    /// A warning (`tern: …` on stderr), whatever the format.
    pub fn warn(&self, msg: impl Display) {
        eprintln!("tern: {msg}");
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
    /// one.
    pub fn progress(&self, progress: &Arc<Progress>) -> ProgressDisplay {
        let enabled = match self.progress {
            ProgressBars::Always => true,
            ProgressBars::Never => false,
            ProgressBars::Auto => self.format == Format::Human && std::io::stderr().is_terminal(),
        };
        if enabled {
            ProgressDisplay::start(progress)
        } else {
            ProgressDisplay {
                bar: None,
                task: None,
            }
        }
    }
}

/// Writes `text` to stdout and flushes, ignoring failures.
fn banner_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// A progress bar fed from the engine's counters.
pub struct ProgressDisplay {
    bar: Option<ProgressBar>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ProgressDisplay {
    fn start(progress: &Arc<Progress>) -> ProgressDisplay {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{bytes:>10} / {total_bytes:<10} {bar:30} {binary_bytes_per_sec:>12}  ETA {eta}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        let (b, p) = (bar.clone(), progress.clone());
        let task = tokio::spawn(async move {
            loop {
                let total = p.total.load(Ordering::Relaxed);
                if total > 0 {
                    b.set_length(total);
                }
                b.set_position(p.bytes.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(200)).await;
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
