"""kbench recommend on an MLA run (issue 45): the engines' MLA defaults priced from their FA3 absorbed MLA routes, the
default named per KV dtype as the engine resolves it (vLLM's FLASH_ATTN_MLA refuses fp8 and falls to FLASHMLA), what
switching from the default saves or costs per step and as a share of it, and the refusal of a setting the engine
refuses for the KV dtype (one line, exit 2). Synthetic runs priced by formulas (tests/recommend_synth.py), and the
committed H100 DeepSeek MTP baselines."""
from __future__ import annotations

import json

import pytest
from recommend_synth import batch_price, known_rows
from report_synth import write_run

from kbench.errors import BadInput
from kbench.recommend.price import load_source, recommend
from kbench.recommend.render import headline, switch_lines, to_json
from kbench.recommend.settings import load_table, parse_table
from kbench.recommend.workload import from_options

SGLANG = load_table().engine("sglang")
VLLM = load_table().engine("vllm")
MLA = dict(heads=(128, 1, 576), attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128)
H128 = "results/baselines/h100-deepseek-mtp-kv4096-32768"
H16 = "results/baselines/h100-deepseek-mtp-tp8-kv4096-32768"


def wl(kv_dtype=None):
    return from_options({"batch_size": "8", "q_len": "4", "kv_len": "4096"}, {"kv_dtype": kv_dtype} if kv_dtype else {})


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """A synthetic MLA run with bf16 and fp8 groups (vLLM's FA3 MLA has no fp8 rows, as on the GPU)."""
    rows = known_rows(qs=(4,), **MLA) + [r for r in known_rows(qs=(4,), kv_dtype="fp8", **MLA)
                                         if r.kernel not in ("vllm-fa3-mla", "vllm-flash-attn-mla")]
    return load_source([write_run(tmp_path_factory.mktemp("mla") / "run", rows)])


def test_the_table_names_the_mla_defaults_per_kv_dtype():
    assert SGLANG.default_for("sm90", "mla", "bf16").id == SGLANG.default_for("sm90", "mla", "fp8").id == "mla:fa3"
    assert VLLM.default_for("sm90", "mla", "bf16").id == "mla:FLASH_ATTN_MLA"
    assert VLLM.default_for("sm90", "mla", "fp8").id == "mla:FLASHMLA"  # FLASH_ATTN_MLA refuses fp8
    assert VLLM.default_for("sm90", "gqa", "fp8").id == "FLASH_ATTN" and VLLM.default_for("sm80", "mla") is None
    fa = VLLM.setting("mla:FLASH_ATTN_MLA")
    assert fa.refuses_kv["fp8"].falls_to == "mla:FLASHMLA"
    assert {c.label() for c in fa.refuses_kv["fp8"].cites} >= {"vllm/v1/attention/backends/mla/flashattn_mla.py:42-46",
                                                              "vllm/platforms/cuda.py:146-152"}
    for eng, sid, route in ((SGLANG, "mla:fa3", "sglang-fa3-mla"), (VLLM, "mla:FLASH_ATTN_MLA", "vllm-flash-attn-mla")):
        s = eng.setting(sid)
        assert s.priced("sm90") and {s.route(st, "sm90").route for st in ("verify", "draft_extend")} == {route}


def test_a_refusal_must_fall_to_a_setting_of_the_table():
    data = {"schema": "kbench.engines/1", "engines": [{
        "engine": "e", "version": "1.0", "read_from": "-", "cite_url": "{file}", "settings": [
            {"id": "a", "flags": "-a", "gpus": ["sm90"], "default_on": ["sm90"], "routes": [],
             "refuses_kv": {"fp8": {"falls_to": "nope", "why": "w", "cites": [{"file": "f", "lines": "1", "says": "s"}]}}}]}]}
    with pytest.raises(ValueError, match="falls to an unknown setting 'nope'"):
        parse_table(data)
    data["engines"][0]["settings"][0]["refuses_kv"] = {"int4": {"falls_to": "a", "why": "w", "cites": []}}
    with pytest.raises(ValueError, match="refuses_kv.int4"):
        parse_table(data)


