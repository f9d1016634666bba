"""Repeatability of two runs of one scenario: per (kernel, case) |b/a - 1| of the medians, as printed figures."""
import sys

from kbench.runs.store import load_run

a, b = (load_run(p).rows for p in sys.argv[1:3])
ok = ["kernel", "case_id", "median_us"]
m = a[a.status == "ok"][ok].merge(b[b.status == "ok"][ok], on=["kernel", "case_id"], suffixes=("_a", "_b"))
d = (m.median_us_b / m.median_us_a - 1).abs() * 100
print(f"{len(m)} rows in both: |diff| median {d.median():.2f}%  p95 {d.quantile(0.95):.2f}%  max {d.max():.2f}%  "
      f"rows over 3%: {(d > 3).sum()}")
m["diff_pct"] = d.round(2)
print(m.groupby("kernel").diff_pct.describe()[["count", "50%", "max"]].to_string())
print(m.sort_values("diff_pct", ascending=False).head(8).to_string(index=False))
