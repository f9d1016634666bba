"""Regret: what following the policy costs against the best measured kernel, case by case.

regret_pct = (time of the policy's kernel in that case / best ok time in that case - 1) * 100. A case where
the policy names a kernel that has no ok row there (it failed, was wrong, or was not measured) is counted as
``unavailable`` and left out of mean and worst: it is a policy hole, not a number.
On the cases it was built from the policy's regret is 0 by construction; ``holdout`` builds the policy
without a random fraction of the cases and judges it on those, which measures the lookup between grid points.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbench.cases.models import HEAD_FIELDS, heads_text
from kbench.frames import itertuples
from kbench.errors import BadInput
from kbench.values import SEED_MAX, int_in
from kbench.report.policy import FILTER_AXES, Lookup


@dataclass
class Regret:
    label: str  # "all cases (in-sample)" | "holdout 20% (seed 0)"
    cases: int
    mean_pct: float | None
    worst_pct: float | None
    worst_case: str | None  # None when no case has regret > 0
    unavailable: int
    extrapolated: int
    per_case: pd.DataFrame  # case_id, chosen, chosen_us, best, best_us, regret_pct, interpolated, ...

    def summary(self) -> dict:
        return {"label": self.label, "cases": self.cases, "mean_pct": self.mean_pct, "worst_pct": self.worst_pct,
                "worst_case": self.worst_case, "unavailable": self.unavailable, "extrapolated": self.extrapolated}


def holdout_split(case_ids: list[str], fraction: float, seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, test): a seeded random `fraction` of the cases (at least one, never all) held out."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise BadInput(f"--holdout {fraction!r}: expected a fraction between 0 and 1 (exclusive)")
    if not int_in(seed, 0, SEED_MAX):
        raise BadInput(f"--seed {seed!r}: expected an integer in 0..2**63-1")
    ids = sorted(set(case_ids))
    if len(ids) < 2:
        raise BadInput(f"--holdout needs at least 2 measured cases, have {len(ids)}")
    n_test = min(len(ids) - 1, max(1, round(fraction * len(ids))))
    test = set(np.random.default_rng(seed).choice(len(ids), size=n_test, replace=False).tolist())
    return [c for i, c in enumerate(ids) if i not in test], [c for i, c in enumerate(ids) if i in test]


def regret(policy: dict, ok_rows: pd.DataFrame, cases: pd.DataFrame, label: str) -> Regret:
    """ok_rows: winners.measured() rows; cases: the case_winners() lines to judge the policy on."""
    times = {(k, c): float(m) for k, c, m in zip(ok_rows["kernel"].tolist(), ok_rows["case_id"].tolist(),
                                                  ok_rows["median_us"].tolist())}
    lookup = Lookup(policy)  # one group selection and index per group, not per case
    present = [a for a in FILTER_AXES if a in cases.columns]
    head_cols = [c for c in HEAD_FIELDS if c in cases.columns]
    recs = []
    for r in itertuples(cases):
        rec = {"case_id": r.case_id, "best": r.winner, "best_us": float(r.winner_us), "chosen": None,
               "chosen_us": None, "regret_pct": None, "interpolated": None, "extrapolated": None}
        # the case's own group: its realistic axes and timing state too (a run with both power states, or
        # several KV distributions, has one group per value, and the case is judged in its own)
        filters = {a: str(getattr(r, a)) for a in present}
        try:
            ans = lookup(r.batch_size, r.q_len, r.kv_len, extrapolate=True,
                         heads=heads_text({c: getattr(r, c) for c in head_cols}), dtype=r.dtype,
                         kv_dtype=r.kv_dtype, page_size=int(r.page_size), kv_layout=r.kv_layout, **filters)
        except BadInput:  # no group in the policy for this case's heads, dtypes, axes or state
            recs.append(rec)
            continue
        rec.update(chosen=ans["kernel"], interpolated=ans["interpolated"], extrapolated=ans["extrapolated"])
        t = times.get((ans["kernel"], r.case_id))
        if t is not None:
            rec.update(chosen_us=t, regret_pct=(t / rec["best_us"] - 1) * 100)
        recs.append(rec)
    df = pd.DataFrame(recs, columns=["case_id", "best", "best_us", "chosen", "chosen_us", "regret_pct",
                                     "interpolated", "extrapolated"])
    known = df.dropna(subset=["regret_pct"])
    worst = known.loc[known["regret_pct"].idxmax()] if len(known) else None
    worst_case = str(worst["case_id"]) if worst is not None and worst["regret_pct"] > 0 else None
    return Regret(label, len(df), float(known["regret_pct"].mean()) if len(known) else None,
                  float(worst["regret_pct"]) if worst is not None else None,
                  worst_case,
                  int(df["regret_pct"].isna().sum()), int((df["extrapolated"] == True).sum()), df)  # noqa: E712
