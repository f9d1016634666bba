"""Draft-tree masks (issue #26): what an engine builds from the parent lists every verify step, and which
kernels can take them.

A request's draft tokens sit at the end of its KV (slots kv - q .. kv - 1); token i sees the whole prefix,
itself and its ancestors (kbench.cases.trees). From the parent lists (a [bs, n] tensor on the device, as the
draft step leaves them):
- `visibility`: bool [bs, n, n], row i sees j; the ancestor closure by pointer doubling (ceil(log2(n - 1))
  rounds of row gathers), so a step costs a few kernel launches, not one per level;
- `xqa_mask`: xqa's bit-packed mask, uint16 [bs, n, ((n + 31) // 32) * 2]: bit j of row i (32-bit words,
  little-endian, the low half first) = token i sees token j; ragged q: the rows packed by the q offsets;
- `fa2_mask`: FA2's custom mask, the whole [q, kv] block of each request (prefix columns all true),
  flattened and concatenated, as BatchPrefillWithPagedKVCacheWrapper.plan(custom_mask=) takes it;
  `pack_fa2` packs it the way plan() does (flashinfer.segment_packbits, little bit order) on a GPU.
A chain gives exactly the causal draft mask (kbench.kernels.inputs.xqa_draft_mask).

Which kernels take a tree, FlashInfer 0.7.4 (source lines of the installed package; `TREE_SKIPS`):
- xqa (trtllm-decode, trtllm-decode-ragged on SM90/SM120): `mask` is a general draft mask
  (xqa.py:287-292), but not under a sliding window (xqa.py:268-272: tree drafts unsupported there);
- fa2-prefill: plan(custom_mask=) (prefill.py:3610, packed by segment_packbits at prefill.py:3908-3917); the
  mask modes are one compiled prefill module (jit/attention/modules.py:2166-2172), but plan() packs the mask
  with FlashInfer's quantization module (quantization/packbits.py:28), so fa2's jit key marks a tree and the
  sweep compiles that module up front; xqa's module does not depend on the mask (xqa.py:407-417).
  kbench hands plan() the bool mask rather than packed_custom_mask: given a packed mask, plan() keeps the
  per-request offsets in bits (prefill.py:3902-3907) and the kernel adds them to a byte pointer
  (include/flashinfer/attention/variants.cuh:59), wrong for a batch of more than one request
  (flashinfer PR #2201, open);
- the others cannot: see TREE_SKIPS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from kbench.cases.dists import BatchLengths
from kbench.cases.trees import case_trees

# kernel -> why it cannot run a draft tree (every device; trtllm-decode's reasons depend on its backend)
TREE_SKIPS = {
    "decode-wrapper": ("tree: BatchDecodeWithPagedKVCacheWrapper takes no mask; it derives a causal block from "
                       "q_len_per_req and refuses any other is_causal (FlashInfer 0.7.4 decode.py:2442-2447)"),
    "fa3-prefill": ("tree: FA3 takes no custom mask (FlashInfer 0.7.4 utils.py:541-542; the SM90 paged kernel "
                    "returns cudaErrorNotSupported for MaskMode::kCustom, hopper/prefill_sm90.cuh:573-574)"),
    "trtllm-fmha-v2": ("tree: trtllm_fmha_v2_prefill's mask_mode is causal, sliding_window, chunked or padding; "
                       "no custom mask (FlashInfer 0.7.4 prefill.py:9523, 9599-9601)"),
    "trtllm-context": ("tree: trtllm_batch_context_with_kv_cache takes causal and windows only, no mask argument "
                       "(FlashInfer 0.7.4 prefill.py:8577-8612)"),
}
TRTLLM_GEN_TREE = ("tree: trtllm-gen masks causally and ignores `mask` (FlashInfer 0.7.4 decode.py:4836 hands it "
                   "to xqa only; the trtllm-gen call, decode.py:5290-5334, has no mask); its tree mask, FlashInfer "
                   "PR #3585, was closed unmerged")
XQA_TREE_WINDOW = ("tree with a sliding window: xqa applies the window assuming consecutive draft positions; "
                   "tree drafts are unsupported there (FlashInfer 0.7.4 xqa.py:268-272)")


def tree_reason(case, kernel: str) -> str | None:
    """Why `kernel` cannot run this case's draft tree, or None (a chain, or a kernel that takes a tree)."""
    if case.tree == "chain":
        return None
    return TREE_SKIPS.get(kernel)


