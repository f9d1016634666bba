"""Triton read kernels for the read-bandwidth ceiling (kbench.timing.hardware.triton_read_probes): each sums a float32
buffer, tiled, persistent or TMA-loaded. Imported only where Triton is installed."""
import triton
import triton.language as tl


@triton.jit
def load_block(x_ptr, offs, n, EVEN: tl.constexpr):
    """One block of float32, evicted first; bounds-masked unless the buffer is a whole number of blocks."""
    if EVEN:
        return tl.load(x_ptr + offs, eviction_policy="evict_first")
    return tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")


@triton.jit
def read_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr, EVEN: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * BLOCK * ITERS
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(ITERS):  # unrolled: every load of the program issued before the sums wait
        acc += load_block(x_ptr, base + i * BLOCK + tl.arange(0, BLOCK), n, EVEN)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def read_sum_persistent(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for b in range(pid, tl.cdiv(n, BLOCK), nprog):
        acc += load_block(x_ptr, tl.cast(b, tl.int64) * BLOCK + tl.arange(0, BLOCK), n, EVEN)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def read_sum_tma(desc, out_ptr, ntiles, BM: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BN], dtype=tl.float32)
    for t in tl.range(pid, ntiles, nprog, num_stages=STAGES):
        acc += tl.sum(desc.load([t * BM, 0]), axis=0)  # rows past the end come back as zeros
    tl.store(out_ptr + pid * BN + tl.arange(0, BN), acc)
