"""TRT-LLM decode: trtllm-gen on SM100/103, xqa on SM90/SM120 (backend="auto").

Two ways to run a batch whose requests bring different numbers of query tokens, each its own kernel
name so the report can compare them:
- trtllm-decode: one q_len per request (q_len_per_req); a ragged batch is padded to its longest request,
  as a CUDA-graph engine does, and only the real rows are checked;
- trtllm-decode-ragged: variable-length q; xqa takes q_cu_seq_lens with the mask rows packed by the
  same offsets (flashinfer.decode.xqa_batch_decode_with_kv_cache, SM90/SM120), trtllm-gen takes
  max_q_len + cum_seq_lens_q (trtllm_batch_decode_with_kv_cache, SM100/103).
Both pass window_left, sinks and max_seq_len (with a page table as wide as max_seq_len) as SGLang does.
"""
from __future__ import annotations

import torch

from kbench.kernels.base import Kernel, KernelFn, needs_cuda, realistic_reason
from kbench.kernels.inputs import Inputs

TRTLLM_GEN_SMS = (100, 103)
XQA_SMS = (90, 120, 121)


class TrtllmDecode(Kernel):
    path = "decode"
    kv_dtypes = ("bf16", "fp16", "fp8")

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
        return "trtllm-gen" if device.sm in TRTLLM_GEN_SMS else "xqa"

    def supports(self, device, case):
        reason = needs_cuda(device, only_sm=TRTLLM_GEN_SMS + XQA_SMS)
        if reason is None and self.ragged and case.q_dist == "fixed":
            return "q_dist fixed: every request has q_len tokens, trtllm-decode runs this batch"
        if reason is None and self.backend(device) == "xqa":
            # FlashInfer 0.7.2.post1 hands skip_softmax_threshold_scale_factor to trtllm-gen only; xqa drops it
            reason = realistic_reason(case, skip_softmax="skip-softmax: xqa does not take it (FlashInfer "
                                      "0.7.2.post1 passes skip_softmax_threshold_scale_factor to trtllm-gen only)")
        return reason

    def jit_key(self, case):
        # xqa compiles one module per (q_len, group, page, dtype, window?, ragged?) variant
        return (case.q_len, case.group, case.page_size, case.dtype, case.kv_dtype, case.head_dim, case.kv_layout,
                case.window_left >= 0, self.ragged)

    def checked_output(self, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return out if self.ragged else inputs.padded.unpad(out)

    def prepare(self, inputs: Inputs) -> KernelFn:
        ws = self._workspace(inputs.device)
        xqa = self.backend(_device_of(inputs)) == "xqa"
        if self.ragged:
            return _ragged(inputs, ws, xqa)
        return _padded(inputs, ws, xqa)


def _padded(inputs: Inputs, ws: torch.Tensor, xqa: bool) -> KernelFn:
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache

    c, pb = inputs.case, inputs.padded
    out = torch.full_like(inputs.q_padded(), float("nan"))
    # xqa needs the draft mask when q > 1; trtllm-gen masks causally by itself and ignores it
    mask = pb.draft_mask if xqa else None

    def run(i: int) -> torch.Tensor:
        return trtllm_batch_decode_with_kv_cache(
            query=inputs.q_padded(i), kv_cache=inputs.copies[i].kv_cache, workspace_buffer=ws,
            block_tables=pb.block_tables, seq_lens=pb.seq_lens, max_seq_len=pb.max_seq_len,
            bmm1_scale=inputs.sm_scale, bmm2_scale=1.0, window_left=c.window_left, sinks=inputs.sinks,
            out=out, kv_layout=c.kv_layout, backend="auto", q_len_per_req=pb.q_len, mask=mask, **_skip(c, xqa),
        )

    return run


def _ragged(inputs: Inputs, ws: torch.Tensor, xqa: bool) -> KernelFn:
    c = inputs.case
    out = torch.full_like(inputs.q, float("nan"))
    common = dict(workspace_buffer=ws, block_tables=inputs.block_tables, seq_lens=inputs.seq_lens,
                  max_seq_len=inputs.max_seq_len, bmm1_scale=inputs.sm_scale, bmm2_scale=1.0,
                  window_left=c.window_left, sinks=inputs.sinks, out=out, kv_layout=c.kv_layout)
    if xqa:
        from flashinfer.decode import xqa_batch_decode_with_kv_cache

        if inputs.max_q > 1:
            mask = inputs.draft_mask.reshape(-1, inputs.draft_mask.shape[-1])  # [total_q, words]
            ragged = dict(q_len_per_req=inputs.max_q, mask=mask, q_cu_seq_lens=inputs.qo_indptr)
        else:  # every request has one token: plain decode (q_cu_seq_lens needs a max draft length > 1)
            ragged = dict(q_len_per_req=1)

        def run(i: int) -> torch.Tensor:
            cp = inputs.copies[i]
            return xqa_batch_decode_with_kv_cache(query=cp.q, kv_cache=cp.kv_cache, **common, **ragged)

        return run

    from flashinfer.decode import trtllm_batch_decode_with_kv_cache

    def run_gen(i: int) -> torch.Tensor:
        cp = inputs.copies[i]
        return trtllm_batch_decode_with_kv_cache(
            query=cp.q, kv_cache=cp.kv_cache, **common, backend="trtllm-gen", q_len_per_req=None,
            max_q_len=inputs.max_q, cum_seq_lens_q=inputs.qo_indptr, **_skip(c, False),
        )

    return run_gen


def _skip(case, xqa: bool) -> dict:
    """skip_softmax_threshold_scale_factor for trtllm-gen (supports() keeps such cases off xqa)."""
    return {} if xqa or case.skip_softmax == "off" else {"skip_softmax_threshold_scale_factor": float(case.skip_softmax)}


def _device_of(inputs: Inputs):
    from kbench.kernels.device import probe_device

    dev = inputs.extra.get("device_info")
    if dev is None:
        dev = inputs.extra["device_info"] = probe_device(inputs.device.index or 0, with_flashinfer=False)
    return dev
