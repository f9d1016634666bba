"""Issue 52: a gpt-oss line (sinks on every layer, a 128-token window on every other one; fa3 on SM90) is priced on
rows with sinks and window, half of its layers on each kind, verify only (its EAGLE3 draft is another model); a run
without those rows is refused with the reason and the run beside it that has them; a backend without a sinks and
window route is refused, never priced as another. Expected prices from recommend_synth's formulas."""
from __future__ import annotations


import pytest
from recommend_synth import DECODE, VFA3_SGL, known_rows, known_run, recommend_cli, recommend_json, t_route

OSS = ("python -m sglang.launch_server --model-path openai/gpt-oss-120b --speculative-algorithm EAGLE3 "
       "--speculative-draft-model-path nvidia/gpt-oss-120b-Eagle3 --speculative-eagle-topk 1 "
       "--speculative-num-steps 3 --speculative-num-draft-tokens 4")
SLIDING = 0.25  # the sliding layers' rows: a quarter of the full layers' time (window 128 of 4096 keys)
LAYERS = 36  # gpt-oss-120b
HOST_FA3 = 4.0  # recommend_synth.HOST["sglang-fa3"]


def _rows(page: int):
    out = []
    for w in (-1, 128):
        rows = known_rows(bss=(16,), qs=(4,), kvs=(4096,), kernels=(VFA3_SGL, "sglang-fa3", DECODE, "sglang-trtllm-mha"),
                          heads=(64, 8, 64), page_size=page, window_left=w, sinks="on")
        for r in rows:
            if w >= 0:
                for f in ("median_us", "p25_us", "p75_us", "iqr_us"):
                    setattr(r, f, getattr(r, f) * SLIDING)
        out += rows
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("oss")
    oss = known_run(d / "gpt-oss", _rows(1) + _rows(64))
    llama = known_run(d / "llama", known_rows(bss=(16,), qs=(4,), kvs=(4096,), page_size=1))
    return oss, llama


def test_gpt_oss_verify_is_half_full_and_half_sliding_layers_with_sinks(runs):
    oss, _ = runs
    j = recommend_json(oss, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "gpt-oss", "--current", OSS)
    s = {x["id"]: x for x in j["settings"]}
    full, slide = t_route("sglang-fa3", 16, 4, 4096), SLIDING * t_route("sglang-fa3", 16, 4, 4096)
    # SGLang's overlap: each layer kind's half of the step is max(host, its GPU work), weighted by its share
    want = 0.5 * max(HOST_FA3, LAYERS * full) + 0.5 * max(HOST_FA3, LAYERS * slide)
    assert s["fa3"]["per_step_us"] == pytest.approx(want)
    assert want == pytest.approx(LAYERS / 2 * (full + slide))  # GPU-bound here: 18 full + 18 sliding layers
    assert s["fa3"]["routes"]["verify"] == "sglang-fa3"
    r = recommend_cli(oss, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "gpt-oss",
                      "--current", OSS)
    out = " ".join(r.output.split())
    assert "you run: fa3" in out and "half full and half sliding (window 128) layers" in out
    assert "its EAGLE3 draft (a model of its own) is not priced" in out


def test_a_run_without_gpt_oss_rows_names_the_run_that_has_them(runs):
    oss, llama = runs
    r = recommend_cli(llama, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--current", OSS)
    assert r.exit_code == 2 and "Traceback" not in r.output
    out = " ".join(r.output.split())
    assert "64 q / 8 KV heads per GPU" in out and str(oss) in out and "not priced" in out


def test_a_run_with_full_layers_only_is_refused_naming_the_sliding_layers(runs, tmp_path):
    oss, _ = runs
    full = known_run(tmp_path / "full", [r for r in _rows(1) if r.window_left < 0])
    r = recommend_cli(full, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--current", OSS)
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "no rows of its sliding layers, window 128 (sinks on, window 128)" in out and "not priced" in out


def test_a_gpt_oss_backend_without_a_sinks_route_is_refused_never_priced_as_another(runs):
    oss, _ = runs
    r = recommend_cli(oss, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--current",
                      OSS + " --attention-backend triton")
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "gpt-oss runs learned attention sinks" in out and "no such route of triton" in out
