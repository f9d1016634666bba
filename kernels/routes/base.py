"""What every route shares: a kernel as an engine calls it, plus the host work the engine redoes every step.

A route is measured like any kernel (checked against the reference, timed on the GPU by the case's timer, one
row per case) and, besides, its per-step host work is timed on the host's CPU (`host_step`; the row's
`host_us`). `host_waits_for_gpu` says whether that host work blocks on the GPU (a device-to-host copy inside
FlashInfer's plan(), for instance): such work cannot overlap the previous step's GPU work, whatever the engine's
scheduler does, and `kbench recommend` adds it to the GPU time instead of overlapping it.
"""
from __future__ import annotations

import copy

from typing import TYPE_CHECKING, Callable

from kbench.kernels.base import Kernel, KernelFn, fa2_batch_prefill_spec, realistic_reason
from kbench.kernels.fa_prefill import backend_device_reason, backend_kv_dtypes

if TYPE_CHECKING:
    from kbench.kernels.inputs import Inputs

# host_step(inputs) returns this: one step's host work, called once per sample by the host timer
HostStep = Callable[[], object]


class Route(Kernel):
    engine: str = ""  # sglang | vllm
    runs: str = ""  # the kbench kernel family it runs (fa2-prefill, trtllm-decode, ...)
    steps: tuple[str, ...] = ("verify", "draft_extend")  # the engine steps that take this route
    host_work: str = ""  # what host_step redoes, in words (kbench kernels prints it)
    host_waits_for_gpu: bool = False
    source: str = ""  # the engine source lines it follows

    def host_step(self, inputs: "Inputs") -> HostStep:
        """The per-step host work on this case's inputs, as the engine does it (after prepare())."""
        raise NotImplementedError

    takes_trees: bool = False  # the engine runs draft trees (topk > 1) on this route
    tree_route: str = ""  # the route the engine takes for a tree instead, where it has one

    def uniform_q_reason(self, case) -> str | None:
        if case.attention not in self.attentions:
            return None  # the kernel's own attention rule says why (kbench.kernels.base.attention_reason)
        if case.tree != "chain" and not self.takes_trees:
            if self.tree_route:
                return f"tree: {self.engine} verifies a draft tree (topk > 1) on {self.tree_route}, not {self.name}"
            return (f"tree: {self.engine} does not run a draft tree on {self.name} (kbench.recommend.flags says "
                    "where each engine refuses topk > 1)")
        if case.q_dist != "fixed":
            return (f"q_dist {case.q_dist}: {self.engine}'s verify and draft-extend CUDA graphs give every request "
                    "the same q_len (a ragged batch is padded); measure this route at fixed q")
        return None


