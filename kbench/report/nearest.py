"""Where a shape falls in a policy group's measured grid: the nearest-neighbour rule `kbench select` answers by.

Standard library only, and nothing from kbench: `kbench export --format python` copies this file verbatim into
the selector it writes, so an engine routing per shape runs this very code (one home for the rule, no second
implementation to drift). Errors are raised as ``error(message)``, BadInput inside kbench, ValueError in an
exported selector.

The rule (kbench.report.policy's docstring says it for users): per axis the nearest measured value, log2
distance in batch_size and kv_len, linear in q_len, a point exactly half-way goes to the smaller value; q_len is
matched among the q values measured at the chosen (batch_size, kv_len); a (batch_size, kv_len) with no measured
case at all takes the nearest measured case by sqrt(dlog2(bs)^2 + dlog2(kv)^2 + dq^2). Outside the measured box
a point is refused unless ``extrapolate``: then each axis is clamped to the box and the answer says so.
"""
import math
from math import isqrt

LOOKUP_AXES = ("batch_size", "kv_len", "q_len")
LOG_AXES = ("batch_size", "kv_len")


def upper_edge(a, b, axis):
    """Largest integer that is nearer to a than to b (a < b; half-way counts as a)."""
    return isqrt(a * b) if axis in LOG_AXES else (a + b) // 2


def nearest(values, x, axis):
    vals = sorted(values)
    for a, b in zip(vals, vals[1:]):
        if x <= upper_edge(a, b, axis):
            return a
    return vals[-1]


def bracket(values, x):
    """The measured values on either side of x (one value when x is measured or outside)."""
    below = [v for v in values if v <= x]
    above = [v for v in values if v >= x]
    return sorted({max(below) if below else min(values), min(above) if above else max(values)})


def distance(cell, point):
    d = 0.0
    for ax in LOOKUP_AXES:
        a, b = cell[ax], point[ax]
        d += (math.log2(a / b) if ax in LOG_AXES else a - b) ** 2
    return math.sqrt(d)


def index_cells(cells):
    """cells by (batch_size, kv_len), each with its place in cells: give it to locate() to answer many shapes of
    one group without reading every cell for each (kbench report locates every measured case of a run)."""
    index = {}
    for i, c in enumerate(cells):
        index.setdefault((c["batch_size"], c["kv_len"]), []).append((i, c))
    return index


def locate(grid, cells, batch_size, q_len, kv_len, extrapolate=False, error=ValueError, index=None):
    """The measured cell that answers for one shape, and how it was found.

    grid: {axis: [measured values]}; cells: [{batch_size, q_len, kv_len, kernel, path, ...}]; index: cells'
    index_cells() (made here when not given). Returns
    {query, used_cell, interpolated, extrapolated, clamped, method, used, neighbours, neighbours_agree}.
    """
    query = {}
    for ax, v in (("batch_size", batch_size), ("q_len", q_len), ("kv_len", kv_len)):
        try:
            query[ax] = int(v)
        except (TypeError, ValueError, OverflowError):
            query[ax] = None
        if isinstance(v, bool) or query[ax] is None or query[ax] != v:  # 16.5 is no shape; 16.0 is 16
            raise error(f"{ax} must be an integer, got {v!r}")
    for ax, v in query.items():
        if v < 1:
            raise error(f"{ax} must be >= 1, got {v}")
    if query["q_len"] > query["kv_len"]:  # the query tokens are in the KV cache: no such shape (not clamped)
        raise error(f"q_len {q_len} > kv_len {kv_len}: the query tokens are part of the KV, so q_len <= kv_len "
                    f"(--extrapolate does not change that)")
    point, clamped = dict(query), []
    for ax in LOOKUP_AXES:
        lo, hi = min(grid[ax]), max(grid[ax])
        if not lo <= point[ax] <= hi:
            clamped.append(f"{ax} {point[ax]} -> {min(max(point[ax], lo), hi)}")
            point[ax] = min(max(point[ax], lo), hi)
    if clamped and not extrapolate:
        outside = "; ".join(f"{ax} {query[ax]} not in {min(grid[ax])}..{max(grid[ax])}" for ax in LOOKUP_AXES
                            if not min(grid[ax]) <= query[ax] <= max(grid[ax]))
        raise error(f"outside the measured range ({outside}); pass --extrapolate to answer anyway")
    index = index_cells(cells) if index is None else index
    if not clamped and all(point[ax] in grid[ax] for ax in LOG_AXES):  # a measured shape: its cell, as found below
        used = next((c for _, c in index.get((point["batch_size"], point["kv_len"]), ())
                     if c["q_len"] == point["q_len"]), None)
        if used is not None:
            return {"query": query, "used_cell": used, "interpolated": False, "extrapolated": False, "clamped": [],
                    "method": "measured", "used": {ax: used[ax] for ax in LOOKUP_AXES},
                    "grid_point": all(query[ax] in grid[ax] for ax in LOOKUP_AXES), "neighbours": [],
                    "neighbours_agree": True}
    bs = nearest(grid["batch_size"], point["batch_size"], "batch_size")
    kv = nearest(grid["kv_len"], point["kv_len"], "kv_len")
    here = [c for _, c in index.get((bs, kv), [])]  # in the order of cells
    if here:
        q = nearest([c["q_len"] for c in here], point["q_len"], "q_len")
        used = next(c for c in here if c["q_len"] == q)
        how = "nearest"
    else:  # a hole in the grid: the nearest measured case overall
        used = min(cells, key=lambda c: (distance(c, point), c["batch_size"], c["kv_len"], c["q_len"]))
        how = "nearest-available"
    exact = all(used[ax] == query[ax] for ax in LOOKUP_AXES)
    # the bracketing cells: at each bracketing (batch_size, kv_len), the q values measured there on either side
    # (an adaptive sweep's grid holds q values that not every (batch_size, kv_len) measured)
    near = []
    for b in bracket(grid["batch_size"], point["batch_size"]):
        for k in bracket(grid["kv_len"], point["kv_len"]):
            at = index.get((b, k), [])
            qs = bracket([c["q_len"] for _, c in at], point["q_len"]) if at else []
            near += [(i, c) for i, c in at if c["q_len"] in qs]
    neighbours = [c for _, c in sorted(near, key=lambda ic: ic[0])]  # in the order of cells
    if not exact and used not in neighbours:
        neighbours.append(used)
    return {
        "query": query, "used_cell": used,
        "interpolated": not exact, "extrapolated": bool(clamped), "clamped": clamped,
        "method": "measured" if exact else how,
        "used": {ax: used[ax] for ax in LOOKUP_AXES},
        "grid_point": all(query[ax] in grid[ax] for ax in LOOKUP_AXES),
        "neighbours": [] if exact else [{**{ax: c[ax] for ax in LOOKUP_AXES}, "kernel": c["kernel"],
                                         "expected_speedup": c.get("expected_speedup")} for c in neighbours],
        "neighbours_agree": len({c["kernel"] for c in neighbours}) <= 1 if not exact else True,
    }


def answer(located, group_label, power):
    """kbench select's answer (the dict `kbench select --json` prints) from locate()'s result."""
    used = located["used_cell"]
    return {
        "query": located["query"], "group": group_label, "power": power,
        "kernel": used["kernel"], "path": used["path"], "expected_speedup": used.get("expected_speedup"),
        "tie": bool(used.get("tie", False)),
        **{k: located[k] for k in ("interpolated", "extrapolated", "clamped", "method", "used", "grid_point",
                                   "neighbours", "neighbours_agree")},
    }
