"""The sweep runner: Scenario -> Cases -> Inputs -> each Kernel -> check -> time -> Row, appended as measured.

Usable from Python without the CLI; progress goes to an optional observer (see SweepObserver).
"""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kbench import RESULT_SCHEMA_VERSION, __version__
from kbench.cases.case import Case
from kbench.errors import BadInput, first_line
from kbench.device import DeviceInfo
from kbench.runs.manifest import Manifest
from kbench.engine.measure import CaseMeasurer, CudaContextLost, MeasureOptions, Payload, WallSplit
from kbench.engine.placement import L2_COVER
from kbench.runs.rows import Row
from kbench.engine.shards import parse_shard, shard_cases  # noqa: F401 - still importable from here
from kbench.cases.scenario import Scenario, scenario_data, scenario_from_dict
from kbench.runs.signals import stop_reason
from kbench.runs.store import RunWriter, new_run_dir, read_journal


class SweepObserver:
    """Receives progress; the CLI renders it with rich. Every method is optional."""

    def phase(self, name: str, total: int | None = None) -> None: ...
    def advance(self, description: str = "") -> None: ...
    def row(self, row: Row) -> None: ...
    def kernel_started(self, kernel: str, case: Case) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class SweepResult:
    run_dir: Path
    rows: pd.DataFrame
    wall: WallSplit
    status: str  # complete | interrupted
    device: DeviceInfo
    copy_bandwidth_gbs: float | None = None
    measurements: int = 0
    error: str = ""  # why the run stopped early (a lost CUDA context), else ""
    read_bandwidth_gbs: float | None = None  # kbench.timing.hardware.read_bandwidth_gbs
    ceiling_gbs: float | None = None  # roofline_frac's ceiling: the read figure, else (not measured) the copy figure


@dataclass
class SweepOptions:
    out_dir: str | Path = "results"
    resume: str | Path | None = None
    run_name: str | None = None
    device_index: int = 0
    seed: int = 0
    # test-only: {kernel: n} runs that kernel n times per timed call, to prove the gate catches slow-downs
    slow_kernel: dict[str, int] = field(default_factory=dict)
    command_line: str = ""
    compile_workers: int | None = None  # None: kbench.engine.jit.default_workers()
    shard: tuple[int, int] | None = None  # (i, n): only cases whose index in the grid is i mod n
    # run kernels in a worker process restarted after a crash (kbench.engine.isolation); None: when CUDA is
    # there (the CLI's default; the Python API passes False, because spawned workers re-import __main__)
    isolate: bool | None = False
    # kbench.engine.adaptive.AdaptiveOptions: measure a coarse sub-grid, then refine where the decision is uncertain
    adaptive: object | None = None


