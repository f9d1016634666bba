"""The sweep runner: Scenario -> Cases -> Inputs -> each Kernel -> check -> time -> Row, appended as measured.

Usable from Python without the CLI; progress goes to an optional observer (see SweepObserver).
"""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kbench import RESULT_SCHEMA_VERSION, __version__
from kbench.cases.case import Case
from kbench.device import DeviceInfo
from kbench.errors import BadInput
from kbench.runs.manifest import Manifest, ceiling
from kbench.engine.measure import CaseMeasurer, CudaContextLost, MeasureOptions, Payload, WallSplit, kernel_reason
from kbench.engine.placement import L2_COVER
from kbench.timing.timer import FENCE_METHOD
from kbench.engine.plans import PlannedCase, Round, SweepPlan
from kbench.engine.request import SweepOptions, scenario_of_run
from kbench.runs.rows import Row
from kbench.cases.scenario import Scenario
from kbench.runs.session import RunSession
from kbench.runs.store import JOURNAL, read_journal


class SweepObserver:
    """Receives progress; the CLI renders it with rich. Every method is optional."""

    def phase(self, name: str, total: int | None = None) -> None: ...
    def advance(self, description: str = "") -> None: ...
    def row(self, row: Row) -> None: ...
    def kernel_started(self, kernel: str, case: Case) -> None: ...
    def message(self, text: str) -> None: ...
    def built(self, text: str) -> None: ...  # a streamed sweep's module, built in the background (or failed)


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
    first_ok_s: float | None = None  # seconds from this call's start to its first ok row (None: no ok row)
    compile: dict | None = None  # the manifest's compile block: mode (stream | before), modules, build wall, ...

    def outcome(self, allow_wrong: bool = False) -> str:
        """How the run ended, worst first: unwritable (the journal could not grow), lost (a lost CUDA context
        stopped an in-process sweep), interrupted (Ctrl-C, SIGTERM), wrong (a kernel computed the wrong thing;
        not with allow_wrong), ok."""
        if self.error.startswith("cannot write"):
            return "unwritable"
        if self.error:
            return "lost"
        if self.status == "interrupted":
            return "interrupted"
        if not allow_wrong and len(self.rows) and (self.rows["status"] == "wrong").any():
            return "wrong"
        return "ok"

    def exit_code(self, allow_wrong: bool = False, signum: int = 2) -> int:
        """`kbench sweep`'s exit code for this result: 2 unwritable, 1 lost or wrong, 128 + signum interrupted
        (SIGINT's 130 unless the signal is given, 143 for SIGTERM), 0 ok."""
        return {"unwritable": 2, "lost": 1, "interrupted": 128 + signum, "wrong": 1}.get(self.outcome(allow_wrong), 0)


