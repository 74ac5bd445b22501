"""Helpers and report of bench/startup.sh (issue 14: "a copy that ends when the network is done").

    python3 bench/startup.py sample SOCK NETLAB LAB BPIDS OUT MAXSECS   background counter sampler
    python3 bench/startup.py snap ROOTPID                                the server's CPU seconds
    python3 bench/startup.py analyze SAMPLES T0 T1                       one run's timing, as JSON
    python3 bench/startup.py report WORK OUT                             the Markdown report

sample: every 100 ms (on an absolute schedule), the emulator's counters of path 0, asked
on its control socket (SOCK, the same `"Status"` request `netlab --lab LAB status --json`
sends; docs/NETLAB.md, "Control socket"), or, if the socket does not answer, by running
`NETLAB --lab LAB status --json` (2 s timeout); plus host B's received bytes on nl0 from
/proc/PID/net/dev of a process in B (the first of BPIDS, comma-separated, that exists).
One line per sample: epoch time, A->B offered bytes, A->B delivered bytes (-1 when this
netlab has no such counter), A->B packets, delivered, queue drops, random drops, B->A
queue drops, random drops, B's nl0 rx bytes (-1 if unknown). It ends on SIGTERM, after
MAXSECS, or when its parent goes away.

snap: user+system seconds of ROOTPID and its live descendants, each with its reaped
children (/proc/PID/stat fields 14-17). (The machine's busy share and the emulator's CPU
come from cpu_snap in bench/lib.sh, as for bench/wan.sh.)

Standard library only.
"""
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reportlib import command_cleaner, num, path_or_cpu, read_lines, read_meta, read_tsv, tick  # noqa: E402

INTERVAL = 0.1       # sampling period, s
WINDOW = 0.5         # the windowed rate for t90, s
FIRST_BYTES = 65536  # "first byte": the first sample with this much A->B (handshakes are smaller)
GOAL = 0.92          # issue 14: tern's physical limit / wall >= 0.92


# ----------------------------------------------------------------------------- sampler
def query_socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        s.sendall(b'"Status"\n')
        buf = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
    finally:
        s.close()
    p = json.loads(buf)["Status"][0]
    return p["a_to_b"], p["b_to_a"]


def query_netlab(netlab, lab):
    out = subprocess.run([netlab, "--lab", lab, "status", "--json"], capture_output=True, timeout=2,
                         check=True).stdout
    p = json.loads(out)["paths"][0]
    return p["a_to_b"], p["b_to_a"]


def b_rx(pids):
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/net/dev"):
                name, _, rest = line.partition(":")
                if name.strip() == "nl0":
                    return int(rest.split()[0])
        except OSError:
            continue
    return -1


def sample(sock, netlab, lab, bpids, out, maxsecs):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    parent = os.getppid()
    pids = [p for p in bpids.split(",") if p.isdigit()]
    start = time.time()
    source = None
    k = 0
    with open(out, "w") as f:
        while not stop and time.time() - start < maxsecs and os.getppid() == parent:
            t = time.time()
            try:
                ab, ba = query_socket(sock)
                src = "socket"
            except Exception:
                try:
                    ab, ba = query_netlab(netlab, lab)
                    src = "netlab status --json"
                except Exception:
                    ab = ba = None
            if ab is not None:
                if src != source:
                    f.write(f"# source {src}\n")
                    source = src
                f.write("%.6f %d %d %d %d %d %d %d %d %d\n" % (
                    t, ab.get("bytes", -1), ab.get("delivered_bytes", -1), ab.get("packets", -1),
                    ab.get("delivered", -1), ab.get("queue_drops", 0), ab.get("random_drops", 0),
                    ba.get("queue_drops", 0), ba.get("random_drops", 0), b_rx(pids)))
                f.flush()
            k = tick(start, k, INTERVAL, stop)


