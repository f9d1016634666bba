"""The README sweep and what it proves on the GPU: repeatability, the gate catching a slow kernel, a CUDA fault
costing one row, fp8, the timer against CUPTI. Bounds come from the H200 figures in README.md."""
from __future__ import annotations

import statistics

from campaign import Ctx, group, step
from campaign_runs import repeatability
from campaign_steps.common import FP8_GRID, SWEEP_GRID, check_rows, finished, read_json

# repeatability of two back-to-back sweeps, per-row |b/a - 1| of the medians: the H200 gave median 0.39%,
# p95 1.07%, max 1.65% (README "Repeatability"); the power-state goals are <= 1% and <= 3%
REPEAT_MEDIAN_PCT, REPEAT_P95_PCT = 1.0, 3.0
# kbench's timer against CUPTI's device time for the same graph replays, rows of at least 30 us (issue #29)
CUPTI_TOLERANCE, CUPTI_MIN_US = 0.03, 30.0
# kbench's timer wall over bench_gpu_time's for the same shapes, median and total over the rows (issue #29: <= 1x)
WALL_RATIO_MAX = 1.0
FAULT = ["--batch-size", "16", "--q-len", "2,4", "--kv-len", "1024", "--kernels",
         "trtllm-decode,test-oob-write,fa2-prefill"]
FAULT_KERNEL, SURVIVORS, FAULT_Q = "test-oob-write", ("trtllm-decode", "fa2-prefill"), (2, 4)
SLOW_KERNEL = "fa2-prefill"


@step("sweep", limit=420, resumable=True, help="the README sweep: draft-extend, kv 4096, bs 16 and 64")
def sweep(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("de-kv4096", SWEEP_GRID))


@step("sweep2", limit=420, resumable=True, help="the README sweep through --devices 0 (worker and merge)")
def sweep2(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("de-kv4096-devices0", [*SWEEP_GRID, "--devices", "0"]))


@step("rep1", limit=420, resumable=True, help="repeatability, first sweep")
def rep1(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("rep1", SWEEP_GRID))


@step("rep2", limit=420, resumable=True, help="repeatability, second sweep right after (through --devices 0)")
def rep2(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("rep2", [*SWEEP_GRID, "--devices", "0"]))


@step("repeat-check", limit=90, help=f"rep1 vs rep2: |diff| median <= {REPEAT_MEDIAN_PCT}%, p95 <= "
      f"{REPEAT_P95_PCT}%, and kbench gate passes")
def repeat_check(ctx: Ctx) -> None:
    a, b = finished(ctx, "rep1"), finished(ctx, "rep2")
    rep = repeatability(a.rows(), b.rows())
    ok_a = sum(r.get("status") == "ok" for r in a.measured())
    ctx.figure(f"{rep['rows']} rows in both (rep1 ok {ok_a})")
    ctx.check(rep["rows"] > 0 and rep["rows"] == ok_a, f"{ok_a - rep['rows']} ok row(s) of rep1 not ok in rep2")
    ctx.bound("|diff| median", rep["median"], hi=REPEAT_MEDIAN_PCT, unit="%")
    ctx.bound("p95", rep["p95"], hi=REPEAT_P95_PCT, unit="%")
    if rep["rows"]:
        ctx.figure(f"max {rep['max']:.2f}%, {rep['over3']} over 3%")
        ctx.report("worst rows (|diff| %, kernel, case, rep1 us, rep2 us):\n" + "\n".join(
            f"  {d:5.2f}  {k:16} {c:48} {x:9.1f} {y:9.1f}" for d, k, c, x, y in rep["worst"]))
    g = gate(ctx, "repeat", a, b)
    ctx.check(g.get("passed") is True, f"kbench gate rep2 vs rep1 failed: {_gate_line(g)}")


@step("slow-sweep", limit=200, resumable=True, help=f"bs 16 with {SLOW_KERNEL} run twice per timed call")
def slow_sweep(ctx: Ctx) -> None:
    check_rows(ctx, ctx.sweep("slow", ["--scenario", "draft-extend", "--kv-len", "4096", "--batch-size", "16",
                                       "--slow-kernel", f"{SLOW_KERNEL}=2"]))


