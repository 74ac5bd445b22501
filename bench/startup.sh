#!/usr/bin/env bash
# bench/startup.sh: issue 14's WAN copy-time bench, "a copy that ends when the network is done":
# the wall time of an untuned `tern cp` against the path's physical limit, and how fast it
# reaches its final rate, next to GridFTP tuned by hand, over an emulated WAN path (netlab).
#
#   bash bench/startup.sh                    g100, 1536 MiB, 3 reps (about 10 minutes)
#   bash bench/startup.sh --quick            smoke: g100, 256 MiB, 1 rep (about 2 minutes)
#   bash bench/startup.sh --scenarios g100,t50   also t50 (10 GiB file: 21 GiB free needed)
#   bash bench/startup.sh --size MIB         file size for every scenario (default: per scenario)
#   bash bench/startup.sh --reps N           runs of every tool (default 3; 1 with --quick)
#   bash bench/startup.sh --out FILE         the Markdown report (default bench/startup-results.md)
#
# Scenarios (MTU 9000, `netlab --lab startup up --rtt R --rate M --mtu 9000`):
#   g100  1 Gbit/s x 100 ms, file 1536 MiB, BDP 12 500 000 bytes
#   t50   10 Gbit/s x 50 ms, file 10240 MiB, BDP 62 500 000 bytes (only when asked for)
#
# Method. Host B runs `tern serve` and `globus-gridftp-server -aa -anonymous-user nobody`
# (as bench/wan.sh), host A every client; both see this file system. One random file; then,
# interleaved (forward in odd reps, backward in even ones), per rep:
#   1. tern cp --fingerprint FP --json --no-progress SRC tern://B0:PORT/x.bin   (no tuning flags)
#   2. globus-url-copy -p 8 -tcp-bs BDP file://SRC ftp://B0:2811/DST/x.bin, then `sync FILE` in B;
#      and, if the namespaces' rmem_max/wmem_max cap socket buffers below the BDP (the kernel
#      then silently cuts -tcp-bs BDP down), also -tcp-bs CAP (4194304 by default).
# Before every copy: the destination is deleted, `sync; echo 3 > /proc/sys/vm/drop_caches;
# cat SRC > /dev/null`. Measured per run:
#   - wall: client start to exit (plus the sync for GridFTP; tern fsyncs before its rename);
#   - physical limit = bytes x 8 / capacity + 3 x RTT, and limit / wall (tern's goal: >= 0.92);
#   - a sampler (bench/startup.py, bounded) reads the emulator's A->B counters every 100 ms
#     (control socket `Status` = `netlab --lab startup status --json`) and B's nl0 rx bytes;
#     final rate = average from 50 % to 95 % of the bytes; t90 = first time the 0.5 s windowed
#     rate reaches 90 % of it; first byte = first sample with >= 64 KiB sent;
#   - CPU: client from /usr/bin/time, server from /proc over its process tree, the machine's
#     busy share of both cores and the emulator's CPU; the emulator's drop counters.
# Every copy is verified (size, cmp); a failed copy is a failed row, never retried.
# Needs root, target/release/{tern,netlab} (not built here), python3, /usr/bin/time, GridFTP
# (bash bench/install-peers.sh). Everything started is stopped, the lab taken down and the
# temporary files deleted on exit (Ctrl-C included); every command runs under timeout.
# TERN=, NETLAB= select other binaries, BENCH_TMPDIR=DIR the place for the temporary files.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
BENCH_NAME=startup.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
PY=$REPO/bench/startup.py

QUICK=0 OUT="" SIZE="" REPS="" WANT=""
need_arg() { [ "$2" -ge 2 ] || { echo "$BENCH_NAME: $1 needs a value" >&2; exit 2; }; }
pos_int() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$BENCH_NAME: $1 wants a positive whole number, not '$2'" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --size) need_arg "$1" $#; pos_int "$1" "$2"; SIZE=$2; shift ;;
        --reps) need_arg "$1" $#; pos_int "$1" "$2"; REPS=$2; shift ;;
        --scenarios) need_arg "$1" $#; WANT=$2; shift ;;
        --out) need_arg "$1" $#; OUT=$2; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$BENCH_NAME: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    MODE=quick
    WANT=${WANT:-g100}
    SIZE=${SIZE:-256}
    REPS=${REPS:-1}
else
    MODE=full
    WANT=${WANT:-g100}
    REPS=${REPS:-3}
fi
OUT=${OUT:-$REPO/bench/startup-results.md}
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac

