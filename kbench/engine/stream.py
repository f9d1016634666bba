"""The streamed sweep's compile step: FlashInfer modules built in the background while ready kernels are measured.

`StreamPlan` is the sweep's compile plan (kbench.engine.prebuild.plan, the same as `kbench prebuild`'s): each
(kernel, jit_key) the sweep runs and the FlashInfer modules it loads, each module's state (built already,
pending, or failed with the reason). `BackgroundBuild` builds the missing modules with prebuild's builder
(kbench.engine.prebuild.build) in one spawned process, in its own process group and at a lower CPU priority
(nice), reporting each module as it finishes; `stop()` ends the process group (ninja and every nvcc with it)
and joins it, and a sweep killed outright (SIGKILL) takes the group with it: the build process watches its
parent. The sweep (kbench.engine.sweep) asks `StreamPlan.state(kernel, case)` before each case: ready kernels
are measured now, pending ones when their modules are built, and a kernel whose module failed to build gets a
failed row with the compiler's reason.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import asdict, dataclass, field

from kbench.cases.case import Case
from kbench.device import DeviceInfo

READY, PENDING, FAILED = "ready", "pending", "failed"
NICE = 10  # the build process's niceness: nvcc yields the CPU to the process that launches and times kernels


def default_max_jobs() -> int:
    """Compile jobs per module (ninja -j): every core but two, which stay free for the timing process."""
    return max(1, (os.cpu_count() or 2) - 2)


@dataclass
class StreamPlan:
    """needs: (kernel name, jit_key) -> the module names it loads; modules: name -> 'ok' (built: now or before),
    'pending', or the reason it failed to build."""
    needs: dict[tuple, list[str]] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # built / cached / aot / failed, as outcomes arrive

    @classmethod
    def of(cls, kernels, cases: list[Case], device: DeviceInfo, skip=None) -> "StreamPlan":
        """The plan of the sweep's cases; modules already built (JIT cache, AOT) are 'ok' from the start."""
        from kbench.engine.prebuild import plan

        needs: dict = {}
        modules = plan(kernels, cases, device, skip=skip, needs=needs)
        p = cls(needs, {})
        for m in modules:
            state = m.state
            p.modules[m.name] = "ok" if state != "missing" else "pending"
            if state != "missing":
                p.counts[state] = p.counts.get(state, 0) + 1
        return p

    def missing(self) -> list[str]:
        return [n for n, s in self.modules.items() if s == "pending"]

    def settle(self, outcome: dict) -> None:
        """One builder outcome (prebuild.Outcome as a dict)."""
        name, status = outcome["module"], outcome["status"]
        self.counts[status] = self.counts.get(status, 0) + 1
        self.modules[name] = f"{outcome.get('reason') or 'failed'}" if status == "failed" else "ok"

    def fail_pending(self, reason: str) -> None:
        for n in self.missing():
            self.settle({"module": n, "status": "failed", "reason": reason})

    def state(self, kernel, case: Case) -> tuple[str, str]:
        """(READY | PENDING | FAILED, the failure's reason). A kernel with no modules to wait for (the reference,
        a kernel that compiles nothing ahead, one that cannot run here: its row says why) is ready."""
        key = (kernel.name, kernel.jit_key(case)) if kernel.jit_key(case) is not None else None
        names = self.needs.get(key, []) if key is not None else []
        states = [self.modules.get(n, "ok") for n in names]
        bad = [(n, s) for n, s in zip(names, states) if s not in ("ok", "pending")]
        if bad:
            return FAILED, f"JIT module {bad[0][0]} failed to build: {bad[0][1]}"
        return (PENDING, "") if "pending" in states else (READY, "")


# --- the background build ------------------------------------------------------------------------------------
def build_worker(request: dict, conn) -> None:
    """The build process: its own process group (stop() ends its compilers with it), a lower priority, then
    prebuild's plan (re-made here: FlashInfer's JitSpecs hold closures that do not pickle) and builder, each
    outcome sent as it finishes."""
    from kbench.engine.prebuild import build, plan
    from kbench.kernels.registry import select

    prepare_build_process(request)
    kernels = select(request["kernels"])
    cases = [Case(**c) for c in request["cases"]]
    wanted = set(request["modules"])
    modules = [m for m in plan(kernels, cases, DeviceInfo(**request["device"])) if m.name in wanted]
    build(modules, request["parallel"], on_done=lambda o: conn.send(asdict(o)))
    conn.close()


ORPHAN_POLL_S = 0.5  # how often the build process checks that the sweep that started it is still there


def prepare_build_process(request: dict) -> None:
    os.setpgrp()
    _end_with_parent(os.getppid())
    try:
        os.nice(int(request.get("nice", NICE)))
    except OSError:  # not allowed here: build at the same priority
        pass
    os.environ["MAX_JOBS"] = str(request["max_jobs"])
    os.environ.setdefault("FLASHINFER_LOGGING_LEVEL", "warning")


