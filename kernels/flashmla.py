"""FlashMLA (DeepSeek's MLA decode kernel) from the `sgl-flash-mla` wheel, the optional extra `kbench[mla]`:
the decode-style MLA kernel, SM90 only.

The wheel's current kernels are SM100 sparse ones; its dense decode lives in the legacy extension, reached
with ``use_legacy=True`` (flash_mla/flash_mla_interface.py: "Dense MLA decoding was removed from the current
kernels; pass use_legacy=True"), and it runs on SM90 only ("Dense decode MLA is only supported on SM90a
architecture", _C_legacy). The call, as SGLang's flashmla backend makes it for target verify:
``flash_mla_with_kvcache(q [bs, s_q, Hq, 576], cache [blocks, 64, 1, 576], block_table [bs, pages] int32,
seq_lens [bs] int32, 512, meta, None, softmax_scale, causal=True, use_legacy=True)`` with ``meta`` from
``get_mla_metadata()``: an empty schedule that the first call fills (kbench's check, before any timed call).
It takes 64 or 128 q heads and pages of 64 tokens ("Currently page_block_size must be 64"), one s_q per
batch: a ragged batch is padded to its longest request as a CUDA-graph engine pads it
(kbench.kernels.inputs.PaddedBatch), and only the real rows are checked.

fp8 KV: the wheel's own SM90 kernel (``fwd_kvcache_mla_fp8``) with an e4m3 query, ``descale_q``/``descale_k``
(1.0 here) and its schedule made up front by ``get_mla_decoding_metadata(..., is_fp8_kvcache=True,
use_legacy=True)``. SGLang casts a bf16 query to e4m3 inside the attention call; so does this kernel (the cast
is timed), unless the case's query already is e4m3 (q_dtype fp8).

Not installed, or installed but not loadable (its CUDA extension does not load, or it was built without the
legacy half): every MLA case gets a skipped row with the reason, and the rest of the sweep runs.
"""
from __future__ import annotations

import functools

from kbench.errors import first_line
from kbench.kernels.base import KernelFn, each_copy, needs_cuda
from kbench.kernels.inputs import Inputs
from kbench.kernels.mla_base import MlaKernel, geometry_reason, refused_axis

FLASHMLA_SMS = (90,)
FLASHMLA_HEADS = (64, 128)
FLASHMLA_PAGE = 64
INSTALL_HINT = ("pip install 'kbench[mla]' (on a torch older than the wheel's 2.14.1 pin: pip install --no-deps "
                "sgl-flash-mla; its stable-ABI build loads with torch 2.11)")


@functools.lru_cache(maxsize=1)
def load_flash_mla():
    """(the flash_mla module, None) or (None, why it cannot be used): probed once per process."""
    try:
        import flash_mla
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] == "flash_mla":
            return None, f"FlashMLA (sgl-flash-mla) is not installed: {INSTALL_HINT}"
        return None, f"FlashMLA is installed but does not load: {first_line(e)}"
    except Exception as e:  # noqa: BLE001 - a broken install (a CUDA extension that will not load) is a reason
        return None, f"FlashMLA is installed but does not load: {first_line(e)}"
    try:
        legacy = bool(flash_mla.has_legacy())
    except Exception as e:  # noqa: BLE001
        return None, f"FlashMLA is installed but does not load: {first_line(e)}"
    if not legacy:
        return None, ("this FlashMLA build has no legacy kernels (the SM90 dense decode; built with "
                      "FLASH_MLA_BUILD_LEGACY=0, or _C_legacy does not load)")
    return flash_mla, None


class FlashMla(MlaKernel):
    name = "flashmla"
    path = "decode"
    description = ("flash_mla.flash_mla_with_kvcache(use_legacy=True, causal=True) from sgl-flash-mla "
                   "(kbench[mla]); ragged q padded to the longest request")

    def supports(self, device, case):
        reason = (needs_cuda(device, only_sm=FLASHMLA_SMS, label=" (FlashMLA's dense decode, use_legacy=True)")
                  or refused_axis(case) or geometry_reason(case, "FlashMLA"))
        if reason:
            return reason
        if case.num_qo_heads not in FLASHMLA_HEADS:
            return f"FlashMLA takes 64 or 128 q heads per GPU (this case has {case.num_qo_heads})"
        if case.page_size != FLASHMLA_PAGE:
            return f"FlashMLA takes pages of {FLASHMLA_PAGE} tokens only (\"Currently page_block_size must be 64\")"
        if case.kv_dtype == "fp8":
            if case.dtype != "bf16":
                return "fp8 KV: FlashMLA's fp8 kernel returns bf16; kbench runs it with a bf16 model dtype only"
        elif case.kv_dtype != case.dtype:
            return f"FlashMLA takes a KV dtype equal to the query's (or fp8), got {case.dtype} with {case.kv_dtype}"
        return load_flash_mla()[1]

    def jit_key(self, case):
        return None  # prebuilt in the wheel: nothing to compile ahead

    def checked_output(self, inputs: Inputs, out):
        return inputs.padded.unpad(out)

    def prepare(self, inputs: Inputs) -> KernelFn:
        import torch

        flash_mla = load_flash_mla()[0]
        c, pb = inputs.case, inputs.padded
        bs, s_q, heads, width = c.batch_size, pb.q_len, c.num_qo_heads, c.head_dim
        fp8 = c.kv_dtype == "fp8"
        # the split-KV schedule: bf16 fills an empty one on its first call (the check, before any timing) and
        # reuses it; the fp8 kernel needs it made up front. Either way it is made once per case, outside the
        # timed calls, as an engine makes it once per batch (SGLang: init_forward_metadata)
        meta = flash_mla.get_mla_metadata()[0]
        extra = {}
        if fp8:
            meta.tile_scheduler_metadata, meta.num_splits = flash_mla.get_mla_decoding_metadata(
                pb.seq_lens, s_q * heads, 1, heads, is_fp8_kvcache=True, use_legacy=True)
            one = torch.ones(1, dtype=torch.float32, device=inputs.device)
            extra = dict(is_fp8_kvcache=True, descale_q=one, descale_k=one)

        def call(q, kv):
            q4 = q.view(bs, s_q, heads, width)
            if fp8 and q4.dtype != torch.float8_e4m3fn:
                q4 = q4.to(torch.float8_e4m3fn)  # as SGLang's flashmla backend casts q for an fp8 cache
            out, _ = flash_mla.flash_mla_with_kvcache(
                q4, kv.view(kv.shape[0], c.page_size, 1, width), pb.block_tables, pb.seq_lens, c.kv_lora_rank,
                meta, None, softmax_scale=inputs.sm_scale, causal=True, use_legacy=True, **extra)
            return out.view(bs * s_q, heads, c.kv_lora_rank)

        return each_copy(inputs, call, padded=True)
