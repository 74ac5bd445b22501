# shellcheck shell=bash disable=SC2034  # many globals here are set for the sourcing script
# bench/lib.sh: what the netlab benchmarks (wan.sh, drs.sh, files.sh) share:
# logging, the temporary directory with private copies of the binaries, the
# cleanup trap that stops everything started, metadata and result rows, servers
# in host B (tern serve, a private sshd), and timing one command in host A.
#
# Source it after setting BENCH_NAME (used in messages), REPO, TERN and NETLAB.
# The functions read and set these globals:
#   WORK LOGS DST WORK_PARENT TERN_ORIG   bench_workdir (TERN, NETLAB become the copies)
#   META RESULTS                          bench_tables
#   LAB B0 TPORT                          the caller: lab name, B's address, tern's port
#   TERN_LISTEN                           the caller, optional: tern serve's --listen (B0:TPORT)
#   SERVER_TIMEOUT                        the caller: how long a server may live
#   SSHDIR SPORT SSH_OPTS SSH_E           bench_sshd_setup
#   EMU_PID                               lab_up (the emulator's pid, for cpu_snap)
#   PIDS SPID CHILD LAB_UP FP             kept here
# A script may define bench_cleanup_extra; the EXIT trap calls it after stopping
# the measured command and before stopping the servers.

PIDS=()                # servers started here (the `timeout` wrapping each)
declare -A SPID=()     # server name -> pid of the server process itself (for CPU)
CHILD=""               # the measured command running now
LAB_UP=0
EMU_PID=x              # the emulator's pid while a lab is up (lab_up)
MADE_RUN_SSHD=0
FP=""                  # tern serve's certificate fingerprint
NETNS_HOSTS_DIR=""     # /etc/netns/LAB-b, once bench_netns_hosts wrote it
MADE_ETC_NETNS=0

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '%s: %s\n' "${BENCH_NAME:-bench}" "$*" >&2; exit 1; }
now() { date +%s.%N; }
first_line() { "$@" 2>&1 | sed -n '1{s/  */ /g;p}' || true; }  # sed reads all: no SIGPIPE
mbit() { awk -v b="$1" 'BEGIN { if (b == "nan" || b == "") print "failed"; else printf "%.0f Mbit/s", b / 1e6 }'; }
quote() {  # the command line, shell-quoted, as one string
    local line="" a
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./:=@+,%-]+$ ]]; then line+=" $a"; else line+=" '${a//\'/\'\\\'\'}'"; fi
    done
    printf '%s' "${line# }"
}
json_get() {  # EXPR [DEFAULT]: EXPR (Python, on d) of the JSON on stdin; DEFAULT (nan) if that fails
    python3 -c 'import json, sys
try:
    d = json.load(sys.stdin)
    v = eval(sys.argv[1], {"d": d})
    print(sys.argv[2] if v is None else v)
except Exception:
    print(sys.argv[2])' "$1" "${2:-nan}"
}
CLK_TCK=$(getconf CLK_TCK)
proc_cpu() {  # user+system seconds of PID and its reaped children
    local pid=${1:-}
    if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
        awk -v t="$CLK_TCK" '{ sub(/^.*\) /, ""); print ($12 + $13 + $14 + $15) / t }' "/proc/$pid/stat" 2>/dev/null || echo nan
    else
        echo nan
    fi
}
# The machine's CPU and the emulator's around a run, so that a report can tell a run the CPU
# held back from one the path or the tool did (startup.sh, measure_a). cpu_snap: "BUSY/TOTAL
# EMU", the machine's busy and total CPU seconds since boot over all cores (/proc/stat: busy
# is the total less idle and iowait) and the emulator's user+system seconds (EMU_PID, which
# lab_up sets; nan without one).
cpu_snap() {
    local m
    m=$(awk -v t="$CLK_TCK" '$1 == "cpu" { for (i = 2; i <= 9; i++) s += $i
        printf "%.2f/%.2f", (s - $5 - $6) / t, s / t; ok = 1; exit } END { if (!ok) print "nan" }' /proc/stat 2>/dev/null) || m=nan
    printf '%s %s\n' "${m:-nan}" "$(proc_cpu "${EMU_PID:-}")"
}
busy_pct() {  # A B: the machine's busy share of all its cores between two cpu_snap readings, in %
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, "/"); split(b, y, "/")
        if (a == "nan" || b == "nan" || a == "" || b == "" || y[2] <= x[2]) print "nan"; else printf "%.1f", 100 * (y[1] - x[1]) / (y[2] - x[2]) }'
}
emu_pct() {  # E0 E1 WALL: the emulator's CPU between two cpu_snap readings, in % of one core
    awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { if (a == "nan" || b == "nan" || a == "" || b == "" || t == "nan" || t <= 0) print "nan"; else printf "%.1f", 100 * (b - a) / t }'
}

