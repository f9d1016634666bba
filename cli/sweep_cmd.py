"""`kbench sweep`: expand the grid, check every kernel against the reference, time it, write a run."""
from __future__ import annotations

import shlex
import sys

import click
from rich.console import Console

from kbench.cases.axes import GRID, axes_with
from kbench.cli.console import make_console
from kbench.errors import BadInput
from kbench.engine.adaptive_options import AdaptiveOptions as ADAPTIVE  # its defaults are the flags' defaults
from kbench.cases.scenario import apply_overrides, load_scenario
from kbench.engine.devices import parse_devices, run_on_devices
from kbench.runs.store import load_run, name_note
from kbench.engine.sweep import Sweep, SweepOptions, parse_shard, scenario_of_run, shard_cases, sweep_payload
from kbench.runs.store import check_resumable, read_manifest

from kbench.runs.outputs import writable_dir
from kbench.runs.signals import terminate_as_interrupt

from kbench.cli.options import examples
from kbench.cli.render import RichSweepObserver, fmt_bw, skipped_reasons, summary_tables


def _slow(values: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for v in values:
        name, sep, n = v.partition("=")
        if not sep or not n.strip().isdecimal() or int(n) < 2:
            raise BadInput(f"--slow-kernel: expected KERNEL=N with N >= 2, got {v!r}")
        out[name.strip()] = int(n)
    return out


def grid_axis_options(f):
    """One override flag per grid axis of kbench.cases.axes.AXES (in table order in --help)."""
    for a in reversed(axes_with(GRID)):
        f = click.option(*([a.flag, a.short] if a.short else [a.flag]), a.name, help=a.help)(f)
    return f


@click.command("sweep", epilog=examples(
    "kbench sweep                      # the quick scenario: a few shapes, every kernel",
    "kbench sweep -s draft-extend --batch-size 16,64 --kv-len 4096 --out results",
    "kbench sweep --resume results/draft-extend-20261203-101500   # finish an interrupted run"))
@click.option("--scenario", "-s", default="quick", show_default=True,
              help="Built-in scenario name (quick, draft-extend, llama3-70b-tp8, gqa8-d64, qwen3-gqa8) or a TOML file.")
@grid_axis_options
@click.option("--model", help="Override the head config by model name (see `kbench kernels --models`).")
@click.option("--heads", help="Override the head config: QO/KV/DIM, e.g. 32/8/128 (instead of --model, not with it).")
@click.option("--kernels", help="Comma-separated kernel names (see `kbench kernels`), or all.")
@click.option("--spread-target", type=float, help="Stop timing when the 95% CI half-width of the median is below this fraction.")
@click.option("--budget", "budget_s", type=float, help="Seconds of timing per (kernel, case) at most.")
@click.option("--min-time", "min_time_s", type=float, help="Seconds of sampling per (kernel, case) at least, before the spread may stop it.")
@click.option("--duty", type=float, help="Fraction of the sampling time the GPU is busy (default 0.4, off the power cap; 1 = back to back).")
@click.option("--l2", type=click.Choice(["rotate", "warm"]), help="rotate input copies so L2 is cold (default), or warm.")
@click.option("--out", "out_dir", default="results", show_default=True, help="Folder that receives the run folder.")
@click.option("--name", "run_name", help="Run folder name prefix (default: the scenario name).")
@click.option("--resume", "resume", type=click.Path(), help="Finish an interrupted run folder: measures only missing rows.")
@click.option("--device", "device_index", default=0, show_default=True,
              help="The one GPU (CUDA index) this process sweeps on; --devices instead runs one worker per listed GPU.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs (report's --seed defaults to 0 too).")
@click.option("--allow-wrong", is_flag=True, help="Exit 0 even when a kernel fails its check.")
@click.option("--slow-kernel", multiple=True, metavar="KERNEL=N",
              help="TEST ONLY: run KERNEL N times per timed call, to show that `kbench gate` catches a slow-down.")
@click.option("--compile-workers", type=click.IntRange(1, 64), help="Parallel JIT compile processes (default: cores/2, at most 8).")
@click.option("--jit-cache", type=click.Path(file_okay=False), help="Persistent FlashInfer JIT cache folder (sets FLASHINFER_WORKSPACE_BASE).")
@click.option("--shard", help="Run slice i/N of the cases (deterministic: case j goes to shard j mod N); join slices with kbench merge. auto: this Slurm array task's slice; auto/N: this Kubernetes Indexed Job pod's (examples/).")
@click.option("--devices", help="One worker process per listed GPU (e.g. 0,1) over the shards, merged into one run (not with --device).")
@click.option("--isolate/--no-isolate", default=None,
              help="Run kernels in a worker process restarted after a crash (a CUDA fault poisons the process): the crashed kernel gets a failed row, the sweep goes on. Default: on when a GPU is there.")
@click.option("--max-table-cases", default=200, show_default=True, help="Rows shown per summary table.")
@click.option("--force", is_flag=True, help="With --resume: finish a baseline folder or a run measured on another device anyway.")
@click.option("--adaptive", is_flag=True,
              help="Measure a coarse sub-grid, then only where the kernel choice is uncertain (crossovers, ties, the q x G = 16/32 steps); stops when no unmeasured point can cost more than --regret-bound, or at a budget. An ordinary run; rows say how their case was chosen (chosen_by).")
@click.option("--budget-measurements", type=click.IntRange(1), help="With --adaptive: stop after this many timed (kernel, case) measurements in the run (not --budget, which is seconds of timing per measurement).")
@click.option("--budget-minutes", type=click.FloatRange(0, min_open=True), help="With --adaptive: stop after this many minutes of sweep wall time (compile included; a --resume adds to the run's earlier calls).")
@click.option("--regret-bound", type=click.FloatRange(0, 100, max_open=True), default=ADAPTIVE.regret_bound * 100, show_default=True, help="With --adaptive: percent; stop when no unmeasured point can change the policy by more than this.")
@click.option("--coarse-step", type=click.IntRange(1), default=ADAPTIVE.coarse_step, show_default=True, help="With --adaptive: the coarse sub-grid takes every Nth value of each axis (and the last).")
def sweep(scenario, model, heads, kernels, spread_target, budget_s, min_time_s, duty, l2, out_dir, run_name, resume,
          device_index, seed, allow_wrong, slow_kernel, compile_workers, jit_cache, shard, devices, isolate,
          max_table_cases, force, adaptive, budget_measurements, budget_minutes, regret_bound, coarse_step, **grid):
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
    ada = _adaptive_options(adaptive, budget_measurements, budget_minutes, regret_bound, coarse_step, resume)
    if jit_cache is not None:
        import os

        os.environ["FLASHINFER_WORKSPACE_BASE"] = os.path.abspath(writable_dir(jit_cache, "--jit-cache"))
    axes = dict(**grid, model=model, heads=heads, kernels=kernels,
                spread_target=spread_target, budget_s=budget_s, l2=l2, min_time_s=min_time_s, duty=duty)
    if resume:
        if any(v is not None for v in axes.values()):
            raise BadInput("--resume takes the scenario from the run; drop the axis options")
        manifest = read_manifest(resume)
        fixed = [flag for name, flag in _FIXED_BY_RUN if _given(name)]
        if fixed:
            raise BadInput(f"--resume finishes the run as it was started: {', '.join(fixed)} cannot change it "
                           f"(drop {'them' if len(fixed) > 1 else 'it'})")
        check_resumable(resume, manifest)
        from kbench.timing.probe import probe_device
        from kbench.runs.resume import check_resume

        nothing = check_resume(resume, manifest, probe_device(device_index, with_flashinfer=False).to_dict(), force)
        if nothing:
            console.print(nothing, markup=False)
            return
        try:
            sc = scenario_of_run(manifest)
        except (KeyError, TypeError, AttributeError) as e:  # a hand-edited or foreign manifest
            raise BadInput(f"{resume}: the manifest's scenario is incomplete ({type(e).__name__}: {e})") from None
    else:
        if force:
            raise BadInput("--force goes with --resume")
        sc = apply_overrides(load_scenario(scenario), **axes)
        writable_dir(out_dir, "--out", create=False)  # the run folder is made when the sweep starts
    if resume and ada is not None and "adaptive" not in manifest:
        raise BadInput(f"{resume} is a full-grid sweep, not an adaptive one: resume it without --adaptive or budgets")
    opts = SweepOptions(adaptive=ada, out_dir=out_dir, resume=resume, run_name=run_name, device_index=device_index, seed=seed,
                        slow_kernel=_slow(slow_kernel), compile_workers=compile_workers, isolate=isolate, command_line=shlex.join(["kbench", *sys.argv[1:]]))
    if ada is not None and (devices or shard):
        raise BadInput("--adaptive plans from the whole grid's rows: drop --shard/--devices")
    note = name_note(run_name)
    if note:
        click.echo(note, err=True)
    if devices:
        if _given("device_index"):
            raise BadInput("--device and --devices: give one (--device: this process on one GPU; --devices: a worker "
                           "per listed GPU)")
        if shard or resume:
            raise BadInput("--devices runs its own shards: drop --shard/--resume")
        import torch

        devs = parse_devices(devices, torch.cuda.device_count() if torch.cuda.is_available() else 0)
        return _sweep_on_devices(console, sc, opts, devs, out_dir, run_name or sc.name, allow_wrong, max_table_cases)
    opts.shard = parse_shard(shard) if shard else None  # isdecimal digits only: int() takes each
    cases = shard_cases(sc.cases(), opts.shard)
    runner = Sweep(sc, opts)  # refuses bad --slow-kernel names before anything is printed
    console.print(f"[bold]{sc.name}[/]: {len(cases)} cases x {len(sc.kernels) if 'all' not in sc.kernels else 'all'} kernels "
                  f"({sc.source})")
    long_cpu = cpu_sweep_warning(len(cases), sc.timing)
    if long_cpu:
        console.print(f"[yellow]{long_cpu}[/]")
    with terminate_as_interrupt() as stop, RichSweepObserver(console) as obs:
        runner.obs = obs
        result = runner.run()
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
        f"rows: {len(rows)} ({', '.join(f'{k} {v}' for k, v in counts.items())}); timed {result.measurements} this call\n"
        f"wall {w.total_s:.1f} s: compile {w.compile_s:.1f}, inputs {w.inputs_s:.1f}, reference {w.reference_s:.1f}, "
        f"check {w.check_s:.1f}, timing {w.timing_s:.1f}\n"
        f"run: {result.run_dir}"
    )
    ada_block = read_manifest(result.run_dir).get("adaptive")
    if ada_block and ada_block.get("stop_rule"):
        console.print(f"adaptive: {ada_block['measured_cases']} of {ada_block['grid_cases']} cases measured in "
                      f"{ada_block['rounds']} round(s) ({', '.join(f'{k} {v}' for k, v in ada_block['points'].items())}; "
                      f"{ada_block['pruned']} kernel(s) pruned); stopped: {ada_block['stop_rule']}", markup=False)
    if result.error.startswith("cannot write"):
        click.echo(f"error: {result.error}; the journal keeps {len(rows)} complete row(s); free space, then "
                   f"kbench sweep --resume {result.run_dir}", err=True)
        sys.exit(2)
    if result.error:
        console.print(f"[bold red]stopped: {result.error}[/]\n[yellow]rows so far are kept; finish in a fresh process "
                      f"with kbench sweep --resume {result.run_dir} (isolation, the default on a GPU, restarts "
                      f"its worker instead)[/]")
        sys.exit(1)
    if result.status == "interrupted":
        console.print(f"[yellow]interrupted ({stop.reason}): rows so far are kept; finish with "
                      f"kbench sweep --resume {result.run_dir}[/]")
        sys.exit(stop.exit_code)
    bad = rows[rows["status"] == "wrong"]
    if len(bad):
        console.print(f"[bold red]{len(bad)} kernel result(s) WRONG against the reference[/]"
                      + ("" if allow_wrong else " (exit 1; --allow-wrong to accept)"))
        if not allow_wrong:
            sys.exit(1)


