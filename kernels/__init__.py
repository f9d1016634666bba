"""Attention kernels behind one small interface, the paged-KV input builder, the reference and the device
description the kernels' `supports()` reads.

A kernel module knows only how to call its kernel: it does not time, print or write files (the timer is
the engine's: kbench.timer).
"""
from kbench.kernels.base import Kernel, KernelFn
from kbench.kernels.device import DeviceInfo, probe_device
from kbench.kernels.inputs import Inputs, build_inputs, xqa_draft_mask
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import all_kernels, get_kernel, kernel_names

__all__ = [
    "DeviceInfo", "Inputs", "Kernel", "KernelFn", "all_kernels", "build_inputs", "get_kernel",
    "kernel_names", "probe_device", "reference_attention", "xqa_draft_mask",
]
