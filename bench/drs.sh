#!/usr/bin/env bash
# bench/drs.sh: the dynamic-right-sizing experiment (issue 4). Over emulated WAN
# paths (netlab), memory to memory and disk to disk, it compares a socket locked
# at 64 KiB, kernel autotuning with one stream, the hand-tuned best of a
# streams x window sweep, and tern with no flags; it reports throughput and the
# buffer memory every run used (from `ss -tmi`), and runs the libdrs C example
# with and without libdrs.
#
#   bash bench/drs.sh              full run (about 30 minutes), writes bench/drs-results.md
#   bash bench/drs.sh --quick      smoke run (under 8 minutes), writes bench/drs-quick-results.md
#   bash bench/drs.sh --write      write the report into BENCHMARKS.md instead, as the section
#                                  between <!-- drs:start --> and <!-- drs:end --> (replaced on
#                                  every --write run, appended if missing; the rest is kept)
#   bash bench/drs.sh --out FILE   write the report to FILE (and, with --write, BENCHMARKS.md)
#
# The plot goes to docs/drs-experiment.svg with --write, else beside the report
# (bench/drs-results.svg, bench/drs-quick-results.svg). Needs root (netlab),
# target/release/{tern,netlab,libtern_drs.so} (built here if missing), gcc,
# iperf3, python3, ss. Traffic stays inside the lab's namespaces. DRS_SCENARIOS
# (e.g. "g50 shift") runs only some scenarios. See bench/README.md.
set -euo pipefail

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
LIBDRS=${LIBDRS:-$REPO/target/release/libtern_drs.so}
BENCH_NAME=drs.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_args drs "$@"

if [ "$QUICK" = 1 ]; then
    MODE=quick
    PERF_TIME=6            # seconds per memory-to-memory run
    DISK_MIB=256           # disk-to-disk source file
    DISK_SECS=5            # a slower configuration copies a prefix sized to last about this long
    C_SECS=5               # the C example sends what iperf3 -P 1 moves in about this long
    SWEEP_STREAMS="1 4"    # hand-tuned sweep: streams ...
    SWEEP_FACTORS="2"      # ... x per-stream window = FACTOR x BDP / streams
    IPERF_SWEEP="4"        # iperf3's sweep: these stream counts, window 2 x BDP / streams (capped)
else
    MODE=full
    PERF_TIME=15
    DISK_MIB=1024
    DISK_SECS=20
    C_SECS=15
    SWEEP_STREAMS="1 2 4 8"
    SWEEP_FACTORS="1 2"
    IPERF_SWEEP="1 2 4 8"
fi
MTU=9000                   # the emulator does ~1.1 Gbit/s at MTU 1500, ~4.7 at 9000
DISK_BYTES=$((DISK_MIB * 1024 * 1024))
DISK_MIN_MIB=4
DATA_MIN_BYTES=1000000     # a connection that carried less is not a data connection (control)
LAB=drsbench$$             # namespaces drsbench<pid>-a and -b
B0=10.47.0.2               # host B (every client connects here)
TPORT=4747 IPORT=5201 CPORT=5301
WMEM_CAP=4194304           # net.core.wmem_max in the namespaces: iperf3 -w above it is cut to it

# id | title | netlab up arguments | rate Mbit/s | RTT ms (BDP = rate x RTT, of the initial path)
SCENARIOS=(
    "g50|1 Gbit/s x 50 ms|--rtt 50 --rate 1000|1000|50"
    "g100l|1 Gbit/s x 100 ms, 0.01% loss|--rtt 100 --rate 1000 --loss 0.01%|1000|100"
    "m180|500 Mbit/s x 180 ms|--rtt 180 --rate 500|500|180"
    "shift|1 Gbit/s x 100 ms, after a third of each run 500 Mbit/s x 30 ms|--rtt 100 --rate 1000|1000|100"
)
SHIFT_TO=(--rtt 30 --rate 500)      # `netlab set` arguments, a third into every run of `shift`
SHIFT_BACK=(--rtt 100 --rate 1000)  # and back before the next run
DRS_SCENARIOS=${DRS_SCENARIOS:-g50 g100l m180 shift}
IPERF_SCENARIOS=${IPERF_SCENARIOS:-g50 g100l m180}  # the iperf3 sweep (locked64k/autotune1 run everywhere)
C_SCENARIOS=${C_SCENARIOS:-g50 m180}                # the libdrs C example