def test_the_defaults_are_priced_from_their_routes_and_the_saving_is_said(both):
    rec = recommend(both, wl("bf16"), SGLANG, overlap="sum")
    by = {r.setting.id: r for r in rec.results}
    d = by["mla:fa3"]
    want = batch_price({"verify": "sglang-fa3-mla", "draft_extend": "sglang-fa3-mla"}, 8, 4, 4096,
                       {"verify": 1, "draft_extend": 1}, "sum")
    assert d.default and d.per_step_us == pytest.approx(want)
    lines = switch_lines(rec)
    for other in ("mla:flashmla", "mla:flashinfer"):
        delta = by[other].per_step_us - d.per_step_us
        line = next(ln for ln in lines if f"to {other}:" in ln)
        assert ("saves" if delta < 0 else "costs") in line and f"{abs(delta / d.per_step_us):.1%}" in line
    j = {s["id"]: s for s in to_json(rec)["settings"]}
    assert j["mla:flashmla"]["vs_default_per_step_us"] == pytest.approx(by["mla:flashmla"].per_step_us - d.per_step_us)
    assert j["mla:fa3"]["vs_default_pct"] is None and j["mla:fa3"]["default"]


def test_vllm_with_an_fp8_cache_runs_flashmla_by_default(both):
    rec = recommend(both, wl("fp8"), VLLM, overlap="sum")
    by = {r.setting.id: r for r in rec.results}
    assert by["mla:FLASHMLA"].default and not by["mla:FLASH_ATTN_MLA"].default
    assert by["mla:FLASH_ATTN_MLA"].total_us is None
    assert by["mla:FLASH_ATTN_MLA"].unpriced.startswith("refused by the engine: an fp8 KV cache:")
    assert "runs mla:FLASHMLA instead" in by["mla:FLASH_ATTN_MLA"].unpriced
    rec = recommend(both, wl("bf16"), VLLM, overlap="sum")
    assert {r.setting.id for r in rec.results if r.default} == {"mla:FLASH_ATTN_MLA"}


def test_naming_the_refused_setting_on_an_fp8_run_is_one_line_exit_2(both, tmp_path):
    from click.testing import CliRunner

    from kbench.cli.main import cli

    with pytest.raises(BadInput, match=r"setting 'mla:FLASH_ATTN_MLA' .*an fp8 KV cache: .*runs mla:FLASHMLA instead"):
        recommend(both, wl("fp8"), VLLM, settings=["mla:FLASH_ATTN_MLA"])
    r = CliRunner().invoke(cli, ["recommend", H128, "--engine", "vllm", "--setting", "mla:FLASH_ATTN_MLA",
                                 "--batch-size", "16", "--q-len", "4", "--kv-len", "4096", "--kv-dtype", "fp8"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "FLASHMLA" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("engine,kv,default", [("sglang", "bf16", "mla:fa3"), ("sglang", "fp8", "mla:fa3"),
                                               ("vllm", "bf16", "mla:FLASH_ATTN_MLA"), ("vllm", "fp8", "mla:FLASHMLA")])
def test_the_committed_h100_baseline_prices_each_default_and_the_best(engine, kv, default):
    from kbench.recommend import recommend_for

    rec = recommend_for(H128, engine, batch_size=16, q_len=4, kv_len=4096, filters={"kv_dtype": kv})
    d = next(r for r in rec.results if r.default)
    assert d.setting.id == default and d.per_step_us and d.per_step_us > 0
    assert rec.best is not None and rec.best.setting.id in {"mla:flashmla", "mla:FLASHMLA", default}
    text = "\n".join(headline(rec))
    assert f"the default ({default})" in text
    if rec.best is not d:
        assert "switching saves" in text and f"switching from {default} to {rec.best.setting.id}: saves" in text


def test_the_16_head_baseline_prices_fa3_against_flashinfer(tmp_path):
    from kbench.recommend import recommend_for

    rec = recommend_for(H16, "sglang", batch_size=16, q_len=4, kv_len=4096, filters={"kv_dtype": "bf16"})
    by = {r.setting.id: r for r in rec.results}
    assert by["mla:fa3"].default and by["mla:fa3"].per_step_us and by["mla:flashinfer"].per_step_us
    assert by["mla:flashmla"].total_us is None  # FlashMLA takes 64 or 128 heads: skipped rows at 16
    j = json.loads(json.dumps(to_json(rec), default=str))
    assert {s["id"] for s in j["settings"] if s["default"]} == {"mla:fa3"}
