"""Baselines for the CI gate: a committed copy of a run's rows and manifest under results/baselines/NAME/.

    results/baselines/NAME/manifest.json   the run's manifest plus a "baseline" entry (source run, when)
    results/baselines/NAME/rows.parquet    every row of the run (ok, wrong, skipped, failed)
    results/baselines/NAME/rows.csv        the same, diffable in a pull request

No journal: load_run reads the Parquet. Writing an existing name replaces it (that is how a baseline is
refreshed after an improvement).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from kbench.errors import BadInput
from kbench.store import CSV, JOURNAL, MANIFEST, PARQUET, Run, now_iso, safe_name, write_tables

DEFAULT_ROOT = Path("results") / "baselines"


def baseline_dir(name: str, root: str | Path = DEFAULT_ROOT) -> Path:
    """The folder for ``name``; refuses names that are paths or would leave ``root``."""
    if not name or not name.strip():
        raise BadInput("--name: a baseline needs a name")
    if "/" in name or "\\" in name or name.strip() in (".", "..") or os.path.isabs(name):
        raise BadInput(f"--name {name!r}: a baseline name is one folder name, not a path")
    clean = safe_name(name)
    root_p = Path(root).resolve()
    dest = (root_p / clean).resolve()
    if dest.parent != root_p:
        raise BadInput(f"--name {name!r}: would be written outside {root}")
    return Path(root) / clean


def write_baseline(run: Run, name: str, root: str | Path = DEFAULT_ROOT) -> Path:
    dest = baseline_dir(name, root)
    if dest.resolve() == Path(run.path).resolve():
        raise BadInput(f"{run.path} is already the baseline {name!r}")
    if dest.exists():
        if not dest.is_dir():
            raise BadInput(f"{dest}: exists and is not a folder")
        if any(dest.iterdir()) and not (dest / MANIFEST).is_file():
            raise BadInput(f"{dest}: exists and is not a kbench baseline; choose another --name")
    dest.mkdir(parents=True, exist_ok=True)
    write_tables(dest, run.rows, run.kind)
    stale = dest / JOURNAL  # a journal would shadow the new Parquet for readers
    if stale.exists():
        stale.unlink()
    manifest = dict(run.manifest)
    manifest.pop("baseline", None)
    manifest["baseline"] = {
        "name": dest.name,
        "source_run": str(run.path),
        "source_run_name": run.path.name,
        "source_baseline": run.manifest.get("baseline", {}).get("name") if isinstance(
            run.manifest.get("baseline"), dict) else None,
        "created_at": now_iso(),
        "num_rows": int(len(run.rows)),
        "files": [MANIFEST, PARQUET, CSV],
    }
    tmp = dest / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, dest / MANIFEST)
    return dest
