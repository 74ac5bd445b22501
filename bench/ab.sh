#!/usr/bin/env bash
# bench/ab.sh: one tern build against another, on loopback, many interleaved runs.
#
#   bash bench/ab.sh OLD_BIN NEW_BIN [--size MIB] [--reps N] [--protect MODE] [--streams N] [--out FILE]
#
# Each binary serves its own daemon on 127.0.0.1 and copies one random file
# (default 2048 MiB) to it with `tern cp` (no other flags but --streams, `auto`
# unless given: a fixed count keeps the stream controller out of a comparison), N times each
# (default 8), interleaved (old, new on odd runs; new, old on even ones).
# Before every copy the destination is deleted, the page cache dropped and the
# source read back into it; every copy is checked with cmp. Prints the median
# rate, client CPU, daemon CPU and CPU s/GB (client + daemon) of each, the streams
# each copy used and the blocks its endgame sent twice, and the
# ratios new / old. The efficiency bench (bench/efficiency.sh) compares tern with
# other tools in one run; on this shared VM its single runs move by tens of
# percent, so a change to tern is judged here, against the build before it.
# Needs root (drop_caches), python3, /usr/bin/time.
set -euo pipefail
OLD=${1:?usage: bench/ab.sh OLD_BIN NEW_BIN [--size MIB] [--reps N] [--protect MODE] [--streams N] [--out FILE]}
NEW=${2:?usage: bench/ab.sh OLD_BIN NEW_BIN [--size MIB] [--reps N] [--protect MODE] [--streams N] [--out FILE]}
shift 2
SIZE_MIB=2048
REPS=8
PROTECT=private
STREAMS=auto
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE_MIB=$2; shift ;;
        --reps) REPS=$2; shift ;;
        --protect) PROTECT=$2; shift ;;
        --streams) STREAMS=$2; shift ;;
        --out) OUT=$2; shift ;;
        -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "ab.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
for bin in "$OLD" "$NEW"; do
    [ -x "$bin" ] || { echo "ab.sh: no tern binary at $bin" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "ab.sh: needs root (drop_caches)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/tern-ab.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
head -c "$((SIZE_MIB * 1024 * 1024))" /dev/urandom >"$WORK/src.bin"

declare -A BIN PORT PID FP
BIN[old]=$OLD
BIN[new]=$NEW
for side in old new; do
    mkdir -p "$WORK/$side/root" "$WORK/$side/state" "$WORK/$side/home"
    PORT[$side]=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    # Each side's own state: what one remembers of the path must not steer the other.
    HOME=$WORK/$side/home XDG_STATE_HOME=$WORK/$side/home/state "${BIN[$side]}" serve --listen "127.0.0.1:${PORT[$side]}" \
        --root "$WORK/$side/root" --state-dir "$WORK/$side/state" \
        >"$WORK/$side/serve.out" 2>"$WORK/$side/serve.err" &
    PID[$side]=$!
    PIDS+=("${PID[$side]}")
    for _ in $(seq 50); do
        grep -q 'listening on' "$WORK/$side/serve.out" 2>/dev/null && break
        sleep 0.1
    done
    FP[$side]=$(sed -n 's/^tern serve: certificate fingerprint \(SHA256:[^ ]*\).*/\1/p' "$WORK/$side/serve.out")
    [ -n "${FP[$side]}" ] || { cat "$WORK/$side/serve.err" >&2; echo "ab.sh: $side daemon did not start" >&2; exit 1; }
done

cpu_of() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"; }
run() {
    local side=$1
    rm -f "$WORK/$side/root/dst.bin"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    cat "$WORK/src.bin" >/dev/null
    local s0 s1
    s0=$(cpu_of "${PID[$side]}")
    HOME=$WORK/$side/home XDG_STATE_HOME=$WORK/$side/home/state /usr/bin/time -f "%e %U %S" -o "$WORK/time" "${BIN[$side]}" cp \
        --protect "$PROTECT" --streams "$STREAMS" --fingerprint "${FP[$side]}" --no-progress --json \
        "$WORK/src.bin" "tern://127.0.0.1:${PORT[$side]}/dst.bin" >"$WORK/cp.json" 2>"$WORK/cp.err" \
        || { cat "$WORK/cp.err" >&2; echo "ab.sh: $side copy failed" >&2; exit 1; }
    s1=$(cpu_of "${PID[$side]}")
    cmp -s "$WORK/src.bin" "$WORK/$side/root/dst.bin" || { echo "ab.sh: $side copy differs" >&2; exit 1; }
    read -r wall user sys <"$WORK/time"
    local streams
    streams=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%s/%s" % (d["streams"], d.get("blocks_copied") or 0))' "$WORK/cp.json")
    echo "$side $wall $user $sys $(( s1 - s0 )) $streams" >>"$WORK/runs"
}
for r in $(seq "$REPS"); do
    if [ $((r % 2)) = 1 ]; then run old; run new; else run new; run old; fi
done

python3 - "$WORK/runs" "$SIZE_MIB" "$PROTECT" "$REPS" "$OLD" "$NEW" "$OUT" "$STREAMS" <<'PY'
import os, statistics, subprocess, sys
runs, size_mib, protect, reps, old, new, out, streams_arg = sys.argv[1:9]
ticks = os.sysconf("SC_CLK_TCK")
nbytes = int(size_mib) * 1048576
rows = {"old": [], "new": []}
streams = {"old": [], "new": []}
for line in open(runs):
    side, wall, user, sys_, server, used = line.split()
    streams[side].append(used)
    wall, client, server = float(wall), float(user) + float(sys_), int(server) / ticks
    rows[side].append((nbytes * 8 / wall / 1e9, client, server, (client + server) / (nbytes / 1e9)))
med = {s: [statistics.median(r[i] for r in rows[s]) for i in range(4)] for s in rows}
def version(b):
    return subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip()
lines = [
    f"`bench/ab.sh`: {size_mib} MiB, `--protect {protect}`, `--streams {streams_arg}`, {reps} interleaved runs each, medians (min-max)",
    "",
    "| build | Gbit/s | client CPU (s) | daemon CPU (s) | CPU s/GB (both ends) | streams/blocks copied, each run |",
    "| --- | ---: | ---: | ---: | ---: | --- |",
]
for side, b in (("old", old), ("new", new)):
    cells = []
    for i, fmt in enumerate(("%.2f", "%.2f", "%.2f", "%.3f")):
        vals = [r[i] for r in rows[side]]
        cells.append(f"{fmt % med[side][i]} ({fmt % min(vals)}–{fmt % max(vals)})")
    lines.append(f"| {side}: {version(b)} | " + " | ".join(cells) + " | " + " ".join(streams[side]) + " |")
lines += ["", "new / old: rate %.2f, CPU s/GB %.2f" % (med["new"][0] / med["old"][0], med["new"][3] / med["old"][3])]
text = "\n".join(lines) + "\n"
print(text, end="")
if out:
    open(out, "w").write(text)
PY
