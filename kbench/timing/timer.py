"""Timing a kernel the way an engine pays for it: many calls captured in one CUDA graph, replays timed
with events, repeated until the median is known well enough (nvbench's idea) or the budget is spent.

Stopping criterion: the relative half-width of a distribution-free 95% confidence interval of the
median (order statistics) is below `spread_target`, after at least `min_samples` samples and
`min_time_s` seconds of sampling.

Fence: between two calls in the graph sits a one-element fill, launched without programmatic dependent
launch (PDL). Without it a PDL kernel overlaps its own predecessor, which no engine does: on the H200,
xqa back to back made CUPTI report 137 us per call against 73 us for calls one at a time, and fa3 ran
up to 7% faster back to back than alone. The fences' own time (a graph of fences alone, per call) is
subtracted from every sample.

Duty cycle: replays are timed in bursts of about 5 ms of GPU work, each followed by an idle gap, so the
GPU is busy `duty` of the time (0.4 by default; 1.0 is back to back). Under continuous load an H200
reaches its power cap within ~0.1 s (NVML clock-event reason SW power cap) and its SM clock falls from
1965 to 1680-1750 MHz, which made memory-bound kernels 8-12% slower, by an amount that changed from one
measurement to the next; duty-cycled they repeated within 1-3%. kbench therefore reports the
unthrottled latency of a kernel, the same state for every kernel it compares.
"""
from __future__ import annotations

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


@dataclass
class StopRule:
    spread_target: float = 0.01
    budget_s: float = 2.0
    min_samples: int = 10
    max_samples: int = 400
    min_time_s: float = 0.0

    def check(self, samples: list[float], started: float) -> str | None:
        n = len(samples)
        if n >= self.max_samples:
            return "max-samples"
        if n >= self.min_samples and time.perf_counter() - started >= self.min_time_s:
            s = sorted(samples)
            med = quantile(s, 0.5)
            if med > 0 and median_ci_halfwidth(s) / med <= self.spread_target:
                return "spread"
        if time.perf_counter() - started >= self.budget_s and n >= 3:
            return "budget"
        return None


class GraphTimer:
    """CUDA-graph replay timer. `fn(i)` runs the kernel on input copy i; copies rotate inside the graph."""

    def __init__(self, rule: StopRule, warmup_ms: float = 25.0, target_replay_us: float = 1000.0,
                 max_calls_per_graph: int = 256, fence: bool = True, duty: float = 0.4, settle_ms: float = 20.0,
                 burst_us: float = 5000.0):
        self.rule = rule
        self.duty = duty
        self.settle_ms = settle_ms
        self.burst_us = burst_us
        self.warmup_ms = warmup_ms
        self.target_replay_us = target_replay_us
        self.max_calls = max_calls_per_graph
        self.fence = fence
        self._fence_cost: dict[tuple, float] = {}

    def measure(self, fn: Callable[[int], object], copies: int = 1) -> Measurement:
        import torch

        t0 = time.perf_counter()
        # warm-up, eagerly: module load, lazy allocations, clocks ramp
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n, i = 0, 0
        start.record()
        while True:
            fn(i % copies)
            i += 1
            n += 1
            if n % 8 == 0:
                end.record()
                end.synchronize()
                if start.elapsed_time(end) >= self.warmup_ms:
                    break
        eager_us = start.elapsed_time(end) * 1000 / n
        # enough calls per replay that the replay dwarfs the graph launch, a multiple of the copies
        calls = max(copies, min(self.max_calls, math.ceil(self.target_replay_us / max(eager_us, 1.0))))
        calls = math.ceil(calls / copies) * copies
        fence = torch.zeros(1, dtype=torch.int32, device=torch.cuda.current_device()) if self.fence else None
        try:
            graph = self._capture(fn, calls, copies, fence)
            run, timer = graph.replay, "cuda-graph"
        except Exception:
            # some ops refuse capture; fall back to a timed loop (host overhead included: label it)
            torch.cuda.synchronize()

            def run():
                _fenced_calls(fn, calls, copies, fence)

            timer = "cuda-events"
        fence_us = self.fence_us(fence, calls, timer == "cuda-graph") if fence is not None else 0.0
        replay_us = max(_time_us(run), 1.0)
        batch = max(1, min(50, round(self.burst_us / replay_us)))  # replays per burst
        if self.duty < 1:
            time.sleep(self.settle_ms / 1000)  # off the warm-up's and the capture's load
        samples: list[float] = []
        started = time.perf_counter()
        while True:
            evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(batch)]
            for a, b in evs:
                a.record()
                run()
                b.record()
            evs[-1][1].synchronize()
            burst = [a.elapsed_time(b) * 1000 for a, b in evs]
            samples.extend(x / calls - fence_us for x in burst)
            stop = self.rule.check(samples, started)
            if stop:
                break
            if self.duty < 1:
                time.sleep(sum(burst) * (1 / self.duty - 1) / 1e6)
        return Measurement(samples, timer, calls, stop, time.perf_counter() - t0, fence_us)

    def fence_us(self, fence, calls: int, graphed: bool = True) -> float:
        """Per-call time of the fences alone, timed the way they run between the calls (cached)."""
        key = (calls, graphed, fence.device.index)
        if key not in self._fence_cost:
            if graphed:
                run = self.capture_fences(fence, calls).replay
            else:
                def run():
                    _fenced_calls(None, calls, 1, fence)
            run()
            times = sorted(_time_us(run) / calls for _ in range(15))
            self._fence_cost[key] = times[len(times) // 2]
        return self._fence_cost[key]

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
        t0 = time.perf_counter()
        fn(0)
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
        return Measurement(samples, "wall-clock", 1, stop, time.perf_counter() - t0)
