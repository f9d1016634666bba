"""SGLang 0.5.23's speculative-decoding attention routes (EAGLE v2, topk 1 chains and draft trees).

Sources (the sglang 0.5.23 wheel, python/sglang/srt/...; kbench/recommend/engines.toml cites them per setting):
- flashinfer backend, every step: planned with page size 1 whatever --page-size is (flashinfer_backend.py:
  2395-2403; last-page lengths all ones, 486-488) over the token pool, one index per token: the routes' rows carry
  the case's page size (the allocator's, SGLang's --page-size), the kernel reads the pool by token
  (kbench.kernels.routes.base.sglang_kv_pool);
- flashinfer backend, target verify: BatchPrefillWithPagedKVCacheWrapper(backend fa2) with the CUDA-graph buffers
  (flashinfer_backend.py:1326-1336), planned every step by FlashInfer's own plan() with the spec input's custom
  mask, a chain's too (eagle_info.py:90-153, eagle_worker_common.py:449-462), the offsets on the GPU
  (flashinfer_backend.py:781-792): plan() reads them back to the host, which waits for the GPU. SGLang's
  sync-free verify plan is opt-in (SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN, default off: environ.py:1566;
  flashinfer_backend.py:888-902; topk 1) and packs the mask for page size 1 only (flashinfer_backend.py:264-266):
  `sglang-fi-verify-hostplan` (kbench.kernels.routes.sglang_host_plan);
- flashinfer backend, draft extend v2: the same wrapper, causal, no mask (flashinfer_backend.py:807-818, 1337-1341),
  replayed with SGLang's fast_prefill_plan (flashinfer_backend.py:848-860, 180-316): FlashInfer's planner fed host
  offsets, no read-back. kbench calls the public plan() with host offsets, which runs the same planner and copies
  the offsets into the graph's buffers from the host (SGLang copies them on the GPU);
- trtllm_mha: trtllm_batch_decode_with_kv_cache with q_len_per_req and the draft mask (trtllm_mha_backend.py:
  1869-1889, 1480-1527) in a CUDA graph whose metadata buffers are refreshed every step;
- fa3 (the Hopper default): FlashAttention-3's flash_attn_with_kvcache (flashattention_backend.py:1036-1081,
  1789-1807), metadata refreshed in the graph by one Triton kernel, no plan; a topk > 1 tree's verify is cascade
  attention (prefix call, expand call, merge: `sglang-fa3-tree`, kbench.kernels.routes.fa3_tree).
"""
from __future__ import annotations

from kbench.kernels.flashinfer_mla import FlashInferMla
from kbench.kernels.flashmla import FlashMla
from kbench.kernels.routes.base import KernelRoute, PagedPrefillRoute, flashmla_schedule, graph_buffer_refresh, replan
from kbench.kernels.routes.fa3_tree import Fa3TreeRoute
from kbench.kernels.trtllm_decode import TrtllmDecode
from kbench.kernels.vllm_fa3 import VllmFa3
from kbench.kernels.vllm_fa3_mla import VllmFa3Mla

WORKSPACE = 384 * 1024 * 1024  # SGLANG_FLASHINFER_WORKSPACE_SIZE's default (environ.py:1221)

FLASHINFER_VERIFY = PagedPrefillRoute(
    "sglang-fi-verify", "sglang", cuda_graph=True, custom_mask=True, indices_on_gpu=True, steps=("verify",),
    workspace_bytes=WORKSPACE, page_one=True,
    source="flashinfer_backend.py:486-488, 781-792, 1326-1336, 2395-2403; eagle_info.py:90-153",
    description="SGLang flashinfer target verify: fa2 paged prefill, CUDA-graph wrapper, the draft mask as "
                "custom_mask (a chain's too), plan() every step at page size 1 over the token pool")
FLASHINFER_VERIFY_HOST_PLAN = PagedPrefillRoute(
    "sglang-fi-verify-hostplan", "sglang", cuda_graph=True, custom_mask=True, indices_on_gpu=True,
    steps=("verify",), workspace_bytes=WORKSPACE, page_one=True, host_plan=True,
    source="environ.py:1566; flashinfer_backend.py:180-316, 888-902, 2366-2403; pack_verify_mask.py",
    description="SGLang flashinfer target verify with SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN=1 (topk 1): fa2 "
                "paged prefill at page size 1, CUDA-graph wrapper, planned every step by SGLang's fast_prefill_plan",
    host_work="fast_prefill_plan: host offsets from seq_lens_cpu, the graph buffers refreshed on the GPU, the mask "
              "packed by SGLang's Triton kernel, FlashInfer's planner fed host tensors: no read-back, no wait")
