"""Per-case winners, ties, exclusions and crossovers on synthetic runs with known answers."""
from __future__ import annotations

import pandas as pd
import pytest
from report_synth import DECODE, FA2, FMHA, WRAPPER, case, flip_back_rows, row, write_run

from kbench.errors import BadInput
from kbench.report.crossovers import crossovers
from kbench.report.document import case_table
from kbench.report.runs import combine
from kbench.runs.store import load_run
from kbench.runs.winners import case_winners, half_width_us, is_tie


def winners_of(tmp_path, rows, name="run"):
    return case_winners(combine([write_run(tmp_path / name, rows)]).rows)


def test_flip_back_along_q_gives_three_ranges(tmp_path):
    xs = crossovers(winners_of(tmp_path, flip_back_rows()))
    assert {(x.batch_size, x.kv_len) for x in xs} == {(1, 1024), (1, 4096), (8, 1024), (8, 4096)}
    for x in xs:
        assert x.ranges("decode") == [(1, 3), (9, 16)]
        assert x.ranges("context") == [(4, 8)]
        assert x.segments == [(1, 3, "decode"), (4, 8, "context"), (9, 16, "decode")]
        assert x.flips == 2 and x.group_size == 4


def test_tie_within_spread_is_a_tie_and_outside_is_not(tmp_path):
    rows = [row(DECODE, case(1, 1, 1024), 10.0, rel=0.03), row(FA2, case(1, 1, 1024), 10.5, rel=0.03),
            # 0.5 us apart but spreads of 0.1 and 0.105 us: decode wins by 5%
            row(DECODE, case(1, 2, 1024), 10.0, rel=0.01), row(FA2, case(1, 2, 1024), 10.5, rel=0.01)]
    w = winners_of(tmp_path, rows).set_index("q_len")
    assert w.loc[1, "path_verdict"] == "tie" and w.loc[1, "winner_tie"] and w.loc[1, "tied_with"] == FA2
    assert w.loc[1, "winner"] == DECODE  # the faster median is still named, flagged as a tie
    assert w.loc[2, "path_verdict"] == "decode" and not w.loc[2, "winner_tie"]
    assert w.loc[2, "margin_pct"] == pytest.approx(5.0)
    _, table = case_table(w.reset_index())
    by_q = {r[2]: r for r in table}
    assert by_q["1"][4] == f"tie: {DECODE} = {FA2}" and by_q["1"][7] == "tie"
    assert by_q["2"][4] == DECODE and by_q["2"][7] == "5.0%"
    x = crossovers(w.reset_index())[0]
    assert x.ranges("tie") == [(1, 1)] and x.ranges("decode") == [(2, 2)]


def test_tie_rule_falls_back_to_iqr():
    assert half_width_us({"median_us": 10.0, "rel_spread": 0.02, "iqr_us": 5.0}) == pytest.approx(0.2)
    assert half_width_us({"median_us": 10.0, "rel_spread": None, "iqr_us": 1.0}) == pytest.approx(0.5)
    assert half_width_us({"median_us": 10.0, "p25_us": 9.0, "p75_us": 10.0}) == pytest.approx(0.5)
    assert half_width_us({"median_us": 10.0}) == 0.0
    assert is_tie(10.0, 0.5, 11.0, 0.5) and not is_tie(10.0, 0.4, 11.0, 0.5)


def test_three_way_tie_lists_every_tied_kernel(tmp_path):
    c = case(4, 2, 2048)
    w = winners_of(tmp_path, [row(DECODE, c, 10.0, rel=0.02), row(FA2, c, 10.3, rel=0.02),
                              row(WRAPPER, c, 10.2, rel=0.02), row(FMHA, c, 30.0, rel=0.02)])
    assert w.iloc[0]["tied_with"] == f"{WRAPPER}, {FA2}" and w.iloc[0]["runner_up"] == WRAPPER


