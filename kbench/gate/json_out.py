"""The gate's result as JSON, for scripts and dashboards: GateResult.to_dict() as JSON, indented by 2, each row
on a line of its own (a line per row greps and diffs as one; a 300,000-row gate's rows indented throughout, by
json's Python encoder, took 20 s and 2.6 GB), written as it is made."""
from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

from kbench.runs import atomic
from kbench.values import json_safe
from kbench.gate.compare import GateResult


def chunks(res: GateResult) -> Iterator[str]:
    """The JSON text, a piece at a time (a row's line is one piece)."""
    mark = f"@rows-{secrets.token_hex(8)}@"  # where the rows go: json.dumps writes it as it is
    head = res.to_dict(rows=False)
    head["rows"] = [mark] if res.rows else []
    text = json.dumps(json_safe(head), indent=2, default=str) + "\n"
    if not res.rows:
        yield text
        return
    before, after = text.split(f'"{mark}"')
    yield before
    for i, r in enumerate(res.rows):
        yield (",\n    " if i else "") + json.dumps(json_safe(r.to_dict()), default=str)
    yield after


def to_json(res: GateResult) -> str:
    return "".join(chunks(res))


def write_json(res: GateResult, path: str | Path) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for piece in chunks(res):
                f.write(piece)

    atomic.write_with(path, write, named=True)
