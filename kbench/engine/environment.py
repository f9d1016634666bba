"""What `kbench env` reports, as a dict: the device (kbench.timing.probe), its clocks and NVML memory peak, the
measured copy and read bandwidth (the read figure is the roofline ceiling of a sweep's roofline_frac), a warning
when the read ceiling is above the peak, and FlashInfer's compiled modules (kbench.engine.jit_cache)."""
from __future__ import annotations


def environment(bandwidth: bool = True, device_index: int = 0) -> dict:
    """`kbench env --json` from Python. bandwidth=False skips the two bandwidth probes (about a second on a GPU)."""
    from kbench import __version__
    from kbench.engine.jit_cache import cache_info
    from kbench.timing.hardware import (ceiling_problem, clocks, copy_bandwidth_gbs, memory_peak_gbs,
                                        read_bandwidth_gbs)
    from kbench.timing.probe import probe_device

    from kbench.engine.request import gpu_count
    from kbench.engine.shards import check_device

    dev = probe_device(check_device(device_index, gpu_count()))
    info = {"kbench": __version__, **dev.to_dict()}
    peak = None
    if dev.cuda:
        info["clocks"] = clocks(dev.index)
        peak = info["memory_peak_gbs"] = memory_peak_gbs(dev.index)
    if bandwidth:
        info["copy_bandwidth_gbs"] = copy_bandwidth_gbs(dev.torch_device)
        info["read_bandwidth_gbs"] = read_bandwidth_gbs(dev.torch_device)
        if info["copy_bandwidth_gbs"] and info["read_bandwidth_gbs"]:
            info["read_over_copy"] = round(info["read_bandwidth_gbs"] / info["copy_bandwidth_gbs"], 3)
        if peak and info["read_bandwidth_gbs"]:
            info["read_over_peak"] = round(info["read_bandwidth_gbs"] / peak, 3)
        problem = ceiling_problem(info["read_bandwidth_gbs"], peak)
        if problem:
            info["warning"] = problem
    info["flashinfer_cache"] = cache_info().to_dict()
    return info
