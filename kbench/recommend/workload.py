"""A workload: the batches a server runs its speculative steps on, each with a weight (how often it happens).

From options (`kbench recommend --batch-size 1,2,4 --q-len 4 --kv-len lognormal:4096:1.0`): the product of the
axes' weighted lists, weight = the product of the items' weights. An item is ``VALUE`` or ``VALUE@WEIGHT``;
an integer VALUE may be a range as in `kbench sweep` (``1..16``, ``512..32768*2``: each value that weight);
``lognormal:MEDIAN:SIGMA[:BINS]`` spreads an integer axis over BINS (default 16) equal-probability bins of a
lognormal (each bin's middle quantile, rounded), e.g. context lengths that vary from batch to batch. The group
axes (--kv-dist, --q-dist, ... from kbench.cases.axes, the same filters as `kbench select`) take weighted lists
of their values too: a per-request distribution inside a batch is a group the run must have measured.

From a file (`--workload FILE`): JSON Lines, one batch per line, documented by schemas/workload.schema.json:
    {"batch_size": 16, "q_len": 4, "kv_len": 4096, "weight": 3}
    {"batch_size": 4, "q_lens": [4, 4, 2, 1], "kv_lens": [900, 4100, 12000, 300], "count": 10}
    {"batch_size": 64, "q_len": 4, "kv_len": 4096, "kv_dist": "lognormal:1.0", "steps": ["verify"]}
An optional first line {"kbench_workload": 1, ...} is a header (who wrote it, from what); `kbench server-bench`
writes one per run (RUN/workload.jsonl).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from kbench import files
from kbench.cases import axes
from kbench.cases.dists import INT32_MAX
from kbench.cases.models import parse_heads
from kbench.cases.scenario import MAX_BATCH
from kbench.errors import BadInput
from kbench.values import ascii_digits, parse_float
from kbench.recommend.settings import STEPS
from kbench.report.policy import GROUP_FILTERS

WORKLOAD_VERSION = 1
SHAPE_AXES = ("batch_size", "q_len", "kv_len")
DEFAULT_BINS = 16
MAX_BATCHES = 100_000
# the largest shape a workload may name, as kbench sweep bounds its grid: a batch kbench can build, the draft-extend
# query lengths, a KV length the kernels' int32 indices hold
SHAPE_MAX = {"batch_size": MAX_BATCH, "q_len": axes.MAX_Q_LEN, "kv_len": INT32_MAX}
SHAPE_WHY = {"batch_size": "requests in one batch kbench builds", "q_len": "beyond draft-extend shapes",
             "kv_len": "the int32 indices kernels take"}
MAX_WEIGHT = 1e12  # weights are relative: a batch's weight times its time must stay a finite sum
SCHEMA_FILE = "schemas/workload.schema.json"


@dataclass(frozen=True)
class Batch:
    batch_size: int
    q_len: int
    kv_len: int
    weight: float = 1.0
    group: tuple[tuple[str, Any], ...] = ()  # group filters given (name, canonical value), sorted
    steps: tuple[str, ...] = STEPS
    label: str = ""  # where it came from: "line 3", "options"
    case: str | None = None  # a server-bench case id (the A/B check groups by it)
    notes: tuple[str, ...] = ()

    @property
    def shape(self) -> dict:
        return {"batch_size": self.batch_size, "q_len": self.q_len, "kv_len": self.kv_len}

    @property
    def filters(self) -> dict[str, Any]:
        return dict(self.group)

    def describe(self) -> str:
        extra = "".join(f" {axes.AXIS[k].flag if k in axes.AXIS else '--' + k} {v}" for k, v in self.group)
        return f"bs {self.batch_size} q {self.q_len} kv {self.kv_len}{extra}"


@dataclass
class Workload:
    batches: list[Batch]
    source: str  # "options" or the file
    header: dict = field(default_factory=dict)

    @property
    def total_weight(self) -> float:
        return sum(b.weight for b in self.batches)


# ---- values ----------------------------------------------------------------------------------------------
def _weight(text: str, where: str) -> float:
    try:
        w = parse_float(text)
    except ValueError:
        raise BadInput(f"{where}: weight {text!r} is not a number") from None
    if not math.isfinite(w) or w < 0 or w > MAX_WEIGHT:
        raise BadInput(f"{where}: weight {text!r} must be a number from 0 to {MAX_WEIGHT:g} (weights are relative)")
    return w


def shape_bounds(name: str, vals: list[int], where: str) -> None:
    """A shape axis's values: at least 1, at most SHAPE_MAX (BadInput naming the value)."""
    if min(vals) < 1:
        raise BadInput(f"{where}: {name} must be >= 1, got {min(vals)}")
    if max(vals) > SHAPE_MAX[name]:
        if name == "q_len":
            raise BadInput(f"{where}: q_len {max(vals)} is beyond draft-extend shapes (at most {axes.MAX_Q_LEN})")
        raise BadInput(f"{where}: {name} {max(vals)} is more than {SHAPE_MAX[name]:,} ({SHAPE_WHY[name]})")


