"""The answer for MLA (issue #27) from synthetic runs with known answers: report, policy, select and gate key on
the attention kind and MLA's geometry (a GQA policy never answers an MLA shape), and the report's MLA section
says which kernel to use per shape and what FlashMLA gains or loses against the wrapper as q_len grows."""
from __future__ import annotations

import json

import pytest
from gate_synth import gate_json, outcomes, timed_row
from gate_synth import write_run as write_gate_run
from report_synth import DECODE, FA2, case, cli, row, write_run

from kbench.cases.case import Case
from kbench.cases.models import MODELS
from kbench.errors import BadInput
from kbench.report import build_report
from kbench.report.mla import decode_vs_context, kernel_per_shape, trend
from kbench.report.policy import load_policy, lookup
from kbench.runs.rows import Row

FLASHMLA, FA3 = "flashmla", "flashinfer-mla-fa3"
PATHS = {FLASHMLA: "decode", FA3: "context"}


def mla(bs, q, kv, model="deepseek-v3", **kw) -> Case:
    return Case(batch_size=bs, q_len=q, kv_len=kv, **MODELS[model].case_fields(), **kw)


def mla_rows(model="deepseek-v3", bss=(16, 64), kvs=(4096, 32768), qs=(1, 2, 3, 4)):
    """FlashMLA ahead at q 1-2 (8 us against 10), behind at q 3-4 (14 against 10) at every (bs, kv)."""
    rows = []
    for bs in bss:
        for kv in kvs:
            for q in qs:
                c = mla(bs, q, kv, model)
                rows.append(row(FLASHMLA, c, 8.0 if q <= 2 else 14.0, path="decode"))
                rows.append(row(FA3, c, 10.0, path="context"))
    return rows


def gqa_rows():
    rows = []
    for bs in (16, 64):
        for kv in (4096, 32768):
            for q in (1, 2, 3, 4):
                rows += [row(DECODE, case(bs, q, kv), 10.0), row(FA2, case(bs, q, kv), 20.0)]
    return rows


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """One GQA run and one MLA run (128 and 16 heads), reported together (built once: the tests only read it)."""
    tmp_path = tmp_path_factory.mktemp("mixed")
    g = write_run(tmp_path / "gqa", gqa_rows())
    m = write_run(tmp_path / "mla", mla_rows() + mla_rows("deepseek-v3-tp8"))
    return build_report([g, m], tmp_path / "report")


def test_policy_groups_are_keyed_on_the_attention_kind_and_geometry(mixed):
    groups = {g["heads"]: g for g in mixed.policy["groups"]}
    assert set(groups) == {"32/8/128", "mla:128/512/64/128", "mla:16/512/64/128"}
    g = groups["mla:128/512/64/128"]
    assert (g["attention"], g["kv_lora_rank"], g["qk_rope_head_dim"], g["qk_nope_head_dim"]) == ("mla", 512, 64, 128)
    assert g["label"] == "mla h128 512+64 (nope 128) bf16 p64"
    assert groups["32/8/128"]["attention"] == "gqa"


def test_select_answers_mla_heads_from_the_mla_group_only(mixed, tmp_path):
    pol = mixed.policy
    assert lookup(pol, 16, 1, 4096, heads="mla:128/512/64/128")["kernel"] == FLASHMLA
    assert lookup(pol, 16, 4, 4096, heads="mla:128/512/64/128")["kernel"] == FA3
    assert lookup(pol, 16, 4, 4096, heads="32/8/128")["kernel"] == DECODE
    with pytest.raises(BadInput, match="no measured group matches --heads mla:64/512/64/128"):
        lookup(pol, 16, 1, 4096, heads="mla:64/512/64/128")  # Kimi K2's 64 heads were not measured
    res = cli("select", "--policy", mixed.out_dir / "policy.json", "--batch-size", 64, "--q-len", 2, "--kv-len",
              32768, "--heads", "mla:16/512/64/128")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"{FLASHMLA} (decode path)") and "mla h16 512+64" in res.output


