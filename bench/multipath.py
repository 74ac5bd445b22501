#!/usr/bin/env python3
"""Helpers and report of bench/multipath.sh (issue 16: multi-path transfers).

    multipath.py sample OUT INTERVAL MAXSECS      interface counter sampler (run it inside host B)
    multipath.py rates SAMPLES T0 T1              per-path rates over [T0, T1]: "MBIT,MBIT,.. BYTES,BYTES,.."
    multipath.py bytes SAMPLES                    received bytes, all paths, since the first sample
    multipath.py paths                            tern's --json `paths` array on stdin, one line of text
    multipath.py report WORK OUT SVG SVG_LINK     the Markdown report (and the failure-run plot)

sample: every INTERVAL seconds (on an absolute schedule), rx_bytes and tx_bytes of every
netlab path device (nl0, nl1, ...) from /sys/class/net/DEV/statistics/ of the namespace it
runs in (`netlab exec B python3 multipath.py sample ...` sees B's devices). One line per
sample: epoch time, then rx tx of each device in index order; a first line
`# devices nl0 nl1 ...`. It ends on SIGTERM, after MAXSECS, or when its parent goes away.
The counters are IP bytes as the host saw them, headers included: for data sent A -> B,
B's rx_bytes on nlI is what path I carried.

Standard library only.
"""
import html
import json
import math
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reportlib import command_cleaner, markers, num, read_lines, read_meta, read_tsv, tick  # noqa: E402

START, END = markers("multipath")
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


# ----------------------------------------------------------------------------- sampler
def devices():
    found = []
    for d in os.listdir("/sys/class/net"):
        m = re.fullmatch(r"nl(\d+)", d)
        if m:
            found.append((int(m.group(1)), d))
    return [d for _, d in sorted(found)]


def counter(dev, what):
    with open(f"/sys/class/net/{dev}/statistics/{what}_bytes") as f:
        return int(f.read())


def sample(out, interval, maxsecs):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    interval, maxsecs = float(interval), float(maxsecs)
    parent = os.getppid()
    devs = devices()
    start = time.time()
    k = 0
    with open(out, "w") as f:
        f.write("# devices " + " ".join(devs) + "\n")
        while not stop and time.time() - start < maxsecs and os.getppid() == parent:
            t = time.time()
            vals = []
            for d in devs:
                try:
                    vals += [counter(d, "rx"), counter(d, "tx")]
                except OSError:
                    vals += [-1, -1]
            f.write("%.6f %s\n" % (t, " ".join(str(v) for v in vals)))
            f.flush()
            k = tick(start, k, interval, stop)


def load_samples(path):
    """(device names, [(t, [rx per device], [tx per device])])"""
    devs, rows = [], []
    try:
        for line in open(path):
            if line.startswith("# devices"):
                devs = line.split()[2:]
                continue
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            try:
                t, v = float(f[0]), [int(x) for x in f[1:]]
            except ValueError:
                continue
            rows.append((t, v[0::2], v[1::2]))
    except OSError:
        pass
    return devs, rows


def window(rows, t0, t1):
    """The last sample at or before T0 and the first at or after T1 (else the nearest)."""
    a = [r for r in rows if r[0] <= t0]
    b = [r for r in rows if r[0] >= t1]
    return (a[-1] if a else rows[0]), (b[0] if b else rows[-1])


def rates(path, t0, t1):
    devs, rows = load_samples(path)
    if len(rows) < 2:
        return "nan nan"
    a, b = window(rows, float(t0), float(t1))
    dt = b[0] - a[0]
    if dt <= 0:
        return "nan nan"
    got = [y - x for x, y in zip(a[1], b[1])]
    return ",".join("%.1f" % (g * 8 / dt / 1e6) for g in got) + " " + ",".join(str(g) for g in got)


def received(path):
    _, rows = load_samples(path)
    if len(rows) < 1:
        return "-1"
    return str(sum(rows[-1][1]) - sum(rows[0][1]))


