"""Feature checks written by other issues (each a script under tests/gpu/ that exits non-zero when a check fails)
and issue #29's time to the answer."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
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
feature("routes", "tests/gpu/engine_replay.py", 37, limit=540, report_lines=90)  # engine routes + one step replayed
feature("fa3", "tests/gpu/fa3_check.py", 38, limit=240, report_lines=60)


@step("replay", limit=300, help="#37: one engine step per setting replayed against the committed engine-routes baseline")
def replay(ctx: Ctx) -> None:
    d = ctx.script("tests/gpu/engine_replay.py", "--out", ctx.res / "replay", "--run",
                   "results/baselines/h100-engine-routes-kv4096")
    ctx.figure(last_line(d.text))
    ctx.report("\n".join([ln for ln in d.text.splitlines() if ln.strip()][-60:]))  # vLLM's FA3 library: loads, checked, timed

# the committed tree baseline: chain and topk:4 at the README's grid (kv 4096, bs 16 and 64), tree sizes 4..16,
# the kernels that take a tree (and the FA3 library, chains only) with the engines' routes
TREE_BASE = ["--scenario", "eagle-tree", "--tree", "chain,topk:4", "--kv-len", "4096", "--batch-size", "16,64",
             "--q-len", "4,8,16", "--kernels", "trtllm-decode,fa2-prefill,vllm-fa3,routes"]


@step("fa3-grid", limit=300, resumable=True, help="FA3 beside FlashInfer's fa3/fa2 prefill and xqa on the README grid")
def fa3_grid(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("fa3-grid", [*SWEEP_GRID, "--kernels",
                                           "trtllm-decode,fa2-prefill,fa3-prefill,vllm-fa3,vllm-fa3-sgl-call"]))


@step("tree-base", limit=360, resumable=True, help="the tree baseline: eagle-tree chain,topk:4, kv 4096, bs 16,64")
def tree_base(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("eagle-tree-base", TREE_BASE))


# --- time to the answer (#29): the README sweep three times, each a fresh run (never resumed: a resumed run's
# wall and first row would not be a user's): with an empty JIT cache and no AOT module, with the JIT cache that
# run left (warm), and with an empty JIT cache and the carried prebuild archive (.fi-cache/aot.tgz, unpacked
# into the bundle's flashinfer/data/aot by h200.sh); Triton's cache (kbench's read probes) goes with the JIT
# cache, as on a fresh machine. Figures: the command's wall, the run's compile and timing (manifest wall_s;
# streamed, the default since #29 item 2, compile is the background build's wall, overlapped with measuring), the
# time from the sweep's start to its first ok row (manifest wall_s.first_ok_row_s) and from the command's start
# (rows' measured_at, whole seconds: it includes the process start and the bandwidth probes).
TTA_RUNS = ("cold", "warm", "prebuild")
# stream-repeat: the streamed cold sweep against a warm one, per row |cold/warm - 1| of the medians, must not be
# clearly worse than two warm sweeps against each other: at most 2x their median (p95) plus 0.3 (1.0) points
STREAM_FACTOR, STREAM_MEDIAN_PP, STREAM_P95_PP = 2.0, 0.3, 1.0


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
    comp = run.manifest.get("compile") or {}
    fig = {"run": str(run.path), "wall_s": round(wall, 3), "compile_s": w.get("compile_s"),
           "timing_s": w.get("timing_s"), "first_ok_s": run.first_ok_after(started),
           "first_ok_row_s": w.get("first_ok_row_s"), "run_wall_s": w.get("total_s"),
           "compile_mode": comp.get("mode"), "modules_built": comp.get("built"), "waited_s": comp.get("waited_s")}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{which}.json").write_text(json.dumps(fig))
    first = "n/a" if fig["first_ok_s"] is None else f"{fig['first_ok_s']:.0f} s"
    in_run = "" if fig["first_ok_row_s"] is None else f" ({fig['first_ok_row_s']:.1f} s into the sweep)"
    how = "" if not fig["compile_mode"] else f" ({fig['compile_mode']}" + (
        f", {fig['modules_built']} built, measuring waited {fig['waited_s']:.1f} s" if fig["modules_built"] else "") + ")"
    ctx.figure(f"wall {wall:.1f} s, compile {fig['compile_s'] or 0:.1f} s{how}, timing {fig['timing_s'] or 0:.1f} s, "
               f"first ok row {first}{in_run}")
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
    archive = os.environ.get("AOT_ARCHIVE")  # h200.sh: the carried .fi-cache/aot.tgz (`kbench prebuild --archive`)
    if archive:  # installed as a user installs it (h200.sh unpacked it already: unchanged modules read as present)
        t0 = time.time()
        d = ctx.kbench("prebuild", "--load", archive)
        ctx.figure(f"kbench prebuild --load in {time.time() - t0:.1f} s: {last_line(d.text)}")
    n = len(list(aot_dir(ctx.cfg.site).glob("*/*.so")))
    if not n:
        raise Failed("no AOT modules: carry a prebuild archive as .fi-cache/aot.tgz")
    ctx.figure(f"{n} AOT modules")
    fig = tta_sweep(ctx, "prebuild", _workspace(ctx, "prebuild"), empty=True, aot=True)
    cold = _cold_figures(ctx)  # this call's, or one carried back from an earlier call
    if cold is not None:
        ctx.check((fig["compile_s"] or 0) < (cold["compile_s"] or 0),
                  f"compile {fig['compile_s']} s with the archive, {cold['compile_s']} s cold")


def _figures(ctx: Ctx, which: str) -> dict | None:
    p = ctx.res / "tta" / f"{which}.json"
    return json.loads(p.read_text()) if p.exists() else None


@step("stream-repeat", limit=150, help="#29: tta-cold's streamed sweep vs tta-warm's, per-row medians, against the "
      "spread of tta-warm and one more warm sweep")
def stream_repeat(ctx: Ctx) -> None:
    """Overlapping the compile with measuring must not hurt timing quality: the streamed (cold) run's rows against
    the warm run's are compared with the run-to-run spread of two warm runs (this step sweeps the second)."""
    from campaign_runs import repeatability

    cold, warm = _figures(ctx, "cold"), _figures(ctx, "warm")
    if cold is None or warm is None or not Path(cold["run"]).is_dir() or not Path(warm["run"]).is_dir():
        raise Failed("needs tta-cold and tta-warm on this machine first (their runs)")
    if cold.get("compile_mode") != "stream" or not cold.get("modules_built"):
        ctx.figure(f"note: tta-cold compiled {cold.get('compile_mode')}, {cold.get('modules_built')} module(s) "
                   "built while measuring")
    again = _figures(ctx, "warm2")
    if again is None or not Path(again["run"]).is_dir():
        again = tta_sweep(ctx, "warm2", _workspace(ctx, "cold"), empty=False, aot=False)
    rows = {k: Run(Path(f["run"])).rows() for k, f in (("cold", cold), ("warm", warm), ("warm2", again))}
    streamed = repeatability(rows["warm"], rows["cold"])
    spread = repeatability(rows["warm"], rows["warm2"])
    if not streamed["rows"] or not spread["rows"]:
        raise Failed(f"no ok rows in common (streamed vs warm {streamed['rows']}, warm vs warm {spread['rows']})")
    ratios = sorted(y / x for _, _, _, x, y in streamed["all"])
    ctx.figure(f"streamed/warm over {streamed['rows']} rows: median ratio {ratios[len(ratios) // 2]:.4f}, "
               f"|ratio-1| median {streamed['median']:.2f}% p95 {streamed['p95']:.2f}% max {streamed['max']:.2f}%")
    ctx.figure(f"warm/warm: |ratio-1| median {spread['median']:.2f}% p95 {spread['p95']:.2f}% max {spread['max']:.2f}%")
    ctx.bound("streamed |diff| median", streamed["median"], hi=STREAM_FACTOR * spread["median"] + STREAM_MEDIAN_PP,
              unit="%")
    ctx.bound("streamed |diff| p95", streamed["p95"], hi=STREAM_FACTOR * spread["p95"] + STREAM_P95_PP, unit="%")
    ctx.report("worst streamed rows (|diff| %, kernel, case, warm us, streamed us):\n" + "\n".join(
        f"  {d:5.2f}  {k:16} {c:48} {x:9.1f} {y:9.1f}" for d, k, c, x, y in streamed["worst"]))


group("time-to-answer", ["tta-cold", "tta-warm", "stream-repeat", "tta-prebuild"],
      "#29: cold (streamed), warm, prebuild archive, the streamed run's timing against warm runs")


# issue 44: the engine-routes baseline (page 1 and 64, chains and topk:4 trees, bs 1..256, q 4/8, kv 4096) and the
# table of SGLang's routes at page 1 against page 64 and fa3's tree cascade against flashinfer's tree route
@step("engine-routes", limit=420, resumable=True, help="#44: kbench sweep -s engine-routes (every row checked), then "
      "tests/gpu/route_pages.py's table")
def engine_routes(ctx: Ctx) -> None:
    run = ctx.sweep("engine-routes", ["--scenario", "engine-routes"])
    check_rows(ctx, run)
    d = ctx.script("tests/gpu/route_pages.py", run.path, "--json", ctx.res / "route_pages.json", ok=None)
    ctx.figure(last_line(d.text))
    ctx.check(d.rc == 0, "route_pages.py: wrong or failed route rows")
    ctx.report(d.text)
