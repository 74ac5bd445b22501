#!/usr/bin/env bash
# bench/efficiency.sh: issue 14's efficiency bench on loopback: rate AND CPU cost of tern
# against GridFTP (globus-url-copy), xrdcp and iperf3, side by side, on 127.0.0.1.
#
#   bash bench/efficiency.sh                full: 2 GiB file, 3 runs of everything (about 10 min)
#   bash bench/efficiency.sh --quick        smoke: 256 MiB file, 1 run (about 1-2 min)
#   bash bench/efficiency.sh --size MIB     size of the disk-to-disk test file (default 2048; 256 with --quick)
#   bash bench/efficiency.sh --reps N       runs of every configuration (default 3; 1 with --quick)
#   bash bench/efficiency.sh --perf-time S  seconds per memory-to-memory run (default 5)
#   bash bench/efficiency.sh --out FILE     the Markdown report (default bench/efficiency-results.md)
#
# Disk to disk: tern cp (private and clear) to tern serve, globus-url-copy (default and
# -p 4) to globus-gridftp-server, xrdcp to xrootd; source in the page cache, copy to disk,
# the peers' time including `sync DESTFILE` (tern fsyncs itself). Memory to memory: tern
# perf (private, safe, clear) against iperf3, 1 and 4 streams. Every run records the CPU
# seconds of the client and of the server; the report gives rates, CPU s/GB and issue 14's
# ratios with PASS/FAIL. Needs root, target/release/tern, python3, /usr/bin/time and the
# peers (bash bench/install-peers.sh). Everything it starts is stopped, and its temporary
# directory deleted, on exit. TERN=... selects another binary, BENCH_TMPDIR=DIR the place
# for the temporary files (twice the file size).
#
# How it measures:
# - Servers, all on 127.0.0.1 and on ports picked free at run time: `tern serve --listen
#   127.0.0.1:P --root DST --state-dir S`; `runuser -u nobody -- globus-gridftp-server -aa
#   -anonymous-user nobody -p P -control-interface 127.0.0.1 -data-interface 127.0.0.1`
#   (GridFTP refuses root; DST is mode 1777 and its parents traversable); `xrootd -c CFG
#   -R nobody` with the minimal configuration `all.export DST`, `xrd.port P`, `xrd.allow
#   host localhost` (xrootd cannot bind one address, so it listens on all of them but
#   accepts only this host) and its admin/pid paths; `iperf3 -s -B 127.0.0.1 -p P`.
# - Disk to disk: before EVERY copy the destination is deleted, then `sync; echo 3 >
#   /proc/sys/vm/drop_caches; cat SRC > /dev/null`. Time = client start to exit, plus
#   `sync DESTFILE` for globus-url-copy and xrdcp. Rate = file bytes x 8 / time. Every copy
#   is checked (size, then cmp); a failed or wrong copy is a failed run, never retried.
# - CPU: the client's user+sys with its children from /usr/bin/time (+ sync's); the
#   server's from /proc/PID/stat (utime+stime+cutime+cstime) summed over its whole process
#   tree before and after the run, so GridFTP's forked session processes count whether
#   still alive or already reaped. CPU s/GB = (client + server) / (bytes / 10^9).
# - Memory to memory: `tern perf --time T -P N --protect {private,safe,clear} --json`
#   (throughput_bps) and `iperf3 -c -t T -P N -J` (end.sum_received.bits_per_second),
#   N = 1 and 4, CPU of both ends as above.
# - Runs are interleaved (the list forward on odd runs, backward on even ones); medians
#   (min-max) are reported, and /proc/stat over each run tells whether the tools, other
#   load, or the disk (iowait) used the machine: the "limited by" column.
# - The report is one Markdown section between <!-- efficiency:start --> and
#   <!-- efficiency:end --> (bench/efficiency.py), with machine facts, versions, the load
#   at start and end, every command as run, and issue 14's goals with PASS/FAIL:
#   tern private / globus-url-copy rate >= 1.0 and CPU s/GB ratio <= 1.5; tern clear /
#   globus-url-copy rate >= 1.15 and CPU ratio <= 1.0; tern perf private -P 4 / iperf3 -P 4
#   >= 0.8. It never touches BENCHMARKS.md; to put it there:
#     python3 -c 'import sys; sys.path.insert(0, "bench"); import reportlib;
#       reportlib.splice("efficiency", "bench/efficiency-results.md", "BENCHMARKS.md")'
# - xrdcp is optional: if it or xrootd is missing or will not start, the report says
#   "not measured" and why. The other peers are required.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
BENCH_NAME=efficiency.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

