"""What kbench's timer costs (issue #29, cost per shape), on the CPU: GraphTimer run against a fake device whose
one clock advances by a kernel's time per call and by every sleep, so that the warm-up rule, the settle, the
stop rule, the duty cycle and the per-phase wall split can be checked exactly."""
from __future__ import annotations

import math

import pytest

from kbench.cases.scenario import Timing
from kbench.timing import timer as T


class FakeDevice:
    """One clock (s) for the host and the device: a call takes `kernel_ms` of it, a sleep its length."""

    def __init__(self, kernel_ms: float):
        self.kernel_ms = kernel_ms
        self.now = 100.0
        self.calls = 0
        self.busy_s = 0.0
        self.sleeps: list[float] = []

    def fn(self, i: int) -> None:
        self.calls += 1
        self.now += self.kernel_ms / 1000
        self.busy_s += self.kernel_ms / 1000

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def fake_event(d: FakeDevice, on_synchronize=lambda: None):
    """torch.cuda.Event on the fake device's clock; on_synchronize() when the host waits for it."""
    class Event:
        def __init__(self, enable_timing=True):
            self.t = None

        def record(self):
            self.t = d.now

        def synchronize(self):
            on_synchronize()

        def elapsed_time(self, end):  # ms, as torch.cuda.Event
            return (end.t - self.t) * 1000

    return Event


@pytest.fixture
def dev(monkeypatch):
    """A factory: dev(kernel_ms) patches the timer module onto a fresh FakeDevice."""
    import torch

    def make(kernel_ms: float) -> FakeDevice:
        d = FakeDevice(kernel_ms)
        Event = fake_event(d)

        class Graph:
            def __init__(self, fn, calls, copies):
                self.fn, self.calls, self.copies = fn, calls, copies

            def replay(self):
                for j in range(self.calls):
                    self.fn(j % self.copies)

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(T.GraphTimer, "_capture", staticmethod(lambda fn, calls, copies, fence=None:
                                                                   Graph(fn, calls, copies)))
        monkeypatch.setattr(T.time, "perf_counter", lambda: d.now)
        monkeypatch.setattr(T.time, "sleep", d.sleep)
        return d

    return make


def graph_timer(t: Timing) -> T.GraphTimer:
    return T.GraphTimer(t.stop_rule(), t.warmup_ms, duty=t.duty, settle_ms=t.settle_ms, fence=False)


# the defaults before issue #29 (the campaign's validate step times them as "before")
BEFORE = Timing(warmup_ms=25.0, settle_ms=20.0, min_time_s=0.1, min_samples=10)


@pytest.mark.parametrize("kernel_ms", [0.01, 0.3, 5.0, 16.0])
def test_the_phases_add_up_to_the_wall_in_their_order(dev, kernel_ms):
    d = dev(kernel_ms)
    start = d.now
    m = graph_timer(Timing()).measure(d.fn, copies=4)
    assert list(m.phases) == list(T.PHASES)
    assert math.isclose(sum(m.phases.values()), m.wall_s, rel_tol=1e-9)
    assert math.isclose(m.wall_s, d.now - start, rel_tol=1e-9)
    assert m.stop == "spread" and m.median_us == pytest.approx(kernel_ms * 1000)


@pytest.mark.parametrize("kernel_ms, calls", [(0.01, 500), (0.3, 17), (6.0, 1), (16.0, 1)])
def test_the_warm_up_is_sized_by_the_kernels_time(dev, kernel_ms, calls):
    """warmup_ms (5) of device time and at least one call: a 10 us kernel 500 calls (not 25 ms' 2,500), a 16 ms
    kernel one call (not 25 ms' worth rounded up to 8 calls, 128 ms)."""
    d = dev(kernel_ms)
    m = graph_timer(Timing()).measure(d.fn)
    assert m.phases["warmup"] == pytest.approx(calls * kernel_ms / 1000)
    assert m.phases["warmup"] >= min(Timing().warmup_ms / 1000, kernel_ms / 1000) - 1e-12


