"""FlashInfer's tensor-core decode wrapper with q_len_per_req (q > 1 runs FA2 with a bottom-right mask).

One q_len per request: a ragged batch is padded to its longest request (kbench.kernels.inputs.PaddedBatch)."""
from __future__ import annotations

from kbench.kernels.base import Q_FP8_ONLY_TRTLLM, Kernel, KernelFn, fa2_batch_prefill_spec, needs_cuda, realistic_reason
from kbench.kernels.inputs import Inputs, torch_dtype
from kbench.kernels.tree_masks import tree_reason


class DecodeWrapper(Kernel):
    name = "decode-wrapper"
    path = "decode"
    description = "BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True), plan(q_len_per_req=q)"
    kv_dtypes = ("bf16", "fp16", "fp8")

    def supports(self, device, case):
        # FlashInfer 0.7.2.post1: the tensor-core route (fa2 below SM100) passes run(sinks=) and skip-softmax to
        # a module that drops them; only its cudnn/trtllm-gen routes apply them
        return tree_reason(case, self.name) or needs_cuda(device, min_sm=80) or realistic_reason(
            case, sinks="sinks: FlashInfer 0.7.2.post1's tensor-core decode route (fa2) drops run(sinks=)",
            skip_softmax="skip-softmax: FlashInfer 0.7.2.post1's tensor-core decode route (fa2) drops it",
            q_fp8=Q_FP8_ONLY_TRTLLM)

    def checked_output(self, inputs, out):
        return inputs.padded.unpad(out)

    def jit_key(self, case):
        # FlashInfer builds a separate module for a sliding window (use_swa) of the same dtypes and head_dim
        return (case.dtype, case.kv_dtype, case.head_dim, case.window_left >= 0)

    def jit_specs(self, device, case):
        # use_tensor_cores with a bf16/fp16 query plans FA2's batch-prefill module (decode.py plan); backend
        # "auto" picks cuDNN only on SM100/103 for 2-4 query rows, and XQA only under a CUDA-graph wrapper
        return [fa2_batch_prefill_spec(case, "fa2")]

    def prepare(self, inputs: Inputs) -> KernelFn:
        import flashinfer

        c = inputs.case
        launch = self.launch(inputs, padded=True)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(launch.ws, c.kv_layout, use_tensor_cores=True)
        pb = inputs.padded
        w.plan(
            pb.host("kv_indptr"), pb.host("kv_indices"), pb.host("last_page_len"),
            c.num_qo_heads, c.num_kv_heads, c.head_dim, c.page_size, window_left=c.window_left,
            sm_scale=inputs.sm_scale, q_data_type=torch_dtype(c.dtype), kv_data_type=torch_dtype(c.kv_dtype),
            o_data_type=torch_dtype(c.dtype), q_len_per_req=pb.q_len,
        )
        return launch.run(lambda q, kv: w.run(q, kv, out=launch.out))
