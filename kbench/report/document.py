"""The report's content as plain blocks, so the markdown and HTML writers render the same thing.

Blocks: ("h", level, text) | ("p", text) | ("list", [text]) | ("table", headers, rows) | ("img", path, caption).
Text here is raw (it may hold anything a result file held); each writer escapes it for its format. A table of
more than TABLE_ROWS_MAX rows shows its first rows and says how many more there are and which file holds them
(a 100,000-row sweep made a 13 MB report.md and a 21 MB report.html that no viewer opens).
"""
from __future__ import annotations

import math

from kbench.cases import axes
from kbench.cases.axes import LATER_GROUP_AXES
from kbench.frames import itertuples
from kbench.report import crossovers as xo
from kbench.report.lazy_rows import LazyRows
from kbench.report.mla import has_mla, mla_blocks
from kbench.report.power_states import power_blocks
from kbench.report.realistic import realistic_blocks
from kbench.report.trees import has_trees, tree_blocks
from kbench.report.runs import group_label


TABLE_ROWS_MAX = 1000


def capped(doc: list[tuple]) -> list[tuple]:
    """The document with each table cut to TABLE_ROWS_MAX rows and a line after it saying how many were left out
    and where they are: a table block may name its file as a 4th element ("table", headers, rows, "policy.json");
    cases.csv otherwise (every case, with its winner and what was excluded, is there)."""
    out = []
    for b in doc:
        if b[0] != "table":
            out.append(b)
            continue
        if len(b[2]) <= TABLE_ROWS_MAX:
            out.append(b[:3])
            continue
        where = b[3] if len(b) > 3 else "cases.csv"
        out += [("table", b[1], b[2][:TABLE_ROWS_MAX]),
                ("p", f"... and {len(b[2]) - TABLE_ROWS_MAX:,} more rows, not shown ({TABLE_ROWS_MAX:,} of "
                      f"{len(b[2]):,} here; every row behind this table is in {where} beside this report)")]
    return out


