"""Is kbench's timer right? Each kernel at shapes from ~10 us to ~5 ms, timed three ways:

- kbench: CUDA-graph replay with events, input rotation (the sweep's timer);
- CUPTI (through torch.profiler), the independent clock, three ways:
  * cupti_us: the device time of the call's kernels in the replays of a second kbench measurement of the
    row, the profiler on during its sampling only (warm-up, settle and duty-cycled bursts as the sweep's):
    the same execution in the same GPU state, another clock, no launch gaps. The fences are told from the
    call's kernels by their kernel name and count and taken off (before December 2026: five replays of the
    graph profiled after an idle pause, a different stretch of GPU time from the one kbench timed);
  * cupti_span_us: kbench's own arithmetic on CUPTI's timestamps of those replays (a replay's first start to
    its last end, less the fences-alone replay's, per call): the launch gaps between the graph's nodes are
    in it as they are in kbench's figure, so kbench against it is the timer's own error, and
    cupti_gap_us (span less the kernels' median time) is how much of kbench over cupti_us is gaps;
  * cupti_alone_us: eager calls one at a time (synchronised, as Nsight Compute serialises them);
  * cupti_b2b_us: eager calls back to back: with programmatic dependent launch a kernel starts during
    its predecessor and CUPTI counts the overlap twice (xqa on the H200: 137 us back to back, 73 alone);
- FlashInfer's own harness, `flashinfer.testing.bench_gpu_time(fn)` with its defaults, with its wall time.

Each timer starts after a COOL_S idle pause and the eager CUPTI bursts hold at most ~CUPTI_BURST_US of
GPU work, so that they see the GPU off its power cap as the sweep's duty-cycled timer does (see
kbench.timing.timer). The eager ways still differ from a graph in GPU state (a call that starts on an
idle GPU, launch gaps), which is why the same-replay CUPTI figure is the one the target is checked on.

Cost (issue #29): each row keeps where kbench's timer spent its wall (`phases`: warmup, capture, fence, probe,
settle, sampling; they add up to `kbench_wall_s`), what the case cost before it (`case_s`: inputs and reference
per shape, prepare and check per kernel) and the spread of both harnesses (the relative half-width of the 95%
CI of the median, and the IQR over the median, of each one's samples). With `before` (a Timing, e.g. older
defaults) each row is timed a second time with it, by kbench's timer alone, so that one run compares the walls
of two timing settings against the same bench_gpu_time wall (`wall_ratios`).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

from kbench.cases.case import Case
from kbench.errors import first_line
from kbench.timing.check import compare, tolerance_for
from kbench.kernels.inputs import build_inputs
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import select
from kbench.timing.timer import GraphTimer, Measurement, median_ci_halfwidth, quantile
from kbench.cases.models import MODELS
from kbench.engine.measure import kernel_reason

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
    phases: dict = field(default_factory=dict)  # kbench's timer: seconds per phase (kbench.timing.timer.PHASES)
    case_s: dict = field(default_factory=dict)  # inputs_s, reference_s (the shape's, shared), check_s (this kernel)
    kbench_samples: int = 0
    kbench_stop: str = ""
    kbench_spread: float | None = None  # relative 95% CI half-width of the median
    kbench_iqr_rel: float | None = None  # IQR / median of the samples
    flashinfer_samples: int = 0
    flashinfer_spread: float | None = None
    flashinfer_iqr_rel: float | None = None
    before: dict | None = None  # the same kernel timed with the `before` Timing: us, wall_s, phases, spread, stop
    # the same replays on CUPTI's timestamps (replay_spans_from_profile): kbench's arithmetic on CUPTI's clock (span,
    # launch gaps included), the call's kernels as a median over the replays, and the gaps per call between them
    cupti_span_us: float | None = None
    cupti_kernels_us: float | None = None
    cupti_gap_us: float | None = None
    # kbench's events on the very replays CUPTI profiled (that measurement's own median): against cupti_span_us,
    # the same replays on two clocks; and the call's device activities as CUPTI names them, in order
    cupti_profiled_us: float | None = None
    cupti_names: list = field(default_factory=list)

    @property
    def wall_ratio(self) -> float | None:
        """kbench's timer wall over bench_gpu_time's for this row."""
        return self.kbench_wall_s / self.flashinfer_wall_s if self.flashinfer_wall_s and self.kbench_wall_s else None

    @property
    def before_wall_ratio(self) -> float | None:
        b = self.before
        return b["wall_s"] / self.flashinfer_wall_s if b and self.flashinfer_wall_s and b.get("wall_s") else None

    @property
    def cupti_diff(self) -> float | None:
        return None if not self.cupti_us else self.kbench_us / self.cupti_us - 1

    @property
    def span_diff(self) -> float | None:
        """kbench over CUPTI's span of the same replays (launch gaps in both): the timer's own error."""
        return None if not self.cupti_span_us else self.kbench_us / self.cupti_span_us - 1

    @property
    def profiled_span_diff(self) -> float | None:
        """kbench's events over CUPTI's span on the same profiled replays: the timer's own error, gaps and all."""
        return None if not (self.cupti_span_us and self.cupti_profiled_us) else \
            self.cupti_profiled_us / self.cupti_span_us - 1

    @property
    def alone_diff(self) -> float | None:
        return None if not self.cupti_alone_us else self.kbench_us / self.cupti_alone_us - 1

    @property
    def flashinfer_diff(self) -> float | None:
        return None if not self.flashinfer_us else self.kbench_us / self.flashinfer_us - 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(cupti_diff=self.cupti_diff, span_diff=self.span_diff, profiled_span_diff=self.profiled_span_diff,
                 alone_diff=self.alone_diff,
                 flashinfer_diff=self.flashinfer_diff,
                 wall_ratio=self.wall_ratio, before_wall_ratio=self.before_wall_ratio)
        return d