@step("slow-gate", limit=90, help=f"the gate (baseline rep1) must fail on {SLOW_KERNEL} alone, at every row of it")
def slow_gate(ctx: Ctx) -> None:
    base, cand = finished(ctx, "rep1"), finished(ctx, "slow", by="slow-sweep")
    g = gate(ctx, "slow", base, cand, "--allow-missing")
    ctx.check(g.get("exit_code") == 1, f"the gate passed a run with {SLOW_KERNEL} 2x slower: {_gate_line(g)}")
    rows = g.get("rows", [])
    slow = [r for r in rows if r.get("kernel") == SLOW_KERNEL and r.get("outcome") not in ("missing", "new", "skipped")]
    caught = [r for r in slow if r.get("outcome") == "regression"]
    others = sorted({r.get("kernel") for r in rows if r.get("outcome") == "regression" and r.get("kernel") != SLOW_KERNEL})
    ctx.figure(f"{SLOW_KERNEL}: {len(caught)} of {len(slow)} rows regressed; {_gate_line(g)}")
    ctx.check(slow and len(caught) == len(slow), f"{len(slow) - len(caught)} {SLOW_KERNEL} row(s) not caught")
    ctx.check(not others, f"the gate also flagged {', '.join(others)} (not slowed: noise beyond the band)")


def gate(ctx: Ctx, name: str, base, cand, *extra) -> dict:
    """kbench gate BASE CAND (exit 0 or 1 both answer) with its JSON, markdown beside it in RES."""
    js = ctx.res / f"gate-{name}.json"
    ctx.kbench("gate", "--baseline", base.path, "--candidate", cand.path, *extra, "--json", js,
               "--markdown", ctx.res / f"gate-{name}.md", ok=(0, 1))
    return read_json(js)


def _gate_line(g: dict) -> str:
    c = g.get("counts", {})
    return ", ".join(f"{v} {k}" for k, v in sorted(c.items()) if v) or "nothing compared"


group("repeat", ["rep1", "rep2", "repeat-check"], "two sweeps, compared and gated")
group("slow", ["rep1", "slow-sweep", "slow-gate"], "the gate catches a slowed kernel")


def fault_rows(ctx: Ctx, run) -> None:
    """Exactly: FAULT_KERNEL failed at each q, the survivors ok at each q, nothing else wrong or failed."""
    rows = run.measured()
    failed = {(r["kernel"], int(r["q_len"])) for r in rows if r.get("status") == "failed"}
    ok = {(r["kernel"], int(r["q_len"])) for r in rows if r.get("status") == "ok"}
    want_failed = {(FAULT_KERNEL, q) for q in FAULT_Q}
    want_ok = {(k, q) for k in SURVIVORS for q in FAULT_Q}
    reasons = {str(r.get("reason", ""))[:70] for r in rows if r.get("status") == "failed"}
    ctx.figure(f"{run.path.name}: {len(failed)} failed ({'; '.join(sorted(reasons))}), {len(ok)} ok")
    ctx.check(failed == want_failed, f"failed rows {sorted(failed)}, expected {sorted(want_failed)}")
    ctx.check(ok == want_ok, f"ok rows {sorted(ok)}, expected {sorted(want_ok)}")
    ctx.check(not any(r.get("status") == "wrong" for r in rows), "a wrong row")


@step("fault-isolated", limit=200, resumable=True, help="a CUDA fault costs one row per case, the worker restarts")
def fault_isolated(ctx: Ctx) -> None:
    run = ctx.sweep("fault-isolated", FAULT)
    fault_rows(ctx, run)
    restarts = run.manifest.get("worker_restarts")
    ctx.figure(f"worker restarts {restarts}")
    ctx.check(run.manifest.get("isolated") is True, "the sweep was not isolated")
    ctx.check(restarts == len(FAULT_Q), f"worker restarts {restarts}, expected {len(FAULT_Q)}")


@step("fault-inproc", limit=240, resumable=True, help="--no-isolate: stops at a fault (exit 1, rows kept); "
      "--resume finishes it")
