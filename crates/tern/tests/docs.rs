//! What tern says about itself, as users read it: `--help` of each command,
//! the manual pages and shell completions generated from the same
//! definitions, `--version`, and the demo's output while it builds. (The
//! README's option tables are checked against `--help` by a unit test of
//! `cmd::docs`.)

use std::path::Path;
use std::process::Output;

mod common;
use common::tern;

fn run(args: &[&str]) -> Output {
    let out = tern().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "tern {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(run(args).stdout).unwrap()
}

#[test]
fn each_command_lists_only_the_options_it_uses() {
    let probe = stdout(&["probe", "--help"]);
    for unused in [
        "--retries",
        "--compress",
        "--stall-timeout",
        "--advisor",
        "--progress",
        "--ssh",
    ] {
        assert!(!probe.contains(unused), "probe --help lists {unused}");
    }
    for used in [
        "--streams",
        "--protect",
        "--io-timeout",
        "--known-hosts",
        "--json",
    ] {
        assert!(probe.contains(used), "probe --help lacks {used}");
    }
    let perf = stdout(&["perf", "--help"]);
    assert!(!perf.contains("--retries"), "perf never retries");
    assert!(perf.contains("--stall-timeout") && perf.contains("--ssh-timeout"));
    assert!(stdout(&["cp", "--help"]).contains("--retries"));
    let refused = tern()
        .args(["probe", "host", "--retries", "3"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
}

#[test]
fn serve_help_tells_the_targets_file_format() {
    for cmd in ["serve", "advisor"] {
        let help = stdout(&[cmd, "--help"]);
        assert!(help.contains("[group=NAME]"), "{cmd} --help:\n{help}");
    }
}

#[test]
fn man_pages_are_written_for_every_command_with_its_options() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let listed = stdout(&["man", out.to_str().unwrap()]);
    for page in [
        "tern.1",
        "tern-cp.1",
        "tern-serve.1",
        "tern-perf.1",
        "tern-probe.1",
        "tern-advise.1",
        "tern-advisor.1",
    ] {
        assert!(listed.contains(page), "{page} not listed:\n{listed}");
        assert!(out.join(page).is_file(), "{page} missing");
    }
    assert!(!out.join("tern-man.1").exists());
    let page = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    let cp = page("tern-cp.1");
    for option in [
        r"\-\-skip\-existing",
        r"\-\-retries",
        r"\-\-known\-hosts",
        r"\-\-ssh",
    ] {
        assert!(cp.contains(option), "tern-cp.1 lacks {option}");
    }
    assert!(cp.contains("Examples:"), "tern-cp.1 lacks the examples");
    assert!(!page("tern-probe.1").contains(r"\-\-retries"));
    assert!(page("tern.1").contains("Exit codes:"));
}

#[test]
fn completion_scripts_know_every_command() {
    let bash = stdout(&["completions", "bash"]);
    for cmd in ["cp", "serve", "perf", "probe", "advise", "advisor"] {
        assert!(bash.contains(&format!("tern,{cmd})")), "bash lacks {cmd}");
    }
    assert!(bash.contains("--skip-existing") && bash.contains("complete -F _tern"));
    assert!(stdout(&["completions", "zsh"]).contains("#compdef tern"));
    assert!(stdout(&["completions", "fish"]).contains("complete -c tern"));
    let unknown = tern().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn version_names_the_commit() {
    let version = stdout(&["--version"]);
    let commit = version
        .trim()
        .strip_suffix(')')
        .and_then(|v| v.split_once(" (commit "))
        .map(|(_, c)| c)
        .unwrap_or_else(|| panic!("no commit in {version:?}"));
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    assert!(
        hash == "unknown" || (hash.len() >= 7 && hash.chars().all(|c| c.is_ascii_hexdigit())),
        "{version:?}"
    );
}

#[test]
fn the_demo_says_what_it_does_while_it_builds() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo.sh");
    let script = std::fs::read_to_string(demo).unwrap();
    let lines: Vec<&str> = script.lines().map(str::trim).collect();
    for (i, line) in lines.iter().enumerate() {
        let builds = line.starts_with("cargo ") || line.starts_with("bash scripts/setup.sh");
        if !builds {
            continue;
        }
        assert!(
            !line.contains(" -q") && !line.contains("--quiet") && !line.contains(">/dev/null"),
            "the demo hides the progress of: {line}"
        );
        assert!(
            lines[..i]
                .iter()
                .rev()
                .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("export "))
                .is_some_and(|l| l.starts_with("echo ")),
            "no line says what this step does: {line}"
        );
    }
}
