#!/usr/bin/env bash
# Builds libdrs and its C example with gcc, then runs the example over
# loopback with and without libdrs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p tern-drs
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -Wall -Wextra -O2 -o "$out/drs_xfer" crates/drs/examples/c/drs_xfer.c \
  -Icrates/drs/include -Ltarget/release -ltern_drs
export LD_LIBRARY_PATH=$PWD/target/release
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for mode in "" --drs; do
  "$out/drs_xfer" recv "$port" >"$out/recv.log" &
  rpid=$!
  # The receiver accepts one connection only: wait for its listening socket
  # rather than probing it with a connect.
  for _ in $(seq 100); do
    ss -Hltn "sport = :$port" | grep -q . && break
    sleep 0.1
  done
  timeout 60 "$out/drs_xfer" send 127.0.0.1 "$port" 512 $mode | tee "$out/send.log"
  wait "$rpid"
  grep -q "received 536870912 bytes" "$out/recv.log"
  if [ -n "$mode" ]; then grep -q "^libdrs: min rtt" "$out/send.log"; fi
done
echo "libdrs example: ok"
