#!/usr/bin/env python3
"""Checks the layering that ARCHITECTURE.md promises, so it stays true.

1. No import cycle between the modules of a crate (engine, tern, and every
   other crate under crates/). A module is one source file; a file's child
   modules count as part of it when the parent file holds code of its own
   (transfer.rs with transfer/send.rs), and as modules of their own when
   the parent only declares them (conn/mod.rs). References are `crate::…`
   paths, in `use` lines or inline; `super::` stays inside one module.
2. The engine's groups import only downwards: store imports neither data
   nor conn; data does not import conn.
3. tern-session and tern-proto have no tokio, rustls or socket2 among their
   normal dependencies (`cargo tree -e normal`).
4. No source file under crates/*/src is over 800 lines (test files aside).
5. ARCHITECTURE.md names every crate under crates/.

Exit 0 when all hold; otherwise prints every violation and exits 1.
Usage: python3 scripts/check-layers.py [--graph CRATE]  (prints the edges)
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = os.path.join(ROOT, "crates")
MAX_LINES = 800
# What each engine group may not import.
FORBIDDEN = {
    ("tern-engine", "store"): ("data", "conn"),
    ("tern-engine", "data"): ("conn",),
}
PURE = ("tern-session", "tern-proto")
IMPURE = ("tokio", "rustls", "tokio-rustls", "socket2", "mio")

CODE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(async\s+)?(fn|struct|enum|impl|trait|const|static|type)\b", re.M)
CRATE_PATH = re.compile(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")
CRATE_BRACE = re.compile(r"crate::\{([^;]*?)\};", re.S)


def package_name(crate_dir):
    with open(os.path.join(crate_dir, "Cargo.toml")) as f:
        m = re.search(r'^name\s*=\s*"([^"]+)"', f.read(), re.M)
    return m.group(1)


def module_files(src):
    """Maps each module path (tuple) to its file."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ("lib", "main") and len(rel) == 1:
                rel = []
            elif rel[-1] == "mod":
                rel = rel[:-1]
            mods[tuple(rel)] = path
    return mods


def is_test_file(path):
    name = os.path.basename(path)
    return name == "tests.rs" or os.sep + "tests" + os.sep in path


def node_of(mod, mods, code_holders):
    """The module a file counts as: its nearest ancestor holding code whose
    own parent does not (or itself)."""
    node = mod
    for cut in range(1, len(mod)):
        parent = mod[:cut]
        if parent in code_holders and parent != ():
            node = parent
            break
    return node


def references(text):
    refs = set()
    for m in CRATE_BRACE.finditer(text):
        for part in split_top(m.group(1)):
            head = re.match(r"\s*([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", part)
            if head:
                refs.add(tuple(head.group(1).split("::")))
    for m in CRATE_PATH.finditer(text):
        refs.add(tuple(m.group(1).split("::")))
    return refs


def split_top(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def strip_comments(text):
    return "\n".join(re.sub(r"//.*", "", line) for line in text.splitlines())


def graph(crate_dir):
    src = os.path.join(crate_dir, "src")
    mods = module_files(src)
    code_holders = set()
    for mod, path in mods.items():
        with open(path) as f:
            body = f.read()
        if CODE.search(strip_comments(body)):
            code_holders.add(mod)
    nodes = {mod: node_of(mod, mods, code_holders) for mod in mods}
    edges = {}
    for mod, path in mods.items():
        if mod == () or is_test_file(path):
            continue
        with open(path) as f:
            text = strip_comments(f.read())
        # Unit tests may reach anywhere.
        text = text.split("#[cfg(test)]")[0]
        src_node = nodes[mod]
        for ref in references(text):
            target = None
            for cut in range(len(ref), 0, -1):
                if ref[:cut] in mods:
                    target = nodes[ref[:cut]]
                    break
            if target is None or target == () or target == src_node:
                continue
            # A module's own children are part of it.
            if target[: len(src_node)] == src_node:
                continue
            edges.setdefault(src_node, set()).add(target)
    return nodes, edges


def cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "::".join(mod) or "crate"


def main():
    problems = []
    show = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--graph" else None
    for entry in sorted(os.listdir(CRATES)):
        crate_dir = os.path.join(CRATES, entry)
        if not os.path.isfile(os.path.join(crate_dir, "Cargo.toml")):
            continue
        package = package_name(crate_dir)
        nodes, edges = graph(crate_dir)
        if show in (package, entry):
            for src in sorted(edges):
                for dst in sorted(edges[src]):
                    print(f"{name(src)} -> {name(dst)}")
        for comp in cycles(edges):
            problems.append(f"{package}: import cycle among {', '.join(sorted(map(name, comp)))}")
        for src, dsts in edges.items():
            banned = FORBIDDEN.get((package, src[0] if src else ""), ())
            for dst in dsts:
                if dst and dst[0] in banned:
                    problems.append(f"{package}: {name(src)} imports {name(dst)}, above its layer")
        for dirpath, _, files in os.walk(os.path.join(crate_dir, "src")):
            for f in files:
                path = os.path.join(dirpath, f)
                if f.endswith(".rs") and not is_test_file(path):
                    with open(path) as fh:
                        n = sum(1 for _ in fh)
                    if n > MAX_LINES:
                        problems.append(f"{os.path.relpath(path, ROOT)}: {n} lines (at most {MAX_LINES})")
    with open(os.path.join(ROOT, "ARCHITECTURE.md")) as f:
        architecture = f.read()
    for entry in sorted(os.listdir(CRATES)):
        if os.path.isfile(os.path.join(CRATES, entry, "Cargo.toml")):
            if f"crates/{entry}" not in architecture:
                problems.append(f"ARCHITECTURE.md does not name crates/{entry}")
    for package in PURE:
        tree = subprocess.run(
            ["cargo", "tree", "-e", "normal", "-p", package, "--prefix", "none", "--format", "{p}"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout
        deps = {line.split()[0] for line in tree.splitlines() if line.strip()}
        for bad in IMPURE:
            if bad in deps:
                problems.append(f"{package} depends on {bad} (it must do no I/O)")
    for p in problems:
        print("check-layers:", p)
    if problems:
        return 1
    print("check-layers: no import cycles, every layer imports downwards, the pure crates do no I/O, "
          "no file over 800 lines, ARCHITECTURE.md names every crate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
