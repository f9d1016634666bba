"""The host side of a route: wall time of the work an engine redoes on its CPU every step (plan(), masks, metadata
copies), on this machine's CPU, with the GPU idle before each sample (what the work costs, not what it waits
for behind earlier GPU work).

    m = time_host(step, device_index)      # HostMeasurement(median_us, p25_us, p75_us, samples)
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable

WARMUP = 5
SAMPLES = 41


@dataclass(frozen=True)
class HostMeasurement:
    median_us: float
    p25_us: float
    p75_us: float
    samples: int


def time_host(step: Callable[[], object], sync: Callable[[], None] | None = None, warmup: int = WARMUP,
              samples: int = SAMPLES) -> HostMeasurement:
    """Median and quartiles of `samples` calls of step() (after `warmup`), each timed alone: sync() (the GPU's
    queue drained) before the clock starts, and again after it stops so the next sample starts idle too."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(samples):
        sync()
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e6)
    sync()
    q = statistics.quantiles(times, n=4, method="inclusive")
    return HostMeasurement(statistics.median(times), q[0], q[2], len(times))


def host_cpu() -> tuple[int, str]:
    """(logical CPUs, model name) of this host: the route rows' host_cpus and host_cpu."""
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return os.cpu_count() or 0, name or platform.processor() or platform.machine()
