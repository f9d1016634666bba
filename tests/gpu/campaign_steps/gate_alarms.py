"""The kernel gate's false-alarm and miss rates on this card (#46): sweeps of one grid (A/A material) and sweeps with
one kernel slowed by a known factor (--slow-kernel), then benchmarks/gate_alarms_gpu.py --analyse-only gates them
(A/A pairs with a single-run baseline, with --noise-floor 1%, with a baseline of two runs; the slowed kernel
against both baselines) and reports the table with the card named. gate-sweeps is resumable: call `gate` again
(its run folders carried back in .gpu-carry) until gate-alarms has run."""
from __future__ import annotations

from campaign import Ctx, group, step
from campaign_steps.common import check_rows, finished

GATE_GRID = ["--scenario", "draft-extend", "--kv-len", "4096", "--batch-size", "16,64", "--kernels",
             "trtllm-decode,fa2-prefill,decode-wrapper"]
AA_SWEEPS, SLOW_SWEEPS = 7, 3  # 7 sweeps: 21 single-run A/A pairs
SLOW_KERNEL = "fa2-prefill=2"  # fa2-prefill run twice per timed call: 2x its time


def _names() -> tuple[list[str], list[str]]:
    return [f"gate-aa{i + 1}" for i in range(AA_SWEEPS)], [f"gate-slow{i + 1}" for i in range(SLOW_SWEEPS)]


@step("gate-sweeps", limit=540, resumable=True, help=f"{AA_SWEEPS} sweeps + {SLOW_SWEEPS} with --slow-kernel "
                                                      f"{SLOW_KERNEL} for the gate's alarm rates (#46)")
def gate_sweeps(ctx: Ctx) -> None:
    aa, slow = _names()
    for name in aa:
        check_rows(ctx, ctx.sweep(name, GATE_GRID, out=ctx.res / "gate-alarms"))
    for name in slow:
        check_rows(ctx, ctx.sweep(name, [*GATE_GRID, "--slow-kernel", SLOW_KERNEL], out=ctx.res / "gate-alarms"))


@step("gate-alarms", limit=300, help="benchmarks/gate_alarms_gpu.py over the gate-sweeps runs: the alarm table")
def gate_alarms(ctx: Ctx) -> None:
    aa, slow = _names()
    out = ctx.res / "gate-alarms"
    runs = [finished(ctx, n, out, "gate-sweeps").path for n in aa]
    slowed = [finished(ctx, n, out, "gate-sweeps").path for n in slow]
    d = ctx.script("benchmarks/gate_alarms_gpu.py", "--analyse-only", "--out", out / "analysis", "--slow",
                   SLOW_KERNEL, "--runs", *runs, "--slow-runs", *slowed)
    table = d.text[d.text.rfind("card:"):] if "card:" in d.text else d.text[-3000:]
    ctx.figure(table.splitlines()[0])
    ctx.report(table)


group("gate", ["gate-sweeps", "gate-alarms"], "the kernel gate's false-alarm and miss rates (#46)")
