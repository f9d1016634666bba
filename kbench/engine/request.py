"""What a sweep is asked to do: `SweepRequest`, the `kbench sweep` command's inputs as given, and every rule
between them, checked once, in one place (`SweepRequest.check`); `SweepOptions`, the engine's settings of one
sweep (kbench.engine.sweep.Sweep, also from Python).

check() applies the rules in the order the command has always applied them (so the first problem is the one
named) and returns a `CheckedSweep`: the scenario, the SweepOptions, the sweep plan (kbench.engine.plans) and,
for --devices, the GPUs; or, for a complete run given to --resume, what to say instead of running. Every refusal
is a BadInput (one `error:` line, exit 2) before anything is written.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kbench.cases.axes import GRID, axes_with
from kbench.cases.scenario import Scenario, apply_overrides, load_scenario, scenario_data, scenario_from_dict
from kbench.engine.plans import SweepPlan, check_plan, plan_for
from kbench.engine.jit_cache import use_jit_cache
from kbench.engine.plans.adaptive_options import AdaptiveOptions
from kbench.engine.shards import check_device, parse_devices, parse_shard
from kbench.errors import BadInput
from kbench.runs.outputs import given_path, writable_dir
from kbench.runs.store import check_resumable, name_note, read_manifest
from kbench.values import SEED_MAX, ascii_digits, int_in


def gpu_count() -> int:
    """The GPUs torch can use here (0 on a machine without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass
class SweepOptions:
    """How a sweep runs (the keyword options of run_sweep and resume_sweep): where its folder goes (out_dir,
    run_name: OUT/<run_name or scenario>-<time>), the inputs' seed, a shard (i, n), an adaptive plan, streamed
    compiles, process isolation, the device. A resume keeps the run's out_dir, run_name, seed and shard."""
    out_dir: str | Path = "results"
    resume: str | Path | None = None
    run_name: str | None = None
    device_index: int = 0
    seed: int = 0
    # test-only: {kernel: n} runs that kernel n times per timed call, to prove the gate catches slow-downs
    slow_kernel: dict[str, int] = field(default_factory=dict)
    command_line: str = ""
    compile_workers: int | None = None  # None: kbench.engine.jit.default_workers()
    # build the JIT modules in the background and measure each kernel once its modules are ready
    # (kbench.engine.stream); False: compile every module first, then measure (kbench before streaming)
    stream: bool = True
    shard: tuple[int, int] | None = None  # (i, n): only cases whose index in the grid is i mod n
    # run kernels in a worker process restarted after a crash (kbench.engine.isolation); None: when CUDA is
    # there (the CLI's default; the Python API passes False, because spawned workers re-import __main__)
    isolate: bool | None = False
    # measure a coarse sub-grid, then refine where the decision is uncertain (kbench.engine.plans.adaptive_plan)
    adaptive: AdaptiveOptions | None = None

    def checked(self, new_run: bool = True) -> "SweepOptions":
        """The rules `kbench sweep` applies to its flags, for options given from Python (run_sweep, resume_sweep):
        BadInput for an empty out_dir, a seed outside 0..2**63-1, a GPU index this machine lacks, a shard that is
        not (i, n) with 0 <= i < n (the text 'i/N' or 'auto' is read as --shard reads it). new_run=False (a
        resume): only what a resume may set."""
        if new_run:
            if not isinstance(self.out_dir, (str, os.PathLike)):
                raise BadInput(f"out_dir {self.out_dir!r}: give a folder (e.g. results)")
            given_path(self.out_dir, "--out", "results")
            if self.run_name is not None and not isinstance(self.run_name, str):
                raise BadInput(f"run_name {self.run_name!r}: expected a name (a string)")
            if self.adaptive is not None:
                if not isinstance(self.adaptive, AdaptiveOptions):
                    raise BadInput(f"adaptive {self.adaptive!r}: expected AdaptiveOptions(...) or None")
                self.adaptive.check()
            if not int_in(self.seed, 0, SEED_MAX):
                raise BadInput(f"seed {self.seed!r}: expected an integer in 0..2**63-1")
            if isinstance(self.shard, str):
                self.shard = parse_shard(self.shard)
            elif self.shard is not None:
                pair = tuple(self.shard) if isinstance(self.shard, (tuple, list)) else ()
                if len(pair) != 2 or not int_in(pair[1], 1) or not int_in(pair[0], 0, pair[1] - 1):
                    raise BadInput(f"shard {self.shard!r}: expected (i, n) with 0 <= i < n (or the text 'i/N')")
                self.shard = pair
        if not isinstance(self.slow_kernel, dict) or not all(
                isinstance(k, str) and int_in(n, 2, 1000) for k, n in self.slow_kernel.items()):
            raise BadInput(f"slow_kernel {self.slow_kernel!r}: expected {{KERNEL: N}} with N in 2..1000")
        if self.compile_workers is not None and not int_in(self.compile_workers, 1, 64):
            raise BadInput(f"compile_workers {self.compile_workers!r}: expected an integer in 1..64")
        check_device(self.device_index, gpu_count())
        return self

    def plan(self, scenario: Scenario, manifest: dict | None = None) -> SweepPlan:
        """The sweep plan these options ask for (a resumed run's manifest: its own kind of plan and shard)."""
        if self.resume and manifest is None:
            manifest = read_manifest(Path(self.resume))
        return plan_for(scenario.cases(), self.adaptive, self.shard, manifest)


def scenario_of_run(manifest: dict) -> Scenario:
    """The scenario a run was started with (its manifest), to resume it."""
    d = manifest.get("scenario")
    if not isinstance(d, dict):
        raise BadInput("the run's manifest holds no scenario to resume")
    try:
        return scenario_from_dict(scenario_data(d), f"{d.get('source', 'manifest')} (resumed)")
    except (KeyError, TypeError, AttributeError) as e:  # a hand-edited or foreign manifest
        raise BadInput(f"the run's manifest holds an incomplete scenario ({type(e).__name__}: {e})") from None


# the flags that override the scenario (SweepRequest.overrides, by name): one per grid axis, the head config, the
# kernels and the [timing] settings
OVERRIDE_FLAGS = {**{a.name: a.flag for a in axes_with(GRID)}, "model": "--model", "heads": "--heads",
                  "kernels": "--kernels", "spread_target": "--spread-target", "budget_s": "--budget", "l2": "--l2",
                  "min_time_s": "--min-time", "duty": "--duty"}
# options fixed by the run that --resume finishes: given with --resume they are refused, not ignored
FIXED_BY_RUN = (("scenario", "--scenario"), ("out_dir", "--out"), ("run_name", "--name"), ("shard", "--shard"),
                ("devices", "--devices"), ("seed", "--seed"))
# the adaptive planner's tuning flags (a resumed adaptive run keeps its own)
TUNING = (("--regret-bound", "regret_bound"), ("--coarse-step", "coarse_step"))
# what a resume takes (every other option is the run's: OVERRIDE_FLAGS, FIXED_BY_RUN, TUNING)
RESUME_TAKES = ("--device, --force, --allow-wrong, --isolate/--no-isolate, --stream/--no-stream, --compile-workers, "
                "--jit-cache, --max-table-cases, --slow-kernel, and for an adaptive run --adaptive, "
                "--budget-measurements, --budget-minutes")


@dataclass
class CheckedSweep:
    """A request that passed every rule: what to run (or, nothing_to_do, what to say instead)."""
    scenario: Scenario | None = None
    options: SweepOptions | None = None
    plan: SweepPlan | None = None
    devices: list[int] | None = None  # --devices: one worker per GPU over the shards, merged into one run
    nothing_to_do: str | None = None  # --resume of a complete run: this line, exit 0, nothing touched


@dataclass
class SweepRequest:
    """`kbench sweep`'s inputs as given. `given`: the names of the options given on the command line or in the
    environment (not left at their defaults), for the rules that depend on it."""
    scenario: str = "quick"
    overrides: dict = field(default_factory=dict)  # axis and [timing] flags, model, heads, kernels (None: not given)
    out_dir: str = "results"
    run_name: str | None = None
    resume: str | None = None
    device_index: int = 0
    seed: int = 0
    allow_wrong: bool = False  # exit 0 even when a kernel is wrong
    max_table_cases: int = 200  # rows shown per summary table
    slow_kernel: tuple[str, ...] = ()  # KERNEL=N
    compile_workers: int | None = None
    stream: bool = True
    jit_cache: str | None = None
    shard: str | None = None  # i/N
    devices: str | None = None  # 0,1
    isolate: bool | None = None
    force: bool = False
    adaptive: bool = False
    budget_measurements: int | None = None
    budget_minutes: float | None = None
    regret_bound: float = AdaptiveOptions.regret_bound * 100  # percent
    coarse_step: int = AdaptiveOptions.coarse_step
    given: frozenset[str] = frozenset()
    command_line: str = ""

    def check(self, note: Callable[[str], None] = lambda line: None) -> CheckedSweep:
        """Every rule, in order; BadInput names the first one broken. `note` gets the lines to say on the way
        (a --name written differently as a folder name). A --jit-cache folder is set first (FlashInfer reads it
        once, when it is imported, and a check below may import it), checked but not made: FlashInfer makes it when
        it first builds there, so bad input leaves no empty folder."""
        if self.jit_cache is not None:
            use_jit_cache(self.jit_cache, create=False)
        if self.resume:
            self.check_resume_options()
        ada = self.adaptive_options()
        if not self.devices:
            check_device(self.device_index, gpu_count())
        manifest = None
        if self.resume:
            manifest = read_manifest(self.resume)
            check_resumable(self.resume, manifest)
            from kbench.runs.resume import check_resume
            from kbench.timing.probe import probe_device

            device = probe_device(self.device_index, with_flashinfer=False).to_dict()
            nothing = check_resume(self.resume, manifest, device, self.force)
            if nothing:
                return CheckedSweep(nothing_to_do=nothing)
            sc = scenario_of_run(manifest)
        else:
            if self.force:
                raise BadInput("--force goes with --resume")
            sc = apply_overrides(load_scenario(self.scenario), **self.overrides)
            writable_dir(self.out_dir, "--out", create=False)  # the run folder is made when the sweep starts
        if self.resume and ada is not None and "adaptive" not in manifest:
            raise BadInput(f"{self.resume} is a full-grid sweep, not an adaptive one: resume it without --adaptive "
                           f"or budgets")
        opts = SweepOptions(adaptive=ada, out_dir=self.out_dir, resume=self.resume, run_name=self.run_name,
                            device_index=self.device_index, seed=self.seed, slow_kernel=self.slow_kernels(),
                            compile_workers=self.compile_workers, isolate=self.isolate, command_line=self.command_line,
                            stream=self.stream)
        check_plan(ada is not None, bool(self.devices or self.shard))
        line = name_note(self.run_name)
        if line:
            note(line)
        if self.devices:
            if "device_index" in self.given:
                raise BadInput("--device and --devices: give one (--device: this process on one GPU; --devices: a "
                               "worker per listed GPU)")
            if self.shard or self.resume:
                raise BadInput("--devices runs its own shards: drop --shard/--resume")
            devs = parse_devices(self.devices, gpu_count())
            return CheckedSweep(sc, opts, None, devs)
        opts.shard = parse_shard(self.shard) if self.shard else None  # digits 0-9 only: int() takes '١٢' too
        return CheckedSweep(sc, opts, opts.plan(sc, manifest), None)

    def check_resume_options(self) -> None:
        """With --resume: BadInput naming every option given that the run fixes (its scenario and overrides of it,
        its folder, shard, seed, adaptive tuning), and what a resume takes instead."""
        given = [OVERRIDE_FLAGS.get(n, f"--{n.replace('_', '-')}") for n, v in self.overrides.items() if v is not None]
        given += [flag for name, flag in FIXED_BY_RUN if name in self.given]
        given += [flag for flag, name in TUNING if name in self.given]
        if given:
            raise BadInput(f"--resume finishes the run as it was started: {', '.join(given)} cannot change it "
                           f"(drop {'them' if len(given) > 1 else 'it'}); a resume takes only {RESUME_TAKES}")

    def adaptive_options(self) -> AdaptiveOptions | None:
        """AdaptiveOptions from the flags, or None. With --resume an adaptive run keeps its settings from its
        manifest (only the budgets may be given again)."""
        tuning = [flag for flag, name in TUNING if name in self.given]
        budgets = self.budget_measurements is not None or self.budget_minutes is not None
        if not self.adaptive and not self.resume and (tuning or budgets):
            raise BadInput(f"{(tuning or ['--budget-measurements/--budget-minutes'])[0]} goes with --adaptive")
        if self.resume:
            if tuning:
                raise BadInput(f"--resume keeps the run's adaptive settings: drop {', '.join(tuning)}")
            if not self.adaptive and not budgets:
                return None  # the run's manifest says whether it is adaptive
        elif not self.adaptive:
            return None
        return AdaptiveOptions(regret_bound=self.regret_bound / 100, coarse_step=self.coarse_step,
                               budget_measurements=self.budget_measurements, budget_minutes=self.budget_minutes).check()

    def slow_kernels(self) -> dict[str, int]:
        out = {}
        for v in self.slow_kernel:
            name, sep, n = v.partition("=")
            if not sep or not ascii_digits(n) or not 2 <= int(n) <= 1000:
                raise BadInput(f"--slow-kernel: expected KERNEL=N with N in 2..1000, got {v!r}")
            out[name.strip()] = int(n)
        return out
