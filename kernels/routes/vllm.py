"""vLLM 0.34.0's speculative-decoding attention routes (EAGLE/MTP; the drafter's first pass reuses the target's
attention metadata, so verify and draft extend take one route).

Sources (the vllm 0.34.0 sources; kbench/recommend/engines.toml cites them per setting):
- FLASHINFER on SM90/SM12x/SM100: spec-decode requests are decodes (v1/attention/backends/flashinfer.py:1058-1071),
  run by the TRT-LLM decode kernel with q_len_per_req and the draft mask (flashinfer.py:1934-1963, 2728-2746) in a
  CUDA graph; no plan() for it;
- FLASH_ATTN (the default off SM100): vllm-flash-attn's FlashAttention-3 via flash_attn_varlen_func, the split
  schedule made by get_scheduler_metadata in every build() (flash_attn.py:1290-1291 splits the packed cache, 1437-1462 calls the kernel);
- FLASHINFER with use_trtllm_attention false: BatchPrefillWithPagedKVCacheWrapper(backend auto: fa2 for every
  draft-extend shape from FlashInfer 0.7.4, fa3 on SM90 below it: vllm-fi-prefill-fa3) planned every step from
  host offsets (flashinfer.py:1477-1482), run eagerly between the CUDA-graph pieces; its build reads seq_lens back
  from the GPU every step (flashinfer.py:1696-1706), so its host work waits for the GPU.
"""
from __future__ import annotations

from kbench.kernels.flashmla import FlashMla
from kbench.kernels.routes.base import KernelRoute, PagedPrefillRoute, flashmla_schedule, host_to_gpu_copies, in_turn
from kbench.kernels.trtllm_decode import TrtllmDecode
from kbench.kernels.vllm_fa3 import VllmFa3, scheduler_metadata
from kbench.kernels.vllm_fa3_mla import VllmFa3Mla, mla_scheduler_metadata

WORKSPACE = 394 * 1024 * 1024  # VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE's default (envs.py:234, 1926-1927)
# the kernel block sizes vLLM's backends take (get_supported_kernel_block_sizes; read in the tests' CPU vLLM 0.32.0,
# 0.34.0's source not at hand): no page 1 on either
FI_PAGES = dict(page_sizes=(16, 32, 64), page_source="vLLM FLASHINFER on SM90: v1/attention/backends/flashinfer.py:"
                "460-479 (0.32.0)")
FA_PAGES = dict(page_sizes=(16, 32, 64, 128), page_source="vLLM FLASH_ATTN: multiples of 16, "
                "v1/attention/backends/flash_attn.py:355-365 (0.32.0)")

FLASHINFER_DECODE = KernelRoute(
    "vllm-fi-decode", "vllm", TrtllmDecode(), metadata=host_to_gpu_copies, steps=("verify", "draft_extend"),
    source="v1/attention/backends/flashinfer.py:1058-1071, 1934-1963, 2728-2746",
    description="vLLM FLASHINFER spec decode: TRT-LLM decode (xqa on SM90) with q_len_per_req and the draft mask",
    host_work="block table and KV lengths copied host to GPU, no plan", **FI_PAGES)
FLASHINFER_PREFILL = PagedPrefillRoute(
    "vllm-fi-prefill", "vllm", cuda_graph=False, custom_mask=False, indices_on_gpu=False,
    steps=("verify", "draft_extend"), workspace_bytes=WORKSPACE, **FI_PAGES,
    source="v1/attention/backends/flashinfer.py:1058-1071, 1477-1482",
    description="vLLM FLASHINFER with use_trtllm_attention false: fa2 paged prefill (auto), causal, plan() every "
                "step from host offsets, run eagerly")