# id | title | rtt ms | rate Mbit/s | default file MiB
SCENARIOS=(
    "g100|1 Gbit/s x 100 ms|100|1000|1536"
    "t50|10 Gbit/s x 50 ms|50|10000|10240"
)
WANT=${WANT//,/ }
for w in $WANT; do
    printf '%s\n' "${SCENARIOS[@]}" | grep -q "^$w|" || die "unknown scenario '$w' (known: g100, t50)"
done
MTU=9000
LAB=startup            # namespaces startup-a and startup-b
B0=10.47.0.2
TPORT=4747 GPORT=2811
GFS=/usr/sbin/globus-gridftp-server

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "needs root (netlab, drop_caches)"
for _ in $(seq 60); do  # a binary may be missing for a moment while it is rebuilt
    [ -x "$TERN" ] && [ -x "$NETLAB" ] && break
    sleep 2
done
[ -x "$TERN" ] || die "no tern binary at $TERN (cargo build --release -p tern)"
[ -x "$NETLAB" ] || die "no netlab binary at $NETLAB (cargo build --release -p netlab)"
for tool in python3 timeout cmp pgrep ss sync findmnt; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
[ -x /usr/bin/time ] || die "/usr/bin/time not found (apt-get install time)"
command -v globus-url-copy >/dev/null && [ -x "$GFS" ] ||
    die "GridFTP not found; install the peers with: bash bench/install-peers.sh"
if [ -e "/run/netlab/$LAB" ]; then
    die "a lab named '$LAB' is already up (another startup.sh?); if it is stale: $NETLAB --lab $LAB down"
fi

bench_workdir startup  # WORK, LOGS, DST; private copies of tern and netlab; the EXIT trap
chmod 1777 "$DST"      # GridFTP writes as nobody
mkdir -p "$WORK/samples"
SAMPLER=""
bench_cleanup_extra() {
    if [ -n "$SAMPLER" ]; then stop_pid "$SAMPLER"; SAMPLER=""; fi
}
export GLOBUS_USAGE_OPTOUT=1

bench_tables   # meta.tsv, results.tsv, events.txt, server-commands.txt
CMDS=$WORK/commands.txt
SCEN=$WORK/scenarios.tsv
: >"$CMDS"
: >"$SCEN"
remember() { remember_raw "$(quote "$@")"; }
remember_raw() { grep -qxF -- "$1" "$CMDS" || printf '%s\n' "$1" >>"$CMDS"; }
bounded() {  # SECS CMD...: CMD under timeout, in the background (Ctrl-C reaches the trap) and waited for
    local secs=$1 rc=0
    shift
    timeout "$secs" "$@" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    return "$rc"
}
snap() { timeout 20 python3 "$PY" snap "${1:-x}" 2>/dev/null || echo nan; }  # the server's CPU s, over its process tree
sub() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || a == "" || b == "") print "nan"; else printf "%.2f", b - a }'; }

bench_meta_machine "$MODE"
meta filesystem "$(findmnt -no SOURCE,FSTYPE -T "$WORK" | head -1) (under $WORK_PARENT)"
meta gridftp_version "$(dpkg-query -W -f '${Version}' globus-gridftp-server-progs 2>/dev/null || echo '?') (server), $(dpkg-query -W -f '${Version}' globus-gass-copy-progs 2>/dev/null || echo '?') (globus-url-copy)"
meta drop_caches "dropped before every copy (sync; echo 3 > /proc/sys/vm/drop_caches), then the source read back in"
meta reps "$REPS"
meta work "$WORK"
meta tern "$TERN"
meta netlab "$NETLAB"
meta repo "$REPO"
# tern remembers each daemon's path in its state directory (paths.json): the
# first tern run of the bench starts cold, the later ones from the copy before.
export XDG_STATE_HOME=$WORK/state-client
mkdir -p "$XDG_STATE_HOME"
log "mode $MODE: scenarios $WANT, ${SIZE:-default} MiB, $REPS reps; work dir $WORK"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# GridFTP resolves its own host name: B needs an /etc/hosts naming this machine.
bench_netns_hosts "127.0.0.1 localhost" "$B0 $(hostname) startup-b" "10.47.0.1 startup-a"

