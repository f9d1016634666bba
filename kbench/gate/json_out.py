"""The gate's result as JSON, for scripts and dashboards."""
from __future__ import annotations

import json
from pathlib import Path

from kbench.runs import atomic
from kbench.values import json_safe
from kbench.gate.compare import GateResult


def to_json(res: GateResult) -> str:
    return json.dumps(json_safe(res.to_dict()), indent=2, default=str) + "\n"


def write_json(res: GateResult, path: str | Path) -> None:
    atomic.write_text(path, to_json(res), named=True)
