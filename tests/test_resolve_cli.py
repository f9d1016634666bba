"""`kbench resolve LINE | @FILE | RUN` (issue 52, Do 3): what a launch line runs, each field with its rule and the
released source's line, `--json` with the engine's own field names; the bad input of the issue (a line the engine
refuses, a model folder without a readable config.json, an architecture the rules do not know) as one line, exit 2.
`recommend --current` resolves with the same resolver. SGLang's own answers for these lines are checked field by
field in tests/test_resolve_parity.py; here the command's behaviour."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from resolve_lines import write_folders  # noqa: E402

from kbench.cli.main import cli  # noqa: E402

SG = "python -m sglang.launch_server --model-path {m} "


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return write_folders(tmp_path_factory.mktemp("models"))


def run(*args):
    return CliRunner().invoke(cli, ["resolve", *map(str, args)], env={"COLUMNS": "250"})


def resolved(*args) -> dict:
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_deepseek_v3_tp8_runs_fa3_on_hopper_and_trtllm_mla_on_sm100_with_16_heads_per_rank(folders):
    line = SG.format(m=folders["deepseek-v3"]) + "--tp-size 8 --speculative-algorithm NEXTN"
    out = resolved(line, "--gpu", "H100")
    assert (out["gpu"], out["fields"]["attention_backend"], out["fields"]["page_size"]) == ("sm90", "fa3", 1)
    assert out["tp_size"] == 8 and out["heads_per_rank"] == [16, 1] and out["steps"] == {"verify": "fa3",
                                                                                         "draft_extend": "fa3"}
    assert out["not_priced_by_recommend"] is None  # TP8 is priced per rank (kbench.recommend.ranks)
    out = resolved(line, "--gpu", "sm100")
    assert (out["fields"]["attention_backend"], out["fields"]["page_size"]) == ("trtllm_mla", 64)
    assert "deepseek_v2.py:178-188" in out["why"]["attention_backend"]
    text = run(line, "--gpu", "sm100").output
    assert "verify runs: trtllm_mla" in text and "page: 64" in text and "16 q heads, 1 latent KV head" in text
    assert "overrides.py:1156-1163" in text  # the page rule and its source line
    # a backend flag given (any of the three): SGLang's SM100 MLA default is flashinfer, not trtllm_mla
    out = resolved(line + " --decode-attention-backend flashinfer", "--gpu", "sm100")
    assert out["fields"]["attention_backend"] == "flashinfer"


def test_dp_attention_runs_all_heads_on_every_rank(folders):
    line = SG.format(m=folders["deepseek-v3"]) + "--tp-size 8 --enable-dp-attention --dp-size 8 " \
                                                 "--speculative-algorithm NEXTN"
    out = resolved(line, "--gpu", "sm90")
    assert (out["fields"]["attn_dp_size"], out["fields"]["dp_size"], out["attn_dp_size"]) == (8, 1, 8)
    assert out["heads_per_rank"] == [128, 1]
    assert "parallel_hook.py:38-58" in out["why"]["attn_dp_size"]
    text = run(line).output
    assert "TP / DP attention: 8 / 8" in text and "128 q heads" in text
    # a hub name: DeepSeek-V3's heads by its name (128 q heads, whatever the run's preset)
    hub = resolved("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 "
                   "--speculative-algorithm NEXTN")
    assert hub["heads_per_rank"] == [16, 1]


def test_gpt_oss_gets_its_own_backend_and_refuses_flashinfer(folders):
    line = SG.format(m=folders["gpt-oss"]) + "--speculative-algorithm EAGLE3 --speculative-draft-model-path D"
    assert resolved(line, "--gpu", "sm90")["fields"]["attention_backend"] == "fa3"
    out = resolved(line + " --speculative-eagle-topk 4 --speculative-num-steps 3 --speculative-num-draft-tokens 8",
                   "--gpu", "sm90")
    assert out["fields"]["attention_backend"] == "fa3" and "gpt_oss.py:24-33" in out["why"]["attention_backend"]
    out = resolved(line, "--gpu", "B200")
    assert (out["fields"]["attention_backend"], out["fields"]["page_size"]) == ("trtllm_mha", 64)
    r = run(line + " --attention-backend flashinfer")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "GptOssForCausalLM requires one of" in r.output and "model_hook.py:515-543" in r.output


def test_fp8_e5m2_sends_fa3_to_triton(folders):
    line = SG.format(m=folders["llama"]) + "--speculative-algorithm EAGLE --speculative-draft-model-path D " \
                                           "--kv-cache-dtype fp8_e5m2"
    out = resolved(line)
    assert (out["fields"]["attention_backend"], out["kv_cache_dtype"]) == ("triton", "fp8_e5m2")
    assert "overrides.py:1262-1270" in out["why"]["attention_backend"]
    assert resolved(line.replace("fp8_e5m2", "fp8_e4m3"))["fields"]["attention_backend"] == "fa3"


def test_deepseek_v32_runs_dsa_at_page_64(folders):
    line = SG.format(m=folders["deepseek-v3.2"]) + "--speculative-algorithm NEXTN --page-size 1"
    out = resolved(line, "--gpu", "sm90")
    assert (out["fields"]["attention_backend"], out["fields"]["page_size"], out["kv_cache_dtype"]) == (
        "dsa", 64, "bfloat16")


def test_a_file_and_a_vllm_line(folders, tmp_path):
    f = tmp_path / "serve.sh"
    f.write_text(f"vllm serve {folders['deepseek-v3']} \\\n  --attention-backend CUTLASS_MLA --spec-method mtp "
                 "--spec-tokens 1\n")
    out = resolved(f"@{f}", "--gpu", "sm100")
    assert (out["engine"], out["version"], out["fields"]["block_size"], out["fields"]["method"]) == (
        "vllm", "0.34.0", 128, "mtp")
    assert out["rules"] == "kbench/recommend/rules/vllm-0.34.0.toml"


def test_a_server_bench_run_is_read_back(tmp_path):
    from kbench.runs.store import RESULT_SCHEMA_VERSION

    run_dir = tmp_path / "sb"
    run_dir.mkdir()
    info = {"attention_backend": "fa3", "page_size": 1, "speculative_eagle_topk": 4, "speculative_num_steps": 5,
            "speculative_num_draft_tokens": 8, "max_running_requests": 48, "speculative_algorithm": "EAGLE",
            "model_path": "meta-llama/Llama-3.1-8B-Instruct", "tp_size": 2, "kv_cache_dtype": "fp8_e4m3"}
    (run_dir / "manifest.json").write_text(json.dumps({"schema_version": RESULT_SCHEMA_VERSION, "kind": "server-bench",
                                                       "backend": "sglang", "server": info}))
    out = resolved(run_dir)
    assert (out["fields"]["attention_backend"], out["tp_size"], out["kv_cache_dtype"]) == ("fa3", 2, "fp8_e4m3")
    assert str(run_dir) in out["why"]["attention_backend"]


@pytest.mark.parametrize("line, says", [
    # a line neither engine would start: the engine's own reason
    ("{sg}--speculative-algorithm NEXTN --attention-backend cutlass_mla",
     "argument --attention-backend: invalid choice: 'cutlass_mla'"),
    ("{sg}--speculative-algorithm NEXTN --attention-backend trtllm_mla",
     "TRTLLM MLA backend is only supported on Blackwell GPUs"),
    ("{sg}--speculative-algorithm NEXTN --cuda-graph-max-bs 64", "ambiguous option: --cuda-graph-max-bs could match"),
    ("{sg}--speculative-algorithm NEXTN --dtype bf16", "argument --dtype: invalid choice: 'bf16'"),
    ("vllm serve {m} --spec-method mtp --spec-tokens 1 --attention-backend FLASHMLA -ac '{{\"backend\": \"TRITON_MLA\"}}'",
     "attention_backend and attention_config.backend are mutually exclusive"),
    ("vllm serve {m} --spec-method mtp --spec-tokens 1 --disable-log-requests",
     "unrecognized arguments: --disable-log-requests"),
])
def test_a_line_the_engine_refuses_is_one_line_exit_2_with_its_reason(folders, line, says):
    m = folders["deepseek-v3"]
    r = run(line.format(sg=SG.format(m=m), m=m), "--gpu", "sm90")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert says in r.output and r.output.startswith("error: ") and "Traceback" not in r.output


def test_a_model_folder_without_a_readable_config_is_one_line_exit_2(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(SG.format(m=empty) + "--speculative-algorithm EAGLE")
    assert r.exit_code == 2 and "has no config.json" in r.output and len(r.output.strip().splitlines()) == 1
    (empty / "config.json").write_text("{not json")
    r = run(SG.format(m=empty) + "--speculative-algorithm EAGLE")
    assert r.exit_code == 2 and "not a readable model config" in r.output


def test_an_architecture_the_rules_do_not_know_is_named_never_guessed(tmp_path):
    d = tmp_path / "mixtral"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["MixtralForCausalLM"], "num_attention_heads": 32}))
    r = run(SG.format(m=d) + "--speculative-algorithm EAGLE --speculative-draft-model-path D")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "MixtralForCausalLM is not one kbench's rules of sglang 0.5.23 know" in r.output
    assert "never guesses" in r.output


def test_gpu_names_and_bad_gpu():
    from kbench.cli.resolve_cmd import gpu_of

    assert [gpu_of(g) for g in ("sm90", "SM100", "103", "H200", "B200", "NVIDIA H100 80GB HBM3")] == [
        "sm90", "sm100", "sm100", "sm90", "sm100", "sm90"]
    r = run("vllm serve M", "--gpu", "tpu")
    assert r.exit_code == 2 and "--gpu 'tpu'" in r.output


# ---- recommend --current: the same resolver -----------------------------------------------------------------------
def test_recommend_current_resolves_with_the_same_rules(folders, tmp_path):
    from recommend_synth import known_run, recommend_cli

    synth = known_run(tmp_path / "run")
    line = (SG.format(m=folders["llama"]) + "--speculative-algorithm EAGLE --speculative-draft-model-path D "
            "--speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 4 --page-size 64")
    ours = resolved(line)
    r = recommend_cli(synth, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--model", "llama3-8b",
                      "--json", "--current", line)
    assert r.exit_code == 0, r.output
    you_run = [s for s in json.loads(r.output)["settings"] if s["default"]]
    assert ours["steps"]["verify"] == "flashinfer" and you_run and you_run[0]["routes"]["verify"] == "sglang-fi-verify"
    # TP 8 is priced per rank: 4 q heads per GPU, which this run has no rows of -- refused by name, never priced
    # as the run's whole-model heads
    r = recommend_cli(synth, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--model", "llama3-8b",
                      "--current", line + " --tp-size 8 --kv-cache-dtype fp8_e4m3")
    assert r.exit_code == 2 and "4/1/128 heads per GPU" in r.output and "32/8/128 only" in r.output


def test_recommend_current_refuses_what_it_would_misprice_by_name(folders, tmp_path):
    """gpt-oss (sinks, sliding window) and DeepSeek-V3.2 (dsa) resolve; the line's own model name wins over the run's
    model (a Llama run): gpt-oss's heads are not that run's (it is priced on gpt-oss-routes rows), and V3.2's dsa is
    refused by name."""
    from recommend_synth import known_run, recommend_cli

    synth = known_run(tmp_path / "run")
    oss = ("python -m sglang.launch_server --model-path openai/gpt-oss-120b --speculative-algorithm EAGLE3 "
           "--speculative-draft-model-path D")
    r = recommend_cli(synth, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--current", oss)
    # a Llama run has no rows of gpt-oss's heads (it is priced on gpt-oss-routes rows: tests/test_recommend_gptoss.py)
    assert r.exit_code == 2 and "64 q / 8 KV heads per GPU" in r.output
    assert resolved(oss)["architecture"] == "GptOssForCausalLM"
    v32 = SG.format(m=folders["deepseek-v3.2"]) + "--speculative-algorithm NEXTN"
    r = recommend_cli(synth, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--current", v32)
    assert r.exit_code == 2 and "DeepSeek-V3.2 runs SGLang's dsa backend" in r.output and "not priced" in r.output


def test_vllm_flashinfer_version_is_the_one_installed_beside_vllm(folders, monkeypatch):
    from importlib import metadata

    versions = {"vllm": "0.34.0", "flashinfer-python": "0.7.4"}

    def version(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(metadata, "version", version)
    line = f"vllm serve {folders['llama']} --spec-method eagle --spec-model D --spec-tokens 3"
    assert resolved(line)["flashinfer_version"] == "0.7.4"
    del versions["vllm"]  # no vLLM here: nothing says what the server runs
    assert resolved(line)["flashinfer_version"] is None
