"""Issue 53: the whole step in the server's terms (kbench.recommend.step, kbench layers, the draft-decode routes).

The expected figures are computed here from the synthetic formulas (recommend_synth's route times, layers_synth's
part times), never read back from kbench's own arithmetic."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from layers_synth import t_part, write_layers_run
from recommend_synth import (GQA_KERNELS, HOST, batch_price, known_rows, known_run, recommend_cli, recommend_json,
                             t_route)
from test_recommend_resolve import sglang_resolve  # noqa: F401 - SGLang 0.5.23's own resolution venv (fixture)

DRAFT_ROUTES = ("sglang-fi-draft-decode", "sglang-trtllm-mha-draft", "sglang-fa3-draft")
LINE = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE "
        "--speculative-draft-model-path yuhuili/EAGLE-LLaMA3.1-Instruct-8B --speculative-eagle-topk 1 "
        "--speculative-num-steps 3 --speculative-num-draft-tokens 4 --attention-backend flashinfer")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("whole")
    rows = known_rows(bss=(1, 16, 64), qs=(1, 4), kvs=(4096,), kernels=GQA_KERNELS + DRAFT_ROUTES, page_size=1)
    return known_run(d / "routes", rows), write_layers_run(d / "layers")


def expected(setting_routes: dict, draft_route: str, bs: int, q: int, kv: int, waits: bool) -> dict:
    """The whole step computed from the formulas: a topk-1 chain of q tokens (steps q - 1, passes q - 2)."""
    att = batch_price(setting_routes, bs, q, kv, {"verify": 32, "draft_extend": 1})
    other = 32 * t_part("target-layer", bs * q) + t_part("target-lm-head", bs * q)
    other += t_part("draft-layer", bs * q) + t_part("draft-lm-head", bs)
    passes = q - 2
    d_model = passes * (t_part("draft-layer", bs) + t_part("draft-lm-head", bs))
    d_att = passes * t_route(draft_route, bs, 1, kv)
    d_host = passes * HOST[draft_route] if waits else 0.0
    return dict(att=att, other=other, d_model=d_model, d_att=d_att, d_host=d_host,
                total=att + other + d_model + d_att + d_host)


def test_whole_step_arithmetic_against_the_formulas(runs):
    routes, layers = runs
    j = recommend_json(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
              "--layers", layers, "--accept-length", "2.5")
    steps = {s["setting"]: s for s in j["whole_step"]["steps"]}
    fi = expected({"verify": "sglang-fi-verify", "draft_extend": "sglang-fi-extend"}, "sglang-fi-draft-decode",
                  16, 4, 4096, waits=True)
    got = steps["flashinfer"]
    assert got["attention_us"] == pytest.approx(fi["att"])
    assert got["other_layers_us"] == pytest.approx(fi["other"])
    assert got["draft_passes"] == 2
    assert got["draft_model_us"] == pytest.approx(fi["d_model"])
    assert got["draft_attention_us"] == pytest.approx(fi["d_att"])
    assert got["draft_host_us"] == pytest.approx(fi["d_host"])
    assert got["total_us"] == pytest.approx(fi["total"])
    assert got["tokens_per_s"] == pytest.approx(16 * 2.5 / (fi["total"] * 1e-6))
    best = j["best"]["id"]
    assert best != "flashinfer" and best in steps
    b = steps[best]
    sw = j["whole_step"]["switch"]
    assert sw["from"] == "flashinfer" and sw["to"] == best
    assert sw["share_of_step"] == pytest.approx((fi["total"] - b["total_us"]) / fi["total"])
    assert sw["attention_share"] == pytest.approx((fi["att"] - b["attention_us"]) / fi["att"])
    # the step whole dilutes the attention's saving: the share of the step is below the attention's share
    assert 0 < sw["share_of_step"] < sw["attention_share"]


def test_the_answer_prints_the_step_and_tokens_per_second(runs):
    routes, layers = runs
    r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
                      "--layers", layers, "--accept-length", "2.5")
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "the whole step, us (llama3-8b" in out
    assert "acceptance --accept-length 2.5" in out
    # the headline (the lines before the dim context line) carries the step, its saving and tokens per second
    head = " ".join(" ".join(r.output.split("sglang 0.5.23 on ")[0].split()).split())
    j = recommend_json(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current",
              LINE, "--layers", layers, "--accept-length", "2.5")
    steps = {s["setting"]: s for s in j["whole_step"]["steps"]}
    sw = j["whole_step"]["switch"]
    assert head.startswith("you run: flashinfer")
    assert f"the whole step {steps['flashinfer']['total_us']:,.1f} us, {steps['flashinfer']['tokens_per_s']:,.0f} " \
           "tokens/s" in head
    assert f"the whole step {steps[sw['to']]['total_us']:,.1f} us, {steps[sw['to']]['tokens_per_s']:,.0f}" in head
    assert (f"saves {sw['saving_us']:,.1f} us of a {sw['step_from_us']:,.1f} us step: {sw['share_of_step']:.1%} of the "
            f"whole step (attention alone: {sw['attention_share']:.1%}), {sw['tokens_per_s_ratio']:.2f}x tokens/s") in head
    r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
                      "--layers", layers)
    assert r.exit_code == 0, r.output
    head = " ".join(r.output.split("sglang 0.5.23 on ")[0].split())
    assert "tokens/s needs the acceptance: --accept-length N, or a server-bench run of this server" in head
    assert "of the whole step" in head and "tokens/s (" not in head.split("tokens/s needs")[0].split("saves")[0]


def test_without_layers_the_saving_says_it_is_attentions_share_only(runs):
    """No --layers: the saving in the headline is attention's share, said so with how to get the step."""
    routes, _ = runs
    r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b",
                      "--current", LINE)
    assert r.exit_code == 0, r.output
    save = next(x for x in r.output.splitlines() if x.startswith("  saves"))
    assert save.endswith("of attention alone (whole step: --layers RUN)") and len(save) <= 100, save
    assert "the whole step" not in r.output and "tokens/s" not in r.output
    ds = Path(__file__).resolve().parents[1] / "results" / "baselines" / "h100-deepseek-mtp-kv4096-32768"
    r = recommend_cli(ds, "--engine", "sglang", "--batch-size", 16, "--q-len", 4, "--kv-len", 4096, "--kv-dtype", "bf16",
                      "--verify-layers", 61)  # no --current: the default's saving (README's example), said the same way
    assert r.exit_code == 0, r.output
    assert ("switching saves 1,147.7 us per step, 15.1% of attention alone (whole step: --layers RUN)"
            in " ".join(r.output.split()))


