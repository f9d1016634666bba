"""Sweep plans (kbench.engine.plans): Sweep.run(plan) measures whatever rounds a plan yields, given the rows so
far; each row carries the plan's tag, a kernel the plan pruned gets a skipped row with its reason, and a plan
may end a round early. The full grid and the adaptive planner are two such plans; the rule that keeps them
apart (an adaptive plan is made from the whole grid, not a shard) holds from Python too."""
from __future__ import annotations

import pytest

from kbench.cases.models import MODELS
from kbench.cases.scenario import Scenario, Timing
from kbench.engine.plans import PlannedCase, Round, plan_for
from kbench.engine.plans.adaptive_options import AdaptiveOptions
from kbench.engine.plans.adaptive_plan import AdaptivePlan
from kbench.engine.plans.grid import FullGridPlan
from kbench.engine.sweep import Sweep, SweepOptions, run_sweep
from kbench.errors import BadInput
from kbench.runs.store import load_run


def tiny(**kw) -> Scenario:
    base = dict(name="tiny", heads=MODELS["gqa8-d64"], batch_size=[1, 2], q_len=[1, 2], kv_len=[64],
                page_size=[16], kernels=["reference", "fa2-prefill"],
                timing=Timing(spread_target=0.3, budget_s=0.02, min_samples=3, max_samples=6))
    return Scenario(**{**base, **kw}).validate()


class TwoRounds:
    """A plan of two rounds: the first case, then (planned from the rows of the first) two more, the second of
    them refused by the round's admit; fa2-prefill pruned at the second case."""
    intro = "two rounds"

    def __init__(self, cases):
        self.grid, self.seen, self.kernels, self.closed = cases, [], None, False

    def manifest_fields(self):
        return {"shard": None}

    def open(self, run, kernels):
        self.kernels = kernels

    def cases(self):
        return self.grid

    def rounds(self, state):
        yield Round("first", [PlannedCase(self.grid[0], "one")])
        rows = state.rows()
        self.seen.append((len(rows), state.measurements))
        yield Round("second", [PlannedCase(self.grid[1], "two", {"fa2-prefill": "not measured: a test plan"}),
                               PlannedCase(self.grid[2], "two")],
                    message="round two", admit=lambda pc: pc.case is not self.grid[2])

    def close(self, run):
        self.closed = True


def test_sweep_runs_the_rounds_of_any_plan(tmp_path):
    sc = tiny()
    plan = TwoRounds(sc.cases())
    said = []

    class Obs:
        def phase(self, name, total=None):
            said.append((name, total))

        def advance(self, description=""): ...
        def row(self, row): ...
        def kernel_started(self, kernel, case): ...

        def message(self, text):
            said.append(text)

    res = Sweep(sc, SweepOptions(out_dir=tmp_path), Obs()).run(plan)
    assert res.status == "complete" and plan.closed
    assert plan.kernels == {"reference": "reference", "fa2-prefill": "context"}
    assert plan.seen == [(2, 1)]  # round two was planned after round one's rows: 2 rows, 1 timed
    rows = load_run(res.run_dir).rows
    c0, c1, c2 = (c.case_id for c in sc.cases()[:3])
    assert set(rows.case_id) == {c0, c1}  # the third case was not admitted
    assert dict(zip(rows.case_id, rows.chosen_by)) == {c0: "one", c1: "two"}
    pruned = rows[(rows.case_id == c1) & (rows.kernel == "fa2-prefill")]
    assert pruned.status.tolist() == ["skipped"] and pruned.reason.tolist() == ["not measured: a test plan"]
    assert said[:2] == [("two rounds", None), ("first", 2)]
    assert "round two" in said and ("second", 4) in said  # the phase counts the rows the round still needs


def test_a_full_grid_plan_measures_its_shard_and_a_resume_keeps_it(tmp_path):
    sc = tiny()
    res = run_sweep(sc, out_dir=tmp_path, shard=(1, 2))
    rows = load_run(res.run_dir).rows
    assert sorted(set(rows.case_id)) == sorted(c.case_id for c in sc.cases()[1::2])
    plan = FullGridPlan(sc.cases())

    class Run:
        shard = (1, 2)

    plan.open(Run(), {})
    assert [c.case_id for c in plan.cases()] == [c.case_id for c in sc.cases()[1::2]]


def test_the_plan_the_options_ask_for():
    cases = tiny().cases()
    assert isinstance(plan_for(cases), FullGridPlan)
    assert isinstance(plan_for(cases, AdaptiveOptions()), AdaptivePlan)
    assert isinstance(plan_for(cases, manifest={"adaptive": {"options": {}}}), AdaptivePlan)  # a resumed adaptive run
    assert plan_for(cases, shard=(0, 2)).manifest_fields() == {"shard": {"index": 0, "count": 2}}


def test_an_adaptive_sweep_on_a_shard_is_refused_from_python_too(tmp_path):
    with pytest.raises(BadInput, match="drop --shard/--devices"):
        run_sweep(tiny(), out_dir=tmp_path / "out", adaptive=AdaptiveOptions(), shard=(0, 2))
    assert not (tmp_path / "out").exists()
