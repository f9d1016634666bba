"""Device-wide figures a run records once: copy bandwidth (the roofline ceiling) and SM clocks."""
from __future__ import annotations

import os


def copy_bandwidth_gbs(device: str = "cuda", nbytes: int = 1 << 30, reps: int = 20) -> float | None:
    """Device-to-device copy, bytes read + written per second (GB/s), median of `reps` copies."""
    import torch

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