class Sweep:
    """One sweep: a run session (kbench.runs.session: new folder or resume, lock, journal, manifest, finish rules)
    in which a sweep plan's rounds (kbench.engine.plans) are compiled and measured (kbench.engine.measure) in this
    process or in an isolated worker, each row appended to the journal as it comes."""

    def __init__(self, scenario: Scenario, options: SweepOptions | None = None,
                 observer: SweepObserver | None = None, builder=None):
        self.sc = scenario
        self.opt = options or SweepOptions()
        self.obs = observer or SweepObserver()
        self.measurer = CaseMeasurer(scenario, self.measure_options(),
                                     kernel_started=lambda k, c: self.obs.kernel_started(k, c),
                                     progress=lambda text: self.obs.advance(text))
        self.kernels = self.measurer.kernels
        self.wall = self.measurer.wall
        self._isolated = None
        self._isolated_measurements = 0  # timed in the isolated worker
        self._compiled: set[tuple] = set()  # (kernel, jit_key) compiled by this call
        # streaming (kbench.engine.stream): builder(request) -> a started BackgroundBuild-like object; the
        # default spawns prebuild's builder; tests inject a fake. Without a GPU nothing is built unless injected.
        self.builder = builder
        self._stream = None  # StreamPlan while streaming
        self._build = None  # the background build
        self._clock = None  # StreamClock
        self._measured_cases: set[str] = set()
        self._first_ok: float | None = None
        self._compile_info: dict = {}
        # while a run is open
        self._run: RunSession | None = None
        self._bw: float | None = None  # the roofline ceiling
        self._isolate = False
        self._t0 = time.perf_counter()

    def measure_options(self) -> MeasureOptions:
        return MeasureOptions(self.opt.device_index, self.opt.seed, dict(self.opt.slow_kernel))

    # -- what a plan may ask while it runs (kbench.engine.plans.SweepState) ------------------------------------
    @property
    def measurements(self) -> int:
        """(kernel, case) pairs timed by this call."""
        return self.measurer.measurements + self._isolated_measurements

    def rows(self) -> pd.DataFrame:
        return self._run.rows()

    def elapsed_s(self) -> float:
        return time.perf_counter() - self._t0

    def to_time(self, case: Case, skip=()) -> int:
        dev = self.measurer.open()
        return sum(1 for k in self.kernels if k.name not in skip and k.path != "reference"
                   and (k.name, case.case_id) not in self._run.done and kernel_reason(k, dev, case) is None)

    def kernel_paths(self) -> dict[str, str]:
        return {k.name: k.path for k in self.kernels}

    def missing(self, case: Case) -> int:
        """How many of the case's kernels have no row yet."""
        return sum(1 for k in self.kernels if (k.name, case.case_id) not in self._run.done)

    # -- set-up -----------------------------------------------------------------------------------
    def _manifest(self, dev: DeviceInfo, bw: float | None, plan: SweepPlan) -> Manifest:
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
                   "settle_ms": t.settle_ms,
                   "fence": FENCE_METHOD,
                   "spread": "relative half-width of the 95% order-statistic CI of the median"},
            slow_kernel=self.opt.slow_kernel, seed=self.opt.seed, **plan.manifest_fields(),
        )

    def _session(self, dev: DeviceInfo, plan: SweepPlan) -> tuple[RunSession, float | None, float | None]:
        """The run session; for a new run also the copy and read bandwidth, measured before its folder is made."""
        if self.opt.resume:
            return RunSession.resume(self.opt.resume, kind="sweep"), None, None
        copy_bw = read_bw = peak = None
        if dev.cuda:
            self.obs.phase("measuring copy and read bandwidth")
            from kbench.timing.hardware import ceiling_problem, copy_bandwidth_gbs, memory_peak_gbs, read_bandwidth_gbs

            copy_bw = copy_bandwidth_gbs(dev.torch_device)
            read_bw = read_bandwidth_gbs(dev.torch_device)
            peak = memory_peak_gbs(dev.index)
            problem = ceiling_problem(read_bw, peak)
            if problem:
                self.obs.message(f"warning: {problem}")
        manifest = self._manifest(dev, copy_bw, plan)
        which, gbs = ceiling(copy_bw, read_bw)  # None where neither was measured (a CPU): no roofline
        manifest.update(read_bandwidth_gbs=read_bw, roofline_ceiling=f"{which}_bandwidth_gbs" if gbs else None)
        if peak:
            manifest.update(memory_peak_gbs=peak)
        return RunSession.new(self.opt.out_dir, self.opt.run_name or self.sc.name, manifest), copy_bw, read_bw

    # -- the run -----------------------------------------------------------------------------------
    def run(self, plan: SweepPlan | None = None) -> SweepResult:
        """Run `plan` (None: the plan the options ask for, SweepOptions.plan) into a new run folder, or into the
        run being resumed. A Ctrl-C (or SIGTERM under kbench.runs.signals.terminate_as_interrupt), a lost CUDA
        context or a journal that cannot grow end the run interrupted and return; anything else goes up."""
        self._t0 = time.perf_counter()
        dev = self.measurer.open()
        plan = plan if plan is not None else self.opt.plan(self.sc)
        self._isolate = dev.cuda if self.opt.isolate is None else self.opt.isolate
        if self._isolate:  # the worker starts while the bandwidth is measured and the modules are planned
            from kbench.engine.isolation import IsolatedRunner

            self._isolated = IsolatedRunner(Payload.of(self.sc, self.measure_options()))
            self._isolated.spawn()
        try:
            session, copy_bw, read_bw = self._session(dev, plan)
        except BaseException:
            if self._isolated is not None:
                self._isolated.close()
            raise
        error = ""
        try:
            with session as run:
                if run.resumed:
                    copy_bw, read_bw = run.manifest.get("copy_bandwidth_gbs"), run.manifest.get("read_bandwidth_gbs")
                self._run, self._bw = run, ceiling(copy_bw, read_bw)[1]
                try:
                    run.manifest["isolated"] = bool(self._isolate)
                    plan.open(run, self.kernel_paths())
                    if self.opt.stream:
                        self.start_stream(plan.cases(), run.done)
                    else:
                        self.compile(plan.cases(), run.done, in_process=not self._isolate)
                    if plan.intro:
                        self.obs.phase(plan.intro)
                    for rnd in plan.rounds(self):
                        self.measure_round(rnd)
                    plan.close(run)
                except CudaContextLost as e:  # not isolated: this process can run nothing more on the GPU
                    error = str(e)
                    run.stop(error)
                except OSError as e:  # the journal cannot grow (a full disk): complete rows kept
                    error = f"cannot write the run: {e.strerror or e}"
                    run.stop(error)
                finally:
                    self._close(run, dev, error)
        except KeyboardInterrupt:  # the session ended the run interrupted, its stopped_by saying by what
            if not session.opened:  # stopped while its folder was made: no run (the session removed the folder)
                if self._isolated is not None:
                    self._isolated.close()
                raise
        rows = read_journal(session.dir / JOURNAL)
        return SweepResult(session.dir, rows, self.wall, session.status, dev, copy_bw, self.measurements, error,
                           read_bandwidth_gbs=read_bw, ceiling_gbs=ceiling(copy_bw, read_bw)[1], first_ok_s=self._first_ok,
                           compile=self._compile_info or None)

    def _close(self, run: RunSession, dev: DeviceInfo, error: str) -> None:
        """What this call adds to the manifest however it ended: worker restarts, wall time, measurements, clocks;
        a streamed call's build is stopped (its compilers ended) first."""
        self._stop_stream()
        if self._isolated is not None:
            run.manifest["worker_restarts"] = self._isolated.restarts
            run.manifest["cuda_context_losses"] = self._isolated.context_losses
            self._isolated.close()
        self.wall.total_s = time.perf_counter() - self._t0
        prev_wall = run.manifest.get("wall_s")
        run.manifest["wall_s"] = {**self.wall.as_dict(), "first_ok_row_s": None if self._first_ok is None
                                  else round(self._first_ok, 3)}
        if self._compile_info:
            run.manifest["compile"] = self._compile_info
        if prev_wall:
            run.manifest.setdefault("wall_s_earlier", []).append(prev_wall)
        # cumulative over --resume calls (SweepResult.measurements counts this call)
        run.manifest["measurements"] = int(run.manifest.get("measurements") or 0) + self.measurements
        if dev.cuda and not error:
            from kbench.timing.hardware import clocks

            run.manifest["clocks_end"] = clocks(dev.index)

    def compile(self, cases: list[Case], done, in_process: bool = True) -> None:
        """Compile every JIT module the sweep needs before the first measurement: each distinct
        (kernel, jit_key) once, on a small case with the same key, in parallel processes."""
        dev = self.measurer.open()
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
        self._compile_info = {"mode": "before", "jobs": len(jobs), "failed": len(errors),
                              "build_wall_s": round(time.perf_counter() - t0, 3), "overlapped": False}

    # -- streaming: modules built in the background while ready kernels are measured --------------------------
    def start_stream(self, cases: list[Case], done) -> None:
        """Plan the modules the cases need (prebuild's plan) and start building the missing ones in the background
        (prebuild's builder in its own process); without a GPU nothing is built (unless a builder is injected)."""
        from kbench.engine.jit import default_workers
        from kbench.engine.stream import NICE, BackgroundBuild, StreamClock, StreamPlan, build_request, default_max_jobs

        dev = self.measurer.open()
        if not dev.cuda and self.builder is None:
            return
        try:
            sp = StreamPlan.of(self.kernels, cases, dev, skip=lambda k, c: (k.name, c.case_id) in done)
        except Exception as e:  # noqa: BLE001 - a kernel's jit_specs cannot say: compile everything first, as before
            self.obs.message(f"cannot plan the modules to stream ({type(e).__name__}: {e}): compiling them first")
            return self.compile(cases, done, in_process=not self._isolate)
        self._stream, self._clock = sp, StreamClock()
        missing = sp.missing()
        workers = self.opt.compile_workers or default_workers()
        self._compile_info = {"mode": "stream", "modules": len(sp.modules), "to_build": len(missing),
                              "parallel": workers, "max_jobs": default_max_jobs(), "nice": NICE, "overlapped": True}
        if not missing:
            self._clock.ended = self._clock.started
            return
        request = build_request(self.kernels, cases, dev, missing, workers)
        self.obs.message(f"building {len(missing)} FlashInfer module(s) in the background ({workers} at a time); "
                         "kernels are measured as their modules are ready")
        self._build = (self.builder or (lambda r: BackgroundBuild(r).start()))(request)

    def _poll_builds(self, timeout: float = 0.0) -> bool:
        """Take the outcomes that arrived (waiting up to `timeout` for one); True when something changed."""
        from kbench.engine.stream import ended_early, outcome_text

        b = self._build
        if b is None or b.finished and not self._stream.missing():
            return False
        outs = b.poll(timeout)
        for o in outs:
            self._stream.settle(o)
            self.obs.built(outcome_text(o))
        if b.finished and self._stream.missing():  # the process ended before building them (killed, crashed)
            why = ended_early(b.exitcode)
            self.obs.message(f"{len(self._stream.missing())} module(s) not built: {why}")
            self._stream.fail_pending(why)
            outs = outs or [{}]
        if outs and not self._stream.missing() and self._clock.ended is None:
            self._clock.ended = time.perf_counter()
        return bool(outs)

    def _stop_stream(self) -> None:
        if self._build is not None:
            self._build.stop()
        if self._clock is None:
            return
        if self._clock.ended is None:
            self._clock.ended = time.perf_counter()
        self.wall.compile_s += self._clock.build_wall()
        self._compile_info.update(build_wall_s=round(self._clock.build_wall(), 3),
                                  waited_s=round(self._clock.waited_s, 3), case_rebuilds=self._clock.case_rebuilds,
                                  **{k: v for k, v in sorted(self._stream.counts.items())},
                                  unbuilt=len(self._stream.missing()))
        self._clock = None

    def _held(self, case: Case) -> set[tuple]:
        """The case's kernels without a row whose modules are still being built."""
        from kbench.engine.stream import PENDING

        if self._stream is None:
            return set()
        return {(k.name, case.case_id) for k in self.kernels if (k.name, case.case_id) not in self._run.done
                and self._stream.state(k, case)[0] == PENDING}

    def measure_round(self, rnd: Round) -> None:
        """The round's cases that still lack a row, in order, as long as the plan admits them. Streaming: a case's
        kernels whose modules are not built yet wait; once the round's cases are walked, the waiting ones are
        measured as their modules arrive (the round ends when every case has its rows)."""
        if rnd.message:
            self.obs.message(rnd.message)
        todo = [pc for pc in rnd.cases if self.missing(pc.case)]
        self.obs.phase(rnd.label, total=sum(self.missing(pc.case) for pc in todo))  # one advance per row
        waiting = []
        for pc in rnd.admitted(todo):
            self._poll_builds()
            self.measure(pc)
            if self.missing(pc.case):
                waiting.append(pc)
        while waiting:
            rows_before = len(self._run.done)
            for pc in waiting:
                if self.missing(pc.case) > len(self._held(pc.case)):  # something of it is ready (or failed)
                    self.measure(pc)
                    self._poll_builds()
            # a case stays while any of its kernels lacks a row: one still building, or one whose module arrived
            # during or after its turn in this pass (keeping only the cases with a module still building lost the
            # rows of a module that came in the poll right after the case was measured: 19 of 432 rows of an MLA
            # run on the H200, the run saying complete)
            waiting = [pc for pc in waiting if self.missing(pc.case)]
            if waiting and len(self._run.done) == rows_before and not any(self._held(pc.case) for pc in waiting):
                self._fail_unmeasured(waiting)  # a pass that measured nothing, with nothing left to wait for
                waiting = []
            t0 = time.perf_counter()
            while (waiting and all(self.missing(pc.case) == len(self._held(pc.case)) for pc in waiting)
                   and not self._poll_builds(0.5)):  # idle until a module arrives
                pass
            self._clock.waited_s += time.perf_counter() - t0

    def _fail_unmeasured(self, cases: list[PlannedCase]) -> None:
        """Never expected: kernels that are ready yet got no row from a measurement. A failed row each says so,
        rather than a run that is complete without them."""
        for pc in cases:
            emit = self._emitter(pc.tag)
            for k in self.kernels:
                if (k.name, pc.case.case_id) not in self._run.done:
                    emit(self.measurer.row(k, pc.case, "failed", reason="no row came back from its measurement "
                                                                         "(a kbench bug: please report it)"))

    def measure(self, pc: PlannedCase) -> None:
        """One planned case: a skipped row for each kernel the plan pruned there, then every other kernel without
        a row measured, here or in the isolated worker; each row says how the plan chose the case (chosen_by).
        Streaming: a kernel whose module failed to build gets a failed row, one still building waits."""
        from kbench.engine.stream import FAILED

        emit = self._emitter(pc.tag)
        by_name = {k.name: k for k in self.kernels}
        case = pc.case
        for name, reason in pc.pruned.items():
            if (name, case.case_id) not in self._run.done:
                emit(self.measurer.row(by_name[name], case, "skipped", reason=reason))
        done = self._run.done
        if self._stream is not None:
            for k in self.kernels:
                if (k.name, case.case_id) not in done:
                    state, reason = self._stream.state(k, case)
                    if state == FAILED:
                        emit(self.measurer.row(k, case, "failed", reason=reason))
            held = self._held(case)
            if not self.missing(case) or self.missing(case) == len(held):
                return  # nothing to measure now: no inputs built
            done = done | held  # a copy: the held kernels are measured later
            if case.case_id in self._measured_cases:
                self._clock.case_rebuilds += 1
            self._measured_cases.add(case.case_id)
        if self._isolate:
            self._measure_isolated(pc, by_name, emit, done)
        else:
            self.measurer.measure(case, done, self._bw, emit)

    def _first_ok_row(self, status: str) -> None:
        if status == "ok" and self._first_ok is None:
            self._first_ok = self.elapsed_s()

    def _emitter(self, tag: str):
        def emit(row: Row) -> None:
            row.chosen_by = tag
            self._run.append(row)
            self._first_ok_row(row.status)
            self.obs.row(row)
            self.obs.advance()

        return emit

    def _measure_isolated(self, pc: PlannedCase, by_name: dict, emit, done) -> None:
        from kbench.engine.isolation import IsolatedRunner

        if self._isolated is None:  # one worker for the run (every case of every round comes back here)
            self._isolated = IsolatedRunner(Payload.of(self.sc, self.measure_options()))
        case = pc.case

        def on_row(rec):
            rec["chosen_by"] = pc.tag
            self._run.append(rec)
            self._first_ok_row(rec.get("status"))
            self.obs.row(Row(**rec))
            self.obs.advance()

        def on_failed(kernel, reason):
            emit(self.measurer.row(by_name[kernel], case, "failed", reason=reason))
            self.obs.message(f"{kernel} {case.case_id}: {reason}")

        self.obs.advance(f"{case.case_id} (isolated worker)")
        wall, n = self._isolated.run_case(case, done, self._bw, on_row, on_failed)
        self.wall.add(wall)
        self._isolated_measurements += n


