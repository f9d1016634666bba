"""The realistic-batch tables, computed on whole columns, give what the one-group-at-a-time rule of
kbench.report.realistic gives: checked against that rule written out group by group on seeded random rows
(several shapes, every realistic axis, equal medians, kernels missing from a side)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kbench.cases.case import Case
from kbench.report.realistic import (PADDED_DECODE, RAGGED_DECODE, REALISTIC_DEFAULTS, SHAPE, _other, _shape_label,
                                     _us, acceptance_table, axis_effect_table, with_defaults)


def _best(rows):
    if rows.empty:
        return None
    r = rows.loc[rows["median_us"].idxmin()]
    return str(r["kernel"]), float(r["median_us"])


def acceptance_by_group(ok):
    out = []
    keys = SHAPE + list(REALISTIC_DEFAULTS)
    for key, g in ok[ok["q_dist"] != "fixed"].groupby(keys, sort=True):
        r = dict(zip(keys, key))
        pad, rag = _best(g[g["kernel"].isin(PADDED_DECODE)]), _best(g[g["kernel"].isin(RAGGED_DECODE)])
        ctx = _best(g[g["path"] == "context"])
        cands = [b for b in (pad, rag, ctx) if b is not None]
        if not cands:
            continue
        win = min(cands, key=lambda x: x[1])
        second = sorted(t for _, t in cands)[1] if len(cands) > 1 else None
        out.append([_shape_label(r), r["q_dist"], _other(r, ("q_dist",)), pad[0] if pad else "-",
                    _us(pad[1] if pad else None), _us(rag[1] if rag else None), ctx[0] if ctx else "-",
                    _us(ctx[1] if ctx else None), win[0] + (f" by {second / win[1]:.2f}x" if second else ""),
                    f"{rag[1] / pad[1]:.2f}" if pad and rag else "-"])
    return out


def axis_effect_by_group(ok, axis):
    base_value, out = REALISTIC_DEFAULTS[axis], []
    keys = SHAPE + [a for a in REALISTIC_DEFAULTS if a != axis]
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
                if b.empty and kernel in RAGGED_DECODE:
                    b = base[base["kernel"] == PADDED_DECODE[0]]
                t = float(kr["median_us"].min())
                bt = float(b["median_us"].min()) if not b.empty else None
                out.append([_shape_label(r), str(value), _other({**r, axis: value}, (axis,)), kernel, _us(bt),
                            _us(t), f"{t / bt:.2f}x" if bt else "-", base_win[0], win[0]])
    return out


KERNELS = [("trtllm-decode", "decode"), ("decode-wrapper", "decode"), ("trtllm-decode-ragged", "decode"),
           ("fa2-prefill", "context"), ("trtllm-fmha-v2", "context")]
VALUES = {"kv_dist": ["fixed", "lognormal:1.0", "zipf:1.0"], "q_dist": ["fixed", "accept:0.7", "accept:0.5"],
          "window_left": [-1, 128], "sinks": ["off", "on"], "max_seq_len": ["tight", "context:65536"],
          "skip_softmax": ["off", "1000"]}


def random_ok_rows(seed: int, n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    recs = []
    for _ in range(n):
        axes = {k: v[0] if rng.random() < 0.6 else v[int(rng.integers(1, len(v)))] for k, v in VALUES.items()}
        c = Case(batch_size=int(rng.choice([1, 16])), q_len=int(rng.choice([2, 4])), kv_len=4096, num_qo_heads=32,
                 num_kv_heads=8, head_dim=128, power=str(rng.choice(["unthrottled", "sustained"])), **axes)
        kernel, path = KERNELS[int(rng.integers(len(KERNELS)))]
        recs.append({"kernel": kernel, "path": path, "median_us": float(rng.choice([10.0, 11.0, 12.5, 30.0])),
                     "status": "ok", "case_id": c.case_id, **c.to_dict()})
    return with_defaults(pd.DataFrame(recs))


@pytest.mark.parametrize("seed", range(2))
def test_tables_match_the_group_by_group_rule(seed):
    ok = random_ok_rows(seed)
    got = acceptance_table(ok)[1]
    assert len(got) > 10 and got == acceptance_by_group(ok)
    for axis in ("kv_dist", "window_left", "sinks", "max_seq_len", "skip_softmax", "q_dist"):
        got = axis_effect_table(ok, axis)[1]
        assert len(got) > 10 and got == axis_effect_by_group(ok, axis), axis