def paths_summary(text):
    """One line from tern's --json `paths` array (issue 16); '' when there is none."""
    try:
        d = json.loads(text)
    except ValueError:
        return ""
    ps = d.get("paths") if isinstance(d, dict) else None
    if not isinstance(ps, list) or not ps:
        return ""
    out = []
    for p in ps:
        local = f"{p['local']}->" if p.get("local") else ""
        bits = [f"path {p.get('index', '?')} {local}{p.get('remote', '?')}",
                str(p.get("state", "?"))]
        if p.get("streams") is not None:
            bits.append(f"{p['streams']} streams")
        if isinstance(p.get("bytes"), (int, float)):
            bits.append(f"{p['bytes'] / 1e6:.0f} MB")
        if isinstance(p.get("rate_bps"), (int, float)):
            bits.append(f"{p['rate_bps'] / 1e6:.0f} Mbit/s")
        if p.get("reserved_bps"):
            bits.append(f"reserved {p['reserved_bps'] / 1e6:.0f} Mbit/s")
        out.append(" ".join(bits))
    tuning = d.get("tuning") or {}
    peak = tuning.get("send_buffer_peak_bytes")
    together = tuning.get("send_buffers_peak_together_bytes")
    if isinstance(together, (int, float)) and together > 0:
        out.append(f"send buffers at most {together / 1e6:.1f} MB at once"
                   + (f" ({peak / 1e6:.1f} MB adding each stream's own peak)"
                      if isinstance(peak, (int, float)) and peak > together else ""))
    elif isinstance(peak, (int, float)) and peak > 0:
        out.append(f"send buffers at most {peak / 1e6:.1f} MB in total")
    return "; ".join(out)


# ------------------------------------------------------------------------------ report
def fmt_mbit(x, partial=False):
    if x is None or math.isnan(x):
        return "-"
    return ("~" if partial else "") + f"{x:.0f}"


def ratio(x, y):
    if x is None or y is None or math.isnan(x) or math.isnan(y) or y <= 0:
        return "-"
    return f"{x / y:.2f}"


