"""FlashInfer's paged prefill wrapper, with the backend always named (auto picks fa3 on SM90).

A draft tree goes to fa2 as plan(custom_mask=): FlashInfer packs it once per plan, outside the timed call, as
an engine's plan does every step (kbench.kernels.tree_masks says why not packed_custom_mask); fa3 takes none."""
from __future__ import annotations

from kbench.kernels.base import Q_FP8_ONLY_TRTLLM, Kernel, KernelFn, fa2_batch_prefill_spec, needs_cuda, realistic_reason
from kbench.kernels.inputs import Inputs, torch_dtype
from kbench.kernels.tree_masks import tree_reason


def backend_kv_dtypes(backend: str) -> tuple[str, ...]:
    """The KV dtypes kbench runs the paged prefill wrapper's backend with: fa3 on an fp8 cache wants an fp8 query
    too, and kbench keeps the query in bf16/fp16 (the plain kernels and the engines' routes alike)."""
    return ("bf16", "fp16", "fp8") if backend == "fa2" else ("bf16", "fp16")


def backend_device_reason(device, backend: str) -> str | None:
    """Why this GPU cannot run the paged prefill wrapper's backend (fa2: SM80 and up; fa3: Hopper only)."""
    return (needs_cuda(device, only_sm=(90,), label=" (FA3 is Hopper-only)") if backend == "fa3"
            else needs_cuda(device, min_sm=80))


class FaPrefill(Kernel):
    path = "context"

    def __init__(self, backend: str):
        self.fa = backend
        self.name = f"{backend}-prefill"
        self.description = (f"BatchPrefillWithPagedKVCacheWrapper(backend={backend!r}), causal"
                            + (" or a draft tree's custom_mask" if backend == "fa2" else ""))
        self.kv_dtypes = backend_kv_dtypes(backend)

    def supports(self, device, case):
        reason = (tree_reason(case, self.name) if self.fa == "fa3" else None) or backend_device_reason(device, self.fa)
        # FlashInfer 0.7.2.post1: run(sinks=..., skip_softmax_threshold_scale_factor=...) reach the paged
        # module, whose fa2/fa3 routes drop both (only the trtllm-gen and cudnn routes read them)
        return reason or realistic_reason(
            case, sinks=f"sinks: FlashInfer 0.7.2.post1's {self.fa} paged prefill route drops run(sinks=)",
            skip_softmax=f"skip-softmax: FlashInfer 0.7.2.post1's {self.fa} paged prefill route drops "
                         "skip_softmax_threshold_scale_factor", q_fp8=Q_FP8_ONLY_TRTLLM)

    def jit_key(self, case):
        # FlashInfer builds a separate module for a sliding window (use_swa) of the same dtypes and head_dim; a
        # custom mask (a draft tree) is in the same prefill module, but plan() packs it with segment_packbits,
        # FlashInfer's quantization module: compiled up front with the tree variant
        tree = case.tree != "chain" and self.fa == "fa2"
        return (case.dtype, case.kv_dtype, case.head_dim, case.window_left >= 0) + (("custom-mask",) if tree else ())

    def jit_specs(self, device, case):
        specs = [fa2_batch_prefill_spec(case, self.fa)]
        if self.fa == "fa2" and case.tree != "chain":  # plan(custom_mask=) packs the tree with segment_packbits
            from flashinfer.jit.quantization import gen_quantization_module

            specs.append(gen_quantization_module())
        return specs

    def prepare(self, inputs: Inputs) -> KernelFn:
        import flashinfer

        c = inputs.case
        launch = self.launch(inputs)
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(launch.ws, c.kv_layout, backend=self.fa)
        # a draft tree: the custom mask (the whole [q, kv] block of each request); causal applies without one
        mask = {} if inputs.tree is None else {"custom_mask": inputs.tree.fa2}
        w.plan(
            inputs.host("qo_indptr"), inputs.host("kv_indptr"), inputs.host("kv_indices"),
            inputs.host("last_page_len"), c.num_qo_heads, c.num_kv_heads, c.head_dim, c.page_size,
            causal=True, **mask, window_left=c.window_left, sm_scale=inputs.sm_scale, q_data_type=torch_dtype(c.dtype),
            kv_data_type=torch_dtype(c.kv_dtype), o_data_type=torch_dtype(c.dtype),
        )
        return launch.run(lambda q, kv: w.run(q, kv, out=launch.out))
