"""The report's answer for draft trees (issue #26): per (group, batch, tree size, kv_len), the best kernel for a
chain and for each tree, and what the tree costs over the chain of the same size.

Rows are paired on every axis but `tree` (the realistic axes included), from ok rows. A kernel that cannot
take a tree (trtllm-gen, the decode wrapper, fa3, fmha-v2, trtllm-context: kbench.kernels.tree_masks) has
skipped rows for trees, so the tree's best kernel is chosen among those that can; the chain's among all.
Building the masks is not in these times: tests/gpu/tree_check.py measures it per step.
"""
from __future__ import annotations

import pandas as pd

from kbench.cases import axes
from kbench.report.realistic import REALISTIC_DEFAULTS, with_defaults

CHAIN = axes.AXIS["tree"].default
# every axis but the tree: a tree's row is paired with the chain's that agrees on all of these
PAIR = [n for n in axes.names() if n != "tree"]


def _us(v: float) -> str:
    return f"{v:.1f}"


def _shape(r: dict) -> str:
    """The group and shape; the tree and the other realistic axes have their own columns."""
    return (f"{axes.group_label({**r, **REALISTIC_DEFAULTS})} bs{int(r['batch_size'])} q{int(r['q_len'])} "
            f"kv{int(r['kv_len'])}")


def _best(rows: pd.DataFrame) -> tuple[str, float] | None:
    if rows.empty:
        return None
    r = rows.loc[rows["median_us"].idxmin()]
    return str(r["kernel"]), float(r["median_us"])


def _margin(rows: pd.DataFrame) -> str:
    """'by 1.23x' over the runner-up kernel, '' when only one ran."""
    t = sorted(rows.groupby("kernel")["median_us"].min())
    return f" by {t[1] / t[0]:.2f}x" if len(t) > 1 else ""


def _shape_of_tree(rows: pd.DataFrame) -> str:
    """' (3 levels, 4 wide)' from the rows' tree_depth / tree_width, when recorded."""
    if "tree_depth" not in rows or rows["tree_depth"].isna().all():
        return ""
    r = rows.iloc[0]
    return f" ({int(r['tree_depth'])} levels, {int(r['tree_width'])} wide)"


def tree_table(ok: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One line per tree case with a chain case of the same shape."""
    headers = ["shape", "tree", "other axes", "chain winner", "µs", "tree winner", "µs", "tree cost",
               "per kernel (tree / chain)"]
    out = []
    others = [a for a in REALISTIC_DEFAULTS if a != "tree"]
    for key, g in ok.groupby(PAIR, sort=True):
        r = dict(zip(PAIR, key))
        chain = g[g["tree"] == CHAIN]
        if chain.empty:
            continue
        cw = _best(chain)
        for tree, t in g[g["tree"] != CHAIN].groupby("tree", sort=True):
            tw = _best(t)
            per_kernel = []
            for kernel, kr in t.groupby("kernel", sort=True):
                c = chain[chain["kernel"] == kernel]
                if not c.empty:
                    per_kernel.append(f"{kernel} {kr['median_us'].min() / c['median_us'].min():.2f}x")
            other = ", ".join(f"{a}={r[a]}" for a in others if r[a] != REALISTIC_DEFAULTS[a]) or "-"
            out.append([_shape(r), str(tree) + _shape_of_tree(t), other, cw[0] + _margin(chain), _us(cw[1]),
                        tw[0] + _margin(t), _us(tw[1]), f"{tw[1] / cw[1]:.2f}x", "; ".join(per_kernel) or "-"])
    return headers, out


def tree_summary(table_rows: list[list[str]]) -> str:
    """How often the winner changes with a tree and the range of what a tree costs."""
    costs = [float(r[7].rstrip("x")) for r in table_rows]
    flips = sum(r[3].split(" by ")[0] != r[5].split(" by ")[0] for r in table_rows)
    return (f"{len(table_rows)} tree cases paired with the chain of the same size: the best kernel differs in {flips}; "
            f"a tree costs {min(costs):.2f}x to {max(costs):.2f}x the best chain time (median "
            f"{sorted(costs)[len(costs) // 2]:.2f}x).")


def has_trees(ok_rows: pd.DataFrame) -> bool:
    """Some of these rows are of a draft tree (tree_blocks has something to say only then)."""
    return not ok_rows.empty and "tree" in ok_rows and not (ok_rows["tree"].fillna(CHAIN) == CHAIN).all()


def tree_blocks(ok_rows: pd.DataFrame) -> list[tuple]:
    """Report blocks for runs with tree rows beside chain rows of the same shape; [] otherwise."""
    if not has_trees(ok_rows):
        return []
    ok = with_defaults(ok_rows[ok_rows["path"] != "reference"])
    headers, rows = tree_table(ok)
    if not rows:
        return []
    return [
        ("h", 2, "Tree vs chain"),
        ("p", "Each draft tree (tree = topk:K or a file of parent lists) against the chain of the same size "
              "(q_len draft tokens) and shape. tree cost = the tree's best time / the chain's best time: what an "
              "engine pays for verifying a tree instead of a chain. Kernels that take no tree mask are skipped for "
              "trees (see the excluded and skipped rows); the masks are built outside the timed call, as an "
              "engine builds them once per step (tests/gpu/tree_check.py times that)."),
        ("p", tree_summary(rows)),
        ("table", headers, rows),
    ]
