"""The adaptive sweep plan: the rounds are what the planner (kbench.engine.plans.adaptive) returns from the rows
measured so far, each row's `chosen_by` says why its case was measured, until the planner finds nothing
uncertain or a budget is spent. The manifest's `adaptive` block records the settings and the outcome; the run
is an ordinary run folder."""
from __future__ import annotations

from typing import Iterator

from kbench.cases.case import Case
from kbench.engine.plans.base import PlannedCase, Round, SweepState
from kbench.engine.plans.adaptive import PRUNED_PREFIX, Planner, budget_left
from kbench.engine.plans.adaptive_options import AdaptiveOptions
from kbench.errors import BadInput


def earlier_wall_s(manifest: dict) -> float:
    """Wall seconds of this run's earlier calls (before a --resume)."""
    walls = [manifest.get("wall_s")] + list(manifest.get("wall_s_earlier") or [])
    return sum(float(w.get("total_s") or 0) for w in walls if isinstance(w, dict))


class AdaptivePlan:
    """SweepPlan: the coarse sub-grid, then round after round the points the planner finds uncertain.
    options: this call's settings (None on a --resume without budgets: the run's own, no budget)."""

    def __init__(self, cases: list[Case], options: AdaptiveOptions | None = None):
        self.grid = list(cases)
        self.given = options
        self.opt = options
        self.planner: Planner | None = None
        self.block: dict = {}  # the manifest's adaptive block (the run's)
        self.rounds_done = 0  # over every call of the run
        self.earlier_s = 0.0  # wall seconds of the run's earlier calls (the minutes budget counts them)
        self.stopped = "converged"  # or the budget that ran out
        self.intro = ""

    def manifest_fields(self) -> dict:
        return {"shard": None, "adaptive": {"options": (self.given or AdaptiveOptions()).to_dict()}}

    def open(self, run, kernels: dict[str, str]) -> None:
        block = run.manifest.get("adaptive")
        if run.resumed and block is None:
            raise BadInput(f"{run.dir} is a full-grid sweep, not an adaptive one: resume it without --adaptive")
        stored = AdaptiveOptions.from_dict((block or {}).get("options") or {})
        opt = self.given or stored
        if block is not None and run.resumed:
            # a resume keeps the run's planning settings; the budgets are this call's (none given: none)
            given = self.given or AdaptiveOptions()
            opt = AdaptiveOptions(**{**stored.to_dict(), "budget_measurements": given.budget_measurements,
                                     "budget_minutes": given.budget_minutes}).check()
        self.block = run.manifest.setdefault("adaptive", {"options": opt.to_dict()})
        self.block["options"] = opt.to_dict()
        self.opt = opt
        self.planner = Planner(self.grid, kernels, opt)
        self.rounds_done = int(self.block.get("rounds") or 0)
        self.earlier_s = earlier_wall_s(run.manifest) if run.resumed else 0.0
        self.intro = f"adaptive: {len(self.planner.coarse())} coarse cases of {len(self.grid)}, then refinement"

    def cases(self) -> list[Case]:
        # every module the grid can need, at once: one pool of compile processes, not one per round (on the H200
        # the per-round pools took 53 s of an adaptive draft-extend run's 213 s; AOT-loaded modules cost little)
        return self.grid

    def rounds(self, state: SweepState) -> Iterator[Round]:
        while self.stopped == "converged":
            rows = state.rows()
            plan = self.planner.plan(rows)
            if plan.converged:
                return
            self.rounds_done += 1
            so_far = int((rows["status"] == "ok").sum()) if len(rows) else 0  # timed rows, as the manifest counts
            yield Round(f"adaptive round {self.rounds_done}",
                        [PlannedCase(p.case, p.tag, p.pruned) for p in plan.points],
                        f"adaptive round {self.rounds_done}: {len(plan.points)} case(s), {plan.uncertain} uncertain "
                        f"interval(s), {so_far} measurements so far",
                        self._budget(state, so_far - state.measurements))

    def _budget(self, state: SweepState, earlier: int):
        """admit(case) for a round: False (and `stopped` says which) once a budget is spent or, for the
        measurements budget, once the case's kernels would go past it. earlier: the run's timed rows from before
        this call's measurements."""
        opt = self.opt

        def admit(pc: PlannedCase) -> bool:
            measurements = earlier + state.measurements
            hit = budget_left(opt, measurements, (self.earlier_s + state.elapsed_s()) / 60)
            if hit is None and opt.budget_measurements is not None:
                if measurements + state.to_time(pc.case, pc.pruned) > opt.budget_measurements and measurements > 0:
                    hit = "budget-measurements"
            if hit:
                self.stopped = hit
                return False
            return True

        return admit

    def close(self, run) -> None:
        rows = run.rows()
        stopped, opt = self.stopped, self.opt
        self.block.update(
            stopped_by=stopped, rounds=self.rounds_done, grid_cases=len(self.grid),
            measured_cases=int(rows["case_id"].nunique()) if len(rows) else 0,
            points={t: int(n) for t, n in rows.drop_duplicates("case_id")["chosen_by"].value_counts().items()}
            if len(rows) else {},
            pruned=int(rows["reason"].astype(str).str.startswith(PRUNED_PREFIX).sum()) if len(rows) else 0,
            stop_rule=(f"converged: no unmeasured point can change the policy by more than "
                       f"{opt.regret_bound:.1%} (as its measured neighbours tell)") if stopped == "converged"
            else f"{stopped}: the budget ran out before the refinement converged")
