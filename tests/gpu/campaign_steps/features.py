"""Feature checks written by other issues (each a script under tests/gpu/ that exits non-zero when a check fails)
and issue #29's time to the answer."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import time
from pathlib import Path

from campaign import Ctx, Failed, group, last_line, step
from campaign_aot import aot_dir, without_aot
from campaign_runs import Run, run_folders
from campaign_steps.common import SWEEP_GRID, check_rows


def feature(name: str, script: str, issue: int, limit: float = 300, report_lines: int = 40) -> None:
    """A step that runs `python3 SCRIPT --out RES/NAME`: its exit code is the check, its last line the figures,
    the last `report_lines` lines of its output the report. (The script runs its own sweeps: a call cut short
    runs it again from the start.)"""
    def fn(ctx: Ctx) -> None:
        d = ctx.script(script, "--out", ctx.res / name)
        ctx.figure(last_line(d.text))
        ctx.report("\n".join([ln for ln in d.text.splitlines() if ln.strip()][-report_lines:]))
    step(name, limit=limit, help=f"#{issue}: {script} --out RES/{name}")(fn)


feature("tree", "tests/gpu/tree_check.py", 26, limit=330, report_lines=60)  # EAGLE draft trees, ~4 min
feature("mla", "tests/gpu/mla_check.py", 27, limit=420)  # MLA kernels (FlashMLA from the carried wheel): 4 sweeps, ~4-5 min cold


# --- time to the answer (#29): the README sweep three times, each a fresh run (never resumed: a resumed run's
# wall and first row would not be a user's): with an empty JIT cache and no AOT module, with the JIT cache that
# run left (warm), and with an empty JIT cache and the carried prebuild archive (.fi-cache/aot.tgz, unpacked
# into the bundle's flashinfer/data/aot by h200.sh); Triton's cache (kbench's read probes) goes with the JIT
# cache, as on a fresh machine. Figures: the command's wall, the run's compile and timing
# (manifest wall_s), and the time from the command's start to the first ok kernel row (rows' measured_at).
TTA_RUNS = ("cold", "warm", "prebuild")


def tta_sweep(ctx: Ctx, which: str, workspace: Path, empty: bool, aot: bool) -> dict:
    if empty:
        shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True, exist_ok=True)
    out = ctx.res / "tta"
    before = set(run_folders(out, f"tta-{which}"))
    started, t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0), time.time()
    with without_aot(ctx.cfg.site) if not aot else contextlib.nullcontext():
        ctx.kbench("sweep", *SWEEP_GRID, "--out", out, "--name", f"tta-{which}",
                   env={"FLASHINFER_WORKSPACE_BASE": workspace, "TRITON_CACHE_DIR": workspace / "triton"})
    wall = time.time() - t0
    found = [p for p in run_folders(out, f"tta-{which}") if p not in before]
    if not found:
        raise Failed(f"kbench sweep wrote no run folder {out}/tta-{which}-*")
    run = Run(found[-1])
    check_rows(ctx, run)
    w = run.wall()
    fig = {"run": str(run.path), "wall_s": round(wall, 1), "compile_s": w.get("compile_s"),
           "timing_s": w.get("timing_s"), "first_ok_s": run.first_ok_after(started)}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{which}.json").write_text(json.dumps(fig))
    first = "n/a" if fig["first_ok_s"] is None else f"{fig['first_ok_s']:.0f} s"
    ctx.figure(f"wall {wall:.1f} s, compile {fig['compile_s'] or 0:.1f} s, timing {fig['timing_s'] or 0:.1f} s, "
               f"first ok row {first}")
    return fig


def _cold_figures(ctx: Ctx) -> dict | None:
    p = ctx.res / "tta" / "cold.json"
    return json.loads(p.read_text()) if p.exists() else None


def _workspace(ctx: Ctx, which: str) -> Path:
    return ctx.res.parent / f"tta-jit-{which}"


@step("tta-cold", limit=480, help="#29: the README sweep with an empty JIT cache and no AOT module")
def tta_cold(ctx: Ctx) -> None:
    (ctx.res / "tta" / "cold.json").unlink(missing_ok=True)
    tta_sweep(ctx, "cold", _workspace(ctx, "cold"), empty=True, aot=False)


@step("tta-warm", limit=150, help="#29: the same again with the JIT cache tta-cold left")
def tta_warm(ctx: Ctx) -> None:
    cold = _cold_figures(ctx)
    if cold is None or not any(_workspace(ctx, "cold").rglob("*.so")):
        raise Failed("needs tta-cold on this machine first (its JIT cache)")
    fig = tta_sweep(ctx, "warm", _workspace(ctx, "cold"), empty=False, aot=False)
    ctx.check((fig["compile_s"] or 0) < (cold["compile_s"] or 0),
              f"compile {fig['compile_s']} s with a warm cache, {cold['compile_s']} s cold")


@step("tta-prebuild", limit=200, help="#29: the same with an empty JIT cache and the carried prebuild archive")
def tta_prebuild(ctx: Ctx) -> None:
    n = len(list(aot_dir(ctx.cfg.site).glob("*/*.so")))
    if not n:
        raise Failed("no AOT modules: carry a prebuild archive as .fi-cache/aot.tgz")
    ctx.figure(f"{n} AOT modules")
    fig = tta_sweep(ctx, "prebuild", _workspace(ctx, "prebuild"), empty=True, aot=True)
    cold = _cold_figures(ctx)  # this call's, or one carried back from an earlier call
    if cold is not None:
        ctx.check((fig["compile_s"] or 0) < (cold["compile_s"] or 0),
                  f"compile {fig['compile_s']} s with the archive, {cold['compile_s']} s cold")


group("time-to-answer", ["tta-cold", "tta-warm", "tta-prebuild"], "#29: cold, warm, prebuild archive")
