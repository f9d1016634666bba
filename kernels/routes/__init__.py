"""Routes: kbench kernels as an engine runs them, each with the host work the engine redoes every step.

One module per engine (sglang.py, vllm.py); what they share is in base.py. A route is registered beside the
kernels (kbench.kernels.registry), so sweep, report, gate and select treat it as one; `kbench recommend` prices an
engine setting by the routes kbench/recommend/engines.toml names for it.
"""
from __future__ import annotations


def all_routes() -> tuple:
    from kbench.kernels.routes import draft_decode, sglang, vllm

    return sglang.ROUTES + vllm.ROUTES + draft_decode.ROUTES
