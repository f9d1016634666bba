"""Probing the machine once, before any kernel is touched: the GPU (or the CPU), torch, CUDA, the driver and
FlashInfer, described as a kbench.device.DeviceInfo (the data class kernels' supports() read)."""
from __future__ import annotations

import os
import platform

from kbench.device import DeviceInfo


def _driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        return None


def probe_flashinfer() -> tuple[str | None, str | None]:
    try:
        import flashinfer

        return getattr(flashinfer, "__version__", "unknown"), None
    except Exception as e:  # missing or broken install: every FlashInfer kernel is skipped with this reason
        from kbench.errors import first_line

        return None, first_line(e, 200)


def probe_device(index: int = 0, with_flashinfer: bool = True) -> DeviceInfo:
    import torch

    fi_ver, fi_err = probe_flashinfer() if with_flashinfer else (None, "not probed")
    if not torch.cuda.is_available():
        cpu = platform.processor() or platform.machine()
        return DeviceInfo(cuda=False, name=f"CPU ({cpu}, {os.cpu_count()} cores)", sm=0, torch_version=torch.__version__,
                          flashinfer_version=fi_ver, flashinfer_error=fi_err)
    props = torch.cuda.get_device_properties(index)
    return DeviceInfo(
        cuda=True,
        name=props.name,
        sm=props.major * 10 + props.minor,
        index=index,
        total_memory=props.total_memory,
        l2_bytes=getattr(props, "L2_cache_size", 0) or 0,
        multiprocessors=props.multi_processor_count,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        driver=_driver_version(),
        flashinfer_version=fi_ver,
        flashinfer_error=fi_err,
    )
