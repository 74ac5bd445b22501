#!/usr/bin/env bash
# bench/multipath.sh: tern over several paths at once (issue 16), beside GridFTP spread
# evenly over the paths, one iperf3 per path, MPTCP, and the paths' capacity, over netlab.
#
#   bash bench/multipath.sh              full run (about 15 minutes), writes bench/multipath-results.md
#   bash bench/multipath.sh --quick      smoke run (a few minutes), writes bench/multipath-quick-results.md
#   bash bench/multipath.sh --write      write the report into BENCHMARKS.md, as the section between
#                                        <!-- multipath:start --> and <!-- multipath:end -->, and the
#                                        failure run's plot to docs/multipath-failure.svg
#   bash bench/multipath.sh --out FILE   write the report to FILE (and, with --write, BENCHMARKS.md)
#
# Runs: two (1000 Mbit/s x 50 ms + 250 x 75) and three paths (+ 1000 x 90): tern perf, tern
# perf --paths off, tern cp, tern cp -z (over a fake ssh into B), GridFTP split evenly, iperf3 per path, MPTCP; a failure run
# (path 1 cut a third into a copy); a reserved-path run (300 Mbit/s on path 1). MP_RUNS
# (e.g. "two fail") runs only some. Needs root, target/release/{tern,netlab}, python3,
# iperf3 and GridFTP (bench/install-peers.sh). A tern without multi-path (no --paths in
# `tern cp --help`) still runs; the report says so. See bench/README.md.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
BENCH_NAME=multipath.sh
PY=$REPO/bench/multipath.py
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_args multipath "$@"
GFS=/usr/sbin/globus-gridftp-server

if [ "$QUICK" = 1 ]; then
    MODE=quick
    PERF_TIME=${MP_PERF_TIME:-5}     # seconds per memory-to-memory run
    CP_MIB=${MP_CP_MIB:-256}         # the copy of runs two/three
    FAIL_MIB=${MP_FAIL_MIB:-512}     # the failure run's copy
else
    MODE=full
    PERF_TIME=${MP_PERF_TIME:-20}
    CP_MIB=${MP_CP_MIB:-2048}
    FAIL_MIB=${MP_FAIL_MIB:-4096}
fi
MP_RUNS=${MP_RUNS:-two three fail reserved}
IPERF_P=${MP_IPERF_P:-4}             # iperf3 -P on each path
GUC_P=${MP_GUC_P:-4}                 # globus-url-copy -p on each path
RESERVE_MBIT=${MP_RESERVE_MBIT:-300} # the reserved run: path 1's reservation
INTERVAL=0.5                         # the interface-counter sampler's period, s
MTU=9000                             # as bench/wan.sh: at 1500 the emulator, not the paths, would be the limit
LAB=mpbench$$                        # namespaces mpbench<pid>-a and -b
B0=10.47.0.2                         # host B on path 0: every client is given this address only
TPORT=4747 IPORT=5201 GPORT=2811 MPORT=5301
TERN_LISTEN=0.0.0.0:$TPORT           # tern serve on every address of B, so it can advertise them
CP_BYTES=$((CP_MIB * 1024 * 1024))
FAIL_BYTES=$((FAIL_MIB * 1024 * 1024))

# id | title | netlab --path specs (space-separated)
RUNS=(
    "two|Two paths: 1000 Mbit/s x 50 ms + 250 Mbit/s x 75 ms|rtt=50,rate=1000 rtt=75,rate=250"
    "three|Three paths: 1000 x 50 + 250 x 75 + 1000 x 90 (the ESnet study's shape)|rtt=50,rate=1000 rtt=75,rate=250 rtt=90,rate=1000"
    "fail|Failure run: two paths, path 1 cut|rtt=50,rate=1000 rtt=75,rate=250"
    "reserved|Reserved path 1 next to best-effort path 0|rtt=50,rate=1000 rtt=75,rate=500"
)

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "needs root (netlab creates network namespaces)"
[ -x "$TERN" ] || die "no tern binary at $TERN; build it with: cargo build --release -p tern -p netlab"
[ -x "$NETLAB" ] || die "no netlab binary at $NETLAB; build it with: cargo build --release -p tern -p netlab"
for tool in python3 timeout cmp pgrep ss split /usr/bin/time; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
command -v iperf3 >/dev/null || die "iperf3 not found (bash bench/install-peers.sh)"
HAVE_GUC=0
if command -v globus-url-copy >/dev/null && [ -x "$GFS" ]; then HAVE_GUC=1; fi
HAVE_MPTCPIZE=0
if command -v mptcpize >/dev/null && [ -r /proc/sys/net/mptcp/enabled ]; then HAVE_MPTCPIZE=1; fi