# ---------------------------------------------------------------------- one copy
# run_copy SC REP TOOL ID SERVER CMD...: one verified copy of $SRC to $DST/x.bin; one results row:
#   scenario tool id rep cmd bytes t0 t1 wall_client sync_wall wall cpu_client cpu_server
#   busy_pct emu_pct load1 rc note extra samples
run_copy() {
    local sc=$1 rep=$2 tool=$3 id=$4 srv=$5
    shift 5
    local dstf=$DST/x.bin cmd note="" extra="" rc=0 s0 s2 b0 b1 e0 e1 t0 t1 ts0 ts1 load1
    local sync_wall=0 wall_client wall cpu_client samples="samples/$sc-$id-$rep.txt" _
    cmd=$(quote "$@")
    remember_raw "$cmd"
    if [ "$srv" = tern ]; then
        ensure_tern "$sc $id run $rep" || true
    elif ! server_alive gridftp; then
        echo "$sc $id run $rep: globus-gridftp-server was not running; restarted" >>"$WORK/events.txt"
        start_gridftp || true
    fi
    if ! server_alive "$srv"; then
        result "$sc" "$tool" "$id" "$rep" "$cmd" "$BYTES" nan nan nan 0 nan nan nan nan nan nan 1 "$srv not running" "" ""
        log "  $id FAILED: $srv not running"
        return
    fi
    find "$DST" -mindepth 1 -delete 2>/dev/null || true
    if ! { bounded 300 sync && echo 3 >/proc/sys/vm/drop_caches && bounded "$COPY_TIMEOUT" cat "$SRC" >/dev/null; }; then
        result "$sc" "$tool" "$id" "$rep" "$cmd" "$BYTES" nan nan nan 0 nan nan nan nan nan nan 1 \
            "could not drop the page cache or read the source" "" ""
        log "  $id FAILED: could not drop the page cache or read the source"
        return
    fi
    # The sampler: bounded by its own clock and by timeout; its first sample before the client starts.
    timeout $((COPY_TIMEOUT + 60)) python3 "$PY" sample "/run/netlab/$LAB/ctl.sock" "$NETLAB" "$LAB" \
        "${SPID[tern]:-x},${SPID[gridftp]:-x}" "$WORK/$samples" $((COPY_TIMEOUT + 30)) 2>>"$LOGS/sampler.err" &
    SAMPLER=$!
    for _ in $(seq 50); do
        grep -q '^[0-9]' "$WORK/$samples" 2>/dev/null && break
        sleep 0.05
    done
    s0=$(snap "${SPID[$srv]:-x}")
    read -r b0 e0 <<<"$(cpu_snap)"
    load1=$(cut -d' ' -f1 /proc/loadavg)
    : >"$LOGS/run.err"
    : >"$LOGS/time.txt"
    t0=$(now)
    /usr/bin/time -o "$LOGS/time.txt" -f '%U %S' timeout "$COPY_TIMEOUT" "$NETLAB" --lab "$LAB" exec A "$@" \
        >"$LOGS/run.out" 2>>"$LOGS/run.err" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    t1=$(now)
    read -r b1 e1 <<<"$(cpu_snap)"
    sleep 0.3   # the last samples
    stop_pid "$SAMPLER"
    SAMPLER=""
    wall_client=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    cpu_client=$(tail -1 "$LOGS/time.txt" 2>/dev/null | awk 'NF == 2 && $1 ~ /^[0-9.]+$/ { printf "%.2f", $1 + $2; ok = 1 } END { if (!ok) print "nan" }')
    { echo "== $cmd"; cat "$LOGS/run.out"; } >>"$LOGS/all-runs.out"
    { echo "== $cmd"; cat "$LOGS/run.err"; } >>"$LOGS/all-runs.err"
    if [ "$rc" != 0 ]; then
        if [ "$rc" = 124 ]; then note="timed out after ${COPY_TIMEOUT} s (killed)"; else
            note="exit $rc: $(sed -n '/[^[:space:]]/p' "$LOGS/run.err" | tail -1 | cut -c1-200 || true)"
        fi
    elif [ "$srv" = gridftp ]; then
        remember "$NETLAB" --lab "$LAB" exec B sync "$dstf"
        ts0=$(now)
        bounded "$COPY_TIMEOUT" "$NETLAB" --lab "$LAB" exec B sync "$dstf" || note="sync failed"
        ts1=$(now)
        sync_wall=$(awk -v a="$ts0" -v b="$ts1" 'BEGIN { printf "%.3f", b - a }')
    fi
    if [ "$srv" = gridftp ]; then  # let the forked session end and be reaped, so its CPU counts
        for _ in $(seq 30); do pgrep -P "${SPID[gridftp]:-1}" >/dev/null 2>&1 || break; sleep 0.1; done
    fi
    s2=$(snap "${SPID[$srv]:-x}")
    wall=$(awk -v a="$wall_client" -v b="$sync_wall" 'BEGIN { printf "%.3f", a + b }')
    if [ -z "$note" ]; then
        if [ "$(stat -c %s "$dstf" 2>/dev/null || echo 0)" != "$BYTES" ]; then
            note="copy has the wrong size (or is missing)"
        elif ! bounded "$COPY_TIMEOUT" cmp -s "$SRC" "$dstf"; then
            note="copy differs from the source"
        fi
    fi
    if [ "$srv" = tern ] && [ "$rc" = 0 ]; then
        extra="tern: streams $(json_get 'd.get("streams")' '?' <"$LOGS/run.out"), limit $(json_get 'd["tuning"]["limit"]' '?' <"$LOGS/run.out")"
        if [ "$(json_get '"started_from_last_copy" in d' False <"$LOGS/run.out")" = True ]; then
            extra+=", started from the last copy's rate and streams (path memory)"
        else
            extra+=", cold start (no memory of the path)"
        fi
        cp "$LOGS/run.out" "$LOGS/$sc-$id-$rep.json"
    fi
    local busy emu
    busy=$(busy_pct "$b0" "$b1")
    emu=$(emu_pct "$e0" "$e1" "$wall_client")
    result "$sc" "$tool" "$id" "$rep" "$cmd" "$BYTES" "$t0" "$t1" "$wall_client" "$sync_wall" "$wall" \
        "$cpu_client" "$(sub "$s0" "$s2")" "$busy" "$emu" "$load1" "$rc" "$note" "$extra" "$samples"
    if [ -n "$note" ]; then
        log "  $id FAILED: $note"
        tail -3 "$LOGS/run.err" >&2 || true
    else
        log "  $id: ${wall}s (client ${wall_client}s, sync ${sync_wall}s), limit/wall $(awk -v l="$LIMIT" -v w="$wall" 'BEGIN { printf "%.3f", l / w }'), CPU client $cpu_client s, server $(sub "$s0" "$s2") s, machine busy $busy %, verified"
    fi
    find "$DST" -mindepth 1 -delete 2>/dev/null || true
}
start_gridftp() {
    start_server gridftp "$GPORT" "$GFS" -aa -anonymous-user nobody -p "$GPORT" \
        -control-interface "$B0" -data-interface "$B0" -disable-usage-stats \
        -log-level error,warn,info -logfile "$LOGS/gridftp.log"
}
c_tern() {
    run_copy "$SC" "$1" "tern cp (no flags)" tern tern \
        "$TERN" cp --fingerprint "$FP" --json --no-progress "$SRC" "tern://$B0:$TPORT/x.bin"
}
c_guc_bdp() {
    run_copy "$SC" "$1" "globus-url-copy -p 8 -tcp-bs $BDP${GUC_BDP_NOTE}" guc-bdp gridftp \
        globus-url-copy -p 8 -tcp-bs "$BDP" "file://$SRC" "ftp://$B0:$GPORT$DST/x.bin"
}
c_guc_cap() {
    run_copy "$SC" "$1" "globus-url-copy -p 8 -tcp-bs $CAP (the cap)" guc-cap gridftp \
        globus-url-copy -p 8 -tcp-bs "$CAP" "file://$SRC" "ftp://$B0:$GPORT$DST/x.bin"
}

