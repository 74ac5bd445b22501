#!/usr/bin/env bash
# bench/wan.sh: tern against iperf3, GridFTP, xrdcp, rsync and scp, side by side,
# over emulated WAN paths (netlab: two network namespaces on this machine).
#
#   bash bench/wan.sh              full run (about 35 minutes), writes bench/wan-results.md
#   bash bench/wan.sh --quick      smoke run (under 10 minutes), writes bench/wan-quick-results.md
#   bash bench/wan.sh --write      write the report into BENCHMARKS.md instead, as the section
#                                  between <!-- wan:start --> and <!-- wan:end --> (replaced
#                                  on every --write run; the rest of the file is kept)
#   bash bench/wan.sh --out FILE   write the report to FILE (and, with --write, BENCHMARKS.md)
#
# Needs root (netlab), target/release/{tern,netlab} (cargo build --release -p tern
# -p netlab), python3, /usr/bin/time, and the peers from bench/install-peers.sh
# (a missing peer is skipped and named in the report). Traffic stays inside the
# lab's namespaces. Everything it starts is stopped, the lab is taken down, and
# its temporary directory and /etc/netns entry are removed on exit. WAN_SCENARIOS
# (e.g. "lan g50") runs only some scenarios. See bench/README.md.
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
BENCH_NAME=wan.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
bench_args wan "$@"
SSHD=/usr/sbin/sshd
GFS=/usr/sbin/globus-gridftp-server

if [ "$QUICK" = 1 ]; then
    MODE=quick
    PERF_TIME=3        # seconds per memory-to-memory run
    DISK_MIB=256       # disk-to-disk test file
    DISK_TIMEOUT=20    # per copy of a peer; a copy still running then is killed
    WIZ_STREAMS="1 8"  # the iperf3 "wizard" sweep: -P x -w
else
    MODE=full
    PERF_TIME=8
    DISK_MIB=2048
    DISK_TIMEOUT=45
    WIZ_STREAMS="1 4 8"
fi
TERN_DISK_TIMEOUT=$((DISK_TIMEOUT * 4))  # tern is never cut short: a killed tern copy is a failure
MTU=9000               # with offloads the emulator forwards ~10 Gbit/s (docs/NETLAB.md, Forwarding capacity)
DISK_BYTES=$((DISK_MIB * 1024 * 1024))
WIZ_WINDOWS="default 4M"
LAB=wanbench$$         # namespaces wanbench<pid>-a and -b
B0=10.47.0.2           # host B on path 0 (every tool connects here)
TPORT=4747 IPORT=5201 GPORT=2811 XPORT=1094 SPORT=2222

# id | title | netlab up arguments | capacity in Mbit/s (0: unlimited) | path-0 capacity
SCENARIOS=(
    "lan|LAN: 0.2 ms RTT, no rate limit|--rtt 0.2 --rate 0|0|0"
    "g50|1 Gbit/s x 50 ms|--rtt 50 --rate 1000|1000|1000"
    "g100l|1 Gbit/s x 100 ms, 0.01% loss|--rtt 100 --rate 1000 --loss 0.01%|1000|1000"
    "m180|500 Mbit/s x 180 ms|--rtt 180 --rate 500|500|500"
    "two|two paths: 1000 Mbit/s x 50 ms + 250 Mbit/s x 75 ms|--path rtt=50,rate=1000 --path rtt=75,rate=250|1250|1000"
    "t50|10 Gbit/s x 50 ms|--rtt 50 --rate 10000|10000|10000"
)
# t50 runs only when asked for (WAN_SCENARIOS="t50"): 10 Gbit/s is the
# emulator's limit on 2 cores, so it measures the host as much as the tools
# (hence each row's busy share and the report's likely-limit column).
WAN_SCENARIOS=${WAN_SCENARIOS:-lan g50 g100l m180 two}

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "needs root (netlab creates network namespaces)"
[ -x "$TERN" ] || die "no tern binary at $TERN; build it with: cargo build --release -p tern -p netlab"
[ -x "$NETLAB" ] || die "no netlab binary at $NETLAB; build it with: cargo build --release -p tern -p netlab"
for tool in python3 timeout cmp pgrep ss /usr/bin/time; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
declare -A HAVE=()
have() { [ "${HAVE[$1]:-0}" = 1 ]; }
command -v iperf3 >/dev/null && HAVE[iperf3]=1
command -v globus-url-copy >/dev/null && [ -x "$GFS" ] && HAVE[gridftp]=1
command -v xrdcp >/dev/null && command -v xrootd >/dev/null && HAVE[xrootd]=1
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null && [ -x "$SSHD" ] && HAVE[ssh]=1
command -v rsync >/dev/null && have ssh && HAVE[rsync]=1
command -v scp >/dev/null && have ssh && HAVE[scp]=1

