"""The streamed sweep on the CPU, with an injected module builder: kernel A's module is built at once, kernel B's
later (or never); A's rows come before B's module is ready, B's after; a failed build is B's failed rows with the
reason; an interrupt while B builds leaves a resumable run and stops the builder; --resume measures only the rest.
The real background build (a spawned process in its own process group) is shown ending its compilers on stop."""
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from kbench.cases.models import MODELS
from kbench.cases.scenario import Scenario, Timing
from kbench.cli.main import cli
from kbench.engine.stream import BackgroundBuild, StreamPlan
from kbench.engine.sweep import SweepObserver, resume_sweep, run_sweep
from kbench.kernels import registry
from kbench.kernels.reference import ReferenceKernel
from kbench.runs.store import load_run

FAST = Timing(spread_target=0.2, budget_s=0.05, min_samples=3, max_samples=10)


class ModuleKernel(ReferenceKernel):
    """Test only: the reference's math, under another name, needing one FlashInfer-like module."""
    path = "decode"

    def __init__(self, name):
        self.name = name

    def jit_key(self, case):
        return (case.q_len,)

    def jit_specs(self, device, case):
        return [SimpleNamespace(name=f"mod_{self.name}_q{case.q_len}", is_aot=False,
                                jit_library_path=Path("/nonexistent/kbench-test.so"))]


def _registered(names):
    registry._load()
    for n in names:
        registry.register(ModuleKernel(n))
    yield
    for n in names:
        registry._REGISTRY.pop(n, None)


@pytest.fixture
def two_kernels():
    yield from _registered(("ka", "kb"))


def scenario():
    return Scenario(name="stream", heads=MODELS["gqa8-d64"], batch_size=[1, 2], q_len=[1, 4], kv_len=[64],
                    page_size=[16], timing=FAST, kernels=["ka", "kb"]).validate()


class FakeBuild:
    """Modules of kernel `ka` built at once; those of `kb` after `delay` s (or failed, or never)."""

    def __init__(self, request, delay=1.5, fail=None, never=False, interrupt_when=None, release_when=None):
        self.request, self.delay, self.fail, self.never = request, delay, fail, never
        self.t0 = time.perf_counter()
        self.sent: set[str] = set()
        self.finished = False
        self.stopped = False
        self.released_at = None  # when kb's modules were reported
        self.interrupt_when = interrupt_when
        self.release_when = release_when  # instead of the delay

    def poll(self, timeout=0.0):
        if self.interrupt_when is not None and self.interrupt_when():
            raise KeyboardInterrupt  # Ctrl-C while the build goes on
        out = []
        for name in self.request["modules"]:
            if name in self.sent:
                continue
            late = "_kb_" in name
            due = self.release_when() if self.release_when else time.perf_counter() - self.t0 >= self.delay
            if late and (self.never or not due):
                continue
            if late and self.released_at is None:
                self.released_at = time.perf_counter()
            self.sent.add(name)
            out.append({"module": name, "status": "failed" if late and self.fail else "built", "seconds": 0.1,
                        "reason": self.fail if late and self.fail else ""})
        if not out and timeout:
            time.sleep(min(timeout, 0.05))
        self.finished = len(self.sent) == len(self.request["modules"])
        return out

    def stop(self):
        self.stopped = True
        self.finished = True


class Arrivals(SweepObserver):
    def __init__(self):
        self.rows = []  # (kernel, when)

    def row(self, row):
        self.rows.append((row.kernel, time.perf_counter()))


def _recorded(make):
    """A builder that makes each build with make(request), keeps it in the list returned beside it, and hands out
    the first (a sweep asks once)."""
    builds = []

    def builder(request):
        builds.append(make(request))
        return builds[0]

    return builder, builds


def _run(tmp_path, observer=None, **kw):
    builder, builds = _recorded(lambda request: FakeBuild(request, **kw))
    res = run_sweep(scenario(), out_dir=tmp_path, builder=builder, observer=observer)
    return res, builds[0]


