"""Issue #16 on the GPU: two `--power both` sweeps of one grid -> per-state repeatability (median and p95 of
the per-row |difference| between the sweeps; goal <= 1% and <= 3%), the decisions that flip between the states
(in each sweep), and the SM clocks, power draw, throttle reasons and settle timeouts seen per state.
    python3 tests/gpu/power_states.py RUN_A RUN_B
"""
import signal
import sys

import pandas as pd

from kbench.report.power_states import flip_lines, flips, side_by_side
from kbench.runs.store import load_run
from kbench.runs.winners import measured

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped to head: end quietly, no BrokenPipeError traceback

a, b = (load_run(p).rows for p in sys.argv[1:3])
key = ["kernel", "case_id"]
print("state        rows  |diff| median   p95    max   (goal <= 1% / <= 3%)")
for state in ("unthrottled", "sustained"):
    ma, mb = (measured(r[r["power"] == state]) for r in (a, b))
    m = ma[key + ["median_us"]].merge(mb[key + ["median_us"]], on=key, suffixes=("_a", "_b"))
    d = (m.median_us_b / m.median_us_a - 1).abs() * 100
    if len(d):
        print(f"{state:12} {len(m):5}  {d.median():6.2f}%  {d.quantile(0.95):6.2f}%  {d.max():6.2f}%")
        m["diff_pct"] = d
        per_kernel = m.groupby("kernel")["diff_pct"].agg(["median", lambda x: x.quantile(0.95), "max"])
        for k, (med, p95, mx) in per_kernel.iterrows():
            print(f"  {k:22} median {med:5.2f}%  p95 {p95:5.2f}%  max {mx:5.2f}%")
        cols = [c for c in ("sm_clock_mean_mhz", "gpu_temp_c", "power_w", "power_settle", "reason") if c in ma]
        worst = m.nlargest(5, "diff_pct").merge(ma[key + cols], on=key).merge(mb[key + cols], on=key,
                                                                               suffixes=("_a", "_b"))
        for _, w in worst.iterrows():
            extra = "  ".join(f"{c} {w.get(c + '_a')!s:.30}/{w.get(c + '_b')!s:.30}" for c in cols
                              if str(w.get(c + "_a")) not in ("", "None", "nan") or str(w.get(c + "_b")) not in ("", "None", "nan"))
            print(f"  worst {w['diff_pct']:5.2f}% {w['kernel']} {w['case_id']}: {w['median_us_a']:.1f} vs "
                  f"{w['median_us_b']:.1f} us  {extra}")
    else:
        print(f"{state:12}     0  (no rows in both runs)")
print()
print("state        SM clock MHz (mean, min..max)   power W (mean)   GPU C (min..max)   throttle reasons (rows)   "
      "settle timeouts")
for state in ("unthrottled", "sustained"):
    r = pd.concat([measured(x[x["power"] == state]) for x in (a, b)])
    if r.empty:
        continue
    clk = r["sm_clock_mean_mhz"].astype(float).fillna(r["sm_clock_mhz"].astype(float)) if "sm_clock_mean_mhz" in r else r["sm_clock_mhz"]
    pw = r["power_w"].mean() if "power_w" in r else float("nan")
    reasons = r["throttle_reasons"].fillna("").replace("", "none").value_counts().to_dict() \
        if "throttle_reasons" in r else {}
    timeouts = int((r["power_settle"].fillna("") != "").sum()) if "power_settle" in r else 0
    t = r["gpu_temp_c"].astype(float) if "gpu_temp_c" in r else pd.Series([float("nan")])
    print(f"{state:12} {clk.mean():7.0f} ({clk.min():.0f}..{clk.max():.0f})            {pw:7.1f}          "
          f"{t.min():.0f}..{t.max():.0f}   {reasons}   {timeouts}")
soaks = [x for x in pd.concat([a, b])["reason"].fillna("") if "heat soak" in x]
for x in soaks:
    print("  " + x)
for name, rows in (("A", a), ("B", b)):
    pairs = side_by_side(rows)
    lines = flip_lines(pairs)
    print(f"\nsweep {name}: {len(lines)} decision(s) flip between unthrottled and sustained, "
          f"{len(flips(pairs, real_only=True))} beyond the spread in both states")
    for ln in lines:
        print("  " + ln)
