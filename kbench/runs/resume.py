"""What `sweep --resume RUN` may do with a run folder, decided before anything in it is touched.

Refused without --force: a baseline folder (committed data, not a run to finish) and a run measured on
another device (its rows would mix two GPUs). A complete run has nothing to do: the caller says so and
exits 0 without writing. The lock (kbench.runs.lock) refuses a second writer.
"""
from __future__ import annotations

from pathlib import Path

from kbench.errors import BadInput
from kbench.runs.lock import holder
from kbench.runs.manifest import device_key


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
    ada = manifest.get("adaptive")
    budget_hit = isinstance(ada, dict) and str(ada.get("stopped_by", "")).startswith("budget")
    if manifest.get("status") == "complete" and not budget_hit:  # an adaptive run stopped by its budget goes on
        return f"{run_dir} is complete: nothing to resume (no file touched)"
    return None
