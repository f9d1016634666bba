"""How a sweep's first samples compare with the rest, per run folder: the rows whose second sample is more than
5% above the row's median (a captured graph's slow first replays, kbench/timing/timer.py), and the median ratio
of a row's first sample to its median (the first replay of each burst after an idle). docs/gate.md.

    python benchmarks/first_samples.py RUNS_FOLDER...      # each folder holds run folders (kbench sweep --out)
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def slow_start(rows: list[dict], margin: float = 0.05) -> tuple[int, int, float]:
    """(rows with a slow second sample, rows with samples, median first sample / median) of one run's rows."""
    timed = [r for r in rows if len(r.get("samples_us") or []) > 1]
    slow = sum(r["samples_us"][1] > (1 + margin) * statistics.median(r["samples_us"]) for r in timed)
    first = [r["samples_us"][0] / statistics.median(r["samples_us"]) for r in timed]
    return slow, len(timed), statistics.median(first) if first else float("nan")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip())
        return 2
    for root in argv:
        runs = sorted(p for p in Path(root).iterdir() if (p / "rows.jsonl").is_file()) if Path(root).is_dir() else []
        if not runs:
            print(f"error: {root}: no run folders (rows.jsonl) in it")
            return 2
        for run in runs:
            rows = []
            for i, line in enumerate((run / "rows.jsonl").read_text(errors="replace").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    row = None
                samples = row.get("samples_us") if isinstance(row, dict) else None
                if not isinstance(row, dict) or samples is not None and not (
                        isinstance(samples, list) and all(isinstance(v, (int, float)) and v > 0 for v in samples)):
                    print(f"error: {run / 'rows.jsonl'}: rows.jsonl line {i} is not a row (JSON with samples_us)")
                    return 2
                rows.append(row)
            slow, n, first = slow_start(rows)
            print(f"{run.name:32s} rows {n:3d}  second sample >5% slow: {slow:3d}  first / median {first:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
