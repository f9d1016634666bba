"""What a kernel's supports() is told about the machine: a plain data class, filled by the engine's probe
(kbench.timing.probe) before any kernel is touched. It lives here, not in the engine, because every kernel module
reads it (supports(device, case), backend(device)) and kernels never import the engine."""
from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field


@dataclass
class DeviceInfo:
    cuda: bool
    name: str
    sm: int  # compute capability as major*10+minor (90 for H100/H200); 0 without a GPU
    index: int = 0
    total_memory: int = 0
    l2_bytes: int = 0
    multiprocessors: int = 0
    torch_version: str = ""
    cuda_version: str | None = None
    driver: str | None = None
    flashinfer_version: str | None = None
    flashinfer_error: str | None = None
    host: str = field(default_factory=platform.node)

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}" if self.cuda else "cpu"

    def to_dict(self) -> dict:
        return asdict(self)
