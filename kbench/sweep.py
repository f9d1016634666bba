"""The sweep runner: Scenario -> Cases -> Inputs -> each Kernel -> check -> time -> Row, appended as measured.

Usable from Python without the CLI; progress goes to an optional observer (see SweepObserver).
"""
from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kbench import RESULT_SCHEMA_VERSION, __version__
from kbench.case import Case
from kbench.check import compare, tolerance_for
from kbench.errors import BadInput, first_line
from kbench.kernels.base import Kernel
from kbench.kernels.device import DeviceInfo, probe_device
from kbench.kernels.inputs import build_inputs, copy_bytes
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import select
from kbench.kernels.timer import GraphTimer, WallClockTimer
from kbench.rows import Row
from kbench.scenario import Scenario, Timing, scenario_from_dict
from kbench.store import RunWriter, new_run_dir, now_iso, read_journal

# input copies rotate until they cover this many times the L2 (cold-L2 is what an engine sees)
L2_COVER = 3
MAX_COPIES = 64
# a measurement whose SM clock ends below this fraction of the maximum is repeated after a pause
THROTTLE_FRAC = 0.9
THROTTLE_RETRIES = 1
THROTTLE_PAUSE_S = 0.3
# device memory kept free beyond what a case needs (reference temporaries, workspaces, allocator slack)
HEADROOM_BYTES = 6 << 30


class CudaContextLost(RuntimeError):
    """A kernel faulted and the process's CUDA context is unusable (sticky error): nothing more can run here."""

    def __init__(self, kernel: str, case_id: str, reason: str):
        super().__init__(f"the CUDA context is unusable after {kernel} failed on {case_id}: {reason}")
        self.kernel, self.case_id, self.reason = kernel, case_id, reason


def cuda_context_usable(index: int) -> bool:
    """False once a fault (illegal address, launch failure) has poisoned this process's CUDA context."""
    import torch

    try:
        torch.cuda.synchronize(index)
        return torch.ones(1, device=f"cuda:{index}").add_(1).item() == 2.0
    except Exception:
        return False


class SweepObserver:
    """Receives progress; the CLI renders it with rich. Every method is optional."""

    def phase(self, name: str, total: int | None = None) -> None: ...
    def advance(self, description: str = "") -> None: ...
    def row(self, row: Row) -> None: ...
    def kernel_started(self, kernel: str, case: Case) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class WallSplit:
    compile_s: float = 0.0
    inputs_s: float = 0.0
    reference_s: float = 0.0
    check_s: float = 0.0
    timing_s: float = 0.0
    total_s: float = 0.0

    def as_dict(self) -> dict:
        return {k: round(v, 3) for k, v in vars(self).items()}


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

    @property
    def wrong(self) -> pd.DataFrame:
        return self.rows[self.rows["status"] == "wrong"]


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
    compile_workers: int | None = None  # None: kbench.jit.default_workers()
    shard: tuple[int, int] | None = None  # (i, n): only cases whose index in the grid is i mod n
    # run kernels in a worker process restarted after a crash (kbench.isolation); None: when CUDA is
    # there (the CLI's default; the Python API passes False, because spawned workers re-import __main__)
    isolate: bool | None = False


def parse_shard(text: str) -> tuple[int, int]:
    """`i/N` with 0 <= i < N."""
    i, sep, n = text.partition("/")
    if not sep or not i.strip().isdecimal() or not n.strip().isdecimal() or not 0 <= int(i) < int(n):
        raise BadInput(f"--shard: expected i/N with 0 <= i < N, got {text!r}")
    return int(i), int(n)


def shard_cases(cases: list[Case], shard: tuple[int, int] | None) -> list[Case]:
    """A deterministic slice: case j of the grid goes to shard j mod N (neighbouring shapes spread out,
    so slices cost about the same). Every case is in exactly one shard."""
    if not shard:
        return cases
    i, n = shard
    return [c for j, c in enumerate(cases) if j % n == i]


def kernel_reason(kernel: Kernel, device: DeviceInfo, case: Case) -> str | None:
    if case.kv_dtype not in kernel.kv_dtypes:
        return f"KV dtype {case.kv_dtype} not supported by {kernel.name} in kbench"
    return kernel.supports(device, case)