def test_markdown_carries_the_same_headline_and_the_whole_step(runs, tmp_path):
    """--markdown: the headline of the screen (you run / set / saves / flags, the step and tokens/s), the whole-step
    block, the priced settings only (the refused ones one line per reason) -- the screen's short form."""
    routes, layers = runs
    md = tmp_path / "rec.md"
    args = (routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current",
            LINE, "--layers", layers, "--accept-length", "2.5")
    r = recommend_cli(*args, "--markdown", md)
    assert r.exit_code == 0, r.output
    text = md.read_text()
    screen = r.output.split("sglang 0.5.23 on ")[0]
    for line in screen.splitlines():
        if line.startswith(("set: ", "flags: ")) or not line.strip():
            continue
        assert line.strip()[:40].replace("->", "-&gt;") in " ".join(text.split()) or line.strip()[:40] in text, line
    flat = " ".join(text.split())
    assert "**Set:**" in text and "```sh\npython -m sglang.launch_server" in text
    assert "of the whole step (attention alone:" in flat and "tokens/s" in flat
    assert "**the whole step, us (llama3-8b" in text and "tokens/s = batch 16 x 2.50 accepted" in flat
    assert "not priced: refused" not in text and "`--all` lists every setting" in text
    full = tmp_path / "all.md"
    assert recommend_cli(*args, "--markdown", full, "--all").exit_code == 0
    assert len(full.read_text()) > len(text) and "not priced" in full.read_text()


