"""The CI performance gate: compare a candidate run with a committed baseline.

    from kbench.gate import run_gate
    res = run_gate("results/baselines/h200", "results/quick-20250101-120000", threshold=0.05)
    res.passed, res.exit_code, res.failing_rows
    from kbench.gate import write_multi_baseline   # kbench baseline RUN1 RUN2 --name NAME
    folder, rows, warnings = write_multi_baseline(["results/run1", "results/run2"], "h200-main")

The decision rule is in kbench.gate.compare's docstring; the noise test in kbench.gate.stats.
"""
from kbench.gate.baselines import write_baseline, write_multi_baseline
from kbench.gate.compare import (DEFAULT_ALPHA, DEFAULT_THRESHOLD, GateResult, RowResult, WinnerChange,
                                 parse_threshold, run_gate)
from kbench.gate.json_out import to_json, write_json
from kbench.gate.junit import to_junit, write_junit
from kbench.gate.markdown import to_markdown, write_markdown

__all__ = ["run_gate", "parse_threshold", "GateResult", "RowResult", "WinnerChange", "DEFAULT_ALPHA",
           "DEFAULT_THRESHOLD", "to_json", "write_json", "to_junit", "write_junit", "to_markdown",
           "write_markdown", "write_baseline", "write_multi_baseline"]