def copies_for(case: Case, device: DeviceInfo, timing: Timing) -> int:
    if not device.cuda or timing.l2 != "rotate" or not device.l2_bytes:
        return 1
    return max(1, min(MAX_COPIES, math.ceil(L2_COVER * device.l2_bytes / max(copy_bytes(case), 1))))


def fits(case: Case, copies: int, device: DeviceInfo) -> str | None:
    """Why the case cannot fit on the device (checked before anything is allocated), or None."""
    if not device.cuda:
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device.index)
    need = copies * copy_bytes(case) + HEADROOM_BYTES
    if need > free:
        return f"needs {need / 2**30:.1f} GiB of device memory, {free / 2**30:.1f} GiB free"
    return None


def _slowed(fn, n: int):
    def run(i: int):
        out = None
        for _ in range(n):
            out = fn(i)
        return out

    return run


class Sweep:
    def __init__(self, scenario: Scenario, options: SweepOptions | None = None,
                 observer: SweepObserver | None = None):
        self.sc = scenario
        self.opt = options or SweepOptions()
        self.obs = observer or SweepObserver()
        self.kernels = select(scenario.kernels)
        for name in self.opt.slow_kernel:
            if name not in [k.name for k in self.kernels]:
                raise BadInput(f"--slow-kernel: {name!r} is not among this sweep's kernels")
        self.wall = WallSplit()
        self.measurements = 0
        self._isolated = None

    # -- set-up -----------------------------------------------------------------------------------
    def _device(self) -> DeviceInfo:
        import torch

        if torch.cuda.is_available():
            if self.opt.device_index >= torch.cuda.device_count():
                raise BadInput(f"--device {self.opt.device_index}: this machine has {torch.cuda.device_count()} GPU(s)")
            torch.cuda.set_device(self.opt.device_index)
        return probe_device(self.opt.device_index)

    def _manifest(self, dev: DeviceInfo, bw: float | None) -> dict:
        from kbench.hardware import clocks

        t = self.sc.timing
        return {
            "kind": "sweep", "schema_version": RESULT_SCHEMA_VERSION, "kbench_version": __version__,
            "command_line": self.opt.command_line, "scenario": self.sc.to_dict(), "device": dev.to_dict(),
            "python": platform.python_version(), "copy_bandwidth_gbs": bw,
            "clocks_start": clocks(dev.index) if dev.cuda else {},
            "timer": {"kind": "cuda-graph" if dev.cuda else "wall-clock", "spread_target": t.spread_target,
                      "budget_s": t.budget_s, "min_samples": t.min_samples, "max_samples": t.max_samples,
                      "min_time_s": t.min_time_s, "duty": t.duty, "l2": t.l2, "l2_cover": L2_COVER, "warmup_ms": t.warmup_ms,
                      "fence": "one-element fill between calls (no PDL overlap between calls); its time subtracted",
                      "spread": "relative half-width of the 95% order-statistic CI of the median"},
            "slow_kernel": self.opt.slow_kernel, "seed": self.opt.seed,
            "shard": {"index": self.opt.shard[0], "count": self.opt.shard[1]} if self.opt.shard else None,
        }

    def _timer(self, dev: DeviceInfo):
        t = self.sc.timing
        return GraphTimer(t.stop_rule(), warmup_ms=t.warmup_ms, duty=t.duty) if dev.cuda else WallClockTimer(t.stop_rule())

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> SweepResult:
        t_start = time.perf_counter()
        dev = self._device()
        done: set[tuple[str, str]] = set()
        if self.opt.resume:
            writer = RunWriter(self.opt.resume, {}, resume=True)
            prev = read_journal(writer.dir / "rows.jsonl")
            done = set(zip(prev["kernel"], prev["case_id"]))
            bw = writer.manifest.get("copy_bandwidth_gbs")
        else:
            bw = None
            if dev.cuda:
                self.obs.phase("measuring copy bandwidth")
                from kbench.hardware import copy_bandwidth_gbs

                bw = copy_bandwidth_gbs(dev.torch_device)
            run_dir = new_run_dir(self.opt.out_dir, self.opt.run_name or self.sc.name)
            writer = RunWriter(run_dir, self._manifest(dev, bw))
        status, error = "complete", ""
        try:
            cases = shard_cases(self.sc.cases(), self.opt.shard or writer.manifest_shard())
            todo = [c for c in cases if any((k.name, c.case_id) not in done for k in self.kernels)]
            isolate = dev.cuda if self.opt.isolate is None else self.opt.isolate
            self._compile(dev, todo, done, in_process=not isolate)
            self.obs.phase("measuring", total=sum(
                1 for c in todo for k in self.kernels if (k.name, c.case_id) not in done))
            writer.manifest["isolated"] = bool(isolate)
            if isolate:
                self._run_isolated(todo, dev, writer, done, bw)
            else:
                timer = self._timer(dev)
                for case in todo:
                    self._run_case(case, dev, timer, writer, done, bw)
        except KeyboardInterrupt:
            status = "interrupted"
        except CudaContextLost as e:  # not isolated: this process can run nothing more on the GPU
            status, error = "interrupted", str(e)
            writer.manifest["stopped_by"] = error
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
            writer.manifest["measurements"] = self.measurements
            if dev.cuda and not error:
                from kbench.hardware import clocks

                writer.manifest["clocks_end"] = clocks(dev.index)
            run_dir = writer.finalize(status)
        rows = read_journal(run_dir / "rows.jsonl")
        return SweepResult(run_dir, rows, self.wall, status, dev, bw, self.measurements, error)

    def _compile(self, dev: DeviceInfo, cases: list[Case], done, in_process: bool = True) -> None:
        """Compile every JIT module the sweep needs before the first measurement: each distinct
        (kernel, jit_key) once, on a small case with the same key, in parallel processes."""
        if not dev.cuda:
            return
        from kbench.jit import CompileJob, compile_all

        jobs: dict[tuple, CompileJob] = {}
        for case in cases:
            for k in self.kernels:
                if (k.path == "reference" or k.jit_key(case) is None or (k.name, case.case_id) in done
                        or kernel_reason(k, dev, case)):
                    continue
                jobs.setdefault((k.name, k.jit_key(case)), CompileJob(k.name, case))
        if not jobs:
            return
        self.obs.phase(f"compiling JIT modules ({self.opt.compile_workers or 'auto'} workers)", total=len(jobs))
        t0 = time.perf_counter()

        def done_one(job, secs, err):
            self.obs.advance(f"{job.label()} {secs:.0f} s" + (" FAILED" if err else ""))

        errors = compile_all(list(jobs.values()), dev.index, self.opt.compile_workers, done_one, in_process)
        for label, err in errors.items():  # each case's check records the failure on its own row
            self.obs.message(f"compile of {label} failed: {err}")
        self.wall.compile_s += time.perf_counter() - t0

    def _row(self, k: Kernel, dev: DeviceInfo, case: Case, status: str, **kw) -> Row:
        return Row.for_case(k.name, k.path, k.backend(dev) if dev.cuda else k.name, case, status,
                            kv_bytes=case.kv_bytes(), device=dev.name, sm=dev.sm, measured_at=now_iso(), **kw)

    def _run_isolated(self, cases: list[Case], dev: DeviceInfo, writer: RunWriter, done, bw) -> None:
        from dataclasses import asdict

        from kbench.isolation import IsolatedRunner

        opts = {k: v for k, v in asdict(self.opt).items() if k in ("device_index", "seed", "slow_kernel")}
        d = self.sc.to_dict()
        data = {"name": d["name"], "kernels": d["kernels"], "timing": d["timing"],
                "grid": {k: v for k, v in d["grid"].items() if v is not None}}
        data.update({"model": d["model"]} if d.get("model") else {"heads": d["heads"]})
        self._isolated = runner = IsolatedRunner(data, opts)
        by_name = {k.name: k for k in self.kernels}

        def on_row(rec):
            writer.append(rec)
            self.obs.row(Row(**rec))
            self.obs.advance()

        for case in cases:
            def on_failed(kernel, reason, case=case):
                k = by_name[kernel]
                self._emit(writer, self._row(k, dev, case, "failed", reason=reason), done)
                self.obs.message(f"{kernel} {case.case_id}: {reason}")

            self.obs.advance(f"{case.case_id} (isolated worker)")
            wall, n = runner.run_case(case, done, bw, on_row, on_failed)
            for key, v in wall.items():
                setattr(self.wall, key, getattr(self.wall, key) + v)
            self.measurements += n

    def _emit(self, writer: RunWriter, row: Row, done) -> None:
        writer.append(row)
        done.add(row.key())
        self.obs.row(row)
        self.obs.advance()

    def _emit_failed(self, writer: RunWriter, row: Row, done, dev: DeviceInfo) -> None:
        """A failed row; then, on a GPU, make sure the CUDA context survived (a fault is sticky)."""
        self._emit(writer, row, done)
        if dev.cuda and not cuda_context_usable(dev.index):
            raise CudaContextLost(row.kernel, row.case_id, row.reason)

    def _measure(self, timer, fn, copies: int, dev: DeviceInfo):
        """Time fn; when the SM clock has dropped below THROTTLE_FRAC of its maximum (power or thermal
        throttling, seen on the H200 as 7% slower rows between back-to-back sweeps), pause and measure again."""
        m = timer.measure(fn, copies)
        if not dev.cuda:
            return m, None, ""
        from kbench.hardware import clocks

        for attempt in range(THROTTLE_RETRIES + 1):
            c = clocks(dev.index)
            clock, top = c.get("sm_mhz"), c.get("sm_max_mhz")
            if clock is None or not top or clock >= THROTTLE_FRAC * top:
                return m, clock, "" if attempt == 0 else f"re-measured {attempt}x after SM clock throttling"
            if attempt == THROTTLE_RETRIES:
                break
            time.sleep(THROTTLE_PAUSE_S)
            m = timer.measure(fn, copies)
        return m, clock, f"SM clock {clock:.0f} MHz < {THROTTLE_FRAC:.0%} of max {top:.0f} MHz: throttled"

    def _run_case(self, case: Case, dev: DeviceInfo, timer, writer: RunWriter, done, bw) -> None:
        kernels = [k for k in self.kernels if (k.name, case.case_id) not in done]
        runnable = []
        for k in kernels:
            reason = kernel_reason(k, dev, case)
            if reason is None and k.path == "reference" and dev.cuda and "reference" not in self.sc.kernels:
                reason = "the oracle: not timed on a GPU unless named in --kernels"
            if reason:
                self._emit(writer, self._row(k, dev, case, "skipped", reason=reason), done)
            else:
                runnable.append(k)
        if not runnable:
            return
        copies = copies_for(case, dev, self.sc.timing)
        no_fit = fits(case, 1, dev)
        if no_fit:
            for k in runnable:
                self._emit(writer, self._row(k, dev, case, "skipped", reason=no_fit), done)
            return
        while copies > 1 and fits(case, copies, dev):
            copies //= 2
        import torch

        self.obs.advance(f"{case.case_id}: building inputs")
        t0 = time.perf_counter()
        try:
            inputs = build_inputs(case, dev.torch_device, copies=copies, seed=self.opt.seed)
            self.wall.inputs_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            ref = reference_attention(inputs)
            if dev.cuda:
                torch.cuda.synchronize()
        except (RuntimeError, MemoryError) as e:  # out of memory (host or device) on a valid shape
            inputs = ref = None
            if dev.cuda:
                torch.cuda.empty_cache()
            for k in runnable:
                self._emit_failed(writer, self._row(k, dev, case, "failed", reason="inputs/reference: " + first_line(e)),
                                  done, dev)
            return
        self.wall.reference_s += time.perf_counter() - t0
        tol = tolerance_for(case.dtype, case.kv_dtype)
        if not dev.cuda:
            l2 = "cpu"
        elif copies > 1:
            l2 = f"rotate-{copies}"
        elif self.sc.timing.l2 == "warm":
            l2 = "warm"
        else:  # one copy already spans L2_COVER x L2: every call streams it from HBM
            l2 = f"exceeds-{L2_COVER}xL2"
        for k in runnable:
            self.obs.advance(f"{case.case_id}: {k.name}")
            self.obs.kernel_started(k.name, case)
            if dev.cuda:
                torch.cuda.reset_peak_memory_stats(dev.index)
            t0 = time.perf_counter()
            try:
                fn = k.prepare(inputs)
                out = fn(0)
                if dev.cuda:
                    torch.cuda.synchronize()
                chk = compare(out, ref, tol)
            except Exception as e:
                self.wall.check_s += time.perf_counter() - t0
                self._emit_failed(writer, self._row(k, dev, case, "failed", reason=first_line(e)), done, dev)
                continue
            self.wall.check_s += time.perf_counter() - t0
            errs = dict(rel_err=chk.rel_err, max_abs_err=chk.max_abs_err, tolerance=chk.tolerance)
            if not chk.ok:
                self._emit(writer, self._row(k, dev, case, "wrong", reason=chk.describe(), **errs), done)
                continue
            if k.name in self.opt.slow_kernel:
                fn = _slowed(fn, self.opt.slow_kernel[k.name])
            t0 = time.perf_counter()
            try:
                m, clock, note = self._measure(timer, fn, copies, dev)
            except Exception as e:
                self.wall.timing_s += time.perf_counter() - t0
                self._emit_failed(writer, self._row(k, dev, case, "failed", reason="timing: " + first_line(e), **errs),
                                  done, dev)
                continue
            self.wall.timing_s += time.perf_counter() - t0
            self.measurements += 1
            kv_bw = case.kv_bytes() / (m.median_us * 1e-6) / 1e9
            extra = {}
            if dev.cuda:
                extra = dict(sm_clock_mhz=clock, peak_mem_bytes=torch.cuda.max_memory_allocated(dev.index), reason=note)
            row = self._row(
                k, dev, case, "ok", median_us=m.median_us, p25_us=m.p25_us, p75_us=m.p75_us, iqr_us=m.iqr_us,
                min_us=m.min_us, rel_spread=m.rel_spread, num_samples=len(m.samples_us),
                calls_per_sample=m.calls_per_sample, samples_us=m.samples_us, timer=m.timer, l2=l2, stop=m.stop,
                kv_bandwidth_gbs=kv_bw, roofline_frac=(kv_bw / bw) if bw else None, **errs, **extra,
            )
            self._emit(writer, row, done)
        del inputs, ref
        if dev.cuda:
            torch.cuda.empty_cache()


