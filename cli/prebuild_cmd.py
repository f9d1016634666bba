"""`kbench prebuild`: build the FlashInfer modules a sweep's grid needs, here or for another machine."""
from __future__ import annotations

import time

import click

from kbench import shell
from kbench.cli.console import make_console
from kbench.cli.options import IntRange, OutputPath, examples
from kbench.cli.sweep_cmd import grid_options
from kbench.errors import BadInput


@click.command("prebuild", epilog=examples(
    "kbench prebuild -s draft-extend --kv-len 4096 --batch-size 16,64          # on the GPU host: into the JIT cache",
    "kbench prebuild -s draft-extend --batch-size 16,64 --arch 9.0a --archive aot.tgz   # on a host without a GPU",
    "kbench prebuild --load aot.tgz                                            # on the GPU host: no compiling"))
@click.option("--scenario", "-s", default="quick", show_default=True,
              help="Built-in scenario name or a TOML file, as `kbench sweep` takes it.")
@grid_options
@click.option("--grid", "grids", multiple=True, metavar="'OPTIONS'",
              help="Another grid: the sweep's grid options in one quoted string (e.g. '-s draft-extend --q-len 32,64 "
                   "--kernels trtllm-decode'); repeatable. The plan joins every grid's modules, each once.")
@click.option("--arch", help="Build for this CUDA architecture as FlashInfer names it (9.0a: H100/H200, 10.0a: B200), "
                             "with or without a GPU here (sets FLASHINFER_CUDA_ARCH_LIST). Default: this machine's GPU.")
@click.option("--archive", type=OutputPath("aot.tgz", dir_okay=False), help="Also pack the grid's built modules into this .tar.gz, "
                                                                  "for `kbench prebuild --load` on the GPU host.")
@click.option("--load", "load", type=click.Path(dir_okay=False),
              help="Install an archive's modules as FlashInfer AOT modules (flashinfer/data/aot), which it loads "
                   "without compiling; checks the FlashInfer version and, with a GPU here, the architecture. No grid options.")
@click.option("--list", "list_only", is_flag=True, help="List the grid's modules and whether each is built; build nothing.")
@click.option("--no-build", is_flag=True, help="Build nothing: with --archive, pack the grid's modules that are built "
                                                "(e.g. while another prebuild of them still runs).")
@click.option("--parallel", type=IntRange(1, 64), help="Modules built at once (default: cores/4, at least 1).")
@click.option("--jobs", type=IntRange(1, 256), help="Compile jobs per module (MAX_JOBS; default: cores / --parallel).")
@click.option("--include", multiple=True, type=click.Path(), help="An extra header folder for nvcc and c++ (the cuBLAS "
                                                                   "and cuRAND headers of fmha-v2 and fa3 where the CUDA toolkit lacks them).")
@click.option("--jit-cache", type=OutputPath("/ci-cache/kbench-jit", file_okay=False), metavar="DIR",
              help="Keep FlashInfer's JIT cache under DIR (FLASHINFER_WORKSPACE_BASE: DIR/.cache/flashinfer/...), "
                   "as `kbench sweep --jit-cache`.")
def prebuild(scenario, model, heads, kernels, grids, arch, archive, load, list_only, no_build, parallel, jobs, include,
             jit_cache, **grid):
    """Build exactly the FlashInfer modules a sweep of this grid compiles, before the sweep.

    The plan is the sweep's: the same cases, the kernels that run them on the target GPU, each module once.
    A line per module: built (seconds), cached (in the JIT cache), aot (installed prebuilt) or FAILED with the
    compiler's reason. On a GPU host the modules go to FlashInfer's JIT cache, where `kbench sweep` finds them
    (FLASHINFER_WORKSPACE_BASE, or --jit-cache). Without a GPU, --arch builds for the named architecture and
    --archive packs the modules; `kbench prebuild --load FILE` installs them on the GPU host. Needs nvcc (the CUDA
    version the GPU host's FlashInfer builds with). Exit 1 if a module failed to build, 2 on bad input.
    """
    console = make_console()
    given = click.get_current_context()
    if jit_cache is not None:
        from kbench.engine.jit_cache import use_jit_cache

        use_jit_cache(jit_cache, create=False)  # FlashInfer makes it as it plans or builds
    if load is not None:
        other = [p.opts[0] for p in given.command.params if p.name not in ("load", "jit_cache")
                 and given.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if other:
            raise BadInput(f"--load installs an archive as it is: drop {', '.join(other)}")
        return _load(console, load)
    if list_only and archive is not None:
        raise BadInput("--list builds and packs nothing: drop --archive (or, to pack what is built, use --no-build "
                       "--archive FILE)")
    if no_build and archive is None and not list_only:
        raise BadInput("--no-build packs what is built: give --archive FILE (or --list to see it)")
    from kbench.engine.prebuild import check_archive_path, plan_prebuild

    direct = any(_given(given, p) for p in _grid_params())
    scenarios = [_scenario(dict(grid, scenario=scenario, model=model, heads=heads, kernels=kernels))] \
        if direct or not grids else []
    scenarios += [_grid(g) for g in grids]
    if archive is not None:
        check_archive_path(archive, scenarios)
    pp = plan_prebuild(scenarios, arch, include, for_build=not no_build and not list_only)
    for note in pp.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    from flashinfer.jit import env as fi_env

    names = " + ".join(f"{sc.name} ({len(sc.cases())} cases)" for sc in scenarios)
    console.print(f"[bold]{names}[/]: {len(pp.modules)} FlashInfer modules for {pp.device.name} (planned in "
                  f"{pp.seconds:.1f} s); JIT cache {fi_env.FLASHINFER_JIT_DIR}", highlight=False)
    if list_only:
        return _list(console, pp.modules)
    failed = []
    if not no_build:
        t0 = time.perf_counter()
        outcomes = _build(console, pp, parallel, jobs)
        failed = [o for o in outcomes if o.status == "failed"]
        counts = {s: sum(o.status == s for o in outcomes) for s in ("built", "cached", "aot", "failed")}
        console.print(f"{len(pp.modules)} modules: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s == "failed")
                      + f" in {time.perf_counter() - t0 + pp.seconds:.0f} s", highlight=False)
    if archive is not None:
        from kbench.engine.prebuild import arch_name, write_archive

        out, n = write_archive(archive, pp.modules, arch or arch_name(pp.device))
        console.print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB, {n} modules); on the GPU host: "
                      f"{shell.kbench('prebuild', '--load', out)}", highlight=False, markup=False, soft_wrap=True)
    return 1 if failed else 0


