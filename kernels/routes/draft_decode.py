"""The draft model's decode passes as the engines run them: after draft extend, `steps - 1` passes of the draft's
layer, each over batch x topk query rows of one token (a chain: topk 1), on the draft's attention backend, with the
host work each pass redoes. Measured like every route (checked against the float32 reference, timed, one row per
case) at q_len 1; a pass with topk k is priced at batch x k (each branch is a request of its own).

SGLang 0.5.23 (python/sglang/srt/layers/attention/):
- flashinfer: FlashInferMultiStepDraftBackend keeps one FlashInferAttnBackend per pass, `speculative_num_steps - 1`
  of them (flashinfer_backend.py:2442-2474), over `topk x num_seqs` rows (2501); each pass is planned as a decode
  (BatchDecodeWithPagedKVCacheWrapper, tensor cores for a GQA group >= 4 with a bf16/fp16 cache: 2670-2714), after
  the passes' kv_indptr is read back from the GPU once per step (2594; SGLANG_OPT_FLASHINFER_DRAFT_HOST_INDPTR,
  2537, builds it on the host instead): the host work waits for the GPU;
- trtllm_mha: TRTLLMHAAttnMultiStepDraftBackend, the same passes (trtllm_mha_backend.py:2038-2063) on TRT-LLM decode
  (xqa on SM90) at one query token, metadata refreshed in the graph;
- fa3: FlashAttentionMultiStepBackend, the same passes (flashattention_backend.py:3477-3512) on FlashAttention-3.
vLLM 0.34.0: the drafter's passes run the target's backend with one query token per request (the drafter reuses the
target's attention metadata, v1/worker/gpu/spec_decode/speculator.py:151-154, 413-430): its verify routes at q 1.
"""
from __future__ import annotations

from kbench.kernels.base import KernelFn, realistic_reason
from kbench.kernels.fa_prefill import backend_device_reason
from kbench.kernels.routes.base import KernelRoute, Route, graph_buffer_refresh
from kbench.kernels.decode_wrapper import DecodeWrapper
from kbench.kernels.trtllm_decode import TrtllmDecode
from kbench.kernels.vllm_fa3 import VllmFa3

_DECODE_WRAPPER = DecodeWrapper()
WORKSPACE = 384 * 1024 * 1024  # SGLANG_FLASHINFER_WORKSPACE_SIZE's default (environ.py:1221)
SOURCE_FI = "flashinfer_backend.py:2442-2474, 2501, 2537, 2594, 2599-2605, 2670-2714"


class DecodeWrapperRoute(Route):
    """FlashInfer's BatchDecodeWithPagedKVCacheWrapper (tensor cores) as SGLang's multi-step draft backend runs one
    pass: built with the CUDA-graph buffers, planned every pass from host offsets, run per layer."""

    path = "decode"
    runs = "decode-wrapper"
    kv_dtypes = ("bf16", "fp16", "fp8")
    host_waits_for_gpu = True  # the passes' kv_indptr read back once per step (flashinfer_backend.py:2594)

    def __init__(self, name: str, engine: str, *, source: str, description: str, host_work: str):
        self.name, self.engine, self.source, self.description, self.host_work = (name, engine, source, description,
                                                                                 host_work)
        self.steps = ("draft_decode",)
        self.workspace_bytes = WORKSPACE

    def backend(self, device) -> str:
        return "fa2"

    def supports(self, device, case):
        reason = backend_device_reason(device, "fa2") or self.uniform_q_reason(case)
        if reason is None and case.q_len != 1:
            reason = ONE_TOKEN.format(q=case.q_len)
        return reason or realistic_reason(
            case, sinks="sinks: FlashInfer's tensor-core decode route (fa2) drops run(sinks=)",
            skip_softmax="skip-softmax: FlashInfer's tensor-core decode route (fa2) drops it",
            q_fp8="q_dtype fp8: the engine plans this route with a bf16/fp16 query")

    # the kernel it runs is kbench's decode-wrapper: its output check and FlashInfer modules are that kernel's
    def checked_output(self, inputs, out):
        return _DECODE_WRAPPER.checked_output(inputs, out)

    def jit_key(self, case):
        return _DECODE_WRAPPER.jit_key(case)

    def jit_specs(self, device, case):
        return _DECODE_WRAPPER.jit_specs(device, case)

    def _plan_args(self, inputs):
        """SGLang plans page size 1 over its token pool whatever --page-size is (as its verify and extend:
        kbench.kernels.routes.base.token_slots): one index per token, last-page lengths all ones."""
        import torch

        from kbench.kernels.inputs import torch_dtype
        from kbench.kernels.routes.base import token_slots

        c = inputs.case
        lay = inputs.extra.get("route_draft_decode_layout")
        if lay is None:
            kv_indptr, slots = token_slots(inputs)
            lay = inputs.extra["route_draft_decode_layout"] = (
                kv_indptr.cpu(), slots, torch.ones(len(inputs.lengths.kv), dtype=torch.int32))
        args = (*lay, c.num_qo_heads, c.num_kv_heads, c.head_dim, 1)
        kw = dict(window_left=c.window_left, sm_scale=inputs.sm_scale, q_data_type=torch_dtype(c.dtype),
                  kv_data_type=torch_dtype(c.kv_dtype), o_data_type=torch_dtype(c.dtype), non_blocking=True)
        return args, kw

    def prepare(self, inputs) -> KernelFn:
        import flashinfer
        import torch

        from kbench.kernels.routes.base import sglang_kv_pool

        launch = self.launch(inputs, padded=True)
        args, kw = self._plan_args(inputs)
        dev = inputs.device
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            launch.ws, "NHD", use_cuda_graph=True, use_tensor_cores=True,
            paged_kv_indptr_buffer=torch.empty_like(args[0], device=dev),
            paged_kv_indices_buffer=torch.empty_like(args[1], device=dev),
            paged_kv_last_page_len_buffer=torch.empty_like(args[2], device=dev))
        w.plan(*args, **kw)
        self._wrapper = w
        pools = [sglang_kv_pool(inputs, i) for i in range(len(inputs.copies))]
        return lambda i: w.run(inputs.copies[i].q, pools[i], out=launch.out)

    def host_step(self, inputs):
        w = self._wrapper
        args, kw = self._plan_args(inputs)
        return lambda: w.plan(*args, **kw)


