"""Measuring one case: build its inputs, run the reference, then for each kernel prepare, check and time
it, and produce its `Row`.

One home, called by the in-process sweep (kbench.engine.sweep), the isolated worker (kbench.engine.isolation) and,
through the sweep each runs, the per-device workers (kbench.engine.devices). A worker is started from a
`Payload`: the scenario as data plus the measuring options, the same for every kind of worker.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from kbench.cases.case import Case
from kbench.timing.check import compare, tolerance_for
from kbench.errors import BadInput, first_line
from kbench.kernels.base import Kernel
from kbench.device import DeviceInfo
from kbench.timing.probe import probe_device
from kbench.kernels.inputs import build_inputs, copy_bytes
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import select
from kbench.timing.timer import GraphTimer, WallClockTimer
from kbench.runs.rows import Row
from kbench.cases.scenario import Scenario, Timing, scenario_from_dict
from kbench.runs.store import now_iso

# input copies rotate until they cover this many times the L2 (cold-L2 is what an engine sees)
L2_COVER = 3
MAX_COPIES = 64
# a measurement whose SM clock ends below this fraction of the maximum is repeated after a pause
THROTTLE_FRAC = 0.9
THROTTLE_RETRIES = 1
THROTTLE_PAUSE_S = 0.3
# device memory kept free beyond what a case needs (reference temporaries, workspaces, allocator slack)
HEADROOM_BYTES = 6 << 30
HOST_HEADROOM_BYTES = 1 << 30


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
    if case.kv_dtype not in kernel.kv_dtypes:
        return f"KV dtype {case.kv_dtype} not supported by {kernel.name} in kbench"
    return kernel.supports(device, case)


def copies_for(case: Case, device: DeviceInfo, timing: Timing) -> int:
    if not device.cuda or timing.l2 != "rotate" or not device.l2_bytes:
        return 1
    return max(1, min(MAX_COPIES, math.ceil(L2_COVER * device.l2_bytes / max(copy_bytes(case), 1))))


def fits(case: Case, copies: int, device: DeviceInfo) -> str | None:
    """Why the case cannot fit on the device (checked before anything is allocated), or None."""
    if not device.cuda:  # host memory: inputs plus the float32 reference's working set
        from kbench.timing.hardware import host_available_bytes

        avail, need = host_available_bytes(), 2 * copies * copy_bytes(case) + HOST_HEADROOM_BYTES
        if avail is not None and need > avail:
            return f"needs {need / 2**30:.1f} GiB of host memory, {avail / 2**30:.1f} GiB available"
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device.index)
    need = copies * copy_bytes(case) + HEADROOM_BYTES
    if need > free:
        return f"needs {need / 2**30:.1f} GiB of device memory, {free / 2**30:.1f} GiB free"
    return None


def open_device(index: int) -> DeviceInfo:
    """Select and describe the device (the CPU when there is no CUDA)."""
    import torch

    if torch.cuda.is_available():
        if index >= torch.cuda.device_count():
            raise BadInput(f"--device {index}: this machine has {torch.cuda.device_count()} GPU(s)")
        torch.cuda.set_device(index)
    return probe_device(index)


def make_timer(timing: Timing, dev: DeviceInfo):
    rule = timing.stop_rule()
    return GraphTimer(rule, warmup_ms=timing.warmup_ms, duty=timing.duty) if dev.cuda else WallClockTimer(rule)


def _slowed(fn, n: int):
    def run(i: int):
        out = None
        for _ in range(n):
            out = fn(i)
        return out

    return run


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
        for name in self.opt.slow_kernel:
            if name not in [k.name for k in self.kernels]:
                raise BadInput(f"--slow-kernel: {name!r} is not among this sweep's kernels")
        self.dev = dev
        self.timer = None
        self.sustained = None  # the sustained state's timer and NVML sampler, made on first use
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
        if self.timer is None:
            self.timer = make_timer(self.sc.timing, self.dev)
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

    def _timed(self, fn, copies: int):
        """Time fn; when the SM clock has dropped below THROTTLE_FRAC of its maximum (power or thermal
        throttling, seen on the H200 as 7% slower rows between back-to-back sweeps), pause and measure again."""
        dev = self.dev
        m = self.timer.measure(fn, copies)
        if not dev.cuda:
            return m, None, ""
        from kbench.timing.hardware import clocks

        for attempt in range(THROTTLE_RETRIES + 1):
            c = clocks(dev.index)
            clock, top = c.get("sm_mhz"), c.get("sm_max_mhz")
            if clock is None or not top or clock >= THROTTLE_FRAC * top:
                return m, clock, "" if attempt == 0 else f"re-measured {attempt}x after SM clock throttling"
            if attempt == THROTTLE_RETRIES:
                break
            time.sleep(THROTTLE_PAUSE_S)
            m = self.timer.measure(fn, copies)
        return m, clock, f"SM clock {clock:.0f} MHz < {THROTTLE_FRAC:.0%} of max {top:.0f} MHz: throttled"

    def _timed_sustained(self, fn, copies: int):
        """The sustained state (kbench.timing.power): pre-load until power and clock settle, then back to back."""
        from kbench.timing.power import NvmlSampler, measure_sustained, sustained_timer

        first = self.sustained is None
        if first:
            self.sustained = (sustained_timer(self.sc.timing), NvmlSampler(self.dev.index))
            self.progress("sustained state: heat soak (the GPU under load until its temperature is steady)")
        timer, sampler = self.sustained
        r = measure_sustained(timer, fn, copies, sampler, soak_first=first)
        cols = dict(**r.summary.columns(), power_settle=r.settle.note)
        note = "; ".join(x for x in (r.soak.line if r.soak else "", r.settle.note) if x)
        return r.measurement, r.summary.sm_clock_mean_mhz, note, cols

    def measure(self, case: Case, done: set, bw: float | None, emit: Emit) -> None:
        dev = self.open()
        kernels = [k for k in self.kernels if (k.name, case.case_id) not in done]
        runnable = []
        for k in kernels:
            reason = kernel_reason(k, dev, case)
            if reason is None and k.path == "reference" and dev.cuda and "reference" not in self.sc.kernels:
                reason = "the oracle: not timed on a GPU unless named in --kernels"
            if reason:
                emit(self.row(k, case, "skipped", reason=reason))
            else:
                runnable.append(k)
        if not runnable:
            return
        copies = copies_for(case, dev, self.sc.timing)
        no_fit = fits(case, 1, dev)
        if no_fit:
            for k in runnable:
                emit(self.row(k, case, "skipped", reason=no_fit))
            return
        while copies > 1 and fits(case, copies, dev):
            copies //= 2
        import torch

        self.progress(f"{case.case_id}: building inputs")
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
                self._failed(emit, self.row(k, case, "failed", reason="inputs/reference: " + first_line(e)))
            return
        self.wall.reference_s += time.perf_counter() - t0
        tol = tolerance_for(case.dtype, case.kv_dtype, case.skip_softmax, case.q_dtype)
        if not dev.cuda:
            l2 = "cpu"
        elif copies > 1:
            l2 = f"rotate-{copies}"
        elif self.sc.timing.l2 == "warm":
            l2 = "warm"
        else:  # one copy already spans L2_COVER x L2: every call streams it from HBM
            l2 = f"exceeds-{L2_COVER}xL2"
        for k in runnable:
            self.progress(f"{case.case_id}: {k.name}")
            self.kernel_started(k.name, case)
            if dev.cuda:
                torch.cuda.reset_peak_memory_stats(dev.index)
            t0 = time.perf_counter()
            try:
                fn = k.prepare(inputs)
                out = fn(0)
                if dev.cuda:
                    torch.cuda.synchronize()
                chk = compare(k.checked_output(inputs, out), ref, tol)
            except Exception as e:
                self.wall.check_s += time.perf_counter() - t0
                self._failed(emit, self.row(k, case, "failed", reason=first_line(e)))
                continue
            self.wall.check_s += time.perf_counter() - t0
            errs = dict(rel_err=chk.rel_err, max_abs_err=chk.max_abs_err, tolerance=chk.tolerance)
            if not chk.ok:
                emit(self.row(k, case, "wrong", reason=chk.describe(), **errs))
                continue
            if k.name in self.opt.slow_kernel:
                fn = _slowed(fn, self.opt.slow_kernel[k.name])
            t0 = time.perf_counter()
            try:
                if dev.cuda and case.power == "sustained":
                    m, clock, note, power_cols = self._timed_sustained(fn, copies)
                elif dev.cuda:  # unthrottled: NVML sampled as well, so both states record what they ran at
                    from kbench.timing.power import BackgroundSampler, NvmlSampler, PowerSummary

                    with BackgroundSampler(NvmlSampler(dev.index)) as bg:
                        m, clock, note = self._timed(fn, copies)
                    power_cols = PowerSummary.of(bg.samples).columns()
                else:
                    (m, clock, note), power_cols = self._timed(fn, copies), {}
            except Exception as e:
                self.wall.timing_s += time.perf_counter() - t0
                self._failed(emit, self.row(k, case, "failed", reason="timing: " + first_line(e), **errs))
                continue
            self.wall.timing_s += time.perf_counter() - t0
            self.measurements += 1
            kv_bw = case.kv_bytes(self.opt.seed) / (m.median_us * 1e-6) / 1e9
            extra = {}
            if dev.cuda:
                extra = dict(sm_clock_mhz=clock, peak_mem_bytes=torch.cuda.max_memory_allocated(dev.index), reason=note,
                             **power_cols)
            emit(self.row(
                k, case, "ok", median_us=m.median_us, p25_us=m.p25_us, p75_us=m.p75_us, iqr_us=m.iqr_us,
                min_us=m.min_us, rel_spread=m.rel_spread, num_samples=len(m.samples_us),
                calls_per_sample=m.calls_per_sample, samples_us=m.samples_us, timer=m.timer, l2=l2, stop=m.stop,
                kv_bandwidth_gbs=kv_bw, roofline_frac=(kv_bw / bw) if bw else None, **errs, **extra,
            ))
        del inputs, ref
        if dev.cuda:
            torch.cuda.empty_cache()
