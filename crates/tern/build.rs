//! Build script: the commit that `tern --version` names, as
//! `git rev-parse --short HEAD` says, with `-dirty` when tracked files
//! differ from it, or `unknown` where there is no git (a source tarball).
//! `TERN_COMMIT` set at build time wins (for packagers).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn commit() -> String {
    let Some(short) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if !changes.is_empty() => format!("{short}-dirty"),
        _ => short,
    }
}

/// The files whose change means another commit: HEAD, the branch it
/// names and the packed refs (a worktree's HEAD lives apart from them).
fn watched() -> Vec<PathBuf> {
    let dir = |arg| git(&["rev-parse", "--path-format=absolute", arg]).map(PathBuf::from);
    let (Some(git_dir), Some(common)) = (dir("--git-dir"), dir("--git-common-dir")) else {
        return Vec::new();
    };
    let mut files = vec![
        git_dir.join("HEAD"),
        git_dir.join("index"),
        common.join("packed-refs"),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        files.push(common.join(branch));
    }
    files.retain(|f| Path::exists(f));
    files
}

fn main() {
    println!("cargo:rerun-if-env-changed=TERN_COMMIT");
    let commit = match std::env::var("TERN_COMMIT") {
        Ok(c) if !c.is_empty() => c,
        _ => {
            for file in watched() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
            // Edits to tern's own sources change -dirty.
            println!("cargo:rerun-if-changed=src");
            commit()
        }
    };
    println!("cargo:rustc-env=TERN_COMMIT={commit}");
}