def test_ready_kernel_rows_come_before_the_late_module_and_the_late_ones_after(tmp_path, two_kernels):
    seen = Arrivals()

    def after_ka():  # kb's modules arrive 0.5 s after the last ka row: the sweep has to wait for them
        ka = [t for k, t in seen.rows if k == "ka"]
        return len(ka) == 4 and time.perf_counter() - ka[-1] > 0.5

    res, build = _run(tmp_path, observer=seen, release_when=after_ka)
    assert all(t < build.released_at for k, t in seen.rows if k == "ka")  # measured while kb's modules built
    assert all(t > build.released_at for k, t in seen.rows if k == "kb")
    rows = load_run(res.run_dir).rows
    assert res.status == "complete" and len(rows) == 8 and (rows.status == "ok").all()
    assert build.request["modules"] == ["mod_ka_q1", "mod_kb_q1", "mod_ka_q4", "mod_kb_q4"]
    kernels = list(rows.kernel)
    assert kernels == ["ka"] * 4 + ["kb"] * 4  # every ka row (4 cases) before the first kb row
    m = res.run_dir / "manifest.json"
    import json

    man = json.loads(m.read_text())
    first_ok = man["wall_s"]["first_ok_row_s"]
    # the first ok row came before measuring sat waiting for kb's modules
    assert first_ok is not None and first_ok + man["compile"]["waited_s"] <= man["wall_s"]["total_s"]
    assert man["compile"]["mode"] == "stream" and man["compile"]["to_build"] == 4 and man["compile"]["built"] == 4
    assert man["compile"]["waited_s"] > 0.4  # measuring sat idle until kb's modules came
    assert man["compile"]["case_rebuilds"] == 4  # each case's inputs built twice (once per wave)
    assert man["wall_s"]["compile_s"] >= man["compile"]["waited_s"] and man["compile"]["overlapped"] is True
    assert res.first_ok_s == pytest.approx(first_ok, abs=1e-3)


class GatedBuild(FakeBuild):
    """Every module at once but those `due` holds back, each sent on the first poll where `due` says so; the order
    sent is kept. `seen`: the rows written so far (Arrivals)."""

    def __init__(self, request, seen):
        super().__init__(request, delay=0.0)
        self.seen, self.order = seen, []

    def due(self, name, kinds, timeout) -> bool:
        raise NotImplementedError

    def poll(self, timeout=0.0):
        kinds = [k for k, _ in self.seen.rows]
        out = []
        for name in self.request["modules"]:
            if name in self.sent or not self.due(name, kinds, timeout):
                continue
            self.sent.add(name)
            self.order.append(name)
            out.append({"module": name, "status": "built", "seconds": 0.1, "reason": ""})
        if not out and timeout:
            time.sleep(min(timeout, 0.02))
        self.finished = len(self.sent) == len(self.request["modules"])
        return out


class StagedBuild(GatedBuild):
    """ka's modules at once; kb's one at a time: first the module of the last case's q_len (on an idle poll, once
    ka's rows are written), then the other on the first poll that follows a kb row, which is a poll between two
    cases of the sweep's second pass. Before December 2026 the cases walked past before that module came were
    dropped from the pass: the run said complete with their kb rows missing (45 of 432 rows of an MLA run on
    the H200)."""

    def __init__(self, request, seen):
        super().__init__(request, seen)
        last_q = request["cases"][-1]["q_len"]
        late = [m for m in request["modules"] if "_kb_" in m]
        self.first = next(m for m in late if m.endswith(f"_q{last_q}"))
        self.second = next(m for m in late if m != self.first)

    def due(self, name, kinds, timeout):
        if name == self.first:
            return bool(timeout) and kinds.count("ka") == 4
        return name != self.second or "kb" in kinds


def test_a_module_that_arrives_between_two_waiting_cases_leaves_no_case_without_its_row(tmp_path, two_kernels):
    seen = Arrivals()
    builder, builds = _recorded(lambda request: StagedBuild(request, seen))
    res = run_sweep(scenario(), out_dir=tmp_path, builder=builder, observer=seen)
    rows = load_run(res.run_dir).rows
    assert builds[0].order[-2:] == [builds[0].first, builds[0].second]  # the staging happened as planned
    assert res.status == "complete"
    assert sorted(zip(rows.kernel, rows.case_id)) == sorted((k, c) for k in ("ka", "kb") for c in set(rows.case_id))
    assert len(rows) == 8 and (rows.status == "ok").all()


def test_a_failed_build_gives_the_kernels_rows_the_reason(tmp_path, two_kernels):
    res, build = _run(tmp_path, delay=0.2, fail="nvcc: error: boom in xqa.cu")
    rows = load_run(res.run_dir).rows
    kb = rows[rows.kernel == "kb"]
    assert len(kb) == 4 and (kb.status == "failed").all()
    assert kb.reason.str.contains("mod_kb_q").all() and kb.reason.str.contains("boom in xqa.cu").all()
    assert (rows[rows.kernel == "ka"].status == "ok").all()
    assert load_run(res.run_dir).manifest["compile"]["failed"] == 2


