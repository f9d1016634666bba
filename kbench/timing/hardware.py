"""Device-wide figures a run records once: the copy and read bandwidths and SM clocks.

The attention kernels mostly read (the KV cache) and write little, so their roofline ceiling is the read
bandwidth: the fastest of a few read-only kernels (torch reductions, a row sum, a gemv, and Triton read
kernels where Triton is installed) over a buffer many times the L2. A device-to-device copy reads and writes
each byte, so its bytes-per-second figure sits below what a read-mostly kernel reaches (fa2 read KV at 4,418
GB/s on the H200 against a copy figure of 4,147 GB/s). Both are recorded; the fraction a sweep reports
(roofline_frac) is against the read ceiling. On a GPU both are timed the way kbench times a kernel
(`_gpu_seconds`), so the ceiling and the kernels' rates are comparable.
"""
from __future__ import annotations

import os


CPU_BUFFER_BYTES = 256 << 20  # many times any CPU's last-level cache


def _median_s(fn, reps: int) -> float:
    """Median wall seconds of one call of `fn` on the CPU, over `reps` calls after a warm-up."""
    import time

    fn()  # warm-up (allocation, first touch)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _gpu_seconds(fn) -> float:
    """Seconds per call of `fn` on the GPU, timed as kbench times a kernel (kbench.timing.timer.GraphTimer: calls in
    a CUDA graph with a fence between them whose own time is subtracted, duty-cycled, the median of the
    replays), so that a bandwidth figure and a kernel's KV rate are measured the same way. Timed with plain
    events, five calls back to back after one warm-up call, the H200's probes sat up to 5% below the kernels'
    KV rates: such timing counts launch gaps and may catch the clocks ramping from idle."""
    from kbench.timing.timer import GraphTimer, StopRule

    rule = StopRule(spread_target=0.005, budget_s=0.2, min_samples=10, max_samples=200)  # ~0.3 s a probe
    # the warm-up and settle the probes were measured with (the read ceiling), unchanged by issue #29
    return GraphTimer(rule, warmup_ms=25.0, duty=0.4, settle_ms=20.0).measure(lambda i: fn()).median_us / 1e6


CPU_PROBES = ("amax-int32", "rowsum-f32")
ROW = 8192  # elements per row of the row-wise probes (a matrix of nbytes / (ROW * itemsize) rows)


