"""vLLM 0.34.0's speculative-decoding attention routes (EAGLE/MTP; the drafter's first pass reuses the target's
attention metadata, so verify and draft extend take one route).

Sources (the vllm 0.34.0 sources; kbench/recommend/engines.toml cites them per setting):
- FLASHINFER on SM90/SM12x/SM100: spec-decode requests are decodes (v1/attention/backends/flashinfer.py:1058-1071),
  run by the TRT-LLM decode kernel with q_len_per_req and the draft mask (flashinfer.py:1934-1963, 2728-2746) in a
  CUDA graph; no plan() for it;
- FLASHINFER with use_trtllm_attention false: BatchPrefillWithPagedKVCacheWrapper(backend auto: fa2 for every
  draft-extend shape from FlashInfer 0.7.4) planned every step from host offsets (flashinfer.py:1477-1482), run
  eagerly between the CUDA-graph pieces.
"""
from __future__ import annotations

from kbench.kernels.routes.base import DecodeRoute, PagedPrefillRoute

WORKSPACE = 394 * 1024 * 1024  # VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE's default (envs.py:234, 1926-1927)

FLASHINFER_DECODE = DecodeRoute(
    "vllm-fi-decode", "vllm", metadata="vllm-flashinfer", steps=("verify", "draft_extend"),
    source="v1/attention/backends/flashinfer.py:1058-1071, 1934-1963, 2728-2746",
    description="vLLM FLASHINFER spec decode: TRT-LLM decode (xqa on SM90) with q_len_per_req and the draft mask",
    host_work="block table and KV lengths copied host to GPU, no plan")
FLASHINFER_PREFILL = PagedPrefillRoute(
    "vllm-fi-prefill", "vllm", cuda_graph=False, custom_mask=False, indices_on_gpu=False,
    steps=("verify", "draft_extend"), workspace_bytes=WORKSPACE,
    source="v1/attention/backends/flashinfer.py:1058-1071, 1477-1482",
    description="vLLM FLASHINFER with use_trtllm_attention false: fa2 paged prefill (auto), causal, plan() every "
                "step from host offsets, run eagerly")

ROUTES = (FLASHINFER_DECODE, FLASHINFER_PREFILL)