def test_interrupt_while_building_keeps_rows_stops_the_build_and_resume_finishes_the_rest(tmp_path, two_kernels):
    seen = {}

    def interrupt_when():  # Ctrl-C once ka's rows are written, while kb's modules are still building
        return len(seen["res_dir"]().rows) >= 4 if "res_dir" in seen else False

    builds = []

    def builder(request):
        b = FakeBuild(request, never=True, interrupt_when=interrupt_when)
        builds.append(b)
        return b

    out = tmp_path / "r"
    out.mkdir()
    seen["res_dir"] = lambda: load_run(next(out.iterdir()))
    part = run_sweep(scenario(), out_dir=out, builder=builder)
    assert part.status == "interrupted" and builds[0].stopped
    kept = load_run(part.run_dir)
    assert kept.manifest["status"] == "interrupted"
    assert sorted(kept.rows.kernel) == ["ka"] * 4 and (kept.rows.status == "ok").all()
    assert kept.manifest["compile"]["unbuilt"] == 2  # kb's modules never came

    builder2, resumed = _recorded(lambda request: FakeBuild(request, delay=0.0))
    done = resume_sweep(part.run_dir, builder=builder2)
    assert done.status == "complete"
    assert resumed[0].request["modules"] == ["mod_kb_q1", "mod_kb_q4"]  # only what the missing rows need
    rows = load_run(part.run_dir).rows
    assert sorted(zip(rows.kernel, rows.case_id)) == sorted({(k, c) for k in ("ka", "kb") for c in rows.case_id})
    assert len(rows) == 8 and (rows.status == "ok").all()  # nothing measured twice
    assert done.measurements == 4


def test_no_stream_compiles_first_and_measures_in_grid_order(tmp_path, two_kernels):
    calls = []
    res = run_sweep(scenario(), out_dir=tmp_path, builder=lambda r: calls.append(r), stream=False)
    rows = load_run(res.run_dir).rows
    assert calls == [] and (rows.status == "ok").all()
    assert list(rows.kernel) == ["ka", "kb"] * 4  # case by case, as before streaming


def test_stream_plan_states(two_kernels):
    from kbench.device import DeviceInfo

    sc = scenario()
    ka, kb = registry.get_kernel("ka"), registry.get_kernel("kb")
    plan = StreamPlan.of([ka, kb], sc.cases(), DeviceInfo(cuda=False, name="cpu", sm=0))
    c = sc.cases()[0]
    assert plan.state(ka, c) == ("pending", "") and plan.missing() == ["mod_ka_q1", "mod_kb_q1", "mod_ka_q4",
                                                                       "mod_kb_q4"]
    plan.settle({"module": f"mod_ka_q{c.q_len}", "status": "built"})
    plan.settle({"module": f"mod_kb_q{c.q_len}", "status": "failed", "reason": "no nvcc"})
    assert plan.state(ka, c) == ("ready", "")
    assert plan.state(kb, c) == ("failed", f"JIT module mod_kb_q{c.q_len} failed to build: no nvcc")
    ref = registry.get_kernel("reference")
    assert plan.state(ref, c) == ("ready", "")  # nothing to wait for


def sleeping_worker(request, conn):
    """A build process whose 'compiler' (a child in its process group) never ends; reports its pid first."""
    import subprocess

    from kbench.engine.stream import prepare_build_process

    prepare_build_process(request)
    child = subprocess.Popen(["sleep", "300"])
    conn.send({"module": "pid", "status": "built", "seconds": float(child.pid), "nice": os.nice(0),
               "max_jobs": os.environ["MAX_JOBS"]})
    child.wait()