# bench_args NAME ARGS...: the options every netlab benchmark takes: --quick, --write,
# --out FILE, -h (the script defines usage()). Sets QUICK, WRITE and OUT: FILE, else
# bench/NAME-quick-results.md or bench/NAME-results.md, or with --write alone a
# file in the temporary directory (SPLICE_ONLY=1; bench_workdir sets it).
bench_args() {
    local name=$1
    shift
    QUICK=0 WRITE=0 OUT="" SPLICE_ONLY=0
    while [ $# -gt 0 ]; do
        case "$1" in
            --quick) QUICK=1 ;;
            --write) WRITE=1 ;;
            --out)
                [ $# -ge 2 ] || { echo "$BENCH_NAME: --out needs a file" >&2; exit 2; }
                OUT=$2
                shift
                ;;
            -h | --help) usage; exit 0 ;;
            *) echo "$BENCH_NAME: unknown argument: $1" >&2; usage >&2; exit 2 ;;
        esac
        shift
    done
    if [ -z "$OUT" ]; then
        if [ "$WRITE" = 1 ]; then
            SPLICE_ONLY=1
        elif [ "$QUICK" = 1 ]; then
            OUT=$REPO/bench/$name-quick-results.md
        else
            OUT=$REPO/bench/$name-results.md
        fi
    fi
}

# ------------------------------------------------------- stopping and cleaning up
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
        EMU_PID=x   # its pid may be reused: cpu_snap must not read another process
    fi
}
lab_up() {  # NAME ARGS...: (re)create the lab with `netlab up ARGS`; output in $LOGS/up-NAME.txt; sets EMU_PID
    local name=$1
    shift
    "$NETLAB" --lab "$LAB" down >/dev/null 2>&1 || true
    timeout 60 "$NETLAB" --lab "$LAB" up "$@" >"$LOGS/up-$name.txt" 2>&1 ||
        { cat "$LOGS/up-$name.txt" >&2; die "netlab up failed for $name"; }
    LAB_UP=1
    EMU_PID=$(cat "/run/netlab/$LAB/emulator.pid" 2>/dev/null || echo x)
}
bench_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$CHILD" ]; then
        pkill -TERM -P "$CHILD" 2>/dev/null || true  # the timeout under /usr/bin/time
        stop_pid "$CHILD"
    fi
    if declare -F bench_cleanup_extra >/dev/null; then bench_cleanup_extra; fi
    stop_servers
    lab_down
    if [ -n "$NETNS_HOSTS_DIR" ]; then rm -rf "$NETNS_HOSTS_DIR"; fi
    if [ "$MADE_ETC_NETNS" = 1 ]; then rmdir /etc/netns 2>/dev/null || true; fi
    if [ "$MADE_RUN_SSHD" = 1 ]; then rmdir /run/sshd 2>/dev/null || true; fi
    rm -rf "$WORK"
    exit "$rc"
}

