//! Checks the layering told in the doc comment of `main.rs` against the
//! sources: a module may use (`crate::…`, `super::…`) only modules of
//! lower layers, and every module has its layer. (Test-only: this module
//! is not checked.)

use std::collections::BTreeSet;
use std::path::Path;

/// From the top down, as in `main.rs`.
const LAYERS: &[&[&str]] = &[
    &["main"],
    &["cmd"],
    &[
        "cmd::advise",
        "cmd::advisor",
        "cmd::cp",
        "cmd::docs",
        "cmd::perf",
        "cmd::probe",
        "cmd::serve",
    ],
    &["cmd::cp::third_party"],
    &["ssh_session", "consult", "advisor"],
    &["options", "retry"],
    &["ssh", "console"],
    &["cli::probe"],
    &["cli"],
    &["exit", "addr", "advice", "report", "path_memory"],
    &["report::paths", "report::failure", "cli::values"],
    &[
        "error",
        "size",
        "location",
        "fault",
        "host",
        "signals",
        "responder",
    ],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every module's name (`cmd::cp`) and source, tests left out.
fn modules() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let name = rel.to_string_lossy().replace("/mod", "").replace('/', "::");
            if name == "layering" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            out.push((name, code));
        }
    }
    out
}

/// The modules that `code`, in `module`, uses.
fn uses(module: &str, code: &str) -> BTreeSet<String> {
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let mut name = |path: &str| {
        let first: String = path
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        if first.is_empty() || first == "self" {
            return;
        }
        let nested = format!("{module}::{first}");
        if layer(&nested).is_some() {
            out.insert(nested);
        } else {
            out.insert(first);
        }
    };
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => group[..group.find('}').unwrap()]
                .split(',')
                .for_each(&mut name),
            None => name(rest),
        }
    }
    if code.contains("super::") {
        out.insert(module.rsplit_once("::").map_or("main", |p| p.0).to_string());
    }
    out
}

#[test]
fn every_module_uses_only_lower_layers() {
    let mut wrong = Vec::new();
    for (module, code) in modules() {
        let Some(own) = layer(&module) else {
            wrong.push(format!("{module} has no layer in LAYERS"));
            continue;
        };
        for used in uses(&module, &code) {
            match layer(&used) {
                Some(l) if l > own => {}
                _ => wrong.push(format!("{module} uses {used}")),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
