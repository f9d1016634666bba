"""MLA (latent attention, issue #27) in the case model, the inputs and the reference, and bad input, on the CPU:
the geometry and its presets, the absorbed reference proven against the non-absorbed form, the axes that apply
and the ones refused with one line (exit 2)."""
from __future__ import annotations

import math

import pytest
import torch
from click.testing import CliRunner

from kbench.cases import axes
from kbench.cases.case import Case
from kbench.cases.models import MODELS, HeadConfig, heads_text, parse_heads
from kbench.cases.scenario import apply_overrides, load_scenario, scenario_data, scenario_from_dict
from kbench.cli.main import cli
from kbench.errors import BadInput
from kbench.kernels.inputs import build_inputs, copy_bytes
from kbench.kernels.mla_reference import expanded_reference
from kbench.kernels.reference import reference_attention

DSV3 = MODELS["deepseek-v3"]


def mla_case(bs=3, q=3, kv=40, heads=4, rank=32, rope=16, nope=24, page=16, **kw) -> Case:
    return Case(bs, q, kv, **HeadConfig.mla(heads, rank, rope, nope).case_fields(), page_size=page, **kw)


# ---- geometry and presets ---------------------------------------------------------------------------------
def test_presets_hold_the_latent_geometry_per_gpu():
    want = {"deepseek-v3": 128, "deepseek-v3-tp8": 16, "kimi-k2": 64, "kimi-k2-tp8": 8}
    for name, heads in want.items():
        h = MODELS[name]
        assert (h.attention, h.num_qo_heads, h.num_kv_heads, h.head_dim) == ("mla", heads, 1, 576)
        assert (h.kv_lora_rank, h.qk_rope_head_dim, h.qk_nope_head_dim) == (512, 64, 128)
    assert all(MODELS[n].attention == "gqa" and MODELS[n].kv_lora_rank == 0 for n in ("llama3-8b", "gpt-oss"))


def test_an_mla_case_id_holds_its_geometry_and_no_layout():
    c = Case(16, 4, 4096, **DSV3.case_fields())
    assert c.case_id == "bs16-q4-kv4096-h128.mla512.64.128-p64-bf16"
    assert Case(16, 4, 4096, **DSV3.case_fields(), kv_dtype="fp8").case_id.endswith("-bf16-kvfp8")
    # a GQA case of the same shape keeps its old id (the committed baseline's ids are checked in test_axes)
    assert Case(16, 4, 4096, 32, 8, 128).case_id == "bs16-q4-kv4096-h32.8.128-p64-HND-bf16"
    assert Case(16, 4, 4096, **MODELS["deepseek-v3-tp8"].case_fields()).case_id != c.case_id


def test_mla_roofline_bytes_are_576_values_per_token_and_one_head():
    c = Case(16, 4, 4096, **DSV3.case_fields())
    assert c.kv_bytes() == 16 * 4096 * 576 * 2
    assert Case(16, 4, 4096, **DSV3.case_fields(), kv_dtype="fp8").kv_bytes() == 16 * 4096 * 576
    # query 576 wide in, latent output 512 wide out
    assert c.qo_bytes() == 2 * 16 * 4 * 128 * 576 + 2 * 16 * 4 * 128 * 512
    assert c.softmax_scale == pytest.approx(1 / math.sqrt(128 + 64))
    gqa = Case(16, 4, 4096, 32, 8, 128)
    assert gqa.kv_bytes() == 16 * 4096 * 8 * 128 * 2 * 2 and gqa.softmax_scale == pytest.approx(1 / math.sqrt(128))


def test_heads_spelling_round_trips():
    h = parse_heads("mla:16/512/64/128")
    assert h == MODELS["deepseek-v3-tp8"] and h.text() == "mla:16/512/64/128"
    assert heads_text(h.case_fields()) == "mla:16/512/64/128" and heads_text({"num_qo_heads": 32, "num_kv_heads": 8,
                                                                              "head_dim": 128}) == "32/8/128"
    for bad in ("mla:16/512/64", "mla:a/512/64/128", "gqa:32/8/128", "mla:", "mla:\u0661\u0666/512/64/128",
                "\u0663\u0662/8/128"):  # digits 0-9 only (int() takes Arabic-Indic ones)
        with pytest.raises(BadInput, match="--heads"):
            parse_heads(bad)