bench_workdir wan
mkdir -p "$WORK/ssh" "$WORK/xrd"
chmod 1777 "$DST"        # the GridFTP and xrootd servers run as nobody
chown nobody "$WORK/xrd" 2>/dev/null || true

bench_need_space $((DISK_MIB * 1024 * 2 + 512 * 1024))

# results.tsv: scenario kind id command bps bytes wall cpu_a cpu_b cc note busy emu limit
# busy: the machine's busy share of all cores over the run (%); emu: the emulator's CPU (% of
# one core); limit: what tern's --json names as its limit (tuning.limit), "-" for the others.
# Rows of runs that never started stop at note; the report reads missing fields as unknown.
bench_tables
SCEN=$WORK/scenarios.tsv    # id title args capacity path0
: >"$SCEN"

# ------------------------------------------------------------------ environment
bench_meta_machine "$MODE"
meta iperf3_version "$(first_line iperf3 --version)"
meta gridftp_version "$(dpkg-query -W -f '${Version}' globus-gridftp-server-progs 2>/dev/null || echo missing) (server), $(dpkg-query -W -f '${Version}' globus-gass-copy-progs 2>/dev/null || echo missing) (globus-url-copy)"
meta xrootd_version "$(first_line xrdcp --version)"
meta rsync_version "$(first_line rsync --version)"
meta ssh_version "$(first_line ssh -V)"
meta rmem_max "$(cat /proc/sys/net/core/rmem_max)"
meta wmem_max "$(cat /proc/sys/net/core/wmem_max)"
meta perf_time "$PERF_TIME"
meta disk_mib "$DISK_MIB"
meta disk_timeout "$DISK_TIMEOUT"
meta tern_disk_timeout "$TERN_DISK_TIMEOUT"
meta wiz_streams "$WIZ_STREAMS"
meta mtu "$MTU"
meta work "$WORK"
meta tern "$TERN"
meta netlab "$NETLAB"
meta repo "$REPO"
meta write "$WRITE"
for t in iperf3 gridftp xrootd rsync scp; do meta "have_$t" "${HAVE[$t]:-0}"; done
if [ -r "$REPO/bench/peers-status.txt" ]; then meta peers_file "$REPO/bench/peers-status.txt"; fi
log "mode $MODE: perf ${PERF_TIME}s, disk ${DISK_MIB} MiB (copy timeout ${DISK_TIMEOUT}s), MTU $MTU, lab $LAB; work dir $WORK"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# ------------------------------------------------------------- test file, keys
SRC=$WORK/src.bin
log "writing $DISK_MIB MiB of random data"
timeout 300 head -c "$DISK_BYTES" /dev/urandom >"$SRC" || true
[ "$(stat -c %s "$SRC")" = "$DISK_BYTES" ] || die "could not write the test file"
chmod 644 "$SRC"

SSHDIR=$WORK/ssh
if have ssh; then
    bench_sshd_setup tern-wan || { log "sshd rejected its configuration; no rsync/scp"; HAVE[ssh]=0 HAVE[rsync]=0 HAVE[scp]=0; }
fi

cat >"$WORK/xrd/xrootd.cfg" <<EOF
all.export $DST
xrd.port $XPORT
all.adminpath $WORK/xrd
all.pidpath $WORK/xrd
EOF

# GridFTP resolves its own host name: B needs an /etc/hosts naming this machine.
bench_netns_hosts "127.0.0.1 localhost" "$B0 $(hostname) wanbench-b" "10.47.0.1 wanbench-a"
export GLOBUS_USAGE_OPTOUT=1

# ------------------------------------------------------------------ measuring

