"""Several sweep runs as one set of rows.

Rows are concatenated. When the same (kernel, case_id) appears more than once, the row from the run that
started last (manifest ``start_time``; runs without one count as oldest, then command-line order) wins, so
re-measuring a few shapes in a newer run replaces the old numbers. Within one run the last row wins
(a resumed sweep may repeat a row). Runs from different devices are refused: one policy is for one GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kbench.cases import axes
from kbench.errors import BadInput
from kbench.runs.manifest import ceiling
from kbench.runs.store import MANIFEST, Run, as_run_list, load_run, read_manifest
from kbench.runs.winners import check_ok_times

GROUP_COLUMNS = axes.GROUP_COLUMNS  # re-exported: the report's group key


@dataclass
class RunSet:
    runs: list[Run]  # oldest first
    rows: pd.DataFrame  # deduplicated, with a "run" column (the run folder's name)
    device: dict  # {"name": ..., "sm": ...}
    copy_bandwidth_gbs: float | None
    read_bandwidth_gbs: float | None = None  # runs from before the read ceiling have none
    warnings: list[str] = field(default_factory=list)  # what the reader chose that the user should know (one line each)

    @property
    def ceiling(self) -> tuple[str, float | None]:
        """The roofline ceiling the rows' roofline_frac was computed against (kbench.runs.manifest.ceiling)."""
        return ceiling(self.copy_bandwidth_gbs, self.read_bandwidth_gbs)

    def sources(self) -> list[dict]:
        counts = self.rows.groupby("run")["case_id"].nunique().to_dict() if len(self.rows) else {}
        return [{"run": r.name, "path": str(r.path), "start_time": r.manifest.get("start_time"),
                 "cases": int(counts.get(r.name, 0)),
                 # an adaptive sweep (kbench.engine.plans.adaptive): the policy says it was built from a refined sub-grid
                 **({"adaptive": r.manifest["adaptive"]} if isinstance(r.manifest.get("adaptive"), dict) else {})}
                for r in self.runs]


group_label = axes.group_label  # re-exported


def _device(run: Run) -> dict:
    d = run.manifest.get("device") or {}
    if not isinstance(d, dict):
        d = {"name": str(d)}
    return {"name": str(d.get("name", "unknown")), "sm": d.get("sm")}


def _peek_kind(path: Path) -> str:
    """The run kind its manifest names (a folder that is no run: "sweep", and load_run says what is wrong)."""
    return read_manifest(path).get("kind", "sweep") if (path / MANIFEST).is_file() else "sweep"


