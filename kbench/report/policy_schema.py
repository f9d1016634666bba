"""The policy file (kbench.policy/2): its JSON Schema and the check every reader runs, one concept.

The schema is built from the axis table so it cannot drift from what kbench writes; it is published as
schemas/policy.schema.json (tests/test_recommend_export.py checks the file is this schema and that the policies
kbench writes validate against it):

    python -m kbench.report.publish_schema > schemas/policy.schema.json

``check()`` is what `kbench select`, `kbench export` and `kbench recommend` run on a policy they read (a file that
may be hostile): it interprets this very schema (the keywords in KEYWORDS; a test checks the schema uses no
other), then what a JSON Schema cannot say. JSON has no NaN or Infinity (Python's reader takes them), and every
string is printed or copied into an exported selector, so none may hold a character that does not print (a
newline, an escape). Per group: the grid lists each measured value once; every cell lies on the grid, one cell a
shape (q_len <= kv_len); every grid value has a cell (kbench writes the grid as the values of its cells); no two
groups have the same key. A grid point without a cell is legitimate (an adaptive run measures part of the grid;
a case where no kernel passed has no cell): select answers it from the nearest measured cell and says so.
Each failure is one BadInput line naming the file, the group, the cell and the field:
``P: group 32/8/128 bf16 p64 HND: cell bs 16 q 4 kv 4096: time_us 'x' is not a number``.
jsonschema is a test dependency only (a GPU host installs kbench with --no-deps), and its messages name no
group or cell.
"""
from __future__ import annotations

import functools
import json
import math
import re

from kbench.cases import axes
from kbench.errors import BadInput
from kbench.names import KERNEL_NAME  # the one pattern: a run's rows are checked against it too
from kbench.report.nearest import LOOKUP_AXES
from kbench.runs.winners import CONTEXT, CONTEXT_ONLY, DECODE, DECODE_ONLY, TIE

POLICY_SCHEMA = "kbench.policy/2"
CLASSIC = list(axes.CLASSIC_GROUP)
# a group's --heads spelling (kbench.cases.models.heads_text): a policy's groups and a workload's filters
HEADS = {"type": "string", "pattern": r"^(\d+/\d+/\d+|mla:\d+/\d+/\d+/\d+)$"}
PATHS = [DECODE, CONTEXT]
VERDICTS = [DECODE, CONTEXT, TIE, DECODE_ONLY, CONTEXT_ONLY]


def axis_schema(a: axes.Axis) -> dict:
    """One axis's value as JSON Schema (its type, minimum and allowed values, its help)."""
    s: dict = {"type": "integer" if a.type is int else "string", "description": a.help}
    if a.type is int and a.minimum is not None:
        s["minimum"] = a.minimum
    if a.allowed and a.spec is None:
        s["enum"] = list(a.allowed)
    if not a.required:
        s["default"] = a.default
    return s


def _int_list() -> dict:
    return {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "uniqueItems": True}


def _number_or_null() -> dict:
    return {"type": ["number", "null"]}


