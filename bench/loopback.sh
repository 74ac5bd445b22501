#!/usr/bin/env bash
# bench/loopback.sh: tern against iperf3, rsync and scp, side by side, on loopback.
#
#   bash bench/loopback.sh            full run (about 5 minutes), writes BENCHMARKS.md
#   bash bench/loopback.sh --quick    smoke run (under a minute), writes bench/quick-results.md
#   bash bench/loopback.sh --quick --write   quick run, but write BENCHMARKS.md anyway
#   bash bench/loopback.sh --out FILE        write the report to FILE
#
# Needs target/release/tern (cargo build --release -p tern), iperf3, rsync,
# openssh-server (/usr/sbin/sshd), openssh-client, python3. Traffic goes only to
# 127.0.0.1. Everything it starts is killed, and its temporary directory (with
# the multi-GiB test files) is deleted, on exit. See bench/README.md.
set -euo pipefail

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
}

QUICK=0
WRITE=0
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --write) WRITE=1 ;;
        --out)
            [ $# -ge 2 ] || { echo "loopback.sh: --out needs a file" >&2; exit 2; }
            OUT=$2
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        *) echo "loopback.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
SSHD=/usr/sbin/sshd

if [ "$QUICK" = 1 ]; then
    MODE=quick
    PERF_TIME=2        # seconds per memory-to-memory run
    REPS=1             # runs per configuration (median reported)
    DISK_MIB=256       # size of the disk-to-disk test file
    DISK_REPS=1
    DISK_TIMEOUT=60    # per copy
else
    MODE=full
    PERF_TIME=5
    REPS=3
    DISK_MIB=2048
    DISK_REPS=3
    DISK_TIMEOUT=120
fi
STREAM_COUNTS="1 4"
PERF_PROTECTS="clear private"
DISK_BYTES=$((DISK_MIB * 1024 * 1024))

if [ -z "$OUT" ]; then
    if [ "$QUICK" = 1 ] && [ "$WRITE" = 0 ]; then
        OUT=$REPO/bench/quick-results.md
    else
        OUT=$REPO/BENCHMARKS.md
    fi
fi

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'loopback.sh: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- prerequisites
[ -x "$TERN" ] || die "no tern binary at $TERN; build it with: cargo build --release -p tern"
for tool in iperf3 rsync ssh scp ssh-keygen python3 timeout cmp; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install iperf3 rsync openssh-client openssh-server python3)"
done
[ -x "$SSHD" ] || die "$SSHD not found (apt-get install openssh-server)"

WORK_PARENT=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$WORK_PARENT/tern-bench.XXXXXX")
case "$WORK" in *[[:space:]]*) rm -rf "$WORK"; die "temporary directory path must not contain spaces: $WORK" ;; esac

PIDS=()        # servers started here
CHILD=""       # the measured command running now, if any
MADE_RUN_SSHD=0
stop_pid() {  # SIGTERM, up to 5 s to go, then SIGKILL
    local pid=$1 _
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    if [ -n "$CHILD" ]; then stop_pid "$CHILD"; fi
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    rm -rf "$WORK"
    if [ "$MADE_RUN_SSHD" = 1 ]; then rmdir /run/sshd 2>/dev/null || true; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Disk space: source + one destination at a time, plus slack.
avail_kib=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
need_kib=$((DISK_MIB * 1024 * 2 + 512 * 1024))
[ "$avail_kib" -ge "$need_kib" ] || die "need $((need_kib / 1024)) MiB free under $WORK_PARENT, have $((avail_kib / 1024)) MiB (set BENCH_TMPDIR)"

RESULTS=$WORK/results.tsv   # section, tool, streams, protect, rep, value, note
META=$WORK/meta.tsv         # key, value
CMDS=$WORK/commands.txt     # every distinct command line, in order
: >"$RESULTS"
: >"$META"
: >"$CMDS"
mkdir -p "$WORK/xdg" "$WORK/state" "$WORK/root" "$WORK/ssh" "$WORK/logs"

meta() { printf '%s\t%s\n' "$1" "$2" >>"$META"; }
result() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "${7//$'\t'/ }" >>"$RESULTS"; }
# Remember a command line exactly as run (shell-quoted), once.
remember() {
    local line="" a
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./:=@+,%-]+$ ]]; then
            line+=" $a"
        else
            line+=" '${a//\'/\'\\\'\'}'"
        fi
    done
    remember_raw "${line# }"
}
remember_raw() { grep -qxF -- "$1" "$CMDS" || printf '%s\n' "$1" >>"$CMDS"; }
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
json_get() {  # json_get EXPR < json   (EXPR indexes "d", e.g. 'd["end"]["sum_received"]["bits_per_second"]')
    python3 -c 'import json, sys
d = json.load(sys.stdin)
print(eval(sys.argv[1], {"d": d}))' "$1"
}
now() { date +%s.%N; }
# run_bounded SECS OUT ERR CMD...: CMD under timeout, stdout to OUT, stderr
# appended to ERR. Run as a background job and waited for, so that Ctrl-C or
# SIGTERM reach the cleanup at once and it can stop CMD.
run_bounded() {
    local secs=$1 out=$2 err=$3 rc=0
    shift 3
    timeout "$secs" "$@" >"$out" 2>>"$err" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    return "$rc"
}