QUICK=0 OUT="" DISK_MIB="" REPS="" PERF_TIME=5
need_arg() { [ "$2" -ge 2 ] || { echo "$BENCH_NAME: $1 needs a value" >&2; exit 2; }; }
pos_int() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$BENCH_NAME: $1 wants a positive whole number, not '$2'" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --size) need_arg "$1" $#; pos_int "$1" "$2"; DISK_MIB=$2; shift ;;
        --reps) need_arg "$1" $#; pos_int "$1" "$2"; REPS=$2; shift ;;
        --perf-time) need_arg "$1" $#; pos_int "$1" "$2"; PERF_TIME=$2; shift ;;
        --out) need_arg "$1" $#; OUT=$2; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$BENCH_NAME: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    MODE=quick
    DISK_MIB=${DISK_MIB:-256}
    REPS=${REPS:-1}
else
    MODE=full
    DISK_MIB=${DISK_MIB:-2048}
    REPS=${REPS:-3}
fi
OUT=${OUT:-$REPO/bench/efficiency-results.md}
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
DISK_BYTES=$((DISK_MIB * 1024 * 1024))
DISK_TIMEOUT=$((60 + DISK_MIB / 8))   # per copy (and per sync): at least ~8 MiB/s
PERF_LIMIT=$((PERF_TIME + 60))         # per memory-to-memory run
STREAM_COUNTS="1 4"
GFS=/usr/sbin/globus-gridftp-server
# Servers live at most as long as the whole run can take.
SERVER_TIMEOUT=$((REPS * (5 * (3 * DISK_TIMEOUT + 60) + 8 * (PERF_LIMIT + 30)) + 900))

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "needs root: it drops the page cache before every copy and runs GridFTP and xrootd as nobody"
for _ in $(seq 60); do  # the binary may be missing for a moment while it is rebuilt
    [ -x "$TERN" ] && break
    sleep 2
done
[ -x "$TERN" ] || die "no tern binary at $TERN; build it with: cargo build --release -p tern"
for tool in python3 timeout cmp ss pgrep runuser sync findmnt; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
[ -x /usr/bin/time ] || die "/usr/bin/time not found (apt-get install time)"
command -v iperf3 >/dev/null || die "iperf3 not found; install the peers with: bash bench/install-peers.sh (or apt-get install iperf3)"
command -v globus-url-copy >/dev/null ||
    die "globus-url-copy not found; install the peers with: bash bench/install-peers.sh (package globus-gass-copy-progs)"
[ -x "$GFS" ] || die "$GFS not found; install the peers with: bash bench/install-peers.sh (package globus-gridftp-server-progs)"
HAVE_XRD=1 XRD_MISSING=""
command -v xrdcp >/dev/null || { HAVE_XRD=0 XRD_MISSING="xrdcp not installed (package xrootd-client; bash bench/install-peers.sh)"; }
command -v xrootd >/dev/null || { HAVE_XRD=0 XRD_MISSING="xrootd not installed (package xrootd-server; bash bench/install-peers.sh)"; }