# its metadata build copies seq_lens to the host every step (needs_seq_lens_cpu when a path is not TRT-LLM:
# v1/attention/backends/flashinfer.py:1696-1706, `seq_lens.cpu()` under gpu_sync_allowed): it waits for the GPU
# the same with FlashInfer below 0.7.4 (vLLM 0.34.0 pins 0.7.3): backend auto is fa3 on SM90 whenever fa3 takes the
# inputs (flashinfer/utils.py@0.7.2.post1:574-629), so the same plan-every-step route runs FA3's paged prefill
FLASHINFER_PREFILL_FA3 = PagedPrefillRoute(
    "vllm-fi-prefill-fa3", "vllm", backend="fa3", cuda_graph=False, custom_mask=False, indices_on_gpu=False,
    steps=("verify", "draft_extend"), workspace_bytes=WORKSPACE, **FI_PAGES,
    source="v1/attention/backends/flashinfer.py:1058-1071, 1477-1482; flashinfer/utils.py@0.7.2.post1:574-629",
    description="vLLM FLASHINFER with use_trtllm_attention false on SM90 with FlashInfer below 0.7.4 (vLLM 0.34.0 "
                "pins 0.7.3): auto is fa3: fa3 paged prefill, causal, plan() every step from host offsets, run eagerly")
for _r in (FLASHINFER_PREFILL, FLASHINFER_PREFILL_FA3):
    _r.host_waits_for_gpu = True
    _r.host_work += "; seq_lens read back from the GPU every step (waits for it)"


FLASH_ATTN = KernelRoute(
    "vllm-flash-attn", "vllm", VllmFa3("vllm"), steps=("verify", "draft_extend"),
    # FlashAttentionMetadataBuilder.build(): the decode batch's copies, then FA3's split schedule made every step
    # by get_scheduler_metadata (a small GPU kernel launched from the host, no wait)
    metadata=in_turn(host_to_gpu_copies, scheduler_metadata),
    source="v1/attention/backends/flash_attn.py:1290-1291, 1437-1462; config/attention.py:66",
    description="vLLM FLASH_ATTN (the Hopper default): vLLM's FlashAttention-3 with the AOT split schedule, 32 "
                "splits under full CUDA graphs",
    host_work="block table and KV lengths copied host to GPU, then get_scheduler_metadata (the split schedule)",
    **FA_PAGES)


FLASHMLA = KernelRoute(
    "vllm-flashmla", "vllm", FlashMla(), steps=("verify", "draft_extend"),
    metadata=in_turn(host_to_gpu_copies, flashmla_schedule),  # the copies, then FlashMLA's schedule
    source="v1/attention/backends/mla/flashmla.py",
    description="vLLM FLASHMLA spec decode: FlashMLA at block 64 (kbench runs sgl-flash-mla's build; vLLM ships its "
                "own, vllm-project/FlashMLA)",
    host_work="block table and KV lengths copied host to GPU, then FlashMLA's schedule (get_mla_decoding_metadata)")

FLASH_ATTN_MLA = KernelRoute(
    "vllm-flash-attn-mla", "vllm", VllmFa3Mla("vllm"), steps=("verify", "draft_extend"),
    # FlashAttnMLAMetadataBuilder._build_decode: the decode batch's copies, then FA3's split schedule for the MLA
    # shape (headdim 64, headdim_v 512, one KV head) made every step by get_scheduler_metadata, no wait
    metadata=in_turn(host_to_gpu_copies, mla_scheduler_metadata),
    source="v1/attention/backends/mla/flashattn_mla.py:127-128, 173-175, 190-205, 224-263, 382-401",
    description="vLLM FLASH_ATTN_MLA (the SM90 MLA default with a bf16 cache): vLLM's FlashAttention-3 absorbed MLA "
                "(q=q_pe, q_v=q_nope) with the AOT split schedule, 32 splits under full CUDA graphs",
    host_work="block table and KV lengths copied host to GPU, then get_scheduler_metadata (the MLA split schedule)")

ROUTES = (FLASHINFER_DECODE, FLASHINFER_PREFILL, FLASHINFER_PREFILL_FA3, FLASH_ATTN, FLASHMLA, FLASH_ATTN_MLA)
