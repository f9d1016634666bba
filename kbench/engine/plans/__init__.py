"""Sweep plans: which cases a sweep measures, round by round. Two implementations of one small protocol:

  FullGridPlan   (plans/grid.py)            every case of the grid, or of its shard (kbench.engine.shards),
                                            in one round
  AdaptivePlan   (plans/adaptive_plan.py)   a coarse sub-grid, then round after round the points where the
                                            kernel choice is uncertain (the planner: plans/adaptive.py), until
                                            none is or a budget is spent

`Sweep.run(plan)` (kbench.engine.sweep) opens the run, lets the plan read or record its settings in the
manifest (`open`), compiles the JIT modules of every case the plan may measure (`cases`), measures each
round's cases as the plan yields them (`rounds`, given the rows measured so far through `SweepState`), and
lets the plan record its outcome (`close`). A plan never times, writes rows or prints: its rounds say what to
measure, with a tag (the rows' `chosen_by`) and the kernels it pruned there (skipped rows with the reason).
The protocol lives in plans/base.py (the implementations import it; this package picks one of them).
"""
from __future__ import annotations

from kbench.cases.case import Case
from kbench.engine.plans.base import PlannedCase, Round, SweepPlan, SweepState  # noqa: F401 - the protocol's home
from kbench.errors import BadInput


def check_plan(adaptive: bool, sharded: bool) -> None:
    """An adaptive plan is made from the whole grid's rows: it cannot run on a slice (--shard, or --devices,
    which runs one slice per GPU)."""
    if adaptive and sharded:
        raise BadInput("--adaptive plans from the whole grid's rows: drop --shard/--devices")


def plan_for(cases: list[Case], adaptive=None, shard: tuple[int, int] | None = None,
             manifest: dict | None = None) -> SweepPlan:
    """The plan a sweep asks for: adaptive when given AdaptiveOptions (or when `manifest`, a run being resumed,
    is an adaptive run's), else the full grid of `shard` (None: the whole grid; a resumed run: its own shard)."""
    check_plan(adaptive is not None, shard is not None)
    if adaptive is not None or (manifest is not None and "adaptive" in manifest):
        from kbench.engine.plans.adaptive_plan import AdaptivePlan

        return AdaptivePlan(cases, adaptive)
    from kbench.engine.plans.grid import FullGridPlan

    return FullGridPlan(cases, shard)