def policy_schema() -> dict:
    group_axes = {n: axis_schema(axes.AXIS[n]) for n in axes.GROUP_COLUMNS}
    # an MLA group's head_dim is kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3), outside GQA's sizes
    group_axes["head_dim"].pop("enum", None)
    group_axes["head_dim"]["description"] = ("head dimension: " + "/".join(map(str, axes.HEAD_DIMS)) + " for GQA; "
                                             "kv_lora_rank + qk_rope_head_dim for MLA (kbench.cases.mla)")
    rng = {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2,
           "description": "inclusive [lo, hi]"}
    cell = {
        "type": "object",
        "required": [*LOOKUP_AXES, "kernel", "path"],
        "properties": {
            **{ax: {"type": "integer", "minimum": 1} for ax in LOOKUP_AXES},
            "kernel": {"type": "string", "pattern": KERNEL_NAME,
                       "description": "the fastest kernel that passed its check"},
            "path": {"type": "string", "enum": PATHS},
            "time_us": {"type": "number", "exclusiveMinimum": 0, "description": "the winner's median time"},
            "expected_speedup": {**_number_or_null(), "exclusiveMinimum": 0,
                                 "description": "best context time / best decode time (null: a path is missing)"},
            "verdict": {"type": "string", "enum": VERDICTS, "description": "which path serves the case"},
            "tie": {"type": "boolean"},
            "kernels_us": {"type": "object", "propertyNames": {"pattern": KERNEL_NAME},
                           "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
                           "description": "every kernel that passed its check here -> its median time in us"},
            "kernels_host_us": {"type": "object", "propertyNames": {"pattern": KERNEL_NAME},
                                "additionalProperties": {"type": "number", "minimum": 0},
                                "description": "each route here -> the median of its per-step host work in us"},
            "kernels_host_iqr_us": {"type": "object", "propertyNames": {"pattern": KERNEL_NAME},
                                    "additionalProperties": {"type": "number", "minimum": 0},
                                    "description": "each route here -> the interquartile range of its host work"},
            "kernels_rel_spread": {"type": "object", "propertyNames": {"pattern": KERNEL_NAME},
                                   "additionalProperties": {"type": "number", "minimum": 0},
                                   "description": "each kernel here -> the relative half-width of the 95% CI of "
                                                  "its median"},
        },
    }
    rule = {
        "type": "object",
        "required": [*LOOKUP_AXES, "kernel", "path"],
        "properties": {
            **{ax: rng for ax in LOOKUP_AXES},
            "kernel": {"type": "string", "pattern": KERNEL_NAME}, "path": {"type": "string", "enum": PATHS},
            "expected_speedup": {**_number_or_null(), "exclusiveMinimum": 0},
            "min_speedup": {**_number_or_null(), "exclusiveMinimum": 0},
            "ties": {"type": "integer", "minimum": 0}, "cases": {"type": "integer", "minimum": 1},
            "measured": {"type": "object"},
        },
    }
    group = {
        "type": "object",
        "description": "one head config / dtype / page size / layout / realistic-batch / timing-state group; axes "
                       "added after a policy was written read as their default",
        "required": [*CLASSIC, "grid", "rules", "cells"],
        "properties": {
            "heads": {**HEADS, "description": "QO/KV/DIM, or mla:QO/KV_LORA_RANK/ROPE/NOPE for latent attention"},
            **group_axes,
            "label": {"type": "string"},
            "grid": {"type": "object", "required": list(LOOKUP_AXES),
                     "properties": {ax: _int_list() for ax in LOOKUP_AXES},
                     "description": "the measured values of each lookup axis"},
            "rules": {"type": "array", "items": rule},
            "cells": {"type": "array", "items": cell, "minItems": 1},
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kbench kernel-selection policy",
        "description": f"The policy.json `kbench report` writes ({POLICY_SCHEMA}); `kbench select`, `kbench recommend` "
                       "and `kbench export` read it. Generated by `python -m kbench.report.publish_schema`.",
        "type": "object",
        "required": ["schema", "kbench_version", "created_at", "device", "built_from", "groups"],
        "properties": {
            "schema": {"const": POLICY_SCHEMA},
            "kbench_version": {"type": "string"},
            "created_at": {"type": "string"},
            "device": {"type": "object", "required": ["name", "sm"],
                       "properties": {"name": {"type": ["string", "null"]}, "sm": {"type": ["integer", "null"]}}},
            "host": {"type": "object", "required": ["cpus", "cpu"],
                     "description": "the host CPU the routes' per-step host work was timed on",
                     "properties": {"cpus": {"type": "integer", "minimum": 1}, "cpu": {"type": "string"}}},
            "built_from": {"type": "array", "items": {
                "type": "object", "required": ["run", "cases"],
                "properties": {"run": {"type": "string"}, "path": {"type": "string"},
                               "start_time": {"type": ["string", "null"]},
                               "cases": {"type": "integer", "minimum": 0}, "adaptive": {"type": "object"}}}},
            "holdout": {"type": ["object", "null"], "properties": {
                "fraction": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "seed": {"type": "integer"}, "held_out_cases": {"type": "integer", "minimum": 1},
                "held_out": {"type": "array", "items": {"type": "string"}}}},
            "tie_rule": {"type": "string"},
            "lookup": {"type": "string"},
            "groups": {"type": "array", "items": group},
        },
    }


# ---- the check: this schema, interpreted, then what a schema cannot say ------------------------------------------
# the JSON Schema keywords check() interprets; the annotations it reads past
KEYWORDS = {"type", "const", "enum", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "pattern",
            "minItems", "maxItems", "uniqueItems", "items", "required", "properties", "propertyNames",
            "additionalProperties"}
ANNOTATIONS = {"$schema", "title", "description", "default"}
_WORDS = {"object": "an object", "array": "a list", "string": "a string", "integer": "an integer",
          "number": "a number", "boolean": "true or false", "null": "null"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Refused(Exception):
    """One problem at one place: path (the keys and indexes down to it) and what is wrong there."""

    def __init__(self, path: tuple, problem: str):
        super().__init__(problem)
        self.path, self.problem = path, problem


def _is(v, t: str) -> bool:
    """v is of JSON Schema type t (a JSON number is finite: Python's json reads NaN and Infinity)."""
    return type(v) is _PY_TYPES[t] or (t == "number" and (type(v) is int or (type(v) is float and math.isfinite(v))))


def _show(v) -> str:
    text = repr(v)  # a string's quotes and escapes: one line, whatever it holds
    return text if len(text) <= 48 else text[:45] + "..."


_PY_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float), "boolean": bool,
             "null": type(None)}
