"""The timing states a case can be measured in: a registry of small objects, each timing a callable its way and
returning the measurement with what its row records (SM clock, a note, more columns). The `power` axis takes its
allowed values from STATES (kbench.cases.axes); kbench.engine.measure asks `Timers` how to time a case.

  unthrottled  duty-cycled CUDA-graph timer (GPU busy `[timing].duty` of the time, off the power cap; the
               default), NVML sampled in the background, re-measured once after SM clock throttling
  sustained    after a pre-load to the steady state at the power cap, back to back (kbench.timing.power)
  wall-clock   on a machine without CUDA, every state: the host clock around each call (only the reference
               runs there)

How to time is decided here alone: `[timing].duty` is a setting of the unthrottled state (the sustained state
runs back to back whatever it says), and a state is chosen by the case's `power` and the device.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

# a measurement whose SM clock ends below this fraction of the maximum is repeated after a pause
THROTTLE_FRAC = 0.9
THROTTLE_RETRIES = 1
THROTTLE_PAUSE_S = 0.3


@dataclass
class Timed:
    """One timed kernel: the measurement (kbench.timing.timer.Measurement) and what its row records."""
    measurement: object
    clock_mhz: float | None = None  # the row's sm_clock_mhz
    note: str = ""  # the row's reason ("" when the timing went as planned)
    columns: dict = field(default_factory=dict)  # more row columns (kbench.runs.rows: power_w, gpu_temp_c, ...)


class TimingState:
    """Times `fn(i)` (i: the input copy) on `copies` rotating copies. Made once per process, on first use."""
    name = ""

    def __init__(self, timing, device_index: int = 0, progress: Callable[[str], None] | None = None):
        """timing: the scenario's [timing] table (kbench.cases.scenario.Timing: stop_rule(), warmup_ms, duty)."""

    def time(self, fn: Callable[[int], object], copies: int, eager: bool = False) -> Timed:
        """eager: the calls launched from Python one after the other, no CUDA graph (an eager route's timing)."""
        raise NotImplementedError


class WallClock(TimingState):
    """Without CUDA: the host wall clock around each call (kbench.timing.timer.WallClockTimer)."""
    name = "wall-clock"

    def __init__(self, timing, device_index: int = 0, progress=None):
        from kbench.timing.timer import WallClockTimer

        self.timer = WallClockTimer(timing.stop_rule())

    def time(self, fn, copies: int, eager: bool = False) -> Timed:
        return Timed(self.timer.measure(fn, copies))  # the host clock around each call: eager either way


class Unthrottled(TimingState):
    """Duty-cycled CUDA-graph replays (kbench.timing.timer.GraphTimer), NVML sampled throughout so that both
    states record what they ran at; when the SM clock has dropped below THROTTLE_FRAC of its maximum (power or
    thermal throttling, seen on the H200 as 7% slower rows between back-to-back sweeps), pause and measure again."""
    name = "unthrottled"

    def __init__(self, timing, device_index: int = 0, progress=None):
        from kbench.timing.timer import GraphTimer

        self.index = device_index
        self.timer = GraphTimer(timing.stop_rule(), warmup_ms=timing.warmup_ms, duty=timing.duty,
                                settle_ms=timing.settle_ms)

    def time(self, fn, copies: int, eager: bool = False) -> Timed:
        from kbench.timing.power import BackgroundSampler, NvmlSampler, PowerSummary

        with BackgroundSampler(NvmlSampler(self.index)) as bg:
            m, clock, note = self._unthrottled(fn, copies, eager)
        return Timed(m, clock, note, PowerSummary.of(bg.samples).columns())

    def _unthrottled(self, fn, copies: int, eager: bool = False):
        from kbench.timing.hardware import clocks

        m = self.timer.measure(fn, copies, **({"eager": True} if eager else {}))
        for attempt in range(THROTTLE_RETRIES + 1):
            c = clocks(self.index)
            clock, top = c.get("sm_mhz"), c.get("sm_max_mhz")
            if clock is None or not top or clock >= THROTTLE_FRAC * top:
                return m, clock, "" if attempt == 0 else f"re-measured {attempt}x after SM clock throttling"
            if attempt == THROTTLE_RETRIES:
                break
            time.sleep(THROTTLE_PAUSE_S)
            m = self.timer.measure(fn, copies, **({"eager": True} if eager else {}))
        return m, clock, f"SM clock {clock:.0f} MHz < {THROTTLE_FRAC:.0%} of max {top:.0f} MHz: throttled"


class Sustained(TimingState):
    """kbench.timing.power: a heat soak before the first kernel of the process, then before every kernel a
    pre-load until power and clock settle, then back to back (duty 1) over a steady window, NVML sampled."""
    name = "sustained"

    def __init__(self, timing, device_index: int = 0, progress=None):
        from kbench.timing import power

        self.timer = power.sustained_timer(timing)
        self.sampler = power.NvmlSampler(device_index)
        self.soaked = False
        (progress or (lambda text: None))("sustained state: heat soak (the GPU under load until its temperature "
                                          "is steady)")

    def time(self, fn, copies: int, eager: bool = False) -> Timed:
        from kbench.timing import power

        if eager:
            raise ValueError("eager routes are timed in the unthrottled state only (power unthrottled)")
        first, self.soaked = not self.soaked, True
        r = power.measure_sustained(self.timer, fn, copies, self.sampler, soak_first=first)
        note = "; ".join(x for x in (r.soak.line if r.soak else "", r.settle.note) if x)
        return Timed(r.measurement, r.summary.sm_clock_mean_mhz, note,
                     dict(**r.summary.columns(), power_settle=r.settle.note))


# the states a case can ask for (the power axis's values), in axis order; the first is the default
STATES: dict[str, type[TimingState]] = {"unthrottled": Unthrottled, "sustained": Sustained}
POWER_STATES = tuple(STATES)
DEFAULT_STATE = POWER_STATES[0]
WALL_CLOCK = WallClock  # every state, on a machine without CUDA


def states_of(rows) -> list[str]:
    """The timing states a rows DataFrame holds, in axis order (an older run without the column: unthrottled)."""
    if "power" not in rows.columns:
        return [DEFAULT_STATE]
    return [s for s in POWER_STATES if (rows["power"] == s).any()]


class Timers:
    """The one place that decides how a case is timed: its `power` state on a GPU, the wall clock without one.
    Each state is made on first use (the sustained state's heat soak is once per process)."""

    def __init__(self, timing, cuda: bool, device_index: int = 0, progress: Callable[[str], None] | None = None):
        self.timing, self.cuda, self.index = timing, cuda, device_index
        self.progress = progress or (lambda text: None)
        self._made: dict[str, TimingState] = {}

    def state(self, power: str) -> TimingState:
        kind = STATES[power] if self.cuda else WALL_CLOCK
        if kind.name not in self._made:
            self._made[kind.name] = kind(self.timing, self.index, self.progress)
        return self._made[kind.name]

    def time(self, power: str, fn: Callable[[int], object], copies: int, eager: bool = False) -> Timed:
        return self.state(power).time(fn, copies, eager=eager)
