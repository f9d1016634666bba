"""The case axes, declared once, and the parsing of their values.

``AXES`` is the one table of what a case is: each `Axis` gives its name, type, default, allowed values or
range check, CLI flag and help, its part of the case id and its roles. Everything that lists the axes
derives from it: `kbench.cases.case.Case` (its fields), `kbench.runs.rows.Row` (its case columns), the scenario's
``[grid]`` keys, checks and error messages, the sweep's override flags, the report/policy groups, the
gate's match keys and the rich tables. Adding an axis is one entry here plus the code that uses the value
(inputs, reference, the kernels that take it).

Grid values, the same in a scenario file and on the command line:
  [1, 2, 4]  |  "1,2,4"  |  "1..16" (step 1)  |  "1..16:3" (step 3)  |  "512..32768*2" (times 2)
  |  {start = 1, stop = 16, step = 1}  |  {start = 512, stop = 32768, factor = 2}
String axes take a name or a comma-separated list; a ``spec`` axis (e.g. ``kv_dist = "lognormal:1.0"``)
checks each item with its own parser.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kbench.values import INT32_MAX, long_int
from kbench.errors import BadInput
from kbench.timing import states as timing_states

# ASCII digits only: \d and int() also take other scripts' digits ('١٢' would be 12)
_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*(?:([:*])\s*(\d+))?\s*$", re.ASCII)
MAX_AXIS_VALUES = 10_000


def _int(value, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadInput(f"{where}: {field}: expected an integer, got {value!r}")
    if isinstance(value, str):
        s = value.strip()
        if not re.fullmatch(r"-?[0-9]+", s):
            digits = " written with the digits 0-9" if re.fullmatch(r"-?\d+", s) else ""
            raise BadInput(f"{where}: {field}: expected an integer{digits}, got {value!r}")
        return _read_int(s, field, where)
    return value


def _read_int(digits: str, field: str, where: str) -> int:
    why = long_int(digits)
    if why:
        raise BadInput(f"{where}: {field}: {why}")
    return int(digits)


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
                    _expand_range(_read_int(m.group(1), field, where), _read_int(m.group(2), field, where), op,
                                  _read_int(m.group(4), field, where) if op else None, field, where)
                )
            else:
                vals.append(_int(part, field, where))
    else:
        vals = [_int(value, field, where)]
    if len(vals) > MAX_AXIS_VALUES:
        raise BadInput(f"{where}: {field}: more than {MAX_AXIS_VALUES} values")
    return sorted(set(vals))


def parse_str_axis(value, field: str, where: str, allowed: tuple[str, ...],
                   aliases: Mapping[str, tuple[str, ...]] | None = None) -> list[str]:
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise BadInput(f"{where}: {field}: expected a name or a list of names, got {value!r}")
    if not items:
        raise BadInput(f"{where}: {field}: empty value")
    if aliases:  # e.g. power 'both' = unthrottled,sustained
        items = [x for it in items for x in aliases.get(it.lower(), (it,))]
    lookup = {a.lower(): a for a in allowed}
    out = []
    for it in items:
        if it.lower() not in lookup:
            raise BadInput(f"{where}: {field}: {it!r} is not one of {', '.join(allowed)}")
        canon = lookup[it.lower()]
        if canon not in out:
            out.append(canon)
    return out


# ---- the table --------------------------------------------------------------------------------------------
# roles
GRID = "grid"  # a [grid] key and a sweep override flag; the scenario holds a list of values
HEADS = "heads"  # comes from `model` or the [heads] table (one value per scenario)
GROUP = "group"  # report/policy/rich-table group key: cases of one group differ only in the other axes
GATE = "gate"  # a gate/baseline row key column beside kernel and case_id
REALISTIC = "realistic"  # an axis of realistic batches (issue #13): at its default the batch is the idealised one
MLA = "mla"  # a shape field of latent attention (issue #27): 0 in a GQA case, given by an MLA model
REQUIRED = object()  # default of an axis every case must give

DTYPES = ("bf16", "fp16")
KV_DTYPES = ("bf16", "fp16", "fp8")
LAYOUTS = ("HND", "NHD")
PAGE_SIZES = (1, 16, 32, 64, 128)  # 1: SGLang's default (its token pool), fa3's and flashinfer's plan
HEAD_DIMS = (64, 128, 256)
MAX_Q_LEN = 64


@dataclass(frozen=True)
class Axis:
    """One case axis.

    type: int or str. default: REQUIRED, or the value a case has when nobody gives one; a row from an older
    run without this column reads as the default. allowed: the values a kernel can take (ints) or the
    names (strs, matched without case). minimum: lowest int value. check(values) -> error text or None:
    any other range rule. spec(item) -> canonical item, raising ValueError(text): for strings with a syntax.
    id_part(case) -> the text this axis adds to the case id, or None (an axis absorbed by another's part,
    or a new axis at its default: old case ids must not change). follows: a grid axis that, when not given,
    takes the value of that other axis in each case (kv_dtype follows dtype).
    """
    name: str
    type: type
    default: Any
    help: str
    roles: frozenset = frozenset()
    allowed: tuple = ()
    minimum: int | None = None
    check: Callable[[list], str | None] | None = None
    spec: Callable[[str], str] | None = None
    id_part: Callable[[Any], str | None] | None = None
    follows: str | None = None
    short: str | None = None  # a short CLI flag, e.g. -b
    aliases: Mapping[str, tuple] | None = None  # a name that stands for several values (power: both)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def has(self, role: str) -> bool:
        return role in self.roles

    def parse(self, value, field: str, where: str) -> list:
        """A grid/flag value (any accepted form) -> the list of values (`validate` checks their range)."""
        if self.type is int:
            vals = parse_int_axis(value, field, where)
        elif self.spec is not None:
            vals = parse_spec_axis(value, field, where, self.spec)
        else:
            vals = parse_str_axis(value, field, where, self.allowed, self.aliases)
        return vals

    def validate(self, vals: list, field: str, where: str) -> None:
        if not vals:
            raise BadInput(f"{where}: {field}: empty")
        if self.type is int:
            if max(vals) > INT32_MAX:  # every int axis is a size or count an int32 index tensor holds
                raise BadInput(f"{where}: {field}: {max(vals)} is beyond the int32 range of the kernels' indices "
                               f"(at most {INT32_MAX:,})")
            if self.minimum is not None and min(vals) < self.minimum:
                raise BadInput(f"{where}: {field}: values must be >= {self.minimum}, got {min(vals)}")
            if self.allowed:
                for v in vals:
                    if v not in self.allowed:
                        raise BadInput(f"{where}: {field}: {v} is taken by no kernel "
                                       f"(use one of {', '.join(map(str, self.allowed))})")
        if self.check is not None:
            msg = self.check(vals)
            if msg:
                raise BadInput(f"{where}: {field}: {msg}")

    def values(self, value, where: str, field: str | None = None) -> list:
        """The values a flag, filter or file gives (any accepted form: 'BF16', 'hnd', '64' or 64, lognormal:1 for
        lognormal:1.0, a list or range), in kbench's spelling and checked. field: how an error names it (default:
        the flag)."""
        field = field or self.flag
        vals = self.parse(str(value) if isinstance(value, (bool, int)) else value, field, where)
        self.validate(vals, field, where)
        return vals

    def one(self, value, where: str, field: str | None = None) -> Any:
        """One value (values()); more than one (a list, a range) is bad input."""
        field = field or self.flag
        vals = self.values(value, where, field)
        if len(vals) != 1:
            raise BadInput(f"{where}: {field}: give one value, got {value!r}")
        return vals[0]

    def id_text(self, case) -> str | None:
        if self.id_part is not None:
            return self.id_part(case)
        value = getattr(case, self.name)
        return None if value == self.default else f"{self.name}={value}"


def _q_len_check(vals: list) -> str | None:
    if max(vals) > MAX_Q_LEN:
        return f"{max(vals)} is beyond draft-extend shapes (at most {MAX_Q_LEN})"
    return None


def _heads_part(c) -> str:
    if c.attention == "mla":  # one latent KV head: q heads, kv_lora_rank, rope and nope widths
        return f"h{c.num_qo_heads}.mla{c.kv_lora_rank}.{c.qk_rope_head_dim}.{c.qk_nope_head_dim}"
    return f"h{c.num_qo_heads}.{c.num_kv_heads}.{c.head_dim}"


def _dtype_part(c) -> str:
    return c.dtype if c.kv_dtype == c.dtype else f"{c.dtype}-kv{c.kv_dtype}"


def _lazy_dist(field: str):
    def spec(item: str) -> str:
        from kbench.cases.dists import canonical

        return canonical(field)(item)

    return spec


def _lazy_skip_softmax():
    def spec(item: str) -> str:
        from kbench.cases.dists import parse_skip_softmax

        return parse_skip_softmax(item)

    return spec


def _lazy_max_seq_len():
    def spec(item: str) -> str:
        from kbench.cases.dists import parse_max_seq_len

        return parse_max_seq_len(item)

    return spec


def _lazy_tree():
    def spec(item: str) -> str:
        from kbench.cases.trees import canonical

        return canonical(item)

    return spec


def _tree_id(text: str) -> str | None:
    from kbench.cases.trees import id_part

    return id_part(text)


def _dist_id(text: str, field: str) -> str:
    from kbench.cases.dists import parse_dist

    return parse_dist(text, field, "case").id_part


SINKS = ("off", "on")
# timing states (kbench.timing.states): unthrottled = duty-cycled, off the power cap (the default); sustained =
# after a pre-load to the steady state under continuous load, timed back to back (kbench.timing.power)
POWER_STATES = timing_states.POWER_STATES
Q_DTYPES = ("dtype", "fp8")  # dtype: the query in the case's dtype; fp8: e4m3 (needs an fp8 KV cache)
# gqa: GQA/MHA (Hkv heads of K and V); mla: absorbed latent attention, one shared KV head (kbench.cases.mla)
ATTENTIONS = ("gqa", "mla")
_SHAPE = frozenset({GRID})
_GROUP_GRID = frozenset({GRID, GROUP})
_GROUP_HEADS = frozenset({HEADS, GROUP})
_REALISTIC = frozenset({GRID, GROUP, GATE, REALISTIC})
_MLA_FIELD = frozenset({HEADS, GROUP, MLA})

AXES: tuple[Axis, ...] = (
    Axis("batch_size", int, REQUIRED, "Override: list or range, e.g. 1,16,64 or 1..256*2.", _SHAPE,
         minimum=1, id_part=lambda c: f"bs{c.batch_size}", short="-b"),
    Axis("q_len", int, REQUIRED, "Override: e.g. 1..16.", _SHAPE, minimum=1, check=_q_len_check,
         id_part=lambda c: f"q{c.q_len}", short="-q"),
    Axis("kv_len", int, REQUIRED, "Override: e.g. 512..32768*2 (kv_len includes the new tokens).", _SHAPE,
         minimum=1, id_part=lambda c: f"kv{c.kv_len}", short="-k"),
    Axis("num_qo_heads", int, REQUIRED, "query heads per rank", _GROUP_HEADS, minimum=1, id_part=_heads_part),
    Axis("num_kv_heads", int, REQUIRED, "KV heads per rank", _GROUP_HEADS, minimum=1, id_part=lambda c: None),
    Axis("head_dim", int, REQUIRED, "head dimension", _GROUP_HEADS, minimum=1, allowed=HEAD_DIMS,
         id_part=lambda c: None),
    Axis("page_size", int, 64, "Override: 1, 16, 32, 64 or 128 (a list is a grid axis).", _GROUP_GRID,
         allowed=PAGE_SIZES, id_part=lambda c: f"p{c.page_size}"),
    Axis("kv_layout", str, "HND", "Override: HND, NHD or both.", _GROUP_GRID | {GATE}, allowed=LAYOUTS, aliases={"both": LAYOUTS},
         id_part=lambda c: None if c.attention == "mla" else c.kv_layout),
    Axis("dtype", str, "bf16", "Override: bf16, fp16.", _GROUP_GRID | {GATE}, allowed=DTYPES, id_part=_dtype_part),
    Axis("kv_dtype", str, "bf16", "Override: bf16, fp16, fp8 (defaults to --dtype).", _GROUP_GRID,
         allowed=KV_DTYPES, id_part=lambda c: None, follows="dtype"),
    # realistic batches (kbench.cases.dists); at their defaults a case and its id are the idealised batch's
    Axis("kv_dist", str, "fixed", "Per-request KV lengths: fixed, uniform:LO..HI, lognormal:SIGMA (same total "
         "KV), zipf[:A], file:PATH (CSV/JSON list).", _REALISTIC, spec=_lazy_dist("kv_dist"),
         id_part=lambda c: None if c.kv_dist == "fixed" else "kv" + _dist_id(c.kv_dist, "kv_dist")),
    Axis("q_dist", str, "fixed", "Per-request query tokens: fixed, accept:RATE (1 + accepted drafts), "
         "file:PATH.", _REALISTIC, spec=_lazy_dist("q_dist"),
         id_part=lambda c: None if c.q_dist == "fixed" else "q" + _dist_id(c.q_dist, "q_dist")),
    # draft trees (kbench.cases.trees, issue #26): a chain is the causal block of the idealised batch
    Axis("tree", str, "chain", "Draft tree each request verifies: chain (the causal block), topk:K (a seeded "
         "EAGLE-like tree of q_len tokens, at most K children a node; topk:1 is chain) or file:PATH (a line per "
         "request: each draft token's parent, -1 for the root). A spec runs at the q_len values it fits (K <= "
         "q_len; a file's tree size).", _REALISTIC, spec=_lazy_tree(),
         id_part=lambda c: _tree_id(c.tree)),
    Axis("window_left", int, -1, "Sliding window: a query at position p sees keys p-N..p; -1 = full.",
         _REALISTIC, minimum=-1, id_part=lambda c: None if c.window_left < 0 else f"w{c.window_left}"),
    Axis("sinks", str, "off", "Attention sinks: on (seeded float32 logit per q head) or off.", _REALISTIC,
         allowed=SINKS, id_part=lambda c: "sinks" if c.sinks == "on" else None),
    Axis("max_seq_len", str, "tight", "max_seq_len decode kernels get: tight or context:N (the page table "
         "that wide, as SGLang passes it).", _REALISTIC, spec=_lazy_max_seq_len(),
         id_part=lambda c: None if c.max_seq_len == "tight" else "msl" + c.max_seq_len.partition(":")[2]),
    Axis("q_dtype", str, "dtype", "Query dtype: dtype (the case's --dtype) or fp8 (e4m3, as SGLang casts q for "
         "its trtllm kernels when the KV cache is fp8; needs --kv-dtype fp8).", _REALISTIC, allowed=Q_DTYPES,
         id_part=lambda c: None if c.q_dtype == "dtype" else "q" + c.q_dtype),
    Axis("skip_softmax", str, "off", "Skip-softmax (an approximation, judged by its own tolerance): off or "
         "a threshold scale factor, e.g. 1000.", _REALISTIC, spec=_lazy_skip_softmax(),
         id_part=lambda c: None if c.skip_softmax == "off" else "ss" + c.skip_softmax),
    Axis("power", str, "unthrottled", "Timing state: unthrottled (duty-cycled, off the power cap), sustained "
         "(after a pre-load to steady state at the power cap, back to back) or both.",
         frozenset({GRID, GROUP, GATE}), allowed=POWER_STATES, aliases={"both": POWER_STATES},
         id_part=lambda c: None if c.power == "unthrottled" else "sustained"),
    # latent attention (issue #27): the kind and MLA's shape fields come from the model (or [heads]) like the
    # head counts; an MLA case's heads part of the id holds them all (h128.mla512.64.128), a GQA case's is unchanged
    Axis("attention", str, "gqa", "attention kind: gqa (GQA/MHA) or mla (absorbed latent attention)",
         frozenset({HEADS, GROUP}), allowed=ATTENTIONS, id_part=lambda c: None),
    Axis("kv_lora_rank", int, 0, "MLA: latent KV rank, the cache's and V's width (0: not MLA)", _MLA_FIELD,
         minimum=0, id_part=lambda c: None),
    Axis("qk_rope_head_dim", int, 0, "MLA: RoPE part of the query/key head, cached beside the latent (0: not MLA)",
         _MLA_FIELD, minimum=0, id_part=lambda c: None),
    Axis("qk_nope_head_dim", int, 0, "MLA: non-RoPE query/key head width before absorption; the softmax scale is "
         "1/sqrt(nope + rope) (0: not MLA)", _MLA_FIELD, minimum=0, id_part=lambda c: None),
)
AXIS: dict[str, Axis] = {a.name: a for a in AXES}


def fp8_query_problem(q_dtypes, kv_dtypes) -> str | None:
    """Why these query dtypes cannot go with these KV dtypes, or None: kernels take an fp8 query only with an fp8
    KV cache."""
    if "fp8" in q_dtypes and set(kv_dtypes) != {"fp8"}:
        return (f"fp8 needs kv_dtype fp8 (kernels take an fp8 query only with an fp8 KV cache), got kv_dtype "
                f"{', '.join(kv_dtypes)}")
    return None


def axes_with(role: str) -> tuple[Axis, ...]:
    return tuple(a for a in AXES if a.has(role))


def names(role: str | None = None) -> list[str]:
    return [a.name for a in (AXES if role is None else axes_with(role))]


GRID_AXES = names(GRID)
HEAD_AXES = names(HEADS)
# the group key of the first policies (every policy has it), in the order groups are sorted and labelled
CLASSIC_GROUP = ("num_qo_heads", "num_kv_heads", "head_dim", "dtype", "kv_dtype", "page_size", "kv_layout")
# report/policy group key: the classic seven, then every later group axis
GROUP_COLUMNS = [*CLASSIC_GROUP, *(n for n in names(GROUP) if n not in CLASSIC_GROUP)]
INT_AXES = [a.name for a in AXES if a.type is int]


def case_id(case) -> str:
    """The id of a case: the parts of every axis, joined by '-'; an axis at its default may add nothing."""
    return "-".join(p for p in (a.id_text(case) for a in AXES) if p)


def gate_key() -> tuple[str, ...]:
    """The columns a gate or baseline matches sweep rows on."""
    return ("kernel", "case_id", *names(GATE))


def defaults() -> dict[str, Any]:
    """Axis -> default, for axes that have one (a missing column of an older run reads as this)."""
    return {a.name: a.default for a in AXES if not a.required}


# the labels of a group, e.g. '32/8/128 bf16 p64 HND'; an axis added later shows as ' name=value' when
# it is not at its default (the attention kind and MLA's fields are part of the heads label instead)
_LABELLED = {*CLASSIC_GROUP, "attention", *names(MLA)}


LATER_GROUP_AXES = [n for n in GROUP_COLUMNS if n not in _LABELLED]


def extra_label(g: Mapping) -> str:
    """' name=value' for each group axis outside the classic label that is not at its default."""
    return "".join(f" {n}={g[n]}" for n in LATER_GROUP_AXES if n in g and g[n] != AXIS[n].default)


def heads_label(g: Mapping) -> str:
    """'32/8/128' for GQA; 'mla h128 512+64 (nope 128)' for latent attention (a mapping without the attention
    key, e.g. an older run's row, is GQA)."""
    if g.get("attention", "gqa") == "mla":
        return (f"mla h{int(g['num_qo_heads'])} {int(g['kv_lora_rank'])}+{int(g['qk_rope_head_dim'])} "
                f"(nope {int(g['qk_nope_head_dim'])})")
    return f"{int(g['num_qo_heads'])}/{int(g['num_kv_heads'])}/{int(g['head_dim'])}"


def group_label(g: Mapping) -> str:
    """'32/8/128 bf16 p64 HND' (kv dtype added when it differs from the query dtype); an MLA group has no KV
    layout: 'mla h128 512+64 (nope 128) bf16 p64'."""
    kv = "" if g["kv_dtype"] == g["dtype"] else f"-kv{g['kv_dtype']}"
    layout = "" if g.get("attention", "gqa") == "mla" else f" {g['kv_layout']}"
    return f"{heads_label(g)} {g['dtype']}{kv} p{int(g['page_size'])}{layout}" + extra_label(g)


def parse_spec_axis(value, field: str, where: str, spec: Callable[[str], str]) -> list[str]:
    """A string axis whose items have a syntax (e.g. 'lognormal:1.0'): each item checked by `spec`."""
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise BadInput(f"{where}: {field}: expected a string or a list of strings, got {value!r}")
    if not items:
        raise BadInput(f"{where}: {field}: empty value")
    out = []
    for it in items:
        try:
            canon = spec(it)
        except ValueError as e:
            raise BadInput(f"{where}: {field}: {e}") from None
        if canon not in out:
            out.append(canon)
    return out
