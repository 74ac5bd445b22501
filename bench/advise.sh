#!/usr/bin/env bash
# The benchmark half of the advisor's must-show (issue 6): on a netlab path
# of 500 Mbit/s x 180 ms, does `tern perf` started from the advisor's
# advice reach at least 0.95x the hand-tuned best, from the start?
#
#   1. a client-side advisor (`tern advisor` in A) measures the data server
#      (`tern serve` in B) with its default probes (TCP-connect RTT, UDP
#      packet trains); its advice is recorded;
#   2. `tern perf --advisor URL` runs from that advice (streams and window
#      from the advice, nothing hand-set), PERF_TIME seconds;
#   3. the hand-tuned sweep: `tern perf --streams N --window W` for N in
#      {1,2,4,8} and W in {BDP/N, 2 x BDP/N}, PERF_TIME seconds each;
#   4. "from the start": tern perf has no per-interval report, so the
#      advised configuration and the sweep's best each run once more for
#      START_TIME seconds (slow start included), alternating.
#
# Results: a TSV and a Markdown section in the work directory; with --write
# the section replaces the one between <!-- advise:start --> and
# <!-- advise:end --> in BENCHMARKS.md. Needs root, target/release/{tern,
# netlab} (built if missing), python3, chrt. Traffic stays in the lab.
#
#   bench/advise.sh [--write] [--quick]
set -euo pipefail

WRITE=0 QUICK=0
for a in "$@"; do
    case "$a" in
        --write) WRITE=1 ;;
        --quick) QUICK=1 ;;
        *) echo "usage: bench/advise.sh [--write] [--quick]" >&2; exit 2 ;;
    esac
done
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
RATE=500 RTT=180 MTU=${MTU:-9000}
PERF_TIME=15 START_TIME=5 SWEEP_STREAMS="1 2 4 8" SWEEP_FACTORS="1 2"
[ "$QUICK" = 1 ] && { PERF_TIME=6; SWEEP_STREAMS="1 8"; }
LAB=advise$$ B0=10.47.0.2 TPORT=4747 ADVISOR=http://127.0.0.1:4748
BDP=$((RATE * 1000000 * RTT / 1000 / 8))
WORK=$(mktemp -d /tmp/tern-advise.XXXXXX)
RESULTS=$WORK/results.tsv

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "advise.sh: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (netlab creates network namespaces)"
if [ ! -x "$TERN" ] || [ ! -x "$NETLAB" ]; then
    (cd "$REPO" && cargo build --release -q -p tern -p netlab) || die "build failed"
