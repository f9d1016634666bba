"""TRT-LLM fmha-v2 context kernel with a paged KV cache: the TRT-LLM context kernel that runs on Hopper.

Ragged q natively (cum_seq_lens_q); window_left (mask_mode sliding_window) and sinks passed through. One dtype
for Q, K and V: fp8 KV runs with an fp8 query (q_dtype fp8; e4m3 on SM90 only in FlashInfer 0.7.2.post1), the
output in the case's dtype."""
from __future__ import annotations

from kbench.kernels.base import Kernel, KernelFn, fi_dtypes, fp8_kv_reason, needs_cuda
from kbench.kernels.inputs import Inputs
from kbench.kernels.tree_masks import tree_reason

FMHA_V2_SMS = (90, 120, 121)


class TrtllmFmhaV2(Kernel):
    name = "trtllm-fmha-v2"
    path = "context"
    description = "flashinfer.prefill.trtllm_fmha_v2_prefill(Q_PAGED_KV_*, mask_mode=causal), JIT from source"
    kv_dtypes = ("bf16", "fp16", "fp8")

    def supports(self, device, case):
        reason = tree_reason(case, self.name) or needs_cuda(device, only_sm=FMHA_V2_SMS) or fp8_kv_reason(case, self.name)
        if reason is None and case.q_dtype == "fp8" and device.sm != 90:
            reason = f"q_dtype fp8: FlashInfer 0.7.2.post1's fmha-v2 takes e4m3 on SM90 only (this GPU is SM{device.sm})"
        return reason

    def jit_key(self, case):
        return (*super().jit_key(case), case.q_dtype)

    def jit_specs(self, device, case):
        import torch
        from flashinfer.jit.attention import gen_fmha_v2_module

        # prefill.py trtllm_fmha_v2_prefill: one module per (layout, query dtype), the output dtype named for e4m3
        qd, _, dt = fi_dtypes(case)
        return [gen_fmha_v2_module(f"Q_PAGED_KV_{case.kv_layout}", qd, dt if qd == torch.float8_e4m3fn else None)]

    def prepare(self, inputs: Inputs) -> KernelFn:
        from flashinfer.prefill import trtllm_fmha_v2_prefill

        c = inputs.case
        launch = self.launch(inputs)
        layout = f"Q_PAGED_KV_{c.kv_layout}"
        # fmha-v2 reads window_left only in its sliding_window mask mode (causal within the window)
        mask_mode = "sliding_window" if c.window_left >= 0 else "causal"
        return launch.run(lambda q, kv: trtllm_fmha_v2_prefill(
            (q, kv), layout, launch.ws, inputs.seq_lens, inputs.max_q, inputs.max_kv, inputs.sm_scale,
            1.0, c.batch_size, inputs.qo_indptr, inputs.cum_seq_lens_kv, block_tables=inputs.block_tables,
            out=launch.out, mask_mode=mask_mode, window_left=c.window_left, sinks=inputs.sinks,
            skip_softmax_threshold_scale_factor=0.0 if c.skip_softmax == "off" else float(c.skip_softmax),
        ))
