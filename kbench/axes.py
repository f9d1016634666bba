"""Parsing of grid axes: lists, inclusive ranges and geometric ranges, from TOML or the command line.

Accepted forms (the same in a scenario file and on the command line):
  [1, 2, 4]  |  "1,2,4"  |  "1..16" (step 1)  |  "1..16:3" (step 3)  |  "512..32768*2" (times 2)
  |  {start = 1, stop = 16, step = 1}  |  {start = 512, stop = 32768, factor = 2}
"""
from __future__ import annotations

import re

from kbench.errors import BadInput

_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*(?:([:*])\s*(\d+))?\s*$")
MAX_AXIS_VALUES = 10_000


def _int(value, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadInput(f"{where}: {field}: expected an integer, got {value!r}")
    if isinstance(value, str):
        s = value.strip()
        if not re.fullmatch(r"-?\d+", s):
            raise BadInput(f"{where}: {field}: expected an integer, got {value!r}")
        return int(s)
    return value


def _expand_range(start: int, stop: int, op: str | None, n: int | None, field: str, where: str) -> list[int]:
    if stop < start:
        raise BadInput(f"{where}: {field}: range {start}..{stop} is empty (stop < start)")
    if op == "*":
        if n is None or n < 2:
            raise BadInput(f"{where}: {field}: geometric factor must be >= 2")
        if start < 1:
            raise BadInput(f"{where}: {field}: geometric range must start at >= 1")
        out, v = [], start
        while v <= stop:
            out.append(v)
            v *= n
        return out
    step = 1 if n is None else n
    if step < 1:
        raise BadInput(f"{where}: {field}: step must be >= 1")
    if (stop - start) // step + 1 > MAX_AXIS_VALUES:
        raise BadInput(f"{where}: {field}: range has more than {MAX_AXIS_VALUES} values")
    return list(range(start, stop + 1, step))


def parse_int_axis(value, field: str, where: str) -> list[int]:
    """Turn any accepted axis form into a sorted, de-duplicated list of ints."""
    if isinstance(value, dict):
        unknown = set(value) - {"start", "stop", "step", "factor"}
        if unknown:
            raise BadInput(f"{where}: {field}: unknown range key {sorted(unknown)[0]!r} (use start, stop, step or factor)")
        if "start" not in value or "stop" not in value:
            raise BadInput(f"{where}: {field}: a range table needs start and stop")
        if "step" in value and "factor" in value:
            raise BadInput(f"{where}: {field}: give step or factor, not both")
        start, stop = _int(value["start"], field, where), _int(value["stop"], field, where)
        if "factor" in value:
            vals = _expand_range(start, stop, "*", _int(value["factor"], field, where), field, where)
        else:
            vals = _expand_range(start, stop, ":", _int(value.get("step", 1), field, where), field, where)
    elif isinstance(value, list):
        if not value:
            raise BadInput(f"{where}: {field}: empty list")
        vals = []
        for v in value:
            vals.extend(parse_int_axis(v, field, where) if isinstance(v, str) else [_int(v, field, where)])
    elif isinstance(value, str):
        vals = []
        parts = [p for p in value.split(",")]
        if not any(p.strip() for p in parts):
            raise BadInput(f"{where}: {field}: empty value")
        for part in parts:
            m = _RANGE.match(part)
            if m:
                op = m.group(3)
                vals.extend(
                    _expand_range(int(m.group(1)), int(m.group(2)), op, int(m.group(4)) if op else None, field, where)
                )
            else:
                vals.append(_int(part, field, where))
    else:
        vals = [_int(value, field, where)]
    if len(vals) > MAX_AXIS_VALUES:
        raise BadInput(f"{where}: {field}: more than {MAX_AXIS_VALUES} values")
    return sorted(set(vals))


def parse_str_axis(value, field: str, where: str, allowed: tuple[str, ...]) -> list[str]:
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise BadInput(f"{where}: {field}: expected a name or a list of names, got {value!r}")
    if not items:
        raise BadInput(f"{where}: {field}: empty value")
    lookup = {a.lower(): a for a in allowed}
    out = []
    for it in items:
        if it.lower() not in lookup:
            raise BadInput(f"{where}: {field}: {it!r} is not one of {', '.join(allowed)}")
        canon = lookup[it.lower()]
        if canon not in out:
            out.append(canon)
    return out