# ------------------------------------------------------------ temporary directory
WORK_PARENT=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$WORK_PARENT/tern-efficiency.XXXXXX")
case "$WORK" in *[[:space:]]*) rm -rf "$WORK"; die "temporary directory path must not contain spaces: $WORK" ;; esac
descendants() {  # PID: every live descendant of PID
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do
        echo "$c"
        descendants "$c"
    done
}
bench_cleanup_extra() {  # called by bench_cleanup: stop every server with its whole process tree
    local pid d tree=()
    for pid in "${PIDS[@]}"; do
        for d in $(descendants "$pid"); do tree+=("$d"); done
    done
    stop_servers
    for d in "${tree[@]}"; do kill -KILL "$d" 2>/dev/null || true; done
}
trap bench_cleanup EXIT   # bench/lib.sh: stops the running client and the servers, deletes WORK
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 755 "$WORK"          # GridFTP and xrootd run as nobody: WORK must be traversable
LOGS=$WORK/logs
DST=$WORK/dst              # every server writes here: tern serve's root, xrootd's export
mkdir -p "$LOGS" "$DST" "$WORK/xdg" "$WORK/state" "$WORK/bin" "$WORK/nobody"
chmod 1777 "$DST"
chown nobody "$WORK/nobody"  # logs and admin files of the servers that run as nobody
cp "$TERN" "$WORK/bin/tern"  # a rebuild during the run must not change the binary under test
TERN_ORIG=$TERN
TERN=$WORK/bin/tern
export XDG_CONFIG_HOME=$WORK/xdg   # tern's known_hosts
# tern's path memory (paths.json: the stream count and rate of the last copy to a
# daemon) starts empty, so that no earlier copy to 127.0.0.1 steers this run's.
export XDG_STATE_HOME=$WORK/xdg-state
export GLOBUS_USAGE_OPTOUT=1
avail=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
need=$((DISK_MIB * 1024 * 2 + 512 * 1024))
[ "$avail" -ge "$need" ] || die "need $((need / 1024)) MiB free under $WORK_PARENT, have $((avail / 1024)) MiB (set BENCH_TMPDIR)"

