//! What is generated from the clap definitions of `cli`, so that none of
//! it can drift from `--help`: the manual pages (`tern man`), the shell
//! completion scripts (`tern completions`), and the README's option tables
//! (a test compares them; `scripts/gen-docs.sh` rewrites them).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Command, CommandFactory};

use crate::cli::{Cli, CompletionsArgs, ManArgs};

/// The command line as the generators see it: built (so subcommands are
/// named `tern-cp` and carry `--help`), without the `help` subcommand.
fn built() -> Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// What failed to be written where.
fn io(context: String) -> impl Fn(std::io::Error) -> tern_engine::Error {
    move |source| tern_engine::Error::Io {
        context: context.clone(),
        source,
    }
}

/// Writes `tern.1` and one page per command into the directory, and
/// prints each page's path.
pub fn man(args: &ManArgs) -> Result<()> {
    let dir = &args.dir;
    std::fs::create_dir_all(dir).map_err(io(dir.display().to_string()))?;
    let root = built();
    let source = format!("tern {}", root.get_version().unwrap_or_default());
    let pages = std::iter::once(&root).chain(root.get_subcommands().filter(|c| !c.is_hide_set()));
    for cmd in pages {
        let man = clap_mangen::Man::new(cmd.clone())
            .source(source.clone())
            .manual("tern");
        let path: PathBuf = dir.join(man.get_filename());
        man.generate_to(dir)
            .map_err(io(path.display().to_string()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// Prints the completion script of a shell on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "tern", &mut script);
    std::io::stdout()
        .write_all(&script)
        .map_err(io("stdout".into()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use clap::{Arg, ArgAction};

    use super::*;

    /// One of the README's option tables: the options of a command under
    /// no heading (named after the command), or under a heading (named by
    /// it: `connection-options`), which the commands that share it share.
    #[derive(Debug)]
    struct Table {
        name: String,
        markdown: String,
    }

    fn escape(text: &str) -> String {
        text.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|")
    }

    fn is_flag(arg: &Arg) -> bool {
        matches!(
            arg.get_action(),
            ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
        )
    }

    /// `-P, --streams N|auto`, `--json`, `SRC… DST`.
    fn synopsis(arg: &Arg) -> String {
        let choices = arg.get_possible_values();
        let values = match arg.get_value_names() {
            _ if !choices.is_empty() => choices
                .iter()
                .map(|v| v.get_name())
                .collect::<Vec<_>>()
                .join("|"),
            Some(names) => names
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            None => arg.get_id().as_str().to_uppercase(),
        };
        if arg.is_positional() {
            return values;
        }
        let mut names: Vec<String> = arg
            .get_short()
            .map(|s| format!("-{s}"))
            .into_iter()
            .collect();
        names.extend(arg.get_long().map(|l| format!("--{l}")));
        let names = names.join(", ");
        if is_flag(arg) {
            names
        } else {
            format!("{names} {values}")
        }
    }

    /// The help text without its `[default: …]`, and that default.
    fn meaning(arg: &Arg) -> (String, Option<String>) {
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let mut text = escape(&help);
        let mut default = None;
        if let Some(start) = text.rfind("[default: ") {
            if text.ends_with(']') {
                default = Some(text[start + 10..text.len() - 1].to_string());
                text = text[..start].trim_end().to_string();
            }
        }
        let described: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter_map(|v| Some(format!("`{}`: {}", v.get_name(), v.get_help()?)))
            .collect();
        if !described.is_empty() {
            text = format!("{text}: {}", escape(&described.join("; ")));
        }
        (text, default)
    }

    fn row(arg: &Arg) -> String {
        let (meaning, in_help) = meaning(arg);
        let default = if is_flag(arg) {
            String::new()
        } else {
            let given: Vec<&str> = arg
                .get_default_values()
                .iter()
                .filter_map(|v| v.to_str())
                .collect();
            match (given.is_empty(), in_help) {
                (false, _) => given.join(","),
                (true, Some(d)) => d,
                (true, None) => String::new(),
            }
        };
        format!(
            "| `{}` | {} | {meaning} |",
            escape(&synopsis(arg)),
            escape(&default)
        )
    }

    fn slug(heading: &str) -> String {
        heading.to_lowercase().replace(' ', "-")
    }

    /// Every table, each once, in the order of the commands; a heading
    /// that several commands share must mean the same in each.
    fn tables() -> Vec<Table> {
        let mut tables: Vec<Table> = Vec::new();
        let mut shared: BTreeMap<String, (String, String)> = BTreeMap::new();
        for cmd in Cli::command()
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
        {
            let mut groups: Vec<(Option<&str>, Vec<String>)> = Vec::new();
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let heading = arg.get_help_heading();
                match groups.iter_mut().find(|(h, _)| *h == heading) {
                    Some((_, rows)) => rows.push(row(arg)),
                    None => groups.push((heading, vec![row(arg)])),
                }
            }
            for (heading, rows) in groups {
                let markdown = format!(
                    "| option | default | meaning |\n| --- | --- | --- |\n{}\n",
                    rows.join("\n")
                );
                let Some(heading) = heading else {
                    tables.push(Table {
                        name: cmd.get_name().to_string(),
                        markdown,
                    });
                    continue;
                };
                let name = slug(heading);
                match shared.get(&name) {
                    Some((first, seen)) => assert_eq!(
                        seen,
                        &markdown,
                        "the {heading} of tern {} differ from those of tern {first}",
                        cmd.get_name()
                    ),
                    None => {
                        shared.insert(name.clone(), (cmd.get_name().into(), markdown.clone()));
                        tables.push(Table { name, markdown });
                    }
                }
            }
        }
        tables
    }

    fn markers(name: &str) -> (String, String) {
        (
            format!("<!-- options:{name}:start -->\n"),
            format!("<!-- options:{name}:end -->"),
        )
    }

    /// The README with each table put between its markers; every table
    /// must have its markers, and every pair of markers its table.
    fn splice(readme: &str, tables: &[Table]) -> Result<String, String> {
        let mut out = readme.to_string();
        for t in tables {
            let (start, end) = markers(&t.name);
            let (Some(s), Some(e)) = (out.find(&start), out.find(&end)) else {
                return Err(format!("README.md lacks {start}…{end}"));
            };
            out.replace_range(s + start.len()..e, &t.markdown);
        }
        let known: Vec<String> = tables.iter().map(|t| markers(&t.name).0).collect();
        for line in out.lines().filter(|l| l.starts_with("<!-- options:")) {
            let line = format!("{line}\n");
            if line.ends_with(":start -->\n") && !known.contains(&line) {
                return Err(format!("README.md has {line} but tern has no such options"));
            }
        }
        Ok(out)
    }

    /// The lines of `new` that `old` lacks (+) and the other way round (-).
    fn changed_lines(old: &str, new: &str) -> String {
        let gone = old
            .lines()
            .filter(|l| !new.contains(l))
            .map(|l| format!("-{l}"));
        let added = new
            .lines()
            .filter(|l| !old.contains(l))
            .map(|l| format!("+{l}"));
        gone.chain(added).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn readme_options_are_the_help() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let generated = splice(&readme, &tables()).unwrap_or_else(|e| panic!("{e}"));
        if generated == readme {
            return;
        }
        if std::env::var_os("TERN_UPDATE_README").is_some() {
            std::fs::write(&path, generated).unwrap();
            return;
        }
        panic!(
            "README.md's option tables differ from --help; scripts/gen-docs.sh rewrites them:\n{}",
            changed_lines(&readme, &generated)
        );
    }

    #[test]
    fn a_table_lists_every_option_with_its_default() {
        let tables = tables();
        let table = |name: &str| &tables.iter().find(|t| t.name == name).unwrap().markdown;
        let connection = table("connection-options");
        for want in [
            "| `-P, --streams N\\|auto` | auto |",
            "| `--io-timeout SECS` | 60 |",
            "| `--known-hosts FILE` | $XDG_CONFIG_HOME/tern/known_hosts |",
        ] {
            assert!(connection.contains(want), "{want} not in\n{connection}");
        }
        assert!(table("probe").contains("| `--json` |  |"));
        assert!(!table("probe").contains("--retries"));
        assert!(table("cp").contains("| `--retries N` | 2 |"));
        assert!(table("advisor-options").contains("group=NAME"));
    }

    #[test]
    fn splicing_needs_every_pair_of_markers_and_nothing_else() {
        let t = |name: &str| Table {
            name: name.into(),
            markdown: "| new |\n".into(),
        };
        let readme = "a\n<!-- options:cp:start -->\n| old |\n<!-- options:cp:end -->\nb\n";
        assert_eq!(
            splice(readme, &[t("cp")]).unwrap(),
            "a\n<!-- options:cp:start -->\n| new |\n<!-- options:cp:end -->\nb\n"
        );
        assert!(splice(readme, &[t("cp"), t("perf")]).is_err());
        assert!(splice(readme, &[]).is_err());
    }
}