class Sweep:
    """The run: the run folder, resume, compile, then each case measured (kbench.engine.measure) in this process
    or in an isolated worker, rows appended to the journal as they come, the manifest finalised."""

    def __init__(self, scenario: Scenario, options: SweepOptions | None = None,
                 observer: SweepObserver | None = None):
        self.sc = scenario
        self.opt = options or SweepOptions()
        self.obs = observer or SweepObserver()
        self.measurer = CaseMeasurer(scenario, self.measure_options(),
                                     kernel_started=lambda k, c: self.obs.kernel_started(k, c),
                                     progress=lambda text: self.obs.advance(text))
        self.kernels = self.measurer.kernels
        self.wall = self.measurer.wall
        if self.opt.adaptive is not None and self.opt.shard:
            raise BadInput("--adaptive plans from the whole grid's rows: drop --shard/--devices")
        self._isolated = None
        self.chosen_by: dict[str, str] = {}  # case_id -> how an adaptive sweep chose it (the rows' chosen_by)
        self._compiled: set[tuple] = set()  # (kernel, jit_key) compiled by this call

    def measure_options(self) -> MeasureOptions:
        return MeasureOptions(self.opt.device_index, self.opt.seed, dict(self.opt.slow_kernel))

    @property
    def measurements(self) -> int:
        return self.measurer.measurements

    # -- set-up -----------------------------------------------------------------------------------
    def _manifest(self, dev: DeviceInfo, bw: float | None) -> Manifest:
        from kbench.timing.hardware import clocks

        t = self.sc.timing
        return Manifest(
            kind="sweep", schema_version=RESULT_SCHEMA_VERSION, kbench_version=__version__,
            command_line=self.opt.command_line, scenario=self.sc.to_dict(), device=dev.to_dict(),
            python=platform.python_version(), copy_bandwidth_gbs=bw,
            clocks_start=clocks(dev.index) if dev.cuda else {},
            timer={"kind": "cuda-graph" if dev.cuda else "wall-clock", "spread_target": t.spread_target,
                   "budget_s": t.budget_s, "min_samples": t.min_samples, "max_samples": t.max_samples,
                   "min_time_s": t.min_time_s, "duty": t.duty, "l2": t.l2, "l2_cover": L2_COVER, "warmup_ms": t.warmup_ms,
                   "fence": "one-element fill between calls (no PDL overlap between calls); its time subtracted",
                   "spread": "relative half-width of the 95% order-statistic CI of the median"},
            slow_kernel=self.opt.slow_kernel, seed=self.opt.seed,
            shard={"index": self.opt.shard[0], "count": self.opt.shard[1]} if self.opt.shard else None,
            **({"adaptive": {"options": self.opt.adaptive.to_dict()}} if self.opt.adaptive else {}),
        )

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> SweepResult:
        t_start = time.perf_counter()
        dev = self.measurer.open()
        done: set[tuple[str, str]] = set()
        if self.opt.resume:
            writer = RunWriter(self.opt.resume, {}, resume=True)
            prev = read_journal(writer.dir / "rows.jsonl")
            done = set(zip(prev["kernel"], prev["case_id"]))
            copy_bw, read_bw = writer.manifest.get("copy_bandwidth_gbs"), writer.manifest.get("read_bandwidth_gbs")
            bw = read_bw or copy_bw
        else:
            bw = copy_bw = read_bw = None
            if dev.cuda:
                self.obs.phase("measuring copy and read bandwidth")
                from kbench.timing.hardware import copy_bandwidth_gbs, read_bandwidth_gbs

                copy_bw = copy_bandwidth_gbs(dev.torch_device)
                read_bw = read_bandwidth_gbs(dev.torch_device)
                bw = read_bw or copy_bw  # the roofline ceiling
            run_dir = new_run_dir(self.opt.out_dir, self.opt.run_name or self.sc.name)
            ceiling = "read_bandwidth_gbs" if read_bw or not copy_bw else "copy_bandwidth_gbs"
            manifest = self._manifest(dev, copy_bw)
            manifest.update(read_bandwidth_gbs=read_bw, roofline_ceiling=ceiling)
            writer = RunWriter(run_dir, manifest)
        status, error = "complete", ""
        try:
            cases = shard_cases(self.sc.cases(), self.opt.shard or writer.manifest_shard())
            isolate = dev.cuda if self.opt.isolate is None else self.opt.isolate
            writer.manifest["isolated"] = bool(isolate)
            if self.opt.adaptive is not None or "adaptive" in writer.manifest:
                from kbench.engine.adaptive_sweep import run_adaptive

                run_adaptive(self, writer, dev, cases, done, bw, isolate, t_start)
            else:
                todo = [c for c in cases if any((k.name, c.case_id) not in done for k in self.kernels)]
                self._compile(dev, todo, done, in_process=not isolate)
                self.obs.phase("measuring", total=sum(
                    1 for c in todo for k in self.kernels if (k.name, c.case_id) not in done))
                self.measure_cases(todo, dev, writer, done, bw, isolate)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM under kbench.runs.signals.terminate_as_interrupt
            status = "interrupted"
            writer.manifest["stopped_by"] = stop_reason(e)
        except CudaContextLost as e:  # not isolated: this process can run nothing more on the GPU
            status, error = "interrupted", str(e)
            writer.manifest["stopped_by"] = error
        except OSError as e:  # the journal cannot grow (a full disk): complete rows kept, the run interrupted
            status, error = "interrupted", f"cannot write the run: {e.strerror or e}"
            writer.manifest["stopped_by"] = error
        except BaseException as e:  # anything else: the run is not complete, say why, then let it go up
            status = "interrupted"
            writer.manifest["stopped_by"] = first_line(e)
            raise
        finally:
            if self._isolated is not None:
                writer.manifest["worker_restarts"] = self._isolated.restarts
                writer.manifest["cuda_context_losses"] = self._isolated.context_losses
                self._isolated.close()
            self.wall.total_s = time.perf_counter() - t_start
            prev_wall = writer.manifest.get("wall_s")
            writer.manifest["wall_s"] = self.wall.as_dict()
            if prev_wall:
                writer.manifest.setdefault("wall_s_earlier", []).append(prev_wall)
            # cumulative over --resume calls (SweepResult.measurements counts this call)
            writer.manifest["measurements"] = int(writer.manifest.get("measurements") or 0) + self.measurements
            if dev.cuda and not error:
                from kbench.timing.hardware import clocks

                writer.manifest["clocks_end"] = clocks(dev.index)
            run_dir = writer.finalize(status)
        rows = read_journal(run_dir / "rows.jsonl")
        return SweepResult(run_dir, rows, self.wall, status, dev, copy_bw, self.measurements, error,
                           read_bandwidth_gbs=read_bw, ceiling_gbs=bw)

    def measure_cases(self, cases: list[Case], dev: DeviceInfo, writer: RunWriter, done, bw, isolate) -> None:
        if isolate:
            self._run_isolated(cases, dev, writer, done, bw)
        else:
            for case in cases:
                self.measurer.measure(case, done, bw, self._emitter(writer, done))

    def _compile(self, dev: DeviceInfo, cases: list[Case], done, in_process: bool = True) -> None:
        """Compile every JIT module the sweep needs before the first measurement: each distinct
        (kernel, jit_key) once, on a small case with the same key, in parallel processes."""
        if not dev.cuda:
            return
        from kbench.engine.jit import compile_all, compile_targets

        jobs = compile_targets(self.kernels, cases, dev, skip=lambda k, c: (
            (k.name, c.case_id) in done or (k.name, k.jit_key(c)) in self._compiled))
        if not jobs:
            return
        self.obs.phase(f"compiling JIT modules ({self.opt.compile_workers or 'auto'} workers)", total=len(jobs))
        t0 = time.perf_counter()

        def done_one(job, secs, err):
            self.obs.advance(f"{job.label()} {secs:.0f} s" + (" FAILED" if err else ""))

        self._compiled.update(jobs)
        errors = compile_all(list(jobs.values()), dev.index, self.opt.compile_workers, done_one, in_process, dev)
        for label, err in errors.items():  # each case's check records the failure on its own row
            self.obs.message(f"compile of {label} failed: {err}")
        self.wall.compile_s += time.perf_counter() - t0

    def _emitter(self, writer: RunWriter, done):
        def emit(row: Row) -> None:
            row.chosen_by = self.chosen_by.get(row.case_id, row.chosen_by)
            writer.append(row)
            done.add(row.key())
            self.obs.row(row)
            self.obs.advance()

        return emit

    def _run_isolated(self, cases: list[Case], dev: DeviceInfo, writer: RunWriter, done, bw) -> None:
        from kbench.engine.isolation import IsolatedRunner

        if self._isolated is None:  # one worker for the run (an adaptive sweep comes back here per case)
            self._isolated = IsolatedRunner(Payload.of(self.sc, self.measure_options()))
        runner = self._isolated
        by_name = {k.name: k for k in self.kernels}
        emit = self._emitter(writer, done)

        def on_row(rec):
            rec["chosen_by"] = self.chosen_by.get(rec.get("case_id"), rec.get("chosen_by", ""))
            writer.append(rec)
            self.obs.row(Row(**rec))
            self.obs.advance()

        for case in cases:
            def on_failed(kernel, reason, case=case):
                emit(self.measurer.row(by_name[kernel], case, "failed", reason=reason))
                self.obs.message(f"{kernel} {case.case_id}: {reason}")

            self.obs.advance(f"{case.case_id} (isolated worker)")
            wall, n = runner.run_case(case, done, bw, on_row, on_failed)
            for key, v in wall.items():
                setattr(self.wall, key, getattr(self.wall, key) + v)
            self.measurer.measurements += n


