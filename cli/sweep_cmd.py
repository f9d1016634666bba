"""`kbench sweep`: expand the grid, check every kernel against the reference, time it, write a run."""
from __future__ import annotations

import contextlib
import shlex
import sys

import click

from kbench.cases.axes import GRID, axes_with
from kbench.cases.scenario import builtin_names
from kbench.cli.console import echo, make_console
from kbench.engine.devices import run_on_devices
from kbench.engine.plans.adaptive_options import AdaptiveOptions as ADAPTIVE  # its defaults are the flags' defaults
from kbench.engine.request import OVERRIDE_FLAGS, SweepRequest
from kbench.engine.sweep import Sweep, sweep_payload
from kbench.runs.lock import RunLock
from kbench.runs.outputs import writable_dir
from kbench.runs.signals import terminate_as_interrupt
from kbench.runs.store import load_run, name_note
from kbench.values import SEED_MAX

from kbench.cli.options import FLOAT, INT, FloatRange, IntRange, OutputPath, examples
from kbench.cli.render import (DevicesProgress, RichSweepObserver, devices_summary, progress_period, sweep_header,
                               sweep_summary)


def grid_options(f):
    """The options that make a grid beside the scenario (sweep and prebuild): one override flag per grid axis of
    kbench.cases.axes.AXES (in table order in --help), then the head config and the kernels."""
    f = click.option("--kernels", help="Comma-separated kernel names (see `kbench kernels`), or all.")(f)
    f = click.option("--heads", help="Override the head config: QO/KV/DIM, e.g. 32/8/128, or "
                                     "mla:QO/KV_LORA_RANK/ROPE/NOPE, e.g. mla:16/512/64/128 (instead of --model, "
                                     "not with it).")(f)
    f = click.option("--model", help="Override the head config by model name (see `kbench kernels --models`).")(f)
    for a in reversed(axes_with(GRID)):
        f = click.option(*([a.flag, a.short] if a.short else [a.flag]), a.name, help=a.help)(f)
    return f


@click.command("sweep", epilog=examples(
    "kbench sweep                      # the quick scenario: a few shapes, every kernel",
    "kbench sweep -s draft-extend --batch-size 16,64 --kv-len 4096 --out results",
    "kbench sweep --resume results/draft-extend-20261203-101500   # finish an interrupted run"))
@click.option("--scenario", "-s", default="quick", show_default=True,
              help=f"Built-in scenario name ({', '.join(builtin_names())}) or a TOML file.")
@grid_options
@click.option("--spread-target", type=FLOAT, help="Stop timing when the 95% CI half-width of the median is below this fraction.")
@click.option("--budget", "budget_s", type=FLOAT, help="Seconds of timing per (kernel, case) at most.")
@click.option("--min-time", "min_time_s", type=FLOAT, help="Seconds of sampling per (kernel, case) at least, before the spread may stop it.")
@click.option("--duty", type=FLOAT, help="Fraction of the sampling time the GPU is busy (default 0.4, off the power cap; 1 = back to back).")
@click.option("--l2", type=click.Choice(["rotate", "warm"]), help="rotate input copies so L2 is cold (default), or warm.")
@click.option("--out", "out_dir", default="results", show_default=True,
              type=OutputPath("results", "folder"), help="Folder that receives the run folder.")
@click.option("--name", "run_name", help="Run folder name prefix (default: the scenario name).")
@click.option("--resume", "resume", type=OutputPath("results/RUN", "run folder"), help="Finish an interrupted run folder: measures only missing rows.")
@click.option("--device", "device_index", type=INT, default=0, show_default=True,
              help="The one GPU (CUDA index) this process sweeps on; --devices instead runs one worker per listed GPU.")
@click.option("--seed", default=0, show_default=True, type=IntRange(0, SEED_MAX), help="Seed of the random inputs (report's --seed defaults to 0 too).")
@click.option("--allow-wrong", is_flag=True, help="Exit 0 even when a kernel fails its check.")
@click.option("--slow-kernel", multiple=True, metavar="KERNEL=N",
              help="TEST ONLY: run KERNEL N times per timed call, to show that `kbench gate` catches a slow-down.")
@click.option("--compile-workers", type=IntRange(1, 64), help="FlashInfer modules compiled at once (default: cores/2, at most 8).")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Compile the FlashInfer modules in the background (nice 10, ninja -j cores-2) and measure each kernel as soon as its modules are built, so rows come while others compile; --no-stream compiles every module first, then measures.")
@click.option("--jit-cache", type=OutputPath("/ci-cache/kbench-jit", file_okay=False), metavar="DIR",
              help="Keep FlashInfer's JIT cache under DIR (sets FLASHINFER_WORKSPACE_BASE: the modules go to "
                   "DIR/.cache/flashinfer/VERSION/ARCH; the default DIR is the home folder).")
@click.option("--shard", help="Run slice i/N of the cases (deterministic: case j goes to shard j mod N); join slices with kbench merge. auto: this Slurm array task's slice; auto/N: this Kubernetes Indexed Job pod's (examples/).")
@click.option("--devices", help="One worker process per listed GPU (e.g. 0,1) over the shards, merged into one run (not with --device).")
@click.option("--isolate/--no-isolate", default=None,
              help="Run kernels in a worker process restarted after a crash (a CUDA fault poisons the process): the crashed kernel gets a failed row, the sweep goes on. Default: on when a GPU is there.")
