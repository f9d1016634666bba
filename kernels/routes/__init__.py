"""Routes: kbench kernels as an engine runs them, each with the host work the engine redoes every step.

One module per engine (sglang.py, vllm.py); what they share is in base.py. A route is registered beside the
kernels (kbench.kernels.registry), so sweep, report, gate and select treat it as one; `kbench recommend` prices an
engine setting by the routes kbench/recommend/engines.toml names for it.
"""
from __future__ import annotations


def all_routes() -> tuple:
    """The graph routes, then their eager twins (kbench.kernels.routes.eager)."""
    from kbench.kernels.routes import draft_decode, eager, sglang, vllm

    graph = sglang.ROUTES + vllm.ROUTES + draft_decode.ROUTES
    return graph + eager.eager_routes(graph)
