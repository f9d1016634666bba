"""One entry point: runs in, report folder out.

    OUT/report.md  OUT/report.html  OUT/policy.json  [OUT/policy-holdout.json]  OUT/cases.csv
    OUT/crossovers.csv  OUT/regret.csv  [OUT/power.csv]  OUT/*.png  OUT/report.json (last: each file's size, sha256)

OUT defaults to RUN/report for the first RUN given. The folder is written beside OUT and swapped into place
(kbench.runs.atomic.replaced_folder): an earlier report there is replaced whole, or, when the report is stopped
before the swap, left whole; an OUT holding anything a report does not write is refused, not replaced. policy.json is built from every case; with ``holdout``
a second policy (policy-holdout.json) is built without a seeded random fraction of the cases and its regret
is measured on exactly those cases.
"""
from __future__ import annotations

import gc
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kbench import __version__
from kbench import files as kbench_files
from kbench.runs import atomic

from kbench.cases import axes
from kbench.errors import BadInput
from kbench.runs.outputs import given_path, writable_dir
from kbench.report import crossovers as xo
from kbench.report import html as html_out
from kbench.report import markdown as md_out
from kbench.report import power_states
from kbench.report.document import build_document
from kbench.report.policy import REPORT_JSON, build_policy, policy_of, save_policy
from kbench.report.regret import Regret, holdout_split, regret
from kbench.report.runs import RunSet, combine
from kbench.runs.store import Run, as_run_list, now_iso, release_memory
from kbench.runs.winners import case_winners
from kbench.values import int_in


@dataclass
class ReportResult:
    out_dir: Path
    runset: RunSet
    cases: pd.DataFrame  # case_winners() lines
    crossovers: list[xo.Crossover]
    policy: dict
    regrets: list[Regret]  # in-sample first, then the holdout one if asked
    holdout_policy: dict | None = None
    plots: list[tuple[Path, str]] = field(default_factory=list)  # (png, caption)
    files: list[Path] = field(default_factory=list)
    power_pairs: pd.DataFrame | None = None  # power_states.side_by_side: the two timing states per case
    power: str | None = None  # the one timing state the report and policy are for (None: every state, as groups)
    plot_groups: tuple[int, int] | None = None  # (groups plotted, groups) when plot_groups left some out

    @property
    def regret(self) -> Regret:
        return self.regrets[0]

    @property
    def holdout_regret(self) -> Regret | None:
        return self.regrets[1] if len(self.regrets) > 1 else None


PLOT_GROUPS = 2  # groups whose heatmap and time-vs-q_len plots are drawn by default (plots.plot_groups)
# REPORT_JSON, written last: what the report wrote, {name: {bytes, sha256}} (kbench.files.record)
# every name a report writes, plus its *.png plots: an --out folder holding anything else is not replaced
REPORT_FILES = frozenset({"report.md", "report.html", REPORT_JSON, "policy.json", "policy-holdout.json", "cases.csv",
                          "crossovers.csv", "regret.csv", "power.csv"})


def build_report(runs: list[Run | str | Path] | Run | str | Path, out_dir: str | Path | None = None, holdout: float | None = None,
                 seed: int = 0, plot_points: list[tuple[int, int]] | None = None,
                 power: str | None = None, plot_groups: int | None = PLOT_GROUPS) -> ReportResult:
    """power: build the report and policy for this one timing state (unthrottled | sustained); the two states
    side by side (cases measured in both) are computed from all the rows either way. plot_groups: draw the
    per-group plots for at most this many groups (None or < 0: every group; plots.plot_groups chooses)."""
    runs = as_run_list(runs)
    if plot_groups is not None and not int_in(plot_groups):
        raise BadInput(f"--plot-groups {plot_groups!r}: an integer (negative: every group)")
    if plot_points is not None and (not isinstance(plot_points, (list, tuple)) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(int_in(v) for v in p) for p in plot_points)):
        raise BadInput(f"plot_points {plot_points!r}: a list of (batch_size, kv_len) pairs")
    rs = combine(runs)
    first = runs[0].path if isinstance(runs[0], Run) else Path(runs[0])
    out = given_path(out_dir, "--out", "report") if out_dir is not None else first / "report"
    check_report_folder(out)
    writable_dir(out, "--out", create=False)
    cases = case_winners(rs.rows)  # once: the states side by side and the policy read them
    release_memory()  # each step's temporaries handed back before the next (a 300,000-row run's took 250 MB each)
    pairs = power_states.side_by_side(rs.rows, cases)
    release_memory()
    if power is not None:
        rs.rows = power_states.of_state(rs.rows, power)
        power = axes.AXIS["power"].parse(power, "--power", "report")[0]
        cases = None
    policy, cases, ok = policy_of(rs, cases)
    release_memory()
    regrets = [regret(policy, ok, cases, "all cases (in-sample)")]
    holdout_policy = None
    if holdout is not None:
        train, test = holdout_split(cases["case_id"].tolist(), holdout, seed)
        holdout_policy = build_policy(cases[cases["case_id"].isin(train)], rs.device, rs.sources(),
                                      {"fraction": holdout, "seed": seed, "held_out_cases": len(test),
                                       "held_out": test}, times=ok)
        regrets.append(regret(holdout_policy, ok, cases[cases["case_id"].isin(test)],
                              f"holdout {holdout:.0%} (seed {seed}, {len(test)} cases)"))
    result = ReportResult(out, rs, cases, xo.crossovers(cases), policy, regrets, holdout_policy,
                          power_pairs=pairs, power=power)

    with atomic.replaced_folder(out, "--out") as tmp:  # the old report replaced whole, or left whole
        _plot(result, tmp, ok, plot_points, plot_groups)
        del ok  # the measured rows (every column) are the plots' last use of them
        gc.collect()  # a drawn Figure is a cycle of objects that holds its canvas (40 MB for a tall heatmap)
        release_memory()
        files = _write(result, tmp, holdout_policy, pairs)
    # what was written in the sibling folder now lies in `out`
    result.files = [out / p.relative_to(tmp) for p in files]
    result.plots = [(out / p.relative_to(tmp), caption) for p, caption in result.plots]
    return result