# bench_workdir NAME: the temporary directory $BENCH_TMPDIR (or $TMPDIR, /tmp)/tern-NAME.XXXXXX
# with logs/, dst/ (tern serve's root), state/, xdg/ and bin/; private copies of
# tern and netlab in bin/ (a rebuild during the run must not change them); the
# cleanup trap, which deletes it all again; and OUT there if SPLICE_ONLY.
bench_workdir() {
    WORK_PARENT=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
    WORK=$(mktemp -d "$WORK_PARENT/tern-$1.XXXXXX")
    case "$WORK" in *[[:space:]]*) rm -rf "$WORK"; die "temporary directory path must not contain spaces: $WORK" ;; esac
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    chmod 755 "$WORK"
    LOGS=$WORK/logs
    DST=$WORK/dst
    mkdir -p "$LOGS" "$DST" "$WORK/xdg" "$WORK/state" "$WORK/bin"
    cp "$TERN" "$WORK/bin/tern"
    cp "$NETLAB" "$WORK/bin/netlab"
    TERN_ORIG=$TERN
    TERN=$WORK/bin/tern
    NETLAB=$WORK/bin/netlab
    export XDG_CONFIG_HOME=$WORK/xdg   # tern's known_hosts
    if [ "${SPLICE_ONLY:-0}" = 1 ]; then OUT=$WORK/report.md; fi
}
# bench_svg_path DOC OVERRIDE: where a script's plot goes, in SVG, and SVG_LINK, how its
# report links to it: OVERRIDE if set; with --write docs/DOC, linked from BENCHMARKS.md
# (repository root); otherwise beside the report (OUT with .svg), so a quick run never
# replaces the committed plot.
bench_svg_path() {
    if [ -n "$2" ]; then
        SVG=$2
    elif [ "$WRITE" = 1 ]; then
        SVG=$REPO/docs/$1
    else
        SVG=${OUT%.md}.svg
    fi
    case "$SVG" in /*) ;; *) SVG=$PWD/$SVG ;; esac
    if [ "$WRITE" = 1 ]; then
        SVG_LINK=$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$SVG" "$REPO")
    else
        SVG_LINK=$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], os.path.dirname(os.path.abspath(sys.argv[2]))))' "$SVG" "$OUT")
    fi
}
# bench_netns_hosts LINE...: /etc/netns/LAB-b/hosts with these lines. GridFTP resolves its
# own host name, which inside B needs an /etc/hosts naming this machine with B's address
# (ip netns exec bind-mounts /etc/netns/NS/hosts over /etc/hosts). The cleanup trap
# removes it (and /etc/netns if this made it).
bench_netns_hosts() {
    local d=/etc/netns/$LAB-b
    if [ -e "$d" ]; then die "$d exists already (another run?)"; fi
    if [ ! -d /etc/netns ]; then MADE_ETC_NETNS=1; fi
    mkdir -p "$d"
    NETNS_HOSTS_DIR=$d
    printf '%s\n' "$@" >"$d/hosts"
}
bench_need_space() {  # KIB: die unless that much is free under WORK
    local avail
    avail=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
    [ "$avail" -ge "$1" ] || die "need $(($1 / 1024)) MiB free under $WORK_PARENT, have $((avail / 1024)) MiB (set BENCH_TMPDIR)"
}

# ------------------------------------------------------------- metadata, results
bench_tables() {  # empty meta.tsv, results.tsv, events.txt and server-commands.txt in WORK
    META=$WORK/meta.tsv
    RESULTS=$WORK/results.tsv
    : >"$META"
    : >"$RESULTS"
    : >"$WORK/events.txt"
    : >"$WORK/server-commands.txt"
}
meta() { printf '%s\t%s\n' "$1" "${2//$'\n'/ }" >>"$META"; }
result() {  # one tab-separated row of results.tsv (tabs and newlines in fields become spaces)
    local a=("$@") i
    for i in "${!a[@]}"; do a[i]=${a[i]//$'\t'/ }; a[i]=${a[i]//$'\n'/ }; done
    (IFS=$'\t'; printf '%s\n' "${a[*]}") >>"$RESULTS"
}
bench_meta_machine() {  # MODE: the run's mode, date, machine, load and tern's version
    meta mode "$1"
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
}

# ------------------------------------------------------------------ ssh in host B
# bench_sshd_setup COMMENT: host and client keys and an sshd_config in SSHDIR for
# a private sshd on B0:SPORT (root by key only); sets SSH_OPTS (for ssh/scp) and
# SSH_E (for rsync -e). Returns 1 if sshd rejects the configuration.
bench_sshd_setup() {
    SSH_OPTS=(-F none -i "$SSHDIR/client_key" -o IdentitiesOnly=yes -o BatchMode=yes
        -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR)
    SSH_E="ssh -p $SPORT ${SSH_OPTS[*]}"   # no spaces in $WORK (bench_workdir checks)
    mkdir -p "$SSHDIR"
    ssh-keygen -q -t ed25519 -N '' -C "$1-host" -f "$SSHDIR/host_key"
    ssh-keygen -q -t ed25519 -N '' -C "$1-client" -f "$SSHDIR/client_key"
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
    "${SSHD:-/usr/sbin/sshd}" -t -f "$SSHDIR/sshd_config"
}
ssh_cipher() {  # the cipher and MAC ssh negotiates from A to the sshd in B
    timeout 20 "$NETLAB" --lab "$LAB" exec A ssh -v -p "$SPORT" "${SSH_OPTS[@]}" -o LogLevel=DEBUG1 "root@$B0" true 2>&1 |
        sed -n 's/.*kex: client->server cipher: \([^ ]*\) MAC: \([^ ]*\).*/\1 (MAC \2)/p' | head -1
}

