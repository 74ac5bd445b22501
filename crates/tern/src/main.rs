//! `tern`: move large data sets over long, fast networks.
//!
//! A thin main, like ripgrep's: set up logging, parse the command line,
//! run the command, and turn the outcome into a documented exit code.
//!
//! # Layers
//!
//! Each module uses only modules of the layers below its own, so nothing
//! calls back up and the module graph has no cycles (`layering.rs`
//! checks this against the sources):
//!
//! 1. `main`: the process (logging, runtime, exit code).
//! 2. `cmd`: the dispatcher, a match on the subcommand.
//! 3. `cmd::{cp, perf, serve, probe, advise, advisor, docs}`: one module
//!    per command (`docs`: the generated man pages and completions); they
//!    never use one another; `cmd::cp::third_party` is `cp` between two
//!    daemons.
//! 4. What commands share: `ssh_session` (one session with a remote tern
//!    started over ssh), `consult` (`--advisor`: advice a transfer starts
//!    from, and its report back), `advisor` (running the advisor).
//! 5. `options` (every converter from arguments to engine values, every
//!    `ClientOptions`), `retry` (running a copy again).
//! 6. `ssh` (the ssh process and its once line), `console` (all output).
//! 7. `cli` (the clap definitions).
//! 8. `exit` (exit codes and the `--help` table), `addr` (addresses on
//!    the command line), `advice` (advice as text), `report` (what a
//!    transfer did), `path_memory` (what the last copy to a daemon
//!    learned of the path).
//! 9. `report::paths` (one line per path of a report), `report::failure` (the
//!    object of a copy that failed before its report), `cli::values`
//!    (the options' named choices and checked values).
//! 10. Leaves: `error` (the binary's own errors), `size`, `location`,
//!     `fault` (test hooks, with the `fault-injection` feature), `host`
//!     (state directory, open-files limit), `signals`, `responder` (UDP
//!     probe responder).

mod addr;
mod advice;
mod advisor;
mod cli;
mod cmd;
mod console;
mod consult;
mod error;
mod exit;
mod fault;
mod host;
#[cfg(test)]
mod layering;
mod location;
mod options;
mod path_memory;
mod report;
mod responder;
mod retry;
mod signals;
mod size;
mod ssh;
mod ssh_session;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

fn main() -> ExitCode {
    let started = Instant::now();
    let args = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(args.log_level()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            console::say(&format!("tern: cannot start the runtime: {e}"));
            return exit::Exit::General.into();
        }
    };
    match runtime.block_on(cmd::run(args, started)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            console::say(&format!("tern: {}", error::describe(&e)));
            exit::Exit::of(&e).into()
        }
    }
}