# ------------------------------------------------------------------ environment
meta mode "$MODE"
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta nproc "$(nproc)"
meta cpu "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
meta kernel "$(uname -sr)"
meta memory "$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
meta tern_version "$("$TERN" --version 2>&1 | head -1)"
meta tern_commit "$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)"
meta tern_built "$(date -u -r "$TERN" '+%Y-%m-%d %H:%M UTC')"
meta iperf3_version "$(iperf3 --version 2>&1 | head -1)"
meta rsync_version "$(rsync --version 2>&1 | head -1 | sed 's/  */ /g')"
meta ssh_version "$(ssh -V 2>&1 | head -1)"
meta perf_time "$PERF_TIME"
meta reps "$REPS"
meta disk_mib "$DISK_MIB"
meta disk_reps "$DISK_REPS"
meta work "$WORK"
meta tern "$TERN"
meta repo "$REPO"

log "mode $MODE: perf ${PERF_TIME}s x $REPS, disk ${DISK_MIB} MiB x $DISK_REPS; work dir $WORK"

wait_listen() {  # wait_listen PORT PID: until something listens on 127.0.0.1:PORT (at most 10 s)
    local _
    if ! command -v ss >/dev/null; then sleep 1; kill -0 "$2" 2>/dev/null; return; fi
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || return 1
        if ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; then return 0; fi
        sleep 0.1
    done
    return 1
}

# ----------------------------------------------------------------- tern serve
# The daemon is checked before every tern run: if it has gone (crashed, or
# killed from outside), that is reported, recorded in the report, and it is
# started again with the same state directory (same certificate).
TPORT=$(free_port)
TSERVE_PID=""
SERVE_EVENTS=$WORK/serve-events.txt
: >"$SERVE_EVENTS"
start_tern_serve() {
    remember "$TERN" serve --listen "127.0.0.1:$TPORT" --root "$WORK/root" --state-dir "$WORK/state"
    "$TERN" serve --listen "127.0.0.1:$TPORT" --root "$WORK/root" --state-dir "$WORK/state" \
        >"$WORK/logs/serve.out" 2>>"$WORK/logs/serve.err" &
    TSERVE_PID=$!
    PIDS+=("$TSERVE_PID")
    local _
    FP=""
    for _ in $(seq 100); do
        FP=$(sed -n 's/^tern serve: certificate fingerprint \(SHA256:[^ ]*\).*/\1/p' "$WORK/logs/serve.out")
        if [ -n "$FP" ] && grep -q 'listening on' "$WORK/logs/serve.out"; then break; fi
        FP=""
        sleep 0.1
    done
    [ -n "$FP" ] || { cat "$WORK/logs/serve.err" >&2; die "tern serve did not start"; }
}
ensure_tern_serve() {
    kill -0 "$TSERVE_PID" 2>/dev/null && return 0
    local rc=0
    wait "$TSERVE_PID" 2>/dev/null || rc=$?
    printf 'tern serve (pid %s) was gone before a run at %s; exit status %s; restarted\n' \
        "$TSERVE_PID" "$(date +%H:%M:%S)" "$rc" >>"$SERVE_EVENTS"
    log "tern serve (pid $TSERVE_PID) is gone, exit status $rc; last lines of its stderr:"
    tail -5 "$WORK/logs/serve.err" >&2 || true
    start_tern_serve
}
start_tern_serve
log "tern serve on 127.0.0.1:$TPORT ($FP)"
export XDG_CONFIG_HOME=$WORK/xdg