# The plot: with --write, docs/drs-experiment.svg, linked from BENCHMARKS.md (repository
# root); otherwise beside the report, so a quick run never replaces the committed plot.
bench_svg_path drs-experiment.svg "${DRS_SVG:-}"

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "needs root (netlab creates network namespaces)"
python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$REPO/bench/drs_report.py" ||
    die "bench/drs_report.py does not parse"
for tool in python3 timeout cmp pgrep ss gcc iperf3; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
if [ ! -x "$TERN" ] || [ ! -x "$NETLAB" ]; then
    log "building tern and netlab (cargo build --release -p tern -p netlab)"
    (cd "$REPO" && timeout 1800 cargo build --release -q -p tern -p netlab) || die "build failed"
fi
if [ ! -r "$LIBDRS" ]; then
    log "building libdrs (cargo build --release -p tern-drs)"
    (cd "$REPO" && timeout 1800 cargo build --release -q -p tern-drs) || die "build of tern-drs failed"
fi
[ -x "$TERN" ] || die "no tern binary at $TERN"
[ -x "$NETLAB" ] || die "no netlab binary at $NETLAB"
[ -r "$LIBDRS" ] || die "no libtern_drs.so at $LIBDRS"

bench_workdir drs          # dst/ is tern serve's root: every copy lands there
mkdir -p "$WORK/lib"
cp "$LIBDRS" "$WORK/lib/libtern_drs.so"

BG=()            # samplers and path-shifters of the run in progress
SAMP=()          # the samplers alone
stop_bg() {
    local pid
    for pid in "${BG[@]}"; do
        pkill -TERM -P "$pid" 2>/dev/null || true
        stop_pid "$pid"
    done
    BG=()
    SAMP=()
}
forget_pid() {  # drop PID from PIDS (it has ended)
    local p keep=()
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}
bench_cleanup_extra() { stop_bg; }

bench_need_space $((DISK_MIB * 1024 * 3 + 512 * 1024))

# results.tsv columns (drs_report.py reads them by position):
#  1 scenario  2 kind (mem|disk|c)  3 tool (tern|iperf3|drs_xfer)  4 config
#  (locked64k|autotune1|sweep|handbest|tern|plain|drs)  5 id  6 streams asked  7 window asked
#  8 command  9 bit/s  10 bytes  11 wall s  12 cc  13 peak send buffer (sum of tb, bytes)
#  14 peak queued (sum of w)  15 peak receive buffer in B (sum of rb)  16 data connections
#  17 samples  18 streams reported  19 note
bench_tables
SCEN=$WORK/scenarios.tsv    # id title up-args rate rtt bdp-bytes
: >"$SCEN"

# ------------------------------------------------------------------ environment
bench_meta_machine "$MODE"
meta iperf3_version "$(first_line iperf3 --version)"
meta gcc_version "$(first_line gcc --version)"
meta perf_time "$PERF_TIME"
meta disk_mib "$DISK_MIB"
meta disk_secs "$DISK_SECS"
meta c_secs "$C_SECS"
meta sweep_streams "$SWEEP_STREAMS"
meta sweep_factors "$SWEEP_FACTORS"
meta iperf_sweep "$IPERF_SWEEP"
meta mtu "$MTU"
meta data_min_bytes "$DATA_MIN_BYTES"
meta wmem_cap "$WMEM_CAP"
meta shift_to "${SHIFT_TO[*]}"
meta shift_back "${SHIFT_BACK[*]}"
meta work "$WORK"
meta tern "$TERN"
meta netlab "$NETLAB"
meta repo "$REPO"
meta write "$WRITE"
meta svg "$SVG"
meta svg_link "$SVG_LINK"
log "mode $MODE: perf ${PERF_TIME}s, disk ${DISK_MIB} MiB, sweep streams {$SWEEP_STREAMS} x window {$SWEEP_FACTORS} x BDP/streams, MTU $MTU, lab $LAB; work dir $WORK"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# ------------------------------------------------------- test file, C example
SRC=$WORK/src.bin
log "writing $DISK_MIB MiB of random data"
timeout 300 head -c "$DISK_BYTES" /dev/urandom >"$SRC" || true
[ "$(stat -c %s "$SRC")" = "$DISK_BYTES" ] || die "could not write the test file"

