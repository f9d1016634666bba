"""A model's work outside attention, as the engines' GEMMs run it: torch bf16 matmuls (cuBLAS), one callable per part
of a step, to be timed by kbench's timer under a CUDA graph (kbench.engine.layers). Attention itself (its kernels and
routes) is measured elsewhere; RoPE and the KV-cache write (small elementwise ops) are in neither.

Parts (per TP rank: kbench.cases.model_dims), over a number of tokens:
  target-layer        one decoder layer but attention: input RMSNorm, QKV projection (MLA: q_a, its norm, q_b,
                      kv_a, its norm, the absorbed W_UK and W_UV bmm), output projection, post-attention RMSNorm, the
                      MLP (gate_up, SiLU x up, down) or the MoE (router, experts, shared experts)
  target-dense-layer  a MoE model's dense layers (DeepSeek-V3's first 3), as target-layer with the dense MLP
  target-lm-head      final RMSNorm and the LM head (the vocabulary's rows) over the verified tokens
  draft-layer         the draft's layer: fc (EAGLE) or eh_proj (MTP) over [embedding, hidden], then a decoder layer
  draft-lm-head       the draft's final RMSNorm and LM head

MoE experts are an estimate, labelled so (METHOD): the experts a batch of T tokens touches under uniform routing,
n = E (1 - (1 - k/E)^T), each given T k / n tokens, as one batched matmul (torch.bmm) per projection: the weights read
are those n experts', the FLOPs T k tokens'; a real grouped GEMM (fused MoE kernels) and a skewed router differ.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from kbench.cases.model_dims import ModelDims, experts_touched

PARTS = ("target-layer", "target-dense-layer", "target-lm-head", "draft-layer", "draft-lm-head")
DENSE = "measured: dense GEMMs (torch bf16 matmul under a CUDA graph)"
METHOD = ("estimate: the experts T tokens touch under uniform routing, n = E(1-(1-k/E)^T), each with T*k/n tokens, "
          "one torch.bmm per projection")
ROTATE_BYTES = 256 * 1024 * 1024  # weights rotated over copies until this much: L2 (50-60 MB) holds none of it


@dataclass(frozen=True)
class PartSpec:
    part: str
    tokens: int
    method: str
    weight_bytes: int  # the weights one call reads (bf16)


def parts_of(dims: ModelDims) -> list[str]:
    """The parts a step of this model has."""
    dense = dims.moe is not None and dims.moe.dense_layers > 0
    return [p for p in PARTS if p != "target-dense-layer" or dense]


def _layer_mats(dims: ModelDims, heads, mlp: str, tokens: int) -> tuple[list[tuple[int, int]], dict]:
    """(the GEMMs' (in, out) of one layer's dense part, the MoE's shape or {}); mlp: dense | moe | draft."""
    h = dims.hidden
    mats: list[tuple[int, int]] = []
    if dims.mla is not None:
        q_lora, v_dim = dims.mla
        hq = heads.num_qo_heads
        mats += [(h, q_lora), (q_lora, hq * (heads.qk_nope_head_dim + heads.qk_rope_head_dim)),
                 (h, heads.kv_lora_rank + heads.qk_rope_head_dim), (hq * v_dim, h)]
    else:
        mats += [(h, (heads.num_qo_heads + 2 * heads.num_kv_heads) * heads.head_dim),
                 (heads.num_qo_heads * heads.head_dim, h)]
    moe = {}
    if mlp == "moe" and dims.moe is not None:
        m = dims.moe
        n = max(1, round(experts_touched(m.experts, m.per_token, tokens)))
        moe = dict(experts=n, rows=math.ceil(tokens * m.per_token / n), inter=m.intermediate, router=m.experts)
        if m.shared:
            mats += [(h, 2 * m.intermediate * m.shared), (m.intermediate * m.shared, h)]
    else:
        inter = dims.draft_intermediate if mlp == "draft" and dims.draft_intermediate else dims.intermediate
        mats += [(h, 2 * inter), (inter, h)]
    return mats, moe


def spec(dims: ModelDims, heads, part: str, tokens: int) -> PartSpec:
    """What one call of `part` over `tokens` tokens reads and how it is timed."""
    mats, moe, extra = _part(dims, heads, part, tokens)
    b = 2 * (sum(i * o for i, o in mats) + extra)
    if moe:
        b += 2 * (moe["experts"] * 3 * dims.hidden * moe["inter"] + dims.hidden * moe["router"])
    return PartSpec(part, tokens, METHOD if moe else DENSE, b)


def _part(dims: ModelDims, heads, part: str, tokens: int):
    h = dims.hidden
    extra = 0
    if part in ("target-lm-head", "draft-lm-head"):
        vocab = dims.draft_vocab if part == "draft-lm-head" and dims.draft_vocab else dims.vocab
        return [(h, vocab)], {}, 0
    if part == "target-dense-layer":
        mats, moe = _layer_mats(dims, heads, "dense", tokens)
    elif part == "target-layer":
        mats, moe = _layer_mats(dims, heads, "moe" if dims.moe is not None else "dense", tokens)
    elif part == "draft-layer":
        kind = "moe" if dims.draft == "mtp" and dims.moe is not None else "draft"
        mats, moe = _layer_mats(dims, heads, kind, tokens)
        mats = [(2 * h, h), *mats]  # EAGLE's fc / MTP's eh_proj over [embedding, hidden]
    else:
        raise ValueError(f"unknown part {part!r}: one of {', '.join(PARTS)}")
    if dims.mla is not None:  # the absorbed W_UK (nope -> latent) and W_UV (latent -> v) per head
        extra = heads.num_qo_heads * heads.kv_lora_rank * (heads.qk_nope_head_dim + dims.mla[1])
    return mats, moe, extra


def build(dims: ModelDims, heads, part: str, tokens: int, device, dtype=None) -> tuple[Callable[[int], object], int]:
    """(fn(i): one call of the part on weight copy i, the number of copies): random weights and inputs on `device`;
    copies rotate until ROTATE_BYTES so the timed calls read weights from memory, as a step's layers do."""
    import torch
    import torch.nn.functional as F

    dtype = dtype or torch.bfloat16
    mats, moe, _ = _part(dims, heads, part, tokens)
    s = spec(dims, heads, part, tokens)
    copies = max(1, min(8, math.ceil(ROTATE_BYTES / max(s.weight_bytes, 1))))
    h = dims.hidden
    gen = torch.Generator(device=device).manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, device=device, dtype=dtype, generator=gen) * 0.02)

    x = rand(tokens, h)
    x2 = rand(tokens, 2 * h)
    norm_w = torch.ones(h, device=device, dtype=dtype)
    sets = []
    for _ in range(copies):
        w = [rand(o, i) for i, o in mats]
        e = None
        if moe:
            e = (rand(h, moe["router"]), rand(moe["experts"], h, 2 * moe["inter"]),
                 rand(moe["experts"], moe["inter"], h), rand(moe["experts"], moe["rows"], h))
        sets.append((w, e))
    lm = part.endswith("lm-head")
    draft = part == "draft-layer"
    mla = dims.mla is not None and not lm
    if mla:  # the absorbed per-head matmuls' weights (one set: 2 x heads x 128 x 512, small)
        hq, r, nope, v = heads.num_qo_heads, heads.kv_lora_rank, heads.qk_nope_head_dim, dims.mla[1]
        w_uk, w_uv = rand(hq, nope, r), rand(hq, r, v)

    def mlp(y, w_up, w_down):
        gu = F.linear(y, w_up)
        g, u = gu.chunk(2, dim=-1)
        return F.linear(F.silu(g) * u, w_down)

    def fn(i: int):
        w, e = sets[i]
        if lm:
            return F.linear(F.rms_norm(x, (h,), norm_w), w[0])
        j = 0
        y = x
        if draft:  # fc / eh_proj over [embedding, hidden]
            y = F.linear(x2, w[0])
            j = 1
        y = F.rms_norm(y, (h,), norm_w)
        if mla:
            q = F.linear(F.rms_norm(F.linear(y, w[j]), (w[j].shape[0],)), w[j + 1])
            kv = F.linear(y, w[j + 2])
            qn = q.view(tokens, hq, -1)[..., :nope].transpose(0, 1)  # [H, T, nope]
            lat = torch.bmm(qn, w_uk)  # [H, T, r]
            o = torch.bmm(lat, w_uv).transpose(0, 1).reshape(tokens, -1)  # [T, H*v]
            attn = F.linear(o, w[j + 3])
            del kv
            j += 4
        else:
            qkv = F.linear(y, w[j])
            attn = F.linear(qkv[:, : w[j + 1].shape[1]], w[j + 1])  # stands for attention's output
            j += 2
        y = F.rms_norm(attn + x, (h,), norm_w)
        out = 0
        if e is not None:
            router, up, down, rows = e
            logits = F.linear(y, router.t())
            torch.topk(logits.float().softmax(-1), dims.moe.per_token, dim=-1)
            gu = torch.bmm(rows, up)
            g, u = gu.chunk(2, dim=-1)
            out = torch.bmm(F.silu(g) * u, down)
        if j < len(w):  # the dense MLP, or a MoE model's shared experts
            out = mlp(y, w[j], w[j + 1]) + (0 if e is None else out.sum())
        return out

    return fn, copies
