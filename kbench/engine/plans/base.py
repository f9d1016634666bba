"""The protocol of a sweep plan and the values it hands the sweep (PlannedCase, Round), in a module of their own:
the implementations (plans/grid.py, plans/adaptive_plan.py) import it, and the package's __init__, which picks an
implementation (plan_for), imports them, so the protocol may not live in the __init__ (a cycle)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol

from kbench.cases.case import Case

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