# ------------------------------------------------------------------------ CPU snapshot
def snap(root):
    tck = os.sysconf("SC_CLK_TCK")
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                s = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            f = s[s.rindex(")") + 2:].split()
            procs[int(d)] = (int(f[1]), sum(int(x) for x in f[11:15]))
    kids = {}
    for p, (pp, _) in procs.items():
        kids.setdefault(pp, []).append(p)
    root = int(root) if root.isdigit() else -1
    if root in procs:
        total, stack, seen = 0, [root], set()
        while stack:
            p = stack.pop()
            if p not in seen:
                seen.add(p)
                total += procs[p][1]
                stack += kids.get(p, [])
        print("%.2f" % (total / tck))
    else:
        print("nan")


# --------------------------------------------------------------------------- analysis
def read_samples(path):
    rows, source = [], "?"
    try:
        for line in open(path):
            if line.startswith("# source"):
                source = line.split(" ", 2)[2].strip()
                continue
            f = line.split()
            if len(f) == 10:
                rows.append([float(f[0])] + [int(x) for x in f[1:]])
    except OSError:
        pass
    return rows, source


def interp(ts, cs, t):
    """c(t), linear between samples, clamped at the ends."""
    if t <= ts[0]:
        return cs[0]
    if t >= ts[-1]:
        return cs[-1]
    lo, hi = 0, len(ts) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ts[mid] <= t:
            lo = mid
        else:
            hi = mid
    a, b = ts[lo], ts[hi]
    return cs[lo] + (cs[hi] - cs[lo]) * (t - a) / (b - a) if b > a else cs[hi]


def crossing(ts, cs, level):
    """The first time c reaches LEVEL, linear between samples."""
    for i, c in enumerate(cs):
        if c >= level:
            if i == 0 or cs[i] == cs[i - 1]:
                return ts[i]
            return ts[i - 1] + (ts[i] - ts[i - 1]) * (level - cs[i - 1]) / (cs[i] - cs[i - 1])
    return math.nan


def timing(ts, cs, t0):
    """On one cumulative byte series: first byte, final rate (50 % to 95 % of the bytes), t90.
    Times are seconds after T0 (client start); rates bit/s."""
    out = {"first": math.nan, "final_bps": math.nan, "t90": math.nan, "ramp": []}
    if len(ts) < 3 or cs[-1] <= FIRST_BYTES:
        return out
    total = cs[-1]
    for t, c in zip(ts, cs):
        if c >= FIRST_BYTES:
            out["first"] = t - t0
            break
    t50, t95 = crossing(ts, cs, 0.5 * total), crossing(ts, cs, 0.95 * total)
    if not t95 > t50:
        return out
    final = 0.45 * total * 8 / (t95 - t50)
    out["final_bps"] = final
    for t in ts:
        if t - WINDOW < ts[0]:
            continue
        r = (interp(ts, cs, t) - interp(ts, cs, t - WINDOW)) * 8 / WINDOW
        if r >= 0.9 * final:
            out["t90"] = t - t0
            break
    for x in (0.5, 1.0, 1.5, 2.0, 3.0):  # windowed rate at these times after T0, as a share of final
        t = t0 + x
        if t <= ts[-1] and t - WINDOW >= ts[0]:
            out["ramp"].append((x, (interp(ts, cs, t) - interp(ts, cs, t - WINDOW)) * 8 / WINDOW / final))
    return out


