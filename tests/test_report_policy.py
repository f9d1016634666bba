"""Policy build, lookup between grid points, range refusal, schema validation and regret (known answers)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_synth import DECODE, FA2, case, flip_back_rows, row, write_run

from kbench.errors import BadInput
from kbench.report import build_report
from kbench.report.policy import POLICY_SCHEMA, build_policy, edges, load_policy, lookup, nearest, rule_for, save_policy
from kbench.report.regret import holdout_split, regret
from kbench.report.runs import combine
from kbench.runs.winners import case_winners, measured


def policy_of(tmp_path, rows, name="run"):
    rs = combine([write_run(tmp_path / name, rows)])
    cases = case_winners(rs.rows)
    return build_policy(cases, rs.device, rs.sources()), rs, cases


def split_rows():
    """bs 1: decode wins everywhere; bs 8: context wins everywhere; q measured at 1, 4, 8 only."""
    rows = []
    for kv in (1024, 4096):
        for q in (1, 4, 8):
            rows += [row(DECODE, case(1, q, kv), 10.0), row(FA2, case(1, q, kv), 20.0),
                     row(DECODE, case(8, q, kv), 40.0), row(FA2, case(8, q, kv), 20.0)]
    return rows


def test_nearest_is_log_in_bs_and_kv_linear_in_q_and_halfway_goes_down():
    assert nearest([1, 8], 2, "batch_size") == 1 and nearest([1, 8], 3, "batch_size") == 8  # 2*2 <= 8 < 3*3
    assert nearest([1024, 4096], 2048, "kv_len") == 1024 and nearest([1024, 4096], 2049, "kv_len") == 4096
    assert nearest([1, 4, 8], 2, "q_len") == 1 and nearest([1, 4, 8], 3, "q_len") == 4
    assert nearest([1, 4, 8], 6, "q_len") == 4 and nearest([1, 4, 8], 7, "q_len") == 8
    assert edges([1, 4, 8], "q_len") == {1: (1, 2), 4: (3, 6), 8: (7, 8)}
    assert edges([1, 8], "batch_size") == {1: (1, 2), 8: (3, 8)}


def test_lookup_exact_point_is_not_interpolated(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    a = lookup(pol, 8, 4, 4096)
    assert a["kernel"] == FA2 and a["path"] == "context" and a["expected_speedup"] == pytest.approx(0.5)
    assert a["interpolated"] is False and a["method"] == "measured" and a["neighbours"] == []


def test_lookup_between_grid_points_uses_nearest_neighbours_and_says_so(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    a = lookup(pol, 2, 3, 2000)
    assert a["interpolated"] is True and a["extrapolated"] is False
    assert a["used"] == {"batch_size": 1, "kv_len": 1024, "q_len": 4}
    assert a["kernel"] == DECODE and a["expected_speedup"] == pytest.approx(2.0)
    got = {(n["batch_size"], n["kv_len"], n["q_len"]): n["kernel"] for n in a["neighbours"]}
    assert got == {(bs, kv, q): DECODE if bs == 1 else FA2 for bs in (1, 8) for kv in (1024, 4096) for q in (1, 4)}
    assert a["neighbours_agree"] is False
    b = lookup(pol, 3, 3, 2000)  # bs 3 is log-nearer to 8
    assert b["kernel"] == FA2 and b["used"]["batch_size"] == 8


def test_outside_range_refused_unless_extrapolate(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    for bs, q, kv in ((16, 4, 1024), (1, 9, 1024), (1, 4, 512)):
        with pytest.raises(BadInput, match="outside the measured range"):
            lookup(pol, bs, q, kv)
    a = lookup(pol, 64, 20, 100000, extrapolate=True)
    assert a["extrapolated"] is True and a["kernel"] == FA2
    assert a["used"] == {"batch_size": 8, "kv_len": 4096, "q_len": 8}
    assert a["clamped"] == ["batch_size 64 -> 8", "kv_len 100000 -> 4096", "q_len 20 -> 8"]


def test_group_selection(tmp_path):
    rows = split_rows() + [row(DECODE, case(1, 1, 1024, heads=(8, 1, 128)), 5.0)]
    pol, _, _ = policy_of(tmp_path, rows)
    with pytest.raises(BadInput, match="2 groups match"):
        lookup(pol, 1, 1, 1024)
    assert lookup(pol, 1, 1, 1024, heads="8/1/128")["expected_speedup"] is None  # no context row there
    with pytest.raises(BadInput, match="no measured group"):
        lookup(pol, 1, 1, 1024, heads="64/8/128")
    with pytest.raises(BadInput, match="QO/KV/DIM"):
        lookup(pol, 1, 1, 1024, heads="32-8")


def test_rules_are_ranges_of_the_flip_back(tmp_path):
    pol, _, _ = policy_of(tmp_path, flip_back_rows())
    (g,) = pol["groups"]
    assert g["heads"] == "32/8/128" and g["grid"]["q_len"] == list(range(1, 17))
    at = [(r["q_len"], r["kernel"], r["cases"]) for r in g["rules"]
          if r["measured"]["batch_size"] == 1 and r["measured"]["kv_len"] == 1024]
    assert at == [([1, 3], DECODE, 3), ([4, 8], FA2, 5), ([9, 16], DECODE, 8)]
    r = g["rules"][0]
    assert r["batch_size"] == [1, 2] and r["kv_len"] == [1024, 2048]
    assert r["expected_speedup"] == pytest.approx(1.5) and r["min_speedup"] == pytest.approx(1.5)


@settings(max_examples=300, deadline=None)
@given(bs=st.integers(1, 8), q=st.integers(1, 8), kv=st.integers(1024, 4096))
def test_rules_tile_the_box_and_agree_with_lookup(tmp_path_factory, bs, q, kv):
    if "p" not in _SPLIT_POLICY:  # built once: hypothesis calls this test hundreds of times
        _SPLIT_POLICY["p"] = policy_of(tmp_path_factory.mktemp("p"), split_rows())[0]
    pol = _SPLIT_POLICY["p"]
    g = pol["groups"][0]
    holding = [r for r in g["rules"] if all(r[ax][0] <= v <= r[ax][1] for ax, v in
                                            (("batch_size", bs), ("q_len", q), ("kv_len", kv)))]
    assert len(holding) == 1
    assert holding[0]["kernel"] == lookup(pol, bs, q, kv)["kernel"] == rule_for(g, bs, q, kv)["kernel"]


_SPLIT_POLICY: dict = {}


def test_save_load_roundtrip_and_validation(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    p = save_policy(pol, tmp_path / "policy.json")
    assert load_policy(p) == json.loads(p.read_text()) and load_policy(p)["schema"] == POLICY_SCHEMA
    bad = dict(pol, schema="kbench.policy/3")
    (tmp_path / "v3.json").write_text(json.dumps(bad))
    with pytest.raises(BadInput, match="not 'kbench.policy/2'"):
        load_policy(tmp_path / "v3.json")
    (tmp_path / "trunc.json").write_text(p.read_text()[: len(p.read_text()) // 2])
    with pytest.raises(BadInput, match="not valid JSON"):
        load_policy(tmp_path / "trunc.json")
    broken = json.loads(p.read_text())
    broken["groups"][0]["cells"][0]["q_len"] = "4"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(BadInput, match=r"cells\[0\]: 'q_len' has the wrong type"):
        load_policy(tmp_path / "broken.json")
    del broken["groups"][0]["grid"]
    (tmp_path / "nogrid.json").write_text(json.dumps(broken))
    with pytest.raises(BadInput, match="missing 'grid'"):
        load_policy(tmp_path / "nogrid.json")


def one_loser_rows():
    """q 1..8 at one (bs, kv): decode wins by 2x everywhere except q 5, where context wins by 2x."""
    out = []
    for q in range(1, 9):
        c = case(1, q, 1024)
        out += [row(DECODE, c, 20.0 if q == 5 else 10.0), row(FA2, c, 10.0 if q == 5 else 20.0)]
    return out


def test_in_sample_regret_is_zero_and_holdout_regret_has_the_known_answer(tmp_path):
    run = write_run(tmp_path / "run", one_loser_rows())
    q5 = case(1, 5, 1024).case_id
    ids = [case(1, q, 1024).case_id for q in range(1, 9)]
    seed_in = next(s for s in range(100) if q5 in holdout_split(ids, 0.25, s)[1])
    # with q 4, 5 and 6 all trained, no held-out case has q 5 as its nearest neighbour: regret 0
    seed_out = next(s for s in range(100) if not {ids[3], ids[4], ids[5]} & set(holdout_split(ids, 0.25, s)[1]))
    res = build_report([run], tmp_path / "a", holdout=0.25, seed=seed_in)
    assert res.regret.cases == 8 and res.regret.mean_pct == 0 and res.regret.worst_pct == 0
    h = res.holdout_regret
    assert h.cases == 2 and h.worst_pct == pytest.approx(100.0) and h.worst_case == q5
    assert h.mean_pct == pytest.approx(50.0)  # the other held-out case keeps decode: 0%
    held = set(res.holdout_policy["holdout"]["held_out"])
    assert q5 in held and len(held) == 2
    trained = {case(1, c["q_len"], 1024).case_id for c in res.holdout_policy["groups"][0]["cells"]}
    assert trained.isdisjoint(held) and len(trained) == 6
    res2 = build_report([run], tmp_path / "b", holdout=0.25, seed=seed_out)
    assert res2.holdout_regret.worst_pct == 0


def test_holdout_split_is_seeded_and_disjoint():
    ids = [f"c{i}" for i in range(10)]
    tr, te = holdout_split(ids, 0.3, 7)
    assert (tr, te) == holdout_split(ids, 0.3, 7) and len(te) == 3 and not set(tr) & set(te)
    assert set(tr) | set(te) == set(ids)
    for f in (0, 1, 1.5, -0.1):
        with pytest.raises(BadInput):
            holdout_split(ids, f)
    with pytest.raises(BadInput):
        holdout_split(["only"], 0.5)


def test_regret_counts_a_policy_kernel_that_was_not_usable(tmp_path):
    pol, rs, cases = policy_of(tmp_path, [row(DECODE, case(1, 1, 1024), 10.0), row(FA2, case(1, 1, 1024), 15.0)])
    rs2 = combine([write_run(tmp_path / "later", [row(DECODE, case(1, 1, 1024), 10.0, status="wrong"),
                                                  row(FA2, case(1, 1, 1024), 15.0)])])
    r = regret(pol, measured(rs2.rows), case_winners(rs2.rows), "later run")
    assert r.unavailable == 1 and r.mean_pct is None and r.per_case.iloc[0]["chosen"] == DECODE


def test_a_schema_1_policy_is_read_as_idealised_batches_and_selects(tmp_path):
    """Policies written before the realistic-batch axes (schema /1, no kv_dist/q_dist/... in a group) still
    load: their groups are the idealised batch, and select filters on the new axes answer from them."""
    pol, _, _ = policy_of(tmp_path, split_rows())
    old = json.loads(json.dumps(pol))
    old["schema"] = "kbench.policy/1"
    for g in old["groups"]:
        for k in ("kv_dist", "q_dist", "window_left", "sinks", "max_seq_len"):
            del g[k]
    (tmp_path / "v1.json").write_text(json.dumps(old))
    loaded = load_policy(tmp_path / "v1.json")
    assert all(g["kv_dist"] == "fixed" and g["window_left"] == -1 and g["max_seq_len"] == "tight"
               for g in loaded["groups"])
    g = pol["groups"][0]
    bs, q, kv = g["grid"]["batch_size"][0], g["grid"]["q_len"][0], g["grid"]["kv_len"][0]
    assert lookup(loaded, bs, q, kv, sinks="off", kv_dist="fixed")["kernel"] == lookup(pol, bs, q, kv)["kernel"]
    with pytest.raises(BadInput, match="no measured group matches"):
        lookup(loaded, bs, q, kv, window_left="128")
    with pytest.raises(BadInput, match="--window-left: values must be >= -1"):
        lookup(loaded, bs, q, kv, window_left="-3")