def test_unmeasured_draft_route_is_left_out_of_both_sides(runs, tmp_path):
    _, layers = runs
    rows = known_rows(bss=(1, 16, 64), qs=(1, 4), kvs=(4096,), kernels=GQA_KERNELS + ("sglang-fi-draft-decode",),
                      page_size=1)
    routes = known_run(tmp_path / "routes", rows)  # fa3's draft decode not measured
    j = recommend_json(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
              "--layers", layers)
    steps = {s["setting"]: s for s in j["whole_step"]["steps"]}
    sw = j["whole_step"]["switch"]
    assert sw is not None and sw["draft_attention_left_out"]
    a, b = steps[sw["from"]], steps[sw["to"]]
    assert b["draft_unpriced"] and not a["draft_unpriced"]
    # the saving is taken between the same parts: without the draft passes' attention and host work on both
    a_part = a["total_us"] - a["draft_attention_us"] - a["draft_host_us"]
    assert sw["step_from_us"] == pytest.approx(a_part)
    assert sw["step_to_us"] == pytest.approx(b["total_us"])


@pytest.mark.parametrize("value, words", [
    ("0.5", "accepted tokens per step are 1"), ("4.5", "to 4 (3 drafted"), ("many", "a number"),
    ("nan", "accepted tokens per step")])
def test_bad_acceptance_exits_2(runs, value, words):
    routes, layers = runs
    r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
                      "--layers", layers, "--accept-length", value)
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output


def test_acceptance_without_layers_and_a_run_of_another_model_exit_2(runs, tmp_path):
    routes, layers = runs
    r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
                      "--accept-length", "2")
    assert r.exit_code == 2 and "give --layers RUN too" in r.output
    other = write_layers_run(tmp_path / "l", model="qwen2.5-7b")
    r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
                      "--layers", other)
    assert r.exit_code == 2 and "a run of qwen2.5-7b" in r.output


def _server_run(path, backend="sglang", model="meta-llama/Llama-3.1-8B-Instruct", accs=(3.0, 2.0)):
    from report_synth import write_run

    from kbench.server.rows import ServerBenchRow

    rows = [ServerBenchRow(case_id=f"bs{16 * (i + 1)}-in512-out64", run_name="s", backend=backend, url="http://x",
                           model=model, batch_size=16 * (i + 1), input_len=512, output_len=64, status="ok",
                           acc_length=a).to_dict() for i, a in enumerate(accs)]
    return write_run(path, rows, reference=False, kind="server-bench", backend=backend, model=model)


def test_acceptance_from_a_server_bench_run(runs, tmp_path):
    routes, layers = runs
    sb = _server_run(tmp_path / "sb")
    j = recommend_json(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
              "--layers", layers, "--accept-length", sb)
    assert j["whole_step"]["accept_length"] == pytest.approx(2.5)  # the mean of the run's two cases
    assert "measured by server-bench" in j["whole_step"]["accept_from"]
    for bad, words in ((_server_run(tmp_path / "v", backend="vllm"), "a vllm server's run"),
                       (_server_run(tmp_path / "m", model="Qwen/Qwen2.5-7B"), "measured on Qwen/Qwen2.5-7B")):
        r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b", "--current", LINE,
                          "--layers", layers, "--accept-length", bad)
        assert r.exit_code == 2 and words in r.output, r.output


def test_layers_refuses_a_preset_without_dimensions():
    from kbench.cli.layers_cmd import layers_cmd

    r = CliRunner().invoke(layers_cmd, ["--model", "gqa8-d64"])
    assert r.exit_code == 2
    assert "not the dimensions its other layers need: hidden, intermediate, vocab, layers" in r.output


