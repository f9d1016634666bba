"""The correctness oracle for MLA (kbench.cases.mla): absorbed latent attention in float32, and the
non-absorbed form it is proven against.

`mla_reference` is what every MLA kernel is checked against: per request and query token i (at position
kv - q + i), scores over the latent rows the page table names, scores = q_nope.ckv + q_pe.kpe (one dot
product over the packed 576 values) times 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), causal over the last
q positions, output = softmax . ckv ([total_q, Hq, kv_lora_rank], packed like the query).

`expanded_reference` computes the same attention the way the model is written before absorption: every
head's keys and values expanded from the latent with W_UK and W_UV, plain attention per head over the pages
listed in kv_indices (not the page table), then W_UV applied. tests/test_mla.py runs both on a tiny case:
with q_nope = W_UK^T q (absorbed) and the absorbed output projected by W_UV they agree to float32 rounding,
which is what proves the absorbed reference (and the scale, and the mask) right.
"""
from __future__ import annotations

import torch

from kbench.kernels.inputs import Inputs

# requests are gathered in chunks so the float32 latent rows and scores stay under this many bytes (as the GQA
# reference does; kbench.kernels.reference dispatches here, so this module does not import it back)
CHUNK_BYTES = 1 << 30


def causal(q_len: int, kv_len: int, device=None) -> torch.Tensor:
    """[q, kv] bool: query token i, at position kv - q + i, sees keys 0 .. kv - q + i."""
    return torch.ones((q_len, kv_len), dtype=torch.bool, device=device).tril(kv_len - q_len)


def mla_reference(inputs: Inputs, copy: int = 0) -> torch.Tensor:
    """Absorbed MLA in float32: [total_q, Hq, kv_lora_rank], rows packed by qo_indptr like the query."""
    c = inputs.case
    rank, width = c.kv_lora_rank, c.kv_lora_rank + c.qk_rope_head_dim
    q_all = inputs.copies[copy].q.float()  # [total_q, Hq, rank + rope]
    pool = inputs.copies[copy].kv_cache  # [pages, page, rank + rope]
    dev = q_all.device
    out = torch.empty((q_all.shape[0], c.num_qo_heads, rank), dtype=torch.float32, device=dev)
    starts = inputs.host("qo_indptr").tolist()
    groups: dict[tuple[int, int], list[int]] = {}
    for r, key in enumerate(zip(inputs.lengths.kv, inputs.lengths.q)):
        groups.setdefault(key, []).append(r)
    for (kv_len, q_len), reqs in groups.items():
        per_request = kv_len * width * 4 + c.num_qo_heads * q_len * kv_len * 4 * 2
        step = max(1, CHUNK_BYTES // max(per_request, 1))
        allowed = causal(q_len, kv_len, dev)
        for start in range(0, len(reqs), step):
            chunk = reqs[start:start + step]
            latent = dense_latent(inputs, torch.tensor(chunk, device=inputs.block_tables.device), kv_len, pool)
            latent = latent.to(dev)  # [n, kv, rank + rope]
            rows = torch.tensor([starts[r] + i for r in chunk for i in range(q_len)], device=dev)
            q = q_all[rows].view(len(chunk), q_len, c.num_qo_heads, width)
            scores = torch.einsum("nqhd,nkd->nhqk", q, latent) * inputs.sm_scale
            p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            out[rows] = torch.einsum("nhqk,nkd->nqhd", p, latent[..., :rank]).reshape(-1, c.num_qo_heads, rank)
    return out


def dense_latent(inputs: Inputs, requests: torch.Tensor, kv_len: int, pool: torch.Tensor) -> torch.Tensor:
    """The latent rows of some requests, read through the page table: float32 [n, kv_len, rank + rope]."""
    c = inputs.case
    pages = inputs.block_tables[requests][:, : -(-kv_len // c.page_size)].long()  # [n, pages]
    x = pool[pages].float()  # [n, pages, page, rank + rope]
    return x.reshape(len(requests), -1, x.shape[-1])[:, :kv_len]


def expanded_reference(inputs: Inputs, q_nope: torch.Tensor, w_uk: torch.Tensor, w_uv: torch.Tensor,
                       copy: int = 0) -> torch.Tensor:
    """MLA before absorption, for proving `mla_reference` on small cases (a loop per request and head).

    q_nope: [total_q, Hq, qk_nope_head_dim]; the query's pe part is inputs' q[..., kv_lora_rank:].
    w_uk: [Hq, qk_nope_head_dim, kv_lora_rank] (k_nope = w_uk . ckv); w_uv: [Hq, v_dim, kv_lora_rank]
    (v = w_uv . ckv). Returns [total_q, Hq, v_dim] in float32."""
    c = inputs.case
    rank = c.kv_lora_rank
    q_pe = inputs.copies[copy].q.float()[..., rank:]
    flat = inputs.copies[copy].kv_cache.float().reshape(-1, c.page_size, rank + c.qk_rope_head_dim)
    indptr, indices = inputs.host("kv_indptr").tolist(), inputs.kv_indices.cpu()
    starts = inputs.host("qo_indptr").tolist()
    scale = 1.0 / (c.qk_nope_head_dim + c.qk_rope_head_dim) ** 0.5
    out = torch.empty((q_nope.shape[0], c.num_qo_heads, w_uv.shape[1]), dtype=torch.float32)
    for r, (kv_len, q_len) in enumerate(zip(inputs.lengths.kv, inputs.lengths.q)):
        tokens = flat[indices[indptr[r]:indptr[r + 1]].long()].reshape(-1, flat.shape[-1])[:kv_len].cpu()
        ckv, k_pe = tokens[:, :rank], tokens[:, rank:]  # [kv, rank], [kv, rope]
        for h in range(c.num_qo_heads):
            k_nope = ckv @ w_uk[h].T  # [kv, nope]: this head's keys, expanded from the latent
            v = ckv @ w_uv[h].T  # [kv, v_dim]
            for i in range(q_len):
                row = starts[r] + i
                pos = kv_len - q_len + i  # causal: the query at position pos sees keys 0..pos
                s = (k_nope[: pos + 1] @ q_nope[row, h].float() + k_pe[: pos + 1] @ q_pe[row, h].cpu()) * scale
                out[row, h] = torch.softmax(s, dim=0) @ v[: pos + 1]
    return out
