"""Issue 52: a line that runs without CUDA graphs (SGLang --disable-cuda-graph, vLLM --enforce-eager) is priced on the
eager routes' rows (kbench.kernels.routes.eager), and refused, with the reason and the run beside it that has them,
on a run without any. Expected prices are computed here from recommend_synth's formulas (an eager route's layer
costs max(its kernel, its launch), its host work is added, never overlapped)."""
from __future__ import annotations


import pytest
from recommend_synth import EAGER_GQA, GQA_KERNELS, batch_price, known_rows, known_run, recommend_cli, recommend_json

LINE = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE "
        "--speculative-draft-model-path yuhuili/EAGLE-LLaMA3.1-Instruct-8B --speculative-eagle-topk 1 "
        "--speculative-num-steps 3 --speculative-num-draft-tokens 4 --attention-backend flashinfer")
VLLM = ("vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "
        "'{\"method\": \"eagle\", \"model\": \"yuhuili/EAGLE-LLaMA3.1-Instruct-8B\", \"num_speculative_tokens\": 3}' "
        "--block-size 64")
LAYERS = {"verify": 32, "draft_extend": 1}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One folder as results/baselines is: a graph-only run and, beside it, a run with eager rows too."""
    d = tmp_path_factory.mktemp("eager")
    graph = known_run(d / "graph", known_rows(bss=(1, 16), qs=(4,), kvs=(4096,), page_size=1))
    eager = known_run(d / "eager", known_rows(bss=(1, 16), qs=(4,), kvs=(4096,), kernels=GQA_KERNELS + EAGER_GQA,
                                              page_size=1))
    return graph, eager


def _sglang(run, line, bs=16):
    return recommend_json(run, "--engine", "sglang", "--batch-size", bs, "--kv-len", 4096, "--model", "llama3-8b",
                 "--current", line)


def _settings(j):
    return {s["id"]: s for s in j["settings"]}


@pytest.mark.parametrize("bs", [1, 16])
def test_an_eager_line_is_priced_on_eager_routes_with_its_host_work_added(runs, bs):
    _, eager = runs
    j = _sglang(eager, LINE + " --disable-cuda-graph", bs)
    s = _settings(j)
    fi = s["flashinfer"]
    assert fi["routes"] == {"verify": "sglang-fi-verify-eager", "draft_extend": "sglang-fi-extend-eager"}
    want = batch_price({"verify": "sglang-fi-verify-eager", "draft_extend": "sglang-fi-extend-eager"}, bs, 4, 4096,
                       LAYERS, overlap="sum")
    assert fi["per_step_us"] == pytest.approx(want)
    fa3 = s["fa3"]
    assert fa3["routes"]["verify"] == "sglang-fa3-eager"
    assert fa3["per_step_us"] == pytest.approx(batch_price({"verify": "sglang-fa3-eager",
                                                            "draft_extend": "sglang-fa3-eager"}, bs, 4, 4096, LAYERS,
                                                           overlap="sum"))
    # no setting is priced on a graph route
    assert all(r.endswith("-eager") for x in s.values() if x["per_step_us"] for r in x["routes"].values() if r)


def test_the_same_line_with_graphs_is_priced_as_before_on_the_same_run(runs):
    graph, eager = runs
    a, b = _sglang(graph, LINE), _sglang(eager, LINE)
    assert _settings(a)["flashinfer"]["per_step_us"] == pytest.approx(_settings(b)["flashinfer"]["per_step_us"])
    assert _settings(b)["flashinfer"]["routes"]["verify"] == "sglang-fi-verify"


def test_eager_launch_cost_changes_the_ranking_where_it_outlasts_the_kernel(runs):
    """At batch 1 fa3's eager call (90 us a layer) outlasts its kernel: the eager answer is not the graph one's."""
    _, eager = runs
    g, e = _settings(_sglang(eager, LINE, 1)), _settings(_sglang(eager, LINE + " --disable-cuda-graph", 1))
    assert e["fa3"]["per_step_us"] > g["fa3"]["per_step_us"] + 32 * 50  # 32 layers of launch-bound calls


def test_the_answer_says_the_line_runs_eagerly_and_keeps_the_flag(runs):
    _, eager = runs
    fa3 = LINE.replace("--attention-backend flashinfer", "--attention-backend fa3")  # launch-bound: not the best
    r = recommend_cli(eager, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b",
                      "--current", fa3 + " --disable-cuda-graph")
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "host work not overlapped; eager (--disable-cuda-graph): no CUDA graphs, priced on eager routes" in out
    assert "priced on its eager routes" in out
    assert "set:" in out and "--disable-cuda-graph" in out.split("set:", 1)[1].split("->")[0]


def test_a_run_without_eager_rows_refuses_and_names_the_run_that_has_them(runs):
    graph, eager = runs
    r = recommend_cli(graph, "--engine", "sglang", "--batch-size", 16, "--kv-len", 4096, "--model", "llama3-8b",
                      "--current", LINE + " --disable-cuda-graph")
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert "--disable-cuda-graph" in out and "no eager rows" in out and "not priced" in out
    assert str(eager) in out and "Traceback" not in r.output


def test_vllm_enforce_eager_is_priced_on_vllms_eager_routes(runs):
    _, eager = runs
    rows = known_rows(bss=(16,), qs=(4,), kvs=(4096,), kernels=GQA_KERNELS + EAGER_GQA, page_size=64)
    j = recommend_json(known_run(eager.parent / "eager64", rows), "--engine", "vllm", "--batch-size", 16, "--kv-len", 4096,
              "--model", "llama3-8b", "--current", VLLM + " --enforce-eager")
    priced = {x["id"]: x for x in j["settings"] if x["per_step_us"]}
    assert priced and all(r.endswith("-eager") for x in priced.values() for r in x["routes"].values() if r)
