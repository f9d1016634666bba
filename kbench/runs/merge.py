"""Joining shard runs (`--shard i/N`, or `--devices` workers, or slices run on many hosts) into one run."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from kbench.errors import BadInput
from kbench.runs.manifest import MERGE, MERGE_FIELDS, comparable
from kbench.runs.outputs import given_path
from kbench.runs.store import RunWriter, Run, as_run_list, load_run, new_run_dir, removed_unless_written


def check_compatible(runs: list[Run]) -> None:
    for r in runs[1:]:
        verdict = comparable(runs[0], r, MERGE)
        if not verdict.ok:
            raise BadInput(f"cannot merge {r.path.name} with {runs[0].path.name}: {verdict.refusals[0]}")
    shards = [r.manifest.get("shard") for r in runs]
    counts = {s["count"] for s in shards if s}
    if len(counts) > 1:
        raise BadInput(f"cannot merge: shard counts differ ({sorted(counts)})")
    seen: dict[int, str] = {}
    for r, s in zip(runs, shards):
        if s and s["index"] in seen:
            raise BadInput(f"cannot merge: shard {s['index']}/{s['count']} appears twice ({seen[s['index']]} and "
                           f"{r.path}): keep one run per shard (an earlier submission's or a retried task's run is "
                           f"the other)")
        if s:
            seen[s["index"]] = str(r.path)


def refuse_out_in_inputs(out_dir, paths) -> None:
    """The merged run is made in a new folder under --out: never inside one of the runs it reads (nor as one of
    them), where it would nest in its own input and be read as that run's content."""
    out = Path(os.path.realpath(out_dir))
    for p in paths:
        run = Path(os.path.realpath(p if not hasattr(p, "path") else p.path))
        if out == run or run in out.parents:
            raise BadInput(f"--out {out_dir}: inside the input run {p}; the merged run would nest in its own input "
                           "(give a folder outside every run, e.g. results)")


def merge_runs(paths: list[str | Path], out_dir: str | Path = "results", name: str | None = None,
               min_runs: int = 2) -> Path:
    """`kbench merge` from Python: the runs' rows in one new run folder under out_dir. min_runs=1 lets `--devices`
    with a single device turn its one shard (0/1) into the run."""
    given_path(out_dir, "--out", "results")
    paths = as_run_list(paths)
    if len(paths) < min_runs:
        raise BadInput(f"merge needs at least {min_runs} runs")
    refuse_out_in_inputs(out_dir, paths)
    runs = [load_run(p) for p in paths]
    check_compatible(runs)
    rows = pd.concat([r.rows for r in runs], ignore_index=True)
    dup = rows.duplicated(["kernel", "case_id"], keep=False)
    if dup.any():
        k, c = rows[dup].iloc[0][["kernel", "case_id"]]
        raise BadInput(f"cannot merge: {k} {c} was measured in more than one run")
    first = runs[0].manifest
    shards = [r.manifest.get("shard") for r in runs]
    complete = all(s for s in shards) and len(shards) == shards[0]["count"]
    manifest = {k: first[k] for k in MERGE_FIELDS if first.get(k) is not None}  # a field both lack stays absent
    manifest.update(
        **({"device": first["device"]} if isinstance(first.get("device"), dict) else {}), copy_bandwidth_gbs=first.get("copy_bandwidth_gbs"),
        read_bandwidth_gbs=first.get("read_bandwidth_gbs"), roofline_ceiling=first.get("roofline_ceiling"),
        command_line=first.get("command_line", ""), shard=None,
        merged_from=[{"run": r.name, "shard": r.manifest.get("shard"), "device": (r.manifest.get("device") or {}).get("index"),
                      "host": (r.manifest.get("device") or {}).get("host"), "status": r.manifest.get("status"),
                      "wall_s": r.manifest.get("wall_s"), "copy_bandwidth_gbs": r.manifest.get("copy_bandwidth_gbs")}
                     for r in runs],
        all_shards=complete,
        start_time=min(r.manifest.get("start_time", "") for r in runs),
    )
    out = new_run_dir(out_dir, name or f"{(first.get('scenario') or {}).get('name', 'run')}-merged")
    status = "complete" if complete and all(r.manifest.get("status") == "complete" for r in runs) else "partial"
    with removed_unless_written(out):  # a merge cut short leaves no half-merged run for report or export to read
        w = RunWriter(out, manifest)
        for rec in rows.to_dict("records"):
            w.append(rec)
        return w.finalize(status)
