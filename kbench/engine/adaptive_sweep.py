"""The adaptive sweep's driver: measure what kbench.engine.adaptive's planner returns, round after round, into an
ordinary run folder (each row's `chosen_by` says why its case was measured), until the planner has nothing
uncertain left or a budget is spent. The manifest's `adaptive` block records the settings and the outcome."""
from __future__ import annotations

import time

from kbench.engine.adaptive import AdaptiveOptions, Planner, budget_left
from kbench.errors import BadInput
from kbench.engine.measure import kernel_reason
from kbench.runs.store import JOURNAL, read_journal


def earlier_wall_s(manifest: dict) -> float:
    """Wall seconds of this run's earlier calls (before a --resume)."""
    walls = [manifest.get("wall_s")] + list(manifest.get("wall_s_earlier") or [])
    return sum(float(w.get("total_s") or 0) for w in walls if isinstance(w, dict))


def run_adaptive(sweep, writer, dev, cases, done, bw, isolate, t_start: float) -> None:
    block = writer.manifest.get("adaptive")
    if sweep.opt.resume and block is None:
        raise BadInput(f"{writer.dir} is a full-grid sweep, not an adaptive one: resume it without --adaptive")
    stored = AdaptiveOptions.from_dict((block or {}).get("options") or {})
    opt = sweep.opt.adaptive or stored
    if block is not None and sweep.opt.resume:
        # a resume keeps the run's planning settings; the budgets are this call's (none given: none)
        given = sweep.opt.adaptive or AdaptiveOptions()
        opt = AdaptiveOptions(**{**stored.to_dict(), "budget_measurements": given.budget_measurements,
                                 "budget_minutes": given.budget_minutes}).check()
    block = writer.manifest.setdefault("adaptive", {"options": opt.to_dict()})
    block["options"] = opt.to_dict()
    planner = Planner(cases, {k.name: k.path for k in sweep.kernels}, opt)
    earlier = earlier_wall_s(writer.manifest) if sweep.opt.resume else 0.0
    journal = writer.dir / JOURNAL
    stopped, rounds = "converged", int(block.get("rounds") or 0)
    # every module the grid can need, at once: one pool of compile processes, not one per round (on the H200
    # the per-round pools took 53 s of an adaptive draft-extend run's 213 s; AOT-loaded modules cost little)
    sweep._compile(dev, cases, done, in_process=not isolate)
    sweep.obs.phase(f"adaptive: {len(planner.coarse())} coarse cases of {len(cases)}, then refinement")
    while stopped == "converged":
        rows = read_journal(journal)
        plan = planner.plan(rows)
        if plan.converged:
            break
        rounds += 1
        measurements = int((rows["status"] == "ok").sum()) if len(rows) else 0  # timed rows, as the manifest counts
        sweep.obs.message(f"adaptive round {rounds}: {len(plan.points)} case(s), {plan.uncertain} uncertain "
                          f"interval(s), {measurements} measurements so far")
        todo = [p for p in plan.points if any((k.name, p.case.case_id) not in done for k in sweep.kernels)]
        sweep.obs.phase(f"adaptive round {rounds}", total=sum(  # one advance per row, as in a full sweep
            1 for p in todo for k in sweep.kernels if (k.name, p.case.case_id) not in done))
        for p in todo:
            minutes = (earlier + time.perf_counter() - t_start) / 60
            hit = budget_left(opt, measurements, minutes)
            if hit is None and opt.budget_measurements is not None:
                runnable = [k for k in sweep.kernels if k.name not in p.pruned and k.path != "reference"
                            and (k.name, p.case.case_id) not in done and kernel_reason(k, dev, p.case) is None]
                if measurements + len(runnable) > opt.budget_measurements and measurements > 0:
                    hit = "budget-measurements"
            if hit:
                stopped = hit
                break
            sweep.chosen_by[p.case.case_id] = p.tag
            emit = sweep._emitter(writer, done)
            for name, reason in p.pruned.items():
                if (name, p.case.case_id) not in done:
                    k = next(k for k in sweep.kernels if k.name == name)
                    emit(sweep.measurer.row(k, p.case, "skipped", reason=reason))
            before = sweep.measurer.measurements
            sweep.measure_cases([p.case], dev, writer, done, bw, isolate)
            measurements += sweep.measurer.measurements - before
    rows = read_journal(journal)
    block.update(stopped_by=stopped, rounds=rounds, grid_cases=len(cases),
                 measured_cases=int(rows["case_id"].nunique()) if len(rows) else 0,
                 points={t: int(n) for t, n in rows.drop_duplicates("case_id")["chosen_by"].value_counts().items()}
                 if len(rows) else {},
                 pruned=int(rows["reason"].astype(str).str.startswith("adaptive:").sum()) if len(rows) else 0,
                 stop_rule=(f"converged: no unmeasured point can change the policy by more than "
                            f"{opt.regret_bound:.1%} (as its measured neighbours tell)") if stopped == "converged"
                 else f"{stopped}: the budget ran out before the refinement converged")
