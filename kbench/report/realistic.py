"""The report's answers for realistic batches (issue #13), from ok rows:

- padded decode vs ragged decode vs context, per acceptance rate (q_dist accept:RATE);
- what per-request KV lengths do to each kernel against the uniform batch of the same total KV;
- what a sliding window (and sinks) does against full attention;
- what max_seq_len = context:N (as SGLang passes it) costs against the tight value;
- what skip-softmax (an approximation, checked by its own tolerance) saves against the exact kernel.
Each answer pairs rows that differ in one axis only; a run without such rows gets no section.
"""
from __future__ import annotations

import pandas as pd

from kbench.cases import axes
from kbench.report.runs import group_label

# the realistic axes and their values in the idealised batch
REALISTIC_DEFAULTS = {a.name: a.default for a in axes.axes_with(axes.REALISTIC)}
# every other axis: rows paired on one realistic axis agree on all of these
SHAPE = [n for n in axes.names() if n not in REALISTIC_DEFAULTS]
PADDED_DECODE = ("trtllm-decode", "decode-wrapper")
RAGGED_DECODE = ("trtllm-decode-ragged",)


def with_defaults(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    for col, default in REALISTIC_DEFAULTS.items():
        rows[col] = rows[col].fillna(default) if col in rows else default
    rows["window_left"] = rows["window_left"].astype(int)
    return rows


def _us(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.1f}"


def _shape_label(r: dict) -> str:
    """The group and shape; the realistic axes have their own columns."""
    return f"{group_label({**r, **REALISTIC_DEFAULTS})} bs{int(r['batch_size'])} q{int(r['q_len'])} kv{int(r['kv_len'])}"


def _best(rows: pd.DataFrame) -> tuple[str, float] | None:
    if rows.empty:
        return None
    r = rows.loc[rows["median_us"].idxmin()]
    return str(r["kernel"]), float(r["median_us"])


def acceptance_table(ok: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Per ragged-q case: the best padded decode, the ragged decode, the best context kernel, the winner."""
    headers = ["shape", "q_dist", "other axes", "padded decode", "µs", "ragged decode µs", "context", "µs",
               "winner", "ragged / padded"]
    out = []
    ragged = ok[ok["q_dist"] != "fixed"]
    keys = SHAPE + list(REALISTIC_DEFAULTS)
    for key, g in ragged.groupby(keys, sort=True):
        r = dict(zip(keys, key))
        pad = _best(g[g["kernel"].isin(PADDED_DECODE)])
        rag = _best(g[g["kernel"].isin(RAGGED_DECODE)])
        ctx = _best(g[g["path"] == "context"])
        cands = [b for b in (pad, rag, ctx) if b is not None]  # a kernel family not measured here: absent
        if not cands:
            continue
        win = min(cands, key=lambda x: x[1])
        second = sorted(t for _, t in cands)[1] if len(cands) > 1 else None
        winner = win[0] + (f" by {second / win[1]:.2f}x" if second else "")
        ratio = f"{rag[1] / pad[1]:.2f}" if pad and rag else "-"
        out.append([_shape_label(r), r["q_dist"], _other(r, ("q_dist",)), pad[0] if pad else "-",
                    _us(pad[1] if pad else None), _us(rag[1] if rag else None), ctx[0] if ctx else "-",
                    _us(ctx[1] if ctx else None), winner, ratio])
    return headers, out


def _other(r: dict, skip) -> str:
    parts = [f"{k}={r[k]}" for k, d in REALISTIC_DEFAULTS.items() if k not in skip and r[k] != d]
    return ", ".join(parts) or "-"


def axis_effect_table(ok: pd.DataFrame, axis: str) -> tuple[list[str], list[list[str]]]:
    """Per kernel: the time with the axis at a non-default value against the same case at the default
    (every other axis equal), and each side's winner."""
    base_value = REALISTIC_DEFAULTS[axis]
    headers = ["shape", axis, "other axes", "kernel", f"µs at {base_value}", "µs", "ratio", "winner at default",
               "winner here"]
    out = []
    others = [a for a in REALISTIC_DEFAULTS if a != axis]
    keys = SHAPE + others
    for key, g in ok.groupby(keys, sort=True):
        r = dict(zip(keys, key))
        base = g[g[axis] == base_value]
        if base.empty:
            continue
        base_win = _best(base)
        for value, v in g[g[axis] != base_value].groupby(axis, sort=True):
            win = _best(v)
            for kernel, kr in v.groupby("kernel", sort=True):
                b = base[base["kernel"] == kernel]
                if b.empty and kernel in RAGGED_DECODE:  # a ragged kernel's uniform counterpart is the padded one
                    b = base[base["kernel"] == PADDED_DECODE[0]]
                t = float(kr["median_us"].min())
                bt = float(b["median_us"].min()) if not b.empty else None
                out.append([_shape_label(r), str(value), _other({**r, axis: value}, (axis,)), kernel, _us(bt),
                            _us(t), f"{t / bt:.2f}x" if bt else "-", base_win[0], win[0]])
    return headers, out


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
