"""Rounds until decided: the sequential rule of ``kbench server-bench --repeat auto``.

An interleaved A/B that looks at its rounds after every few and stops once the gate can decide would raise false
alarms far more often than alpha if each look tested at alpha (every look is another chance for noise to cross
the line). The rule here is **alpha spending over the budget's rounds** (Lan-DeMets, with the O'Brien-Fleming
spending function, and a union bound): at the first look the run plans ``N`` rounds, the most its budget fits at
the pace of its rounds so far (at most ``--repeat``), and each later look plans again at the pace by then, keeping
the larger N (``Plan.extend``: a slow start does not end the run with its budget unused); a look at ``n`` rounds
has spent

    f(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)),   t = n / N          (f(1) = alpha)

and tests at what its step added, ``alpha_k = f(t_k) - f(t_{k-1})``; the last look (at N rounds, or when the
budget ends first) tests at all that is left, ``alpha - f(t_{k-1})``. The alphas of all looks sum to at most
alpha, so the chance that any look raises a false alarm is at most alpha whatever the dependence between looks
(the union bound; no joint distribution is assumed). O'Brien-Fleming spends almost nothing early (a look at a
fifth of N tests at 1e-8) and keeps most for the end (the last look tests at 0.006 to 0.009 of 0.01), so a run that needs all its rounds has nearly a fixed sample's power, while a large change still
stops the run at about half of N. The earlier rule, a Bonferroni split over unbounded looks (alpha_k = 6 alpha /
(pi^2 k^2)), tested its 12th look at 4e-5: the same 25% needed about twice the rounds (docs/gate.md).

N comes from the rounds' times, not from their B/A ratios; a look's alpha depends on the ratios only through
when the budget ends, which is what the machine's pace decides. Looks come at ``first_look(alpha)`` rounds and
then every quarter more (8, 10, 13, 16, 20, 25, ... at alpha 0.01) up to 80% of N, then at N. The run records the plan, the
looks and each case's alpha in its manifest (``interleave.planned_rounds``, ``looks``, ``alpha_spent``,
``case_alpha``) and the gate tests each case at its alpha, so the gate's answer is the run's last one.
tests/test_gate_verdicts.py checks the false-alarm rate and the power on simulated pairs.

A case is decided when none of its metrics is inconclusive (each passes, improves or regresses: kbench.gate.compare
decides them, from the rows the run writes); the run stops when every case is decided, or at the last look (then
the gate says INCONCLUSIVE for the undecided cases, with the rounds that would decide them).

**Out of reach** (a non-binding futility stop). From a third of the plan on, a look also stops measuring an
undecided case that the budget cannot decide: some metric's PASS needs more than ``REACH x N`` rounds (its
detectable change, from the rounds' own spread, shrinks as 1 / sqrt(rounds): ``rounds_to_decide``, projected at
the whole alpha), so the case cannot PASS, and no metric is on its way to a FAIL: none is measured worse than its
band, or one is but by so little for its noise that finding it would take more than ``REACH_FAIL x N`` rounds
(8 plans: a wide margin, since a change measured early is rough). Such a case is INCONCLUSIVE at that look (the
gate tests it at that look's alpha and says the rounds that would decide it); the run goes on for the others and
ends when none is left. Stopping a case never adds a test, so the false-alarm bound above holds unchanged; what
it can cost is a FAIL that the rest of the plan would have reached. On simulated pairs (tests/test_gate_verdicts.py,
a plan of 137 rounds) it stopped 59 of 60 A/A runs whose round noise (0.6) no plan can PASS at 55 rounds (40% of
the plan) and FAILed 95 of 100 25% slowdowns at noise 0.3 (98 without it), 33 at 0.6 (36) and 7 of 100 10%
slowdowns (7). Variants measured on the same pairs: a margin of 4 plans, 94 / 31 / 5; no margin for a change
measured worse than the band (never stop such a case), no FAIL lost, but on real two-server CPU pairs some
metric of nine is nearly always measured a little worse than the band, and the A/A runs used their whole budget.
"""
from __future__ import annotations

import math
from statistics import NormalDist

RULE = "alpha spending over the planned rounds, Lan-DeMets O'Brien-Fleming, union bound"
REACH = 2.0  # out of reach: more than REACH x the planned rounds (a margin: the scale is measured, not known)
REACH_FAIL = 8.0  # a change measured worse than the band keeps its case unless its FAIL needs more than this x N
REACH_FROM = 1 / 3  # no case is given up before this fraction of the plan (an early scale is too rough)


def spent(t: float, alpha: float) -> float:
    """The O'Brien-Fleming spending function: the alpha spent by information fraction ``t`` (0..1)."""
    if t <= 0:
        return 0.0
    if t >= 1:
        return alpha
    nd = NormalDist()
    return 2.0 * nd.cdf(nd.inv_cdf(alpha / 2.0) / math.sqrt(t))  # = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))


def alpha_at(look: int, alpha: float) -> float:
    """The earlier rule's alpha of look ``look`` (1-based): a Bonferroni split over unbounded looks, 6 alpha /
    (pi^2 k^2). Kept for comparison (tests, benchmarks/gate_round_time.py); the run spends by Plan."""
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


