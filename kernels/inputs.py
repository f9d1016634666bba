"""The paged-KV inputs of one case, built the way engines build them for draft extend / target verify.

seq_lens include each request's new tokens; query token i of a request with q tokens and KV length kv
sees KV positions 0 .. kv - q + i (bottom-right aligned causal mask), and with a sliding window only
positions >= (kv - q + i) - window_left. In the idealised batch every request has the same q_len and
kv_len; a realistic case (kbench.cases.dists) gives each request its own lengths: the query is packed
[total_q, Hq, d] (ragged, qo_indptr), page tables are sized per request, and a padded view serves the
kernels that take one q_len per request (every request padded to the longest, padding appended after
its real tokens with KV slots of its own, as a CUDA-graph engine pads its verify batch).
Pages are handed out in a random order, so a kernel that ignores the page table reads the wrong data
and fails the check. A draft tree (case.tree, kbench.kernels.tree_masks) narrows the draft block: a token
sees the prefix, itself and its ancestors; `Inputs.tree` holds its parents and masks.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from kbench.cases.case import Case
from kbench.cases.dists import BatchLengths
from kbench.kernels.tree_masks import TreeInputs, tree_inputs

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    if name == "fp8":
        return torch.float8_e4m3fn
    return TORCH_DTYPES[name]


@dataclass
class InputCopy:
    """One independent set of query and KV pool; several copies rotate so L2 does not hold them."""

    q: torch.Tensor  # [total_q, Hq, d]: packed by qo_indptr (= [bs*q_len] in the idealised batch)
    # HND [pages, 2, Hkv, page, d] | NHD [pages, 2, page, Hkv, d] | MLA [pages, page, rank + rope] (mla_inputs)
    kv_cache: torch.Tensor
    q_padded: torch.Tensor | None = None  # [bs*max_q, Hq, d] when q is ragged; None: q itself


@dataclass
class PaddedBatch:
    """The batch as a kernel with one q_len per request sees it: every request padded to max_q tokens.

    A request with q tokens and KV length kv gets max_q - q padding tokens appended after its real ones,
    so its seq_len becomes kv + max_q - q and its real tokens keep their positions; rows r*max_q + i
    (i < q) are the real ones, and only those are checked."""

    q_len: int  # max_q
    seq_lens: torch.Tensor  # int32 [bs]
    block_tables: torch.Tensor  # int32 [bs, width]
    kv_indptr: torch.Tensor  # int32 [bs+1]
    kv_indices: torch.Tensor
    last_page_len: torch.Tensor  # int32 [bs]
    draft_mask: torch.Tensor | None  # uint16 [bs, max_q, ceil(max_q/32)*2] for xqa
    valid_rows: torch.Tensor | None  # int64 [total_q]: the real rows of a padded output; None: all rows
    max_seq_len: int
    extra: dict = field(default_factory=dict)

    def unpad(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.valid_rows is None else out[self.valid_rows]

    def host(self, name: str) -> torch.Tensor:
        key = "host_" + name
        if key not in self.extra:
            self.extra[key] = getattr(self, name).cpu()
        return self.extra[key]


@dataclass
class Inputs:
    case: Case
    device: torch.device
    copies: list[InputCopy]
    block_tables: torch.Tensor  # int32 [bs, width]: physical page of each logical page (width: max_seq_len)
    seq_lens: torch.Tensor  # int32 [bs]: each request's KV length (includes its new tokens)
    qo_indptr: torch.Tensor  # int32 [bs+1]: query row offsets (ragged when q_dist is not fixed)
    kv_indptr: torch.Tensor  # int32 [bs+1]: page offsets into kv_indices
    kv_indices: torch.Tensor  # int32 [sum of pages]: each request's pages, in order
    last_page_len: torch.Tensor  # int32 [bs]
    cum_seq_lens_kv: torch.Tensor  # int32 [bs+1]: token offsets
    draft_mask: torch.Tensor | None  # uint16 xqa mask: [bs, q, w] uniform, [total_q, w] ragged; None if q == 1
    sm_scale: float
    extra: dict = field(default_factory=dict)
    lengths: BatchLengths | None = None  # per-request lengths (kbench.cases.dists)
    padded: PaddedBatch | None = None  # the padded view (the same batch when q is uniform)
    sinks: torch.Tensor | None = None  # float32 [Hq] sink logits, when case.sinks == "on"
    max_seq_len: int = 0  # what decode kernels get: the longest sequence, or the model's context length
    tree: TreeInputs | None = None  # a draft tree's parents and masks (kbench.kernels.tree_masks); None: a chain

    @property
    def q(self) -> torch.Tensor:
        return self.copies[0].q

    @property
    def kv_cache(self) -> torch.Tensor:
        return self.copies[0].kv_cache

    @property
    def max_q(self) -> int:
        return self.lengths.max_q

    @property
    def max_kv(self) -> int:
        return max(self.lengths.kv)

    def q_padded(self, copy: int = 0) -> torch.Tensor:
        cp = self.copies[copy]
        return cp.q if cp.q_padded is None else cp.q_padded

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
    return _mask_rows(q_len).unsqueeze(0).expand(batch_size, q_len, -1).contiguous().to(device)


def _mask_rows(q_len: int) -> torch.Tensor:
    """Row i of a causal draft block of q_len tokens: [q_len, ceil(q_len/32)*2] uint16."""
    words = (q_len + 31) // 32
    i = torch.arange(q_len).unsqueeze(1)
    j = torch.arange(words * 32).unsqueeze(0)
    visible = (j <= i).to(torch.int64).view(q_len, words, 32)
    weights = torch.tensor([1 << b for b in range(32)], dtype=torch.int64)
    packed = (visible * weights).sum(-1)  # [q, words], values < 2**32
    lo = (packed & 0xFFFF).to(torch.int32)
    hi = (packed >> 16).to(torch.int32)
    rows = torch.stack([lo, hi], dim=-1).reshape(q_len, words * 2)  # low half first (little endian)
    return rows.to(torch.uint16) if hasattr(torch, "uint16") else rows.to(torch.int16)


def xqa_ragged_mask(q_lens, max_q: int, device="cpu") -> torch.Tensor | None:
    """xqa's mask for ragged q (q_cu_seq_lens): rows packed by the same offsets as the query,
    [total_q, ceil(max_q/32)*2]; request r's row i sees its own draft tokens j <= i."""
    if max_q <= 1:
        return None
    rows = _mask_rows(max_q)
    return torch.cat([rows[:n] for n in q_lens]).contiguous().to(device)