# What this tern can do (issue 16's flags; the script runs without them and says so).
CP_HELP=$("$TERN" cp --help 2>&1 || true)
PERF_HELP=$("$TERN" perf --help 2>&1 || true)
HAVE_PATHS=0 HAVE_PATH=0 HAVE_MPTCP=0
if grep -q -- '--paths' <<<"$CP_HELP" && grep -q -- '--paths' <<<"$PERF_HELP"; then HAVE_PATHS=1; fi
if grep -qE -- '--path([^s]|$)' <<<"$PERF_HELP"; then HAVE_PATH=1; fi
if grep -q -- '--mptcp' <<<"$PERF_HELP"; then HAVE_MPTCP=1; fi
HAVE_CONNECT_PATHS=0
if grep -q -- '--connect-paths' <<<"$("$TERN" serve --help 2>&1 || true)"; then HAVE_CONNECT_PATHS=1; fi
# A daemon that takes MPTCP too (plain TCP clients are served as before).
if grep -q -- '--mptcp' <<<"$("$TERN" serve --help 2>&1 || true)"; then TERN_SERVE_EXTRA=--mptcp; fi
if [ "$HAVE_PATHS" = 0 ]; then
    log "NOTE: this tern has no --paths (issue 16 not built in $TERN): tern runs use path 0 only; --paths off and --path runs are skipped"
fi

