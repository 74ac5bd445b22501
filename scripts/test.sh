#!/usr/bin/env bash
# Runs every check and test of tern: formatting, lints, the decoder fuzz
# targets for a bounded time (TERN_FUZZ_SECS per target, default 30; 0
# skips), unit, property, golden-vector, end-to-end and CLI tests (including
# the 2 GiB transfer). Tests that need root (tmpfs mounts, netlab) skip with a
# message when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== libdrs: C example built with gcc, run over loopback"
bash scripts/test-libdrs.sh
fuzz_secs=${TERN_FUZZ_SECS:-30}
if [ "$fuzz_secs" != 0 ]; then
    echo "== fuzz: every decoder target for ${fuzz_secs} s, seeded from the golden vectors"
    bash scripts/fuzz.sh "$fuzz_secs"
fi
echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --release --workspace 2>&1 | tee "$log"
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1); if ($(i) ~ /^ignored/) s += $(i-1) } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s; exit (f > 0) }' "$log"