def read_probes(device: str = "cuda", nbytes: int | None = None, reps: int = 20) -> dict[str, float]:
    """Bytes read per second (GB/s) by each read-only probe over one buffer of ``nbytes`` (1 GiB on a GPU,
    far above its L2; 256 MiB on a CPU): a bf16 sum with float32 accumulation and an int32 max (one
    scalar out), a float32 row sum and a bf16 matrix-vector product (cuBLAS gemv; one value per row out);
    on a CPU only `CPU_PROBES`.
    A torch reduction is not a ceiling on its own: on the H200 these four read at most 4,326 GB/s (the int32
    max) while the decode wrapper read KV at 4,506, so on a GPU with Triton the set also has Triton read
    kernels (`triton_read_probes`: tiled, persistent, and on SM90+ TMA-loaded; up to 4,605 GB/s there).
    Empty where the device is absent."""
    import torch

    cuda = str(device).startswith("cuda")
    if cuda and not torch.cuda.is_available():
        return {}
    nbytes = nbytes or ((1 << 30) if cuda else CPU_BUFFER_BYTES)
    nbytes -= nbytes % (ROW * 4)
    buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    buf.random_(0, 7)  # small finite values whatever the view (no NaN or inf bit patterns)
    bf16, f32 = buf.view(torch.bfloat16), buf.view(torch.float32)
    mat, vec = bf16.view(-1, ROW), torch.ones(ROW, dtype=torch.bfloat16, device=device)
    probes = {
        "sum-bf16": lambda: bf16.sum(dtype=torch.float32),
        "amax-int32": lambda: buf.view(torch.int32).amax(),
        "rowsum-f32": lambda: f32.view(-1, ROW).sum(dim=1),
        "gemv-bf16": lambda: torch.mv(mat, vec),
    }
    if not cuda:  # the CPU's bf16 sum and gemv are compute-bound (0.6 and 6 GB/s): no ceiling, seconds each
        probes = {k: probes[k] for k in CPU_PROBES}
    else:
        probes.update(triton_read_probes(f32))
    out = {}
    for name, fn in probes.items():
        try:
            s = _gpu_seconds(fn) if cuda else _median_s(fn, max(3, reps // 4))
        except Exception:  # noqa: BLE001 - a backend without the op (gemv in bf16 on an old CPU build): no figure
            continue
        out[name] = nbytes / s / 1e9
    del buf, bf16, f32, mat, vec
    if cuda:
        torch.cuda.empty_cache()
    return out


# Triton read kernels: each program sums BLOCK x ITERS float32 (wide, coalesced loads, evicted first, one
# float out per program; no bounds mask where the buffer is a whole number of tiles). A few shapes, because
# the best one differs between GPUs. And persistent ones: PER_SM programs per SM, each striding over the
# buffer BLOCK at a time (the loop software-pipelined: more loads in flight per SM).
TRITON_SHAPES = ((2048, 16, 8), (4096, 8, 8), (1024, 32, 4), (8192, 4, 16))  # (BLOCK, ITERS, num_warps)
TRITON_PERSISTENT = ((4096, 2, 8), (8192, 1, 16), (2048, 4, 4))  # (BLOCK, PER_SM, num_warps)
# and with the tensor memory accelerator (Hopper's TMA, as FA3 and FlashInfer's SM90 kernels load KV): the
# buffer as rows of BN float32, BM x BN tiles bulk-copied to shared memory STAGES deep, persistent
TRITON_TMA = ((32, 256, 4, 4, 1), (64, 128, 3, 4, 2), (16, 256, 6, 4, 2))  # (BM, BN, STAGES, warps, PER_SM)


def triton_read_probes(f32, sms: int | None = None) -> dict:
    """{name: fn} of Triton read kernels over the float32 tensor `f32` (on its device); {} without Triton or
    where a kernel does not compile (the torch probes then stand alone). `sms`: multiprocessors, for the
    persistent kernels' grid (the device's count by default; 4 where there is none, as in the interpreter)."""
    try:
        import triton

        from kbench.timing.triton_read import read_sum as tiled, read_sum_persistent as persistent, read_sum_tma as tma
    except Exception:  # noqa: BLE001 - no Triton, or one that cannot build here
        return {}
    import torch

    if sms is None:
        sms = torch.cuda.get_device_properties(f32.device).multi_processor_count if f32.is_cuda else 4

    def launcher(x, block, iters, warps):
        n = x.numel()
        grid = (triton.cdiv(n, block * iters),)
        partial = torch.empty(grid[0], dtype=torch.float32, device=x.device)
        even = n % (block * iters) == 0

        def fn():
            tiled[grid](x, partial, n, BLOCK=block, ITERS=iters, EVEN=even, num_warps=warps)
            return partial
        return fn

    def launcher_persistent(x, block, per_sm, warps):
        n = x.numel()
        grid = (max(1, min(sms * per_sm, triton.cdiv(n, block))),)
        partial = torch.empty(grid[0], dtype=torch.float32, device=x.device)
        even = n % block == 0

        def fn():
            persistent[grid](x, partial, n, BLOCK=block, EVEN=even, num_warps=warps)
            return partial
        return fn

    def launcher_tma(x, bm, bn, stages, warps, per_sm):
        from triton.tools.tensor_descriptor import TensorDescriptor

        rows = x.view(-1, bn)  # the caller gives a whole number of rows
        ntiles = triton.cdiv(rows.shape[0], bm)
        grid = (max(1, min(sms * per_sm, ntiles)),)
        desc = TensorDescriptor.from_tensor(rows, block_shape=[bm, bn])
        partial = torch.empty(grid[0] * bn, dtype=torch.float32, device=x.device)

        def fn():
            tma[grid](desc, partial, ntiles, BM=bm, BN=bn, STAGES=stages, num_warps=warps)
            return partial
        return fn

    def small_sizes(make, shape):  # whole tiles, and a ragged end
        if make is launcher_tma:
            return [3 * shape[0] * shape[1], (3 * shape[0] + 5) * shape[1]]
        return [3 * shape[0] * shape[1], 3 * shape[0] * shape[1] + 5]

    tma_ok = f32.is_cuda and torch.cuda.get_device_capability(f32.device)[0] >= 9 or not f32.is_cuda
    out = {}
    for name, make, shape in ([(f"triton-{b}x{i}w{w}", launcher, (b, i, w)) for b, i, w in TRITON_SHAPES]
                              + [(f"triton-persistent-{b}x{p}w{w}", launcher_persistent, (b, p, w))
                                 for b, p, w in TRITON_PERSISTENT]
                              + [(f"triton-tma-{bm}x{bn}s{st}w{w}", launcher_tma, (bm, bn, st, w, ps))
                                 for bm, bn, st, w, ps in (TRITON_TMA if tma_ok else ())]):
        if make is launcher_tma and f32.numel() % shape[1]:
            continue
        try:  # first on small tensors of ordinary numbers, a whole number of tiles and a ragged end:
            for size in small_sizes(make, shape):  # each must sum every element
                small = torch.rand(size, dtype=torch.float32, device=f32.device)
                got, want = make(small, *shape)().sum(), small.sum()
                if not torch.allclose(got, want, rtol=1e-4):
                    raise ValueError("a kernel that reads something else is no probe")
        except Exception:  # noqa: BLE001
            continue
        out[name] = make(f32, *shape)
    return out


def read_bandwidth_gbs(device: str = "cuda", nbytes: int | None = None, reps: int = 20) -> float | None:
    """Read-only ceiling (GB/s): the fastest of `read_probes`. None where the device is absent."""
    probes = read_probes(device, nbytes, reps)
    return max(probes.values()) if probes else None


def copy_bandwidth_gbs(device: str = "cuda", nbytes: int = 1 << 30, reps: int = 20) -> float | None:
    """Device-to-device copy, bytes read + written per second (GB/s), timed as a kernel is (`_gpu_seconds`):
    the faster of `copy_` and an SM copy kernel (an int32 elementwise or-with-zero). Inside a CUDA graph
    `copy_` is a memcpy node that the copy engine runs: on the H200 2,795 GB/s against about 4,200 for a copy
    on the SMs, which is the figure a kernel's traffic compares with. On a CPU ("cpu"): a host memory copy
    of 256 MiB, median of a few."""
    import torch

    if not str(device).startswith("cuda"):
        src = torch.ones(CPU_BUFFER_BYTES, dtype=torch.uint8)
        dst = torch.empty_like(src)
        return 2 * CPU_BUFFER_BYTES / _median_s(lambda: dst.copy_(src), max(3, reps // 4)) / 1e9
    if not torch.cuda.is_available():
        return None
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    s32, d32 = src.view(torch.int32), dst.view(torch.int32)
    s = min(_gpu_seconds(lambda: dst.copy_(src)), _gpu_seconds(lambda: torch.bitwise_or(s32, 0, out=d32)))
    del src, dst, s32, d32
    torch.cuda.empty_cache()
    return 2 * nbytes / s / 1e9


# a read ceiling above the memory's theoretical peak by more than this is not a ceiling: the probes measured
# something else (a cache, a timer error); the sweep and `kbench env` say so
PEAK_SLACK = 1.03


def memory_peak_gbs(index: int = 0) -> float | None:
    """The memory's theoretical peak (GB/s) from NVML: 2 transfers per clock (DDR/HBM) x the maximum memory
    clock x the bus width (H100 SXM: 2 x 2,619 MHz x 5,120 bits = 3,352 GB/s, its data sheet's 3.35 TB/s).
    None where NVML does not say (no NVIDIA driver, a CPU)."""
    h = _handle(index)
    if h is None:
        return None
    try:
        mhz = float(_nvml.nvmlDeviceGetMaxClockInfo(h, _nvml.NVML_CLOCK_MEM))
        bits = int(_nvml.nvmlDeviceGetMemoryBusWidth(h))
    except Exception:  # noqa: BLE001 - an NVML without the call, a device that does not say
        return None
    return peak_gbs(mhz, bits)


def peak_gbs(memory_mhz: float, bus_bits: int) -> float | None:
    """2 x clock x bus width, in GB/s; None for a zero or missing figure."""
    if not memory_mhz or not bus_bits or memory_mhz <= 0 or bus_bits <= 0:
        return None
    return 2 * memory_mhz * 1e6 * bus_bits / 8 / 1e9


def ceiling_problem(read_gbs: float | None, peak: float | None) -> str | None:
    """Why a measured read ceiling cannot be one (above the theoretical peak), or None."""
    if not read_gbs or not peak or read_gbs <= peak * PEAK_SLACK:
        return None
    return (f"the read ceiling {read_gbs:,.0f} GB/s is above the memory's theoretical peak {peak:,.0f} GB/s "
            f"(NVML: 2 x max memory clock x bus width): the probes measured something else, so roofline_frac "
            f"reads low; measure again (kbench env) before quoting it")


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
