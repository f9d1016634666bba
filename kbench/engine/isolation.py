"""Crash isolation: a case's kernels run in a worker process that the sweep restarts after a fault.

A CUDA fault (illegal address, launch failure) poisons the process's CUDA context for good, so a sweep
that runs kernels in its own process dies with it. With `--isolate` the parent keeps the journal and
sends one case at a time to a worker (spawned: a fresh CUDA context); the worker streams back a message
as each kernel starts and a row as each is measured. If the worker dies, the kernel it was on gets a
`failed` row with the exit status, a new worker starts, and the case goes on with its remaining kernels.
A CUDA fault usually raises instead of killing the process: the worker records the failed row with the
CUDA error, finds its context unusable (kbench.engine.measure.CaseMeasurer.after_failure), says so and exits; the parent
starts a fresh worker for the rest of the case.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
from dataclasses import asdict

from kbench.cases.case import Case
from kbench.engine.measure import Payload

# (message kind, payload) from the worker
KERNEL, ROW, CASE_DONE, READY, CONTEXT_LOST = "kernel", "row", "case-done", "ready", "context-lost"


def _worker_main(conn, payload: dict) -> None:
    """Runs in the worker: the same case measurer as the parent's (kbench.engine.measure), cases sent one by one."""
    from kbench.engine.measure import CaseMeasurer, CudaContextLost, Payload

    measurer = CaseMeasurer.from_payload(Payload(**payload),
                                         kernel_started=lambda kernel, case: conn.send((KERNEL, kernel)))
    measurer.open()
    conn.send((READY, None))

    def emit(row) -> None:
        conn.send((ROW, row.to_dict()))

    while True:
        msg = conn.recv()
        if msg is None:
            break
        case_d, done, bw = msg
        before = dict(vars(measurer.wall))
        n0 = measurer.measurements
        lost = None
        try:
            measurer.measure(Case(**case_d), set(map(tuple, done)), bw, emit)
        except CudaContextLost as e:  # its failed row is sent; this process can run nothing more
            lost = str(e)
        spent = ({k: v - before[k] for k, v in vars(measurer.wall).items()}, measurer.measurements - n0)
        if lost is None:
            conn.send((CASE_DONE, spent))
            continue
        conn.send((CONTEXT_LOST, (lost, *spent)))
        conn.close()
        os._exit(0)  # no CUDA teardown in a poisoned context


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class IsolatedRunner:
    """Parent side. `run_case` returns when every kernel of the case has a row."""

    def __init__(self, payload: Payload):
        self.payload = payload
        self.proc = None
        self.conn = None
        self.restarts = 0
        self.context_losses: list[str] = []
        self._starting = False  # spawned, its READY not read yet

    def spawn(self) -> None:
        """Start the worker and return at once: its imports and CUDA context are made while the caller goes on
        (the sweep measures the bandwidth and starts the module build meanwhile); the first case waits for it."""
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, self.payload.to_dict()), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self._starting = True

    def _start(self) -> None:
        if not (self._starting and self.proc is not None and self.proc.is_alive()):
            self.spawn()
        self._starting = False
        kind, _ = self._recv()
        if kind != READY:
            raise RuntimeError(f"sweep worker failed to start ({describe_exit(self.proc.exitcode)})")

    def _recv(self):
        try:
            return self.conn.recv()
        except (EOFError, ConnectionError, OSError):
            self.proc.join(timeout=5)
            return ("died", describe_exit(self.proc.exitcode))

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(timeout=10)
            if self.proc.is_alive():
                self.proc.kill()
        self.proc = None

    def run_case(self, case: Case, done: set, bw, on_row, on_failed) -> tuple[dict, int]:
        """on_row(row_dict) for each row; on_failed(kernel, reason) when the worker died on a kernel."""
        wall: dict = {}
        measured = 0

        def add(delta: dict, n: int) -> None:
            nonlocal measured
            for k, v in delta.items():
                wall[k] = wall.get(k, 0.0) + v
            measured += n

        while True:
            if self.proc is None or not self.proc.is_alive() or self._starting:
                self._start()
            self.conn.send((asdict(case), sorted(done), bw))
            current = None
            while True:
                kind, payload = self._recv()
                if kind == KERNEL:
                    current = payload
                elif kind == ROW:
                    done.add((payload["kernel"], payload["case_id"]))
                    on_row(payload)
                elif kind == CASE_DONE:
                    add(*payload)
                    return wall, measured
                elif kind == CONTEXT_LOST:  # the failed row came first; a fresh worker does the rest
                    why, delta, n = payload
                    add(delta, n)
                    self.proc.join(timeout=30)
                    if self.proc.is_alive():
                        self.proc.kill()
                    self.proc = None
                    self.restarts += 1
                    self.context_losses.append(why)
                    break
                else:  # the worker died
                    self.proc = None
                    self.restarts += 1
                    if current is None or (current, case.case_id) in done:
                        raise RuntimeError(f"sweep worker died outside a kernel ({payload}) on {case.case_id}")
                    on_failed(current, f"worker process died ({payload}); restarted")
                    done.add((current, case.case_id))
                    break  # restart and go on with the case's remaining kernels
