"""The decode-vs-context answer per case, shared by the sweep summary, the report and the gate.

Only rows whose check passed (status ok) count; the reference is never a candidate.

Ties. Two times tie when their spreads overlap: ``|m1 - m2| <= h1 + h2``, where ``h`` is a row's
half-width in microseconds: ``median_us * rel_spread`` (the 95% CI of the median the timer reports),
else ``iqr_us / 2``, else ``(p75_us - p25_us) / 2``, else 0 (a row without any spread never ties
unless the medians are equal). The IQR fallback is wider than a CI, so it errs towards calling a tie.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.errors import BadInput
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


def measured(rows: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """Rows that can compete: checked ok, timed, not the reference. columns: only these of them (those the rows
    have; median_us always), not a copy of every column."""
    mask = (rows["status"] == "ok") & (rows["path"] != "reference") & rows["median_us"].notna()
    if columns is None:
        ok = rows[mask]
    else:
        ok = rows.loc[mask, [c for c in dict.fromkeys([*columns, "median_us"]) if c in rows.columns]]
    return ok.astype({"median_us": float})


# the columns case_winners reads of the measured rows; WINNER_INPUT: of the rows it is given (a caller that hands it
# a part of its rows need copy only these)
_WINNER_INPUT = ["case_id", "kernel", "path", "median_us", "rel_spread", "iqr_us", "p25_us", "p75_us", *CASE_COLUMNS]
WINNER_INPUT = ["status", *_WINNER_INPUT]


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
    out: dict[str, list[str]] = {}
    for cid, k, s in zip(bad["case_id"].tolist(), bad["kernel"].tolist(), bad["status"].tolist()):
        if cid == cid and cid is not None:  # groupby leaves out rows without a case id
            out.setdefault(cid, []).append(f"{k} ({s})")
    return {cid: ", ".join(parts) for cid, parts in out.items()}


def _numbers(df: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats, NaN where missing or not a number (as number() reads one value)."""
    if column not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def half_widths_us(df: pd.DataFrame) -> np.ndarray:
    """half_width_us() of every row of ``df`` at once."""
    m, rel = _numbers(df, "median_us"), _numbers(df, "rel_spread")
    iqr, p25, p75 = _numbers(df, "iqr_us"), _numbers(df, "p25_us"), _numbers(df, "p75_us")
    with np.errstate(invalid="ignore"):
        return np.where(~np.isnan(m) & ~np.isnan(rel), np.abs(m * rel),
                        np.where(~np.isnan(iqr), np.abs(iqr) / 2,
                                 np.where(~np.isnan(p25) & ~np.isnan(p75), np.abs(p75 - p25) / 2, 0.0)))


