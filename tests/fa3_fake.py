"""A stand-in for torch.ops._vllm_fa3_C, vLLM 0.33.0's FlashAttention-3 library, for the CPU tests of the kernels
that call it (tests/test_vllm_fa3.py: GQA; tests/test_vllm_fa3_mla.py: absorbed MLA). It takes the positional
arguments of the library's schema, keeps them by name (fwds, metas), and computes bottom-right causal paged
attention in float32 from exactly those arguments, so a wrong view of the cache, page table, seq_lens or
cu_seqlens_q fails the reference check. A subclass says how a request's scores and values are read."""
from __future__ import annotations

import math

import torch

FWD_ARGS = ("q k v k_new v_new q_v out cu_seqlens_q cu_seqlens_k cu_seqlens_k_new seqused_q seqused_k max_seqlen_q "
            "max_seqlen_k page_table kv_batch_idx leftpad_k rotary_cos rotary_sin seqlens_rotary q_descale k_descale "
            "v_descale softmax_scale is_causal window_size_left window_size_right softcap is_rotary_interleaved "
            "scheduler_metadata num_splits pack_gqa sm_margin s_aux cp_world_size cp_rank cp_tot_seqused_k").split()
META_ARGS = ("batch_size max_seqlen_q max_seqlen_k num_heads num_heads_k headdim headdim_v qkv_dtype seqused_k "
             "cu_seqlens_q cu_seqlens_k cu_seqlens_k_new seqused_q leftpad_k page_size max_seqlen_k_new is_causal "
             "window_size_left window_size_right has_softcap num_splits pack_gqa sm_margin").split()


class FakeFa3Ops:
    """torch.ops._vllm_fa3_C as vLLM 0.33.0's schema has it (the positional arguments by name)."""

    def __init__(self):
        self.fwds: list[dict] = []
        self.metas: list[dict] = []

    def get_scheduler_metadata(self, *args):
        assert len(args) == len(META_ARGS)
        self.metas.append(dict(zip(META_ARGS, args)))
        return torch.zeros(8, dtype=torch.int32)

    def check(self, a: dict) -> None:
        """The subclass's checks of the tensors it is given (layouts, dtypes)."""

    def scores(self, a: dict, rows: slice, pages: torch.Tensor, n_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores [heads, q, k] scaled, values [k, heads, d]) of one request: its query rows and KV pages."""
        raise NotImplementedError

    def fwd(self, *args):
        assert len(args) == len(FWD_ARGS)
        a = dict(zip(FWD_ARGS, args))
        self.fwds.append(a)
        self.check(a)
        out, cu_q, seqused, table, page = a["out"], a["cu_seqlens_q"], a["seqused_k"], a["page_table"], a["k"].shape[1]
        for b in range(cu_q.numel() - 1):
            rows = slice(int(cu_q[b]), int(cu_q[b + 1]))
            n_q, n_k = rows.stop - rows.start, int(seqused[b])
            assert n_q <= a["max_seqlen_q"]
            s, vv = self.scores(a, rows, table[b, : math.ceil(n_k / page)].long(), n_k)
            qpos = n_k - n_q + torch.arange(n_q).unsqueeze(1)
            kpos = torch.arange(n_k).unsqueeze(0)
            hidden = kpos > qpos  # bottom-right causal
            if a["window_size_left"] >= 0:  # FA3's local window: keys qpos - left .. qpos + right
                hidden |= kpos < qpos - a["window_size_left"]
            s = s.masked_fill(hidden, float("-inf"))
            if a["s_aux"] is not None:  # a learned sink per q head: exp(s_h) joins the softmax's denominator
                sink = a["s_aux"].float().view(-1, 1, 1).expand(-1, n_q, 1)
                p = torch.cat([s, sink], -1).softmax(-1)[..., :-1]
            else:
                p = s.softmax(-1)
            out[rows] = torch.einsum("hqk,khd->qhd", p, vv).to(out.dtype)
        return [out, None, None, None]


class FakeGqaFa3Ops(FakeFa3Ops):
    """fwd as paged GQA attention: K/V [pages, page, Hkv, d], each KV head shared by its group of query heads."""

    def check(self, a):
        k, v = a["k"], a["v"]
        assert k.stride(-1) == 1 and v.stride(-1) == 1 and k.shape == v.shape  # [pages, page, Hkv, d]

    def scores(self, a, rows, pages, n_k):
        q, k, v = a["q"], a["k"], a["v"]
        hkv = k.shape[2]
        group = q.shape[1] // hkv
        kk = k[pages].reshape(-1, hkv, k.shape[-1])[:n_k].float().repeat_interleave(group, 1)
        vv = v[pages].reshape(-1, hkv, v.shape[-1])[:n_k].float().repeat_interleave(group, 1)
        return torch.einsum("qhd,khd->hqk", q[rows].float(), kk) * a["softmax_scale"], vv


class FakeMlaFa3Ops(FakeFa3Ops):
    """fwd with q_v as FA3's absorbed MLA: scores = q . k + q_v . v over one KV head (k the RoPE cache, v the
    latent), out = softmax . v."""

    def check(self, a):
        q, k, v, qv = a["q"], a["k"], a["v"], a["q_v"]
        assert qv is not None and k.dim() == v.dim() == 4 and k.shape[2] == v.shape[2] == 1  # [pages, page, 1, d]
        assert all(t.stride(-1) == 1 for t in (q, k, v, qv)) and k.dtype == v.dtype == q.dtype == qv.dtype

    def scores(self, a, rows, pages, n_k):
        q, k, v, qv = a["q"], a["k"], a["v"], a["q_v"]
        kk = k[pages].reshape(-1, k.shape[-1])[:n_k].float()
        vv = v[pages].reshape(-1, v.shape[-1])[:n_k].float()
        s = (torch.einsum("qhd,kd->hqk", q[rows].float(), kk)
             + torch.einsum("qhd,kd->hqk", qv[rows].float(), vv)) * a["softmax_scale"]
        return s, vv.unsqueeze(1).expand(-1, q.shape[1], -1)