def test_part_shapes_match_the_published_config():
    """llama3-8b's layer reads its four GEMMs' weights, written out here from Llama-3.1-8B's config."""
    from kbench.cases.model_dims import model_dims
    from kbench.cases.models import MODELS
    from kbench.kernels.model_layers import spec

    d, h = model_dims("llama3-8b"), MODELS["llama3-8b"]
    qkv, o, up, down = 4096 * (32 + 16) * 128, 4096 * 4096, 4096 * 2 * 14336, 14336 * 4096
    assert spec(d, h, "target-layer", 64).weight_bytes == 2 * (qkv + o + up + down)
    assert spec(d, h, "target-lm-head", 64).weight_bytes == 2 * 4096 * 128256
    assert spec(d, h, "draft-layer", 4).weight_bytes == 2 * (2 * 4096 * 4096 + qkv + o + up + down)
    moe = spec(model_dims("qwen3-30b-a3b"), MODELS["qwen3-30b-a3b"], "target-layer", 1)
    assert moe.method.startswith("estimate") and "uniform routing" in moe.method


@pytest.mark.parametrize("e, k, t", [(128, 8, 1), (128, 8, 64), (256, 8, 4096)])
def test_experts_touched_matches_a_simulation(e, k, t):
    import random

    from kbench.cases.model_dims import experts_touched

    rng = random.Random(0)
    sims = [len({x for _ in range(t) for x in rng.sample(range(e), k)}) for _ in range(300)]
    assert experts_touched(e, k, t) == pytest.approx(sum(sims) / len(sims), rel=0.03)


def test_layer_times_interpolate_and_clamp():
    from kbench.recommend.step import LayerTimes

    lt = LayerTimes("m", "GPU", 90, {"target-layer": [(4, 10.0), (16, 22.0)]}, {}, "run")
    assert lt.at("target-layer", 10) == pytest.approx(16.0)
    assert lt.at("target-layer", 64) == 22.0 and "priced at 16" in lt.clamped[0]
    assert not math.isnan(lt.at("target-layer", 4))


def test_model_layers_run_on_the_cpu_with_small_dimensions():
    """The parts build and run (MoE, MLA, MTP included) on a CPU at toy widths: the GPU times the same code."""
    from kbench.cases.model_dims import ModelDims, MoE
    from kbench.cases.models import HeadConfig
    from kbench.kernels.model_layers import build, parts_of

    dense = ModelDims(64, 128, 256, 2)
    mla = ModelDims(64, 128, 256, 2, moe=MoE(8, 2, 32, shared=1, dense_layers=1), mla=(32, 16), draft="mtp")
    for d, h in ((dense, HeadConfig(4, 2, 16)),
                 (mla, HeadConfig.mla(4, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16))):
        for p in parts_of(d):
            fn, copies = build(d, h, p, 8, "cpu")
            out = fn(copies - 1)
            assert out.shape[0] == 8 and out.isfinite().all()


def test_layers_from_another_card_exit_2(runs, tmp_path):
    routes, _ = runs  # measured on the synthetic H200
    h100 = write_layers_run(tmp_path / "h100", device={"name": "NVIDIA H100 80GB HBM3", "sm": 90})
    r = recommend_cli(routes, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b",
                      "--current", LINE, "--layers", h100)
    assert r.exit_code == 2 and "time both on the GPU you deploy on" in r.output, r.output


