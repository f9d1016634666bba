"""Baseline and candidate must come from the same GPU model and SM version, or the numbers say nothing."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kbench.store import Run


@dataclass
class Hardware:
    name: str | None
    sm: int | None

    def describe(self) -> str:
        parts = [self.name or "unknown GPU"]
        if self.sm:
            parts.append(f"SM{self.sm}")
        return ", ".join(parts)


def _unique(rows: pd.DataFrame, col: str, skip) -> list:
    if col not in rows:
        return []
    return sorted({v for v in rows[col].dropna().tolist() if v not in skip}, key=str)


def hardware_of(run: Run) -> Hardware:
    """From the manifest's device; rows' device/sm columns when the manifest lacks it."""
    dev = run.manifest.get("device")
    name = sm = None
    if isinstance(dev, dict):
        name, sm = dev.get("name"), dev.get("sm")
    elif isinstance(dev, str):
        name = dev
    if not name:
        names = _unique(run.rows, "device", ("",))
        name = names[0] if len(names) == 1 else None
    if not sm:
        sms = _unique(run.rows, "sm", (0, "", "0"))
        sm = sms[0] if len(sms) == 1 else None
    try:
        sm = int(sm) if sm not in (None, "") else None
    except (TypeError, ValueError):
        sm = None
    return Hardware(str(name) if name else None, sm or None)


def mismatches(base: Hardware, cand: Hardware) -> tuple[list[str], list[str]]:
    """(reasons to refuse, warnings). Unknown on one side is a warning, not a refusal."""
    reasons, warnings = [], []
    if base.name and cand.name:
        if base.name != cand.name:
            reasons.append(f"GPU model differs (baseline {base.name!r}, candidate {cand.name!r})")
    elif base.name or cand.name:
        warnings.append("GPU model unknown on one side; cannot check that the runs are comparable")
    if base.sm and cand.sm:
        if base.sm != cand.sm:
            reasons.append(f"SM version differs (baseline SM{base.sm}, candidate SM{cand.sm})")
    return reasons, warnings
