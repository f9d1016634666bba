"""The paged-KV inputs of one case, built the way engines build them for draft extend / target verify.

Every request has the same q_len; seq_lens include the q_len new tokens; query token i of a request
sees KV positions 0 .. kv_len - q_len + i (bottom-right aligned causal mask). Pages are handed out in a
random order, so a kernel that ignores the page table reads the wrong data and fails the check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from kbench.case import Case

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    if name == "fp8":
        return torch.float8_e4m3fn
    return TORCH_DTYPES[name]


@dataclass
class InputCopy:
    """One independent set of query and KV pool; several copies rotate so L2 does not hold them."""

    q: torch.Tensor  # [bs*q_len, Hq, d]
    kv_cache: torch.Tensor  # HND [pages, 2, Hkv, page, d] | NHD [pages, 2, page, Hkv, d]


@dataclass
class Inputs:
    case: Case
    device: torch.device
    copies: list[InputCopy]
    block_tables: torch.Tensor  # int32 [bs, pages_per_request]: physical page of each logical page
    seq_lens: torch.Tensor  # int32 [bs], = kv_len (includes the new tokens)
    qo_indptr: torch.Tensor  # int32 [bs+1]: query row offsets
    kv_indptr: torch.Tensor  # int32 [bs+1]: page offsets into kv_indices
    kv_indices: torch.Tensor  # int32 [bs*pages_per_request]: block_tables flattened
    last_page_len: torch.Tensor  # int32 [bs]
    cum_seq_lens_kv: torch.Tensor  # int32 [bs+1]: token offsets
    draft_mask: torch.Tensor | None  # uint16 [bs, q, ceil(q/32)*2] for xqa (None when q_len == 1)
    sm_scale: float
    extra: dict = field(default_factory=dict)

    @property
    def q(self) -> torch.Tensor:
        return self.copies[0].q

    @property
    def kv_cache(self) -> torch.Tensor:
        return self.copies[0].kv_cache

    def k_v(self, copy: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self.copies[copy].kv_cache
        return kv[:, 0], kv[:, 1]

    def host(self, name: str) -> torch.Tensor:
        """A CPU copy of an index tensor (plan() calls want host tensors), made once."""
        key = "host_" + name
        if key not in self.extra:
            self.extra[key] = getattr(self, name).cpu()
        return self.extra[key]


def xqa_draft_mask(batch_size: int, q_len: int, device="cpu") -> torch.Tensor | None:
    """xqa's packed draft mask: uint16 [bs, q, ceil(q/32)*2]; bit j of row i set = draft token i sees
    draft token j (causal: j <= i). The bits are little-endian uint32 words viewed as uint16 pairs."""
    if q_len <= 1:
        return None
    words = (q_len + 31) // 32
    i = torch.arange(q_len).unsqueeze(1)
    j = torch.arange(words * 32).unsqueeze(0)
    visible = (j <= i).to(torch.int64).view(q_len, words, 32)
    weights = torch.tensor([1 << b for b in range(32)], dtype=torch.int64)
    packed = (visible * weights).sum(-1)  # [q, words], values < 2**32
    lo = (packed & 0xFFFF).to(torch.int32)
    hi = (packed >> 16).to(torch.int32)
    rows = torch.stack([lo, hi], dim=-1).reshape(q_len, words * 2)  # low half first (little endian)
    rows = rows.to(torch.uint16) if hasattr(torch, "uint16") else rows.to(torch.int16)
    return rows.unsqueeze(0).expand(batch_size, q_len, words * 2).contiguous().to(device)


def kv_pool_shape(case: Case, num_pages: int) -> tuple[int, ...]:
    if case.kv_layout == "HND":
        return (num_pages, 2, case.num_kv_heads, case.page_size, case.head_dim)
    return (num_pages, 2, case.page_size, case.num_kv_heads, case.head_dim)


def copy_bytes(case: Case) -> int:
    """Device bytes of one input copy (pool rounded up to whole pages, plus the query)."""
    pool = case.batch_size * case.pages_per_request * case.page_size * case.num_kv_heads * case.head_dim * 2
    return pool * case.kv_elem_bytes() + case.batch_size * case.q_len * case.num_qo_heads * case.head_dim * 2


def build_inputs(case: Case, device="cpu", copies: int = 1, seed: int = 0) -> Inputs:
    """Random (never zero) inputs for one case, on `device`, with `copies` independent query/KV sets."""
    dev = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    bs, q_len, ppr = case.batch_size, case.q_len, case.pages_per_request
    num_pages = bs * ppr
    dt = torch_dtype(case.dtype)
    kv_dt = torch_dtype(case.kv_dtype)

    perm = torch.randperm(num_pages, generator=gen).to(torch.int32)
    block_tables = perm.view(bs, ppr).contiguous()
    seq_lens = torch.full((bs,), case.kv_len, dtype=torch.int32)
    qo_indptr = torch.arange(0, (bs + 1) * q_len, q_len, dtype=torch.int32)
    kv_indptr = torch.arange(0, (bs + 1) * ppr, ppr, dtype=torch.int32)
    last = case.kv_len - (ppr - 1) * case.page_size
    last_page_len = torch.full((bs,), last, dtype=torch.int32)
    cum_kv = torch.arange(0, (bs + 1) * case.kv_len, case.kv_len, dtype=torch.int32)

    dev_gen = torch.Generator(device=dev).manual_seed(seed + 1)
    out_copies = []
    for _ in range(copies):
        q = torch.randn((bs * q_len, case.num_qo_heads, case.head_dim), generator=dev_gen, device=dev, dtype=dt)
        kv = torch.randn(kv_pool_shape(case, num_pages), generator=dev_gen, device=dev, dtype=dt)
        if kv_dt != dt:
            kv = kv.to(kv_dt)
        out_copies.append(InputCopy(q=q, kv_cache=kv))

    return Inputs(
        case=case,
        device=dev,
        copies=out_copies,
        block_tables=block_tables.to(dev),
        seq_lens=seq_lens.to(dev),
        qo_indptr=qo_indptr.to(dev),
        kv_indptr=kv_indptr.to(dev),
        kv_indices=block_tables.flatten().to(dev),
        last_page_len=last_page_len.to(dev),
        cum_seq_lens_kv=cum_kv.to(dev),
        draft_mask=xqa_draft_mask(bs, q_len, dev),
        sm_scale=1.0 / math.sqrt(case.head_dim),
    )