@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_layers_stopped_keeps_its_rows_and_resumes(tmp_path, sig, code):
    """kbench layers stopped mid-run (here on a CPU posing as the GPU, tests/layers_on_cpu.py): one line, exit
    128 + the signal, the rows measured so far kept; --resume measures only the rest."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from kbench.runs.store import load_run

    here = Path(__file__).parent
    marker = tmp_path / "marker"
    args = ["layers", "--model", "llama3-8b", "--batch-size", "1,2", "--q-len", "4", "--out", str(tmp_path / "o")]
    p = subprocess.Popen([sys.executable, str(here / "layers_on_cpu.py"), str(marker), "4", "--", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    while not marker.exists() and time.monotonic() - t0 < 120 and p.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), p.communicate()[0]
    p.send_signal(getattr(signal, sig))
    out = p.communicate(timeout=120)[0]
    assert p.returncode == code, out
    (run,) = (tmp_path / "o").iterdir()
    assert f"error: stopped by {sig}; 3 row(s) kept in {run}; finish with: kbench layers --resume {run}" in out
    assert "Traceback" not in out
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted"
    assert len(load_run(run).rows) == 3
    r = subprocess.run([sys.executable, str(here / "layers_on_cpu.py"), str(tmp_path / "never"), "0", "--",
                        "layers", "--resume", str(run)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = load_run(run).rows
    # a dense model's parts at bs 1,2 x q 4, topk 1: target layer and LM head at 4, 8 tokens; draft layer at 4, 8
    # (draft extend) and 1, 2 (passes); draft LM head at 1, 2
    assert len(rows) == 2 + 2 + 4 + 2 and rows["case_id"].is_unique and (rows["status"] == "ok").all()
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"


def _spec_run(path, topk, steps, drafts, tps: dict, backend="sglang", model="meta-llama/Llama-3.1-8B-Instruct",
              samples=None):
    from report_synth import write_run

    from kbench.server.rows import ServerBenchRow

    rows = []
    for bs, v in tps.items():
        r = ServerBenchRow(case_id=f"bs{bs}-in512-out64", run_name="s", backend=backend, url="http://x", model=model,
                           batch_size=bs, input_len=512, output_len=64, status="ok", output_throughput=v,
                           acc_length=2.5, spec_drafts=100.0, spec_draft_tokens=100.0 * drafts)
        if samples:
            r.output_throughput_samples = [v * (1 + d) for d in samples]
            r.repeats = len(samples)
        rows.append(r.to_dict())
    server = {"speculative_eagle_topk": topk, "speculative_num_steps": steps, "speculative_num_draft_tokens": drafts}
    return write_run(path, rows, reference=False, kind="server-bench", backend=backend, model=model,
                     server=server if backend == "sglang" else None)


def test_spec_runs_ranked_by_tokens_per_second_per_batch_size(tmp_path):
    a = _spec_run(tmp_path / "a", 1, 3, 4, {1: 300.0, 16: 2000.0, 64: 5000.0})
    b = _spec_run(tmp_path / "b", 4, 5, 8, {1: 400.0, 16: 2050.0, 64: 4000.0})
    r = recommend_cli("--engine", "sglang", "--spec-runs", f"{a},{b}", "--json")
    assert r.exit_code == 0, r.output
    j = {x["batch_size"]: x for x in json.loads(r.output)["by_batch_size"]}
    assert j[1]["best"] == "topk 4, 5 steps, 8 draft tokens"
    assert j[1]["flags"] == "--speculative-eagle-topk 4 --speculative-num-steps 5 --speculative-num-draft-tokens 8"
    assert j[64]["best"] == "topk 1, 3 steps, 4 draft tokens"
    assert len(j[16]["tied"]) == 2  # 2.5% apart, no repeats: not called
    r = recommend_cli("--engine", "sglang", "--spec-runs", f"{a},{b}")
    assert "no one config is best at every batch size" in " ".join(r.output.split())


def test_spec_runs_with_repeats_call_a_small_difference(tmp_path):
    a = _spec_run(tmp_path / "a", 1, 3, 4, {16: 2000.0}, samples=[-0.002, 0, 0.002, 0.001])
    b = _spec_run(tmp_path / "b", 4, 5, 8, {16: 2050.0}, samples=[-0.002, 0, 0.002, 0.001])
    j = json.loads(recommend_cli("--engine", "sglang", "--spec-runs", f"{a},{b}", "--json").output)
    assert j["by_batch_size"][0]["tied"] == ["topk 4, 5 steps, 8 draft tokens"]
    assert j["by_batch_size"][0]["called_by"] == "noise"


def test_spec_runs_vllm_reads_its_counters_and_bad_runs_exit_2(tmp_path):
    a = _spec_run(tmp_path / "a", 1, 3, 3, {1: 300.0, 64: 5000.0}, backend="vllm")
    b = _spec_run(tmp_path / "b", 1, 3, 5, {1: 400.0, 64: 4000.0}, backend="vllm")
    r = recommend_cli("--engine", "vllm", "--spec-runs", f"{a},{b}")
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "num_speculative_tokens 5" in out
    assert ("""--speculative-config '{"num_speculative_tokens": 5, "num_speculative_tokens_per_batch_size": """
            "[[1, 63, 5], [64, 64, 3]]}'") in out
    r = recommend_cli("--engine", "sglang", "--spec-runs", f"{a},{b}")
    assert r.exit_code == 2 and "a vllm server's run; --engine is sglang" in r.output
    c = _spec_run(tmp_path / "c", 1, 3, 4, {1: 1.0}, model="Qwen/Qwen2.5-7B")
    d = _spec_run(tmp_path / "d", 1, 3, 4, {1: 1.0})
    r = recommend_cli("--engine", "sglang", "--spec-runs", f"{c},{d}")
    assert r.exit_code == 2 and "runs of different models" in r.output
    r = recommend_cli("--engine", "sglang", "--spec-runs", str(d))
    assert r.exit_code == 2 and "two or more" in r.output