_BOUNDS = {"minimum": (lambda v, m: v < m, "below"), "exclusiveMinimum": (lambda v, m: v <= m, "not above"),
           "maximum": (lambda v, m: v > m, "above"), "exclusiveMaximum": (lambda v, m: v >= m, "not below")}


def _compile(s: dict):
    """A function that raises _Refused (its path relative to the value) at the first place a value does not
    conform to schema s: each keyword in KEYWORDS, in document order, then keyword order. Compiled once (the
    policy of a 100,000-row run has tens of thousands of cells), one function a schema node."""
    types = s.get("type")
    types = None if types is None else types if isinstance(types, list) else [types]
    py = None if types is None else frozenset(t for name in types for t in (
        _PY_TYPES[name] if isinstance(_PY_TYPES[name], tuple) else (_PY_TYPES[name],)))
    type_words = None if types is None else " or ".join(_WORDS[t] for t in types)
    has_const, const = "const" in s, s.get("const")
    enum = tuple(s["enum"]) if "enum" in s else None
    enum_words = ", ".join(map(str, s["enum"])) if "enum" in s else ""
    bounds = [(s[k], *_BOUNDS[k]) for k in _BOUNDS if k in s]
    rx = re.compile(s["pattern"]) if "pattern" in s else None
    lo, hi, unique = s.get("minItems", 0), s.get("maxItems"), s.get("uniqueItems", False)
    each = _compile(s["items"]) if "items" in s else None
    required = tuple(s.get("required", ()))
    props = {k: _compile(x) for k, x in s.get("properties", {}).items()}
    names = _compile(s["propertyNames"]) if "propertyNames" in s else None
    other = _compile(s["additionalProperties"]) if isinstance(s.get("additionalProperties"), dict) else None

    def node(v):
        t = type(v)
        if py is not None and (t not in py or (t is float and not math.isfinite(v))):
            raise _Refused((), f"{_show(v)} is not {type_words}")
        if has_const and v != const:
            raise _Refused((), f"{_show(v)} is not {const!r}")
        if enum is not None and not any(v == e and t is type(e) for e in enum):
            raise _Refused((), f"{_show(v)} is not one of {enum_words}")
        if bounds and (t is int or t is float):
            for m, beyond, side in bounds:
                if beyond(v, m):
                    raise _Refused((), f"{_show(v)} is {side} {m}")
        if rx is not None and t is str and not rx.search(v):
            raise _Refused((), f"{_show(v)} does not match {s['pattern']}")
        if t is list:
            if len(v) < lo:
                raise _Refused((), "is empty" if not v else f"has {len(v)} items, fewer than {lo}")
            if hi is not None and len(v) > hi:
                raise _Refused((), f"has {len(v)} items, more than {hi}")
            if unique:
                seen: set = set()
                for x in v:
                    key = json.dumps(x, sort_keys=True)
                    if key in seen:
                        raise _Refused((), f"lists {_show(x)} twice")
                    seen.add(key)
            if each is not None:
                for i, x in enumerate(v):
                    try:
                        each(x)
                    except _Refused as e:
                        raise _Refused((i,) + e.path, e.problem) from None
        elif t is dict:
            for key in required:
                if key not in v:
                    raise _Refused((), f"missing {key!r}")
            for key, x in v.items():
                try:
                    if names is not None:
                        names(key)
                    f = props.get(key, other)
                    if f is not None:
                        f(x)
                except _Refused as e:
                    raise _Refused((key,) + e.path, e.problem) from None
    return node


