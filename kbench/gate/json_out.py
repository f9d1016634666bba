"""The gate's result as JSON, for scripts and dashboards."""
from __future__ import annotations

import json
import math
from pathlib import Path

from kbench.gate.compare import GateResult


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def to_json(res: GateResult) -> str:
    return json.dumps(_clean(res.to_dict()), indent=2, default=str) + "\n"


def write_json(res: GateResult, path: str | Path) -> None:
    Path(path).write_text(to_json(res), encoding="utf-8")
