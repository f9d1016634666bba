"""The `sustained` timing state (issue #16): a kernel timed after the GPU reached its steady state under
continuous load, at its power cap.

How: a pre-load (the kernel's own graph replayed back to back) until NVML power draw and SM clock settle
-- the last `window` samples each within `band` (relative) of their mean -- or until `timeout_s` (the
row then says so); the same pre-load before every kernel, so that no kernel starts cooler than another;
then the timing back to back (duty 1) over a longer steady window, with NVML sampled throughout. Each row
records the mean SM clock, the mean power draw and the throttle reasons seen while it was timed.

The settle logic takes any `Sampler` (a callable returning a `PowerSample`), so it is tested on the CPU
against a fake sequence of readings; `NvmlSampler` reads the real GPU.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

# settle: the last WINDOW samples of power and SM clock within BAND of their mean, sampled every INTERVAL_S
SETTLE_WINDOW = 6
SETTLE_BAND = 0.02
SETTLE_INTERVAL_S = 0.05
SETTLE_TIMEOUT_S = 3.0
MIN_PRELOAD_S = 0.3  # the H200 reaches its power cap within ~0.1 s; at least this much load before settling
STEADY_WINDOW_S = 0.5  # sustained timing samples for at least this long (the unthrottled default: none)

# NVML clock-event (throttle) reason bits -> short names
REASONS = {
    0x1: "gpu-idle", 0x2: "app-clocks", 0x4: "sw-power-cap", 0x8: "hw-slowdown", 0x10: "sync-boost",
    0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power-brake", 0x100: "display-clocks",
}


def reason_names(mask: int) -> list[str]:
    return [n for bit, n in REASONS.items() if mask & bit] + ([f"0x{mask & ~sum(REASONS):x}"]
                                                              if mask & ~sum(REASONS) else [])


def states_of(rows) -> list[str]:
    """The timing states a rows DataFrame holds, in axis order (an older run without the column: unthrottled)."""
    from kbench.axes import AXIS, POWER_STATES

    if "power" not in rows.columns:
        return [AXIS["power"].default]
    return [s for s in POWER_STATES if (rows["power"] == s).any()]


@dataclass(frozen=True)
class PowerSample:
    power_w: float | None
    sm_mhz: float | None
    reasons: int = 0  # NVML clock-event reasons bitmask


Sampler = Callable[[], PowerSample]


@dataclass
class Settle:
    settled: bool
    seconds: float
    samples: list[PowerSample] = field(default_factory=list)
    reason: str = ""  # why it did not settle ("" when it did)

    @property
    def note(self) -> str:
        if self.settled:
            return ""
        return f"power did not settle: {self.reason}"


def _within(vals: list[float], band: float) -> bool:
    m = statistics.fmean(vals)
    return m > 0 and (max(vals) - min(vals)) / m <= band


def is_settled(samples: list[PowerSample], window: int = SETTLE_WINDOW, band: float = SETTLE_BAND) -> bool:
    """The last `window` samples' power and SM clock each spread (max - min) within `band` of their mean.
    A reading NVML does not give (None) is not judged; with neither, there is nothing to wait for."""
    if len(samples) < window:
        return False
    last = samples[-window:]
    for attr in ("power_w", "sm_mhz"):
        vals = [getattr(s, attr) for s in last]
        if any(v is None for v in vals):
            continue
        if not _within(vals, band):
            return False
    return True


def settle(sampler: Sampler, load: Callable[[], None], window: int = SETTLE_WINDOW, band: float = SETTLE_BAND,
           interval_s: float = SETTLE_INTERVAL_S, timeout_s: float = SETTLE_TIMEOUT_S,
           min_load_s: float = MIN_PRELOAD_S, clock: Callable[[], float] = time.perf_counter) -> Settle:
    """Run `load()` (a short burst of work, ~interval_s long) repeatedly, sampling after each, until the
    readings settle (after at least `min_load_s`) or `timeout_s` passes."""
    t0 = clock()
    samples: list[PowerSample] = []
    next_sample = t0
    while True:
        load()
        now = clock()
        if now >= next_sample:
            samples.append(sampler())
            next_sample = now + interval_s
            if now - t0 >= min_load_s and is_settled(samples, window, band):
                return Settle(True, now - t0, samples)
        if now - t0 >= timeout_s:
            last = samples[-window:]
            spread = []
            for attr, unit in (("power_w", "W"), ("sm_mhz", "MHz")):
                vals = [getattr(s, attr) for s in last if getattr(s, attr) is not None]
                if vals:
                    spread.append(f"{attr.split('_')[0]} {min(vals):.0f}..{max(vals):.0f} {unit}")
            return Settle(False, now - t0, samples,
                          f"timeout after {timeout_s:g}s ({', '.join(spread) or 'no readings'}; "
                          f"wanted the last {window} within {band:.0%})")


@dataclass
class PowerSummary:
    """What a row records of the samples taken while it was timed."""
    sm_clock_mean_mhz: float | None
    power_mean_w: float | None
    throttle_reasons: str  # names joined by '+', '' when none

    @classmethod
    def of(cls, samples: list[PowerSample]) -> "PowerSummary":
        def mean(attr):
            vals = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
            return statistics.fmean(vals) if vals else None
        mask = 0
        for s in samples:
            mask |= s.reasons
        return cls(mean("sm_mhz"), mean("power_w"), "+".join(reason_names(mask & ~0x1)))


class NvmlSampler:
    """Power draw (W), SM clock (MHz) and clock-event reasons of one GPU, from NVML (None where it does not answer)."""

    def __init__(self, index: int = 0):
        from kbench import hardware

        self.h = hardware._handle(index)
        self.nv = hardware._nvml

    def __call__(self) -> PowerSample:
        if self.h is None:
            return PowerSample(None, None, 0)
        nv = self.nv

        def get(fn, *a):
            try:
                return getattr(nv, fn)(self.h, *a)
            except Exception:
                return None
        mw = get("nvmlDeviceGetPowerUsage")
        sm = get("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM)
        fn = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
              else "nvmlDeviceGetCurrentClocksThrottleReasons")
        reasons = get(fn) or 0
        return PowerSample(mw / 1000 if mw is not None else None, float(sm) if sm is not None else None, int(reasons))


class BackgroundSampler:
    """Samples a `Sampler` every interval_s on a thread while a measurement runs (`with` block)."""

    def __init__(self, sampler: Sampler, interval_s: float = SETTLE_INTERVAL_S):
        import threading

        self.sampler, self.interval_s = sampler, interval_s
        self.samples: list[PowerSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(self.sampler())
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if not self.samples:
            self.samples.append(self.sampler())


@dataclass
class SustainedResult:
    measurement: object  # kbench.timer.Measurement
    settle: Settle
    summary: PowerSummary


def measure_sustained(timer, fn, copies: int, sampler: Sampler) -> SustainedResult:
    """Pre-load with fn until power and clock settle, then time fn back to back over the steady window,
    sampling NVML throughout. `timer`: a GraphTimer built with duty 1 and a StopRule whose min_time_s is the
    steady window (see `sustained_timer`)."""
    import torch

    def load():  # ~interval_s of back-to-back calls, then wait for them (keeps the queue short)
        t0 = time.perf_counter()
        i = 0
        while time.perf_counter() - t0 < SETTLE_INTERVAL_S:
            fn(i % copies)
            i += 1
            if i % 64 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()

    st = settle(sampler, load)
    with BackgroundSampler(sampler) as bg:
        m = timer.measure(fn, copies)
    return SustainedResult(m, st, PowerSummary.of(bg.samples))


def sustained_timer(timing):
    """The GraphTimer of the sustained state: duty 1, at least STEADY_WINDOW_S of samples, twice the budget."""
    from dataclasses import replace

    from kbench.timer import GraphTimer

    rule = timing.stop_rule()
    rule = replace(rule, min_time_s=max(rule.min_time_s, STEADY_WINDOW_S),
                   budget_s=max(rule.budget_s, 2 * STEADY_WINDOW_S), max_samples=max(rule.max_samples, 2000))
    return GraphTimer(rule, warmup_ms=timing.warmup_ms, duty=1.0)
