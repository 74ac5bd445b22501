#!/usr/bin/env bash
# bench/profile.sh: where tern cp's CPU goes, per GB, sender and receiver.
#
#   bash bench/profile.sh [--size MIB] [--tern BIN] [--protect MODE] [--out FILE] [--keep DIR]
#
# Copies one random file (default 2048 MiB) from the page cache to a local
# `tern serve` on 127.0.0.1 twice, with the page cache reset before each copy
# (destination deleted, caches dropped, source read back in): once for the
# CPU times of client and daemon, once under `perf record` for their shares. Prints, for each side, CPU seconds per GB by
# category (file read, file write and writeback, socket copies, TLS crypto,
# hashing, user-space copies, scheduling and wakeups, other), from
# `perf report` symbol shares times the process's measured CPU time.
# --keep DIR leaves both perf recordings there (perf.client, perf.server) for
# `perf report -i`. Needs root (drop_caches), perf, python3. See docs/EFFICIENCY.md.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=$REPO/target/release/tern
SIZE_MIB=2048
PROTECT=private
OUT=""
KEEP=""
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE_MIB=$2; shift ;;
        --tern) TERN=$2; shift ;;
        --protect) PROTECT=$2; shift ;;
        --out) OUT=$2; shift ;;
        --keep) KEEP=$2; shift ;;
        -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "profile.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
for tool in perf python3; do
    command -v "$tool" >/dev/null || { echo "profile.sh: $tool not found" >&2; exit 1; }
done
[ -x "$TERN" ] || { echo "profile.sh: no tern binary at $TERN" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "profile.sh: needs root (drop_caches, perf of the daemon)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/tern-profile.XXXXXX")
SERVE_PID=""
cleanup() {
    [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/root" "$WORK/state"
head -c "$((SIZE_MIB * 1024 * 1024))" /dev/urandom >"$WORK/src.bin"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$TERN" serve --listen "127.0.0.1:$PORT" --root "$WORK/root" --state-dir "$WORK/state" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
for _ in $(seq 50); do
    grep -q 'listening on' "$WORK/serve.out" 2>/dev/null && break
    sleep 0.1
done
FP=$(sed -n 's/^tern serve: certificate fingerprint \(SHA256:[^ ]*\).*/\1/p' "$WORK/serve.out")
[ -n "$FP" ] || { cat "$WORK/serve.err" >&2; echo "profile.sh: tern serve did not start" >&2; exit 1; }

reset_cache() {
    rm -f "$WORK/root/dst.bin"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    cat "$WORK/src.bin" >/dev/null
}
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# First the CPU times, without perf; then the shares, under perf.
reset_cache
s0=$(cpu_of "$SERVE_PID")
/usr/bin/time -f "%e %U %S" -o "$WORK/client.time" "$TERN" cp --fingerprint "$FP" --no-progress \
    --protect "$PROTECT" "$WORK/src.bin" "tern://127.0.0.1:$PORT/dst.bin" >/dev/null 2>"$WORK/cp.err"
s1=$(cpu_of "$SERVE_PID")
cmp -s "$WORK/src.bin" "$WORK/root/dst.bin" || { echo "profile.sh: the copy differs" >&2; exit 1; }
reset_cache
perf record -q -g -o "$WORK/perf.server" -p "$SERVE_PID" 2>/dev/null &
PERF_PID=$!
sleep 0.5
perf record -q -g -o "$WORK/perf.client" "$TERN" cp --fingerprint "$FP" --no-progress \
    --protect "$PROTECT" "$WORK/src.bin" "tern://127.0.0.1:$PORT/dst.bin" >/dev/null 2>"$WORK/cp.err"
kill -INT "$PERF_PID"
wait "$PERF_PID" 2>/dev/null || true
for side in client server; do
    perf script -i "$WORK/perf.$side" -F comm,ip,sym 2>/dev/null >"$WORK/$side.stacks" || true
done
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP" && cp "$WORK/perf.client" "$WORK/perf.server" "$KEEP/"
fi
read -r wall _ _ <"$WORK/client.time"
python3 - "$WORK" "$SIZE_MIB" "$wall" "$(( s1 - s0 ))" "$TERN" "$PROTECT" "$OUT" <<'PY'
import os, re, sys, subprocess
work, size_mib, wall, server_ticks, tern, protect, out = sys.argv[1:8]
gb = int(size_mib) * 1048576 / 1e9
# A sample's category: user-space work by its leaf symbol, kernel work by
# what called it (a copy to user space is a file read under filemap_read
# and a socket receive under tcp_recvmsg).
LEAF = [
    ("TLS crypto", r"aes_gcm|aes_|ghash|gcm_|chacha|poly1305"),
    ("hashing (checks, digests)", r"xxh|blake3|md5|sha256|sha2_|crc32|adler"),
    ("user-space copies", r"memmove|memcpy|memset"),
]
STACK = [
    ("file read (page cache to user)", r"filemap_read"),
    ("file write and writeback", r"ext4_|copy_folio_from_iter|mpage_|jbd2|writeback|vfs_fsync|do_fsync|iomap_|blk_"),
    ("socket send and receive", r"tcp_|sock_|skb_|ip_|__netif|net_rx|__dev_queue"),
    ("scheduling and wakeups", r"schedule|futex|finish_task_switch|try_to_wake_up|_raw_spin|handle_softirqs"),
]
CATS = [n for n, _ in LEAF] + [n for n, _ in STACK]
def categorize(frames):
    leaf = frames[0] if frames else ""
    for name, pat in LEAF:
        if re.search(pat, leaf):
            return name
    for name, pat in STACK:
        if any(re.search(pat, f) for f in frames):
            return name
    return "other"
def shares(path):
    out, frames, comm = {}, [], None
    def flush():
        if comm is not None and comm != "perf" and frames:
            c = categorize(frames)
            out[c] = out.get(c, 0) + 1
    for line in open(path, errors="replace"):
        if not line.strip():
            flush(); frames, comm = [], None
        elif line.startswith("\t"):
            frames.append(line.strip().partition(" ")[2])
        else:
            flush(); frames, comm = [], line.split()[0]
    flush()
    total = sum(out.values()) or 1
    return {k: v / total for k, v in out.items()}
ct = open(os.path.join(work, "client.time")).read().split()
client_cpu = float(ct[1]) + float(ct[2])
server_cpu = int(server_ticks) / os.sysconf("SC_CLK_TCK")
rows = CATS + ["other"]
c, s = shares(os.path.join(work, "client.stacks")), shares(os.path.join(work, "server.stacks"))
version = subprocess.run([tern, "--version"], capture_output=True, text=True).stdout.strip()
lines = [f"`{version}`, `--protect {protect}`, {size_mib} MiB, wall {float(wall):.2f} s "
         f"({int(size_mib) * 1048576 * 8 / float(wall) / 1e9:.2f} Gbit/s), "
         f"CPU client {client_cpu:.2f} s, daemon {server_cpu:.2f} s (a run without perf; "
         f"the shares come from a second run under perf)", "",
         "| CPU s/GB | sender (client) | receiver (daemon) |", "| --- | ---: | ---: |"]
for r in rows:
    lines.append(f"| {r} | {c.get(r, 0) * client_cpu / gb:.3f} | {s.get(r, 0) * server_cpu / gb:.3f} |")
lines.append(f"| **total** | **{client_cpu / gb:.3f}** | **{server_cpu / gb:.3f}** |")
text = "\n".join(lines) + "\n"
print(text)
if out:
    open(out, "w").write(text)
PY
