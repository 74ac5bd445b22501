//! This process on its host: where state is kept, and the open-files
//! limit.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// `--state-dir`, or the default: `$XDG_STATE_HOME/tern` or
/// `~/.local/state/tern`.
pub fn state_dir(given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(d) => Ok(d.to_path_buf()),
        None => default_state_dir(),
    }
}

fn default_state_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(d).join("tern"));
    }
    let home =
        std::env::var_os("HOME").context("neither --state-dir, XDG_STATE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/state/tern"))
}

/// Raises the open-files limit to the hard limit, as servers do: a daemon,
/// or a copy of many streams, needs more than the usual soft default.
pub fn raise_open_files() {
    match tern_engine::server::raise_open_file_limit() {
        Ok((before, after)) if after > before => {
            tracing::debug!("open files: soft limit raised from {before} to {after}");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open-files limit: {e}"),
    }
}
