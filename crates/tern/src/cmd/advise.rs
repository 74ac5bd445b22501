//! `tern advise HOST`: what an advisor advises for the path to a host.

use anyhow::{Context, Result};
use tern_advisor::{Advice, AdvisorClient};

use crate::advice::describe;
use crate::cli::AdviseArgs;
use crate::console::Console;

/// The advisor URL `tern advise` asks when not told.
fn default_server() -> String {
    std::env::var("TERN_ADVISOR")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| tern_advisor::client::DEFAULT_URL.to_string())
}

/// `tern advise HOST`.
pub async fn run(args: AdviseArgs) -> Result<()> {
    tern_advisor::model::validate_host(&args.host)?;
    let console = Console::for_advise(&args);
    let client = AdvisorClient::new(&args.server.unwrap_or_else(default_server))?;
    let answer = client.advice_json(&args.host).await?;
    let advice: Advice = serde_json::from_value(answer.clone()).context("the advisor's answer")?;
    // Nothing no network can do is printed or acted on.
    let advice = client.checked(advice)?;
    console.result(&answer, || describe(&advice, client.url()));
    Ok(())
}
