//! The dispatcher: one module per command, each turning its parsed
//! arguments into engine calls and reports. Commands use the modules
//! below them and never one another, nor this one.

mod advise;
mod advisor;
mod cp;
mod docs;
mod perf;
mod probe;
mod serve;

use std::time::Instant;

use anyhow::Result;

use crate::cli::{Cli, Command};

/// Runs the parsed command; `started` is when the process started.
pub async fn run(cli: Cli, started: Instant) -> Result<()> {
    match cli.command {
        Command::Cp(args) => cp::run(args, started).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Perf(args) => perf::run(args, started).await,
        Command::Probe(args) => probe::run(args).await,
        Command::Advise(args) => advise::run(args).await,
        Command::Advisor(args) => advisor::run(args).await,
        Command::Man(args) => docs::man(&args),
        Command::Completions(args) => docs::completions(&args),
    }
}