class PagedPrefillRoute(Route):
    """FlashInfer's BatchPrefillWithPagedKVCacheWrapper as an engine drives it: the wrapper built once (with the
    engine's CUDA-graph buffers when it captures one), plan() every step with the engine's index tensors (on the
    GPU: plan copies them to the host and waits for the GPU; on the host: no wait), then run() per layer.

    page_one: the engine plans page size 1 whatever its pool's page (SGLang: flashinfer_backend.py:2395-2403, the
    last-page lengths all ones, 486-488), over its token pool (`sglang_kv_pool`): the rows carry the case's page
    size, the allocator's (SGLang's --page-size), while the kernel reads one token slot per index.
    host_plan: SGLang's sync-free verify plan (`kbench.kernels.routes.sglang_host_plan`) replaces plan() after the
    first one, as SGLang installs it at capture: host offsets, the mask packed on the GPU, no wait."""

    path = "context"

    def __init__(self, name: str, engine: str, *, backend: str = "fa2", cuda_graph: bool, custom_mask: bool,
                 indices_on_gpu: bool, steps: tuple[str, ...], source: str, description: str, workspace_bytes: int,
                 page_one: bool = False, host_plan: bool = False, page_sizes: tuple[int, ...] = (),
                 page_source: str = "", host_work: str = ""):
        self.name, self.engine, self.fa, self.steps, self.source = name, engine, backend, steps, source
        self.runs = f"{backend}-prefill"  # the plain kernel of that backend (kbench.kernels.fa_prefill)
        self.kv_dtypes = backend_kv_dtypes(backend)
        self.workspace_bytes = workspace_bytes
        self.cuda_graph, self.custom_mask, self.indices_on_gpu = cuda_graph, custom_mask, indices_on_gpu
        self.page_one, self.host_plan = page_one, host_plan
        self.page_sizes, self.page_source = page_sizes, page_source
        self.host_waits_for_gpu = indices_on_gpu and not host_plan
        self.takes_trees = custom_mask and not host_plan  # a causal route runs chains only; host plan: topk 1
        self.description = description
        self.host_work = host_work or (
            "plan()" + (" with the draft mask as custom_mask (packed on the GPU by plan)" if custom_mask else " causal")
            + (", offsets on the GPU (plan copies them to the host: waits for the GPU)"
               if indices_on_gpu else ", offsets on the host") + (", page size 1" if page_one else ""))

    def backend(self, device) -> str:
        return self.fa

    def supports(self, device, case):
        reason = backend_device_reason(device, self.fa)
        if reason is None and self.host_plan and case.tree != "chain":
            reason = ("tree: SGLang's sync-free verify plan takes topk 1 only (flashinfer_backend.py:888-902); a "
                      "tree runs sglang-fi-verify")
        reason = reason or self.uniform_q_reason(case)
        return reason or realistic_reason(
            case, sinks=f"sinks: FlashInfer's {self.fa} paged prefill route drops run(sinks=)",
            skip_softmax=f"skip-softmax: FlashInfer's {self.fa} paged prefill route drops it",
            q_fp8="q_dtype fp8: the engine plans this route with a bf16/fp16 query")

    def jit_key(self, case):
        return (case.dtype, case.kv_dtype, case.head_dim, case.window_left >= 0) + (
            ("custom-mask",) if self.custom_mask else ())

    def jit_specs(self, device, case):
        specs = [fa2_batch_prefill_spec(case, self.fa)]
        if self.custom_mask and not self.host_plan:  # plan(custom_mask=) packs the mask with segment_packbits
            from flashinfer.jit.quantization import gen_quantization_module

            specs.append(gen_quantization_module())
        return specs

    def _layout(self, inputs: "Inputs") -> dict:
        """The engine's qo/kv offsets, page list and last-page lengths on the device, and the page size it plans."""
        if not self.page_one:
            return dict(qo_indptr=inputs.qo_indptr, kv_indptr=inputs.kv_indptr, kv_indices=inputs.kv_indices,
                        last_page_len=inputs.last_page_len, page=inputs.case.page_size)
        kv_indptr, kv_indices = token_slots(inputs)
        return dict(qo_indptr=inputs.qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices,
                    last_page_len=torch_ones_like(inputs.last_page_len), page=1)

    def _plan_args(self, inputs: "Inputs") -> tuple[tuple, dict]:
        from kbench.kernels.inputs import torch_dtype

        c = inputs.case
        lay = inputs.extra.get(("route_layout", self.page_one))
        if lay is None:
            lay = inputs.extra[("route_layout", self.page_one)] = self._layout(inputs)
            lay["host"] = {k: v.cpu() for k, v in lay.items() if k != "page"}
        pick = (lambda n: lay[n]) if self.indices_on_gpu else (lambda n: lay["host"][n])
        # the page list stays on the GPU either way (both engines build it there); the offsets are the engine's
        args = (pick("qo_indptr"), pick("kv_indptr"), lay["kv_indices"], pick("last_page_len"),
                c.num_qo_heads, c.num_kv_heads, c.head_dim, lay["page"])
        kw = dict(causal=not self.custom_mask, window_left=c.window_left, sm_scale=inputs.sm_scale,
                  q_data_type=torch_dtype(c.dtype), kv_data_type=torch_dtype(c.kv_dtype),
                  o_data_type=torch_dtype(c.dtype), non_blocking=True)
        if self.custom_mask:
            mask = inputs.extra.get("route_fa2_mask")
            if mask is None:
                mask = chain_or_tree_mask(inputs)
                inputs.extra["route_fa2_mask"] = mask
            kw["custom_mask"] = mask
        return args, kw

    def prepare(self, inputs: "Inputs") -> KernelFn:
        import flashinfer
        import torch

        c = inputs.case
        launch = self.launch(inputs)
        args, kw = self._plan_args(inputs)
        bufs = {}
        if self.cuda_graph:  # fixed buffers as the engine allocates them for its captured graphs
            dev = inputs.device
            bufs = dict(use_cuda_graph=True,
                        qo_indptr_buf=torch.empty_like(args[0], device=dev),
                        paged_kv_indptr_buf=torch.empty_like(args[1], device=dev),
                        paged_kv_indices_buf=torch.empty_like(args[2], device=dev),
                        paged_kv_last_page_len_buf=torch.empty_like(args[3], device=dev))
            if self.custom_mask:
                n = sum((q * kv + 7) // 8 for q, kv in zip(inputs.lengths.q, inputs.lengths.kv))  # packed bytes
                bufs["custom_mask_buf"] = torch.empty(n, dtype=torch.uint8, device=dev)
                bufs["mask_indptr_buf"] = torch.empty_like(inputs.qo_indptr, device=dev)
        # SGLang's wrappers are NHD over its token pool (flashinfer_backend.py:1326-1336)
        layout = "NHD" if self.page_one else c.kv_layout
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(launch.ws, layout, backend=self.fa, **bufs)
        w.plan(*args, **kw)  # the engine's first plan (SGLang: at capture)
        self._wrapper = w
        if self.host_plan:  # then every replay's: the sync-free one
            self.host_step(inputs)()
        if not self.page_one:
            return launch.run(lambda q, kv: w.run(q, kv, out=launch.out))
        pools = [sglang_kv_pool(inputs, i) for i in range(len(inputs.copies))]
        return lambda i: w.run(inputs.copies[i].q, pools[i], out=launch.out)

    def host_step(self, inputs: "Inputs") -> HostStep:
        w = self._wrapper
        args, kw = self._plan_args(inputs)
        if not self.host_plan:
            return lambda: w.plan(*args, **kw)
        from kbench.kernels.routes.sglang_host_plan import verify_host_plan

        seq_lens_cpu = inputs.host("seq_lens") - inputs.max_q  # SGLang's seq_lens: the prefix, without the drafts
        return verify_host_plan(w, args, kw, seq_lens_cpu, inputs.max_q)


def torch_ones_like(t):
    import torch

    return torch.ones_like(t)


def token_slots(inputs: "Inputs"):
    """(kv_indptr, kv_indices) of the case's KV by token, as SGLang hands FlashInfer its token pool: request r's
    position j is slot block_tables[r, j // page] * page + j % page of `sglang_kv_pool` (made once per case)."""
    import torch

    got = inputs.extra.get("route_token_slots")
    if got is None:
        c, kv = inputs.case, inputs.lengths.kv
        pos = torch.cat([torch.arange(n, device=inputs.device) for n in kv])
        req = torch.repeat_interleave(torch.arange(len(kv), device=inputs.device),
                                      torch.tensor(kv, device=inputs.device))
        slots = (inputs.block_tables[req, pos // c.page_size].long() * c.page_size + pos % c.page_size)
        got = inputs.extra["route_token_slots"] = (inputs.cum_seq_lens_kv, slots.to(torch.int32))
    return got


def sglang_kv_pool(inputs: "Inputs", copy: int = 0):
    """(K, V) of an input copy as SGLang's token pool holds them (MHATokenToKVPool: a K and a V buffer of
    [slots, Hkv, d] per layer; slot page * page_size + offset), viewed as FlashInfer's NHD pages of one token
    [slots, 1, Hkv, d]. At page 1 kbench's pool is already that (a view: K and V of a slot side by side rather
    than in two buffers); at a larger page the tokens are copied once per case into SGLang's order."""
    key = ("route_sglang_pool", copy)
    got = inputs.extra.get(key)
    if got is None:
        c = inputs.case
        k, v = inputs.k_v(copy)  # HND [pages, Hkv, page, d] | NHD [pages, page, Hkv, d]
        if c.kv_layout == "HND":
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        shape = (-1, 1, c.num_kv_heads, c.head_dim)
        got = inputs.extra[key] = (k.reshape(shape), v.reshape(shape))  # a view at page 1, a copy above
    return got


def chain_or_tree_mask(inputs: "Inputs"):
    """FA2's custom mask of the case on its device: a draft tree's, or a chain's causal block written out (as
    SGLang's EAGLE verify hands it for topk 1 too)."""
    import torch

    from kbench.kernels.tree_masks import fa2_mask

    if inputs.tree is not None:
        return inputs.tree.fa2
    q = inputs.lengths.q
    n = max(q)
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool, device=inputs.device))
    return fa2_mask(causal.expand(len(q), n, n), q, inputs.lengths.kv)


class KernelRoute(Route):
    """A kbench kernel as an engine calls it inside its CUDA graph (xqa with q_len_per_req and the draft mask, FA3
    with the engine's arguments): the call is the kernel's own prepare(); per step the engine refreshes the graph's
    metadata (`metadata(inputs)` builds that host work: the engine's ops, launched from the host)."""

    host_waits_for_gpu = False

    def __init__(self, name: str, engine: str, kernel: Kernel, *, metadata: Callable[["Inputs", Kernel], HostStep],
                 steps: tuple[str, ...], source: str, description: str, host_work: str, takes_trees: bool = False,
                 page_sizes: tuple[int, ...] | None = None, page_source: str = "", tree_route: str = ""):
        self.name, self.engine, self.steps, self.source, self.tree_route = name, engine, steps, source, tree_route
        # the engine's page sizes for this route where it allows fewer than the kernel takes, else the kernel's
        self.page_sizes = kernel.page_sizes if page_sizes is None else page_sizes
        self.page_source = page_source or kernel.page_source
        self.metadata, self.description, self.host_work = metadata, description, host_work
        self._kernel, self.runs, self.path, self.takes_trees = kernel, kernel.name, kernel.path, takes_trees
        self.kv_dtypes, self.attentions = kernel.kv_dtypes, kernel.attentions

    def with_own_kernel(self) -> None:
        """Give this route (a copy of another) its own kernel object, whose prepare() state it then keeps."""
        self._kernel = copy.copy(self._kernel)

    def backend(self, device) -> str:
        return self._kernel.backend(device)

    def supports(self, device, case):
        return self.uniform_q_reason(case) or self._kernel.supports(device, case)

    def jit_key(self, case):
        return self._kernel.jit_key(case)

    def named_problem(self, kv_dtypes):
        return self._kernel.named_problem(kv_dtypes)

    def jit_specs(self, device, case):
        return self._kernel.jit_specs(device, case)

    def checked_output(self, inputs, out):
        return self._kernel.checked_output(inputs, out)

    def prepare(self, inputs: "Inputs") -> KernelFn:
        return self._kernel.prepare(inputs)

    def host_step(self, inputs: "Inputs") -> HostStep:
        return self.metadata(inputs, self._kernel)


def graph_buffer_refresh(inputs: "Inputs", kernel: Kernel | None = None) -> HostStep:
    """One launch that refreshes a CUDA graph's page table (the engine: one fused metadata kernel), and the
    longest KV length read from a host copy: no plan, no wait for the GPU."""
    import torch

    lens_host = inputs.seq_lens.cpu()
    table_buf = torch.empty_like(inputs.block_tables)

    def step():
        table_buf.copy_(inputs.block_tables, non_blocking=True)
        int(lens_host.max())

    return step


def host_to_gpu_copies(inputs: "Inputs", kernel: Kernel | None = None) -> HostStep:
    """The block table and KV lengths copied from pinned host buffers to the GPU, the longest length read on the
    host (vLLM's attention metadata for a decode-kernel batch; no plan)."""
    import torch

    table_host = inputs.block_tables.cpu().pin_memory()
    lens_host = inputs.seq_lens.cpu().pin_memory()
    table_buf = torch.empty_like(inputs.block_tables)
    lens_buf = torch.empty_like(inputs.seq_lens)

    def step():
        table_buf.copy_(table_host, non_blocking=True)
        lens_buf.copy_(lens_host, non_blocking=True)
        int(lens_host.max())

    return step


def in_turn(*makers: Callable[["Inputs"], HostStep]) -> Callable[["Inputs", Kernel], HostStep]:
    """A route's metadata made of several host steps run one after the other (vLLM: its copies, then a schedule)."""
    def metadata(inputs: "Inputs", kernel: Kernel | None = None) -> HostStep:
        steps = [make(inputs) for make in makers]

        def step():
            for one in steps:
                one()

        return step

    return metadata


def replan(inputs: "Inputs", kernel: Kernel) -> HostStep:
    """The kernel's plan() again, as prepare() made it (from host offsets: no wait for the GPU)."""
    return kernel.replan


def flashmla_schedule(inputs: "Inputs", kernel: Kernel | None = None) -> HostStep:
    """FlashMLA's per-step metadata in an engine's CUDA-graph replay: the page table refreshed and the split-KV
    schedule made by get_mla_decoding_metadata (a GPU kernel launched from the host, no wait)."""
    from kbench.kernels.flashmla import load_flash_mla

    flash_mla = load_flash_mla()[0]
    c, pb = inputs.case, inputs.padded
    refresh = graph_buffer_refresh(inputs)
    heads = c.num_qo_heads

    def step():
        refresh()
        flash_mla.get_mla_decoding_metadata(pb.seq_lens, pb.q_len * heads, 1, heads,
                                            is_fp8_kvcache=c.kv_dtype == "fp8", use_legacy=True)

    return step
