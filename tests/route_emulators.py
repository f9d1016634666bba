"""CPU stand-ins, in plain torch, for the GPU calls the SGLang routes make, so that tests/test_routes.py can run a
route's own prepare() and host work on a CPU and compare what comes out with the float32 reference:
- `EmuPrefillWrapper`: FlashInfer's BatchPrefillWithPagedKVCacheWrapper as the routes use it: the attributes and
  CUDA-graph buffers SGLang's fast_prefill_plan touches, plan() copying offsets into the buffers and packing the
  custom mask into custom_mask_buf (bits in little order per request, as FlashInfer's segment_packbits), run()
  reading the buffers back (pages of page_size tokens, last-page lengths, the packed mask or a causal block);
- `fa3_attend`: FA3's flash_attn_with_kvcache with causal=False as the cascade calls it (paged K/V through a page
  table, cache_seqlens, cu_seqlens_q), returning the output and the natural-log LSE [Hq, tokens];
- `merge_natural`: merge_state_v2's arithmetic (natural-log LSEs);
- `pack_numpy`: SGLang's pack_verify_mask_into in numpy (the Triton kernel itself is checked in the sglang venv).
"""
from __future__ import annotations

import types

import numpy as np
import torch


def pack_numpy(mask, kv_indptr, packed_indptr, output, *, batch_size, query_width, max_kv_len):
    flat = mask.reshape(-1).numpy()
    for r in range(batch_size):
        a, b = int(kv_indptr[r]) * query_width, int(kv_indptr[r + 1]) * query_width
        packed = np.packbits(flat[a:b], bitorder="little")
        start = int(packed_indptr[r])
        output[start:start + len(packed)] = torch.from_numpy(packed)


def unpack(packed: torch.Tensor, nbits: int) -> torch.Tensor:
    return torch.from_numpy(np.unpackbits(packed.numpy(), bitorder="little")[:nbits].astype(bool))


