"""FlashAttention-3 as vLLM ships it: `vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so` from the vllm 0.33.0 wheel, the
library vLLM's default SM90 backend (FLASH_ATTN, FA3) runs. Optional: docs/fa3.md says how to get it and why
this binary and not sgl-kernel's `flash_ops` (SGLang's fa3 backend), which cannot travel or load here.

Two kernels, one library (both call torch.ops._vllm_fa3_C.fwd, FA3's mha_fwd, with paged KV through a page table,
GQA, causal bottom-right mask, seq_lens including the new tokens, ragged q through cu_seqlens_q):
- `vllm-fa3`: vLLM's call (vllm/v1/attention/backends/flash_attn.py, FlashAttentionImpl.forward ->
  vllm_flash_attn.flash_attn_varlen_func(fa_version=3)): max_seqlen_k = the batch's longest sequence, float32
  descales of 1.0 expanded to [bs, Hkv] (ignored by the bf16/fp16 kernels), and the split-KV schedule made once
  per batch by get_scheduler_metadata (vLLM's build(), AOT schedule) with num_splits = 32, vLLM's
  flash_attn_max_num_splits_for_cuda_graph, for a batch of at most 512 tokens (its default largest CUDA graph),
  else 0 (the kernel's heuristic).
- `vllm-fa3-sgl-call`: the same library called with SGLang's arguments (SGLang 0.5.23's FlashAttentionBackend ->
  sgl_kernel.flash_attn.flash_attn_with_kvcache -> torch.ops.sgl_kernel.fwd): cache_seqlens, page_table,
  cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, no max_seqlen_k (mha_fwd then takes the page table's width x
  page size), no scheduler metadata (the schedule is made inside every call), num_splits 0, pack_gqa None.
  It shows what SGLang's arguments cost on vLLM's FA3 build; it is not sgl-kernel's binary (another fork and
  commit of FA3: sgl-project/sgl-attn).

Not installed, not loadable (a torch whose stable ABI lacks a symbol it needs), not SM90, or a case it does not
take: a skipped row with the reason, and the rest of the sweep runs.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from kbench.errors import first_line
from kbench.kernels.base import Kernel, KernelFn, each_copy, realistic_reason
from kbench.kernels.inputs import Inputs, torch_dtype

FA3_SMS = (90,)
FA3_HEAD_DIMS = (64, 96, 128, 192, 256)  # FA3's hdim instantiations (hopper/generate_kernels.py)
VLLM_VERSION = "0.33.0"
LIBRARY_NAME = "_vllm_fa3_C.abi3.so"
OPS = "_vllm_fa3_C"
# vLLM 0.33.0: attention_config.flash_attn_max_num_splits_for_cuda_graph (config/attention.py:61) and the default
# cap of max_cudagraph_capture_size (config/compilation.py:706); a batch above it runs eagerly with num_splits 0
VLLM_CG_SPLITS = 32
VLLM_CG_MAX_TOKENS = 512
INSTALL_HINT = ("python3 tools/build_fa3.py, then pip install --no-deps .whl/kbench_vllm_fa3-*.whl (docs/fa3.md); or "
                f"pip install 'kbench[fa3]' (vllm=={VLLM_VERSION}, which pins its own torch)")
NOT_INSTALLED = f"vLLM's FlashAttention-3 library is not installed: {INSTALL_HINT}"


def find_library() -> tuple[Path | None, str]:
    """(path, where it came from) of vLLM's FA3 library: kbench's repack (kbench_vllm_fa3), else an installed vllm
    (found without importing vllm, whose import pulls in the whole engine)."""
    spec = importlib.util.find_spec("kbench_vllm_fa3")
    if spec is not None and spec.submodule_search_locations:
        lib = Path(next(iter(spec.submodule_search_locations))) / LIBRARY_NAME
        if lib.is_file():
            return lib, "kbench_vllm_fa3 (tools/build_fa3.py)"
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.submodule_search_locations:
        lib = Path(next(iter(spec.submodule_search_locations))) / "vllm_flash_attn" / LIBRARY_NAME
        if lib.is_file():
            return lib, "vllm"
    return None, ""


def _registered():
    """torch.ops._vllm_fa3_C when its fwd is registered in this process already (vllm imported, or loaded before)."""
    import torch

    try:
        ns = getattr(torch.ops, OPS)
        ns.fwd  # noqa: B018 - raises when the op is not registered
        return ns
    except (AttributeError, RuntimeError):
        return None


def library_missing() -> str | None:
    """Why vLLM's FA3 library cannot be used, told without loading it: not registered in this process and not
    found on disk (None: one of them holds)."""
    return NOT_INSTALLED if _registered() is None and find_library()[0] is None else None


@functools.lru_cache(maxsize=1)
def load_fa3():
    """(torch.ops._vllm_fa3_C, where it came from) or (None, why it cannot be used): probed once per process."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return None, f"torch does not import: {first_line(e)}"
    ns = _registered()
    if ns is not None:
        return ns, "already loaded"
    lib, origin = find_library()
    if lib is None:
        return None, NOT_INSTALLED
    try:
        torch.ops.load_library(str(lib))
    except Exception as e:  # noqa: BLE001 - a library that will not load (an undefined symbol, no libcudart) is a reason
        return None, f"vLLM's FlashAttention-3 library ({origin}) does not load: {first_line(e)}"
    ns = _registered()
    if ns is None:
        return None, f"vLLM's FlashAttention-3 library ({origin}) loaded but registered no {OPS}.fwd"
    return ns, origin