bench_tables   # meta.tsv, results.tsv, events.txt, server-commands.txt
CMDS=$WORK/commands.txt
NOTMEASURED=$WORK/not-measured.tsv
: >"$CMDS"
: >"$NOTMEASURED"
remember() { remember_raw "$(quote "$@")"; }
remember_raw() { grep -qxF -- "$1" "$CMDS" || printf '%s\n' "$1" >>"$CMDS"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ------------------------------------------------------------------ environment
meta mode "$MODE"
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta nproc "$(nproc)"
meta cpu "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
meta kernel "$(uname -sr)"
meta memory "$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
meta filesystem "$(findmnt -no SOURCE,FSTYPE -T "$WORK" | head -1) (under $WORK_PARENT)"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
meta tern_version "$(first_line "$TERN" --version)"
meta tern_commit "$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)"
meta tern_built "$(date -u -r "$TERN_ORIG" '+%Y-%m-%d %H:%M UTC')"
meta guc_version "$(first_line globus-url-copy -version)"
meta gfs_version "$(first_line "$GFS" -version)"
meta xrdcp_version "$(if command -v xrdcp >/dev/null; then first_line xrdcp --version; else echo missing; fi)"
meta xrootd_version "$(if command -v xrootd >/dev/null; then first_line xrootd -v; else echo missing; fi)"
meta iperf3_version "$(first_line iperf3 --version)"
meta tcp_cc "$(cat /proc/sys/net/ipv4/tcp_congestion_control)"
meta tcp_rmem "$(tr -s '\t' ' ' </proc/sys/net/ipv4/tcp_rmem)"
meta tcp_wmem "$(tr -s '\t' ' ' </proc/sys/net/ipv4/tcp_wmem)"
meta disk_mib "$DISK_MIB"
meta reps "$REPS"
meta perf_time "$PERF_TIME"
meta stream_counts "$STREAM_COUNTS"
meta work "$WORK"
meta tern "$TERN"
meta repo "$REPO"
log "mode $MODE: disk ${DISK_MIB} MiB x $REPS, perf ${PERF_TIME}s x $REPS; work dir $WORK"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------- servers
# Each server runs under `timeout`; SRV[NAME] is that timeout's pid, the root of the
# process tree whose CPU is counted (runuser, the server, its forked sessions).
declare -A SRV=()
TPORT=$(free_port) GPORT=$(free_port) XPORT=$(free_port) IPORT=$(free_port)
start_srv() {  # NAME PORT CMD...: CMD under timeout; 0 once something listens on 127.0.0.1:PORT (10 s)
    local name=$1 port=$2 _
    shift 2
    remember "$@"
    timeout "$SERVER_TIMEOUT" "$@" >>"$LOGS/$name.out" 2>>"$LOGS/$name.err" &
    SRV[$name]=$!
    PIDS+=("$!")
    for _ in $(seq 100); do
        kill -0 "${SRV[$name]}" 2>/dev/null || break
        if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then return 0; fi
        sleep 0.1
    done
    log "$name did not start; last lines of its output:"
    tail -n 5 "$LOGS/$name.err" "$LOGS/$name.out" >&2 2>/dev/null || true
    stop_pid "${SRV[$name]}"
    SRV[$name]=""
    return 1
}
start_tern() {
    start_srv tern "$TPORT" "$TERN" serve --listen "127.0.0.1:$TPORT" --root "$DST" --state-dir "$WORK/state" || return 1
    local _
    FP=""
    for _ in $(seq 50); do
        FP=$(sed -n 's/^tern serve: certificate fingerprint \(SHA256:[^ ]*\).*/\1/p' "$LOGS/tern.out" | tail -1)
        [ -n "$FP" ] && return 0
        sleep 0.1
    done
    return 1
}
start_gridftp() {  # it refuses to run as root; -aa -anonymous-user nobody: anonymous logins as nobody
    start_srv gridftp "$GPORT" runuser -u nobody -- "$GFS" -aa -anonymous-user nobody -p "$GPORT" \
        -control-interface 127.0.0.1 -data-interface 127.0.0.1 -disable-usage-stats \
        -log-level error,warn,info -logfile "$WORK/nobody/gridftp.log"
}
start_xrootd() {  # -R nobody: starts as root, runs as nobody
    start_srv xrootd "$XPORT" xrootd -c "$WORK/xrootd.cfg" -l "$WORK/nobody/xrootd.log" -R nobody
}
start_iperf3() { start_srv iperf3 "$IPORT" iperf3 -s -B 127.0.0.1 -p "$IPORT"; }
ensure() {  # NAME WHAT: 0 if server NAME runs; if it has gone, note it and start it again
    local name=$1
    if [ -n "${SRV[$name]:-}" ] && kill -0 "${SRV[$name]}" 2>/dev/null; then return 0; fi
    if [ -n "${SRV[$name]:-}" ]; then
        local rc=0
        wait "${SRV[$name]}" 2>/dev/null || rc=$?
        echo "$name had exited (status $rc) before $2; started again" >>"$WORK/events.txt"
        log "  $name had exited (status $rc); starting it again"
    fi
    "start_$name"
}

start_tern || die "tern serve did not start"
log "tern serve on 127.0.0.1:$TPORT ($FP)"
start_gridftp || die "globus-gridftp-server did not start (see above)"
log "GridFTP on 127.0.0.1:$GPORT"
start_iperf3 || die "iperf3 -s did not start"
if [ "$HAVE_XRD" = 1 ]; then
    # The minimal configuration: export DST, a port; xrd.allow: connections from this host only
    # (xrootd has no option to listen on one address).
    cat >"$WORK/xrootd.cfg" <<EOF
all.export $DST
xrd.port $XPORT
xrd.allow host localhost
all.adminpath $WORK/nobody
all.pidpath $WORK/nobody
EOF
    if start_xrootd; then
        log "xrootd on port $XPORT"
    else
        HAVE_XRD=0
        XRD_MISSING="xrootd did not start: $(cat "$LOGS/xrootd.err" "$WORK/nobody/xrootd.log" 2>/dev/null | sed -n '/[^[:space:]]/p' | tail -1 | cut -c1-200 || true)"
    fi
fi
[ "$HAVE_XRD" = 1 ] || { printf 'xrdcp\t%s\n' "$XRD_MISSING" >>"$NOTMEASURED"; log "xrdcp not measured: $XRD_MISSING"; }

# -------------------------------------------------------------------- measuring
# sample ROOTPID: "CPU BUSY IOWAIT" in seconds: CPU = user+system of ROOTPID and all its
# live descendants, each with its reaped children (/proc/PID/stat utime, stime, cutime,
# cstime), so a forked session counts whether it still runs or has been reaped; BUSY and
# IOWAIT = the whole machine's non-idle and iowait time, all cores (/proc/stat).
SAMPLE_PY='
import os, sys
tck = os.sysconf("SC_CLK_TCK")
procs = {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            s = open("/proc/%s/stat" % d).read()
        except OSError:
            continue
        f = s[s.rindex(")") + 2:].split()
        procs[int(d)] = (int(f[1]), sum(int(x) for x in f[11:15]))
kids = {}
for p, (pp, _) in procs.items():
    kids.setdefault(pp, []).append(p)
root = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else -1
if root in procs:
    total, stack, seen = 0, [root], set()
    while stack:
        p = stack.pop()
        if p not in seen:
            seen.add(p)
            total += procs[p][1]
            stack += kids.get(p, [])
    cpu = "%.2f" % (total / tck)
else:
    cpu = "nan"
c = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
busy = c[0] + c[1] + c[2] + c[5] + c[6] + c[7]
print(cpu, "%.2f" % (busy / tck), "%.2f" % (c[4] / tck))
'
sample() { timeout 20 python3 -c "$SAMPLE_PY" "$@" 2>/dev/null || echo "nan nan nan"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || a == "" || b == "") print "nan"; else printf "%.2f", b - a }'; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan") print "nan"; else printf "%.2f", a + b }'; }