# ------------------------------------------------------------------- scenarios
for entry in "${SCENARIOS[@]}"; do
    IFS='|' read -r SC title RTT RATE MIB <<<"$entry"
    case " $WANT " in *" $SC "*) ;; *) continue ;; esac
    MIB=${SIZE:-$MIB}
    BYTES=$((MIB * 1024 * 1024))
    BDP=$((RATE * 125000 * RTT / 1000))
    LIMIT=$(awk -v b="$BYTES" -v r="$RATE" -v t="$RTT" 'BEGIN { printf "%.3f", b * 8 / (r * 1e6) + 3 * t / 1000 }')
    COPY_TIMEOUT=$(awk -v l="$LIMIT" 'BEGIN { printf "%d", 120 + 6 * l }')
    SERVER_TIMEOUT=$(((REPS * 3 * (COPY_TIMEOUT * 3 + 400)) + 600))
    log "scenario $SC: $title, $MIB MiB, physical limit ${LIMIT}s, copy timeout ${COPY_TIMEOUT}s"
    avail=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
    need=$((MIB * 1024 * 2 + 512 * 1024))
    if [ "$avail" -lt "$need" ]; then
        log "  skipped: needs $((need / 1024)) MiB free under $WORK_PARENT, has $((avail / 1024)) MiB"
        echo "$SC skipped: needs $((need / 1024)) MiB free under $WORK_PARENT, had $((avail / 1024)) MiB" >>"$WORK/events.txt"
        continue
    fi

    remember_raw "$(quote "$NETLAB" --lab "$LAB" up --rtt "$RTT" --rate "$RATE" --mtu "$MTU")"
    lab_up "$SC" --rtt "$RTT" --rate "$RATE" --mtu "$MTU"   # sets EMU_PID, for cpu_snap
    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$SC-start.json" || true
    # The socket buffer caps in force in the namespaces (net.core.* are per namespace and read-only there).
    read -r ra wa <<<"$(timeout 10 "$NETLAB" --lab "$LAB" exec A cat /proc/sys/net/core/rmem_max /proc/sys/net/core/wmem_max | tr '\n' ' ')"
    read -r rb wb <<<"$(timeout 10 "$NETLAB" --lab "$LAB" exec B cat /proc/sys/net/core/rmem_max /proc/sys/net/core/wmem_max | tr '\n' ' ')"
    CAP=$(printf '%s\n' "$ra" "$wa" "$rb" "$wb" | sort -n | head -1)
    [[ $CAP =~ ^[0-9]+$ ]] || CAP=4194304
    meta ns_caps "net.core.rmem_max/wmem_max: A $ra/$wa, B $rb/$wb"
    meta ns_sysctls "$(json_get '"; ".join("%s %s" % (h, ", ".join("%s=%s" % (k.split(".")[-1], v.replace("\t", " ")) for k, v in sorted(d["sysctls"][h].items()))) for h in ("A", "B"))' '?' <"$WORK/status-$SC-start.json")"
    CONFIGS=(c_tern c_guc_bdp)
    GUC_BDP_NOTE=""
    capnote="-tcp-bs $BDP is within the caps"
    if [ "$BDP" -gt "$CAP" ]; then
        GUC_BDP_NOTE=" (kernel caps it at $CAP)"
        capnote="-tcp-bs $BDP exceeds the cap $CAP, which the kernel applies silently: also run with -tcp-bs $CAP"
        CONFIGS+=(c_guc_cap)
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$SC" "$title" "netlab --lab $LAB up --rtt $RTT --rate $RATE --mtu $MTU" \
        "$RTT" "$RATE" "$MIB" "$BDP" "$capnote" >>"$SCEN"
    log "  BDP $BDP bytes; $capnote"

    start_tern || die "tern serve did not start in B"
    start_gridftp || die "globus-gridftp-server did not start in B"

    SRC=$WORK/src.bin
    log "  writing $MIB MiB of random data"
    remember head -c "$BYTES" /dev/urandom
    bounded $((120 + MIB / 10)) head -c "$BYTES" /dev/urandom >"$SRC" || true
    [ "$(stat -c %s "$SRC")" = "$BYTES" ] || die "could not write the test file"
    chmod 644 "$SRC"
    remember_raw 'rm DST; sync; echo 3 > /proc/sys/vm/drop_caches; cat SRC > /dev/null   # before every copy'

    for rep in $(seq "$REPS"); do
        log " $SC run $rep of $REPS"
        if [ $((rep % 2)) = 1 ]; then
            for ((i = 0; i < ${#CONFIGS[@]}; i++)); do "${CONFIGS[$i]}" "$rep"; done
        else
            for ((i = ${#CONFIGS[@]} - 1; i >= 0; i--)); do "${CONFIGS[$i]}" "$rep"; done
        fi
    done

    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$SC-end.json" || true
    if ! server_alive tern; then echo "$SC: tern serve had exited by the end" >>"$WORK/events.txt"; fi
    stop_servers
    SPID=()
    lab_down
    rm -f "$SRC"
done
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ----------------------------------------------------------------------- report
if ! python3 "$PY" report "$WORK" "$OUT"; then
    keep=$REPO/bench/startup-report-inputs
    rm -rf "$keep"
    mkdir -p "$keep"
    cp -r "$WORK"/*.tsv "$WORK"/*.txt "$WORK/samples" "$keep"/ 2>/dev/null || true
    die "the report failed; its inputs are in $keep (python3 bench/startup.py report $keep OUT)"
fi
log "report written to $OUT"