def test_background_build_stop_ends_its_compilers_and_joins():
    b = BackgroundBuild({"max_jobs": 3, "nice": 7}, worker=sleeping_worker).start()
    got = []
    deadline = time.time() + 60
    while not got and time.time() < deadline:
        got = b.poll(1.0)
    assert got, "the build process said nothing"
    pid = int(got[0]["seconds"])
    assert got[0]["nice"] >= 7 and got[0]["max_jobs"] == "3"  # lower priority; the jobs asked for
    assert os.getpgid(pid) == b.proc.pid  # the compiler runs in the build's own process group
    b.stop()
    assert b.finished and not b.proc.is_alive()
    for _ in range(50):  # the grandchild is gone (reaped by init once its parent died)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the compiler outlived stop()")


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_sweep_killed_outright_takes_its_background_build_and_compilers_with_it(tmp_path):
    """SIGKILL gives the sweep no chance to call stop(): the build process notices it was orphaned and ends its
    process group (the 'compiler' with it) instead of compiling on for minutes."""
    import subprocess
    import sys

    script = tmp_path / "sweep_like.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from kbench.engine.stream import BackgroundBuild\n"
        "from test_stream import sleeping_worker\n"
        "if __name__ == '__main__':\n"
        "    b = BackgroundBuild({'max_jobs': 1}, worker=sleeping_worker).start()\n"
        "    got = []\n"
        "    while not got:\n"
        "        got = b.poll(1.0)\n"
        "    print(b.proc.pid, int(got[0]['seconds']), flush=True)\n"
        "    time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker, compiler = map(int, parent.stdout.readline().split())
        assert _alive(worker) and _alive(compiler)
        parent.kill()
        parent.wait()
        deadline = time.time() + 20
        while (_alive(worker) or _alive(compiler)) and time.time() < deadline:
            time.sleep(0.2)
        left = [p for p in (worker, compiler) if _alive(p)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        assert not left, "the build process or its compiler outlived the killed sweep"
    finally:
        parent.kill()


def test_cli_no_stream_flag_and_help():
    r = CliRunner().invoke(cli, ["sweep", "--help"])
    assert "--stream / --no-stream" in r.output


# --- build everything first: validate-timer (kbench.engine.stream.build_all) ----------------------------------
def test_build_all_builds_every_missing_module_at_once_and_waits_for_the_last(two_kernels):
    from kbench.device import DeviceInfo
    from kbench.engine.stream import build_all

    sc = scenario()
    kernels = [registry.get_kernel("ka"), registry.get_kernel("kb")]
    builds, seen = [], []

    def builder(request):
        builds.append(FakeBuild(request, delay=0.3, fail="nvcc: error: no such arch"))
        return builds[-1]

    t0 = time.perf_counter()
    failed = build_all(kernels, sc.cases(), DeviceInfo(cuda=False, name="cpu", sm=0), on_outcome=seen.append,
                       builder=builder)
    assert time.perf_counter() - t0 >= 0.3  # it waited for kb's modules, the last to come
    assert len(builds) == 1 and builds[0].stopped  # one build for every module, ended after the last
    assert builds[0].request["modules"] == ["mod_ka_q1", "mod_kb_q1", "mod_ka_q4", "mod_kb_q4"]
    assert builds[0].request["parallel"] >= 1 and builds[0].request["nice"] == 0  # nothing is timed meanwhile
    assert sorted(o["module"] for o in seen) == sorted(builds[0].request["modules"])
    assert failed == {"mod_kb_q1": "nvcc: error: no such arch", "mod_kb_q4": "nvcc: error: no such arch"}


def test_build_all_stops_the_build_on_ctrl_c_and_when_it_dies(two_kernels):
    from kbench.device import DeviceInfo
    from kbench.engine.stream import build_all

    sc, cpu = scenario(), DeviceInfo(cuda=False, name="cpu", sm=0)
    kernels = [registry.get_kernel("ka"), registry.get_kernel("kb")]
    b = []
    with pytest.raises(KeyboardInterrupt):
        build_all(kernels, sc.cases(), cpu, builder=lambda r: b.append(FakeBuild(r, never=True,
                                                                             interrupt_when=lambda: True)) or b[-1])
    assert b[-1].stopped
    # a build process that ends before building every module (killed): those are failed, with the reason

    class Dying(FakeBuild):
        exitcode = -9

        def poll(self, timeout=0.0):
            out = super().poll(timeout)
            self.finished = True  # it died after ka's modules
            return out

    failed = build_all(kernels, sc.cases(), cpu, builder=lambda r: b.append(Dying(r, never=True)) or b[-1])
    assert b[-1].stopped
    assert failed == {m: "the build process ended (exit code -9) before building it" for m in ("mod_kb_q1", "mod_kb_q4")}


def test_validate_timer_builds_its_modules_first(two_kernels, monkeypatch):
    """validate-timer plans the modules of its rows (Llama-3-8B heads, page 64, bf16, q 4 and 8) as the sweep
    does and builds them all before it times any row."""
    from kbench.device import DeviceInfo
    from kbench.engine import validate

    cases = validate.validate_cases()
    assert {(c.q_len, c.page_size, c.dtype, c.num_qo_heads, c.num_kv_heads) for c in cases} == \
        {(4, 64, "bf16", 32, 8), (8, 64, "bf16", 32, 8)}
    kernels = [registry.get_kernel("ka"), registry.get_kernel("kb")]
    requests = []

    def builder(request):
        requests.append(request)
        return FakeBuild(request, delay=0.0)

    seen = []
    failed = validate.prebuild_modules(kernels, cases, DeviceInfo(cuda=False, name="cpu", sm=0), seen.append, builder)
    assert failed == {} and requests[0]["modules"] == ["mod_ka_q4", "mod_kb_q4", "mod_ka_q8", "mod_kb_q8"]
    assert [o["status"] for o in seen] == ["built"] * 4
    # no GPU and no builder: nothing to build here; a kernel whose plan fails: the rows compile their own
    assert validate.prebuild_modules(kernels, cases, DeviceInfo(cuda=False, name="cpu", sm=0)) == {}
    monkeypatch.setattr(ModuleKernel, "jit_specs", lambda self, d, c: 1 / 0)
    seen.clear()
    assert validate.prebuild_modules(kernels, cases, DeviceInfo(cuda=False, name="cpu", sm=0), seen.append,
                                     builder) == {}
    assert seen[0]["status"] == "failed" and "cannot plan the modules: " in seen[0]["reason"]


class ChainedBuild(GatedBuild):
    """Three kernels: ka's modules at once; kb's once every ka row is written (on an idle poll); kc's on the first
    poll after a kb row, which is the poll right after the first waiting case was measured for kb. Before this
    test that case was dropped from the waiting list (it had been measured in the pass and nothing of it was
    building any more), and its kc row was never measured: 19 of 432 rows of an MLA run on the H200 were missing
    from a run that said complete."""

    def due(self, name, kinds, timeout):
        if "_kb_" in name:
            return bool(timeout) and kinds.count("ka") == 4
        return "_kc_" not in name or "kb" in kinds


@pytest.fixture
def three_kernels():
    yield from _registered(("ka", "kb", "kc"))


def test_a_module_that_arrives_right_after_a_case_is_measured_still_gets_that_case_its_row(tmp_path, three_kernels):
    seen = Arrivals()
    builder, builds = _recorded(lambda request: ChainedBuild(request, seen))
    sc = Scenario(name="stream3", heads=MODELS["gqa8-d64"], batch_size=[1, 2], q_len=[1, 4], kv_len=[64],
                  page_size=[16], timing=FAST, kernels=["ka", "kb", "kc"]).validate()
    res = run_sweep(sc, out_dir=tmp_path, builder=builder, observer=seen)
    rows = load_run(res.run_dir).rows
    first_kc = next(i for i, m in enumerate(builds[0].order) if "_kc_" in m)
    assert any("_kb_" in m for m in builds[0].order[:first_kc])  # kc's modules came after kb's, as staged
    assert res.status == "complete"
    assert sorted(zip(rows.kernel, rows.case_id)) == sorted(
        (k, c) for k in ("ka", "kb", "kc") for c in set(rows.case_id))
    assert len(rows) == 12 and (rows.status == "ok").all()


def test_a_ready_kernel_that_gets_no_row_is_a_failed_row_not_a_hang_or_a_gap(tmp_path, two_kernels, monkeypatch):
    """The guard behind the waiting loop: a measurement that returns no row for a ready kernel (never expected)
    gives that kernel a failed row saying so; the loop neither spins nor leaves the run complete without it."""
    from kbench.engine.measure import CaseMeasurer

    real = CaseMeasurer.measure
    monkeypatch.setattr(CaseMeasurer, "measure",
                        lambda self, case, done, bw, emit: real(self, case, done | {("kb", case.case_id)}, bw, emit))
    res, _ = _run(tmp_path, delay=0.3)
    rows = load_run(res.run_dir).rows
    kb = rows[rows.kernel == "kb"]
    assert len(rows) == 8 and len(kb) == 4 and (kb.status == "failed").all()
    assert kb.reason.str.contains("no row came back from its measurement").all()
    assert (rows[rows.kernel == "ka"].status == "ok").all()


def test_validate_timer_times_only_the_kernels_the_sweep_would_run_there():
    # on the H200 validate-timer gave the MLA wrappers its GQA shapes: an error row each ('head_dim_ckv must be > 0')
    from kbench.device import DeviceInfo
    from kbench.engine import validate

    h200 = DeviceInfo(cuda=True, name="H200", sm=90)
    case = validate.validate_cases()[0]
    names = {k.name for k in validate.runnable_kernels(registry.select(["all"]), h200, case)}
    assert {"trtllm-decode", "fa2-prefill", "fa3-prefill", "trtllm-fmha-v2"} <= names
    assert not names & {"flashmla", "flashinfer-mla-fa3", "flashinfer-mla-fa2", "trtllm-gen-mla"}
