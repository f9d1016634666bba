"""One entry point: runs in, report folder out.

    OUT/report.md  OUT/report.html  OUT/policy.json  [OUT/policy-holdout.json]  OUT/cases.csv
    OUT/crossovers.csv  OUT/regret.csv  OUT/*.png

OUT defaults to RUN/report for the first RUN given. policy.json is built from every case; with ``holdout``
a second policy (policy-holdout.json) is built without a seeded random fraction of the cases and its regret
is measured on exactly those cases.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kbench.runs import atomic

from kbench.cases import axes
from kbench.errors import BadInput
from kbench.runs.outputs import writable_dir
from kbench.report import crossovers as xo
from kbench.report import html as html_out
from kbench.report import markdown as md_out
from kbench.report import plots, power_states
from kbench.report.document import build_document
from kbench.report.policy import build_policy, save_policy
from kbench.report.regret import Regret, holdout_split, regret
from kbench.report.runs import RunSet, combine
from kbench.runs.store import Run
from kbench.runs.winners import case_winners, measured


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


COMMITTED_BASELINE = "results/baselines/h200-draft-extend-kv4096"
PLOT_GROUPS = 2  # groups whose heatmap and time-vs-q_len plots are drawn by default (plots.plot_groups)


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


def build_report(runs: list[Run | str | Path], out_dir: str | Path | None = None, holdout: float | None = None,
                 seed: int = 0, plot_points: list[tuple[int, int]] | None = None,
                 power: str | None = None, plot_groups: int | None = PLOT_GROUPS) -> ReportResult:
    """power: build the report and policy for this one timing state (unthrottled | sustained); the two states
    side by side (cases measured in both) are computed from all the rows either way. plot_groups: draw the
    per-group plots for at most this many groups (None or < 0: every group; plots.plot_groups chooses)."""
    rs = combine(runs)
    first = runs[0].path if isinstance(runs[0], Run) else Path(runs[0])
    out = Path(out_dir) if out_dir is not None else first / "report"
    pairs = power_states.side_by_side(rs.rows)
    if power is not None:
        rs.rows = power_states.of_state(rs.rows, power)
        power = axes.AXIS["power"].parse(power, "--power", "report")[0]
    cases = case_winners(rs.rows)
    if cases.empty:
        raise BadInput(nothing_to_report(rs.rows, rs.device))
    ok = measured(rs.rows)
    policy = build_policy(cases, rs.device, rs.sources(), times=ok)
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

    writable_dir(out, "--out")
    pts = plot_points or None
    only, n_groups = plots.plot_groups(cases, plot_groups)
    if only is not None:
        result.plot_groups = (len(only), n_groups)
    result.plots += [(p, f"Decode/context speedup over batch x kv_len per q_len: {p.stem}")
                     for p in plots.speedup_heatmaps(cases, out, only)]
    result.plots += [(p, f"Time against q_len per kernel: {p.stem}") for p in plots.time_vs_q(ok, pts, out, only)]
    kind, ceiling = rs.ceiling
    roof = plots.roofline(ok, ceiling, out, kind)
    if roof:
        result.plots.append((roof, f"Fraction of the {kind}-bandwidth roofline per kernel"))
    files = [p for p, _ in result.plots]
    files.append(save_policy(policy, out / "policy.json"))
    if holdout_policy is not None:
        files.append(save_policy(holdout_policy, out / "policy-holdout.json"))
    atomic.write_with(out / "cases.csv", lambda tmp: cases.to_csv(tmp, index=False))
    headers, rows = xo.table(result.crossovers)
    atomic.write_with(out / "crossovers.csv", lambda tmp: pd.DataFrame(rows, columns=headers).to_csv(tmp, index=False))
    regret_rows = pd.concat([r.per_case.assign(judged_on=r.label) for r in regrets])
    atomic.write_with(out / "regret.csv", lambda tmp: regret_rows.to_csv(tmp, index=False))
    files += [out / "cases.csv", out / "crossovers.csv", out / "regret.csv"]
    if not pairs.empty:
        atomic.write_with(out / "power.csv", lambda tmp: pairs.to_csv(tmp, index=False))
        files.append(out / "power.csv")
    doc = build_document(result)
    atomic.write_text(out / "report.md", md_out.render(doc, out))
    atomic.write_text(out / "report.html", html_out.render(doc))
    files += [out / "report.md", out / "report.html"]
    result.files = files
    return result
