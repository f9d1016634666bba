"""Synthetic sweep runs for the recommend tests: trtllm-decode and fa2-prefill with times from known formulas, so
the tests compute the expected prices independently of kbench's code."""
from __future__ import annotations

import json

from pathlib import Path

from click.testing import CliRunner
from report_synth import case, row, write_run

DECODE, FA2, FA3 = "trtllm-decode", "fa2-prefill", "fa3-prefill"
BS, QS, KVS = (1, 8), (2, 4, 8), (1024, 4096)
B200 = {"name": "NVIDIA B200", "sm": 100}


def t_decode(bs: int, q: int, kv: int) -> float:
    """The decode kernel: linear in KV read, twice as slow past q 4 (its step)."""
    return bs * kv / 1024 * (1.0 if q <= 4 else 2.0)


def t_fa2(bs: int, q: int, kv: int) -> float:
    """The context kernel: slower at batch 1, faster at batch 8, flat in q."""
    return bs * kv / 1024 * (1.5 if bs == 1 else 0.8)


def t_fa3(bs: int, q: int, kv: int) -> float:
    return 3 * t_fa2(bs, q, kv)


def t_vfa3(bs: int, q: int, kv: int) -> float:
    """FlashAttention-3 (the engines' Hopper default): between the decode kernel and fa2 at batch 1."""
    return bs * kv / 1024 * (1.2 if bs == 1 else 0.9)


VFA3, VFA3_SGL = "vllm-fa3", "vllm-fa3-sgl-call"
FLASHMLA, FI_MLA = "flashmla", "flashinfer-mla-fa3"
FA3_MLA, FA3_MLA_SGL = "vllm-fa3-mla", "vllm-fa3-mla-sgl-call"
TIMES = {DECODE: t_decode, FA2: t_fa2, FA3: t_fa3, VFA3: t_vfa3, VFA3_SGL: t_vfa3,
         FLASHMLA: lambda bs, q, kv: bs * kv / 1024 * 0.5 * q, FI_MLA: lambda bs, q, kv: bs * kv / 1024 * 0.6 * q,
         FA3_MLA: lambda bs, q, kv: bs * kv / 1024 * 0.55 * q, FA3_MLA_SGL: lambda bs, q, kv: bs * kv / 1024 * 0.56 * q}

# the engines' routes (kbench.kernels.routes): the kernel each runs, a factor on its time (the custom mask's
# cost), and its host work per step in us (flat: the planner's cost barely moves with the batch)
ROUTE_OF = {"sglang-fi-verify": (FA2, 1.25), "sglang-fi-extend": (FA2, 1.0), "sglang-trtllm-mha": (DECODE, 1.0),
            "sglang-fi-verify-hostplan": (FA2, 1.25), "sglang-fa3": (VFA3_SGL, 1.0), "sglang-fa3-tree": (VFA3_SGL, 1.5), "vllm-fi-decode": (DECODE, 1.0), "vllm-fi-prefill": (FA2, 1.0),
            "vllm-fi-prefill-fa3": (FA3, 1.0),
            "vllm-flash-attn": (VFA3, 1.0), "sglang-flashmla": (FLASHMLA, 1.0), "sglang-fi-mla": (FI_MLA, 1.0),
            "vllm-flashmla": (FLASHMLA, 1.0), "sglang-fi-mla-extend": (FI_MLA, 1.0), "sglang-fa3-mla": (FA3_MLA_SGL, 1.0),
            "vllm-flash-attn-mla": (FA3_MLA, 1.0),
            # draft decode passes (kbench.kernels.routes.draft_decode), measured at q 1
            "sglang-fi-draft-decode": (FA2, 0.9), "sglang-trtllm-mha-draft": (DECODE, 1.0), "sglang-fa3-draft": (VFA3_SGL, 1.0)}
HOST = {"sglang-fi-verify": 50.0, "sglang-fi-extend": 12.0, "sglang-trtllm-mha": 4.0, "sglang-fa3": 4.0,
        "sglang-fi-verify-hostplan": 20.0, "sglang-fa3-tree": 6.0,
        "vllm-fi-decode": 3.0, "vllm-fi-prefill": 15.0, "vllm-fi-prefill-fa3": 15.0, "vllm-flash-attn": 8.0, "sglang-flashmla": 5.0,
        "sglang-fi-mla": 30.0, "vllm-flashmla": 6.0, "sglang-fi-mla-extend": 40.0, "sglang-fa3-mla": 4.0,
        "vllm-flash-attn-mla": 8.0, "sglang-fi-draft-decode": 25.0, "sglang-trtllm-mha-draft": 3.0,
        "sglang-fa3-draft": 3.0}
WAITS = {"sglang-fi-verify", "vllm-fi-prefill", "vllm-fi-prefill-fa3", "sglang-fi-draft-decode"}  # host work that waits for the GPU (never overlapped)
# SGLang routes of a backend that reads sequence lengths on the CPU: the overlap scheduler waits for the previous
# verify before preparing the step, so host work overlaps only the draft extend's GPU work
FENCED = {"sglang-fi-verify", "sglang-fi-extend", "sglang-fi-verify-hostplan", "sglang-fi-mla", "sglang-fi-mla-extend"}
ROUTES = tuple(ROUTE_OF)
HOST_CPU = {"cpus": 16, "cpu": "Synthetic Xeon"}


