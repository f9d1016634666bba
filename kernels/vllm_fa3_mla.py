"""FlashAttention-3 "absorbed" MLA from vLLM's FA3 library (kbench.kernels.vllm_fa3: `_vllm_fa3_C` of the vllm 0.33.0
wheel): the MLA default of both engines on Hopper (SGLang `fa3`, vLLM `FLASH_ATTN_MLA`), one kernel for every q_len.

FA3 computes absorbed MLA as attention with a second query half: scores = q_pe . k_pe + q_nope . ckv (``q`` the
RoPE part of the query, ``q_v`` the W_UK-absorbed part, ``k`` the RoPE cache, ``v`` the latent cache, which is also
what is summed), output = softmax . ckv, [rows, Hq, kv_lora_rank]; one KV head (num_heads_kv 1). On kbench's packed
query [rows, Hq, 576] and cache [pages, page, 576] (kbench.kernels.mla_inputs) those four are strided views, no
copy: q_pe = q[..., 512:], q_nope = q[..., :512], k = cache[..., 512:].unsqueeze(-2) ([pages, page, 1, 64]),
v = cache[..., :512].unsqueeze(-2).

Two calls, as for GQA:
- `vllm-fa3-mla`: vLLM 0.34.0's FLASH_ATTN_MLA (v1/attention/backends/mla/flashattn_mla.py): forward_mqa ->
  flash_attn_varlen_func(q=q_pe, k=k_pe_cache, v=kv_c_cache, q_v=q_nope, max_seqlen_q, cu_seqlens_q,
  max_seqlen_k = the batch's longest sequence, seqused_k, block_table, causal=True, fa_version=3,
  scheduler_metadata, num_splits), no descales; the schedule made once per batch by get_scheduler_metadata(
  num_heads_kv=1, headdim=qk_rope_head_dim, headdim_v=kv_lora_rank, page_size, cu_seqlens_q, causal=True,
  num_splits) in the builder's _build_decode, with num_splits = flash_attn_max_num_splits_for_cuda_graph (32)
  when the batch runs in a full CUDA graph (at most max_cudagraph_capture_size, 512, tokens), else 0.
  vLLM refuses an fp8 KV cache here (FlashAttnMLABackend.supported_kv_cache_dtypes and FlashAttnMLAImpl's
  NotImplementedError): with --kv-cache-dtype fp8 it picks the next backend, FLASHMLA.
- `vllm-fa3-mla-sgl-call`: SGLang 0.5.23's fa3 MLA (layers/attention/flashattention_backend.py:1938-2030):
  flash_attn_with_kvcache(q=q_rope, k_cache=k_rope_cache, v_cache=c_kv_cache, qv=q_nope, page_table,
  cache_seqlens, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, softmax_scale, causal, num_splits 0) -> FA3's fwd
  with no max_seqlen_k and no scheduler metadata (made inside every call). Its KV cache is read through
  ``get_key_buffer(layer).to(q.dtype)`` (:1944-1946): with an fp8 cache (SGLang keeps fa3 for fp8_e4m3 and falls to
  triton for fp8_e5m2 only, arg_groups/overrides.py:1263-1270) the cache is cast to the query's dtype inside every
  attention call, and this kernel does the same, timed. SGLang casts the layer's whole KV pool (every token slot
  the server holds); kbench casts the case's pages: the cost kbench times is a lower bound.
  vLLM's FA3 build with SGLang's arguments, as `vllm-fa3-sgl-call` is for GQA (docs/fa3.md): not sgl-kernel's binary.

FA3 takes this geometry as hdim 64 with a V of 512 (kv_lora_rank 512, rope 64; DeepSeek-V3/R1, Kimi K2), any head
count, any page size, ragged q through cu_seqlens_q, bf16/fp16. Not installed, not loadable, not SM90, or a case
it does not take: a skipped row with the reason.
"""
from __future__ import annotations

from kbench.kernels.base import KernelFn, each_copy, needs_cuda, realistic_reason
from kbench.kernels.inputs import Inputs, torch_dtype
from kbench.kernels.mla_base import MlaKernel, geometry_reason, refused_axis
from kbench.kernels import vllm_fa3  # its loader by attribute: one cache, patched in one place by the tests
from kbench.kernels.vllm_fa3 import FA3_SMS, VLLM_VERSION, vllm_splits

# why vLLM's FLASH_ATTN_MLA takes no fp8 cache, and where it goes instead (vllm 0.34.0)
VLLM_FP8_REFUSAL = ("vLLM's FLASH_ATTN_MLA refuses an fp8 KV cache (v1/attention/backends/mla/flashattn_mla.py:42-46: "
                    "kv_cache_dtype auto/float16/bfloat16 only; :349-352 raise NotImplementedError), so vLLM falls to "
                    "the next MLA backend on SM90, FLASHMLA (platforms/cuda.py:146-152)")