def lognormal_bins(median: float, sigma: float, bins: int) -> list[tuple[int, float]]:
    """(value, weight) at the middle quantile of `bins` equal-probability bins of a lognormal, rounded to
    integers >= 1; equal values merged (their weights add)."""
    nd = NormalDist()
    out: dict[int, float] = {}
    for i in range(bins):
        v = max(1, round(math.exp(math.log(median) + sigma * nd.inv_cdf((i + 0.5) / bins))))
        out[v] = out.get(v, 0.0) + 1.0 / bins
    return sorted(out.items())


def _lognormal(name: str, spec: str, where: str) -> list[tuple[int, float]]:
    parts = spec.split(":")
    try:
        if len(parts) not in (3, 4):
            raise ValueError
        median, sigma = parse_float(parts[1]), parse_float(parts[2])
        if len(parts) == 4 and not ascii_digits(parts[3]):
            raise ValueError(parts[3])
        bins = int(parts[3]) if len(parts) == 4 else DEFAULT_BINS
    except ValueError:
        raise BadInput(f"{where}: {spec!r}: expected lognormal:MEDIAN:SIGMA[:BINS], e.g. lognormal:4096:1.0") from None
    top = SHAPE_MAX.get(name, INT32_MAX)
    if not (math.isfinite(median) and 1 <= median <= top and math.isfinite(sigma) and 0 <= sigma <= 5
            and 1 <= bins <= 1000):
        raise BadInput(f"{where}: {spec!r}: MEDIAN in 1..{top}, SIGMA in 0..5, BINS in 1..1000")
    out = lognormal_bins(median, sigma, bins)
    if name in SHAPE_MAX:
        shape_bounds(name, [v for v, _ in out], f"{where}: {spec}")
    return out


def weighted(name: str, text: str, where: str) -> list[tuple[Any, float]]:
    """One axis's weighted list: [(canonical value, weight)] (see the module docstring)."""
    text = str(text).strip()
    if not text:
        raise BadInput(f"{where}: empty value")
    is_int = name in SHAPE_AXES or (name in axes.AXIS and axes.AXIS[name].type is int)
    if is_int and text.startswith("lognormal:"):
        return _lognormal(name, text, where)
    out: dict[Any, float] = {}
    for item in text.split(","):
        value, at, w = item.strip().partition("@")
        weight = _weight(w.strip(), where) if at else 1.0
        for v in canonical(name, value.strip(), where, many=True):
            out[v] = out.get(v, 0.0) + weight
    if not any(out.values()):
        raise BadInput(f"{where}: every weight is 0")
    return list(out.items())


def canonical(name: str, value, where: str, many: bool = False, field: str | None = None) -> list:
    """A value of a shape axis or group filter as kbench spells it (select's parsing): a list of one (or, with
    many, the values a range expands to). field: how the error names it (default: the option's flag)."""
    if name in SHAPE_AXES:
        vals = axes.parse_int_axis(value, name, where)
        shape_bounds(name, vals, where)
    elif name == "heads":
        try:
            h = parse_heads(str(value))
        except BadInput as e:
            raise BadInput(f"{where}: {e}") from None
        vals = [h.text()]  # 32/8/128, or mla:128/512/64/128 (the attention kind and MLA's widths)
    elif name in axes.AXIS:
        vals = axes.AXIS[name].values(value, where, field)
    else:
        raise BadInput(f"{where}: unknown field {name!r}")
    if not many and len(vals) != 1:
        raise BadInput(f"{where}: {name}: give one value, got {value!r}")
    return vals


# ---- from options ----------------------------------------------------------------------------------------
def from_options(shape: dict[str, str | None], filters: dict[str, str | None], steps: tuple[str, ...] = STEPS) -> Workload:
    """shape: batch_size/q_len/kv_len option texts (all three needed); filters: group filter texts (None: not
    given)."""
    missing = [f"--{k.replace('_', '-')}" for k in SHAPE_AXES if not shape.get(k)]
    if missing:
        raise BadInput(f"give the workload as {', '.join(missing)} (or --workload FILE)")
    lists = [(k, weighted(k, shape[k], f"--{k.replace('_', '-')}")) for k in SHAPE_AXES]
    lists += [(k, weighted(k, v, axes.AXIS[k].flag if k in axes.AXIS else f"--{k.replace('_', '-')}"))
              for k, v in filters.items() if v is not None]
    size = math.prod(len(v) for _, v in lists)
    if size > MAX_BATCHES:
        raise BadInput(f"the options make {size} batches, more than {MAX_BATCHES}: use fewer values or BINS")
    combos: list[tuple[dict, float]] = [({}, 1.0)]
    for name, vals in lists:
        combos = [({**c, name: v}, w * wv) for c, w in combos for v, wv in vals]
    batches = []
    for c, w in combos:
        if w <= 0:
            continue
        group = tuple(sorted((k, c[k]) for k in c if k not in SHAPE_AXES))
        b = Batch(c["batch_size"], c["q_len"], c["kv_len"], w, group, steps)
        batches.append(Batch(b.batch_size, b.q_len, b.kv_len, w, group, steps, b.describe()))
    return Workload(batches, "options")


