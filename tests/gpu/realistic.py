"""Realistic speculative-decoding batches on the GPU (issue #13): the table for the closing note, from the
runs `bash tests/gpu/h200.sh realistic` sweeps (every kernel there was checked against the reference by the
sweep; a wrong or failed kernel is listed with its reason).

    python3 tests/gpu/realistic.py OUT_TXT RUN [RUN ...]

Prints (and writes OUT_TXT): per case each kernel's median time, relative error and the winner with its
margin; then the comparisons of kbench.report.realistic (padded vs ragged decode vs context per acceptance
rate; per-request KV vs uniform; window and sinks vs full attention; max_seq_len context vs tight).
Exit 1 when any kernel was wrong or failed.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from kbench.report.realistic import acceptance_table, axis_effect_table, with_defaults
from kbench.runs.store import load_run


def fmt_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def per_case(rows: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = ["case", "kernel", "backend", "status", "median us", "rel err", "note"]
    out = []
    for case_id, g in rows.groupby("case_id", sort=True):
        timed = g[g["status"] == "ok"].sort_values("median_us")
        for r in g.itertuples():
            if r.status == "skipped" and str(r.reason).startswith("q_dist fixed"):
                continue  # the ragged kernel on a uniform batch: trtllm-decode's case
            note = "" if r.status == "ok" else str(r.reason)[:80]
            if len(timed) and r.Index == timed.index[0]:
                note = "WINNER" + (f" by {timed.median_us.iloc[1] / r.median_us:.2f}x over {timed.kernel.iloc[1]}"
                                   if len(timed) > 1 else "")
            out.append([case_id, r.kernel, r.backend, r.status,
                        f"{r.median_us:.1f}" if pd.notna(r.median_us) else "-",
                        f"{r.rel_err:.4f}" if pd.notna(r.rel_err) else "-", note])
    return headers, out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    out_txt, runs = Path(argv[0]), argv[1:]
    rows = pd.concat([load_run(r).rows for r in runs], ignore_index=True)
    rows = with_defaults(rows[rows["path"] != "reference"])
    ok = rows[(rows["status"] == "ok") & rows["median_us"].notna()]
    parts = [fmt_table(*per_case(rows))]
    for title, table in (("padded vs ragged decode vs context, per acceptance rate", acceptance_table(ok)),
                         ("ragged q vs the uniform batch", axis_effect_table(ok, "q_dist")),
                         ("per-request KV (lognormal) vs uniform, same total KV", axis_effect_table(ok, "kv_dist")),
                         ("sliding window vs full attention", axis_effect_table(ok, "window_left")),
                         ("sinks vs none", axis_effect_table(ok, "sinks")),
                         ("max_seq_len context:N vs tight", axis_effect_table(ok, "max_seq_len")),
                         ("skip-softmax vs exact", axis_effect_table(ok, "skip_softmax"))):
        if table[1]:
            parts.append(f"== {title}\n" + fmt_table(*table))
    bad = rows[rows["status"].isin(["wrong", "failed"])]
    checked = rows[rows["rel_err"].notna()]
    parts.append(f"checked against the reference: {len(checked)} kernel/case pairs, max rel err "
                 f"{checked['rel_err'].max():.4f}; ok {int((rows['status'] == 'ok').sum())}, wrong or failed "
                 f"{len(bad)}, skipped {int((rows['status'] == 'skipped').sum())}")
    text = "\n\n".join(parts)
    out_txt.write_text(text + "\n")
    print(text)
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