def test_group_label_of_an_mla_group():
    g = {**DSV3.case_fields(), "dtype": "bf16", "kv_dtype": "fp8", "page_size": 64, "kv_layout": "HND"}
    assert axes.group_label(g) == "mla h128 512+64 (nope 128) bf16-kvfp8 p64"


def test_an_mla_heads_table_and_its_round_trip_through_a_manifest():
    data = {"heads": {"attention": "mla", "num_qo_heads": 64, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                      "qk_nope_head_dim": 128}, "grid": {"batch_size": 2, "q_len": "1..4", "kv_len": 256}}
    sc = scenario_from_dict(data, "k.toml")
    assert sc.heads == MODELS["kimi-k2"]
    back = scenario_from_dict(scenario_data(sc.to_dict()), "manifest")  # what a worker and --resume read
    assert [c.case_id for c in back.cases()] == [c.case_id for c in sc.cases()]
    assert all(c.attention == "mla" and c.head_dim == 576 for c in back.cases())


def test_the_deepseek_mtp_scenarios():
    a, b = load_scenario("deepseek-mtp"), load_scenario("deepseek-mtp-tp8")
    assert (a.heads, b.heads) == (MODELS["deepseek-v3"], MODELS["deepseek-v3-tp8"])
    assert a.grid() == b.grid()  # one grid at two head counts
    assert a.q_len == [1, 2, 3, 4] and a.batch_size == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert a.kv_len[0] == 512 and a.kv_len[-1] == 32768 and a.kv_dtype == ["bf16", "fp8"] and a.page_size == [64]
    assert {c.kv_dtype for c in a.cases()} == {"bf16", "fp8"}


AXES_THAT_APPLY = [
    dict(kv_dist="lognormal:1.0"), dict(q_dist="accept:0.5"), dict(power="sustained"),
    dict(max_seq_len="context:4096"), dict(kv_dtype="fp8"), dict(kv_dtype="fp8", q_dtype="fp8"), dict(dtype="fp16"),
    dict(page_size=32),
]


