"""The adaptive sweep's planner: from the rows measured so far, the next grid points worth measuring.

Pure: it reads rows (a run's journal, or synthetic rows in the tests) and returns points; it never times.
Its sweep plan (kbench.engine.plans.adaptive_plan) has the sweep measure what it returns and asks again until
it returns nothing.

How it plans, per group (cases that differ only in batch_size, q_len and kv_len: the policy's groups):
  * coarse: the corners and every `coarse_step`-th value of each of the three axes, all kernels measured.
  * lines: the policy looks a shape up at its nearest measured (batch_size, kv_len) and then the nearest
    measured q_len there, so points are planned as (batch, kv) lines along q_len. A new line gets the coarse
    q values; refinement along q then works line by line.
  * an interval between two neighbouring measured points (along q on a line; along batch or kv between two
    lines, compared at the q values both measured) is refined at its middle grid value when
      - refine-crossover: their winners differ and taking one side's winner at the other side costs more
        than the regret bound (a kernel not measured there costs without limit);
      - refine-tie: their winners agree, but another kernel is within its measured spread of the winner
        (a tie), or within `close` of it, at one end and more than the bound behind at one end: it may
        overtake between them (a flip-back along q_len; across lines only when its distance to the winner
        changes by more than the bound between the two lines);
      - refine-step: on a line, both sides of the known steps q x G = 16 and 32 (G = the GQA group),
        where the kernels' times jump and nothing between two points predicts the other side; skipped
        when one kernel wins at both ends by `prune_factor` or more.
  * stop: when no interval is uncertain, no unmeasured point can change the policy by more than the
    bound (as far as the measured neighbours tell: linear between them, apart from the known steps).
  * pruning: at a refined point, a kernel that is `prune_factor` x slower than the best at every measured
    neighbour (or was pruned there) is not measured; the sweep writes it a skipped row saying so.

A case with rows for only some kernels (a sweep killed mid-case) is returned first, with its tag, so
`--resume` finishes it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from kbench.cases import axes
from kbench.cases.case import Case
from kbench.engine.plans.adaptive_options import AdaptiveOptions  # noqa: F401 - its home is light (the CLI reads its defaults)
from kbench.values import number

COARSE, CROSSOVER, TIE, STEP = "coarse", "refine-crossover", "refine-tie", "refine-step"
TAGS = (COARSE, CROSSOVER, TIE, STEP)
PRUNED_PREFIX = "adaptive: not measured"  # the reason of a pruned kernel's skipped row
TWIN_MARK = "as fast as its twin "  # ... of a kernel not measured because it timed like another one
STEPS = (16, 32)  # q_len x GQA group values where the decode kernels' tiles step up
LINE_AXES = ("batch_size", "kv_len")


@dataclass
class Point:
    case: Case
    tag: str
    pruned: dict[str, str] = field(default_factory=dict)  # kernel -> reason of its skipped row
    priority: float = 0.0


@dataclass
class Plan:
    points: list[Point]
    uncertain: int  # intervals still uncertain (0 and no points: converged)

    @property
    def converged(self) -> bool:
        return not self.points


class _Obs:
    """What was measured at one case: ok times (median, half-width) per competing kernel, pruned kernels."""

    def __init__(self, rows: pd.DataFrame):
        from kbench.runs.winners import half_width_us

        self.times: dict[str, tuple[float, float]] = {}
        self.pruned: set[str] = set()
        self.twins: dict[str, str] = {}  # kernel not measured -> its measured twin
        self.have: set[str] = set(rows["kernel"])
        tags = [t for t in rows.get("chosen_by", pd.Series([], dtype=object)) if isinstance(t, str) and t]
        self.tag = tags[0] if tags else COARSE
        for _, r in rows.iterrows():
            if r["path"] == "reference":
                continue
            m = number(r.get("median_us"))
            if r["status"] == "ok" and m is not None and m > 0:
                self.times[r["kernel"]] = (m, half_width_us(r))
            elif r["status"] == "skipped" and str(r.get("reason") or "").startswith(PRUNED_PREFIX):
                twin = str(r.get("reason") or "").split(TWIN_MARK, 1)
                if len(twin) == 2:  # not measured as the twin of a measured kernel: taken to be as fast
                    self.twins[r["kernel"]] = twin[1].split(" ", 1)[0]
                else:
                    self.pruned.add(r["kernel"])
        for k, j in self.twins.items():
            if j in self.times:
                self.times.setdefault(k, self.times[j])
        self.best = min(self.times, key=lambda k: self.times[k][0]) if self.times else None
        if self.best in self.twins:  # a measured kernel wins a tie with its unmeasured twin
            self.best = self.twins[self.best]

    def ratio(self, k: str, w: str) -> float:
        """t(k) / t(w) - 1: what choosing k costs where w is the reference (inf when k has no time)."""
        if k not in self.times or w not in self.times:
            return math.inf
        return self.times[k][0] / self.times[w][0] - 1

    def cost(self, k: str) -> float:
        return self.ratio(k, self.best)

    def ties(self, k: str, w: str) -> bool:
        from kbench.runs.winners import is_tie

        if k not in self.times or w not in self.times:
            return False
        return is_tie(*self.times[k], *self.times[w])

    def far(self, k: str, factor: float) -> bool:
        """k is `factor` x slower than the best here, or was pruned here."""
        if k in self.pruned:
            return True
        return k in self.times and self.best is not None and self.times[k][0] >= factor * self.times[self.best][0]


def _coarse_indices(n: int, step: int) -> list[int]:
    return sorted(set(range(0, n, step)) | {n - 1})


def step_pairs(q_values: list[int], group: int) -> list[tuple[int, int]]:
    """(s, s + 1) for each known step: s the largest q with q x G <= 16 (resp. 32), both in the grid."""
    out = []
    for m in STEPS:
        s = m // max(group, 1)
        if s in q_values and s + 1 in q_values:
            out.append((s, s + 1))
    return out


class _Group:
    def __init__(self, cases: list[Case]):
        self.cases = {(c.batch_size, c.q_len, c.kv_len): c for c in cases}
        self.bs = sorted({c.batch_size for c in cases})
        self.q = sorted({c.q_len for c in cases})
        self.kv = sorted({c.kv_len for c in cases})
        self.G = cases[0].group


class Planner:
    """planner.plan(rows) -> the next points; kernels: name -> path (decode | context | reference)."""

    def __init__(self, cases: list[Case], kernels: dict[str, str], options: AdaptiveOptions | None = None):
        self.opt = (options or AdaptiveOptions()).check()
        self.kernels = dict(kernels)
        self.competing = [k for k, p in self.kernels.items() if p != "reference"]
        by_group: dict[tuple, list[Case]] = {}
        for c in cases:
            by_group.setdefault(tuple(getattr(c, n) for n in axes.GROUP_COLUMNS), []).append(c)
        self.groups = [_Group(cs) for cs in by_group.values()]
        self.grid_cases = len(cases)

    # -- the coarse sub-grid ---------------------------------------------------------------------------
    def coarse(self) -> list[Case]:
        out = []
        s = self.opt.coarse_step
        for g in self.groups:
            for i in _coarse_indices(len(g.bs), s):
                for j in _coarse_indices(len(g.kv), s):
                    for k in _coarse_indices(len(g.q), s):
                        c = g.cases.get((g.bs[i], g.q[k], g.kv[j]))
                        if c is not None:
                            out.append(c)
        return out

    # -- planning ---------------------------------------------------------------------------------------
    def plan(self, rows: pd.DataFrame) -> Plan:
        by_case = {cid: g for cid, g in rows.groupby("case_id", sort=False)} if len(rows) else {}
        obs = {cid: _Obs(g) for cid, g in by_case.items()}
        # a case cut short (killed mid-case): finish it first, as it was chosen
        partial = [Point(c, o.tag, priority=math.inf) for g in self.groups for c in g.cases.values()
                   for o in [obs.get(c.case_id)] if o is not None and not set(self.kernels) <= o.have]
        if partial:
            return Plan(partial, len(partial))
        todo = [Point(c, COARSE, priority=math.inf) for c in self.coarse() if c.case_id not in obs]
        if todo:
            return Plan(todo, len(todo))
        points: dict[str, Point] = {}
        uncertain = 0
        for g in self.groups:
            uncertain += self._plan_group(g, obs, points)
        return Plan(sorted(points.values(), key=lambda p: -p.priority), uncertain)

    def _assess(self, a: _Obs, b: _Obs, along_q: bool = True) -> tuple[float, str] | None:
        """Whether the interval between two measured points is uncertain: (priority, tag) or None."""
        if a.best is None or b.best is None:
            return None  # nothing timed at one end (every kernel failed or was skipped): nothing to refine on
        bound, wa, wb = self.opt.regret_bound, a.best, b.best
        if wa != wb:
            r = max(a.cost(wb), b.cost(wa))
            if r > bound:
                return (min(r, 10.0) + 1, CROSSOVER)
        for w in {wa, wb}:
            for k in self.competing:
                if k == w or k not in a.times or k not in b.times:
                    continue
                ra, rb = a.ratio(k, w), b.ratio(k, w)
                near_a, near_b = a.ties(k, w) or ra <= self.opt.close, b.ties(k, w) or rb <= self.opt.close
                # across (batch, kv) lines a close runner-up matters only when its distance moves
                moving = along_q or abs(ra - rb) > bound
                if (near_a or near_b) and max(ra, rb) > bound and not (a.ties(k, w) and b.ties(k, w)) and moving:
                    return (max(ra, rb) - min(ra, rb), TIE)
        return None

    def _prune(self, neighbours: list[_Obs], where: str) -> dict[str, str]:
        f = self.opt.prune_factor
        if not neighbours:
            return {}
        out = {}
        for k in self.competing:
            if all(n.far(k, f) for n in neighbours):
                out[k] = (f"{PRUNED_PREFIX}: {f:g}x or more slower than the best at all {len(neighbours)} "
                          f"measured neighbour(s) ({where})")
        tw = self.opt.twin
        if tw:  # twins: within `twin` of a kernel j at every neighbour, both timed there: j is measured for both
            kept = [k for k in self.competing if k not in out]
            speed = {k: sum(min(n.ratio(k, n.best), 10.0) for n in neighbours) for k in kept}  # lower: faster
            for k in sorted(kept, key=lambda k: (-speed[k], k)):  # the slower of a pair is the one not measured
                for j in sorted(kept, key=lambda j: (speed[j], j)):
                    if j == k or j in out:
                        continue
                    if all(k in n.times and j in n.times and k not in n.twins and j not in n.twins
                           and abs(n.ratio(k, j)) <= tw for n in neighbours):
                        out[k] = (f"{PRUNED_PREFIX}: within {tw:.0%} of {j} at all {len(neighbours)} measured "
                                  f"neighbour(s), {TWIN_MARK}{j} ({where})")
                        break
        return out

    def _add(self, points: dict, case: Case | None, tag: str, priority: float, neighbours: list[_Obs],
             obs: dict) -> None:
        if case is None or case.case_id in obs:
            return
        p = points.get(case.case_id)
        if p is not None and p.priority >= priority:
            return
        where = "adaptive refinement" if not neighbours else "neighbours of " + case.case_id
        points[case.case_id] = Point(case, tag, self._prune(neighbours, where), priority)

    def _line(self, g: _Group, obs: dict, bs: int, kv: int) -> dict[int, _Obs]:
        """q -> observation on the (bs, kv) line."""
        out = {}
        for q in g.q:
            c = g.cases.get((bs, q, kv))
            if c is not None and c.case_id in obs:
                out[q] = obs[c.case_id]
        return out

    def _plan_group(self, g: _Group, obs: dict, points: dict) -> int:
        uncertain = 0
        lines = {(bs, kv): self._line(g, obs, bs, kv) for bs in g.bs for kv in g.kv}
        lines = {k: v for k, v in lines.items() if v}
        qi = {q: i for i, q in enumerate(g.q)}
        # along q, line by line
        for (bs, kv), line in lines.items():
            qs = sorted(line)
            for qa, qb in zip(qs, qs[1:]):
                if qi[qb] - qi[qa] < 2:
                    continue
                verdict = self._assess(line[qa], line[qb])
                if verdict:
                    uncertain += 1
                    mid = g.q[(qi[qa] + qi[qb]) // 2]
                    self._add(points, g.cases.get((bs, mid, kv)), verdict[1], verdict[0], [line[qa], line[qb]], obs)
            for s, s1 in step_pairs(g.q, g.G):
                below = [q for q in qs if q <= s]
                above = [q for q in qs if q >= s1]
                if not below or not above or (s in line and s1 in line):
                    continue
                a, b = line[max(below)], line[min(above)]
                if a.best is not None and a.best == b.best and all(
                        a.far(k, self.opt.prune_factor) and b.far(k, self.opt.prune_factor)
                        for k in self.competing if k != a.best):
                    continue
                uncertain += 1
                for q in (s, s1):
                    self._add(points, g.cases.get((bs, q, kv)), STEP, 1.0, [a, b], obs)
        # across lines: along batch_size at each kv, and along kv_len at each batch size
        for axis in LINE_AXES:
            vals = g.bs if axis == "batch_size" else g.kv
            others = g.kv if axis == "batch_size" else g.bs
            vi = {v: i for i, v in enumerate(vals)}
            for o in others:
                key = (lambda v: (v, o)) if axis == "batch_size" else (lambda v: (o, v))
                measured = [v for v in vals if key(v) in lines]
                for va, vb in zip(measured, measured[1:]):
                    if vi[vb] - vi[va] < 2:
                        continue
                    la, lb = lines[key(va)], lines[key(vb)]
                    worst = None
                    for q in sorted(set(la) & set(lb)):
                        v = self._assess(la[q], lb[q], along_q=False)
                        if v and (worst is None or v[0] > worst[0]):
                            worst = v
                    if worst is None:
                        continue
                    uncertain += 1
                    mid = vals[(vi[va] + vi[vb]) // 2]
                    bs, kv = key(mid)
                    for qk in _coarse_indices(len(g.q), self.opt.coarse_step):
                        q = g.q[qk]
                        nb = [n for n in (_nearest(la, q), _nearest(lb, q)) if n is not None]
                        self._add(points, g.cases.get((bs, q, kv)), worst[1], worst[0], nb, obs)
        return uncertain


def _nearest(line: dict[int, _Obs], q: int) -> _Obs | None:
    if not line:
        return None
    return line[min(line, key=lambda v: (abs(v - q), v))]


def budget_left(opt: AdaptiveOptions, measurements: int, minutes: float) -> str | None:
    """None while the budget allows more; else which budget was hit."""
    if opt.budget_measurements is not None and measurements >= opt.budget_measurements:
        return "budget-measurements"
    if opt.budget_minutes is not None and minutes >= opt.budget_minutes:
        return "budget-minutes"
    return None


def replay(planner: Planner, oracle: pd.DataFrame, budget_measurements: int | None = None
           ) -> tuple[pd.DataFrame, str]:
    """Run the planner against rows already measured (a full-grid run, or a synthetic landscape) as the
    measurement oracle: each planned case takes its rows from `oracle`, a pruned kernel a skipped row.
    Returns (the rows an adaptive sweep would have written, why it stopped). No timing: tests and the
    CPU simulation of tests/gpu/adaptive_bench.py."""
    by_case = {cid: g for cid, g in oracle.groupby("case_id", sort=False)}
    taken = pd.DataFrame(columns=list(oracle.columns) + ["chosen_by"])
    measurements = 0
    budget = budget_measurements if budget_measurements is not None else planner.opt.budget_measurements
    while True:
        plan = planner.plan(taken)
        if plan.converged:
            return taken, "converged"
        for p in plan.points:
            if budget is not None and measurements >= budget:
                return taken, "budget-measurements"
            rows = by_case.get(p.case.case_id)
            if rows is None:  # the oracle lacks the case: record every kernel as skipped
                rows = pd.DataFrame([{"kernel": k, "path": path, "case_id": p.case.case_id, "status": "skipped",
                                      "reason": "not in the oracle", **p.case.to_dict()}
                                     for k, path in planner.kernels.items()])
            rows = rows.copy()
            rows["chosen_by"] = p.tag
            pr = rows["kernel"].isin(p.pruned) & (rows["status"] != "skipped")
            rows.loc[pr, "status"] = "skipped"
            rows.loc[pr, "reason"] = rows.loc[pr, "kernel"].map(p.pruned)
            for c in ("median_us", "rel_spread", "iqr_us", "p25_us", "p75_us"):
                if c in rows:
                    rows[c] = rows[c].astype(object)
                    rows.loc[pr, c] = None
            have = set(rows["kernel"])
            missing = [k for k in planner.kernels if k not in have]
            if missing:  # a kernel the oracle never ran: a skipped row, so the case counts as complete
                rows = pd.concat([rows, pd.DataFrame([{"kernel": k, "path": planner.kernels[k],
                                                       "case_id": p.case.case_id, "status": "skipped",
                                                       "reason": "not in the oracle", "chosen_by": p.tag,
                                                       **p.case.to_dict()} for k in missing])], ignore_index=True)
            measurements += int((rows["status"] == "ok").sum())
            taken = pd.concat([taken, rows], ignore_index=True) if len(taken) else rows.reset_index(drop=True)
