"""kbench recommend's answer as a user reads it (issue 52): it fits a screen, it prices what the line runs (TP,
DP attention, fp8 KV, eager, the speculative algorithm) or says why not, and the committed baselines' answers
say which rows they stand on. The figures come from the committed H100 baselines in results/baselines/ (tests/
committed.py) or from the synthetic runs of tests/recommend_synth.py, whose prices are computed there."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_recommend_flags import sglang_python, vllm_python  # noqa: F401 - the engines' parser venvs (fixtures)
from test_recommend_resolve import sglang_resolve  # noqa: F401 - SGLang 0.5.23's own resolution venv (fixture)

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "results" / "baselines"
ROUTES = BASE / "h100-engine-routes-page1-64-kv4096-r2"  # chains and topk:4 trees, pages 1 and 64
ROUTES_CHAIN = BASE / "h100-engine-routes-kv4096"  # chains only, page 64
DS = BASE / "h100-deepseek-mtp-kv4096-32768"  # DeepSeek MLA, 128 heads on one GPU
DS_TP8 = BASE / "h100-deepseek-mtp-tp8-kv4096-32768"  # DeepSeek MLA, 16 heads per GPU (TP8)
EAGLE = ("python -m sglang.launch_server --model-path MODEL_PATH --speculative-algorithm EAGLE "
         "--speculative-draft-model-path DRAFT_MODEL_PATH")
CHAIN = " --speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 4"
NEXTN = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --speculative-algorithm NEXTN"


def cli(*args, columns: int = 100):
    from kbench.cli.recommend_cmd import recommend_cmd

    return CliRunner().invoke(recommend_cmd, [str(a) for a in args], env={"COLUMNS": str(columns)})


# ---- an answer that fits a screen -------------------------------------------------------------------------
def test_the_plain_eagle_lines_answer_fits_a_screen_and_all_lists_every_setting():
    """The plain EAGLE line (SGLang's (5, 4, 8) tree) at bs 16: 277 lines at 100 columns before (9 of 11 rows
    'refused by the engine', each wrapped over 5-8 lines); now the headline first and at most 30 lines."""
    args = (ROUTES, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--model", "llama3-8b",
            "--current", EAGLE)
    r = cli(*args)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) <= 30, f"{len(lines)} lines:\n{r.output}"
    assert lines[0].startswith("you run: fa3")  # the headline first
    text = " ".join(r.output.split())
    # the settings SGLang refuses for a tree are one line, counted, and --all lists them
    assert "8 settings not priced, need topk 1" in text and "`--all` lists them" in text
    assert text.count("refused by the engine") == 0
    full = cli(*args, "--all", columns=400)  # wide: no cell folds, so each id reads whole
    assert full.exit_code == 0
    from kbench.recommend.settings import load_table

    for s in load_table().engine("sglang").valid_on("sm90"):
        assert f" {s.id} " in full.output, s.id
    assert full.output.count("refused by the engine") >= 8  # the reasons, each as the engine gives it
    assert len(cli(*args, "--all").output.splitlines()) > 4 * len(lines)
    # with the whole step (issue 53): the step and how to get tokens/s in the headline, still a screen
    for acc in ((), ("--accept-length", "3")):
        r = cli(*args, "--layers", BASE / "h100-layers-llama3-8b", *acc)
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        assert len(lines) <= 30, f"{len(lines)} lines:\n{r.output}"
        head = " ".join(r.output.split("sglang 0.5.23 on ")[0].split())
        assert head.startswith("you run: fa3") and "the whole step 14,614.4 us" in head
        assert ("tokens/s needs the acceptance" in head) != bool(acc)
        assert not acc or "tokens/s" in head.split("nothing to change")[0]


def test_a_chain_line_on_the_screen_shows_priced_settings_only_and_the_command_whole():
    r = cli(ROUTES, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--model", "llama3-8b",
            "--current", EAGLE + CHAIN + " --page-size 64")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("you run: flashinfer") and len(lines) <= 45
    cmd = next(x for x in lines if x.startswith("set: "))
    assert cmd.endswith("--attention-backend fa3")  # one line, whole, at any width
    assert "not priced: refused" not in r.output


# ---- what one GPU of the line runs (the Resolved fields the resolver fills: tp_size, dp_attention, ...) ------------
@pytest.fixture
def accepts_spread(monkeypatch):
    """Until the resolver reads --tp-size, DP attention, fp8 KV and --disable-cuda-graph from a line (issue 52, its
    other half), let the resolution of the default pass them through; the fields are set on Resolved directly."""
    import kbench.recommend.resolve as R

    only, modelled = getattr(R, "ONLY_VALUES", None), getattr(R, "SGLANG_MODELLED", None)
    for k in ("--kv-cache-dtype", "--tp-size", "--tp"):
        if only is not None:
            monkeypatch.delitem(only, k, raising=False)
    for k, kind in (("--enable-dp-attention", "bool"), ("--dp-size", "value"), ("--disable-cuda-graph", "bool")):
        if modelled is not None:
            monkeypatch.setitem(modelled, k, kind)


def priced(run, line, extra=(), bs=16, kv=4096, preset=None, **fields):
    """recommend() on a committed run for a --current line whose spread fields are set as the resolver sets them."""
    import dataclasses

    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.resolve import resolve_line
    from kbench.recommend.settings import load_table
    from kbench.recommend.workload import from_options

    src = load_source(run)
    eng = load_table().engine("sglang")
    r = resolve_line(line, "sm90", engine_table=eng, preset=preset or src.model)
    heads = fields.pop("model_heads", None)
    r = dataclasses.replace(r, argv=r.argv + list(extra), **fields)
    if heads is not None:
        r.model_heads = heads  # the resolver's field (i52-resolve): set as it sets it
    wl = from_options({"batch_size": str(bs), "q_len": str(r.spec.q_len), "kv_len": str(kv)}, {})
    return recommend(src, wl, eng, current=r, preset=preset or src.model, layers={"verify": 61, "draft_extend": 1},
                     overlap=r.overlap)


def test_a_tp8_line_is_priced_on_the_tp8_rows_and_a_single_gpu_line_is_sent_to_its_own(accepts_spread):
    """Item 10: the TP8 baseline's rows have 16 heads per GPU; a TP8 line is priced on them (and keeps --tp-size 8),
    a TP1 line is refused naming the single-GPU baseline, and the reverse."""
    from kbench.errors import BadInput
    from kbench.recommend.render import command, headline

    rec = priced(DS_TP8, NEXTN, ["--tp-size", "8"], tp_size=8)
    assert rec.plan.heads == "mla:16/512/64/128" and rec.best is not None
    assert {p for r in rec.results for p in [r.page_size] if p} == {64}
    assert "TP8: 16 heads per GPU" in headline(rec)[2]
    assert "--tp-size 8" in (command(rec, rec.results[-1]) or "")
    with pytest.raises(BadInput) as e:
        priced(DS_TP8, NEXTN)
    assert "mla:128/512/64/128 heads per GPU" in str(e.value) and str(DS) in str(e.value)
    with pytest.raises(BadInput) as e:
        priced(DS, NEXTN, ["--tp-size", "8"], tp_size=8)
    assert "mla:16/512/64/128 heads per GPU" in str(e.value) and str(DS_TP8) in str(e.value)


def test_dp_attention_prices_all_heads_at_the_batch_per_rank_and_keeps_the_flags(accepts_spread):
    """DP attention over 8: every rank runs all 128 heads on batch / 8, so bs 128 is priced as one GPU's bs 16,
    and the line printed keeps --enable-dp-attention --dp-size 8."""
    from kbench.recommend.render import command

    dp = priced(DS, NEXTN, ["--tp-size", "8", "--enable-dp-attention", "--dp-size", "8"], bs=128, tp_size=8,
                dp_attention=8)
    one = priced(DS, NEXTN, bs=16)
    assert dp.plan.heads == "mla:128/512/64/128" and dp.workload.batches[0].batch_size == 16
    by = {r.setting.id: r.per_step_us for r in one.results if r.total_us is not None}
    assert {r.setting.id: r.per_step_us for r in dp.results if r.total_us is not None} == pytest.approx(by)
    line = command(dp)
    assert "--enable-dp-attention --dp-size 8" in line and "--tp-size 8" in line
    from kbench.recommend.render import to_json

    assert to_json(dp)["per_gpu"] == {"heads": "mla:128/512/64/128", "tp_size": 8, "attention_tp": 1,
                                      "dp_attention": 8, "kv_cache_dtype": "auto",
                                      "steps": ["verify", "draft_extend"]}


DP_LINE = NEXTN + " --tp-size 8 --enable-dp-attention --dp-size 8"


def test_dp_attention_splits_the_cap_as_sglang_does(tmp_path):
    """SGLang 0.5.23 splits --max-running-requests over the DP-attention ranks, each admitting max(1, cap // dp)
    (mem_cache/kv_cache_configurator.py:3119-3130) and the controller deals requests round robin, so bs 100 over 8
    ranks is priced as the busiest rank's 13 and needs a cap of 104, not 100 (100 // 8 = 12 a rank: 96 at once).
    Before: the line printed --max-running-requests 100 and a user's cap of 100 was taken as running bs 100."""
    from kbench.recommend.ranks import dp_rank_cap

    r = cli(DS, "--engine", "sglang", "--batch-size", "100", "--kv-len", "4096", "--kv-dtype", "bf16", "--current",
            DP_LINE, "--json")
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    assert j["best"]["command"].split("--max-running-requests ")[1].split()[0] == "104"
    assert dp_rank_cap(104, 8) == 13 and dp_rank_cap(100, 8) == 12
    one = cli(DS, "--engine", "sglang", "--batch-size", "13", "--kv-len", "4096", "--kv-dtype", "bf16", "--current",
              NEXTN, "--json")
    by = {s["id"]: s["per_step_us"] for s in json.loads(one.output)["settings"] if s["per_step_us"]}
    assert {s["id"]: s["per_step_us"] for s in j["settings"] if s["per_step_us"]} == pytest.approx(by)
    r = cli(DS, "--engine", "sglang", "--batch-size", "100", "--kv-len", "4096", "--kv-dtype", "bf16", "--current",
            DP_LINE + " --max-running-requests 100")
    assert r.exit_code == 2 and "each rank admits 12, 96 in all" in r.output and "raise it to 104" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = cli(DS, "--engine", "sglang", "--batch-size", "96", "--kv-len", "4096", "--kv-dtype", "bf16", "--current",
            DP_LINE + " --max-running-requests 100")
    assert r.exit_code == 0, r.output


def test_the_dp_cap_rule_is_sglangs_own(sglang_resolve, tmp_path):  # noqa: F811
    """kbench's per-rank cap against SGLang 0.5.23's own resolve_max_num_reqs (run on the CPU, its schedule cap and
    DP size set), and the cited lines are those in the wheel."""
    import subprocess

    from kbench.recommend.ranks import DP_CAP_CITE, dp_rank_cap

    grid = [(cap, dp) for cap in (1, 7, 8, 48, 100, 104, 128, 130, 1000) for dp in (1, 2, 4, 8, 16)]
    code = ("import json, sys, types\nsys.path.insert(0, sys.argv[1])\nimport sglang_resolve\nsglang_resolve._setup()\n"
            "import sglang.srt.mem_cache.kv_cache_configurator as m\nout = []\n"
            "for cap, dp in json.load(sys.stdin):\n"
            "    m.get_schedule = lambda cap=cap: types.SimpleNamespace(max_running_requests=cap)\n"
            "    me = types.SimpleNamespace(attn_dp_size=dp, mambaish_config=None,\n"
            "                               model_config=types.SimpleNamespace(context_len=8192))\n"
            "    out.append(m.KVCacheConfigurator.resolve_max_num_reqs(me, 10 ** 9))\n"
            "import os\nprint(json.dumps([out, os.path.dirname(m.__file__)]))\n")
    p = subprocess.run([str(sglang_resolve), "-c", code, str(ROOT / "tests" / "servers")], input=json.dumps(grid),
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    got, where = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == [dp_rank_cap(cap, dp) for cap, dp in grid]
    lines = Path(where, "kv_cache_configurator.py").read_text().splitlines()
    a, b = (int(x) for x in DP_CAP_CITE.split(".py:")[1].split(" ")[0].split("-"))
    assert "max(1, max_num_reqs // self.attn_dp_size)" in "\n".join(lines[a - 1:b])
    srt = Path(where).parent
    rr = (srt / "managers" / "data_parallel_controller.py").read_text().splitlines()
    assert "def round_robin_scheduler" in rr[879] and "round_robin_counter" in "\n".join(rr[879:894])
    sv = (srt / "arg_groups" / "serving_hook.py").read_text().splitlines()
    assert '"round_robin"' in "\n".join(sv[221:235])


def test_fp8_is_priced_on_fp8_rows_and_the_line_keeps_the_kv_flag(accepts_spread):
    from kbench.recommend.render import command

    bf = priced(DS, NEXTN)
    e4 = priced(DS, NEXTN, ["--kv-cache-dtype", "fp8_e4m3"], kv_cache_dtype="fp8_e4m3")
    assert e4.kv_dtype == "fp8" and bf.kv_dtype == "bf16"
    assert e4.you_run.per_step_us != pytest.approx(bf.you_run.per_step_us)  # other rows
    assert "--kv-cache-dtype fp8_e4m3" in command(e4)


def test_fp8_e5m2_is_not_priced_and_never_told_to_drop_the_flag(accepts_spread):
    """SGLang runs fa3 as triton with fp8_e5m2 (overrides.py:1263-1270) and kbench's fp8 rows are e4m3: nothing is
    priced, each for its reason, and no answer says to drop --kv-cache-dtype."""
    from kbench.recommend.render import caveats, headline, screen_rows

    rec = priced(DS, NEXTN, ["--kv-cache-dtype", "fp8_e5m2"], kv_cache_dtype="fp8_e5m2")
    assert rec.best is None
    text = "\n".join(headline(rec) + screen_rows(rec)[2] + caveats(rec))
    assert "triton" in text and "1263-1270" in text and "e4m3" in text and "drop" not in text


def test_fp8_e5m2_on_a_bf16_run_is_refused_without_telling_to_measure_it():
    """No kbench run of any kind measures an e5m2 cache (its fp8 rows are e4m3, SGLang's fa3 turns into triton): the
    refusal says so in one line, never "measure them on the GPU" (which no sweep could)."""
    r = cli(str(ROUTES), "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--model", "llama3-8b",
            "--current", EAGLE + " --kv-cache-dtype fp8_e5m2")
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "fp8_e5m2" in line and "e4m3" in line and "triton" in line and "1263-1270" in line
    assert "measure them" not in line and "not priced" in line


@pytest.mark.parametrize("fields, says", [
    ({"cuda_graph": False}, "--disable-cuda-graph"),
])
def test_eager_layers_are_refused_not_priced_as_graphs(accepts_spread, fields, says):
    from kbench.errors import BadInput

    with pytest.raises(BadInput) as e:
        priced(DS, NEXTN, [says], **fields)
    assert "CUDA-graph" in str(e.value) and "not priced" in str(e.value)


def test_standalone_and_ngram_are_priced_on_verify_and_keep_their_algorithm(accepts_spread):
    from kbench.recommend.render import command

    import dataclasses

    for algo in ("STANDALONE", "NGRAM"):
        from kbench.recommend.price import load_source, recommend
        from kbench.recommend.resolve import resolve_line
        from kbench.recommend.settings import load_table
        from kbench.recommend.workload import from_options

        eng = load_table().engine("sglang")
        r = resolve_line(EAGLE + CHAIN + " --page-size 64", "sm90", engine_table=eng, preset="llama3-8b")
        r = dataclasses.replace(r, fields={**r.fields, "speculative_algorithm": algo})
        wl = from_options({"batch_size": "16", "q_len": "4", "kv_len": "4096"}, {"page_size": "64", "tree": "chain"})
        rec = recommend(load_source(ROUTES), wl, eng, current=r, preset="llama3-8b")
        assert rec.workload.batches[0].steps == ("verify",) and rec.best is not None
        assert any(algo in n and "verify is priced" in n for n in rec.notes)
        assert "--speculative-algorithm EAGLE" in command(rec)  # the user's line, its speculation kept


@pytest.mark.parametrize("arch, says", [("DeepseekV32ForCausalLM", "dsa")])
def test_v32_is_refused_with_the_reason_never_another_backend(arch, says):
    """(gpt-oss is priced on its sinks and window rows, or refused with why: tests/test_recommend_gptoss.py)"""
    import dataclasses

    from kbench.errors import BadInput
    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.resolve import resolve_line
    from kbench.recommend.settings import load_table
    from kbench.recommend.workload import from_options

    r = dataclasses.replace(resolve_line(NEXTN, "sm90", preset="deepseek-v3"), arch=arch)
    wl = from_options({"batch_size": "16", "q_len": "4", "kv_len": "4096"}, {})
    with pytest.raises(BadInput) as e:  # never answered with another backend's price
        recommend(load_source(DS), wl, load_table().engine("sglang"), current=r)
    assert says in str(e.value) and "not price" in str(e.value)


# ---- items 10-16 on the committed baselines, through the CLI ------------------------------------------------------
def test_item10_a_single_gpu_line_is_not_answered_from_the_tp8_rows():
    r = cli(DS_TP8, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--current", NEXTN)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "16 attention heads per GPU" in r.output and str(DS) in r.output
    r = cli(DS_TP8, "--engine", "sglang", "--batch-size", "16", "--q-len", "4", "--kv-len", "4096", "--kv-dtype",
            "bf16", "--verify-layers", "61", columns=300)
    assert r.exit_code == 0 and "--tp-size 8" in r.output.splitlines()[0] and "16 attention heads per GPU" in r.output


def test_item11_current_reads_the_kv_dtype_and_names_the_committed_run_that_answers():
    r = cli(DS, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--current", NEXTN)
    assert r.exit_code == 0, r.output  # was: "2 groups match; narrow with --kv-dtype"
    r = cli(ROUTES_CHAIN, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--model", "llama3-8b",
            "--current", EAGLE)
    assert r.exit_code == 2 and str(ROUTES) in r.output, r.output
    named = [w for w in r.output.replace(":", " ").split() if w.startswith(str(BASE)) and w != str(ROUTES_CHAIN)]
    assert named and all(cli(w, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--model",
                             "llama3-8b", "--current", EAGLE).exit_code == 0 for w in named)


def test_item12_a_price_at_another_page_is_said_in_the_headline_and_fa3s_caveat_only_when_advised():
    r = cli(DS, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--current", NEXTN, columns=400)
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("you run: mla:fa3") and "priced at page 64, not at page 1" in first
    assert "set: " in r.output and "--attention-backend flashmla" in r.output
    assert "FA3 speculative decoding" not in r.output  # the advice is flashmla, not fa3
    # the README's flagship: a saving over the page-64 default, said as such
    r = cli(ROUTES_CHAIN, "--engine", "sglang", "--batch-size", "16", "--q-len", "4", "--kv-len", "4096",
            "--verify-layers", "32", columns=400)
    assert "the default at page 64 (flashinfer)" in r.output
    assert "a line without --page-size runs page 1, where the default is fa3 (the best setting here)" in r.output
    readme = (ROOT / "README.md").read_text()
    assert "over SGLang's default *at page 64*" in readme


def test_item13_per_shape_routing_is_never_cheaper_than_the_best_single_setting_on_one_shape():
    r = cli(DS_TP8, "--engine", "sglang", "--batch-size", "16", "--q-len", "4", "--kv-len", "4096", "--kv-dtype",
            "bf16", "--verify-layers", "61", "--json")
    out = json.loads(r.output)
    routing = out["per_shape_routing"]["engine_total_us"]
    assert routing == pytest.approx(out["best"]["total_us"])  # was 21.6% below (sglang-fi-mla's host work left out)
    fi = next(s for s in out["settings"] if s["id"] == "mla:flashinfer")
    assert fi["host_per_step_us"] > 1000 and fi["total_us"] > routing


def test_item14_the_docs_workload_example_prices_settings_and_prints_the_command(tmp_path):
    import jsonschema

    from kbench.recommend.workload import read_workload

    doc = (ROOT / "docs" / "recommend.md").read_text()
    line = next(x for x in doc.splitlines() if x.startswith("kbench recommend") and "--workload" in x)
    args = line.split("#")[0].split()[2:]
    args[args.index("--markdown") + 1] = str(tmp_path / "rec.md")
    r = cli(*[str(ROOT / a) if a.startswith(("results/", "schemas/")) else a for a in args], columns=400)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("set: python -m sglang.launch_server") and "--max-running-requests 128" in r.output
    assert "not priced: refused" not in r.output and r.output.count("note:") <= 10
    schema = json.loads((ROOT / "schemas" / "workload.schema.json").read_text())
    v = jsonschema.Draft202012Validator(schema)
    wl = ROOT / "schemas" / "workload-h100-routes.jsonl"
    assert all(not list(v.iter_errors(json.loads(x))) for x in wl.read_text().splitlines() if x.strip())
    assert len(read_workload(str(wl)).batches) == 6


def test_item15_select_answers_with_the_kernel_and_two_routes_of_one_kernel_agree():
    from kbench.cli.report_cmd import select_cmd
    from kbench.kernels.registry import all_kernels, is_route
    from kbench.names import ROUTE_KERNEL

    assert {k.name: (k.runs, k.engine) for k in all_kernels() if is_route(k)} == ROUTE_KERNEL
    r = CliRunner().invoke(select_cmd, ["--policy", str(DS), "--batch-size", "32", "--q-len", "3", "--kv-len", "8000",
                                        "--kv-dtype", "bf16"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert r.output.startswith("flashmla (decode path; fastest as vllm's route vllm-flashmla)")
    assert "sglang-flashmla" in r.output and "they disagree" not in r.output  # sglang's and vllm's FlashMLA agree


def test_item16_a_vllm_answer_names_one_flashinfer_and_help_has_a_current_example():
    import re

    r = cli(ROUTES, "--engine", "vllm", "--batch-size", "16", "--q-len", "4", "--kv-len", "4096", "--model",
            "llama3-8b", "--page-size", "64", "--tree", "chain", "--all", columns=400)
    assert r.exit_code == 0, r.output
    assert set(re.findall(r"\b0\.7\.\d+(?:\.post\d+)?", r.output)) == {"0.7.3"}
    assert r.output.count("FlashInfer 0.7.3 assumed") == 1
    h = cli("--help", columns=400).output
    assert "--current \"python -m sglang.launch_server" in h
    assert "Refused with the reason" in h and "fp8_e5m2 is not priced" in h


# ---- the engines' own parsers read the flags kbench adds for the rows it priced ---------------------------------
@pytest.mark.server
def test_the_engines_parse_the_tp_and_kv_flags_kbench_prints(sglang_python, vllm_python, tmp_path):
    """kbench's own line on the TP8 rows carries --tp-size 8 (vLLM --tensor-parallel-size 8), on fp8 rows
    --kv-cache-dtype fp8_e4m3 (vLLM fp8): SGLang 0.5.23's prepare_server_args and vLLM's serve parser read them
    as those values (the venvs of tests/test_recommend_flags.py)."""
    import shlex
    import subprocess
    import tempfile

    from test_recommend_flags import SERVERS, _clean_env

    lines = {}
    for engine in ("sglang", "vllm"):
        for run, kv in ((DS_TP8, "bf16"), (DS, "fp8")):
            out = json.loads(cli(run, "--engine", engine, "--batch-size", "16", "--q-len", "4", "--kv-len", "4096",
                                 "--kv-dtype", kv, "--verify-layers", "61", "--json").output)
            lines[(engine, run.name, kv)] = shlex.split(out["best"]["command"])
    code = ("import json, sys\nfrom sglang.srt.server_args import prepare_server_args\nout = []\n"
            "for argv in json.load(sys.stdin):\n    a = prepare_server_args(argv)\n"
            "    out.append({'tp_size': a.tp_size, 'kv_cache_dtype': a.kv_cache_dtype})\nprint(json.dumps(out))\n")
    sg = [v[3:] for k, v in lines.items() if k[0] == "sglang"]
    r = subprocess.run([str(sglang_python), "-c", code], input=json.dumps(sg), capture_output=True, text=True,
                       timeout=600, cwd=tempfile.gettempdir(), env=_clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [{"tp_size": 8, "kv_cache_dtype": "auto"},
                                                             {"tp_size": 1, "kv_cache_dtype": "fp8_e4m3"}]
    model = tmp_path / "MODEL"
    model.mkdir()
    code = ("import json, sys\nfrom vllm.entrypoints.cli import serve\n"
            "from vllm.utils.argparse_utils import FlexibleArgumentParser\nout = []\n"
            "for argv in json.load(sys.stdin):\n"
            "    a = serve.make_arg_parser(FlexibleArgumentParser(prog='vllm serve')).parse_args(argv)\n"
            "    out.append({'tp': a.tensor_parallel_size, 'kv': a.kv_cache_dtype})\nprint(json.dumps(out))\n")
    vl = [[str(model), *v[3:]] for k, v in lines.items() if k[0] == "vllm"]  # `vllm serve MODEL_PATH ...`
    r = subprocess.run([str(vllm_python), "-c", code], input=json.dumps(vl), capture_output=True, text=True,
                       timeout=600, cwd=tempfile.gettempdir(), env=_clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [{"tp": 8, "kv": "auto"}, {"tp": 1, "kv": "fp8"}]
    assert SERVERS.is_dir()


def test_the_resolvers_model_heads_pick_the_rows_by_heads_per_rank(accepts_spread):
    """Where the resolver knows the whole model's heads (Resolved.model_heads, from config.json or a hub name that
    fixes them), they pick the rank's rows, not the run's preset: a 64-head MLA model (Kimi K2) at TP4 runs 16 heads
    per GPU, the TP8 baseline's rows; at TP1 its 64 heads match no committed run."""
    from kbench.errors import BadInput

    rec = priced(DS_TP8, NEXTN, ["--tp-size", "4"], tp_size=4, model_heads=(64, 64))
    assert rec.plan.counts == (16, 1) and rec.best is not None
    with pytest.raises(BadInput) as e:
        priced(DS_TP8, NEXTN, model_heads=(64, 64))
    assert "64 q / 1 KV heads per GPU" in str(e.value)