# run_client SECS OUT CMD...: CMD under timeout and /usr/bin/time, as a background job
# (so Ctrl-C reaches the cleanup at once); sets M_RC, M_WALL and M_CPU (user+sys of CMD
# and its children). stderr in $LOGS/run.err, also appended to all-runs.err.
run_client() {
    local secs=$1 out=$2 t0 t1
    shift 2
    M_RC=0
    : >"$LOGS/run.err"
    : >"$LOGS/time.txt"
    t0=$(now)
    /usr/bin/time -o "$LOGS/time.txt" -f '%U %S' timeout "$secs" "$@" >"$out" 2>>"$LOGS/run.err" &
    CHILD=$!
    wait "$CHILD" || M_RC=$?
    CHILD=""
    t1=$(now)
    M_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    M_CPU=$(tail -1 "$LOGS/time.txt" 2>/dev/null | awk 'NF == 2 && $1 ~ /^[0-9.]+$/ { printf "%.2f", $1 + $2; ok = 1 } END { if (!ok) print "nan" }')
    { echo "== $(quote "$@")"; cat "$LOGS/run.err"; } >>"$LOGS/all-runs.err"
}
fail_note() {  # why the last run_client failed
    if [ "$M_RC" = 124 ]; then echo "timed out (killed)"; else echo "exit $M_RC: $(sed -n '/[^[:space:]]/p' "$LOGS/run.err" | tail -1 | cut -c1-200 || true)"; fi
}
bounded() {  # SECS CMD...: CMD under timeout, in the background and waited for
    local secs=$1 rc=0
    shift
    timeout "$secs" "$@" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    return "$rc"
}
clear_dst() { find "$DST" -mindepth 1 -delete 2>/dev/null || true; }
drop_and_warm() {  # the destination's old data out, the source back into the page cache
    bounded 120 sync || return 1
    echo 3 >/proc/sys/vm/drop_caches || return 1
    bounded "$DISK_TIMEOUT" cat "$SRC" >/dev/null
}
# One results.tsv row:
#   kind id rep command bytes wall wall_client sync_wall bps cpu_client cpu_server span busy iowait extra note
# wall = the time the rate is computed from (client + sync for the peers' copies);
# span = the time between the two CPU samples; busy, iowait: the machine's, over span.