def sweep_payload(sc: Scenario, opt: SweepOptions) -> Payload:
    """What a per-device worker needs to run `sc` as this sweep would (its shard, device and folder added)."""
    keep = ("compile_workers", "isolate", "command_line", "stream")
    return Payload.of(sc, MeasureOptions(opt.device_index, opt.seed, dict(opt.slow_kernel)),
                      **{k: getattr(opt, k) for k in keep})


def run_sweep(scenario: Scenario, out_dir: str | Path = "results", observer: SweepObserver | None = None,
              builder=None, **options) -> SweepResult:
    """Run a scenario and write a new run folder under out_dir (OUT/<run_name or scenario>-<time>). options:
    SweepOptions' fields (run_name, seed, shard, adaptive, stream, isolate, ...); builder: see Sweep. An observer
    whose callback raises KeyboardInterrupt stops the run as Ctrl-C does: status interrupted, rows kept, and
    resume_sweep(result.run_dir) finishes it."""
    if options.get("resume") is not None:  # resume_sweep checks the run (a baseline, another GPU, its options)
        raise BadInput("run_sweep starts a new run: finish one with resume_sweep(RUN_DIR)")
    if not isinstance(scenario, Scenario):
        raise BadInput(f"run_sweep takes a Scenario (load_scenario(NAME), apply_overrides(...)), got "
                       f"{type(scenario).__name__}")
    _known_options(options)
    opts = SweepOptions(out_dir=out_dir, **options).checked()  # --shard's, --device's, --seed's and --out's rules
    return Sweep(scenario, opts, observer, builder).run()