# ------------------------------------------------------------------ iperf3 -s
IPORT=$(free_port)
IPERF_PID=""
start_iperf3() {
    remember iperf3 -s -B 127.0.0.1 -p "$IPORT"
    iperf3 -s -B 127.0.0.1 -p "$IPORT" >>"$WORK/logs/iperf3-server.log" 2>&1 &
    IPERF_PID=$!
    PIDS+=("$IPERF_PID")
    wait_listen "$IPORT" "$IPERF_PID" || { cat "$WORK/logs/iperf3-server.log" >&2; die "iperf3 -s did not start"; }
}
ensure_iperf3() {
    kill -0 "$IPERF_PID" 2>/dev/null && return 0
    log "iperf3 server (pid $IPERF_PID) is gone; starting it again"
    printf 'iperf3 -s (pid %s) was gone before a run at %s; restarted\n' "$IPERF_PID" "$(date +%H:%M:%S)" >>"$SERVE_EVENTS"
    start_iperf3
}
start_iperf3
log "iperf3 server on 127.0.0.1:$IPORT"

# ------------------------------------------------------- memory to memory runs
# True when the daemon is gone after a failed tern run: the run is then tried
# once more against a fresh daemon (and the restart is reported).
serve_vanished() { ! kill -0 "$TSERVE_PID" 2>/dev/null; }

tern_perf() {  # tern_perf STREAMS PROTECT REP
    local p=$1 prot=$2 rep=$3 bps attempt ok=0
    for attempt in 1 2; do
        ensure_tern_serve
        local cmd=("$TERN" perf "tern://127.0.0.1:$TPORT" --time "$PERF_TIME" -P "$p" --protect "$prot"
            --fingerprint "$FP" --json --no-progress)
        remember "${cmd[@]}"
        if run_bounded $((PERF_TIME + 30)) "$WORK/logs/tern-perf.json" "$WORK/logs/tern-perf.err" "${cmd[@]}" &&
            bps=$(json_get 'd["throughput_bps"]' <"$WORK/logs/tern-perf.json" 2>/dev/null); then
            ok=1
            break
        fi
        log "tern perf -P $p --protect $prot FAILED (attempt $attempt):"
        tail -3 "$WORK/logs/tern-perf.err" >&2 || true
        serve_vanished || break
    done
    if [ "$ok" = 1 ]; then
        result perf tern "$p" "$prot" "$rep" "$bps" ""
        log "tern perf -P $p --protect $prot: $(awk -v b="$bps" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }')"
    else
        result perf tern "$p" "$prot" "$rep" nan "tern perf failed: $(tail -1 "$WORK/logs/tern-perf.err" 2>/dev/null)"
    fi
}
iperf3_run() {  # iperf3_run STREAMS REP
    local p=$1 rep=$2 bps
    ensure_iperf3
    local cmd=(iperf3 -c 127.0.0.1 -p "$IPORT" -t "$PERF_TIME" -P "$p" -J)
    remember "${cmd[@]}"
    run_bounded $((PERF_TIME + 30)) "$WORK/logs/iperf3.json" "$WORK/logs/iperf3-client.err" "${cmd[@]}" || true
    if bps=$(json_get 'd["end"]["sum_received"]["bits_per_second"]' <"$WORK/logs/iperf3.json" 2>/dev/null); then
        result perf iperf3 "$p" clear "$rep" "$bps" ""
        log "iperf3 -P $p: $(awk -v b="$bps" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }')"
    else
        result perf iperf3 "$p" clear "$rep" nan "iperf3 failed"
        log "iperf3 -P $p FAILED: $(json_get 'd.get("error", "?")' <"$WORK/logs/iperf3.json" 2>/dev/null || echo "no JSON")"
    fi
}