def test_a_gqa_policy_is_never_used_for_an_mla_shape(tmp_path):
    r = build_report([write_run(tmp_path / "gqa", gqa_rows())], tmp_path / "rep")
    (g,) = r.policy["groups"]
    assert lookup(r.policy, 16, 4, 4096)["kernel"] == DECODE  # the one group answers when no heads are given
    for heads in ("mla:128/512/64/128", "mla:32/8/128/0"):
        with pytest.raises(BadInput, match="no measured group matches"):
            lookup(r.policy, 16, 4, 4096, heads=heads, extrapolate=True)
    res = cli("select", "--policy", r.out_dir / "policy.json", "--batch-size", 16, "--q-len", 4, "--kv-len", 4096,
              "--heads", "mla:128/512/64/128")
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "no measured group" in res.output


def test_a_policy_from_before_mla_reads_as_gqa(tmp_path, mixed):
    pol = json.loads((mixed.out_dir / "policy.json").read_text())
    pol["groups"] = [g for g in pol["groups"] if g["attention"] == "gqa"]
    for g in pol["groups"]:
        for k in ("attention", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim"):
            del g[k]
    (tmp_path / "old.json").write_text(json.dumps(pol))
    old = load_policy(tmp_path / "old.json")
    assert old["groups"][0]["attention"] == "gqa"
    assert lookup(old, 16, 4, 4096, heads="32/8/128")["kernel"] == DECODE
    with pytest.raises(BadInput, match="no measured group"):
        lookup(old, 16, 4, 4096, heads="mla:128/512/64/128")


def test_regret_judges_mla_cases_in_their_own_group(mixed):
    reg = mixed.regrets[0]
    assert reg.cases == len(mixed.cases) and reg.unavailable == 0 and reg.worst_pct == 0


def test_the_mla_section_names_the_kernel_per_shape_and_the_q_len_trend(mixed):
    headers, rows = kernel_per_shape(mixed.cases, mixed.runset.rows[mixed.runset.rows.status == "ok"])
    assert headers[3:] == ["q=1", "q=2", "q=3", "q=4"]
    assert len(rows) == 2 * 2 * 2  # two head counts x bs 16, 64 x kv 4096, 32768
    for r in rows:
        assert r[3].startswith(f"{FLASHMLA} +25%") and r[6].startswith(f"{FA3} +40%")
        assert "of ceiling" in r[3]
    _, versus = decode_vs_context(mixed.cases, mixed.runset.rows)
    by_q = {(r[0], r[1]): r for r in versus}
    r1, r4 = by_q[("mla h128 512+64 (nope 128) bf16 p64", "1")], by_q[("mla h128 512+64 (nope 128) bf16 p64", "4")]
    assert (r1[3], r1[4], r1[5], r1[8]) == (FLASHMLA, FA3, "1.25x", "4")
    assert (r4[5], r4[9]) == ("0.71x", "4")
    lines = trend(mixed.cases)
    assert len(lines) == 2 and all("ahead at q_len 1, 2 and behind at 3, 4" in x for x in lines)
    md = (mixed.out_dir / "report.md").read_text()
    assert "## MLA (latent attention)" in md and "Decode-style against prefill-style" in md


def test_a_gqa_only_report_has_no_mla_section(tmp_path):
    r = build_report([write_run(tmp_path / "gqa", gqa_rows())], tmp_path / "rep")
    assert "MLA (latent attention)" not in (r.out_dir / "report.md").read_text()


def _gate_rows(model, factor=1.0, seed=0):
    rows = []
    for i, q in enumerate((1, 4)):
        c = mla(16, q, 4096, model)
        rows += [timed_row(FLASHMLA, "decode", c, 8.0 * factor, seed=seed + i),
                 timed_row(FA3, "context", c, 10.0 * factor, seed=seed + 10 + i),
                 Row.for_case("reference", "reference", "torch", c, "ok")]
    return rows


def test_the_gate_matches_mla_rows_on_their_geometry(tmp_path):
    base = write_gate_run(tmp_path / "base", _gate_rows("deepseek-v3", seed=1))
    same = write_gate_run(tmp_path / "same", _gate_rows("deepseek-v3", seed=2))
    res, data = gate_json(tmp_path, base, same)
    assert res.exit_code == 0, res.output
    assert set(outcomes(data).values()) == {"pass"} and len(data["rows"]) == 4
    slow = write_gate_run(tmp_path / "slow", _gate_rows("deepseek-v3", factor=1.2, seed=3))
    res, data = gate_json(tmp_path, base, slow)
    assert res.exit_code == 1 and "regression" in set(outcomes(data).values())
    # the same shapes at another head count are other cases: nothing of the baseline is matched
    tp8 = write_gate_run(tmp_path / "tp8", _gate_rows("deepseek-v3-tp8", seed=4))
    res, data = gate_json(tmp_path, base, tp8)
    assert res.exit_code == 1 and sorted(set(outcomes(data).values())) == ["missing", "new"]


# ---- the GPU script's tables and checks, on synthetic runs ---------------------------------------------------
def _script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "gpu" / "mla_check.py"
    spec = importlib.util.spec_from_file_location("mla_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gpu_rows(flashmla_status="ok", fa2_status="ok"):
    rows = []
    for model in ("deepseek-v3", "deepseek-v3-tp8"):
        for kv_dtype in ("bf16", "fp8"):
            for q in (1, 2, 4):
                c = mla(16, q, 4096, model, kv_dtype=kv_dtype)
                heads = MODELS[model].num_qo_heads
                if heads == 128:
                    r = row(FLASHMLA, c, 8.0 if q == 1 else 12.0, path="decode", status=flashmla_status,
                            reason="" if flashmla_status == "ok" else "FlashMLA (sgl-flash-mla) is not installed: pip")
                else:
                    r = row(FLASHMLA, c, None, path="decode", status="skipped", reason="FlashMLA takes 64 or 128 q heads")
                rows += [r, row(FA3, c, 10.0, path="context"),
                         row("flashinfer-mla-fa2", c, 11.0, path="context", status=fa2_status,
                             reason="" if fa2_status == "ok" else "rel err 0.5 > tolerance 0.02"),
                         row("trtllm-gen-mla", c, None, path="decode", status="skipped",
                             reason="needs SM100/SM103/SM107 ... XQA MLA requires SM120a")]
    for r in rows:
        if r.status == "ok":
            r.rel_err = 0.004
    return rows


def test_the_gpu_script_prints_the_comparison_and_passes_a_clean_run(tmp_path, capsys):
    mod = _script()
    run = write_run(tmp_path / "run", _gpu_rows())
    assert mod.main(["--runs", str(run), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("mla check PASSED: 30 kernel/case pairs checked (max rel err bf16 0.0040, fp8 0.0040)")
    assert "winners: 128 heads fa3 4 flashmla 2; 16 heads fa3 6" in last and "XQA MLA requires SM120a" in out
    headers, rows = mod.comparison_table(load_rows(run))
    assert headers[5:8] == ["flashmla us (ceil)", "fa3 us (ceil)", "fa2 us (ceil)"]
    h128 = [r for r in rows if r[0] == "128"]
    assert len(h128) == 6 and h128[0][8] == "flashmla" and h128[0][9] == "25.0% over fa3"
    assert all(r[5] == "skipped" for r in rows if r[0] == "16")  # FlashMLA's head counts: not a failure
    assert (tmp_path / "out" / "report" / "report.md").exists()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["failures"] == [] and len(summary["trend"]) == 4
    assert sum("one path only (flashinfer-mla-fa3)" in x for x in summary["trend"]) == 2  # 16 heads: no FlashMLA


@pytest.mark.parametrize("kw,why", [(dict(flashmla_status="skipped"), "flashmla skipped on 6 case(s) at 128 heads: "
                                     "FlashMLA (sgl-flash-mla) is not installed"),
                                    (dict(fa2_status="wrong"), "flashinfer-mla-fa2 wrong on")])
def test_the_gpu_script_fails_a_missing_flashmla_or_a_wrong_kernel(tmp_path, capsys, kw, why):
    mod = _script()
    run = write_run(tmp_path / "run", _gpu_rows(**kw))
    assert mod.main(["--runs", str(run), "--out", str(tmp_path / "out")]) == 1
    assert why in capsys.readouterr().out


def test_the_gpu_script_fails_a_kernel_with_no_row_at_a_case(tmp_path, capsys):
    """A sweep that dropped a kernel's row (the H200 MLA run before December 2026: 45 rows) is not a pass."""
    mod = _script()
    rows = _gpu_rows()
    gone = next(r for r in rows if r.kernel == "flashinfer-mla-fa2" and r.num_qo_heads == 128)
    run = write_run(tmp_path / "run", [r for r in rows if r is not gone])
    assert mod.main(["--runs", str(run), "--out", str(tmp_path / "out")]) == 1
    assert f"no row of flashinfer-mla-fa2 at {gone.case_id}" in capsys.readouterr().out


def test_the_gpu_script_fails_a_read_ceiling_above_the_memory_peak(tmp_path, capsys):
    """The fractions of the read ceiling are a figure only when the ceiling is possible (the H200 printed 5,507
    GB/s once, above its 4,917 GB/s peak, in a call whose timer was broken)."""
    mod = _script()
    ok = write_run(tmp_path / "ok", _gpu_rows(), read_bandwidth_gbs=4605.0, memory_peak_gbs=4916.7)
    assert mod.main(["--runs", str(ok), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    bad = write_run(tmp_path / "bad", _gpu_rows(), read_bandwidth_gbs=5507.0, memory_peak_gbs=4916.7)
    assert mod.main(["--runs", str(bad), "--out", str(tmp_path / "out2")]) == 1
    assert "bad: the read ceiling 5,507 GB/s is above the memory's theoretical peak 4,917 GB/s" in capsys.readouterr().out


def test_the_gpu_script_reuses_a_complete_sweep_and_resumes_an_interrupted_one(tmp_path, monkeypatch):
    mod = _script()
    runs = tmp_path / "runs"
    done = write_run(runs / "mla-h128-20261204-120000", _gpu_rows())
    calls = []
    monkeypatch.setattr(mod.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or
                        type("P", (), {"stdout": "run: /x\n", "stderr": "", "returncode": 0})())
    assert mod.sweep(["-s", "deepseek-mtp"], runs, "mla-h128") == done and calls == []  # complete: reused
    m = json.loads((done / "manifest.json").read_text())
    (done / "manifest.json").write_text(json.dumps({**m, "status": "interrupted"}))
    mod.sweep(["-s", "deepseek-mtp"], runs, "mla-h128")
    assert calls[-1][-3:] == ["sweep", "--resume", str(done)]
    mod.sweep(["-s", "deepseek-mtp-tp8"], runs, "mla-h16")  # none yet: started
    assert calls[-1][-6:] == ["sweep", "-s", "deepseek-mtp-tp8", "--out", str(runs), "--name", "mla-h16"][-6:]


def load_rows(run):
    from kbench.runs.store import load_run

    return load_run(run).rows


def test_the_exported_selector_keys_on_the_attention_kind_and_the_policy_validates(mixed, tmp_path):
    import importlib.util

    import jsonschema

    from kbench.recommend.export import export_policy
    from kbench.report.policy_schema import policy_schema

    jsonschema.validate(mixed.policy, policy_schema())  # mla:... heads and the MLA group keys are in the schema
    path = export_policy(mixed.policy, "mixed", tmp_path / "sel.py")
    spec = importlib.util.spec_from_file_location("sel", path)
    sel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sel)
    for heads in ("mla:128/512/64/128", "mla:16/512/64/128", "32/8/128"):
        for bs, q, kv in ((16, 1, 4096), (64, 4, 32768), (30, 3, 9000)):
            assert sel.select(bs, q, kv, heads=heads) == lookup(mixed.policy, bs, q, kv, heads=heads)["kernel"]
    with pytest.raises(ValueError, match="no measured group matches"):
        sel.select(16, 1, 4096, heads="128/1/576")  # MLA's shape spelled as GQA heads: no group
    with pytest.raises(ValueError, match="mla:QO/KV_LORA_RANK/ROPE/NOPE"):
        sel.select(16, 1, 4096, heads="mla:128/512")


def test_a_workload_keeps_mla_heads():
    from kbench.recommend.workload import canonical

    assert canonical("heads", "mla:16/512/64/128", "w.jsonl") == ["mla:16/512/64/128"]
    assert canonical("heads", "32/8/128", "w.jsonl") == ["32/8/128"]
