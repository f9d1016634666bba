"""The correctness oracle: plain torch, float32 math, on whatever device the inputs are on."""
from __future__ import annotations

import torch

from kbench.kernels.base import Kernel, KernelFn
from kbench.kernels.inputs import Inputs
from kbench.kernels.tree_masks import tree_block

# Requests are gathered in chunks so the float32 copies of K and V stay under this many bytes.
CHUNK_BYTES = 1 << 30


def dense_kv(inputs: Inputs, requests, kv_len: int | None = None, copy: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of some requests (a slice or an index tensor) as dense float32 [n, kv_len, Hkv, d], read
    through the page table; kv_len defaults to the case's (all the requests must have at least it)."""
    c = inputs.case
    kv_len = c.kv_len if kv_len is None else kv_len
    k_pool, v_pool = inputs.k_v(copy)
    pages = inputs.block_tables[requests][:, : -(-kv_len // c.page_size)].long()  # [n, pages]
    n, ppr = pages.shape

    def gather(pool: torch.Tensor) -> torch.Tensor:
        x = pool[pages].float()  # HND [n, ppr, Hkv, page, d] | NHD [n, ppr, page, Hkv, d]
        if c.kv_layout == "HND":
            x = x.permute(0, 1, 3, 2, 4)
        return x.reshape(n, ppr * c.page_size, c.num_kv_heads, c.head_dim)[:, :kv_len]

    return gather(k_pool), gather(v_pool)


def visible(q_len: int, kv_len: int, window_left: int, device=None) -> torch.Tensor:
    """[q, kv] bool: query token i (at position kv - q + i) sees key j when j <= its position and,
    with a window, j >= its position - window_left."""
    qpos = (kv_len - q_len + torch.arange(q_len, device=device)).unsqueeze(1)
    kpos = torch.arange(kv_len, device=device).unsqueeze(0)
    allowed = kpos <= qpos
    if window_left >= 0:
        allowed &= kpos >= qpos - window_left
    return allowed


def reference_attention(inputs: Inputs, copy: int = 0) -> torch.Tensor:
    """Output [total_q, Hq, d] in float32, packed like the query (by qo_indptr): query token i of a
    request attends to KV positions 0 .. kv - q + i of its own KV (only the last window_left + 1 of
    them with a window); query head h uses KV head h // group; a sink logit s_h adds exp(s_h) to the
    softmax denominator. With a draft tree (inputs.tree) a query token sees, of the draft block, only itself
    and its ancestors; a window still applies by KV slot. Requests with equal lengths are computed together,
    in chunks. An MLA case (latent attention) has its own oracle: kbench.kernels.mla_reference."""
    c = inputs.case
    if c.is_mla:
        from kbench.kernels.mla_reference import mla_reference

        return mla_reference(inputs, copy)
    b = inputs.lengths
    q_all = inputs.copies[copy].q.float()
    out = torch.empty_like(q_all)
    dev = q_all.device
    starts = inputs.host("qo_indptr").tolist()
    groups: dict[tuple[int, int], list[int]] = {}
    for r, key in enumerate(zip(b.kv, b.q)):
        groups.setdefault(key, []).append(r)
    sinks = None if inputs.sinks is None else inputs.sinks.float().to(dev).view(1, -1, 1, 1)
    for (kv_len, q_len), reqs in groups.items():
        per_request = kv_len * c.num_kv_heads * c.head_dim * 4 * 2 + c.num_qo_heads * q_len * kv_len * 4 * 2
        step = max(1, CHUNK_BYTES // max(per_request, 1))
        allowed = visible(q_len, kv_len, c.window_left, dev)
        for start in range(0, len(reqs), step):
            chunk = reqs[start:start + step]
            idx = torch.tensor(chunk, device=inputs.block_tables.device)
            k, v = dense_kv(inputs, idx, kv_len, copy)  # [n, kv, Hkv, d]
            k = k.repeat_interleave(c.group, dim=2).to(dev)
            v = v.repeat_interleave(c.group, dim=2).to(dev)
            rows = torch.tensor([starts[r] + i for r in chunk for i in range(q_len)], device=dev)
            q = q_all[rows].view(len(chunk), q_len, c.num_qo_heads, c.head_dim)
            scores = torch.einsum("nqhd,nkhd->nhqk", q, k) * inputs.sm_scale
            mask = allowed if inputs.tree is None else allowed & tree_block(
                [inputs.tree.parents[r] for r in chunk], q_len, kv_len, dev)
            scores = scores.masked_fill(~mask, float("-inf"))
            if sinks is None:
                p = torch.softmax(scores, dim=-1)
            else:  # the sink is one more logit in the denominator, with no value
                sink_col = sinks.expand(len(chunk), -1, q_len, 1)
                p = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :-1]
            out[rows] = torch.einsum("nhqk,nkhd->nqhd", p, v).reshape(-1, c.num_qo_heads, c.head_dim)
    return out


class ReferenceKernel(Kernel):
    name = "reference"
    path = "reference"
    description = "plain torch, float32 math: the correctness oracle (CPU and GPU)"
    kv_dtypes = ("bf16", "fp16", "fp8")
    attentions = ("gqa", "mla")

    def supports(self, device, case):
        return None

    def jit_key(self, case):
        return ()

    def prepare(self, inputs: Inputs) -> KernelFn:
        return lambda i: reference_attention(inputs, i)
