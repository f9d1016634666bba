"""How fast each CPU core runs one fixed Python loop, the cores taking turns: whether one core of a machine is
slower than another, and for how long (docs/gate.md: two server processes pinned to their own cores).

    python benchmarks/core_speeds.py [--cores 0,1] [--blocks 6] [--turns 10]

Per block, each core runs the loop ``--turns`` times (the process pinned to it with sched_setaffinity, one
unmeasured run first) and the block's line gives each core's median time and their ratio to the first core.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def loop_seconds(n: int = 300_000) -> float:
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cores", default="0,1", help="comma-separated core numbers; the first is the reference")
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--turns", type=int, default=10)
    a = ap.parse_args(argv)
    try:
        cores = [int(c) for c in a.cores.split(",") if c.strip()]
    except ValueError:
        print(f"error: --cores {a.cores!r}: give core numbers such as 0,1")
        return 2
    if not hasattr(os, "sched_setaffinity"):
        print("error: this system cannot pin a process to a core (no sched_setaffinity)")
        return 2
    usable = os.sched_getaffinity(0)
    missing = [c for c in cores if c not in usable]
    if len(cores) < 2 or missing or a.blocks < 1 or a.turns < 1:
        print(f"error: need two or more of this process's cores {sorted(usable)}, blocks and turns >= 1"
              + (f" (not usable: {missing})" if missing else ""))
        return 2
    try:
        for b in range(a.blocks):
            times: dict[int, list[float]] = {c: [] for c in cores}
            for _ in range(a.turns):
                for c in cores:
                    os.sched_setaffinity(0, {c})
                    loop_seconds()
                    times[c].append(loop_seconds())
            med = {c: statistics.median(v) for c, v in times.items()}
            ref = med[cores[0]]
            print(f"block {b}: " + "  ".join(f"core{c} {m * 1e3:6.1f} ms" for c, m in med.items()) + "  "
                  + "  ".join(f"core{c}/core{cores[0]} {med[c] / ref:.3f}" for c in cores[1:]), flush=True)
    finally:
        os.sched_setaffinity(0, usable)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
