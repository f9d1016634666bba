"""TRT-LLM decode with q_len_per_req: trtllm-gen on SM100/103, xqa on SM90/SM120 (backend="auto")."""
from __future__ import annotations

import torch

from kbench.kernels.base import Kernel, KernelFn, needs_cuda
from kbench.kernels.inputs import Inputs

TRTLLM_GEN_SMS = (100, 103)
XQA_SMS = (90, 120, 121)


class TrtllmDecode(Kernel):
    name = "trtllm-decode"
    path = "decode"
    description = "flashinfer.decode.trtllm_batch_decode_with_kv_cache(q_len_per_req=q), backend auto"
    kv_dtypes = ("bf16", "fp16", "fp8")

    def backend(self, device) -> str:
        return "trtllm-gen" if device.sm in TRTLLM_GEN_SMS else "xqa"

    def supports(self, device, case):
        return needs_cuda(device, only_sm=TRTLLM_GEN_SMS + XQA_SMS)

    def jit_key(self, case):
        # xqa compiles one module per (q_len, group, page, dtype) variant
        return (case.q_len, case.group, case.page_size, case.dtype, case.kv_dtype, case.head_dim, case.kv_layout)

    def prepare(self, inputs: Inputs) -> KernelFn:
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache

        c = inputs.case
        ws = self._workspace(inputs.device)
        out = torch.full_like(inputs.q, float("nan"))
        dev = _device_of(inputs)
        # xqa needs the draft mask when q > 1; trtllm-gen masks causally by itself and ignores it
        mask = inputs.draft_mask if self.backend(dev) == "xqa" else None

        def run(i: int) -> torch.Tensor:
            cp = inputs.copies[i]
            return trtllm_batch_decode_with_kv_cache(
                query=cp.q, kv_cache=cp.kv_cache, workspace_buffer=ws, block_tables=inputs.block_tables,
                seq_lens=inputs.seq_lens, max_seq_len=c.kv_len, bmm1_scale=inputs.sm_scale, bmm2_scale=1.0,
                out=out, kv_layout=c.kv_layout, backend="auto", q_len_per_req=c.q_len, mask=mask,
            )

        return run


def _device_of(inputs: Inputs):
    from kbench.kernels.device import probe_device

    dev = inputs.extra.get("device_info")
    if dev is None:
        dev = inputs.extra["device_info"] = probe_device(inputs.device.index or 0, with_flashinfer=False)
    return dev
