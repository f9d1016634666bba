"""The A/B check beside the prediction, and the workload file server-bench writes for it."""
from __future__ import annotations

import json
import math

import pytest
from recommend_synth import batch_price, known_run, recommend_cli
from test_gate_server import _run, server_row

from kbench.recommend.check import Measured, check_ab
from kbench.recommend.price import load_source
from kbench.recommend.settings import load_table
from kbench.recommend.workload import read_workload
from kbench.server.workload import case_lines, write_workload

CASES = ("bs1-in900-out33", "bs8-in3000-out33")


def workload_file(path, acc=4.0, q=4):
    """What server-bench writes for the two cases: 8 decoding steps each (32 tokens after the first / acc 4)."""
    lines = [{"kbench_workload": 1, "source": "test"}]
    for cid in CASES:
        bs, inp, out = (int(x.lstrip("bsinout")) for x in cid.split("-"))
        lines += case_lines({"case_id": cid, "batch_size": bs, "input_len": inp, "output_len": out,
                             "acc_length": acc, "spec_drafts": None, "spec_draft_tokens": None},
                            {"speculative_num_draft_tokens": q})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_case_lines_spread_the_steps_over_the_growing_kv():
    lines = case_lines({"case_id": "c", "batch_size": 8, "input_len": 1000, "output_len": 33, "acc_length": 4.0},
                       {"speculative_num_draft_tokens": 4})
    assert sum(x["weight"] for x in lines) == 8 and len(lines) == 4  # ceil(32 / 4) steps in 4 segments
    kvs = [x["kv_len"] for x in lines]
    assert kvs == sorted(kvs) and 1000 + 4 < kvs[0] and kvs[-1] <= 1000 + 33 + 4
    assert all(x["q_len"] == 4 and x["steps"] == ["verify", "draft_extend"] for x in lines)
    # vLLM: q from the counters; no speculation: q 1, verify only, one step per token
    v = case_lines({"case_id": "c", "batch_size": 1, "input_len": 64, "output_len": 9, "acc_length": 2.5,
                    "spec_drafts": 10.0, "spec_draft_tokens": 30.0}, {})
    assert v[0]["q_len"] == 4 and sum(x["weight"] for x in v) == math.ceil(8 / 2.5)
    plain = case_lines({"case_id": "c", "batch_size": 1, "input_len": 64, "output_len": 9, "acc_length": -1}, {})
    assert plain[0]["q_len"] == 1 and plain[0]["steps"] == ["verify"] and sum(x["weight"] for x in plain) == 8


def test_write_workload_reads_the_run_journal(tmp_path):
    run = _run(tmp_path / "sb", [server_row(CASES[0]), {**server_row(CASES[1]), "status": "failed"}])
    path = write_workload(run, {"speculative_num_draft_tokens": 3}, "sglang", "m")
    w = read_workload(path)
    assert {b.case for b in w.batches} == {CASES[0]} and all(b.q_len == 3 for b in w.batches)
    assert w.header["source"] == "kbench server-bench" and w.header["run"] == run.name
    empty = _run(tmp_path / "none", [{**server_row(CASES[0]), "status": "failed"}])
    assert write_workload(empty, {}) is None


