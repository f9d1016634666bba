"""Rich rendering shared by the commands: the sweep progress and the per-case summary tables."""
from __future__ import annotations

import math
import os
import time

import pandas as pd
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn,
                           TimeElapsedColumn)
from rich.markup import escape
from rich.text import Text
from rich.table import Table

from kbench.cases.axes import GROUP_COLUMNS, group_label
from kbench.runs.manifest import ceiling
from kbench.runs.rows import Row
from kbench.engine.sweep import SweepObserver
from kbench.runs.winners import case_winners
from kbench.errors import BadInput
from kbench.shell import kbench as kbench_line
from kbench.values import parse_float

LOG_EVERY_S = 30  # progress line period without a terminal (env KBENCH_PROGRESS_S)


def progress_period() -> float:
    """Seconds between progress lines in a log (KBENCH_PROGRESS_S, default 30; 0: a line per measurement)."""
    text = os.environ.get("KBENCH_PROGRESS_S")
    if text is None:
        return LOG_EVERY_S
    try:
        v = parse_float(text)
    except ValueError:
        v = float("nan")
    if not 0 <= v < float("inf"):
        raise BadInput(f"KBENCH_PROGRESS_S={text!r}: expected the seconds between progress lines, a number >= 0")
    return v


STATUS_STYLE = {"ok": "green", "skipped": "dim", "wrong": "bold red", "failed": "red"}


def fmt_us(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.1f}" if v < 10_000 else f"{v:,.0f}"


def eta_s(task) -> float | None:
    """Seconds left at the phase's average pace so far (rows done / seconds since the phase began). Rich's own
    estimate uses the pace between the progress updates of the last 30 s, which leaves out the wait before the
    first of them: a slow case followed by a burst of instant rows (kernels that cannot run here) read as 3x too
    fast, 'eta 12 s' with 80 s to go."""
    if task.total is None or not task.completed or not task.elapsed or task.finished:
        return None
    return (task.total - task.completed) * task.elapsed / task.completed


class AverageEtaColumn(ProgressColumn):
    """The time left by eta_s, as H:MM:SS ('-:--:--' before the first row)."""

    def render(self, task) -> Text:
        left = eta_s(task)
        if left is None:
            return Text("-:--:--", style="progress.remaining")
        m, sec = divmod(int(left), 60)
        h, m = divmod(m, 60)
        return Text(f"{h}:{m:02d}:{sec:02d}", style="progress.remaining")


