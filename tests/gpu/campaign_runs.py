"""Run folders as the GPU campaign sees them: found by name, read from their files, resumed or started.

A run folder is what `kbench sweep --out OUT --name NAME` writes: OUT/NAME-YYYYMMDD-HHMMSS[-N]/ with
manifest.json and rows.jsonl (the journal, the truth after a kill). A `--devices` sweep works in
OUT/.shards-NAME-YYYYMMDD-HHMMSS/shard-I/NAME-shardI-.../ and merges them into OUT/NAME-... at the end.
Only the standard library here: the driver must run (and say what failed) even when kbench does not import.
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

STAMP = r"\d{8}-\d{6}(?:-\d+)?"  # kbench.runs.store.new_run_dir: name-YYYYMMDD-HHMMSS, -2, -3 on a clash


def _newest(paths: list[Path]) -> Path | None:
    # the stamp sorts by time; a clash suffix (-2) sorts after its base
    return max(paths, key=_stamp_key, default=None)


def _stamp_key(p: Path) -> tuple:
    m = re.search(r"(\d{8})-(\d{6})(?:-(\d+))?$", p.name)
    return (m.group(1), m.group(2), int(m.group(3) or 1)) if m else ("", "", 0)


def run_folders(out: Path, name: str) -> list[Path]:
    """The run folders of `name` under `out` (not those of a longer name: de-kv4096 is not de-kv4096-devices0)."""
    pat = re.compile(rf"^{re.escape(name)}-{STAMP}$")
    if not out.is_dir():
        return []
    return sorted((p for p in out.iterdir() if p.is_dir() and pat.match(p.name)), key=_stamp_key)


def shard_runs(out: Path, name: str) -> list[Path]:
    """The shard run folders of the newest unmerged `--devices` sweep of `name` (empty when there is none)."""
    pat = re.compile(rf"^\.shards-{re.escape(name)}-{STAMP}$")
    work = [p for p in out.iterdir() if p.is_dir() and pat.match(p.name)] if out.is_dir() else []
    newest = _newest(work)
    if newest is None:
        return []
    runs = []
    for shard in sorted(newest.glob("shard-*")):
        found = [p for p in shard.iterdir() if p.is_dir() and (p / "manifest.json").exists()]
        if found:
            runs.append(_newest(found))
    return runs


@dataclass
class Run:
    """One run folder, read with the standard library (manifest.json, rows.jsonl or rows.csv)."""

    path: Path
    how: str = ""  # how the campaign got it: start | resume | done (reused)
    rc: int | None = None  # the exit code of the command that last wrote it in this call

    @property
    def manifest(self) -> dict:
        try:
            return json.loads((self.path / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    @property
    def status(self) -> str:
        """complete | interrupted | running (a process killed before it could say) | '' (no manifest)."""
        return str(self.manifest.get("status", ""))

    @property
    def complete(self) -> bool:
        m = self.manifest
        budget_hit = str((m.get("adaptive") or {}).get("stopped_by", "")).startswith("budget")
        return m.get("status") == "complete" and not budget_hit

    def rows(self) -> list[dict]:
        j = self.path / "rows.jsonl"
        if j.exists():
            out = []
            for line in j.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:  # a partial last line of a killed process
                    pass
            return out
        c = self.path / "rows.csv"
        if c.exists():
            with open(c, newline="", encoding="utf-8") as f:
                return [_typed(r) for r in csv.DictReader(f)]
        return []

    def measured(self) -> list[dict]:
        """Rows of kernels (not the float32 reference)."""
        return [r for r in self.rows() if r.get("path") != "reference"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.measured():
            out[r.get("status", "?")] = out.get(r.get("status", "?"), 0) + 1
        return out

    def wall(self) -> dict:
        """wall_s of this call plus every earlier call's (a resumed run), summed per part."""
        m = self.manifest
        parts = [m.get("wall_s") or {}, *(m.get("wall_s_earlier") or [])]
        total: dict[str, float] = {}
        for w in parts:
            for k, v in w.items():
                if isinstance(v, (int, float)):
                    total[k] = total.get(k, 0.0) + v
        return total

    def first_ok_after(self, started: dt.datetime) -> float | None:
        """Seconds from `started` (UTC) to the first ok kernel row's measured_at (whole seconds), or None."""
        times = [_when(r.get("measured_at")) for r in self.measured() if r.get("status") == "ok"]
        times = [t for t in times if t is not None]
        return (min(times) - started).total_seconds() if times else None

    def brief(self) -> str:
        """'ok 160, skipped 16' and the wall split: one line for the summary."""
        c = self.counts()
        w = self.wall()
        line = ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "no rows"
        if w.get("total_s"):
            line += f"; wall {w['total_s']:.0f} s (compile {w.get('compile_s', 0):.0f}, timing {w.get('timing_s', 0):.0f})"
        return line


def _typed(r: dict) -> dict:
    for k in ("median_us", "q_len", "batch_size", "kv_len"):
        if r.get(k) not in (None, ""):
            try:
                r[k] = float(r[k]) if k == "median_us" else int(float(r[k]))
            except ValueError:
                pass
    return r


def _when(text) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


@dataclass
class Plan:
    """What a sweep step does with its run: start it, resume it, or reuse a complete one."""

    action: str  # start | resume | done
    path: Path | None = None  # the run to resume or reuse
    shards: list[Path] = field(default_factory=list)  # a --devices sweep cut short: its shard runs, then merge

    def __str__(self) -> str:
        if self.shards:
            return f"resume {len(self.shards)} shard run(s) of {self.shards[0].parents[1].name}, then merge"
        return self.action + (f" {self.path}" if self.path else "")


def plan(out: Path, name: str, fresh: bool = False) -> Plan:
    """Resume or start: the newest run folder of `name` under `out` is reused when complete and resumed when
    not (a call cut short); a `--devices` sweep cut short before its merge resumes its shards. `fresh`: start."""
    if fresh:
        return Plan("start")
    newest = _newest(run_folders(out, name))
    if newest is not None:
        return Plan("done" if Run(newest).complete else "resume", newest)
    shards = shard_runs(out, name)
    if shards:
        return Plan("resume", None, shards)
    return Plan("start")


def repeatability(a: list[dict], b: list[dict]) -> dict:
    """Two runs of one grid: per (kernel, case) ok in both, |b/a - 1| of the medians in percent.
    {rows, median, p95, max, over3, worst: the 8 largest, all: every (pct, kernel, case_id, a_us, b_us)}"""
    def ok(rows):
        return {(r["kernel"], r["case_id"]): float(r["median_us"]) for r in rows
                if r.get("status") == "ok" and r.get("path") != "reference" and r.get("median_us")}

    ra, rb = ok(a), ok(b)
    both = sorted(set(ra) & set(rb))
    d = [(abs(rb[k] / ra[k] - 1) * 100, k[0], k[1], ra[k], rb[k]) for k in both]
    pct = sorted(x[0] for x in d)
    if not pct:
        return {"rows": 0, "median": None, "p95": None, "max": None, "over3": 0, "worst": [], "all": []}
    return {"rows": len(pct), "median": statistics.median(pct), "p95": quantile(pct, 0.95), "max": pct[-1],
            "over3": sum(p > 3 for p in pct), "worst": sorted(d, reverse=True)[:8], "all": d}


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (pandas' and numpy's default)."""
    n = len(sorted_values)
    pos = (n - 1) * q
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