log "memory to memory: tern perf vs iperf3"
for rep in $(seq "$REPS"); do
    for p in $STREAM_COUNTS; do
        # Interleaved, so slow drift in machine load hits every tool alike.
        for prot in $PERF_PROTECTS; do
            tern_perf "$p" "$prot" "$rep"
            if [ "$prot" = clear ]; then iperf3_run "$p" "$rep"; fi
        done
    done
done

# ----------------------------------------------------------- sshd on loopback
SPORT=$(free_port)
SSHDIR=$WORK/ssh
remember ssh-keygen -q -t ed25519 -N '' -C tern-bench-host -f "$SSHDIR/host_key"
ssh-keygen -q -t ed25519 -N '' -C tern-bench-host -f "$SSHDIR/host_key"
remember ssh-keygen -q -t ed25519 -N '' -C tern-bench-client -f "$SSHDIR/client_key"
ssh-keygen -q -t ed25519 -N '' -C tern-bench-client -f "$SSHDIR/client_key"
cp "$SSHDIR/client_key.pub" "$SSHDIR/authorized_keys"
chmod 600 "$SSHDIR/authorized_keys"
cat >"$SSHDIR/sshd_config" <<EOF
Port $SPORT
ListenAddress 127.0.0.1
HostKey $SSHDIR/host_key
PidFile none
PermitRootLogin yes
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile $SSHDIR/authorized_keys
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
LogLevel INFO
EOF
if [ "$(id -u)" = 0 ] && [ ! -d /run/sshd ]; then
    mkdir -m 0755 /run/sshd # privilege separation directory sshd insists on
    MADE_RUN_SSHD=1
fi
"$SSHD" -t -f "$SSHDIR/sshd_config" || die "sshd rejected its configuration"
remember "$SSHD" -D -f "$SSHDIR/sshd_config" -E "$SSHDIR/sshd.log"
"$SSHD" -D -f "$SSHDIR/sshd_config" -E "$SSHDIR/sshd.log" &
PIDS+=("$!")
wait_listen "$SPORT" "$!" || { cat "$SSHDIR/sshd.log" >&2; die "sshd did not start"; }
SSH_USER=$(id -un)
SSH_OPTS=(-F none -i "$SSHDIR/client_key" -o IdentitiesOnly=yes -o BatchMode=yes
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR)
SSH_E="ssh -p $SPORT ${SSH_OPTS[*]}"   # for rsync -e (no spaces in $WORK, checked above)
ssh_ok=0
for _ in $(seq 50); do
    if timeout 10 ssh -p "$SPORT" "${SSH_OPTS[@]}" "$SSH_USER@127.0.0.1" true 2>/dev/null; then
        ssh_ok=1
        break
    fi
    sleep 0.2
done
[ "$ssh_ok" = 1 ] || { cat "$SSHDIR/sshd.log" >&2; die "cannot log in to the benchmark sshd on port $SPORT"; }
cipher=$(timeout 10 ssh -v -p "$SPORT" "${SSH_OPTS[@]}" -o LogLevel=DEBUG1 "$SSH_USER@127.0.0.1" true 2>&1 |
    sed -n 's/.*kex: client->server cipher: \([^ ]*\) MAC: \([^ ]*\).*/\1 (MAC \2)/p' | head -1)
meta ssh_cipher "${cipher:-unknown}"
log "sshd on 127.0.0.1:$SPORT, cipher ${cipher:-unknown}"

# ----------------------------------------------------------- disk to disk runs
SRC=$WORK/src.bin
log "writing $DISK_MIB MiB of random data"
remember head -c "$DISK_BYTES" /dev/urandom
run_bounded 300 "$SRC" "$WORK/logs/gen.err" head -c "$DISK_BYTES" /dev/urandom || true
[ "$(stat -c %s "$SRC")" = "$DISK_BYTES" ] || die "could not write the test file"

