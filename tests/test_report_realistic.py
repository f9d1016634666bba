"""The report's realistic-batch section: rows paired on one axis, winners and ratios."""
import json

import pandas as pd

from kbench.cases.case import Case
from kbench.report.realistic import acceptance_table, axis_effect_table, realistic_blocks, with_defaults

BASE = Case(16, 4, 4096, 32, 8, 128)


def row(kernel, path, us, **axes):
    c = Case(**{**BASE.to_dict(), **axes})
    return {"kernel": kernel, "path": path, "median_us": us, "status": "ok", "case_id": c.case_id, **c.to_dict()}


def rows():
    return pd.DataFrame([
        row("trtllm-decode", "decode", 60.0), row("fa2-prefill", "context", 62.0),
        row("trtllm-decode", "decode", 100.0, kv_dist="lognormal:1.0"),
        row("fa2-prefill", "context", 61.0, kv_dist="lognormal:1.0"),
        row("trtllm-decode", "decode", 58.0, q_dist="accept:0.7"),
        row("trtllm-decode-ragged", "decode", 57.0, q_dist="accept:0.7"),
        row("fa2-prefill", "context", 50.0, q_dist="accept:0.7"),
        row("trtllm-decode", "decode", 10.0, window_left=128),
        row("fa2-prefill", "context", 17.0, window_left=128),
    ])


def test_acceptance_table_names_the_winner_and_ragged_over_padded():
    ok = with_defaults(rows())
    headers, out = acceptance_table(ok)
    assert len(out) == 1
    line = dict(zip(headers, out[0]))
    assert line["q_dist"] == "accept:0.7" and line["padded decode"] == "trtllm-decode"
    assert line["winner"] == "fa2-prefill by 1.14x" and line["ragged / padded"] == "0.98"


def test_acceptance_table_without_a_ragged_kernel_measured_says_dash():
    """A ragged-q sweep of padded decode and context only (--kernels trtllm-decode,fa2-prefill) has no ragged
    decode row: its line shows '-' there instead of the report crashing on the missing kernel family."""
    ok = with_defaults(rows())
    ok = ok[ok["kernel"] != "trtllm-decode-ragged"]
    headers, out = acceptance_table(ok)
    line = dict(zip(headers, out[0]))
    assert line["ragged decode µs"] == "-" and line["ragged / padded"] == "-"
    assert line["winner"] == "fa2-prefill by 1.16x"


def test_heterogeneous_kv_flips_the_winner():
    ok = with_defaults(rows())
    headers, out = axis_effect_table(ok, "kv_dist")
    by_kernel = {r[3]: dict(zip(headers, r)) for r in out}
    assert by_kernel["trtllm-decode"]["ratio"] == "1.67x" and by_kernel["fa2-prefill"]["ratio"] == "0.98x"
    assert by_kernel["trtllm-decode"]["winner at default"] == "trtllm-decode"
    assert by_kernel["trtllm-decode"]["winner here"] == "fa2-prefill"


def test_sections_present_only_for_realistic_rows():
    blocks = realistic_blocks(rows())
    titles = [b[2] for b in blocks if b[0] == "h"]
    assert titles[0] == "Realistic batches" and "Sliding window vs full attention" in titles
    assert "Attention sinks vs none" not in titles  # no sink rows: no section
    plain = rows()[lambda d: (d.kv_dist == "fixed") & (d.q_dist == "fixed") & (d.window_left == -1)]
    assert realistic_blocks(plain) == []
    old = plain.drop(columns=["kv_dist", "q_dist", "window_left", "sinks", "max_seq_len"])  # an older run
    assert realistic_blocks(old) == []


def test_report_and_select_end_to_end_on_realistic_runs(tmp_path):
    """A run with ragged-q and windowed cases: the report's section answers, the policy keeps one group per
    realistic setting (schema /2), and select picks the group by the new flags."""
    from report_synth import DECODE, FA2, case, cli, row, write_run

    RAGGED = "trtllm-decode-ragged"
    rows = []
    for q in (2, 4, 8):
        for bs in (16, 64):
            u, a, w = case(bs, q, 4096), case(bs, q, 4096, q_dist="accept:0.7"), case(bs, q, 4096, window_left=128)
            rows += [row(DECODE, u, 50.0), row(FA2, u, 60.0),
                     row(DECODE, a, 52.0), row(RAGGED, a, 51.0, path="decode"), row(FA2, a, 40.0),
                     row(DECODE, w, 9.0), row(FA2, w, 17.0)]
    run = write_run(tmp_path / "real-run", rows)
    res = cli("report", run, "--out", tmp_path / "rep")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Realistic batches" in md and "Padded vs ragged decode vs context, per acceptance rate" in md
    assert "Sliding window vs full attention" in md and "fa2-prefill by 1.27x" in md  # 52 -> 40 at accept:0.7
    pol = json.loads((tmp_path / "rep" / "policy.json").read_text())
    assert pol["schema"] == "kbench.policy/2" and len(pol["groups"]) == 3
    base = ["select", "--policy", tmp_path / "rep" / "policy.json", "--batch-size", 16, "--q-len", 4,
            "--kv-len", 4096]
    amb = cli(*base)
    assert amb.exit_code == 2 and "3 groups match" in amb.output and "--q-dist" in amb.output
    acc = cli(*base, "--q-dist", "accept:0.7", "--window-left", "-1", "--json")
    assert acc.exit_code == 0 and json.loads(acc.output)["kernel"] == FA2
    win = cli(*base, "--window-left", "128", "--json")
    assert win.exit_code == 0 and json.loads(win.output)["kernel"] == DECODE
    bad = cli(*base, "--q-dist", "poisson:1")
    assert bad.exit_code == 2 and "--q-dist: unknown distribution 'poisson'" in bad.output


def test_regret_judges_each_realistic_group_in_its_own_group(tmp_path):
    """One run with every realistic axis at a non-default value beside the idealised batch: the policy has a
    group per value, and the regret looks each case up in its own (before, every case was a policy hole)."""
    from report_synth import DECODE, FA2, case, row as synth_row, write_run

    from kbench.report import build_report

    variants = [{}, {"kv_dist": "lognormal:1.0"}, {"q_dist": "accept:0.7"}, {"window_left": 128, "sinks": "on"},
                {"max_seq_len": "context:131072"}, {"skip_softmax": "1000"}, {"kv_dtype": "fp8", "q_dtype": "fp8"}]
    rows = [r for v in variants for q in (1, 4, 8)
            for r in (synth_row(DECODE, case(16, q, 4096, **v), 10.0 + q), synth_row(FA2, case(16, q, 4096, **v), 12.0))]
    res = build_report([write_run(tmp_path / "r", rows)], tmp_path / "rep", holdout=0.3)
    assert len(res.policy["groups"]) == len(variants)
    whole, held = res.regrets
    assert (whole.cases, whole.unavailable, whole.mean_pct) == (21, 0, 0)
    assert held.unavailable == 0 and held.mean_pct is not None