@functools.lru_cache(maxsize=1)
def _validator():
    return _compile(policy_schema())


def _where_is(policy, bad) -> tuple:
    """The path to the first value (in document order) for which bad(value) holds (only called on a refusal)."""
    todo = [((), policy)]
    while todo:
        path, v = todo.pop()
        if bad(v):
            return path
        if type(v) is dict:
            todo.extend(reversed([(path + (k,), x) for k, x in v.items()]))
        elif type(v) is list:
            todo.extend(reversed([(path + (i,), x) for i, x in enumerate(v)]))
    return ()


def _unprintable(v) -> bool:
    return (type(v) is float and not math.isfinite(v)) or (type(v) is str and not v.isprintable()) or (
        type(v) is dict and not all(type(k) is not str or k.isprintable() for k in v))


def _printable(policy) -> None:
    """JSON has no NaN or Infinity, and a string kbench prints or exports must print as one line: every key and
    value, anywhere in the file (walked without recursion: a file may nest deeply; the path is found only for
    a refusal)."""
    todo, found = [policy], False
    while todo and not found:
        v = todo.pop()
        if type(v) is dict:
            try:
                found = not all(map(str.isprintable, v))  # JSON's keys are strings
            except TypeError:  # a dict made in Python may have other keys
                found = not all(type(k) is not str or k.isprintable() for k in v)
            todo.extend(v.values())
        elif type(v) is list:
            todo.extend(v)
        elif type(v) is str:
            found = not v.isprintable()
        elif type(v) is float:
            found = not math.isfinite(v)
    if not found:
        return
    path = _where_is(policy, _unprintable)
    v = policy
    for k in path:
        v = v[k]
    if type(v) is float:
        raise _Refused(path, f"{v} is not a number (JSON has no NaN or Infinity)")
    if type(v) is dict:
        key = next(k for k in v if type(k) is str and not k.isprintable())
        raise _Refused(path, f"has a key that does not print: {_show(key)}")
    bad = next(c for c in v if not c.isprintable())
    raise _Refused(path, f"{_show(v)} holds a character that does not print ({bad!r})")


def _shape(c: dict) -> str:
    return f"cell bs {c['batch_size']} q {c['q_len']} kv {c['kv_len']}"