def _adaptive_options(adaptive, budget_measurements, budget_minutes, regret_bound, coarse_step, resume):
    """AdaptiveOptions from the flags, or None. With --resume an adaptive run keeps its settings from its
    manifest (only the budgets may be given again)."""
    from kbench.engine.adaptive_options import AdaptiveOptions

    tuning = [f for f, n in (("--regret-bound", "regret_bound"), ("--coarse-step", "coarse_step")) if _given(n)]
    budgets = budget_measurements is not None or budget_minutes is not None
    if not adaptive and not resume and (tuning or budgets):
        raise BadInput(f"{(tuning or ['--budget-measurements/--budget-minutes'])[0]} goes with --adaptive")
    if resume:
        if tuning:
            raise BadInput(f"--resume keeps the run's adaptive settings: drop {', '.join(tuning)}")
        if not adaptive and not budgets:
            return None  # the run's manifest says whether it is adaptive
    elif not adaptive:
        return None
    return AdaptiveOptions(regret_bound=regret_bound / 100, coarse_step=coarse_step,
                           budget_measurements=budget_measurements, budget_minutes=budget_minutes).check()


CPU_S_PER_CASE = 0.5  # inputs, reference and check of a case on a CPU, beyond its timing
CPU_WARN_S = 180


def cpu_sweep_warning(n_cases: int, timing) -> str | None:
    """On a CPU (no CUDA): a warning when the sweep will take more than a few minutes, with how to narrow it."""
    import torch

    if torch.cuda.is_available():
        return None
    est = n_cases * (max(timing.budget_s, timing.min_time_s) + CPU_S_PER_CASE)
    if est <= CPU_WARN_S:
        return None
    return (f"on a CPU these {n_cases} cases take up to about {est / 60:.0f} min (the reference is timed up to "
            f"{timing.budget_s:g} s per case; the FlashInfer kernels need a GPU); narrow the grid with "
            f"--batch-size/--q-len/--kv-len, or lower --budget")


