"""SGLang 0.5.23's fa3 target verify of a draft tree (topk > 1): cascade attention, as
layers/attention/flashattention_backend.py computes it (lines cited below, sglang 0.5.23 wheel).

FA3 takes no mask, so for topk > 1 the backend splits the verify (use_cascade_attn, 1586-1593):
1. prefix: every draft token of a request against the request's committed prefix, not causal, LSE returned
   (flash_attn_with_kvcache at 1788-1806: page_table, cache_seqlens = the prefix lengths, cu_seqlens_q by
   num_draft_tokens, cu_seqlens_k_new, max_seqlen_q = num_draft_tokens, causal=False, return_softmax_lse);
2. expand: each draft token as a request of its own (cu_seqlens_q = arange, max_seqlen_q 1) against the draft
   tokens it sees, itself and its ancestors, read through a page table of token slots over a page-1 view of the
   pool (1838-1864), not causal, LSE returned;
3. the two merged by their LSEs (merge_state_v2, 1865-1870).
The expand metadata comes from the spec's custom mask every step, on the GPU (the CUDA-graph replay,
3193-3265; eager 1082-1172): the draft block's mask rows gathered, the visible columns sorted first, their token
slots gathered, cache_seqlens = the row's visible count. `expand_metadata` is that code on kbench's tensors.

Run on vLLM 0.33.0's FA3 library with SGLang's call (kernels/vllm_fa3.py, as `sglang-fa3`), and the merge on
FlashInfer's merge_state: the same arithmetic as sgl-kernel's merge_state_v2 (vLLM's merge_attn_states), which
takes natural-log LSEs where FlashInfer's takes base 2, so each LSE is scaled by log2(e) in the transposing copy
SGLang makes anyway (`.T.contiguous()`): one kernel each, as in SGLang.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

from kbench.kernels.routes.base import Route

if TYPE_CHECKING:
    from kbench.kernels.inputs import Inputs

LOG2E = 1.0 / math.log(2.0)


def req_to_token(inputs: "Inputs"):
    """[bs, width * page] int32: each request's token slots (SGLang's req_to_token; kbench's page table at page 1)."""
    import torch

    got = inputs.extra.get("route_req_to_token")
    if got is None:
        p, bt = inputs.case.page_size, inputs.block_tables
        got = bt if p == 1 else (bt.long()[:, :, None] * p + torch.arange(p, device=bt.device)).reshape(
            bt.shape[0], -1).to(torch.int32)
        inputs.extra["route_req_to_token"] = got
    return got


def expand_metadata(custom_mask, seq_lens, req_to_token, req_pool_indices, num_draft: int, out=None):
    """The expand call's (page_table, cache_seqlens, cu_seqlens_k) from the spec's custom mask (flashattention_
    backend.py:3212-3265): seq_lens are the committed prefixes (without the drafts); custom_mask is each request's
    [num_draft, prefix + num_draft] block, flattened and concatenated (kbench's fa2 mask). out: the CUDA graph's
    buffers, written in place as SGLang's replay writes them."""
    import torch

    device = seq_lens.device
    offsets = torch.arange(num_draft, device=device).unsqueeze(0)
    cols = offsets.expand(seq_lens.numel(), -1) + seq_lens.unsqueeze(1)
    cum_len = torch.nn.functional.pad(
        torch.cumsum((seq_lens + num_draft).repeat_interleave(num_draft), dim=0), (1, 0))[:-1]
    mask_extraction_indices = (cols.repeat_interleave(num_draft, dim=0) + cum_len[:, None]).view(1, -1)
    mask = custom_mask[mask_extraction_indices].view(-1, num_draft)  # (bs * num_draft, num_draft)
    col_indices = offsets.expand(mask.shape[0], num_draft)
    keys = torch.where(mask, col_indices, col_indices + num_draft)
    _, sort_order = torch.sort(keys, dim=1)
    non_masked_page_table = req_to_token[req_pool_indices, :].gather(1, cols).repeat_interleave(num_draft, dim=0)
    if out is None:
        n = mask.shape[0]
        out = (torch.empty((n, num_draft), dtype=torch.int32, device=device),
               torch.empty(n, dtype=torch.int32, device=device), torch.zeros(n + 1, dtype=torch.int32, device=device))
    table, lens, cu_k = out
    table.copy_(non_masked_page_table.gather(1, sort_order))
    lens.copy_(mask.sum(dim=1))
    cu_k[1:].copy_(torch.cumsum(lens, dim=0, dtype=torch.int32))
    return out


