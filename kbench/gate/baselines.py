"""Baselines for the CI gate: a committed copy of one or more runs' rows and manifest under results/baselines/NAME/.

    results/baselines/NAME/manifest.json   the run's manifest plus a "baseline" entry (source runs, when)
    results/baselines/NAME/rows.parquet    every row (ok, wrong, skipped, failed)
    results/baselines/NAME/rows.csv        the same, diffable in a pull request

No journal: load_run reads the Parquet. An existing baseline is replaced only with force=True (`--force`:
that is how a baseline is refreshed after an improvement), and then as a whole: the new folder is written
beside it and swapped into place, so a baseline stopped half way is the old one, whole; the manifest, written
last, records each table's size and sha256 (`files`), and load_run refuses a folder whose tables disagree.
A source run must hold at least one ok row, no row twice, and be complete (unless allow_partial): see
check_source.

One run: the baseline is a copy of its rows, nothing added.

Several runs of the same scenario on the same GPU (sweep runs; same kind, GPU model and SM, scenario
name, model, heads, timer settings and --slow-kernel; refused otherwise): one row per (kernel, case,
dtype, layout) with

    median_us       the median of the per-run medians
    run_medians_us  the per-run medians, in the order the runs were given
    runs            how many runs measured the row ok (their medians make up median_us)
    run_spread      (max - min) / median of the per-run medians: how far apart runs of the same code
                    landed (None with fewer than 2 runs). The gate widens its band by it.
    samples_us      all runs' samples pooled (the Mann-Whitney test compares the candidate with them);
                    p25/p75/iqr/min_us and num_samples are recomputed from the pooled samples
    rel_spread      the largest within-run rel_spread of the runs

A row must be ok in every run that measured it to be ok in the baseline; otherwise it keeps the
non-ok status (not compared by the gate) and a warning says so. Rows measured by only some runs
(runs whose grids differ) are kept with the smaller ``runs``.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from kbench import files, redact, shell
from kbench.runs import atomic
from kbench.gate.run_status import mark_mixed, mixed_warning

from kbench.cases import axes
from kbench.values import finite, status
from kbench.errors import BadInput
from kbench.runs.manifest import ABSENT, POOL, Manifest, comparable, num_runs
from kbench.runs.outputs import given_path
from kbench.runs.store import (CSV, JOURNAL, MANIFEST, PARQUET, Run, as_run_list, load_run, now_iso, safe_name,
                               write_tables)
from kbench.runs.winners import check_ok_times

DEFAULT_ROOT = Path("results") / "baselines"
KEY = axes.gate_key()
RUN_SPREAD_RULE = "(max - min) / median of the per-run medians of the row"
SERVER_POOL_RULES = {"metrics": "each metric the median of the per-run medians (<metric>_run_medians); "
                                "<metric>_samples pooled",
                     "run_spread": "<metric>_run_spread = (max - min) / median of the per-run medians of the case; "
                                   "run_spread the largest of them"}


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


# --- several runs -> one baseline -----------------------------------------------------------------

def check_same_scenario(runs: list[Run]) -> None:
    """BadInput (one line) unless every run may be pooled with the first (kbench.runs.manifest.comparable)."""
    seen: dict[Path, Path] = {}
    for r in runs:
        p = Path(r.path).resolve()
        if p in seen:
            raise BadInput(f"{r.path} is given twice; a multi-run baseline needs distinct runs")
        seen[p] = r.path
        if num_runs(r.manifest) > 1:
            raise BadInput(f"{r.path} is already a multi-run baseline; give the runs it was built from")
    kinds = {r.kind for r in runs}
    if len(kinds) > 1:
        raise BadInput(f"a baseline from several runs needs runs of one kind, not {' and '.join(sorted(kinds))} runs")
    if runs[0].kind == "server-bench":
        from kbench.gate.server_baseline import check_same_cases

        check_same_cases(runs)
        return
    if runs[0].kind != "sweep":
        raise BadInput(f"a baseline from several runs needs sweep or server-bench runs, not {runs[0].kind} runs")
    for r in runs[1:]:
        verdict = comparable(runs[0], r, POOL)
        if not verdict.ok:
            raise BadInput(f"refusing to pool {runs[0].path} and {r.path}: not the same scenario on the same "
                           f"GPU ({verdict.refusals[0]})")


def _key(rec: dict) -> tuple:
    return tuple("" if rec.get(c) is None else str(rec.get(c)) for c in KEY)


def _samples(rec: dict) -> list[float]:
    raw = rec.get("samples_us")
    if raw is None or isinstance(raw, (str, float)):
        return []
    return [f for f in (finite(x) for x in raw) if f is not None]


def _pool(recs: list[dict]) -> dict:
    """One baseline row from the same row of several runs, all ok and timed."""
    out = dict(recs[0])
    medians = [finite(r.get("median_us")) for r in recs]
    med = float(np.median(medians))
    out["median_us"] = med
    out["run_medians_us"] = medians
    out["runs"] = len(recs)
    out["run_spread"] = (max(medians) - min(medians)) / med if len(recs) >= 2 and med > 0 else None
    pooled = [x for r in recs for x in _samples(r)]
    out["samples_us"] = pooled
    out["num_samples"] = len(pooled) if pooled else sum(int(finite(r.get("num_samples")) or 0) for r in recs)
    if pooled:
        a = np.asarray(pooled)
        p25, p75 = float(np.percentile(a, 25)), float(np.percentile(a, 75))
        out.update(p25_us=p25, p75_us=p75, iqr_us=p75 - p25, min_us=float(a.min()))
    spreads = [s for s in (finite(r.get("rel_spread")) for r in recs) if s is not None]
    out["rel_spread"] = max(spreads) if spreads else None
    first = finite(recs[0].get("median_us"))
    for col in ("kv_bandwidth_gbs", "roofline_frac"):  # both are proportional to 1 / median
        v = finite(recs[0].get(col))
        out[col] = v * first / med if v is not None and first and med > 0 else recs[0].get(col)
    return out


def pool_runs(runs: list[Run]) -> tuple[pd.DataFrame, list[str]]:
    """The rows of a multi-run baseline (see the module docstring) and warnings about rows that differ."""
    check_same_scenario(runs)
    if runs[0].kind == "server-bench":
        from kbench.gate.server_baseline import pool_server_runs

        return pool_server_runs(runs)
    by_key: dict[tuple, list[tuple[int, dict]]] = {}
    for i, run in enumerate(runs):
        per_run: dict[tuple, dict] = {}
        for rec in run.rows.to_dict("records"):
            per_run[_key(rec)] = rec  # a resumed run may repeat a row: the last one measured counts
        for k, rec in per_run.items():
            by_key.setdefault(k, []).append((i, rec))
    out, mixed, partial = [], [], 0
    for k, items in by_key.items():
        recs = [r for _, r in items]
        partial += len(items) < len(runs)
        statuses = [status(r) for r in recs]
        timed = all(finite(r.get("median_us")) is not None for r in recs)
        if all(s == "ok" for s in statuses) and timed and recs[0].get("path") != "reference":
            out.append(_pool(recs))
            continue
        bad = next((r for r in recs if status(r) != "ok"), recs[0])
        row = dict(bad)
        row["runs"] = sum(s == "ok" for s in statuses)
        row["run_spread"] = None
        row["run_medians_us"] = [m for m in (finite(r.get("median_us")) for r in recs) if m is not None]
        if len(set(statuses)) > 1:
            mixed.append(f"{k[0]} / {k[1]} ({mark_mixed(row, statuses)})")
        out.append(row)
    warnings = []
    if mixed:
        warnings.append(mixed_warning(mixed, "row(s)"))
    if partial:
        warnings.append(f"{partial} row(s) are not in every run; their runs column says how many measured them")
    return pd.DataFrame.from_records(out), warnings


# --- writing --------------------------------------------------------------------------------------

COMMITTED = "results/baselines/h200-draft-extend-kv4096"  # a committed baseline that works on any machine


def check_source(run: Run, allow_partial: bool = False) -> None:
    """BadInput unless the run can be a baseline: some ok row (rows a gate can compare), no row twice,
    and status complete (a run still running or interrupted only with allow_partial)."""
    rows = run.rows
    run_status = run.manifest.get("status")
    if run_status not in (None, "complete") and not allow_partial:
        finish = (shell.kbench("sweep", "--resume", run.path) if run.kind == "sweep"
                  else shell.kbench("server-bench", "--resume", run.path, "--url", "URL"))
        raise BadInput(f"{run.path} is {run_status!r}, not complete: finish it ({finish}) or pass --allow-partial")
    if rows.empty or "status" not in rows or not (rows["status"] == "ok").any():
        raise BadInput(f"{run.path}: no ok row ({len(rows)} row(s)); a baseline needs measured rows")
    if run.kind == "sweep" and "path" in rows:  # the gate compares kernel rows; the reference is the oracle
        kernel_ok = (rows["status"] == "ok") & (rows["path"] != "reference")
        if not kernel_ok.any():
            sm = run.manifest.get("device", {}).get("sm") if isinstance(run.manifest.get("device"), dict) else None
            cpu = " (a CPU run: every FlashInfer kernel is skipped there)" if not sm else ""
            raise BadInput(f"{run.path}: no kernel row to gate: its {int((rows['status'] == 'ok').sum())} ok row(s) "
                           f"are the float32 reference{cpu}, which the gate does not compare; make a baseline from a "
                           f"GPU sweep, or without a GPU try the gate on a committed one: kbench gate --baseline "
                           f"{COMMITTED} --candidate {COMMITTED}")
    if run.kind == "sweep":  # a baseline to commit holds measured times only (as report, recommend and export read)
        check_ok_times(rows, str(run.path))
    key = [c for c in (KEY if run.kind == "sweep" else ("case_id",)) if c in rows]
    dup = rows.duplicated(key, keep=False)
    if dup.any():
        first = rows[dup].iloc[0]
        raise BadInput(f"{run.path}: {int(dup.sum())} rows share a key (e.g. {' '.join(str(first[c]) for c in key)}); "
                       f"a baseline needs each row once")


def _prepare_dest(name: str, root, sources: list[Path], force: bool = False) -> Path:
    given_path(root, "--out", "results/baselines")
    dest = baseline_dir(name, root)
    for src in sources:
        if dest.resolve() == Path(src).resolve():
            raise BadInput(f"{src} is already the baseline {name!r}")
    if dest.exists():
        if not dest.is_dir():
            raise BadInput(f"{dest}: exists and is not a folder")
        if any(dest.iterdir()) and not (dest / MANIFEST).is_file():
            raise BadInput(f"{dest}: exists and is not a kbench baseline; choose another --name")
        if (dest / MANIFEST).is_file() and not force:
            raise BadInput(f"{dest}: the baseline {dest.name!r} exists; --force replaces it")
    return dest


# what a baseline folder holds of kbench's; anything else a user keeps there (a README, a report/ folder) is
# carried over when the baseline is replaced. A journal is never carried: it would shadow the new Parquet.
OWN_FILES = (MANIFEST, PARQUET, CSV, JOURNAL)


def _write(dest: Path, rows: pd.DataFrame, kind: str, manifest: Manifest) -> None:
    """The whole folder written beside dest and swapped into place (kbench.runs.atomic.replaced_folder): an
    existing baseline is replaced whole or, stopped before the swap, left whole. The manifest, written last,
    records each table's size and sha256 (load_run refuses a folder whose files disagree)."""
    with atomic.replaced_folder(dest, "--name", carry=lambda n: n not in OWN_FILES and not n.startswith(".")) as tmp:
        write_tables(tmp, rows, kind)
        manifest["files"] = {n: files.record(tmp / n) for n in (PARQUET, CSV)}
        manifest["tables"] = ABSENT  # the source run's journal record: a baseline has no journal
        atomic.write_text(tmp / MANIFEST, manifest.to_json())


