"""Timing a kernel the way an engine pays for it: many calls captured in one CUDA graph, replays timed
with events, repeated until the median is known well enough (nvbench's idea) or the budget is spent.

Stopping criterion: the relative half-width of a distribution-free 95% confidence interval of the
median (order statistics) is below `spread_target`, after at least `min_samples` samples and
`min_time_s` seconds of sampling.

Fence: between two calls in the graph sits a one-element fill, launched without programmatic dependent
launch (PDL). Without it a PDL kernel overlaps its own predecessor, which no engine does: on the H200,
xqa back to back made CUPTI report 137 us per call against 73 us for calls one at a time, and fa3 ran
up to 7% faster back to back than alone. The fences' own time (a graph of fences alone, per call) is
subtracted from every sample. It is timed the way the calls are: a replay of a graph of fences alone is queued
at the end of each sampling burst, behind the kernel's replays, and the median over the bursts is taken off.
Timed on an idle GPU instead (kbench before December 2026: once per graph size, right after the capture), a
fences graph's time is mostly the host's launch latency, the GPU waiting for the launch: on the H200 it read
6 to 23 us per call at 1 to 12 calls per replay, where the fences cost about 1 to 3 us inside the kernel's graph
(replay time minus CUPTI's kernel time), so kbench read 2 to 6% under CUPTI at 30 us to 1 ms.

Duty cycle: replays are timed in bursts of about 5 ms of GPU work, each followed by an idle gap, so the
GPU is busy `duty` of the time (0.4 by default; 1.0 is back to back). Under continuous load an H200
reaches its power cap within ~0.1 s (NVML clock-event reason SW power cap) and its SM clock falls from
1965 to 1680-1750 MHz, which made memory-bound kernels 8-12% slower, by an amount that changed from one
measurement to the next; duty-cycled they repeated within 1-3%. kbench therefore reports the
unthrottled latency of a kernel, the same state for every kernel it compares.

Cost (issue #29): the warm-up is sized by the kernel's time (`warmup_ms` of eager calls, at least one: the
case's check has already made the first call), the pause before sampling is the duty cycle's share of the
warm-up's and the probe replays' GPU time (the same idle a sampling burst of that length gets; `settle_ms`
fixes it instead), and `Measurement.phases` says where the wall time went (warmup, capture, fence, probe,
settle, sampling: they add up to `wall_s`).

The graph gets a warm-up of its own (the probe: replays for `warmup_ms` of device time, at least
PROBE_MIN_REPLAYS; the last one sizes the bursts). Before, one probe replay: on an H100 the first bs64 decode
rows of a sweep had their first 2 to 3 samples 12 to 21% slow after the eager warm-up (17 of 576 rows of 6
sweeps, docs/gate.md), so a sweep stopped after 4 samples timed mostly that settling and its gate FAILed on an
unchanged kernel. On an H100 on 2026-12-07 neither timer showed that slow start (0 of 480 and 384 rows) and both
gave the same verdicts (docs/gate.md): the replays are shown harmless there, not shown needed.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Measurement:
    samples_us: list[float]  # one per graph replay, divided by the calls it holds
    timer: str  # cuda-graph | cuda-events | wall-clock
    calls_per_sample: int
    stop: str  # spread | budget | max-samples
    wall_s: float
    fence_us: float = 0.0  # per call, already subtracted from samples_us
    fence_replays: int = 0  # replays of the fences-alone graph timed during the sampling (one per burst)
    phases: dict = field(default_factory=dict)  # seconds of wall per phase (PHASES); they add up to wall_s
    median_us: float = field(init=False)
    p25_us: float = field(init=False)
    p75_us: float = field(init=False)
    min_us: float = field(init=False)
    rel_spread: float = field(init=False)

    def __post_init__(self):
        s = sorted(self.samples_us)
        self.median_us = quantile(s, 0.5)
        self.p25_us = quantile(s, 0.25)
        self.p75_us = quantile(s, 0.75)
        self.min_us = s[0]
        self.rel_spread = median_ci_halfwidth(s) / self.median_us if self.median_us > 0 else math.inf

    @property
    def iqr_us(self) -> float:
        return self.p75_us - self.p25_us


def quantile(sorted_vals: list[float], q: float) -> float:
    n = len(sorted_vals)
    pos = q * (n - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def median_ci_halfwidth(sorted_vals: list[float]) -> float:
    """Half-width of the order-statistic 95% CI of the median: ranks n/2 -+ 0.98*sqrt(n)."""
    n = len(sorted_vals)
    if n < 3:
        return math.inf
    d = 0.98 * math.sqrt(n)
    lo = max(0, int(math.floor(n / 2 - d)))
    hi = min(n - 1, int(math.ceil(n / 2 + d)))
    return (sorted_vals[hi] - sorted_vals[lo]) / 2


# what the fence is and how its time is taken off, as a run's manifest says it (timer.fence): the gate warns when a
# baseline says otherwise (before December 2026 the fences were timed on an idle GPU, launch latency included)
FENCE_METHOD = ("one-element fill between calls (no PDL overlap between calls); its time subtracted, timed as a "
                "graph of fences alone queued behind each burst")

# where a measurement's wall time goes, in the order the phases run (GraphTimer.measure)
PHASES = ("warmup", "capture", "fence", "probe", "settle", "sampling")
WARMUP_MIN_CALLS = 1
PROBE_MIN_REPLAYS = 2  # the graph's warm-up: at least this many replays, and warmup_ms of them


class PhaseClock:
    """Splits wall time into named phases: mark(name) books the time since the previous mark to `name`, so the
    phases add up to the total by construction."""

    def __init__(self, now: Callable[[], float] | None = None):
        self.now = now or (lambda: time.perf_counter())  # looked up at each mark (tests replace the clock)
        self.start = self.last = self.now()
        self.phases: dict[str, float] = {}

    def mark(self, name: str) -> None:
        t = self.now()
        self.phases[name] = self.phases.get(name, 0.0) + (t - self.last)
        self.last = t

    @property
    def total(self) -> float:
        return self.last - self.start


def warmup_next(calls: int, elapsed_ms: float, warmup_ms: float, min_calls: int = WARMUP_MIN_CALLS) -> int:
    """How many more eager warm-up calls to launch before the next look at the clock (0: the warm-up is done).
    Done after `warmup_ms` of device time and at least `min_calls`; otherwise as many calls as the time per
    call so far says remain (at most doubling, so one slow first call does not overshoot)."""
    if calls >= min_calls and elapsed_ms >= warmup_ms:
        return 0
    if calls == 0:
        return max(1, min_calls)
    per_call = max(elapsed_ms / calls, 1e-6)
    remaining = math.ceil((warmup_ms - elapsed_ms) / per_call)
    return max(1, min_calls - calls, min(calls, remaining))


def settle_s(busy_us: float, duty: float, settle_ms: float | None = None) -> float:
    """The idle pause between the warm-up (and probe) and the sampling: fixed (`settle_ms`) or, by default, the
    duty cycle's share of the busy time before it, the same pause a sampling burst that long is followed by, so
    the GPU is busy `duty` of the whole measurement. Back to back (duty 1): none."""
    if duty >= 1:
        return 0.0
    if settle_ms is not None:
        return settle_ms / 1000
    return busy_us * (1 / duty - 1) / 1e6


@dataclass
class StopRule:
    spread_target: float = 0.01
    budget_s: float = 2.0
    min_samples: int = 10
    max_samples: int = 400
    min_time_s: float = 0.0

    def check(self, samples: list[float], started: float, now: float | None = None) -> str | None:
        """Why to stop now (None: go on); `now` defaults to the perf_counter clock `started` was read from."""
        n = len(samples)
        elapsed = (time.perf_counter() if now is None else now) - started
        if n >= self.max_samples:
            return "max-samples"
        if n >= self.min_samples and elapsed >= self.min_time_s:
            s = sorted(samples)
            med = quantile(s, 0.5)
            if med > 0 and median_ci_halfwidth(s) / med <= self.spread_target:
                return "spread"
        if elapsed >= self.budget_s and n >= 3:
            return "budget"
        return None


class GraphTimer:
    """CUDA-graph replay timer. `fn(i)` runs the kernel on input copy i; copies rotate inside the graph."""

    def __init__(self, rule: StopRule, warmup_ms: float = 5.0, target_replay_us: float = 1000.0,
                 max_calls_per_graph: int = 256, fence: bool = True, duty: float = 0.4, settle_ms: float | None = None,
                 burst_us: float = 5000.0):
        self.rule = rule
        self.duty = duty
        self.settle_ms = settle_ms
        self.burst_us = burst_us
        self.warmup_ms = warmup_ms
        self.target_replay_us = target_replay_us
        self.max_calls = max_calls_per_graph
        self.fence = fence
        self._fence_runs: dict[tuple, Callable[[], None]] = {}
        # one fence tensor per device for the timer's life: a graph keeps the address it was captured with, and
        # the fences graphs are kept (one per size); a tensor per measurement, freed after it, left a kept graph
        # zeroing memory a later case had been given (illegal memory accesses on the H200, December 2026)
        self._fences: dict[int, object] = {}

    def measure(self, fn: Callable[[int], object], copies: int = 1, sampling=None, eager: bool = False) -> Measurement:
        """sampling: a context manager factory the sampling phase runs inside (validate-timer's CUPTI profile
        of the very replays the events time); None: none. eager: no graph, no fences: the calls launched one after
        the other from Python, as an engine without CUDA graphs runs its layers (SGLang --disable-cuda-graph, vLLM
        --enforce-eager), each sample the events' time of `calls` launches / calls, so a call whose host work
        (the Python wrapper, the launch) outlasts its kernel is priced at its host work (timer "eager")."""
        import torch

        clock = PhaseClock()
        # warm-up, eagerly: clocks ramp, lazy allocations; its time per call sizes the graph
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n, elapsed_ms = 0, 0.0
        start.record()
        while more := warmup_next(n, elapsed_ms, self.warmup_ms):
            for _ in range(more):
                fn(n % copies)
                n += 1
            end.record()
            end.synchronize()
            elapsed_ms = start.elapsed_time(end)
        eager_us = elapsed_ms * 1000 / n
        clock.mark("warmup")
        # enough calls per replay that the replay dwarfs the graph launch, a multiple of the copies
        calls = max(copies, min(self.max_calls, math.ceil(self.target_replay_us / max(eager_us, 1.0))))
        calls = math.ceil(calls / copies) * copies
        fence = self.fence_tensor(torch.cuda.current_device()) if self.fence and not eager else None
        try:
            if eager:
                raise _Eager
            graph = self._capture(fn, calls, copies, fence)
            run, timer = graph.replay, "cuda-graph"
        except Exception as e:
            # some ops refuse capture; fall back to a timed loop (host overhead included: label it)
            torch.cuda.synchronize()

            def run():
                _fenced_calls(fn, calls, copies, fence)

            timer = "eager" if isinstance(e, _Eager) else "cuda-events"
        clock.mark("capture")
        fence_run = self.fence_run(fence, calls, timer == "cuda-graph") if fence is not None else None
        clock.mark("fence")
        # the graph's own warm-up (module docstring): its first replays can run slow; the last sizes the bursts
        probes, probe_us = 0, 0.0
        while probes < PROBE_MIN_REPLAYS or probe_us < self.warmup_ms * 1000:
            replay_us = max(_time_us(run), 1.0)
            probes, probe_us = probes + 1, probe_us + replay_us
        batch = max(1, min(50, round(self.burst_us / replay_us)))  # replays per burst
        clock.mark("probe")
        time.sleep(settle_s(elapsed_ms * 1000 + probe_us, self.duty, self.settle_ms))  # off the warm-up's load
        clock.mark("settle")
        per_call: list[float] = []  # replay time / calls, fences included
        fences: list[float] = []  # the fences alone, per call, one replay after each burst
        samples: list[float] = []
        fence_us = 0.0
        with sampling() if sampling is not None else contextlib.nullcontext():
            started = time.perf_counter()
            while True:
                evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(batch + (fence_run is not None))]
                for j, (a, b) in enumerate(evs):
                    a.record()
                    run() if j < batch else fence_run()  # the fences last, queued behind the replays
                    b.record()
                evs[-1][1].synchronize()
                times = [a.elapsed_time(b) * 1000 for a, b in evs]
                burst = times[:batch]
                per_call.extend(x / calls for x in burst)
                if fence_run is not None:
                    fences.append(times[batch] / calls)
                    fence_us = quantile(sorted(fences), 0.5)
                samples = [x - fence_us for x in per_call]
                stop = self.rule.check(samples, started)
                if stop:
                    break
                if self.duty < 1:
                    time.sleep(sum(burst) * (1 / self.duty - 1) / 1e6)
        clock.mark("sampling")
        return Measurement(samples, timer, calls, stop, clock.total, fence_us, len(fences), clock.phases)

    def fence_tensor(self, device: int):
        """The one-element fill the calls are fenced with on `device`, the same for every measurement."""
        import torch

        if device not in self._fences:
            self._fences[device] = torch.zeros(1, dtype=torch.int32, device=device)
        return self._fences[device]

    def fence_run(self, fence, calls: int, graphed: bool = True) -> Callable[[], None]:
        """`calls` fences alone, run the way they run between the calls (a graph, captured once per size, or
        eager launches): what the fences cost by themselves, timed by the caller."""
        key = (calls, graphed, fence.device.index, fence.data_ptr())
        if key not in self._fence_runs:
            if graphed:
                run = self.capture_fences(fence, calls).replay
            else:
                def run():
                    _fenced_calls(None, calls, 1, fence)
            run()  # the first replay uploads the graph
            self._fence_runs[key] = run
        return self._fence_runs[key]

    @classmethod
    def capture_fences(cls, fence, calls: int):
        """A graph of `calls` fences alone: what the fences between the calls cost by themselves."""
        return cls._capture(None, calls, 1, fence)

    @staticmethod
    def _capture(fn, calls: int, copies: int, fence=None):
        import torch

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            _fenced_calls(fn, 1, copies, fence)  # one call on the capture stream first, as torch recommends
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            _fenced_calls(fn, calls, copies, fence)
        torch.cuda.synchronize()
        return graph


class _Eager(Exception):
    """Not an error: the eager timer's way past the capture to the timed loop of launches."""


def _fenced_calls(fn, calls: int, copies: int, fence) -> None:
    """fn on the rotating copies `calls` times (fn None: fences only), each call followed by the fence:
    a plain launch, so the next call cannot start before this one ends."""
    for j in range(calls):
        if fn is not None:
            fn(j % copies)
        if fence is not None:
            fence.zero_()


def _time_us(run) -> float:
    """Device time of one run(), from CUDA events, in us."""
    import torch

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    run()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1000


class WallClockTimer:
    """Without CUDA: host wall clock around each call (labelled so; only the reference runs there)."""

    def __init__(self, rule: StopRule):
        self.rule = rule

    def measure(self, fn: Callable[[int], object], copies: int = 1) -> Measurement:
        clock = PhaseClock()
        fn(0)
        clock.mark("warmup")
        samples: list[float] = []
        started = time.perf_counter()
        i = 0
        while True:
            a = time.perf_counter()
            fn(i % copies)
            samples.append((time.perf_counter() - a) * 1e6)
            i += 1
            stop = self.rule.check(samples, started)
            if stop:
                break
        clock.mark("sampling")
        return Measurement(samples, "wall-clock", 1, stop, clock.total, phases=clock.phases)