def _known_options(options: dict) -> None:
    from dataclasses import fields

    unknown = sorted(set(options) - {f.name for f in fields(SweepOptions)})
    if unknown:
        raise BadInput(f"unknown sweep option {unknown[0]!r} (options: "
                       f"{', '.join(f.name for f in fields(SweepOptions) if f.name != 'resume')})")


def resume_sweep(run_dir: str | Path, observer: SweepObserver | None = None, builder=None, force: bool = False,
                 **options) -> SweepResult | None:
    """Finish an interrupted run folder, with `kbench sweep --resume`'s rules: BadInput for a baseline, a run of
    another GPU or one another process is writing (force: resume a baseline or another GPU's run anyway), and for
    an option the run fixes (its folder, name, seed, shard: FIXED_BY_RUN); None, touching nothing, for a complete
    run. options: the SweepOptions a resume may change (device_index, stream, isolate, compile_workers, ...)."""
    from kbench.engine.request import FIXED_BY_RUN
    from kbench.runs.resume import check_resume
    from kbench.runs.store import check_resumable, check_run_folder, read_manifest
    from kbench.timing.probe import probe_device

    fixed = [name for name, _ in FIXED_BY_RUN if name in options] + (["resume"] if "resume" in options else [])
    if fixed:
        raise BadInput(f"resume_sweep finishes the run as it was started: {', '.join(fixed)} cannot change it")
    manifest = read_manifest(check_run_folder(run_dir))
    check_resumable(run_dir, manifest)
    _known_options(options)
    opts = SweepOptions(resume=run_dir, **options).checked(new_run=False)
    device = probe_device(opts.device_index, with_flashinfer=False).to_dict()
    if check_resume(run_dir, manifest, device, force):
        return None
    return Sweep(scenario_of_run(manifest), opts, observer, builder).run()
