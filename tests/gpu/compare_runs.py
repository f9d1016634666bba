"""Repeatability of two runs of one scenario: per (kernel, case) |b/a - 1| of the medians, as printed figures
(computed by campaign_runs.repeatability, the same figures the campaign's repeat-check step bounds).
    python3 tests/gpu/compare_runs.py RUN_A RUN_B
"""
import signal
import sys

from campaign_runs import repeatability
from kbench.runs.store import load_run

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped to head: end quietly, no BrokenPipeError traceback

a, b = (load_run(p).rows for p in sys.argv[1:3])
rep = repeatability(a.to_dict("records"), b.to_dict("records"))
if not rep["rows"]:
    sys.exit("error: no (kernel, case) is ok in both runs")
print(f"{rep['rows']} rows in both: |diff| median {rep['median']:.2f}%  p95 {rep['p95']:.2f}%  max {rep['max']:.2f}%  "
      f"rows over 3%: {rep['over3']}")
per: dict[str, list[float]] = {}
for d, kernel, *_ in rep["all"]:
    per.setdefault(kernel, []).append(d)
for kernel, ds in sorted(per.items()):
    ds.sort()
    print(f"  {kernel:22} rows {len(ds):4}  median {ds[len(ds) // 2]:5.2f}%  max {ds[-1]:5.2f}%")
for d, kernel, case, x, y in rep["worst"]:
    print(f"  {d:5.2f}%  {kernel:16} {case:48} {x:9.1f} {y:9.1f} us")
