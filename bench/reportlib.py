"""What the bench/*_report.py generators share: reading the scripts' TSV files,
splicing a report section into BENCHMARKS.md between its markers, and the reading
of what held a run back (the path or the CPU).

A section named NAME lies between `<!-- NAME:start -->` and `<!-- NAME:end -->`;
each benchmark script owns one, and rewriting one keeps the rest of the file.
"""
import math
import re


def markers(name):
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def splice(name, section_path, target_path):
    """Put SECTION (which has NAME's markers) into TARGET between those markers,
    or append it if TARGET has none; the rest of TARGET is kept."""
    start, end = markers(name)
    section = open(section_path).read().strip("\n")
    if start not in section or end not in section:
        raise SystemExit(f"{section_path} lacks the {start} ... {end} markers")
    try:
        text = open(target_path).read()
    except FileNotFoundError:
        text = ""
    a, b = text.find(start), text.find(end)
    if a >= 0 and b > a:
        text = text[:a] + section + text[b + len(end):]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section + "\n"
    with open(target_path, "w") as f:
        f.write(text)


SECTION = re.compile(r"<!-- ([a-z0-9_-]+):start -->.*?<!-- \1:end -->", re.S)


def marked_sections(text, skip=()):
    """Every marked section of TEXT, whole (markers included), in order, except those named in SKIP."""
    return [m.group(0) for m in SECTION.finditer(text) if m.group(1) not in skip]


def read_tsv(path, missing_ok=False):
    """The rows of a tab-separated file, as lists of fields; [] for a missing file if MISSING_OK."""
    out = []
    try:
        for line in open(path):
            if line.strip():
                out.append(line.rstrip("\n").split("\t"))
    except OSError:
        if not missing_ok:
            raise
    return out


def command_cleaner(meta, extra=()):
    """A function that shortens a recorded command line for the report: the script's private
    copies of the binaries become `tern` and `netlab` (and each (path, name) in EXTRA its name),
    the temporary directory `$WORK`, and paths in the repository become relative."""
    work, repo = meta.get("work") or "@@", meta.get("repo") or "@@"
    names = [(meta.get("tern") or "@@", "tern"), (meta.get("netlab") or "@@", "netlab")] + list(extra)

    def clean(cmd):
        for path, name in names:
            cmd = cmd.replace(path, name)
        return cmd.replace(work, "$WORK").replace(repo + "/", "")
    return clean


def read_lines(path):
    """The non-blank lines of a text file, stripped; [] if it is missing."""
    try:
        return [line.strip() for line in open(path) if line.strip()]
    except OSError:
        return []


def read_meta(path):
    meta = {}
    for k, *v in read_tsv(path):
        meta[k] = v[0] if v else ""
    return meta


def tick(start, k, interval, stop=()):
    """Sleep until sample K+1 of a sampler on an absolute schedule (START + K x INTERVAL,
    time.time() seconds), unless STOP is non-empty; returns K+1, or more when the sampler
    fell behind (a busy machine): the missed ticks are skipped."""
    import time
    k += 1
    delay = start + k * interval - time.time()
    if delay < 0:
        k += int(-delay / interval) + 1
        delay = start + k * interval - time.time()
    if delay > 0 and not stop:
        time.sleep(delay)
    return k


# What held a run back, as the reports read it from the rate and the machine's CPU (a reading,
# not a proof): a rate within 10 % of the capacity is the path's; a machine this busy over all
# its cores had no CPU to give a faster run (the tools, the emulator and the kernel share it).
PATH_SHARE = 0.9
BUSY_PCT = 90


def path_or_cpu(rate_bps, cap_bps, busy_pct):
    """What held a run back, if the path or the CPU: "path (NN % of capacity)" when RATE_BPS
    reached PATH_SHARE of CAP_BPS (0 or nan: no capacity, never the path), "path (NN % of
    capacity; machine NN % busy)" if the machine was busy as well (the last 10 % may have been
    the CPU's); else "CPU (machine NN % busy)" when the machine's busy share of all its cores
    (busy_pct, %; nan: unknown) reached BUSY_PCT; else "" (the caller may know more)."""
    busy = busy_pct >= BUSY_PCT  # False for nan
    if cap_bps > 0 and rate_bps >= PATH_SHARE * cap_bps:
        also = f"; machine {busy_pct:.0f} % busy" if busy else ""
        return f"path ({100 * rate_bps / cap_bps:.0f} % of capacity{also})"
    return f"CPU (machine {busy_pct:.0f} % busy)" if busy else ""


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return math.nan
