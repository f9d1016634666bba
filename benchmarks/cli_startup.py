"""How long `kbench --help` (and each command's --help) takes in a fresh process: median of N runs.

    python benchmarks/cli_startup.py [-n 5]

Target: `kbench --help` under 1 s (commands import torch only when they run). Prints a short table.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = [[], ["sweep"], ["report"], ["gate"], ["select"]]


def time_help(args: list[str], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kbench.cli.main", *args, "--help"], check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="runs per command (median reported)")
    a = ap.parse_args()
    print(f"{'command':<24} {'median s':>9}")
    worst = 0.0
    for args in COMMANDS:
        s = time_help(args, a.n)
        print(f"{'kbench ' + ' '.join(args + ['--help']):<24} {s:>9.2f}")
        if not args:
            worst = s
    print(f"kbench --help: {worst:.2f} s ({'under' if worst < 1 else 'OVER'} the 1 s target)")
    return 0 if worst < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