@click.option("--max-table-cases", type=IntRange(0), default=200, show_default=True, help="Rows shown per summary table.")
@click.option("--force", is_flag=True, help="With --resume: finish a baseline folder or a run measured on another device anyway.")
@click.option("--adaptive", is_flag=True,
              help="Measure a coarse sub-grid, then only where the kernel choice is uncertain (crossovers, ties, the q x G = 16/32 steps); stops when no unmeasured point can cost more than --regret-bound, or at a budget. An ordinary run; rows say how their case was chosen (chosen_by).")
@click.option("--budget-measurements", type=IntRange(1), help="With --adaptive: stop after this many timed (kernel, case) measurements in the run (not --budget, which is seconds of timing per measurement).")
@click.option("--budget-minutes", type=FloatRange(0, min_open=True), help="With --adaptive: stop after this many minutes of sweep wall time (compile included; a --resume adds to the run's earlier calls).")
@click.option("--regret-bound", type=FloatRange(0, 100, max_open=True), default=ADAPTIVE.regret_bound * 100, show_default=True, help="With --adaptive: percent; stop when no unmeasured point can change the policy by more than this.")
@click.option("--coarse-step", type=IntRange(1), default=ADAPTIVE.coarse_step, show_default=True, help="With --adaptive: the coarse sub-grid takes every Nth value of each axis (and the last).")
def sweep(**params):
    """Sweep batch size x q_len x kv_len (and heads, page size, dtype) over every decode and context kernel.

    Each kernel's output is checked against a float32 torch reference before it is timed (CUDA-graph
    replay with a fence between calls, the GPU busy 40% of the sampling time, cold L2 by input rotation). Rows go to OUT/<scenario>-<time>/ as they are measured
    (manifest.json, rows.jsonl, rows.parquet, rows.csv); Ctrl-C keeps them and --resume finishes the run.
    On a GPU the kernels run in a worker process that is restarted after a CUDA fault (--no-isolate: in
    this process; a fault then stops the sweep, rows kept, --resume finishes it).
    Exit 1 if a kernel computed the wrong thing (unless --allow-wrong) or a fault stopped an in-process
    sweep, 2 on bad input.
    """
    console = make_console()
    request = _request(params)
    checked = request.check(note=lambda line: click.echo(line, err=True))
    progress_period()  # KBENCH_PROGRESS_S, read before anything is printed
    if checked.nothing_to_do:
        console.print(checked.nothing_to_do, markup=False)
        return
    if checked.devices is not None:
        code = _sweep_on_devices(console, request, checked)
    else:
        sc = checked.scenario
        runner = Sweep(sc, checked.options)  # refuses bad --slow-kernel names before anything is printed
        # a resumed run is locked before its plan is printed: a second resume is refused with one line, no plan
        with RunLock(checked.options.resume) if checked.options.resume else contextlib.nullcontext():
            sweep_header(console, sc, len(checked.plan.cases()), checked.options.shard)
            with terminate_as_interrupt() as stop, RichSweepObserver(console) as obs:
                runner.obs = obs
                result = runner.run(checked.plan)
        code = sweep_summary(console, result, stop, request.allow_wrong, request.max_table_cases)
    if code:
        sys.exit(code)




def _request(params: dict) -> SweepRequest:
    """The command's parameters as a SweepRequest, with the names of those given (not left at their defaults)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = frozenset(n for n in params if ctx.get_parameter_source(n) in (ParameterSource.COMMANDLINE,
                                                                           ParameterSource.ENVIRONMENT))
    params = dict(params)
    overrides = {n: params.pop(n) for n in OVERRIDE_FLAGS}  # the flags that override the scenario
    return SweepRequest(**params, overrides=overrides, given=given, command_line=shlex.join(["kbench", *sys.argv[1:]]))


def _sweep_on_devices(console, request: SweepRequest, checked) -> int:
    """One worker per GPU over the shards, merged into one run; exit 1 when a kernel was wrong."""
    sc, opts = checked.scenario, checked.options
    with DevicesProgress(console, sc, checked.devices) as on_poll:
        Sweep(sc, opts)  # refuses bad --slow-kernel names before a worker starts
        merged = run_on_devices(sweep_payload(sc, opts), checked.devices, opts.out_dir, opts.run_name or sc.name,
                                on_poll=on_poll)
    run = load_run(merged)
    devices_summary(console, run, len(checked.devices), request.max_table_cases)
    return 1 if (run.rows["status"] == "wrong").any() and not request.allow_wrong else 0


@click.command("merge", epilog=examples(
    "kbench merge results/quick-20261203-101500 results/quick-20261203-101502   # two --shard i/2 runs",
    "kbench merge runs/de-shard*-* --name draft-extend-h200 --out results   # runs named --name de-shard<i>"))
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out_dir", default="results", show_default=True,
              type=OutputPath("results", "folder"), help="Folder that receives the merged run folder.")
@click.option("--name", help="Merged run name (default: <scenario>-merged).")
def merge(runs, out_dir, name):
    """Join shard runs (from --shard i/N or --devices) into one run; refuses mismatched manifests."""
    from kbench.runs.merge import merge_runs

    writable_dir(out_dir, "--out", create=False)
    note = name_note(name)
    if note:
        echo(note, err=True)
    path = merge_runs(list(runs), out_dir, name)
    run = load_run(path)
    make_console().print(f"merged {len(run.rows)} rows from {len(runs)} runs ({run.manifest['status']}): {path}")
