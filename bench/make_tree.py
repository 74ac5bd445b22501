#!/usr/bin/env python3
"""Test trees for bench/files.sh, the same on every run for a given seed.

    make_tree.py many DIR --files N --dirs D [--size BYTES] [--seed S]
        N files of BYTES (default 16 KiB) spread evenly over D directories
    make_tree.py mixed DIR --small N --medium N --large MIB[,MIB...] [--seed S]
        a nested tree: N small files of 1-64 KiB, N medium files of 1-8 MiB and
        one large file per MIB, in directories up to four levels deep

Names, sizes, contents (pseudo-random bytes, incompressible), modes (most files
0644, some 0600 or 0755; some directories 0750) and mtimes (whole seconds in
2020-2025) all come from the seed, so reruns copy the same tree. DIR must not
exist. Prints a JSON summary (files, dirs, bytes, size classes) on stdout.
"""
import argparse
import json
import os
import random
import sys

KIB, MIB = 1024, 1024 * 1024
CHUNK = 4 * MIB
MTIME_FROM, MTIME_TO = 1577836800, 1767225599  # 2020-01-01 .. 2025-12-31 UTC


def write_file(rng, path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, CHUNK)
            f.write(rng.randbytes(n))
            left -= n
    r = rng.random()
    os.chmod(path, 0o600 if r < 0.2 else 0o755 if r < 0.3 else 0o644)
    t = rng.randint(MTIME_FROM, MTIME_TO)
    os.utime(path, (t, t))


def nested_dirs(rng, root, top=8, depth=4):
    """Directories under root: `top` at the first level, each with 0-3 children, to `depth` levels."""
    dirs = []
    level = [root]
    for d in range(depth):
        nxt = []
        for parent in level:
            n = top if d == 0 else rng.randint(0, 3)
            for i in range(n):
                path = os.path.join(parent, f"{'run' if d == 0 else 'sub'}{i:02d}")
                nxt.append(path)
        dirs += nxt
        level = nxt
    return dirs


def make_dirs(rng, dirs):
    for d in dirs:
        os.makedirs(d)
    for d in dirs:
        if rng.random() < 0.1:
            os.chmod(d, 0o750)


def many(args, rng):
    dirs = [os.path.join(args.dir, f"d{i:02d}") for i in range(args.dirs)]
    make_dirs(rng, dirs)
    for i in range(args.files):
        write_file(rng, os.path.join(dirs[i % len(dirs)], f"f{i:06d}.dat"), args.size)
    return dict(files=args.files, dirs=len(dirs), bytes=args.files * args.size,
                classes=[dict(name=f"{args.size // KIB} KiB", files=args.files, bytes=args.files * args.size)])


def mixed(args, rng):
    dirs = nested_dirs(rng, args.dir)
    make_dirs(rng, dirs)
    large = [int(x) for x in args.large.split(",") if x]
    classes = []
    n = 0
    for name, count, size_of in (
        ("small, 1-64 KiB", args.small, lambda: rng.randint(KIB, 64 * KIB)),
        ("medium, 1-8 MiB", args.medium, lambda: rng.randint(MIB, 8 * MIB)),
    ):
        total = 0
        for _ in range(count):
            size = size_of()
            write_file(rng, os.path.join(rng.choice(dirs), f"f{n:06d}.dat"), size)
            n += 1
            total += size
        classes.append(dict(name=name, files=count, bytes=total))
    total = 0
    for mib in large:
        write_file(rng, os.path.join(rng.choice(dirs), f"large{n:06d}.dat"), mib * MIB)
        n += 1
        total += mib * MIB
    classes.append(dict(name="large, " + " + ".join(f"{m} MiB" for m in large), files=len(large), bytes=total))
    depth = max(d[len(args.dir):].count(os.sep) for d in dirs)
    return dict(files=n, dirs=len(dirs), depth=depth, bytes=sum(c["bytes"] for c in classes), classes=classes)


def main():
    p = argparse.ArgumentParser(description="test trees for bench/files.sh")
    sub = p.add_subparsers(dest="kind", required=True)
    m = sub.add_parser("many")
    m.add_argument("dir")
    m.add_argument("--files", type=int, required=True)
    m.add_argument("--dirs", type=int, required=True)
    m.add_argument("--size", type=int, default=16 * KIB)
    m.add_argument("--seed", type=int, default=1)
    x = sub.add_parser("mixed")
    x.add_argument("dir")
    x.add_argument("--small", type=int, required=True)
    x.add_argument("--medium", type=int, required=True)
    x.add_argument("--large", required=True, help="sizes in MiB, comma-separated")
    x.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if os.path.exists(args.dir):
        sys.exit(f"make_tree.py: {args.dir} exists")
    os.makedirs(args.dir)
    rng = random.Random(args.seed)
    summary = many(args, rng) if args.kind == "many" else mixed(args, rng)
    summary.update(kind=args.kind, seed=args.seed)
    json.dump(summary, sys.stdout)
    print()


if __name__ == "__main__":
    main()
