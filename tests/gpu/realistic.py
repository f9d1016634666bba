"""Realistic speculative-decoding batches on the GPU (issue #13): every kernel checked against the reference
in each new mode, timed with kbench's graph timer, and a short table of who wins by how much.

    python3 tests/gpu/realistic.py OUT_DIR [--quick]

Comparisons (Llama-3-8B heads 32/8/128 unless said, bf16, page 64, kv 4096, bs 16 and 64, q 4 and 8):
  kv:      uniform vs lognormal:1.0 per-request KV (same total KV)
  accept:  accept:0.7 ragged q: trtllm-decode padded vs trtllm-decode-ragged vs fa2-prefill (ragged natively)
  gpt-oss: 64/8/64 heads, q 4: full attention vs window 128, each without and with sinks
  msl:     max_seq_len tight vs context:131072 (page table as wide as the context, as SGLang passes it)
Writes OUT_DIR/realistic.json (one record per kernel and case) and prints the table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kbench.case import Case
from kbench.check import compare, tolerance_for
from kbench.errors import first_line
from kbench.kernels.device import probe_device
from kbench.kernels.inputs import build_inputs
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import get_kernel
from kbench.kernels.timer import GraphTimer
from kbench.scenario import Timing
from kbench.sweep import copies_for

LLAMA = (32, 8, 128)
GPT_OSS = (64, 8, 64)
KERNELS = ("trtllm-decode", "trtllm-decode-ragged", "fa2-prefill")


@dataclass
class Result:
    study: str
    mode: str
    case_id: str
    kernel: str
    backend: str
    status: str  # ok | wrong | failed | skipped
    median_us: float | None = None
    rel_err: float | None = None
    tolerance: float | None = None
    reason: str = ""
    kv_max: int = 0
    kv_min: int = 0
    q_mean: float = 0.0


def cases(quick: bool):
    bss = (16,) if quick else (16, 64)
    qs = (4,) if quick else (4, 8)
    for bs in bss:
        for q in qs:
            for kv_dist in ("fixed", "lognormal:1.0"):
                yield "kv", f"bs{bs} q{q}", kv_dist, Case(bs, q, 4096, *LLAMA, kv_dist=kv_dist)
            yield "accept", f"bs{bs} q{q}", "fixed", Case(bs, q, 4096, *LLAMA)
            yield "accept", f"bs{bs} q{q}", "accept:0.7", Case(bs, q, 4096, *LLAMA, q_dist="accept:0.7")
        for w, s in ((-1, "off"), (-1, "on"), (128, "off"), (128, "on")):
            mode = ("full" if w < 0 else f"window {w}") + (" + sinks" if s == "on" else "")
            yield "gpt-oss", f"bs{bs} q4", mode, Case(bs, 4, 4096, *GPT_OSS, window_left=w, sinks=s)
        for msl in ("tight", "context:131072"):
            yield "msl", f"bs{bs} q4", msl, Case(bs, 4, 4096, *LLAMA, max_seq_len=msl)


def run(out_dir: Path, quick: bool, kernels: list[str]) -> list[Result]:
    import torch

    dev = probe_device()
    if not dev.cuda:
        sys.exit("needs a CUDA GPU")
    timing = Timing(budget_s=1.0)
    timer = GraphTimer(timing.stop_rule(), warmup_ms=timing.warmup_ms, duty=timing.duty)
    results: list[Result] = []
    t_start = time.perf_counter()
    for study, shape, mode, case in cases(quick):
        copies = copies_for(case, dev, timing)
        inputs = build_inputs(case, dev.torch_device, copies=copies)
        ref = reference_attention(inputs)
        b = inputs.lengths
        common = dict(study=study, mode=f"{shape} {mode}", case_id=case.case_id, kv_max=max(b.kv), kv_min=min(b.kv),
                      q_mean=sum(b.q) / len(b.q))
        tol = tolerance_for(case.dtype, case.kv_dtype)
        for name in kernels:
            k = get_kernel(name)
            reason = k.supports(dev, case)
            if reason:
                results.append(Result(kernel=name, backend=k.backend(dev), status="skipped", reason=reason, **common))
                continue
            try:
                fn = k.prepare(inputs)
                out = fn(0)
                torch.cuda.synchronize()
                chk = compare(k.checked_output(inputs, out), ref, tol)
            except Exception as e:  # a kernel that cannot take the call: a row with the reason
                results.append(Result(kernel=name, backend=k.backend(dev), status="failed", reason=first_line(e),
                                      **common))
                continue
            r = Result(kernel=name, backend=k.backend(dev), status="ok" if chk.ok else "wrong", rel_err=chk.rel_err,
                       tolerance=tol, reason="" if chk.ok else chk.describe(), **common)
            if chk.ok:
                r.median_us = timer.measure(fn, copies).median_us
            results.append(r)
            print(f"{time.perf_counter() - t_start:6.0f} s  {study:8s} {r.mode:28s} {name:22s} {r.status:7s} "
                  f"{r.median_us or 0:9.1f} us  err {r.rel_err if r.rel_err is not None else float('nan'):.4f} "
                  f"{r.reason[:90]}", flush=True)
        del inputs, ref
        torch.cuda.empty_cache()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "realistic.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    return results


def table(results: list[Result]) -> str:
    """kernel, mode, median us, rel err, and per mode the winner and its margin over the runner-up."""
    lines = [f"{'study':8s} {'mode':30s} {'kernel':22s} {'backend':10s} {'median us':>10s} {'rel err':>8s}  note"]
    by_mode: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        by_mode.setdefault((r.study, r.mode), []).append(r)
    for (study, mode), rs in by_mode.items():
        timed = sorted((r for r in rs if r.median_us), key=lambda r: r.median_us)
        for r in rs:
            if r.reason.startswith("q_dist fixed"):  # the ragged kernel on a uniform batch: nothing to compare
                continue
            note = r.reason[:70] if r.status != "ok" else ""
            if timed and r is timed[0]:
                note = "WINNER" + (f" by {timed[1].median_us / r.median_us:.2f}x over {timed[1].kernel}"
                                   if len(timed) > 1 else "")
            us = f"{r.median_us:10.1f}" if r.median_us else f"{r.status:>10s}"
            err = f"{r.rel_err:8.4f}" if r.rel_err is not None else f"{'-':>8s}"
            lines.append(f"{study:8s} {mode:30s} {r.kernel:22s} {r.backend:10s} {us} {err}  {note}")
    lines.append("")
    # the same kernel across modes of one shape: what the realistic batch costs it
    lines.append("ratios (same kernel, same shape): mode / baseline mode")
    base = {"kv": "fixed", "accept": "fixed", "gpt-oss": "full", "msl": "tight"}
    for (study, mode), rs in by_mode.items():
        shape = " ".join(mode.split()[:2])
        base_mode = f"{shape} {base[study]}"
        if mode == base_mode:
            continue
        for r in rs:
            b = next((x for x in by_mode.get((study, base_mode), []) if x.kernel == r.kernel and x.median_us), None)
            if b is None and r.kernel == "trtllm-decode-ragged":  # its baseline is the uniform batch's decode
                b = next((x for x in by_mode.get((study, base_mode), []) if x.kernel == "trtllm-decode" and x.median_us), None)
            if b and r.median_us:
                lines.append(f"  {study:8s} {mode:30s} {r.kernel:22s} {r.median_us / b.median_us:6.2f}x of {b.kernel} "
                             f"at {base[study]}")
    wrong = [r for r in results if r.status in ("wrong", "failed")]
    lines.append(f"checked: {sum(r.rel_err is not None for r in results)} kernel/case pairs, "
                 f"{sum(r.status == 'ok' for r in results)} ok, {len(wrong)} wrong or failed, "
                 f"{sum(r.status == 'skipped' for r in results)} skipped")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--quick", action="store_true", help="bs 16 and q 4 only")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    a = ap.parse_args()
    results = run(a.out, a.quick, a.kernels.split(","))
    text = table(results)
    (a.out / "realistic.txt").write_text(text + "\n")
    print(text)
    return 1 if any(r.status in ("wrong", "failed") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