DRS_XFER=$WORK/bin/drs_xfer
# shellcheck disable=SC2054  # -Wl,-rpath,DIR is one gcc argument
C_BUILD=(gcc -Wall -Wextra -O2 -o "$DRS_XFER" "$REPO/crates/drs/examples/c/drs_xfer.c"
    -I"$REPO/crates/drs/include" -L"$WORK/lib" -ltern_drs -Wl,-rpath,"$WORK/lib")
HAVE_C=1
if ! "${C_BUILD[@]}" 2>"$LOGS/gcc.err"; then
    HAVE_C=0
    log "the C example did not build: $(tail -1 "$LOGS/gcc.err")"
fi
meta c_build "$(quote "${C_BUILD[@]}")"
meta have_c "$HAVE_C"

# ------------------------------------------------------------ tern command lines
# Every tern command of the experiment is built here; adjust these if the CLI changes.
# tern_cfg CONFIG [STREAMS WINDOW]: the flags that select a configuration, into TCFG.
tern_cfg() {
    case "$1" in
        locked64k) TCFG=(--streams 1 --window 64K) ;;      # SO_SNDBUF/SO_RCVBUF locked, both ends
        autotune1) TCFG=(--streams 1 --window kernel) ;;   # Linux autotuning alone, one stream
        sweep | handbest) TCFG=(--streams "$2" --window "$3") ;;
        tern) TCFG=() ;;                                   # no flags: streams, window and cc auto
        *) die "unknown tern configuration $1" ;;
    esac
}
tern_perf_cmd() {  # CONFIG [STREAMS WINDOW] -> CMD
    tern_cfg "$@"
    CMD=("$TERN" perf "tern://$B0:$TPORT" --time "$PERF_TIME" "${TCFG[@]}" --protect clear --json)
}
tern_cp_cmd() {  # FILE NAME CONFIG [STREAMS WINDOW] -> CMD (default protection: private)
    local file=$1 name=$2
    shift 2
    tern_cfg "$@"
    CMD=("$TERN" cp "${TCFG[@]}" --json "$file" "tern://$B0:$TPORT/$name")
}
iperf3_cmd() {  # ARGS... -> CMD
    CMD=(iperf3 -c "$B0" -p "$IPORT" -t "$PERF_TIME" "$@" -J)
}

# ---------------------------------------------------------- servers (in host B)
SERVER_CMDS=$WORK/server-commands.txt
ensure_iperf3() {
    if [ -z "${SPID[iperf3]:-}" ] || ! kill -0 "${SPID[iperf3]}" 2>/dev/null; then
        stop_server_named iperf3
        start_server iperf3 "$IPORT" iperf3 -s -B "$B0" -p "$IPORT"
    fi
}

# --------------------------------------------------------------- memory sampling
# One bounded loop per host, inside its namespace: every 100 ms, `ss -tmi` of the
# established connections on the run's port (A: destination port, the sender; B:
# source port, the receiver). Each sample is "@ TIME", the ss lines, then ".".
SAMPLER='stop=$1 max=$2 filt=$3 i=0
while [ "$i" -lt "$max" ] && [ ! -e "$stop" ]; do
    printf "@ %s\n" "$EPOCHREALTIME"
    ss -Htmi state established "$filt" 2>/dev/null
    echo .
    i=$((i + 1))
    sleep 0.1
done'
STOPF=$WORK/sampler.stop
start_samplers() {  # PORT LIMIT-SECONDS
    local port=$1 limit=$2 max _
    max=$((limit * 10 + 50))
    rm -f "$STOPF"
    timeout $((limit + 20)) "$NETLAB" --lab "$LAB" exec A bash -c "$SAMPLER" sampler "$STOPF" "$max" "( dport = :$port )" \
        >"$LOGS/ss-a.txt" 2>/dev/null &
    BG+=("$!")
    SAMP+=("$!")
    timeout $((limit + 20)) "$NETLAB" --lab "$LAB" exec B bash -c "$SAMPLER" sampler "$STOPF" "$max" "( sport = :$port )" \
        >"$LOGS/ss-b.txt" 2>/dev/null &
    BG+=("$!")
    SAMP+=("$!")
    # The first sample (taken before the run starts) names connections to leave out.
    for _ in $(seq 50); do
        if grep -qx . "$LOGS/ss-a.txt" 2>/dev/null && grep -qx . "$LOGS/ss-b.txt" 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    log "  (memory samplers slow to start)"
}
stop_samplers() {  # sets MEM: tb w rb conns cc samples (tab-separated)
    local pid _
    touch "$STOPF"
    for pid in "${SAMP[@]}"; do
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
    stop_bg
    MEM=$(python3 "$REPO/bench/drs_report.py" --mem "$LOGS/ss-a.txt" "$LOGS/ss-b.txt" "$DATA_MIN_BYTES" 2>>"$LOGS/mem.err" ||
        printf 'nan\tnan\tnan\t0\t-\t0')
}

