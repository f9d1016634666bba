"""Load the two runs, refusing a result schema version other than this kbench's unless forced."""
from __future__ import annotations

import json
from pathlib import Path

from kbench import RESULT_SCHEMA_VERSION
from kbench.errors import BadInput
from kbench.server import rows as _server_rows  # noqa: F401  registers the server-bench row kind
from kbench.runs.store import MANIFEST, ROW_KINDS, Run, load_rows, load_run


def _peek_schema(path: Path):
    try:
        m = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None  # load_run says what is wrong with it
    return (m, m.get("schema_version")) if isinstance(m, dict) else (None, None)


def load_for_gate(path: str | Path, role: str, force: bool, warnings: list[str]) -> Run:
    p = Path(path)
    if not p.is_dir():
        raise BadInput(f"{role} {path}: no such run folder")
    manifest, version = _peek_schema(p)
    if manifest is not None and version != RESULT_SCHEMA_VERSION:
        if not force:
            raise BadInput(f"{role} {path} has result schema version {version!r}, this kbench writes "
                           f"{RESULT_SCHEMA_VERSION}: record it again with this kbench, or pass --force")
        kind = manifest.get("kind", "sweep")
        if kind not in ROW_KINDS:
            raise BadInput(f"{role} {path}: unknown run kind {kind!r}")
        warnings.append(f"{role} has result schema version {version!r} (this kbench: "
                        f"{RESULT_SCHEMA_VERSION}); compared anyway (--force)")
        rows = load_rows(p, kind)
        for col in ("case_id", "status") if kind == "sweep" else ("case_id",):
            if col not in rows:
                raise BadInput(f"{role} {path}: rows lack column {col!r}")
        return Run(p, manifest, rows)
    try:
        run = load_run(p)
    except BadInput as e:
        raise BadInput(f"{role}: {e}") from None
    if run.manifest.get("status") not in (None, "complete"):
        warnings.append(f"{role} run status is {run.manifest.get('status')!r}, not complete: "
                        "rows it did not reach count as missing")
    return run