def test_tree_draft_passes_run_batch_times_topk_rows(tmp_path):
    """A topk:4 tree of 8 tokens: each draft pass is priced at bs x 4 rows of one token (SGLang expands the batch by
    topk: flashinfer_backend.py:2501), its layer and LM head over bs x 4 tokens."""
    from kbench.cases.trees import draft_steps

    layers = write_layers_run(tmp_path / "l")
    rows = (known_rows(bss=(4, 16, 64), qs=(1, 8), kvs=(4096,), kernels=GQA_KERNELS + DRAFT_ROUTES, page_size=1)
            + known_rows(bss=(4, 16, 64), qs=(8,), kvs=(4096,), kernels=GQA_KERNELS, page_size=1, tree="topk:4"))
    routes = known_run(tmp_path / "routes", rows)
    j = recommend_json(routes, "--engine", "sglang", "--setting", "flashinfer", "--batch-size", 16, "--q-len", 8,
              "--kv-len", 4096, "--tree", "topk:4", "--model", "llama3-8b", "--layers", layers)
    (got,) = j["whole_step"]["steps"]
    passes = draft_steps(8, 4) - 1
    assert got["draft_passes"] == passes >= 1
    assert got["draft_attention_us"] == pytest.approx(passes * t_route("sglang-fi-draft-decode", 64, 1, 4096))
    assert got["draft_model_us"] == pytest.approx(passes * (t_part("draft-layer", 64) + t_part("draft-lm-head", 64)))
    assert got["other_layers_us"] == pytest.approx(32 * t_part("target-layer", 128) + t_part("target-lm-head", 128)
                                                   + t_part("draft-layer", 128) + t_part("draft-lm-head", 16))


def _flags_line(output: str) -> list[str]:
    import shlex

    return shlex.split(next(x for x in output.splitlines() if "flags: --speculative-adaptive" in x
                            or "flags: --speculative-config" in x and "_per_batch_size" in x).split("flags: ", 1)[1])


def test_spec_runs_vllm_per_batch_size_choice_as_vllm_reads_it(tmp_path):
    """The per-batch-size choice printed as vLLM's own --speculative-config (0.34.0: num_speculative_tokens_per_batch_
    size, config/speculative.py:570-575), parsed by vLLM's parser and expanded by its scheduler's lookup
    (v1/spec_decode/dynamic/utils.py, byte-identical in the CPU venv's 0.32.0 and the 0.34.0 sdist): at every batch
    size vLLM drafts what kbench measured best there (each measured size's choice up to the next one measured)."""
    from test_recommend_resolve import _folders, _vllm_cpu_parser

    best = {1: 7, 8: 5, 32: 5, 64: 3}
    runs = [_spec_run(tmp_path / f"k{k}", 1, k, k, {bs: (1000.0 if best[bs] == k else 800.0) for bs in best},
                      backend="vllm") for k in (3, 5, 7)]
    r = recommend_cli("--engine", "vllm", "--spec-runs", ",".join(map(str, runs)))
    assert r.exit_code == 0, r.output
    argv = _flags_line(r.output)
    assert argv[0] == "--speculative-config"
    cfg = json.loads(argv[1])
    assert cfg == {"num_speculative_tokens": 7, "num_speculative_tokens_per_batch_size": [[1, 7, 7], [8, 63, 5],
                                                                                          [64, 64, 3]]}
    j = json.loads(recommend_cli("--engine", "vllm", "--spec-runs", ",".join(map(str, runs)), "--json").output)
    assert j["per_batch_size"]["config"] == cfg
    py, vllm_parse = _vllm_cpu_parser()
    model = _folders(tmp_path)["llama"]
    full = json.dumps({"method": "eagle", "model": "D", **cfg})
    bad = json.dumps({"method": "eagle", "model": "D", **cfg, "num_speculative_tokens_per_batch_size": [[2, 8, 5]]})
    got, refused = vllm_parse(py, [[str(model), "--speculative-config", full, "--max-num-seqs", "128"],
                                   [str(model), "--speculative-config", bad]])
    assert got["ok"] and not got["problems"], got
    lookup = got["dynamic_sd_lookup"]
    for bs in range(1, 129):
        at = max(b for b in best if b <= bs)
        assert lookup[bs] == best[at], (bs, lookup[bs])
    assert any("must start at 1" in p for p in refused["problems"])  # vLLM's check is not a yes-machine


