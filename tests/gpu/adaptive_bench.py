"""Full grid vs adaptive sweep (issue #15): measurements, wall and compile time, and the adaptive policy's
regret judged on the full grid's rows. A benchmark that prints a table, not a timed test.

On the H200 (`bash tests/gpu/h200.sh adaptive`, or directly):
    python3 tests/gpu/adaptive_bench.py --out /tmp/res/adaptive [--kv-len 512,4096,32768] [--jit-cache DIR]
runs `kbench sweep --scenario draft-extend --kv-len ...` over the full grid, then the same with --adaptive,
and compares them. Given two finished runs instead:
    python3 tests/gpu/adaptive_bench.py --full RUN_FULL --adaptive RUN_ADAPTIVE
(`--only full` / `--only adaptive` runs one of the two sweeps, for a machine with a per-command time limit.)
The adaptive sweep runs second, so with an empty JIT cache its compile time is mostly loading modules the
full sweep built; carry a prebuilt cache (.fi-cache) to compare both on loading alone.
Without a GPU, replay a full run's rows as the measurement oracle (no timing; wall/compile are n/a):
    python3 tests/gpu/adaptive_bench.py --simulate results/baselines/h200-draft-extend-full-kv512-4096-32768
(the H200 full grid of 2026-12-03, committed; also `--full` for a new adaptive run on the H200, which then
needs only `--only adaptive`: the full grid's 562 s are already spent).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import signal
import sys
import time
from pathlib import Path

import pandas as pd

from kbench.engine.plans.adaptive import TAGS, AdaptiveOptions, Planner, replay
from kbench.report.policy import build_policy
from kbench.report.regret import regret
from kbench.runs.store import load_run
from kbench.engine.sweep import scenario_of_run
from kbench.runs.winners import case_winners, measured


MARK = {"coarse": "C", "refine-crossover": "X", "refine-tie": "T", "refine-step": "S", "": "#"}


def judge(adaptive_rows: pd.DataFrame, full_rows: pd.DataFrame) -> dict:
    """The adaptive run's policy, looked up at every case of the full grid, against the full grid's best."""
    cases_full = case_winners(full_rows)
    policy = build_policy(case_winners(adaptive_rows), {}, [])
    r = regret(policy, measured(full_rows), cases_full, "adaptive policy on the full grid")
    pc = r.per_case
    # the cases the adaptive run measured itself: its choice there is its own measurement, so their regret is
    # the two runs disagreeing (run-to-run noise), not the planner inferring; the others are inferred
    own = pc["interpolated"] == False  # noqa: E712 - a column of booleans
    split = {}
    for name, part in (("inferred", pc[~own]), ("measured", pc[own])):
        split[name] = (len(part), float(part["regret_pct"].mean()) if len(part) else 0.0,
                       float(part["regret_pct"].max()) if len(part) else 0.0)
    return {"mean_pct": r.mean_pct, "worst_pct": r.worst_pct, "worst_case": r.worst_case,
            "differs": int((pc["chosen"] != pc["best"]).sum()),
            "differs_beyond_1pct": int((pc["regret_pct"] > 1).sum()), "cases": r.cases,
            "unavailable": r.unavailable, "split": split}


def slice_grid(rows: pd.DataFrame, all_cases: pd.DataFrame, kv: int) -> str:
    """Which points of the kv slice were measured (C coarse, X crossover, T tie, S step, . not measured)."""
    qs = sorted(all_cases["q_len"].unique())
    lines = [f"measured points at kv_len {kv} (C coarse, X refine-crossover, T refine-tie, S refine-step, . not)",
             "  bs \\ q " + " ".join(f"{q:>2}" for q in qs)]
    tag = {(int(b), int(q)): t for b, q, k, t in zip(rows["batch_size"], rows["q_len"], rows["kv_len"],
                                                     rows.get("chosen_by", pd.Series([""] * len(rows))))
           if int(k) == kv}
    for bs in sorted(all_cases["batch_size"].unique()):
        lines.append(f"{int(bs):>8} " + " ".join(f"{MARK.get(tag[(int(bs), q)], '?') if (int(bs), q) in tag else '.':>2}"
                                                 for q in qs))
    return "\n".join(lines)


def table(full: dict, adaptive: dict, j: dict) -> str:
    def f(v, fmt):
        return "n/a" if v is None else format(v, fmt)

    out = ["| | full grid | adaptive |", "|---|---|---|",
           f"| cases measured | {full['cases']} | {adaptive['cases']} ({adaptive['cases'] / max(full['cases'], 1):.0%}) |",
           f"| measurements (timed kernel x case) | {full['measurements']} | {adaptive['measurements']} "
           f"({adaptive['measurements'] / max(full['measurements'], 1):.0%}) |",
           f"| wall time s (sweep calls) | {f(full.get('wall_s'), '.1f')} ({full.get('calls', 'n/a')}) | "
           f"{f(adaptive.get('wall_s'), '.1f')} ({adaptive.get('calls', 'n/a')}) |",
           f"| compile s | {f(full.get('compile_s'), '.1f')} | {f(adaptive.get('compile_s'), '.1f')} |",
           f"| stopped by | - | {adaptive.get('stopped_by', 'n/a')} |",
           f"| mean regret (full grid's rows) | 0 | {f(j['mean_pct'], '.2f')}% |",
           f"| worst regret | 0 | {f(j['worst_pct'], '.2f')}% ({j['worst_case']}) |",
           f"| cases whose winner differs | - | {j['differs']} of {j['cases']} ({j['differs_beyond_1pct']} beyond 1% regret;"
           f" {j['unavailable']} unavailable) |"]
    for name, (n, mean, worst) in j.get("split", {}).items():
        what = ("not measured by the adaptive run (the planner's inference)" if name == "inferred"
                else "measured by both runs (the runs disagreeing)")
        out.append(f"| regret at the {n} cases {what} | - | mean {mean:.2f}%, worst {worst:.2f}% |")
    return "\n".join(out)


def _figures(run_rows: pd.DataFrame, manifest: dict | None) -> dict:
    ok = run_rows[(run_rows["status"] == "ok") & (run_rows["path"] != "reference")]
    d = {"cases": int(ok["case_id"].nunique()), "measurements": len(ok)}
    if manifest:  # a run finished by --resume: its earlier calls' wall times are in wall_s_earlier
        walls = [manifest.get("wall_s") or {}, *(manifest.get("wall_s_earlier") or [])]
        d.update(wall_s=sum(w.get("total_s") or 0 for w in walls), compile_s=sum(w.get("compile_s") or 0 for w in walls),
                 calls=len(walls))
        d["stopped_by"] = (manifest.get("adaptive") or {}).get("stopped_by")
    return d


def report(full_rows, adaptive_rows, full_manifest, adaptive_manifest, kv: int | None, extra: dict | None = None):
    full, ada = _figures(full_rows, full_manifest), _figures(adaptive_rows, adaptive_manifest)
    if extra:
        ada.update(extra)
    print(table(full, ada, judge(adaptive_rows, full_rows)))
    counts = adaptive_rows.drop_duplicates("case_id")["chosen_by"].value_counts().to_dict() \
        if "chosen_by" in adaptive_rows else {}
    print("points by how they were chosen: " + ", ".join(f"{t} {counts.get(t, 0)}" for t in TAGS))
    pruned = adaptive_rows["reason"].astype(str).str.startswith("adaptive:").sum()
    print(f"kernels pruned (skipped rows, not measured): {int(pruned)}")
    cases = full_rows.drop_duplicates("case_id")
    kvs = sorted(cases["kv_len"].unique())
    kv = kv if kv is not None else int(kvs[len(kvs) // 2])
    print(slice_grid(adaptive_rows, cases, kv))


def options(a) -> AdaptiveOptions:
    return AdaptiveOptions(regret_bound=a.regret_bound / 100, coarse_step=a.coarse_step, close=a.close / 100,
                           prune_factor=a.prune_factor).check()


def simulate(run_dir: str, a) -> None:
    run = load_run(run_dir)
    sc = scenario_of_run(run.manifest)
    rows = run.rows
    kernels = dict(zip(rows["kernel"], rows["path"]))
    planner = Planner(sc.cases(), kernels, options(a))
    got, why = replay(planner, rows, a.budget_measurements)
    print(f"simulation: {run_dir} replayed as the measurement oracle ({len(sc.cases())} cases, kernels "
          f"{', '.join(kernels)}); wall and compile need the GPU (n/a)")
    report(rows, got, None, None, a.kv, {"stopped_by": why})


def sweep(args: list[str]) -> Path:
    exe = shutil.which("kbench")
    cmd = [exe] if exe else [sys.executable, "-m", "kbench.cli.main"]
    print("$ kbench sweep " + " ".join(args), flush=True)
    out = subprocess.run([*cmd, "sweep", *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
    print(out.stdout[-3000:], out.stderr[-2000:], sep="\n")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("run: ")]
    if not line:
        sys.exit(f"error: the sweep did not finish (exit {out.returncode})")
    return Path(line[-1][5:].strip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--simulate", metavar="RUN", help="replay a full run's rows (no GPU needed)")
    p.add_argument("--full", metavar="RUN")
    p.add_argument("--adaptive", metavar="RUN")
    p.add_argument("--out", default="/tmp/res/adaptive")
    p.add_argument("--scenario", default="draft-extend")
    p.add_argument("--kv-len", default="512,4096,32768")
    p.add_argument("--jit-cache")
    p.add_argument("--kv", type=int, help="kv_len of the slice whose measured points are printed")
    p.add_argument("--regret-bound", type=float, default=AdaptiveOptions.regret_bound * 100, help="percent")
    p.add_argument("--coarse-step", type=int, default=AdaptiveOptions.coarse_step)
    p.add_argument("--close", type=float, default=AdaptiveOptions.close * 100, help="percent")
    p.add_argument("--prune-factor", type=float, default=AdaptiveOptions.prune_factor)
    p.add_argument("--budget-measurements", type=int)
    p.add_argument("--only", choices=["full", "adaptive"], help="run one of the two sweeps and stop (a machine "
                   "with a per-command time limit: run each, then compare with --full RUN --adaptive RUN)")
    a = p.parse_args()
    if a.simulate:
        return simulate(a.simulate, a)
    if not (a.full and a.adaptive):
        common = ["--scenario", a.scenario, "--kv-len", a.kv_len, "--out", a.out]
        if a.jit_cache:
            common += ["--jit-cache", a.jit_cache]
        t0 = time.time()
        if a.only != "adaptive":
            a.full = a.full or str(sweep([*common, "--name", "full"]))
        print(f"full grid: {time.time() - t0:.0f} s")
        t0 = time.time()
        ada = ["--adaptive", "--regret-bound", str(a.regret_bound), "--coarse-step", str(a.coarse_step)]
        if a.budget_measurements:
            ada += ["--budget-measurements", str(a.budget_measurements)]
        if a.only != "full":
            a.adaptive = a.adaptive or str(sweep([*common, "--name", "adaptive", *ada]))
            print(f"adaptive: {time.time() - t0:.0f} s")
        if a.only:
            return
    full, ada = load_run(a.full), load_run(a.adaptive)
    print(f"full: {a.full}\nadaptive: {a.adaptive}")
    report(full.rows, ada.rows, full.manifest, ada.manifest, a.kv)


if __name__ == "__main__":
    # piped to head: end quietly (set here, not on import: a test importing this module must keep Python's
    # handling, or a write to a closed socket kills the whole test run with SIGPIPE)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
