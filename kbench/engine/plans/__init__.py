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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol

from kbench.cases.case import Case
from kbench.errors import BadInput

if TYPE_CHECKING:
    import pandas as pd

    from kbench.runs.session import RunSession


@dataclass
class PlannedCase:
    case: Case
    tag: str = ""  # the rows' chosen_by: how the plan chose the case ("" in a full-grid sweep)
    pruned: dict[str, str] = field(default_factory=dict)  # kernel -> the reason of its skipped row (not measured)


@dataclass
class Round:
    """Cases to measure, in order. `admit`, asked before each case, ends the round early (a budget)."""
    label: str  # the progress phase
    cases: list[PlannedCase]
    message: str = ""  # said before the round ("" for nothing)
    admit: Callable[[PlannedCase], bool] | None = None

    def admitted(self, cases: Iterable[PlannedCase] | None = None) -> Iterator[PlannedCase]:
        """`cases` (by default the round's) as long as `admit` lets them in."""
        for pc in self.cases if cases is None else cases:
            if self.admit is not None and not self.admit(pc):
                return
            yield pc


class SweepState(Protocol):
    """What a plan may ask the sweep that runs it, between and during its rounds."""

    @property
    def measurements(self) -> int:
        """(kernel, case) pairs timed by this call so far."""

    def rows(self) -> "pd.DataFrame":
        """The run's rows so far (every call of the run: its journal)."""

    def elapsed_s(self) -> float:
        """Wall seconds of this call so far."""

    def to_time(self, case: Case, skip: Iterable[str] = ()) -> int:
        """How many kernels the sweep would time at `case` (those without a row yet, that can run here, not the
        reference), `skip` left out."""


class SweepPlan(Protocol):
    intro: str  # a progress phase shown before the first round ("" for none); may be set by open()

    def manifest_fields(self) -> dict:
        """What a new run's manifest records of the plan (kbench.runs.manifest fields)."""

    def open(self, run: "RunSession", kernels: dict[str, str]) -> None:
        """Before anything is compiled: read (a resumed run) or record the plan's settings in the run's manifest.
        kernels: the sweep's kernels, name -> path (decode | context | reference)."""

    def cases(self) -> list[Case]:
        """Every case the plan may measure: their JIT modules are compiled before the first round."""

    def rounds(self, state: SweepState) -> Iterator[Round]:
        """The rounds, each planned when the sweep asks for it (after measuring the one before)."""

    def close(self, run: "RunSession") -> None:
        """After the last round (not after an error): record the plan's outcome in the run's manifest."""


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
