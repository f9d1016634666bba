"""Longer studies, each split into resumable sweeps and a table step: realistic batches (#13), the bandwidth
ceiling (#17), the adaptive sweep (#15), the power states (#16), and the timer-noise probe (#6)."""
from __future__ import annotations

import re

from campaign import Ctx, group, step
from campaign_runs import run_folders
from campaign_steps.common import check_rows, finished

# --- realistic batches (#13): five small sweeps, then tests/gpu/realistic.py's table (exit 1 on a wrong kernel)
REAL = ["--budget", "0.5", "--kernels", "trtllm-decode,trtllm-decode-ragged,fa2-prefill", "--kv-len", "4096",
        "--batch-size", "16,64"]
REAL_SWEEPS = {
    "real-kv": ["--scenario", "draft-extend", "--q-len", "4,8", "--kv-dist", "fixed,lognormal:1.0", *REAL],
    "real-accept": ["--scenario", "draft-extend", "--q-len", "4,8", "--q-dist", "accept:0.7", *REAL],
    "real-gptoss": ["--scenario", "gpt-oss", "--q-len", "4", *REAL],
    "real-msl": ["--scenario", "draft-extend", "--q-len", "4", "--max-seq-len", "tight,context:131072", *REAL],
    # skip-softmax: fmha-v2 takes it on SM90
    "real-skip": ["--scenario", "draft-extend", "--q-len", "4", "--skip-softmax", "off,1000", "--budget", "0.5",
                  "--kernels", "trtllm-fmha-v2,fa2-prefill,trtllm-decode", "--kv-len", "4096", "--batch-size", "16,64"],
}


def _real(name: str, args: list[str]):
    def fn(ctx: Ctx) -> None:
        check_rows(ctx, ctx.sweep(name, args))
    return fn


for _name, _args in REAL_SWEEPS.items():
    step(_name, limit=300, resumable=True, help=f"realistic batches (#13): {' '.join(_args[:6])}")(_real(_name, _args))


@step("real-table", limit=90, help="tests/gpu/realistic.py over the five runs (fails on a wrong or failed kernel)")
def real_table(ctx: Ctx) -> None:
    runs = [finished(ctx, n) for n in REAL_SWEEPS]
    d = ctx.script("tests/gpu/realistic.py", ctx.res / "realistic.txt", *(r.path for r in runs))
    ctx.figure(f"{len(runs)} runs")
    ctx.report(_tail(d.text, 60))


group("realistic", [*REAL_SWEEPS, "real-table"], "realistic batches (#13)")
group("realistic-core", ["real-kv", "real-accept", "real-gptoss", "real-msl"])

# --- the bandwidth ceiling (#17): no kernel may read KV faster than the read probes' ceiling
CEILING_MAX = 1.0
PEAK_SLACK = 1.03  # kbench.timing.hardware.PEAK_SLACK (the campaign imports no kbench)


@step("ceiling", limit=120, help="copy vs read bandwidth; every sweep's best KV read rate at most the read ceiling")
def ceiling(ctx: Ctx) -> None:
    extra = run_folders(ctx.res / "adaptive", "full") + run_folders(ctx.res / "adaptive", "adaptive")
    d = ctx.script("tests/gpu/ceiling.py", ctx.res, "results/baselines/h200-draft-extend-kv4096", *extra)
    copy = re.search(r"copy ([\d,]+) GB/s\s+read ([\d,]+) GB/s", d.text)
    if copy:
        ctx.figure(f"copy {copy.group(1)} GB/s, read {copy.group(2)} GB/s")
    ctx.bound("highest kernel rate / read ceiling", ceiling_ratio(d.text), hi=CEILING_MAX, fmt=".3f")
    peak = peak_ratio(d.text)
    if peak is not None:  # the ceiling itself must be possible: at most the memory's theoretical peak (NVML), within 3%
        ctx.bound("read ceiling / memory peak", peak, hi=PEAK_SLACK, fmt=".3f")
    ctx.report(_tail(d.text, 30))


def ceiling_ratio(text: str) -> float | None:
    m = re.search(r"highest kernel rate / read ceiling: ([\d.]+)", text)
    return float(m.group(1)) if m else None


def peak_ratio(text: str) -> float | None:
    """tests/gpu/ceiling.py's read ceiling over the memory's theoretical peak, where NVML gave the peak."""
    m = re.search(r"read ceiling / peak: ([\d.]+)", text)
    return float(m.group(1)) if m else None


# --- the adaptive sweep (#15): the full draft-extend grid at three KV lengths, the adaptive sweep of it, and
# tests/gpu/adaptive_bench.py's table. The planner promises no unmeasured point costs more than the regret
# bound (2%) as far as its neighbours tell; the H200 gave mean 0.12%, worst 1.64% at the points it inferred,
# 26.7% of the measurements (README "Adaptive sweep")
ADAPTIVE_KV = "512,4096,32768"
ADAPTIVE = ["--adaptive", "--regret-bound", "2", "--coarse-step", "8"]  # adaptive_bench.py's defaults
ADAPTIVE_MEAN_PCT, ADAPTIVE_INFERRED_WORST_PCT, ADAPTIVE_MEASURED_FRAC = 1.0, 4.0, 0.5


@step("adaptive-full", limit=540, resumable=True, help=f"the full draft-extend grid at kv {ADAPTIVE_KV} (~9.5 min)")
def adaptive_full(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("full", ["--scenario", "draft-extend", "--kv-len", ADAPTIVE_KV], ctx.res / "adaptive"))


