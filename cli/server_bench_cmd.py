"""`kbench server-bench`: options -> kbench.server.run_server_bench, a progress bar per case, a final table."""
from __future__ import annotations

import math
import sys

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kbench.errors import BadInput, KbenchError
from kbench.server import Listener, ServerBenchConfig, ServerBenchInterrupted, run_server_bench


def _int_list(name: str, values: tuple[str, ...]) -> tuple[int, ...]:
    out = []
    for v in values:
        for part in v.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                n = int(part)
            except ValueError:
                raise BadInput(f"{name}: {part!r} is not an integer") from None
            if n < 1:
                raise BadInput(f"{name}: {n} must be at least 1")
            out.append(n)
    if not out:
        raise BadInput(f"{name}: give at least one value")
    return tuple(dict.fromkeys(out))  # keep order, drop repeats


def _num(name: str, v: str, kind=float):
    try:
        x = kind(v)
    except (TypeError, ValueError):
        raise BadInput(f"{name} {v!r}: not {'an integer' if kind is int else 'a number'}") from None
    if kind is float and not math.isfinite(x):
        raise BadInput(f"{name} {v!r}: not a finite number")
    return x


class _RichListener(Listener):
    def __init__(self, console: Console):
        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("tokens"), TimeElapsedColumn(), console=console, transient=False)
        self.task = None

    def run_started(self, run_dir, backend, facts, cases):
        self.console.print(f"server-bench: {len(cases)} case(s) against {backend} "
                           f"{facts.model or ''} -> {run_dir}", highlight=False)
        self.progress.start()

    def case_started(self, case, warmup):
        label = f"{'warm-up ' if warmup else ''}{case.case_id}"
        self.task = self.progress.add_task(label, total=case.batch_size * case.output_len)

    def tokens(self, case, done, total):
        if self.task is not None:
            self.progress.update(self.task, completed=done)

    def flush_retry(self, case, attempt, message, wait):
        self.progress.console.print(f"  flush attempt {attempt} for {case.case_id}: {message}; "
                                    f"retrying in {wait:g} s", style="yellow", highlight=False)

    def case_finished(self, case, row, warmup):
        if self.task is not None:
            desc = self.progress.tasks[-1].description
            mark = {"ok": "[green]ok[/]", "failed": "[red]failed[/]", "skipped": "[yellow]skipped[/]"}[row.status]
            self.progress.update(self.task, description=f"{desc} {mark}")
            self.task = None
        if row.status != "ok":
            # one clear line per case that did not run (flush failure names endpoint, status and body)
            self.progress.console.print(f"  {'warm-up ' if warmup else ''}{case.case_id} {row.status}: "
                                        f"{row.reason}", highlight=False, markup=False)

    def warning(self, message):
        self.progress.console.print(f"warning: {message}", style="yellow", highlight=False, markup=False)

    def stop(self):
        self.progress.stop()


def _fmt(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}"


def render_table(result, console: Console) -> None:
    t = Table(title=f"server-bench {result.backend} ({result.run_dir.name})")
    for c in ("case", "status", "flush", "latency s", "ttft s", "in tok/s", "out tok/s", "overall tok/s",
              "ITL ms", "acc len", "reason"):
        t.add_column(c, justify="left" if c in ("case", "status", "reason") else "right",
                     overflow="fold", max_width=60 if c == "reason" else None)
    for r in result.rows:
        t.add_row(r.case_id, r.status, str(r.flush_attempts), _fmt(r.latency, 4), _fmt(r.last_ttft, 4),
                  _fmt(r.input_throughput), _fmt(r.output_throughput), _fmt(r.overall_throughput),
                  _fmt(r.itl_ms, 3), _fmt(r.acc_length if r.acc_length and r.acc_length > 0 else None),
                  r.reason)
    console.print(t)


@click.command("server-bench")
@click.option("--url", default=None, metavar="URL", help="Base URL of the running server, e.g. http://127.0.0.1:30000 (required unless --resume).")
@click.option("--backend", default="auto", show_default=True, metavar="sglang|vllm|auto",
              help="Server protocol; auto probes /v1/models and /server_info.")
@click.option("--batch-size", "batch_size", multiple=True, default=("1",), show_default=True, metavar="N[,N..]",
              help="Batch sizes (comma list or repeated).")
@click.option("--input-len", multiple=True, default=("1024",), show_default=True, metavar="N[,N..]",
              help="Input lengths in tokens (random ids).")
