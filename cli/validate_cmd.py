"""`kbench validate-timer`: kbench's timer against CUPTI and FlashInfer's harness, on this GPU."""
from __future__ import annotations

import json
from pathlib import Path

import click

from rich.table import Table

from kbench.cli.console import make_console
from kbench.cli.options import FloatRange, OutputPath, examples

from kbench.runs import atomic
from kbench.errors import BadInput


ROWS_FILE = "validate-timer.json"


def rows_file(out: str | None) -> Path | None:
    """--out as a folder (OUT/validate-timer.json, created) or, ending in .json, the file itself; checked now."""
    from kbench.runs.outputs import writable_dir

    if out is None:
        return None
    if str(out).lower().endswith(".json"):
        p = Path(out)
        if p.is_dir():
            raise BadInput(f"--out {out}: a folder named like a file; give another path")
        writable_dir(p.parent if str(p.parent) else ".", "--out", create=False)
        return p
    return writable_dir(out, "--out", create=False) / ROWS_FILE


def _pct(v):
    return "-" if v is None else f"{v * 100:+.1f}%"


@click.command("validate-timer", epilog=examples(
    "kbench validate-timer",
    "kbench validate-timer --kernels trtllm-decode,fa3-prefill --out results",
    "kbench validate-timer --before old-timing.toml --out results/validate-timer.json"))
@click.option("--kernels", help="Comma-separated kernels (default: every available one).")
@click.option("--out", "out_file", type=OutputPath("results", "folder (or a .json file)"),
              help="Folder that receives validate-timer.json (timing settings, wall ratios, rows), like every --out; a path ending in .json "
                   "is that file (the old meaning).")
@click.option("--tolerance", type=FloatRange(0, 1, min_open=True, max_open=True), default=0.03, show_default=True, help="Agreement target with CUPTI (how a row is judged: below).")
@click.option("--before", "before", metavar="SCENARIO",
              help="Also time every row with this scenario's [timing] table (a built-in name or a .toml file; its "
                   "grid is not used), by kbench's timer alone, to compare two timing settings' walls against the "
                   "same bench_gpu_time wall in one run.")