def write_baseline(run: Run, name: str, root: str | Path = DEFAULT_ROOT, force: bool = False,
                   allow_partial: bool = False) -> Path:
    """A baseline from one run: its rows unchanged."""
    check_source(run, allow_partial)
    dest = _prepare_dest(name, root, [run.path], force)
    manifest = Manifest.from_dict(redact.record(run.manifest))  # the run's own keys, its commands redacted
    manifest["baseline"] = {
        "name": dest.name,
        "source_run": str(run.path),
        "source_run_name": run.path.name,
        "source_baseline": run.manifest.get("baseline", {}).get("name") if isinstance(
            run.manifest.get("baseline"), dict) else None,
        "created_at": now_iso(),
        "num_rows": int(len(run.rows)),
        "num_runs": 1,
    }
    _write(dest, run.rows, run.kind, manifest)
    return dest


def write_multi_baseline(runs: list[Run | str | Path], name: str, root: str | Path = DEFAULT_ROOT,
                         force: bool = False, allow_partial: bool = False) -> tuple[Path, pd.DataFrame, list[str]]:
    """`kbench baseline RUN... --name NAME` from Python: a baseline from one run, or from several runs of the same
    scenario on the same GPU (module docstring), in ROOT/NAME (root: results/baselines under the current folder by
    default). runs: Run objects or their folders. Returns (folder, rows, warnings)."""
    given_path(root, "--out", "results/baselines")  # an empty --out is refused before the runs are read
    runs = [r if isinstance(r, Run) else load_run(r) for r in as_run_list(runs)]
    if not runs:
        raise BadInput("a baseline needs at least one run")
    if len(runs) == 1:
        dest = write_baseline(runs[0], name, root, force, allow_partial)
        return dest, runs[0].rows, []
    for r in runs:
        check_source(r, allow_partial)
    rows, warnings = pool_runs(runs)
    dest = _prepare_dest(name, root, [r.path for r in runs], force)
    manifest = Manifest.from_dict(redact.record(runs[0].manifest))
    manifest["status"] = "complete" if all(r.manifest.get("status") in (None, "complete") for r in runs) \
        else "partial"
    manifest["num_rows"] = int(len(rows))
    manifest["baseline"] = {
        "name": dest.name,
        "source_runs": [str(r.path) for r in runs],
        "source_run_names": [r.path.name for r in runs],
        "num_runs": len(runs),
        **(SERVER_POOL_RULES if runs[0].kind == "server-bench" else {
            "run_spread": RUN_SPREAD_RULE,
            "median_us": "median of the per-run medians (run_medians_us); samples_us pooled"}),
        "runs": [redact.record({k: r.manifest.get(k) for k in ("start_time", "end_time", "command_line",
                                                               "clocks_start", "clocks_end", "status")}) for r in runs],
        "created_at": now_iso(),
        "num_rows": int(len(rows)),
    }
    _write(dest, rows, runs[0].kind, manifest)
    return dest, rows, warnings
