//! `tern advisor`: the advisor without a daemon.

use anyhow::Result;

use crate::cli::AdvisorCmdArgs;
use crate::console::Console;
use crate::host;
use crate::signals::{self, stopped};

/// Runs the advisor and its API until SIGINT or SIGTERM.
pub async fn run(args: AdvisorCmdArgs) -> Result<()> {
    let state_dir = host::state_dir(args.state_dir.as_deref())?;
    let stop = signals::stop_on_signal();
    let running =
        crate::advisor::start(&args.advisor, &args.http, &state_dir, None, stop.clone()).await?;
    let store = running.advisor.service().store().location().to_string();
    Console::for_advisor(&args).banner(
        serde_json::json!({"http": running.addr.to_string(), "db": store}),
        format!("tern advisor: http://{} (archive {store})\n", running.addr),
    );
    stopped(stop).await;
    Ok(())
}