disk_run() {  # REP ID SERVER DSTFILE CMD...: one copy of $SRC, verified
    local rep=$1 id=$2 srv=$3 dst=$4 cmd note="" extra="" s0 s1 b0 b1 w0 w1 t0 t1
    local wall_client cpu_client sync_wall=0 sync_cpu=0 wall bps
    shift 4
    cmd=$(quote "$@")
    remember_raw "$cmd"
    if ! ensure "$srv" "disk $id run $rep"; then
        result disk "$id" "$rep" "$cmd" nan nan nan nan nan nan nan nan nan nan "" "$srv server not running"
        log "  $id FAILED: $srv server not running"
        return
    fi
    clear_dst
    if ! drop_and_warm; then
        result disk "$id" "$rep" "$cmd" nan nan nan nan nan nan nan nan nan nan "" "could not drop the page cache or read the source"
        log "  $id FAILED: could not drop the page cache or read the source"
        return
    fi
    read -r s0 b0 w0 <<<"$(sample "${SRV[$srv]}")"
    t0=$(now)
    run_client "$DISK_TIMEOUT" "$LOGS/run.out" "$@"
    wall_client=$M_WALL cpu_client=$M_CPU
    local rc=$M_RC
    if [ "$rc" != 0 ]; then
        note="$(fail_note)"
    elif [ "$srv" != tern ]; then
        # tern fsyncs the file before its rename; the others do not: flush theirs, timed.
        remember sync "$dst"
        run_client "$DISK_TIMEOUT" /dev/null sync "$dst"
        sync_wall=$M_WALL sync_cpu=$M_CPU
        [ "$M_RC" = 0 ] || note="sync $(fail_note)"
    fi
    # Give forking servers a moment to end (and reap) their session processes.
    if [ "$srv" != tern ]; then sleep 0.3; fi
    read -r s1 b1 w1 <<<"$(sample "${SRV[$srv]}")"
    t1=$(now)
    if [ -z "$note" ]; then
        if [ "$(stat -c %s "$dst" 2>/dev/null || echo 0)" != "$DISK_BYTES" ]; then
            note="copy has the wrong size (or is missing)"
        elif ! bounded "$DISK_TIMEOUT" cmp -s "$SRC" "$dst"; then
            note="copy differs from the source"
        fi
    fi
    if [ "$srv" = tern ] && [ "$rc" = 0 ]; then
        extra="streams $(json_get 'd["streams"]' '?' <"$LOGS/run.out") at most, $(json_get 'd["stream_count"]["at_end"]' '?' <"$LOGS/run.out") at the end; tern's limit: $(json_get 'd["tuning"]["limit"]' '?' <"$LOGS/run.out")"
    fi
    wall=$(add "$wall_client" "$sync_wall")
    bps=$(awk -v n="$DISK_BYTES" -v t="$wall" 'BEGIN { printf "%.0f", n * 8 / t }')
    if [ -n "$note" ]; then bps=nan; fi
    result disk "$id" "$rep" "$cmd" "$DISK_BYTES" "$wall" "$wall_client" "$sync_wall" "$bps" \
        "$(add "$cpu_client" "$sync_cpu")" "$(sub "$s0" "$s1")" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$(sub "$b0" "$b1")" "$(sub "$w0" "$w1")" "$extra" "$note"
    if [ -n "$note" ]; then
        log "  $id FAILED: $note"
        tail -3 "$LOGS/run.err" >&2 || true
    else
        log "  $id: $(awk -v b="$bps" 'BEGIN { printf "%.2f", b / 1e9 }') Gbit/s in ${wall}s (sync ${sync_wall}s), CPU client $(add "$cpu_client" "$sync_cpu") s, server $(sub "$s0" "$s1") s, verified"
    fi
    clear_dst
}