def _group_checks(g: dict) -> None:
    """What the schema cannot say about one group (which the schema has passed)."""
    from kbench.cases.models import parse_heads

    if "heads" in g:  # the --heads spelling and the head fields are one head config
        try:
            fields = parse_heads(g["heads"]).case_fields()
        except BadInput as e:
            raise _Refused(("heads",), f"{g['heads']!r} is not a head config ({e})") from None
        for k, v in fields.items():
            if k in g and g[k] != v:
                raise _Refused((k,), f"{g[k]!r} is not the heads' {v!r} ({g['heads']})")
    for k, a in axes.AXIS.items():  # a group axis value kbench could not have written (tree 'topk:banana')
        if k in g and a.has(axes.GROUP) and a.type is str and (a.spec is not None or a.allowed):
            try:
                spelled = a.one(g[k], "policy")
            except BadInput as e:
                raise _Refused((k,), str(e).split(": ", 2)[-1]) from None
            if spelled != g[k]:  # select compares kbench's spelling; the exported selector ignores case
                raise _Refused((k,), f"is not written as kbench writes it ({spelled!r})")
    problem = axes.fp8_query_problem([g.get("q_dtype", "dtype")], [g.get("kv_dtype")])
    if problem:
        raise _Refused(("q_dtype",), problem)
    grid, cells, seen = g["grid"], g["cells"], {}
    for j, c in enumerate(cells):
        for ax in LOOKUP_AXES:
            if c[ax] not in grid[ax]:
                shown = ", ".join(map(str, grid[ax][:8])) + (", ..." if len(grid[ax]) > 8 else "")
                raise _Refused(("cells", j, ax), f"{c[ax]} is not in the group's grid ({shown})")
        if c["q_len"] > c["kv_len"]:
            raise _Refused(("cells", j), f"q_len {c['q_len']} > kv_len {c['kv_len']}: no such shape (the query "
                                         f"tokens are part of the KV)")
        shape = (c["batch_size"], c["q_len"], c["kv_len"])
        if shape in seen:
            first = cells[seen[shape]]
            raise _Refused(("cells", j), f"a second cell for this shape (cells[{seen[shape]}] {first['kernel']}, "
                                         f"cells[{j}] {c['kernel']}): one cell a measured shape")
        seen[shape] = j
    for ax in LOOKUP_AXES:
        have = {c[ax] for c in cells}
        for v in grid[ax]:
            if v not in have:
                raise _Refused(("grid", ax), f"lists {v}, but no cell has it (the grid is the values measured)")


def _group_name(g, i: int) -> str:
    """How a message names a group: its label as kbench makes it from the group's keys, else its index."""
    try:
        if isinstance(g, dict) and all(isinstance(g[c], axes.AXIS[c].type) and not isinstance(g[c], bool)
                                       for c in axes.GROUP_COLUMNS):
            return f"group {axes.group_label(g)}"
    except (KeyError, TypeError, ValueError):
        pass
    return f"groups[{i}]"


def _field(path: tuple) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (("." if out else "") + k if _IDENT.fullmatch(k) else f"[{k!r}]")
    return out if len(out) <= 80 else out[:77] + "..."


def _place(policy, path: tuple) -> tuple[list[str], str]:
    """(['group 32/8/128 bf16 p64 HND', 'cell bs 16 q 4 kv 4096'], 'time_us') for a path into the policy."""
    parts, rest = [], path
    if len(path) >= 2 and path[0] == "groups" and isinstance(path[1], int):
        g, rest = policy["groups"][path[1]], path[2:]
        parts.append(_group_name(g, path[1]))
        if len(rest) >= 2 and rest[0] == "cells" and isinstance(rest[1], int):
            c = g["cells"][rest[1]]
            named = isinstance(c, dict) and all(_is(c.get(ax), "integer") for ax in LOOKUP_AXES)
            parts.append(_shape(c) if named else f"cells[{rest[1]}]")
            rest = rest[2:]
    return parts, _field(rest)


def check(policy: dict, where: str) -> None:
    """Refuse (BadInput, one line: WHERE: group ...: cell ...: field problem) a policy that is not what kbench
    writes; the schema version and the defaults of older files are the caller's (kbench.report.policy)."""
    try:
        _printable(policy)
        _validator()(dict(policy, schema=POLICY_SCHEMA))  # an older version reads as this one
        keys: dict[tuple, int] = {}
        if not policy["groups"]:
            raise _Refused(("groups",), "is empty (kbench writes a policy only from measured rows)")
        for i, g in enumerate(policy["groups"]):
            try:
                _group_checks(g)
            except _Refused as e:
                raise _Refused(("groups", i) + e.path, e.problem) from None
            key = tuple(g[c] for c in axes.GROUP_COLUMNS)
            if key in keys:
                raise _Refused(("groups", i), f"the same group as groups[{keys[key]}] (one group a key)")
            keys[key] = i
    except _Refused as e:
        parts, field = _place(policy, e.path)
        # 'P: group G: cell C: time_us 'x' is not a number': the field and its problem read as one phrase
        raise BadInput(": ".join([where, *parts, f"{field} {e.problem}" if field else e.problem])) from None


def schema_text() -> str:
    return json.dumps(policy_schema(), indent=2) + "\n"

