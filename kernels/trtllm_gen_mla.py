"""TRT-LLM's MLA decode kernel on Blackwell (trtllm-gen cubins): flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
with backend="trtllm-gen", the decode-style kernel SGLang's trtllm_mla backend runs for target verify and
draft extend (PRs #10281, #11664).

A uniform batch goes in as q [bs, q_len, Hq, 576] (q_len per request); a ragged one as the packed
[total_q, Hq, 576] with cum_seq_lens_q (qo_indptr) and max_q_len. The cache is [pages, page, 576]; the output
is bf16 (trtllm_gen_backend.py:63). FlashInfer 0.7.4 refuses 64 < Hq < 128 and pages other than 32 or 64
(trtllm_gen_backend.py:981, :986). fp8 KV runs beside an e4m3 query, as SGLang casts it (the cast is timed unless
the case's query is e4m3 already).

On SM90 it cannot run: the trtllm-gen MLA kernels need SM100/103/107 (mla/_batch_mla/_backends/trtllm_gen_backend.py:
226), and backend="auto" there goes to xqa, which refuses: "XQA MLA requires SM120a (CUDA >= 12.8) or SM121a
(CUDA >= 12.9)" (mla/_core.py:4314). Its cubins are downloaded at first use, like trtllm-context's.
"""
from __future__ import annotations

from kbench.kernels.base import KernelFn, needs_cuda, trtllm_gen_specs
from kbench.kernels.inputs import Inputs
from kbench.kernels.mla_base import MlaKernel, geometry_reason, refused_axis
from kbench.kernels.trtllm_context import cubin_problem

TRTLLM_GEN_MLA_SMS = (100, 103, 107)
SM90_REASON = ("FlashInfer 0.7.4 runs trtllm_batch_decode_with_kv_cache_mla there through xqa, which refuses: "
               "\"XQA MLA requires SM120a (CUDA >= 12.8) or SM121a (CUDA >= 12.9)\" (flashinfer/mla/_core.py:4314)")


class TrtllmGenMla(MlaKernel):
    name = "trtllm-gen-mla"
    path = "decode"
    description = ("flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla(backend='trtllm-gen'), q_len per request; "
                   "ragged q by cum_seq_lens_q")

    def supports(self, device, case):
        reason = needs_cuda(device)
        if reason is None and device.sm not in TRTLLM_GEN_MLA_SMS:
            sms = "/".join(f"SM{s}" for s in TRTLLM_GEN_MLA_SMS)
            reason = f"needs {sms}, trtllm-gen cubins (this GPU is SM{device.sm}); " + SM90_REASON
        reason = reason or refused_axis(case) or geometry_reason(case, "trtllm-gen MLA")
        if reason:
            return reason
        if 64 < case.num_qo_heads < 128:
            return f"trtllm-gen MLA does not take 64 < q heads < 128 (trtllm_gen_backend.py:981; got {case.num_qo_heads})"
        if case.page_size not in (32, 64):
            return f"trtllm-gen MLA takes pages of 32 or 64 tokens (trtllm_gen_backend.py:986; got {case.page_size})"
        if case.dtype != "bf16":
            return "trtllm-gen MLA writes a bf16 output only (trtllm_gen_backend.py:63)"
        if case.kv_dtype not in ("bf16", "fp8"):
            return f"trtllm-gen MLA takes a bf16 or fp8 cache, got {case.kv_dtype}"
        return cubin_problem()

    def jit_key(self, case):
        # cubins, not JIT: one load per (dtypes, page, heads, ragged) before timing, so the first use's
        # download or load is not inside a measurement
        return (case.kv_dtype, case.q_dtype, case.page_size, case.num_qo_heads, case.q_dist != "fixed")

    def jit_specs(self, device, case):
        return trtllm_gen_specs()  # FlashInfer's trtllm-gen attention module serves MLA decode too (cubins)

    def prepare(self, inputs: Inputs) -> KernelFn:
        import torch
        from flashinfer.mla import trtllm_batch_decode_with_kv_cache_mla

        c = inputs.case
        launch = self.launch(inputs)
        fp8 = c.kv_dtype == "fp8"
        common = dict(workspace_buffer=launch.ws, qk_nope_head_dim=c.qk_nope_head_dim, kv_lora_rank=c.kv_lora_rank,
                      qk_rope_head_dim=c.qk_rope_head_dim, block_tables=inputs.block_tables, seq_lens=inputs.seq_lens,
                      max_seq_len=inputs.max_seq_len, bmm1_scale=inputs.sm_scale, bmm2_scale=1.0,
                      backend="trtllm-gen")
        if c.q_dist == "fixed":
            shape = (c.batch_size, c.q_len, c.num_qo_heads)
            ragged, out = {}, launch.out.view(*shape, c.kv_lora_rank)
        else:  # packed rows by qo_indptr
            shape = tuple(inputs.q.shape[:2])
            ragged, out = dict(cum_seq_lens_q=inputs.qo_indptr, max_q_len=inputs.max_q), launch.out

        def call(q, kv):
            q = q.view(*shape, q.shape[-1])
            if fp8 and q.dtype != torch.float8_e4m3fn:
                q = q.to(torch.float8_e4m3fn)  # as SGLang's trtllm_mla backend casts q for an fp8 cache
            trtllm_batch_decode_with_kv_cache_mla(query=q, kv_cache=kv, out=out, **common, **ragged)
            return launch.out

        return launch.run(call)