@click.option("--output-len", multiple=True, default=("16",), show_default=True, metavar="N[,N..]",
              help="Output lengths in tokens (ignore_eos).")
@click.option("--run-name", default="default", metavar="NAME", show_default=True, help="run_name in the JSON lines.")
@click.option("--temperature", default="0", metavar="T", show_default=True)
@click.option("--skip-warmup", is_flag=True, help="No warm-up batch (input 1024, output 16) per batch size.")
@click.option("--flush-retries", default="3", metavar="N", show_default=True,
              help="Cache-flush attempts per case in all (SGLang: 3 tries).")
@click.option("--flush-retry-wait", default="2", metavar="SECONDS", show_default=True, help="Seconds between flush attempts.")
@click.option("--flush-timeout", default="30", metavar="SECONDS", show_default=True,
              help="Seconds an SGLang server may wait for idle (/flush_cache?timeout=).")
@click.option("--request-timeout", default="600", metavar="SECONDS", show_default=True, help="Seconds for one whole batch.")
@click.option("--profile", is_flag=True, help="POST /start_profile before and /stop_profile after each case.")
@click.option("--model", default=None, metavar="NAME", help="Model name (vLLM; default: the first one served).")
@click.option("--vocab-size", default=None, metavar="N", help="Draw token ids from [0, N) (default: from the server's model).")
@click.option("--seed", default="1", metavar="N", show_default=True)
@click.option("--out", "out_dir", default="results", metavar="DIR", show_default=True, help="Folder for the run folder.")
@click.option("--result-filename", default=None, metavar="FILE", help="Also append SGLang-style JSON lines to this file.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first failed case.")
@click.option("--resume", default=None, metavar="RUN", help="Finish an interrupted run with its own settings (--url may point elsewhere); cases with a row are not re-run.")
def server_bench(url, backend, batch_size, input_len, output_len, run_name, temperature, skip_warmup,
                 flush_retries, flush_retry_wait, flush_timeout, request_timeout, profile, model, vocab_size,
                 seed, out_dir, result_filename, fail_fast, resume):
    """One-batch benchmark of a live SGLang or vLLM server, comparable with SGLang's bench_one_batch_server.

    For each case (batch size x input length x output length): flush the server's cache (retrying while it
    is busy), send the batch as one streaming request of random token ids, and record latency, TTFT, input,
    output and overall throughput, ITL and accept length. Exit 1 when a case failed.
    """
    if resume:
        from kbench.server.bench import config_of_run

        cfg = config_of_run(resume, url)
        cfg.command = ["kbench", *sys.argv[1:]]
        return _run(cfg, cfg.result_filename)
    if not url:
        raise BadInput("--url: required (the server's base URL, e.g. http://127.0.0.1:30000)")
    cfg = ServerBenchConfig(
        url=url, backend=backend.lower(), batch_sizes=_int_list("--batch-size", batch_size),
        input_lens=_int_list("--input-len", input_len), output_lens=_int_list("--output-len", output_len),
        run_name=run_name, temperature=_num("--temperature", temperature), skip_warmup=skip_warmup,
        flush_retries=_num("--flush-retries", flush_retries, int),
        flush_retry_wait=_num("--flush-retry-wait", flush_retry_wait),
        flush_timeout=_num("--flush-timeout", flush_timeout), request_timeout=_num("--request-timeout", request_timeout),
        profile=profile, model=model, vocab_size=_num("--vocab-size", vocab_size, int) if vocab_size else None,
        seed=_num("--seed", seed, int), out_dir=out_dir, result_filename=result_filename, fail_fast=fail_fast,
        command=["kbench", *sys.argv[1:]])
    return _run(cfg, result_filename)


def _run(cfg, result_filename):
    cfg.validate()
    console = Console(stderr=False)
    ls = _RichListener(console)
    try:
        result = run_server_bench(cfg, ls)
    except ServerBenchInterrupted as e:
        ls.stop()
        render_table(e.result, console)
        raise
    finally:
        ls.stop()
    render_table(result, console)
    console.print(f"rows: {result.run_dir}  JSON lines: {result.run_dir / 'result.jsonl'}"
                  + (f" and {result_filename}" if result_filename else ""), highlight=False)
    if result.failed:
        raise KbenchError(f"{len(result.failed)} of {len(result.rows)} case(s) failed; first: "
                          f"{result.failed[0].case_id}: {result.failed[0].reason}")