def vllm_splits(inputs: Inputs) -> int:
    """vLLM's num_splits: 32 under full CUDA graphs (a batch of at most 512 tokens), else 0 (FA3's heuristic)."""
    return VLLM_CG_SPLITS if inputs.q.shape[0] <= VLLM_CG_MAX_TOKENS else 0


def scheduler_metadata(inputs: Inputs):
    """fn() -> FA3's split-KV schedule for the batch, as vLLM's build() makes it with get_scheduler_metadata."""
    ops = load_fa3()[0]
    c = inputs.case
    args = (c.batch_size, inputs.max_q, inputs.max_kv, c.num_qo_heads, c.num_kv_heads, c.head_dim, c.head_dim,
            torch_dtype(c.kv_dtype), inputs.seq_lens, inputs.qo_indptr, None, None, None, None, c.page_size, 0,
            True, *((c.window_left, 0) if c.window_left >= 0 else (-1, -1)), False, vllm_splits(inputs), None, 0)
    return lambda: ops.get_scheduler_metadata(*args)


class VllmFa3(Kernel):
    path = "decode"  # what both engines run for decode and spec verify (one kernel for every q_len)
    kv_dtypes = ("bf16", "fp16")

    def __init__(self, call: str = "vllm"):
        if call not in ("vllm", "sglang"):
            raise ValueError(f"call: 'vllm' or 'sglang', got {call!r}")
        self.call = call
        self.name = "vllm-fa3" if call == "vllm" else "vllm-fa3-sgl-call"
        self.description = (
            f"vLLM {VLLM_VERSION}'s FA3 (_vllm_fa3_C.fwd), " + (
                "called as vLLM's FLASH_ATTN backend: AOT scheduler metadata, num_splits 32 under CUDA graphs"
                if call == "vllm" else
                "called with SGLang 0.5.23 fa3's arguments (flash_attn_with_kvcache: page_table, cache_seqlens, "
                "num_splits 0, no scheduler metadata); not sgl-kernel's binary"))

    def supports(self, device, case):
        if not device.cuda:
            return "needs a CUDA GPU (none here)"
        if device.sm not in FA3_SMS:
            return f"needs SM90 (FlashAttention-3 is Hopper-only; this GPU is SM{device.sm})"
        if case.tree != "chain":
            return ("tree: FA3's fwd takes causal and windows only, no mask (vLLM 0.33.0's _vllm_fa3_C.fwd schema; "
                    "SGLang's fa3 runs a topk > 1 verify as a prefix call and a draft call merged by LSE: the route "
                    "sglang-fa3-tree)")
        reason = realistic_reason(
            case, skip_softmax=f"skip-softmax: {self.name} has no such option",
            q_fp8=f"q_dtype fp8: kbench runs {self.name} with a bf16/fp16 query only")
        if reason:
            return reason
        if case.sinks == "on" and case.dtype != "bf16":
            return f"sinks with a {case.dtype} query: FA3 takes bf16 sinks (s_aux) only (flash_api.cpp:1250)"
        if case.kv_dtype != case.dtype:
            return (f"{self.name} takes a KV dtype equal to the query's (FA3's fp8 path wants an e4m3 query and "
                    f"descales; not wired), got {case.dtype} with {case.kv_dtype}")
        if case.head_dim not in FA3_HEAD_DIMS:
            return f"FA3 takes head_dim {'/'.join(map(str, FA3_HEAD_DIMS))} (this case has {case.head_dim})"
        return load_fa3()[1] if load_fa3()[0] is None else None

    def jit_key(self, case):
        return None  # prebuilt: nothing to compile ahead

    def prepare(self, inputs: Inputs) -> KernelFn:
        import torch

        ops = load_fa3()[0]
        c = inputs.case
        launch = self.launch(inputs, workspace=False)
        bs, out = c.batch_size, launch.out
        cu_q, seq_lens, table = inputs.qo_indptr, inputs.seq_lens, inputs.block_tables
        max_q, scale = inputs.max_q, inputs.sm_scale
        # gpt-oss: a sliding window as FA3's (left, right) = (window_left, 0) and the learned sinks as s_aux, bf16
        # per q head (FA3's mha_fwd takes bf16 s_aux only: flash_api.cpp:1250; gpt-oss holds them in bf16) (vLLM: flash_attn.py passes window (sliding_window - 1, 0) and s_aux=self.sinks; SGLang 0.5.23:
        # flashattention_backend.py passes window_size=(sliding_window_size, 0) and sinks=)
        left, right = (c.window_left, 0) if c.window_left >= 0 else (-1, -1)
        s_aux = None if inputs.sinks is None else inputs.sinks.to(torch.bfloat16).contiguous()

        def kv_views(kv):
            """K and V as FA3's paged cache [pages, page, Hkv, d] (last dim contiguous, the rest by strides)."""
            k, v = kv[:, 0], kv[:, 1]
            return (k.transpose(1, 2), v.transpose(1, 2)) if c.kv_layout == "HND" else (k, v)

        if self.call == "vllm":
            max_k = inputs.max_kv
            splits = vllm_splits(inputs)
            # made once per batch, as vLLM's FlashAttentionMetadataBuilder.build() makes it once per step
            meta = scheduler_metadata(inputs)()
            one = torch.ones((), dtype=torch.float32, device=inputs.device).expand(bs, c.num_kv_heads)

            def call(q, kv):
                k, v = kv_views(kv)
                return ops.fwd(q, k, v, None, None, None, out, cu_q, None, None, None, seq_lens, max_q, max_k, table,
                               None, None, None, None, None, one, one, one, scale, True, left, right, 0.0, True, meta,
                               splits, None, 0, s_aux, 1, 0, None)[0]
        else:
            cu_k = inputs.cum_seq_lens_kv

            def call(q, kv):
                k, v = kv_views(kv)
                return ops.fwd(q, k, v, None, None, None, out, cu_q, None, cu_k, None, seq_lens, max_q, None, table,
                               None, None, None, None, None, None, None, None, scale, True, left, right, 0.0, True, None,
                               0, None, 0, s_aux, 1, 0, None)[0]

        return each_copy(inputs, call)