# ---- the per-step masks ---------------------------------------------------------------------------------
def parents_tensor(trees: Sequence[Sequence[int]], width: int, device="cpu") -> torch.Tensor:
    """long [bs, width]: each request's parents; the root and padding tokens (beyond a request's own tokens)
    are their own parent, so they see themselves only."""
    out = torch.arange(width).repeat(len(trees), 1)
    for r, p in enumerate(trees):
        t = torch.tensor(p, dtype=torch.int64)
        out[r, : len(p)] = torch.where(t < 0, torch.arange(len(p)), t)
    return out.to(device)


def visibility(parents: torch.Tensor) -> torch.Tensor:
    """bool [bs, n, n] from parents [bs, n] (root: its own index): row i sees j when j is i or an ancestor.

    Pointer doubling: with R holding every ancestor up to d levels up and A the d-th ancestor, R[i] | R[A[i]]
    holds those up to 2d and A[A[i]] is the 2d-th; ceil(log2(n - 1)) rounds of row gathers cover a chain."""
    bs, n = parents.shape
    reach = torch.zeros(bs, n, n, dtype=torch.bool, device=parents.device)
    reach.scatter_(2, parents.unsqueeze(2), True)
    reach.diagonal(dim1=1, dim2=2).fill_(True)
    up = parents
    for _ in range(math.ceil(math.log2(n - 1)) if n > 2 else 0):
        reach |= torch.gather(reach, 1, up.unsqueeze(2).expand(bs, n, n))
        up = torch.gather(up, 1, up)
    return reach


def xqa_mask(vis: torch.Tensor, q_lens: Sequence[int] | None = None) -> torch.Tensor:
    """xqa's mask from visibility [bs, n, n]: uint16 [bs, n, words*2]; with ragged q_lens, the rows of each
    request's own tokens packed by the q offsets: [total_q, words*2]."""
    bs, n, _ = vis.shape
    words = (n + 31) // 32
    bits = torch.zeros(bs, n, words * 32, dtype=torch.int64, device=vis.device)
    bits[:, :, :n] = vis
    weights = torch.tensor([1 << b for b in range(32)], dtype=torch.int64, device=vis.device)
    packed = (bits.view(bs, n, words, 32) * weights).sum(-1)  # [bs, n, words], < 2**32
    halves = torch.stack([packed & 0xFFFF, packed >> 16], dim=-1).reshape(bs, n, words * 2)  # low half first
    # uint16 through int16 (same bits): casts into uint16 are not there on every torch build
    out = (halves - (halves >= 1 << 15).to(torch.int64) * (1 << 16)).to(torch.int16)
    if q_lens is None or len(set(q_lens)) <= 1 and q_lens[0] == n:
        return out.view(torch.uint16)
    # the rows are picked in int16: CUDA has no indexing for uint16 ("index_cuda" not implemented, torch 2.11)
    rows = torch.cat([r * n + torch.arange(q) for r, q in enumerate(q_lens)]).to(vis.device)
    return out.reshape(bs * n, words * 2)[rows].contiguous().view(torch.uint16)


def fa2_mask(vis: torch.Tensor, q_lens: Sequence[int], kv_lens: Sequence[int]) -> torch.Tensor:
    """FA2's custom mask: bool, sum(q_r * kv_r): request r's [q_r, kv_r] block, row-major, prefix columns all
    true and the last q_r columns its draft visibility; the requests concatenated."""
    bs = vis.shape[0]
    if len(set(q_lens)) == 1 and len(set(kv_lens)) == 1:
        q, kv = q_lens[0], kv_lens[0]
        m = torch.ones(bs, q, kv, dtype=torch.bool, device=vis.device)
        m[:, :, kv - q:] = vis[:, :q, :q]
        return m.view(-1)
    blocks = []
    for r, (q, kv) in enumerate(zip(q_lens, kv_lens)):
        m = torch.ones(q, kv, dtype=torch.bool, device=vis.device)
        m[:, kv - q:] = vis[r, :q, :q]
        blocks.append(m.view(-1))
    return torch.cat(blocks)


