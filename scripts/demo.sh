#!/usr/bin/env bash
# Builds tern and shows its main job. As root (with /dev/net/tun) it builds
# an emulated long path with netlab (100 ms RTT, 500 Mbit/s) and copies a
# file across it with default settings, beside what one untuned TCP stream
# (iperf3, CUBIC, default buffers) gets on the same path. Without root it
# falls back to loopback and says so. Cleans up after itself.
#   DEMO_SIZE=1G scripts/demo.sh     # a bigger file
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== checking what the demo needs (scripts/setup.sh: cargo, iperf3, iproute2, ...)"
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

# cargo's own progress goes to the terminal: a first build takes minutes.
echo "== building tern and netlab (cargo build --release; minutes the first time, seconds after)"
cargo build --release -p tern -p netlab
echo "== built target/release/tern and target/release/netlab"
tern=$PWD/target/release/tern
netlab=$PWD/target/release/netlab

work=$(mktemp -d /tmp/tern-demo.XXXXXX)
server_pid=
lab=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ -n "$lab" ]; then "$netlab" --lab "$lab" down || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root" "$work/state" "$work/config"
export XDG_CONFIG_HOME=$work/config

if [ "$(id -u)" = 0 ] && [ -e /dev/net/tun ] && command -v iperf3 >/dev/null; then
  lab=terndemo
  size=${DEMO_SIZE:-512M}
  "$netlab" --lab "$lab" down
  echo "== emulated path: 100 ms RTT, 500 Mbit/s (netlab; host A 10.47.0.1 -> host B 10.47.0.2)"
  "$netlab" --lab "$lab" up --rtt 100 --rate 500 >/dev/null
  on_a() { "$netlab" --lab "$lab" exec A "$@"; }
  on_b() { "$netlab" --lab "$lab" exec B "$@"; }
  echo "== untuned: one TCP stream (iperf3 -C cubic, default buffers), 10 s"
  on_b iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  sleep 0.5
  untuned=$(on_a iperf3 -c 10.47.0.2 -p 5201 -t 10 -C cubic -J |
    python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))')
  wait
  echo "   untuned single stream: $untuned Mbit/s"
  on_b "$tern" serve --listen 10.47.0.2:4747 --root "$work/root" --state-dir "$work/state" \
    >"$work/serve.out" 2>"$work/serve.log" &
  server_pid=$!
  for _ in $(seq 100); do grep -q fingerprint "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
  echo "== making a $size random file"
  head -c "$size" /dev/urandom >"$work/data.bin"
  echo "== tern cp with default settings, A -> B"
  on_a env XDG_CONFIG_HOME="$XDG_CONFIG_HOME" "$tern" cp "$work/data.bin" tern://10.47.0.2/data.bin
  cmp "$work/data.bin" "$work/root/data.bin" && echo "== copy verified byte-identical"
  echo "== tern perf, 10 s, default settings"
  on_a env XDG_CONFIG_HOME="$XDG_CONFIG_HOME" "$tern" perf tern://10.47.0.2 --time 10
  echo "== (untuned single TCP stream on the same path: $untuned Mbit/s)"
  exit 0
fi

echo "== not root (or no /dev/net/tun): no emulated WAN path; running on loopback instead"
size=${DEMO_SIZE:-1G}
"$tern" serve --listen 127.0.0.1:0 --root "$work/root" --state-dir "$work/state" \
  >"$work/serve.out" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do grep -q fingerprint "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
cat "$work/serve.out"
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\),.*/\1/p' "$work/serve.out")
echo "== making a $size random file"
head -c "$size" /dev/urandom >"$work/data.bin"
echo "== tern cp (push, defaults: streams and buffers tuned live, private, xxh3)"
"$tern" cp "$work/data.bin" "tern://127.0.0.1:$port/data.bin"
echo "== tern cp (pull back)"
"$tern" cp "tern://127.0.0.1:$port/data.bin" "$work/back.bin"
cmp "$work/data.bin" "$work/back.bin" && echo "== round trip byte-identical"
echo "== tern perf (5 s, defaults, clear)"
"$tern" perf "tern://127.0.0.1:$port" --time 5 --protect clear