def kv_pool_shape(case: Case, num_pages: int) -> tuple[int, ...]:
    if case.kv_layout == "HND":
        return (num_pages, 2, case.num_kv_heads, case.page_size, case.head_dim)
    return (num_pages, 2, case.page_size, case.num_kv_heads, case.head_dim)


def _pages(n: int, page: int) -> int:
    return -(-n // page)


def copy_bytes(case: Case, seed: int = 0) -> int:
    """Device bytes of one input copy (pool rounded up to whole pages, plus the query)."""
    b = case.lengths(seed)
    pages = sum(_pages(k, case.page_size) for k in b.padded_kv())
    pool = pages * case.page_size * case.kv_values_per_token
    q_rows = case.batch_size * b.max_q + (0 if b.uniform_q else b.total_q)
    return pool * case.kv_elem_bytes() + q_rows * case.num_qo_heads * case.head_dim * q_elem_bytes(case)


def table_bytes(case: Case, seed: int = 0) -> int:
    """Bytes of the page tables build_inputs makes (int32, batch x the pages of max_seq_len; a second one for the
    padded view of a ragged batch): built on the host, then copied to the device. With max_seq_len=context:N
    they can outweigh the KV itself (context:2147483647 at batch 64, page 16: 32 GiB)."""
    b = case.lengths(seed)
    width = _pages(case.max_seq_len_value(max(b.kv)), case.page_size)
    tables = 1 if b.uniform_q else 2
    return tables * case.batch_size * width * 4


def q_torch_dtype(case: Case) -> torch.dtype:
    """The query's dtype: the case's, or e4m3 when q_dtype is fp8 (the output stays in the case's dtype)."""
    return torch_dtype("fp8" if case.q_dtype == "fp8" else case.dtype)


def q_elem_bytes(case: Case) -> int:
    return 1 if case.q_dtype == "fp8" else 2


def _table(pages_of: list[torch.Tensor], width: int) -> torch.Tensor:
    """[bs, width] int32: each request's first pages (a request's padding pages only fit where the
    table is as wide as the padded batch); unused slots hold page 0, as engines leave them."""
    t = torch.zeros((len(pages_of), width), dtype=torch.int32)
    for r, p in enumerate(pages_of):
        n = min(len(p), width)
        t[r, :n] = p[:n]
    return t


def _paging(lengths, pages_of, page: int):
    """kv_indptr, kv_indices, last_page_len for requests of these lengths (their first pages)."""
    counts = [_pages(k, page) for k in lengths]
    kv_indptr = torch.tensor([0] + list(itertools.accumulate(counts)), dtype=torch.int32)
    kv_indices = torch.cat([p[:n] for p, n in zip(pages_of, counts)]).to(torch.int32)
    last = torch.tensor([k - (n - 1) * page for k, n in zip(lengths, counts)], dtype=torch.int32)
    return kv_indptr, kv_indices, last


def sink_logits(num_qo_heads: int, seed: int = 0) -> torch.Tensor:
    """Seeded float32 sink logits per q head, large enough to matter next to the scores of a few
    thousand keys (a kernel that ignores them fails the check), as learned sinks do. Values a bf16 holds exactly:
    gpt-oss keeps its sinks in bf16, and FA3 takes them only so (s_aux), so every kernel and the reference see the
    same sinks."""
    gen = torch.Generator(device="cpu").manual_seed(seed + 7)
    return (torch.rand(num_qo_heads, generator=gen, dtype=torch.float32) * 8.0).to(torch.bfloat16).float()


def build_inputs(case: Case, device="cpu", copies: int = 1, seed: int = 0) -> Inputs:
    """Random (never zero) inputs for one case, on `device`, with `copies` independent query/KV sets."""
    dev = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    b = case.lengths(seed)
    bs, page, max_q = case.batch_size, case.page_size, b.max_q
    padded_kv = b.padded_kv()
    dt = torch_dtype(case.dtype)
    kv_dt = torch_dtype(case.kv_dtype)
    q_dt = q_torch_dtype(case)

    # each request owns pages for its padded length (= its length when q is uniform), in a random order
    capacity = [_pages(k, page) for k in padded_kv]
    num_pages = sum(capacity)
    perm = torch.randperm(num_pages, generator=gen).to(torch.int32)
    pages_of = list(torch.split(perm, capacity))

    max_seq_len = case.max_seq_len_value(max(b.kv))
    # engines size the page table to max_seq_len (SGLang: the model's context length); xqa derives
    # its split count from the table's width, so the width is part of the case
    block_tables = _table(pages_of, _pages(max_seq_len, page))
    seq_lens = torch.tensor(b.kv, dtype=torch.int32)
    qo_indptr = torch.tensor([0] + list(itertools.accumulate(b.q)), dtype=torch.int32)
    kv_indptr, kv_indices, last_page_len = _paging(b.kv, pages_of, page)
    cum_kv = torch.tensor([0] + list(itertools.accumulate(b.kv)), dtype=torch.int32)

    if b.uniform_q:
        valid_rows = None
        padded_max = max_seq_len
        p_tables, p_seq, p_paging = block_tables, seq_lens, (kv_indptr, kv_indices, last_page_len)
    else:
        valid_rows = torch.cat([r * max_q + torch.arange(n) for r, n in enumerate(b.q)])
        padded_max = case.max_seq_len_value(max(padded_kv))
        p_tables = _table(pages_of, _pages(padded_max, page))
        p_seq = torch.tensor(padded_kv, dtype=torch.int32)
        p_paging = _paging(padded_kv, pages_of, page)

    # a draft tree (case.tree) replaces the causal masks; a chain keeps them
    tree = tree_inputs(case, b, dev, seed) if max_q > 1 else None
    dev_gen = torch.Generator(device=dev).manual_seed(seed + 1)
    out_copies = []
    for _ in range(copies):
        if case.is_mla:  # a latent cache and the absorbed query: kbench.kernels.mla_inputs
            from kbench.kernels import mla_inputs

            q_pad, kv = mla_inputs.random_copy(case, bs * max_q, num_pages, dev_gen, dev, dt, q_dt, kv_dt)
        else:
            q_pad = torch.randn((bs * max_q, case.num_qo_heads, case.head_dim), generator=dev_gen, device=dev, dtype=dt)
            kv = torch.randn(kv_pool_shape(case, num_pages), generator=dev_gen, device=dev, dtype=dt)
            if q_dt != dt:  # an fp8 query is the case's query rounded to e4m3, as an engine casts it
                q_pad = q_pad.to(q_dt)
            if kv_dt != dt:
                kv = kv.to(kv_dt)
        if valid_rows is None:
            out_copies.append(InputCopy(q=q_pad, kv_cache=kv))
        else:
            out_copies.append(InputCopy(q=q_pad[valid_rows.to(dev)].contiguous(), kv_cache=kv, q_padded=q_pad))

    padded = PaddedBatch(
        q_len=max_q, seq_lens=p_seq.to(dev), block_tables=p_tables.to(dev), kv_indptr=p_paging[0].to(dev),
        kv_indices=p_paging[1].to(dev), last_page_len=p_paging[2].to(dev),
        draft_mask=xqa_draft_mask(bs, max_q, dev) if tree is None else tree.xqa_padded,
        valid_rows=None if valid_rows is None else valid_rows.to(dev),
        max_seq_len=padded_max,
    )
    return Inputs(
        case=case,
        device=dev,
        copies=out_copies,
        block_tables=block_tables.to(dev),
        seq_lens=seq_lens.to(dev),
        qo_indptr=qo_indptr.to(dev),
        kv_indptr=kv_indptr.to(dev),
        kv_indices=kv_indices.to(dev),
        last_page_len=last_page_len.to(dev),
        cum_seq_lens_kv=cum_kv.to(dev),
        draft_mask=padded.draft_mask if b.uniform_q else (
            xqa_ragged_mask(b.q, max_q, dev) if tree is None else tree.xqa_ragged),
        sm_scale=case.softmax_scale,
        lengths=b,
        padded=padded,
        sinks=sink_logits(case.num_qo_heads, seed).to(dev) if case.sinks == "on" else None,
        max_seq_len=max_seq_len,
        tree=tree,
    )