def _first_of(codes: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1: the index of its first row (in order) where mask holds, else -1."""
    idx = np.flatnonzero(mask)
    out = np.full(n, -1)
    uniq, first = np.unique(codes[idx], return_index=True)
    out[uniq] = idx[first]
    return out


def case_winners(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per case: best decode kernel and time, best context kernel and time, the winning path,
    and decode_speedup = best context time / best decode time (> 1: the decode kernel is faster).

    Also: the runner-up (second fastest kernel of any path) and the winner's margin over it in percent,
    ``tied_with`` (kernels whose time ties the winner's), and ``path_verdict``: decode | context | tie
    (best decode and best context tie) | decode-only | context-only (the other path has no ok row).

    Cases come in the order of their first row; within a case the kernels are ranked by median_us, rows
    of equal median in row order. Computed with whole-column operations (a 100,000-row run has 12,000 cases)."""
    ok = measured(rows, _WINNER_INPUT)
    codes, uniques = pd.factorize(ok["case_id"])
    if not (codes >= 0).any():
        return pd.DataFrame(columns=WINNER_COLUMNS)
    excluded = _excluded(rows)
    keep = codes >= 0  # groupby leaves out rows without a case id
    median = ok["median_us"].to_numpy(dtype=float)
    order = np.flatnonzero(keep)[np.lexsort((median[keep], codes[keep]))]  # stable: ties keep row order
    g = ok.iloc[order]
    code, med, half = codes[order], median[order], half_widths_us(g)
    kernel, path = g["kernel"].tolist(), g["path"].tolist()
    n = len(uniques)
    start = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])  # the winner of each case (cases 0..n-1)
    size = np.diff(np.r_[start, len(code)])
    path_arr = np.asarray(path, dtype=object)
    best = {p: _first_of(code, path_arr == p, n) for p in ("decode", "context")}
    # kernels whose time ties the winner's: every later row of the case within both spreads
    w_of = start[code]
    tied_row = (np.arange(len(code)) != w_of) & (np.abs(med[w_of] - med) <= half[w_of] + half)
    tied: dict[int, list[str]] = {}
    for i in np.flatnonzero(tied_row):
        tied.setdefault(int(code[i]), []).append(kernel[i])
    # each column of the n lines as a list (a dict per case took a second at 37,000 cases)
    cols: dict[str, list] = {"case_id": uniques.tolist()}  # an Index of pyarrow strings is slow to index
    cols.update((c, g[c].to_numpy()[start].tolist()) for c in CASE_COLUMNS)
    med_l, half_l, w_l, many = med.tolist(), half.tolist(), start.tolist(), (size > 1).tolist()
    at = {p: best[p].tolist() for p in ("decode", "context")}
    for p in ("decode", "context"):
        cols[f"best_{p}"] = [kernel[i] if i >= 0 else None for i in at[p]]
        cols[f"{p}_us"] = [med_l[i] if i >= 0 else None for i in at[p]]
    cols["winner"], cols["winner_path"] = [kernel[w] for w in w_l], [path[w] for w in w_l]
    cols["decode_speedup"] = [c / d if d and c else None for d, c in zip(cols["decode_us"], cols["context_us"])]
    cols["winner_us"] = [med_l[w] for w in w_l]
    cols["runner_up"] = [kernel[w + 1] if m else None for w, m in zip(w_l, many)]
    cols["runner_up_path"] = [path[w + 1] if m else None for w, m in zip(w_l, many)]
    cols["runner_up_us"] = [med_l[w + 1] if m else None for w, m in zip(w_l, many)]
    cols["margin_pct"] = [(med_l[w + 1] - med_l[w]) / med_l[w] * 100 if m and med_l[w] > 0 else None
                          for w, m in zip(w_l, many)]
    cols["tied_with"] = [", ".join(tied[j]) if j in tied else "" for j in range(n)]
    cols["winner_tie"] = [j in tied for j in range(n)]
    cols["path_verdict"] = [
        (TIE if is_tie(med_l[d], half_l[d], med_l[c], half_l[c]) else (DECODE if med_l[d] < med_l[c] else CONTEXT))
        if d >= 0 and c >= 0 else (DECODE_ONLY if d >= 0 else CONTEXT_ONLY)
        for d, c in zip(at["decode"], at["context"])]
    cols["excluded"] = [excluded.get(cid, "") for cid in cols["case_id"]]
    return pd.DataFrame(cols, columns=WINNER_COLUMNS)


def check_ok_times(rows: pd.DataFrame, where: str) -> None:
    """BadInput unless every ok kernel row holds a measured time: a positive, finite median_us (a hand-edited or
    damaged row is refused, not ranked: -5 us would win every case, 0 divides the speedups). The reference is not
    ranked (on a GPU it is checked, not timed)."""
    if rows.empty or not {"status", "median_us"} <= set(rows.columns):
        return
    timed = pd.to_numeric(rows["median_us"], errors="coerce").astype(float)
    kernel = rows["path"] != "reference" if "path" in rows.columns else True
    bad = (rows["status"] == "ok") & kernel & ~(timed.gt(0) & timed.lt(float("inf")))
    if bad.any():
        i = bad[bad].index[0]
        r = rows.loc[i]
        raise BadInput(f"{where}: row {r.get('kernel')} / {r.get('case_id')} is ok with median_us {timed[i]:g}: not a measured time "
                       f"(a positive, finite number of microseconds); {int(bad.sum())} such row(s)")