def test_warmup_next_never_overshoots_by_more_than_a_call():
    for per_call in (0.001, 0.01, 0.37, 2.0, 9.0):
        n, elapsed, looks = 0, 0.0, 0
        while more := T.warmup_next(n, elapsed, 5.0):
            n += more
            elapsed = n * per_call
            looks += 1
        assert elapsed >= 5.0 and (n - 1) * per_call < 5.0, per_call  # the first call count that reaches 5 ms
        assert looks <= 2 + math.ceil(math.log2(max(n, 1))) + 1  # doubling: a few looks at the clock, not n
    assert T.warmup_next(0, 0.0, 0.0) == 1  # no warm-up time still runs one call (sizes the graph)
    assert T.warmup_next(1, 0.5, 0.0) == 0
    assert T.warmup_next(2, 1.0, 5.0, min_calls=3) >= 1


def test_the_settle_is_the_dutys_share_of_the_busy_time_before_it(dev):
    d = dev(6.0)
    m = graph_timer(Timing()).measure(d.fn)
    busy_before = m.phases["warmup"] + m.phases["probe"]  # one 6 ms warm-up call, two 6 ms probe replays
    assert busy_before == pytest.approx(0.018)
    assert m.phases["settle"] == pytest.approx(busy_before * (1 / 0.4 - 1))  # 27 ms, as an 18 ms burst would get
    assert T.settle_s(1e4, 1.0) == 0 and T.settle_s(1e4, 0.4, settle_ms=20) == 0.02 and T.settle_s(0, 0.5) == 0


@pytest.mark.parametrize("kernel_ms", [0.36, 2.0])
def test_a_graphs_slow_first_replays_are_its_warm_up_not_its_samples(dev, monkeypatch, kernel_ms):
    """On an H100 a captured graph's first replays ran 12 to 21% slow after its eager warm-up (the first bs64
    decode rows of a sweep, docs/gate.md), so a short sweep (4 samples a row) timed that settling and its gate
    FAILed an unchanged kernel. The graph now gets warmup_ms of replays before the settle: a graph whose first
    three replays are 20% slow gives samples of the kernel's steady time, however few (before: the first three
    samples 20% slow, the median of 4 too)."""
    d = dev(kernel_ms)

    class SlowStart:
        def __init__(self, fn, calls, copies):
            self.fn, self.calls, self.copies, self.replays = fn, calls, copies, 0

        def replay(self):
            for j in range(self.calls):
                self.fn(j % self.copies)
                if self.replays < 3:
                    d.now += 0.2 * kernel_ms / 1000
            self.replays += 1

    monkeypatch.setattr(T.GraphTimer, "_capture", staticmethod(lambda fn, calls, copies, fence=None:
                                                               SlowStart(fn, calls, copies)))
    short = Timing(budget_s=0.0, min_samples=4, min_time_s=0.0)
    m = graph_timer(short).measure(d.fn)
    assert len(m.samples_us) >= 4 and max(m.samples_us) == pytest.approx(kernel_ms * 1000)
    assert m.phases["probe"] >= Timing().warmup_ms / 1000


def test_the_old_timing_settings_still_time_the_old_way(dev):
    """validate-timer --before with the old defaults: a 25 ms warm-up, a fixed 20 ms settle, >= 0.1 s and 10
    samples of sampling."""
    d = dev(0.05)
    m = graph_timer(BEFORE).measure(d.fn)
    assert m.phases["warmup"] == pytest.approx(0.025, abs=0.0001)
    assert m.phases["settle"] == pytest.approx(0.020)
    assert m.phases["sampling"] >= 0.1 and len(m.samples_us) >= 10


@pytest.mark.parametrize("kernel_ms", [0.01, 0.3, 16.0])
def test_the_sampling_keeps_the_duty_cycle(dev, kernel_ms):
    """Busy `duty` of the sampling time: each burst is followed by busy * (1/duty - 1) idle, except the last."""
    d = dev(kernel_ms)
    m = graph_timer(Timing()).measure(d.fn)
    sampling_busy = len(m.samples_us) * m.calls_per_sample * kernel_ms / 1000
    idle = m.phases["sampling"] - sampling_busy
    bursts = math.ceil(len(m.samples_us) / max(1, min(50, round(5000 / (m.calls_per_sample * kernel_ms * 1000)))))
    last_burst = sampling_busy / bursts
    assert idle == pytest.approx((sampling_busy - last_burst) * (1 / 0.4 - 1), rel=1e-6)