def cupti_verdict(row: dict, tol: float) -> tuple[bool | None, str]:
    """Does kbench's figure for a row (TimerCheck.to_dict()) agree with CUPTI within tol, and on what was it
    judged ("kernels", "same replays" or "no CUPTI figure"; None: no CUPTI figure to judge on).

    - One kernel per call: kbench's figure against CUPTI's device time of the call's kernel in replays of the
      same graph (cupti_diff); the idle time between the graph's nodes is a fraction of a microsecond there.
    - Several device activities per call (fmha-v2: two, a few us apart): the idle time between them is part of
      the call an engine's graph pays. kbench's figure holds it and CUPTI's sum of kernel times does not, while
      CUPTI's span of the replays holds it as lengthened by CUPTI's own tracing of each node. Such a row is
      judged on what both clocks see alike: kbench's events on the very replays CUPTI profiled against CUPTI's
      span of them (profiled_span_diff: the timer's own error) within tol, and kbench's figure between CUPTI's
      kernel sum and its span (each widened by tol). Without those figures it falls back to the kernels."""
    us, kernels, span, same = (row.get(k) for k in ("kbench_us", "cupti_us", "cupti_span_us", "profiled_span_diff"))
    if (row.get("cupti_kernels") or 1) > 1 and us and kernels and span and same is not None:
        inside = kernels * (1 - tol) <= us <= max(span, kernels) * (1 + tol)
        return abs(same) <= tol and inside, "same replays"
    diff = row.get("cupti_diff")
    if diff is None or diff != diff:
        return None, "no CUPTI figure"
    return abs(diff) <= tol, "kernels"


def spreads(samples: list[float]) -> tuple[float | None, float | None]:
    """(relative 95% CI half-width of the median, IQR / median) of a list of samples, as kbench reports them."""
    s = sorted(samples)
    med = quantile(s, 0.5) if s else 0.0
    if med <= 0:
        return None, None
    return median_ci_halfwidth(s) / med, (quantile(s, 0.75) - quantile(s, 0.25)) / med


def wall_ratios(rows: list[dict]) -> dict:
    """kbench's timer wall over bench_gpu_time's wall, per row's median and over the rows' totals, for the rows
    that have both (and, when the rows were also timed with a `before` Timing, the same for it). Row dicts as
    TimerCheck.to_dict() writes them."""
    def pair(wall):
        got = [(wall(r), r["flashinfer_wall_s"]) for r in rows if wall(r) and r.get("flashinfer_wall_s")]
        if not got:
            return None
        return {"rows": len(got), "median": statistics.median(k / f for k, f in got),
                "total": sum(k for k, _ in got) / sum(f for _, f in got),
                "kbench_wall_s": sum(k for k, _ in got), "flashinfer_wall_s": sum(f for _, f in got)}

    out = {"after": pair(lambda r: r.get("kbench_wall_s"))}
    before = pair(lambda r: (r.get("before") or {}).get("wall_s"))
    if before:
        out["before"] = before
    return out


