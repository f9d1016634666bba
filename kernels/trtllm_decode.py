"""TRT-LLM decode: trtllm-gen on SM100/103, xqa on SM90/SM120 (backend="auto").

Two ways to run a batch whose requests bring different numbers of query tokens, each its own kernel
name so the report can compare them:
- trtllm-decode: one q_len per request (q_len_per_req); a ragged batch is padded to its longest request,
  as a CUDA-graph engine does, and only the real rows are checked;
- trtllm-decode-ragged: variable-length q; xqa takes q_cu_seq_lens with the mask rows packed by the
  same offsets (flashinfer.decode.xqa_batch_decode_with_kv_cache, SM90/SM120), trtllm-gen takes
  max_q_len + cum_seq_lens_q (trtllm_batch_decode_with_kv_cache, SM100/103).
Both pass window_left, sinks and max_seq_len (with a page table as wide as max_seq_len) as SGLang does, and
trtllm-gen takes an fp8 query with fp8 KV (q_dtype fp8, as SGLang casts q for it); xqa takes bf16/fp16 queries only.
A draft tree (case.tree) goes to xqa as its mask (kbench.kernels.tree_masks); trtllm-gen ignores `mask`, so a tree
is skipped there, never run wrong.
"""
from __future__ import annotations

import torch

from kbench.kernels.base import Kernel, KernelFn, Launch, fi_dtypes, needs_cuda, realistic_reason, trtllm_gen_specs
from kbench.kernels.inputs import Inputs
from kbench.kernels.tree_masks import TRTLLM_GEN_TREE, XQA_TREE_WINDOW

TRTLLM_GEN_SMS = (100, 103)
XQA_SMS = (90, 120, 121)


