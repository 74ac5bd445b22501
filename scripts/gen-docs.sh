#!/usr/bin/env bash
# Rewrites the option tables of README.md from tern's clap definitions (the
# text of `--help`), between the <!-- options:NAME:start/end --> markers.
# The same test without TERN_UPDATE_README is what fails in CI when they
# differ. Man pages and completions need no step here: `tern man DIR` and
# `tern completions SHELL` generate them from the installed binary.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
TERN_UPDATE_README=1 cargo test --release -p tern --bin tern readme_options
git --no-pager diff --stat -- README.md
