#!/usr/bin/env bash
# Refreshes the committed fuzz seed corpus (fuzz/seeds/<target>/): runs every
# target for SECONDS (default 120) from the current seeds and golden vectors,
# then keeps the smallest set of inputs that covers the same code
# (`cargo fuzz cmin`). Commit the result; CI starts from it.
#
#   scripts/fuzz-seeds.sh [SECONDS_PER_TARGET]
set -euo pipefail
secs="${1:-120}"
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/fuzz.sh" "$secs"
cd "$root/fuzz"
if command -v rustup >/dev/null 2>&1 && rustup toolchain list | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi
for t in $("${fuzz[@]}" list); do
    "${fuzz[@]}" cmin "$t" "corpus/$t" >/dev/null 2>&1
    rm -rf "seeds/$t"
    mkdir -p "seeds/$t"
    cp "corpus/$t/"* "seeds/$t/"
    echo "fuzz-seeds.sh: $t: $(find "seeds/$t" -type f | wc -l) seeds, $(du -sk "seeds/$t" | cut -f1) KiB"
done