class Plan:
    """The looks of one run: ``Plan(alpha, planned_rounds)``; ``test_alpha(n, last)`` is the alpha of a look at
    ``n`` rounds (last: all that is left), called once per look in round order."""

    def __init__(self, alpha: float, planned_rounds: int):
        self.alpha, self.planned = alpha, max(int(planned_rounds), first_look(alpha))
        self.used = 0.0
        self.looks = 0

    def extend(self, planned_rounds: int) -> None:
        """Re-plan at a later look: a plan made while the first rounds ran slowly grows when the pace picks up
        (before, a run whose first 8 rounds met a burst stopped at its plan with a third of its budget unused).
        N only grows, and what earlier looks spent stays spent: a look whose ``n / N`` fell below an earlier one's
        tests at 0, so all looks together still spend at most alpha. The new N comes from the rounds' times,
        never from their ratios, as the first one does."""
        self.planned = max(self.planned, int(planned_rounds))

    def is_last(self, rounds: int) -> bool:
        return rounds >= self.planned

    def next_look(self, rounds: int) -> int:
        """The next look: every quarter more rounds, none between 80% of the plan and its end (the last look keeps
        at least alpha - f(0.8), 0.006 of 0.01)."""
        n = next_look(rounds)
        return self.planned if n > 0.8 * self.planned else n

    def schedule(self) -> list[int]:
        """The rounds of every look, the last at the plan's end."""
        out, n = [], min(first_look(self.alpha), self.planned)
        while True:
            out.append(n)
            if n >= self.planned:
                return out
            n = self.next_look(n)

    @staticmethod
    def can_decide(rounds: int, alpha: float) -> bool:
        """Whether a look at ``alpha`` can decide anything with ``rounds`` rounds: the exact signed-rank test's
        smallest p is 1 / 2**rounds, and a PASS needs a test that could reach alpha too (kbench.gate.power)."""
        return 0.5 ** rounds < alpha

    def test_alpha(self, rounds: int, last: bool = False) -> float:
        now = self.alpha if last or self.is_last(rounds) else spent(rounds / self.planned, self.alpha)
        step, self.used = max(now - self.used, 0.0), max(now, self.used)
        self.looks += 1
        return step


def planned_rounds(seconds_left: float, round_times: list[float], max_rounds: int) -> int:
    """The rounds a run fits: those it ran (``round_times``) and as many more as the seconds left of its budget
    fit at their pace (their median), at most ``max_rounds``."""
    from statistics import median

    done = len(round_times)
    per = median(round_times) if round_times else 0.0
    more = int(max(seconds_left, 0.0) / per) if per > 0 else max_rounds
    return max(1, min(done + more, max_rounds))


def decide_case(row_a: dict, row_b: dict, threshold: float, alpha: float, power: float,
                plan: "Plan | None" = None) -> str:
    """pass | fail | open | out-of-reach: the gate's rule (kbench.gate.compare, paired) on one case's two rows at
    ``alpha`` (the look's); with the run's ``plan``, an undecided case the plan cannot decide is out-of-reach (the
    module docstring; projected at the plan's whole alpha, which the last look nearly has: a margin the same way
    as REACH)."""
    from kbench.gate.compare import compare_metric
    from kbench.gate.metrics import metrics_for

    if row_a.get("status") != "ok" or row_b.get("status") != "ok":
        return "fail"
    results = []
    for m in metrics_for("server-bench", row_a.keys(), row_b.keys()):
        r = compare_metric({"case_id": row_a.get("case_id")}, row_a, row_b, m, threshold, alpha, paired=True,
                           power=power)
        results.append((m, r))
    outcomes = [r.outcome for _, r in results]
    if "regression" in outcomes or "invalid" in outcomes:
        return "fail"
    if "inconclusive" not in outcomes and outcomes:
        return "pass"
    if plan is not None and results and _out_of_reach(row_a, row_b, results, plan.alpha, power, plan.planned):
        return "out-of-reach"
    return "open"


def _out_of_reach(row_a: dict, row_b: dict, results: list, alpha: float, power: float, planned: int) -> bool:
    """Whether a case none of whose metrics failed is out of the plan's reach, at ``REACH_FROM`` of the plan or
    later: some inconclusive metric's PASS needs more than ``REACH x planned`` rounds, and no metric measured
    worse than its band would FAIL within ``REACH_FAIL x planned``. The scale is the rounds' plain robust scale,
    not compare_metric's (which grows with the rounds' serial factor, kbench.gate.power): a drift makes the case
    slower to decide, and giving it up sooner for that would cost detections the plan could still make."""
    from kbench.gate.paired import round_pairs
    from kbench.gate.power import paired_logs, robust_scale, rounds_to_decide

    reach = REACH * planned
    cannot_pass = False
    for m, r in results:
        if r.outcome != "inconclusive":
            continue
        sa, sb, why = round_pairs(row_a, row_b, m)
        if why or len(sa) < REACH_FROM * planned or r.change is None:
            return False  # too early to tell (or not paired: nothing to project)
        scale = robust_scale(paired_logs(sa, sb))
        band = r.band if r.band is not None else 0.0
        worse = -r.change if m.higher_is_better else r.change
        if worse > band:  # on its way to a FAIL, unless even REACH_FAIL x the plan would not find it
            to_fail = rounds_to_decide(scale, len(sa), (worse - band) / (1 + band), m.higher_is_better, alpha, power)
            if to_fail is None or to_fail <= REACH_FAIL * planned:
                return False
        to_pass = rounds_to_decide(scale, len(sa), band, m.higher_is_better, alpha, power)
        if to_pass is not None and to_pass > reach:
            cannot_pass = True
    return cannot_pass
