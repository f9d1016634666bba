"""`kbench report` and `kbench gate` on a generated sweep run of 100,000 (or 300,000) rows, with its tables and
from its journal alone: wall time and peak memory of each.

    python benchmarks/scale.py [--dir DIR] [--cases-scale 1.0|3.0] [--shape axes|kv|batch|all] [--only report|gate]
                               [--form parquet|journal] [--same-base] [--generate-only] [--pythonpath DIR]

--shape: how the rows spread over the axes, each 100,352 rows at --cases-scale 1.0 and 301,056 at 3.0 (runs under
DIR/SHAPE): `axes` (the default, below: few values on many axes), `kv` (hundreds of KV lengths: 98 x scale
lengths 112 tokens apart from 512, x 8 batch sizes x q_len 1..16, the realistic axes at their defaults) and
`batch` (hundreds of batch sizes: 1..112 x scale, x 7 kv_len x q_len 1..16). A report must not cost more for a
grid with more distinct values on an axis.

Generates two sweep run folders as kbench writes them (manifest.json, rows.jsonl, rows.parquet, rows.csv;
written by kbench's own RunWriter) over the realistic axes: 8 kernels (the reference and trtllm-context
skipped as on an H200, the ragged decode kernel only where q_dist is not fixed, decode-wrapper wrong at
batch <= 2) x q_len 1..16 x batch 1..64 x kv_len 512..32768 x kv_dist {fixed, lognormal:1.0} x q_dist
{fixed, accept:0.7} x sinks {off, on} x power {unthrottled, sustained} = 100,352 rows, every ok row with
its samples_us (25..90 samples unthrottled, 60..200 sustained, as the committed runs hold). The second run
is the same grid with 1% run-to-run noise and 1% of the ok rows 10% slower in the candidate; it becomes a
baseline (`kbench baseline`). --cases-scale 3.0 adds batch sizes (21 of them, up to 192): 301,056 rows.
The candidate is timed in two forms: as written (rows.parquet beside the journal) and as a sweep that never
ended leaves it (a copy with only manifest.json and rows.jsonl, so every row is read from the journal). For
each form, each as a real subprocess (peak RSS from os.wait4 of that process):

    kbench report CANDIDATE --out DIR/report-FORM --max-rows 5
    kbench gate --baseline DIR/baselines/scale-base --candidate CANDIDATE

and prints wall time, CPU time, peak RSS and lines printed of each, with the targets met or not (report at
most 30 s and 1.5 GiB, gate at most 20 s and 1.5 GiB on the 2-core CPU machine, at up to 300,000 rows, in
either form). Exit 1 when a target is missed.
Generated runs are kept under --dir (default /tmp/kbench-scale) and reused when their parameters match.
The figures before the scale fixes came from the same command with --pythonpath pointing at the commit before
them (2 cores shared with other work, load average about 12): report 708 s of CPU (4,095 s wall), 1,610 MiB,
919 lines; gate 222 s of CPU (947 s wall), 2,104 MiB, 726 lines.
At 301,056 rows (--cases-scale 3.0), on the 2-core CPU machine of 2026-12-05, wall s / peak MiB: report Parquet
16.9 / 1,194, journal only 19.0 / 1,286; gate Parquet 9.4 / 896, journal only 12.2 / 1,061 (the first measurement
of issue #40, journal only: report 144 s / 5.1 GB, gate 52 s / 4.7 GB). The machine's speed moved by a third that
day (the same command minutes apart); its slowest runs gave report 18.5-26 s Parquet, 23-30 s journal only, gate
14-16 s Parquet, 17-20 s journal only.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

TARGETS = {"report": (30.0, 1536.0), "gate": (20.0, 1536.0)}  # seconds, MiB of peak RSS (at up to 300,000 rows)
KERNELS = [  # (kernel, path): the kernels of the committed H200 runs
    ("trtllm-decode", "decode"), ("decode-wrapper", "decode"), ("trtllm-decode-ragged", "decode"),
    ("fa2-prefill", "context"), ("fa3-prefill", "context"), ("trtllm-fmha-v2", "context"),
    ("trtllm-context", "context"), ("reference", "reference")]
GRID = {"q_len": list(range(1, 17)), "batch_size": [1, 2, 4, 8, 16, 32, 64],
        "kv_len": [512, 1024, 2048, 4096, 8192, 16384, 32768], "kv_dist": ["fixed", "lognormal:1.0"],
        "q_dist": ["fixed", "accept:0.7"], "sinks": ["off", "on"], "power": ["unthrottled", "sustained"]}
# --cases-scale above 1: more batch sizes, in this order (3.0: 21 sizes, 301,056 rows)
MORE_BATCH_SIZES = sorted(GRID["batch_size"] + [3, 6, 12, 24, 48, 96, 128, 5, 10, 20, 40, 80, 160, 192],
                          key=lambda b: (b not in GRID["batch_size"], b))
HEADS = (32, 8, 128)
COPY_BW = 4300.0


SHAPES = {  # --shape: how the rows spread over the axes (each 301,056 rows at --cases-scale 3.0)
    "axes": "few values on many axes: q_len 1..16 x batch sizes x 7 kv_len x kv_dist x q_dist x sinks x power",
    "kv": "hundreds of KV lengths (a fine KV sweep): q_len 1..16 x 8 batch sizes x 98 x scale kv_len",
    "batch": "hundreds of batch sizes: q_len 1..16 x 112 x scale batch sizes x 7 kv_len",
}


def _axes(shape: str, scale: float) -> dict[str, list]:
    """The grid of one shape: {axis: values}, the realistic axes at their defaults outside the "axes" shape."""
    fixed = {"kv_dist": ["fixed"], "q_dist": ["fixed"], "sinks": ["off"], "power": ["unthrottled"]}
    if shape == "kv":  # 98 x scale KV lengths, 112 tokens apart from 512 (3.0: 294 lengths, 512..33,328)
        return {**GRID, **fixed, "batch_size": [1, 2, 4, 8, 16, 32, 64, 128],
                "kv_len": [512 + 112 * i for i in range(max(1, round(98 * scale)))]}
    if shape == "batch":  # every batch size from 1 (3.0: 1..336)
        return {**GRID, **fixed, "batch_size": list(range(1, max(1, round(112 * scale)) + 1))}
    bss = (GRID["batch_size"][: max(1, round(len(GRID["batch_size"]) * scale))] if scale < 1
           else MORE_BATCH_SIZES[: round(len(GRID["batch_size"]) * scale)])
    return {**GRID, "batch_size": bss}


def _cases(scale: float, shape: str = "axes"):
    from kbench.cases.case import Case

    g = _axes(shape, scale)
    for power in g["power"]:
        for kv_dist in g["kv_dist"]:
            for q_dist in g["q_dist"]:
                for sinks in g["sinks"]:
                    for bs in g["batch_size"]:
                        for kv in g["kv_len"]:
                            for q in g["q_len"]:
                                yield Case(batch_size=bs, q_len=q, kv_len=kv, num_qo_heads=HEADS[0],
                                           num_kv_heads=HEADS[1], head_dim=HEADS[2], kv_dist=kv_dist,
                                           q_dist=q_dist, sinks=sinks, power=power)


def _times(c) -> dict[str, float]:
    """Plausible H200-like medians (us): the decode kernel steps up each time q x G crosses 32, fa2 costs one
    64-row tile per 64 rows of q x G (so the winner flips back along q_len), the rest scaled from them."""
    g = c.num_qo_heads // c.num_kv_heads
    mem = c.kv_bytes() / 4.2e9 * 1e6 / 1e3
    t_dec = 4.0 + mem * (1 + 0.7 * ((c.q_len * g - 1) // 32)) * (1 + 0.01 * c.q_len)
    t_fa2 = 6.0 + mem * 1.45 * -(-c.q_len * g // 64) * (1 + 0.01 * c.q_len)
    slow = 1.08 if c.power == "sustained" else 1.0
    extra = (1.04 if c.sinks == "on" else 1.0) * (1.1 if c.kv_dist != "fixed" else 1.0)
    return {k: t * slow * extra for k, t in {
        "trtllm-decode": t_dec, "decode-wrapper": t_dec * 1.15, "trtllm-decode-ragged": t_dec * 0.93,
        "fa2-prefill": t_fa2, "fa3-prefill": t_fa2 * 1.05, "trtllm-fmha-v2": t_dec * 2.5}.items()}


def _row(kernel, path, c, median, rng):
    from kbench.runs.rows import Row

    base = dict(device="NVIDIA H200", sm=90, measured_at="2026-12-03T16:38:03+00:00")
    if kernel == "reference":
        return Row.for_case(kernel, path, "torch", c, "skipped", reason="the oracle: not timed on a GPU", **base)
    if kernel == "trtllm-context":
        return Row.for_case(kernel, path, "trtllm-gen", c, "skipped", reason="needs SM100 (trtllm-gen context)",
                            **base)
    if kernel == "trtllm-decode-ragged" and c.q_dist == "fixed":
        return Row.for_case(kernel, path, "xqa", c, "skipped", reason="q_dist fixed: every request has q_len "
                            "tokens, trtllm-decode runs this batch", **base)
    if kernel == "decode-wrapper" and c.batch_size <= 2:
        return Row.for_case(kernel, path, "fa2", c, "wrong", reason="rel_err 3.1 > 0.02", rel_err=3.1,
                            tolerance=0.02, **base)
    n = int(rng.integers(60, 201) if c.power == "sustained" else rng.integers(25, 91))
    s = np.abs(1 + rng.normal(0.0, 0.01, n))
    s = s * (median / np.median(s))
    p25, p75 = float(np.percentile(s, 25)), float(np.percentile(s, 75))
    nbytes = c.kv_bytes()
    bw = nbytes / (median * 1e-6) / 1e9
    return Row.for_case(kernel, path, "synthetic", c, "ok", median_us=float(median), p25_us=p25, p75_us=p75,
                        iqr_us=p75 - p25, min_us=float(s.min()), rel_spread=float(1.57 * (p75 - p25) / np.sqrt(n) / median),
                        num_samples=n, calls_per_sample=1, samples_us=[round(float(x), 4) for x in s],
                        timer="cuda-graph", l2="rotate-4", stop="spread", kv_bytes=nbytes, kv_bandwidth_gbs=bw,
                        roofline_frac=bw / COPY_BW, sm_clock_mhz=1980.0, **base)


def generate(path: Path, seed: int, scale: float, noise: float = 0.0, regress: float = 0.0,
             shape: str = "axes") -> int:
    """One run folder; noise: per-row run-to-run spread of the medians; regress: fraction of ok rows 10% slower."""
    from kbench.runs import store

    rng = np.random.default_rng(seed)
    manifest = {"kind": "sweep", "device": {"name": "NVIDIA H200", "sm": 90}, "copy_bandwidth_gbs": COPY_BW,
                "read_bandwidth_gbs": 4650.0, "command": "benchmarks/scale.py",
                "command_line": f"benchmarks/scale.py (seed {seed})",
                "scenario": {"name": "scale", "model": "llama3-8b",
                             "heads": dict(zip(("num_qo_heads", "num_kv_heads", "head_dim"), HEADS))}}
    real_fsync = os.fsync
    os.fsync = lambda fd: None  # 100,000 fsyncs would make generating, not kbench, the slow part
    try:
        w = store.RunWriter(path, manifest)
        n = 0
        for c in _cases(scale, shape):
            times = _times(c)
            for kernel, kpath in KERNELS:
                t = times.get(kernel, 1.0)
                if noise:
                    t *= float(1 + rng.normal(0.0, noise))
                if regress and rng.random() < regress:
                    t *= 1.10
                w.append(_row(kernel, kpath, c, t, rng))
                n += 1
        w.finalize()
    finally:
        os.fsync = real_fsync
    return n


def measure(cmd: list[str], log: Path, pythonpath: str | None = None) -> dict:
    """Wall time, CPU time and peak RSS of one process (os.wait4 gives that child's own rusage)."""
    env = {**os.environ, "COLUMNS": "200", "GITHUB_STEP_SUMMARY": ""}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        # run from the work folder: `python -m` puts the current folder first on sys.path, so from the checkout's
        # root --pythonpath's older kbench was shadowed by the checkout's own (every "before" timed the new code)
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    return {"rc": p.returncode, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024,
            "lines": len(text.splitlines()), "tail": text.splitlines()[-3:]}


def prepare(d: Path, shape: str, scale: float, regenerate: bool, same_base: bool = False) -> dict[str, Path] | None:
    """The candidate run of one shape in both forms ({form: run folder}) and its baseline, generated under ``d``
    unless there with the same parameters; None when kbench baseline failed. same_base: the baseline is made from
    the candidate itself (half the generating; the gate reads and compares as many rows, its verdicts all pass)."""
    kbench = [sys.executable, "-m", "kbench.cli.main"]
    stamp = {"grid": _axes(shape, scale), "scale": scale, "shape": shape, "version": 3, "same_base": same_base}
    have = d / "params.json"
    if regenerate or not have.exists() or json.loads(have.read_text()) != stamp:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        t0 = time.perf_counter()
        # generated in a spawned process: Linux counts a parent's peak RSS into every child it forks and execs
        # (the old address space's high-water mark), so kbench timed from a process that had held 100,000 rows
        # read as 1.7 GiB whatever it used itself
        # (the two runs side by side: generating is most of a first benchmark's time)
        with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
            cand = ex.submit(generate, d / "candidate", seed=1, scale=scale, regress=0.01, shape=shape)
            base = None if same_base else ex.submit(generate, d / "base-run", seed=2, scale=scale, noise=0.01,
                                                    shape=shape)
            n, _ = cand.result(), base and base.result()
        print(f"{shape}: generated 2 runs of {n:,} rows in {time.perf_counter() - t0:.0f} s under {d}", flush=True)
        b = measure([*kbench, "baseline", str(d / ("candidate" if same_base else "base-run")), "--name", "scale-base",
                     "--out", str(d / "baselines")],
                    d / "baseline.log")
        if b["rc"] != 0:
            print(f"kbench baseline failed (exit {b['rc']}): {b['tail']}")
            return None
        have.write_text(json.dumps(stamp))
    journal_only = d / "candidate-journal"
    if not (journal_only / "rows.jsonl").exists():  # the same run as an interrupted sweep leaves it: no tables
        journal_only.mkdir(exist_ok=True)
        shutil.copy(d / "candidate" / "manifest.json", journal_only / "manifest.json")
        shutil.copy(d / "candidate" / "rows.jsonl", journal_only / "rows.jsonl")
    return {"parquet": d / "candidate", "journal": journal_only}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kbench-scale"), help="work folder (runs kept here)")
    ap.add_argument("--cases-scale", type=float, default=1.0,
                    help="how many values the shape's large axis gets (1.0: 100,352 rows; 3.0: 301,056 rows; "
                         "less than 1 for a quick try)")
    ap.add_argument("--shape", choices=(*SHAPES, "all"), action="append", default=None,
                    help="the grid's shape (repeatable; default: axes): " + "; ".join(f"{k}: {v}" for k, v in
                                                                                      SHAPES.items()))
    ap.add_argument("--regenerate", action="store_true", help="generate the runs again even if they exist")
    ap.add_argument("--only", choices=("report", "gate"), default=None, help="time one command only")
    ap.add_argument("--generate-only", action="store_true", help="generate the shapes' runs, time nothing")
    ap.add_argument("--same-base", action="store_true",
                    help="make the baseline from the candidate itself (no second run to generate; the gate reads "
                         "and compares as many rows, but every row passes)")
    ap.add_argument("--form", choices=("parquet", "journal"), default=None, help="time one form of the run only")
    ap.add_argument("--pythonpath", default=None, metavar="DIR",
                    help="time the kbench found in DIR instead (an older commit: git archive COMMIT, with cli/, "
                         "kernels/ and scenarios/ copied into kbench/ as the install lays them out)")
    a = ap.parse_args()
    kbench = [sys.executable, "-m", "kbench.cli.main"]
    shapes = list(SHAPES) if "all" in (a.shape or []) else list(dict.fromkeys(a.shape or ["axes"]))
    print("output of each command in DIR/SHAPE/<command>-<form>.log (form: parquet = a complete run, journal = "
          "the same run with only manifest.json and rows.jsonl)")
    print(f"{'shape':<6} {'command':<8} {'form':<8} {'rows':>8} {'exit':>4} {'wall s':>8} {'cpu s':>8} "
          f"{'peak MiB':>9} {'lines':>6}  target", flush=True)
    ok = True
    for shape in shapes:
        d = a.dir / shape
        forms = prepare(d, shape, a.cases_scale, a.regenerate, a.same_base)
        if forms is None:
            return 2
        rows = json.loads((d / "candidate" / "manifest.json").read_text()).get("num_rows")
        if a.generate_only:
            print(f"{shape}: {rows:,} rows per run under {d}", flush=True)
            continue
        for form, cand in forms.items():
            if a.form and form != a.form:
                continue
            cmds = {"report": [*kbench, "report", str(cand), "--out", str(d / f"report-{form}"), "--max-rows", "5"],
                    "gate": [*kbench, "gate", "--baseline", str(d / "baselines" / "scale-base"), "--candidate",
                             str(cand)]}
            for name, cmd in cmds.items():
                if a.only and name != a.only:
                    continue
                r = measure(cmd, d / f"{name}-{form}.log", a.pythonpath)
                t_max, m_max = TARGETS[name]
                met = r["wall_s"] <= t_max and r["rss_mib"] <= m_max
                ok &= met
                print(f"{shape:<6} {name:<8} {form:<8} {rows:>8,} {r['rc']:>4} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} "
                      f"{r['rss_mib']:>9.0f} {r['lines']:>6}  <= {t_max:.0f} s, <= {m_max:.0f} MiB: "
                      f"{'met' if met else 'MISSED'}", flush=True)
                if r["rc"] not in (0, 1):
                    print(f"  {name} failed: {r['tail']}")
                    ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