# ------------------------------------------------------------------ measuring
# The path change of `shift`: a background subshell sleeps, then runs `netlab set`.
SHIFT_NOTE=""
shift_arm() {  # DELAY-SECONDS
    rm -f "$WORK/shift-at"
    (
        sleep "$1"
        if timeout 10 "$NETLAB" --lab "$LAB" set "${SHIFT_TO[@]}" >/dev/null 2>>"$LOGS/shift.err"; then now >"$WORK/shift-at"; fi
    ) &
    BG+=("$!")
}
shift_restore() {  # T0: note when the change came, then put the path back
    local t0=$1
    if [ -s "$WORK/shift-at" ]; then
        SHIFT_NOTE="path set to ${SHIFT_TO[*]} at $(awk -v a="$t0" -v b="$(cat "$WORK/shift-at")" 'BEGIN { printf "%.1f", b - a }') s"
    else
        SHIFT_NOTE="the run ended before the path change"
    fi
    timeout 10 "$NETLAB" --lab "$LAB" set "${SHIFT_BACK[@]}" >/dev/null 2>>"$LOGS/shift.err" ||
        echo "shift: could not set the path back (${SHIFT_BACK[*]})" >>"$WORK/events.txt"
    sleep 0.5   # let packets still queued at the old settings drain
}
# measure SCEN PORT LIMIT SHIFT-DELAY CMD...: run CMD in A under timeout with the
# memory samplers on PORT (and, in `shift`, the path change after SHIFT-DELAY s).
# Sets M_RC, M_WALL, M_CMD, MEM; output in $LOGS/run.out, run.err.
measure() {
    local sc=$1 port=$2 limit=$3 delay=$4 t0 t1
    shift 4
    M_CMD=$(quote "$@")
    SHIFT_NOTE=""
    start_samplers "$port" "$limit"
    M_RC=0
    : >"$LOGS/run.err"
    t0=$(now)
    if [ "$sc" = shift ]; then shift_arm "$delay"; fi
    timeout "$limit" "$NETLAB" --lab "$LAB" exec A "$@" >"$LOGS/run.out" 2>>"$LOGS/run.err" &
    CHILD=$!
    wait "$CHILD" || M_RC=$?
    CHILD=""
    t1=$(now)
    stop_samplers
    if [ "$sc" = shift ]; then shift_restore "$t0"; fi
    M_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    { echo "== $M_CMD"; cat "$LOGS/run.out"; } >>"$LOGS/all-runs.out"
    { echo "== $M_CMD"; cat "$LOGS/run.err"; } >>"$LOGS/all-runs.err"
}
join_note() { local a=$1 b=$2; if [ -n "$a" ] && [ -n "$b" ]; then echo "$a; $b"; else echo "$a$b"; fi; }
# The congestion control of a run: what ss saw on its data connections, else
# what the tool reported, else the namespace default.
pick_cc() {  # SS-CC TOOL-CC
    if [ -n "$1" ] && [ "$1" != - ]; then echo "$1"
    elif [ -n "$2" ] && [ "$2" != - ] && [ "$2" != nan ]; then echo "$2"
    else echo "$SCEN_CC"; fi
}
# row SCEN KIND TOOL CONFIG ID STREAMS WINDOW BPS BYTES CC STREAMS-SEEN NOTE (after measure)
row() {
    local tb w rb conns sscc samples cc
    IFS=$'\t' read -r tb w rb conns sscc samples <<<"$MEM"
    cc=-
    if [ "$8" != nan ]; then cc=$(pick_cc "$sscc" "${10}"); fi
    result "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$M_CMD" "$8" "$9" "$M_WALL" "$cc" "$tb" "$w" "$rb" "$conns" "$samples" "${11}" "${12}"
    log "  $5: $(mbit "$8"), cc $cc, send buffer peak $(awk -v b="$tb" 'BEGIN { if (b == "nan") print "?"; else printf "%.1f MiB", b / 1048576 }') on $conns connection(s)${12:+ (${12})}"
}

