#!/usr/bin/env bash
# Third-party copies on netlab (issue 19): the client C on a 10 Mbit/s path
# to each site, the sites A and B on RATE Mbit/s x RTT ms, one SIZE MiB
# random file from A to B. Side by side in one run:
#   direct    tern cp on A to B's daemon (what the path gives tern)
#   tern-tpc  tern cp tern://A/f tern://B/d on C (--tpc auto: B pulls)
#   tern-push the same with --tpc push (A pushes)
#   guc-tpc   globus-url-copy ftp://A/f ftp://B/d on C (GridFTP third party,
#             anonymous, no data channel security), when installed
#   xrd-tpc   xrdcp --tpc only root://A//f root://B//d on C (xrootd third
#             party: B's xrootd runs xrdcp --server to pull from A's; no
#             fallback through C), XRD_STREAMS TCP streams (default 4, as
#             guc's -p 4), when xrootd-server and xrootd-client are installed
#   relay     tern cp --via-client on C: pulled to C, then pushed on, of a
#             RELAY_MIB file (default the smaller of SIZE and 64 MiB: every
#             byte crosses C's 10 Mbit/s paths twice)
# For each: wall time on C, the rate, and the bytes C's two paths carried
# (netlab's counters). Needs root; writes a table on stdout.
#   bench/tpc.sh [SIZE_MIB] [RATE_MBIT] [RTT_MS]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
TERN=${TERN:-$REPO/target/release/tern}
NETLAB=${NETLAB:-$REPO/target/release/netlab}
SIZE_MIB=${1:-1024}
RATE=${2:-1000}
RTT=${3:-50}
RELAY_MIB=${RELAY_MIB:-$((SIZE_MIB < 64 ? SIZE_MIB : 64))}
LAB=tpcbench
GPORT=2811
XPORT=1094
XRD_STREAMS=${XRD_STREAMS:-4}
[ "$(id -u)" = 0 ] || { echo "tpc.sh: needs root" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/tern-tpc.XXXXXX)
chmod 755 "$WORK"
cleanup() {
    "$NETLAB" --lab "$LAB" down >/dev/null 2>&1 || true
    rm -rf "/etc/netns/$LAB-a" "/etc/netns/$LAB-b" "/etc/netns/$LAB-c"
    rm -rf "$WORK"
}
trap cleanup EXIT
"$NETLAB" --lab "$LAB" down >/dev/null 2>&1 || true
"$NETLAB" --lab "$LAB" up --hosts 3 \
    --path "between=A-B,rtt=$RTT,rate=$RATE" \
    --path "between=A-C,rtt=40,rate=10" \
    --path "between=B-C,rtt=40,rate=10" >/dev/null
chrt -a -f -p 50 "$(cat /run/netlab/$LAB/emulator.pid)" 2>/dev/null || true
x() { "$NETLAB" --lab "$LAB" exec "$@"; }
# GridFTP resolves its host name and its interfaces' addresses. xrootd's
# third-party copy goes by names: B pulls from the host named in the source
# URL; A lets B in only if the name of B's address (its first name in
# hosts) is the name A resolves for the destination host the client named,
# and only for the client whose address has the same name at A and at B.
# So the client names the sites site-a and site-b, which are C's paths'
# addresses on C and the A-B addresses on A and B, and both of C's
# addresses are first named client.
for h in a b c; do
    mkdir -p "/etc/netns/$LAB-$h"
    if [ "$h" = c ]; then
        sites='10.47.1.1 site-a\n10.47.2.1 site-b\n10.47.0.1 site-a-ab\n10.47.0.2 site-b-ab'
    else
        sites='10.47.0.1 site-a\n10.47.0.2 site-b\n10.47.1.1 site-a-c\n10.47.2.1 site-b-c'
    fi
    printf "127.0.0.1 localhost\n127.0.1.1 %s\n$sites\n10.47.1.2 client client-a\n10.47.2.2 client client-b\n" \
        "$(hostname)" >"/etc/netns/$LAB-$h/hosts"
done
mkdir -p "$WORK/a/root" "$WORK/b/root/in" "$WORK/cfg-a" "$WORK/cfg-c"
chmod 777 "$WORK/b/root/in"
head -c "$((SIZE_MIB << 20))" /dev/urandom >"$WORK/a/root/big.bin"
chmod 644 "$WORK/a/root/big.bin"
x A "$TERN" serve --root "$WORK/a/root" --state-dir "$WORK/a/state" --listen 0.0.0.0:4747 >"$WORK/a.log" 2>&1 &
x B "$TERN" serve --root "$WORK/b/root" --state-dir "$WORK/b/state" --listen 0.0.0.0:4747 >"$WORK/b.log" 2>&1 &
GFS=/usr/sbin/globus-gridftp-server
if command -v globus-url-copy >/dev/null && [ -x "$GFS" ]; then
    x A "$GFS" -aa -anonymous-user nobody -p "$GPORT" -data-interface 10.47.0.1 -disable-usage-stats >"$WORK/gfs-a.log" 2>&1 &
    x B "$GFS" -aa -anonymous-user nobody -p "$GPORT" -data-interface 10.47.0.2 -disable-usage-stats >"$WORK/gfs-b.log" 2>&1 &