def combine(runs: list[Run | str | Path] | Run | str | Path) -> RunSet:
    """The rows of one or more sweep runs (a list, or one run or path), on one device, each (kernel, case) once."""
    runs = as_run_list(runs)
    if not runs:
        raise BadInput("no run given")
    for r in runs:  # the kind before the rows: another kind's rows are not this layer's to read
        kind = r.kind if isinstance(r, Run) else _peek_kind(Path(r))
        if kind != "sweep":
            raise BadInput(f"{r.path if isinstance(r, Run) else r}: a {kind!r} run, not a sweep")
    loaded = [r if isinstance(r, Run) else load_run(r, lists=False) for r in runs]  # no samples_us: not used here
    names = [r.name for r in loaded]
    if len(set(names)) != len(names):
        raise BadInput(f"run {next(n for n in names if names.count(n) > 1)!r} given twice")
    devices = {(d["name"], d["sm"]) for d in map(_device, loaded)}
    if len(devices) > 1:
        raise BadInput("runs come from different devices: " + ", ".join(f"{n} (SM{s})" for n, s in sorted(devices, key=str)))
    order = sorted(range(len(loaded)), key=lambda i: (str(loaded[i].manifest.get("start_time") or ""), i))
    loaded = [loaded[i] for i in order]
    frames, warnings = [], []
    for r in loaded:
        df = r.rows.copy(deep=False)  # copy-on-write: adding "run" below leaves the run's own rows as they are
        missing = [c for c in ("path", "median_us", *GROUP_COLUMNS, *axes.GRID_AXES) if c not in df.columns]
        if missing:
            raise BadInput(f"{r.path}: rows lack column {missing[0]!r}")
        check_ok_times(df, str(r.path))
        note = repeated_rows(df, r.path)
        if note:
            warnings.append(note)
        df["run"] = r.name
        frames.append(df)
    # one run: its rows as they are (concat and drop_duplicates would copy every column of 300,000 rows)
    rows = (frames[0].reset_index(drop=True) if len(frames) == 1 else pd.concat(frames, ignore_index=True)) \
        if frames else pd.DataFrame()
    dup = rows.duplicated(subset=["kernel", "case_id"], keep="last")
    if dup.any():  # as drop_duplicates(keep="last") leaves them
        rows = rows[~dup.to_numpy()]
    rows = rows.reset_index(drop=True)
    for c in axes.INT_AXES:
        try:
            rows[c] = pd.to_numeric(rows[c]).astype(int)
        except (TypeError, ValueError):
            raise BadInput(f"rows have a non-integer {c}") from None
    for c in ("median_us", "rel_spread", "iqr_us", "p25_us", "p75_us", "kv_bandwidth_gbs", "roofline_frac"):
        if c in rows:
            rows[c] = pd.to_numeric(rows[c], errors="coerce")

    def last(key):
        vals = [r.manifest.get(key) for r in loaded]
        return next((float(b) for b in reversed(vals) if isinstance(b, (int, float)) and b > 0), None)

    return RunSet(loaded, rows, _device(loaded[-1]), last("copy_bandwidth_gbs"), last("read_bandwidth_gbs"), warnings)


def repeated_rows(rows: pd.DataFrame, where) -> str | None:
    """The warning for a run holding a (kernel, case) more than once with different times (a resume that repeated
    a row, a hand edit): the last row counts, as in the gate (kbench.gate.compare), and the user is told which."""
    key = ["kernel", "case_id"]
    dup = rows.duplicated(key, keep=False).to_numpy()
    if not dup.any():
        return None
    times = rows.loc[dup, [*key, "median_us"]]
    differ = times.groupby(key, sort=False)["median_us"].nunique(dropna=False) > 1
    if not differ.any():
        return None  # repeated with the same time: nothing chosen
    kernel, case_id = differ[differ].index[0]
    seen = times[(times["kernel"] == kernel) & (times["case_id"] == case_id)]["median_us"].tolist()
    return (f"warning: {where}: {int(differ.sum())} (kernel, case) measured more than once with different times "
            f"(e.g. {kernel} {case_id}: {', '.join(f'{t:.4g}' for t in seen)} us); the last row of each counts, as "
            f"in the gate")


COMMITTED_BASELINE = "results/baselines/h200-draft-extend-kv4096"


def nothing_to_report(rows: pd.DataFrame, device: dict) -> str:
    """Why a run has no kernel row to report on, with what to try instead (one line)."""
    kern = rows[rows["path"] != "reference"]
    counts = kern["status"].value_counts().to_dict()
    ref_ok = int(((rows["path"] == "reference") & (rows["status"] == "ok")).sum())
    parts = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no kernel rows"
    ref = f"; its {ref_ok} ok row(s) are the float32 reference, which is not reported on" if ref_ok else ""
    if not device.get("sm"):  # a CPU run: the FlashInfer kernels need a CUDA GPU
        return (f"no row with status ok to report on: this run is from a CPU, where every FlashInfer kernel is "
                f"skipped ({parts})"
                f"{ref}; without a GPU, try report, select and gate on the committed H200 baseline: "
                f"kbench report {COMMITTED_BASELINE}")
    return f"no row with status ok to report on ({parts}){ref}"
