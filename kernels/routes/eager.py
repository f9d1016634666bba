"""Eager routes: each engine route as it runs without CUDA graphs (SGLang `--disable-cuda-graph`, vLLM
`--enforce-eager`), kbench route `<route>-eager`.

Without graphs the engine launches every layer's attention from Python, one layer after the other: the backend's
wrapper call (FlashInfer's run(), FA3's flash_attn_with_kvcache, xqa's decode call) and its launch are paid on the
host every layer, and when they take longer than the kernel the GPU waits for them. An eager route is the same
kernel with the same arguments and the same per-step host work (`host_step`: FlashInfer's plan() once per step,
the metadata copies) as its graph route, with two differences:
- it is timed by the eager timer (kbench.timing.timer.GraphTimer.measure(eager=True): the calls launched one after
  the other from Python, no graph, no fences; each sample is the events' time of the launches / calls, so the row's
  median is max(the kernel, the host work of one layer's call) as back-to-back layers pay it; its row's `timer` is
  "eager");
- a FlashInfer wrapper is built without CUDA-graph buffers (the engine's eager wrappers: SGLang's non-graph
  `BatchPrefillWithPagedKVCacheWrapper`, flashinfer_backend.py:260-300).
SGLang's fast verify plan is installed at graph capture only (flashinfer_backend.py:888-902), so
`sglang-fi-verify-hostplan` has no eager twin: an eager server plans with FlashInfer's plan() (`sglang-fi-verify-eager`).

What an eager route does not time: the other layers' launches between two attention layers (projections, MLP,
norms; `kbench layers` times them under CUDA graphs), and a backend's eager per-step metadata where it differs from
the graph route's refresh (SGLang fa3 builds its metadata with a few torch ops per step eagerly; kbench times the
graph route's one refresh): `kbench recommend` says so beside an eager price.

The eager routes are their own kernels (the `eager-routes` group), never in `routes`: graph runs, reports and gates
are unchanged.
"""
from __future__ import annotations

import copy

from kbench.kernels.routes.base import PagedPrefillRoute, Route

SUFFIX = "-eager"


def eager_name(route: str) -> str:
    """The eager twin's kernel name of a graph route ('sglang-fi-verify' -> 'sglang-fi-verify-eager')."""
    return route + SUFFIX


def eager_route_name(route: str) -> str:
    """The route an eager server runs for a step the graph server runs on `route`: its eager twin; SGLang's fast
    verify plan is capture-only, so without graphs its verify is FlashInfer's plan() route's."""
    return eager_name("sglang-fi-verify" if route == "sglang-fi-verify-hostplan" else route)


def is_eager(kernel) -> bool:
    return bool(getattr(kernel, "eager", False))


def has_eager_twin(route: Route) -> bool:
    """SGLang's fast verify plan is graph-only (see the module doc)."""
    return not getattr(route, "host_plan", False)


def eager_twin(route: Route) -> Route:
    """The route launched eagerly: a copy with its own name (and its own kernel object, whose prepare() state it
    keeps), a FlashInfer wrapper without CUDA-graph buffers, timed by the eager timer."""
    r = copy.copy(route)
    r.name = eager_name(route.name)
    r.eager = True
    if isinstance(r, PagedPrefillRoute):
        r.cuda_graph = False
    if hasattr(r, "with_own_kernel"):
        r.with_own_kernel()
    r.description = (route.description + "; run eagerly (no CUDA graph): every layer's call launched from Python, "
                     "timed as launched back to back")
    r.host_work = route.host_work + " (once per step, as under graphs)"
    return r


def eager_routes(routes: tuple) -> tuple:
    return tuple(eager_twin(r) for r in routes if has_eager_twin(r))
