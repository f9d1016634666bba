"""The kernel-selection policy: a JSON file mapping shape ranges to the kernel to use.

Schema ``kbench.policy/2`` (summarised for users in docs/file-formats.md; bump the number when a field
changes meaning). /2 added the realistic-batch axes (kv_dist, q_dist, window_left, sinks, max_seq_len) to
every group; a /1 policy is read as groups of the idealised batch (those axes at their defaults); a group key
beyond the classic seven (heads, dtypes, page size, layout) that a file lacks, e.g. power or tree written
before them, reads as its default; readers refuse any other version, and a file that is not what kbench
writes (kbench.report.policy_schema.check: the published JSON Schema, then what a schema cannot say). Written
indented by 2 with each rule and cell on a line of its own (policy_json)::

    {
      "schema": "kbench.policy/2",
      "kbench_version": "0.1.0", "created_at": "2025-...+00:00",
      "device": {"name": "NVIDIA H200", "sm": 90},
      "built_from": [{"run": "draft-extend-2025...", "path": "...", "start_time": "...", "cases": 1008}],
      "holdout": null | {"fraction": 0.2, "seed": 0, "held_out_cases": 201},
      "tie_rule": "...", "lookup": "...",             # the rules below, in words
      "groups": [{                                    # one per head config / dtype / page size / layout
        "heads": "32/8/128", "num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128,
        "attention": "gqa", "kv_lora_rank": 0, "qk_rope_head_dim": 0, "qk_nope_head_dim": 0,  # MLA: "mla", 512, ...
        "dtype": "bf16", "kv_dtype": "bf16", "page_size": 64, "kv_layout": "HND",
        "kv_dist": "fixed", "q_dist": "accept:0.7", "tree": "chain", "window_left": -1, "sinks": "off",
        "max_seq_len": "tight", "power": "unthrottled",
        "label": "32/8/128 bf16 p64 HND q_dist=accept:0.7",
        "grid": {"batch_size": [1, 2, ...], "kv_len": [512, ...], "q_len": [1, ..., 16]},  # measured values
        "rules": [{                                   # tile the measured box; bounds inclusive
          "batch_size": [lo, hi], "kv_len": [lo, hi], "q_len": [lo, hi],
          "kernel": "trtllm-decode", "path": "decode",
          "expected_speedup": 1.8,                    # geometric mean of best-context / best-decode time
          "min_speedup": 1.5,                         # over the rule's cases (null: a path is missing)
          "ties": 0,                                  # cases where decode and context tie
          "cases": 3,                                 # measured cases behind the rule
          "measured": {"batch_size": 8, "kv_len": 4096, "q_len": [1, 2, 3]}}],
        "cells": [{"batch_size": 8, "q_len": 1, "kv_len": 4096, "kernel": "...", "path": "...",
                   "time_us": 12.3, "expected_speedup": 1.9, "verdict": "decode", "tie": false,
                   "kernels_us": {"trtllm-decode": 12.3, "fa2-prefill": 23.4}}]  # every ok kernel's median
      }]
    }

``kernels_us`` (added within /2: optional, a reader that does not know it is unaffected) holds the median of every
kernel that passed its check at the case; `kbench recommend` prices engine settings with it. The published JSON
Schema of the whole file is schemas/policy.schema.json. The grid lists the values of its cells' axes; a grid
point without a cell (a case no kernel passed, a point an adaptive run did not measure) is answered from the
nearest measured cell, and the answer says so (``interpolated``, ``grid_point``).

Kernel choice per measured case: the fastest ok kernel (either path; a tie keeps the faster median and is
flagged). ``expected_speedup`` is always decode versus context (> 1: the decode path is faster), whichever
kernel is chosen.

Lookup (``lookup()``) between grid points uses the nearest measured neighbour, per axis: log2 distance in
batch_size and kv_len, linear in q_len; a point exactly half-way goes to the smaller value. q_len is matched
among the q values measured at the chosen (batch_size, kv_len). If that (batch_size, kv_len) has no measured
case at all, the nearest measured case by sqrt(dlog2(bs)^2 + dlog2(kv)^2 + dq^2) is used. The rules are the
same partition written as ranges: every integer point of the measured box lies in exactly one rule, and
that rule's kernel is what lookup answers. A point outside the measured box is refused (BadInput, exit 2)
unless ``extrapolate``: then each axis is clamped to the box and the answer says so.
"""
from __future__ import annotations