# options fixed by the run that --resume finishes: given with --resume they are refused, not ignored
_FIXED_BY_RUN = (("scenario", "--scenario"), ("out_dir", "--out"), ("run_name", "--name"), ("shard", "--shard"),
                 ("devices", "--devices"), ("seed", "--seed"))


def _given(name: str) -> bool:
    from click.core import ParameterSource

    src = click.get_current_context().get_parameter_source(name)
    return src in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _sweep_on_devices(console, sc, opts, devices, out_dir, name, allow_wrong, max_table_cases):
    from rich.progress import Progress

    n_cases = len(sc.cases())
    console.print(f"[bold]{sc.name}[/]: {n_cases} cases over {len(devices)} worker(s) on GPU(s) {devices}")
    with Progress(console=console) as prog:
        tasks = {}

        def poll(workers):
            for w in workers:
                if w.shard not in tasks:
                    tasks[w.shard] = prog.add_task(f"shard {w.shard} on GPU {w.device}", total=None)
                prog.update(tasks[w.shard], completed=w.rows_done(),
                            description=f"shard {w.shard} on GPU {w.device}" + ("" if w.proc.poll() is None else " done"))

        Sweep(sc, opts)  # refuses bad --slow-kernel names before a worker starts
        merged = run_on_devices(sweep_payload(sc, opts), devices, out_dir, name, on_poll=poll)
    run = load_run(merged)
    ceiling = run.manifest.get("read_bandwidth_gbs") or run.manifest.get("copy_bandwidth_gbs")
    for t in summary_tables(run.rows, ceiling, max_table_cases):
        console.print(t)
    wall = [m.get("wall_s", {}).get("total_s") for m in run.manifest["merged_from"]]
    console.print(f"merged {len(run.rows)} rows from {len(devices)} shard(s) (worker wall s: {wall})\nrun: {merged}")
    if (run.rows["status"] == "wrong").any() and not allow_wrong:
        sys.exit(1)


@click.command("merge", epilog=examples(
    "kbench merge results/quick-shard0-20261203-101500 results/quick-shard1-20261203-101502",
    "kbench merge results/draft-extend-shard*-2026* --name draft-extend-h200 --out results"))
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out_dir", default="results", show_default=True,
              help="Folder that receives the merged run folder.")
@click.option("--name", help="Merged run name (default: <scenario>-merged).")
def merge(runs, out_dir, name):
    """Join shard runs (from --shard i/N or --devices) into one run; refuses mismatched manifests."""
    from kbench.runs.merge import merge_runs

    writable_dir(out_dir, "--out", create=False)
    note = name_note(name)
    if note:
        click.echo(note, err=True)
    path = merge_runs(list(runs), out_dir, name)
    run = load_run(path)
    make_console().print(f"merged {len(run.rows)} rows from {len(runs)} runs ({run.manifest['status']}): {path}")
