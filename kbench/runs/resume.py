"""What `sweep --resume RUN` may do with a run folder, decided before anything in it is touched.

Refused without --force: a baseline folder (committed data, not a run to finish), a run measured on
another device (its rows would mix two GPUs) and a run whose journal holds rows of another device. A
complete run has nothing to do: the caller says so and exits 0 without writing, unless its journal lost
rows since, or (no journal) its tables hold fewer rows than it recorded: the resume restores them. The lock (kbench.runs.lock) refuses a second writer.
"""
from __future__ import annotations

from pathlib import Path

from kbench.errors import BadInput
from kbench.runs.lock import holder
from kbench.runs.manifest import device_key
from kbench.runs.store import CSV, JOURNAL, PARQUET, check_device, read_journal, read_tables, rows_lost, \
    table_rows_recorded


def check_resume(run_dir: str | Path, manifest: dict, device: dict | None, force: bool = False) -> str | None:
    """None when the run should be resumed; a message when there is nothing to do. BadInput when refused."""
    pid = holder(run_dir)
    if pid is not None:
        raise BadInput(f"{run_dir}: another kbench process (pid {pid}) is writing this run; wait for it to end "
                       f"or stop it first")
    if isinstance(manifest.get("baseline"), dict) and not force:
        raise BadInput(f"{run_dir} is a baseline, not a run to finish: resuming would rewrite it "
                       f"(--force to do it anyway)")
    was, now = device_key(manifest), device_key({"device": device})
    if device is not None and was != now and not force:
        raise BadInput(f"{run_dir} was measured on {was[0]} (SM{was[1]}), this is {now[0]} (SM{now[1]}): its "
                       f"rows would mix two devices (--force to resume anyway)")
    journal = Path(run_dir) / JOURNAL
    rows = read_journal(journal, manifest.get("kind", "sweep")) if journal.exists() else None
    if rows is not None and not force:  # rows another device wrote, added to the journal by hand or a script
        check_device(rows, manifest, journal, manifest.get("kind", "sweep"))
    ada = manifest.get("adaptive")
    budget_hit = isinstance(ada, dict) and str(ada.get("stopped_by", "")).startswith("budget")
    if manifest.get("status") == "complete" and not budget_hit:  # an adaptive run stopped by its budget goes on
        if rows is not None and rows_lost(manifest, rows, journal):
            return None  # complete once, but its journal lost rows since: the resume restores them
        if rows is None and _tables_short(Path(run_dir), manifest):
            return None  # no journal, and its tables were cut short since: the resume measures the rest again
        return f"{run_dir} is complete: nothing to resume (no file touched)"
    return None


def _tables_short(run_dir: Path, manifest: dict) -> bool:
    """The run's tables (no journal) hold fewer rows than its manifest recorded (a copy cut short)."""
    recorded = table_rows_recorded(manifest)
    if recorded is None or not ((run_dir / PARQUET).exists() or (run_dir / CSV).exists()):
        return False
    return len(read_tables(run_dir, manifest.get("kind", "sweep"))) < recorded[0]
