"""How a case is timed, state by state (kbench.timing.power, kbench.timing.states): the settle logic against a fake
NVML sampler, the heat soak, the power summary, the sustained measurement's order (pre-load until settled, then
timing with NVML sampled) and the timing-state registry the `power` axis takes its values from. (The `power` axis
through rows, report, select and gate: test_power_state.py.)"""
from __future__ import annotations

import pytest

from kbench.timing.power import PowerSample, PowerSummary, is_settled, settle, soak


# ---- the settle logic against a fake NVML sampler ------------------------------------------------------
class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run_settle(readings, timeout_s=2.0, **kw):
    clk = FakeClock()
    it = iter(readings)
    last = [None]

    def sampler():
        try:
            last[0] = next(it)
        except StopIteration:
            pass
        return last[0]

    def load():
        clk.t += 0.05  # each burst of load takes 50 ms

    return settle(sampler, load, window=4, band=0.02, interval_s=0.05, timeout_s=timeout_s, min_load_s=0.1,
                  clock=clk, **kw)


def test_settles_once_power_and_clock_stop_moving():
    ramp = [PowerSample(300 + 80 * i, 1980 - 60 * i, 0) for i in range(5)]  # climbing to the cap
    steady = [PowerSample(700 + (i % 2) * 3, 1740 + (i % 3) * 5, 0x4) for i in range(40)]
    st = _run_settle(ramp + steady)
    assert st.settled and st.note == ""
    assert len(st.samples) == 5 + 2 * 4  # the ramp, then exactly two windows of steady readings
    assert st.seconds == pytest.approx(0.05 * 13)


def test_the_power_controller_oscillating_at_the_cap_is_settled():
    # what timed out on the H200 with a band on single samples: the readings swing, their mean does not move
    swing = [PowerSample(640 if i % 2 else 720, 1700 if i % 2 else 1800, 0x4) for i in range(200)]
    st = _run_settle(swing, timeout_s=1.0)
    assert st.settled and len(st.samples) == 8


def test_a_drift_never_settles_times_out_with_the_reason():
    drift = [PowerSample(500 + 8 * i, 1980 - 10 * i, 0x4) for i in range(200)]  # still heating up
    st = _run_settle(drift, timeout_s=1.0)
    assert not st.settled
    assert st.seconds >= 1.0
    assert "timeout after 1s" in st.note and "power mean" in st.note and "sm mean" in st.note
    assert "within 2% of the 4 before" in st.note


def test_clock_alone_moving_is_not_settled():
    moving = [PowerSample(700, 1700 + 20 * i, 0) for i in range(8)]
    assert not is_settled(moving, window=4, band=0.02)
    assert is_settled([PowerSample(700, 1740, 0)] * 8, window=4, band=0.02)
    assert not is_settled([PowerSample(700, 1740, 0)] * 7, window=4, band=0.02)  # two windows needed
    assert is_settled([PowerSample(None, 1740, 0)] * 8, window=4, band=0.02)  # no power reading: clock judged


def _run_soak(temps, **kw):
    clk = FakeClock()
    it = iter(temps)

    def sampler():
        return PowerSample(700, 1740, 0x4, next(it, temps[-1]))

    def load():
        clk.t += 0.5
    return soak(sampler, load, trend_s=2.0, rise_c=1.0, max_s=10.0, interval_s=0.5, clock=clk, **kw)


def test_heat_soak_waits_until_the_temperature_stops_rising():
    rising = [40 + 2 * i for i in range(8)] + [55.0] * 100  # +2 C per 0.5 s, then flat at 55
    hot = _run_soak(rising)
    assert hot.settled and hot.temp_start_c == 40 and hot.temp_end_c == 55
    # readings every 0.5 s: 54 C at t=4.0, 55 from t=4.5; at t=6.0 the reading 2 s earlier (54) is within 1 C
    assert hot.seconds == pytest.approx(6.0)
    assert "40 -> 55 C (temperature steady)" in hot.line


def test_heat_soak_stops_at_its_limit_and_says_so():
    hot = _run_soak([40 + i for i in range(100)])
    assert not hot.settled and hot.seconds == pytest.approx(10.0)
    assert "still rising" in hot.line


def test_heat_soak_without_a_temperature_reading_loads_for_the_trend_window():
    hot = _run_soak([None])
    assert hot.settled and hot.seconds == pytest.approx(2.0) and "no temperature" in hot.line


