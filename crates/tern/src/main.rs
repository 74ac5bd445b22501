//! `tern`: move large data sets over long, fast networks.
//!
//! A thin main, like ripgrep's: set up logging, parse the command line,
//! run the command, and turn the outcome into a documented exit code.

mod advise;
mod cli;
mod cmd;
mod console;
mod error;
mod exit;
mod fault;
mod location;
mod options;
mod probe;
mod report;
mod size;
mod ssh;

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
            eprintln!("tern: cannot start the runtime: {e}");
            return exit::Exit::General.into();
        }
    };
    match runtime.block_on(cmd::run(args, started)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern: {e:#}");
            exit::Exit::of(&e).into()
        }
    }
}