def test_the_new_defaults_cost_less_than_the_old_at_every_kernel_time(dev):
    """The point of the change: shorter at every kernel time, the same stop criterion (spread target)."""
    for kernel_ms in (0.01, 0.05, 0.3, 1.0, 5.0, 16.0):
        new = graph_timer(Timing()).measure(dev(kernel_ms).fn)
        old = graph_timer(BEFORE).measure(dev(kernel_ms).fn)
        assert new.wall_s < old.wall_s, kernel_ms
        assert new.stop == old.stop == "spread" and new.rel_spread <= Timing().spread_target


def test_the_stop_rule_waits_for_min_samples_and_min_time_then_stops_on_the_spread():
    rule = T.StopRule(spread_target=0.01, budget_s=2.0, min_samples=6, max_samples=50, min_time_s=0.05)
    flat = [100.0] * 6
    assert rule.check(flat[:5], started=0.0, now=1.0) is None  # 5 < min_samples
    assert rule.check(flat, started=0.0, now=0.049) is None  # before min_time_s
    assert rule.check(flat, started=0.0, now=0.05) == "spread"
    noisy = [100.0, 104.0, 97.0, 103.0, 99.0, 101.0]  # CI half-width of the median: (max-min)/2 = 3.5% > 1%
    assert rule.check(noisy, started=0.0, now=0.06) is None
    assert rule.check(noisy, started=0.0, now=2.0) == "budget"
    assert rule.check([100.0] * 50, started=0.0, now=0.0) == "max-samples"
    # six samples is the fewest with a finite 95% CI of the median: ranks 0 and 5, min to max (96.9% coverage)
    assert math.isinf(T.median_ci_halfwidth([1.0, 2.0])) and T.median_ci_halfwidth(sorted(noisy)) == 3.5


# --- validate-timer's cost figures: the rows, the JSON, the CLI (the GPU parts replaced) ------------------------

def _check(kernel, us, wall, fi_wall, before_wall=None, fi_spread=0.002):
    from kbench.engine.validate import TimerCheck

    phases = dict(zip(T.PHASES, (0.005, 0.002, 0.001, 0.001, 0.009, wall - 0.018)))
    before = None if before_wall is None else {"us": us, "wall_s": before_wall, "phases": {}, "samples": 12,
                                               "stop": "spread", "spread": 0.004, "iqr_rel": 0.003}
    return TimerCheck(kernel, f"bs1-q4-kv512-h32-{kernel}", us, us * 1.01, 1, us, us, us * 1.1, wall, fi_wall, 0.001,
                      phases=phases, case_s={"inputs_s": 0.3, "reference_s": 0.1, "check_s": 0.02},
                      kbench_samples=20, kbench_stop="spread", kbench_spread=0.003, kbench_iqr_rel=0.002,
                      flashinfer_samples=2500, flashinfer_spread=fi_spread, flashinfer_iqr_rel=0.05, before=before)


def test_the_wall_ratios_are_the_median_of_the_rows_and_the_ratio_of_the_totals():
    from kbench.engine.validate import phase_totals, spreads, wall_ratios

    rows = [_check("a", 10, 0.08, 0.10, 0.15), _check("b", 300, 0.09, 0.12, 0.16), _check("c", 16000, 0.30, 0.20, 0.45)]
    d = [r.to_dict() for r in rows]
    assert d[0]["wall_ratio"] == pytest.approx(0.8) and d[0]["before_wall_ratio"] == pytest.approx(1.5)
    w = wall_ratios(d)
    assert w["after"]["median"] == pytest.approx(0.8) and w["after"]["total"] == pytest.approx(0.47 / 0.42)
    assert w["before"]["median"] == pytest.approx(1.5) and w["before"]["total"] == pytest.approx(0.76 / 0.42)
    assert w["after"]["rows"] == 3
    assert "before" not in wall_ratios([_check("a", 10, 0.08, 0.10).to_dict()])
    tot = phase_totals(d)
    assert list(tot) == list(T.PHASES) and sum(tot.values()) == pytest.approx(0.47)
    assert phase_totals(d, "case_s")["inputs_s"] == pytest.approx(0.9)
    s, iqr = spreads([100.0, 101.0, 99.0, 100.0, 102.0, 98.0])
    assert s == pytest.approx(2.0 / 100) and iqr == pytest.approx(1.5 / 100)
    assert spreads([]) == (None, None)


