"""Device-wide figures a run records once: the copy and read bandwidths and SM clocks.

The attention kernels mostly read (the KV cache) and write little, so their roofline ceiling is the read
bandwidth: a read-only kernel (a torch reduction) over a buffer many times the L2. A device-to-device copy
reads and writes each byte, so its bytes-per-second figure sits below what a read-mostly kernel reaches
(fa2 read KV at 4,418 GB/s on the H200 against a copy figure of 4,147 GB/s). Both are recorded; the
fraction a sweep reports (roofline_frac) is against the read ceiling."""
from __future__ import annotations

import os


CPU_BUFFER_BYTES = 256 << 20  # many times any CPU's last-level cache


def _median_s(fn, reps: int, cuda: bool) -> float:
    import time

    import torch

    fn()  # warm-up (allocation, first touch)
    times = []
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1000)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def read_bandwidth_gbs(device: str = "cuda", nbytes: int | None = None, reps: int = 20) -> float | None:
    """Read-only ceiling: bytes read per second (GB/s) by the fastest of two torch reductions (a bf16 sum
    with float32 accumulation, an int32 max) over a buffer of ``nbytes`` (1 GiB on a GPU, far above its L2;
    256 MiB on a CPU), median of ``reps`` calls each. Writes one scalar per call."""
    import torch

    cuda = str(device).startswith("cuda")
    if cuda and not torch.cuda.is_available():
        return None
    nbytes = nbytes or ((1 << 30) if cuda else CPU_BUFFER_BYTES)
    buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    buf.random_(0, 7)
    best = 0.0
    for fn in (lambda: buf.view(torch.bfloat16).sum(dtype=torch.float32), lambda: buf.view(torch.int32).amax()):
        best = max(best, nbytes / _median_s(fn, reps if cuda else max(3, reps // 4), cuda) / 1e9)
    del buf
    if cuda:
        torch.cuda.empty_cache()
    return best


def copy_bandwidth_gbs(device: str = "cuda", nbytes: int = 1 << 30, reps: int = 20) -> float | None:
    """Device-to-device copy, bytes read + written per second (GB/s), median of `reps` copies. On a CPU
    ("cpu"): a host memory copy of 256 MiB."""
    import torch

    if not str(device).startswith("cuda"):
        src = torch.ones(CPU_BUFFER_BYTES, dtype=torch.uint8)
        dst = torch.empty_like(src)
        return 2 * CPU_BUFFER_BYTES / _median_s(lambda: dst.copy_(src), max(3, reps // 4), False) / 1e9
    if not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1000)
    times.sort()
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / times[len(times) // 2] / 1e9


def host_available_bytes() -> int | None:
    """Memory the OS can give this process now (MemAvailable), or None where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


_nvml = None


def _handle(index: int):
    global _nvml
    try:
        import pynvml

        if _nvml is None:
            pynvml.nvmlInit()
            _nvml = pynvml
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


def clocks(index: int = 0) -> dict:
    """Current and maximum SM and memory clocks (MHz), when NVML answers."""
    h = _handle(index)
    if h is None:
        return {}
    out = {}
    for key, fn, kind in (("sm_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
                          ("mem_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
                          ("sm_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"),
                          ("mem_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM")):
        try:
            out[key] = float(getattr(_nvml, fn)(h, getattr(_nvml, kind)))
        except Exception:
            pass
    return out
