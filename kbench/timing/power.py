"""The `sustained` timing state (issue #16): a kernel timed after the GPU reached its steady state under
continuous load, at its power cap.

How:
- once per process, before its first sustained kernel, a heat soak: that kernel back to back until the GPU
  temperature stops rising (at most SOAK_MAX_S), so the first rows of a sweep do not run on a cooler chip than
  the rest (at the power cap a cooler chip leaks less and clocks higher);
- before every kernel the same pre-load (the kernel itself, back to back) until NVML power draw and SM clock
  settle -- the mean of the last `window` samples within `band` of the mean of the `window` before them -- or
  until `timeout_s` (the row then says so). At the cap the power controller oscillates: a band on single
  samples timed out on the H200 while the mean was steady, so the mean is what is judged;
- then the timing back to back (duty 1) over a steady window of at least STEADY_WINDOW_S, NVML sampled
  throughout. Each row records the mean SM clock, power draw and GPU temperature and the throttle reasons
  seen while it was timed.

The settle logic takes any `Sampler` (a callable returning a `PowerSample`), so it is tested on the CPU
against a fake sequence of readings; `NvmlSampler` reads the real GPU.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

# settle: the mean of the last WINDOW samples of power and of SM clock within BAND of the mean of the WINDOW
# before them, sampled every INTERVAL_S
SETTLE_WINDOW = 6
SETTLE_BAND = 0.01
SETTLE_INTERVAL_S = 0.05
SETTLE_TIMEOUT_S = 3.0
MIN_PRELOAD_S = 0.3  # the H200 reaches its power cap within ~0.1 s; at least this much load before settling
STEADY_WINDOW_S = 1.0  # sustained timing samples for at least this long (the unthrottled default: none)
# heat soak, once per process: load until the temperature rose at most SOAK_RISE_C over the last SOAK_TREND_S
SOAK_TREND_S = 5.0
SOAK_RISE_C = 1.0
SOAK_MAX_S = 40.0

# NVML clock-event (throttle) reason bits -> short names
REASONS = {
    0x1: "gpu-idle", 0x2: "app-clocks", 0x4: "sw-power-cap", 0x8: "hw-slowdown", 0x10: "sync-boost",
    0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power-brake", 0x100: "display-clocks",
}


def reason_names(mask: int) -> list[str]:
    return [n for bit, n in REASONS.items() if mask & bit] + ([f"0x{mask & ~sum(REASONS):x}"]
                                                              if mask & ~sum(REASONS) else [])


@dataclass(frozen=True)
class PowerSample:
    power_w: float | None
    sm_mhz: float | None
    reasons: int = 0  # NVML clock-event reasons bitmask
    temp_c: float | None = None  # GPU temperature


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


def is_settled(samples: list[PowerSample], window: int = SETTLE_WINDOW, band: float = SETTLE_BAND) -> bool:
    """Power and SM clock each at a steady mean: the mean of the last `window` samples within `band` (relative)
    of the mean of the `window` samples before them. A steady oscillation (the power controller at the cap)
    is settled; a ramp is not. A reading NVML does not give (None) is not judged; with neither, there is
    nothing to wait for."""
    if len(samples) < 2 * window:
        return False
    last, before = samples[-window:], samples[-2 * window:-window]
    for attr in ("power_w", "sm_mhz"):
        a, b = ([getattr(s, attr) for s in part] for part in (last, before))
        if any(v is None for v in a + b):
            continue
        ma, mb = statistics.fmean(a), statistics.fmean(b)
        if ma <= 0 or abs(ma - mb) / ma > band:
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
            means = []
            for attr, unit in (("power_w", "W"), ("sm_mhz", "MHz")):
                parts = [[getattr(s, attr) for s in p if getattr(s, attr) is not None]
                         for p in (samples[-2 * window:-window], samples[-window:])]
                if all(parts):
                    means.append(f"{attr.split('_')[0]} mean {statistics.fmean(parts[0]):.0f} -> "
                                 f"{statistics.fmean(parts[1]):.0f} {unit}")
            return Settle(False, now - t0, samples,
                          f"timeout after {timeout_s:g}s ({', '.join(means) or 'no readings'}; "
                          f"wanted the mean of the last {window} samples within {band:.0%} of the {window} before)")


@dataclass
class Soak:
    settled: bool
    seconds: float
    temp_start_c: float | None
    temp_end_c: float | None

    @property
    def line(self) -> str:
        if self.temp_start_c is None or self.temp_end_c is None:
            return f"heat soak {self.seconds:.1f} s (no temperature reading)"
        how = "temperature steady" if self.settled else "still rising at its time limit"
        return f"heat soak {self.seconds:.1f} s: {self.temp_start_c:.0f} -> {self.temp_end_c:.0f} C ({how})"


def soak(sampler: Sampler, load: Callable[[], None], trend_s: float = SOAK_TREND_S, rise_c: float = SOAK_RISE_C,
         max_s: float = SOAK_MAX_S, interval_s: float = SETTLE_INTERVAL_S,
         clock: Callable[[], float] = time.perf_counter) -> Soak:
    """Run `load()` until the GPU temperature rose at most `rise_c` over the last `trend_s` seconds (after
    at least `trend_s` of load), or `max_s`. Without a temperature reading: `trend_s` of load and done."""
    t0 = clock()
    temps: list[tuple[float, float]] = []  # (time, temperature)
    next_sample = t0
    while True:
        load()
        now = clock()
        if now >= next_sample:
            t = sampler().temp_c
            next_sample = now + interval_s
            if t is not None:
                temps.append((now, t))
            if now - t0 >= trend_s:
                if not temps:
                    return Soak(True, now - t0, None, None)
                ago = [v for (w, v) in temps if w <= now - trend_s]
                if ago and temps[-1][1] - ago[-1] <= rise_c:
                    return Soak(True, now - t0, temps[0][1], temps[-1][1])
        if now - t0 >= max_s:
            return Soak(False, now - t0, temps[0][1] if temps else None, temps[-1][1] if temps else None)


@dataclass
class PowerSummary:
    """What a row records of the samples taken while it was timed."""
    sm_clock_mean_mhz: float | None
    power_mean_w: float | None
    throttle_reasons: str  # names joined by '+', '' when none
    temp_mean_c: float | None = None

    @classmethod
    def of(cls, samples: list[PowerSample]) -> "PowerSummary":
        def mean(attr):
            vals = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
            return statistics.fmean(vals) if vals else None
        mask = 0
        for s in samples:
            mask |= s.reasons
        return cls(mean("sm_mhz"), mean("power_w"), "+".join(reason_names(mask & ~0x1)), mean("temp_c"))

    def columns(self) -> dict:
        """The row columns (kbench.runs.rows) this summary fills."""
        return dict(sm_clock_mean_mhz=self.sm_clock_mean_mhz, power_w=self.power_mean_w,
                    throttle_reasons=self.throttle_reasons, gpu_temp_c=self.temp_mean_c)


class NvmlSampler:
    """Power draw (W), SM clock (MHz) and clock-event reasons of one GPU, from NVML (None where it does not answer)."""

    def __init__(self, index: int = 0):
        from kbench.timing import hardware
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
        temp = get("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU)
        fn = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
              else "nvmlDeviceGetCurrentClocksThrottleReasons")
        reasons = get(fn) or 0
        return PowerSample(mw / 1000 if mw is not None else None, float(sm) if sm is not None else None, int(reasons),
                           float(temp) if temp is not None else None)


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
    measurement: object  # kbench.timing.timer.Measurement
    settle: Settle
    summary: PowerSummary
    soak: Soak | None = None  # the heat soak, when this measurement began with one


def measure_sustained(timer, fn, copies: int, sampler: Sampler, soak_first: bool = False) -> SustainedResult:
    """(With soak_first: a heat soak with fn first.) Pre-load with fn until power and clock settle, then time fn
    back to back over the steady window, sampling NVML throughout. `timer`: a GraphTimer built with duty 1 and
    a StopRule whose min_time_s is the steady window (see `sustained_timer`)."""
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

    hot = soak(sampler, load) if soak_first else None
    st = settle(sampler, load)
    with BackgroundSampler(sampler) as bg:
        m = timer.measure(fn, copies)
    return SustainedResult(m, st, PowerSummary.of(bg.samples), hot)


def sustained_timer(timing):
    """The GraphTimer of the sustained state: duty 1, at least STEADY_WINDOW_S of samples, twice the budget."""
    from dataclasses import replace

    from kbench.timing.timer import GraphTimer

    rule = timing.stop_rule()
    rule = replace(rule, min_time_s=max(rule.min_time_s, STEADY_WINDOW_S),
                   budget_s=max(rule.budget_s, 2 * STEADY_WINDOW_S), max_samples=max(rule.max_samples, 2000))
    return GraphTimer(rule, warmup_ms=timing.warmup_ms, duty=1.0)
