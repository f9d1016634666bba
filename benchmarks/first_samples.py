"""How a sweep's first samples compare with the rest, per run folder: the rows whose second sample is more than
5% above the row's median (a captured graph's slow first replays, kbench/timing/timer.py), and the median ratio
of a row's first sample to its median (the first replay of each burst after an idle). docs/gate.md.

    python benchmarks/first_samples.py RUNS_FOLDER...      # each folder holds run folders (kbench sweep --out)
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from kbench.errors import BadInput
from kbench.runs.store import MANIFEST, load_run


def slow_start(samples: list[list[float]], margin: float = 0.05) -> tuple[int, int, float]:
    """(rows with a slow second sample, rows with samples, median first sample / median) of one run's rows'
    samples."""
    timed = [list(s) for s in samples if len(s) > 1]
    slow = sum(s[1] > (1 + margin) * statistics.median(s) for s in timed)
    first = [s[0] / statistics.median(s) for s in timed]
    return slow, len(timed), statistics.median(first) if first else float("nan")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip())
        return 2
    for root in argv:
        runs = sorted(p for p in Path(root).iterdir() if (p / MANIFEST).is_file()) if Path(root).is_dir() else []
        if not runs:
            print(f"error: {root}: no run folders ({MANIFEST}) in it")
            return 2
        for run in runs:
            try:  # kbench's own reader: its checks, and one line naming the file and line when a row is bad
                rows = load_run(run).rows
            except BadInput as e:
                print(f"error: {e}")
                return 2
            slow, n, first = slow_start(rows["samples_us"])
            print(f"{run.name:32s} rows {n:3d}  second sample >5% slow: {slow:3d}  first / median {first:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