def _has(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _num(v, fmt: str, unit: str = "") -> str:
    return format(v, fmt) + unit if _has(v) else "-"


def _s(v) -> str:
    return str(v) if _has(v) and v != "" else "-"


def case_table(cases) -> tuple[list[str], LazyRows]:
    """Per-case winners table: ties are written as ties (in winner, margin and verdict)."""
    headers = ["group", "batch", "q_len", "kv_len", "winner", "µs", "runner-up", "margin", "decode speedup",
               "decode vs context", "excluded"]
    ordered = list(itertuples(cases.sort_values(["num_qo_heads", "num_kv_heads", "head_dim", "dtype", "page_size",
                                                 "batch_size", "kv_len", "q_len", *LATER_GROUP_AXES])))

    def row(i: int) -> list[str]:
        r = ordered[i]
        winner = f"tie: {r.winner} = {r.tied_with}" if r.winner_tie else str(r.winner)
        margin = "tie" if r.winner_tie else _num(r.margin_pct, ".1f", "%")
        return [group_label(r._asdict()), str(r.batch_size), str(r.q_len), str(r.kv_len), winner,
                _num(r.winner_us, ".2f"), _s(r.runner_up), margin, _num(r.decode_speedup, ".2f", "x"),
                str(r.path_verdict), _s(r.excluded)]

    return headers, LazyRows(len(ordered), row)


def rules_table(policy: dict) -> tuple[list[str], list[list[str]]]:
    headers = ["group", "batch", "kv_len", "q_len", "kernel", "path", "expected speedup", "min speedup", "ties",
               "cases"]
    rows = []
    for g in policy["groups"]:
        for r in g["rules"]:
            rows.append([g["label"], "{}-{}".format(*r["batch_size"]), "{}-{}".format(*r["kv_len"]),
                         "{}-{}".format(*r["q_len"]), r["kernel"], r["path"],
                         _num(r["expected_speedup"], ".2f"), _num(r["min_speedup"], ".2f"), str(r["ties"]),
                         str(r["cases"])])
    return headers, rows


def regret_table(regrets) -> tuple[list[str], list[list[str]]]:
    headers = ["judged on", "cases", "mean regret", "worst regret", "worst case", "policy kernel unavailable",
               "extrapolated"]
    rows = [[r.label, str(r.cases), _num(r.mean_pct, ".2f", "%"), _num(r.worst_pct, ".2f", "%"),
             _s(r.worst_case), str(r.unavailable), str(r.extrapolated)] for r in regrets]
    return headers, rows


def excluded_table(rows) -> tuple[list[str], list[list[str]]]:
    """Kernels that ran but could not compete (wrong, failed), with their reason and how many cases."""
    bad = rows[rows["status"].isin(["wrong", "failed"]) & (rows["path"] != "reference")]
    agg = bad.fillna({"reason": ""}).groupby(["kernel", "status", "reason"], sort=True)["case_id"].nunique()
    return ["kernel", "status", "reason", "cases"], [[k, s, _s(r), str(n)] for (k, s, r), n in agg.items()]


def verdict_summary(cases) -> str:
    """The decode/context count per case, with how ties are served said plainly (the policy's rule)."""
    verdicts = cases["path_verdict"].value_counts().to_dict() if len(cases) else {}
    tied = cases[cases["path_verdict"] == "tie"] if len(cases) else cases
    served = tied["winner_path"].value_counts().to_dict() if len(tied) else {}
    tie_rule = (f" (a tie: the best decode and best context times within each other's spread; the policy then "
                f"serves the kernel with the faster median anyway, here {served.get('context', 0)} to the context "
                f"path and {served.get('decode', 0)} to the decode path)") if len(tied) else ""
    return (f"{len(cases)} cases with an ok row; decode wins {verdicts.get('decode', 0)}, context wins "
            f"{verdicts.get('context', 0)}, ties {verdicts.get('tie', 0)}{tie_rule}, one path only "
            f"{verdicts.get('decode-only', 0) + verdicts.get('context-only', 0)}")


def build_document(result) -> list[tuple]:
    rs, cases, policy = result.runset, result.cases, result.policy
    kernels = sorted(rs.rows.loc[rs.rows["path"] != "reference", "kernel"].dropna().astype(str).unique())
    status = rs.rows[rs.rows["path"] != "reference"]["status"].value_counts().to_dict()
    excluded = excluded_table(rs.rows)
    doc: list[tuple] = [
        ("h", 1, "kbench report"),
        ("list", [f"device: {rs.device['name']} (SM{rs.device['sm']})",
                  "runs: " + ", ".join(f"{s['run']} ({s['cases']} cases)" for s in rs.sources()),
                  f"copy bandwidth: {_num(rs.copy_bandwidth_gbs, '.0f')} GB/s; read bandwidth: "
                  f"{_num(rs.read_bandwidth_gbs, '.0f')} GB/s; roofline ceiling: the {rs.ceiling[0]} bandwidth"
                  + ("" if rs.read_bandwidth_gbs else " (runs from before kbench measured the read ceiling: "
                     "read-mostly kernels can exceed 1.0 of a copy figure, which counts bytes read and written)"),
                  f"kernels: {', '.join(kernels)}",
                  "rows by status: " + ", ".join(f"{k} {v}" for k, v in sorted(status.items())),
                  verdict_summary(cases)]),
        ("p", "Only rows whose check passed (status ok) compete; wrong and failed kernels are listed under "
              "'excluded'. Tie rule: " + policy["tie_rule"] + "."),
        ("h", 3, "Excluded (check did not pass)"),
        ("table", *excluded) if excluded[1] else ("p", "none"),
        ("h", 2, "Regret of the policy"),
        ("table", *regret_table(result.regrets), "regret.csv"),
        ("p", "regret = policy kernel's time / best measured time - 1. In-sample it is 0 by construction; "
              "the holdout row (with --holdout) judges a policy built without those cases."),
        ("h", 2, "Crossovers along q_len"),
        ("p", "q_len ranges per (group, batch, kv_len) in which each path wins; 'policy switches' counts how "
              "often the path the policy serves (each case's faster median, ties included) changes along q_len; "
              "'flips beyond ties' counts only the changes beyond the measured spread."),
        ("table", *xo.table(result.crossovers), "crossovers.csv"),
        ("h", 2, "Selection policy"),
        ("p", f"policy.json, schema {policy['schema']}. Lookup: {policy['lookup']}."),
        ("table", *rules_table(policy), "policy.json"),
        ("h", 2, "Plots"),
    ]
    if result.plot_groups:
        doc.append(("p", "Heatmaps and time-vs-q_len plots for {} of the {} groups (the idealised batch first; "
                         "kbench report --plot-groups N draws more); every case is in cases.csv and the tables "
                         "here.".format(*result.plot_groups)))
    for p, caption in result.plots:
        doc.append(("img", p, caption))
    ok = (rs.rows["status"] == "ok") & rs.rows["median_us"].notna()
    read = {*axes.names(), "kernel", "path", "median_us", "status"}  # what realistic_blocks reads: not a copy of every column
    doc += realistic_blocks(rs.rows.loc[ok, [c for c in rs.rows.columns if c in read]])
    # the ok rows whole (every column of 300,000 rows), only for a section that has something to say
    if has_trees(rs.rows.loc[ok, ["tree"]] if "tree" in rs.rows else rs.rows.iloc[0:0]) or has_mla(cases):
        ok_rows = rs.rows[ok]
        doc += tree_blocks(ok_rows)
        doc += mla_blocks(cases, ok_rows)
        del ok_rows
    doc += power_blocks(result.power_pairs, result.power)
    doc += [("h", 2, "Per case"), ("table", *case_table(cases), "cases.csv")]
    return capped(doc)
