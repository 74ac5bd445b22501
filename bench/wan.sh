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

QUICK=0
WRITE=0
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --write) WRITE=1 ;;
        --out)
            [ $# -ge 2 ] || { echo "wan.sh: --out needs a file" >&2; exit 2; }
            OUT=$2
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        *) echo "wan.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
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
MTU=9000               # the emulator does ~1.1 Gbit/s at MTU 1500, ~4.7 at 9000
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
)
WAN_SCENARIOS=${WAN_SCENARIOS:-lan g50 g100l m180 two}

SPLICE_ONLY=0
if [ -z "$OUT" ]; then
    if [ "$WRITE" = 1 ]; then
        SPLICE_ONLY=1      # set below, once the temporary directory exists
    elif [ "$QUICK" = 1 ]; then
        OUT=$REPO/bench/wan-quick-results.md
    else
        OUT=$REPO/bench/wan-results.md
    fi
fi

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'wan.sh: %s\n' "$*" >&2; exit 1; }

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

WORK_PARENT=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$WORK_PARENT/tern-wan.XXXXXX")
case "$WORK" in *[[:space:]]*) rm -rf "$WORK"; die "temporary directory path must not contain spaces: $WORK" ;; esac
chmod 755 "$WORK"        # the GridFTP and xrootd servers run as nobody
LOGS=$WORK/logs
DST=$WORK/dst            # every copy lands here (tern serve's root too)
mkdir -p "$LOGS" "$DST" "$WORK/xdg" "$WORK/state" "$WORK/ssh" "$WORK/xrd"
chmod 1777 "$DST"
if [ "$SPLICE_ONLY" = 1 ]; then OUT=$WORK/report.md; fi
# Private copies of the binaries: a rebuild during the run must not change them.
mkdir -p "$WORK/bin"
cp "$TERN" "$WORK/bin/tern"
cp "$NETLAB" "$WORK/bin/netlab"
TERN_ORIG=$TERN
TERN=$WORK/bin/tern
NETLAB=$WORK/bin/netlab
chown nobody "$WORK/xrd" 2>/dev/null || true

PIDS=()          # servers started here (the `timeout` wrapping each)
CHILD=""         # the measured command running now
LAB_UP=0
NETNS_ETC=/etc/netns/$LAB-b
MADE_ETC_NETNS=0
MADE_RUN_SSHD=0
stop_pid() {  # SIGTERM (timeout passes it on to its command), up to 5 s, then SIGKILL
    local pid=$1 _
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_servers() {
    local pid
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    PIDS=()
}
lab_down() {
    if [ "$LAB_UP" = 1 ]; then
        timeout 30 "$NETLAB" --lab "$LAB" down || log "netlab down failed for lab $LAB"
        LAB_UP=0
    fi
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$CHILD" ]; then
        pkill -TERM -P "$CHILD" 2>/dev/null || true  # the timeout under /usr/bin/time
        stop_pid "$CHILD"
    fi
    stop_servers
    lab_down
    rm -rf "$NETNS_ETC"
    if [ "$MADE_ETC_NETNS" = 1 ]; then rmdir /etc/netns 2>/dev/null || true; fi
    if [ "$MADE_RUN_SSHD" = 1 ]; then rmdir /run/sshd 2>/dev/null || true; fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

avail_kib=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
need_kib=$((DISK_MIB * 1024 * 2 + 512 * 1024))
[ "$avail_kib" -ge "$need_kib" ] || die "need $((need_kib / 1024)) MiB free under $WORK_PARENT, have $((avail_kib / 1024)) MiB (set BENCH_TMPDIR)"

RESULTS=$WORK/results.tsv   # scenario kind id command bps bytes wall cpu_a cpu_b cc note
META=$WORK/meta.tsv
SCEN=$WORK/scenarios.tsv    # id title args capacity path0 status-json-file
: >"$RESULTS"
: >"$META"
: >"$SCEN"
meta() { printf '%s\t%s\n' "$1" "${2//$'\n'/ }" >>"$META"; }
result() {  # scenario kind id command bps bytes wall cpu_a cpu_b cc note
    local a=("$@") i
    for i in "${!a[@]}"; do a[$i]=${a[$i]//$'\t'/ }; a[$i]=${a[$i]//$'\n'/ }; done
    (IFS=$'\t'; printf '%s\n' "${a[*]}") >>"$RESULTS"
}
quote() {  # the command line, shell-quoted, as one string
    local line="" a
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./:=@+,%-]+$ ]]; then line+=" $a"; else line+=" '${a//\'/\'\\\'\'}'"; fi
    done
    printf '%s' "${line# }"
}
json_get() {
    python3 -c 'import json, sys
d = json.load(sys.stdin)
print(eval(sys.argv[1], {"d": d}))' "$1"
}
now() { date +%s.%N; }
first_line() { "$@" 2>&1 | sed -n '1{s/  */ /g;p}' || true; }  # sed reads all: no SIGPIPE
CLK_TCK=$(getconf CLK_TCK)
proc_cpu() {  # user+system seconds of PID and its reaped children
    local pid=${1:-}
    if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
        awk -v t="$CLK_TCK" '{ sub(/^.*\) /, ""); print ($12 + $13 + $14 + $15) / t }' "/proc/$pid/stat" 2>/dev/null || echo nan
    else
        echo nan
    fi
}