# ---- from a file -----------------------------------------------------------------------------------------
def _int_list(v, name: str, n: int, where: str) -> list[int]:
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v):
        raise BadInput(f"{where}: {name} must be a list of integers >= 1")
    if len(v) != n:
        raise BadInput(f"{where}: {name} has {len(v)} values for batch_size {n}")
    return v


def _positive_int(v, name: str, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise BadInput(f"{where}: {name} must be an integer >= 1, got {json.dumps(v)}")
    return v


LINE_KEYS = {"batch_size", "q_len", "q_lens", "kv_len", "kv_lens", "weight", "count", "steps", "case", "note",
             *GROUP_FILTERS}


def parse_line(obj, where: str) -> Batch:
    if not isinstance(obj, dict):
        raise BadInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
    extra = sorted(set(obj) - LINE_KEYS)
    if extra:
        raise BadInput(f"{where}: unknown field {extra[0]!r} (see {SCHEMA_FILE})")
    if "batch_size" not in obj:
        raise BadInput(f"{where}: missing 'batch_size'")
    bs = _positive_int(obj["batch_size"], "batch_size", where)
    notes = []
    if ("q_len" in obj) == ("q_lens" in obj):
        raise BadInput(f"{where}: give q_len or q_lens (one of them)")
    if ("kv_len" in obj) == ("kv_lens" in obj):
        raise BadInput(f"{where}: give kv_len or kv_lens (one of them)")
    if "q_lens" in obj:
        qs = _int_list(obj["q_lens"], "q_lens", bs, where)
        q = max(qs)
        if len(set(qs)) > 1 and "q_dist" not in obj:
            notes.append(f"{where}: per-request q lengths {min(qs)}..{q}: priced padded to the longest ({q}), as a "
                         "CUDA-graph engine runs them (q_dist fixed)")
    else:
        q = _positive_int(obj["q_len"], "q_len", where)
    if "kv_lens" in obj:
        kvs = _int_list(obj["kv_lens"], "kv_lens", bs, where)
        kv = max(1, round(sum(kvs) / len(kvs)))
        if len(set(kvs)) > 1 and "kv_dist" not in obj:
            notes.append(f"{where}: per-request KV lengths {min(kvs)}..{max(kvs)}: priced as the uniform batch of "
                         f"the same total KV (kv {kv}, kv_dist fixed); a decode kernel's time follows the longest "
                         "request, so give kv_dist and measure it for a closer answer")
    else:
        kv = _positive_int(obj["kv_len"], "kv_len", where)
    if q > kv:
        raise BadInput(f"{where}: q_len {q} > kv_len {kv}: the query tokens are part of the KV")
    for name, v in (("batch_size", bs), ("q_len", q), ("kv_len", max(kvs) if "kv_lens" in obj else kv)):
        canonical(name, v, where)
    if "weight" in obj and "count" in obj:
        raise BadInput(f"{where}: give weight or count, not both")
    w = obj.get("weight", obj.get("count", 1))
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or not 0 <= w <= MAX_WEIGHT:
        raise BadInput(f"{where}: {'weight' if 'weight' in obj else 'count'} must be a number from 0 to "
                       f"{MAX_WEIGHT:g}")
    if "count" in obj and not isinstance(w, int):
        raise BadInput(f"{where}: count must be an integer")
    steps = obj.get("steps", list(STEPS))
    if not isinstance(steps, list) or not steps or not all(s in STEPS for s in steps) or len(set(steps)) != len(steps):
        raise BadInput(f"{where}: steps must be a non-empty list of {', '.join(STEPS)}")
    case = obj.get("case")
    if case is not None and not isinstance(case, str):
        raise BadInput(f"{where}: case must be a string")
    if "note" in obj and not isinstance(obj["note"], str):
        raise BadInput(f"{where}: note must be a string")
    group = []
    for k in GROUP_FILTERS:
        if k in obj:
            if isinstance(obj[k], (list, dict)) or obj[k] is None:
                raise BadInput(f"{where}: {k} must be one value")
            group.append((k, canonical(k, obj[k], where, field=k)[0]))
    return Batch(bs, q, kv, float(w), tuple(sorted(group)), tuple(s for s in STEPS if s in steps),
                 where.rpartition(": ")[2] if ": " in where else where, case, tuple(notes))


def read_workload(path: str | Path) -> Workload:
    label = str(path)
    text = files.read_text(path, label, files.WORKLOAD_MAX)  # a FIFO, a device, a huge file: one line
    batches, header = [], {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{label}: line {n}"
        try:
            obj = files.loads(line, unique_keys=True)  # a key twice: which one was meant is not known
        except files.JSONProblem as e:
            raise BadInput(f"{where}: {e}" if e.content else f"{where}: not JSON ({e.in_line()})") from None
        if isinstance(obj, dict) and "kbench_workload" in obj:
            if batches or header:
                raise BadInput(f"{where}: the header line (kbench_workload) must come first, once")
            if obj["kbench_workload"] != WORKLOAD_VERSION:
                raise BadInput(f"{where}: kbench_workload {obj['kbench_workload']!r} is not {WORKLOAD_VERSION} "
                               "(another kbench version wrote it)")
            header = obj
            continue
        batches.append(parse_line(obj, where))
        if len(batches) > MAX_BATCHES:
            raise BadInput(f"{label}: more than {MAX_BATCHES} batches")
    if not batches:
        raise BadInput(f"{label}: no batch in the file")
    if not any(b.weight > 0 for b in batches):
        raise BadInput(f"{label}: every batch has weight 0")
    return Workload(batches, label, header)


# ---- the published JSON Schema of one line (schemas/workload.schema.json) ----------------------------------
def workload_schema() -> dict:
    """The JSON Schema of one line of a workload file, built from the axis table (the group filters); the
    committed schemas/workload.schema.json is this (tests/test_recommend_workload.py). Regenerate with
    ``python -m kbench.recommend.workload > schemas/workload.schema.json``."""
    from kbench.report.policy_schema import HEADS, axis_schema

    pos = {"type": "integer", "minimum": 1}
    filters = {}
    for k in GROUP_FILTERS:
        if k == "heads":
            filters[k] = {**HEADS, "description": "QO/KV/DIM heads, or mla:QO/KV_LORA_RANK/ROPE/NOPE (latent attention)"}
        else:
            filters[k] = {**axis_schema(axes.AXIS[k]), "description": "group filter (as kbench select takes it): "
                          + axes.AXIS[k].help}
            filters[k].pop("default", None)
    batch = {
        "type": "object",
        "description": "one kind of batch: its shape, which speculative steps run on it, how often",
        "required": ["batch_size"],
        "properties": {
            "batch_size": {**pos, "maximum": SHAPE_MAX["batch_size"], "description": "requests in the batch"},
            "q_len": {**pos, "maximum": axes.MAX_Q_LEN, "description": "query tokens per request of the step"},
            "q_lens": {"type": "array", "items": pos, "minItems": 1,
                       "description": "per-request query tokens (batch_size of them); priced padded to the longest"},
            "kv_len": {**pos, "maximum": SHAPE_MAX["kv_len"],
                       "description": "KV tokens per request, the step's own query tokens included"},
            "kv_lens": {"type": "array", "items": {**pos, "maximum": SHAPE_MAX["kv_len"]}, "minItems": 1,
                        "description": "per-request KV tokens (batch_size of them); priced at their mean"},
            "weight": {"type": "number", "minimum": 0, "maximum": MAX_WEIGHT,
                       "description": "relative frequency (default 1)"},
            "count": {"type": "integer", "minimum": 0, "maximum": int(MAX_WEIGHT),
                      "description": "how many times it runs (instead of weight)"},
            "steps": {"type": "array", "items": {"enum": list(STEPS)}, "minItems": 1, "uniqueItems": True,
                      "description": "the steps run on it (default both)"},
            "case": {"type": "string", "description": "the kbench server-bench case it belongs to"},
            "note": {"type": "string"},
            **filters,
        },
        "additionalProperties": False,
        "allOf": [
            {"oneOf": [{"required": ["q_len"]}, {"required": ["q_lens"]}]},
            {"oneOf": [{"required": ["kv_len"]}, {"required": ["kv_lens"]}]},
            {"not": {"required": ["weight", "count"]}},
        ],
    }
    header = {
        "type": "object",
        "description": "optional first line: who wrote the file, from what",
        "required": ["kbench_workload"],
        "properties": {"kbench_workload": {"const": WORKLOAD_VERSION}, "source": {"type": "string"},
                       "gpu": {"type": "string", "description": "the GPU it is for (recommend refuses another)"}},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kbench workload line",
        "description": "One line of a kbench workload file (JSON Lines: one JSON object per line), read by "
                       "`kbench recommend --workload` and written by `kbench server-bench` (RUN/workload.jsonl). "
                       "Generated by `python -m kbench.recommend.workload`.",
        "oneOf": [header, batch],
    }


if __name__ == "__main__":
    print(json.dumps(workload_schema(), indent=2))