fi
# xrootd: as nobody, IPv4 only (on an IPv6 socket a peer's address is
# v4-mapped, which /etc/hosts does not name, and TPC's name checks fail),
# third-party copies on at both ends (A checks the grant, B pulls).
XRD=
if command -v xrootd >/dev/null && command -v xrdcp >/dev/null; then
    for h in a b; do
        mkdir -p "$WORK/xrd-$h"
        chown nobody "$WORK/xrd-$h"
        printf 'all.export %s\nall.adminpath %s\nall.pidpath %s\nofs.tpc pgm %s --server\n' \
            "$WORK/$h/root" "$WORK/xrd-$h" "$WORK/xrd-$h" "$(command -v xrdcp)" >"$WORK/xrd-$h.cfg"
        x "${h^^}" xrootd -I v4 -R nobody -p "$XPORT" -c "$WORK/xrd-$h.cfg" >"$WORK/xrd-$h.log" 2>&1 &
        XRD="$XRD $!"
    done
fi
sleep 2
c_bytes() {  # IP bytes both ways on C's two paths so far
    "$NETLAB" --lab "$LAB" status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(sum(s["paths"][i][d]["bytes"] for i in (1, 2) for d in ("fwd", "rev")))'
}
row() {  # NAME CMD...: run CMD, print the row
    local name=$1; shift
    rm -f "$WORK/b/root/in/big.bin"
    local before after t0 t1 ok=ok
    before=$(c_bytes)
    t0=$(date +%s.%N)
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || ok="failed ($(head -c 200 "$WORK/$name.err" | tr '\n' ' '))"
    t1=$(date +%s.%N)
    after=$(c_bytes)
    if [ "$ok" = ok ] && ! cmp -s "$WORK/a/root/big.bin" "$WORK/b/root/in/big.bin"; then ok="file differs"; fi
    awk -v n="$name" -v t0="$t0" -v t1="$t1" -v s="$SIZE_MIB" -v c=$((after - before)) -v ok="$ok" \
        'BEGIN { w = t1 - t0; printf "| %s | %.1f | %.0f | %d | %s |\n", n, w, s * 8 * 1.048576 / w, c, ok }'
}
echo "third-party copies, ${SIZE_MIB} MiB, A-B ${RATE} Mbit/s x ${RTT} ms, C on 10 Mbit/s x 40 ms to each; $(date -u +%FT%TZ)"
echo
echo "| what | wall s | Mbit/s | bytes on C's paths | result |"
echo "| --- | --- | --- | --- | --- |"
row direct x A env "XDG_CONFIG_HOME=$WORK/cfg-a" "$TERN" cp "$WORK/a/root/big.bin" tern://10.47.0.2/in/
row tern-tpc x C env "XDG_CONFIG_HOME=$WORK/cfg-c" "$TERN" cp tern://10.47.1.1/big.bin tern://10.47.2.1/in/
row tern-push x C env "XDG_CONFIG_HOME=$WORK/cfg-c" "$TERN" cp --tpc push tern://10.47.1.1/big.bin tern://10.47.2.1/in/
if command -v globus-url-copy >/dev/null && [ -x "$GFS" ]; then
    row guc-tpc x C globus-url-copy -nodcau -p 4 "ftp://10.47.1.1:$GPORT$WORK/a/root/big.bin" "ftp://10.47.2.1:$GPORT$WORK/b/root/in/big.bin"
else
    echo "| guc-tpc | | | | GridFTP not installed |"
fi
if [ -z "$XRD" ]; then
    echo "| xrd-tpc | | | | not run: xrootd not installed (apt-get install xrootd-server xrootd-client) |"
elif ! kill -0 $XRD 2>/dev/null; then
    echo "| xrd-tpc | | | | not run: xrootd did not start ($(grep -ahm1 -iE 'error|fail' "$WORK/xrd-a.log" "$WORK/xrd-b.log" | head -c 200)) |"
else
    row xrd-tpc x C xrdcp --nopbar --streams "$XRD_STREAMS" --tpc only \
        "root://site-a:$XPORT/$WORK/a/root/big.bin" "root://site-b:$XPORT/$WORK/b/root/in/big.bin"
fi
# The relay moves a smaller file: its own row, rate over its own size.
head -c "$((RELAY_MIB << 20))" "$WORK/a/root/big.bin" >"$WORK/a/root/relay.bin"
chmod 644 "$WORK/a/root/relay.bin"
rm -f "$WORK/b/root/in/relay.bin"
before=$(c_bytes)
t0=$(date +%s.%N)
ok=ok
x C env "XDG_CONFIG_HOME=$WORK/cfg-c" "$TERN" cp --via-client tern://10.47.1.1/relay.bin tern://10.47.2.1/in/ \
    >"$WORK/relay.out" 2>"$WORK/relay.err" || ok="failed ($(head -c 200 "$WORK/relay.err" | tr '\n' ' '))"
t1=$(date +%s.%N)
after=$(c_bytes)
if [ "$ok" = ok ] && ! cmp -s "$WORK/a/root/relay.bin" "$WORK/b/root/in/relay.bin"; then ok="file differs"; fi
awk -v t0="$t0" -v t1="$t1" -v s="$RELAY_MIB" -v c=$((after - before)) -v ok="$ok" \
    'BEGIN { w = t1 - t0; printf "| tern --via-client (%d MiB) | %.1f | %.1f | %d | %s |\n", s, w, s * 8 * 1.048576 / w, c, ok }'