def test_check_predicts_per_case_and_judges_agreement(tmp_path):
    src = load_source([known_run(tmp_path / "run")])
    wl = read_workload(workload_file(tmp_path / "w.jsonl"))
    eng = load_table().engine("sglang")
    meas = [Measured(CASES[0], 1.000, 0.700, "improvement"), Measured(CASES[1], 2.0, 2.0, "within-noise")]
    chk = check_ab(src, wl, eng, "flashinfer", "trtllm_mha", meas, "B is ...", 5.0,
                   layers={"verify": 32, "draft_extend": 1})
    c0, c1 = chk.cases
    # case 0: bs 1: every step priced at the bs-1 cells with each setting's routes (known formulas, kv nearest
    # 1024), the engine's overlap rule
    lines0 = [b for b in wl.batches if b.case == CASES[0]]
    layers = {"verify": 32, "draft_extend": 1}
    a0 = sum(b.weight * batch_price({"verify": "sglang-fi-verify", "draft_extend": "sglang-fi-extend"}, 1, 4, 1024,
                                    layers) for b in lines0)
    b0 = sum(b.weight * batch_price({"verify": "sglang-trtllm-mha", "draft_extend": "sglang-trtllm-mha"}, 1, 4, 1024,
                                    layers) for b in lines0)
    assert (c0.attention_a_us, c0.attention_b_us) == (pytest.approx(a0, rel=1e-4), pytest.approx(b0, rel=1e-4))
    assert c0.predicted_saving_ms > 0 and c0.measured_saving_ms == pytest.approx(300.0)
    assert c0.agrees(5.0) == ("yes" if c0.predicted_pct_of_latency > 5 else "no")
    # case 1: bs 8, where the decode route is cheaper still (the verify route's custom mask costs 1.25x fa2)
    assert c1.attention_b_us < c1.attention_a_us and c1.predicted_saving_ms > 0
    assert c1.agrees(5.0) == ("yes" if abs(c1.predicted_pct_of_latency) <= 5 else "no")


def test_cli_ab_section_beside_the_prediction(tmp_path):
    src = known_run(tmp_path / "sweep")
    a = _run(tmp_path / "a", [server_row(c, seed=1) for c in CASES])
    b = _run(tmp_path / "b", [server_row(CASES[0], seed=2, scale={"latency": 0.8, "output_throughput": 1.25}),
                              server_row(CASES[1], seed=3)])
    wl = workload_file(tmp_path / "w.jsonl")
    md = tmp_path / "rec.md"
    r = recommend_cli(src, "--engine", "sglang", "--workload", wl, "--ab", a, b, "--ab-settings",
                      "flashinfer,trtllm_mha", "--verify-layers", "32", "--markdown", md)
    assert r.exit_code == 0, r.output
    text = md.read_text()
    assert "### Check against the engine: A = `flashinfer`, B = `trtllm_mha`" in text
    # the gate's one verdict (#46): per case class, the metrics that moved
    assert (f"**Measured (kbench gate on the two server-bench runs):** B is faster in the decode-heavy case "
            f"({CASES[0]}: latency -20.0%, output_throughput +25.0%)") in text
    # cells HTML-escaped as every markdown cell (#48): "->" renders as written
    assert f"| {CASES[0]} | 2,000.0 -&gt; 1,600.0 ms | improvement |" in text
    r = recommend_cli(src, "--engine", "sglang", "--workload", wl, "--ab", a, b, "--ab-settings", "flashinfer,triton")
    assert r.exit_code == 2 and "triton cannot be priced" in r.output
    r = recommend_cli(src, "--engine", "sglang", "--workload", wl, "--ab", a, b)
    assert r.exit_code == 2 and "go together" in r.output
    r = recommend_cli(src, "--engine", "sglang", "--batch-size", "1", "--q-len", "4", "--kv-len", "1024",
                      "--ab", a, b, "--ab-settings", "flashinfer,trtllm_mha")
    assert r.exit_code == 2 and "names no server-bench case" in r.output


def test_gpu_script_cpu_side(tmp_path):
    """tests/gpu/engine_routes.py: the chain mask is SGLang's bottom-right causal chain; without CUDA it says so."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("engine_routes", "tests/gpu/engine_routes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = mod.chain_mask(2, 3, 5, "cpu").reshape(2, 3, 5)
    want = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m[0], want) and torch.equal(m[1], want)
    assert mod.version_key("0.7.2.post1") < mod.version_key("0.7.4")
    if not torch.cuda.is_available():
        assert mod.main(["--out", str(tmp_path)]) == 2
