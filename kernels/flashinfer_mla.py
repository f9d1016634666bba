"""FlashInfer's MLA wrapper, flashinfer.mla.BatchMLAPagedAttentionWrapper, with the backend named: the
prefill-style MLA kernel (FA2 everywhere from SM80, FA3 on SM90), causal, ragged q natively (qo_indptr).

Planned with the canonical metadata form (FlashInfer 0.7.4): ``plan(metadata=MLAPlanMetadata.csr(qo_indptr,
kv_indptr, kv_indices, kv_len_arr), num_heads, head_dim_ckv, head_dim_kpe, page_size, causal=True, sm_scale,
q_data_type, kv_data_type)`` and ``run(query=q, kv_cache=pool, out=...)`` on the packed query [rows, Hq, 576]
and cache [pages, page, 576] (kbench.kernels.mla_inputs); the flat positional plan and run(q_nope, q_pe, ckv,
kpe) still work but warn that they are deprecated (mla/_batch_mla/_wrapper.py:199, :225).

What FlashInfer 0.7.4 takes, from mla/_batch_mla/_backends/_fa_common.py: a bf16/fp16 query only (:138);
a KV dtype equal to the query's, or fp8 e4m3 KV on SM90 only (:155), beside a bf16 query (:160), with
kv_lora_rank 512 and rope 0 or 64 (:165) and per-tensor scales passed at run time (ckv_scale, kpe_scale: 1.0
here, :171); kv_lora_rank a multiple of 128 and rope a multiple of 64 (:185); FA3 needs SM90 (:192) and
kv_lora_rank 128, 256 or 512 (:198), FA2 SM80 or newer (:202). Causal plans are refused where a Q tile (64 or
128 rows of query tokens x heads) ends inside a query token's heads at a KV tile boundary (:339): kbench takes
head counts that divide 128 (1 ... 128), for which a tile never does. No sinks, no skip-softmax (:1040, :1042).

The other backends of this wrapper do not run on SM90: cutlass needs SM10x/SM11x (cutlass_backend.py:195),
cutile SM100/103/107/120/121 (cutile_backend.py:28), trtllm-gen SM100/103/107 (trtllm_gen_backend.py:226),
xqa SM12x (xqa_backend.py:70), the cute-dsl family SM100/103/107 (_cute_dsl_common.py:113; rubin-mtp SM107,
cute_dsl_rubin_mtp_backend.py:49); "auto" on SM90 is FA3, then FA2 (_auto_policy.py:131).
"""
from __future__ import annotations

from kbench.kernels.base import KernelFn, needs_cuda
from kbench.kernels.inputs import Inputs, torch_dtype
from kbench.kernels.mla_base import MlaKernel, refused_axis

FA_SRC = "FlashInfer 0.7.4 mla/_batch_mla/_backends/_fa_common.py"


class FlashInferMla(MlaKernel):
    path = "context"

    def __init__(self, backend: str):
        self.fa = backend
        self.name = f"flashinfer-mla-{backend}"
        self.description = (f"flashinfer.mla.BatchMLAPagedAttentionWrapper(backend={backend!r}), "
                            "plan(metadata=MLAPlanMetadata.csr(...), causal=True), ragged q by qo_indptr")

    def supports(self, device, case):
        if self.fa == "fa3":
            reason = needs_cuda(device, only_sm=(90,), label=" (FA3 is Hopper-only)")
        else:
            reason = needs_cuda(device, min_sm=80)
        return reason or refused_axis(case) or self._shape_reason(case) or self._dtype_reason(device, case)

    def _shape_reason(self, case) -> str | None:
        rank, rope = case.kv_lora_rank, case.qk_rope_head_dim
        if rank % 128 or rope % 64:
            return f"{self.name} takes kv_lora_rank a multiple of 128 and rope a multiple of 64 ({FA_SRC}:185)"
        if self.fa == "fa3" and rank not in (128, 256, 512):
            return f"{self.name} takes kv_lora_rank 128, 256 or 512 ({FA_SRC}:198)"
        if 128 % case.num_qo_heads:
            return (f"{case.num_qo_heads} q heads: FlashInfer's MLA plan refuses causal shapes whose 64/128-row Q tile "
                    f"ends inside a query token's heads ({FA_SRC}:339); kbench runs head counts that divide 128")
        return None

    def _dtype_reason(self, device, case) -> str | None:
        if case.q_dtype == "fp8":
            return f"q_dtype fp8: {self.name} takes a bf16/fp16 query only ({FA_SRC}:138)"
        if case.kv_dtype != "fp8":
            if case.kv_dtype != case.dtype:
                return f"{self.name} takes a KV dtype equal to the query's unless it is fp8 ({FA_SRC}:175)"
            return None
        if case.dtype != "bf16":
            return f"fp8 KV: {self.name} takes it beside a bf16 query only ({FA_SRC}:160)"
        if case.kv_lora_rank != 512 or case.qk_rope_head_dim not in (0, 64):
            return f"fp8 KV: {self.name} takes it at kv_lora_rank 512, rope 0 or 64 only ({FA_SRC}:165)"
        if device.sm != 90:
            return f"fp8 KV: {self.name} takes it on SM90 only ({FA_SRC}:155; this GPU is SM{device.sm})"
        return None

    def jit_key(self, case):
        # gen_batch_mla_module(backend, q, kv, o dtypes, index dtype, head_dim_ckv, head_dim_kpe): one per key
        return (self.fa, case.dtype, case.kv_dtype, case.kv_lora_rank, case.qk_rope_head_dim)

    def jit_specs(self, device, case):
        """The one module plan() builds: _fa_common.get_batch_mla_module(backend, q, kv, o, int32, ckv, kpe,
        use_profiler=False) (FlashInfer 0.7.4, mla/_batch_mla/_backends/_fa_common.py:42)."""
        import torch
        from flashinfer.jit import gen_batch_mla_module

        dt, kv = torch_dtype(case.dtype), torch_dtype(case.kv_dtype)
        return [gen_batch_mla_module(self.fa, dt, kv, dt, torch.int32, case.kv_lora_rank, case.qk_rope_head_dim,
                                     False)]

    def prepare(self, inputs: Inputs) -> KernelFn:
        from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

        c = inputs.case
        launch = self.launch(inputs)
        w = BatchMLAPagedAttentionWrapper(launch.ws, backend=self.fa)
        meta = MLAPlanMetadata.csr(inputs.host("qo_indptr"), inputs.host("kv_indptr"), inputs.host("kv_indices"),
                                   inputs.host("seq_lens"))
        plan = dict(metadata=meta, num_heads=c.num_qo_heads, head_dim_ckv=c.kv_lora_rank,
                    head_dim_kpe=c.qk_rope_head_dim, page_size=c.page_size, causal=True, sm_scale=inputs.sm_scale,
                    q_data_type=torch_dtype(c.dtype), kv_data_type=torch_dtype(c.kv_dtype))
        w.plan(**plan)
        self.wrapper = w  # planned: a route re-plans it every step, as the engine does (kernels/routes)
        self.replan = lambda: w.plan(**plan)
        # fp8 KV plans take per-tensor scales at run time (scale_mode kv-per-tensor); kbench's fp8 cache is unscaled
        scales = dict(ckv_scale=1.0, kpe_scale=1.0) if c.kv_dtype == "fp8" else {}
        return launch.run(lambda q, kv: w.run(query=q, kv_cache=kv, out=launch.out, **scales))