def scenario_of_run(manifest: dict) -> Scenario:
    try:
        return _scenario_of_run(manifest)
    except (KeyError, TypeError, AttributeError) as e:  # a hand-edited or foreign manifest
        raise BadInput(f"the run's manifest holds an incomplete scenario ({type(e).__name__}: {e})") from None


def _scenario_of_run(manifest: dict) -> Scenario:
    d = manifest.get("scenario")
    if not isinstance(d, dict):
        raise BadInput("the run's manifest holds no scenario to resume")
    return scenario_from_dict(scenario_data(d), f"{d.get('source', 'manifest')} (resumed)")


def sweep_payload(sc: Scenario, opt: SweepOptions) -> Payload:
    """What a per-device worker needs to run `sc` as this sweep would (its shard, device and folder added)."""
    keep = ("compile_workers", "isolate", "command_line")
    return Payload.of(sc, MeasureOptions(opt.device_index, opt.seed, dict(opt.slow_kernel)),
                      **{k: getattr(opt, k) for k in keep})


def run_sweep(scenario: Scenario, out_dir: str | Path = "results", observer: SweepObserver | None = None,
              **options) -> SweepResult:
    """Run a scenario and write a run folder under out_dir. See SweepOptions for the options."""
    return Sweep(scenario, SweepOptions(out_dir=out_dir, **options), observer).run()


def resume_sweep(run_dir: str | Path, observer: SweepObserver | None = None, **options) -> SweepResult:
    from kbench.runs.store import read_manifest

    manifest = read_manifest(Path(run_dir))
    return Sweep(scenario_of_run(manifest), SweepOptions(resume=run_dir, **options), observer).run()