def analyze(path, t0, t1):
    rows, source = read_samples(path)
    res = {"source": source, "samples": len(rows)}
    rows = [r for r in rows if r[0] <= t1 + INTERVAL / 2]  # up to the client's exit
    if len(rows) < 3:
        res["error"] = "fewer than 3 samples"
        return res
    ts = [r[0] for r in rows]
    use_delivered = all(r[2] >= 0 for r in rows)
    col = 2 if use_delivered else 1
    res["series"] = "delivered_bytes" if use_delivered else "bytes (offered; this netlab has no delivered_bytes)"
    cs = [r[col] - rows[0][col] for r in rows]
    res["wire_bytes"] = cs[-1]
    res["first_sample_lead"] = t0 - ts[0]
    res["max_gap"] = max(b - a for a, b in zip(ts, ts[1:]))
    res.update({"emu_" + k: v for k, v in timing(ts, cs, t0).items()})
    res["qdrops_ab"] = rows[-1][5] - rows[0][5]
    res["rdrops_ab"] = rows[-1][6] - rows[0][6]
    res["qdrops_ba"] = rows[-1][7] - rows[0][7]
    res["rdrops_ba"] = rows[-1][8] - rows[0][8]
    res["offered_pkts"] = rows[-1][3] - rows[0][3]
    res["delivered_pkts"] = rows[-1][4] - rows[0][4]
    if all(r[9] >= 0 for r in rows):
        rx = [r[9] - rows[0][9] for r in rows]
        res.update({"brx_" + k: v for k, v in timing(ts, rx, t0).items()})
        res["brx_bytes"] = rx[-1]
    # The final rate the tables show: as the bytes arrive in B when that is known (exact under
    # drops), else as the emulator counted them; start-up cost = the client's time beyond a
    # transfer that ran at that final rate from its first instant.
    arrived = not math.isnan(res.get("brx_final_bps", math.nan))
    res["final_bps"] = res["brx_final_bps"] if arrived else res.get("emu_final_bps", math.nan)
    res["final_from"] = "arrived in B" if arrived else "sent (emulator)"
    total = res["brx_bytes"] if arrived else res["wire_bytes"]
    res["startup_cost"] = (t1 - t0) - total * 8 / res["final_bps"] if res["final_bps"] > 0 else math.nan
    return res


# ----------------------------------------------------------------------------- report
FIELDS = ("scenario tool id rep cmd bytes t0 t1 wall_client sync_wall wall cpu_client cpu_server "
          "busy_pct emu_pct load1 rc note extra samples").split()


def fmt(x, d=2, unit=""):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}{unit}"


def med(vs):
    vs = [v for v in vs if v is not None and not math.isnan(v)]
    return statistics.median(vs) if vs else math.nan


def mbit(b):
    return "n/a" if math.isnan(b) else f"{b / 1e6:.0f}"


def likely_limit(r, cap_bps):
    """What most likely held the run back, from the counters (a reading, not a proof)."""
    a = r["a"]
    parts = []
    final = a.get("final_bps", math.nan)
    drops = a.get("qdrops_ab", 0) + a.get("rdrops_ab", 0)
    over = r["wall"] - r["limit"]
    cost = a.get("startup_cost", math.nan)
    if not math.isnan(cost) and cost > 0.3 and cost > 0.4 * over:
        parts.append(f"start-up (costs {cost:.1f} s; wall - limit = {over:.1f} s)")
    pc = path_or_cpu(final, cap_bps, r["busy_pct"])
    if pc:
        parts.append("then the " + pc if pc.startswith("path") else pc)
    elif drops:
        parts.append("losses")
    elif not math.isnan(final):
        parts.append(f"sender/window (final {100 * final / cap_bps:.0f} % of capacity, CPU {r['busy_pct']:.0f} %)")
    if drops:
        parts.append(f"{a.get('qdrops_ab', 0)} queue + {a.get('rdrops_ab', 0)} random drops A->B")
    if r["sync_wall"] > 0.05 * r["wall"]:
        parts.append(f"sync {r['sync_wall']:.1f} s")
    return "; ".join(parts) or "?"


