"""The interface every kernel family implements."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

    from kbench.cases.case import Case
    from kbench.device import DeviceInfo
    from kbench.kernels.inputs import Inputs

# prepare() returns this: call it with the index of an input copy; it returns the output [bs*q, Hq, d].
KernelFn = Callable[[int], "torch.Tensor"]
# what a kernel module hands `Launch.run`: (query, kv_cache) of one input copy -> the output
CopyCall = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]

WORKSPACE_BYTES = 128 * 1024 * 1024


class Kernel:
    name: str = ""
    path: str = ""  # "decode" | "context" | "reference"
    description: str = ""
    kv_dtypes: tuple[str, ...] = ("bf16", "fp16")
    # the attention kinds (kbench.cases.axes.ATTENTIONS) it computes; any other case is a skipped row
    attentions: tuple[str, ...] = ("gqa",)
    test_only: bool = False  # never selected by "all" (fault injection); runs only when named
    workspace_bytes: int = WORKSPACE_BYTES  # its own FlashInfer workspace (a route: the engine's size)
    # the page sizes it takes ((): every page of the axis, 1 included) and where that limit is read
    page_sizes: tuple[int, ...] = ()
    page_source: str = ""

    def supports(self, device: "DeviceInfo", case: "Case") -> str | None:
        """None if this kernel can run the case here, else the reason it cannot."""
        raise NotImplementedError

    def backend(self, device: "DeviceInfo") -> str:
        """Which implementation runs on this device (for kernels that pick one, such as xqa/trtllm-gen)."""
        return self.name

    def named_problem(self, kv_dtypes: tuple[str, ...]) -> str | None:
        """Why naming this kernel in a sweep over these KV dtypes is a mistake the user can fix before any case runs
        (its library is not installed; it refuses every KV dtype asked for): the sweep refuses it (exit 2). None by
        default: a kernel that cannot run a case gives that case a skipped row with the reason."""
        return None

    def jit_key(self, case: "Case") -> tuple:
        """Cases with equal keys share compiled modules: kbench compiles each key once before timing."""
        return (case.dtype, case.kv_dtype, case.head_dim, case.group, case.page_size, case.kv_layout)

    def jit_specs(self, device: "DeviceInfo", case: "Case") -> list:
        """The FlashInfer JitSpecs (one per compiled module, named by FlashInfer: equal names are one module)
        that prepare() builds or loads for this case on this device, asked only for cases supports() takes;
        [] for a kernel that compiles nothing ahead. `kbench prebuild` builds them and the sweep's compile step
        skips cases whose modules are all there. FlashInfer derives a module's flags from the target
        architectures (FLASHINFER_CUDA_ARCH_LIST, else this machine's GPUs), read when it is imported:
        kbench.engine.prebuild sets the target first."""
        return []

    def prepare(self, inputs: "Inputs") -> KernelFn:
        """Plan and allocate once, then return run(i); most kernels build it with `self.launch(inputs)`."""
        raise NotImplementedError

    def launch(self, inputs: "Inputs", padded: bool = False, workspace: bool = True) -> "Launch":
        """The part of prepare() every FlashInfer kernel shares: its own zeroed workspace (`_workspace`),
        one output poisoned with NaN (a row the kernel leaves unwritten fails the check) in the case's
        dtype and shaped like the query (the padded query for kernels with one q_len per request), and
        `run(call)` making run(i) from call(query, kv_cache) of input copy i."""
        import torch

        from kbench.kernels.inputs import torch_dtype

        q = inputs.q_padded() if padded else inputs.q
        out = torch.full(q.shape, float("nan"), dtype=torch_dtype(inputs.case.dtype), device=q.device)
        return Launch(inputs, self._workspace(inputs.device) if workspace else None, out, padded)

    def checked_output(self, inputs: "Inputs", out: "torch.Tensor") -> "torch.Tensor":
        """The rows of an output that the reference checks (a padded kernel drops its padding rows)."""
        return out

    # --- helpers shared by the FlashInfer kernels -------------------------------------------------
    def _workspace(self, device) -> "torch.Tensor":
        """Each kernel owns its workspace, zeroed before every case: xqa keeps semaphores in the first
        8 MiB and silently returns garbage when another kernel has written there (kernels.md)."""
        import torch

        ws = getattr(self, "_ws", None)
        if ws is None or ws.device != device or ws.numel() != self.workspace_bytes:
            ws = torch.zeros(self.workspace_bytes, dtype=torch.uint8, device=device)
            self._ws = ws
        else:
            ws.zero_()
        return ws


@dataclass
class Launch:
    """What `Kernel.launch` prepared for one case: ws (None when the kernel takes no workspace), out."""

    inputs: "Inputs"
    ws: "torch.Tensor | None"
    out: "torch.Tensor"
    padded: bool = False

    def run(self, call: CopyCall) -> KernelFn:
        return each_copy(self.inputs, call, self.padded)


def each_copy(inputs: "Inputs", call: CopyCall, padded: bool = False) -> KernelFn:
    """run(i): call(query, kv_cache) on input copy i (the copies rotate so L2 does not hold them)."""

    def run(i: int) -> "torch.Tensor":
        return call(inputs.q_padded(i) if padded else inputs.copies[i].q, inputs.copies[i].kv_cache)

    return run


# FlashInfer 0.7.2.post1 takes an e4m3 query in trtllm-gen decode, trtllm context and fmha-v2 (SM90), which is
# where SGLang casts q to fp8 when the KV cache is fp8; xqa builds only bf16/fp16-query modules (jit/xqa.py)
Q_FP8_ONLY_TRTLLM = ("q_dtype fp8: kbench gives an fp8 query only to the kernels SGLang casts it for "
                     "(trtllm-gen decode, trtllm context, fmha-v2); this one is planned with a bf16/fp16 query")


def fi_dtypes(case: "Case") -> tuple:
    """torch dtypes of (query, KV cache, output) as the FlashInfer call of a case gets them (q_dtype fp8: an e4m3
    query, for the kernels that take one)."""
    import torch

    from kbench.kernels.inputs import torch_dtype

    dt = torch_dtype(case.dtype)
    return (torch.float8_e4m3fn if case.q_dtype == "fp8" else dt), torch_dtype(case.kv_dtype), dt


def fa2_batch_prefill_spec(case: "Case", backend: str = "fa2"):
    """The batch-prefill module FlashInfer's paged wrappers build (prefill.py get_batch_prefill_module, for the
    tensor-core decode wrapper too): causal, no RoPE, soft cap or fp16 QK reduction; int32 indices. FA2 also has a
    paged_kv_stride_independent module it loads only when K and V strides differ, never for kbench's KV cache (K
    and V are halves of one tensor)."""
    import torch
    from flashinfer.jit.attention import gen_batch_prefill_module
    from flashinfer.jit.attention.modules import _gen_batch_prefill_primary_module

    _, kv, dt = fi_dtypes(case)
    args = (dt, kv, dt, torch.int32, case.head_dim, case.head_dim, 0, case.window_left >= 0, False, False)
    return _gen_batch_prefill_primary_module(backend, *args) if backend == "fa2" else gen_batch_prefill_module(backend, *args)


def trtllm_gen_specs() -> list:
    """The one module of FlashInfer's trtllm-gen attention (decode and context, SM100/103; its kernels are cubins),
    when its cubin index is on disk (flashinfer-cubin, FLASHINFER_CUBIN_DIR or an earlier download): making the
    spec reads that index and would download it otherwise, so without it the module is left to its first use."""
    from flashinfer.artifacts import ArtifactPath
    from flashinfer.jit import env
    from flashinfer.jit.attention import gen_trtllm_gen_fmha_module

    if not (Path(env.FLASHINFER_CUBIN_DIR) / ArtifactPath.TRTLLM_GEN_FMHA / "checksums.txt").is_file():
        return []
    return [gen_trtllm_gen_fmha_module()]


def fp8_kv_reason(case: "Case", name: str) -> str | None:
    """For kernels that run fp8 KV only beside an fp8 query (one dtype for Q, K and V)."""
    if case.kv_dtype == "fp8" and case.q_dtype != "fp8":
        return f"fp8 KV with a {case.dtype} query: {name} takes fp8 KV with an fp8 query only (q_dtype fp8)"
    return None


def realistic_reason(case: "Case", **cannot: str) -> str | None:
    """The reason a kernel gives for a realistic-batch axis it cannot take: cannot maps window / sinks /
    skip_softmax / q_fp8 to that reason; None when the case asks for none of them."""
    asks = {"window": case.window_left >= 0, "sinks": case.sinks == "on", "skip_softmax": case.skip_softmax != "off",
            "q_fp8": case.q_dtype == "fp8"}
    for axis, why in cannot.items():
        if asks[axis]:
            return why
    return None


def attention_reason(kernel: Kernel, case: "Case") -> str | None:
    """Why a kernel does not take a case of this attention kind (a GQA kernel on MLA and the reverse), or None."""
    if case.attention in kernel.attentions:
        return None
    if case.attention == "mla":
        return (f"an MLA case: {kernel.name} takes GQA/MHA heads only (MLA kernels: flashmla, flashinfer-mla-fa3, "
                "flashinfer-mla-fa2, trtllm-gen-mla, vllm-fa3-mla, vllm-fa3-mla-sgl-call)")
    return f"a GQA case: {kernel.name} takes MLA (latent attention) only; use an MLA model, e.g. --model deepseek-v3"


def page_reason(kernel: Kernel, case: "Case") -> str | None:
    """Why a kernel does not take this case's page size (kbench.cases.axes.PAGE_SIZES: 1 is SGLang's default), or
    None."""
    if not kernel.page_sizes or case.page_size in kernel.page_sizes:
        return None
    return (f"page size {case.page_size}: {kernel.name} takes pages of {'/'.join(map(str, kernel.page_sizes))} tokens "
            f"({kernel.page_source})")


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