@pytest.mark.parametrize("kw", AXES_THAT_APPLY, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_every_axis_that_means_something_for_mla_applies(kw):
    grid = {"batch_size": 3, "q_len": 3, "kv_len": 200, **{k: str(v) for k, v in kw.items()}}
    sc = scenario_from_dict({"heads": {"attention": "mla", "num_qo_heads": 4, "kv_lora_rank": 32,
                                       "qk_rope_head_dim": 16, "qk_nope_head_dim": 24}, "grid": grid}, "s.toml")
    (c,) = sc.cases()
    inp = build_inputs(c)
    ref = reference_attention(inp)
    assert ref.shape == (inp.q.shape[0], 4, 32) and torch.isfinite(ref).all()
    assert inp.max_seq_len >= (4096 if "max_seq_len" in kw else 200)


REFUSED = [("kv_layout", "NHD"), ("window_left", "128"), ("sinks", "on"), ("skip_softmax", "1000"),
           ("tree", "topk:2")]


@pytest.mark.parametrize("axis,value", REFUSED)
def test_axes_that_mean_nothing_for_mla_are_refused_in_one_line(tmp_path, axis, value):
    res = CliRunner().invoke(cli, ["sweep", "--model", "deepseek-v3", "--batch-size", "1", "--q-len", "4",
                                   "--kv-len", "64", f"--{axis.replace('_', '-')}", value, "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output
    assert f"grid.{axis}" in lines[0] and "MLA" in lines[0]
    assert not any(tmp_path.iterdir())  # nothing written


BAD = [
    (["--model", "llama3-8b", "--kernels", "flashmla,flashinfer-mla-fa3"], "MLA kernel(s)"),
    (["--model", "deepseek-v3", "--kernels", "fa2-prefill"], "GQA kernel(s)"),
    (["--model", "deepseek-v3", "--heads", "mla:16/512/64/128"], "both set the heads"),
    (["--heads", "mla:16/512/64"], "--heads"),
    (["--heads", "mla:16/512/0/0"], "qk_rope_head_dim + qk_nope_head_dim"),
    (["--heads", "mla:0/512/64/128"], "heads.num_qo_heads"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_mla_options_on_a_gqa_model_and_the_reverse_exit_2(tmp_path, args, message):
    res = CliRunner().invoke(cli, ["sweep", "--batch-size", "1", "--q-len", "1", "--kv-len", "64", *args,
                                   "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0], res.output


BAD_TABLES = {
    "mla field on gqa": ("[heads]\nnum_qo_heads = 32\nnum_kv_heads = 8\nhead_dim = 128\nkv_lora_rank = 512\n",
                         "heads.kv_lora_rank"),
    "gqa field on mla": ('[heads]\nattention = "mla"\nnum_qo_heads = 16\nnum_kv_heads = 8\nkv_lora_rank = 512\n'
                         "qk_rope_head_dim = 64\nqk_nope_head_dim = 128\n", "heads.num_kv_heads"),
    "mla missing a width": ('[heads]\nattention = "mla"\nnum_qo_heads = 16\nkv_lora_rank = 512\n', "missing"),
    "unknown kind": ('[heads]\nattention = "mqa"\nnum_qo_heads = 16\n', "heads.attention"),
    "model and heads": ('model = "llama3-8b"\n[heads]\nattention = "mla"\n', "not both"),
}


@pytest.mark.parametrize("name", BAD_TABLES)
def test_bad_heads_tables_are_one_line_naming_the_file(tmp_path, name):
    text, field = BAD_TABLES[name]
    f = tmp_path / "bad.toml"
    f.write_text(text + "[grid]\nbatch_size = 1\nq_len = 1\nkv_len = 64\n")
    res = CliRunner().invoke(cli, ["sweep", "--scenario", str(f), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and field in lines[0] and "bad.toml" in lines[0], res.output


def test_an_mla_model_over_a_gqa_scenario_is_an_mla_sweep():
    sc = apply_overrides(load_scenario("quick"), model="kimi-k2")
    assert {c.attention for c in sc.cases()} == {"mla"} and sc.heads.text() == "mla:64/512/64/128"


# ---- inputs --------------------------------------------------------------------------------------------------
def test_mla_inputs_are_a_paged_latent_cache_and_an_absorbed_query():
    c = mla_case(bs=3, q=4, kv=50, page=16)
    inp = build_inputs(c, copies=2)
    assert inp.q.shape == (12, 4, 48) and inp.kv_cache.shape[1:] == (16, 48)
    assert inp.seq_lens.tolist() == [50, 50, 50]  # the new tokens included
    assert inp.qo_indptr.tolist() == [0, 4, 8, 12]
    pages = inp.kv_indices.tolist()
    assert sorted(pages) == list(range(inp.kv_cache.shape[0])) and pages != sorted(pages)  # every page, shuffled
    assert inp.sm_scale == pytest.approx(1 / math.sqrt(24 + 16))
    assert not torch.equal(inp.copies[0].kv_cache, inp.copies[1].kv_cache)
    assert copy_bytes(c) == inp.kv_cache.numel() * 2 + inp.q.numel() * 2


def test_with_fp8_kv_the_bf16_query_survives_an_e4m3_cast():
    inp = build_inputs(mla_case(kv_dtype="fp8"))
    assert inp.q.dtype == torch.bfloat16 and inp.kv_cache.dtype == torch.float8_e4m3fn
    assert torch.equal(inp.q.to(torch.float8_e4m3fn).to(torch.bfloat16), inp.q)  # what FlashMLA's cast keeps
    assert build_inputs(mla_case(kv_dtype="fp8", q_dtype="fp8")).q.dtype == torch.float8_e4m3fn


def test_gqa_inputs_are_unchanged_by_the_dispatch():
    """The same seeded draws as before MLA existed: the query, then the K/V pool, from the device generator."""
    c = Case(2, 3, 100, 8, 2, 64, 16)
    inp = build_inputs(c, seed=5)
    g = torch.Generator().manual_seed(6)
    assert torch.equal(inp.q, torch.randn((6, 8, 64), generator=g, dtype=torch.bfloat16))
    assert torch.equal(inp.kv_cache, torch.randn(inp.kv_cache.shape, generator=g, dtype=torch.bfloat16))
    assert inp.kv_cache.shape[1:] == (2, 2, 16, 64) and inp.sm_scale == pytest.approx(1 / 8)


# ---- the reference, proven -----------------------------------------------------------------------------------
def _absorbed_vs_expanded(c: Case, seed: int = 0) -> float:
    """Run the absorbed reference on q = W_UK^T q_nope and project its latent output with W_UV; compare with
    the non-absorbed attention (keys and values expanded per head). Returns the relative error."""
    inp = build_inputs(c, seed=seed)
    g = torch.Generator().manual_seed(seed + 11)
    rank, nope, v_dim = c.kv_lora_rank, c.qk_nope_head_dim, 20
    w_uk = torch.randn(c.num_qo_heads, nope, rank, generator=g) / math.sqrt(rank)
    w_uv = torch.randn(c.num_qo_heads, v_dim, rank, generator=g) / math.sqrt(rank)
    q_nope = torch.randn(inp.q.shape[0], c.num_qo_heads, nope, generator=g)
    q_pe = inp.q.float()[..., rank:]
    inp.copies[0].q = torch.cat([torch.einsum("thn,hnr->thr", q_nope, w_uk), q_pe], dim=-1)  # absorbed, float32
    absorbed = torch.einsum("thr,hvr->thv", reference_attention(inp), w_uv)
    expanded = expanded_reference(inp, q_nope, w_uk, w_uv)
    assert absorbed.shape == expanded.shape == (inp.q.shape[0], c.num_qo_heads, v_dim)
    return float((absorbed - expanded).norm() / expanded.norm())


@pytest.mark.parametrize("kw", [dict(), dict(q=1), dict(q=4, kv=4, page=16), dict(page=32, kv=70),
                                dict(q_dist="accept:0.5", bs=5), dict(kv_dist="lognormal:1.0", bs=4),
                                dict(kv_dtype="fp8")],
                         ids=["uniform", "q1", "q=kv", "p32", "ragged-q", "per-request-kv", "fp8-kv"])
def test_absorbed_reference_equals_the_expanded_form(kw):
    assert _absorbed_vs_expanded(mla_case(**kw)) < 1e-5


def test_the_proof_can_fail():
    """The expanded form is not the absorbed one rearranged: a wrong scale or a page-order mistake shows."""
    c = mla_case()
    inp = build_inputs(c)
    ref = reference_attention(inp)
    inp.sm_scale = 1 / math.sqrt(c.head_dim)  # 1/sqrt(576-like width) instead of 1/sqrt(nope + rope)
    assert (reference_attention(inp) - ref).norm() / ref.norm() > 1e-3
    inp = build_inputs(c)
    bt = inp.block_tables.clone()
    inp.block_tables = torch.arange(bt.numel(), dtype=torch.int32).view_as(bt)  # pages in order: wrong data
    assert (reference_attention(inp) - ref).norm() / ref.norm() > 0.1


def test_reference_is_causal_over_the_last_q_positions():
    c = mla_case(bs=1, q=3, kv=20)
    inp = build_inputs(c)
    ref = reference_attention(inp)
    # the last cache row (position 19) is seen by the last query token only
    page = int(inp.block_tables[0, 19 // c.page_size])
    inp.copies[0].kv_cache[page, 19 % c.page_size] += 3.0
    moved = reference_attention(inp)
    assert torch.equal(moved[:2], ref[:2]) and not torch.allclose(moved[2], ref[2])