class CascadeMetadata:
    """The two calls' metadata of one verify step, in fixed buffers (SGLang's target_verify_metadata_topk_normal
    and _topk_expand of a captured batch size), and `refresh()`: one replay's host work (3193-3265)."""

    def __init__(self, inputs: "Inputs"):
        import torch

        from kbench.kernels.routes.base import chain_or_tree_mask

        c, dev, w = inputs.case, inputs.device, inputs.max_q
        self.num_draft = w
        self.seq_lens = inputs.seq_lens - w  # the committed prefixes: SGLang's seq_lens in verify
        self.req_pool_indices = torch.arange(c.batch_size, device=dev)
        self.req_to_token = req_to_token(inputs)
        self.custom_mask = inputs.extra.get("route_fa2_mask")
        if self.custom_mask is None:
            self.custom_mask = inputs.extra["route_fa2_mask"] = chain_or_tree_mask(inputs)
        bs = c.batch_size
        self.cu_q = torch.arange(0, bs * w + 1, w, dtype=torch.int32, device=dev)
        self.cache_seqlens = torch.empty(bs, dtype=torch.int32, device=dev)
        self.cu_k = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
        self.page_table = torch.empty_like(inputs.block_tables)
        self.block_tables = inputs.block_tables
        self.cu_q_expand = torch.arange(0, bs * w + 1, dtype=torch.int32, device=dev)
        self.expand = (torch.empty((bs * w, w), dtype=torch.int32, device=dev),
                       torch.empty(bs * w, dtype=torch.int32, device=dev),
                       torch.zeros(bs * w + 1, dtype=torch.int32, device=dev))
        self.refresh()

    def refresh(self) -> None:
        """The prefix half: lengths, their offsets, the page table (SGLang: one Triton kernel from req_to_token,
        here one gather); the expand half from the mask."""
        self.cache_seqlens.copy_(self.seq_lens)
        self.cu_k[1:].copy_(self.cache_seqlens.cumsum(0, dtype=self.cu_k.dtype))
        self.page_table.copy_(self.block_tables[self.req_pool_indices])
        expand_metadata(self.custom_mask, self.seq_lens, self.req_to_token, self.req_pool_indices, self.num_draft,
                        out=self.expand)


# attend(q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, out) ->
# (out [tokens, Hq, d], lse [Hq, tokens] natural log): FA3's flash_attn_with_kvcache, causal=False
Attend = Callable[..., tuple]
# merge(o_a, lse_a, o_b, lse_b) -> merged output, LSEs as FA3 returns them ([Hq, tokens], natural log)
Merge = Callable[..., object]


def cascade(inputs: "Inputs", meta: CascadeMetadata, attend: Attend, merge: Merge, out) -> Callable[[int], object]:
    """run(i) on input copy i: prefix call, expand call, merge (flashattention_backend.py:1788-1870)."""
    import torch

    from kbench.kernels.routes.base import sglang_kv_pool

    c, w = inputs.case, meta.num_draft
    pools = []
    for i in range(len(inputs.copies)):
        k, v = sglang_kv_pool(inputs, i)  # [slots, 1, Hkv, d]
        pages = (k.view(-1, c.page_size, c.num_kv_heads, c.head_dim), v.view(-1, c.page_size, c.num_kv_heads,
                                                                              c.head_dim)) if c.page_size > 1 else (k, v)
        pools.append((pages, (k, v)))
    expand_out = torch.empty_like(out)
    table, lens, cu_k = meta.expand

    def run(i: int):
        q = inputs.copies[i].q
        (kp, vp), (kt, vt) = pools[i]
        o, lse = attend(q, kp, vp, meta.page_table, meta.cache_seqlens, meta.cu_q, meta.cu_k, w, out)
        o_exp, lse_exp = attend(q, kt, vt, table, lens, meta.cu_q_expand, cu_k, 1, expand_out)
        return merge(o, lse, o_exp, lse_exp)

    return run