mem_run() {  # REP ID SERVER LIMIT CMD...: one memory-to-memory run; the rate from its JSON
    local rep=$1 id=$2 srv=$3 cmd note="" extra="" s0 s1 b0 b1 w0 w1 t0 t1 bps=nan bytes=nan
    shift 3
    cmd=$(quote "$@")
    remember_raw "$cmd"
    if ! ensure "$srv" "mem $id run $rep"; then
        result mem "$id" "$rep" "$cmd" nan nan nan nan nan nan nan nan nan nan "" "$srv server not running"
        log "  $id FAILED: $srv server not running"
        return
    fi
    read -r s0 b0 w0 <<<"$(sample "${SRV[$srv]}")"
    t0=$(now)
    run_client "$PERF_LIMIT" "$LOGS/run.out" "$@"
    if [ "$srv" = iperf3 ]; then sleep 0.2; fi  # the server's end of the test
    read -r s1 b1 w1 <<<"$(sample "${SRV[$srv]}")"
    t1=$(now)
    if [ "$srv" = tern ]; then
        bps=$(json_get 'd["throughput_bps"]' <"$LOGS/run.out")
        bytes=$(json_get 'd["bytes"]' <"$LOGS/run.out")
        extra="streams $(json_get 'd["streams"]' '?' <"$LOGS/run.out") at most, $(json_get 'd["stream_count"]["at_end"]' '?' <"$LOGS/run.out") at the end; tern's limit: $(json_get 'd["tuning"]["limit"]' '?' <"$LOGS/run.out")"
    else
        bps=$(json_get 'd["end"]["sum_received"]["bits_per_second"]' <"$LOGS/run.out")
        bytes=$(json_get 'd["end"]["sum_received"]["bytes"]' <"$LOGS/run.out")
        extra="iperf3's own CPU %: client $(json_get '"%.0f" % d["end"]["cpu_utilization_percent"]["host_total"]' '?' <"$LOGS/run.out"), server $(json_get '"%.0f" % d["end"]["cpu_utilization_percent"]["remote_total"]' '?' <"$LOGS/run.out")"
    fi
    if [ "$M_RC" != 0 ] || [ "$bps" = nan ]; then
        note=$(fail_note)
        if [ "$srv" = iperf3 ]; then
            note="$(json_get 'd.get("error")' "$note" <"$LOGS/run.out")"
            # iperf3 -s serves one test at a time and can wedge after a failure: restart it
            stop_pid "${SRV[iperf3]}"
            echo "iperf3 -s restarted after the failed run $id $rep" >>"$WORK/events.txt"
            start_iperf3 || true
        fi
        bps=nan
    fi
    result mem "$id" "$rep" "$cmd" "$bytes" "$M_WALL" "$M_WALL" 0 "$bps" "$M_CPU" "$(sub "$s0" "$s1")" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$(sub "$b0" "$b1")" "$(sub "$w0" "$w1")" "$extra" "$note"
    if [ -n "$note" ]; then
        log "  $id FAILED: $note"
    else
        log "  $id: $(awk -v b="$bps" 'BEGIN { printf "%.2f", b / 1e9 }') Gbit/s, CPU client $M_CPU s, server $(sub "$s0" "$s1") s"
    fi
}