# ------------------------------------------------------------------ environment
meta mode "$MODE"
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta nproc "$(nproc)"
meta cpu "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
meta kernel "$(uname -sr)"
meta memory "$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
meta tern_version "$(first_line "$TERN" --version)"
meta netlab_version "$(first_line "$NETLAB" --version)"
meta tern_commit "$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)"
meta tern_built "$(date -u -r "$TERN_ORIG" '+%Y-%m-%d %H:%M UTC')"
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
SSH_OPTS=(-F none -i "$SSHDIR/client_key" -o IdentitiesOnly=yes -o BatchMode=yes
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR)
if have ssh; then
    ssh-keygen -q -t ed25519 -N '' -C tern-wan-host -f "$SSHDIR/host_key"
    ssh-keygen -q -t ed25519 -N '' -C tern-wan-client -f "$SSHDIR/client_key"
    cp "$SSHDIR/client_key.pub" "$SSHDIR/authorized_keys"
    chmod 600 "$SSHDIR/authorized_keys"
    cat >"$SSHDIR/sshd_config" <<EOF
Port $SPORT
ListenAddress $B0
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
    if [ ! -d /run/sshd ]; then
        mkdir -m 0755 /run/sshd
        MADE_RUN_SSHD=1
    fi
    "$SSHD" -t -f "$SSHDIR/sshd_config" || { log "sshd rejected its configuration; no rsync/scp"; HAVE[ssh]=0 HAVE[rsync]=0 HAVE[scp]=0; }
fi
SSH_E="ssh -p $SPORT ${SSH_OPTS[*]}"   # for rsync -e (no spaces in $WORK, checked above)

cat >"$WORK/xrd/xrootd.cfg" <<EOF
all.export $DST
xrd.port $XPORT
all.adminpath $WORK/xrd
all.pidpath $WORK/xrd
EOF

# GridFTP resolves its own host name; inside B that needs an /etc/hosts that
# names this machine with B's address (ip netns exec bind-mounts
# /etc/netns/NS/hosts over /etc/hosts).
if [ ! -d /etc/netns ]; then MADE_ETC_NETNS=1; fi
mkdir -p "$NETNS_ETC"
printf '127.0.0.1 localhost\n%s %s wanbench-b\n10.47.0.1 wanbench-a\n' "$B0" "$(hostname)" >"$NETNS_ETC/hosts"
export GLOBUS_USAGE_OPTOUT=1
export XDG_CONFIG_HOME=$WORK/xdg