FLASHINFER_DRAFT_EXTEND = PagedPrefillRoute(
    "sglang-fi-extend", "sglang", cuda_graph=True, custom_mask=False, indices_on_gpu=False, steps=("draft_extend",),
    workspace_bytes=WORKSPACE, page_one=True,
    source="flashinfer_backend.py:486-488, 807-818, 848-860, 1337-1341, 2395-2403",
    description="SGLang flashinfer draft extend v2: fa2 paged prefill, CUDA-graph wrapper, causal, planned every "
                "step at page size 1 from host offsets (no wait for the GPU)")
TRTLLM_MHA = KernelRoute(
    "sglang-trtllm-mha", "sglang", TrtllmDecode(), metadata=graph_buffer_refresh, steps=("verify", "draft_extend"),
    source="trtllm_mha_backend.py:1749-1752, 1869-1889",
    description="SGLang trtllm_mha verify and draft extend v2: TRT-LLM decode (xqa on SM90) with q_len_per_req and "
                "the draft mask, in a CUDA graph",
    host_work="the graph's KV lengths and page table refreshed by one launch (SGLang: one fused Triton kernel, "
              "trtllm_mha_backend.py:941-1030), no plan, no wait",
    page_sizes=(16, 32, 64, 128),
    page_source="SGLang 0.5.23 moves trtllm_mha to page 64 otherwise: arg_groups/overrides.py:1174-1187")

FA3 = KernelRoute(
    "sglang-fa3", "sglang", VllmFa3("sglang"), metadata=graph_buffer_refresh, steps=("verify", "draft_extend"),
    source="flashattention_backend.py:1036-1081, 1181-1207, 1789-1807",
    description="SGLang fa3 verify and draft extend v2: FlashAttention-3 with SGLang's flash_attn_with_kvcache "
                "arguments (page_table, cache_seqlens with the new tokens, num_splits 0, no scheduler metadata) in a "
                "CUDA graph; vLLM 0.33.0's FA3 library, not sgl-kernel's (docs/fa3.md)",
    host_work="the graph's metadata refreshed by one launch (SGLang: one Triton kernel, normal_decode_set_metadata), "
              "no plan, no wait",
    tree_route="sglang-fa3-tree")  # a tree's verify is cascade attention (flashattention_backend.py:1586-1593)

FA3_TREE = Fa3TreeRoute(
    "sglang-fa3-tree", "sglang",
    source="flashattention_backend.py:1082-1172, 1586-1593, 1788-1870, 3193-3265",
    description="SGLang fa3 target verify of a draft tree (topk > 1): cascade attention, a prefix call and a "
                "per-token expand call on FlashAttention-3 (SGLang's arguments, vLLM 0.33.0's library) merged by "
                "LSE (FlashInfer's merge_state for sgl-kernel's merge_state_v2)",
    host_work="the graph's prefix metadata refreshed and the expand page table built from the draft mask (mask "
              "rows gathered, sorted, slots gathered: GPU ops launched from the host), no plan, no wait")

# MLA (DeepSeek-V3/R1, Kimi K2 with MTP)
FLASHMLA = KernelRoute(
    "sglang-flashmla", "sglang", FlashMla(), metadata=flashmla_schedule, steps=("verify", "draft_extend"),
    source="flashmla_backend.py:199-231, 328-429, 514-595",
    description="SGLang flashmla verify and draft extend v2: sgl-flash-mla's flash_mla_with_kvcache (legacy SM90 "
                "path), page 64, causal, in a CUDA graph",
    host_work="the graph's block table refreshed and get_mla_decoding_metadata launched (GPU kernels), no plan, "
              "no wait")