def report(work, out_path, svg_path, svg_link):
    meta = read_meta(os.path.join(work, "meta.tsv"))
    clean = command_cleaner(meta)
    rows = []
    for r in read_tsv(os.path.join(work, "results.tsv"), missing_ok=True):
        r += [""] * (12 - len(r))
        run, rid, label, cmd, bps, nbytes, wall, status, note, pm, pb, extra = r[:12]
        rows.append(dict(run=run, id=rid, label=label, cmd=cmd, bps=num(bps), bytes=num(nbytes),
                         wall=num(wall), status=status, note=note,
                         pm=[num(x) for x in pm.split(",")] if pm and pm != "nan" else [],
                         pb=[num(x) for x in pb.split(",")] if pb and pb != "nan" else [],
                         extra=extra))
    runs = [dict(id=s[0], title=s[1], up=s[2], rates=[float(x) for x in s[3].split(",")],
                 rtts=[float(x) for x in s[4].split(",")]) for s in read_tsv(os.path.join(work, "runs.tsv"), missing_ok=True)]
    events = read_lines(os.path.join(work, "events.txt"))
    server_cmds = read_lines(os.path.join(work, "server-commands.txt"))
    quick = meta.get("mode") == "quick"
    have_mp = meta.get("have_paths") == "1"

    L = [START, "", "## Multi-path transfers (netlab, issue 16)" + (" — QUICK RUN" if quick else ""), ""]
    if quick:
        L += [f"**Quick run (`--quick`): {meta.get('perf_time')} s per memory-to-memory run, a "
              f"{meta.get('cp_mib')} MiB copy and a {meta.get('fail_mib')} MiB failure copy, one run each; "
              "indicative only.**", ""]
    L += [f"Generated by `bench/multipath.sh{' --quick' if quick else ''}{' --write' if meta.get('write') == '1' else ''}` "
          f"on {meta.get('date', '?')}; see `bench/README.md`. One run of each configuration (no medians).", ""]
    if not have_mp:
        L += ["**This tern has no multi-path support** (`tern cp --help` lists no `--paths`): every tern run "
              "below connects to path 0's address only, `--paths off` and hand-named `--path` runs are "
              "skipped, and the failure run cuts a path tern does not use. The rows of the other tools and "
              "the per-path counters are real.", ""]

    L += ["Per-path columns: Mbit/s each path carried A -> B during the run, from host B's interface "
          "counters (`rx_bytes` of nl0, nl1, ... sampled every "
          f"{meta.get('interval', '?')} s): IP bytes, headers and retransmissions included, so a few per cent "
          "above the payload rate. `ratio` = the tool's own rate over the capacity (the sum of the paths' "
          "configured rates). `~` marks a run that was cut at its time limit (rate = what crossed the paths / "
          "time, not verified).", ""]

    def by(run, rid):
        for r in rows:
            if r["run"] == run and r["id"] == rid:
                return r
        return None

    def row_line(r, cap, npaths):
        if r is None:
            return None
        per = " | ".join(fmt_mbit(r["pm"][i]) if i < len(r["pm"]) else "-" for i in range(npaths))
        rate = fmt_mbit(r["bps"] / 1e6 if not math.isnan(r["bps"]) else math.nan, r["status"] == "partial")
        if r["status"] == "skipped":
            rate = "n/a"
        elif r["status"] == "failed":
            rate = "failed"
        note = "; ".join(x for x in (r["note"], r["extra"]) if x)
        return (f"| {r['label']} | {rate} | {ratio(r['bps'] / 1e6, cap) if r['status'] in ('ok', 'partial') else '-'} "
                f"| {per} | {html.escape(note)} |")

    goals = []
    for s in runs:
        if s["id"] not in ("two", "three"):
            continue
        cap, n = sum(s["rates"]), len(s["rates"])
        L += [f"### {s['title']}", "", f"`{s['up']}`; capacity {cap:.0f} Mbit/s.", "",
              "| run | Mbit/s | ratio | " + " | ".join(f"path {i}" for i in range(n)) + " | notes |",
              "| --- | ---: | ---: | " + " | ".join("---:" for _ in range(n)) + " | --- |",
              f"| capacity (sum of the paths' rates) | {cap:.0f} | 1.00 | "
              + " | ".join(f"{x:.0f}" for x in s["rates"]) + " | |"]
        for r in rows:
            if r["run"] == s["id"]:
                line = row_line(r, cap, n)
                if line:
                    L.append(line)
        L.append("")
        perf, cp = by(s["id"], "tern-perf"), by(s["id"], "tern-cp")
        want = [("tern perf, no flags", perf, 0.9), ("tern cp, no flags", cp, 0.85 if s["id"] == "two" else 0.9)]
        for what, r, k in want:
            if r is None or r["status"] != "ok":
                goals.append(f"| {s['title']} | {what} >= {k} x {cap:.0f} | not measured |")
                continue
            # perf: the network rate (issue 16 says network rate); cp: the wall-clock rate
            v = r["bps"] / 1e6
            if r["id"] == "tern-perf" and r.get("extra"):
                m = re.search(r"network (\d+) Mbit/s", r["extra"])
                if m:
                    v = float(m.group(1))
            goals.append(f"| {s['title']} | {what} >= {k} x {cap:.0f} = {k * cap:.0f} Mbit/s | "
                         f"{v:.0f} Mbit/s: {'pass' if v >= k * cap else 'FAIL'} |")
        # Memory: the most the send buffers held at once, against the paths' BDPs.
        rtts = [float(x) for x in re.findall(r"rtt=([0-9.]+)", s["up"])]
        if perf is not None and len(rtts) == n:
            bdp_mb = sum(rate * 1e6 / 8 * rtt / 1e3 for rate, rtt in zip(s["rates"], rtts)) / 1e6
            m = re.search(r"send buffers at most ([0-9.]+) MB at once", perf.get("extra") or "")
            if m:
                peak = float(m.group(1))
                goals.append(f"| {s['title']} | tern perf: send buffers at once <= 2.5 x the paths' BDPs "
                             f"({bdp_mb:.1f} MB) = {2.5 * bdp_mb:.1f} MB | {peak:.1f} MB "
                             f"({peak / bdp_mb:.1f} x): {'pass' if peak <= 2.5 * bdp_mb else 'FAIL'} |")

    fail = next((s for s in runs if s["id"] == "fail"), None)
    if fail:
        cap, n = sum(fail["rates"]), len(fail["rates"])
        r = by("fail", "tern-cp-fail")
        L += ["### Failure: a path cut a third of the way through a copy", "",
              f"`{fail['up']}`; `tern cp` (no flags) of {meta.get('fail_mib')} MiB of random data; when host B "
              f"had received a third of it over all paths, `{meta.get('fail_cut_cmd', '?')}` "
              "(100 % loss both ways: the path is dead, its interfaces stay up).", ""]
        if r is not None:
            cut_t = num(meta.get("fail_cut_at"))
            L += ["| | |", "| --- | --- |",
                  f"| completion (wall clock of the client) | {fmt_s(r['wall'])} s |",
                  f"| result | {r['status']}{(': ' + html.escape(r['note'])) if r['note'] else ''} |",
                  f"| path cut at | {fmt_s(cut_t)} s after the start, {num(meta.get('fail_cut_bytes')) / 1e6:.0f} MB received |"
                  if not math.isnan(cut_t) else "| path cut | never (the copy ended first, or the sampler gave no data) |",
                  f"| rate before the cut, per path | {meta.get('fail_before', '-')} Mbit/s |",
                  f"| rate after the cut, per path | {meta.get('fail_after', '-')} Mbit/s |",
                  f"| average over the copy | {fmt_mbit(r['bps'] / 1e6)} Mbit/s ({ratio(r['bps'] / 1e6, cap)} of {cap:.0f}) |",
                  f"| tern's paths report | {html.escape(r['extra']) or '(none: no `paths` in the JSON)'} |", ""]
            if svg_path and write_svg(svg_path, work, meta, fail):
                L += [f"![Each path's rate during the failure run]({svg_link})", ""]

    res = next((s for s in runs if s["id"] == "reserved"), None)
    if res:
        cap, n = sum(res["rates"]), len(res["rates"])
        L += ["### Reserved path", "",
              f"`{res['up']}`; path 1 reserved at {meta.get('reserve_mbit', '?')} Mbit/s next to best-effort "
              "path 0. Path 1 is faster than the reservation so that pacing at the reserved rate is visible "
              "(the two-path lab's 250 Mbit/s path 1 could not carry 300).", "",
              "| run | Mbit/s | ratio | " + " | ".join(f"path {i}" for i in range(n)) + " | notes |",
              "| --- | ---: | ---: | " + " | ".join("---:" for _ in range(n)) + " | --- |"]
        for r in rows:
            if r["run"] == "reserved":
                L.append(row_line(r, cap, n))
        L.append("")

    if goals:
        L += ["### Issue 16 goals", "", "| scenario | goal | result |", "| --- | --- | --- |"] + goals + [""]

    L += ["### Setup", "",
          "- Two network namespaces on this machine, host A (client) and host B (server), joined by "
          "`netlab`'s user-space path emulator, one device pair per path (path I: A 10.47.I.1, B 10.47.I.2), "
          f"MTU {meta.get('mtu')}; every client runs in A, every server in B; traffic flows A -> B.",
          "- tern: `tern serve --listen 0.0.0.0:PORT` in B (it advertises B's path addresses); clients are "
          "given path 0's address only. `tern perf` reports `throughput_bps` (payload verified by the "
          "daemon, setup included) and `network_throughput_bps` (shown as `network`); `tern cp` is timed by "
          "wall clock and checked with `cmp`.",
          f"- iperf3: one client per path at the same time, `-P {meta.get('iperf_p')}` each, "
          f"{meta.get('perf_time')} s; the row's rate is the sum of their `end.sum_received.bits_per_second`.",
          f"- GridFTP: as in the ESnet study, the data is spread evenly over the paths: the copy's file is "
          f"split into equal parts and one `globus-url-copy -p {meta.get('guc_p')} -tcp-bs 4194304` per path "
          "runs at the same time to a `globus-gridftp-server` bound to that path's address (one "
          "globus-url-copy cannot be given several addresses for one file); the time is until the last "
          "part has arrived, every part checked with `cmp`. Evenly spread, it ends when the slowest path "
          "has carried its share.",
          "- MPTCP rows (when present): the kernel's in-kernel path manager, B announcing its other path "
          "addresses (`ip mptcp endpoint add ADDR dev nlI signal`), both hosts with "
          "`ip mptcp limits set subflows 8 add_addr_accepted 8`; iperf3 runs under `mptcpize run`.",
          f"- TCP: the namespaces' defaults (congestion control "
          f"`{meta.get('cc', '?')}`, `tcp_wmem` max {meta.get('tcp_wmem', '?')}, `net.core.wmem_max` "
          f"{meta.get('wmem_max', '?')}, read-only in a namespace), as in bench/wan.sh.", ""]
    if meta.get("emulator_note"):
        L += [meta["emulator_note"], ""]

    L += ["### Machine and tools", "", "| | |", "| --- | --- |",
          f"| CPU | {meta.get('cpu')} ({meta.get('nproc')} cores), {meta.get('memory')} |",
          f"| kernel | {meta.get('kernel')} |",
          f"| load average (1/5/15 min) at start / end | {meta.get('load_start')} / {meta.get('load_end')} |",
          f"| tern | {meta.get('tern_version')} (working tree at {meta.get('tern_commit')}; binary built "
          f"{meta.get('tern_built')}); multi-path flags: {meta.get('tern_flags', '?')} |",
          f"| netlab | {meta.get('netlab_version')} |",
          f"| iperf3 | {meta.get('iperf3_version')} |",
          f"| GridFTP | {meta.get('gridftp_version')} |",
          f"| mptcpize | {meta.get('mptcpize', 'not installed')} |", ""]

    L += ["### Commands", "", "Servers (in B):", "", "```"] + [clean(c) for c in server_cmds] + ["```", "",
          "Clients (in A, each as `netlab --lab LAB exec A CMD`):", "", "```"]
    seen = set()
    for r in rows:
        c = clean(r["cmd"])
        if c and c not in seen:
            seen.add(c)
            L.append(c)
    L += ["```", ""]
    if events:
        L += ["### Events", ""] + [f"- {html.escape(e)}" for e in events] + [""]
    L += [END]
    with open(out_path, "w") as f:
        f.write("\n".join(L) + "\n")


