"""Attention kernels behind one small interface, the paged-KV input builder, the reference and the device
description the kernels' `supports()` reads.

A kernel module knows only how to call its kernel: it does not time, print, write files or probe the machine.
The timer (kbench.timing.timer) and the device probe (kbench.timing.probe) are the engine's; what the probe finds reaches the
kernels as `DeviceInfo`, a plain data class kept here because kernels read it and never import the engine.
`Kernel.launch` (kernels/base.py) is the prepare() every FlashInfer kernel shares: its workspace, a NaN-poisoned
output in the case's dtype and run(i) over the input copies.
"""
from kbench.kernels.base import Kernel, KernelFn
from kbench.device import DeviceInfo
from kbench.kernels.inputs import Inputs, build_inputs, xqa_draft_mask
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import all_kernels, get_kernel, kernel_names

__all__ = [
    "DeviceInfo", "Inputs", "Kernel", "KernelFn", "all_kernels", "build_inputs", "get_kernel",
    "kernel_names", "reference_attention", "xqa_draft_mask",
]
