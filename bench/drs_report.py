#!/usr/bin/env python3
"""Report and plot for bench/drs.sh (the dynamic-right-sizing experiment).

    drs_report.py WORKDIR OUT.md SVG LINK   write the report section and the plot (to SVG, referenced
                                            from the report as LINK) from drs.sh's results
    drs_report.py --splice SECTION FILE     put SECTION (which has the markers) into FILE, replacing
                                            what lies between the markers, or appending it if FILE has none
    drs_report.py --mem SS-A SS-B MINBYTES  peak buffer sums of one run from the `ss -tmi` samples of
                                            host A (sender) and host B (receiver); prints
                                            tb w rb connections cc samples (tab-separated)

Standard library only.
"""
import html
import json
import math
import os
import re
import sys

from reportlib import command_cleaner, markers, num, read_tsv, splice

START, END = markers("drs")
MIB = 1048576.0

# ------------------------------------------------------------ ss sampling

CC_NAMES = {"bbr", "bbr2", "bbr3", "cubic", "reno", "bic", "htcp", "dctcp", "vegas", "veno", "westwood",
            "highspeed", "hybla", "illinois", "lp", "scalable", "yeah", "nv", "cdg"}


def parse_ss(path):
    """Samples from drs.sh's sampler: '@ TIME', `ss -Htmi` lines, '.'.
    Returns a list of {(local, peer): info-dict}."""
    samples, cur, key = [], None, None
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return samples
    for line in lines:
        if line.startswith("@ "):
            cur, key = {}, None
        elif line.strip() == ".":
            if cur is not None:
                samples.append(cur)
            cur, key = None, None
        elif cur is None or not line.strip():
            continue
        elif line[0] in " \t":
            if key is not None:
                cur[key] = parse_info(line)
        else:
            f = line.split()
            if len(f) >= 4:
                key = (f[-2], f[-1])
                cur[key] = {}
    return samples


def parse_info(line):
    d = {}
    m = re.search(r"skmem:\(([^)]*)\)", line)
    if m:
        for part in m.group(1).split(","):
            mm = re.match(r"([a-z]+)(\d+)$", part)
            if mm:
                d["sk_" + mm.group(1)] = int(mm.group(2))
    for k in ("bytes_acked", "bytes_sent", "bytes_received"):
        mm = re.search(r"\b" + k + r":(\d+)", line)
        if mm:
            d[k] = int(mm.group(1))
    for tok in line.split():
        if tok in CC_NAMES:
            d["cc"] = tok
            break
    return d


def peak_sum(samples, field, counted):
    best = math.nan
    for s in samples:
        tot = sum(info.get(field, 0) for k, info in s.items() if k in counted)
        if any(k in counted for k in s):
            best = tot if math.isnan(best) else max(best, tot)
    return best


def data_connections(samples, byte_fields, min_bytes):
    """Connections not present in the first sample (taken before the run) that
    carried at least min_bytes: the run's data connections, not its control one."""
    if not samples:
        return set()
    before = set(samples[0])
    most = {}
    for s in samples[1:]:
        for k, info in s.items():
            if k in before:
                continue
            most[k] = max(most.get(k, 0), max(info.get(f, 0) for f in byte_fields))
    return {k for k, v in most.items() if v >= min_bytes}


def mem_main(path_a, path_b, min_bytes):
    a, b = parse_ss(path_a), parse_ss(path_b)
    da = data_connections(a, ("bytes_acked", "bytes_sent"), min_bytes)
    db = data_connections(b, ("bytes_received",), min_bytes)
    tb, w, rb = peak_sum(a, "sk_tb", da), peak_sum(a, "sk_w", da), peak_sum(b, "sk_rb", db)
    ccs = sorted({info["cc"] for s in a for k, info in s.items() if k in da and "cc" in info})
    fmt = lambda v: "nan" if math.isnan(v) else "%d" % v
    print("\t".join([fmt(tb), fmt(w), fmt(rb), str(len(da)), "+".join(ccs) or "-", str(len(a))]))


# ------------------------------------------------------------------ report


def ok(x):
    return x is not None and not (isinstance(x, float) and math.isnan(x))


COLS = ["sc", "kind", "tool", "config", "id", "streams", "window", "cmd", "bps", "bytes", "wall", "cc",
        "tb", "w", "rb", "conns", "samples", "streams_used", "note"]
NUMS = {"bps", "bytes", "wall", "tb", "w", "rb", "conns", "samples"}
CONFIGS = [("locked64k", "locked 64 KiB", "#8c8c8c"), ("autotune1", "kernel autotuning, 1 stream", "#0072B2"),
           ("handbest", "hand-tuned best", "#E69F00"), ("tern", "tern, no flags", "#009E73")]