def report(work, out):
    meta = read_meta(os.path.join(work, "meta.tsv"))
    clean = command_cleaner(meta)
    scen = {}
    order = []
    for f in read_tsv(os.path.join(work, "scenarios.tsv"), missing_ok=True):
        sid, title, up, rtt, rate, mib, bdp, cap = (f + [""] * 8)[:8]
        scen[sid] = dict(title=title, up=up, rtt=num(rtt), rate=num(rate), mib=num(mib), bdp=bdp, cap=cap)
        order.append(sid)
    rows = []
    for f in read_tsv(os.path.join(work, "results.tsv"), missing_ok=True):
        r = dict(zip(FIELDS, (f + [""] * len(FIELDS))[:len(FIELDS)]))
        for k in ("bytes", "t0", "t1", "wall_client", "sync_wall", "wall", "cpu_client", "cpu_server",
                  "busy_pct", "emu_pct", "load1"):
            r[k] = num(r[k])
        r["rep"] = int(r["rep"])
        r["ok"] = not r["note"]
        s = scen.get(r["scenario"])
        r["limit"] = r["bytes"] * 8 / (s["rate"] * 1e6) + 3 * s["rtt"] / 1000 if s else math.nan
        r["ratio"] = r["limit"] / r["wall"] if r["ok"] and r["wall"] > 0 else math.nan
        r["a"] = analyze(os.path.join(work, r["samples"]), r["t0"], r["t1"]) if r["samples"] else {}
        rows.append(r)

    L = []
    w = L.append
    w("# Copy time against the physical limit over a WAN path (issue 14)")
    w("")
    w("Made by `bench/startup.sh` (" + meta.get("mode", "?") + " mode). Issue 14 wants *a copy that ends "
      "when the network is done*: the wall time of an untuned `tern cp` within 8 % of the physical "
      f"limit (limit / wall >= {GOAL}), and a fast start (time to 90 % of the final rate).")
    w("")
    w("## Machine and software")
    w("")
    for k, label in (("date", "date"), ("nproc", "cores"), ("cpu", "CPU"), ("memory", "memory"),
                     ("kernel", "kernel"), ("filesystem", "file system of the copies"),
                     ("load_start", "load average at start"), ("load_end", "load average at end"),
                     ("tern_version", "tern"), ("tern_commit", "tern commit"), ("tern_built", "tern built"),
                     ("netlab_version", "netlab"), ("gridftp_version", "GridFTP"),
                     ("ns_sysctls", "TCP settings in the namespaces"), ("ns_caps", "socket buffer caps"),
                     ("drop_caches", "page cache")):
        if meta.get(k):
            w(f"- {label}: {meta[k]}")
    w("")
    w("## Method")
    w("")
    w("- Each scenario is one `netlab --lab startup up --rtt R --rate M --mtu 9000` (two network "
      "namespaces joined by a user-space emulator with a one-BDP drop-tail queue, BBR by default). "
      "`tern serve` and `globus-gridftp-server` run in host B, every client in host A; both see the "
      "same file system. One file of random data, copied A -> B.")
    w("- The tools run interleaved (forward order in odd reps, backward in even ones). Before every "
      "copy: the destination is deleted, `sync; echo 3 > /proc/sys/vm/drop_caches; cat SRC > /dev/null`.")
    w("- **Wall** = client start to exit (`date +%s.%N` around `netlab exec A ...`); for GridFTP plus "
      "`sync FILE` run in B afterwards (tern fsyncs the file before its rename). Every copy is checked: "
      "size, then `cmp`.")
    w("- **Physical limit** = file bytes x 8 / capacity + 3 x RTT (payload only: headers, TLS and "
      "handshakes must fit in the 8 %). **Ratio** = limit / wall; tern's goal >= 0.92.")
    w("- **Rates over time**: a background sampler asks the emulator for its counters every 100 ms "
      "(the control socket's `Status`, i.e. what `netlab --lab startup status --json` prints, without "
      "starting a process 10 times a second on a 2-core machine; it falls back to that command if the "
      "socket does not answer). The series is A->B IP bytes (headers and retransmissions included) "
      "as the emulator accepts them, i.e. as host A sends them; a second series is host B's received "
      "bytes on `nl0` (`/proc/PID/net/dev` of the server), i.e. as they arrive after queue and delay.")
    w("- **Final rate** = the average rate while the cumulative bytes go from 50 % to 95 % of the run's "
      "total (shown from the bytes arriving in B, exact even when packets are dropped; the emulator's "
      "offered bytes count dropped packets too). **Start-up cost** = the client's time minus the "
      "time the same bytes take at the final rate: what the start (connection, handshakes, slow start, "
      "ramp) cost against a transfer at full speed from its first instant. "
      f"**t90** = the first sample time (after client start) at which the rate over the previous "
      f"{WINDOW} s reaches 90 % of the final rate. **First byte** = the first sample with at least "
      f"{FIRST_BYTES // 1024} KiB A->B (more than any handshake). Resolution: 0.1 s.")
    w("- **CPU**: client user+sys from `/usr/bin/time` (children included); server user+sys from "
      "`/proc` over its process tree (GridFTP's forked sessions included); *busy* = the machine's "
      "non-idle share of both cores from just before to just after the client's run (`/proc/stat`; "
      "other work on the machine included); *emulator* = the netlab "
      "emulator's CPU in % of one core. Drops are the emulator's `queue_drops` and `random_drops`.")
    w("- GridFTP is tuned by hand: `-p 8 -tcp-bs BDP`. When the namespaces' `net.core.rmem_max`/"
      "`wmem_max` are below the BDP the kernel silently caps that request, so it is also run with "
      "`-tcp-bs` set to the cap (which row is which is in the tables).")
    w("")
    summary = []
    for sid in order:
        s = scen[sid]
        cap_bps = s["rate"] * 1e6
        rs = [r for r in rows if r["scenario"] == sid]
        w(f"## {sid}: {s['title']}")
        w("")
        w(f"`{s['up']}`; file {s['mib']:.0f} MiB; BDP {s['bdp']} bytes; {s['cap']}.")
        lim = rs[0]["limit"] if rs else math.nan
        w(f"Physical limit: {fmt(lim, 3)} s.")
        w("")
        tools = []
        for r in rs:
            if r["id"] not in tools:
                tools.append(r["id"])
        w("| tool | runs ok | wall (median) | limit / wall | goal | first byte | t90 (sent) | t90 (arrived) "
          "| final rate, Mbit/s (IP) | start-up cost | CPU client s | CPU server s |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for tid in tools:
            tr = [r for r in rs if r["id"] == tid]
            ok = [r for r in tr if r["ok"]]
            ratio = med([r["ratio"] for r in ok])
            goal = ""
            if tid == "tern":
                goal = "n/a" if math.isnan(ratio) else ("**PASS**" if ratio >= GOAL else "**FAIL**")
                summary.append(f"{sid}: tern limit / wall = {fmt(ratio, 3)} (goal >= {GOAL}): {goal.strip('*')}; "
                               f"t90 {fmt(med([r['a'].get('emu_t90', math.nan) for r in ok]), 1)} s")
            else:
                summary.append(f"{sid}: {tid} limit / wall = {fmt(ratio, 3)}; "
                               f"t90 {fmt(med([r['a'].get('emu_t90', math.nan) for r in ok]), 1)} s")
            w(f"| {tr[0]['tool']} | {len(ok)}/{len(tr)} | {fmt(med([r['wall'] for r in ok]))} s | {fmt(ratio, 3)} "
              f"| {goal} | {fmt(med([r['a'].get('emu_first', math.nan) for r in ok]), 1)} s "
              f"| {fmt(med([r['a'].get('emu_t90', math.nan) for r in ok]), 1)} s "
              f"| {fmt(med([r['a'].get('brx_t90', math.nan) for r in ok]), 1)} s "
              f"| {mbit(med([r['a'].get('final_bps', math.nan) for r in ok]))} "
              f"| {fmt(med([r['a'].get('startup_cost', math.nan) for r in ok]), 1)} s "
              f"| {fmt(med([r['cpu_client'] for r in ok]))} | {fmt(med([r['cpu_server'] for r in ok]))} |")
        w("")
        w("Every run:")
        w("")
        w("| rep | tool | wall s (client + sync) | limit / wall | first byte s | t90 s sent / arrived "
          "| final Mbit/s | start-up cost s | 0.5 s rate at 0.5/1/1.5/2/3 s, % of final (sent) "
          "| CPU client / server s | busy % | emulator % | drops A->B (q/r), B->A | load | likely limit | note |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rs:
            a = r["a"]
            ramp = " / ".join(f"{100 * v:.0f}" for _, v in a.get("emu_ramp", [])) or "n/a"
            note = r["note"]
            if r["extra"]:
                note = (note + "; " if note else "") + r["extra"]
            if a.get("error"):
                note = (note + "; " if note else "") + "sampler: " + a["error"]
            elif a.get("max_gap", 0) > 0.35:
                note = (note + "; " if note else "") + f"sampler gap up to {a['max_gap']:.2f} s"
            wall = f"{fmt(r['wall_client'])} + {fmt(r['sync_wall'])}" if r["sync_wall"] > 0 else fmt(r["wall"])
            w(f"| {r['rep']} | {r['tool']} | {wall} | {fmt(r['ratio'], 3)} | {fmt(a.get('emu_first', math.nan), 1)} "
              f"| {fmt(a.get('emu_t90', math.nan), 1)} / {fmt(a.get('brx_t90', math.nan), 1)} "
              f"| {mbit(a.get('final_bps', math.nan))} | {fmt(a.get('startup_cost', math.nan), 1)} | {ramp} "
              f"| {fmt(r['cpu_client'])} / {fmt(r['cpu_server'])} | {fmt(r['busy_pct'], 0)} | {fmt(r['emu_pct'], 0)} "
              f"| {a.get('qdrops_ab', '?')}/{a.get('rdrops_ab', '?')}, {a.get('qdrops_ba', '?')} "
              f"| {fmt(r['load1'])} | {likely_limit(r, cap_bps) if r['ok'] else ''} | {note} |")
        srcs = sorted({r["a"].get("source", "?") for r in rs if r["a"]})
        series = sorted({r["a"].get("series", "?") for r in rs if r["a"].get("series")})
        w("")
        w(f"Counters from: {', '.join(srcs) or 'n/a'}; series: {', '.join(series) or 'n/a'}.")
        w("")
        js = []
        for r in rs:
            p = os.path.join(work, "logs", f"{sid}-{r['id']}-{r['rep']}.json")
            if r["id"] == "tern" and os.path.exists(p):
                try:
                    d = json.load(open(p))
                except ValueError:
                    continue
                keep = {k: v for k, v in d.items() if not isinstance(v, (list, dict)) or k == "tuning"}
                js.append(f"rep {r['rep']}: `{json.dumps(keep, sort_keys=True)}`")
        if js:
            w("<details><summary>tern cp --json, per run (scalar fields and tuning)</summary>")
            w("")
            for j in js:
                w(f"- {j}")
            w("")
            w("</details>")
            w("")
    w("## Summary")
    w("")
    for s in summary:
        w(f"- {s}")
    w("")
    ev = read_lines(os.path.join(work, "events.txt"))
    if ev:
        w("## Events")
        w("")
        for e in ev:
            w(f"- {e}")
        w("")
    w("## Commands, exactly as run")
    w("")
    w("Servers (in host B, via `netlab --lab startup exec B ...`):")
    w("")
    w("```sh")
    for c in read_lines(os.path.join(work, "server-commands.txt")):
        w(clean(c))
    w("```")
    w("")
    w("Clients and setup (clients in host A via `netlab --lab startup exec A ...`, under `timeout` and "
      "`/usr/bin/time`):")
    w("")
    w("```sh")
    for c in read_lines(os.path.join(work, "commands.txt")):
        w(clean(c))
    w("```")
    w("")
    text = "\n".join(L) + "\n"
    with open(out, "w") as f:
        f.write(text)
    print("\n".join(summary))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    a = sys.argv[2:]
    if cmd == "sample" and len(a) == 6:
        sample(a[0], a[1], a[2], a[3], a[4], float(a[5]))
    elif cmd == "snap" and len(a) == 1:
        snap(a[0])
    elif cmd == "analyze" and len(a) == 3:
        print(json.dumps(analyze(a[0], float(a[1]), float(a[2])), default=str))
    elif cmd == "report" and len(a) == 2:
        report(a[0], a[1])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
