#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 20)
#
# - Installs cargo-fuzz if it is missing (`cargo install cargo-fuzz --locked`).
# - cargo-fuzz needs a nightly compiler (-Z sanitizer flags). It uses the
#   rustup `nightly` toolchain when one is installed, and otherwise the
#   default (stable) toolchain with RUSTC_BOOTSTRAP=1, which lets stable accept
#   the nightly-only flags. FUZZ_TOOLCHAIN=stable|nightly forces a choice.
# - Seeds each target's corpus with the committed seed corpus in
#   fuzz/seeds/<target>/ (inputs a longer run found interesting, minimized
#   with `cargo fuzz cmin`; refresh with scripts/fuzz-seeds.sh) and the
#   golden vectors of docs/PROTOCOL.md, so the fuzzer starts from valid and
#   near-valid frames.
# - Runs all targets even if one fails, prints a summary line per target
#   (executions, corpus size, crash), and exits non-zero if any target found
#   a crash. Crash inputs are kept under fuzz/artifacts/<target>/.
set -euo pipefail

secs="${1:-20}"
case "$secs" in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS_PER_TARGET]" >&2
    exit 2
    ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

toolchain="${FUZZ_TOOLCHAIN:-}"
if [ -z "$toolchain" ]; then
    if command -v rustup >/dev/null 2>&1 && rustup toolchain list | grep -q '^nightly'; then
        toolchain=nightly
    else
        toolchain=stable
    fi
fi
if [ "$toolchain" = nightly ]; then
    fuzz=(cargo +nightly fuzz)
else
    # A stable compiler accepts -Z flags when told it is bootstrapping itself.
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi
if [ "$toolchain" = nightly ]; then rustc_version="$(rustc +nightly --version)"; else rustc_version="$(rustc --version)"; fi
echo "fuzz.sh: $rustc_version${RUSTC_BOOTSTRAP:+ with RUSTC_BOOTSTRAP=1}, $("${fuzz[@]}" --version), ${secs}s per target"

# Seed corpora: the committed seeds, then every golden block of the spec goes
# to the target that decodes it.
for seeds in seeds/*/; do
    [ -d "$seeds" ] || continue
    t="$(basename "$seeds")"
    mkdir -p "corpus/$t"
    cp -n "$seeds"* "corpus/$t/" 2>/dev/null || true
done
target_of() {
    case "$1" in
    hello_*) echo hello ;;
    once_*) echo once_line ;;
    data_join | join_reply_*) echo data_join ;;
    block_repair | block_lz4 | block_zstd | stream_end) echo data_frame ;;
    block_*) echo "" ;; # checks and keys, not frames
    *) echo control ;;
    esac
}
goldens="$(awk '
    /^```golden/ { for (i = 2; i <= NF; i++) if ($i ~ /^name=/) name = substr($i, 6); hex = ""; inb = 1; next }
    inb && /^```/ { print name, hex; inb = 0; next }
    inb { sub(/#.*/, ""); gsub(/[ \t]/, ""); hex = hex $0 }
' "$root/docs/PROTOCOL.md")"
while read -r name hex; do
    t="$(target_of "$name")"
    [ -n "$t" ] || continue
    mkdir -p "corpus/$t"
    printf '%s' "$hex" | xxd -r -p >"corpus/$t/golden_$name"
done <<<"$goldens"
# The opening target (fuzz_targets/open.rs) reads a 4-byte header (features,
# flags, congestion controls), then control frames; a length with its top
# bit set sends the frame to the client. Seed it with the spec's opening
# frames in the order a session exchanges them.
golden_hex() { awk -v n="$1" '$1 == n { print $2 }' <<<"$goldens"; }
open_seed() { # NAME HEADER FRAME... (>FRAME: to the client)
    local name="$1" hex="$2" f h
    shift 2
    for f in "$@"; do
        h="$(golden_hex "${f#>}")"
        [ -n "$h" ] || return 0 # the spec renamed a vector
        case "$f" in '>'*) h="8${h:1}" ;; esac
        hex="$hex$h"
    done
    mkdir -p corpus/open
    printf '%s' "$hex" | xxd -r -p >"corpus/open/golden_$name"
}
open_seed push 07ff0007 session_open_push tuning_fixed transfer_options '>session_accept' '>tuning_accept'
open_seed once 07ff0107 token_auth session_open_pull tuning_auto transfer_options '>session_accept' '>tuning_accept'
open_seed perf 000f0007 session_open_perf '>session_accept'
open_seed refused 07ff0007 session_open_push '>error_session'

# A failure here (e.g. no Cargo project around fuzz/) must stop the script,
# so list first, then split.
listing="$("${fuzz[@]}" list)"
targets=()
while IFS= read -r t; do [ -n "$t" ] && targets+=("$t"); done <<<"$listing"
if [ "${#targets[@]}" -eq 0 ]; then
    echo "fuzz.sh: cargo fuzz list found no targets" >&2
    exit 1
fi

failed=()
summary=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    log="$(mktemp)"
    echo "=== $t: ${secs}s"
    status=ok
    set +e
    "${fuzz[@]}" run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 2>&1 |
        tee "$log" |
        grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^Done|ERROR|panicked|SUMMARY|artifact|number_of_executed_units|^error'
    rc="${PIPESTATUS[0]}"
    set -e
    if [ "$rc" -ne 0 ] || grep -qE 'ERROR: libFuzzer|panicked|SUMMARY: .*Sanitizer' "$log"; then
        status=FAILED
        failed+=("$t")
    fi
    execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1 || true)"
    cov="$(grep -oE '^#[0-9]+[[:space:]]+DONE[[:space:]]+cov: [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1 || true)"
    units="$(find "corpus/$t" -type f | wc -l)"
    summary+=("$(printf '%-12s %-6s execs=%-10s cov=%-6s corpus=%s' "$t" "$status" "${execs:-?}" "${cov:-?}" "$units")")
    rm -f "$log"
done

echo "=== summary (${secs}s per target)"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz.sh: failures (crash or build error) in: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
    exit 1
fi
