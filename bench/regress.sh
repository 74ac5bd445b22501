#!/usr/bin/env bash
# bench/regress.sh: two tern binaries side by side in one run, for a change
# that must not cost speed (a refactor): loopback `tern perf` and `tern cp`,
# and `tern perf` over one emulated WAN path (netlab, 50 ms RTT,
# 1 Gbit/s; root only). Runs alternate (old, new, old, new, …) so slow
# changes in machine load hit both alike; the report gives every run, the
# medians and new/old ratios.
#
#   bash bench/regress.sh OLD_TERN NEW_TERN [RUNS]     (RUNS default 3)
#
# Each binary talks to a daemon of its own build. NETLAB=path selects the
# netlab binary (default target/release/netlab). Everything listens on
# loopback or inside the lab's namespaces and is stopped on exit.
set -euo pipefail
old=${1:?usage: bench/regress.sh OLD_TERN NEW_TERN [RUNS]}
new=${2:?usage: bench/regress.sh OLD_TERN NEW_TERN [RUNS]}
runs=${3:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
netlab=${NETLAB:-$repo/target/release/netlab}
work=$(mktemp -d /tmp/tern-regress.XXXXXX)
pids=()
lab=
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$lab" ]; then "$netlab" --lab "$lab" down >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
export XDG_CONFIG_HOME=$work/config
head -c 512M /dev/urandom >"$work/data.bin"

# serve NAME BIN LISTEN [PREFIX...]: starts a daemon, sets port_NAME.
serve() {
    local name=$1 bin=$2 listen=$3
    shift 3
    mkdir -p "$work/$name/root" "$work/$name/state"
    "$@" "$bin" serve --json --listen "$listen" --root "$work/$name/root" \
        --state-dir "$work/$name/state" >"$work/$name/banner" 2>"$work/$name/log" &
    pids+=($!)
    for _ in $(seq 200); do [ -s "$work/$name/banner" ] && break; sleep 0.05; done
    python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["listen"].rsplit(":",1)[1])' \
        "$work/$name/banner" >"$work/$name/port"
}

perf_mbps() { # BIN URL [PREFIX...]
    local bin=$1 url=$2
    shift 2
    "$@" "$bin" perf "$url" --time 5 --json 2>/dev/null |
        python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["throughput_bps"]/1e6))'
}

cp_mbps() { # BIN URL
    local t0 t1
    sync
    [ "$(id -u)" = 0 ] && echo 3 >/proc/sys/vm/drop_caches
    t0=$(date +%s.%N)
    "$1" cp "$work/data.bin" "$2" >/dev/null 2>&1
    t1=$(date +%s.%N)
    python3 -c "print('%.1f' % (512*1048576*8/1e6/($t1-$t0)))"
}

serve old "$old" 127.0.0.1:0
serve new "$new" 127.0.0.1:0
declare -A results
for i in $(seq "$runs"); do
    for v in old new; do
        bin=${!v}
        port=$(cat "$work/$v/port")
        results[perf_$v]+="$(perf_mbps "$bin" "tern://127.0.0.1:$port") "
        results[cp_$v]+="$(cp_mbps "$bin" "tern://127.0.0.1:$port/copy-$i.bin") "
        cmp "$work/data.bin" "$work/$v/root/copy-$i.bin"
    done
done

wan=no
if [ "$(id -u)" = 0 ] && [ -x "$netlab" ] && [ -e /dev/net/tun ]; then
    wan=yes
    lab=ternreg
    "$netlab" --lab "$lab" down >/dev/null 2>&1 || true
    "$netlab" --lab "$lab" up --rtt 50 --rate 1000 >/dev/null
    serve wanold "$old" 10.47.0.2:4801 "$netlab" --lab "$lab" exec B
    serve wannew "$new" 10.47.0.2:4802 "$netlab" --lab "$lab" exec B
    for i in $(seq "$runs"); do
        results[wan_old]+="$(perf_mbps "$old" tern://10.47.0.2:4801 "$netlab" --lab "$lab" exec A) "
        results[wan_new]+="$(perf_mbps "$new" tern://10.47.0.2:4802 "$netlab" --lab "$lab" exec A) "
    done
fi

python3 - "$runs" "$wan" "${results[perf_old]}" "${results[perf_new]}" "${results[cp_old]}" \
    "${results[cp_new]}" "${results[wan_old]:-}" "${results[wan_new]:-}" <<'EOF'
import statistics, sys
runs, wan = sys.argv[1], sys.argv[2]
rows = [("loopback tern perf, 5 s, defaults", sys.argv[3], sys.argv[4]),
        ("loopback tern cp, 512 MiB, page cache dropped", sys.argv[5], sys.argv[6])]
if wan == "yes":
    rows.append(("netlab 50 ms RTT, 1 Gbit/s: tern perf, 5 s", sys.argv[7], sys.argv[8]))
print(f"| measurement (Mbit/s, {runs} runs each, alternating) | old runs | new runs | old median | new median | new/old |")
print("|---|---|---|---|---|---|")
for name, o, n in rows:
    o = [float(x) for x in o.split()]
    n = [float(x) for x in n.split()]
    mo, mn = statistics.median(o), statistics.median(n)
    print(f"| {name} | {' '.join(map(str, o))} | {' '.join(map(str, n))} | {mo:.1f} | {mn:.1f} | {mn/mo:.2f} |")
if wan != "yes":
    print("\n(no netlab path: needs root, /dev/net/tun and target/release/netlab)")
EOF