def _given(ctx, name: str) -> bool:
    return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def _grid_params() -> list[str]:
    """The options that make a grid: the scenario, the sweep's grid axes, the head config and the kernels."""
    from kbench.cases.axes import GRID, axes_with

    return ["scenario", "model", "heads", "kernels", *(a.name for a in axes_with(GRID))]


def _scenario(params: dict):
    from kbench.cases.axes import GRID, axes_with
    from kbench.cases.scenario import apply_overrides, load_scenario

    axes = {a.name: params.get(a.name) for a in axes_with(GRID)}
    return apply_overrides(load_scenario(params["scenario"]), **axes, model=params.get("model"),
                           heads=params.get("heads"), kernels=params.get("kernels"))


def _grid(text: str):
    """One --grid: parsed by this command's own parser (short flags and --opt=value too), grid options only."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as e:  # an unclosed quote
        raise BadInput(f"--grid {text!r}: {e}") from None
    if not words:
        raise BadInput(f"--grid {text!r}: an empty grid; give the sweep's grid options (e.g. --grid '-s draft-extend "
                       f"--q-len 32,64')")
    if any(w in ("-h", "--help") for w in words):  # click would print the help and end the command with 0
        raise BadInput(f"--grid {text!r}: only the sweep's grid options go in a grid, not --help")
    try:
        ctx = prebuild.make_context("prebuild", words)  # parses only: nothing runs
    except click.UsageError as e:
        raise BadInput(f"--grid {text!r}: {e.format_message()}") from None
    except click.exceptions.Exit:  # an eager option that ends the command (--help): nothing of a grid
        raise BadInput(f"--grid {text!r}: only the sweep's grid options go in a grid") from None
    other = [p.opts[0] for p in prebuild.params if p.name not in _grid_params() and _given(ctx, p.name)]
    if other:
        raise BadInput(f"--grid {text!r}: only the sweep's grid options go in a grid, not {', '.join(other)}")
    return _scenario(ctx.params)


def _list(console, modules) -> int:
    from rich.table import Table

    t = Table(show_header=True, header_style="bold")
    for col in ("state", "module", "kernels"):
        t.add_column(col)
    states = {}
    for m in modules:
        s = m.state
        states[s] = states.get(s, 0) + 1
        t.add_row(s, m.name, ", ".join(m.kernels))
    console.print(t)
    console.print(", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "nothing to build", highlight=False)
    return 0


def _line(o) -> str:
    if o.status == "built":
        return f"  built  {o.seconds:6.0f} s  {o.module}"
    if o.status == "failed":
        return f"  FAILED {o.seconds:6.0f} s  {o.module}: {o.reason}"
    return f"  {o.status:<6}           {o.module}"


def _build(console, pp, parallel, jobs):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from kbench.engine.prebuild import build_plan

    if not console.is_terminal:  # CI logs: a plain line per module, nothing redrawn
        return build_plan(pp, parallel, jobs, lambda o: console.print(_line(o), markup=False, highlight=False))
    with Progress(SpinnerColumn(), TextColumn("[bold]building"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as prog:
        task = prog.add_task("", total=len(pp.modules))

        def done(o):
            prog.console.print(_line(o), markup=False, highlight=False)
            prog.advance(task)

        return build_plan(pp, parallel, jobs, done)


def _load(console, archive) -> int:
    from kbench.engine.prebuild import load_archive
    from kbench.timing.probe import probe_device

    loaded = load_archive(archive, device=probe_device(with_flashinfer=False))
    console.print(f"{len(loaded.installed)} modules installed, {len(loaded.present)} already there, in {loaded.into} "
                  "(FlashInfer loads them without compiling)", highlight=False)
    return 0
