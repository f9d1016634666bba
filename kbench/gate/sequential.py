"""Rounds until decided: the sequential rule of ``kbench server-bench --repeat auto``.

An interleaved A/B that looks at its rounds after every few and stops once the gate can decide would raise false
alarms far more often than alpha if each look tested at alpha (every look is another chance for noise to cross
the line). The rule here is **alpha spending with a Bonferroni split**: look k (k = 1, 2, ...) tests at

    alpha_k = alpha * 6 / (pi^2 k^2)          (sum over all k = alpha)

so the chance that any look raises a false alarm is at most alpha whatever the dependence between looks (the
union bound), with no cap on the number of looks; the same alpha_k sets the detectable change a PASS needs at
that look (kbench.gate.power), so a PASS is no easier to reach by looking often either. Looks come at
``first_look(alpha)`` rounds (the fewest with which the exact signed-rank test can reach alpha_1) and then every
quarter more rounds (8, 10, 13, 16, 20, 25, ... at alpha 0.01). The run records the number of looks and the last
look's alpha in its manifest (``interleave.looks``, ``interleave.alpha_spent``) and the gate tests at that alpha,
so the gate's answer is the last look's. tests/test_gate_sequential.py checks the false-alarm rate and the power
on simulated pairs.

A case is decided when none of its metrics is inconclusive (each passes, improves or regresses: kbench.gate.compare
decides them, from the rows the run writes); the run stops when every case is decided, or when the next round would
not fit in the budget (then the gate says INCONCLUSIVE for the undecided cases, with the rounds that would decide
them).
"""
from __future__ import annotations

import math

RULE = "alpha spending, Bonferroni split alpha_k = 6 alpha / (pi^2 k^2)"


def alpha_at(look: int, alpha: float) -> float:
    """The alpha of look ``look`` (1-based)."""
    return alpha * 6.0 / (math.pi ** 2 * look * look)


def first_look(alpha: float) -> int:
    from kbench.gate.paired import min_rounds

    return min_rounds(alpha_at(1, alpha))


def next_look(rounds: int) -> int:
    """The round count of the look after one at ``rounds``."""
    return rounds + max(2, math.ceil(rounds / 4))


def looks(alpha: float, up_to: int) -> list[int]:
    out, n = [], first_look(alpha)
    while n <= up_to:
        out.append(n)
        n = next_look(n)
    return out


def decide_case(row_a: dict, row_b: dict, threshold: float, alpha: float, power: float) -> str:
    """pass | fail | open: the gate's rule (kbench.gate.compare, paired) on one case's two rows at ``alpha``."""
    from kbench.gate.compare import compare_metric
    from kbench.gate.metrics import metrics_for

    if row_a.get("status") != "ok" or row_b.get("status") != "ok":
        return "fail"
    outcomes = []
    for m in metrics_for("server-bench", row_a.keys(), row_b.keys()):
        r = compare_metric({"case_id": row_a.get("case_id")}, row_a, row_b, m, threshold, alpha, paired=True,
                           power=power)
        outcomes.append(r.outcome)
    if "regression" in outcomes or "invalid" in outcomes:
        return "fail"
    return "open" if "inconclusive" in outcomes or not outcomes else "pass"