class RichSweepObserver(SweepObserver):
    """A live progress bar per phase (compile, measure) with the case and kernel being worked on, and ETA."""

    def __init__(self, console: Console):
        self.console = console
        self.progress = Progress(
            SpinnerColumn(), TextColumn("[bold]{task.fields[phase]}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), AverageEtaColumn(), TextColumn("{task.description}"),
            console=console, transient=False,
        )
        self.task = None
        self.counted = False
        # without a terminal the bar is drawn once, at the end: log a progress line every LOG_EVERY_S instead
        self.log_every_s = progress_period()
        self._last_log = time.monotonic()

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self._finish()
        self.progress.stop()

    def _finish(self):
        """Freeze the current phase's line: its clock stops, an open-ended phase shows 1/1."""
        if self.task is None:
            return
        t = next(t for t in self.progress.tasks if t.id == self.task)
        if t.total is None:
            self.progress.update(self.task, total=1, completed=1)
        self.progress.update(self.task, description="done")
        self.progress.stop_task(self.task)

    def phase(self, name, total=None):
        self._finish()
        self.task = self.progress.add_task("", total=total, phase=name)
        self.counted = total is not None and name == "measuring"

    def advance(self, description=""):
        if self.task is None:
            return
        if description:
            self.progress.update(self.task, description=description)
            if not self.console.is_terminal and not self.counted:  # logs: one line per compiled module
                self.console.print(f"  compiled {description}")
            if not self.counted:  # compile phase: one step per module
                self.progress.advance(self.task)
        elif self.counted:
            self.progress.advance(self.task)
        self._log_line()

    def _log_line(self) -> None:
        if self.console.is_terminal or self.task is None or time.monotonic() - self._last_log < self.log_every_s:
            return
        self._last_log = time.monotonic()
        t = next(t for t in self.progress.tasks if t.id == self.task)
        left = eta_s(t)
        eta = f", eta {left:.0f} s" if left is not None else ""
        of = f"/{t.total:.0f}" if t.total is not None else ""
        self.console.print(f"  {t.fields.get('phase', '')}: {t.completed:.0f}{of} after {t.elapsed or 0:.0f} s{eta}"
                           f"{' - ' + t.description if t.description else ''}", markup=False, highlight=False)

    def row(self, row: Row):
        if row.status in ("wrong", "failed"):
            self.console.print(f"[{STATUS_STYLE[row.status]}]{row.status}[/]: {row.kernel} {row.case_id}: {row.reason}")

    def message(self, text):
        self.console.print(f"[yellow]{text}[/]")

    def built(self, text):
        self.console.print(f"  module {text}", style="red" if text.startswith("failed") else "dim", markup=False,
                           highlight=False)


def summary_tables(rows: pd.DataFrame, ceiling_bw: float | None, max_cases: int = 400) -> list[Table]:
    """One table per (heads, dtype, layout, page) group: a line per case, a column per kernel
    (median us; KV bandwidth and roofline fraction under it), the decode speedup and the winner."""
    if rows.empty:
        return []
    kernels = [k for k in dict.fromkeys(rows["kernel"]) if k != "reference" or (rows[rows.kernel == k].status == "ok").any()]
    win = case_winners(rows).set_index("case_id")
    tables = []
    for gkey, g in rows.groupby(GROUP_COLUMNS, sort=False):
        k = dict(zip(GROUP_COLUMNS, gkey))
        ok = g[g["status"] == "ok"]
        on_cpu = len(ok) and (ok["path"] == "reference").all() and "timer" in ok and (ok["timer"] == "wall-clock").all()
        what = ("the float32 reference on this CPU, by wall clock: us per call; under it its KV GB/s" if on_cpu
                else f"us per call; KV GB/s, % of the read ceiling {fmt_bw(ceiling_bw)}")
        t = Table(title=f"{group_label(k)}   ({what})", show_lines=False, header_style="bold")
        for c in ("bs", "q", "kv"):
            t.add_column(c, justify="right")
        # kernels skipped on every case of the group get no column: the skipped table lists them
        present = [k for k in kernels if (g[g["kernel"] == k]["status"] != "skipped").any()]
        for k in present:
            t.add_column(k, justify="right")
        t.add_column("decode speedup", justify="right")
        t.add_column("winner")
        for n, (case_id, c) in enumerate(g.groupby("case_id", sort=False)):
            if n >= max_cases:
                break
            first = c.iloc[0]
            cells = [str(first.batch_size), str(first.q_len), str(first.kv_len)]
            by_k = {r.kernel: r for r in c.itertuples()}
            w = win.loc[case_id] if case_id in win.index else None
            for k in present:
                r = by_k.get(k)
                if r is None:
                    cells.append("")
                elif r.status == "ok":
                    frac = f" {r.roofline_frac * 100:.0f}%" if r.roofline_frac and not math.isnan(r.roofline_frac) else ""
                    style = "bold" if w is not None and w["winner"] == k else ""
                    txt = f"{fmt_us(r.median_us)}\n[dim]{fmt_gbs(r.kv_bandwidth_gbs)}{frac}[/]"
                    cells.append(f"[{style}]{txt}[/]" if style else txt)
                elif r.status == "skipped":
                    cells.append("[dim]skip[/]")
                else:
                    cells.append(f"[{STATUS_STYLE[r.status]}]{r.status.upper()}[/]")
            if w is not None and w["decode_speedup"] is not None and not pd.isna(w["decode_speedup"]):
                sp = w["decode_speedup"]
                cells.append(f"[{'green' if sp >= 1 else 'yellow'}]{sp:.2f}x[/]")
            else:
                cells.append("-")
            cells.append(str(w["winner"]) if w is not None else "-")
            t.add_row(*cells)
        tables.append(t)
    return tables


def fmt_gbs(bw) -> str:
    """A KV bandwidth in GB/s: whole numbers, two significant digits below 10 (a CPU's reference reads
    0.0043 GB/s, which would print as 0)."""
    if bw is None or pd.isna(bw):
        return "-"
    return f"{bw:,.0f}" if abs(bw) >= 10 or bw == 0 else f"{bw:.2g}"


COMMITTED_BASELINE = "results/baselines/h200-draft-extend-kv4096"


def cpu_next_steps(rows: pd.DataFrame) -> str | None:
    """After a sweep with no kernel row (a machine without a GPU): what its times are, and what to run next."""
    if rows.empty or not {"status", "path"} <= set(rows.columns):
        return None
    ok = rows[rows["status"] == "ok"]
    if (ok["path"] != "reference").any() or ("sm" in rows and (pd.to_numeric(rows["sm"], errors="coerce") > 0).any()):
        return None  # a kernel ran, or this is a GPU (where kernels that all failed say so themselves)
    b = COMMITTED_BASELINE
    return ("no kernel ran here (the FlashInfer kernels need a CUDA GPU): the times above are the float32 "
            "reference's on this CPU, which checks that kbench runs, not a kernel benchmark, and this run has "
            "nothing to report on or gate.\nnext, on a committed H200 baseline:\n"
            f"  kbench report {b} --out results/h200-report\n"
            "  kbench select --policy results/h200-report/policy.json --batch-size 16 --q-len 4 --kv-len 4096\n"
            f"  kbench gate --baseline {b} --candidate {b}")


def fmt_bw(bw) -> str:
    return f"{bw:,.0f} GB/s" if bw else "n/a"


def skipped_reasons(rows: pd.DataFrame) -> Table | None:
    s = rows[rows["status"] == "skipped"]
    if s.empty:
        return None
    t = Table(title="skipped kernels", header_style="bold")
    t.add_column("kernel")
    t.add_column("cases", justify="right")
    t.add_column("reason")
    for (k, reason), g in s.groupby(["kernel", "reason"], sort=False):
        t.add_row(k, str(len(g)), reason)
    return t


# -- kbench sweep: what it says before, and the summary and exit code after ------------------------------------
CPU_S_PER_CASE = 0.5  # inputs, reference and check of a case on a CPU, beyond its timing
CPU_WARN_S = 180


def cpu_sweep_warning(n_cases: int, timing) -> str | None:
    """On a CPU (no CUDA): a warning when the sweep will take more than a few minutes, with how to narrow it. The
    figure (cases x (budget + CPU_S_PER_CASE)) is no bound either way: a case stops early when its spread is small,
    and runs past its budget when three reference calls take longer (a batch of 64 x 4096 KV tokens: about 20 s a
    call on a 2-core machine, so 8 such cases took 10 minutes where the figure said a few seconds each); it says so."""
    import torch

    if torch.cuda.is_available():
        return None
    est = n_cases * (max(timing.budget_s, timing.min_time_s) + CPU_S_PER_CASE)
    if est <= CPU_WARN_S:
        return None
    return (f"on a CPU these {n_cases} cases take about {est / 60:.0f} min or more (a rough figure, not a bound: each "
            f"case's reference is timed up to {timing.budget_s:g} s but at least 3 calls, and a call takes milliseconds "
            f"to tens of seconds as the batch's KV grows); narrow the grid with --batch-size/--q-len/--kv-len, or "
            f"lower --budget")


def sweep_header(console: Console, sc, n_cases: int, shard: tuple[int, int] | None = None) -> None:
    cases = f"{n_cases} of {len(sc.cases())} cases (shard {shard[0]}/{shard[1]})" if shard else f"{n_cases} cases"
    console.print(f"[bold]{sc.name}[/]: {cases} x "
                  f"{len(sc.kernels) if 'all' not in sc.kernels else 'all'} kernels ({sc.source})")
    for spec in sc.trees_left_out():
        console.print(f"note: tree {spec} has no tree at q_len {', '.join(map(str, sc.q_len))}: left out, as the "
                      f"full grid leaves out the sizes a spec has no tree of", markup=False)
    long_cpu = cpu_sweep_warning(n_cases, sc.timing)
    if long_cpu:
        console.print(f"[yellow]{long_cpu}[/]")


def compile_note(c: dict | None) -> str:
    """How the compile seconds were spent: streamed (overlapped with measuring) or all first."""
    if not c:
        return ""
    if c.get("mode") != "stream":
        return " (before measuring)"
    if not c.get("to_build"):
        return f" (streamed: all {c.get('modules', 0)} modules were built already)"
    return (f" (streamed: {c.get('built', 0)} of {c.get('to_build')} modules built in the background"
            f"{', %d failed' % c['failed'] if c.get('failed') else ''}, overlapped with measuring, which waited "
            f"{c.get('waited_s', 0):.1f} s for them)")


def sweep_summary(console: Console, result, stop, allow_wrong: bool, max_table_cases: int) -> int:
    """The tables, the skipped kernels, the device/rows/wall lines, the adaptive line and how the run ended;
    returns the exit code: 2 the run cannot be written, 1 a lost CUDA context or a wrong kernel (unless
    allow_wrong), 128 + the signal when interrupted, else 0."""
    import click

    from kbench.runs.store import read_manifest

    rows = result.rows
    for t in summary_tables(rows, result.ceiling_gbs, max_table_cases):
        console.print(t)
    skipped = skipped_reasons(rows)
    if skipped is not None:
        console.print(skipped)
    w = result.wall
    counts = rows["status"].value_counts().to_dict()
    console.print(
        f"device: {result.device.name} (SM{result.device.sm})  copy bandwidth {fmt_bw(result.copy_bandwidth_gbs)}, read "
        f"bandwidth {fmt_bw(result.read_bandwidth_gbs)} (the roofline ceiling: {fmt_bw(result.ceiling_gbs)})\n"
        f"rows: {len(rows)}{' (' + ', '.join(f'{k} {v}' for k, v in counts.items()) + ')' if counts else ''}; "
        f"timed {result.measurements} this call\n"
        f"wall {w.total_s:.1f} s: compile {w.compile_s:.1f}{compile_note(result.compile)}, inputs {w.inputs_s:.1f}, "
        f"reference {w.reference_s:.1f}, check {w.check_s:.1f}, timing {w.timing_s:.1f}; first ok row "
        f"{'-' if result.first_ok_s is None else f'after {result.first_ok_s:.1f} s'}\n"
        f"run: {result.run_dir}"
    )
    nxt = cpu_next_steps(rows)
    if nxt:
        console.print(nxt, markup=False, soft_wrap=True)
    ada_block = read_manifest(result.run_dir).get("adaptive")
    if ada_block and ada_block.get("stop_rule"):
        console.print(f"adaptive: {ada_block['measured_cases']} of {ada_block['grid_cases']} cases measured in "
                      f"{ada_block['rounds']} round(s) ({', '.join(f'{k} {v}' for k, v in ada_block['points'].items())}; "
                      f"{ada_block['pruned']} (kernel, case) row(s) pruned); stopped: {ada_block['stop_rule']}", markup=False)
    outcome = result.outcome(allow_wrong)
    if outcome == "unwritable":
        click.echo(f"error: {result.error}; the journal keeps {len(rows)} complete row(s); free space, then "
                   f"{kbench_line('sweep', '--resume', result.run_dir)}", err=True)
    elif outcome == "lost":
        console.print(f"[bold red]stopped: {escape(str(result.error))}[/]\n[yellow]rows so far are kept; finish in a "
                      f"fresh process with {escape(kbench_line('sweep', '--resume', result.run_dir))} (isolation, the "
                      f"default on a GPU, restarts its worker instead)[/]", soft_wrap=True)
    elif outcome == "interrupted":
        click.echo(f"error: {stop.reason}; {len(rows)} row(s) kept in {result.run_dir}; finish with: "
                   f"{kbench_line('sweep', '--resume', result.run_dir)}", err=True)
    else:
        bad = rows[rows["status"] == "wrong"]
        if len(bad):
            console.print(f"[bold red]{len(bad)} kernel result(s) WRONG against the reference[/]"
                          + ("" if allow_wrong else " (exit 1; --allow-wrong to accept)"))
    return result.exit_code(allow_wrong, stop.exit_code - 128)


class DevicesProgress:
    """`kbench sweep --devices`: a progress line per shard worker (rows done so far); `with ... as on_poll`."""

    def __init__(self, console: Console, sc, devices: list[int]):
        self.console, self.sc, self.devices = console, sc, devices
        self.progress = Progress(console=console)
        self.tasks: dict = {}

    def __enter__(self):
        self.console.print(f"[bold]{self.sc.name}[/]: {len(self.sc.cases())} cases over {len(self.devices)} worker(s) "
                           f"on GPU(s) {self.devices}")
        self.progress.__enter__()
        return self.poll

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def poll(self, workers) -> None:
        for w in workers:
            if w.shard not in self.tasks:
                self.tasks[w.shard] = self.progress.add_task(f"shard {w.shard} on GPU {w.device}", total=None)
            self.progress.update(self.tasks[w.shard], completed=w.rows_done(),
                                 description=f"shard {w.shard} on GPU {w.device}" + ("" if w.proc.poll() is None else " done"))


def devices_summary(console: Console, run, n_devices: int, max_table_cases: int) -> None:
    """The merged run of `kbench sweep --devices`: its tables and the workers' wall times."""
    for t in summary_tables(run.rows, ceiling(run.manifest.get("copy_bandwidth_gbs"),
                                              run.manifest.get("read_bandwidth_gbs"))[1], max_table_cases):
        console.print(t)
    wall = [m.get("wall_s", {}).get("total_s") for m in run.manifest["merged_from"]]
    console.print(f"merged {len(run.rows)} rows from {n_devices} shard(s) (worker wall s: {wall})\nrun: {run.path}")
