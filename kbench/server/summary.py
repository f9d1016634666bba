"""The markdown report SGLang's bench_one_batch_server prints with --show-report and appends to
$GITHUB_STEP_SUMMARY (its get_report_summary): the same header line, columns, formats and row order.

Cost columns use SGLang's prices: $2 per GPU-hour (H100; SGLang uses $4 on a Blackwell GPU, which kbench
cannot see from a client) times the server's tp_size (1 when the server does not say), input at 70%
utilisation.
"""
from __future__ import annotations

import os
from pathlib import Path

from tabulate import tabulate

from kbench import files
from kbench.runs.atomic import named_destination, write_text

HOURLY_COST_PER_GPU = 2.0
INPUT_UTIL = 0.7
HEADERS = ["batch size", "input len", "latency (s)", "input throughput (tok/s)", "output throughput (tok/s)",
           "acc length", "ITL (ms)", "input cost ($/1M)", "output cost ($/1M)", "cache hit rate"]


def _lens(v) -> str:
    return "[" + ", ".join(str(int(x)) for x in v) + "]"  # argparse nargs="+" gives SGLang a list


def report_summary(rows, input_lens, output_lens, cache_hit_rate: float = 0.0, tp_size: int = 1,
                   profile: bool = False) -> str:
    """``rows``: ServerBenchRows (only ok ones are reported, as SGLang reports only cases it ran)."""
    summary = f"\nInput lens: {_lens(input_lens)}. Output lens: {_lens(output_lens)}."
    if cache_hit_rate > 0.0:
        summary += f" Cache hit rate: {cache_hit_rate * 100:.1f}%."
    summary += "\n"
    hourly = HOURLY_COST_PER_GPU * max(1, int(tp_size or 1))
    table = []
    ok = sorted((r for r in rows if r.status == "ok" and r.output_throughput and r.input_throughput),
                key=lambda r: r.input_len)  # SGLang: results.sort(key=input_len), stable
    for r in ok:
        row = [r.batch_size, r.input_len, f"{r.latency:.2f}", f"{r.input_throughput:.2f}",
               f"{r.output_throughput:.2f}",
               f"{r.acc_length:.2f}" if r.acc_length and r.acc_length > 0 else "n/a",
               f"{1000 * r.batch_size / r.output_throughput:.2f}",
               f"{1e6 / (r.input_throughput * INPUT_UTIL) / 3600 * hourly:.2f}",
               f"{1e6 / r.output_throughput / 3600 * hourly:.2f}",
               f"{r.cache_hit_rate:.4f}" if r.cache_hit_rate is not None else "n/a"]
        if profile:
            row.append("n/a")
        table.append(row)
    summary += tabulate(table, headers=HEADERS + (["profile"] if profile else []), tablefmt="github")
    return summary + "\n"


def append_github_step_summary(text: str) -> Path | None:
    """Appends ``text`` to $GITHUB_STEP_SUMMARY when set (SGLang's write_github_step_summary), atomically."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    p = Path(target)
    if named_destination(p)[1]:  # a device or FIFO: the new text only
        return write_text(p, text, named=True)
    old = files.read_text(p, f"$GITHUB_STEP_SUMMARY {p}", files.ROWS_MAX) if p.exists() else ""
    return write_text(p, old + text, named=True)