iperf3_run() {  # SCEN CONFIG ID STREAMS WINDOW ARGS...
    local sc=$1 cfg=$2 id=$3 st=$4 win=$5 bps bytes cc note=""
    shift 5
    ensure_iperf3 || { result "$sc" mem iperf3 "$cfg" "$id" "$st" "$win" "iperf3 $*" nan nan nan - nan nan nan 0 0 - "iperf3 -s would not start"; return; }
    iperf3_cmd "$@"
    measure "$sc" "$IPORT" $((PERF_TIME + 30)) "$(awk -v t="$PERF_TIME" 'BEGIN { printf "%.1f", t / 3 }')" "${CMD[@]}"
    bps=$(json_get 'd["end"]["sum_received"]["bits_per_second"]' <"$LOGS/run.out")
    if [ "$bps" != nan ]; then
        bytes=$(json_get 'd["end"]["sum_received"]["bytes"]' <"$LOGS/run.out")
        cc=$(json_get 'd["end"].get("sender_tcp_congestion")' - <"$LOGS/run.out")
        row "$sc" mem iperf3 "$cfg" "$id" "$st" "$win" "$bps" "$bytes" "$cc" "$st" "$(join_note "$SHIFT_NOTE" "${IPERF_NOTE:-}")"
    else
        note="iperf3 failed: $(json_get 'd.get("error")' "$(fail_note)" <"$LOGS/run.out")"
        row "$sc" mem iperf3 "$cfg" "$id" "$st" "$win" nan nan - - "$(join_note "$note" "$(join_note "$SHIFT_NOTE" "${IPERF_NOTE:-}")")"
        # iperf3 -s serves one test at a time and can wedge after a failure: restart it
        stop_server_named iperf3
        ensure_iperf3 || true
    fi
}
tern_perf_run() {  # SCEN CONFIG ID STREAMS WINDOW [N W]
    local sc=$1 cfg=$2 id=$3 st=$4 win=$5 bps bytes cc streams
    shift 5
    ensure_tern "$sc, before $id" || { result "$sc" mem tern "$cfg" "$id" "$st" "$win" "tern perf" nan nan nan - nan nan nan 0 0 - "tern serve would not start"; return; }
    tern_perf_cmd "$cfg" "$@"
    measure "$sc" "$TPORT" $((PERF_TIME + 60)) "$(awk -v t="$PERF_TIME" 'BEGIN { printf "%.1f", t / 3 }')" "${CMD[@]}"
    bps=$(json_get 'd["throughput_bps"]' <"$LOGS/run.out")
    if [ "$M_RC" = 0 ] && [ "$bps" != nan ]; then
        bytes=$(json_get 'd.get("bytes")' <"$LOGS/run.out")
        cc=$(json_get '(d.get("tuning") or {}).get("congestion_control") or ((d.get("tuning") or {}).get("host") or {}).get("congestion_control")' - <"$LOGS/run.out")
        streams=$(json_get 'd.get("streams")' - <"$LOGS/run.out")
        cp "$LOGS/run.out" "$LOGS/$sc-$id.json"
        row "$sc" mem tern "$cfg" "$id" "$st" "$win" "$bps" "$bytes" "$cc" "$streams" "$SHIFT_NOTE"
    else
        row "$sc" mem tern "$cfg" "$id" "$st" "$win" nan nan - - "$(join_note "tern perf failed: $(fail_note)" "$SHIFT_NOTE")"
    fi
}
drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || echo "could not drop the page cache" >>"$WORK/events.txt"
}
# The bit rate a configuration reached memory to memory in this scenario (or nan).
mem_bps() {  # SCEN TOOL ID [TOOL ID]: the first that succeeded
    local sc=$1 v
    shift
    while [ $# -ge 2 ]; do
        v=$(awk -F'\t' -v s="$sc" -v t="$1" -v i="$2" '$1 == s && $2 == "mem" && $3 == t && $5 == i && $9 != "nan" { v = $9 } END { print (v == "" ? "nan" : v) }' "$RESULTS")
        if [ "$v" != nan ]; then echo "$v"; return; fi
        shift 2
    done
    echo nan
}
tern_cp_run() {  # SCEN CONFIG ID STREAMS WINDOW EST-BPS [N W]: one verified copy, A -> B
    local sc=$1 cfg=$2 id=$3 st=$4 win=$5 est=$6 size mib file expect delay bps cc streams note=""
    shift 6
    # The whole file, or a prefix sized to take about DISK_SECS at the rate this
    # configuration reached memory to memory (so a 64 KiB window does not take an hour).
    mib=$(awk -v b="$est" -v t="$DISK_SECS" -v full="$DISK_MIB" -v lo="$DISK_MIN_MIB" 'BEGIN {
        if (b == "nan" || b <= 0) { print full; exit }
        m = int(b * t / 8 / 1048576); if (m < lo) m = lo; if (m > full) m = full; print m }')
    size=$((mib * 1024 * 1024))
    file=$SRC
    if [ "$mib" -lt "$DISK_MIB" ]; then
        file=$WORK/src-part.bin
        head -c "$size" "$SRC" >"$file"
        note="a ${mib} MiB prefix of the source file (sized from the memory-to-memory rate)"
    fi
    expect=$(awk -v b="$est" -v n="$size" -v t="$DISK_SECS" 'BEGIN { if (b == "nan" || b <= 0) print t; else print n * 8 / b }')
    delay=$(awk -v e="$expect" 'BEGIN { printf "%.1f", e / 3 }')
    rm -rf "${DST:?}"/* "$DST"/.[!.]* 2>/dev/null || true
    ensure_tern "$sc, before $id" || true
    drop_caches
    tern_cp_cmd "$file" copy.bin "$cfg" "$@"
    measure "$sc" "$TPORT" $((DISK_SECS * 4 + 90)) "$delay" "${CMD[@]}"
    if [ "$M_RC" = 0 ]; then
        if cmp -s "$file" "$DST/copy.bin"; then
            bps=$(awk -v n="$size" -v t="$M_WALL" 'BEGIN { printf "%.0f", n * 8 / t }')
            cc=$(json_get '(d.get("tuning") or {}).get("congestion_control") or ((d.get("tuning") or {}).get("host") or {}).get("congestion_control")' - <"$LOGS/run.out")
            streams=$(json_get 'd.get("streams")' - <"$LOGS/run.out")
            cp "$LOGS/run.out" "$LOGS/$sc-$id.json"
            row "$sc" disk tern "$cfg" "$id" "$st" "$win" "$bps" "$size" "$cc" "$streams" "$(join_note "verified with cmp" "$(join_note "$note" "$SHIFT_NOTE")")"
        else
            row "$sc" disk tern "$cfg" "$id" "$st" "$win" nan nan - - "$(join_note "copy differs from the source (or is missing)" "$SHIFT_NOTE")"
        fi
    else
        row "$sc" disk tern "$cfg" "$id" "$st" "$win" nan nan - - "$(join_note "tern cp failed: $(fail_note)" "$SHIFT_NOTE")"
    fi
    rm -rf "${DST:?}"/* "$DST"/.[!.]* 2>/dev/null || true
    rm -f "$WORK/src-part.bin"
}
c_run() {  # SCEN MODE(plain|drs) MIB
    local sc=$1 mode=$2 mib=$3 rp bps note="" args=() line
    [ "$mode" = drs ] && args=(--drs)
    if ! grep -qxF -- "$(quote "$DRS_XFER" recv "$CPORT")" "$SERVER_CMDS"; then quote "$DRS_XFER" recv "$CPORT" >>"$SERVER_CMDS"; echo >>"$SERVER_CMDS"; fi
    timeout $((C_SECS * 6 + 60)) "$NETLAB" --lab "$LAB" exec B "$DRS_XFER" recv "$CPORT" >"$LOGS/c-recv.out" 2>"$LOGS/c-recv.err" &
    rp=$!
    PIDS+=("$rp")
    if ! wait_listen_b "$CPORT" "$rp"; then
        result "$sc" c drs_xfer "$mode" "c-$mode" 1 kernel "drs_xfer recv $CPORT" nan nan nan - nan nan nan 0 0 1 "drs_xfer recv did not start"
        return
    fi
    measure "$sc" "$CPORT" $((C_SECS * 6 + 30)) 0 "$DRS_XFER" send "$B0" "$CPORT" "$mib" "${args[@]}"
    for _ in $(seq 50); do kill -0 "$rp" 2>/dev/null || break; sleep 0.1; done
    stop_pid "$rp"
    forget_pid "$rp"
    bps=$(sed -n 's/^sent .* s: \([0-9.]*\) Mbit\/s.*/\1/p' "$LOGS/run.out" | awk '{ printf "%.0f", $1 * 1e6 }')
    line=$(grep '^libdrs:' "$LOGS/run.out" || true)
    if [ "$M_RC" = 0 ] && [ -n "$bps" ] && grep -q "^received $((mib * 1048576)) bytes" "$LOGS/c-recv.out"; then
        row "$sc" c drs_xfer "$mode" "c-$mode" 1 "$([ "$mode" = drs ] && echo libdrs || echo kernel)" "$bps" $((mib * 1048576)) - 1 "$line"
    else
        note="drs_xfer failed: $(fail_note); receiver: $(tail -1 "$LOGS/c-recv.out" "$LOGS/c-recv.err" 2>/dev/null | tr '\n' ' ' | cut -c1-200)"
        row "$sc" c drs_xfer "$mode" "c-$mode" 1 "$([ "$mode" = drs ] && echo libdrs || echo kernel)" nan nan - 1 "$note"
    fi
}

# Per-stream window for the sweep: FACTOR x BDP / STREAMS, rounded up to the
# next 2^k or 1.5 x 2^k KiB, at least 64K; written as tern and iperf3 take it.
sweep_window() {  # BDP-BYTES FACTOR STREAMS
    awk -v b="$1" -v f="$2" -v n="$3" 'BEGIN {
        k = f * b / n / 1024; s = 64
        while (1) { if (s >= k) break; if (s * 1.5 >= k) { s = s * 1.5; break }; s *= 2 }
        if (s % 1024 == 0) printf "%dM\n", s / 1024; else printf "%dK\n", s }'
}
win_bytes() { awk -v w="$1" 'BEGIN { n = w + 0; if (w ~ /M$/) n *= 1048576; else if (w ~ /K$/) n *= 1024; printf "%d", n }'; }