def fault_inproc(ctx: Ctx) -> None:
    args = [*FAULT, "--no-isolate"]
    run = ctx.sweep("fault-inproc", args, ok=(0, 1), complete=False)
    if run.how == "start":
        ctx.check(run.rc == 1 and run.status == "interrupted",
                  f"the in-process sweep went on after a fault (exit {run.rc}, {run.status})")
        ctx.figure(f"stopped at the first fault: exit {run.rc}, {len(run.rows())} row(s) kept")
    resumes = 0
    while not run.complete and resumes < len(FAULT_Q) + 1:  # each resume stops at the next case's fault
        run = ctx.sweep("fault-inproc", args, ok=(0, 1), complete=False)
        resumes += 1
    ctx.figure(f"{resumes} resume(s) this call")
    ctx.check(run.complete, f"{run.path.name} still {run.status} after {resumes} resume(s)")
    fault_rows(ctx, run)


group("fault", ["fault-isolated", "fault-inproc"], "crash isolation")


@step("fp8", limit=420, resumable=True, help="fp8 KV with bf16 and fp8 queries: every kernel checked, each ok once")
def fp8(ctx: Ctx) -> None:
    run = ctx.sweep("fp8q", FP8_GRID)
    check_rows(ctx, run)
    rows = run.measured()
    kernels = FP8_GRID[FP8_GRID.index("--kernels") + 1].split(",")
    per = {k: sum(r["kernel"] == k and r.get("status") == "ok" for r in rows) for k in kernels}
    ctx.figure("ok per kernel: " + ", ".join(f"{k} {n}" for k, n in per.items()))
    for k, n in per.items():
        why = {str(r.get("reason", ""))[:80] for r in rows if r["kernel"] == k and r.get("status") != "ok"}
        ctx.check(n > 0, f"{k}: no ok row ({'; '.join(sorted(why)) or 'no rows'})")


# kbench's timing defaults before issue #29 item 4, for validate's same-machine "before" (kbench validate-timer
# --before): a 25 ms warm-up, a fixed 20 ms settle, at least 0.1 s and 10 samples
BEFORE_TIMING = """name = "timing-before-29"
description = "kbench's timing defaults before issue #29 (cost per shape), for validate-timer --before"
model = "llama3-8b"
[grid]
batch_size = 1
q_len = 1
kv_len = 16
[timing]
warmup_ms = 25.0
settle_ms = 20.0
min_time_s = 0.1
min_samples = 10
"""


def wall_ratio(rows: list[dict], wall) -> tuple[float, float, int] | None:
    """(median, total, rows) of kbench's timer wall over bench_gpu_time's, over the rows with both."""
    got = [(wall(r), r["flashinfer_wall_s"]) for r in rows if wall(r) and r.get("flashinfer_wall_s")]
    if not got:
        return None
    return statistics.median(k / f for k, f in got), sum(k for k, _ in got) / sum(f for _, f in got), len(got)


@step("validate", limit=480, help=f"kbench validate-timer: within {CUPTI_TOLERANCE:.0%} of CUPTI at every row of "
      f"{CUPTI_MIN_US:.0f} us or more; wall <= {WALL_RATIO_MAX:.0f}x bench_gpu_time's (median, total), the "
      "timing defaults before #29 too")
