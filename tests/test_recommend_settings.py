"""The table of engine settings: well formed, every kernel a kbench kernel, exactly one route per (setting, step,
GPU, FlashInfer version), every route cited, the split settings routed as the documented rule says, and the
kernels no setting reaches listed."""
from __future__ import annotations

import json
import re

import pytest
from recommend_synth import recommend_cli

from kbench.errors import BadInput
from kbench.recommend.settings import (FAMILIES, STEPS, gpu_family, known_kernels, load_table, parse_table,
                                       version_key)

TABLE = load_table()
FLASHINFERS = ("0.7.2", "0.7.2.post1", "0.7.3", "0.7.4", "0.8.0")


def test_every_engine_and_setting_routes_each_step_once_per_gpu_and_flashinfer():
    known = set(known_kernels())
    assert {"trtllm-decode", "fa2-prefill", "decode-wrapper", "trtllm-context"} <= known and "reference" not in known
    assert TABLE.names() == ["sglang", "vllm"]
    for eng in TABLE.engines:
        for s in eng.settings:
            for fam in s.gpus:
                for fi in FLASHINFERS:
                    for step in STEPS:
                        r = s.route(step, fam, fi)  # raises unless exactly one
                        assert (r.kernel in known) if r.kernel else r.unmeasured, (eng.label, s.id, fam, step)
                        assert r.ragged_kernel is None or r.ragged_kernel in known
            for r in s.routes:
                assert r.cites and all(c.says and re.fullmatch(r"\d+(-\d+)?", c.lines) for c in r.cites)
                for c in r.cites:
                    first, last = c.span
                    assert 1 <= first <= last
                    url = c.url(eng.cite_url)
                    assert url.startswith("https://github.com/") and f"#L{first}-L{last}" in url
                    if "@" not in c.file:  # the engine's own source: its repository's path
                        assert c.file.startswith({"sglang": "python/sglang/", "vllm": "vllm/"}[eng.engine])


def test_sglang_split_settings_follow_the_mode_for_both_steps():
    """--speculative-attention-mode picks the decode or the prefill backend for target verify (hybrid backend)
    and for draft extend (DraftBackendFactory); inside a backend the kernel is the backend's own."""
    eng = TABLE.engine("sglang")
    own = {"flashinfer": "fa2-prefill", "trtllm_mha": "trtllm-decode"}
    for s in eng.settings:
        if s.attention != "gqa":
            continue
        flags = dict(re.findall(r"--([a-z-]+) (\S+)", s.flags))
        if "attention-backend" in flags and flags["attention-backend"] not in own:
            continue
        prefill = flags.get("prefill-attention-backend", flags.get("attention-backend"))
        decode = flags.get("decode-attention-backend", flags.get("attention-backend"))
        mode = flags.get("speculative-attention-mode", "prefill")
        verify = decode if mode == "decode" else prefill
        draft = flags.get("speculative-draft-attention-backend", verify)
        for fam in s.gpus:
            assert s.kernel("verify", fam) == own[verify], s.id
            assert s.kernel("draft_extend", fam) == own[draft], s.id


def test_gpu_families_and_versions():
    assert [gpu_family(x) for x in (80, 86, 89, 90, 100, 103, 120, 121, 75, None, True)] == \
        ["sm80", "sm80", "sm80", "sm90", "sm100", "sm100", "sm120", "sm120", None, None, None]
    assert version_key("0.7.2.post1") == (0, 7, 2) < version_key("0.7.4") and version_key("v0.34.0") == (0, 34, 0)
    assert version_key("0.7.4+cu128") == (0, 7, 4) and version_key(" 0.7.3rc1 ") == (0, 7, 3)
    for junk in ("main", "abc", "0.7.4abc", "", "0.7.4 beta", "\u0660.7"):  # PEP 440, ASCII digits
        with pytest.raises(BadInput, match="not a version"):
            version_key(junk)