# ------------------------------------------------------------------ scenarios
for entry in "${SCENARIOS[@]}"; do
    IFS='|' read -r sc title upargs rate rtt <<<"$entry"
    case " $DRS_SCENARIOS " in *" $sc "*) ;; *) continue ;; esac
    log "scenario $sc: $title"
    bdp=$(awk -v r="$rate" -v t="$rtt" 'BEGIN { printf "%.0f", r * 1e6 * t / 1e3 / 8 }')
    read -ra UPARGS <<<"$upargs"
    lab_up "$sc" "${UPARGS[@]}" --mtu "$MTU"
    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$sc-start.json"
    SCEN_CC=$(json_get 'd["sysctls"]["A"]["net.ipv4.tcp_congestion_control"]' bbr <"$WORK/status-$sc-start.json")
    for k in net.core.rmem_max net.core.wmem_max net.ipv4.tcp_rmem net.ipv4.tcp_wmem net.ipv4.tcp_congestion_control \
        net.ipv4.tcp_available_congestion_control net.ipv4.tcp_allowed_congestion_control; do
        for h in A B; do
            printf '%s\t%s\t%s\t%s\n' "$sc" "$h" "$k" "$(timeout 10 "$NETLAB" --lab "$LAB" exec "$h" cat "/proc/sys/${k//.//}" 2>/dev/null | tr '\t' ' ')" >>"$WORK/sysctls.tsv"
        done
    done
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$sc" "$title" "netlab up $upargs --mtu $MTU" "$rate" "$rtt" "$bdp" >>"$SCEN"
    SERVER_TIMEOUT=$((PERF_TIME * 40 + DISK_SECS * 30 + C_SECS * 20 + 900))
    start_tern || die "tern serve did not start in B"
    start_server iperf3 "$IPORT" iperf3 -s -B "$B0" -p "$IPORT" || true

    log " memory to memory (${PERF_TIME} s each; BDP $((bdp / 1000)) kB)"
    iperf3_run "$sc" locked64k iperf3-locked64k 1 64K -P 1 -w 64K
    tern_perf_run "$sc" locked64k tern-locked64k 1 64K
    iperf3_run "$sc" autotune1 iperf3-autotune1 1 kernel -P 1
    tern_perf_run "$sc" autotune1 tern-autotune1 1 kernel
    iperf3_run "$sc" autotune1 iperf3-autotune1-cubic 1 kernel -P 1 -C cubic
    # The sweep, with tern's default run in the middle of it (drift hits all alike).
    nsweep=$(wc -w <<<"$SWEEP_STREAMS")
    i=0
    for n in $SWEEP_STREAMS; do
        i=$((i + 1))
        for f in $SWEEP_FACTORS; do
            w=$(sweep_window "$bdp" "$f" "$n")
            tern_perf_run "$sc" sweep "tern-sweep-P$n-w$w" "$n" "$w" "$n" "$w"
        done
        if [[ " $IPERF_SCENARIOS " == *" $sc "* && " $IPERF_SWEEP " == *" $n "* ]]; then
            # iperf3's -w is capped at net.core.wmem_max (4 MiB) in the namespaces.
            w=$(sweep_window "$bdp" 2 "$n")
            IPERF_NOTE=""
            if [ "$(win_bytes "$w")" -gt "$WMEM_CAP" ]; then
                IPERF_NOTE="wanted -w $w (2 x BDP / $n); iperf3 -w is capped at net.core.wmem_max = 4 MiB"
                w=4M
            fi
            iperf3_run "$sc" sweep "iperf3-sweep-P$n-w$w" "$n" "$w" -P "$n" -w "$w"
            IPERF_NOTE=""
        fi
        if [ "$i" = $(((nsweep + 1) / 2)) ]; then tern_perf_run "$sc" tern tern-default auto auto; fi
    done

    log " disk to disk ($DISK_MIB MiB source, page cache dropped before each copy)"
    tern_cp_run "$sc" locked64k tern-cp-locked64k 1 64K "$(mem_bps "$sc" tern tern-locked64k iperf3 iperf3-locked64k)"
    tern_cp_run "$sc" autotune1 tern-cp-autotune1 1 kernel "$(mem_bps "$sc" tern tern-autotune1 iperf3 iperf3-autotune1)"
    best=$(awk -F'\t' -v s="$sc" '$1 == s && $2 == "mem" && $3 == "tern" && $4 == "sweep" && $9 != "nan" && $9 + 0 > b { b = $9 + 0; l = $6 " " $7 " " $9 } END { print l }' "$RESULTS")
    if [ -n "$best" ]; then
        read -r bn bw bb <<<"$best"
        tern_cp_run "$sc" handbest "tern-cp-handbest-P$bn-w$bw" "$bn" "$bw" "$bb" "$bn" "$bw"
    else
        result "$sc" disk tern handbest tern-cp-handbest - - "(not run: tern cp with the best streams x window of the sweep)" nan nan nan - nan nan nan 0 0 - \
            "no sweep run succeeded memory to memory, so there is no best streams x window to copy with"
        log "  tern-cp-handbest: skipped (no successful sweep run)"
    fi
    tern_cp_run "$sc" tern tern-cp-default auto auto "$(mem_bps "$sc" tern tern-default)"

    case " $C_SCENARIOS " in
        *" $sc "*)
            if [ "$HAVE_C" = 1 ]; then
                est=$(mem_bps "$sc" iperf3 iperf3-autotune1)
                mib=$(awk -v b="$est" -v r="$rate" -v t="$C_SECS" 'BEGIN { if (b == "nan") b = r * 1e6 * 0.4
                    m = int(b * t / 8 / 1048576); if (m < 16) m = 16; print m }')
                log " C example, libdrs ($mib MiB each way)"
                c_run "$sc" plain "$mib"
                c_run "$sc" drs "$mib"
            else
                result "$sc" c drs_xfer plain c-plain 1 kernel "drs_xfer" nan nan nan - nan nan nan 0 0 1 "the C example did not build"
            fi
            ;;
    esac

    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$sc.json" || true
    if [ -n "${SPID[tern]:-}" ] && ! kill -0 "${SPID[tern]}" 2>/dev/null; then
        echo "$sc: tern serve had exited by the end of the scenario" >>"$WORK/events.txt"
    fi
    stop_servers
    SPID=()
    lab_down
done

meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------- report
python3 "$REPO/bench/drs_report.py" "$WORK" "$OUT" "$SVG" "$SVG_LINK"
if [ "$SPLICE_ONLY" = 0 ]; then log "report written to $OUT"; fi
log "plot written to $SVG"
if [ "$WRITE" = 1 ]; then
    python3 "$REPO/bench/drs_report.py" --splice "$OUT" "$REPO/BENCHMARKS.md"
    log "section <!-- drs:start --> ... <!-- drs:end --> of BENCHMARKS.md replaced"
fi