def validate_timer_cmd(kernels, out_file, tolerance, before):
    """Time every available kernel at 6 shapes (~10 us to ~5 ms) with kbench's CUDA-graph timer, with CUPTI
    (via torch.profiler: the device time of a call's kernels in kbench's own graph replays, the target's
    reference; eager calls one at a time, as Nsight Compute runs them; back to back, where PDL overlap
    inflates it) and with FlashInfer's bench_gpu_time defaults (the FlashInfer modules the rows load are
    built first, in parallel, a line each); print the medians, the differences, the launch
    gaps per call between the graph's nodes (in kbench's figure as in an engine's graph, not in CUPTI's kernel
    times) and kbench against CUPTI's span of the same replays (gaps in both; "same replays": kbench's events
    on the very replays CUPTI profiled, the timer's own error), each harness's wall time, and where kbench's
    wall went (warm-up, capture, fence, probe replays, settle, sampling) with both walls' ratio (median and
    total over the rows).

    A row agrees with CUPTI when a one-kernel call is within --tolerance of its kernel's CUPTI time; a call
    of several kernels (whose gaps an engine pays, and CUPTI's tracing lengthens) when kbench's events on the
    profiled replays are within it of CUPTI's span of them and its figure lies between CUPTI's kernel sum
    and span."""
    import torch

    from kbench.cases.scenario import Timing, load_scenario

    from kbench.runs.outputs import distinct_outputs

    distinct_outputs({"--out": out_file}, [before])
    out_file = rows_file(out_file)  # a bad --out is refused before the GPU is asked for
    before_timing = load_scenario(before).timing if before else None
    if not torch.cuda.is_available():
        raise BadInput("validate-timer needs a CUDA GPU (none here)")
    from kbench.engine.validate import cupti_verdict, summary, validate_timer

    console = make_console()
    names = [k.strip() for k in kernels.split(",")] if kernels else None
    timing = Timing()
    from kbench.engine.stream import outcome_text

    def on_module(o: dict) -> None:  # the modules the rows load, built first and in parallel
        console.print(f"  module {outcome_text(o)}", markup=False, highlight=False)

    def on_row(r) -> None:  # a row that raised says why here and under the table, not only as nan in the JSON
        said = f"error: {r.error}" if r.error else f"{r.kbench_us:.1f} us"
        console.print(f"  {r.kernel} {r.case_id}: {said}", markup=False, highlight=False)

    rows = validate_timer(names, on_row=on_row, timing=timing, before=before_timing, on_module=on_module)
    t = Table(title="kbench timer vs CUPTI (same graph replays; eager alone; eager back to back) and "
                    "flashinfer.testing.bench_gpu_time", header_style="bold")
    for c in ("kernel", "case", "kbench us", "CUPTI us", "kernels/call", "vs CUPTI", "diff us", "gaps us",
              "vs span", "same replays", "CUPTI alone us", "vs alone", "CUPTI b2b us", "bench_gpu_time us",
              "vs FI", "kbench wall s", "FI wall s"):
        t.add_column(c, justify="right" if c not in ("kernel", "case") else "left")
    outside = 0
    for r in rows:
        d = r.cupti_diff
        ok, _ = cupti_verdict(r.to_dict(), tolerance)
        bad = not ok
        outside += bad
        style = "red" if bad else "green"
        t.add_row(r.kernel, r.case_id.split("-h")[0], f"{r.kbench_us:,.1f}", f"{r.cupti_us:,.1f}" if r.cupti_us else "-",
                  str(r.cupti_kernels or "-"), f"[{style}]{_pct(d)}[/]",
                  f"{r.kbench_us - r.cupti_us:+.1f}" if r.cupti_us else "-",
                  f"{r.cupti_gap_us:.1f}" if r.cupti_gap_us is not None else "-", _pct(r.span_diff),
                  _pct(r.profiled_span_diff),
                  f"{r.cupti_alone_us:,.1f}" if r.cupti_alone_us else "-", _pct(r.alone_diff),
                  f"{r.cupti_b2b_us:,.1f}" if r.cupti_b2b_us else "-",
                  f"{r.flashinfer_us:,.1f}" if r.flashinfer_us else "-", _pct(r.flashinfer_diff),
                  f"{r.kbench_wall_s:.2f}", f"{r.flashinfer_wall_s:.2f}" if r.flashinfer_wall_s else "-")
    console.print(t)
    failed = [r for r in rows if r.error]
    for r in failed:
        console.print(f"{r.kernel} {r.case_id}: not measured: {r.error}", markup=False, highlight=False)
    console.print(f"{len(rows) - outside}/{len(rows)} within {tolerance:.0%} of CUPTI"
                  + (f" ({len(failed)} not measured: an error, above)" if failed else ""))
    data = summary(rows, timing, before_timing)
    console.print(cost_table(data))
    for line in ratio_lines(data):
        console.print(line)
    if out_file:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(out_file, json.dumps(data, indent=2), named=True)


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:,.0f}"


def cost_table(data: dict) -> Table:
    """Per row: kbench's wall split into the timer's phases (ms), bench_gpu_time's wall, their ratio, spreads."""
    from kbench.timing.timer import PHASES

    before = data.get("before_timing") is not None
    t = Table(title="where kbench's wall goes (ms) against bench_gpu_time's; spread = 95% CI half-width of the "
                    "median / median", header_style="bold")
    cols = ["kernel", "case", *PHASES, "kbench", "bench_gpu_time", "ratio", "samples", "stop", "spread", "FI spread"]
    if before:
        cols += ["before", "before ratio"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("kernel", "case", "stop") else "right")
    for r in data["rows"]:
        ph = r.get("phases") or {}
        cells = [r["kernel"], r["case_id"].split("-h")[0], *(_ms(ph.get(p)) for p in PHASES), _ms(r["kbench_wall_s"]),
                 _ms(r.get("flashinfer_wall_s")), _x(r.get("wall_ratio")), str(r.get("kbench_samples") or "-"),
                 r.get("kbench_stop") or "-", _pct1(r.get("kbench_spread")), _pct1(r.get("flashinfer_spread"))]
        if before:
            cells += [_ms((r.get("before") or {}).get("wall_s")), _x(r.get("before_wall_ratio"))]
        t.add_row(*cells)
    return t


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _pct1(v) -> str:
    return "-" if v is None else f"{v * 100:.2f}%"


def ratio_lines(data: dict) -> list[str]:
    out = []
    for label in ("before", "after"):
        w = data["wall_ratio"].get(label)
        if w:
            out.append(f"kbench wall / bench_gpu_time wall ({label}): median {w['median']:.2f}x, total "
                       f"{w['total']:.2f}x ({w['kbench_wall_s']:.2f} s / {w['flashinfer_wall_s']:.2f} s, "
                       f"{w['rows']} rows)")
    ph = data["phase_totals_s"]
    if ph:
        out.append("kbench wall by phase: " + ", ".join(f"{k} {v:.2f} s" for k, v in ph.items()))
    return out
