"""Test only: a kernel that writes out of bounds, to prove that a CUDA fault costs one row, not the sweep.

`test-oob-write` launches a four-instruction PTX kernel (loaded through the CUDA driver API with ctypes,
so nothing is compiled ahead) that stores 4 bytes 1 TiB past its query tensor. The GPU reports an
illegal address at the next synchronisation and the process's CUDA context is unusable from then on:
the sweep records the row as failed and, isolated (the default on a GPU), restarts its worker.

It is never part of `--kernels all`; name it to run it. It runs no attention: the fault comes first.
"""
from __future__ import annotations

import ctypes

from kbench.kernels.base import Kernel, KernelFn, each_copy, needs_cuda
from kbench.kernels.inputs import Inputs

OOB_OFFSET = 1 << 40  # far past any allocation: no device maps this much memory

# PTX for compute_80: the driver JIT-compiles it for any newer GPU (SM90, SM100, SM120)
PTX = rb"""
.version 7.0
.target sm_80
.address_size 64

.visible .entry kbench_oob_write(.param .u64 base, .param .u64 offset)
{
    .reg .b64 %rd<4>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [base];
    ld.param.u64 %rd2, [offset];
    add.s64 %rd3, %rd1, %rd2;
    mov.u32 %r1, 0xDEADBEEF;
    st.global.u32 [%rd3], %r1;
    ret;
}
"""

_fn = None


def _check(lib, rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError(f"{what} failed: {(name.value or b'?').decode()} ({rc})")


def launch_oob_write(tensor, offset: int = OOB_OFFSET) -> None:
    """Launch one thread that writes at tensor.data_ptr() + offset, on torch's current stream."""
    import torch

    global _fn
    lib = ctypes.CDLL("libcuda.so.1")
    torch.cuda.current_stream().synchronize()  # torch's primary context is current on this thread
    if _fn is None:
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib, lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX + b"\0")), "cuModuleLoadData")
        _check(lib, lib.cuModuleGetFunction(ctypes.byref(fn), mod, b"kbench_oob_write"), "cuModuleGetFunction")
        _fn = fn
    base, off = ctypes.c_uint64(tensor.data_ptr()), ctypes.c_uint64(offset)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(base), ctypes.c_void_p),
                                   ctypes.cast(ctypes.byref(off), ctypes.c_void_p))
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    _check(lib, lib.cuLaunchKernel(_fn, 1, 1, 1, 1, 1, 1, 0, stream, params, None), "cuLaunchKernel")


class OutOfBoundsWrite(Kernel):
    name = "test-oob-write"
    path = "decode"
    description = "test only: writes 4 bytes 1 TiB past its input (a CUDA illegal-address fault); never in 'all'"
    kv_dtypes = ("bf16", "fp16", "fp8")
    test_only = True

    def supports(self, device, case):
        return needs_cuda(device)

    def jit_key(self, case):
        return None  # nothing to compile ahead (the driver loads the PTX in a millisecond)

    def prepare(self, inputs: Inputs) -> KernelFn:
        def call(q, kv_cache):
            launch_oob_write(q)
            return q  # never reached in practice: the synchronisation after the call raises

        return each_copy(inputs, call)  # no workspace and no output: the fault comes first
