"""The timing state as the `power` axis, through the commands: the axis and its case ids, rows that record it,
old runs read as unthrottled, the report's flip list and per-state policy, select naming the state, the gate
refusing to mix states. (How each state times a case, the settle logic and the heat soak: test_timing_states.py.)"""
from __future__ import annotations

import json

import pandas as pd
import pytest
from report_synth import DECODE, FA2, case, cli, row, write_run

from kbench.cases import axes
from kbench.cases.case import Case
from kbench.errors import BadInput
from kbench.report import build_report
from kbench.report.power_states import flip_lines, flips, side_by_side
from kbench.runs.rows import Row
from kbench.runs.store import load_run

BASELINE = "results/baselines/h200-draft-extend-kv4096"


# ---- the axis -------------------------------------------------------------------------------------------
def test_power_axis_parses_both_and_rejects_bad_names():
    ax = axes.AXIS["power"]
    assert ax.parse("both", "--power", "x") == ["unthrottled", "sustained"]
    assert ax.parse("Sustained", "--power", "x") == ["sustained"]
    assert ax.parse(["unthrottled", "both"], "--power", "x") == ["unthrottled", "sustained"]
    with pytest.raises(BadInput, match="'hot' is not one of unthrottled, sustained"):
        ax.parse("hot", "--power", "x")
    with pytest.raises(BadInput, match="empty value"):
        ax.parse(" , ", "--power", "x")
    assert ax.has(axes.GRID) and ax.has(axes.GROUP) and ax.has(axes.GATE)
    assert "power" in axes.gate_key()


def test_case_id_unchanged_unthrottled_and_marked_sustained():
    c = case(16, 4, 4096)
    assert c.power == "unthrottled" and c.case_id == "bs16-q4-kv4096-h32.8.128-p64-HND-bf16"
    s = case(16, 4, 4096, power="sustained")
    assert s.case_id == c.case_id + "-sustained"


def test_sweep_flag_bad_power_is_one_error_line():
    res = cli("sweep", "--scenario", "quick", "--power", "warm", "--out", "/nonexistent-never-written")
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "'warm' is not one of" in lines[0]


# ---- rows ------------------------------------------------------------------------------------------------
def _pair_rows(flip_q=(5, 6, 7, 8)):
    """Unthrottled: fa2 wins q 5-8 by ~3.5%; sustained: fa2 is 12% slower there, so decode wins."""
    rows = []
    for q in range(1, 11):
        for state in ("unthrottled", "sustained"):
            c = case(64, q, 4096, power=state)
            dec = 100.0 + 10 * q
            fa2 = dec / 1.035 if q in flip_q else dec * 1.3
            if state == "sustained":
                fa2 *= 1.12
            r1, r2 = row(DECODE, c, dec, rel=0.002), row(FA2, c, fa2, rel=0.002)
            if state == "sustained":
                for r in (r1, r2):
                    r.sm_clock_mean_mhz, r.power_w, r.throttle_reasons = 1740.0, 699.0, "sw-power-cap"
            rows += [r1, r2]
    return rows


def test_rows_round_trip_with_power_columns(tmp_path):
    run = load_run(write_run(tmp_path / "r", _pair_rows()))
    d = run.rows
    s = d[(d["power"] == "sustained") & (d["path"] != "reference")]
    assert len(s) == 20 and set(s["throttle_reasons"]) == {"sw-power-cap"}
    assert s["sm_clock_mean_mhz"].eq(1740.0).all() and s["power_w"].eq(699.0).all()
    assert set(d[d["power"] == "unthrottled"]["case_id"].str.endswith("sustained")) == {False}


def test_old_runs_read_as_unthrottled(tmp_path):
    run = load_run(write_run(tmp_path / "r", [row(DECODE, case(1, 1, 1024), 10.0)]))
    # an older run: rows without the power columns
    for f in ("rows.jsonl",):
        p = run.path / f
        recs = [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()]
        for r in recs:
            for k in ("power", "sm_clock_mean_mhz", "power_w", "throttle_reasons", "power_settle"):
                r.pop(k, None)
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    for f in ("rows.parquet", "rows.csv"):
        p = run.path / f
        if p.exists():
            df = pd.read_parquet(p) if f.endswith("parquet") else pd.read_csv(p)
            df = df.drop(columns=[c for c in ("power", "sm_clock_mean_mhz", "power_w", "throttle_reasons",
                                              "power_settle") if c in df.columns])
            df.to_parquet(p) if f.endswith("parquet") else df.to_csv(p, index=False)
    d = load_run(run.path).rows
    assert set(d["power"]) == {"unthrottled"}


