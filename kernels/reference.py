"""The correctness oracle: plain torch, float32 math, on whatever device the inputs are on."""
from __future__ import annotations

import torch

from kbench.kernels.base import Kernel, KernelFn
from kbench.kernels.inputs import Inputs

# Requests are gathered in chunks so the float32 copies of K and V stay under this many bytes.
CHUNK_BYTES = 1 << 30


def dense_kv(inputs: Inputs, requests: slice, copy: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of some requests as dense float32 [n, kv_len, Hkv, d], read through the page table."""
    c = inputs.case
    k_pool, v_pool = inputs.k_v(copy)
    pages = inputs.block_tables[requests].long()  # [n, ppr]
    n, ppr = pages.shape

    def gather(pool: torch.Tensor) -> torch.Tensor:
        x = pool[pages].float()  # HND [n, ppr, Hkv, page, d] | NHD [n, ppr, page, Hkv, d]
        if c.kv_layout == "HND":
            x = x.permute(0, 1, 3, 2, 4)
        return x.reshape(n, ppr * c.page_size, c.num_kv_heads, c.head_dim)[:, : c.kv_len]

    return gather(k_pool), gather(v_pool)


def reference_attention(inputs: Inputs, copy: int = 0) -> torch.Tensor:
    """Output [bs*q, Hq, d] in float32: query token i of a request attends to KV positions
    0 .. kv_len - q_len + i; query head h uses KV head h // group."""
    c = inputs.case
    q_all = inputs.copies[copy].q.float().view(c.batch_size, c.q_len, c.num_qo_heads, c.head_dim)
    out = torch.empty_like(q_all)
    per_request = c.kv_len * c.num_kv_heads * c.head_dim * 4 * 2 + c.num_qo_heads * c.q_len * c.kv_len * 4 * 2
    step = max(1, CHUNK_BYTES // max(per_request, 1))
    qpos = torch.arange(c.q_len, device=q_all.device).unsqueeze(1)
    kpos = torch.arange(c.kv_len, device=q_all.device).unsqueeze(0)
    allowed = kpos <= (c.kv_len - c.q_len + qpos)  # [q, kv]
    for start in range(0, c.batch_size, step):
        sl = slice(start, min(start + step, c.batch_size))
        k, v = dense_kv(inputs, sl, copy)  # [n, kv, Hkv, d]
        k = k.repeat_interleave(c.group, dim=2)
        v = v.repeat_interleave(c.group, dim=2)
        q = q_all[sl]  # [n, q, Hq, d]
        scores = torch.einsum("nqhd,nkhd->nhqk", q, k) * inputs.sm_scale
        scores = scores.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        out[sl] = torch.einsum("nhqk,nkhd->nqhd", p, v)
    return out.view(c.batch_size * c.q_len, c.num_qo_heads, c.head_dim)


class ReferenceKernel(Kernel):
    name = "reference"
    path = "reference"
    description = "plain torch, float32 math: the correctness oracle (CPU and GPU)"
    kv_dtypes = ("bf16", "fp16", "fp8")

    def supports(self, device, case):
        return None

    def jit_key(self, case):
        return ()

    def prepare(self, inputs: Inputs) -> KernelFn:
        return lambda i: reference_attention(inputs, i)
