"""The inputs of an MLA case (kbench.cases.mla): a paged latent cache and the absorbed query.

The batch is paged exactly as for GQA (kbench.kernels.inputs.build_inputs: pages in a random order, seq_lens
including the new tokens, qo_indptr, page tables, the padded view for kernels with one q_len per request); what
differs is one copy's data, made here:
- the cache pool is [pages, page_size, kv_lora_rank + qk_rope_head_dim]: per token ckv (the latent, 512) followed
  by kpe (the RoPE key, 64), one shared head, as SGLang's and FlashInfer's MLA caches hold it;
- the query is [rows, num_qo_heads, kv_lora_rank + qk_rope_head_dim]: q_nope (W_UK absorbed) followed by q_pe.
Both are packed in one tensor; `split` gives the (nope, pe) views. The reference (kbench.kernels.mla_reference)
and every MLA kernel read these same tensors.

With an fp8 KV cache and a bf16/fp16 query, the query's values are drawn e4m3-representable: FlashMLA and
trtllm-gen take fp8 KV only beside an fp8 query, and engines (SGLang's flashmla and trtllm_mla backends) cast q
to e4m3 inside the attention call; with such values that cast is exact, so every kernel (the FlashInfer
wrappers take the bf16 query as it is) is checked against the reference on the same query, and the timed call
still pays the cast as the engine does.
"""
from __future__ import annotations

import torch

from kbench.cases.case import Case


def pool_shape(case: Case, num_pages: int) -> tuple[int, int, int]:
    """[pages, page_size, kv_lora_rank + qk_rope_head_dim]: one latent row per token."""
    return (num_pages, case.page_size, case.kv_lora_rank + case.qk_rope_head_dim)


def random_copy(case: Case, rows: int, num_pages: int, gen: torch.Generator, dev: torch.device,
                dt: torch.dtype, q_dt: torch.dtype, kv_dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One copy's (query [rows, Hq, rank + rope], pool [pages, page, rank + rope]), random and never zero."""
    q = torch.randn((rows, case.num_qo_heads, case.head_dim), generator=gen, device=dev, dtype=dt)
    pool = torch.randn(pool_shape(case, num_pages), generator=gen, device=dev, dtype=dt)
    if q_dt != dt:  # an fp8 query (q_dtype fp8): the case's query rounded to e4m3
        q = q.to(q_dt)
    elif kv_dt == torch.float8_e4m3fn:  # held in bf16/fp16, values an e4m3 cast keeps exactly (module docstring)
        q = q.to(torch.float8_e4m3fn).to(dt)
    if kv_dt != dt:
        pool = pool.to(kv_dt)
    return q, pool


def split(x: torch.Tensor, kv_lora_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(nope, pe) views of a packed query or cache along its last axis."""
    return x[..., :kv_lora_rank], x[..., kv_lora_rank:]
