"""Compiling every JIT module a sweep needs before the first measurement.

FlashInfer locks each module by name (a file lock), so different modules can compile at the same time in
different processes: kbench runs up to `workers` compile processes, then loads the results in-process
(which only reads the cached .so files).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace

from kbench.cases.case import Case
from kbench.errors import first_line


def small_case(case: Case) -> Case:
    """A small case that needs the same compiled modules as `case` (window and sinks select module
    variants; a ragged q keeps its distribution over a few requests, a file of lengths does not travel)."""
    ragged = case.q_dist != "fixed" and not case.q_dist.startswith("file:")
    return replace(case, batch_size=8 if ragged else 1, kv_len=max(case.q_len, 2 * case.page_size), kv_dist="fixed",
                   q_dist=case.q_dist if ragged else "fixed", max_seq_len="tight")


@dataclass(frozen=True)
class CompileJob:
    kernel: str
    case: Case

    def label(self) -> str:
        c = self.case
        qd = "" if c.q_dtype == "dtype" else f" q{c.q_dtype}"  # an fp8 query is its own module
        tree = "" if c.tree == "chain" else " tree"  # fa2's tree variant also builds FlashInfer's packbits module
        return (f"{self.kernel} {c.dtype}/{c.kv_dtype}{qd} q{c.q_len} group{c.group} d{c.head_dim} p{c.page_size} "
                f"{c.kv_layout}{tree}")


def compile_targets(kernels, cases: list[Case], device, skip=None) -> dict[tuple, CompileJob]:
    """Each distinct (kernel, jit_key) among the cases that the kernel runs on this device, with its first case:
    what the sweep compiles before it measures and what `kbench prebuild` builds (one definition for both).
    skip(kernel, case): True for a pair the caller already has (a resumed sweep's rows)."""
    from kbench.engine.measure import kernel_reason

    jobs: dict[tuple, CompileJob] = {}
    for case in cases:
        for k in kernels:
            if k.path == "reference" or k.jit_key(case) is None or (skip is not None and skip(k, case)):
                continue
            key = (k.name, k.jit_key(case))
            if key not in jobs and not kernel_reason(k, device, case):
                jobs[key] = CompileJob(k.name, case)
    return jobs


def prebuilt(job: CompileJob, device) -> bool:
    """True when every module of the job is already built (AOT or in the JIT cache): nothing to compile."""
    from kbench.engine.jit_cache import module_state
    from kbench.kernels.registry import get_kernel

    try:
        specs = get_kernel(job.kernel).jit_specs(device, job.case)
    except Exception:  # noqa: BLE001 - cannot tell: compile it as before
        return False
    return bool(specs) and all(module_state(s) != "missing" for s in specs)


def run_job(kernel: str, case: Case, device_index: int = 0) -> tuple[float, str | None]:
    """Build, prepare and call one small case; returns (seconds, error or None)."""
    import torch

    from kbench.kernels.inputs import build_inputs
    from kbench.kernels.registry import get_kernel

    t0 = time.perf_counter()
    try:
        torch.cuda.set_device(device_index)
        inp = build_inputs(small_case(case), f"cuda:{device_index}")
        get_kernel(kernel).prepare(inp)(0)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, None
    except Exception as e:
        return time.perf_counter() - t0, first_line(e)


def _worker_init(max_jobs: int) -> None:
    os.environ["MAX_JOBS"] = str(max_jobs)


def default_workers() -> int:
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def compile_all(jobs: list[CompileJob], device_index: int = 0, workers: int | None = None, on_done=None,
                in_process: bool = True, device=None) -> dict:
    """Compile in parallel processes, then load in this one. Returns {label: error} for failures.

    in_process=False (isolated sweeps): this process never runs a kernel, so a fault while compiling
    cannot poison it; every job runs in a worker process, and a failed one is tried once more alone.
    device (a DeviceInfo): a job whose modules are all built already (`kbench prebuild`, a kept JIT cache)
    starts no compile process (on_done gets it at 0 s); in-process it is loaded with the others."""
    ready = [j for j in jobs if device is not None and prebuilt(j, device)]
    todo = [j for j in jobs if j not in ready]
    for j in ready:
        if on_done:
            on_done(j, 0.0, None)
    workers = default_workers() if workers is None else workers
    errors: dict[str, str] = {}
    pooled = not in_process or (workers > 1 and len(todo) > 1)
    if pooled:
        failed = _run_pool(todo, device_index, max(1, min(workers, len(todo))), on_done) if todo else {}
        if not in_process:
            if failed:  # a lock race or a worker death: once more, one at a time
                again = _run_pool(list(failed), device_index, 1, None)
                errors = {j.label(): err for j, err in again.items()}
            return errors
    # in-process: loads what was prebuilt or the workers built (or compiles it here when a worker failed)
    for j in ready + todo:
        secs, err = run_job(j.kernel, j.case, device_index)
        if err:
            errors[j.label()] = err
        if on_done and not pooled and j in todo:
            on_done(j, secs, err)
    return errors


def _run_pool(jobs: list[CompileJob], device_index: int, n: int, on_done) -> dict:
    """Runs the jobs in n spawned processes; returns {job: error} for the failed ones."""
    # every worker may use all cores: most modules are one translation unit (xqa), a few are many
    # (fmha-v2, fa3), and splitting the cores evenly starves those few (seen: fmha-v2 > 5 min at 2 jobs)
    max_jobs = os.cpu_count() or 2
    ctx = mp.get_context("spawn")
    failed = {}
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker_init, initargs=(max_jobs,)) as ex:
        futs = {ex.submit(run_job, j.kernel, j.case, device_index): j for j in jobs}
        for f in as_completed(futs):
            j = futs[f]
            try:
                secs, err = f.result()
            except Exception as e:  # a worker died (CUDA fault, OOM)
                secs, err = 0.0, f"worker died: {type(e).__name__}"
            if err:
                failed[j] = err
            if on_done:
                on_done(j, secs, err)
    return failed