bench_workdir multipath   # WORK, LOGS, DST; private copies of tern and netlab; the EXIT trap
chmod 1777 "$DST"         # GridFTP writes as nobody
mkdir -p "$WORK/samples" "$WORK/parts"
# Each run starts fresh: no path memory from an earlier copy to the same
# daemon address (it would start every stream where that copy ended).
export XDG_STATE_HOME=$WORK/xdg-state
bench_svg_path multipath-failure.svg "${MP_SVG:-}"
# "ssh" to B for the -z row: runs the remote command in B as sshd would (SSH_CONNECTION
# names path 0's addresses), with the destination directory as HOME.
FAKE_SSH=$WORK/fake-ssh
cat >"$FAKE_SSH" <<EOF_SSH
#!/bin/sh
shift
exec "$NETLAB" --lab "$LAB" exec B env SSH_CONNECTION='10.47.0.1 40000 10.47.0.2 22' HOME="$DST" XDG_STATE_HOME="$WORK/remote-state" sh -c "\$1"
EOF_SSH
chmod 755 "$FAKE_SSH"
BG=()                     # clients running side by side (stopped by the trap)
SAMPLER=""
bench_cleanup_extra() {
    local pid
    for pid in "${BG[@]}"; do stop_pid "$pid"; done
    BG=()
    if [ -n "$SAMPLER" ]; then stop_pid "$SAMPLER"; SAMPLER=""; fi
    if [ -n "${MP_KEEP_LOGS:-}" ]; then
        mkdir -p "$MP_KEEP_LOGS"
        cp -r "$LOGS" "$WORK/samples" "$WORK"/*.tsv "$MP_KEEP_LOGS"/ 2>/dev/null || true
    fi
}
export GLOBUS_USAGE_OPTOUT=1
bench_need_space $(((CP_MIB * 3 + FAIL_MIB * 2) * 1024 + 512 * 1024))

bench_tables              # meta.tsv, results.tsv, events.txt, server-commands.txt
RUNS_TSV=$WORK/runs.tsv   # id title up-command rates rtts
: >"$RUNS_TSV"
bench_meta_machine "$MODE"
meta iperf3_version "$(first_line iperf3 --version)"
meta gridftp_version "$(dpkg-query -W -f '${Version}' globus-gridftp-server-progs 2>/dev/null || echo missing) (server), $(dpkg-query -W -f '${Version}' globus-gass-copy-progs 2>/dev/null || echo missing) (globus-url-copy)"
meta mptcpize "$(if [ "$HAVE_MPTCPIZE" = 1 ]; then dpkg-query -W -f '${Version}' mptcpize 2>/dev/null || echo installed; else echo 'not installed'; fi)"
meta have_paths "$HAVE_PATHS"
meta tern_flags "--paths $([ "$HAVE_PATHS" = 1 ] && echo yes || echo no), --path $([ "$HAVE_PATH" = 1 ] && echo yes || echo no), --mptcp $([ "$HAVE_MPTCP" = 1 ] && echo yes || echo no)"
meta perf_time "$PERF_TIME"
meta cp_mib "$CP_MIB"
meta fail_mib "$FAIL_MIB"
meta iperf_p "$IPERF_P"
meta guc_p "$GUC_P"
meta reserve_mbit "$RESERVE_MBIT"
meta interval "$INTERVAL"
meta mtu "$MTU"
meta wmem_max "$(cat /proc/sys/net/core/wmem_max)"
meta work "$WORK"
meta tern "$TERN"
meta netlab "$NETLAB"
meta repo "$REPO"
meta write "$WRITE"
log "mode $MODE: perf ${PERF_TIME}s, copy ${CP_MIB} MiB, failure copy ${FAIL_MIB} MiB, runs: $MP_RUNS; lab $LAB; work dir $WORK"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# ------------------------------------------------------------------- test files
make_file() {  # FILE MIB: random data
    log "writing $2 MiB of random data"
    timeout $((120 + $2 / 10)) head -c $(($2 * 1024 * 1024)) /dev/urandom >"$1" || true
    [ "$(stat -c %s "$1")" = $(($2 * 1024 * 1024)) ] || die "could not write $1"
    chmod 644 "$1"
}
SRC=$WORK/cp.bin
FAIL_SRC=$WORK/fail.bin
case " $MP_RUNS " in *" two "* | *" three "*) make_file "$SRC" "$CP_MIB" ;; esac
case " $MP_RUNS " in *" fail "*) make_file "$FAIL_SRC" "$FAIL_MIB" ;; esac

# ------------------------------------------------------------------- sampling
# The interface counters of every path in B, every INTERVAL s, by a bounded sampler
# running inside B (it reads B's /sys/class/net/nlI/statistics).
sampler_start() {  # FILE SECS
    local _
    timeout "$2" "$NETLAB" --lab "$LAB" exec B python3 "$PY" sample "$1" "$INTERVAL" "$2" 2>>"$LOGS/sampler.err" &
    SAMPLER=$!
    for _ in $(seq 50); do
        grep -q '^[0-9]' "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    log "  the counter sampler gave no sample within 5 s"
}
sampler_stop() {
    sleep "$INTERVAL"
    sleep 0.1
    if [ -n "$SAMPLER" ]; then stop_pid "$SAMPLER"; SAMPLER=""; fi
}
path_rates() { python3 "$PY" rates "$@" 2>/dev/null || echo "nan nan"; }  # FILE T0 T1: "MBIT,.. BYTES,.."
rate_of() { awk -v n="$1" -v t="$2" 'BEGIN { if (t > 0) printf "%.0f", n * 8 / t; else print "nan" }'; }

# run_row RUN ID LABEL CMD BPS BYTES WALL STATUS NOTE SAMPLES T0 T1 EXTRA: one row of
# results.tsv, with the per-path rates over [T0, T1] from SAMPLES
run_row() {
    local pm pb
    read -r pm pb <<<"$(path_rates "$WORK/samples/${10}" "${11}" "${12}")"
    result "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "$pm" "$pb" "${13}"
    log "  $3: $(mbit "$5") ($8${9:+: $9}); per path $pm Mbit/s"
}
skip_row() {  # RUN ID LABEL CMD WHY
    result "$1" "$2" "$3" "$4" nan nan nan skipped "$5" nan nan ""
    log "  $3: skipped ($5)"
}

# ------------------------------------------------------------------ tern runs
# tern_perf RUN ID LABEL ARGS...: tern perf from A to path 0's address, with the sampler
tern_perf() {
    local run=$1 id=$2 label=$3 s="$1-$2.txt" t0 t1 bps extra status=ok note=""
    shift 3
    ensure_tern "$run, before $id" || { skip_row "$run" "$id" "$label" "tern perf" "tern serve would not start"; return; }
    sampler_start "$WORK/samples/$s" $((PERF_TIME + 90))
    t0=$(now)
    measure_a tern $((PERF_TIME + 60)) "$TERN" perf "tern://$B0:$TPORT" --time "$PERF_TIME" "$@" \
        --fingerprint "$FP" --json --no-progress
    t1=$(now)
    sampler_stop
    bps=$(json_get 'd["throughput_bps"]' <"$LOGS/run.out")
    if [ "$M_RC" != 0 ] || [ "$bps" = nan ]; then status=failed note="tern perf failed: $(fail_note)"; bps=nan; fi
    extra="network $(json_get 'round(d["network_throughput_bps"] / 1e6)' '?' <"$LOGS/run.out") Mbit/s"
    extra+="; streams $(json_get 'd.get("streams")' '?' <"$LOGS/run.out")"
    local paths
    paths=$(python3 "$PY" paths <"$LOGS/run.out" 2>/dev/null || true)
    extra+="; tern paths: ${paths:-none reported}"
    cp "$LOGS/run.out" "$LOGS/$run-$id.json"
    run_row "$run" "$id" "$label" "$M_CMD" "$bps" "$(json_get 'd["bytes"]' <"$LOGS/run.out")" "$M_WALL" "$status" "$note" "$s" "$t0" "$t1" "$extra"
}
# tern_cp RUN ID LABEL SRC BYTES ARGS...: one verified tern cp of SRC to B, with the sampler.
# With CUT_PATH set, that path is killed (100 % loss) once B has received a third of SRC.
# With VIA_SSH=1, to B over the fake ssh (a `tern serve --once` in B, HOME the destination).
tern_cp() {
    local run=$1 id=$2 label=$3 src=$4 bytes=$5 s="$1-$2.txt" t0 t1 bps status=ok note="" rc=0
    shift 5
    local limit secs cut_at="" cut_bytes="" got i
    limit=$(awk -v b="$bytes" -v c="$CAP" 'BEGIN { printf "%d", b * 8 / (c * 1e6) }')
    secs=$((180 + limit * 6))
    ensure_tern "$run, before $id" || true
    find "$DST" -mindepth 1 -delete 2>/dev/null || true
    sampler_start "$WORK/samples/$s" $((secs + 60))
    local cmd=("$TERN" cp "$@" --fingerprint "$FP" --json --no-progress "$src" "tern://$B0:$TPORT/x.bin")
    if [ "${VIA_SSH:-0}" = 1 ]; then
        cmd=("$TERN" cp "$@" --ssh "$FAKE_SSH" --remote-tern "$TERN" --json --no-progress "$src" "$B0:x.bin")
    fi
    M_CMD=$(quote "${cmd[@]}")
    : >"$LOGS/run.err"
    t0=$(now)
    timeout "$secs" "$NETLAB" --lab "$LAB" exec A "${cmd[@]}" >"$LOGS/run.out" 2>>"$LOGS/run.err" &
    CHILD=$!
    if [ -n "${CUT_PATH:-}" ]; then
        # Poll B's counters (what the sampler wrote) every 0.2 s, at most for the copy's time limit.
        for ((i = 0; i < secs * 5; i++)); do
            kill -0 "$CHILD" 2>/dev/null || break
            got=$(python3 "$PY" bytes "$WORK/samples/$s" 2>/dev/null || echo -1)
            if [ "${got:--1}" -ge $((bytes / 3)) ]; then
                timeout 20 "$NETLAB" --lab "$LAB" set --path "$CUT_PATH" --loss 100% >>"$LOGS/set.out" 2>&1 ||
                    echo "$run: netlab set --path $CUT_PATH --loss 100% failed" >>"$WORK/events.txt"
                cut_at=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
                cut_bytes=$got
                log "  path $CUT_PATH cut at ${cut_at}s, $((got / 1048576)) MiB received"
                break
            fi
            sleep 0.2
        done
    fi
    wait "$CHILD" || rc=$?
    CHILD=""
    t1=$(now)
    sampler_stop
    M_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    M_RC=$rc
    { echo "== $M_CMD"; cat "$LOGS/run.out"; } >>"$LOGS/all-runs.out"
    { echo "== $M_CMD"; cat "$LOGS/run.err"; } >>"$LOGS/all-runs.err"
    bps=$(rate_of "$bytes" "$M_WALL")
    if [ "$rc" != 0 ]; then
        status=failed note="$(fail_note)" bps=nan
    elif ! timeout 600 cmp -s "$src" "$DST/x.bin"; then
        status=failed note="copy differs from the source (or is missing)" bps=nan
    else
        note="verified (cmp), ${M_WALL} s"
    fi
    local paths
    paths=$(python3 "$PY" paths <"$LOGS/run.out" 2>/dev/null || true)
    cp "$LOGS/run.out" "$LOGS/$run-$id.json"
    run_row "$run" "$id" "$label" "$M_CMD" "$bps" "$bytes" "$M_WALL" "$status" "$note" "$s" "$t0" "$t1" "tern paths: ${paths:-none reported}"
    if [ -n "${CUT_PATH:-}" ]; then
        meta fail_t0 "$t0"
        meta fail_t1 "$t1"
        meta fail_samples "samples/$s"
        meta fail_cut_cmd "netlab set --path $CUT_PATH --loss 100%"
        if [ -n "$cut_at" ]; then
            meta fail_cut_at "$cut_at"
            meta fail_cut_bytes "$cut_bytes"
            local tc
            tc=$(awk -v a="$t0" -v c="$cut_at" 'BEGIN { printf "%.3f", a + c }')
            meta fail_before "$(path_rates "$WORK/samples/$s" "$t0" "$tc" | cut -d' ' -f1)"
            meta fail_after "$(path_rates "$WORK/samples/$s" "$tc" "$t1" | cut -d' ' -f1)"
        else
            echo "$run: path $CUT_PATH was never cut (the copy ended, or no counter samples)" >>"$WORK/events.txt"
        fi
    fi
    find "$DST" -mindepth 1 -delete 2>/dev/null || true
}

# ------------------------------------------------------- clients side by side
# par_start NAME SECS CMD...: CMD in A in the background, under timeout; par_wait: wait for
# them all, PAR_RC[i] = exit status of the i-th
par_start() {
    local name=$1 secs=$2
    shift 2
    PAR_CMDS+=("$(quote "$@")")
    timeout "$secs" "$NETLAB" --lab "$LAB" exec A "$@" >"$LOGS/client-$name.out" 2>"$LOGS/client-$name.err" &
    BG+=("$!")
}
par_wait() {
    local pid rc
    PAR_RC=()
    for pid in "${BG[@]}"; do
        rc=0
        wait "$pid" || rc=$?
        PAR_RC+=("$rc")
    done
    BG=()
}
# iperf3_paths RUN ID LABEL PATHARGS...: one iperf3 client per path at once, to that path's
# server; PATHARGS[i] are the extra arguments of path i's client (one word each, e.g. "-P4").
iperf3_paths() {
    local run=$1 id=$2 label=$3 s="$1-$2.txt" t0 t1 i sum=0 bytes=0 bps status=ok note="" b n
    shift 3
    local args=("$@")
    PAR_CMDS=()
    sampler_start "$WORK/samples/$s" $((PERF_TIME + 90))
    t0=$(now)
    for ((i = 0; i < NPATHS; i++)); do
        # shellcheck disable=SC2086  # PATHARGS are words
        par_start "iperf3-$i" $((PERF_TIME + 40)) iperf3 -c "10.47.$i.2" -p $((IPORT + i)) -t "$PERF_TIME" ${args[$i]:-} -J
    done
    par_wait
    t1=$(now)
    sampler_stop
    for ((i = 0; i < NPATHS; i++)); do
        b=$(json_get 'd["end"]["sum_received"]["bits_per_second"]' <"$LOGS/client-iperf3-$i.out")
        n=$(json_get 'd["end"]["sum_received"]["bytes"]' <"$LOGS/client-iperf3-$i.out")
        if [ "${PAR_RC[$i]}" != 0 ] || [ "$b" = nan ]; then
            status=failed
            note+="path $i: $(json_get 'd.get("error")' "exit ${PAR_RC[$i]}" <"$LOGS/client-iperf3-$i.out"); "
            # iperf3 -s can wedge after a failure: restart it
            stop_server_named "iperf3-$i"
            start_server "iperf3-$i" $((IPORT + i)) iperf3 -s -B "10.47.$i.2" -p $((IPORT + i)) || true
        else
            sum=$(awk -v a="$sum" -v b="$b" 'BEGIN { printf "%.0f", a + b }')
            if [[ $n =~ ^[0-9]+ ]]; then bytes=$((bytes + ${n%.*})); fi
            note+="path $i $(mbit "$b"); "
        fi
    done
    bps=$sum
    if [ "$status" = failed ]; then bps=nan; fi
    run_row "$run" "$id" "$label" "$(printf '%s & ' "${PAR_CMDS[@]}" | sed 's/ & $//')" "$bps" "$bytes" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$status" "${note%; }" "$s" "$t0" "$t1" ""
}
# guc_paths RUN: the copy's file split into NPATHS equal parts, one globus-url-copy per path
# at once, each to the GridFTP server on that path's address; every part checked with cmp.
guc_paths() {
    local run=$1 id=guc-split s="$1-guc-split.txt" t0 t1 i status=ok note="" wall secs limit
    local label="GridFTP, evenly over the paths (one globus-url-copy -p $GUC_P per path, at once)"
    if [ "$HAVE_GUC" = 0 ]; then skip_row "$run" "$id" "$label" "globus-url-copy" "GridFTP not installed"; return; fi
    rm -rf "$WORK/parts" && mkdir -p "$WORK/parts"
    split -n "$NPATHS" -d -a 1 "$SRC" "$WORK/parts/part"
    chmod 644 "$WORK/parts"/part*
    # the slowest path's share at its rate, six times over, plus setup
    limit=$(awk -v b="$CP_BYTES" -v n="$NPATHS" -v r="$MINRATE" 'BEGIN { printf "%d", b / n * 8 / (r * 1e6) }')
    secs=$((120 + limit * 6))
    find "$DST" -mindepth 1 -delete 2>/dev/null || true
    PAR_CMDS=()
    sampler_start "$WORK/samples/$s" $((secs + 60))
    t0=$(now)
    for ((i = 0; i < NPATHS; i++)); do
        if [ -z "${SPID[gridftp-$i]:-}" ]; then note+="path $i: no GridFTP server; "; continue; fi
        par_start "guc-$i" "$secs" globus-url-copy -p "$GUC_P" -tcp-bs 4194304 \
            "file://$WORK/parts/part$i" "ftp://10.47.$i.2:$((GPORT + i))$DST/part$i"
    done
    par_wait
    t1=$(now)
    sampler_stop
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    for ((i = 0; i < NPATHS; i++)); do
        if [ "${PAR_RC[$i]:-1}" = 124 ]; then
            status=partial note+="path $i: killed at ${secs} s; "
        elif [ "${PAR_RC[$i]:-1}" != 0 ]; then
            status=failed note+="path $i: exit ${PAR_RC[$i]:-?}: $(grep -v '^\s*$' "$LOGS/client-guc-$i.err" 2>/dev/null | tail -1 | cut -c1-150); "
        elif ! cmp -s "$WORK/parts/part$i" "$DST/part$i"; then
            status=failed note+="path $i: part differs; "
        fi
    done
    local bps=nan bytes=$CP_BYTES
    if [ "$status" = ok ]; then
        bps=$(rate_of "$CP_BYTES" "$wall")
        note="all $NPATHS parts verified (cmp), ${wall} s; ${note}"
    elif [ "$status" = partial ]; then
        bytes=$(python3 "$PY" bytes "$WORK/samples/$s" 2>/dev/null || echo nan)
        bps=$(rate_of "$bytes" "$wall")
        note="partial: IP bytes B received / time, not verified; ${note}"
    fi
    run_row "$run" "$id" "$label" "$(printf '%s & ' "${PAR_CMDS[@]}" | sed 's/ & $//')" "$bps" "$bytes" "$wall" "$status" "${note%; }" "$s" "$t0" "$t1" ""
    find "$DST" -mindepth 1 -delete 2>/dev/null || true
}
# mptcp_setup: the kernel's path manager, B announcing its other path addresses
mptcp_setup() {
    local i h ok=1
    for h in A B; do
        timeout 10 "$NETLAB" --lab "$LAB" exec "$h" ip mptcp limits set subflows 8 add_addr_accepted 8 || ok=0
    done
    for ((i = 1; i < NPATHS; i++)); do
        timeout 10 "$NETLAB" --lab "$LAB" exec B ip mptcp endpoint add "10.47.$i.2" dev "nl$i" signal || ok=0
    done
    [ "$ok" = 1 ]
}
iperf3_mptcp() {  # RUN: iperf3 -P IPERF_P under mptcpize, to path 0's address
    local run=$1 id=iperf3-mptcp s="$1-iperf3-mptcp.txt" t0 t1 bps status=ok note=""
    local label="iperf3 -P $IPERF_P over MPTCP (mptcpize), given path 0's address"
    if [ -z "${SPID[iperf3-mptcp]:-}" ]; then skip_row "$run" "$id" "$label" "mptcpize run iperf3" "no MPTCP iperf3 server (mptcpize missing or MPTCP setup failed)"; return; fi
    sampler_start "$WORK/samples/$s" $((PERF_TIME + 90))
    t0=$(now)
    measure_a iperf3-mptcp $((PERF_TIME + 40)) mptcpize run iperf3 -c "$B0" -p "$MPORT" -t "$PERF_TIME" -P "$IPERF_P" -J
    t1=$(now)
    sampler_stop
    bps=$(json_get 'd["end"]["sum_received"]["bits_per_second"]' <"$LOGS/run.out")
    if [ "$M_RC" != 0 ] || [ "$bps" = nan ]; then status=failed note="$(json_get 'd.get("error")' "$(fail_note)" <"$LOGS/run.out")"; bps=nan; fi
    run_row "$run" "$id" "$label" "$M_CMD" "$bps" "$(json_get 'd["end"]["sum_received"]["bytes"]' <"$LOGS/run.out")" "$M_WALL" "$status" "$note" "$s" "$t0" "$t1" ""
}

# ------------------------------------------------------------------ the runs
bench_netns_hosts "127.0.0.1 localhost" "$B0 $(hostname) mpbench-b" "10.47.1.2 mpbench-b1" "10.47.2.2 mpbench-b2" "10.47.0.1 mpbench-a"

for entry in "${RUNS[@]}"; do
    IFS='|' read -r RUN title specs <<<"$entry"
    case " $MP_RUNS " in *" $RUN "*) ;; *) continue ;; esac
    log "run $RUN: $title"
    read -ra SPECS <<<"$specs"
    NPATHS=${#SPECS[@]}
    UPARGS=()
    rates="" rtts=""
    for sp in "${SPECS[@]}"; do
        UPARGS+=(--path "$sp")
        [[ $sp =~ rate=([0-9.]+) ]] && rates+=",${BASH_REMATCH[1]}"
        [[ $sp =~ rtt=([0-9.]+) ]] && rtts+=",${BASH_REMATCH[1]}"
    done
    rates=${rates#,} rtts=${rtts#,}
    CAP=$(tr ',' '\n' <<<"$rates" | awk '{ s += $1 } END { print s }')
    MINRATE=$(tr ',' '\n' <<<"$rates" | sort -n | head -1)
    lab_up "$RUN" "${UPARGS[@]}" --mtu "$MTU"
    printf '%s\t%s\t%s\t%s\t%s\n' "$RUN" "$title" "netlab up ${UPARGS[*]} --mtu $MTU" "$rates" "$rtts" >>"$RUNS_TSV"
    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$RUN-start.json" || true
    if ! grep -q '^cc' "$META"; then
        meta cc "$(json_get 'd["sysctls"]["A"]["net.ipv4.tcp_congestion_control"]' '?' <"$WORK/status-$RUN-start.json")"
        meta tcp_wmem "$(json_get 'd["sysctls"]["A"]["net.ipv4.tcp_wmem"].split()[-1]' '?' <"$WORK/status-$RUN-start.json")"
    fi
    SERVER_TIMEOUT=$((PERF_TIME * 20 + 3600))
    start_tern || die "tern serve did not start in B"
    case "$RUN" in
        two | three)
            for ((i = 0; i < NPATHS; i++)); do
                start_server "iperf3-$i" $((IPORT + i)) iperf3 -s -B "10.47.$i.2" -p $((IPORT + i)) || true
                if [ "$HAVE_GUC" = 1 ]; then
                    start_server "gridftp-$i" $((GPORT + i)) "$GFS" -aa -anonymous-user nobody -p $((GPORT + i)) \
                        -control-interface "10.47.$i.2" -data-interface "10.47.$i.2" -disable-usage-stats \
                        -log-level error,warn,info -logfile "$LOGS/gridftp-$RUN-$i.log" || true
                fi
            done
            if [ "$HAVE_MPTCPIZE" = 1 ] || [ "$HAVE_MPTCP" = 1 ]; then
                if mptcp_setup 2>>"$LOGS/mptcp.err"; then
                    if [ "$HAVE_MPTCPIZE" = 1 ]; then
                        start_server iperf3-mptcp "$MPORT" mptcpize run iperf3 -s -p "$MPORT" || true
                    fi
                else
                    echo "$RUN: MPTCP setup failed: $(tail -1 "$LOGS/mptcp.err")" >>"$WORK/events.txt"
                fi
            fi
            one_p=()
            for ((i = 0; i < NPATHS; i++)); do one_p+=("-P$IPERF_P"); done
            log " memory to memory, ${PERF_TIME}s each"
            iperf3_paths "$RUN" iperf3-paths "iperf3 -P $IPERF_P on every path at once (the reference)" "${one_p[@]}"
            tern_perf "$RUN" tern-perf "tern perf, no flags (given path 0's address)"
            if [ "$HAVE_PATHS" = 1 ]; then
                tern_perf "$RUN" tern-perf-off "tern perf --paths off" --paths off
            else
                skip_row "$RUN" tern-perf-off "tern perf --paths off" "tern perf --paths off" "this tern has no --paths; the no-flags row is one path"
            fi
            if [ "$HAVE_MPTCP" = 1 ]; then
                tern_perf "$RUN" tern-perf-mptcp "tern perf --mptcp" --mptcp
            else
                skip_row "$RUN" tern-perf-mptcp "tern perf --mptcp" "tern perf --mptcp" "this tern has no --mptcp"
            fi
            iperf3_mptcp "$RUN"
            log " disk to disk, ${CP_MIB} MiB"
            tern_cp "$RUN" tern-cp "tern cp ${CP_MIB} MiB, no flags" "$SRC" "$CP_BYTES"
            if [ "$HAVE_CONNECT_PATHS" = 1 ]; then
                VIA_SSH=1 tern_cp "$RUN" tern-cp-z "tern cp -z ${CP_MIB} MiB over ssh (B dials A's addresses back)" "$SRC" "$CP_BYTES" -z
            else
                skip_row "$RUN" tern-cp-z "tern cp -z over ssh" "tern cp -z" "this tern's serve has no --connect-paths (reverse connect uses one path)"
            fi
            guc_paths "$RUN"
            ;;
        fail)
            log " ${FAIL_MIB} MiB copy, path 1 cut at a third"
            CUT_PATH=1 tern_cp "$RUN" tern-cp-fail "tern cp ${FAIL_MIB} MiB, no flags, path 1 cut at a third" "$FAIL_SRC" "$FAIL_BYTES"
            ;;
        reserved)
            for ((i = 0; i < NPATHS; i++)); do
                start_server "iperf3-$i" $((IPORT + i)) iperf3 -s -B "10.47.$i.2" -p $((IPORT + i)) || true
            done
            log " path 1 reserved at ${RESERVE_MBIT} Mbit/s, ${PERF_TIME}s each"
            if [ "$HAVE_PATH" = 1 ]; then
                tern_perf "$RUN" tern-perf-reserved "tern perf --path 10.47.0.2 --path 10.47.1.2,rate=${RESERVE_MBIT}M" \
                    --path 10.47.0.2 --path "10.47.1.2,rate=${RESERVE_MBIT}M"
            else
                skip_row "$RUN" tern-perf-reserved "tern perf --path ... --path 10.47.1.2,rate=${RESERVE_MBIT}M" "tern perf --path" "this tern has no --path"
            fi
            iperf3_paths "$RUN" iperf3-reserved "iperf3 reference: -P $IPERF_P on path 0, -P 1 -b ${RESERVE_MBIT}M on path 1, at once" \
                "-P$IPERF_P" "-b${RESERVE_MBIT}M"
            ;;
    esac
    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$RUN-end.json" || true
    if ! server_alive tern; then echo "$RUN: tern serve had exited by the end" >>"$WORK/events.txt"; fi
    stop_servers
    SPID=()
    lab_down
done
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------- report
python3 "$PY" report "$WORK" "$OUT" "$SVG" "$SVG_LINK"
if [ "$SPLICE_ONLY" = 0 ]; then log "report written to $OUT"; fi
if [ -e "$SVG" ]; then log "plot written to $SVG"; fi
if [ "$WRITE" = 1 ]; then
    python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import reportlib; reportlib.splice("multipath", sys.argv[2], sys.argv[3])' \
        "$REPO/bench" "$OUT" "$REPO/BENCHMARKS.md"
    log "section <!-- multipath:start --> ... <!-- multipath:end --> of BENCHMARKS.md replaced"
fi