ONE_TOKEN = ("q_len {q}: a draft decode pass has one query token per row (topk k: batch x k rows); measure it at "
             "--q-len 1")


class DraftKernelRoute(KernelRoute):
    """A kbench kernel as a draft decode pass runs it: one query token per row."""

    def supports(self, device, case):
        return (ONE_TOKEN.format(q=case.q_len) if case.q_len != 1 else None) or super().supports(device, case)


FLASHINFER_DRAFT_DECODE = DecodeWrapperRoute(
    "sglang-fi-draft-decode", "sglang", source=SOURCE_FI,
    description="SGLang flashinfer draft decode pass (EAGLE, topk x batch rows of one token): tensor-core decode "
                "wrapper with CUDA-graph buffers, planned every pass",
    host_work="plan() of the pass's decode wrapper from host offsets; once per step the passes' kv_indptr is read "
              "back from the GPU (waits for it)")
TRTLLM_MHA_DRAFT = DraftKernelRoute(
    "sglang-trtllm-mha-draft", "sglang", TrtllmDecode(), metadata=graph_buffer_refresh, steps=("draft_decode",),
    source="trtllm_mha_backend.py:2038-2063",
    description="SGLang trtllm_mha draft decode pass: TRT-LLM decode (xqa on SM90) at one query token per row, in a "
                "CUDA graph",
    host_work="the graph's KV lengths and page table refreshed by one launch, no plan, no wait",
    page_sizes=(16, 32, 64, 128),
    page_source="SGLang 0.5.23 moves trtllm_mha to page 64 otherwise: arg_groups/overrides.py:1174-1187")
FA3_DRAFT = DraftKernelRoute(
    "sglang-fa3-draft", "sglang", VllmFa3("sglang"), metadata=graph_buffer_refresh, steps=("draft_decode",),
    source="flashattention_backend.py:3477-3512",
    description="SGLang fa3 draft decode pass: FlashAttention-3 with SGLang's arguments at one query token per row, "
                "in a CUDA graph; vLLM 0.33.0's FA3 library, not sgl-kernel's (docs/fa3.md)",
    host_work="the graph's metadata refreshed by one launch, no plan, no wait")

ROUTES = (FLASHINFER_DRAFT_DECODE, TRTLLM_MHA_DRAFT, FA3_DRAFT)

# the route a setting's draft decode passes take, by the route of its draft extend (the draft's backend); vLLM's
# drafter runs its verify/draft-extend route at one query token
DRAFT_DECODE_OF = {
    "sglang-fi-extend": "sglang-fi-draft-decode", "sglang-trtllm-mha": "sglang-trtllm-mha-draft",
    "sglang-fa3": "sglang-fa3-draft",
    "vllm-fi-decode": "vllm-fi-decode", "vllm-flash-attn": "vllm-flash-attn", "vllm-fi-prefill": "vllm-fi-prefill",
    "vllm-fi-prefill-fa3": "vllm-fi-prefill-fa3",
}