def test_committed_baseline_reads_as_unthrottled():
    d = load_run(BASELINE).rows
    assert set(d["power"]) == {"unthrottled"}
    assert not d["case_id"].str.contains("sustained").any()


# ---- report ----------------------------------------------------------------------------------------------
def test_flip_list_names_every_flipped_decision_with_margins(tmp_path):
    run = write_run(tmp_path / "r", _pair_rows())
    rows = load_run(run).rows
    pairs = side_by_side(rows)
    assert len(pairs) == 10
    f = flips(pairs)
    assert f["q_len"].tolist() == [5, 6, 7, 8]
    assert set(f["winner_unthrottled"]) == {FA2} and set(f["winner_sustained"]) == {DECODE}
    assert f["margin_unthrottled_pct"].round(1).eq(3.5).all()
    # sustained: fa2 = dec/1.035*1.12 -> (1.12/1.035 - 1) = 8.2% slower than decode
    assert f["margin_sustained_pct"].round(1).eq(8.2).all()
    lines = flip_lines(pairs)
    assert len(lines) == 4 and lines[0].startswith("bs 64 q 5 kv 4096")
    assert f"unthrottled {FA2} ({DECODE} +3.5%), sustained {DECODE} ({FA2} +8.2%)" in lines[0]
    assert not f["tie_unthrottled"].any() and not f["tie_sustained"].any() and "[a tie" not in lines[0]


def test_flip_within_the_spread_is_labelled_a_tie_and_listed_last(tmp_path):
    rows = _pair_rows(flip_q=(5,))
    for r in rows:  # q 9: fa2 0.3% ahead unthrottled, 0.3% behind sustained, spreads of 1%: a tie in both
        if r.q_len == 9 and r.kernel == FA2:
            r.median_us = (100.0 + 90) * (0.997 if r.power == "unthrottled" else 1.003)
    for r in rows:
        if r.q_len == 9:
            r.rel_spread = 0.01
    pairs = side_by_side(load_run(write_run(tmp_path / "r", rows)).rows)
    f = flips(pairs)
    assert f["q_len"].tolist() == [5, 9]
    assert flips(pairs, real_only=True)["q_len"].tolist() == [5]
    q9 = f[f["q_len"] == 9].iloc[0]
    assert q9["tie_unthrottled"] and q9["tie_sustained"]
    lines = flip_lines(pairs)
    assert lines[0].startswith("bs 64 q 5 ") and "[a tie" not in lines[0]
    assert lines[1].startswith("bs 64 q 9 ") and lines[1].endswith("[a tie when unthrottled and when sustained]")


def test_flip_whose_rival_was_not_timed_in_a_state_is_labelled_not_counted(tmp_path):
    # seen on the H200: a sweep cut short mid-case left fa2 untimed in the sustained state at one case, and
    # the flip list counted "fa2-prefill n/a" as a flip beyond the spread
    rows = [r for r in _pair_rows(flip_q=(5,))
            if not (r.q_len == 9 and r.kernel == FA2 and r.power == "sustained")]
    for r in rows:  # q 9: decode faster than fa2 sustained is now untestable; make decode win there sustained
        if r.q_len == 9 and r.kernel == FA2 and r.power == "unthrottled":
            r.median_us = 50.0
    pairs = side_by_side(load_run(write_run(tmp_path / "r", rows)).rows)
    f = flips(pairs)
    assert 9 in f["q_len"].tolist()
    assert 9 not in flips(pairs, real_only=True)["q_len"].tolist()
    line = [ln for ln in flip_lines(pairs) if ln.startswith("bs 64 q 9 ")][0]
    assert line.endswith(f"[{FA2} not timed when sustained]") and f"({FA2} n/a)" in line
    assert flip_lines(pairs)[-1] == line  # listed after the real flips


def test_report_per_state_policy_and_cli_flip_lines(tmp_path):
    run = write_run(tmp_path / "r", _pair_rows())
    res = build_report([run], tmp_path / "rep", power="sustained")
    assert {g["power"] for g in res.policy["groups"]} == {"sustained"}
    assert (tmp_path / "rep" / "power.csv").is_file()
    out = cli("report", run, "--out", tmp_path / "rep2")
    assert out.exit_code == 0, out.output
    assert "4 decision(s) flip between them, 4 beyond the spread in both states" in out.output
    md = (tmp_path / "rep2" / "report.md").read_text()
    html = (tmp_path / "rep2" / "report.html").read_text()
    assert "Timing states: unthrottled vs sustained" in md and "4 decision(s) flip between them" in md
    flip_rows = [ln for ln in md.splitlines() if ln.endswith("| flips |") and "| +3.5% |" in ln]
    assert len(flip_rows) == 4 and "Timing states: unthrottled vs sustained" in html
    assert out.output.count("flip: bs 64") == 4
    bad = cli("report", run, "--out", tmp_path / "rep3", "--power", "both")
    assert bad.exit_code == 2 and "give one state" in bad.output