import json
import math
import re
import secrets
from pathlib import Path

import pandas as pd

from kbench import __version__, files
from kbench.frames import itertuples

from kbench.runs import atomic

from kbench.cases import axes
from kbench.errors import BadInput
from kbench.cases.models import heads_text, parse_heads
from kbench.report.nearest import LOG_AXES, LOOKUP_AXES, answer, index_cells, locate, nearest, upper_edge  # noqa: F401 (re-exported)
from kbench.report.policy_schema import CLASSIC, POLICY_SCHEMA, check
from kbench.report.runs import GROUP_COLUMNS, RunSet, combine, group_label, nothing_to_report
from kbench.runs.store import as_run_list, now_iso
from kbench.runs.winners import TIE, case_winners, measured

# older schemas still read, and how: /1 predates the realistic-batch axes, so its groups are idealised batches
READ_AS_CURRENT = {"kbench.policy/1": {a.name: a.default for a in axes.axes_with(axes.REALISTIC)}}
REALISTIC_AXES = axes.names(axes.REALISTIC)
# the group filters of select beside heads/dtype/page/layout: the realistic-batch axes and the timing state
FILTER_AXES = REALISTIC_AXES + ["power"]
CLASSIC_FILTERS = ("heads", "dtype", "kv_dtype", "page_size", "kv_layout")  # select's filters beside FILTER_AXES
GROUP_FILTERS = CLASSIC_FILTERS + tuple(FILTER_AXES)  # every filter select_group takes
# group keys a policy written before them lacks, read as their default (power: every older run was unthrottled;
# tree: every older run verified chains; the attention kind and MLA's fields: every older policy is GQA)
LATER_KEYS = {"power": axes.AXIS["power"].default, "tree": axes.AXIS["tree"].default,
              **{a.name: a.default for a in axes.axes_with(axes.HEADS) if not a.required}}
TIE_RULE = ("two kernels tie when |m1 - m2| <= h1 + h2, h = median_us * rel_spread (95% CI half-width of the "
            "median), else iqr_us / 2")
LOOKUP_RULE = ("nearest measured neighbour per axis: log2 distance in batch_size and kv_len, linear in q_len, "
               "half-way goes to the smaller value; outside the measured box only with extrapolate (clamped)")


# ---- the ranges the nearest-neighbour rule implies (the rule itself: kbench.report.nearest) ----------------
def edges(values: list[int], axis: str, lo: int | None = None, hi: int | None = None) -> dict[int, tuple[int, int]]:
    """value -> inclusive integer range of points nearest to it, within [lo, hi] (default: the values' span)."""
    vals = sorted(set(values))
    lo = vals[0] if lo is None else lo
    hi = vals[-1] if hi is None else hi
    out = {}
    for i, v in enumerate(vals):
        start = lo if i == 0 else upper_edge(vals[i - 1], v, axis) + 1
        end = hi if i == len(vals) - 1 else upper_edge(v, vals[i + 1], axis)
        out[v] = (start, end)
    return out