def test_summary_means_and_reasons():
    s = PowerSummary.of([PowerSample(700, 1700, 0x4), PowerSample(690, 1760, 0x4 | 0x1), PowerSample(None, None, 0)])
    assert s.power_mean_w == pytest.approx(695) and s.sm_clock_mean_mhz == pytest.approx(1730)
    assert s.throttle_reasons == "sw-power-cap"  # idle is not a throttle reason
    assert PowerSummary.of([PowerSample(300, 1980, 0)]).throttle_reasons == ""


# ---- the sustained measurement's order: pre-load until settled, then timing with NVML sampled -----------
def test_measure_sustained_preloads_then_times_with_samples(monkeypatch):
    import torch

    import kbench.timing.power as P

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(P, "MIN_PRELOAD_S", 0.0)
    monkeypatch.setattr(P, "SETTLE_INTERVAL_S", 0.001)
    events = []
    readings = iter([PowerSample(300, 1980, 0), PowerSample(650, 1800, 0x4)] + [PowerSample(700, 1740, 0x4)] * 10000)

    def sampler():
        return next(readings)

    class FakeTimer:
        def measure(self, fn, copies):
            events.append("timed")
            return "measurement"

    r = P.measure_sustained(FakeTimer(), lambda i: events.append("call") if not events or events[-1] != "call" else None,
                            1, sampler)
    assert events[0] == "call" and events[-1] == "timed"  # load ran before the timing
    assert r.measurement == "measurement" and r.settle.settled
    assert r.settle.samples[-1] == PowerSample(700, 1740, 0x4) and len(r.settle.samples) >= P.SETTLE_WINDOW
    assert r.summary.throttle_reasons == "sw-power-cap" and r.summary.sm_clock_mean_mhz == pytest.approx(1740)


def test_the_heat_soak_comes_once_before_the_first_sustained_kernel_and_is_said(monkeypatch):
    """The sustained timing state soaks the GPU once per process (before its first sustained kernel); every
    sustained row records temperature with the other power columns, and the first row's reason says how the
    soak went."""
    import kbench.timing.power as P
    from kbench.cases.scenario import load_scenario
    from kbench.timing.states import Timers

    calls = []

    def fake_measure(timer, fn, copies, sampler, soak_first=False):
        calls.append(soak_first)
        hot = P.Soak(True, 12.5, 41.0, 63.0) if soak_first else None
        return P.SustainedResult("m", P.Settle(True, 0.6), P.PowerSummary(1740.0, 690.0, "sw-power-cap", 63.5), hot)

    monkeypatch.setattr(P, "measure_sustained", fake_measure)
    monkeypatch.setattr(P, "NvmlSampler", lambda index: None)
    monkeypatch.setattr(P, "sustained_timer", lambda timing: "timer")
    said = []
    timers = Timers(load_scenario("draft-extend").timing, cuda=True, progress=said.append)
    first = timers.time("sustained", lambda i: None, 1)
    second = timers.time("sustained", lambda i: None, 1)
    assert calls == [True, False]
    assert first.note == "heat soak 12.5 s: 41 -> 63 C (temperature steady)" and second.note == ""
    assert first.clock_mhz == 1740.0 and first.measurement == "m"
    assert first.columns["gpu_temp_c"] == 63.5 and first.columns["power_w"] == 690.0
    assert first.columns["power_settle"] == ""
    assert [s for s in said if "heat soak" in s] == [said[0]]  # said once, when the state is made


# ---- the timing-state registry ------------------------------------------------------------------------------
def test_how_a_case_is_timed_is_decided_by_its_state_alone():
    """The timing-state registry is the power axis's list of values; on a GPU the unthrottled state times with
    [timing].duty and the sustained state back to back whatever duty says; without CUDA every state is the
    wall clock (and one timer serves them all)."""
    from dataclasses import replace

    from kbench.cases import axes
    from kbench.cases.scenario import load_scenario
    from kbench.timing import states

    assert axes.AXIS["power"].allowed == tuple(states.STATES) == states.POWER_STATES
    timing = replace(load_scenario("draft-extend").timing, duty=0.25)
    gpu = states.Timers(timing, cuda=True)
    assert gpu.state("unthrottled").timer.duty == 0.25
    cpu = states.Timers(timing, cuda=False)
    assert cpu.state("sustained") is cpu.state("unthrottled") and cpu.state("sustained").name == "wall-clock"
    t = cpu.time("sustained", lambda i: sum(range(50)), 1)
    assert t.measurement.timer == "wall-clock" and t.clock_mhz is None and t.note == "" and t.columns == {}