def test_spec_runs_sglang_per_batch_size_choice_as_sglang_reads_it(tmp_path, sglang_resolve):  # noqa: F811
    """Chains only: the steps per batch size as SGLang 0.5.23's --speculative-adaptive config, one candidate per slot;
    SGLang's own AdaptiveSpeculativeParams routes each batch size to kbench's best steps, and its resolution accepts
    the printed flags. A tree among the configs: no form (SGLang's adaptive takes topk 1), said."""
    import subprocess

    from test_recommend_resolve import _folders

    best = {1: 5, 16: 3, 64: 1}
    runs = [_spec_run(tmp_path / f"s{k}", 1, k, k + 1, {bs: (1000.0 if best[bs] == k else 800.0) for bs in best})
            for k in (1, 3, 5)]
    r = recommend_cli("--engine", "sglang", "--spec-runs", ",".join(map(str, runs)))
    assert r.exit_code == 0, r.output
    text = next(x for x in r.output.splitlines() if "ADAPTIVE.json: " in x).split("ADAPTIVE.json: ", 1)[1]
    cfg = json.loads(text)
    assert cfg == {"1": {"candidate_steps": [5]}, "16": {"candidate_steps": [3]}, "64": {"candidate_steps": [1]}}
    argv = _flags_line(r.output)
    path = tmp_path / "ADAPTIVE.json"
    path.write_text(text)
    argv = [str(path) if a == "ADAPTIVE.json" else a for a in argv]
    code = ("import json, sys\nfrom sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams\n"
            "a = AdaptiveSpeculativeParams(int(sys.argv[2]), sys.argv[1])\n"
            "print(json.dumps([a.get_steps_for_batch(b) for b in range(1, 129)]))\n")
    p = subprocess.run([str(sglang_resolve), "-c", code, str(path), argv[argv.index("--speculative-num-steps") + 1]],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    steps = json.loads(p.stdout.strip().splitlines()[-1])
    for bs in range(1, 129):
        assert steps[bs - 1] == best[max(b for b in best if b <= bs)], bs
    model = _folders(tmp_path)["llama"]
    line = ["--model-path", str(model), "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", str(model),
            *argv]
    sys_path = Path(__file__).parent / "servers" / "sglang_resolve.py"
    p = subprocess.run([str(sglang_resolve), str(sys_path)], input=json.dumps([{"argv": line, "gpu": "sm90"}]),
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    (res,) = json.loads(p.stdout.strip().splitlines()[-1])["results"]
    assert "error" not in res and res["speculative_eagle_topk"] == 1, res
    assert res["speculative_num_steps"] == int(argv[argv.index("--speculative-num-steps") + 1])
    tree = _spec_run(tmp_path / "tree", 4, 5, 8, {1: 2000.0, 16: 500.0, 64: 500.0})
    r = recommend_cli("--engine", "sglang", "--spec-runs", f"{runs[0]},{tree}")
    assert r.exit_code == 0 and "takes topk 1 only" in " ".join(r.output.split()), r.output