def fa3_attend(scale: float) -> Attend:
    """SGLang's flash_attn_with_kvcache on vLLM's FA3 (the argument order of `vllm-fa3-sgl-call`), causal=False."""
    from kbench.kernels.vllm_fa3 import load_fa3

    ops = load_fa3()[0]

    def attend(q, k, v, table, seqlens, cu_q, cu_k, max_q, out):
        res = ops.fwd(q, k, v, None, None, None, out, cu_q, None, cu_k, None, seqlens, max_q, None, table, None,
                      None, None, None, None, None, None, None, scale, False, -1, -1, 0.0, True, None, 0, None, 0,
                      None, 1, 0, None)
        return res[0], res[1]

    return attend


def flashinfer_merge(tokens: int, heads: int, device) -> Merge:
    """merge_state_v2 on FlashInfer's merge_state: each LSE transposed to [tokens, Hq] and scaled to base 2 in one
    copy kernel (SGLang's `.T.contiguous()`), then one merge kernel."""
    import flashinfer
    import torch

    s_a = torch.empty((tokens, heads), dtype=torch.float32, device=device)
    s_b = torch.empty_like(s_a)

    def merge(o_a, lse_a, o_b, lse_b):
        torch.mul(lse_a.T, LOG2E, out=s_a)
        torch.mul(lse_b.T, LOG2E, out=s_b)
        return flashinfer.merge_state(o_a, s_a, o_b, s_b)[0]

    return merge


class Fa3TreeRoute(Route):
    """`sglang-fa3-tree`: the cascade above as a route: host work = one replay's metadata (CascadeMetadata)."""

    path = "decode"
    steps = ("verify",)
    takes_trees = True
    kv_dtypes = ("bf16", "fp16")
    host_waits_for_gpu = False

    def __init__(self, name: str, engine: str, *, source: str, description: str, host_work: str):
        from kbench.kernels.vllm_fa3 import VllmFa3

        self.name, self.engine, self.source, self.description, self.host_work = (name, engine, source, description,
                                                                                  host_work)
        self._fa3 = VllmFa3("sglang")
        self.runs = self._fa3.name

    def supports(self, device, case):
        import dataclasses

        if case.attention not in self.attentions:
            return None
        reason = self._fa3.supports(device, dataclasses.replace(case, tree="chain"))  # the device, the library first
        if reason is None and case.tree == "chain":
            reason = ("chain: SGLang's fa3 verifies a chain (topk 1) in one call, no cascade "
                      "(flashattention_backend.py:1589-1593): sglang-fa3")
        return reason or self.uniform_q_reason(case)

    def backend(self, device) -> str:
        return f"{self.runs} + merge_state"

    def jit_key(self, case):
        return ("merge-state",)  # FlashInfer's cascade module: one for every case (FA3 is prebuilt)

    def jit_specs(self, device, case):
        from flashinfer.jit.cascade import gen_cascade_module

        return [gen_cascade_module()]

    def prepare(self, inputs: "Inputs"):
        launch = self.launch(inputs, workspace=False)
        self._meta = CascadeMetadata(inputs)
        c = inputs.case
        return cascade(inputs, self._meta, fa3_attend(inputs.sm_scale),
                       flashinfer_merge(inputs.q.shape[0], c.num_qo_heads, inputs.device), launch.out)

    def host_step(self, inputs: "Inputs"):
        return self._meta.refresh