def scenario_of_run(manifest: dict) -> Scenario:
    try:
        return _scenario_of_run(manifest)
    except (KeyError, TypeError, AttributeError) as e:  # a hand-edited or foreign manifest
        raise BadInput(f"the run's manifest holds an incomplete scenario ({type(e).__name__}: {e})") from None


def _scenario_of_run(manifest: dict) -> Scenario:
    d = manifest.get("scenario")
    if not isinstance(d, dict):
        raise BadInput("the run's manifest holds no scenario to resume")
    data = {"name": d["name"], "description": d.get("description", ""), "kernels": d["kernels"],
            "grid": {k: v for k, v in d["grid"].items() if v is not None},
            "timing": d.get("timing", {})}
    if d.get("model"):
        data["model"] = d["model"]
    else:
        data["heads"] = d["heads"]
    return scenario_from_dict(data, f"{manifest.get('scenario', {}).get('source', 'manifest')} (resumed)")


def run_sweep(scenario: Scenario, out_dir: str | Path = "results", observer: SweepObserver | None = None,
              **options) -> SweepResult:
    """Run a scenario and write a run folder under out_dir. See SweepOptions for the options."""
    return Sweep(scenario, SweepOptions(out_dir=out_dir, **options), observer).run()


def resume_sweep(run_dir: str | Path, observer: SweepObserver | None = None, **options) -> SweepResult:
    from kbench.store import read_manifest

    manifest = read_manifest(Path(run_dir))
    return Sweep(scenario_of_run(manifest), SweepOptions(resume=run_dir, **options), observer).run()

