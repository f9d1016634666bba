"""locate() reads a group's cells through an index by (batch, kv_len) and Lookup selects and indexes each group
once (the report looks up every measured case); they answer exactly what the rule answers scanning every cell,
written out here: on a hand-made policy with holes in the grid, points between, on and outside the grid,
shuffled cells."""
from __future__ import annotations

import random

import pytest

from kbench.errors import BadInput
from kbench.report.nearest import LOOKUP_AXES, bracket, distance, index_cells, locate, nearest
from kbench.report.policy import Lookup, group_label, lookup, select_group


def scan_every_cell(policy, batch_size, q_len, kv_len, extrapolate=False, **group):
    g = select_group(policy, **group)
    grid = g["grid"]
    query = {"batch_size": int(batch_size), "q_len": int(q_len), "kv_len": int(kv_len)}
    if query["q_len"] > query["kv_len"]:
        raise BadInput("q_len > kv_len")
    point, clamped = dict(query), []
    for ax in LOOKUP_AXES:
        lo, hi = min(grid[ax]), max(grid[ax])
        if not lo <= point[ax] <= hi:
            clamped.append(f"{ax} {point[ax]} -> {min(max(point[ax], lo), hi)}")
            point[ax] = min(max(point[ax], lo), hi)
    if clamped and not extrapolate:
        raise BadInput("outside")
    cells = g["cells"]
    bs, kv = nearest(grid["batch_size"], point["batch_size"], "batch_size"), nearest(grid["kv_len"], point["kv_len"], "kv_len")
    here = [c for c in cells if c["batch_size"] == bs and c["kv_len"] == kv]
    if here:
        q = nearest([c["q_len"] for c in here], point["q_len"], "q_len")
        used, how = next(c for c in here if c["q_len"] == q), "nearest"
    else:
        used = min(cells, key=lambda c: (distance(c, point), c["batch_size"], c["kv_len"], c["q_len"]))
        how = "nearest-available"
    exact = all(used[ax] == query[ax] for ax in LOOKUP_AXES)
    brackets = {ax: bracket(grid[ax], point[ax]) for ax in ("batch_size", "kv_len")}
    # q_len bracketed among the q values measured at the cell's own (batch_size, kv_len)
    measured_q = {}
    for c in cells:
        measured_q.setdefault((c["batch_size"], c["kv_len"]), []).append(c["q_len"])
    neighbours = [c for c in cells if c["batch_size"] in brackets["batch_size"] and c["kv_len"] in brackets["kv_len"]
                  and c["q_len"] in bracket(measured_q[(c["batch_size"], c["kv_len"])], point["q_len"])]
    if not exact and used not in neighbours:
        neighbours.append(used)
    return {"query": query, "group": g.get("label") or group_label(g), "power": g.get("power", "unthrottled"),
            "kernel": used["kernel"], "path": used["path"], "expected_speedup": used.get("expected_speedup"),
            "tie": bool(used.get("tie", False)), "interpolated": not exact, "extrapolated": bool(clamped),
            "clamped": clamped, "method": "measured" if exact else how,
            "used": {ax: used[ax] for ax in LOOKUP_AXES},
            "grid_point": all(query[ax] in grid[ax] for ax in LOOKUP_AXES),
            "neighbours": [] if exact else [{**{ax: c[ax] for ax in LOOKUP_AXES}, "kernel": c["kernel"],
                                             "expected_speedup": c.get("expected_speedup")} for c in neighbours],
            "neighbours_agree": len({c["kernel"] for c in neighbours}) <= 1 if not exact else True}


def holey_policy(seed=0):
    rng = random.Random(seed)
    cells = []
    for bs in (1, 4, 16, 64):
        for kv in (512, 4096, 32768):
            if (bs, kv) in ((4, 4096), (64, 512)):
                continue  # holes: no case at all at these (batch, kv)
            for q in (1, 2, 3, 5, 8, 13, 16):
                if rng.random() < 0.2:
                    continue
                k = rng.choice(["trtllm-decode", "fa2-prefill", "decode-wrapper"])
                cells.append({"batch_size": bs, "q_len": q, "kv_len": kv, "kernel": k,
                              "path": "context" if k == "fa2-prefill" else "decode",
                              "expected_speedup": rng.choice([None, 0.8, 1.2]), "tie": rng.random() < 0.1})
    rng.shuffle(cells)  # a policy file may list its cells in any order
    grid = {ax: sorted({c[ax] for c in cells}) for ax in LOOKUP_AXES}
    group = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "dtype": "bf16", "kv_dtype": "bf16",
             "page_size": 64, "kv_layout": "HND", "kv_dist": "fixed", "q_dist": "fixed", "window_left": -1,
             "sinks": "off", "max_seq_len": "tight", "q_dtype": "dtype", "skip_softmax": "off",
             "power": "unthrottled", "label": "32/8/128 bf16 p64 HND", "grid": grid, "rules": [], "cells": cells}
    return {"groups": [group, {**group, "num_kv_heads": 4, "label": "32/4/128 bf16 p64 HND"}]}


@pytest.mark.parametrize("seed", range(3))
def test_indexed_lookup_answers_as_scanning_every_cell(seed):
    pol, many = holey_policy(seed), None
    many = Lookup(pol)
    points = [(bs, q, kv) for bs in (1, 2, 3, 4, 5, 9, 16, 40, 64, 100) for q in (1, 2, 4, 7, 8, 12, 16, 20)
              for kv in (300, 512, 1000, 2048, 4096, 9000, 32768, 40000)]
    asked = 0
    for bs, q, kv in points:
        for extrapolate in (False, True):
            try:
                want = scan_every_cell(pol, bs, q, kv, extrapolate, heads="32/8/128")
            except BadInput:
                with pytest.raises(BadInput):
                    many(bs, q, kv, extrapolate, heads="32/8/128")
                continue
            asked += 1
            assert many(bs, q, kv, extrapolate, heads="32/8/128") == want
            assert lookup(pol, bs, q, kv, extrapolate, heads="32/8/128") == want
            g = pol["groups"][0]
            found = locate(g["grid"], g["cells"], bs, q, kv, extrapolate, index=index_cells(g["cells"]))
            assert {k: v for k, v in found.items() if k != "used_cell"} == \
                {k: v for k, v in want.items() if k not in ("group", "power", "kernel", "path", "expected_speedup", "tie")}
    assert asked > 500


def test_a_group_that_is_not_there_is_refused_each_time():
    many = Lookup(holey_policy())
    for _ in range(2):  # the refusal is remembered, and said again
        with pytest.raises(BadInput, match="no measured group"):
            many(1, 1, 512, heads="64/8/128")
    with pytest.raises(BadInput, match="2 groups match"):
        many(1, 1, 512)
