"""What several steps check: a sweep's rows, a finished run of another step, JSON a command wrote."""
from __future__ import annotations

import json
from pathlib import Path

from campaign import Ctx, Failed
from campaign_runs import Run, run_folders

# the README sweep (Llama-3-8B heads, bs 16 and 64, q 1..16, kv 4096): sweep, sweep2, repeat, time-to-answer
SWEEP_GRID = ["--scenario", "draft-extend", "--kv-len", "4096", "--batch-size", "16,64"]
# fp8 KV with bf16 and fp8 queries (the fp8 step; prebuild-bg and aot-pack build and pack its modules)
FP8_GRID = ["--scenario", "draft-extend", "--batch-size", "2,16", "--q-len", "4", "--kv-len", "1024", "--kv-dtype",
            "fp8", "--q-dtype", "dtype,fp8", "--kernels", "trtllm-decode,trtllm-fmha-v2,fa2-prefill,decode-wrapper"]


def check_rows(ctx: Ctx, run: Run, label: str | None = None, need_ok: bool = True) -> None:
    """No kernel row wrong or failed, some ok (need_ok), no (kernel, case) twice; the counts as a figure."""
    rows = run.measured()
    bad = [r for r in rows if r.get("status") in ("wrong", "failed")]
    ctx.figure(f"{label or run.path.name}: {run.brief()}")
    ctx.check(not bad, f"{len(bad)} wrong/failed row(s) in {run.path.name}: " + ", ".join(
        f"{r.get('kernel')} {r.get('case_id')} {r.get('status')} ({str(r.get('reason', ''))[:60]})" for r in bad[:3]))
    if need_ok:
        ctx.check(any(r.get("status") == "ok" for r in rows), f"no ok kernel row in {run.path.name}")
    keys = [(r.get("kernel"), r.get("case_id"), r.get("power", "")) for r in rows]
    ctx.check(len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} (kernel, case) row(s) twice in "
                                           f"{run.path.name}")


def finished(ctx: Ctx, name: str, out: Path | None = None, by: str | None = None) -> Run:
    """The newest complete run of `name` (made by the step `by`, in this call or carried from an earlier one)."""
    found = run_folders(Path(out or ctx.res), name)
    if not found or not Run(found[-1]).complete:
        state = f"{found[-1].name} is {Run(found[-1]).status}" if found else "none"
        raise Failed(f"needs a complete run {name} ({state}): run the {by or name} step first")
    return Run(found[-1], "done")


def json_of(text: str, last: bool = False):
    """The first (or last) JSON value in a command's output (it may print other lines around it)."""
    dec = json.JSONDecoder()
    found = []
    for i, ch in enumerate(text):
        if ch in "{[" and (i == 0 or text[i - 1] == "\n"):
            try:
                found.append(dec.raw_decode(text, i)[0])
            except ValueError:
                continue
            if not last:
                break
    if not found:
        raise Failed("no JSON in the command's output")
    return found[-1]


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise Failed(f"cannot read {path}: {e}") from None