def mla_scheduler_metadata(inputs: Inputs):
    """fn() -> FA3's split-KV schedule for an MLA batch, as vLLM's FlashAttnMLAMetadataBuilder._schedule_decode makes
    it (num_heads_kv 1, headdim = rope, headdim_v = kv_lora_rank, num_splits as under its CUDA graphs)."""
    ops = vllm_fa3.load_fa3()[0]
    c = inputs.case
    args = (c.batch_size, inputs.max_q, inputs.max_kv, c.num_qo_heads, 1, c.qk_rope_head_dim, c.kv_lora_rank,
            torch_dtype(c.kv_dtype), inputs.seq_lens, inputs.qo_indptr, None, None, None, None, c.page_size, 0,
            True, -1, -1, False, vllm_splits(inputs), None, 0)
    return lambda: ops.get_scheduler_metadata(*args)


class VllmFa3Mla(MlaKernel):
    path = "decode"  # one kernel for every q_len, as both engines run it for decode and spec verify

    def __init__(self, call: str = "vllm"):
        if call not in ("vllm", "sglang"):
            raise ValueError(f"call: 'vllm' or 'sglang', got {call!r}")
        self.call = call
        self.name = "vllm-fa3-mla" if call == "vllm" else "vllm-fa3-mla-sgl-call"
        self.description = (
            f"vLLM {VLLM_VERSION}'s FA3 absorbed MLA (_vllm_fa3_C.fwd with q_v), " + (
                "called as vLLM's FLASH_ATTN_MLA: AOT scheduler metadata (headdim 64, headdim_v 512, 1 KV head), "
                "num_splits 32 under CUDA graphs" if call == "vllm" else
                "called with SGLang 0.5.23 fa3 MLA's arguments (flash_attn_with_kvcache q=q_rope, qv=q_nope, "
                "num_splits 0, no scheduler metadata; an fp8 cache cast to the query's dtype in the call); not "
                "sgl-kernel's binary"))

    def supports(self, device, case):
        reason = (needs_cuda(device, only_sm=FA3_SMS, label=" (FlashAttention-3 is Hopper-only)")
                  or refused_axis(case) or geometry_reason(case, "FA3 absorbed MLA (hdim 64, V 512)"))
        if reason:
            return reason
        reason = realistic_reason(case, q_fp8=f"q_dtype fp8: kbench runs {self.name} with a bf16/fp16 query "
                                              "(both engines pass the model's dtype)")
        if reason:
            return reason
        if case.kv_dtype == "fp8":
            if self.call == "vllm":
                return VLLM_FP8_REFUSAL
        elif case.kv_dtype != case.dtype:
            return f"{self.name} takes a KV dtype equal to the query's (or fp8), got {case.dtype} with {case.kv_dtype}"
        return vllm_fa3.load_fa3()[1] if vllm_fa3.load_fa3()[0] is None else None

    def named_problem(self, kv_dtypes):
        if kv_dtypes and set(kv_dtypes) <= {"fp8"} and self.call == "vllm":
            return f"an fp8 KV cache: {VLLM_FP8_REFUSAL}; measure vllm-flashmla (the route) or flashmla for it"
        return vllm_fa3.library_missing()

    def jit_key(self, case):
        return None  # prebuilt: nothing to compile ahead

    def prepare(self, inputs: Inputs) -> KernelFn:
        ops = vllm_fa3.load_fa3()[0]
        c = inputs.case
        rank = c.kv_lora_rank
        launch = self.launch(inputs, workspace=False)
        out, cu_q, seq_lens, table = launch.out, inputs.qo_indptr, inputs.seq_lens, inputs.block_tables
        max_q, scale = inputs.max_q, inputs.sm_scale

        def views(q, kv):
            """(q_pe, q_nope, k_pe [pages, page, 1, rope], ckv [pages, page, 1, rank]): strided views, no copy."""
            return q[..., rank:], q[..., :rank], kv[..., rank:].unsqueeze(-2), kv[..., :rank].unsqueeze(-2)

        if self.call == "vllm":
            max_k, splits = inputs.max_kv, vllm_splits(inputs)
            meta = mla_scheduler_metadata(inputs)()  # once per batch, as vLLM's builder makes it once per step

            def call(q, kv):
                q_pe, q_nope, k_pe, ckv = views(q, kv)
                return ops.fwd(q_pe, k_pe, ckv, None, None, q_nope, out, cu_q, None, None, None, seq_lens, max_q,
                               max_k, table, None, None, None, None, None, None, None, None, scale, True, -1, -1, 0.0,
                               True, meta, splits, None, 0, None, 1, 0, None)[0]
        else:
            cu_k = inputs.cum_seq_lens_kv
            cast = c.kv_dtype != c.dtype  # fp8: SGLang's get_key_buffer(...).to(q.dtype), inside the timed call

            def call(q, kv):
                if cast:
                    kv = kv.to(q.dtype)
                q_pe, q_nope, k_pe, ckv = views(q, kv)
                return ops.fwd(q_pe, k_pe, ckv, None, None, q_nope, out, cu_q, None, cu_k, None, seq_lens, max_q,
                               None, table, None, None, None, None, None, None, None, None, scale, True, -1, -1, 0.0,
                               True, None, 0, None, 0, None, 1, 0, None)[0]

        return each_copy(inputs, call)
