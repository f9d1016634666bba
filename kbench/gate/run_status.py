"""A row (or server case) whose status differs between the runs pooled into a baseline: kept as not ok, its reason
saying so, and one warning naming such rows. Kernel baselines (kbench.gate.baselines) and server baselines
(kbench.gate.server_baseline) say it the same way."""
from __future__ import annotations


def mark_mixed(row: dict, statuses: list[str]) -> str:
    """Append the per-status counts to the row's reason; return them (`2 ok, 1 failed`) for the warning."""
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    row["reason"] = f"{row.get('reason') or ''} (status differs between runs: {counts})".strip()
    return counts


def mixed_warning(mixed: list[str], what: str) -> str:
    """The warning for the `mixed` rows (`NAME (counts)` each; `what`: "row(s)", "case(s)")."""
    return (f"{len(mixed)} {what} not ok in every run, kept as not ok (the gate will not compare "
            f"them): {'; '.join(mixed[:5])}{' ...' if len(mixed) > 5 else ''}")