def load(work):
    meta = {}
    for k, *v in read_tsv(os.path.join(work, "meta.tsv"), missing_ok=True):
        meta[k] = v[0] if v else ""
    rows = []
    for r in read_tsv(os.path.join(work, "results.tsv"), missing_ok=True):
        r += [""] * (len(COLS) - len(r))
        d = dict(zip(COLS, r))
        for k in NUMS:
            d[k] = num(d[k])
        rows.append(d)
    scens = []
    for s in read_tsv(os.path.join(work, "scenarios.tsv"), missing_ok=True):
        scens.append(dict(id=s[0], title=s[1], up=s[2], rate=num(s[3]), rtt=num(s[4]), bdp=num(s[5])))
    sysctls = {}
    for sc, host, k, *v in read_tsv(os.path.join(work, "sysctls.tsv"), missing_ok=True):
        sysctls.setdefault(sc, {}).setdefault(host, {})[k] = v[0] if v else ""
    return meta, rows, scens, sysctls


class View:
    """Which run stands for each configuration in a scenario and kind."""

    def __init__(self, rows):
        self.rows = rows

    def sel(self, sc, kind, **kw):
        return [r for r in self.rows if r["sc"] == sc and r["kind"] == kind
                and all(r[k] == v for k, v in kw.items())]

    @staticmethod
    def best(rs):
        good = [r for r in rs if ok(r["bps"])]
        return max(good, key=lambda r: r["bps"]) if good else (rs[0] if rs else None)

    def pick(self, sc, kind, cfg):
        if cfg == "locked64k":
            rs = self.sel(sc, kind, tool="tern", config="locked64k")
            if rs and ok(rs[0]["bps"]):
                return rs[0]
            alt = self.sel(sc, kind, tool="iperf3", config="locked64k")
            return alt[0] if alt and ok(alt[0]["bps"]) else (rs[0] if rs else None)
        if cfg == "autotune1":  # the best kernel-autotuned single stream, any tool, any cc
            return self.best(self.sel(sc, kind, config="autotune1"))
        if cfg == "handbest":
            if kind == "mem":
                return self.best(self.sel(sc, kind, tool="tern", config="sweep"))
            rs = self.sel(sc, kind, tool="tern", config="handbest")
            return rs[0] if rs else None
        if cfg == "tern":
            rs = self.sel(sc, kind, tool="tern", config="tern")
            return rs[0] if rs else None
        return None


def mbit(r):
    if r is None:
        return "-"
    return "failed" if not ok(r["bps"]) else "%.0f" % (r["bps"] / 1e6)


def mib(v):
    return "-" if not ok(v) else "%.1f" % (v / MIB) if v >= 0.1 * MIB else "%.2f" % (v / MIB)


def ratio(a, b, fmt="%.2f"):
    if not ok(a) or not ok(b) or b == 0:
        return "-"
    return fmt % (a / b)


def verdict(value, goal, ge):
    if not ok(value):
        return "n/a"
    return "pass" if (value >= goal if ge else value <= goal) else "**FAIL**"


def win_label(r):
    w = r["window"]
    return {"kernel": "kernel autotuning", "auto": "auto", "libdrs": "libdrs"}.get(w, w)