# Run a list of configurations (names of functions below) in order on odd runs and
# backwards on even ones, so that slow changes in load hit every tool alike.
interleave() {  # REP CONFIG...
    local rep=$1 i
    shift
    local list=("$@")
    if [ $((rep % 2)) = 0 ]; then
        for ((i = ${#list[@]} - 1; i >= 0; i--)); do ${list[$i]} "$rep"; done
    else
        for ((i = 0; i < ${#list[@]}; i++)); do ${list[$i]} "$rep"; done
    fi
}

# ---------------------------------------------------------------- disk to disk
SRC=$WORK/src.bin
log "writing $DISK_MIB MiB of random data"
remember head -c "$DISK_BYTES" /dev/urandom
bounded 600 head -c "$DISK_BYTES" /dev/urandom >"$SRC" || true
[ "$(stat -c %s "$SRC")" = "$DISK_BYTES" ] || die "could not write the test file"
chmod 644 "$SRC"
remember_raw 'sync; echo 3 > /proc/sys/vm/drop_caches; cat SRC > /dev/null   # before every copy'

d_tern_private() {
    disk_run "$1" tern-private tern "$DST/tern.bin" \
        "$TERN" cp --fingerprint "$FP" --no-progress --json "$SRC" "tern://127.0.0.1:$TPORT/tern.bin"
}
d_tern_clear() {
    disk_run "$1" tern-clear tern "$DST/tern.bin" \
        "$TERN" cp --protect clear --fingerprint "$FP" --no-progress --json "$SRC" "tern://127.0.0.1:$TPORT/tern.bin"
}
d_guc() { disk_run "$1" guc gridftp "$DST/guc.bin" globus-url-copy "file://$SRC" "ftp://127.0.0.1:$GPORT$DST/guc.bin"; }
d_guc_p4() { disk_run "$1" guc-p4 gridftp "$DST/guc.bin" globus-url-copy -p 4 "file://$SRC" "ftp://127.0.0.1:$GPORT$DST/guc.bin"; }
d_xrdcp() { disk_run "$1" xrdcp xrootd "$DST/xrd.bin" xrdcp -f -s "$SRC" "root://127.0.0.1:$XPORT/$DST/xrd.bin"; }

DISK_CONFIGS=(d_tern_private d_guc d_tern_clear d_guc_p4)
if [ "$HAVE_XRD" = 1 ]; then DISK_CONFIGS+=(d_xrdcp); fi
for rep in $(seq "$REPS"); do
    log "disk to disk, run $rep of $REPS"
    interleave "$rep" "${DISK_CONFIGS[@]}"
done
rm -f "$SRC"

# ------------------------------------------------------------ memory to memory
MEM_CONFIGS=()
for p in $STREAM_COUNTS; do
    eval "m_tern_private_$p() { mem_run \"\$1\" tern-private-P$p tern \"\$TERN\" perf tern://127.0.0.1:\$TPORT --time \$PERF_TIME -P $p --protect private --json --fingerprint \"\$FP\" --no-progress; }"
    eval "m_tern_safe_$p() { mem_run \"\$1\" tern-safe-P$p tern \"\$TERN\" perf tern://127.0.0.1:\$TPORT --time \$PERF_TIME -P $p --protect safe --json --fingerprint \"\$FP\" --no-progress; }"
    eval "m_tern_clear_$p() { mem_run \"\$1\" tern-clear-P$p tern \"\$TERN\" perf tern://127.0.0.1:\$TPORT --time \$PERF_TIME -P $p --protect clear --json --fingerprint \"\$FP\" --no-progress; }"
    eval "m_iperf3_$p() { mem_run \"\$1\" iperf3-P$p iperf3 iperf3 -c 127.0.0.1 -p \$IPORT -t \$PERF_TIME -P $p -J; }"
    MEM_CONFIGS+=("m_tern_private_$p" "m_iperf3_$p" "m_tern_safe_$p" "m_tern_clear_$p")
done
for rep in $(seq "$REPS"); do
    log "memory to memory, run $rep of $REPS"
    interleave "$rep" "${MEM_CONFIGS[@]}"
done

for name in "${!SRV[@]}"; do
    if [ -n "${SRV[$name]}" ] && ! kill -0 "${SRV[$name]}" 2>/dev/null; then
        echo "$name had exited by the end of the run" >>"$WORK/events.txt"
    fi
done
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------- report
if ! python3 "$REPO/bench/efficiency.py" "$WORK" "$OUT"; then
    keep=$REPO/bench/efficiency-report-inputs
    rm -rf "$keep"
    mkdir -p "$keep"
    cp "$WORK"/*.tsv "$WORK"/*.txt "$WORK"/xrootd.cfg "$keep/" 2>/dev/null || true
    die "the report generator failed; its inputs are in $keep (python3 bench/efficiency.py DIR OUT, with DIR holding them)"
fi
log "report written to $OUT"
