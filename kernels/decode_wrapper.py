"""FlashInfer's tensor-core decode wrapper with q_len_per_req (q > 1 runs FA2 with a bottom-right mask)."""
from __future__ import annotations

import torch

from kbench.kernels.base import Kernel, KernelFn, needs_cuda
from kbench.kernels.inputs import Inputs, torch_dtype


class DecodeWrapper(Kernel):
    name = "decode-wrapper"
    path = "decode"
    description = "BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True), plan(q_len_per_req=q)"
    kv_dtypes = ("bf16", "fp16", "fp8")

    def supports(self, device, case):
        return needs_cuda(device, min_sm=80)

    def jit_key(self, case):
        return (case.dtype, case.kv_dtype, case.head_dim)

    def prepare(self, inputs: Inputs) -> KernelFn:
        import flashinfer

        c = inputs.case
        ws = self._workspace(inputs.device)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, c.kv_layout, use_tensor_cores=True)
        w.plan(
            inputs.host("kv_indptr"), inputs.host("kv_indices"), inputs.host("last_page_len"),
            c.num_qo_heads, c.num_kv_heads, c.head_dim, c.page_size,
            sm_scale=inputs.sm_scale, q_data_type=torch_dtype(c.dtype), kv_data_type=torch_dtype(c.kv_dtype),
            o_data_type=torch_dtype(c.dtype), q_len_per_req=c.q_len,
        )
        out = torch.full_like(inputs.q, float("nan"))

        def run(i: int) -> torch.Tensor:
            cp = inputs.copies[i]
            return w.run(cp.q, cp.kv_cache, out=out)

        return run
