"""The report's answers for realistic batches (issue #13), from ok rows:

- padded decode vs ragged decode vs context, per acceptance rate (q_dist accept:RATE);
- what per-request KV lengths do to each kernel against the uniform batch of the same total KV;
- what a sliding window (and sinks) does against full attention;
- what max_seq_len = context:N (as SGLang passes it) costs against the tight value;
- what skip-softmax (an approximation, checked by its own tolerance) saves against the exact kernel.
Each answer pairs rows that differ in one axis only; a run without such rows gets no section.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.cases import axes
from kbench.report.lazy_rows import LazyRows
from kbench.report.runs import GROUP_COLUMNS, group_label

# the realistic axes and their values in the idealised batch
REALISTIC_DEFAULTS = {a.name: a.default for a in axes.axes_with(axes.REALISTIC)}
# every other axis: rows paired on one realistic axis agree on all of these
SHAPE = [n for n in axes.names() if n not in REALISTIC_DEFAULTS]
PADDED_DECODE = ("trtllm-decode", "decode-wrapper")
RAGGED_DECODE = ("trtllm-decode-ragged",)


def with_defaults(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy(deep=False)  # copy-on-write: the columns set below leave the caller's frame as it is
    for col, default in REALISTIC_DEFAULTS.items():
        rows[col] = rows[col].fillna(default) if col in rows else default
    rows["window_left"] = rows["window_left"].astype(int)
    return rows


def _us(v) -> str:
    return "-" if v is None or v is pd.NA or (isinstance(v, float) and v != v) else f"{v:.1f}"


_LABEL_KEYS = [c for c in GROUP_COLUMNS if c not in REALISTIC_DEFAULTS]  # what a group label reads, less those axes


def _shape_label(r: dict, labels: dict | None = None) -> str:
    """The group and shape; the realistic axes have their own columns. labels: the group labels made so far (a
    table's rows share a few groups)."""
    key = tuple(r.get(c) for c in _LABEL_KEYS)
    label = labels.get(key) if labels is not None else None
    if label is None:
        label = group_label({**r, **REALISTIC_DEFAULTS})
        if labels is not None:
            labels[key] = label
    return f"{label} bs{int(r['batch_size'])} q{int(r['q_len'])} kv{int(r['kv_len'])}"


def _group_ids(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """df with ``_gid``: its group's number in the sorted order of ``keys`` (rows with a missing key left out,
    as groupby leaves them out) and ``_pos``: the row's place in df (of equal medians, the first one wins)."""
    gid = df.groupby(keys, sort=True).ngroup()
    out = df.assign(_gid=gid, _pos=np.arange(len(df)))
    return out[out["_gid"] >= 0].astype({"_gid": int})


def _fastest(df: pd.DataFrame, by: list[str]) -> dict:
    """Per group of ``by`` (its key, a tuple when by has several columns): (kernel, median_us) of its fastest row,
    the first one of equal medians."""
    f = df.sort_values([*by, "median_us", "_pos"], kind="stable").drop_duplicates(by)
    keys = zip(*(f[c].tolist() for c in by)) if len(by) > 1 else f[by[0]].tolist()
    return dict(zip(keys, zip(map(str, f["kernel"].tolist()), map(float, f["median_us"].tolist()))))


def _firsts(df: pd.DataFrame, keys: list[str]) -> dict[int, dict]:
    """group number -> its key values (from its first row)."""
    first = df.drop_duplicates("_gid")
    return {int(g): dict(zip(keys, vals)) for g, *vals in zip(first["_gid"].tolist(), *(first[k].tolist() for k in keys))}


def acceptance_table(ok: pd.DataFrame) -> tuple[list[str], LazyRows]:
    """Per ragged-q case: the best padded decode, the ragged decode, the best context kernel, the winner."""
    headers = ["shape", "q_dist", "other axes", "padded decode", "µs", "ragged decode µs", "context", "µs",
               "winner", "ragged / padded"]
    keys = SHAPE + list(REALISTIC_DEFAULTS)
    ragged = _group_ids(ok[ok["q_dist"] != "fixed"], keys)
    best = [_fastest(ragged[m], ["_gid"]) for m in (ragged["kernel"].isin(PADDED_DECODE),
                                                    ragged["kernel"].isin(RAGGED_DECODE),
                                                    ragged["path"] == "context")]
    firsts = _firsts(ragged, keys)
    gids = [g for g in sorted(firsts) if any(g in b for b in best)]  # a kernel family not measured here: absent
    groups: dict = {}

    def row(i: int) -> list[str]:
        r = firsts[gids[i]]
        pad, rag, ctx = (b.get(gids[i]) for b in best)
        cands = [b for b in (pad, rag, ctx) if b is not None]
        win = min(cands, key=lambda x: x[1])
        second = sorted(t for _, t in cands)[1] if len(cands) > 1 else None
        winner = win[0] + (f" by {second / win[1]:.2f}x" if second else "")
        ratio = f"{rag[1] / pad[1]:.2f}" if pad and rag else "-"
        return [_shape_label(r, groups), r["q_dist"], _other(r, ("q_dist",)), pad[0] if pad else "-",
                _us(pad[1] if pad else None), _us(rag[1] if rag else None), ctx[0] if ctx else "-",
                _us(ctx[1] if ctx else None), winner, ratio]

    return headers, LazyRows(len(gids), row)


def _other(r: dict, skip) -> str:
    parts = [f"{k}={r[k]}" for k, d in REALISTIC_DEFAULTS.items() if k not in skip and r[k] != d]
    return ", ".join(parts) or "-"


def axis_effect_table(ok: pd.DataFrame, axis: str) -> tuple[list[str], LazyRows | list]:
    """Per kernel: the time with the axis at a non-default value against the same case at the default
    (every other axis equal), and each side's winner."""
    base_value = REALISTIC_DEFAULTS[axis]
    headers = ["shape", axis, "other axes", "kernel", f"µs at {base_value}", "µs", "ratio", "winner at default",
               "winner here"]
    out = []
    others = [a for a in REALISTIC_DEFAULTS if a != axis]
    keys = SHAPE + others
    df = _group_ids(ok, keys)
    at_base = df[axis] == base_value
    base, here = df[at_base], df[~at_base & df["_gid"].isin(df.loc[at_base, "_gid"])]
    if here.empty:
        return headers, out
    base_win = _fastest(base, ["_gid"])
    base_us = base.groupby(["_gid", "kernel"])["median_us"].min().to_dict()
    win = _fastest(here, ["_gid", axis])
    times = here.groupby(["_gid", axis, "kernel"], sort=True)["median_us"].min()
    firsts = _firsts(here, keys)
    labels: dict = {}  # (gid, value) -> the row's shape and other-axes labels: the same for each of its kernels
    groups: dict = {}
    index, medians = times.index.tolist(), times.tolist()

    def row(i: int) -> list[str]:
        (gid, value, kernel), t = index[i], medians[i]
        if (gid, value) not in labels:
            r = firsts[gid]
            labels[gid, value] = (_shape_label(r, groups), str(value), _other({**r, axis: value}, (axis,)))
        bt = base_us.get((gid, kernel))
        if bt is None and kernel in RAGGED_DECODE:  # a ragged kernel's uniform counterpart is the padded one
            bt = base_us.get((gid, PADDED_DECODE[0]))
        t = float(t)
        bt = float(bt) if bt is not None else None
        return [*labels[gid, value], kernel, _us(bt), _us(t), f"{t / bt:.2f}x" if bt else "-", base_win[gid][0],
                win[(gid, value)][0]]

    return headers, LazyRows(len(index), row)


def realistic_blocks(ok_rows: pd.DataFrame) -> list[tuple]:
    """Report blocks answering the engine's questions; [] when the runs hold no realistic rows."""
    if ok_rows.empty:
        return []
    ok = with_defaults(ok_rows[ok_rows["path"] != "reference"])
    realistic = pd.Series(False, index=ok.index)
    for col, d in REALISTIC_DEFAULTS.items():
        realistic |= ok[col] != d
    if not realistic.any():
        return []
    blocks: list[tuple] = []
    acc = acceptance_table(ok)
    if acc[1]:
        blocks += [("h", 3, "Padded vs ragged decode vs context, per acceptance rate"), ("table", *acc)]
    for axis, title in (("kv_dist", "Per-request KV lengths vs the uniform batch of the same total KV"),
                        ("window_left", "Sliding window vs full attention"),
                        ("sinks", "Attention sinks vs none"),
                        ("max_seq_len", "max_seq_len = context:N vs the batch's longest sequence"),
                        ("skip_softmax", "Skip-softmax (approximate: its own tolerance) vs exact")):
        t = axis_effect_table(ok, axis)
        if t[1]:
            blocks += [("h", 3, title), ("table", *t)]
    if not blocks:  # realistic rows without a pair here (a tree: its own section, kbench.report.trees)
        return []
    return [
        ("h", 2, "Realistic batches"),
        ("p", "Rows paired so that only one axis differs. Padded decode pads every request to the longest "
              "(as a CUDA-graph engine does); ragged decode takes variable-length q (xqa q_cu_seq_lens, "
              "trtllm-gen cum_seq_lens_q); context kernels take ragged q natively."),
    ] + blocks
