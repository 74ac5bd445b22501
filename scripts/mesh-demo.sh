#!/usr/bin/env bash
# A three-site measurement mesh on netlab: hosts A, B and C (namespaces),
# routers along the paths (A's two paths share 10.48.0.1), one tern daemon
# with its advisor at each site, all writing to one throwaway PostgreSQL
# archive and measuring each other (RTT, loss each way, route, capacity).
# Prints what the archive holds, reroutes A-B and shows the route-change
# event, and keeps the dashboard of site A open on http://127.0.0.1:4748/
# in namespace mesh-a until Enter is pressed (MESH_DEMO_WAIT=0: no wait).
# Needs root and /dev/net/tun. Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ] || [ ! -e /dev/net/tun ]; then
  echo "mesh-demo: needs root and /dev/net/tun (network namespaces, TUN devices)" >&2
  exit 1
fi
bash scripts/setup.sh >/dev/null
export PATH="$HOME/.cargo/bin:$PATH"
echo "== building tern and netlab"
cargo build --release -q -p tern -p netlab
tern=$PWD/target/release/tern
netlab=$PWD/target/release/netlab
lab=mesh
work=$(mktemp -d /tmp/tern-mesh.XXXXXX)
pids=()
pg_dir=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$netlab" --lab "$lab" down >/dev/null 2>&1 || true
  rm -rf /etc/netns/$lab-a /etc/netns/$lab-b /etc/netns/$lab-c
  if [ -n "$pg_dir" ]; then bash scripts/pg-test.sh stop "$pg_dir"; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== a throwaway PostgreSQL archive (scripts/pg-test.sh)"
eval "$(bash scripts/pg-test.sh start)"
pg_dir=$TERN_PG_DIR
port=${TERN_TEST_PG##*:}; port=${port%%/*}
psql "$TERN_TEST_PG" -q -c "CREATE DATABASE mesh"
db="postgres://postgres@localhost:$port/mesh?host=$pg_dir"

echo "== netlab: A-B 20 ms, A-C 40 ms, B-C 30 ms, 200 Mbit/s; A's paths share router 10.48.0.1"
"$netlab" --lab "$lab" down >/dev/null 2>&1 || true
"$netlab" --lab "$lab" up --hosts 3 \
  --path between=A-B,rtt=20,rate=200,queue=400,hops=10.48.0.1+10.48.1.1 \
  --path between=A-C,rtt=40,rate=200,queue=400,hops=10.48.0.1+10.48.2.1 \
  --path between=B-C,rtt=30,rate=200,queue=400,hops=10.48.3.1 >/dev/null
names() { printf '127.0.0.1 localhost\n'; printf '%s\n' "$@"; }
mkdir -p /etc/netns/$lab-a /etc/netns/$lab-b /etc/netns/$lab-c
names "10.47.0.2 b.mesh" "10.47.1.2 c.mesh" >/etc/netns/$lab-a/hosts
names "10.47.0.1 a.mesh" "10.47.2.2 c.mesh" >/etc/netns/$lab-b/hosts
names "10.47.1.1 a.mesh" "10.47.2.1 b.mesh" >/etc/netns/$lab-c/hosts
cat >"$work/mesh.json" <<'EOF'
{"name": "demo",
 "hosts": [{"name": "a.mesh"}, {"name": "b.mesh"}, {"name": "c.mesh"}],
 "groups": [{"name": "all", "members": ["a.mesh", "b.mesh", "c.mesh"],
             "tests": ["rtt", "loss", "route", "capacity"], "interval_s": 20}]}
EOF
for h in a b c; do
  H=$(echo $h | tr a-z A-Z)
  mkdir -p "$work/$h/root"
  "$netlab" --lab "$lab" exec "$H" "$tern" serve --listen 0.0.0.0:4747 --root "$work/$h/root" \
    --state-dir "$work/$h/state" --http 127.0.0.1:4748 --db "$db" --site $h.mesh \
    --mesh "$work/mesh.json" --probe-jitter 1 >"$work/$h/serve.out" 2>"$work/$h/serve.log" &
  pids+=($!)
done
api() { "$netlab" --lab "$lab" exec A curl -s "http://127.0.0.1:4748$1"; }
echo "== the three sites measure each other (20 s interval); waiting for every pair"
for _ in $(seq 60); do
  n=$(api /api/v1/pairs | python3 -c 'import json,sys; print(len([p for p in json.load(sys.stdin)["pairs"] if p["kind"] in ("rtt","loss","route","capacity")]))' 2>/dev/null || echo 0)
  [ "$n" -ge 24 ] && break
  sleep 1
done
api /api/v1/latest | python3 -c '
import json, sys
rows = {}
for m in json.load(sys.stdin)["latest"]:
    rows.setdefault((m["from"], m["host"]), {})[m["kind"]] = m["value"]
print("   %-8s %-8s %9s %10s %10s %14s %5s" % ("from", "to", "rtt ms", "loss ->", "loss <-", "capacity", "hops"))
for (f, t), v in sorted(rows.items()):
    fmt = lambda k, s: s % v[k] if k in v else "-"
    print("   %-8s %-8s %9s %10s %10s %14s %5s" % (f, t, fmt("rtt", "%.1f"), fmt("loss", "%.2f %%"),
          fmt("loss_reverse", "%.2f %%"), fmt("capacity", "%.0f bit/s"), fmt("route", "%d")))'
echo "== bottleneck groups (paths that share a router)"
api /api/v1/groups | python3 -c '
import json, sys
for g in json.load(sys.stdin)["groups"]:
    print("   %s: %s" % (g["name"], ", ".join(f + " -> " + t for f, t in g["paths"])))'
echo "== rerouting A-B through 10.48.9.1 (netlab set), waiting for the route-change event"
"$netlab" --lab "$lab" set --path 0 --hops 10.48.9.1 --rtt 26 >/dev/null
for _ in $(seq 40); do
  e=$(api "/api/v1/events?from=a.mesh&to=b.mesh" | python3 -c '
import json, sys
for e in json.load(sys.stdin)["events"]:
    if e["event"] == "route_change":
        print(" -> ".join(e["details"]["before"]), " => ", " -> ".join(e["details"]["after"])); break' 2>/dev/null)
  [ -n "$e" ] && { echo "   route change a.mesh -> b.mesh: $e"; break; }
  sleep 1
done
echo "== /metrics of site A: $(api /metrics | grep -c '^# TYPE tern_') tern_ families"
if [ "${MESH_DEMO_WAIT:-1}" != 0 ]; then
  echo "== site A's dashboard: ip netns exec $lab-a chromium --no-sandbox http://127.0.0.1:4748/"
  echo "   (or: ip netns exec $lab-a curl -s http://127.0.0.1:4748/api/v1/pairs); Enter ends the demo"
  read -r _ || true
fi
