"""The report of bench/efficiency.sh (issue 14): rate and CPU cost of tern against
globus-url-copy, xrdcp and iperf3 on loopback, and issue 14's ratios with PASS/FAIL.

    python3 bench/efficiency.py WORK OUT

WORK holds what the script wrote: meta.tsv, results.tsv, commands.txt, events.txt,
not-measured.tsv (and xrootd.cfg). OUT gets one Markdown section between
<!-- efficiency:start --> and <!-- efficiency:end --> (so reportlib.splice can put
it into BENCHMARKS.md later); a summary goes to stdout. Standard library only.
"""
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reportlib import command_cleaner, markers, num, read_lines, read_meta, read_tsv  # noqa: E402

FIELDS = ("kind id rep cmd bytes wall wall_client sync_wall bps cpu_client cpu_server "
          "span busy iowait extra note").split()
DISK = [  # id, label
    ("tern-private", "tern cp (default: private)"),
    ("tern-clear", "tern cp --protect clear"),
    ("guc", "globus-url-copy (default)"),
    ("guc-p4", "globus-url-copy -p 4"),
    ("xrdcp", "xrdcp"),
]
MEM_TOOLS = [("tern-private", "tern perf --protect private"), ("tern-safe", "tern perf --protect safe"),
             ("tern-clear", "tern perf --protect clear"), ("iperf3", "iperf3")]


def load(work):
    rows = []
    for f in read_tsv(os.path.join(work, "results.tsv")):
        f = (f + [""] * len(FIELDS))[:len(FIELDS)]
        r = dict(zip(FIELDS, f))
        for k in ("bytes", "wall", "wall_client", "sync_wall", "bps", "cpu_client", "cpu_server",
                  "span", "busy", "iowait"):
            r[k] = num(r[k])
        r["rep"] = int(r["rep"])
        r["ok"] = not r["note"]
        r["cpu"] = r["cpu_client"] + r["cpu_server"]
        gb = r["bytes"] / 1e9
        r["spgb"] = r["cpu"] / gb if r["ok"] and gb > 0 else math.nan
        rows.append(r)
    return rows


def finite(vs):
    return [v for v in vs if not math.isnan(v)]


def med(vs):
    vs = finite(vs)
    return statistics.median(vs) if vs else math.nan


def fmt(x, digits=2):
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def spread(vs, scale=1.0, digits=2):
    """median (min-max) of the finite values, scaled"""
    vs = [v / scale for v in finite(vs)]
    if not vs:
        return "n/a"
    m = f"{statistics.median(vs):.{digits}f}"
    if len(vs) == 1:
        return m
    return f"{m} ({min(vs):.{digits}f}–{max(vs):.{digits}f})"


def limit(r, nproc):
    """(category, detail): which resource limited the run, as far as the CPU counters tell."""
    span = r["span"]
    if not r["ok"] or math.isnan(span) or span <= 0 or math.isnan(r["cpu"]):
        return "?", "?"
    ours, busy, io = r["cpu"] / span, r["busy"] / span, r["iowait"] / span
    other = max(0.0, busy - ours)
    detail = f"tools {ours:.2f}, machine {busy:.2f} of {nproc} cores busy, iowait {io:.2f}"
    if ours >= 0.8 * nproc:
        return "CPU", detail
    if busy >= 0.85 * nproc:
        return f"CPU (shared: {other:.1f} cores other load)", detail
    if io >= 0.5:
        return "disk", detail
    return "neither CPU nor disk saturated", detail


