"""On a GPU: every available kernel computes draft-extend attention correctly, through the sweep engine.

Shapes cover HND and NHD, page sizes 16/32/64, partial last pages, GQA 4 and 8, head_dim 64 and 128,
bf16 and fp16, an fp8 KV cache, q_len from 1 to 16, and realistic batches (ragged q, per-request KV,
window, sinks, max_seq_len context:N). Run on the H200 with `pytest -m gpu`.
"""
import pytest

from kbench.cases.models import MODELS
from kbench.cases.scenario import Scenario, Timing
from kbench.engine.sweep import run_sweep

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
    # realistic batches (#13): ragged q (padded, ragged and context kernels), per-request KV, window, sinks,
    # a page table as wide as a 128k context
    "realistic-llama-ragged": dict(heads=MODELS["llama3-8b"], batch_size=[5], q_len=[4], kv_len=[700],
                                   page_size=[16], dtype=["bf16"], kv_dist=["fixed", "lognormal:1.0"],
                                   q_dist=["accept:0.6"], window_left=[-1, 100],
                                   kernels=["trtllm-decode", "trtllm-decode-ragged", "decode-wrapper", "fa2-prefill",
                                            "trtllm-fmha-v2"]),
    "realistic-gpt-oss": dict(heads=MODELS["gpt-oss"], batch_size=[3], q_len=[3], kv_len=[600], page_size=[64],
                              dtype=["bf16"], q_dist=["fixed", "accept:0.7"], window_left=[-1, 128],
                              sinks=["on", "off"], max_seq_len=["tight", "context:131072"],
                              kernels=["trtllm-decode", "trtllm-decode-ragged", "fa2-prefill"]),
}

# what must run (not be skipped) on each architecture
EXPECTED_OK = {
    90: {"trtllm-decode", "trtllm-decode-ragged", "decode-wrapper", "trtllm-fmha-v2", "fa2-prefill", "fa3-prefill"},
    100: {"trtllm-decode", "trtllm-decode-ragged", "decode-wrapper", "trtllm-context", "fa2-prefill"},
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
    if SHAPES[name].get("q_dist", ["fixed"]) == ["fixed"]:
        expected.discard("trtllm-decode-ragged")  # it runs ragged batches only
    ran = set(ok["kernel"])
    assert expected <= ran, f"expected {expected - ran} to run; rows: {rows[['kernel', 'status', 'reason']].drop_duplicates().to_string()}"
    ctx = rows[rows["kernel"] == "trtllm-context"]
    if res.device.sm == 90 and not ctx.empty:
        assert (ctx["status"] == "skipped").all() and ctx["reason"].str.contains("SM90").all()


def test_graph_timer_agrees_with_event_loop_on_a_large_copy():
    """For an op far above launch overhead, graph replay and a plain event-timed loop agree within 3%."""
    import torch

    from kbench.timing.timer import GraphTimer, StopRule

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


def test_out_of_bounds_write_costs_one_row_under_isolation(tmp_path):
    """A real CUDA fault (test-oob-write stores 1 TiB past its input): a failed row with the CUDA error,
    a restarted worker, and every other kernel of the same and the next case measured."""
    from click.testing import CliRunner

    from kbench.cli.main import cli
    from kbench.runs.store import load_run

    r = CliRunner().invoke(cli, ["sweep", "--batch-size", "2", "--q-len", "2,4", "--kv-len", "256", "--budget", "0.05",
                                 "--kernels", "decode-wrapper,test-oob-write,fa2-prefill", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    run = load_run(next(tmp_path.iterdir()))
    rows = run.rows
    oob = rows[rows.kernel == "test-oob-write"]
    assert len(oob) == 2 and (oob.status == "failed").all()
    assert oob.reason.str.contains("illegal memory access").all(), oob.reason.tolist()
    others = rows[rows.kernel != "test-oob-write"]
    assert len(others) == 4 and (others.status == "ok").all(), others[["kernel", "status", "reason"]]
    assert run.manifest["isolated"] and run.manifest["worker_restarts"] == 2


def test_fenced_graph_timing_matches_one_call_at_a_time():
    """xqa launches with PDL: back to back in a graph, a call overlaps its predecessor. kbench's fence
    between calls gives the time of one call alone (CUPTI over synchronised calls), within 5%."""
    import time

    from kbench.cases.case import Case
    from kbench.timing.probe import probe_device
    from kbench.kernels.inputs import build_inputs
    from kbench.kernels.registry import get_kernel
    from kbench.timing.timer import GraphTimer, StopRule
    from kbench.engine.placement import copies_for
    from kbench.engine.validate import cupti_us_per_call

    h = MODELS["llama3-8b"]
    case = Case(16, 4, 4096, h.num_qo_heads, h.num_kv_heads, h.head_dim, 64)
    dev = probe_device(0)
    inputs = build_inputs(case, "cuda", copies=copies_for(case, dev, Timing()))
    fn = get_kernel("trtllm-decode").prepare(inputs)
    fn(0)
    m = GraphTimer(StopRule(0.01, 2.0, 10, 400, 0.1)).measure(fn, len(inputs.copies))
    time.sleep(0.15)
    alone, _ = cupti_us_per_call(fn, len(inputs.copies), 20, synced=True)
    assert m.fence_us > 0
    assert abs(m.median_us / alone - 1) < 0.05, (m.median_us, alone)
