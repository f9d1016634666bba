"""Is kbench's timer right? Each kernel at shapes from ~10 us to ~5 ms, timed three ways:

- kbench: CUDA-graph replay with events, input rotation (the sweep's timer);
- CUPTI (through torch.profiler), the independent clock, three ways:
  * cupti_us: the device time of the call's kernels inside kbench's own fenced graph, replayed in
    duty-cycled bursts as the sweep does (the fences' CUPTI time, from a graph of fences alone, taken
    off): the same execution, another clock, no launch gaps;
  * cupti_alone_us: eager calls one at a time (synchronised, as Nsight Compute serialises them);
  * cupti_b2b_us: eager calls back to back: with programmatic dependent launch a kernel starts during
    its predecessor and CUPTI counts the overlap twice (xqa on the H200: 137 us back to back, 73 alone);
- FlashInfer's own harness, `flashinfer.testing.bench_gpu_time(fn)` with its defaults, with its wall time.

Each timer starts after a COOL_S idle pause and the eager CUPTI bursts hold at most ~CUPTI_BURST_US of
GPU work, so that they see the GPU off its power cap as the sweep's duty-cycled timer does (see
kbench.timing.timer). The eager ways still differ from a graph in GPU state (a call that starts on an
idle GPU, launch gaps), which is why the same-replay CUPTI figure is the one the target is checked on.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from kbench.cases.case import Case
from kbench.errors import first_line
from kbench.timing.check import compare, tolerance_for
from kbench.kernels.inputs import build_inputs
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import select
from kbench.timing.timer import GraphTimer
from kbench.cases.models import MODELS

H = MODELS["llama3-8b"]
COOL_S = 0.15
CUPTI_BURST_US = 30_000
# (bs, q, kv): about 10 us to 5 ms for the decode kernel on an H200
DEFAULT_SHAPES = [(1, 4, 512), (4, 4, 2048), (16, 4, 4096), (64, 8, 4096), (128, 4, 16384), (256, 8, 16384)]


@dataclass
class TimerCheck:
    kernel: str
    case_id: str
    kbench_us: float
    cupti_us: float | None
    cupti_kernels: int | None
    cupti_alone_us: float | None
    cupti_b2b_us: float | None
    flashinfer_us: float | None
    kbench_wall_s: float
    flashinfer_wall_s: float | None
    rel_err: float
    error: str = ""

    @property
    def cupti_diff(self) -> float | None:
        return None if not self.cupti_us else self.kbench_us / self.cupti_us - 1

    @property
    def alone_diff(self) -> float | None:
        return None if not self.cupti_alone_us else self.kbench_us / self.cupti_alone_us - 1

    @property
    def flashinfer_diff(self) -> float | None:
        return None if not self.flashinfer_us else self.kbench_us / self.flashinfer_us - 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(cupti_diff=self.cupti_diff, alone_diff=self.alone_diff, flashinfer_diff=self.flashinfer_diff)
        return d


def _device_activity(prof) -> tuple[float, int]:
    """Total device time (us) and count of the kernels, memsets and copies CUPTI timed in a profile."""
    from torch.autograd import DeviceType

    evs = [e for e in prof.events() if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    return sum(e.time_range.elapsed_us() for e in evs), len(evs)


def cupti_us_per_call(fn, copies: int, calls: int = 20, synced: bool = True) -> tuple[float, int]:
    """Sum of device activity (kernels, memsets, copies) per call, from CUPTI via torch.profiler;
    synced: each call runs alone (a synchronisation after it), else back to back."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for i in range(2):
        fn(i % copies)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(i % copies)
            if synced:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    total, n = _device_activity(prof)
    return total / calls, round(n / calls)


def cupti_replay_us_per_call(fn, copies: int, calls: int, duty: float, replays: int = 5) -> tuple[float | None, int]:
    """Device time per call of fn's kernels inside a fenced graph (GraphTimer's), replayed `replays` times
    with the sweep's duty cycle; the fences' own device time (a graph of fences alone) is taken off."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fence = torch.zeros(1, dtype=torch.int32, device=torch.cuda.current_device())
    graphs = [GraphTimer._capture(fn, calls, copies, fence), GraphTimer.capture_fences(fence, calls)]
    out = []
    for g in graphs:
        g.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                t0 = time.perf_counter()
                g.replay()
                torch.cuda.synchronize()
                time.sleep((time.perf_counter() - t0) * (1 / duty - 1))
        total, n = _device_activity(prof)
        out.append((total / (replays * calls), n / (replays * calls)))
    (kern, nk), (fen, nf) = out
    if nk <= nf:  # the profiler saw no kernels inside the graph replays
        return None, 0
    return kern - fen, round(nk - nf)


def flashinfer_harness_us(fn) -> tuple[float, float]:
    from flashinfer.testing import bench_gpu_time

    t0 = time.perf_counter()
    times_ms = bench_gpu_time(fn)
    return statistics.median(times_ms) * 1000, time.perf_counter() - t0


def validate_timer(kernels: list[str] | None = None, shapes=None, device: str = "cuda", on_row=None,
                   spread_target: float = 0.01, budget_s: float = 2.0) -> list[TimerCheck]:
    from kbench.timing.probe import probe_device
    from kbench.engine.placement import copies_for
    from kbench.cases.scenario import Timing

    dev = probe_device()
    rows = []
    ks = [k for k in select(kernels or ["all"]) if k.path != "reference"]
    t = Timing(spread_target=spread_target, budget_s=budget_s)  # the sweep's defaults otherwise
    timer = GraphTimer(t.stop_rule(), t.warmup_ms, duty=t.duty)
    for bs, q, kv in shapes or DEFAULT_SHAPES:
        case = Case(bs, q, kv, H.num_qo_heads, H.num_kv_heads, H.head_dim, 64)
        runnable = [k for k in ks if k.supports(dev, case) is None]
        if not runnable:
            continue
        copies = copies_for(case, dev, t)
        inputs = build_inputs(case, device, copies=copies)
        ref = reference_attention(inputs)
        for k in runnable:
            try:
                fn = k.prepare(inputs)
                chk = compare(fn(0), ref, tolerance_for(case.dtype, case.kv_dtype, case.skip_softmax, case.q_dtype))
                time.sleep(COOL_S)
                m = timer.measure(fn, copies)
                time.sleep(COOL_S)
                cu, nk = cupti_replay_us_per_call(fn, copies, m.calls_per_sample, t.duty)
                calls = max(3, min(20, int(CUPTI_BURST_US / max(m.median_us, 1.0))))
                time.sleep(COOL_S)
                alone, nk_alone = cupti_us_per_call(fn, copies, calls)
                time.sleep(COOL_S)
                b2b, _ = cupti_us_per_call(fn, copies, calls, synced=False)
                time.sleep(COOL_S)
                fi, fi_wall = flashinfer_harness_us(lambda: fn(0))
                r = TimerCheck(k.name, case.case_id, m.median_us, cu, nk or nk_alone, alone, b2b, fi, m.wall_s, fi_wall,
                               chk.rel_err)
            except Exception as e:
                r = TimerCheck(k.name, case.case_id, float("nan"), None, None, None, None, None, 0.0, None, float("nan"),
                               error=first_line(e, 200))
            rows.append(r)
            if on_row:
                on_row(r)
        del inputs, ref
    return rows