def fmt_s(x):
    return "-" if x is None or math.isnan(x) else f"{x:.1f}"


def series(path, t0):
    """[(t relative to T0, [Mbit/s per device])] from consecutive samples of rx_bytes."""
    devs, rows = load_samples(path)
    out = []
    for (ta, ra, _), (tb, rb, _) in zip(rows, rows[1:]):
        if tb > ta:
            out.append(((ta + tb) / 2 - t0, [(y - x) * 8 / (tb - ta) / 1e6 for x, y in zip(ra, rb)]))
    return devs, out


def write_svg(path, work, meta, fail):
    t0, t1 = num(meta.get("fail_t0")), num(meta.get("fail_t1"))
    samples = meta.get("fail_samples")
    if math.isnan(t0) or not samples:
        return False
    devs, pts = series(os.path.join(work, samples), t0)
    pts = [p for p in pts if -1 <= p[0] <= (t1 - t0) + 2]
    if not pts:
        return False
    W, H, left, right, top, bottom = 900, 440, 64, 24, 92, 56
    tmax = max(p[0] for p in pts) or 1.0
    vmax = max([max(v) for _, v in pts] + [sum(fail["rates"])]) * 1.1
    step = next(s for s in (50, 100, 200, 250, 500, 1000, 2000) if vmax / s <= 8)
    tstep = next(s for s in (1, 2, 5, 10, 20, 30, 60, 120) if tmax / s <= 12)
    pw, ph = W - left - right, H - top - bottom
    X = lambda t: left + pw * max(0.0, t) / tmax
    Y = lambda v: top + ph - ph * v / vmax
    quick = meta.get("mode") == "quick"
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">tern cp over '
         f'{len(devs)} paths, one cut a third of the way{" (quick run)" if quick else ""}</text>',
         f'<text x="{W / 2}" y="40" text-anchor="middle" fill="#444">bench/multipath.sh, '
         f'{html.escape(meta.get("date", ""))}, tern {html.escape(meta.get("tern_commit", ""))}; '
         f'rate = bytes host B received on each path, every {html.escape(meta.get("interval", "?"))} s</text>',
         f'<text x="{W / 2}" y="56" text-anchor="middle" fill="#444">{html.escape(fail["up"])}</text>']
    v = 0.0
    while v <= vmax + 1e-9:
        o.append(f'<line x1="{left}" y1="{Y(v):.1f}" x2="{W - right}" y2="{Y(v):.1f}" stroke="#e4e4e4"/>')
        o.append(f'<text x="{left - 6}" y="{Y(v) + 4:.1f}" text-anchor="end" fill="#444">{v:.0f}</text>')
        v += step
    t = 0.0
    while t <= tmax + 1e-9:
        o.append(f'<text x="{X(t):.1f}" y="{top + ph + 16}" text-anchor="middle" fill="#444">{t:.0f}</text>')
        t += tstep
    o.append(f'<line x1="{left}" y1="{top + ph}" x2="{W - right}" y2="{top + ph}" stroke="#333"/>')
    o.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333"/>')
    o.append(f'<text x="{left + pw / 2}" y="{H - 14}" text-anchor="middle">seconds since the copy started</text>')
    o.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 16 {top + ph / 2})">Mbit/s</text>')
    cut = num(meta.get("fail_cut_at"))
    if not math.isnan(cut):
        o.append(f'<line x1="{X(cut):.1f}" y1="{top}" x2="{X(cut):.1f}" y2="{top + ph}" stroke="#555" stroke-dasharray="5,4"/>')
        o.append(f'<text x="{X(cut) + 4:.1f}" y="{top + 12}" fill="#555">path 1 cut</text>')
    end = t1 - t0
    if not math.isnan(end):
        o.append(f'<line x1="{X(end):.1f}" y1="{top}" x2="{X(end):.1f}" y2="{top + ph}" stroke="#555" stroke-dasharray="1,3"/>')
        o.append(f'<text x="{X(end) - 4:.1f}" y="{top + 12}" fill="#555" text-anchor="end">copy done</text>')
    total = [(t, sum(v)) for t, v in pts]
    series_list = [(f"{d} (path {i}, {fail['rates'][i]:.0f} Mbit/s x {fail['rtts'][i]:.0f} ms)"
                    if i < len(fail["rates"]) else d, [(t, v[i]) for t, v in pts], COLORS[i % len(COLORS)], "")
                   for i, d in enumerate(devs)]
    series_list.append(("all paths", total, "#333", ' stroke-dasharray="6,3"'))
    lx = left
    for label, pts_i, color, dash in series_list:
        d = " ".join(f"{X(t):.1f},{Y(v):.1f}" for t, v in pts_i)
        o.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6"{dash} points="{d}"/>')
        o.append(f'<line x1="{lx}" y1="74" x2="{lx + 20}" y2="74" stroke="{color}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{lx + 24}" y="78">{html.escape(label)}</text>')
        lx += 24 + 6.2 * len(label) + 20
    o.append("</svg>")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")
    return True


def main(argv):
    if len(argv) >= 2 and argv[1] == "sample" and len(argv) == 5:
        sample(argv[2], argv[3], argv[4])
    elif len(argv) >= 2 and argv[1] == "rates" and len(argv) == 5:
        print(rates(argv[2], argv[3], argv[4]))
    elif len(argv) == 3 and argv[1] == "bytes":
        print(received(argv[2]))
    elif len(argv) == 2 and argv[1] == "paths":
        print(paths_summary(sys.stdin.read()))
    elif len(argv) == 6 and argv[1] == "report":
        report(argv[2], argv[3], argv[4], argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