@step("adaptive-run", limit=540, resumable=True, help="the adaptive sweep of the same grid")
def adaptive_run(ctx: Ctx) -> None:
    run = ctx.sweep("adaptive", ["--scenario", "draft-extend", "--kv-len", ADAPTIVE_KV, *ADAPTIVE], ctx.res / "adaptive")
    check_rows(ctx, run)
    ctx.figure(f"stopped by {(run.manifest.get('adaptive') or {}).get('stopped_by', '?')}")


@step("adaptive-table", limit=120, help=f"adaptive vs full: mean regret <= {ADAPTIVE_MEAN_PCT}%, worst at inferred "
      f"points <= {ADAPTIVE_INFERRED_WORST_PCT}%, measurements <= {ADAPTIVE_MEASURED_FRAC:.0%}")
def adaptive_table(ctx: Ctx) -> None:
    full = finished(ctx, "full", ctx.res / "adaptive", by="adaptive-full")
    ada = finished(ctx, "adaptive", ctx.res / "adaptive", by="adaptive-run")
    d = ctx.script("tests/gpu/adaptive_bench.py", "--full", full.path, "--adaptive", ada.path)
    f = adaptive_figures(d.text)
    ctx.bound("measured", f.get("measured_frac"), hi=ADAPTIVE_MEASURED_FRAC, fmt=".2f")
    ctx.bound("mean regret", f.get("mean_pct"), hi=ADAPTIVE_MEAN_PCT, unit="%")
    ctx.bound("worst inferred", f.get("inferred_worst_pct"), hi=ADAPTIVE_INFERRED_WORST_PCT, unit="%")
    if f.get("worst_pct") is not None:
        ctx.figure(f"worst {f['worst_pct']:.2f}% (measured by both: run-to-run noise)")
    ctx.report(_tail(d.text, 40))


def adaptive_figures(text: str) -> dict:
    """Figures of adaptive_bench.py's table: measured_frac, mean_pct, worst_pct, inferred_mean/worst_pct."""
    out = {}
    m = re.search(r"\| measurements \(timed kernel x case\) \| (\d+) \| (\d+) ", text)
    if m and int(m.group(1)):
        out["measured_frac"] = int(m.group(2)) / int(m.group(1))
    m = re.search(r"\| mean regret \(full grid's rows\) \| 0 \| ([\d.]+)%", text)
    if m:
        out["mean_pct"] = float(m.group(1))
    m = re.search(r"\| worst regret \| 0 \| ([\d.]+)%", text)
    if m:
        out["worst_pct"] = float(m.group(1))
    m = re.search(r"\| regret at the \d+ cases not measured by the adaptive run[^|]*\| - \| mean ([\d.]+)%, "
                  r"worst ([\d.]+)%", text)
    if m:
        out["inferred_mean_pct"], out["inferred_worst_pct"] = float(m.group(1)), float(m.group(2))
    return out


group("adaptive", ["adaptive-full", "adaptive-run", "adaptive-table"], "the adaptive sweep (#15), resumable parts")

# --- the power states (#16): the bs 16/64 kv 4096 grid with --power both, twice (each ~6.5 min: one per call);
# tests/gpu/power_states.py's per-state repeatability against its goals (the H200: median 0.43-0.48%,
# p95 1.57-1.60%)
POWER_GRID = ["--scenario", "draft-extend", "--kv-len", "4096", "--batch-size", "16,64", "--power", "both"]
POWER_MEDIAN_PCT, POWER_P95_PCT = 1.0, 3.0


def _power(name: str):
    def fn(ctx: Ctx) -> None:
        check_rows(ctx, ctx.sweep(name, POWER_GRID))
    return fn


for _i in (1, 2):
    step(f"power-{_i}", limit=540, resumable=True, help=f"--power both sweep {_i} of 2")(_power(f"power{_i}"))


@step("power-table", limit=120, help=f"per-state repeatability: median <= {POWER_MEDIAN_PCT}%, p95 <= "
      f"{POWER_P95_PCT}%; flips, clocks, throttle reasons")
def power_table(ctx: Ctx) -> None:
    a, b = finished(ctx, "power1", by="power-1"), finished(ctx, "power2", by="power-2")
    d = ctx.script("tests/gpu/power_states.py", a.path, b.path)
    states = power_figures(d.text)
    for state in ("unthrottled", "sustained"):
        s = states.get(state)
        if s is None:
            ctx.check(False, f"no {state} rows in both runs")
            continue
        ctx.bound(f"{state} median", s["median"], hi=POWER_MEDIAN_PCT, unit="%")
        ctx.bound("p95", s["p95"], hi=POWER_P95_PCT, unit="%")
    ctx.report(_tail(d.text, 40))


def power_figures(text: str) -> dict:
    """{state: {rows, median, p95, max}} from power_states.py's first table."""
    out = {}
    for m in re.finditer(r"^(unthrottled|sustained)\s+(\d+)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%", text, re.M):
        out.setdefault(m.group(1), {"rows": int(m.group(2)), "median": float(m.group(3)), "p95": float(m.group(4)),
                                    "max": float(m.group(5))})
    return out


group("power", ["power-1", "power-2", "power-table"], "the power states (#16)")


@step("probe", limit=300, help="timer noise and PDL diagnostics (#6): tests/gpu/probe_noise.py")
def probe(ctx: Ctx) -> None:
    d = ctx.script("tests/gpu/probe_noise.py", ctx.res / "probe")
    ctx.report(_tail(d.text, 30))


def _tail(text: str, n: int) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:])

