#!/usr/bin/env bash
# Runs every check and test of tern: formatting, lints, the decoder fuzz
# targets for a bounded time (TERN_FUZZ_SECS per target, default 30; 0
# skips), unit, property, golden-vector, end-to-end and CLI tests (including
# the 2 GiB transfer). Tests that need root (tmpfs mounts, sshd, netlab) skip
# with a message when not root; as root (CI) TERN_TEST_STRICT=1 is exported
# and a test that would skip fails instead, so none passes unseen. The
# advisor's store and API tests run on SQLite and on a throwaway PostgreSQL
# cluster started here (TERN_TEST_PG); the Python client's tests run after
# cargo test, against a real `tern serve --http`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never
if [ "$(id -u)" = 0 ]; then
    export TERN_TEST_STRICT=1
    echo "running as root: TERN_TEST_STRICT=1, every test must run (none may skip)"
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== layering: no import cycles, layers import downwards, pure crates without I/O, files under 800 lines"
python3 scripts/check-layers.py
echo "== cargo clippy (with and without the test-only fault-injection feature)"
cargo clippy --release --workspace --all-targets --features tern/fault-injection -- -D warnings
cargo clippy --release -p tern -- -D warnings
echo "== libdrs: C example built with gcc, run over loopback"
bash scripts/test-libdrs.sh
fuzz_secs=${TERN_FUZZ_SECS:-30}
if [ "$fuzz_secs" != 0 ]; then
    echo "== fuzz: every decoder target for ${fuzz_secs} s, seeded from the golden vectors"
    bash scripts/fuzz.sh "$fuzz_secs"
fi
echo "== PostgreSQL for the advisor's tests"
log=$(mktemp)
TERN_PG_DIR=
cleanup() {
    rm -f "$log"
    if [ -n "$TERN_PG_DIR" ]; then bash scripts/pg-test.sh stop "$TERN_PG_DIR"; fi
}
trap cleanup EXIT
pg_env=$(bash scripts/pg-test.sh start)
eval "$pg_env"
echo "TERN_TEST_PG=$TERN_TEST_PG"
echo "== cargo test"
# --no-fail-fast: one run shows every failing test binary, not the first.
cargo test --release --workspace --features tern/fault-injection --no-fail-fast 2>&1 | tee "$log"
echo "== the release binary carries no test hooks"
cargo build --release -p tern
if grep -q TERN_FAULT target/release/tern; then
    echo "target/release/tern contains TERN_FAULT hooks; they belong behind the fault-injection feature" >&2
    exit 1
fi
echo "target/release/tern: no TERN_FAULT hooks"
echo "== Python client: unit tests against tern serve --http (SQLite and PostgreSQL), pip install"
TERN_BIN="$PWD/target/release/tern" python3 -m unittest discover -s python/tests -v 2>&1 | tee -a "$log"
venv=$(mktemp -d)
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet ./python
"$venv/bin/python" -c 'import tern_advisor; print("pip install ./python: tern_advisor", tern_advisor.DEFAULT_URL)'
rm -rf "$venv" python/build python/src/*.egg-info
# One closing line for the whole run, summed over every test binary and
# the Python suite ("Ran N tests" then "OK (skipped=K)" or "FAILED (...)").
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1); if ($(i) ~ /^ignored/) s += $(i-1) } }
     /^Ran [0-9]+ tests? in/ { py = $2 }
     /^(OK|FAILED)/ && py != "" { pf = 0; ps = 0
         if (match($0, /failures=[0-9]+/)) pf += substr($0, RSTART + 9, RLENGTH - 9)
         if (match($0, /errors=[0-9]+/)) pf += substr($0, RSTART + 7, RLENGTH - 7)
         if (match($0, /skipped=[0-9]+/)) ps = substr($0, RSTART + 8, RLENGTH - 8)
         p += py - pf - ps; f += pf; s += ps; py = "" }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s; exit (f > 0) }' "$log"