# an eager route (kbench.kernels.routes.eager: `<route>-eager`) costs per layer the larger of its kernel and the
# Python call that launches it (flat per route); its per-step host work and wait are its graph route's
EAGER = "-eager"
EAGER_LAUNCH = {"sglang-fi-verify": 20.0, "sglang-fi-extend": 20.0, "sglang-trtllm-mha": 80.0, "sglang-fa3": 90.0,
                "vllm-fi-decode": 85.0, "vllm-fi-prefill": 24.0, "vllm-flash-attn": 80.0}
for _r in list(ROUTE_OF):
    if _r != "sglang-fi-verify-hostplan":
        ROUTE_OF[_r + EAGER] = ROUTE_OF[_r]
        HOST[_r + EAGER] = HOST[_r]
WAITS |= {r + EAGER for r in WAITS}
FENCED |= {r + EAGER for r in FENCED}


def t_route(route: str, bs: int, q: int, kv: int) -> float:
    kernel, factor = ROUTE_OF[route]
    t = factor * TIMES[kernel](bs, q, kv)
    return max(t, EAGER_LAUNCH.get(route.removesuffix(EAGER), 50.0)) if route.endswith(EAGER) else t


def step_price(route: str, bs: int, q: int, kv: int, layers: int = 1, overlap: str = "max") -> float:
    """What one step costs, computed here from the formulas: host work + layers x the route's time, or their max
    when overlapped (host work that waits for the GPU always adds)."""
    gpu = layers * t_route(route, bs, q, kv)
    return max(HOST[route], gpu) if overlap == "max" and route not in WAITS else HOST[route] + gpu


def batch_price(routes: dict[str, str], bs: int, q: int, kv: int, layers: dict[str, int], overlap: str = "max") -> float:
    """One engine step (its phases: step -> route) computed here: host + GPU, or, overlapped, max(host work that
    does not wait for the GPU, GPU work) + the host work that does; an SGLang setting with a flashinfer route
    overlaps its host work with the draft extend's GPU work only; vLLM does a step's host work once when both
    phases share a route (its drafter reuses the target's metadata)."""
    gpu = sum(layers[st] * t_route(r, bs, q, kv) for st, r in routes.items())
    once = len(set(routes.values())) == 1 and all(r.startswith("vllm-") for r in routes.values())
    hosts = {st: (0.0 if once and st == "draft_extend" else HOST[r]) for st, r in routes.items()}
    free = sum(h for st, h in hosts.items() if routes[st] not in WAITS)
    waiting = sum(h for st, h in hosts.items() if routes[st] in WAITS)
    if overlap == "max" and set(routes.values()) & FENCED:
        verify = layers["verify"] * t_route(routes["verify"], bs, q, kv) if "verify" in routes else 0.0
        return verify + max(free, gpu - verify) + waiting
    return (max(free, gpu) if overlap == "max" else free + gpu) + waiting


def known_rows(bss=BS, qs=QS, kvs=KVS, kernels=None, **case_kw):
    kernels = kernels or (MLA_KERNELS if case_kw.get("attention") == "mla" else GQA_KERNELS)
    out = []
    for bs in bss:
        for q in qs:
            for kv in kvs:
                for k in kernels:
                    if k in ROUTE_OF:
                        r = row(k, case(bs, q, kv, **case_kw), t_route(k, bs, q, kv), rel=0.001,
                                path=PATHS_OF[ROUTE_OF[k][0]])
                        r.host_us, r.host_p25_us, r.host_p75_us = HOST[k], 0.95 * HOST[k], 1.05 * HOST[k]
                        r.host_cpus, r.host_cpu = HOST_CPU["cpus"], HOST_CPU["cpu"]
                    else:
                        r = row(k, case(bs, q, kv, **case_kw), TIMES[k](bs, q, kv), rel=0.001)
                    out.append(r)
    return out


PATHS_OF = {DECODE: "decode", FA2: "context", FA3: "context", VFA3: "decode", VFA3_SGL: "decode", FLASHMLA: "decode",
            FI_MLA: "context", FA3_MLA: "decode", FA3_MLA_SGL: "decode"}
EAGER_GQA = tuple(r + EAGER for r in EAGER_LAUNCH)
GQA_KERNELS = (DECODE, FA2, FA3, VFA3, VFA3_SGL, "sglang-fi-verify", "sglang-fi-extend", "sglang-trtllm-mha",
               "sglang-fa3", "vllm-fi-decode", "vllm-fi-prefill", "vllm-flash-attn")
MLA_KERNELS = (FLASHMLA, FI_MLA, FA3_MLA, FA3_MLA_SGL, "sglang-flashmla", "sglang-fi-mla", "sglang-fi-mla-extend",
               "sglang-fa3-mla", "vllm-flashmla", "vllm-flash-attn-mla")


def known_run(path: Path, rows=None, device: dict | None = None) -> Path:
    return write_run(path, rows if rows is not None else known_rows(),
                     **({"device": dict(device)} if device else {}))


def recommend_cli(*args):
    from kbench.cli.recommend_cmd import recommend_cmd

    return CliRunner().invoke(recommend_cmd, [str(a) for a in args], env={"COLUMNS": "250"})


def recommend_json(*args) -> dict:
    """recommend's --json answer (it must exit 0)."""
    r = recommend_cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def export_cli(*args):
    from kbench.cli.recommend_cmd import export_cmd

    return CliRunner().invoke(export_cmd, [str(a) for a in args])
