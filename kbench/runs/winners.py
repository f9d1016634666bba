"""The decode-vs-context answer per case, shared by the sweep summary, the report and the gate.

Only rows whose check passed (status ok) count; the reference is never a candidate.

Ties. Two times tie when their spreads overlap: ``|m1 - m2| <= h1 + h2``, where ``h`` is a row's
half-width in microseconds: ``median_us * rel_spread`` (the 95% CI of the median the timer reports),
else ``iqr_us / 2``, else ``(p75_us - p25_us) / 2``, else 0 (a row without any spread never ties
unless the medians are equal). The IQR fallback is wider than a CI, so it errs towards calling a tie.
"""
from __future__ import annotations


import pandas as pd

from kbench.values import number
from kbench.runs.rows import CASE_COLUMNS

# path_verdict values: which path serves the case
DECODE, CONTEXT, TIE, DECODE_ONLY, CONTEXT_ONLY = "decode", "context", "tie", "decode-only", "context-only"


def half_width_us(row) -> float:
    """The measured spread of one row's median, in microseconds (see the module docstring)."""
    m, rel = number(row.get("median_us")), number(row.get("rel_spread"))
    if m is not None and rel is not None:
        return abs(m * rel)
    iqr = number(row.get("iqr_us"))
    if iqr is not None:
        return abs(iqr) / 2
    p25, p75 = number(row.get("p25_us")), number(row.get("p75_us"))
    if p25 is not None and p75 is not None:
        return abs(p75 - p25) / 2
    return 0.0


def is_tie(m1: float, h1: float, m2: float, h2: float) -> bool:
    """Two medians whose difference is within their combined spread."""
    return abs(m1 - m2) <= h1 + h2


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows that can compete: checked ok, timed, not the reference."""
    ok = rows[(rows["status"] == "ok") & (rows["path"] != "reference") & rows["median_us"].notna()]
    return ok.astype({"median_us": float})


WINNER_COLUMNS = [
    "case_id", *CASE_COLUMNS, "best_decode", "decode_us", "best_context", "context_us", "winner",
    "winner_path", "decode_speedup",
    # added by the report: runner-up, margin and ties (see the module docstring)
    "winner_us", "runner_up", "runner_up_path", "runner_up_us", "margin_pct", "tied_with", "winner_tie",
    "path_verdict", "excluded",
]


def _excluded(rows: pd.DataFrame) -> dict[str, str]:
    """case_id -> 'kernel (status), ...' for kernels that ran but may not compete (wrong, failed)."""
    bad = rows[rows["status"].isin(["wrong", "failed"]) & (rows["path"] != "reference")]
    return {cid: ", ".join(f"{k} ({s})" for k, s in zip(g["kernel"], g["status"]))
            for cid, g in bad.groupby("case_id", sort=False)}


def case_winners(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per case: best decode kernel and time, best context kernel and time, the winning path,
    and decode_speedup = best context time / best decode time (> 1: the decode kernel is faster).

    Also: the runner-up (second fastest kernel of any path) and the winner's margin over it in percent,
    ``tied_with`` (kernels whose time ties the winner's), and ``path_verdict``: decode | context | tie
    (best decode and best context tie) | decode-only | context-only (the other path has no ok row)."""
    ok = measured(rows)
    if ok.empty:
        return pd.DataFrame(columns=WINNER_COLUMNS)
    excluded = _excluded(rows)
    out = []
    for case_id, g in ok.groupby("case_id", sort=False):
        g = g.sort_values("median_us", kind="stable")
        half = [half_width_us(r) for _, r in g.iterrows()]
        rec = {"case_id": case_id, **{c: g.iloc[0][c] for c in CASE_COLUMNS}}
        best_of = {}
        for path in ("decode", "context"):
            idx = [i for i, p in enumerate(g["path"]) if p == path]
            if not idx:
                rec[f"best_{path}"], rec[f"{path}_us"] = None, None
            else:
                best = g.iloc[idx[0]]
                rec[f"best_{path}"], rec[f"{path}_us"] = best["kernel"], float(best["median_us"])
                best_of[path] = (float(best["median_us"]), half[idx[0]])
        best = g.iloc[0]
        rec["winner"], rec["winner_path"] = best["kernel"], best["path"]
        rec["decode_speedup"] = (rec["context_us"] / rec["decode_us"]
                                 if rec["decode_us"] and rec["context_us"] else None)
        w_us = float(best["median_us"])
        rec["winner_us"] = w_us
        if len(g) > 1:
            ru = g.iloc[1]
            rec["runner_up"], rec["runner_up_path"] = ru["kernel"], ru["path"]
            rec["runner_up_us"] = float(ru["median_us"])
            rec["margin_pct"] = (rec["runner_up_us"] - w_us) / w_us * 100 if w_us > 0 else None
        else:
            rec["runner_up"] = rec["runner_up_path"] = rec["runner_up_us"] = rec["margin_pct"] = None
        tied = [g.iloc[i]["kernel"] for i in range(1, len(g))
                if is_tie(w_us, half[0], float(g.iloc[i]["median_us"]), half[i])]
        rec["tied_with"] = ", ".join(tied)
        rec["winner_tie"] = bool(tied)
        if len(best_of) == 2:
            (dm, dh), (cm, ch) = best_of["decode"], best_of["context"]
            rec["path_verdict"] = TIE if is_tie(dm, dh, cm, ch) else (DECODE if dm < cm else CONTEXT)
        else:
            rec["path_verdict"] = DECODE_ONLY if "decode" in best_of else CONTEXT_ONLY
        rec["excluded"] = excluded.get(case_id, "")
        out.append(rec)
    return pd.DataFrame(out, columns=WINNER_COLUMNS)