def _plot(result: ReportResult, out: Path, ok: pd.DataFrame, plot_points, plot_groups) -> None:
    """The report's plots into ``out``, listed in result.plots with their captions."""
    from kbench.report import plots  # matplotlib (0.5 s of CPU a call): only a report draws

    cases, rs = result.cases, result.runset
    only, n_groups = plots.plot_groups(cases, plot_groups)
    if only is not None:
        result.plot_groups = (len(only), n_groups)
    notes: dict = {}
    result.plots += [(p, f"Decode/context speedup over batch x kv_len per q_len: {p.stem}"
                         + (f" ({notes[p]})" if p in notes else ""))
                     for p in plots.speedup_heatmaps(cases, out, only, notes)]
    result.plots += [(p, f"Time against q_len per kernel: {p.stem}")
                     for p in plots.time_vs_q(ok, plot_points or None, out, only)]
    kind, ceiling = rs.ceiling
    roof = plots.roofline(ok, ceiling, out, kind)
    if roof:
        result.plots.append((roof, "Fraction of the read roofline per kernel (the measured read ceiling, "
                                   f"{ceiling:,.0f} GB/s)" if kind == "read" and ceiling else
                                   "Fraction of the copy bandwidth per kernel (this run has no read ceiling: it was "
                                   "measured before kbench measured one)"))


def _write(result: ReportResult, out: Path, holdout_policy, pairs) -> list[Path]:
    """Every file of the report but its plots into ``out`` (a fresh folder); report.json, written last, records
    them and the plots; returns them all."""
    cases, rs = result.cases, result.runset
    files = [p for p, _ in result.plots]
    files.append(save_policy(result.policy, out / "policy.json"))
    if holdout_policy is not None:
        files.append(save_policy(holdout_policy, out / "policy-holdout.json"))
    atomic.write_with(out / "cases.csv", lambda tmp: cases.to_csv(tmp, index=False))
    headers, rows = xo.table(result.crossovers)
    atomic.write_with(out / "crossovers.csv", lambda tmp: pd.DataFrame(rows, columns=headers).to_csv(tmp, index=False))
    regret_rows = pd.concat([r.per_case.assign(judged_on=r.label) for r in result.regrets])
    atomic.write_with(out / "regret.csv", lambda tmp: regret_rows.to_csv(tmp, index=False))
    files += [out / "cases.csv", out / "crossovers.csv", out / "regret.csv"]
    if not pairs.empty:
        atomic.write_with(out / "power.csv", lambda tmp: pairs.to_csv(tmp, index=False))
        files.append(out / "power.csv")
    release_memory()
    doc = build_document(result)
    atomic.write_text(out / "report.md", md_out.render(doc, out))
    atomic.write_text(out / "report.html", html_out.render(doc))
    files += [out / "report.md", out / "report.html"]
    record = {"kind": "kbench-report", "kbench_version": __version__, "created_at": now_iso(),
              "built_from": rs.sources(), "files": {p.name: kbench_files.record(p) for p in files}}
    atomic.write_text(out / REPORT_JSON, json.dumps(record, indent=2, default=str) + "\n")
    return files + [out / REPORT_JSON]


def check_report_folder(out: Path) -> None:
    """An existing --out folder is replaced whole, so it may hold a report and nothing else (a folder of runs,
    a run folder itself, a folder of other artifacts is refused, not deleted)."""
    if not out.is_dir() or out.is_symlink():
        return  # missing, a file or a link: replaced_folder / writable_dir say what is wrong
    other = sorted(p.name for p in out.iterdir() if not is_report_file(p.name))
    if other:
        raise BadInput(f"--out {out}: holds {other[0]!r}{f' and {len(other) - 1} more' if len(other) > 1 else ''}, "
                       f"which a report does not write; a report replaces its folder whole, so give a new or "
                       f"empty folder (or one that holds only an earlier report)")


def is_report_file(name: str) -> bool:
    return name in REPORT_FILES or (name.endswith(".png") and not name.startswith("."))
