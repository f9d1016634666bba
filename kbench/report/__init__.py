"""`kbench report` / `kbench select` engine: from sweep runs to the decision (no click here).

    from kbench.report import build_report, load_policy, lookup
    result = build_report(["results/quick-20250101-120000"], out_dir=None, holdout=0.2)
    answer = lookup(load_policy("policy.json"), batch_size=8, q_len=4, kv_len=3000)
"""
from kbench.report.build import ReportResult, build_report
from kbench.report.policy import POLICY_SCHEMA, build_policy, load_policy, lookup, save_policy

__all__ = ["ReportResult", "build_report", "POLICY_SCHEMA", "build_policy", "load_policy", "lookup",
           "save_policy"]