def phase_totals(rows: list[dict], key: str = "phases") -> dict:
    """Seconds per phase summed over the rows (key "phases": the timer's; "case_s": inputs, reference, check)."""
    out: dict[str, float] = {}
    for r in rows:
        for k, v in (r.get(key) or {}).items():
            out[k] = out.get(k, 0.0) + v
    return out


def summary(rows: list, timing, before=None) -> dict:
    """What validate-timer.json holds: the timing settings, the wall ratios to bench_gpu_time (median and total,
    after = `timing`, before = `before`), the timer's seconds per phase over all rows, and the rows (TimerCheck)."""
    dicts = [r.to_dict() for r in rows]
    return {"timing": asdict(timing), "before_timing": asdict(before) if before else None,
            "wall_ratio": wall_ratios(dicts), "phase_totals_s": phase_totals(dicts),
            "case_totals_s": phase_totals(dicts, "case_s"), "rows": dicts}


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


def _device_spans(prof) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every kernel, memset and copy CUPTI timed in a profile, in start order."""
    from torch.autograd import DeviceType

    return sorted(((e.name, float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
                   if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)),
                  key=lambda x: x[1])


def _durations(spans: list[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """(name, device us) of each (name, start, end)."""
    return [(name, end - start) for name, start, end in spans]


def _device_events(prof) -> list[tuple[str, float]]:
    """(name, device us) of every kernel, memset and copy CUPTI timed in a profile."""
    return _durations(_device_spans(prof))


def fence_kernel_names() -> set[str]:
    """The names CUPTI gives the fence (GraphTimer's one-element fill) on this device."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fence = torch.zeros(1, dtype=torch.int32, device=torch.cuda.current_device())
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fence.zero_()
        torch.cuda.synchronize()
    return {name for name, _ in _device_events(prof)}


def call_time_from_profile(events: list[tuple[str, float]], fence_names: set[str], replays: int,
                           fence_replays: int, calls: int) -> tuple[float | None, int]:
    """Device us per call of the call's own kernels, and their count per call, from the events CUPTI saw during
    a sampling: `replays` replays of `calls` fenced calls and `fence_replays` replays of `calls` fences alone.
    The fences ((replays + fence_replays) * calls of them) are the events named as the fence; should the call
    itself run a kernel of that name, the fences are taken off at their median time."""
    fences_expected = (replays + fence_replays) * calls
    named = sorted(us for name, us in events if name in fence_names)
    total = sum(us for _, us in events)
    if len(named) == fences_expected:
        own, n_own = total - sum(named), len(events) - len(named)
    elif len(named) > fences_expected and named:
        own, n_own = total - fences_expected * named[len(named) // 2], len(events) - fences_expected
    else:  # fewer fences than launched: the profiler missed part of the sampling
        return None, 0
    if n_own <= 0 or replays <= 0:
        return None, 0
    return own / (replays * calls), round(n_own / (replays * calls))


def replay_spans_from_profile(spans: list[tuple[str, float, float]], replays: int, fence_replays: int,
                              calls: int) -> dict | None:
    """kbench's own arithmetic done on CUPTI's timestamps, to tell a timer error from the launch gaps.

    `spans` (name, start, end) in start order, from the sampling of a GraphTimer measurement: bursts of `replays /
    fence_replays` replays of `calls` fenced calls, each burst followed by one replay of `calls` fences alone.
    Returns per call, in us (None where the events do not split that way, e.g. the profiler missed some):
    - span_us: (median replay span - median fences-replay span) / calls, a replay's span being its first
      event's start to its last event's end: what kbench's events measure, on CUPTI's clock (both cancel the
      graph's start-up as kbench's subtraction does), so the call's kernels plus the gaps between the graph's
      nodes, which an engine's graph pays too;
    - kernels_us: the median over the replays of the call's own device time (every event of the replay less
      `calls` fences at their median duration in the fences-alone replays): cupti_us's figure as a median;
    - gap_us: span_us - kernels_us, the idle device time per call between the graph's nodes;
    - names: one call's nodes as CUPTI names them, in order (its fence among them)."""
    if replays <= 0 or fence_replays <= 0 or calls <= 0 or replays % fence_replays:
        return None
    batch = replays // fence_replays
    per_replay, rest = divmod(len(spans) - fence_replays * calls, replays)
    if rest or per_replay < 2 * calls or per_replay % calls:
        return None
    replay_spans, fence_spans, own, fence_durs = [], [], [], []
    i = 0
    for _ in range(fence_replays):
        for _ in range(batch):
            evs = spans[i:i + per_replay]
            i += per_replay
            replay_spans.append(max(e for _, _, e in evs) - evs[0][1])
            own.append(sum(e - s for _, s, e in evs))
        evs = spans[i:i + calls]
        i += calls
        fence_spans.append(max(e for _, _, e in evs) - evs[0][1])
        fence_durs.extend(e - s for _, s, e in evs)
    fence_us = statistics.median(fence_durs)
    span = (statistics.median(replay_spans) - statistics.median(fence_spans)) / calls
    kernels = statistics.median(own) / calls - fence_us
    return {"span_us": span, "kernels_us": kernels, "gap_us": span - kernels,
            "names": [name for name, _, _ in spans[:per_replay // calls]]}


def cupti_same_replays(timer: GraphTimer, fn, copies: int, fence_names: set[str]) -> tuple[float | None, int, Measurement, dict | None]:
    """kbench's measurement of fn again, CUPTI profiling its sampling: the device time per call of the call's
    kernels in those very replays (and their count per call), the measurement itself, and the same replays'
    spans (replay_spans_from_profile)."""
    from torch.profiler import ProfilerActivity, profile

    profs = []

    def sampling():
        profs.append(profile(activities=[ProfilerActivity.CUDA]))
        return profs[-1]

    m = timer.measure(fn, copies, sampling=sampling)
    spans = _device_spans(profs[-1])
    us, n = call_time_from_profile(_durations(spans), fence_names if timer.fence else set(),
                                   len(m.samples_us), m.fence_replays, m.calls_per_sample)
    timing = replay_spans_from_profile(spans, len(m.samples_us), m.fence_replays, m.calls_per_sample)
    if timing is not None and timer.fence:
        timing["names"] = [x for x in timing["names"] if x not in fence_names]
    return us, n, m, timing


def flashinfer_harness(fn) -> tuple[list[float], float]:
    """FlashInfer's bench_gpu_time with its defaults (CUDA events per call, L2 flushed before each, ~25 ms dry
    run, ~100 ms of repeats, back to back): its samples in us and its wall time in s."""
    from flashinfer.testing import bench_gpu_time

    t0 = time.perf_counter()
    times_ms = bench_gpu_time(fn)
    return [t * 1000 for t in times_ms], time.perf_counter() - t0


def _before(m: Measurement) -> dict:
    spread, iqr = spreads(m.samples_us)
    return {"us": m.median_us, "wall_s": m.wall_s, "phases": m.phases, "samples": len(m.samples_us), "stop": m.stop,
            "spread": spread, "iqr_rel": iqr}


def validate_cases(shapes=None) -> list[Case]:
    """The rows' cases: Llama-3-8B heads, page 64, bf16, at each (batch, q_len, kv_len) of `shapes`."""
    return [Case(bs, q, kv, H.num_qo_heads, H.num_kv_heads, H.head_dim, 64) for bs, q, kv in shapes or DEFAULT_SHAPES]


def runnable_kernels(kernels, dev, case: Case) -> list:
    """The kernels that run this case here, by the sweep's rule (kernel_reason, not supports(): an MLA kernel's
    supports() does not look at a GQA case's heads; on the H200 the MLA wrappers raised 'head_dim_ckv must be
    > 0' at every validate-timer shape)."""
    return [k for k in kernels if kernel_reason(k, dev, case) is None]


def validate_timer(kernels: list[str] | None = None, shapes=None, device: str = "cuda", on_row=None,
                   timing=None, before=None, on_module=None, builder=None) -> list[TimerCheck]:
    """timing: the Timing kbench's timer runs with (the sweep's defaults when None); before: another Timing each
    row is also timed with, by kbench's timer alone (its figures in TimerCheck.before). The FlashInfer modules
    the rows load are built first, in parallel (kbench.engine.stream.build_all; on_module(outcome) as each
    finishes, builder: a test's), so that no row's check compiles its module alone; a module that fails to
    build is tried again by the JIT at its row, whose error then says why."""
    from kbench.timing.probe import probe_device
    from kbench.engine.placement import copies_for
    from kbench.cases.scenario import Timing

    dev = probe_device()
    rows = []
    ks = [k for k in select(kernels or ["all"]) if k.path != "reference"]
    t = timing or Timing()

    def timer_of(x):
        return GraphTimer(x.stop_rule(), x.warmup_ms, duty=x.duty, settle_ms=x.settle_ms)

    timer = timer_of(t)
    old = timer_of(before) if before is not None else None
    cases = validate_cases(shapes)
    prebuild_modules(ks, cases, dev, on_module, builder)
    fence_names = fence_kernel_names() if timer.fence else set()
    for case in cases:
        runnable = runnable_kernels(ks, dev, case)
        if not runnable:
            continue
        copies = copies_for(case, dev, t)
        t0 = time.perf_counter()
        inputs = build_inputs(case, device, copies=copies)
        t1 = time.perf_counter()
        ref = reference_attention(inputs)
        _sync()
        shape_s = {"inputs_s": t1 - t0, "reference_s": time.perf_counter() - t1}
        for k in runnable:
            try:
                t0 = time.perf_counter()
                fn = k.prepare(inputs)
                chk = compare(fn(0), ref, tolerance_for(case.dtype, case.kv_dtype, case.skip_softmax, case.q_dtype))
                case_s = {**shape_s, "check_s": time.perf_counter() - t0}
                time.sleep(COOL_S)
                m = timer.measure(fn, copies)
                b = None
                if old is not None:
                    time.sleep(COOL_S)
                    b = _before(old.measure(fn, copies))
                time.sleep(COOL_S)
                cu, nk, profiled, spans = cupti_same_replays(timer, fn, copies, fence_names)
                calls = max(3, min(20, int(CUPTI_BURST_US / max(m.median_us, 1.0))))
                time.sleep(COOL_S)
                alone, nk_alone = cupti_us_per_call(fn, copies, calls)
                time.sleep(COOL_S)
                b2b, _ = cupti_us_per_call(fn, copies, calls, synced=False)
                time.sleep(COOL_S)
                fi_samples, fi_wall = flashinfer_harness(lambda: fn(0))
                ks_spread, ks_iqr = spreads(m.samples_us)
                fi_spread, fi_iqr = spreads(fi_samples)
                r = TimerCheck(k.name, case.case_id, m.median_us, cu, nk or nk_alone, alone, b2b,
                               statistics.median(fi_samples), m.wall_s, fi_wall, chk.rel_err, phases=m.phases,
                               case_s=case_s, kbench_samples=len(m.samples_us), kbench_stop=m.stop,
                               kbench_spread=ks_spread, kbench_iqr_rel=ks_iqr, flashinfer_samples=len(fi_samples),
                               flashinfer_spread=fi_spread, flashinfer_iqr_rel=fi_iqr, before=b,
                               cupti_profiled_us=profiled.median_us,
                               **{f"cupti_{k}": v for k, v in (spans or {}).items()})
            except Exception as e:
                r = TimerCheck(k.name, case.case_id, float("nan"), None, None, None, None, None, 0.0, None, float("nan"),
                               error=first_line(e, 200))
            rows.append(r)
            if on_row:
                on_row(r)
        del inputs, ref
    return rows


def prebuild_modules(kernels, cases: list[Case], dev, on_module=None, builder=None) -> dict[str, str]:
    """Build the modules the rows need before timing any ({module: reason} of those that failed). Where the
    plan cannot be made (a kernel's jit_specs fails), each row compiles its own at its check, as before."""
    from kbench.engine.stream import build_all

    if not dev.cuda and builder is None:
        return {}
    try:
        return build_all(kernels, cases, dev, on_outcome=on_module, builder=builder)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 - no plan: the JIT compiles each module where a row first needs it
        if on_module:
            on_module({"module": "(plan)", "status": "failed", "reason": f"cannot plan the modules: {first_line(e, 200)}"})
        return {}


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
