#!/usr/bin/env python3
"""Report for bench/wan.sh.

    wan_report.py WORKDIR OUT.md          write the report section from wan.sh's results
    wan_report.py --splice SECTION FILE   put SECTION (which has the markers) into FILE,
                                          replacing what lies between the markers, or
                                          appending it if FILE has none
"""
import json
import math
import os
import sys

from reportlib import BUSY_PCT, PATH_SHARE, command_cleaner, markers, num, path_or_cpu, read_lines, read_tsv, splice

START, END = markers("wan")
T50_GOAL = 0.9  # issue 14: on t50, tern perf with no flags >= 0.9 x the best iperf3 (CPU permitting)


def main(work, out_path):
    meta = {}
    for k, *v in read_tsv(os.path.join(work, "meta.tsv")):
        meta[k] = v[0] if v else ""
    rows = []
    for r in read_tsv(os.path.join(work, "results.tsv")):
        # Rows from before busy, emu and limit, and of runs that never started, lack them: unknown.
        r += [""] * (14 - len(r))
        sc, kind, rid, cmd, bps, nbytes, wall, cpu_a, cpu_b, cc, note, busy, emu, tlimit = r[:14]
        rows.append(dict(sc=sc, kind=kind, id=rid, cmd=cmd, bps=num(bps), bytes=num(nbytes),
                         wall=num(wall), cpu_a=num(cpu_a), cpu_b=num(cpu_b), cc=cc, note=note,
                         busy=num(busy), emu=num(emu), tlimit=tlimit))
    scens = [dict(id=s[0], title=s[1], up=s[2], cap=float(s[3]), cap0=float(s[4]))
             for s in read_tsv(os.path.join(work, "scenarios.tsv"))]
    events = read_lines(os.path.join(work, "events.txt"))
    server_cmds = read_lines(os.path.join(work, "server-commands.txt"))
    clean = command_cleaner(meta)

    def get(sc, rid):
        for r in rows:
            if r["sc"] == sc and r["id"] == rid:
                return r
        return None

    def mbit(r):
        if r is None:
            return "-"
        if math.isnan(r["bps"]):
            return "n/a" if "not available" in r["note"] or "not installed" in r["note"] else "failed"
        s = f"{r['bps'] / 1e6:.0f}"
        return "~" + s if r["note"].startswith("partial") else s

    def cpu_per_gb(r):
        if r is None or math.isnan(r["bytes"]) or r["bytes"] <= 0:
            return "-"
        a, b = r["cpu_a"], r["cpu_b"]
        if math.isnan(a):
            return "-"
        gb = r["bytes"] / 1e9
        if math.isnan(b):
            return f"{a / gb:.1f} (A only)"
        return f"{(a + b) / gb:.1f} ({a / gb:.1f} + {b / gb:.1f})"

    def ratio(x, y):
        if x is None or y is None or math.isnan(x) or math.isnan(y) or y == 0:
            return "-"
        return f"{x / y:.2f}"

    def cpu_shares(r):
        if math.isnan(r["busy"]) and math.isnan(r["emu"]):
            return "-"
        f = lambda x: "?" if math.isnan(x) else f"{x:.0f}"
        return f"{f(r['busy'])} / {f(r['emu'])}"

    def likely_limit(r, cap0):
        """The path (against path 0, the one every tool uses) or the CPU, else what tern's own
        report names; "?" when nothing tells, "" for a run with no rate."""
        if math.isnan(r["bps"]):
            return ""
        pc = path_or_cpu(r["bps"], cap0 * 1e6, r["busy"])
        if pc:
            return pc
        if r["tlimit"] not in ("", "-", "?", "unknown"):
            return f"`{r['tlimit']}` (tern --json)"
        return "?"

    wiz_ids = lambda sc: [r for r in rows if r["sc"] == sc and r["id"].startswith("iperf3-P")]

    def wizard(sc):
        ok = [r for r in wiz_ids(sc) if not math.isnan(r["bps"])]
        return max(ok, key=lambda r: r["bps"]) if ok else None

    labels = [
        ("mem", "iperf3-default", "iperf3, default (1 stream)"),
        ("mem", "wizard", "iperf3 \"wizard\" (best of the -P x -w sweep)"),
        ("mem", "tern-perf-default", "tern perf, default (4 streams, private)"),
        ("mem", "tern-perf-P8-clear", "tern perf -P 8 --protect clear"),
        ("mem", "guc-mem-default", "GridFTP /dev/zero -> /dev/null, default"),
        ("mem", "guc-mem-tuned", "GridFTP /dev/zero -> /dev/null, -p 8 -tcp-bs 4M"),
        ("disk", "tern-cp-default", "tern cp, default (4 streams, private)"),
        ("disk", "tern-cp-P8-clear", "tern cp -P 8 --protect clear"),
        ("disk", "guc-default", "globus-url-copy, default"),
        ("disk", "guc-tuned", "globus-url-copy -p 8 -tcp-bs 4M"),
        ("disk", "xrdcp", "xrdcp, default"),
        ("disk", "rsync", "rsync over ssh"),
        ("disk", "scp", "scp"),
    ]

    def row_for(sc, rid):
        return wizard(sc) if rid == "wizard" else get(sc, rid)

    def sweep_name(r):
        return r["id"].replace("iperf3-", "-").replace("-w", " -w ")

    def t50_goal(s):
        """Issue 14's must-show on t50: tern perf with no flags against the best iperf3 run
        (the default one included), and what held each back: the goal holds CPU permitting."""
        sc, cap0 = s["id"], s["cap0"]
        t = get(sc, "tern-perf-default")
        ok = [r for r in rows if r["sc"] == sc and r["id"].startswith("iperf3") and not math.isnan(r["bps"])]
        best = max(ok, key=lambda r: r["bps"]) if ok else None
        q = t["bps"] / best["bps"] if t and best and best["bps"] > 0 else math.nan
        tl = likely_limit(t, cap0) if t else ""
        if math.isnan(q):
            verdict = "n/a"
        elif q >= T50_GOAL:
            verdict = "PASS"
        else:
            verdict = "FAIL" + (" (the tern run was CPU-bound; the goal holds CPU permitting)"
                                if tl.startswith("CPU") else "")
        cfg = "none ran" if best is None else "default" if best["id"] == "iperf3-default" else sweep_name(best)
        return (f"**Issue 14 on {s['title']}:** `tern perf` with no flags / the best iperf3 ({cfg}) = "
                f"{mbit(t)} / {mbit(best)} Mbit/s = **{'n/a' if math.isnan(q) else f'{q:.2f}'}** "
                f"(goal >= {T50_GOAL}: **{verdict}**). Likely limit of the tern run: {tl or 'n/a'}; "
                f"of the iperf3 run: {(likely_limit(best, cap0) if best else '') or 'n/a'}.")

    quick = meta["mode"] == "quick"
    L = [START, "", "## WAN paths (netlab)" + (" — QUICK RUN" if quick else ""), ""]
    if quick:
        L += [f"**This is a quick run (`--quick`): {meta['perf_time']} s per memory-to-memory run and a "
              f"{meta['disk_mib']} MiB file, one run each; numbers are indicative only.**", ""]
    L += [f"Generated by `bench/wan.sh{' --quick' if quick else ''}{' --write' if meta.get('write') == '1' else ''}` "
          f"on {meta['date']}; see `bench/README.md`. One run of each configuration (no medians).", ""]

    # Summary across scenarios.
    L += ["### Summary (Mbit/s)", "",
          "| tool | " + " | ".join(s["title"] for s in scens) + " |",
          "| --- | " + " | ".join("---:" for _ in scens) + " |"]
    for kind, rid, label in labels:
        L.append(f"| {label} | " + " | ".join(mbit(row_for(s['id'], rid)) for s in scens) + " |")
    L.append("")
    L += ["`~` marks a copy killed at its time limit; its rate is the data that had crossed the path by "
          "then divided by the time (not verified). The first six rows are memory to memory, the rest "
          "disk to disk.", ""]
    L += [t50_goal(s) for s in scens if s["id"] == "t50"]
    if L[-1] != "":
        L.append("")

    # Setup.
    st0 = None
    if scens:
        try:
            st0 = json.load(open(os.path.join(work, f"status-{scens[0]['id']}-start.json")))
        except OSError:
            pass
    sysctl = st0["sysctls"]["A"] if st0 else {}
    L += ["### Setup", "",
          "- Two network namespaces on this one machine, host A (client) and host B (server), joined by "
          "`netlab`'s user-space path emulator (RTT split evenly between directions, rate limit, "
          "drop-tail queue of one bandwidth-delay product, random loss per packet and direction). "
          "Every client command runs in A as `netlab --lab LAB exec A CMD`, every server in B; all "
          "connect to B's path-0 address 10.47.0.2.",
          f"- **MTU {meta['mtu']} on every scenario.** The emulator moves about 1.1 Gbit/s at MTU 1500 "
          "on this 2-core machine (about 4.7 Gbit/s at MTU 9000), so at MTU 1500 the 1 Gbit/s paths "
          "would be limited by the emulator, not by the configured rate. Rates are not scaled. With "
          "jumbo frames a 0.01% per-packet loss is about 6 times fewer losses per byte than at MTU 1500.",
          "- **Two-path scenario:** every tool, tern included, uses only path 0 (1000 Mbit/s x 50 ms): "
          "tern currently connects to one address. The capacity column counts both paths (1250 Mbit/s), "
          "so 0.80 is the best any tool here could reach.",
          f"- Congestion control: `{sysctl.get('net.ipv4.tcp_congestion_control', '?')}` (the namespace "
          "default; it cannot be changed per namespace here). No run chose another (iperf3 reports its "
          "sender's algorithm, shown in the cc column; the other tools use the default).",
          f"- TCP buffers in force in both hosts: `tcp_rmem` = {sysctl.get('net.ipv4.tcp_rmem', '?').split()}, "
          f"`tcp_wmem` = {sysctl.get('net.ipv4.tcp_wmem', '?').split()} (inherited, not tuned), "
          f"`net.core.rmem_max` = `net.core.wmem_max` = {int(meta['rmem_max']) // 1048576} MiB "
          "(read-only inside a namespace). So an autotuned stream can keep at most about 4 MiB in "
          "flight (send side), i.e. ~4 MiB per RTT: ~670 Mbit/s at 50 ms, ~335 at 100 ms, ~186 at "
          "180 ms; and `iperf3 -w 4M` / `globus-url-copy -tcp-bs 4M` ask for no more than the cap "
          "allows (a larger request would be cut to 4 MiB silently). Single-stream tools are limited "
          "by this, not by the path.",
          "- Memory to memory: iperf3 reports `end.sum_received.bits_per_second` over its `-t` "
          f"{meta['perf_time']} s (connection setup excluded); tern perf reports `throughput_bps` "
          "(payload the daemon verified, over the whole session, setup included); GridFTP moves "
          "a fixed size (half the path's capacity times the same time; 4 Gbit/s assumed on the LAN) "
          "from B's /dev/zero to A's /dev/null (`-len`), timed by wall clock including login, "
          "so its data flows B -> A, the others A -> B (the paths are symmetric).",
          f"- Disk to disk: one {meta['disk_mib']} MiB file of random data, A -> B, timed by wall clock "
          "from start to exit of the client (connection setup, authentication and end-to-end checks "
          "included) and checked with `cmp`. The page cache is not dropped (the source is read from "
          "memory; at these rates the path, not the disk, is the limit). A copy still running after "
          f"{meta['disk_timeout']} s is killed and marked `~` (tern cp gets {meta['tern_disk_timeout']} s "
          "and a killed tern copy counts as failed). Mbit/s = 10^6 bit/s; capacity = the configured rate.",
          "- iperf3 \"wizard\": the best of `-P` " + "/".join(meta["wiz_streams"].split())
          + " x `-w` default/4M (all listed under each table).",
          "- CPU s/GB = user + system CPU seconds per 10^9 bytes moved: client (A, `/usr/bin/time`, "
          "children included) + server (B, from `/proc/PID/stat` of the server, reaped children "
          "included). The emulator's own CPU is not counted. `x tern default` compares with "
          "`tern perf` default (memory rows) or `tern cp` default (disk rows); above 1 means faster "
          "than tern.",
          f"- busy % machine / emulator: the machine's busy share of all its {meta['nproc']} cores "
          "over the run (`/proc/stat`: all but idle and iowait, from just before the client starts to "
          "its exit; everything counts: both hosts, the emulator, the kernel) / the emulator's CPU over "
          "the run in % of one core (`/proc/PID/stat` of `netlab emulate`; one thread per direction, so "
          "it can pass 100). **Likely limit** (a reading, not a proof): `path (NN % of capacity)` when "
          f"the rate is at least {100 * PATH_SHARE:.0f} % of path 0's capacity (the path every tool "
          "uses; never on the LAN, which has no rate limit), with the machine's busy share beside it "
          f"when that is {BUSY_PCT} % or more; else `CPU (machine NN % busy)` when the machine was at "
          f"least {BUSY_PCT} % busy; else, for tern, the limit its own `--json` report names "
          "(`tuning.limit`: `network`, `send_buffer`, `receive_window`, `receiver`, `application`); "
          "else `?`. Disk rows' times include setup and verification, so they reach the path's share "
          "less often.",
          "- The runs within a scenario are interleaved (iperf3, tern, the iperf3 sweep with tern "
          "-P 8 after its -P 1 runs, GridFTP; then tern cp, GridFTP, tern cp -P 8, GridFTP tuned, xrdcp, "
          "rsync, scp), one run each.", ""]

    L += ["### Machine and tools", "", "| | |", "| --- | --- |",
          f"| CPU | {meta['cpu']} ({meta['nproc']} cores), {meta['memory']} |",
          f"| kernel | {meta['kernel']} |",
          f"| load average (1/5/15 min) at start / end | {meta['load_start']} / {meta['load_end']} |",
          f"| tern | {meta['tern_version']} (working tree at {meta['tern_commit']}; binary built {meta['tern_built']}) |",
          f"| netlab | {meta['netlab_version']} |",
          f"| iperf3 | {meta['iperf3_version']} |",
          f"| GridFTP | globus-gridftp-server-progs / globus-gass-copy-progs {meta['gridftp_version']} |",
          f"| xrootd | {meta['xrootd_version']} |",
          f"| rsync | {meta['rsync_version']} |",
          f"| ssh | {meta['ssh_version']}; cipher {meta.get('ssh_cipher') or 'unknown'} |", ""]

    # Peers.
    missing = [t for t in ("iperf3", "gridftp", "xrootd", "rsync", "scp") if meta.get("have_" + t) != "1"]
    L += ["### Peers", ""]
    pf = meta.get("peers_file")
    if pf and os.path.exists(pf):
        L += ["From `bench/install-peers.sh` (`bench/peers-status.txt`):", "", "```"]
        L += [l.rstrip("\n") for l in open(pf)]
        L += ["```", ""]
    if missing:
        L += ["Not available to this run: " + ", ".join(missing) + ".", ""]
    else:
        L += ["All peers were installed and ran (failures, if any, are listed per scenario).", ""]

    for s in scens:
        sc, cap, cap0 = s["id"], s["cap"], s["cap0"]
        L += [f"### {s['title']}", "", f"`{s['up']}`"]
        try:
            st = json.load(open(os.path.join(work, f"status-{sc}.json")))
            drops = []
            for p in st["paths"]:
                ab, ba = p["a_to_b"], p["b_to_a"]
                drops.append(f"path {p['index']}: A->B {ab['packets']} packets, {ab['queue_drops']} queue "
                             f"drops, {ab['random_drops']} random drops; B->A {ba['packets']} packets, "
                             f"{ba['queue_drops'] + ba['random_drops']} drops")
            L += ["", "Emulator counters over the whole scenario: " + "; ".join(drops) + "."]
        except (OSError, KeyError, ValueError):
            pass
        capnote = "unlimited (no ratio)" if cap == 0 else f"{cap:.0f} Mbit/s"
        L += ["", f"Capacity: {capnote}.", "",
              "| tool | command (in A) | Mbit/s | x capacity | x tern default | CPU s/GB (A + B) | cc "
              "| busy % machine / emulator | likely limit |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
        base = {"mem": get(sc, "tern-perf-default"), "disk": get(sc, "tern-cp-default")}
        notes = []
        for kind, rid, label in labels:
            r = row_for(sc, rid)
            if r is None:
                continue
            b = base[kind]
            capr = "-" if cap == 0 or math.isnan(r["bps"]) else f"{r['bps'] / 1e6 / cap:.2f}"
            tr = ratio(r["bps"], b["bps"] if b else None)
            lab = label
            if rid == "wizard":
                lab = f"iperf3 \"wizard\" (best of {len(wiz_ids(sc))})"
            L.append(f"| {lab} | `{clean(r['cmd'])}` | {mbit(r)} | {capr} | {tr} | {cpu_per_gb(r)} | {r['cc']} "
                     f"| {cpu_shares(r)} | {likely_limit(r, cap0)} |")
            if r["note"]:
                notes.append(f"{label}: {r['note']}")
        wz = [r for r in wiz_ids(sc)]
        if wz:
            L += ["", "iperf3 sweep: " + ", ".join(
                sweep_name(r) + " "
                + ("failed" if math.isnan(r["bps"]) else "%.0f" % (r["bps"] / 1e6)) for r in wz) + " Mbit/s."]
            for r in wz:
                if r["note"]:
                    notes.append(f"{r['id']}: {r['note']}")
        for rid in ("tern-perf-default", "tern-perf-P8-clear"):
            try:
                d = json.load(open(os.path.join(work, "logs", f"{sc}-{rid}.json")))
                nt = d.get("network_throughput_bps")
                if nt:
                    L += ["", f"{rid}: network_throughput_bps {nt / 1e6:.0f} Mbit/s "
                          f"(throughput_bps {d['throughput_bps'] / 1e6:.0f}; elapsed {d.get('elapsed_s', 0):.2f} s, "
                          f"network {d.get('network_elapsed_s', 0):.2f} s, streams {d.get('streams', '?')})."]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        if notes:
            L += ["", "Failures and partial runs:", ""] + [f"- {n}" for n in notes]
        L.append("")

    if events:
        L += ["### Events", ""] + [f"- {e}" for e in events] + [""]
    L += ["### Servers (in B)", "", "`$WORK` is the script's temporary directory.", "", "```"]
    seen = []
    for c in server_cmds:
        c = clean(c)
        for s_ in scens:
            c = c.replace(f"-{s_['id']}.log", "-SCENARIO.log")
        if c not in seen:
            seen.append(c)
    L += seen + ["```", ""]
    try:
        L += ["`$WORK/xrd/xrootd.cfg`:", "", "```"]
        L += [clean(l.rstrip("\n")) for l in open(os.path.join(work, "xrd", "xrootd.cfg"))] + ["```", ""]
    except OSError:
        pass
    L += ["The GridFTP server needs B's `/etc/hosts` to name this machine (`/etc/netns/LAB-b/hosts`, "
          "created for the run and removed after). sshd uses the configuration of `bench/loopback.sh` "
          "(own host and client keys, root login by key only), listening on 10.47.0.2:2222.", "", END, ""]
    with open(out_path, "w") as f:
        f.write("\n".join(L))
    print("\n".join(L[:L.index("### Setup")]))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--splice":
        splice("wan", sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        main(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)
