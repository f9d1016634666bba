"""The decode-vs-context answer per case, shared by the sweep summary, the report and the gate.

Only rows whose check passed (status ok) count; the reference is never a candidate.
"""
from __future__ import annotations

import pandas as pd

from kbench.rows import CASE_COLUMNS


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows that can compete: checked ok, timed, not the reference."""
    ok = rows[(rows["status"] == "ok") & (rows["path"] != "reference") & rows["median_us"].notna()]
    return ok.astype({"median_us": float})


def case_winners(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per case: best decode kernel and time, best context kernel and time, the winning path,
    and decode_speedup = best context time / best decode time (> 1: the decode kernel is faster)."""
    ok = measured(rows)
    cols = ["case_id", *CASE_COLUMNS, "best_decode", "decode_us", "best_context", "context_us", "winner",
            "winner_path", "decode_speedup"]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for case_id, g in ok.groupby("case_id", sort=False):
        rec = {"case_id": case_id, **{c: g.iloc[0][c] for c in CASE_COLUMNS}}
        for path in ("decode", "context"):
            p = g[g["path"] == path]
            if p.empty:
                rec[f"best_{path}"], rec[f"{path}_us"] = None, None
            else:
                best = p.loc[p["median_us"].idxmin()]
                rec[f"best_{path}"], rec[f"{path}_us"] = best["kernel"], float(best["median_us"])
        best = g.loc[g["median_us"].idxmin()]
        rec["winner"], rec["winner_path"] = best["kernel"], best["path"]
        rec["decode_speedup"] = (rec["context_us"] / rec["decode_us"]
                                 if rec["decode_us"] and rec["context_us"] else None)
        out.append(rec)
    return pd.DataFrame(out, columns=cols)