DROP=0
if [ "$(id -u)" = 0 ] && sync && (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
    DROP=1
    remember_raw 'sync; echo 3 > /proc/sys/vm/drop_caches'
fi
meta drop_caches "$DROP"
[ "$DROP" = 1 ] || log "cannot drop the page cache (not root?): sources are read from memory"

drop_caches() {
    sync
    if [ "$DROP" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
}

disk_run() {  # disk_run TOOL PROTECT REP DSTFILE CMD...
    local tool=$1 prot=$2 rep=$3 dst=$4 t0 t1 t2 rc=0 note="" mbs mbs_sync
    shift 4
    local attempt
    for attempt in 1 2; do
        if [ "$tool" = tern ]; then ensure_tern_serve; fi
        rm -f "$dst"
        drop_caches
        remember "$@"
        rc=0
        t0=$(now)
        : >"$WORK/logs/disk.err"
        run_bounded "$DISK_TIMEOUT" "$WORK/logs/disk.out" "$WORK/logs/disk.err" "$@" || rc=$?
        t1=$(now)
        if [ "$rc" = 0 ] || [ "$tool" != tern ] || ! serve_vanished; then break; fi
        log "$tool $prot FAILED (attempt $attempt), exit $rc:"
        tail -3 "$WORK/logs/disk.err" >&2 || true
    done
    if [ "$rc" = 0 ]; then sync "$dst" 2>/dev/null || true; fi
    t2=$(now)
    if [ "$rc" = 124 ]; then
        note="$tool timed out after $DISK_TIMEOUT s (killed)"
    elif [ "$rc" != 0 ]; then
        note="$tool exited $rc: $(tail -1 "$WORK/logs/disk.err" 2>/dev/null)"
    elif ! cmp -s "$SRC" "$dst"; then
        note="$tool: copy differs from source"
    fi
    if [ -n "$note" ]; then
        result disk "$tool" - "$prot" "$rep" nan "$note"
        result disk-sync "$tool" - "$prot" "$rep" nan "$note"
        log "$tool ${prot} FAILED: $note"
        tail -5 "$WORK/logs/disk.err" >&2 || true
    else
        mbs=$(awk -v b="$DISK_BYTES" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.3f", b / 1e6 / (z - a) }')
        mbs_sync=$(awk -v b="$DISK_BYTES" -v a="$t0" -v z="$t2" 'BEGIN { printf "%.3f", b / 1e6 / (z - a) }')
        result disk "$tool" - "$prot" "$rep" "$mbs" ""
        result disk-sync "$tool" - "$prot" "$rep" "$mbs_sync" ""
        local label=$tool
        if [ "$prot" != - ]; then label+=" $prot"; fi
        log "$label: $mbs MB/s ($mbs_sync MB/s with fsync), verified"
    fi
    rm -f "$dst"
}

log "disk to disk: tern cp vs rsync vs scp"
for rep in $(seq "$DISK_REPS"); do
    disk_run tern private "$rep" "$WORK/root/tern-dst.bin" \
        "$TERN" cp --fingerprint "$FP" --json --no-progress "$SRC" "tern://127.0.0.1:$TPORT/tern-dst.bin"
    disk_run tern clear "$rep" "$WORK/root/tern-dst.bin" \
        "$TERN" cp --protect clear --fingerprint "$FP" --json --no-progress "$SRC" "tern://127.0.0.1:$TPORT/tern-dst.bin"
    disk_run rsync - "$rep" "$WORK/rsync-dst.bin" \
        rsync -e "$SSH_E" "$SRC" "$SSH_USER@127.0.0.1:$WORK/rsync-dst.bin"
    disk_run scp - "$rep" "$WORK/scp-dst.bin" \
        scp -q -P "$SPORT" "${SSH_OPTS[@]}" "$SRC" "$SSH_USER@127.0.0.1:$WORK/scp-dst.bin"
done

meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------- report
PYTHONPATH="$REPO/bench" python3 - "$RESULTS" "$META" "$CMDS" "$OUT" "$SERVE_EVENTS" <<'PY'
import math
import statistics
import sys

from reportlib import marked_sections

results_path, meta_path, cmds_path, out_path, events_path = sys.argv[1:6]
events = [line.strip() for line in open(events_path) if line.strip()]
meta = {}
for line in open(meta_path):
    k, _, v = line.rstrip("\n").partition("\t")
    meta[k] = v
rows = []
for line in open(results_path):
    section, tool, streams, protect, rep, value, note = line.rstrip("\n").split("\t")
    rows.append(dict(section=section, tool=tool, streams=streams, protect=protect,
                     rep=int(rep), value=float(value), note=note))


def values(section, tool, streams="-", protect="-"):
    return [r["value"] for r in rows if r["section"] == section and r["tool"] == tool
            and (streams == "*" or r["streams"] == streams) and r["protect"] == protect]


def med(vs):
    ok = [v for v in vs if not math.isnan(v)]
    return statistics.median(ok) if ok else math.nan


def fmt(x, scale=1.0, digits=2):
    return "failed" if math.isnan(x) else f"{x / scale:.{digits}f}"


def ratio(a, b):
    return "n/a" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}"


def runs(vs, scale=1.0, digits=2):
    return ", ".join(fmt(v, scale, digits) for v in vs)


reps, disk_reps = int(meta["reps"]), int(meta["disk_reps"])
stat = "median of %d runs" % reps if reps > 1 else "1 run"
disk_stat = "median of %d runs" % disk_reps if disk_reps > 1 else "1 run"
stream_counts = sorted({r["streams"] for r in rows if r["section"] == "perf"}, key=int)

perf_lines = [
    f"| streams | tern clear (Gbit/s) | tern private (Gbit/s) | iperf3 (Gbit/s) "
    f"| tern clear / iperf3 | tern private / iperf3 |",
    "| ---: | ---: | ---: | ---: | ---: | ---: |",
]
perf_runs = []
for p in stream_counts:
    c, pr, i = (values("perf", "tern", p, "clear"), values("perf", "tern", p, "private"),
                values("perf", "iperf3", p, "clear"))
    mc, mp, mi = med(c), med(pr), med(i)
    perf_lines.append(f"| {p} | {fmt(mc, 1e9)} | {fmt(mp, 1e9)} | {fmt(mi, 1e9)} "
                      f"| {ratio(mc, mi)} | {ratio(mp, mi)} |")
    perf_runs.append(f"- P{p}: tern clear {runs(c, 1e9)}; tern private {runs(pr, 1e9)}; "
                     f"iperf3 {runs(i, 1e9)} Gbit/s")

disk_tools = [("tern cp (private, default)", "tern", "private"),
              ("tern cp --protect clear", "tern", "clear"),
              ("rsync over ssh", "rsync", "-"), ("scp", "scp", "-")]
disk_lines = ["| tool | MB/s | MB/s incl. fsync of the copy | runs (MB/s) |",
              "| --- | ---: | ---: | --- |"]
dm = {}
for label, tool, prot in disk_tools:
    v, vs = values("disk", tool, "-", prot), values("disk-sync", tool, "-", prot)
    dm[(tool, prot)] = (med(v), med(vs))
    disk_lines.append(f"| {label} | {fmt(med(v), 1, 0)} | {fmt(med(vs), 1, 0)} | {runs(v, 1, 0)} |")
ratio_lines = ["| | tern / rsync | tern / scp | tern / rsync incl. fsync | tern / scp incl. fsync |",
               "| --- | ---: | ---: | ---: | ---: |"]
for label, prot in (("tern private", "private"), ("tern clear", "clear")):
    t = dm[("tern", prot)]
    r, s = dm[("rsync", "-")], dm[("scp", "-")]
    ratio_lines.append(f"| {label} | {ratio(t[0], r[0])} | {ratio(t[0], s[0])} "
                       f"| {ratio(t[1], r[1])} | {ratio(t[1], s[1])} |")

failures = [r for r in rows if r["note"] and r["section"] != "disk-sync"]
work, tern, repo = meta["work"], meta["tern"], meta["repo"]
cmds = []
for line in open(cmds_path):
    line = line.rstrip("\n").replace(tern, "target/release/tern").replace(work, "$WORK")
    cmds.append(line.replace(repo + "/", ""))

nproc = meta["nproc"]
title = "tern loopback benchmarks" + (" (quick run)" if meta["mode"] == "quick" else "")
drop = ("page cache dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) before every copy, "
        "so the source is read from disk" if meta["drop_caches"] == "1" else
        "page cache NOT dropped (not root): sources were read from memory")
md = f"""# {title}

Generated by `bench/loopback.sh{' --quick' if meta['mode'] == 'quick' else ''}` on {meta['date']}.
Everything ran on one machine over 127.0.0.1; see `bench/README.md`.

## Machine

| | |
| --- | --- |
| CPU | {meta['cpu']} |
| cores (nproc) | {nproc} |
| memory | {meta['memory']} |
| kernel | {meta['kernel']} |
| load average (1/5/15 min) at start / end | {meta['load_start']} / {meta['load_end']} |

## Tools

| | |
| --- | --- |
| tern | {meta['tern_version']} (working tree at {meta['tern_commit']}; binary built {meta['tern_built']}) |
| iperf3 | {meta['iperf3_version']} |
| rsync | {meta['rsync_version']} |
| ssh | {meta['ssh_version']}; cipher {meta['ssh_cipher']} |

## How to read these numbers

Both ends of every transfer run on the same {nproc}-core machine, so loopback is
CPU-bound, not network-bound: sender, receiver, the kernel's TCP stack and (for
`private`, ssh) the cipher all compete for the same cores, and a number here is
a measure of CPU cost per byte rather than of what a real network path would
give. A ratio above 1 means tern was faster. `tern / iperf3` compares against
a tool that does nothing but move bytes: iperf3 3.12 runs all of its streams in
one thread and neither checks nor encrypts anything, whereas `tern perf` frames
every block and checks it on arrival (`clear`: unkeyed checksum; `private`: TLS
on every stream), so `clear / iperf3` is the engine's overhead and `private /
iperf3` adds the cost of encryption. With more streams than cores, extra
streams can only help by overlapping work, not by adding CPU. The disk-to-disk
table compares whole copies of one {meta['disk_mib']} MiB random file, timed by
wall clock from process start to exit (connection setup, authentication and
the final digest included) and checked with `cmp`; {drop}. No tool fsyncs by
default, so the "incl. fsync" column adds the time `sync FILE` took to flush
the copy to disk afterwards. On a shared, busy machine runs vary by tens of
percent; the runs are interleaved so that drift hits every tool alike, and
medians are reported.

## Memory to memory: `tern perf` vs `iperf3` ({stat} of {meta['perf_time']} s each)

tern: `throughput_bps` from `--json` (payload bytes the daemon verified, over
the whole session including its setup). iperf3: `end.sum_received.bits_per_second`.

{chr(10).join(perf_lines)}

Runs:

{chr(10).join(perf_runs)}

## Disk to disk: `tern cp` vs `rsync` vs `scp` ({meta['disk_mib']} MiB random file, {disk_stat})

MB = 10^6 bytes. tern uses its defaults (4 streams, xxh3 whole-file digest).

{chr(10).join(disk_lines)}

{chr(10).join(ratio_lines)}
"""
if failures:
    md += "\n## Failures\n\n" + "\n".join(
        f"- {r['section']} {r['tool']}{'' if r['streams'] == '-' else ' P' + r['streams']} {r['protect']} run {r['rep']}: {r['note']}"
        for r in failures) + "\n"
if events:
    md += "\n## Server restarts\n\n" + "\n".join(f"- {e}" for e in events) + "\n"
md += "\n## Commands\n\n`$WORK` is the script's temporary directory; ports are picked free at run time.\n\n```\n"
md += "\n".join(cmds) + "\n```\n"
try:
    sshd_config = open(work + "/ssh/sshd_config").read().replace(work, "$WORK")
    md += "\n`$WORK/ssh/sshd_config`:\n\n```\n" + sshd_config + "```\n"
except OSError:
    pass
# Keep the sections other scripts put into the same file with --write (wan.sh,
# drs.sh, files.sh: each between its <!-- NAME:start --> and <!-- NAME:end -->).
try:
    for section in marked_sections(open(out_path).read()):
        md += "\n" + section + "\n"
except OSError:
    pass
with open(out_path, "w") as f:
    f.write(md)

print()
print("memory to memory (%s, Gbit/s)" % stat)
print("\n".join(perf_lines))
print()
print("disk to disk (%s MiB, %s)" % (meta["disk_mib"], disk_stat))
print("\n".join(disk_lines))
print()
print("\n".join(ratio_lines))
for e in events:
    print("NOTE:", e)
if failures:
    print()
    print("FAILURES:")
    for r in failures:
        print(f"  {r['section']} {r['tool']}{'' if r['streams'] == '-' else ' P' + r['streams']} {r['protect']} run {r['rep']}: {r['note']}")
PY
log "report written to $OUT"