class EmuPrefillWrapper:
    def __init__(self, ws, layout, backend="fa2", use_cuda_graph=False, qo_indptr_buf=None, paged_kv_indptr_buf=None,
                 paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None, custom_mask_buf=None,
                 mask_indptr_buf=None):
        self.layout, self._backend, self.is_cuda_graph_enabled = layout, backend, use_cuda_graph
        self._qo_indptr_buf, self._paged_kv_indptr_buf = qo_indptr_buf, paged_kv_indptr_buf
        self._paged_kv_indices_buf, self._paged_kv_last_page_len_buf = paged_kv_indices_buf, paged_kv_last_page_len_buf
        self._custom_mask_buf, self._mask_indptr_buf = custom_mask_buf, mask_indptr_buf
        self._float_workspace_buffer = ws
        self._int_workspace_buffer = torch.zeros(8, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(8, dtype=torch.uint8)
        self._max_total_num_rows = None
        self.device = torch.device("cpu")
        self._cached_module = None
        self.plans: list[dict] = []  # plan()'s calls
        self.planner_calls: list[tuple] = []  # the planner module's calls (plan() and fast_prefill_plan)

    def plan(self, qo_indptr, kv_indptr, kv_indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             causal=False, custom_mask=None, sm_scale=None, **kw):
        assert self.is_cuda_graph_enabled, "the emulator models the routes' CUDA-graph wrappers only"
        self.plans.append(dict(page_size=page_size, causal=causal, custom_mask=custom_mask, indices=kv_indices,
                               last_page_len=last_page_len, kv_indptr=kv_indptr, **kw))
        self.page, self.causal, self.sm_scale = page_size, causal, sm_scale
        self._qo_indptr_buf.copy_(qo_indptr)
        self._paged_kv_indptr_buf.copy_(kv_indptr)
        self._paged_kv_last_page_len_buf.copy_(last_page_len)
        self._paged_kv_indices_buf[: len(kv_indices)].copy_(kv_indices)
        if custom_mask is not None:
            q = (qo_indptr[1:] - qo_indptr[:-1]).tolist()
            kv = [(n - 1) * page_size + int(last) for n, last in
                  zip((kv_indptr[1:] - kv_indptr[:-1]).tolist(), last_page_len.tolist())]
            sizes = [a * b for a, b in zip(q, kv)]
            bits = np.cumsum([0] + sizes)
            byte_sizes = [(n + 7) // 8 for n in sizes]
            offs = np.cumsum([0] + byte_sizes)
            flat = custom_mask.numpy()
            for r in range(len(q)):
                packed = np.packbits(flat[bits[r]:bits[r + 1]], bitorder="little")
                self._custom_mask_buf[offs[r]:offs[r + 1]] = torch.from_numpy(packed)
            self._mask_indptr_buf.copy_(torch.tensor(offs, dtype=torch.int32))
        self._cached_module = types.SimpleNamespace(plan=lambda *a: self.planner_calls.append(a) or ("plan", len(a)))
        self._plan_info = self._cached_module.plan("plan()")

    def run(self, q, kv, out=None):
        k_cache, v_cache = kv if isinstance(kv, tuple) else (kv[:, 0], kv[:, 1])
        if self.layout == "HND":
            k_cache, v_cache = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
        heads, d = k_cache.shape[2], k_cache.shape[3]
        qo = self._qo_indptr_buf.tolist()
        kv_ptr = self._paged_kv_indptr_buf.tolist()
        res = torch.empty(q.shape, dtype=torch.float32)
        for r in range(len(qo) - 1):
            pages = self._paged_kv_indices_buf[kv_ptr[r]:kv_ptr[r + 1]].long()
            kv_len = (len(pages) - 1) * self.page + int(self._paged_kv_last_page_len_buf[r])
            k = k_cache[pages].reshape(-1, heads, d)[:kv_len].float()
            v = v_cache[pages].reshape(-1, heads, d)[:kv_len].float()
            qr = q[qo[r]:qo[r + 1]].float()
            n = len(qr)
            if self._custom_mask_buf is not None:
                m = self._mask_indptr_buf.tolist()
                mask = unpack(self._custom_mask_buf[m[r]:m[r + 1]], n * kv_len).view(n, kv_len)
            else:
                mask = torch.arange(kv_len)[None, :] <= (kv_len - n + torch.arange(n))[:, None]
            group = qr.shape[1] // heads
            s = torch.einsum("qhd,khd->hqk", qr, k.repeat_interleave(group, 1)) * self.sm_scale
            p = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
            res[qo[r]:qo[r + 1]] = torch.einsum("hqk,khd->qhd", p, v.repeat_interleave(group, 1))
        out.copy_(res.to(out.dtype))
        return out


def flashinfer_module() -> types.ModuleType:
    fi = types.ModuleType("flashinfer")
    fi.BatchPrefillWithPagedKVCacheWrapper = EmuPrefillWrapper
    return fi


def fa3_attend(scale: float):
    def attend(q, k, v, table, seqlens, cu_q, cu_k, max_q, out):
        page, heads, d = k.shape[1], k.shape[2], k.shape[3]
        o = torch.empty(q.shape, dtype=torch.float32)
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32)
        cu = cu_q.tolist()
        for r in range(len(cu) - 1):
            n = int(seqlens[r])
            pages = table[r, : -(-n // page)].long()
            kr = k[pages].reshape(-1, heads, d)[:n].float()
            vr = v[pages].reshape(-1, heads, d)[:n].float()
            qr = q[cu[r]:cu[r + 1]].float()
            group = qr.shape[1] // heads
            s = torch.einsum("qhd,khd->hqk", qr, kr.repeat_interleave(group, 1)) * scale
            lse[:, cu[r]:cu[r + 1]] = torch.logsumexp(s, -1)
            o[cu[r]:cu[r + 1]] = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vr.repeat_interleave(group, 1))
        out.copy_(o.to(out.dtype))
        return out, lse

    return attend


def merge_natural(o_a, lse_a, o_b, lse_b):
    s_a, s_b = lse_a.T[..., None], lse_b.T[..., None]  # [tokens, Hq, 1]
    m = torch.maximum(s_a, s_b)
    w_a, w_b = torch.exp(s_a - m), torch.exp(s_b - m)
    return ((o_a.float() * w_a + o_b.float() * w_b) / (w_a + w_b)).to(o_a.dtype)
