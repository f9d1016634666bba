"""The one piece of global state: which kernels exist. Order is the order of the summary table."""
from __future__ import annotations

from kbench.errors import BadInput
from kbench.kernels.base import Kernel

_REGISTRY: dict[str, Kernel] = {}


def register(kernel: Kernel) -> Kernel:
    _REGISTRY[kernel.name] = kernel
    return kernel


def _load() -> None:
    if _REGISTRY:
        return
    from kbench.kernels.decode_wrapper import DecodeWrapper
    from kbench.kernels.fa_prefill import FaPrefill
    from kbench.kernels.fault import OutOfBoundsWrite
    from kbench.kernels.flashinfer_mla import FlashInferMla
    from kbench.kernels.flashmla import FlashMla
    from kbench.kernels.reference import ReferenceKernel
    from kbench.kernels.routes import all_routes
    from kbench.kernels.trtllm_context import TrtllmContext
    from kbench.kernels.trtllm_decode import TrtllmDecode
    from kbench.kernels.trtllm_fmha_v2 import TrtllmFmhaV2
    from kbench.kernels.trtllm_gen_mla import TrtllmGenMla
    from kbench.kernels.vllm_fa3 import VllmFa3
    from kbench.kernels.vllm_fa3_mla import VllmFa3Mla

    # GQA kernels, then the MLA ones (each kind skips the other's cases), the engines' routes, then the oracle
    for k in (TrtllmDecode(), TrtllmDecode(ragged=True), DecodeWrapper(), TrtllmContext(), TrtllmFmhaV2(), FaPrefill("fa2"),
              FaPrefill("fa3"), VllmFa3("vllm"), VllmFa3("sglang"), FlashMla(), TrtllmGenMla(), FlashInferMla("fa3"),
              FlashInferMla("fa2"), VllmFa3Mla("vllm"), VllmFa3Mla("sglang"), *all_routes(), ReferenceKernel(), OutOfBoundsWrite()):
        register(k)


def kernel_names() -> list[str]:
    _load()
    return list(_REGISTRY)


def all_kernels() -> list[Kernel]:
    _load()
    return list(_REGISTRY.values())


def get_kernel(name: str, where: str = "") -> Kernel:
    _load()
    if name not in _REGISTRY:
        raise BadInput(f"{where + ': kernels: ' if where else ''}unknown kernel {name!r} (known: {', '.join(_REGISTRY)}; "
                       "groups: all, routes, eager-routes)")
    return _REGISTRY[name]


def select(names: list[str], where: str = "") -> list[Kernel]:
    """'all' means every registered kernel but the routes and the test-only ones; 'routes' every route (kernels as
    the engines call them under CUDA graphs, kbench.kernels.routes); 'eager-routes' their eager twins
    (kbench.kernels.routes.eager: the engines without CUDA graphs); otherwise the named ones (a test-only kernel too, added to 'all'
    when named beside it), in registry order. where: the scenario's source, named in the error for an unknown name."""
    _load()
    for n in names:
        if n not in GROUPS:
            get_kernel(n, where)
    return [k for k in _REGISTRY.values()
            if k.name in names or ("all" in names and not k.test_only and not is_route(k))
            or ("routes" in names and is_route(k) and not is_eager(k))
            or ("eager-routes" in names and is_eager(k))]


GROUPS = ("all", "routes", "eager-routes")  # names that select several kernels


def is_eager(kernel: Kernel) -> bool:
    """An eager route (kbench.kernels.routes.eager): its own group, timed without CUDA graphs."""
    return bool(getattr(kernel, "eager", False))


def is_route(kernel: Kernel) -> bool:
    from kbench.kernels.routes.base import Route

    return isinstance(kernel, Route)
