"""The one verdict of an A/B of a server setting (two server-bench runs gated against each other, A = baseline,
B = candidate): the gate's rows, per case, read as one answer, e.g.

    FAIL: B is slower in 1 of the 2 decode-heavy cases (bs1-in64-out16: ttft +31.2%, latency +12.0%), within
    noise in the other 1. Rows: 2 regression, 8 within-noise

It is the gate's own decision (not a second rule): a case is **slower** when any of its metrics is a regression
(the rows that fail the gate), **fails** when a row of it fails otherwise (invalid, failed, missing, ...),
**faster** when none fails and at least one improved beyond the band and noise, else **within noise**. The figures
are the failing (improved) rows' changes, as the table lists them. PASS exactly when the gate passes.

A case's class comes from its shape, never from one run's timings (which move with the machine's load):
**decode-heavy** when its decode steps are at least the prefill's tokens over PREFILL_TOKENS_PER_STEP, i.e.
``output_len * 256 >= batch_size * input_len``, prefill-heavy otherwise. 256: a decode step of a batch reads
the whole model's weights once, about the time a GPU takes to prefill a few hundred tokens; the class is a
label for the answer, the verdict does not depend on it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFILL_TOKENS_PER_STEP = 256
_CASE = re.compile(r"^bs(\d+)-in(\d+)-out(\d+)$")
MAX_LISTED = 3  # cases named in a group's phrase


def case_class(case_id: str) -> str:
    """decode-heavy | prefill-heavy from the case's shape (``bs8-in1024-out16``); "other" when the id is not one."""
    m = _CASE.match(case_id)
    if not m:
        return "other"
    bs, inp, out = (int(x) for x in m.groups())
    return "decode-heavy" if out * PREFILL_TOKENS_PER_STEP >= bs * inp else "prefill-heavy"


@dataclass
class GroupAnswer:
    name: str  # decode-heavy | prefill-heavy | other
    cases: list[str] = field(default_factory=list)
    slower: dict[str, list] = field(default_factory=dict)  # case -> its regression rows
    failed: dict[str, list] = field(default_factory=dict)  # case -> its other failing rows
    faster: dict[str, list] = field(default_factory=dict)  # case -> its improvement rows (none failing)
    undecided: dict[str, list] = field(default_factory=dict)  # case -> its inconclusive rows (none failing)

    def phrase(self) -> str:
        n = len(self.cases)
        noun = f"{self.name} case{'s' if n != 1 else ''}"
        if not (self.slower or self.failed or self.faster or self.undecided):
            return f"is within noise in the {noun} ({n})"
        parts = []
        for verb, d in (("is slower", self.slower), ("fails", self.failed), ("cannot be told from A", self.undecided),
                        ("is faster", self.faster)):
            if d:
                which = ("the" if n == 1 else f"all {n}") if len(d) == n else f"{len(d)} of the {n}"
                parts.append(f"{verb if not parts else verb.removeprefix('is ')} in {which} {noun} ({_detail(d)})")
        rest = n - len(self.slower) - len(self.failed) - len(self.faster) - len(self.undecided)
        return ", ".join(parts) + (f", within noise in the other {rest}" if rest else "")


def _detail(d: dict[str, list]) -> str:
    out = []
    for case, rows in list(d.items())[:MAX_LISTED]:
        bits = [(f"{r.metric} {r.change:+.1%}" + (f" (detectable {r.detectable:.0%})" if r.outcome == "inconclusive"
                                                   and r.detectable is not None and r.detectable < 10 else ""))
                if r.change is not None and r.metric else r.outcome for r in rows]
        out.append(f"{case}: {', '.join(dict.fromkeys(bits))}")
    more = len(d) - MAX_LISTED
    return "; ".join(out) + (f"; {more} more" if more > 0 else "")


def ab_groups(rows) -> list[GroupAnswer]:
    """``rows``: the gate's RowResults of a server-bench comparison; the cases by class, each judged (docstring)."""
    by_case: dict[str, list] = {}
    for r in rows:
        by_case.setdefault(r.case_id, []).append(r)
    groups: dict[str, GroupAnswer] = {}
    for case, rs in by_case.items():
        if all(r.outcome in ("new", "not-compared") for r in rs) and not any(r.fails for r in rs):
            continue  # nothing of it compared (a case only one side has, or a baseline row that was not ok)
        g = groups.setdefault(case_class(case), GroupAnswer(case_class(case)))
        g.cases.append(case)
        reg = [r for r in rs if r.outcome == "regression"]
        other = [r for r in rs if r.fails and r.outcome != "regression"]
        better = [r for r in rs if r.outcome == "improvement"]
        open_ = [r for r in rs if r.outcome == "inconclusive"]
        if reg:
            g.slower[case] = reg
        elif other:
            g.failed[case] = other
        elif open_:
            g.undecided[case] = open_
        elif better:
            g.faster[case] = better
    order = ("decode-heavy", "prefill-heavy", "other")
    return [groups[k] for k in order if k in groups]


def ab_answer(rows) -> str:
    """``B is slower in 1 of the 2 decode-heavy cases (...); within noise in the prefill-heavy case (1).``"""
    groups = ab_groups(rows)
    if not groups:
        return "B vs A: no case compared on both sides."
    changed = [g for g in groups if g.slower or g.failed or g.faster or g.undecided]
    if not changed:
        return "B is within noise of A in every case (" + ", ".join(f"{len(g.cases)} {g.name}" for g in groups) + ")."
    changed.sort(key=lambda g: (not (g.slower or g.failed), not g.undecided))  # what fails the gate first
    first, *others = changed + [g for g in groups if g not in changed]
    text = "B " + first.phrase()
    if others:
        text += "; " + "; ".join(o.phrase().removeprefix("is ") for o in others)
    return text + "."


def verdict_line(res) -> str:
    """The gate's one verdict (GateResult.summary_line, which for server-bench runs starts with ab_answer)."""
    return res.summary_line()