def test_regret_of_a_two_state_report_judges_each_case_in_its_own_state(tmp_path):
    """A report of a --power both run has one policy group per state; each case is looked up in the group of
    its own state (found on the H200 run: every case was 'policy kernel unavailable', the lookup ambiguous)."""
    run = write_run(tmp_path / "r", _pair_rows())
    res = build_report([run], tmp_path / "rep", holdout=0.3, seed=1)
    whole, held = res.regrets
    assert whole.cases == 20 and whole.unavailable == 0 and whole.mean_pct == 0 and whole.worst_pct == 0
    assert held.unavailable == 0 and held.cases == 6 and held.mean_pct is not None
    sustained = held.per_case[held.per_case["case_id"].str.endswith("-sustained")]
    assert len(sustained) and sustained["chosen"].notna().all()  # answered, from the sustained group
    one = build_report([run], tmp_path / "rep-s", power="sustained").regrets[0]
    assert one.cases == 10 and one.unavailable == 0

def test_report_power_state_absent_is_refused(tmp_path):
    run = write_run(tmp_path / "r", [row(DECODE, case(1, 1, 1024), 10.0)])
    res = cli("report", run, "--out", tmp_path / "rep", "--power", "sustained")
    assert res.exit_code == 2
    assert "the runs hold no sustained rows (they have: unthrottled)" in res.output


def test_select_names_the_state(tmp_path):
    run = write_run(tmp_path / "r", _pair_rows())
    build_report([run], tmp_path / "rep")
    pol = tmp_path / "rep" / "policy.json"
    args = ["select", "--policy", pol, "--batch-size", 64, "--q-len", 6, "--kv-len", 4096]
    both = cli(*args)
    assert both.exit_code == 2 and "--power" in both.output  # two groups: the state must be named
    s = cli(*args, "--power", "sustained")
    assert s.exit_code == 0, s.output
    assert s.output.startswith(DECODE) and "timing state: sustained" in s.output
    u = cli(*args, "--power", "unthrottled", "--json")
    assert u.exit_code == 0 and json.loads(u.output)["power"] == "unthrottled" and json.loads(u.output)["kernel"] == FA2


def test_select_on_an_old_policy_says_unthrottled(tmp_path):
    run = write_run(tmp_path / "r", [row(DECODE, case(1, 1, 1024), 10.0), row(FA2, case(1, 1, 1024), 12.0)])
    build_report([run], tmp_path / "rep")
    pol = tmp_path / "rep" / "policy.json"
    data = json.loads(pol.read_text())
    for g in data["groups"]:
        del g["power"]
    pol = tmp_path / "old-policy.json"  # an old policy has no report.json of this kbench beside it
    pol.write_text(json.dumps(data))
    res = cli("select", "--policy", pol, "--batch-size", 1, "--q-len", 1, "--kv-len", 1024)
    assert res.exit_code == 0, res.output
    assert "timing state: unthrottled" in res.output


# ---- gate ------------------------------------------------------------------------------------------------
def test_gate_refuses_to_mix_states(tmp_path):
    unthr = write_run(tmp_path / "u", [r for r in _pair_rows() if r.power == "unthrottled"])
    sust = write_run(tmp_path / "s", [r for r in _pair_rows() if r.power == "sustained"])
    res = cli("gate", "--baseline", unthr, "--candidate", sust)
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: refusing to mix timing states")
    assert "baseline is unthrottled, the candidate sustained" in lines[0]
    forced = cli("gate", "--baseline", unthr, "--candidate", sust, "--force")
    assert forced.exit_code == 2 and "refusing to mix timing states" in forced.output


def test_gate_compares_like_with_like(tmp_path):
    a = write_run(tmp_path / "a", _pair_rows())
    same = cli("gate", "--baseline", a, "--candidate", write_run(tmp_path / "b", _pair_rows()))
    assert same.exit_code == 0, same.output
    slow = _pair_rows()
    for r in slow:  # the sustained decode rows only, 2x slower: the gate matches them to the sustained baseline rows
        if r.power == "sustained" and r.kernel == DECODE and r.q_len == 2:
            r.median_us *= 2
            r.p25_us *= 2
            r.p75_us *= 2
    res = cli("gate", "--baseline", a, "--candidate", write_run(tmp_path / "c", slow))
    assert res.exit_code == 1, res.output
    assert "bs64-q2-kv4096-h32.8.128-p64-HND-bf16-sustained" in res.output