def validate(ctx: Ctx) -> None:
    js = ctx.res / "validate-timer.json"
    before = ctx.res / "timing-before-29.toml"
    before.write_text(BEFORE_TIMING, encoding="utf-8")
    ctx.kbench("validate-timer", "--out", js, "--before", before)
    data = read_json(js)
    rows = data["rows"] if isinstance(data, dict) else data  # a list: validate-timer.json before #29
    ctx.check(bool(rows), "validate-timer wrote no rows")
    from kbench.engine.validate import cupti_verdict  # installed by then (h200.sh's --check runs before it is)

    # one-kernel calls against the kernel's CUPTI time; calls of several on the same replays (cupti_verdict)
    within = [r for r in rows if cupti_verdict(r, CUPTI_TOLERANCE)[0]]
    big = [r for r in rows if (r.get("kbench_us") or 0) >= CUPTI_MIN_US]
    big_out = [r for r in big if not cupti_verdict(r, CUPTI_TOLERANCE)[0]]
    ctx.figure(f"{len(within)}/{len(rows)} within {CUPTI_TOLERANCE:.0%} of CUPTI, "
               f"{len(big) - len(big_out)}/{len(big)} of >= {CUPTI_MIN_US:.0f} us")
    diffs = [abs(r["cupti_diff"]) for r in big if r.get("cupti_diff") is not None]
    if diffs:
        ctx.figure(f"worst |vs CUPTI| at >= {CUPTI_MIN_US:.0f} us {max(diffs) * 100:.2f}%")
    # the same replays on CUPTI's timestamps: kbench against CUPTI's span (launch gaps in both) is the timer's own
    # error; the gaps per call say how much of a difference to CUPTI's kernel times is the graph's idle time
    span_in = [r for r in big if r.get("span_diff") is not None and abs(r["span_diff"]) <= CUPTI_TOLERANCE]
    spanned = [r for r in big if r.get("span_diff") is not None]
    if spanned:
        ctx.figure(f"{len(span_in)}/{len(spanned)} of >= {CUPTI_MIN_US:.0f} us within {CUPTI_TOLERANCE:.0%} of CUPTI's "
                   f"span of the same replays (gaps included); worst {max(abs(r['span_diff']) for r in spanned) * 100:.2f}%")
        gaps = sorted(r["cupti_gap_us"] for r in spanned if r.get("cupti_gap_us") is not None)
        if gaps:
            ctx.figure(f"launch gaps per call: median {statistics.median(gaps):.2f} us, max {gaps[-1]:.2f} us")
    same = [r for r in big if r.get("profiled_span_diff") is not None]
    if same:
        ctx.figure(f"kbench's events on the profiled replays vs CUPTI's span of them, {len(same)} rows of >= "
                   f"{CUPTI_MIN_US:.0f} us: worst {max(abs(r['profiled_span_diff']) for r in same) * 100:.2f}%")
    for r in rows:  # the calls of several kernels: what they are and how each clock sees them
        if (r.get("cupti_kernels") or 1) > 1 and (r.get("kbench_us") or 0) >= CUPTI_MIN_US:
            ctx.figure(f"{r['kernel']} {r['case_id'].split('-h')[0]}: {r['cupti_kernels']} kernels "
                       f"({', '.join(n[:40] for n in r.get('cupti_names') or []) or '?'}); kbench "
                       f"{_us(r.get('kbench_us'))} = {_pct(r.get('cupti_diff'))} over their sum, "
                       f"{_pct(r.get('span_diff'))} vs span {_us(r.get('cupti_span_us'))}; on the profiled replays "
                       f"{_us(r.get('cupti_profiled_us'))} = {_pct(r.get('profiled_span_diff'))} vs span")
    ctx.check(not big_out, f"{len(big_out)} row(s) of >= {CUPTI_MIN_US:.0f} us outside {CUPTI_TOLERANCE:.0%}: " +
              ", ".join(f"{r['kernel']} {r['case_id'].split('-h')[0]} {_pct(r.get('cupti_diff'))} (vs span "
                        f"{_pct(r.get('span_diff'))}, gaps {_us(r.get('cupti_gap_us'))})" for r in big_out[:3]))
    before_w = wall_ratio(rows, lambda r: (r.get("before") or {}).get("wall_s"))
    if before_w:
        ctx.figure(f"wall / bench_gpu_time before: median {before_w[0]:.2f}x, total {before_w[1]:.2f}x")
    w = wall_ratio(rows, lambda r: r.get("kbench_wall_s"))
    if w:
        ctx.figure(f"wall / bench_gpu_time: median {w[0]:.2f}x, total {w[1]:.2f}x")
        ctx.check(w[0] <= WALL_RATIO_MAX and w[1] <= WALL_RATIO_MAX,
                  f"kbench's wall {w[0]:.2f}x (median), {w[1]:.2f}x (total) of bench_gpu_time's > {WALL_RATIO_MAX:.1f}x")
    spread = [r["kbench_spread"] for r in rows if r.get("kbench_spread") is not None]
    fi = [r["flashinfer_spread"] for r in rows if r.get("flashinfer_spread") is not None]
    if spread and fi:
        ctx.figure(f"spread median kbench {statistics.median(spread) * 100:.2f}%, bench_gpu_time "
                   f"{statistics.median(fi) * 100:.2f}%")
    phases = {}
    for r in rows:
        for k, v in (r.get("phases") or {}).items():
            phases[k] = phases.get(k, 0.0) + v
    if phases:
        ctx.report("kbench timer wall by phase over all rows (s): " +
                   ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))


def _pct(d) -> str:
    return "n/a" if d is None else f"{d * 100:+.1f}%"


def _us(v) -> str:
    return "n/a" if v is None else f"{v:.1f} us"