class TrtllmDecode(Kernel):
    path = "decode"
    kv_dtypes = ("bf16", "fp16", "fp8")
    page_sizes = (16, 32, 64, 128)
    page_source = "FlashInfer 0.7.4: xqa's module, jit/xqa.py:82-85; trtllm-gen, decode.py:997"

    def __init__(self, ragged: bool = False):
        self.ragged = ragged
        self.name = "trtllm-decode-ragged" if ragged else "trtllm-decode"
        self.description = (
            "variable-length q: xqa q_cu_seq_lens (SM90/SM120) | trtllm-gen cum_seq_lens_q (SM100/103)"
            if ragged else
            "flashinfer.decode.trtllm_batch_decode_with_kv_cache(q_len_per_req=q), backend auto; "
            "ragged q padded to the longest request")

    def backend(self, device) -> str:
        if not device.cuda:  # what it picks where it runs (`kbench kernels` on a CPU says so)
            return "xqa on SM" + "/".join(map(str, XQA_SMS)) + ", trtllm-gen on SM" + "/".join(map(str, TRTLLM_GEN_SMS))
        return backend_for(device.sm)

    def supports(self, device, case):
        reason = needs_cuda(device, only_sm=TRTLLM_GEN_SMS + XQA_SMS)
        if reason is None and self.ragged and case.q_dist == "fixed":
            return "q_dist fixed: every request has q_len tokens, trtllm-decode runs this batch"
        if reason is None and case.tree != "chain":
            if self.backend(device) == "trtllm-gen":
                reason = TRTLLM_GEN_TREE
            elif case.window_left >= 0:
                reason = XQA_TREE_WINDOW
        if reason is None and self.backend(device) == "xqa":
            # FlashInfer 0.7.2.post1 hands skip_softmax_threshold_scale_factor to trtllm-gen only; xqa drops it
            reason = realistic_reason(case, skip_softmax="skip-softmax: xqa does not take it (FlashInfer "
                                      "0.7.2.post1 passes skip_softmax_threshold_scale_factor to trtllm-gen only)",
                                      q_fp8="q_dtype fp8: xqa takes a bf16/fp16 query only (FlashInfer 0.7.2.post1 "
                                      "builds no fp8-query xqa module; SGLang casts q to fp8 for trtllm-gen only)")
        return reason

    def jit_key(self, case):
        # xqa compiles one module per (q_len, group, page, dtype, window?, ragged?) variant; a ragged q pads to
        # (or packs up to) any longest draft of 1..q_len, a fixed one to q_len only (jit_specs)
        return (case.q_len, case.group, case.page_size, case.dtype, case.kv_dtype, case.head_dim, case.kv_layout,
                case.window_left >= 0, self.ragged, case.q_dtype, case.q_dist == "fixed")

    def jit_specs(self, device, case):
        if self.backend(device) != "xqa":
            return trtllm_gen_specs()
        from flashinfer.jit.xqa import gen_xqa_module, ragged_q_changes_build

        # xqa.py get_xqa_module: one module per (dtypes, page, head_dim, group, window?, q_seq_len), and for a
        # ragged q (q_cu_seq_lens) its own module only where ragged q changes the build (SWAP_AB on SM90)
        _, kv, dt = fi_dtypes(case)

        def xqa(q: int, ragged: bool):
            return gen_xqa_module(dt, kv, case.page_size, case.head_dim, case.group, case.window_left >= 0, dt, q,
                                  ragged and ragged_q_changes_build(q, case.group))

        if not self.ragged:  # q_len_per_req is the batch's longest draft: any of 1..q_len when q is ragged
            return [xqa(q, False) for q in ([case.q_len] if case.q_dist == "fixed" else range(1, case.q_len + 1))]
        # the batch's longest draft is any of 1..q_len (q_cu_seq_lens needs > 1; all 1 runs plain decode)
        return [xqa(1, False)] + [xqa(q, True) for q in range(2, case.q_len + 1)]

    def checked_output(self, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return out if self.ragged else inputs.padded.unpad(out)

    def prepare(self, inputs: Inputs) -> KernelFn:
        launch = self.launch(inputs, padded=not self.ragged)
        xqa = backend_for(_sm_of(inputs.device)) == "xqa"
        if self.ragged:
            return _ragged(inputs, launch, xqa)
        return _padded(inputs, launch, xqa)


def backend_for(sm: int) -> str:
    """What backend="auto" runs on a GPU of this SM version (FlashInfer: trtllm-gen on SM10x, else xqa)."""
    return "trtllm-gen" if sm in TRTLLM_GEN_SMS else "xqa"


def _sm_of(device: torch.device) -> int:
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def _padded(inputs: Inputs, launch: Launch, xqa: bool) -> KernelFn:
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache

    c, pb = inputs.case, inputs.padded
    # xqa needs the draft mask (causal, or a draft tree's) when q > 1; trtllm-gen masks causally by itself and
    # ignores it (supports() keeps trees off it)
    mask = pb.draft_mask if xqa else None
    return launch.run(lambda q, kv: trtllm_batch_decode_with_kv_cache(
        query=q, kv_cache=kv, workspace_buffer=launch.ws,
        block_tables=pb.block_tables, seq_lens=pb.seq_lens, max_seq_len=pb.max_seq_len,
        bmm1_scale=inputs.sm_scale, bmm2_scale=1.0, window_left=c.window_left, sinks=inputs.sinks,
        out=launch.out, kv_layout=c.kv_layout, backend="auto", q_len_per_req=pb.q_len, mask=mask, **_skip(c, xqa),
    ))


def _ragged(inputs: Inputs, launch: Launch, xqa: bool) -> KernelFn:
    c = inputs.case
    common = dict(workspace_buffer=launch.ws, block_tables=inputs.block_tables, seq_lens=inputs.seq_lens,
                  max_seq_len=inputs.max_seq_len, bmm1_scale=inputs.sm_scale, bmm2_scale=1.0,
                  window_left=c.window_left, sinks=inputs.sinks, out=launch.out, kv_layout=c.kv_layout)
    if xqa:
        from flashinfer.decode import xqa_batch_decode_with_kv_cache

        if inputs.max_q > 1:
            mask = inputs.draft_mask.reshape(-1, inputs.draft_mask.shape[-1])  # [total_q, words]
            ragged = dict(q_len_per_req=inputs.max_q, mask=mask, q_cu_seq_lens=inputs.qo_indptr)
        else:  # every request has one token: plain decode (q_cu_seq_lens needs a max draft length > 1)
            ragged = dict(q_len_per_req=1)

        return launch.run(lambda q, kv: xqa_batch_decode_with_kv_cache(query=q, kv_cache=kv, **common, **ragged))

    from flashinfer.decode import trtllm_batch_decode_with_kv_cache

    return launch.run(lambda q, kv: trtllm_batch_decode_with_kv_cache(
        query=q, kv_cache=kv, **common, backend="trtllm-gen", q_len_per_req=None,
        max_q_len=inputs.max_q, cum_seq_lens_q=inputs.qo_indptr, **_skip(c, False),
    ))


def _skip(case, xqa: bool) -> dict:
    """skip_softmax_threshold_scale_factor for trtllm-gen (supports() keeps such cases off xqa)."""
    return {} if xqa or case.skip_softmax == "off" else {"skip_softmax_threshold_scale_factor": float(case.skip_softmax)}