def pack_fa2(mask: torch.Tensor, q_lens: Sequence[int], kv_lens: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack FA2's mask as plan(custom_mask=) does: each request's segment on its own bytes, little bit order
    (flashinfer.segment_packbits on a GPU, numpy on a CPU). Returns (uint8 bytes, int32 byte offsets)."""
    sizes = torch.tensor([q * kv for q, kv in zip(q_lens, kv_lens)], dtype=torch.int64)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(sizes, 0)]).to(torch.int32)
    if mask.is_cuda:
        from flashinfer import segment_packbits

        return segment_packbits(mask, indptr.to(mask.device), bitorder="little")
    import numpy as np

    flat = mask.numpy()
    starts = indptr.tolist()
    parts = [np.packbits(flat[a:b], bitorder="little") for a, b in zip(starts, starts[1:])]
    offsets = torch.tensor([0] + [len(p) for p in parts], dtype=torch.int64).cumsum(0).to(torch.int32)
    return torch.from_numpy(np.concatenate(parts)), offsets


@dataclass
class StepMasks:
    """One verify step's masks for a batch of trees (None: a mask the step was not asked for)."""

    xqa: torch.Tensor | None  # uint16 [bs, max_q, w] (padding sees itself) or [total_q, w] with ragged q
    fa2: torch.Tensor | None  # bool [sum q_r * kv_r], what plan(custom_mask=) takes
    fa2_packed: tuple[torch.Tensor, torch.Tensor] | None = None  # (bytes, byte offsets), what plan() packs it to


def step_masks(parents: torch.Tensor, q_lens: Sequence[int], kv_lens: Sequence[int], ragged: bool = False,
               xqa: bool = True, fa2: bool = True, pack: bool = False) -> StepMasks:
    """What an engine builds every verify step from the parent lists on its device: xqa's mask, FA2's mask
    and (pack) FA2's mask packed as plan() packs it. tests/gpu/tree_check.py times it per kernel family."""
    vis = visibility(parents)
    block = fa2_mask(vis, q_lens, kv_lens) if fa2 or pack else None
    return StepMasks(xqa_mask(vis, q_lens if ragged else None) if xqa else None, block,
                     pack_fa2(block, q_lens, kv_lens) if pack else None)


# ---- what build_inputs keeps for a tree case ------------------------------------------------------------
@dataclass
class TreeInputs:
    parents: tuple[tuple[int, ...], ...]  # each request's parents (kbench.cases.trees.BatchTrees.parents)
    xqa_padded: torch.Tensor  # uint16 [bs, max_q, w]: every request padded to max_q (padding sees itself)
    xqa_ragged: torch.Tensor | None  # uint16 [total_q, w] when q is ragged
    fa2: torch.Tensor  # bool [sum q_r * kv_r] over the real (unpadded) batch


def tree_inputs(case, lengths: BatchLengths, device, seed: int = 0) -> TreeInputs | None:
    """The masks of a tree case on `device` (None for a chain: the causal masks serve it)."""
    if case.tree == "chain":
        return None
    trees = case_trees(case, seed).parents
    vis = visibility(parents_tensor(trees, lengths.max_q, device))
    return TreeInputs(
        parents=trees, xqa_padded=xqa_mask(vis),
        xqa_ragged=None if lengths.uniform_q else xqa_mask(vis, lengths.q),
        fa2=fa2_mask(vis, lengths.q, lengths.kv),
    )


def tree_block(trees: Sequence[Sequence[int]], q_len: int, kv_len: int, device=None) -> torch.Tensor:
    """bool [n, 1, q, kv] for requests with q_len tokens and kv_len KV each: the prefix and each token's
    ancestors and itself (the reference ANDs it with its causal/window mask)."""
    vis = visibility(parents_tensor(trees, q_len, device))
    m = torch.ones(len(trees), 1, q_len, kv_len, dtype=torch.bool, device=device)
    m[:, 0, :, kv_len - q_len:] = vis
    return m