def main(work, out_path, svg_path, svg_link):
    meta, rows, scens, sysctls = load(work)
    v = View(rows)
    quick = meta.get("mode") == "quick"
    clean = command_cleaner(meta, [(meta.get("work", "@@") + "/bin/drs_xfer", "drs_xfer")])

    L = [START, "", "## Dynamic right-sizing experiment (netlab)" + (" — QUICK RUN" if quick else ""), ""]
    if quick:
        L += [f"**This is a quick run (`--quick`): {meta.get('perf_time')} s per memory-to-memory run, a "
              f"{meta.get('disk_mib')} MiB file and a reduced sweep; numbers are indicative only.**", ""]
    L += [f"Generated by `bench/drs.sh{' --quick' if quick else ''}{' --write' if meta.get('write') == '1' else ''}` "
          f"on {meta.get('date')}; see `bench/README.md` (section `bench/drs.sh`). One run per configuration "
          "(no medians), all in this one run of the script.", "",
          f"![Throughput and send-buffer memory per scenario]({svg_link})", ""]

    # ---------------------------------------------------------------- goals
    checks = []
    L += ["### Goals (issue 4)", "",
          "tern with no flags against the hand-tuned best of the streams x window sweep (goal: at least 0.95x), "
          "against the best kernel-autotuned single stream (goal: at least 1x), and its peak send-buffer "
          "memory summed over its streams against the path's BDP (goal: at most 2.5x).", "",
          "| scenario | | tern Mbit/s | hand-tuned best Mbit/s (streams x window) | tern / best | goal >= 0.95 "
          "| autotuned 1 stream Mbit/s (which) | tern / autotuned | goal >= 1 | tern send buffer MiB / BDP MiB "
          "| x BDP | goal <= 2.5 |",
          "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | --- |"]
    for s in scens:
        for kind, kl in (("mem", "memory"), ("disk", "disk")):
            t, hb, at = v.pick(s["id"], kind, "tern"), v.pick(s["id"], kind, "handbest"), v.pick(s["id"], kind, "autotune1")
            if t is None and hb is None and at is None:
                continue
            tb = t["bps"] if t else math.nan
            r1 = tb / hb["bps"] if hb and ok(tb) and ok(hb["bps"]) and hb["bps"] else math.nan
            r2 = tb / at["bps"] if at and ok(tb) and ok(at["bps"]) and at["bps"] else math.nan
            mem = t["tb"] / s["bdp"] if t and ok(tb) and ok(t["tb"]) else math.nan
            c1, c2, c3 = verdict(r1, 0.95, True), verdict(r2, 1.0, True), verdict(mem, 2.5, False)
            checks += [c1, c2, c3]
            hbl = f"{mbit(hb)} ({hb['streams']} x {hb['window']})" if hb and ok(hb["bps"]) else mbit(hb)
            atl = f"{mbit(at)} ({at['tool']}{', ' + at['cc'] if at['cc'] not in ('', '-') else ''})" if at and ok(at["bps"]) else mbit(at)
            tbm = f"{mib(t['tb'])} / {s['bdp'] / MIB:.1f}" if t and ok(tb) else "-"
            L.append(f"| {s['id']} | {kl} | {mbit(t)} | {hbl} | {ratio(r1, 1, '%.3f')} | {c1} | {atl} | {ratio(r2, 1)} | {c2} "
                     f"| {tbm} | {ratio(mem, 1)} | {c3} |")
    npass, nfail, nna = checks.count("pass"), checks.count("**FAIL**"), checks.count("n/a")
    L += ["", f"**{npass} of {len(checks)} checks pass, {nfail} fail, {nna} could not be evaluated (a run failed).**"
          + (" All goals are met in this run." if checks and npass == len(checks) else ""), ""]

    # -------------------------------------------------------------- summary
    L += ["### Summary", "",
          "Mbit/s, and in brackets the peak send-buffer memory (sum over the run's data connections) "
          "divided by the path's BDP.", "",
          "| configuration | " + " | ".join(f"{s['id']} {k}" for s in scens for k in ("mem", "disk")) + " |",
          "| --- | " + " | ".join("---:" for _ in scens for _k in (0, 1)) + " |"]

    def cell(r, s):
        if r is None:
            return "-"
        if not ok(r["bps"]):
            return "failed"
        m = r["tb"] / s["bdp"] if ok(r["tb"]) else math.nan
        return f"{r['bps'] / 1e6:.0f} ({'-' if not ok(m) else '%.2f' % m})"

    summary_rows = [
        ("locked 64 KiB, tern (`--streams 1 --window 64K`)", lambda sc, k: (v.sel(sc, k, tool="tern", config="locked64k") or [None])[0]),
        ("locked 64 KiB, iperf3 (`-P 1 -w 64K`)", lambda sc, k: (v.sel(sc, k, tool="iperf3", config="locked64k") or [None])[0]),
        ("kernel autotuning, tern (`--streams 1 --window kernel`)", lambda sc, k: (v.sel(sc, k, tool="tern", config="autotune1") or [None])[0]),
        ("kernel autotuning, iperf3 (`-P 1`)", lambda sc, k: (v.sel(sc, k, id="iperf3-autotune1") or [None])[0]),
        ("kernel autotuning, iperf3 cubic (`-P 1 -C cubic`)", lambda sc, k: (v.sel(sc, k, id="iperf3-autotune1-cubic") or [None])[0]),
        ("hand-tuned best, tern (sweep; disk: the memory sweep's best)", lambda sc, k: v.pick(sc, k, "handbest")),
        ("best of the iperf3 sweep (-w capped at 4 MiB)", lambda sc, k: View.best(v.sel(sc, k, tool="iperf3", config="sweep"))),
        ("**tern, no flags**", lambda sc, k: v.pick(sc, k, "tern")),
    ]
    for label, f in summary_rows:
        L.append(f"| {label} | " + " | ".join(cell(f(s["id"], k), s) for s in scens for k in ("mem", "disk")) + " |")
    L += ["", "`-`: not run in that scenario or kind (iperf3 runs memory to memory only; the iperf3 sweep "
          "only on the paths with a fixed BDP).", ""]

    # ---------------------------------------------------------------- setup
    sc0 = scens[0]["id"] if scens else None
    sy = sysctls.get(sc0, {}).get("A", {}) if sc0 else {}
    sweep_n = meta.get("sweep_streams", "").split()
    sweep_f = meta.get("sweep_factors", "").split()
    L += ["### Setup and method", "",
          "- **Paths.** `netlab` joins two network namespaces on this machine, host A (sender) and host B "
          "(receiver), through a user-space emulator: RTT split evenly between directions, rate limit, a "
          "drop-tail queue of one BDP, random loss per packet and direction. MTU "
          f"{meta.get('mtu')} on every path (the emulator moves only ~1.1 Gbit/s at MTU 1500 on 2 cores). "
          "`shift` starts at 1 Gbit/s x 100 ms and, a third into every run (5 s of a 15 s run; a third of "
          f"the expected time of a copy), a background `netlab set {meta.get('shift_to')}` changes it to "
          f"500 Mbit/s x 30 ms, like a reroute; the path is set back (`netlab set {meta.get('shift_back')}`) "
          "before the next run. Its BDP is that of the initial path.",
          "- **BDP** = rate x RTT of the scenario (1 Gbit/s x 50 ms = 6.25 MB = 5.96 MiB).",
          "- **Configurations.** `locked64k`: SO_SNDBUF/SO_RCVBUF locked at 64 KiB, one stream (the old "
          "default). `autotune1`: one stream, Linux autotuning left alone. Hand-tuned sweep: tern with "
          f"`--streams N --window W` for N in {{{', '.join(sweep_n)}}} and per-stream W = "
          f"{{{', '.join(f + ' x BDP/N' if f != '1' else 'BDP/N' for f in sweep_f)}}}, rounded up to the next "
          "2^k or 1.5 x 2^k KiB, at least 64 KiB; `handbest` is its fastest run. `tern`: no flags "
          "(streams, window and congestion control automatic). Memory to memory tern runs "
          "`tern perf --protect clear` (plain TCP) and reports `throughput_bps` (payload the daemon verified "
          "over the whole session, setup included). iperf3 runs the same configurations as a neutral reference "
          "(`-w` sets SO_SNDBUF and SO_RCVBUF at both ends; it cannot exceed `net.core.wmem_max` = 4 MiB in the "
          "namespaces, so its sweep runs N in {" + ", ".join(meta.get("iperf_sweep", "").split()) + "} with W = 2 x BDP/N capped at 4 MiB, noted per run) and reports "
          "`end.sum_received.bits_per_second` (setup excluded). The autotuned iperf3 stream also runs with "
          "`-C cubic`.",
          f"- **Disk to disk.** `tern cp` (default protection, `private`: TLS) of a {meta.get('disk_mib')} MiB file "
          "of random data from A's disk to a `tern serve --root` in B, page cache dropped before each copy "
          "(`sync; echo 3 > /proc/sys/vm/drop_caches`), timed by wall clock from start to exit of the client, "
          "and compared with `cmp` after every copy. A configuration whose memory-to-memory rate in the same "
          f"scenario says it would take longer than about {meta.get('disk_secs')} s copies a prefix of the file "
          "sized for that time instead (noted per run; at least 4 MiB). `handbest` copies with the best "
          "streams x window of the scenario's memory sweep only.",
          "- **Buffer memory.** While each run lasts, a bounded loop in each namespace runs "
          "`ss -Htmi state established` on the run's port every 100 ms (A: destination port, the sender; "
          "B: source port, the receiver). A run's data connections are those not present in the first "
          "sample (taken before the run starts) that carried at least "
          f"{int(num(meta.get('data_min_bytes', '1000000')) / 1e6)} MB (bytes_acked in A, bytes_received in B); "
          "this leaves out the control connection of tern and iperf3. Per sample the skmem fields are "
          "summed over them, and the peak over the run is reported: `tb` (send buffer size, `sk_sndbuf`), "
          "`w` (bytes queued for sending, `sk_wmem_queued`) and, in B, `rb` (receive buffer size). "
          "The kernel doubles a requested SO_SNDBUF to make room for its bookkeeping, so `iperf3 -w W` "
          "shows as tb = 2W; compare the tb columns, not the requested windows. x BDP = peak send buffer / BDP. "
          "tern's JSON also reports its own `send_buffer_peak_bytes` (under `tuning`), a cross-check.",
          f"- **Congestion control.** The namespace default is `{sy.get('net.ipv4.tcp_congestion_control', '?')}` "
          "and cannot be changed per namespace (`tcp_allowed_congestion_control` = "
          f"`{sy.get('net.ipv4.tcp_allowed_congestion_control', '?')}`); a socket can choose another as root "
          "(`iperf3 -C cubic`, tern `--cc`). The cc column is what `ss` showed on the run's data "
          "connections; if ss caught none, what the tool reported (iperf3 `sender_tcp_congestion`, tern "
          "`tuning`), else the namespace default.",
          f"- **Host limits in the namespaces:** `tcp_rmem` = `{sy.get('net.ipv4.tcp_rmem', '?')}`, "
          f"`tcp_wmem` = `{sy.get('net.ipv4.tcp_wmem', '?')}`, `net.core.rmem_max` = "
          f"`{sy.get('net.core.rmem_max', '?')}`, `net.core.wmem_max` = `{sy.get('net.core.wmem_max', '?')}` "
          "(read-only inside a namespace). An autotuned sender therefore keeps at most ~4 MiB in flight per "
          "stream; tern, as root, can set larger buffers with SO_SNDBUFFORCE/SO_RCVBUFFORCE.",
          "- **Order.** Within a scenario: iperf3 and tern locked64k, iperf3 and tern autotune1, iperf3 cubic, "
          "then the sweep (tern's windows, then iperf3, per stream count) with tern's no-flag run in its "
          "middle; then the copies (locked64k, autotune1, handbest, tern); then the C example.", ""]

    # ------------------------------------------------------- machine and tools
    L += ["### Machine and tools", "", "| | |", "| --- | --- |",
          f"| CPU | {meta.get('cpu')} ({meta.get('nproc')} cores), {meta.get('memory')} |",
          f"| kernel | {meta.get('kernel')} |",
          f"| load average (1/5/15 min) at start / end | {meta.get('load_start')} / {meta.get('load_end', '?')} |",
          f"| tern | {meta.get('tern_version')} (working tree at {meta.get('tern_commit')}; binary built {meta.get('tern_built')}) |",
          f"| netlab | {meta.get('netlab_version')} |",
          f"| iperf3 | {meta.get('iperf3_version')} |",
          f"| C compiler | {meta.get('gcc_version')} |", ""]
    L += ["Sysctls inside the namespaces (host A; B is the same unless shown):", "",
          "| scenario | " + " | ".join(k for k in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.rmem_max",
                                                    "net.core.wmem_max", "net.ipv4.tcp_congestion_control")) + " |",
          "| --- | --- | --- | --- | --- | --- |"]
    for s in scens:
        h = sysctls.get(s["id"], {})
        a, b = h.get("A", {}), h.get("B", {})
        cells = []
        for k in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.rmem_max", "net.core.wmem_max",
                  "net.ipv4.tcp_congestion_control"):
            c = f"`{a.get(k, '?')}`"
            if b.get(k, a.get(k)) != a.get(k):
                c += f" (B: `{b.get(k)}`)"
            cells.append(c)
        L.append(f"| {s['id']} | " + " | ".join(cells) + " |")
    L.append("")

    # ---------------------------------------------------------- per scenario
    for s in scens:
        sc = s["id"]
        L += [f"### {sc}: {s['title']}", "", f"`{s['up']}`; BDP {s['bdp'] / 1e6:.2f} MB ({s['bdp'] / MIB:.2f} MiB)."]
        try:
            st = json.load(open(os.path.join(work, f"status-{sc}.json")))
            for p in st["paths"]:
                ab, ba = p["a_to_b"], p["b_to_a"]
                L += ["", f"Emulator counters over the whole scenario: A->B {ab['packets']} packets, "
                      f"{ab['queue_drops']} queue drops, {ab['random_drops']} random drops; B->A {ba['packets']} "
                      f"packets, {ba['queue_drops'] + ba['random_drops']} drops."]
        except (OSError, KeyError, ValueError, TypeError):
            pass
        L += ["", "| kind | tool | configuration | streams asked / seen | window | cc | Mbit/s | x rate "
              "| send buf peak MiB | queued peak MiB | recv buf peak MiB (B) | send buf x BDP | note |",
              "| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        hb = v.pick(sc, "mem", "handbest")
        for r in [r for r in rows if r["sc"] == sc]:
            cfg = r["config"]
            if r is hb and ok(r["bps"]):
                cfg = "sweep (**best**)"
            seen = r["streams_used"] if r["streams_used"] not in ("", "-") else "?"
            conns = "%d" % r["conns"] if ok(r["conns"]) else "?"
            xr = "-" if not ok(r["bps"]) else "%.2f" % (r["bps"] / 1e6 / s["rate"])
            xb = "-" if not ok(r["tb"]) or not ok(r["bps"]) else "%.2f" % (r["tb"] / s["bdp"])
            L.append(f"| {r['kind']} | {r['tool']} | {cfg} | {r['streams']} / {seen} ({conns} conn.) | {win_label(r)} "
                     f"| {r['cc']} | {mbit(r)} | {xr} | {mib(r['tb'])} | {mib(r['w'])} | {mib(r['rb'])} | {xb} "
                     f"| {r['note']} |")
        L += ["", "streams seen: as the tool reported them (`streams` in tern's JSON); conn.: data connections "
              "that `ss` saw."]
        # tern's own account of its no-flag runs
        for rid in ("tern-default", "tern-cp-default"):
            try:
                d = json.load(open(os.path.join(work, "logs", f"{sc}-{rid}.json")))
            except (OSError, ValueError):
                continue
            t = d.get("tuning") or {}
            bits = [f"streams {d.get('streams', '?')}"]
            for k in ("network_throughput_bps",):
                if isinstance(d.get(k), (int, float)):
                    bits.append(f"{k} {d[k] / 1e6:.0f} Mbit/s")
            if t.get("congestion_control"):
                bits.append(f"congestion control {t['congestion_control']}")
            if t.get("limit"):
                bits.append(f"limit {t['limit']}")
            L += ["", f"tern's report for `{rid}`: " + ", ".join(bits) + "."]
            if t.get("summary"):
                L += ["", "> " + str(t["summary"]).replace("\n", " ")]
            if t.get("actions"):
                L += ["", "Actions: " + "; ".join(str(a) for a in t["actions"]) + "."]
            extra = {k: t[k] for k in t if k not in ("limit", "summary", "sysctls", "actions", "streams", "host",
                                                      "congestion_control")}
            if extra:
                txt = json.dumps(extra, separators=(",", ":"))
                L += ["", "Other `tuning` fields: `" + (txt if len(txt) <= 600 else txt[:600] + "…") + "`"]
        L.append("")

    # ------------------------------------------------------------ C example
    crow = [r for r in rows if r["kind"] == "c"]
    if crow:
        L += ["### libdrs C example", "",
              "`crates/drs/examples/c/drs_xfer.c`, built with gcc against `libtern_drs.so`: "
              "`drs_xfer recv PORT` in B, `drs_xfer send 10.47.0.2 PORT MIB [--drs]` in A, one TCP stream, "
              "plain `write()`s of 1 MiB; with `--drs` libdrs attaches to the socket and tunes it every 100 ms. "
              f"The size is what iperf3's autotuned stream moved in about {meta.get('c_secs')} s on that path; "
              "Mbit/s as the sender prints it (time to the receiver's close). Memory as above.", "",
              "| scenario | MiB | without libdrs Mbit/s | with libdrs Mbit/s | with / without | send buf peak MiB without / with | x BDP with | libdrs says |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for s in scens:
            p = (v.sel(s["id"], "c", config="plain") or [None])[0]
            d = (v.sel(s["id"], "c", config="drs") or [None])[0]
            if p is None and d is None:
                continue
            size = next((r["bytes"] for r in (p, d) if r is not None and ok(r["bytes"])), math.nan)
            say = d["note"] if d is not None and d["note"] else "-"
            L.append(f"| {s['id']} | {'-' if not ok(size) else '%.0f' % (size / MIB)} | {mbit(p)} | {mbit(d)} "
                     f"| {ratio(d['bps'] if d else math.nan, p['bps'] if p else math.nan)} "
                     f"| {mib(p['tb'] if p else math.nan)} / {mib(d['tb'] if d else math.nan)} "
                     f"| {ratio(d['tb'] if d and ok(d['bps']) else math.nan, s['bdp'])} | {say} |")
        L.append("")

    events = [l.strip() for l in open(os.path.join(work, "events.txt")) if l.strip()] if os.path.exists(
        os.path.join(work, "events.txt")) else []
    if events:
        L += ["### Events", ""] + [f"- {e}" for e in events] + [""]

    # ------------------------------------------------------------- commands
    server_cmds = [clean(l.strip()) for l in read_lines(os.path.join(work, "server-commands.txt"))]
    L += ["### Commands", "", "<details><summary>Every command line exactly as run (clients in host A as "
          "<code>netlab --lab LAB exec A ...</code>, servers in host B; <code>$WORK</code> is the script's "
          "temporary directory)</summary>", "", "```sh"]
    for s in scens:
        L.append(f"# {s['id']}: {s['up']}")
        if s["id"] == "shift":
            L.append(f"#   a third into each run: netlab set {meta.get('shift_to')}; after it: netlab set {meta.get('shift_back')}")
        for r in [r for r in rows if r["sc"] == s["id"]]:
            L.append(("# " if r["cmd"].startswith("(") else "") + clean(r["cmd"]))
    L += ["# servers (in B)"] + list(dict.fromkeys(server_cmds))
    L += ["# the C example was built with", clean(meta.get("c_build", "")),
          "# memory sampler, in A and in B, for every run (PORT = the run's port; A: dport, B: sport):",
          "# while i < max and no stop file: ss -Htmi state established '( dport = :PORT )'; sleep 0.1",
          "```", "", "</details>", "", END, ""]
    with open(out_path, "w") as f:
        f.write("\n".join(L))
    write_svg(svg_path, scens, v, quick, meta)
    # a short summary on stdout
    print("\n".join(L[:L.index("### Setup and method")]))


def read_lines(path):
    try:
        return [l for l in open(path) if l.strip()]
    except OSError:
        return []


# -------------------------------------------------------------------- plot


def write_svg(path, scens, v, quick, meta):
    groups = [(s, k) for s in scens for k in ("mem", "disk")
              if any(v.pick(s["id"], k, c) is not None for c, _l, _c in CONFIGS)]
    W, left, right = 980, 70, 20
    top1, h1 = 108, 230       # throughput panel
    top2, h2 = top1 + h1 + 90, 200   # memory panel
    H = top2 + h2 + 86
    gw = (W - left - right) / max(1, len(groups))
    bw = min(26.0, gw * 0.8 / len(CONFIGS))
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">tern dynamic right-sizing '
         f'over emulated WAN paths{" (quick run)" if quick else ""}</text>',
         f'<text x="{W / 2}" y="40" text-anchor="middle" fill="#444">bench/drs.sh, {html.escape(meta.get("date", ""))}, '
         f'tern {html.escape(meta.get("tern_commit", ""))}; one run per bar; mem = memory to memory, disk = disk to disk</text>']
    # legend
    lx = left
    for c, label, color in CONFIGS:
        o.append(f'<rect x="{lx}" y="54" width="12" height="12" fill="{color}"/>')
        o.append(f'<text x="{lx + 16}" y="64">{html.escape(label)}</text>')
        lx += 16 + 6.4 * len(label) + 22
    o.append(f'<line x1="{lx}" y1="60" x2="{lx + 22}" y2="60" stroke="#333" stroke-dasharray="4,3"/>')
    o.append(f'<text x="{lx + 26}" y="64">path rate</text>')
    if any(s["id"] == "shift" for s in scens):
        lx += 26 + 6.4 * len("path rate") + 22
        o.append(f'<line x1="{lx}" y1="60" x2="{lx + 22}" y2="60" stroke="#777" stroke-dasharray="1,3"/>')
        o.append(f'<text x="{lx + 26}" y="64">shift: rate after the change</text>')

    def axis(top, h, vmax, step, fmt, title):
        o.append(f'<text x="{left}" y="{top - 12}" font-size="13" font-weight="bold">{html.escape(title)}</text>')
        y = 0.0
        while y <= vmax + 1e-9:
            yy = top + h - h * y / vmax
            o.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{W - right}" y2="{yy:.1f}" stroke="#e4e4e4"/>')
            o.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#444">{fmt(y)}</text>')
            y += step
        o.append(f'<line x1="{left}" y1="{top + h}" x2="{W - right}" y2="{top + h}" stroke="#333"/>')
        o.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#333"/>')

    # panel 1: throughput
    rmax = max([s["rate"] for s in scens] + [1])
    vmax1 = math.ceil(rmax * 1.1 / 200) * 200
    axis(top1, h1, vmax1, 200 if vmax1 <= 1400 else 500, lambda y: f"{y:.0f}", "Throughput (Mbit/s)")
    # panel 2: memory / BDP
    vals = []
    for s, k in groups:
        for c, _l, _col in CONFIGS:
            r = v.pick(s["id"], k, c)
            if r is not None and ok(r["bps"]) and ok(r["tb"]):
                vals.append(r["tb"] / s["bdp"])
    vmax2 = min(8.0, max([3.0] + [x * 1.1 for x in vals]))
    vmax2 = math.ceil(vmax2)
    axis(top2, h2, vmax2, 0.5 if vmax2 <= 4 else 1.0, lambda y: f"{y:g}",
         "Peak send-buffer memory, sum over streams, / BDP (goal for tern: at most 2.5)")
    y25 = top2 + h2 - h2 * 2.5 / vmax2
    o.append(f'<line x1="{left}" y1="{y25:.1f}" x2="{W - right}" y2="{y25:.1f}" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="6,4"/>')
    o.append(f'<line x1="{W - right - 118}" y1="{top2 - 16}" x2="{W - right - 92}" y2="{top2 - 16}" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="6,4"/>')
    o.append(f'<text x="{W - right}" y="{top2 - 12}" text-anchor="end" fill="#D55E00">2.5 x BDP (goal)</text>')

    for gi, (s, k) in enumerate(groups):
        gx = left + gi * gw
        x0 = gx + (gw - bw * len(CONFIGS)) / 2
        # path rate
        yr = top1 + h1 - h1 * s["rate"] / vmax1
        o.append(f'<line x1="{gx + 4:.1f}" y1="{yr:.1f}" x2="{gx + gw - 4:.1f}" y2="{yr:.1f}" stroke="#333" stroke-dasharray="4,3"/>')
        m = re.search(r"--rate (\d+(?:\.\d+)?)", meta.get("shift_to", ""))
        if s["id"] == "shift" and m:
            y2 = top1 + h1 - h1 * float(m.group(1)) / vmax1
            o.append(f'<line x1="{gx + 4:.1f}" y1="{y2:.1f}" x2="{gx + gw - 4:.1f}" y2="{y2:.1f}" stroke="#777" stroke-dasharray="1,3"/>')
        for ci, (c, label, color) in enumerate(CONFIGS):
            r = v.pick(s["id"], k, c)
            x = x0 + ci * bw
            for top, h, val, vmax, fmt in (
                    (top1, h1, (r["bps"] / 1e6) if r is not None and ok(r["bps"]) else math.nan, vmax1, "%.0f"),
                    (top2, h2, (r["tb"] / s["bdp"]) if r is not None and ok(r["bps"]) and ok(r["tb"]) else math.nan, vmax2, "%.2f")):
                base = top + h
                if not ok(val):
                    o.append(f'<text x="{x + bw / 2:.1f}" y="{base - 4:.1f}" text-anchor="middle" fill="#b00" font-size="10">'
                             f'{"×" if r is not None else "–"}</text>')
                    continue
                hh = h * min(val, vmax) / vmax
                o.append(f'<rect x="{x + 1:.1f}" y="{base - hh:.1f}" width="{bw - 2:.1f}" height="{hh:.1f}" fill="{color}">'
                         f'<title>{html.escape(s["id"])} {k} {html.escape(label)}: {fmt % val}</title></rect>')
                o.append(f'<text x="{x + bw / 2:.1f}" y="{base - hh - 3:.1f}" text-anchor="middle" font-size="8.5" fill="#222">'
                         f'{fmt % val}{"+" if val > vmax else ""}</text>')
        for top, h in ((top1, h1), (top2, h2)):
            o.append(f'<text x="{gx + gw / 2:.1f}" y="{top + h + 15}" text-anchor="middle">{html.escape(s["id"])} {k}</text>')
        if gi > 0 and k == "mem":
            for top, h in ((top1, h1), (top2, h2)):
                o.append(f'<line x1="{gx:.1f}" y1="{top}" x2="{gx:.1f}" y2="{top + h + 20}" stroke="#bbb"/>')
    notes = ["× = run failed.  locked 64 KiB: tern --streams 1 --window 64K (iperf3 -w 64K where tern's run failed).  "
             "kernel autotuning: the fastest single stream",
             "with Linux autotuning (tern --window kernel, iperf3 -P 1, iperf3 -P 1 -C cubic).  hand-tuned best: the fastest "
             "tern --streams N --window W of the sweep",
             "(disk: a copy with that N x W).  shift: 1 Gbit/s x 100 ms, then 500 Mbit/s x 30 ms from a third of each run; "
             "its rate line and BDP are the initial path's."]
    for i, n in enumerate(notes):
        o.append(f'<text x="{left}" y="{H - 46 + 15 * i}" fill="#444" font-size="10.5">{html.escape(n)}</text>')
    o.append("</svg>")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--splice":
        splice("drs", sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "--mem":
        mem_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 5:
        main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
