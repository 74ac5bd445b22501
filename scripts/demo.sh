#!/usr/bin/env bash
# Builds tern, starts a daemon on loopback, and copies a 1 GiB random file
# to it and back with default settings, then measures memory-to-memory
# throughput. Prints what each step achieved. Cleans up after itself.
#   DEMO_SIZE=4G scripts/demo.sh     # a bigger file
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

size=${DEMO_SIZE:-1G}
echo "== building tern (release)"
cargo build --release -q -p tern
tern=$PWD/target/release/tern

work=$(mktemp -d /tmp/tern-demo.XXXXXX)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root" "$work/state" "$work/config"
export XDG_CONFIG_HOME=$work/config

"$tern" serve --listen 127.0.0.1:0 --root "$work/root" --state-dir "$work/state" \
  >"$work/serve.out" 2>"$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do grep -q fingerprint "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
cat "$work/serve.out"
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\),.*/\1/p' "$work/serve.out")

echo "== making a $size random file"
head -c "$size" /dev/urandom >"$work/data.bin"

echo "== tern cp (push, defaults: 4 streams, private, xxh3)"
"$tern" cp "$work/data.bin" "tern://127.0.0.1:$port/data.bin"
echo "== tern cp (pull back)"
"$tern" cp "tern://127.0.0.1:$port/data.bin" "$work/back.bin"
cmp "$work/data.bin" "$work/back.bin" && echo "== round trip byte-identical"

echo "== tern perf (5 s, 4 streams, clear)"
"$tern" perf "tern://127.0.0.1:$port" --time 5 -P 4 --protect clear
