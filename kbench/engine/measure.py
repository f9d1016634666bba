"""Measuring one case, as a sequence of its jobs (CaseMeasurer.measure): which kernels can run (the others get
skipped rows), where the inputs go (kbench.engine.placement), building the inputs and the reference (out of
memory: failed rows), then per kernel the check against the reference, the timing in the case's timing state
(kbench.timing.states) and its `Row`.

One home, called by the in-process sweep (kbench.engine.sweep), the isolated worker (kbench.engine.isolation) and,
through the sweep each runs, the per-device workers (kbench.engine.devices). A worker is started from a
`Payload`: the scenario as data plus the measuring options, the same for every kind of worker.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from kbench.cases.case import Case
from kbench.timing.check import compare, tolerance_for
from kbench.errors import BadInput, first_line
from kbench.kernels.base import Kernel, attention_reason, page_reason
from kbench.device import DeviceInfo
from kbench.timing.probe import probe_device
from kbench.kernels.inputs import build_inputs
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import is_route, select
from kbench.timing.host import host_cpu, time_host
from kbench.timing.states import Timed, Timers
from kbench.engine.placement import Placement, placement
from kbench.runs.rows import Row
from kbench.cases.scenario import Scenario, scenario_from_dict
from kbench.runs.store import now_iso


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

    def add(self, delta: dict) -> None:
        """Adds seconds spent elsewhere (an isolated worker's), by field name."""
        for k, v in delta.items():
            setattr(self, k, getattr(self, k) + v)


@dataclass
class MeasureOptions:
    """What a worker needs besides the scenario to measure cases the same way as its parent."""
    device_index: int = 0
    seed: int = 0
    # test-only: {kernel: n} runs that kernel n times per timed call, to prove the gate catches slow-downs
    slow_kernel: dict[str, int] = field(default_factory=dict)


@dataclass
class Payload:
    """A worker's start: the scenario as `scenario_from_dict` reads it, and the options. Plain JSON data."""
    scenario: dict
    options: dict
    source: str = "worker"  # the scenario's source, kept in the worker's manifest

    @classmethod
    def of(cls, sc: Scenario, options: MeasureOptions, **more) -> "Payload":
        return cls(sc.to_data(), {**asdict(options), **more}, sc.source)

    def to_dict(self) -> dict:
        return asdict(self)

    def scenario_obj(self) -> Scenario:
        return scenario_from_dict(self.scenario, self.source)


def kernel_reason(kernel: Kernel, device: DeviceInfo, case: Case) -> str | None:
    kind = attention_reason(kernel, case)  # first: a GQA kernel's other reasons mean nothing for MLA
    if kind:
        return kind
    if case.kv_dtype not in kernel.kv_dtypes:
        return f"KV dtype {case.kv_dtype} not supported by {kernel.name} in kbench"
    return page_reason(kernel, case) or kernel.supports(device, case)


@dataclass
class CaseData:
    """A case's inputs and reference output, built once for all its kernels, and where they were placed."""
    inputs: object  # kbench.kernels.inputs.Inputs
    ref: object  # the reference output (float32)
    tolerance: float
    where: Placement
    cuda: bool

    def release(self) -> None:
        self.inputs = self.ref = None
        if self.cuda:
            import torch

            torch.cuda.empty_cache()


def open_device(index: int) -> DeviceInfo:
    """Select and describe the device (the CPU when there is no CUDA)."""
    import torch

    if torch.cuda.is_available():
        if index >= torch.cuda.device_count():
            raise BadInput(f"--device {index}: this machine has {torch.cuda.device_count()} GPU(s)")
        torch.cuda.set_device(index)
    return probe_device(index)


def _slowed(fn, n: int):
    def run(i: int):
        out = None
        for _ in range(n):
            out = fn(i)
        return out

    return run


def _check_attention(kernels: list[Kernel], sc: Scenario) -> None:
    """Kernels named on a model none of them computes (MLA kernels on a GQA model, or the reverse): every row
    would be skipped, so say it up front (exit 2). With 'all' the kernels of the other kind are skipped rows."""
    if "all" in sc.kernels:
        return
    kind = sc.heads.attention
    named = [k for k in kernels if k.path != "reference"]
    if named and not any(kind in k.attentions for k in named):
        theirs = "/".join(sorted({a for k in named for a in k.attentions}))
        raise BadInput(f"{sc.source}: kernels {','.join(k.name for k in named)}: {theirs.upper()} kernel(s), and the "
                       f"heads ({sc.heads.text()}) are {kind.upper()}: nothing would run (name kernels of that kind, "
                       "or all)")


def _check_named(kernels: list[Kernel], sc: Scenario) -> None:
    """A kernel named on purpose (not through a group) that cannot run this sweep for a reason the user can fix up
    front (Kernel.named_problem: its library is not installed, it refuses every KV dtype asked for): exit 2."""
    kv_dtypes = tuple(sc.kv_dtype if sc.kv_dtype is not None else sc.dtype)
    for k in kernels:
        if k.name in sc.kernels:
            why = k.named_problem(kv_dtypes)
            if why:
                raise BadInput(f"{sc.source}: kernels: {k.name}: {why}")


# emit(row): called once per kernel of the case
Emit = Callable[[Row], None]


class CaseMeasurer:
    """Measures cases of one scenario on one device. `measure(case, done, bw, emit)` gives every kernel of
    the case not in `done` a row; `wall` and `measurements` add up what it spent."""

    def __init__(self, scenario: Scenario, options: MeasureOptions | None = None, dev: DeviceInfo | None = None,
                 kernel_started: Callable[[str, Case], None] | None = None,
                 progress: Callable[[str], None] | None = None):
        self.sc = scenario
        self.opt = options or MeasureOptions()
        self.kernels = select(scenario.kernels, scenario.source)
        _check_attention(self.kernels, scenario)
        _check_named(self.kernels, scenario)
        for name in self.opt.slow_kernel:
            if name not in [k.name for k in self.kernels]:
                raise BadInput(f"--slow-kernel: {name!r} is not among this sweep's kernels")
        self.dev = dev
        self.timers: Timers | None = None  # how a case is timed (kbench.timing.states), made by open()
        self.kernel_started = kernel_started or (lambda kernel, case: None)
        self.progress = progress or (lambda text: None)
        self.wall = WallSplit()
        self.measurements = 0

    @classmethod
    def from_payload(cls, payload: Payload, **kw) -> "CaseMeasurer":
        opts = {k: v for k, v in payload.options.items() if k in MeasureOptions.__dataclass_fields__}
        return cls(payload.scenario_obj(), MeasureOptions(**opts), **kw)

    def open(self) -> DeviceInfo:
        if self.dev is None:
            self.dev = open_device(self.opt.device_index)
        if self.timers is None:
            self.timers = Timers(self.sc.timing, self.dev.cuda, self.dev.index, self.progress)
        return self.dev

    def row(self, k: Kernel, case: Case, status: str, **kw) -> Row:
        dev = self.dev
        return Row.for_case(k.name, k.path, k.backend(dev) if dev.cuda else k.name, case, status,
                            seed=self.opt.seed, kv_bytes=case.kv_bytes(self.opt.seed), device=dev.name, sm=dev.sm, measured_at=now_iso(), **kw)

    def _failed(self, emit: Emit, row: Row) -> None:
        emit(row)
        self.after_failure(row)

    def after_failure(self, row: Row) -> None:
        """A CUDA fault is sticky: after a failed row on a GPU, stop (CudaContextLost) when the context is lost."""
        if self.dev.cuda and not cuda_context_usable(self.dev.index):
            raise CudaContextLost(row.kernel, row.case_id, row.reason)

    # -- one case: its jobs in the order they run --------------------------------------------------------
    def measure(self, case: Case, done: set, bw: float | None, emit: Emit) -> None:
        """Every kernel of the case not in `done` gets one row: skipped (it cannot run here, or the case does not
        fit), failed (inputs, check or timing raised), wrong (outside the tolerance) or ok (timed)."""
        self.open()
        runnable = self.runnable(case, done, emit)
        where = self.place(case, runnable, emit) if runnable else None
        data = self.build(case, where, runnable, emit) if where else None
        if data is None:
            return
        for k in runnable:
            self.measure_kernel(k, case, data, bw, emit)
        data.release()

    def runnable(self, case: Case, done: set, emit: Emit) -> list[Kernel]:
        """The kernels of the case to measure; the others not in `done` get a skipped row with the reason."""
        out = []
        for k in self.kernels:
            if (k.name, case.case_id) in done:
                continue
            reason = kernel_reason(k, self.dev, case)
            if reason is None and k.path == "reference" and self.dev.cuda and "reference" not in self.sc.kernels:
                reason = "the oracle: not timed on a GPU unless named in --kernels"
            if reason:
                emit(self.row(k, case, "skipped", reason=reason))
            else:
                out.append(k)
        return out

    def place(self, case: Case, runnable: list[Kernel], emit: Emit) -> Placement | None:
        """Where the inputs go (kbench.engine.placement); a case that cannot fit: skipped rows, None."""
        where = placement(case, self.dev, self.sc.timing)
        if isinstance(where, str):
            for k in runnable:
                emit(self.row(k, case, "skipped", reason=where))
            return None
        return where

    def build(self, case: Case, where: Placement, runnable: list[Kernel], emit: Emit) -> "CaseData | None":
        """The inputs (each rotating copy) and the float32 reference, once for all the case's kernels. Out of
        memory (host or device) on a valid shape: a failed row for each kernel, None."""
        import torch

        dev = self.dev
        self.progress(f"{case.case_id}: building inputs")
        t0 = time.perf_counter()
        try:
            inputs = build_inputs(case, dev.torch_device, copies=where.copies, seed=self.opt.seed)
            self.wall.inputs_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            ref = reference_attention(inputs)
            if dev.cuda:
                torch.cuda.synchronize()
        except (RuntimeError, MemoryError) as e:
            inputs = ref = None
            if dev.cuda:
                torch.cuda.empty_cache()
            for k in runnable:
                self._failed(emit, self.row(k, case, "failed", reason="inputs/reference: " + first_line(e)))
            return None
        self.wall.reference_s += time.perf_counter() - t0
        return CaseData(inputs, ref, tolerance_for(case.dtype, case.kv_dtype, case.skip_softmax, case.q_dtype),
                        where, dev.cuda)

    def measure_kernel(self, k: Kernel, case: Case, data: "CaseData", bw: float | None, emit: Emit) -> None:
        """One kernel of the case: check it, then time it, then its ok row (or the row of the step that failed)."""
        self.progress(f"{case.case_id}: {k.name}")
        self.kernel_started(k.name, case)
        checked = self.check(k, case, data, emit)
        if checked is None:
            return
        fn, errs = checked
        timed = self.time(k, case, fn, data.where.copies, errs, emit)
        if timed is None:
            return
        host = self.time_host(k, case, data, errs, emit) if is_route(k) else {}
        if host is not None:
            emit(self.ok_row(k, case, timed, data.where, bw, errs, **host))

    def time_host(self, k: Kernel, case: Case, data: "CaseData", errs: dict, emit: Emit) -> dict | None:
        """A route's per-step host work (kbench.timing.host) as row columns; None once a failed row is out."""
        import torch

        t0 = time.perf_counter()
        try:
            sync = (lambda: torch.cuda.synchronize(self.dev.index)) if self.dev.cuda else None
            m = time_host(k.host_step(data.inputs), sync)
        except Exception as e:
            self.wall.timing_s += time.perf_counter() - t0
            self._failed(emit, self.row(k, case, "failed", reason="host work: " + first_line(e), **errs))
            return None
        self.wall.timing_s += time.perf_counter() - t0
        cpus, model = host_cpu()
        return dict(host_us=m.median_us, host_p25_us=m.p25_us, host_p75_us=m.p75_us, host_cpus=cpus, host_cpu=model)

    def check(self, k: Kernel, case: Case, data: "CaseData", emit: Emit):
        """Prepare k, run it once on copy 0 (its output poisoned first by the kernel module) and compare with the
        reference: (the callable to time, the error columns), or None once its failed or wrong row is out."""
        import torch

        dev = self.dev
        if dev.cuda:
            torch.cuda.reset_peak_memory_stats(dev.index)
        t0 = time.perf_counter()
        try:
            fn = k.prepare(data.inputs)
            out = fn(0)
            if dev.cuda:
                torch.cuda.synchronize()
            chk = compare(k.checked_output(data.inputs, out), data.ref, data.tolerance)
        except Exception as e:
            self.wall.check_s += time.perf_counter() - t0
            self._failed(emit, self.row(k, case, "failed", reason=first_line(e)))
            return None
        self.wall.check_s += time.perf_counter() - t0
        errs = dict(rel_err=chk.rel_err, max_abs_err=chk.max_abs_err, tolerance=chk.tolerance)
        if not chk.ok:
            emit(self.row(k, case, "wrong", reason=chk.describe(), **errs))
            return None
        if k.name in self.opt.slow_kernel:
            fn = _slowed(fn, self.opt.slow_kernel[k.name])
        return fn, errs

    def time(self, k: Kernel, case: Case, fn, copies: int, errs: dict, emit: Emit) -> Timed | None:
        """Time fn in the case's timing state (kbench.timing.states); None once a failed row is out."""
        t0 = time.perf_counter()
        try:
            timed = self.timers.time(case.power, fn, copies, eager=getattr(k, "eager", False))
        except Exception as e:
            self.wall.timing_s += time.perf_counter() - t0
            self._failed(emit, self.row(k, case, "failed", reason="timing: " + first_line(e), **errs))
            return None
        self.wall.timing_s += time.perf_counter() - t0
        self.measurements += 1
        return timed

    def ok_row(self, k: Kernel, case: Case, timed: Timed, where: Placement, bw: float | None, errs: dict,
               **host) -> Row:
        """The row of a timed kernel: its times, KV bandwidth and roofline fraction, check and environment."""
        m = timed.measurement
        kv_bw = case.kv_bytes(self.opt.seed) / (m.median_us * 1e-6) / 1e9
        env = dict(sm_clock_mhz=timed.clock_mhz, reason=timed.note, **timed.columns)
        if self.dev.cuda:
            import torch

            env["peak_mem_bytes"] = torch.cuda.max_memory_allocated(self.dev.index)
        return self.row(
            k, case, "ok", median_us=m.median_us, p25_us=m.p25_us, p75_us=m.p75_us, iqr_us=m.iqr_us,
            min_us=m.min_us, rel_spread=m.rel_spread, num_samples=len(m.samples_us),
            calls_per_sample=m.calls_per_sample, samples_us=m.samples_us, timer=m.timer, l2=where.l2, stop=m.stop,
            kv_bandwidth_gbs=kv_bw, roofline_frac=(kv_bw / bw) if bw else None, **errs, **env, **host,
        )