# ------------------------------------------------------------- servers in host B
wait_listen_b() {  # PORT TIMEOUT-PID: until something listens on B (at most 10 s)
    local _
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || return 1
        if "$NETLAB" --lab "$LAB" exec B ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; then return 0; fi
        sleep 0.1
    done
    return 1
}
start_server() {  # NAME PORT CMD...: run CMD in B under timeout; 1 if it does not listen
    local name=$1 port=$2 tp
    shift 2
    if ! grep -qxF -- "$(quote "$@")" "$WORK/server-commands.txt"; then printf '%s\n' "$(quote "$@")" >>"$WORK/server-commands.txt"; fi
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
stop_server_named() {  # stop one server (by its timeout pid) and forget it
    local name=$1 pid keep=()
    local spid=${SPID[$name]:-}
    for pid in "${PIDS[@]}"; do
        if [ -n "$spid" ] && pgrep -P "$pid" 2>/dev/null | grep -qx "$spid"; then stop_pid "$pid"; else keep+=("$pid"); fi
    done
    PIDS=("${keep[@]}")
    SPID[$name]=""
}
server_alive() { [ -n "${SPID[$1]:-}" ] && kill -0 "${SPID[$1]}" 2>/dev/null; }
start_tern() {  # tern serve in B on B0:TPORT, root DST; sets FP (its certificate fingerprint)
    # shellcheck disable=SC2086  # TERN_SERVE_EXTRA: extra words, e.g. --mptcp
    start_server tern "$TPORT" "$TERN" serve --listen "${TERN_LISTEN:-$B0:$TPORT}" --root "$DST" --state-dir "$WORK/state" ${TERN_SERVE_EXTRA:-} || return 1
    local _
    FP=""
    for _ in $(seq 50); do
        FP=$(sed -n 's/^tern serve: certificate fingerprint \(SHA256:[^ ]*\).*/\1/p' "$LOGS/tern.out" | tail -1)
        [ -n "$FP" ] && break
        sleep 0.1
    done
    [ -n "$FP" ]
}
ensure_tern() {  # WHAT: start tern serve again if it has gone (noted in events.txt)
    if ! server_alive tern; then
        log "  tern serve is not running; starting it again"
        echo "$1: tern serve was not running; restarted" >>"$WORK/events.txt"
        start_tern
    fi
}

# --------------------------------------------------------------- timing in host A
# measure_a SERVER SECS CMD...: run CMD in A under timeout and /usr/bin/time;
# sets M_RC, M_WALL (s), M_CPU_A (client user+sys s, children included), M_CPU_B
# (SERVER's, from /proc, reaped children included), M_BUSY (the machine's busy
# share of all cores over the run, %), M_EMU (the emulator's CPU over the run, %
# of one core) and M_CMD. Output in $LOGS/run.out and run.err, and appended to
# all-runs.out and all-runs.err.
measure_a() {
    local srv=$1 secs=$2 s0 s1 t0 t1 c0 c1 e0 e1 spid _
    shift 2
    M_CMD=$(quote "$@")
    spid=${SPID[$srv]:-}
    s0=$(proc_cpu "$spid")
    M_RC=0
    : >"$LOGS/run.err"
    read -r c0 e0 <<<"$(cpu_snap)"
    t0=$(now)
    /usr/bin/time -o "$LOGS/time.txt" -f '%U %S' timeout "$secs" "$NETLAB" --lab "$LAB" exec A "$@" \
        >"$LOGS/run.out" 2>>"$LOGS/run.err" &
    CHILD=$!
    wait "$CHILD" || M_RC=$?
    CHILD=""
    t1=$(now)
    # Before the wait for the servers below: the busy share covers the client's run only.
    read -r c1 e1 <<<"$(cpu_snap)"
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
    M_BUSY=$(busy_pct "$c0" "$c1")
    M_EMU=$(emu_pct "$e0" "$e1" "$M_WALL")
    { echo "== $M_CMD"; cat "$LOGS/run.out"; } >>"$LOGS/all-runs.out"
    { echo "== $M_CMD"; cat "$LOGS/run.err"; } >>"$LOGS/all-runs.err"
}
fail_note() {  # why the last measured run failed
    if [ "$M_RC" = 124 ]; then echo "timed out (killed)"; else echo "exit $M_RC: $(grep -v '^\s*$' "$LOGS/run.err" | tail -1 | cut -c1-200)"; fi
}