# ---- build -----------------------------------------------------------------------------------------------
def _f(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _rules(cells: list[dict], grid: dict[str, list[int]]) -> list[dict]:
    bs_edges, kv_edges = edges(grid["batch_size"], "batch_size"), edges(grid["kv_len"], "kv_len")
    qmin, qmax = min(grid["q_len"]), max(grid["q_len"])
    by_point: dict[tuple[int, int], list[dict]] = {}
    for c in cells:
        by_point.setdefault((c["batch_size"], c["kv_len"]), []).append(c)
    rules = []
    for (bs, kv), cs in sorted(by_point.items()):
        cs = sorted(cs, key=lambda c: c["q_len"])
        q_edges = edges([c["q_len"] for c in cs], "q_len", qmin, qmax)
        runs: list[list[dict]] = []
        for c in cs:
            if runs and runs[-1][-1]["kernel"] == c["kernel"]:
                runs[-1].append(c)
            else:
                runs.append([c])
        for run in runs:
            sp = [c["expected_speedup"] for c in run]
            known = [s for s in sp if s is not None]
            rules.append({
                "batch_size": list(bs_edges[bs]), "kv_len": list(kv_edges[kv]),
                "q_len": [q_edges[run[0]["q_len"]][0], q_edges[run[-1]["q_len"]][1]],
                "kernel": run[0]["kernel"], "path": run[0]["path"],
                "expected_speedup": _geomean(known) if len(known) == len(sp) else None,
                "min_speedup": min(known) if known and len(known) == len(sp) else None,
                "ties": sum(c["tie"] for c in run), "cases": len(run),
                "measured": {"batch_size": bs, "kv_len": kv, "q_len": [c["q_len"] for c in run]},
            })
    return rules


def kernel_times(measured_rows: pd.DataFrame | None) -> dict[str, dict[str, float]]:
    """case_id -> {kernel: median_us} of the rows that may compete (kbench.runs.winners.measured)."""
    return _per_case(measured_rows, "median_us")


# what a cell keeps besides kernels_us, when the rows have it: the per-step host work of the routes
# (kbench.kernels.routes), its interquartile range, and every kernel's relative spread of the median
CELL_EXTRAS = {"kernels_host_us": "host_us", "kernels_host_iqr_us": "host_iqr_us", "kernels_rel_spread": "rel_spread"}


def _per_case(rows: pd.DataFrame | None, column: str) -> dict[str, dict[str, float]]:
    if rows is None or rows.empty or column not in rows:
        return {}
    out: dict[str, dict[str, float]] = {}
    values = pd.to_numeric(rows[column], errors="coerce")
    have = values.notna().to_numpy()
    if not have.all():  # the rows without a value left out at once (the routes' columns are empty in most runs)
        rows, values = rows[have], values[have]
    for cid, kernel, v in zip(rows["case_id"].tolist(), rows["kernel"].tolist(), values.tolist()):
        if v == v:  # not NaN
            out.setdefault(str(cid), {})[str(kernel)] = round(float(v), 4)
    return out


def route_host(measured_rows: pd.DataFrame | None) -> dict:
    """{"cpus", "cpu"} of the host the routes' host work was timed on ({} when no row has it)."""
    if measured_rows is None or "host_cpus" not in measured_rows:
        return {}
    have = measured_rows[pd.to_numeric(measured_rows["host_cpus"], errors="coerce") > 0]
    if have.empty:
        return {}
    first = have.iloc[0]
    return {"cpus": int(first["host_cpus"]), "cpu": str(first.get("host_cpu") or "")}


def cell_extras(measured_rows: pd.DataFrame | None) -> dict[str, dict[str, dict[str, float]]]:
    """field -> case_id -> {kernel: value} for CELL_EXTRAS (only what the rows hold)."""
    if measured_rows is None or measured_rows.empty:
        return {}
    rows = measured_rows
    if "host_p25_us" in rows and "host_p75_us" in rows:
        rows = rows.assign(host_iqr_us=pd.to_numeric(rows["host_p75_us"], errors="coerce")
                           - pd.to_numeric(rows["host_p25_us"], errors="coerce"))
    return {field: got for field, column in CELL_EXTRAS.items() if (got := _per_case(rows, column))}


def build_policy(cases: pd.DataFrame, device: dict, built_from: list[dict], holdout: dict | None = None,
                 times: pd.DataFrame | None = None) -> dict:
    """cases: case_winners() output (ok rows only, one line per case). times: the measured rows
    (kbench.runs.winners.measured); each cell then keeps every kernel's median (``kernels_us``), which
    `kbench recommend` prices engine settings with."""
    groups = []
    per_case = kernel_times(times)
    extras = cell_extras(times)
    if not cases.empty:
        for key, g in cases.groupby(GROUP_COLUMNS, sort=True):
            meta = {c: axes.AXIS[c].type(v) for c, v in zip(GROUP_COLUMNS, key)}
            cells = [{"batch_size": int(r.batch_size), "q_len": int(r.q_len), "kv_len": int(r.kv_len),
                      "kernel": str(r.winner), "path": str(r.winner_path), "time_us": float(r.winner_us),
                      "expected_speedup": _f(r.decode_speedup), "verdict": str(r.path_verdict),
                      "tie": r.path_verdict == TIE,
                      **({"kernels_us": per_case[r.case_id]} if r.case_id in per_case else {}),
                      **{f: by_case[r.case_id] for f, by_case in extras.items() if r.case_id in by_case}}
                     for r in itertuples(g.sort_values(["batch_size", "kv_len", "q_len"]))]
            grid = {ax: sorted({c[ax] for c in cells}) for ax in LOOKUP_AXES}
            groups.append({"heads": heads_text(meta), **meta,
                           "label": group_label(meta), "grid": grid, "rules": _rules(cells, grid),
                           "cells": cells})
    host = route_host(times)
    return {"schema": POLICY_SCHEMA, "kbench_version": __version__, "created_at": now_iso(),
            "device": {"name": device.get("name"), "sm": device.get("sm")}, **({"host": host} if host else {}),
            "built_from": built_from,
            "holdout": holdout, "tie_rule": TIE_RULE, "lookup": LOOKUP_RULE, "groups": groups}


# ---- save / load -----------------------------------------------------------------------------------------
REPORT_JSON = "report.json"  # what a report folder's files are (kbench.report.build writes it last)


def policy_of(rs: RunSet, cases: pd.DataFrame | None = None) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """The policy `kbench report` writes for a set of runs, with the case winners and measured rows it came from;
    BadInput saying why when no kernel row is ok (e.g. a CPU run). cases: case_winners(rs.rows), where the caller
    has them."""
    cases = case_winners(rs.rows) if cases is None else cases
    if cases.empty:
        raise BadInput(nothing_to_report(rs.rows, rs.device))
    ok = measured(rs.rows)
    return build_policy(cases, rs.device, rs.sources(), times=ok), cases, ok


def policy_from(paths: list[str | Path] | str | Path) -> tuple[dict, RunSet | None]:
    """A policy and the runs it was built from: one policy file (from `kbench report`; runs None), a report folder
    (its policy.json), or one or more run folders, whose policy is built as `kbench report` builds it (a list, or
    one path)."""
    paths = as_run_list(paths)
    if not paths:
        raise BadInput("give a run folder or a policy file")
    one = Path(paths[0])
    if len(paths) == 1 and not one.exists():  # said as the command that reads that kind says it
        raise BadInput(f"{one}: no such policy file" if one.suffix == ".json" else f"{one}: no such run folder")
    if len(paths) == 1 and one.is_dir() and (one / "policy.json").is_file() and not (one / "manifest.json").exists():
        one = one / "policy.json"  # a report folder
    if len(paths) == 1 and one.is_file():
        return load_policy(one), None
    rs = combine(list(paths))
    return policy_of(rs)[0], rs


def save_policy(policy: dict, path: str | Path) -> Path:
    p = Path(path)
    atomic.write_text(p, policy_json(policy))
    return p


def policy_json(policy: dict) -> str:
    """The policy as JSON indented by 2, each of a group's rules and cells on a line of its own: a line per
    decision, which greps and diffs as one, and written by json's C encoder (indent=2 throughout took seconds for
    the 37,000 cells of a 300,000-row run, and twice the bytes)."""
    lines: list[str] = []
    mark = f"@line-{secrets.token_hex(8)}-"  # a placeholder json.dumps writes as it is, in no name a run may have
    skeleton = dict(policy)
    if isinstance(policy.get("groups"), list):
        skeleton["groups"] = []
        for g in policy["groups"]:
            g = dict(g) if isinstance(g, dict) else g
            for part in ("rules", "cells"):
                if isinstance(g, dict) and isinstance(g.get(part), list):
                    g[part] = [f"{mark}{len(lines) + i}@" for i in range(len(g[part]))]
                    lines += [json.dumps(x) for x in policy["groups"][len(skeleton["groups"])][part]]
            skeleton["groups"].append(g)
    text = json.dumps(skeleton, indent=2)
    return re.sub(f'"{mark}(\\d+)@"', lambda m: lines[int(m.group(1))], text) + "\n"


def validate_policy(policy, where: str = "policy") -> dict:
    """The policy, read as the current version (an older file's missing keys at their defaults), once it passes
    kbench.report.policy_schema.check (the published JSON Schema, then what a schema cannot say); else BadInput."""
    if not isinstance(policy, dict):
        raise BadInput(f"{where}: expected a JSON object")
    schema = policy.get("schema")
    if isinstance(schema, str) and schema in READ_AS_CURRENT and isinstance(policy.get("groups"), list):
        for g in policy["groups"]:
            if isinstance(g, dict):
                for k, v in READ_AS_CURRENT[schema].items():
                    g.setdefault(k, v)
    elif schema != POLICY_SCHEMA:
        raise BadInput(f"{where}: schema {schema!r} is not {POLICY_SCHEMA!r} (not a kbench policy, or another version)")
    for g in policy.get("groups") if isinstance(policy.get("groups"), list) else ():
        if isinstance(g, dict):  # a group axis beyond the classic key that a file lacks reads as its default
            for c in GROUP_COLUMNS:
                if c not in CLASSIC:
                    g.setdefault(c, axes.AXIS[c].default)
    check(policy, where)
    return policy


def load_policy(path: str | Path) -> dict:
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise BadInput(f"{path}: no such policy file")
    data = files.read_json(p, str(path), files.POLICY_MAX)
    _check_written_with(p)
    return validate_policy(data, str(path))


def _check_written_with(p: Path) -> None:
    """A policy beside the report.json of the report that wrote it must be the file that report recorded (a
    folder mixing two reports is refused). A policy copied elsewhere, or from before report.json, is not checked."""
    try:
        rec = files.read_json(p.parent / REPORT_JSON, max_bytes=files.MANIFEST_MAX)
    except BadInput:
        return
    recorded = rec.get("files") if isinstance(rec, dict) else None
    if isinstance(recorded, dict) and p.name in recorded:
        files.check_records(p.parent, {p.name: recorded[p.name]}, str(p.parent),
                            "rebuild it with kbench report (or, to use a policy edited by hand, copy it out of "
                            "that folder)")


# ---- lookup ----------------------------------------------------------------------------------------------
def select_group(policy: dict, heads: str | None = None, dtype: str | None = None, kv_dtype: str | None = None,
                 page_size: int | None = None, kv_layout: str | None = None, **realistic) -> dict:
    """The one group matching the filters; realistic: kv_dist, q_dist, window_left, sinks, max_seq_len and
    power, the timing state (any accepted spelling, e.g. lognormal:1 for lognormal:1.0)."""
    given = {"heads": heads, "dtype": dtype, "kv_dtype": kv_dtype, "page_size": page_size, "kv_layout": kv_layout,
             **realistic}
    for k, v in given.items():  # an empty value is not "any" (that is the option left out)
        if isinstance(v, str) and not v.strip():
            flag = axes.AXIS[k].flag if k in axes.AXIS else "--" + k.replace("_", "-")
            raise BadInput(f"select: {flag}: an empty value; give one value, or leave {flag} out to match any")
    want = {}
    if heads is not None:  # every head axis, the attention kind too: a GQA group never answers an MLA shape, nor the reverse
        want.update(parse_heads(heads).case_fields())
    for k, v in given.items():  # each in kbench's spelling, as a group stores it: BF16, hnd and "64" match too
        if k == "heads":
            continue
        if k not in GROUP_FILTERS:
            raise BadInput(f"select: unknown filter {k!r} (filters: {', '.join(GROUP_FILTERS)})")
        if v is not None:
            want[k] = axes.AXIS[k].one(v, "select")
    # a key a group lacks reads as its default (LATER_KEYS), as validate_policy reads a file written before it
    groups = [g for g in policy["groups"] if all(g.get(k, LATER_KEYS.get(k)) == v for k, v in want.items())]
    have = "; ".join(g.get("label") or group_label(g) for g in policy["groups"]) or "none"
    if not groups:
        # the query as the options that made it (select's own spelling), not a Python dict
        asked = [f"--heads {heads}"] if heads else []
        asked += [f"--{k.replace('_', '-')} {v}" for k, v in (("dtype", dtype), ("kv_dtype", kv_dtype),
                                                               ("page_size", page_size), ("kv_layout", kv_layout))
                  if v is not None]
        asked += [f"{axes.AXIS[k].flag} {v}" for k, v in realistic.items() if v is not None]
        raise BadInput(f"no measured group matches {' '.join(asked) or 'the query'} (policy has: {have})")
    if len(groups) > 1:  # name the filters that tell the matching groups apart, with each group's values
        def value(g, k):
            return heads_text(g) if k == "heads" else g.get(k, LATER_KEYS.get(k))

        differ = [k for k in GROUP_FILTERS if len({str(value(g, k)) for g in groups}) > 1]
        flag = {k: "--heads" if k == "heads" else axes.AXIS[k].flag for k in differ}
        each = "; ".join(" ".join(f"{flag[k]} {value(g, k)}" for k in differ) for g in groups)
        raise BadInput(f"{len(groups)} groups match; narrow with {'/'.join(flag.values())}: {each}")
    return groups[0]


def as_policy(policy) -> dict:
    """The policy a Python caller means: a policy dict as given (one with groups: load_policy's, policy_from's
    first item, a report's .policy), or the policy of a path as `kbench select` reads it (policy_from: a policy
    file, a report folder, one or more run folders); BadInput for anything else."""
    if isinstance(policy, dict):
        if not isinstance(policy.get("groups"), list):
            raise BadInput("not a kbench policy (no groups): give a policy file, report folder or run folder, or "
                           "the dict load_policy(FILE) returns")
        return policy
    if isinstance(policy, (str, Path)) or (isinstance(policy, list) and all(isinstance(p, (str, Path)) for p in policy)):
        return policy_from(policy)[0]
    raise BadInput(f"expected a policy (a dict, or the path of a policy file, report folder or run folder), got "
                   f"{type(policy).__name__}" + (" (policy_from returns (policy, runs): take its first item)"
                                                 if isinstance(policy, tuple) else ""))


class Lookup:
    """lookup() for many shapes of one policy: each group is selected, and its cells indexed, once (the report
    looks up every measured case: 12,000 at 100,000 rows, each of which selected its group anew and read every
    cell of it three times)."""

    def __init__(self, policy: dict | str | Path):
        self.policy = as_policy(policy)
        self._groups: dict[tuple, tuple[dict, dict] | BadInput] = {}

    def __call__(self, batch_size: int, q_len: int, kv_len: int, extrapolate: bool = False, **group) -> dict:
        key = tuple(sorted(group.items()))
        if key not in self._groups:
            try:
                g = select_group(self.policy, **group)
                self._groups[key] = (g, index_cells(g["cells"]))
            except BadInput as e:  # the same answer for every shape with these filters
                self._groups[key] = e
        found = self._groups[key]
        if isinstance(found, BadInput):
            raise BadInput(str(found))
        g, index = found
        where = locate(g["grid"], g["cells"], batch_size, q_len, kv_len, extrapolate, error=BadInput, index=index)
        return answer(where, g.get("label") or group_label(g), g.get("power", axes.AXIS["power"].default))


def lookup(policy: dict | str | Path, batch_size: int, q_len: int, kv_len: int, extrapolate: bool = False,
           **group) -> dict:
    """The kernel for one shape, `kbench select` from Python. policy: a dict, or a policy file, report folder or
    run folder (as_policy). group: heads='32/8/128', dtype, kv_dtype, page_size, kv_layout and the
    realistic-batch axes as filters (see select_group). A dict is read as it is (validate_policy checks one the
    way a file is checked); one whose shape is not a policy's is BadInput, as a wrong-typed filter is."""
    bad = {k: v for k, v in group.items() if v is not None and (isinstance(v, bool) or not isinstance(
        v, str if k == "heads" else (str, int)))}
    if bad:
        k, v = next(iter(bad.items()))
        raise BadInput(f"--{k.replace('_', '-')} {v!r}: a filter is one value, written as select takes it")
    try:
        return Lookup(policy)(batch_size, q_len, kv_len, extrapolate, **group)
    except (KeyError, TypeError, AttributeError, IndexError) as e:  # a hand-made dict: not what kbench writes
        raise BadInput(f"not a valid kbench policy ({type(e).__name__}: {e}); check a dict with "
                       f"validate_policy(policy), as a policy file is checked") from None


def rule_for(group: dict, batch_size: int, q_len: int, kv_len: int) -> dict | None:
    """The rule whose ranges hold the point (None in a hole of the grid)."""
    pt = {"batch_size": batch_size, "q_len": q_len, "kv_len": kv_len}
    for r in group["rules"]:
        if all(r[ax][0] <= pt[ax] <= r[ax][1] for ax in LOOKUP_AXES):
            return r
    return None
