"""TRT-LLM fmha-v2 context kernel with a paged KV cache: the TRT-LLM context kernel that runs on Hopper.

Ragged q natively (cum_seq_lens_q); window_left (mask_mode sliding_window) and sinks passed through."""
from __future__ import annotations

import torch

from kbench.kernels.base import Kernel, KernelFn, needs_cuda
from kbench.kernels.inputs import Inputs

FMHA_V2_SMS = (90, 120, 121)


class TrtllmFmhaV2(Kernel):
    name = "trtllm-fmha-v2"
    path = "context"
    description = "flashinfer.prefill.trtllm_fmha_v2_prefill(Q_PAGED_KV_*, mask_mode=causal), JIT from source"

    def supports(self, device, case):
        return needs_cuda(device, only_sm=FMHA_V2_SMS)

    def prepare(self, inputs: Inputs) -> KernelFn:
        from flashinfer.prefill import trtllm_fmha_v2_prefill

        c = inputs.case
        ws = self._workspace(inputs.device)
        out = torch.full_like(inputs.q, float("nan"))
        layout = f"Q_PAGED_KV_{c.kv_layout}"
        # fmha-v2 reads window_left only in its sliding_window mask mode (causal within the window)
        mask_mode = "sliding_window" if c.window_left >= 0 else "causal"

        def run(i: int) -> torch.Tensor:
            cp = inputs.copies[i]
            return trtllm_fmha_v2_prefill(
                (cp.q, cp.kv_cache), layout, ws, inputs.seq_lens, inputs.max_q, inputs.max_kv, inputs.sm_scale,
                1.0, c.batch_size, inputs.qo_indptr, inputs.cum_seq_lens_kv, block_tables=inputs.block_tables,
                out=out, mask_mode=mask_mode, window_left=c.window_left, sinks=inputs.sinks,
                skip_softmax_threshold_scale_factor=0.0 if c.skip_softmax == "off" else float(c.skip_softmax),
            )

        return run
