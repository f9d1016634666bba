"""The report's MLA section (issue #27): for latent attention (DeepSeek-V3/R1, Kimi K2 with MTP), which kernel
to use per shape, and what the decode-style kernel (FlashMLA; trtllm-gen MLA on Blackwell) gains or loses
against the prefill-style FlashInfer MLA wrapper (fa3/fa2) as q_len grows.

From the case winners (kbench.runs.winners.case_winners) and the ok rows of MLA cases only; a run without MLA
cases gets no section. The roofline of an MLA case is its latent cache read: 576 values per token, one head
(Case.kv_bytes), so ``roofline_frac`` is that read over the run's read ceiling.
"""
from __future__ import annotations

import math

import pandas as pd

from kbench.cases import axes

GROUP = list(axes.GROUP_COLUMNS)  # an MLA group: geometry, dtypes, page and the realistic axes


def _mla(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["attention"] == "mla"] if "attention" in df.columns and len(df) else df.iloc[0:0]


def _geomean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None and not pd.isna(x) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _frac(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.2f}"


def _x(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.2f}x"


def _most(series: pd.Series) -> str:
    s = series.dropna()
    return str(s.value_counts().index[0]) if len(s) else "-"


def kernel_per_shape(cases: pd.DataFrame, ok: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One line per (group, batch, kv_len), a column per q_len: the winner, its margin over the runner-up (or
    the tie) and the winner's fraction of the read ceiling."""
    cases = _mla(cases)
    if cases.empty:
        return [], []
    qs = sorted({int(q) for q in cases["q_len"]})
    frac = {(k, c): f for k, c, f in zip(ok["kernel"], ok["case_id"], ok["roofline_frac"])}
    headers = ["group", "batch", "kv_len", *(f"q={q}" for q in qs)]
    rows = []
    for key, g in cases.groupby([*GROUP, "batch_size", "kv_len"], sort=True):
        meta = dict(zip([*GROUP, "batch_size", "kv_len"], key))
        by_q = {int(r.q_len): r for r in g.itertuples()}
        cells = []
        for q in qs:
            r = by_q.get(q)
            if r is None:
                cells.append("")
                continue
            margin = "tie" if r.winner_tie else ("" if pd.isna(r.margin_pct) else f"+{r.margin_pct:.0f}%")
            f = frac.get((r.winner, r.case_id))
            cells.append(f"{r.winner} {margin} ({_frac(f)} of ceiling)".replace("  ", " "))
        rows.append([axes.group_label(meta), str(int(meta["batch_size"])), str(int(meta["kv_len"])), *cells])
    return headers, rows


def decode_vs_context(cases: pd.DataFrame, ok: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Per group and q_len, over the (batch, kv_len) cases where both paths ran: the decode-style kernel's speedup
    over the prefill-style one (best context time / best decode time: > 1, decode is faster), its range, how
    often each path wins, and each path's median fraction of the read ceiling."""
    cases = _mla(cases)
    both = cases[cases["decode_us"].notna() & cases["context_us"].notna()] if len(cases) else cases
    if both.empty:
        return [], []
    frac = {(k, c): f for k, c, f in zip(ok["kernel"], ok["case_id"], ok["roofline_frac"])}
    headers = ["group", "q_len", "cases", "decode kernel", "context kernel", "decode speedup (geomean)", "min", "max",
               "decode wins", "context wins", "ties", "decode of ceiling", "context of ceiling"]
    rows = []
    for key, g in both.groupby([*GROUP, "q_len"], sort=True):
        meta = dict(zip([*GROUP, "q_len"], key))
        sp = g["decode_speedup"].astype(float)
        v = g["path_verdict"].value_counts().to_dict()
        dfr = [frac.get((k, c)) for k, c in zip(g["best_decode"], g["case_id"])]
        cfr = [frac.get((k, c)) for k, c in zip(g["best_context"], g["case_id"])]
        med = lambda xs: pd.Series([x for x in xs if x is not None], dtype=float).median()  # noqa: E731
        rows.append([axes.group_label(meta), str(int(meta["q_len"])), str(len(g)), _most(g["best_decode"]),
                     _most(g["best_context"]), _x(_geomean(sp)), _x(sp.min()), _x(sp.max()), str(v.get("decode", 0)),
                     str(v.get("context", 0)), str(v.get("tie", 0)), _frac(med(dfr)), _frac(med(cfr))])
    return headers, rows


def trend(cases: pd.DataFrame) -> list[str]:
    """One sentence per group: the decode-style kernel's geomean speedup at each q_len, and where it turns (or
    that only one path ran)."""
    cases = _mla(cases)
    out = []
    for key, g in cases.groupby(GROUP, sort=True):
        meta = dict(zip(GROUP, key))
        g = g[g["decode_us"].notna() & g["context_us"].notna()]
        if g.empty:  # e.g. 16 heads on SM90: FlashMLA takes 64/128 heads, trtllm-gen MLA needs SM100
            ran = sorted(set(cases.loc[_same(cases, meta), "winner"].dropna()))
            out.append(f"{axes.group_label(meta)}: one path only ({', '.join(ran) or '-'}): nothing to compare "
                       "along q_len.")
            continue
        by_q = {int(q): _geomean(gq["decode_speedup"]) for q, gq in g.groupby("q_len", sort=True)}
        steps = ", ".join(f"q={q} {_x(s)}" for q, s in by_q.items())
        dec, ctx = _most(g["best_decode"]), _most(g["best_context"])
        ahead = [q for q, s in by_q.items() if s is not None and s > 1]
        behind = [q for q, s in by_q.items() if s is not None and s < 1]
        if ahead and behind:
            verdict = (f"{dec} is ahead at q_len {', '.join(map(str, ahead))} and behind at "
                       f"{', '.join(map(str, behind))}")
        elif ahead:
            verdict = f"{dec} is ahead at every measured q_len"
        else:
            verdict = f"{dec} is behind at every measured q_len"
        out.append(f"{axes.group_label(meta)}: decode-style ({dec}) over prefill-style ({ctx}), geomean over "
                   f"batch and kv_len: {steps}; {verdict}.")
    return out


def _same(cases: pd.DataFrame, meta: dict) -> pd.Series:
    """Rows of `cases` in the group `meta`."""
    mask = pd.Series(True, index=cases.index)
    for k, v in meta.items():
        mask &= cases[k] == v
    return mask


def has_mla(cases: pd.DataFrame) -> bool:
    """Some of these cases are MLA cases (mla_blocks has something to say only then)."""
    return not _mla(cases).empty


def mla_blocks(cases: pd.DataFrame, ok: pd.DataFrame) -> list[tuple]:
    """The report's MLA section as document blocks (kbench.report.document); none without MLA cases."""
    if not has_mla(cases):
        return []
    per_shape = kernel_per_shape(cases, ok)
    versus = decode_vs_context(cases, ok)
    doc: list[tuple] = [
        ("h", 2, "MLA (latent attention)"),
        ("p", "Absorbed MLA: one latent KV head of kv_lora_rank + qk_rope_head_dim values per token (576 for "
              "DeepSeek-V3 and Kimi K2), read once for every q head; the roofline counts that read (576 values "
              "per token, one head) against the run's read ceiling. Decode-style kernels (FlashMLA on SM90, "
              "trtllm-gen MLA on SM100) fold the query tokens into the heads; the prefill-style FlashInfer MLA "
              "wrapper (fa3, fa2) tiles query tokens x heads causally."),
        ("h", 3, "Which kernel per shape"),
        ("p", "winner, its margin over the runner-up (tie: within each other's spread), and its fraction of the "
              "read ceiling"),
        ("table", *per_shape),
        ("h", 3, "Decode-style against prefill-style as q_len grows"),
    ]
    if versus[1]:
        doc += [("list", trend(cases)), ("table", *versus)]
    else:
        doc.append(("p", "no MLA case has both a decode-style and a prefill-style ok row"))
    return doc
