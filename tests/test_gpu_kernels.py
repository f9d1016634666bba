"""On a GPU: every available kernel computes draft-extend attention correctly, through the sweep engine.

Shapes cover HND and NHD, page sizes 16/32/64, partial last pages, GQA 4 and 8, head_dim 64 and 128,
bf16 and fp16, an fp8 KV cache, and q_len from 1 to 16. Run on the H200 with `pytest -m gpu`.
"""
import pytest

from kbench.models import MODELS
from kbench.scenario import Scenario, Timing
from kbench.sweep import run_sweep

pytestmark = pytest.mark.gpu

FAST = Timing(spread_target=0.05, budget_s=0.05, min_samples=3, max_samples=20, warmup_ms=2)

# Each shape names the kernels it checks, to keep first-use JIT compiles (minutes each for fmha-v2 and
# fa3) to the variants that matter: all kernels at the sweep's dtype/head_dim, the cheap ones elsewhere.
ALL = ["all"]
CHEAP = ["trtllm-decode", "decode-wrapper", "fa2-prefill"]
SHAPES = {
    "llama8b-bf16-p16-partial-pages": dict(heads=MODELS["llama3-8b"], batch_size=[3], q_len=[1, 3, 8], kv_len=[700],
                                           page_size=[16], dtype=["bf16"], kernels=ALL),
    "llama8b-bf16-nhd-p64": dict(heads=MODELS["llama3-8b"], batch_size=[2], q_len=[4], kv_len=[1000],
                                 page_size=[64], kv_layout=["NHD"], dtype=["bf16"], kernels=CHEAP),
    "70b-tp8-fp16-p32": dict(heads=MODELS["llama3-70b-tp8"], batch_size=[2], q_len=[5, 16], kv_len=[1500],
                             page_size=[32], dtype=["fp16"], kernels=CHEAP),
    "gqa8-d64-bf16-p64": dict(heads=MODELS["gqa8-d64"], batch_size=[2], q_len=[2], kv_len=[300], page_size=[64],
                              dtype=["bf16"], kernels=CHEAP),
    "fp8-kv": dict(heads=MODELS["llama3-8b"], batch_size=[2], q_len=[4], kv_len=[1024], page_size=[64],
                   dtype=["bf16"], kv_dtype=["fp8"], kernels=["trtllm-decode", "decode-wrapper"]),
}

# what must run (not be skipped) on each architecture
EXPECTED_OK = {
    90: {"trtllm-decode", "decode-wrapper", "trtllm-fmha-v2", "fa2-prefill", "fa3-prefill"},
    100: {"trtllm-decode", "decode-wrapper", "trtllm-context", "fa2-prefill"},
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_kernel_matches_reference(name, tmp_path):
    sc = Scenario(name=name, timing=FAST, **SHAPES[name])
    res = run_sweep(sc.validate(), out_dir=tmp_path)
    rows = res.rows
    bad = rows[rows["status"].isin(["wrong", "failed"])]
    assert bad.empty, bad[["kernel", "case_id", "status", "reason"]].to_string()
    ok = rows[rows["status"] == "ok"]
    assert (ok["rel_err"] <= ok["tolerance"]).all()
    assert (ok["median_us"] > 0).all() and (ok["timer"] == "cuda-graph").all()
    expected = EXPECTED_OK.get(res.device.sm, set())
    if SHAPES[name]["kernels"] != ALL:
        expected &= set(SHAPES[name]["kernels"])
    ran = set(ok["kernel"])
    assert expected <= ran, f"expected {expected - ran} to run; rows: {rows[['kernel', 'status', 'reason']].drop_duplicates().to_string()}"
    ctx = rows[rows["kernel"] == "trtllm-context"]
    if res.device.sm == 90 and not ctx.empty:
        assert (ctx["status"] == "skipped").all() and ctx["reason"].str.contains("SM90").all()


def test_graph_timer_agrees_with_event_loop_on_a_large_copy():
    """For an op far above launch overhead, graph replay and a plain event-timed loop agree within 3%."""
    import torch

    from kbench.kernels.timer import GraphTimer, StopRule

    src = torch.randn(64 << 20, device="cuda")
    dst = torch.empty_like(src)
    m = GraphTimer(StopRule(0.005, 2.0, 10, 200)).measure(lambda i: dst.copy_(src))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        dst.copy_(src)
    a.record()
    for _ in range(50):
        dst.copy_(src)
    b.record()
    b.synchronize()
    loop_us = a.elapsed_time(b) * 1000 / 50
    assert m.timer == "cuda-graph"
    assert abs(m.median_us - loop_us) / loop_us < 0.03, (m.median_us, loop_us)