def test_missing_kernel_gives_one_path_only(tmp_path):
    rows = [row(DECODE, case(1, 1, 1024), 10.0), row(FA2, case(1, 1, 1024), 15.0),
            row(DECODE, case(1, 2, 1024), 10.0),  # no fa2 row at all
            row(DECODE, case(1, 3, 1024), 10.0), row(FA2, case(1, 3, 1024), None, status="skipped",
                                                     reason="needs SM100")]
    w = winners_of(tmp_path, rows).set_index("q_len")
    assert w.loc[1, "decode_speedup"] == pytest.approx(1.5)
    for q in (2, 3):
        assert w.loc[q, "winner"] == DECODE and w.loc[q, "path_verdict"] == "decode-only"
        assert pd.isna(w.loc[q, "decode_speedup"]) and pd.isna(w.loc[q, "runner_up"])
    assert crossovers(w.reset_index())[0].segments == [(1, 1, "decode"), (2, 3, "decode-only")]
    _, table = case_table(w.reset_index())
    assert [r[8] for r in table] == ["1.50x", "-", "-"]


def test_wrong_kernel_is_excluded_even_when_fastest(tmp_path):
    c = case(8, 4, 4096)
    rows = [row(WRAPPER, c, 1.0, status="wrong", reason="rel_err 3.1"), row(DECODE, c, 10.0),
            row(FA2, c, 12.0), row(FMHA, c, 0.5, status="failed", reason="illegal memory access")]
    w = winners_of(tmp_path, rows).iloc[0]
    assert w["winner"] == DECODE and w["best_decode"] == DECODE and w["runner_up"] == FA2
    assert w["excluded"] == f"{WRAPPER} (wrong), {FMHA} (failed)"
    assert w["decode_speedup"] == pytest.approx(1.2)


def test_later_run_replaces_the_same_kernel_and_case(tmp_path):
    c1, c2 = case(1, 1, 1024), case(1, 2, 1024)
    old = write_run(tmp_path / "old", [row(DECODE, c1, 10.0), row(FA2, c1, 15.0), row(DECODE, c2, 10.0),
                                       row(FA2, c2, 15.0)], start_time="2025-01-01T00:00:00+00:00")
    new = write_run(tmp_path / "new", [row(FA2, c1, 5.0)], start_time="2025-02-01T00:00:00+00:00")
    for order in ([old, new], [new, old]):  # start_time decides, not the command-line order
        rs = combine(order)
        w = case_winners(rs.rows).set_index("q_len")
        assert w.loc[1, "winner"] == FA2 and w.loc[1, "context_us"] == 5.0
        assert w.loc[2, "winner"] == DECODE
        assert [r.name for r in rs.runs] == ["old", "new"]
        assert len(rs.rows[rs.rows["path"] != "reference"]) == 4


def test_runs_from_different_devices_are_refused(tmp_path):
    a = write_run(tmp_path / "a", [row(DECODE, case(1, 1, 1024), 10.0)])
    b = write_run(tmp_path / "b", [row(DECODE, case(1, 1, 1024), 10.0)], device={"name": "NVIDIA B200", "sm": 100})
    with pytest.raises(BadInput, match="different devices"):
        combine([load_run(a), load_run(b)])


def test_crossover_switches_count_the_policy_s_path_changes_and_flips_only_those_beyond_ties(tmp_path):
    """The committed H200 baseline at bs 64 is all ties between decode-wrapper and fa2-prefill (one FA2 kernel),
    served by the faster median: the policy changes path 10 times along q_len, none beyond the spread. The
    table says both, and the switch count is the policy's own (its cells' paths along q_len)."""
    import json
    from pathlib import Path

    from kbench.report import build_report
    from kbench.report.crossovers import table

    run = Path(__file__).resolve().parents[1] / "results" / "baselines" / "h200-draft-extend-kv4096"
    rep = build_report([run], tmp_path / "rep", plot_groups=0)
    pol = json.loads((tmp_path / "rep" / "policy.json").read_text())
    for x in rep.crossovers:
        cells = sorted((c["q_len"], c["path"]) for c in pol["groups"][0]["cells"]
                       if (c["batch_size"], c["kv_len"]) == (x.batch_size, x.kv_len))
        assert x.switches == sum(a[1] != b[1] for a, b in zip(cells, cells[1:]))
    by_bs = {x.batch_size: x for x in rep.crossovers}
    assert (by_bs[64].switches, by_bs[64].flips) == (10, 0)
    headers, rows = table(rep.crossovers)
    assert headers[-2:] == ["policy switches", "flips beyond ties"]
    assert [r[-2:] for r in rows if r[1] == "64"] == [["10", "0"]]
    csv = (tmp_path / "rep" / "crossovers.csv").read_text().splitlines()
    assert csv[0].endswith("policy switches,flips beyond ties")
    assert "'policy switches' counts how often the path the policy serves" in (tmp_path / "rep" / "report.md").read_text()