def test_validate_timer_writes_the_ratios_and_the_phases_and_times_the_before_settings(tmp_path, monkeypatch):
    import json

    import torch
    from click.testing import CliRunner

    import kbench.engine.validate as V
    from kbench.cli.main import cli

    seen = {}

    def fake(names, on_row=None, timing=None, before=None, on_module=None):
        seen.update(timing=timing, before=before)
        on_module({"module": "batch_prefill_bf16_d128", "status": "built", "seconds": 113.2})
        on_module({"module": "fmha_v2_sm90", "status": "failed", "reason": "nvcc: out of memory"})
        rows = [_check("a", 10, 0.08, 0.10, 0.15), _check("b", 16000, 0.30, 0.20, 0.45)]
        broken = V.TimerCheck("c", "bs1-q4-kv512-h32-c", float("nan"), None, None, None, None, None, 0.0, None,
                              float("nan"), error="CUDA error: an illegal memory access")
        for r in rows + [broken]:
            on_row(r)
        return rows + [broken]

    monkeypatch.setattr(V, "validate_timer", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    old = tmp_path / "old.toml"
    old.write_text('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 1\nkv_len = 16\n[timing]\n'
                   'warmup_ms = 25.0\nsettle_ms = 20.0\nmin_time_s = 0.1\nmin_samples = 10\n')
    r = CliRunner().invoke(cli, ["validate-timer", "--out", tmp_path / "res", "--before", old], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert seen["timing"] == Timing() and seen["before"] == BEFORE
    # the modules the rows load are built first, a line each
    assert "module built 113 s batch_prefill_bf16_d128" in r.output
    assert "module failed fmha_v2_sm90: nvcc: out of memory" in r.output
    # a row that raised says why, as it comes and under the table, and is counted apart
    assert "  c bs1-q4-kv512-h32-c: error: CUDA error: an illegal memory access" in r.output
    assert "c bs1-q4-kv512-h32-c: not measured: CUDA error: an illegal memory access" in r.output
    assert "2/3 within 3% of CUPTI (1 not measured: an error, above)" in r.output
    data = json.loads((tmp_path / "res" / "validate-timer.json").read_text())
    assert data["timing"]["warmup_ms"] == Timing().warmup_ms and data["before_timing"]["settle_ms"] == 20.0
    assert data["wall_ratio"]["after"]["median"] == pytest.approx((0.8 + 1.5) / 2)
    assert data["wall_ratio"]["after"]["total"] == pytest.approx(0.38 / 0.30)
    assert data["wall_ratio"]["before"]["total"] == pytest.approx(0.60 / 0.30)
    assert [x["wall_ratio"] for x in data["rows"][:2]] == pytest.approx([0.8, 1.5])
    assert data["rows"][2]["error"] == "CUDA error: an illegal memory access"
    assert set(data["phase_totals_s"]) == set(T.PHASES)
    assert "kbench wall / bench_gpu_time wall (before): median 1.88x, total 2.00x" in r.output
    assert "kbench wall / bench_gpu_time wall (after): median 1.15x, total 1.27x" in r.output
    bad = CliRunner().invoke(cli, ["validate-timer", "--before", tmp_path / "none.toml"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        f"error: scenario file {str(tmp_path / 'none.toml')!r} does not exist"]


def test_validate_timer_counts_a_call_of_two_kernels_by_the_replays_cupti_profiled(monkeypatch):
    import torch
    from click.testing import CliRunner

    import kbench.engine.validate as V
    from kbench.cli.main import cli

    def fake(names, on_row=None, timing=None, before=None, on_module=None):
        rows = [V.TimerCheck("trtllm-fmha-v2", "bs4-q4-kv2048-h32.8.128-p64", kb, 35.53, 2, None, None, None, 0.1,
                             0.1, 0.001, cupti_span_us=39.70, cupti_profiled_us=prof, cupti_gap_us=3.8)
                for kb, prof in ((37.67, 39.5), (37.67, 37.6))]
        for r in rows:
            on_row(r)
        return rows

    monkeypatch.setattr(V, "validate_timer", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    r = CliRunner().invoke(cli, ["validate-timer"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "1/2 within 3% of CUPTI" in r.output  # the second row's events saw 5% less than CUPTI's span
    assert "same replays" in r.output and "-0.5%" in r.output and "-5.3%" in r.output


def test_the_gate_compares_a_run_with_the_new_defaults_to_the_committed_baselines_without_a_timer_warning():
    """The committed baselines were timed with the pre-#29 defaults (warmup 25 ms, min time 0.1 s, 10 samples):
    how long a row was sampled does not change what its median means, so no 'timed with different settings'
    warning; a different duty cycle still warns."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    from kbench.runs.manifest import GATE, Manifest, comparable

    base = json.loads((Path(__file__).resolve().parents[1] / "results/baselines/h200-draft-extend-kv4096"
                       / "manifest.json").read_text())
    assert base["timer"]["warmup_ms"] == 25.0 and base["timer"]["min_time_s"] == 0.1
    t = Timing()
    cand = {**base, "timer": {**base["timer"], **{k: v for k, v in asdict(t).items() if k in base["timer"]},
                              "settle_ms": t.settle_ms}}
    assert cand["timer"]["warmup_ms"] == t.warmup_ms != 25.0
    v = comparable(Manifest.from_dict(base), Manifest.from_dict(cand), GATE)
    assert not [w for w in v.warnings if "different settings" in w], v.warnings
    hot = {**cand, "timer": {**cand["timer"], "duty": 1.0}}
    w = [w for w in comparable(Manifest.from_dict(base), Manifest.from_dict(hot), GATE).warnings
         if "different settings" in w]
    assert len(w) == 1 and "duty 0.4 vs 1.0" in w[0] and "warmup" not in w[0]


# --- the fence's own time, taken off every sample, is timed in the state the samples are -----------------------

class RampingDevice(FakeDevice):
    """A fence (GraphTimer's one-element fill, launch-bound) costs `slow_us` until `ramp_ms` of device work has
    run since the start, then `fast_us`, as the H200's clocks ramp up from idle; the kernel's time does not move."""

    def __init__(self, kernel_ms: float, slow_us: float, fast_us: float, ramp_ms: float, launch_us: float = 0.0):
        super().__init__(kernel_ms)
        self.slow_us, self.fast_us, self.ramp_ms = slow_us, fast_us, ramp_ms
        self.launch_us = launch_us  # a graph launched on an idle GPU (after a synchronize) starts this late
        self.idle = True

    def fence(self) -> None:
        us = self.slow_us if self.busy_s * 1000 < self.ramp_ms else self.fast_us
        self.now += us / 1e6
        self.busy_s += us / 1e6


@pytest.fixture
def ramping(monkeypatch):
    def make(**kw) -> RampingDevice:
        d = RampingDevice(**kw)
        import torch

        # the host waited on an event: the next launch finds the GPU idle
        Event = fake_event(d, on_synchronize=lambda: setattr(d, "idle", True))

        class Graph:  # fn(i) and a fence per call, or fences alone
            def __init__(self, fn, calls, copies):
                self.fn, self.calls, self.copies = fn, calls, copies

            def replay(self):
                if d.idle:  # the GPU waits for the host's launch; queued behind other work it does not
                    d.now += d.launch_us / 1e6
                    d.idle = False
                for j in range(self.calls):
                    if self.fn is not None:
                        self.fn(j % self.copies)
                    d.fence()

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        class Fence:  # a one-element tensor: its device and address
            device = type("D", (), {"index": 0})()

            def data_ptr(self):
                return id(self)

        d.fences_made, d.captured_with = [], []

        def zeros(*a, **k):
            d.fences_made.append(Fence())
            return d.fences_made[-1]

        def capture(fn, calls, copies, fence=None):
            d.captured_with.append(fence)
            return Graph(fn, calls, copies)

        monkeypatch.setattr(torch, "zeros", zeros)
        monkeypatch.setattr(T.GraphTimer, "_capture", staticmethod(capture))
        monkeypatch.setattr(T.time, "perf_counter", lambda: d.now)
        monkeypatch.setattr(T.time, "sleep", d.sleep)
        return d

    return make


@pytest.mark.parametrize("kernel_ms", [0.016, 0.07, 0.3])
def test_the_fence_is_timed_during_the_sampling_not_once_while_the_clocks_ramp(ramping, kernel_ms):
    """The fence costs 4 us until 8 ms of device work has run, then 1.5 us. Timed once right after the 5 ms warm-up
    (kbench before December 2026), 4 us came off every sample of a kernel that the fence cost 1.5 us beside."""
    t = Timing()
    d = ramping(kernel_ms=kernel_ms, slow_us=4.0, fast_us=1.5, ramp_ms=8.0)
    timer = T.GraphTimer(t.stop_rule(), t.warmup_ms, duty=t.duty, settle_ms=t.settle_ms, fence=True)
    m = timer.measure(lambda i: d.fn(i))
    assert m.fence_us == pytest.approx(1.5)
    assert m.fence_replays >= 1 and m.median_us == pytest.approx(kernel_ms * 1000)
    # a second measurement of the same graph size times its fences again (a graph is captured once per size)
    m2 = timer.measure(lambda i: d.fn(i))
    assert m2.fence_us == pytest.approx(1.5) and m2.calls_per_sample == m.calls_per_sample
    assert len(timer._fence_runs) == 1


def test_cupti_call_time_takes_the_fences_off_by_name_and_count():
    """validate-timer's CUPTI figure: the events of a profiled sampling, 3 replays of 2 fenced calls (a 10 us
    kernel and a 2 us one per call) and 2 replays of 2 fences alone (1 us each)."""
    from kbench.engine.validate import call_time_from_profile

    call = [("attn", 10.0), ("merge", 2.0), ("fill", 1.0)]
    events = call * 6 + [("fill", 1.0)] * 4
    assert call_time_from_profile(events, {"fill"}, replays=3, fence_replays=2, calls=2) == (12.0, 2)
    # the call runs a kernel named as the fence (a 3 us fill): the fences come off at their median time
    events = [("attn", 10.0), ("fill", 3.0), ("fill", 1.0)] * 6 + [("fill", 1.0)] * 4
    assert call_time_from_profile(events, {"fill"}, 3, 2, 2) == (13.0, 2)
    # fewer fences than were launched: the profiler missed part of the sampling, no figure
    assert call_time_from_profile(call * 5, {"fill"}, 3, 2, 2) == (None, 0)
    assert call_time_from_profile([("fill", 1.0)] * 10, {"fill"}, 3, 2, 2) == (None, 0)


def _timeline(bursts: int, batch: int, calls: int, kernels_us: list[float], gap_us: float, fence_us: float,
              start_up_us: float = 5.0, fence_name: str = "fill") -> list[tuple[str, float, float]]:
    """CUPTI's (name, start, end) for a GraphTimer sampling: bursts of `batch` replays of `calls` fenced calls,
    each burst then one replay of `calls` fences; every node starts `gap_us` after the previous one ends, and
    every replay `start_up_us` after the previous replay ends (the graph's start-up)."""
    out, t = [], 0.0

    def node(name, us):
        nonlocal t
        out.append((name, t, t + us))
        t += us + gap_us

    for _ in range(bursts):
        for _ in range(batch):
            t += start_up_us
            for _ in range(calls):
                for j, k in enumerate(kernels_us):
                    node(f"k{j}", k)
                node(fence_name, fence_us)
        t += start_up_us
        for _ in range(calls):
            node(fence_name, fence_us)
    return out


@pytest.mark.parametrize("kernels_us,calls", [([30.0], 33), ([25.0, 6.0], 31), ([900.0], 1), ([40.0, 3.0, 1.0], 7)])
def test_cupti_span_is_kbench_arithmetic_on_cuptis_clock_and_the_gaps_are_what_is_left(kernels_us, calls):
    """replay_spans_from_profile: the span per call is the call's kernels plus one launch gap per kernel (the
    graph's start-up cancels against the fences-alone replay's, as in kbench's subtraction); the kernels' time is
    CUPTI's kernel durations; the gaps are the difference."""
    from kbench.engine.validate import replay_spans_from_profile

    gap, fence = 0.8, 1.5
    spans = _timeline(bursts=4, batch=5, calls=calls, kernels_us=kernels_us, gap_us=gap, fence_us=fence)
    got = replay_spans_from_profile(spans, replays=20, fence_replays=4, calls=calls)
    n = len(kernels_us)
    assert got["kernels_us"] == pytest.approx(sum(kernels_us))
    # a call: its kernels, a gap after each, the fence and the gap after it; the fences alone: fence + gap each
    assert got["span_us"] == pytest.approx(sum(kernels_us) + n * gap)
    assert got["gap_us"] == pytest.approx(n * gap)
    assert got["names"] == [f"k{j}" for j in range(n)] + ["fill"]  # one call's nodes, its fence last


def _row(kbench_us, kernels_us, n=1, span_us=None, profiled_us=None) -> dict:
    from kbench.engine.validate import TimerCheck

    r = TimerCheck("trtllm-fmha-v2", "bs4-q4-kv2048-h32.8.128-p64", kbench_us, kernels_us, n, None, None, None,
                   0.1, 0.1, 0.001, cupti_span_us=span_us, cupti_profiled_us=profiled_us)
    return r.to_dict()


def test_a_one_kernel_call_is_judged_against_its_kernels_cupti_time():
    from kbench.engine.validate import cupti_verdict

    assert cupti_verdict(_row(102.9, 100.0), 0.03) == (True, "kernels")
    assert cupti_verdict(_row(96.9, 100.0), 0.03) == (False, "kernels")
    # a span on the same replays does not widen a one-kernel call's target
    assert cupti_verdict(_row(104.0, 100.0, 1, span_us=104.5, profiled_us=104.4), 0.03) == (False, "kernels")
    assert cupti_verdict(_row(float("nan"), None), 0.03) == (None, "no CUPTI figure")


def test_a_call_of_several_kernels_is_judged_on_the_replays_cupti_profiled():
    """The H200's fmha-v2 row (December 2026): two kernels per call, 37.67 us by kbench, 35.53 us of kernels and a
    39.70 us span under CUPTI. kbench's events on the profiled replays must match CUPTI's span of them, and the
    unprofiled figure lie between the kernels' sum and the span."""
    from kbench.engine.validate import cupti_verdict

    assert cupti_verdict(_row(37.67, 35.53, 2, 39.70, 39.5), 0.03) == (True, "same replays")
    # the events saw less than CUPTI's span of the same replays: the timer's own error
    assert cupti_verdict(_row(37.67, 35.53, 2, 39.70, 37.6), 0.03) == (False, "same replays")
    # below the kernels' sum, or above the span, whatever the events on the profiled replays say
    assert cupti_verdict(_row(34.0, 35.53, 2, 39.70, 39.6), 0.03) == (False, "same replays")
    assert cupti_verdict(_row(41.5, 35.53, 2, 39.70, 39.6), 0.03) == (False, "same replays")
    assert cupti_verdict(_row(40.5, 35.53, 2, 39.70, 39.6), 0.03) == (True, "same replays")
    # no span (the profile did not split into the replays): the kernels' sum, as a one-kernel call
    assert cupti_verdict(_row(37.67, 35.53, 2), 0.03) == (False, "kernels")
    assert cupti_verdict(_row(36.0, 35.53, 2), 0.03) == (True, "kernels")


def test_cupti_span_refuses_a_profile_that_does_not_split_into_the_replays():
    from kbench.engine.validate import replay_spans_from_profile

    spans = _timeline(bursts=2, batch=3, calls=4, kernels_us=[10.0], gap_us=1.0, fence_us=1.0)
    assert replay_spans_from_profile(spans, 6, 2, 4) is not None
    assert replay_spans_from_profile(spans[:-1], 6, 2, 4) is None  # an event missed
    assert replay_spans_from_profile(spans, 6, 0, 4) is None  # no fences
    assert replay_spans_from_profile(spans, 7, 2, 4) is None  # replays not whole bursts
    assert replay_spans_from_profile([], 6, 2, 4) is None


@pytest.mark.parametrize("kernel_ms", [0.03, 0.07, 0.9])
def test_the_fence_is_timed_queued_behind_the_replays_not_on_an_idle_gpu(ramping, kernel_ms):
    """A graph launched on an idle GPU starts 20 us late (the host's launch latency). The fences alone, timed that
    way (kbench before December 2026), read 20 us / calls too long each and took it off every call: on the H200,
    6 to 23 us per call where the fences cost 1 to 3. Queued behind a burst's replays they cost what they cost."""
    t = Timing()
    d = ramping(kernel_ms=kernel_ms, slow_us=1.5, fast_us=1.5, ramp_ms=0.0, launch_us=20.0)
    m = T.GraphTimer(t.stop_rule(), t.warmup_ms, duty=t.duty, settle_ms=t.settle_ms, fence=True).measure(d.fn)
    assert m.fence_us == pytest.approx(1.5)
    assert m.median_us == pytest.approx(kernel_ms * 1000, rel=1e-3)


def test_every_graph_of_a_timer_is_captured_with_its_one_fence_tensor(ramping):
    """The fences graphs are kept (one per size) and replayed in later measurements, and a graph keeps the address
    it was captured with: so the fence tensor lives as long as the timer, one per device, and every graph of every
    measurement uses it. (A tensor per measurement, freed after it, left a kept graph zeroing memory that a later
    case had been given: illegal memory accesses in an H200 MLA sweep.)"""
    t = Timing()
    d = ramping(kernel_ms=0.05, slow_us=1.5, fast_us=1.5, ramp_ms=0.0)
    timer = T.GraphTimer(t.stop_rule(), t.warmup_ms, duty=t.duty, settle_ms=t.settle_ms, fence=True)
    for _ in range(3):
        timer.measure(d.fn)
    assert len(d.fences_made) == 1 and len(d.captured_with) == 4  # 3 kernel graphs and 1 fences graph, kept
    assert all(f is d.fences_made[0] for f in d.captured_with)
    assert timer.fence_tensor(0) is d.fences_made[0]


def test_a_run_whose_fences_were_timed_the_old_way_gates_with_a_timer_warning():
    """The committed baselines timed their fences on an idle GPU (launch latency included): a run of this kbench
    says how it times them (FENCE_METHOD), and the gate warns that differences may come from the timer."""
    import json
    from pathlib import Path

    from kbench.runs.manifest import GATE, Manifest, comparable

    base = json.loads((Path(__file__).resolve().parents[1] / "results/baselines/h200-draft-extend-kv4096"
                       / "manifest.json").read_text())
    cand = {**base, "timer": {**base["timer"], "fence": T.FENCE_METHOD}}
    w = [w for w in comparable(Manifest.from_dict(base), Manifest.from_dict(cand), GATE).warnings
         if "different settings" in w]
    assert len(w) == 1 and "fence" in w[0] and "queued behind each burst" in w[0]
    same = comparable(Manifest.from_dict(cand), Manifest.from_dict(cand), GATE).warnings
    assert not [x for x in same if "different settings" in x]


def test_first_samples_counts_the_rows_whose_first_replays_ran_slow(tmp_path):
    """benchmarks/first_samples.py (docs/gate.md's GPU table): per run folder, the rows whose second sample is
    more than 5% above the row's median, and the median first-sample ratio; a folder without runs is one line,
    exit 2, and so is a run whose rows kbench's reader refuses (a line that is not JSON, before the last)."""
    import subprocess
    import sys
    from pathlib import Path

    from gate_synth import CASE_A, timed_row, write_run

    samples = [[120.0, 118.0, 104.0] + [100.0] * 10,  # slow start: 2nd sample 18% above
               [103.0, 100.0, 100.0] + [100.0] * 10,  # only the burst's first replay
               [100.0] * 12, []]
    rows = []
    for i, s in enumerate(samples):
        r = timed_row("trtllm-decode", "decode", CASE_A, 100.0, seed=i)
        r.samples_us, r.num_samples = s, len(s)
        rows.append(r)
    run = write_run(tmp_path / "runs" / "aa1-20261207-000000", rows)
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "first_samples.py"
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True)
    assert p.returncode == 0 and "rows   3  second sample >5% slow:   1  first / median 1.030" in p.stdout, p.stdout
    bad = subprocess.run([sys.executable, str(script), str(tmp_path / "none")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout.strip().count("\n") == 0 and "no run folders" in bad.stdout
    journal = (run / "rows.jsonl").read_text().splitlines(keepends=True)
    (run / "rows.jsonl").write_text(journal[0] + "not json\n" + "".join(journal[1:]))
    torn = subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True)
    assert torn.returncode == 2 and "Traceback" not in torn.stderr, torn.stderr
    assert torn.stdout.strip().count("\n") == 0 and "rows.jsonl: line 2 is not valid JSON" in torn.stdout, torn.stdout
