"""The machine and its FlashInfer: the GPU seen, carried AOT modules checked, the GPU tests, and what a later
call can carry back (the JIT cache in parts, its modules as an AOT archive, modules built in the background)."""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from campaign import Ctx, Failed, last_line, step
from campaign_aot import aot_dir
from campaign_out import FILE_LIMIT, MIB, pack_jit_cache
from campaign_steps.common import FP8_GRID, SWEEP_GRID, json_of

# the grids whose modules prebuild-bg builds and aot-pack packs (tests/gpu/prebuild.py takes one quoted
# `kbench sweep` axis string per grid)
PREBUILD_GRIDS = [shlex.join(FP8_GRID), shlex.join(SWEEP_GRID)]


@step("env", limit=120, help="the GPU (nvidia-smi), kbench env, kbench kernels: CUDA, FlashInfer, kernels usable")
def env(ctx: Ctx) -> None:
    smi = ctx.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem",
                   "--format=csv,noheader"])
    ctx.figure(last_line(smi.text))
    ctx.kbench("env")
    k = json_of(ctx.kbench("kernels", "--json").text)
    dev = k.get("device", {})
    avail = [x["kernel"] for x in k.get("kernels", []) if x.get("available")]
    ctx.figure(f"SM{dev.get('sm')}, torch {dev.get('torch_version')}, CUDA {dev.get('cuda_version')}, flashinfer "
               f"{dev.get('flashinfer_version')}; {len(avail)} kernels available")
    ctx.check(dev.get("cuda") is True, "torch sees no CUDA GPU")
    ctx.check(not dev.get("flashinfer_error"), f"FlashInfer: {dev.get('flashinfer_error')}")
    ctx.check(bool(avail), "no kernel available")


@step("aot", limit=120, help="carried AOT modules: those built for another FlashInfer or that do not load are "
      "removed (the JIT builds them); fails when any was")
def aot(ctx: Ctx) -> None:
    d = aot_dir(ctx.cfg.site)
    if not any(d.glob("*/*.so")):
        ctx.figure("no AOT modules carried")
        return
    info = json_of(ctx.script("tests/gpu/campaign_aot.py", d).text, last=True)
    removed = info.get("removed", [])
    ctx.figure(f"{len(info.get('kept', []))} kept, {len(removed)} removed (FlashInfer {info.get('version')})")
    ctx.check(info.get("built_for") == info.get("version"),
              f"built for FlashInfer {info.get('built_for')}, this is {info.get('version')}: all removed")
    bad = [r for r in removed if not str(r[1]).startswith("built for")]
    ctx.check(not bad, f"{len(bad)} do not load here (removed): " + "; ".join(f"{m}: {w}" for m, w in bad[:2]))


@step("tests", limit=200, help="pytest -m gpu tests/test_gpu_kernels.py")
def tests(ctx: Ctx) -> None:
    d = ctx.run([ctx.cfg.python, "-m", "pytest", "-m", "gpu", "tests/test_gpu_kernels.py", "-q", "-rs",
                 "-p", "no:cacheprovider"], ok=None)
    summary = pytest_summary(d.text)
    ctx.figure(summary or last_line(d.text))
    ctx.check(d.rc == 0, f"pytest exited {d.rc}")
    ctx.check(bool(re.search(r"\b[1-9]\d* passed", summary or "")), "no GPU test passed")


def pytest_summary(text: str) -> str | None:
    """pytest's last summary line ("10 passed, 1 warning in 220.41s"), framed by '=' or not (-q prints it bare)."""
    m = re.findall(r"^=*\s*(\d+ (?:passed|failed|errors?|skipped|deselected|warnings?)\b.*?) in [\d.]+s",
                   text, re.M)
    return m[-1] if m else None


@step("cache", limit=120, help="FlashInfer's JIT cache as OUT/jit-cache.tgz.part-* (15 MiB each): carry them "
      "back as .fi-cache/")
def cache(ctx: Ctx) -> None:
    base = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE") or Path.home()) / ".cache" / "flashinfer"
    parts, why = pack_jit_cache(base, ctx.out, ctx.res.parent / "jit-cache.tgz")
    if why:
        raise Failed(why)
    ctx.figure(f"{len(parts)} part(s), {sum(p.stat().st_size for p in parts) / MIB:.1f} MiB")


@step("aot-pack", limit=180, help="the JIT cache's modules of the sweep and fp8 grids as OUT/aot.tgz: carry it "
      "back as .fi-cache/aot.tgz")
def aot_pack(ctx: Ctx) -> None:
    out = ctx.out / "aot.tgz"
    d = ctx.script("tests/gpu/prebuild.py", "--pack-only", "--out", out, *PREBUILD_GRIDS)
    ctx.figure(last_line(d.text))
    ctx.check(out.exists() and out.stat().st_size <= FILE_LIMIT, f"{out.name} missing or over "
                                                                 f"{FILE_LIMIT // MIB} MiB")


@step("prebuild-bg", limit=30, help="start building, in the background, the modules of the sweep and fp8 grids "
      "that the carried AOT modules lack")
def prebuild_bg(ctx: Ctx) -> None:
    if not (ctx.repo / "tests/gpu/prebuild.py").is_file():
        raise Failed("tests/gpu/prebuild.py is missing")
    p = ctx.background("prebuild", [ctx.cfg.python, "tests/gpu/prebuild.py", "--parallel", "3", "--out",
                                    ctx.res.parent / "aot-gpu.tgz", *PREBUILD_GRIDS])
    ctx.figure(f"pid {p.pid}, log logs/prebuild.txt")


@step("prebuild-wait", limit=420, help="wait for prebuild-bg (a later step that needs a module still compiling "
      "waits on its lock)")
def prebuild_wait(ctx: Ctx) -> None:
    rc = ctx.wait_background("prebuild")
    log = (ctx.res / "logs" / "prebuild.txt").read_text(encoding="utf-8", errors="replace")
    built = len(re.findall(r"^  built +\d+ s ", log, re.MULTILINE))  # kbench prebuild's line per module
    failed = len(re.findall(r"^  FAILED +\d+ s ", log, re.MULTILINE))
    ctx.figure(f"{built} built, {failed} failed; {last_line(log)}")
    ctx.check(rc == 0, f"prebuild.py exited {rc}")