def fast_mla_prefill_plan(inputs, kernel):
    """SGLang's sync-free verify plan for FlashInfer MLA in CUDA-graph replay (flashinfer_mla_backend.py:1401-1445,
    bound at :406-411): the wrapper's scalars set, the host offsets and the GPU page indices copied into its
    buffers (non-blocking), and FlashInfer's planner called directly (``_cached_module.plan`` with the workspaces and
    the host qo/kv indptrs and lengths), skipping everything else the public plan() does. On FlashInfer 0.7.4 the
    wrapper keeps these attributes (mla/_batch_mla/_wrapper.py:152-156, 303-309: mirrored from the planned fa3
    backend), so SGLang's function runs unchanged on the wrapper the kernel planned."""
    w, c = kernel.wrapper, inputs.case
    qo, kv_indptr, kv_len = inputs.host("qo_indptr"), inputs.host("kv_indptr"), inputs.host("seq_lens")
    indices = inputs.kv_indices  # on the GPU, as SGLang's verify indices are (built by a Triton kernel)

    def step():
        w._causal, w._page_size, w._sm_scale = True, c.page_size, inputs.sm_scale
        w._qo_indptr_buf.copy_(qo, non_blocking=True)
        w._kv_indptr_buf.copy_(kv_indptr, non_blocking=True)
        w._kv_indices_buf[: len(indices)].copy_(indices, non_blocking=True)
        w._kv_len_arr_buf.copy_(kv_len, non_blocking=True)
        w._cached_module.plan(w._float_workspace_buffer, w._int_workspace_buffer, w._pin_memory_int_workspace_buffer,
                              qo, kv_indptr, kv_len, c.num_qo_heads, c.kv_lora_rank, True)

    return step


FLASHINFER_MLA = KernelRoute(
    "sglang-fi-mla", "sglang", FlashInferMla("fa3"), metadata=fast_mla_prefill_plan, steps=("verify",),
    source="flashinfer_mla_backend.py:299-303, 406-411, 1160-1181, 1401-1445",
    description="SGLang flashinfer MLA target verify on SM90: BatchMLAPagedAttentionWrapper (auto: fa3), causal, in "
                "a CUDA graph re-planned every step by SGLang's fast_mla_prefill_plan",
    host_work="SGLang's fast_mla_prefill_plan every step: offsets copied into the wrapper's buffers, FlashInfer's "
              "planner called directly on host offsets (no public plan(), no wait)")
FLASHINFER_MLA_EXTEND = KernelRoute(
    "sglang-fi-mla-extend", "sglang", FlashInferMla("fa3"), metadata=replan, steps=("draft_extend",),
    source="flashinfer_mla_backend.py:447-497, 1160-1181",
    description="SGLang flashinfer MLA draft extend v2 on SM90: BatchMLAPagedAttentionWrapper (auto: fa3), causal, "
                "eager (no CUDA graph for it), plan() every step from host offsets",
    host_work="FlashInfer's public plan() from host indptrs every step (SGLang's eager DRAFT_EXTEND_V2 path), no wait")

# FlashAttention-3 absorbed MLA, SGLang's MLA default on Hopper (model_override_base.py:335-338)
FA3_MLA = KernelRoute(
    "sglang-fa3-mla", "sglang", VllmFa3Mla("sglang"), metadata=graph_buffer_refresh, steps=("verify", "draft_extend"),
    source="flashattention_backend.py:1036-1081, 1181-1207, 1938-2030",
    description="SGLang fa3 MLA verify and draft extend v2: FlashAttention-3 absorbed MLA with SGLang's "
                "flash_attn_with_kvcache arguments (q=q_rope, qv=q_nope, page_table, cache_seqlens, num_splits 0, no "
                "scheduler metadata; an fp8 cache cast to bf16 in the call) in a CUDA graph; vLLM 0.33.0's FA3 "
                "library, not sgl-kernel's (docs/fa3.md)",
    host_work="the graph's metadata refreshed by one launch (as SGLang's fa3 for GQA), no plan, no wait")

ROUTES = (FLASHINFER_VERIFY, FLASHINFER_DRAFT_EXTEND, TRTLLM_MHA, FA3, FLASHMLA, FLASHINFER_MLA, FLASHINFER_MLA_EXTEND,
          FA3_MLA, FLASHINFER_VERIFY_HOST_PLAN, FA3_TREE)