# ------------------------------------------------------------------- servers
declare -A SPID=()   # server name -> pid of the server process itself (for CPU)
wait_listen_b() {  # PORT TIMEOUT-PID: until something listens on B (at most 10 s)
    local _
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || return 1
        if "$NETLAB" --lab "$LAB" exec B ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; then return 0; fi
        sleep 0.1
    done
    return 1
}
SERVER_CMDS=$WORK/server-commands.txt
: >"$SERVER_CMDS"
start_server() {  # NAME PORT CMD...: run CMD in B under timeout; 1 if it does not listen
    local name=$1 port=$2 tp
    shift 2
    if ! grep -qxF -- "$(quote "$@")" "$SERVER_CMDS"; then printf '%s\n' "$(quote "$@")" >>"$SERVER_CMDS"; fi
    timeout "$SERVER_TIMEOUT" "$NETLAB" --lab "$LAB" exec B "$@" >>"$LOGS/$name.out" 2>>"$LOGS/$name.err" &
    tp=$!
    PIDS+=("$tp")
    if ! wait_listen_b "$port" "$tp"; then
        log "$name did not start in B; last lines of its output:"
        tail -n 5 "$LOGS/$name.err" "$LOGS/$name.out" >&2 || true
        SPID[$name]=""
        return 1
    fi
    SPID[$name]=$(pgrep -P "$tp" | head -1)
    return 0
}
FP=""
start_tern() {
    start_server tern "$TPORT" "$TERN" serve --listen "$B0:$TPORT" --root "$DST" --state-dir "$WORK/state" || return 1
    local _
    FP=""
    for _ in $(seq 50); do
        FP=$(sed -n 's/^tern serve: certificate fingerprint \(SHA256:[^ ]*\).*/\1/p' "$LOGS/tern.out" | tail -1)
        [ -n "$FP" ] && break
        sleep 0.1
    done
    [ -n "$FP" ]
}

# ------------------------------------------------------------------ measuring
# measure SCEN KIND ID SERVER SECS CMD...: run CMD in A under timeout and
# /usr/bin/time; sets M_RC, M_WALL (s), M_CPU_A (client user+sys s), M_CPU_B
# (the server's, from /proc) and M_CMD. Output in $LOGS/run.out, run.err.
measure() {
    local srv=$4 secs=$5 s0 s1 t0 t1 spid
    shift 5
    M_CMD=$(quote "$@")
    spid=${SPID[$srv]:-}
    s0=$(proc_cpu "$spid")
    M_RC=0
    : >"$LOGS/run.err"
    t0=$(now)
    /usr/bin/time -o "$LOGS/time.txt" -f '%U %S' timeout "$secs" "$NETLAB" --lab "$LAB" exec A "$@" \
        >"$LOGS/run.out" 2>>"$LOGS/run.err" &
    CHILD=$!
    wait "$CHILD" || M_RC=$?
    CHILD=""
    t1=$(now)
    # Let forking servers (sshd, GridFTP) reap their session processes, so
    # that /proc counts their CPU; after a killed client that can take longer.
    case "$srv" in
        sshd | gridftp)
            sleep 0.3
            if [ "$M_RC" != 0 ] && [ -n "$spid" ]; then
                for _ in $(seq 30); do pgrep -P "$spid" >/dev/null || break; sleep 0.1; done
            fi
            ;;
    esac
    s1=$(proc_cpu "$spid")
    M_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    M_CPU_A=$(tail -1 "$LOGS/time.txt" 2>/dev/null | awk 'NF == 2 { printf "%.2f", $1 + $2; ok = 1 } END { if (!ok) print "nan" }')
    M_CPU_B=$(awk -v a="$s0" -v b="$s1" 'BEGIN { if (a == "nan" || b == "nan") print "nan"; else printf "%.2f", b - a }')
    cat "$LOGS/run.out" >>"$LOGS/all-runs.out"
    cat "$LOGS/run.err" >>"$LOGS/all-runs.err"
}
mbit() { awk -v b="$1" 'BEGIN { if (b == "nan") print "failed"; else printf "%.0f Mbit/s", b / 1e6 }'; }
fail_note() {  # why the last measured run failed
    if [ "$M_RC" = 124 ]; then echo "timed out (killed)"; else echo "exit $M_RC: $(grep -v '^\s*$' "$LOGS/run.err" | tail -1 | cut -c1-200)"; fi
}