iperf3_run() {  # SCEN ID ARGS...
    local sc=$1 id=$2 bps bytes cc
    shift 2
    if ! have iperf3; then result "$sc" mem "$id" "iperf3 $*" nan nan nan nan nan - "iperf3 not installed"; return; fi
    measure_a iperf3 $((PERF_TIME + 30)) iperf3 -c "$B0" -p "$IPORT" -t "$PERF_TIME" "$@" -J
    bps=$(json_get 'd["end"]["sum_received"]["bits_per_second"]' <"$LOGS/run.out")
    if [ "$bps" != nan ]; then
        bytes=$(json_get 'd["end"]["sum_received"]["bytes"]' <"$LOGS/run.out")
        cc=$(json_get 'd["end"].get("sender_tcp_congestion")' '?' <"$LOGS/run.out")
        result "$sc" mem "$id" "$M_CMD" "$bps" "$bytes" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$cc" "" "$M_BUSY" "$M_EMU" -
        log "  $id: $(mbit "$bps") (cc $cc; machine $M_BUSY % busy, emulator $M_EMU %)"
    else
        local why
        why=$(json_get 'd.get("error")' "$(fail_note)" <"$LOGS/run.out")
        result "$sc" mem "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "iperf3 failed: $why" "$M_BUSY" "$M_EMU" -
        log "  $id FAILED: $why"
        # iperf3 -s serves one test at a time and can wedge after a failure: restart it
        stop_server_named iperf3
        start_server iperf3 "$IPORT" iperf3 -s -B "$B0" -p "$IPORT" || true
    fi
}
tern_perf_run() {  # SCEN ID ARGS...
    local sc=$1 id=$2 bps bytes tlimit
    shift 2
    ensure_tern "$sc, before $id" || { result "$sc" mem "$id" "tern perf" nan nan nan nan nan - "tern serve would not start"; return; }
    measure_a tern $((PERF_TIME + 60)) "$TERN" perf "tern://$B0:$TPORT" --time "$PERF_TIME" "$@" \
        --fingerprint "$FP" --json --no-progress
    bps=$(json_get 'd["throughput_bps"]' <"$LOGS/run.out")
    if [ "$M_RC" = 0 ] && [ "$bps" != nan ]; then
        bytes=$(json_get 'd["bytes"]' <"$LOGS/run.out")
        tlimit=$(json_get 'd["tuning"]["limit"]' '?' <"$LOGS/run.out")
        cp "$LOGS/run.out" "$LOGS/$sc-$id.json"
        result "$sc" mem "$id" "$M_CMD" "$bps" "$bytes" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" "" "$M_BUSY" "$M_EMU" "$tlimit"
        log "  $id: $(mbit "$bps") (network $(mbit "$(json_get 'd.get("network_throughput_bps")' <"$LOGS/run.out")"); limit $tlimit; machine $M_BUSY % busy, emulator $M_EMU %)"
    else
        result "$sc" mem "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "tern perf failed: $(fail_note)" "$M_BUSY" "$M_EMU" -
        log "  $id FAILED: $(fail_note)"
    fi
}
guc_mem_run() {  # SCEN ID ARGS...: GridFTP B -> A, /dev/zero to /dev/null, a fixed size
    local sc=$1 id=$2 bps
    shift 2
    if ! have gridftp || [ -z "${SPID[gridftp]:-}" ]; then
        result "$sc" mem "$id" "globus-url-copy $*" nan nan nan nan nan - "GridFTP not available (see peers)"; return
    fi
    measure_a gridftp $((PERF_TIME * 8 + 30)) globus-url-copy "$@" -len "$GUC_LEN" \
        "ftp://$B0:$GPORT/dev/zero" file:///dev/null
    if [ "$M_RC" = 0 ]; then
        bps=$(awk -v n="$GUC_LEN" -v t="$M_WALL" 'BEGIN { printf "%.0f", n * 8 / t }')
        result "$sc" mem "$id" "$M_CMD" "$bps" "$GUC_LEN" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" "" "$M_BUSY" "$M_EMU" -
        log "  $id: $(mbit "$bps") (machine $M_BUSY % busy, emulator $M_EMU %)"
    else
        result "$sc" mem "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "globus-url-copy failed: $(fail_note)" "$M_BUSY" "$M_EMU" -
        log "  $id FAILED: $(fail_note)"
    fi
}
disk_run() {  # SCEN ID SERVER DSTFILE CMD...: one verified copy of $SRC
    local sc=$1 id=$2 srv=$3 dst=$4 bps note="" got tlimit=-
    shift 4
    rm -rf "${DST:?}"/* "$DST"/.[!.]* 2>/dev/null || true
    if [ "$srv" = tern ]; then ensure_tern "$sc, before $id" || true; fi
    local limit=$DISK_TIMEOUT ab0=nan ab1
    if [ "$srv" = tern ]; then limit=$TERN_DISK_TIMEOUT; else ab0=$(ab_bytes); fi
    measure_a "$srv" "$limit" "$@"
    if [ "$srv" = tern ] && [ "$M_RC" = 0 ]; then tlimit=$(json_get 'd["tuning"]["limit"]' '?' <"$LOGS/run.out"); fi
    if [ "$M_RC" = 0 ]; then
        if cmp -s "$SRC" "$dst"; then
            bps=$(awk -v n="$DISK_BYTES" -v t="$M_WALL" 'BEGIN { printf "%.0f", n * 8 / t }')
            result "$sc" disk "$id" "$M_CMD" "$bps" "$DISK_BYTES" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" "" "$M_BUSY" "$M_EMU" "$tlimit"
            log "  $id: $(mbit "$bps") in ${M_WALL}s, verified (machine $M_BUSY % busy)"
        else
            result "$sc" disk "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "copy differs from the source (or is missing)" "$M_BUSY" "$M_EMU" -
            log "  $id FAILED: copy differs from the source"
        fi
    elif [ "$M_RC" = 124 ] && [ "$srv" != tern ] && [ "$ab0" != nan ] && ab1=$(ab_bytes) && [ "$ab1" != nan ]; then
        # Too slow to finish in time: report the rate at which data crossed the
        # path (rsync deletes its partial file when killed, so count on the wire).
        got=$((ab1 - ab0))
        bps=$(awk -v n="$got" -v t="$M_WALL" 'BEGIN { printf "%.0f", n * 8 / t }')
        note="partial: killed at ${DISK_TIMEOUT} s after about $((got / 1048576)) of $DISK_MIB MiB; rate = IP bytes the emulator carried A->B during the run / time (headers and retransmissions included); not verified"
        result "$sc" disk "$id" "$M_CMD" "$bps" "$got" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" "$note" "$M_BUSY" "$M_EMU" -
        log "  $id: ~$(mbit "$bps") ($note)"
    else
        result "$sc" disk "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "$(fail_note)" "$M_BUSY" "$M_EMU" -
        log "  $id FAILED: $(fail_note)"
        tail -3 "$LOGS/run.err" >&2 || true
    fi
    rm -rf "${DST:?}"/* "$DST"/.[!.]* 2>/dev/null || true
}
ab_bytes() {  # IP bytes the emulator has carried A -> B, all paths
    timeout 10 "$NETLAB" --lab "$LAB" status --json 2>/dev/null |
        python3 -c 'import json, sys
print(sum(p["a_to_b"]["bytes"] for p in json.load(sys.stdin)["paths"]))' 2>/dev/null || echo nan
}
skip() { result "$1" "$2" "$3" "$4" nan nan nan nan nan - "$5"; }

# ------------------------------------------------------------------ scenarios
: >"$WORK/events.txt"
for entry in "${SCENARIOS[@]}"; do
    IFS='|' read -r sc title upargs cap cap0 <<<"$entry"
    case " $WAN_SCENARIOS " in *" $sc "*) ;; *) continue ;; esac
    log "scenario $sc: $title"
    read -ra UPARGS <<<"$upargs"
    lab_up "$sc" "${UPARGS[@]}" --mtu "$MTU"
    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$sc-start.json"
    SCEN_CC=$(json_get 'd["sysctls"]["A"]["net.ipv4.tcp_congestion_control"]' '?' <"$WORK/status-$sc-start.json")
    printf '%s\t%s\t%s\t%s\t%s\n' "$sc" "$title" "netlab up $upargs --mtu $MTU" "$cap" "$cap0" >>"$SCEN"
    # Servers live at most as long as a scenario can take.
    SERVER_TIMEOUT=$((PERF_TIME * 40 + DISK_TIMEOUT * 10 + 600))
    start_tern || die "tern serve did not start in B"
    if have iperf3; then start_server iperf3 "$IPORT" iperf3 -s -B "$B0" -p "$IPORT" || true; fi
    if have gridftp; then
        start_server gridftp "$GPORT" "$GFS" -aa -anonymous-user nobody -p "$GPORT" \
            -control-interface "$B0" -data-interface "$B0" -disable-usage-stats \
            -log-level error,warn,info -logfile "$LOGS/gridftp-$sc.log" || true
    fi
    if have xrootd; then
        # -R: xrootd drops to nobody, so its log lives in a directory nobody owns
        start_server xrootd "$XPORT" xrootd -c "$WORK/xrd/xrootd.cfg" -l "$WORK/xrd/xrootd-$sc.log" -R nobody || true
    fi
    if have ssh; then start_server sshd "$SPORT" "$SSHD" -D -f "$SSHDIR/sshd_config" -E "$LOGS/sshd-$sc.log" || true; fi
    if [ -n "${SPID[sshd]:-}" ] && ! grep -q '^ssh_cipher' "$META"; then
        meta ssh_cipher "$(ssh_cipher)"
    fi

    # A size that takes PERF_TIME at half the path's capacity (4 Gbit/s when unlimited).
    rate=$cap0
    [ "$rate" = 0 ] && rate=4000
    GUC_LEN=$(awk -v r="$rate" -v t="$PERF_TIME" 'BEGIN { printf "%.0f", r * 1e6 / 8 * t / 2 }')

    log " memory to memory"
    # Interleaved: iperf3, tern, then the sweep, so drift in load hits all alike.
    iperf3_run "$sc" iperf3-default
    tern_perf_run "$sc" tern-perf-default
    for p in $WIZ_STREAMS; do
        for w in $WIZ_WINDOWS; do
            if [ "$w" = default ]; then
                iperf3_run "$sc" "iperf3-P$p" -P "$p"
            else
                iperf3_run "$sc" "iperf3-P$p-w$w" -P "$p" -w "$w"
            fi
        done
        if [ "$p" = 1 ]; then tern_perf_run "$sc" tern-perf-P8-clear -P 8 --protect clear; fi
    done
    guc_mem_run "$sc" guc-mem-default
    guc_mem_run "$sc" guc-mem-tuned -p 8 -tcp-bs 4194304

    log " disk to disk ($DISK_MIB MiB)"
    disk_run "$sc" tern-cp-default tern "$DST/tern.bin" \
        "$TERN" cp --fingerprint "$FP" --json --no-progress "$SRC" "tern://$B0:$TPORT/tern.bin"
    if [ -n "${SPID[gridftp]:-}" ]; then
        disk_run "$sc" guc-default gridftp "$DST/guc.bin" \
            globus-url-copy "file://$SRC" "ftp://$B0:$GPORT$DST/guc.bin"
    else
        skip "$sc" disk guc-default "globus-url-copy file://SRC ftp://B/DST" "GridFTP not available (see peers)"
    fi
    disk_run "$sc" tern-cp-P8-clear tern "$DST/tern.bin" \
        "$TERN" cp -P 8 --protect clear --fingerprint "$FP" --json --no-progress "$SRC" "tern://$B0:$TPORT/tern.bin"
    if [ -n "${SPID[gridftp]:-}" ]; then
        disk_run "$sc" guc-tuned gridftp "$DST/guc.bin" \
            globus-url-copy -p 8 -tcp-bs 4194304 "file://$SRC" "ftp://$B0:$GPORT$DST/guc.bin"
    else
        skip "$sc" disk guc-tuned "globus-url-copy -p 8 -tcp-bs 4194304 file://SRC ftp://B/DST" "GridFTP not available (see peers)"
    fi
    if [ -n "${SPID[xrootd]:-}" ]; then
        disk_run "$sc" xrdcp xrootd "$DST/xrd.bin" xrdcp -f -s "$SRC" "root://$B0:$XPORT/$DST/xrd.bin"
    else
        skip "$sc" disk xrdcp "xrdcp SRC root://B/DST" "xrootd not available (see peers)"
    fi
    if [ -n "${SPID[sshd]:-}" ] && have rsync; then
        disk_run "$sc" rsync sshd "$DST/rsync.bin" rsync -e "$SSH_E" "$SRC" "root@$B0:$DST/rsync.bin"
    else
        skip "$sc" disk rsync "rsync -e ssh SRC B:DST" "rsync or sshd not available"
    fi
    if [ -n "${SPID[sshd]:-}" ] && have scp; then
        disk_run "$sc" scp sshd "$DST/scp.bin" scp -q -P "$SPORT" "${SSH_OPTS[@]}" "$SRC" "root@$B0:$DST/scp.bin"
    else
        skip "$sc" disk scp "scp SRC B:DST" "scp or sshd not available"
    fi

    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$sc.json" || true
    if [ -n "${SPID[tern]:-}" ] && ! server_alive tern; then
        echo "$sc: tern serve had exited by the end of the scenario" >>"$WORK/events.txt"
    fi
    stop_servers
    SPID=()
    lab_down
done

meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------- report
python3 "$REPO/bench/wan_report.py" "$WORK" "$OUT"
if [ "$SPLICE_ONLY" = 0 ]; then log "report written to $OUT"; fi
if [ "$WRITE" = 1 ]; then
    python3 "$REPO/bench/wan_report.py" --splice "$OUT" "$REPO/BENCHMARKS.md"
    log "section <!-- wan:start --> ... <!-- wan:end --> of BENCHMARKS.md replaced"
fi
