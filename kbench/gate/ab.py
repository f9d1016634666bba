"""The one-line answer to an A/B of a server setting: "B is x% faster in the decode-heavy cases, within noise
elsewhere", from the gate's verdicts on two server-bench runs (A = baseline, B = candidate).

Cases split by where A's time went: decode-heavy when decoding took at least half of the batch's latency
(``1 - last_ttft / latency >= 0.5``), prefill-heavy otherwise. Within a group a case counts as faster
(slower) when the gate found its latency an improvement (regression): beyond the threshold and beyond
noise (Mann-Whitney on the ``--repeat`` samples, or the threshold alone without repeats). With g the
geometric mean of ``latency_A / latency_B`` over the group's faster (slower) cases, B is ``g - 1`` faster
(``1 / g - 1`` slower: B's latency is that much longer).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DECODE_HEAVY = 0.5  # share of the latency spent after the first token


@dataclass
class GroupAnswer:
    name: str  # decode-heavy | prefill-heavy
    cases: list[str]
    faster: dict[str, float]  # case -> latency_A / latency_B - 1 (beyond noise)
    slower: dict[str, float]

    def phrase(self) -> str:
        n = len(self.cases)
        if not self.faster and not self.slower:
            return f"within noise in the {self.name} cases ({n})"
        parts = []
        for word, d in (("faster", self.faster), ("slower", self.slower)):
            if d:
                g = math.exp(sum(math.log1p(v) for v in d.values()) / len(d))  # geometric mean of lat_A / lat_B
                pct = (g - 1 if word == "faster" else 1 / g - 1) * 100
                which = "the" if len(d) == n else f"{len(d)} of the {n}"
                parts.append(f"{pct:.1f}% {word} in {which} {self.name} cases")
        rest = n - len(self.faster) - len(self.slower)
        return ", ".join(parts) + (f" (within noise in the other {rest})" if rest else "")


def ab_groups(rows) -> list[GroupAnswer]:
    """``rows``: the gate's RowResults of a server-bench comparison."""
    lat = {r.case_id: r for r in rows if r.metric == "latency"}
    ttft = {r.case_id: r for r in rows if r.metric == "ttft"}
    groups = {"decode-heavy": GroupAnswer("decode-heavy", [], {}, {}),
              "prefill-heavy": GroupAnswer("prefill-heavy", [], {}, {})}
    for case, r in lat.items():
        if not r.base_value or not r.cand_value or r.base_value <= 0 or r.cand_value <= 0:
            continue
        t = ttft.get(case)
        share = 1 - (t.base_value / r.base_value) if t is not None and t.base_value else 1.0
        g = groups["decode-heavy" if share >= DECODE_HEAVY else "prefill-heavy"]
        g.cases.append(case)
        speed = r.base_value / r.cand_value - 1
        if r.outcome == "improvement":
            g.faster[case] = speed
        elif r.outcome == "regression":
            g.slower[case] = speed
    return [g for g in groups.values() if g.cases]


def ab_answer(rows) -> str:
    """``B is 12.0% faster in the decode-heavy cases, within noise in the prefill-heavy cases (2).``"""
    groups = ab_groups(rows)
    if not groups:
        return "B vs A: no case with a latency on both sides to compare."
    changed = [g for g in groups if g.faster or g.slower]
    if not changed:
        return "B is within noise of A in every case (" + ", ".join(f"{len(g.cases)} {g.name}" for g in groups) + ")."
    first, *others = changed + [g for g in groups if g not in changed]
    text = "B is " + first.phrase()
    if others:
        text += "; " + "; ".join(o.phrase() for o in others)
    return text + "."
