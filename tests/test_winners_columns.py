"""case_winners (whole-column operations) gives, line by line, what the per-case rule of its docstring gives:
checked against that rule written out case by case, on seeded random rows with ties, equal medians, missing
spreads, one-path cases, other paths, excluded kernels and cases in any order."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kbench.cases import axes
from kbench.runs.rows import CASE_COLUMNS
from kbench.runs.winners import (CONTEXT, CONTEXT_ONLY, DECODE, DECODE_ONLY, TIE, WINNER_COLUMNS, _excluded,
                                 case_winners, half_width_us, half_widths_us, is_tie, measured)


def per_case(rows: pd.DataFrame) -> pd.DataFrame:
    """The rule, one case at a time (how case_winners was written before it worked on whole columns)."""
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


KERNELS = [("trtllm-decode", "decode"), ("decode-wrapper", "decode"), ("fa2-prefill", "context"),
           ("trtllm-fmha-v2", "context"), ("odd", "other"), ("reference", "reference")]


def random_rows(seed: int, cases: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    recs = []
    for i in rng.permutation(cases):
        for kernel, path in KERNELS:
            if rng.random() < 0.25:
                continue  # not measured in this case
            st = rng.choice(["ok"] * 6 + ["wrong", "failed", "skipped"])
            med = float(rng.choice([10.0, 10.2, 10.5, 11.0, 20.0])) if rng.random() < 0.9 else None
            spread = rng.integers(0, 4)
            recs.append({
                **axes.defaults(),  # every case column (an axis added later is at its default here)
                "kernel": kernel, "path": path, "case_id": f"c{i}", "status": str(st),
                "batch_size": int(i % 4 + 1), "q_len": int(i % 7 + 1), "kv_len": 1024, "num_qo_heads": 32,
                "num_kv_heads": 8, "head_dim": 128, "page_size": 64, "kv_layout": "HND", "dtype": "bf16",
                "kv_dtype": "bf16", "kv_dist": "fixed", "q_dist": "fixed", "window_left": -1, "sinks": "off",
                "max_seq_len": "tight", "q_dtype": "dtype", "skip_softmax": "off", "power": "unthrottled",
                "median_us": med,
                "rel_spread": float(rng.choice([0.0, 0.01, 0.03])) if spread == 0 else None,
                "iqr_us": float(rng.choice([0.2, 1.0])) if spread == 1 else None,
                "p25_us": 9.5 if spread == 2 else None, "p75_us": 10.4 if spread == 2 else None,
            })
    return pd.DataFrame(recs)


@pytest.mark.parametrize("seed", range(8))
def test_same_lines_as_the_per_case_rule(seed):
    rows = random_rows(seed)
    got, want = case_winners(rows), per_case(rows)
    assert len(got) > 20 and (got["path_verdict"] == TIE).any() and got["winner_tie"].any()
    pd.testing.assert_frame_equal(got, want)


def test_half_widths_match_one_row_at_a_time():
    rows = random_rows(3)
    want = [half_width_us(r) for _, r in rows.iterrows()]
    assert half_widths_us(rows).tolist() == pytest.approx(want, nan_ok=True)


def test_no_ok_row_gives_no_case():
    rows = random_rows(1)
    rows["status"] = "skipped"
    assert case_winners(rows).empty and list(case_winners(rows).columns) == WINNER_COLUMNS
