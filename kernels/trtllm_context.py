"""TRT-LLM context (prefill) kernel on a paged KV cache: Blackwell datacenter parts only.

Ragged q natively (cum_seq_lens_q); takes window_left, sinks and max_kv_len = max_seq_len as SGLang passes them,
and an fp8 query with fp8 KV (FlashInfer 0.7.2.post1: out in bf16/fp16 beside an e4m3 query)."""
from __future__ import annotations

import os
from pathlib import Path

from kbench.kernels.base import Kernel, KernelFn, fp8_kv_reason, needs_cuda, trtllm_gen_specs
from kbench.kernels.inputs import Inputs
from kbench.kernels.tree_masks import tree_reason

CONTEXT_SMS = (100, 103, 107)


def cubin_problem() -> str | None:
    """Why the cubins this kernel downloads at first use are not to be had, or None.

    Offline, FlashInfer sleeps about 70 s in retries before failing, so kbench refuses up front."""
    env_dir = os.environ.get("FLASHINFER_CUBIN_DIR")
    if env_dir:
        p = Path(env_dir)
        if not p.is_dir() or not any(p.rglob("*.cubin")):
            return f"FLASHINFER_CUBIN_DIR={env_dir} holds no cubins: point it at a pre-fetched cubin folder"
        return None
    if os.environ.get("FLASHINFER_NO_DOWNLOAD", "") not in ("", "0"):
        try:
            from flashinfer.jit.env import FLASHINFER_CUBIN_DIR as default_dir
        except Exception:
            default_dir = Path.home() / ".cache" / "flashinfer" / "cubins"
        if not Path(default_dir).is_dir() or not any(Path(default_dir).rglob("*.cubin")):
            return ("cubins are not on disk and FLASHINFER_NO_DOWNLOAD=1: set FLASHINFER_CUBIN_DIR "
                    "to a pre-fetched cubin folder")
    return None


class TrtllmContext(Kernel):
    name = "trtllm-context"
    path = "context"
    description = "flashinfer.prefill.trtllm_batch_context_with_kv_cache (trtllm-gen cubins)"
    kv_dtypes = ("bf16", "fp16", "fp8")

    def supports(self, device, case):
        # On SM90 it can never run ("Unsupported architecture"): never attempted there.
        reason = tree_reason(case, self.name) or needs_cuda(device, only_sm=CONTEXT_SMS)
        return reason or fp8_kv_reason(case, self.name) or cubin_problem()

    def jit_specs(self, device, case):
        return trtllm_gen_specs()

    def prepare(self, inputs: Inputs) -> KernelFn:
        from flashinfer.prefill import trtllm_batch_context_with_kv_cache

        c = inputs.case
        launch = self.launch(inputs)
        skip = {} if c.skip_softmax == "off" else {"skip_softmax_threshold_scale_factor": float(c.skip_softmax)}
        # an fp8 query (q_dtype fp8) goes in as it is; the output stays in the case's dtype (launch.out)
        return launch.run(lambda q, kv: trtllm_batch_context_with_kv_cache(
            query=q, kv_cache=kv, workspace_buffer=launch.ws, block_tables=inputs.block_tables,
            seq_lens=inputs.seq_lens, max_q_len=inputs.max_q, max_kv_len=inputs.max_seq_len,
            bmm1_scale=inputs.sm_scale, bmm2_scale=1.0, batch_size=c.batch_size,
            cum_seq_lens_q=inputs.qo_indptr, cum_seq_lens_kv=inputs.cum_seq_lens_kv, window_left=c.window_left,
            sinks=inputs.sinks, out=launch.out, kv_layout=c.kv_layout, **skip,
        ))