def _end_with_parent(parent: int) -> None:
    """A sweep killed outright (SIGKILL, OOM killer) cannot call stop(): the build process, in its own group,
    would compile on for minutes. A daemon thread watches for the parent's end (the process is re-parented) and
    then ends the whole group, ninja and every nvcc with it: SIGTERM, then SIGKILL 5 s later."""
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_S)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(os.getpgrp(), sig)
            except OSError:
                return
            time.sleep(5.0)

    threading.Thread(target=watch, name="kbench-build-orphan-watch", daemon=True).start()


class BackgroundBuild:
    """One spawned process that runs `worker(request, conn)` (build_worker; a test passes its own) and sends
    prebuild Outcomes as dicts. poll(timeout) returns those that arrived; finished once the process is done."""

    def __init__(self, request: dict, worker=build_worker):
        self.request = request
        self.worker = worker
        self.proc = None
        self.conn = None
        self.finished = False
        self.exitcode: int | None = None

    def start(self) -> "BackgroundBuild":
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=self.worker, args=(self.request, child), daemon=True, name="kbench-build")
        self.proc.start()
        child.close()
        return self

    def poll(self, timeout: float = 0.0) -> list[dict]:
        """The outcomes that arrived, waiting up to `timeout` seconds for the first."""
        out: list[dict] = []
        if self.finished:
            return out
        try:
            wait = timeout
            while self.conn.poll(wait):
                out.append(self.conn.recv())
                wait = 0
        except (EOFError, OSError):  # the process is done (or died): nothing more comes
            self.proc.join(timeout=30)
            self.exitcode = self.proc.exitcode
            self.finished = True
        return out

    def stop(self) -> None:
        """End the build process and its compilers (its process group), and join it."""
        if self.proc is None:
            return
        if self.proc.is_alive():
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except (ProcessLookupError, PermissionError):  # not its own group yet: the process alone
                    self.proc.terminate() if sig == signal.SIGTERM else self.proc.kill()
                self.proc.join(timeout=wait)
                if not self.proc.is_alive():
                    break
        self.exitcode = self.proc.exitcode
        self.finished = True
        if self.conn is not None:
            self.conn.close()


def outcome_text(o: dict) -> str:
    """A builder outcome as a line says it: 'built 51 s NAME', 'cached NAME', 'failed NAME: the reason'."""
    secs = f"{o.get('seconds', 0):.0f} s " if o["status"] == "built" else ""
    return f"{o['status']} {secs}{o['module']}" + (f": {o.get('reason')}" if o["status"] == "failed" else "")


def ended_early(exitcode: int | None) -> str:
    """Why a module the build process did not report is failed: the process ended (killed, crashed) first."""
    return f"the build process ended (exit code {exitcode}) before building it"


def build_request(kernels, cases: list[Case], device: DeviceInfo, modules: list[str], workers: int,
                  nice: int = NICE) -> dict:
    """What the build process is told (build_worker): the kernels and cases to plan again there, the modules to
    build of that plan, how many at a time, ninja's jobs per module and the process's niceness."""
    return {"kernels": [k.name for k in kernels], "cases": [asdict(c) for c in cases], "device": device.to_dict(),
            "modules": modules, "parallel": workers, "max_jobs": default_max_jobs(), "nice": nice}


def build_all(kernels, cases: list[Case], device: DeviceInfo, on_outcome=None, builder=None,
              workers: int | None = None) -> dict[str, str]:
    """Build every module the cases need that is not built yet, in the background build process (prebuild's
    plan and builder, `workers` modules at a time, its own process group), and wait for the last one: what a
    command that measures nothing before every module is there uses (validate-timer), so that no row compiles
    its module alone, one after another. on_outcome(dict) as each module finishes (built modules are not
    reported); Ctrl-C or SIGTERM while it builds ends the build's process group. Returns {module: reason} of
    those that failed to build."""
    from kbench.engine.jit import default_workers

    sp = StreamPlan.of(kernels, cases, device)
    missing = sp.missing()
    if not missing:
        return {}
    request = build_request(kernels, cases, device, missing, workers or default_workers(), nice=0)
    build = (builder or (lambda r: BackgroundBuild(r).start()))(request)
    try:
        while not build.finished:
            for o in build.poll(1.0):
                sp.settle(o)
                if on_outcome:
                    on_outcome(o)
    finally:
        build.stop()
    if sp.missing():
        sp.fail_pending(ended_early(build.exitcode))
    return {n: s for n, s in sp.modules.items() if s not in ("ok", "pending")}


@dataclass
class StreamClock:
    """What the streamed compile cost: the build's wall (overlapped with measuring) and how long measuring sat
    idle waiting for a module; how many times a case's inputs and reference were built again."""
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    waited_s: float = 0.0
    case_rebuilds: int = 0

    def build_wall(self) -> float:
        return (self.ended or time.perf_counter()) - self.started