def main():
    work, out = sys.argv[1], sys.argv[2]
    meta = read_meta(os.path.join(work, "meta.tsv"))
    rows = load(work)
    nproc = int(meta.get("nproc", "1") or 1)
    clean = command_cleaner(meta)
    events = read_lines(os.path.join(work, "events.txt"))
    not_measured = {f[0]: (f[1] if len(f) > 1 else "") for f in read_tsv(os.path.join(work, "not-measured.tsv"), True)}
    reps = int(meta.get("reps", "1"))
    quick = meta.get("mode") == "quick"

    def runs(kind, rid):
        return [r for r in rows if r["kind"] == kind and r["id"] == rid]

    def ok(kind, rid):
        return [r for r in runs(kind, rid) if r["ok"]]

    def m(kind, rid, key):
        return med([r[key] for r in ok(kind, rid)])

    def limits(kind, rid):
        cats = [limit(r, nproc)[0] for r in ok(kind, rid)]
        if not cats:
            return "n/a"
        common = max(set(cats), key=cats.count)
        return common if len(cats) == 1 else f"{common} ({cats.count(common)}/{len(cats)})"

    def count(kind, rid):
        a = runs(kind, rid)
        return f"{len([r for r in a if r['ok']])}/{len(a)}"

    # ------------------------------------------------------------- goals
    def ratio(a, b):
        return a / b if not (math.isnan(a) or math.isnan(b) or b == 0) else math.nan

    def verdict(x, op, target):
        if math.isnan(x):
            return "n/a"
        return "PASS" if (x >= target if op == ">=" else x <= target) else "FAIL"

    goals = [
        ("tern cp default (private) rate / globus-url-copy default rate",
         ratio(m("disk", "tern-private", "bps"), m("disk", "guc", "bps")), ">=", 1.0),
        ("tern cp default (private) CPU s/GB / globus-url-copy's (client + server)",
         ratio(m("disk", "tern-private", "spgb"), m("disk", "guc", "spgb")), "<=", 1.5),
        ("tern cp --protect clear rate / globus-url-copy default rate",
         ratio(m("disk", "tern-clear", "bps"), m("disk", "guc", "bps")), ">=", 1.15),
        ("tern cp --protect clear CPU s/GB / globus-url-copy's",
         ratio(m("disk", "tern-clear", "spgb"), m("disk", "guc", "spgb")), "<=", 1.0),
        ("tern perf private, 4 streams / iperf3 -P 4",
         ratio(m("mem", "tern-private-P4", "bps"), m("mem", "iperf3-P4", "bps")), ">=", 0.8),
    ]
    goal_lines = ["| goal (issue 14) | measured | target | verdict |", "| --- | ---: | ---: | --- |"]
    for text, x, op, target in goals:
        goal_lines.append(f"| {text} | {fmt(x)} | {'≥' if op == '>=' else '≤'} {target:.2f} | **{verdict(x, op, target)}** |")

    # ------------------------------------------------------------- disk table
    disk_lines = [
        "| tool | verified runs | Gbit/s | time (s) | of which sync (s) | client CPU (s) | server CPU (s) "
        "| CPU s/GB (both ends) | limited by |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for rid, label in DISK:
        if rid in not_measured:
            disk_lines.append(f"| {label} | not measured: {not_measured[rid]} | | | | | | | |")
            continue
        if not runs("disk", rid):
            continue
        o = ok("disk", rid)
        disk_lines.append(
            f"| {label} | {count('disk', rid)} | {spread([r['bps'] for r in o], 1e9)} "
            f"| {spread([r['wall'] for r in o])} | {'–' if rid.startswith('tern') else spread([r['sync_wall'] for r in o])} "
            f"| {spread([r['cpu_client'] for r in o])} | {spread([r['cpu_server'] for r in o])} "
            f"| {spread([r['spgb'] for r in o])} | {limits('disk', rid)} |")
    base = {k: (m("disk", k, "bps"), m("disk", k, "spgb")) for k, _ in DISK}
    disk_ratio_lines = ["| | rate: tern / it | CPU s/GB: tern / it |", "| --- | ---: | ---: |"]
    for tid, tlabel in DISK[:2]:
        for pid, plabel in DISK[2:]:
            if pid in not_measured or not runs("disk", pid):
                continue
            disk_ratio_lines.append(f"| {tlabel} vs {plabel} | {fmt(ratio(base[tid][0], base[pid][0]))} "
                                    f"| {fmt(ratio(base[tid][1], base[pid][1]))} |")

    # ------------------------------------------------------------- memory table
    streams = sorted({r["id"].rsplit("-P", 1)[1] for r in rows if r["kind"] == "mem"}, key=int)
    mem_lines = [
        "| tool | streams | runs | Gbit/s | / iperf3 | client CPU (s) | server CPU (s) | CPU s/GB (both ends) | limited by |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in streams:
        ip = m("mem", f"iperf3-P{p}", "bps")
        for tool, label in MEM_TOOLS:
            rid = f"{tool}-P{p}"
            o = ok("mem", rid)
            rel = "–" if tool == "iperf3" else fmt(ratio(m("mem", rid, "bps"), ip))
            mem_lines.append(
                f"| {label} | {p} | {count('mem', rid)} | {spread([r['bps'] for r in o], 1e9)} | {rel} "
                f"| {spread([r['cpu_client'] for r in o])} | {spread([r['cpu_server'] for r in o])} "
                f"| {spread([r['spgb'] for r in o])} | {limits('mem', rid)} |")

    # ------------------------------------------------------------- every run
    all_lines = [
        "| section | run | configuration | Gbit/s | time (s) | sync (s) | CPU client / server (s) | CPU s/GB "
        "| cores: tools / machine / iowait | limited by | notes |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        cat, _ = limit(r, nproc)
        span = r["span"]
        cores = "n/a"
        if r["ok"] and not math.isnan(span) and span > 0:
            cores = f"{r['cpu'] / span:.2f} / {r['busy'] / span:.2f} / {r['iowait'] / span:.2f}"
        notes = "; ".join(x for x in (r["extra"], ("FAILED: " + r["note"]) if r["note"] else "") if x)
        all_lines.append(
            f"| {r['kind']} | {r['rep']} | {r['id']} | {fmt(r['bps'] / 1e9) if r['ok'] else 'failed'} "
            f"| {fmt(r['wall'], 2)} | {fmt(r['sync_wall'], 2) if r['kind'] == 'disk' and not r['id'].startswith('tern') else '–'} "
            f"| {fmt(r['cpu_client'])} / {fmt(r['cpu_server'])} | {fmt(r['spgb'])} | {cores} | {cat} | {notes} |")

    failures = [r for r in rows if not r["ok"]]
    cmds = [clean(c) for c in read_lines(os.path.join(work, "commands.txt"))]
    try:
        xcfg = clean(open(os.path.join(work, "xrootd.cfg")).read())
    except OSError:
        xcfg = ""

    stat = f"median (min–max) of {reps} runs" if reps > 1 else "1 run"
    start, end = markers("efficiency")
    md = [start, "", f"## Loopback efficiency: tern vs GridFTP, xrdcp, iperf3 (issue 14){' (quick run)' if quick else ''}", ""]
    md.append(f"Generated by `bench/efficiency.sh{' --quick' if quick else ''}` on {meta.get('date', '?')}: "
              f"everything on one machine over 127.0.0.1, {stat} per configuration, interleaved "
              f"(forward on odd runs, backward on even ones); how, in the comments of `bench/efficiency.sh`.")
    if quick:
        md += ["", "**Quick run**: one run each, small file; the verdicts are indicative only."]
    md += ["", "### Machine", "", "| | |", "| --- | --- |",
           f"| CPU | {meta.get('cpu', '?')} |",
           f"| cores (nproc) | {nproc} |",
           f"| memory | {meta.get('memory', '?')} |",
           f"| kernel | {meta.get('kernel', '?')} |",
           f"| file system of the copies | {clean(meta.get('filesystem', '?'))} |",
           f"| TCP | congestion control {meta.get('tcp_cc', '?')}; tcp_rmem {meta.get('tcp_rmem', '?')}; tcp_wmem {meta.get('tcp_wmem', '?')} |",
           f"| load average (1/5/15 min) at start / end | {meta.get('load_start', '?')} / {meta.get('load_end', '?')} |",
           "", "### Tools", "", "| | |", "| --- | --- |",
           f"| tern | {meta.get('tern_version', '?')} (working tree at {meta.get('tern_commit', '?')}; binary built {meta.get('tern_built', '?')}) |",
           f"| globus-url-copy | {meta.get('guc_version', '?')} |",
           f"| globus-gridftp-server | {meta.get('gfs_version', '?')} |",
           f"| xrdcp / xrootd | {meta.get('xrdcp_version', '?')} / {meta.get('xrootd_version', '?')} |",
           f"| iperf3 | {meta.get('iperf3_version', '?')} |",
           "", "### Issue 14's goals", "",
           "Ratios of the medians below; rate ratios above 1 and CPU ratios below 1 favour tern.", ""]
    md += goal_lines
    md += ["", f"### Disk to disk ({meta.get('disk_mib', '?')} MiB random file, {stat})", "",
           "Before every copy: the destination deleted, `sync; echo 3 > /proc/sys/vm/drop_caches`, "
           "then `cat SRC > /dev/null`, so the source comes from the page cache and the copy goes to disk. "
           "Time = wall clock of the client from start to exit; for globus-url-copy and xrdcp plus "
           "`sync DESTFILE` afterwards, because tern fsyncs the file before its rename and they do not. "
           "Gbit/s = 10^9 bits/s of file data over that time. Client CPU = user + system seconds "
           "of the client and its children (`/usr/bin/time`), plus `sync`'s; server CPU = the growth "
           "of utime + stime + cutime + cstime over the server's whole process tree (`/proc/PID/stat`: "
           "runuser, the server and its forked sessions, reaped or not). CPU s/GB = (client + server) / "
           "(bytes / 10^9). Writeback by kernel threads is charged to no one, for every tool alike. "
           "Every copy is checked with `cmp`.", ""]
    md += disk_lines
    md += ["", "Every ratio (medians):", ""] + disk_ratio_lines
    md += ["", f"### Memory to memory ({meta.get('perf_time', '?')} s per run, {stat})", "",
           "tern: `throughput_bps` of `tern perf --json` (payload the daemon verified, over the whole "
           "session including setup); iperf3: `end.sum_received.bits_per_second` of `iperf3 -J`. "
           "CPU as above: `/usr/bin/time` of the client, `/proc` of `tern serve` or `iperf3 -s`; "
           "CPU s/GB over the bytes each reported.", ""]
    md += mem_lines
    md += ["", "### What limited the runs", "",
           f"From the CPU counters over each run: *tools* = client + server CPU seconds / time, "
           f"*machine* = all non-idle CPU time of the machine (`/proc/stat`) / time, *iowait* likewise. "
           f"Tools using ≥ 80% of the {nproc} cores: **CPU**; the machine ≥ 85% busy with less from the tools: "
           f"**CPU (shared)**, other load took cores (it includes kernel threads working for the copy, "
           f"such as writeback, so it is an upper bound); iowait ≥ 0.5 cores: **disk**; otherwise "
           f"neither was saturated (latency, a single thread, or waiting between steps). Loopback puts "
           f"both ends, the TCP stack and any cipher on the same {nproc} cores, so most runs are CPU-bound, "
           f"and then the rate mostly mirrors CPU s/GB. tern's own diagnosis (`tuning.limit` in its JSON) "
           f"is in the notes.", ""]
    md += all_lines
    if not_measured:
        md += ["", "### Not measured", ""] + [f"- {k}: {v}" for k, v in not_measured.items()]
    if failures:
        md += ["", "### Failed runs", ""] + [f"- {r['kind']} {r['id']} run {r['rep']}: {r['note']}" for r in failures]
    if events:
        md += ["", "### Server events", ""] + [f"- {e}" for e in events]
    md += ["", "### Commands", "", "<details><summary>every command line, as run</summary>", "",
           "`$WORK` is the script's temporary directory, `tern` its private copy of the binary; ports are "
           "picked free at run time.", "", "```"] + cmds + ["```"]
    if xcfg:
        md += ["", "`$WORK/xrootd.cfg`:", "", "```", xcfg.rstrip("\n"), "```"]
    md += ["", "</details>", "", end]
    with open(out, "w") as f:
        f.write("\n".join(md) + "\n")

    print()
    print("issue 14's goals")
    print("\n".join(goal_lines))
    print()
    print(f"disk to disk ({meta.get('disk_mib', '?')} MiB, {stat})")
    print("\n".join(disk_lines))
    print()
    print(f"memory to memory ({meta.get('perf_time', '?')} s, {stat})")
    print("\n".join(mem_lines))
    for k, v in not_measured.items():
        print(f"NOT MEASURED: {k}: {v}")
    for e in events:
        print("NOTE:", e)
    if failures:
        print("\nFAILURES:")
        for r in failures:
            print(f"  {r['kind']} {r['id']} run {r['rep']}: {r['note']}")


if __name__ == "__main__":
    main()
