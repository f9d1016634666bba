"""The interface every kernel family implements."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

    from kbench.case import Case
    from kbench.kernels.device import DeviceInfo
    from kbench.kernels.inputs import Inputs

# prepare() returns this: call it with the index of an input copy; it returns the output [bs*q, Hq, d].
KernelFn = Callable[[int], "torch.Tensor"]

WORKSPACE_BYTES = 128 * 1024 * 1024


class Kernel:
    name: str = ""
    path: str = ""  # "decode" | "context" | "reference"
    description: str = ""
    kv_dtypes: tuple[str, ...] = ("bf16", "fp16")
    test_only: bool = False  # never selected by "all" (fault injection); runs only when named

    def supports(self, device: "DeviceInfo", case: "Case") -> str | None:
        """None if this kernel can run the case here, else the reason it cannot."""
        raise NotImplementedError

    def backend(self, device: "DeviceInfo") -> str:
        """Which implementation runs on this device (for kernels that pick one, such as xqa/trtllm-gen)."""
        return self.name

    def jit_key(self, case: "Case") -> tuple:
        """Cases with equal keys share compiled modules: kbench compiles each key once before timing."""
        return (case.dtype, case.kv_dtype, case.head_dim, case.group, case.page_size, case.kv_layout)

    def prepare(self, inputs: "Inputs") -> KernelFn:
        raise NotImplementedError

    def checked_output(self, inputs: "Inputs", out: "torch.Tensor") -> "torch.Tensor":
        """The rows of an output that the reference checks (a padded kernel drops its padding rows)."""
        return out

    # --- helpers shared by the FlashInfer kernels -------------------------------------------------
    def _workspace(self, device) -> "torch.Tensor":
        """Each kernel owns its workspace, zeroed before every case: xqa keeps semaphores in the first
        8 MiB and silently returns garbage when another kernel has written there (kernels.md)."""
        import torch

        ws = getattr(self, "_ws", None)
        if ws is None or ws.device != device:
            ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
            self._ws = ws
        else:
            ws.zero_()
        return ws


def realistic_reason(case: "Case", **cannot: str) -> str | None:
    """The reason a kernel gives for a realistic-batch axis it cannot take: cannot maps window / sinks /
    skip_softmax to that reason; None when the case asks for none of them."""
    asks = {"window": case.window_left >= 0, "sinks": case.sinks == "on", "skip_softmax": case.skip_softmax != "off"}
    for axis, why in cannot.items():
        if asks[axis]:
            return why
    return None


def needs_cuda(device: "DeviceInfo", min_sm: int | None = None, only_sm: tuple[int, ...] | None = None,
               label: str = "") -> str | None:
    if not device.cuda:
        return "needs a CUDA GPU (none here)"
    if device.flashinfer_error:
        return f"flashinfer is not importable: {device.flashinfer_error}"
    if only_sm is not None and device.sm not in only_sm:
        want = "/".join(f"SM{s}" for s in only_sm)
        return f"needs {want}{label} (this GPU is SM{device.sm})"
    if min_sm is not None and device.sm < min_sm:
        return f"needs SM{min_sm} or newer (this GPU is SM{device.sm})"
    return None