def test_unreached_kernels_are_listed_with_why():
    sg = {k: why for k, why, _ in TABLE.engine("sglang").unreached_kernels(known_kernels())}
    assert {"trtllm-context", "trtllm-fmha-v2", "fa3-prefill", "decode-wrapper", "trtllm-decode-ragged"} <= set(sg)
    assert "plain extend and prefill only" in sg["trtllm-context"]
    vl = {k: why for k, why, _ in TABLE.engine("vllm").unreached_kernels(known_kernels() + ["mla-new-kernel"])}
    assert set(vl) == {"trtllm-context", "trtllm-fmha-v2", "mla-new-kernel", "vllm-fa3-sgl-call", "flashinfer-mla-fa3",
                       "flashinfer-mla-fa2", "vllm-fa3-mla-sgl-call"}
    assert vl["mla-new-kernel"].startswith("no setting in the table reaches it")
    assert all(not why.startswith("no setting in the table") for k, why in {**sg, **vl}.items() if k != "mla-new-kernel")


def test_engine_versions_and_unknown_names():
    assert TABLE.engine("vllm").version == "0.34.0" and TABLE.engine("sglang", "0.5.23").flashinfer == "0.7.2"
    with pytest.raises(BadInput, match="unknown engine"):
        TABLE.engine("tgi")
    with pytest.raises(BadInput, match="has sglang 0.5.23 only"):
        TABLE.engine("sglang", "0.4.0")


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d.update(schema="x"), "schema"),
    (lambda d: d["engines"][0]["settings"][0]["routes"][0].update(unmeasured="x"), "kernel or unmeasured"),
    (lambda d: d["engines"][0]["settings"][0]["routes"][0].update(cites=[]), "cites must be a non-empty list"),
    (lambda d: d["engines"][0]["settings"][0]["routes"][0].update(gpus=["sm70"]), "outside the setting's"),
    (lambda d: d["engines"][0]["settings"][0].update(gpus=["h100"]), "gpus must be"),
    (lambda d: d["engines"][0]["settings"][0]["routes"][0].update(step="prefill"), "step must be"),
    (lambda d: d["engines"][0]["settings"][0]["routes"][0]["cites"][0].update(lines="a-b"), "is not N or N-M"),
    (lambda d: d["engines"][0]["settings"][0]["routes"][0].update(color="red"), "unknown key 'color'"),
    (lambda d: d["engines"][0]["settings"][0]["routes"][0].update(flashinfer_from="new"),
     "flashinfer_from 'new' is not a version"),
    (lambda d: d["engines"][0].update(flashinfer="0.7.x"), "flashinfer '0.7.x' is not a version"),
])
def test_a_malformed_table_names_the_entry(mutate, msg):
    data = {"schema": "kbench.engines/1", "engines": [{
        "engine": "e", "version": "1", "read_from": "x", "cite_url": "https://github.com/x/{file}#L{first}-L{last}",
        "settings": [{"id": "s", "flags": "--s", "gpus": ["sm90"], "routes": [
            {"step": "verify", "kernel": "k", "cites": [{"file": "f.py", "lines": "1-2", "says": "x"}]},
            {"step": "draft_extend", "kernel": "k", "cites": [{"file": "f.py", "lines": "3", "says": "y"}]}]}]}]}
    parse_table(data)
    mutate(data)
    with pytest.raises(ValueError, match=msg):
        parse_table(data)


def test_settings_are_printed_with_their_citations():
    r = recommend_cli("--settings", "--engine", "sglang", "--markdown", "-")
    assert r.exit_code == 0, r.output
    assert "| `--attention-backend trtllm_mha` | sm90,sm100,sm120 | target verify | trtllm-decode |" in r.output
    assert ("https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt/layers/attention/"
            "trtllm_mha_backend.py#L1749-L1752") in r.output
    assert "- `trtllm-context`:" in r.output
    r = recommend_cli("--settings", "--engine", "vllm", "--json")
    data = json.loads(r.output)
    assert data["version"] == "0.34.0" and {s["id"] for s in data["settings"]} >= {"FLASHINFER", "FLASH_ATTN"}
    assert {g for s in data["settings"] for g in s["gpus"]} <= set(FAMILIES)
