"""The gate's markdown summary: the file for the PR comment and $GITHUB_STEP_SUMMARY."""
from __future__ import annotations

import os

from pathlib import Path

from kbench import shell, text
from kbench.runs import atomic
from kbench.gate.compare import GateResult, RowResult


def fmt_value(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}"


def fmt_change(r: RowResult) -> str:
    return "-" if r.change is None else f"{r.change:+.1%}"


# rows listed per table; the rest are counted (GitHub refuses a step summary over 1 MiB, and a 100,000-row gate
# listed every row in 3.2 MB): every row is in the JSON and JUnit reports
ROWS_MAX = 500


def _row_table(rows: list[RowResult]) -> list[str]:
    out = ["| kernel | case | metric | baseline | candidate | change | outcome | why |",
           "|---|---|---|---:|---:|---:|---|---|"]
    for r in rows[:ROWS_MAX]:
        out.append("| " + " | ".join(_cell(x) for x in (
            r.kernel or "-", r.case_id, r.metric or "-", fmt_value(r.base_value), fmt_value(r.cand_value),
            fmt_change(r), r.outcome, r.note)) + " |")
    if len(rows) > ROWS_MAX:
        out += ["", f"... and {len(rows) - ROWS_MAX:,} more rows (every row is in the gate's --json and --junit "
                    "reports)."]
    return out


def to_markdown(res: GateResult) -> str:
    icon = {"PASS": "✅", "FAIL": "❌", "INCONCLUSIVE": "⚠️"}[res.verdict]
    lines = [f"## {icon} kbench gate: {_cell(res.summary_line())}", "", _cell(res.details()), "",
             f"Baseline {text.code(res.baseline)} ({_cell(res.baseline_hw)}) vs candidate {text.code(res.candidate)} "
             f"({_cell(res.candidate_hw)}); {res.noise_used}.", ""]
    for w in res.warnings:
        lines.append(f"> ⚠️ {_cell(w)}")
    if res.warnings:
        lines.append("")
    failing = res.failing_rows
    if failing:
        lines += ["### Failures", "", *_row_table(failing), ""]
    if res.winner_changes:
        lines += ["### Decode-vs-context winner changes"
                  + ("" if any(w.fails for w in res.winner_changes) else " (allowed by --ignore-winner-change)"),
                  "", "| case | baseline winner | candidate winner | decode speedup (base -> cand) |",
                  "|---|---|---|---|"]
        for w in res.winner_changes:
            sp = f"{fmt_value(w.base_speedup)} -> {fmt_value(w.cand_speedup)}"
            lines.append(f"| {_cell(w.case_id)} | {_cell(w.base_path)} ({_cell(w.base_winner)}) | "
                         f"{_cell(w.cand_path)} ({_cell(w.cand_winner)}) | {sp} |")
        lines.append("")
    if res.winner_ties:
        lines += [f"{len(res.winner_ties)} decode-vs-context winner flip(s) within the run-to-run spread, counted "
                  f"as ties: {', '.join(map(text.code, res.winner_ties))}.", ""]
    improved = res.with_outcome("improvement")
    if improved:
        lines += ["### Improvements", "",
                  f"Refresh the baseline to keep them: {text.code(shell.kbench('baseline', res.candidate, '--name', 'NAME'))}.", "",
                  *_row_table(improved), ""]
    undecided = res.inconclusive_rows
    if undecided:
        lines += ["### Inconclusive: the noise hides a change of the band's size", "", *_row_table(undecided), ""]
    allowed_missing = [r for r in res.with_outcome("missing", "skipped") if not r.fails]
    info = res.with_outcome("within-noise", "new", "not-compared") + allowed_missing
    if info:
        lines += ["<details><summary>Other rows worth a look "
                  f"({len(info)}: within noise, new, not compared, allowed missing)</summary>", "",
                  *_row_table(info), "", "</details>", ""]
    return "\n".join(lines) + "\n"


def write_markdown(res: GateResult, path: str | Path | None) -> str:
    """Writes the summary to ``path`` (if given) and appends it to $GITHUB_STEP_SUMMARY (if set)."""
    text = to_markdown(res)
    if path:
        atomic.write_text(path, text, named=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    return text


_cell = text.markdown  # every value an input brings: HTML and pipes escaped, control characters shown