fi
lab() { "$NETLAB" --lab "$LAB" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
cleanup() { jobs -p | xargs -r kill 2>/dev/null || true; lab down >/dev/null 2>&1 || true; }
trap cleanup EXIT

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "lab $LAB: $RATE Mbit/s x $RTT ms, MTU $MTU, BDP $BDP bytes; work dir $WORK"
lab up --rtt "$RTT" --rate "$RATE" --mtu "$MTU" >"$WORK/up.txt" || die "netlab up failed"
chrt -a -f -p 50 "$(cat "/run/netlab/$LAB/emulator.pid")" || log "no real-time priority for the emulator"
lab exec B "$TERN" serve --listen "$B0:$TPORT" --root "$WORK" --state-dir "$WORK/server" >"$WORK/serve.log" 2>&1 &
for _ in $(seq 100); do lab exec B ss -Hltn "sport = :$TPORT" | grep -q . && break; sleep 0.2; done
echo "$B0:$TPORT 86400" >"$WORK/targets"
lab exec A "$TERN" advisor --http 127.0.0.1:4748 --state-dir "$WORK/advisor" --targets "$WORK/targets" \
    --probe-jitter 0 >"$WORK/advisor.log" 2>&1 &

# 1. The advisor's measurement.
t0=$(date +%s.%N)
for _ in $(seq 120); do
    if lab exec A "$TERN" advise "$B0" --server "$ADVISOR" --json >"$WORK/advice.json" 2>/dev/null &&
        [ "$(json 'd["capacity"]["kind"]' <"$WORK/advice.json")" = capacity ]; then break; fi
    sleep 1
done
[ "$(json 'd["capacity"]["kind"]' <"$WORK/advice.json" 2>/dev/null)" = capacity ] || die "no advice with a measured capacity"
MEASURE_S=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
read -r A_RTT A_CAP A_N A_BUF A_WIN < <(json '"%.2f %.1f %d %d %d" % (d["rtt"]["value"], d["capacity"]["value"] / 1e6, d["streams"], d["buffer_bytes"], d["tern_window_bytes"])' <"$WORK/advice.json")
log "advice: rtt $A_RTT ms, capacity $A_CAP Mbit/s -> $A_N streams, tern window $A_WIN bytes (measured in $MEASURE_S s)"

# perf LABEL SECONDS ARGS...: one memory-to-memory run A -> B, a row in RESULTS.
perf() {
    local label=$1 secs=$2 out="$WORK/$1-$2s.json" bps streams
    shift 2
    if lab exec A "$TERN" perf "tern://$B0:$TPORT" --time "$secs" --protect clear --json "$@" >"$out" 2>"$out.err"; then
        bps=$(json 'd["throughput_bps"]' <"$out")
        streams=$(json 'd.get("streams")' <"$out")
    else
        bps=nan streams=-
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$secs" "$streams" "$bps" "$*" >>"$RESULTS"
    log "  $label (${secs} s): $(awk -v b="$bps" 'BEGIN { printf "%.0f", b / 1e6 }') Mbit/s"
}
kib() { echo "$(($1 / 1024))K"; }

# 2. From the advice.
perf advice "$PERF_TIME" --advisor "$ADVISOR"
# 3. The hand-tuned sweep.
for n in $SWEEP_STREAMS; do
    for f in $SWEEP_FACTORS; do
        perf "sweep-P$n-x$f" "$PERF_TIME" --streams "$n" --window "$(kib $((f * BDP / n)))"
    done
done
BEST=$(awk -F'\t' '$1 ~ /^sweep/ && $4 != "nan" && $4 + 0 > b { b = $4 + 0; l = $1 "\t" $5 } END { print l }' "$RESULTS")
[ -n "$BEST" ] || die "no sweep run succeeded"
BEST_LABEL=${BEST%%$'\t'*}
read -ra BEST_ARGS <<<"${BEST#*$'\t'}"
# 4. From the start, alternating.
perf advice "$START_TIME" --advisor "$ADVISOR"
perf "best-$BEST_LABEL" "$START_TIME" "${BEST_ARGS[@]}"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The report.
bps_of() { awk -F'\t' -v l="$1" -v s="$2" '$1 == l && $2 == s { print $4 }' "$RESULTS"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b <= 0) print "nan"; else printf "%.2f", a / b }'; }
mbit() { awk -v b="$1" 'BEGIN { if (b == "nan") print "failed"; else printf "%.0f", b / 1e6 }'; }
ADV_FULL=$(bps_of advice "$PERF_TIME") BEST_FULL=$(bps_of "$BEST_LABEL" "$PERF_TIME")
ADV_START=$(bps_of advice "$START_TIME") BEST_START=$(bps_of "best-$BEST_LABEL" "$START_TIME")
R_FULL=$(ratio "$ADV_FULL" "$BEST_FULL") R_START=$(ratio "$ADV_START" "$BEST_START")
met() { awk -v r="$1" 'BEGIN { print (r != "nan" && r >= 0.95) ? "met" : "**not met**" }'; }
{
    echo "<!-- advise:start -->"
    echo
    echo "## Advisor: tern from advice vs the hand-tuned best (netlab, issue 6)"
    echo
    echo "\`bench/advise.sh\`, $(date -u '+%Y-%m-%d %H:%M UTC'), one run on a 2-core machine shared with other agents"
    echo "(load average $LOAD_BEFORE before, $LOAD_AFTER after). Path: \`netlab up --rtt $RTT --rate $RATE --mtu $MTU\`, BDP $BDP bytes."
    echo
    echo "| | Mbit/s over $PERF_TIME s | Mbit/s over the first $START_TIME s |"
    echo "| --- | ---: | ---: |"
    echo "| tern from advice ($A_N streams, window $A_WIN) | $(mbit "$ADV_FULL") | $(mbit "$ADV_START") |"
    echo "| hand-tuned best ($BEST_LABEL: ${BEST_ARGS[*]}) | $(mbit "$BEST_FULL") | $(mbit "$BEST_START") |"
    echo "| ratio (goal >= 0.95) | $R_FULL ($(met "$R_FULL")) | $R_START ($(met "$R_START")) |"
    echo
    echo "The advisor's measurement (client-side \`tern advisor\` in A, default probes, $MEASURE_S s from start to advice):"
    echo "RTT $A_RTT ms (configured $RTT), capacity $A_CAP Mbit/s (configured $RATE) -> $A_N streams of"
    echo "\`buffer_bytes\` $A_BUF (\`--window $A_WIN\`)."
    echo
    echo "Hand-tuned sweep ($PERF_TIME s each; window = factor x BDP / streams):"
    echo
    echo "| run | streams seen | Mbit/s | arguments |"
    echo "| --- | ---: | ---: | --- |"
    awk -F'\t' '{ printf "| %s (%s s) | %s | %s | %s |\n", $1, $2, $3, ($4 == "nan" ? "failed" : sprintf("%.0f", $4 / 1e6)), ($5 == "" ? "-" : "`" $5 "`") }' "$RESULTS"
    echo
    echo "Method: every run is \`tern perf\` memory to memory from A to \`tern serve\` in B, \`--protect clear\`."
    echo "\"tern from advice\" passes only \`--advisor URL\`: tern asks for advice about B, starts with its stream"
    echo "count and locks the window at \`tern_window_bytes\`. tern perf has no per-interval report, so"
    echo "\"the first $START_TIME s\" is a separate run of $START_TIME s (slow start included) of the advised"
    echo "configuration and of the sweep's best, one after the other. One run each: on this shared machine"
    echo "runs of one configuration vary by several percent."
    echo
    echo "<!-- advise:end -->"
} >"$WORK/section.md"
cat "$WORK/section.md"
if [ "$WRITE" = 1 ]; then
    python3 - "$REPO/BENCHMARKS.md" "$WORK/section.md" <<'EOF'
import re, sys
path, section = sys.argv[1], open(sys.argv[2]).read().rstrip("\n")
text = open(path).read()
pat = re.compile(r"<!-- advise:start -->.*?<!-- advise:end -->", re.S)
text = pat.sub(lambda _: section, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
EOF
    log "BENCHMARKS.md updated"
fi
