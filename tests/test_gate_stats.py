"""The noise test: Mann-Whitney when both sides have enough samples, else the spread intervals."""
from __future__ import annotations

import pytest
from gate_synth import CASE_A, CONTEXT, DECODE, gate_json, sweep_rows, write_run

from kbench.gate.stats import GateValue, is_worse, mann_whitney_p


def test_mann_whitney_one_sided():
    base = GateValue(10.0, [10.0 + 0.01 * i for i in range(20)])
    slow = GateValue(11.0, [11.0 + 0.01 * i for i in range(20)])
    v = is_worse(base, slow, higher_is_better=False, alpha=0.01, direction="worse")
    assert v.method == "mann-whitney" and v.beyond_noise and v.p_value < 1e-6
    # the same data is not a significant improvement
    v2 = is_worse(base, slow, higher_is_better=False, alpha=0.01, direction="better")
    assert v2.method == "mann-whitney" and not v2.beyond_noise
    # for a throughput, larger is better: the same numbers are an improvement
    v3 = is_worse(base, slow, higher_is_better=True, alpha=0.01, direction="better")
    assert v3.beyond_noise


def test_rows_with_a_thousand_samples_a_side_are_tested_not_a_traceback():
    """Rows of long sweeps keep over 500 samples a side (the committed H200 power sweeps): the exact test's smallest
    p, 1 / C(n + m, n), is beyond a float there; a gate between two such runs raised OverflowError."""
    base = GateValue(10.0, [10.0 + 0.001 * i for i in range(1000)])
    slow = GateValue(11.0, [11.0 + 0.001 * i for i in range(1000)])
    v = is_worse(base, slow, higher_is_better=False, alpha=0.01, direction="worse")
    assert v.method == "mann-whitney" and v.beyond_noise
    same = is_worse(base, GateValue(10.0, list(base.samples)), higher_is_better=False, alpha=0.01, direction="worse")
    assert not same.beyond_noise


def test_mann_whitney_p_is_scipys():
    """The gate calls scipy's Mann-Whitney test below its NaN-policy wrapper: each p must be the public call's, for
    sizes where the auto method is asymptotic (over 8 a side, ties or not) and where it is exact, both
    alternatives."""
    import random

    from scipy.stats import mannwhitneyu

    rng = random.Random(7)
    asked = []
    for _ in range(60):
        nx, ny = rng.choice([3, 5, 8, 9, 12, 40]), rng.choice([4, 8, 9, 12, 40])
        tied = rng.random() < 0.3  # rounded samples tie
        x = [round(rng.gauss(10, 1), 0 if tied else 6) for _ in range(nx)]
        y = [round(rng.gauss(10.3, 1), 0 if tied else 6) for _ in range(ny)]
        asked.append((x, y, rng.choice(["greater", "less"])))
    public = [float(mannwhitneyu(x, y, alternative=alt).pvalue) for x, y, alt in asked]  # scipy's own call
    assert [mann_whitney_p(x, y, alt) for x, y, alt in asked] == public


def test_too_few_samples_fall_back_to_spread():
    # 2 vs 2 samples: the exact test's smallest p is 1/6, it can never reach alpha=0.01
    base = GateValue(10.0, [9.9, 10.1], low=9.8, high=10.2)
    cand = GateValue(11.0, [10.9, 11.1], low=10.8, high=11.2)
    v = is_worse(base, cand, False, 0.01, "worse")
    assert v.method == "spread" and v.beyond_noise
    overlapping = GateValue(10.5, [10.4, 10.6], low=10.1, high=10.9)
    assert not is_worse(base, overlapping, False, 0.01, "worse").beyond_noise


def test_nothing_to_judge_noise_by():
    v = is_worse(GateValue(10.0, []), GateValue(11.0, []), False, 0.01, "worse")
    assert v.method == "threshold-only" and v.beyond_noise


def test_decode_context_tie_is_not_a_winner_change(tmp_path):
    from kbench.runs.winners import case_winners
    import pandas as pd
    if "path_verdict" not in case_winners(pd.DataFrame([r.to_dict() for r in sweep_rows()])).columns:
        pytest.skip("kbench.runs.winners has no tie handling (path_verdict) yet")
    # decode and context 3% apart with ~3% spreads: a tie on both sides, even though the faster path flips
    noisy = {(DECODE, CASE_A): 0.1, (CONTEXT, CASE_A): 0.1}
    t_base = {(DECODE, "decode", CASE_A): 10.0, (CONTEXT, "context", CASE_A): 10.3}
    t_cand = {(DECODE, "decode", CASE_A): 10.3, (CONTEXT, "context", CASE_A): 10.0}
    base = write_run(tmp_path / "base", sweep_rows(t_base, seed=1, sd_of=noisy))
    cand = write_run(tmp_path / "cand", sweep_rows(t_cand, seed=2, sd_of=noisy))
    assert list(case_winners(load(base))["winner_path"]) == ["decode"]
    assert list(case_winners(load(cand))["winner_path"]) == ["context"]
    res, data = gate_json(tmp_path, base, cand)
    assert res.exit_code in (0, 3), res.output  # 10% spreads may hide a 5% change of a row (INCONCLUSIVE), never FAIL
    assert data["winner_changes"] == [] and data["winners_compared"] == [CASE_A.case_id]


def load(path):
    from kbench.runs.store import load_run
    return load_run(path).rows
