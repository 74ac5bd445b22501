#!/usr/bin/env bash
# Runs every check and test of tern: formatting, lints, unit, property,
# golden-vector, end-to-end and CLI tests (including the 2 GiB transfer).
# Tests that need root (tmpfs mounts) skip with a message when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --release --workspace