iperf3_run() {  # SCEN ID ARGS...
    local sc=$1 id=$2 bps bytes cc
    shift 2
    if ! have iperf3; then result "$sc" mem "$id" "iperf3 $*" nan nan nan nan nan - "iperf3 not installed"; return; fi
    measure "$sc" mem "$id" iperf3 $((PERF_TIME + 30)) iperf3 -c "$B0" -p "$IPORT" -t "$PERF_TIME" "$@" -J
    if bps=$(json_get 'd["end"]["sum_received"]["bits_per_second"]' <"$LOGS/run.out" 2>/dev/null); then
        bytes=$(json_get 'd["end"]["sum_received"]["bytes"]' <"$LOGS/run.out")
        cc=$(json_get 'd["end"].get("sender_tcp_congestion", "?")' <"$LOGS/run.out")
        result "$sc" mem "$id" "$M_CMD" "$bps" "$bytes" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$cc" ""
        log "  $id: $(mbit "$bps") (cc $cc)"
    else
        local why
        why=$(json_get 'd.get("error", "?")' <"$LOGS/run.out" 2>/dev/null || fail_note)
        result "$sc" mem "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "iperf3 failed: $why"
        log "  $id FAILED: $why"
        # iperf3 -s serves one test at a time and can wedge after a failure: restart it
        stop_server_named iperf3
        start_server iperf3 "$IPORT" iperf3 -s -B "$B0" -p "$IPORT" || true
    fi
}
stop_server_named() {  # stop one server (by its timeout pid) and forget it
    local name=$1 pid keep=()
    local spid=${SPID[$name]:-}
    for pid in "${PIDS[@]}"; do
        if [ -n "$spid" ] && pgrep -P "$pid" 2>/dev/null | grep -qx "$spid"; then stop_pid "$pid"; else keep+=("$pid"); fi
    done
    PIDS=("${keep[@]}")
    SPID[$name]=""
}
tern_perf_run() {  # SCEN ID ARGS...
    local sc=$1 id=$2 bps bytes
    shift 2
    if [ -z "${SPID[tern]:-}" ] || ! kill -0 "${SPID[tern]}" 2>/dev/null; then
        log "  tern serve is not running; starting it again"
        echo "$sc: tern serve was not running before $id; restarted" >>"$WORK/events.txt"
        start_tern || { result "$sc" mem "$id" "tern perf" nan nan nan nan nan - "tern serve would not start"; return; }
    fi
    measure "$sc" mem "$id" tern $((PERF_TIME + 60)) "$TERN" perf "tern://$B0:$TPORT" --time "$PERF_TIME" "$@" \
        --fingerprint "$FP" --json --no-progress
    if [ "$M_RC" = 0 ] && bps=$(json_get 'd["throughput_bps"]' <"$LOGS/run.out" 2>/dev/null); then
        bytes=$(json_get 'd["bytes"]' <"$LOGS/run.out")
        cp "$LOGS/run.out" "$LOGS/$sc-$id.json"
        result "$sc" mem "$id" "$M_CMD" "$bps" "$bytes" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" ""
        log "  $id: $(mbit "$bps") (network $(mbit "$(json_get 'd.get("network_throughput_bps", float("nan"))' <"$LOGS/run.out")"))"
    else
        result "$sc" mem "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "tern perf failed: $(fail_note)"
        log "  $id FAILED: $(fail_note)"
    fi
}
guc_mem_run() {  # SCEN ID ARGS...: GridFTP B -> A, /dev/zero to /dev/null, a fixed size
    local sc=$1 id=$2 bps
    shift 2
    if ! have gridftp || [ -z "${SPID[gridftp]:-}" ]; then
        result "$sc" mem "$id" "globus-url-copy $*" nan nan nan nan nan - "GridFTP not available (see peers)"; return
    fi
    measure "$sc" mem "$id" gridftp $((PERF_TIME * 8 + 30)) globus-url-copy "$@" -len "$GUC_LEN" \
        "ftp://$B0:$GPORT/dev/zero" file:///dev/null
    if [ "$M_RC" = 0 ]; then
        bps=$(awk -v n="$GUC_LEN" -v t="$M_WALL" 'BEGIN { printf "%.0f", n * 8 / t }')
        result "$sc" mem "$id" "$M_CMD" "$bps" "$GUC_LEN" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" ""
        log "  $id: $(mbit "$bps")"
    else
        result "$sc" mem "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "globus-url-copy failed: $(fail_note)"
        log "  $id FAILED: $(fail_note)"
    fi
}
disk_run() {  # SCEN ID SERVER DSTFILE CMD...: one verified copy of $SRC
    local sc=$1 id=$2 srv=$3 dst=$4 bps note="" got
    shift 4
    rm -rf "${DST:?}"/* "$DST"/.[!.]* 2>/dev/null || true
    if [ "$srv" = tern ] && { [ -z "${SPID[tern]:-}" ] || ! kill -0 "${SPID[tern]}" 2>/dev/null; }; then
        log "  tern serve is not running; starting it again"
        echo "$sc: tern serve was not running before $id; restarted" >>"$WORK/events.txt"
        start_tern || true
    fi
    local limit=$DISK_TIMEOUT ab0=nan ab1
    if [ "$srv" = tern ]; then limit=$TERN_DISK_TIMEOUT; else ab0=$(ab_bytes); fi
    measure "$sc" disk "$id" "$srv" "$limit" "$@"
    if [ "$M_RC" = 0 ]; then
        if cmp -s "$SRC" "$dst"; then
            bps=$(awk -v n="$DISK_BYTES" -v t="$M_WALL" 'BEGIN { printf "%.0f", n * 8 / t }')
            result "$sc" disk "$id" "$M_CMD" "$bps" "$DISK_BYTES" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" ""
            log "  $id: $(mbit "$bps") in ${M_WALL}s, verified"
        else
            result "$sc" disk "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "copy differs from the source (or is missing)"
            log "  $id FAILED: copy differs from the source"
        fi
    elif [ "$M_RC" = 124 ] && [ "$srv" != tern ] && [ "$ab0" != nan ] && ab1=$(ab_bytes) && [ "$ab1" != nan ]; then
        # Too slow to finish in time: report the rate at which data crossed the
        # path (rsync deletes its partial file when killed, so count on the wire).
        got=$((ab1 - ab0))
        bps=$(awk -v n="$got" -v t="$M_WALL" 'BEGIN { printf "%.0f", n * 8 / t }')
        note="partial: killed at ${DISK_TIMEOUT} s after about $((got / 1048576)) of $DISK_MIB MiB; rate = IP bytes the emulator carried A->B during the run / time (headers and retransmissions included); not verified"
        result "$sc" disk "$id" "$M_CMD" "$bps" "$got" "$M_WALL" "$M_CPU_A" "$M_CPU_B" "$SCEN_CC" "$note"
        log "  $id: ~$(mbit "$bps") ($note)"
    else
        result "$sc" disk "$id" "$M_CMD" nan nan "$M_WALL" nan nan - "$(fail_note)"
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
    "$NETLAB" --lab "$LAB" down >/dev/null 2>&1 || true
    timeout 60 "$NETLAB" --lab "$LAB" up "${UPARGS[@]}" --mtu "$MTU" >"$LOGS/up-$sc.txt" 2>&1 ||
        { cat "$LOGS/up-$sc.txt" >&2; die "netlab up failed for $sc"; }
    LAB_UP=1
    timeout 20 "$NETLAB" --lab "$LAB" status --json >"$WORK/status-$sc-start.json"
    SCEN_CC=$(json_get 'd["sysctls"]["A"]["net.ipv4.tcp_congestion_control"]' <"$WORK/status-$sc-start.json")
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
        meta ssh_cipher "$(timeout 20 "$NETLAB" --lab "$LAB" exec A ssh -v -p "$SPORT" "${SSH_OPTS[@]}" -o LogLevel=DEBUG1 "root@$B0" true 2>&1 |
            sed -n 's/.*kex: client->server cipher: \([^ ]*\) MAC: \([^ ]*\).*/\1 (MAC \2)/p' | head -1)"
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
    if [ -n "${SPID[tern]:-}" ] && ! kill -0 "${SPID[tern]}" 2>/dev/null; then
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
