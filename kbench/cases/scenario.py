"""Scenarios: a grid of shapes plus the settings to measure them, read from TOML.

A scenario file (see scenarios/*.toml)::

    name = "draft-extend"
    description = "..."
    model = "llama3-8b"            # or a [heads] table: num_qo_heads, num_kv_heads, head_dim; MLA models
                                   # (deepseek-v3, kimi-k2, ...) or attention = "mla" with num_qo_heads,
                                   # kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim (kbench.cases.mla)
    kernels = ["all"]              # or names from `kbench kernels`

    [grid]                         # every axis takes a value, a list or a range (see kbench.cases.axes)
    batch_size = "1..256*2"
    q_len = "1..16"
    kv_len = "512..32768*2"
    page_size = 64
    kv_layout = "HND"
    dtype = "bf16"
    kv_dtype = "bf16"              # optional; defaults to dtype; "fp8" for an fp8 KV cache

    [timing]
    spread_target = 0.01           # stop when the relative spread of the median is below this
    budget_s = 2.0                 # ... or when one measurement has spent this long
    min_time_s = 0.1               # but sample at least this long
    duty = 0.4                     # GPU busy this fraction of the sampling time: off the power cap
    l2 = "rotate"                  # rotate input copies for L2-sized shapes ("rotate"), or "warm"
"""
from __future__ import annotations

import itertools
import math
import re
import sys
from dataclasses import dataclass, field, make_dataclass, replace
from importlib import resources
from pathlib import Path

from kbench.cases import axes, mla
from kbench.cases import axes as axes_mod  # apply_overrides takes **axes
from kbench.cases.case import Case
from kbench.errors import BadInput
from kbench.values import long_int
from kbench import files
from kbench.cases.models import MODELS, HeadConfig, parse_heads
from kbench.cases.dists import INT32_MAX, max_kv_len
from kbench.cases.trees import check_grid as check_trees
from kbench.cases.trees import fits as tree_fits
from kbench.cases.trees import left_out as tree_left_out
from kbench.values import parse_float

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOP_KEYS = {"name", "description", "model", "heads", "kernels", "grid", "timing"}
GRID_KEYS = set(axes.GRID_AXES)
HEAD_KEYS = set(axes.HEAD_AXES)
GQA_HEAD_AXES = ("num_qo_heads", "num_kv_heads", "head_dim")  # a GQA [heads] table; MLA's: kbench.cases.mla
TIMING_KEYS = {"spread_target", "budget_s", "min_samples", "max_samples", "l2", "warmup_ms", "min_time_s", "duty",
               "settle_ms"}
L2_MODES = ("rotate", "warm")
MAX_CASES = 200_000
MAX_CASE_BYTES = 1 << 40  # one case's Q, K, V and output: far beyond any device's memory
MAX_BATCH = 1 << 20  # requests in one batch: per-request lengths, page-table rows and reference passes are built


@dataclass
class Timing:
    spread_target: float = 0.01
    budget_s: float = 2.0
    min_samples: int = 6  # the fewest whose 95% order-statistic CI of the median is finite (min to max: 96.9%)
    max_samples: int = 400
    l2: str = "rotate"
    warmup_ms: float = 5.0  # eager warm-up of at least this much device time (and one call; kbench.timing.timer)
    min_time_s: float = 0.05  # sample at least this long before the spread may stop a measurement (>= 4 bursts)
    duty: float = 0.4  # fraction of the sampling time the GPU is busy (1.0: back to back; see kbench.timing.timer)
    # idle ms between warm-up and sampling; None: the duty's share of the warm-up's busy time (kbench.timing.timer)
    settle_ms: float | None = None

    def stop_rule(self):
        from kbench.timing.timer import StopRule

        return StopRule(self.spread_target, self.budget_s, self.min_samples, self.max_samples, self.min_time_s)


class _ScenarioMethods:
    """A scenario: name, heads, one list of values per grid axis (kbench.cases.axes.GRID_AXES), kernels, timing."""

    def grid(self) -> dict[str, list | None]:
        return {n: getattr(self, n) for n in axes.GRID_AXES}

    def input_files(self) -> list[str]:
        """The files this scenario is read from: its TOML file and every file: lengths or tree in its axes (an
        output must not replace one of them: prebuild --archive)."""
        first = str(self.source).split(" + ")[0]
        found = [first] if first and Path(first).is_file() else []
        name = first[len("scenarios/"):-len(".toml")] if first.startswith("scenarios/") and first.endswith(".toml") \
            else None
        if name in builtin_names():  # a built-in, read from the installed package wherever kbench runs
            found.append(str(resources.files("kbench.scenarios").joinpath(f"{name}.toml")))
        for values in self.grid().values():
            found += [v[len("file:"):] for v in values or [] if isinstance(v, str) and v.startswith("file:")]
        return found

    def cases(self) -> list[Case]:
        grid = self.grid()
        lists = [grid[n] if grid[n] is not None else [None] for n in axes.GRID_AXES]
        heads = self.heads.case_fields()
        out = []
        for combo in itertools.product(*lists):
            values = dict(zip(axes.GRID_AXES, combo))
            for n, v in values.items():  # an axis not given follows another (kv_dtype: the dtype)
                if v is None:
                    values[n] = values[axes.AXIS[n].follows]
            if values["tree"] != "chain" and not tree_fits(values["tree"], values["q_len"], self.source):
                continue  # a tree spec runs at the tree sizes it has a tree of (kbench.cases.trees.fits)
            out.append(Case(**heads, **values))
        return out

    def trees_left_out(self) -> list[str]:
        """The scenario's tree specs that no q_len of its grid has a tree of (left out of cases())."""
        return tree_left_out(self.tree, self.q_len, self.source) if self.tree != ["chain"] else []

    def validate(self) -> "Scenario":
        where = self.source
        h = self.heads
        if h.attention not in axes.ATTENTIONS:
            raise BadInput(f"{where}: heads.attention: {h.attention!r} is not one of {', '.join(axes.ATTENTIONS)}")
        if h.attention == "mla":  # its own fields and the grid axes that mean nothing for it (kbench.cases.mla)
            mla.validate_heads(h, where)
            mla.check_grid(self.grid(), where)
        else:
            for name in GQA_HEAD_AXES:
                v = getattr(h, name)
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise BadInput(f"{where}: heads.{name}: expected a positive integer, got {v!r}")
            if h.num_qo_heads % h.num_kv_heads:
                raise BadInput(f"{where}: heads: num_qo_heads ({h.num_qo_heads}) must be a multiple of num_kv_heads ({h.num_kv_heads})")
            for name in GQA_HEAD_AXES:
                axes.AXIS[name].validate([getattr(h, name)], f"heads.{name}", where)
            mla.validate_gqa_heads(h, where)
        for name, vals in self.grid().items():  # spec axes in their canonical spelling (Python callers too)
            spec = axes.AXIS[name].spec
            if spec is not None and vals:
                try:
                    setattr(self, name, list(dict.fromkeys(spec(v) for v in vals)))
                except (ValueError, AttributeError) as e:
                    raise BadInput(f"{where}: grid.{name}: {e}") from None
        grid = self.grid()
        for name, vals in grid.items():
            if vals is not None or axes.AXIS[name].follows is None:
                axes.AXIS[name].validate(vals, f"grid.{name}", where)
        if max(self.q_len) > min(self.kv_len):
            raise BadInput(
                f"{where}: grid.q_len: q_len {max(self.q_len)} exceeds kv_len {min(self.kv_len)} "
                "(kv_len includes the new tokens, so it must be >= q_len)"
            )
        kv_dtypes = self.kv_dtype if self.kv_dtype is not None else self.dtype
        problem = axes.fp8_query_problem(self.q_dtype, kv_dtypes)
        if problem:
            raise BadInput(f"{where}: grid.q_dtype: {problem}")
        if self.timing.l2 not in L2_MODES:
            raise BadInput(f"{where}: timing.l2: {self.timing.l2!r} is not one of {', '.join(L2_MODES)}")
        if not (0 < self.timing.spread_target < 1):
            raise BadInput(f"{where}: timing.spread_target: expected a fraction in (0, 1), got {self.timing.spread_target}")
        if not (math.isfinite(self.timing.budget_s) and self.timing.budget_s > 0):
            raise BadInput(f"{where}: timing.budget_s: must be a finite number > 0, got {self.timing.budget_s}")
        if not (math.isfinite(self.timing.warmup_ms) and self.timing.warmup_ms >= 0):
            raise BadInput(f"{where}: timing.warmup_ms: must be a finite number >= 0, got {self.timing.warmup_ms}")
        if not (math.isfinite(self.timing.min_time_s) and self.timing.min_time_s >= 0):  # budget_s still caps it
            raise BadInput(f"{where}: timing.min_time_s: must be a finite number >= 0, got {self.timing.min_time_s}")
        if self.timing.settle_ms is not None and not (math.isfinite(self.timing.settle_ms) and self.timing.settle_ms >= 0):
            raise BadInput(f"{where}: timing.settle_ms: must be a finite number >= 0, got {self.timing.settle_ms}")
        if not (math.isfinite(self.timing.duty) and 0.05 <= self.timing.duty <= 1):
            raise BadInput(f"{where}: timing.duty: must be a fraction in [0.05, 1], got {self.timing.duty}")
        if self.timing.min_samples < 3 or self.timing.max_samples < self.timing.min_samples:
            raise BadInput(f"{where}: timing: need 3 <= min_samples <= max_samples")
        n = math.prod(len(v) if v is not None else 1 for v in grid.values())
        if n > MAX_CASES:
            raise BadInput(f"{where}: grid: {n} cases is more than {MAX_CASES}; narrow an axis")
        bs, kv = max(self.batch_size), max(self.kv_len)
        if bs > MAX_BATCH:
            raise BadInput(f"{where}: grid.batch_size: {bs} requests is more than the {MAX_BATCH:,} kbench builds one "
                           f"batch of (each request has its own lengths, page-table row and reference pass); "
                           f"engines batch a few thousand")
        contexts = [int(m.partition(":")[2]) for m in self.max_seq_len if m.startswith("context:")]
        if contexts and min(contexts) < kv:
            raise BadInput(f"{where}: grid.max_seq_len: context:{min(contexts)} is below kv_len {kv} (the context "
                           f"length bounds every request's KV, as in an engine); give context:N with N >= {kv}, "
                           f"or tight")
        if kv > INT32_MAX or bs * max(self.q_len) > INT32_MAX or bs * kv > INT32_MAX:
            raise BadInput(f"{where}: grid: batch_size {bs} x kv_len {kv} overflows the int32 indices kernels take")
        for kd in self.kv_dist:  # a distribution's own lengths: uniform's HI bounds every request's KV
            longest = max_kv_len(kd)
            if longest is not None and bs * longest > INT32_MAX:
                raise BadInput(f"{where}: grid: batch_size {bs} x kv_dist {kd} (requests up to {longest}) overflows "
                               f"the int32 indices kernels take")
        big = Case(batch_size=bs, q_len=max(self.q_len), kv_len=kv, **h.case_fields(), page_size=min(self.page_size))
        if big.min_bytes() > MAX_CASE_BYTES:
            raise BadInput(f"{where}: grid: the largest case needs {big.min_bytes() / 2**40:.0f} TiB of inputs; "
                           "narrow an axis or the heads")
        self._check_lengths(where)
        if self.tree != ["chain"]:  # a scenario's own spec that a narrowed q_len leaves no tree for is left out
            check_trees(self.tree, self.q_len, where, strict=False)
        if not self.kernels:  # the names themselves are the registry's to check (kbench.kernels.registry.select)
            raise BadInput(f"{where}: kernels: no kernel named (give names from `kbench kernels`, or all)")
        return self

    def _check_lengths(self, where: str) -> None:
        """Draw every per-request batch once (seed 0) so a bad file of lengths, or a request with more
        query tokens than KV, stops here with one line instead of mid-sweep."""
        if self.kv_dist == ["fixed"] and self.q_dist == ["fixed"]:
            return
        from kbench.cases.dists import batch_lengths

        contexts = [int(m.partition(":")[2]) for m in self.max_seq_len if m.startswith("context:")]
        for kd, qd, bs, kv, q in itertools.product(self.kv_dist, self.q_dist, self.batch_size, self.kv_len, self.q_len):
            drawn = batch_lengths(kd, qd, bs, kv, q, 0, where=f"{where}: grid").kv
            if sum(drawn) > INT32_MAX:  # a file's lengths (the others are bounded in validate)
                raise BadInput(f"{where}: grid: batch_size {bs} x kv_dist {kd} holds {sum(drawn)} KV tokens, which "
                               f"overflows the int32 indices kernels take")
            longest = max(drawn)
            if contexts and longest > min(contexts):
                raise BadInput(f"{where}: grid.max_seq_len: context:{min(contexts)} is below a request's KV length "
                               f"{longest} (kv_dist {kd} at batch {bs}, kv_len {kv}); the context length bounds every "
                               f"request's KV: give a larger N, or tight")

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "model": self.model,
            "heads": vars(self.heads) if not hasattr(self.heads, "__dataclass_fields__") else self.heads.table(),
            "grid": self.grid(),
            "kernels": self.kernels, "timing": vars(self.timing), "source": self.source,
        }

    def to_data(self) -> dict:
        """This scenario as a TOML-like dict that `scenario_from_dict` reads back (a worker's payload)."""
        return scenario_data(self.to_dict())


def scenario_data(d: dict) -> dict:
    """A `Scenario.to_dict()` (e.g. a manifest's) as `scenario_from_dict` reads it back."""
    data = {"name": d["name"], "description": d.get("description", ""), "kernels": d["kernels"],
            "grid": {k: v for k, v in d["grid"].items() if v is not None},
            "timing": {k: v for k, v in d.get("timing", {}).items() if v is not None}}  # None: the default rule
    if d.get("model"):
        data["model"] = d["model"]
    else:
        data["heads"] = d["heads"]
    return data


def _grid_field(a: axes.Axis):
    if a.required:
        return (a.name, list)
    if a.follows:  # None: the followed axis's value
        return (a.name, list | None, field(default=None))
    return (a.name, list, field(default_factory=lambda d=a.default: [d]))


Scenario = make_dataclass("Scenario", [
    ("name", str), ("heads", HeadConfig),
    *(_grid_field(a) for a in axes.AXES if a.has(axes.GRID)),
    ("kernels", list, field(default_factory=lambda: ["all"])),
    ("timing", Timing, field(default_factory=Timing)),
    ("description", str, field(default="")),
    ("model", str | None, field(default=None)),
    ("source", str, field(default="<python>")),
], bases=(_ScenarioMethods,))
Scenario.__module__ = __name__
Scenario.__doc__ = _ScenarioMethods.__doc__


def _resolve_heads(model, heads, where: str) -> tuple[HeadConfig, str | None]:
    if model is not None and heads is not None:
        raise BadInput(f"{where}: give model or [heads], not both")
    if model is not None:
        if not isinstance(model, str) or model not in MODELS:
            raise BadInput(f"{where}: model: unknown model {model!r} (known: {', '.join(MODELS)})")
        return MODELS[model], model
    if heads is None:
        raise BadInput(f"{where}: needs model = NAME or a [heads] table")
    if not isinstance(heads, dict):
        raise BadInput(f"{where}: heads: expected a table with {', '.join(GQA_HEAD_AXES)} (or attention = \"mla\" "
                       f"with {', '.join(mla.HEAD_KEYS[1:])})")
    kind = heads.get("attention", "gqa")
    if kind == "mla":
        return HeadConfig(**mla.heads_from_table(heads, where)), None
    if kind != "gqa":
        raise BadInput(f"{where}: heads.attention: {kind!r} is not one of {', '.join(axes.ATTENTIONS)}")
    mla.check_gqa_table(heads, where)
    unknown = set(heads) - HEAD_KEYS
    if unknown:
        raise BadInput(f"{where}: heads: unknown key {sorted(unknown)[0]!r}")
    missing = set(GQA_HEAD_AXES) - set(heads)
    if missing:
        raise BadInput(f"{where}: heads: missing {sorted(missing)[0]!r}")
    vals = {}
    for k in GQA_HEAD_AXES:
        v = heads[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise BadInput(f"{where}: heads.{k}: expected an integer, got {v!r}")
        vals[k] = v
    return HeadConfig(vals["num_qo_heads"], vals["num_kv_heads"], vals["head_dim"]), None


def scenario_from_dict(data: dict, where: str) -> Scenario:
    if not isinstance(data, dict):
        raise BadInput(f"{where}: expected a table at the top level")
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise BadInput(f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    grid = data.get("grid", {})
    if not isinstance(grid, dict):
        raise BadInput(f"{where}: grid: expected a table")
    unknown = set(grid) - GRID_KEYS
    if unknown:
        raise BadInput(f"{where}: grid: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(GRID_KEYS))})")
    for req in (a.name for a in axes.AXES if a.has(axes.GRID) and a.required):
        if req not in grid:
            raise BadInput(f"{where}: grid.{req}: missing")
    heads, model = _resolve_heads(data.get("model"), data.get("heads"), where)
    timing_d = data.get("timing", {})
    if not isinstance(timing_d, dict):
        raise BadInput(f"{where}: timing: expected a table")
    unknown = set(timing_d) - TIMING_KEYS
    if unknown:
        raise BadInput(f"{where}: timing: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(TIMING_KEYS))})")
    timing = Timing()
    for k, v in timing_d.items():
        default = getattr(timing, k)
        if isinstance(default, str):
            if not isinstance(v, str):
                raise BadInput(f"{where}: timing.{k}: expected a string, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BadInput(f"{where}: timing.{k}: expected a number, got {v!r}")
        elif isinstance(default, int) and not isinstance(v, int):
            raise BadInput(f"{where}: timing.{k}: expected an integer, got {v!r}")
        setattr(timing, k, v)
    name = data.get("name", Path(where).stem)
    if not isinstance(name, str) or not name:
        raise BadInput(f"{where}: name: expected a string")
    kernels = data.get("kernels", ["all"])
    if isinstance(kernels, str):
        kernels = [kernels]
    if not isinstance(kernels, list) or not all(isinstance(k, str) for k in kernels):
        raise BadInput(f"{where}: kernels: expected a list of kernel names")
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise BadInput(f"{where}: description: expected a string")
    sc = Scenario(
        name=name,
        heads=heads,
        model=model,
        description=desc,
        **{a.name: a.parse(grid[a.name] if a.name in grid else a.default, f"grid.{a.name}", where)
           for a in axes.axes_with(axes.GRID) if a.name in grid or not a.follows},
        kernels=kernels,
        timing=timing,
        source=where,
    )
    return sc.validate()


def builtin_names() -> list[str]:
    root = resources.files("kbench.scenarios")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a TOML file by path."""
    p = Path(name_or_path)
    if name_or_path.endswith(".toml") or p.exists():
        if not p.exists():
            raise BadInput(f"scenario file {name_or_path!r} does not exist")
        if p.is_dir():
            raise BadInput(f"-s {name_or_path}: a folder, not a scenario file (give a .toml file or a built-in "
                           f"name: {', '.join(builtin_names())})")
        if not p.is_file():
            raise BadInput(f"-s {name_or_path}: not a regular file (a device or a pipe); give a .toml file")
        where = str(p)
        # bom: a byte-order mark (Windows editors write one) is not TOML, so it is dropped
        text = files.read_text(p, where, files.SCENARIO_MAX, bom=True)
        if not text.strip():
            raise BadInput(f"{where}: empty; a scenario needs at least a [grid] table (see scenarios/quick.toml)")
    else:
        names = builtin_names()
        if name_or_path not in names:
            raise BadInput(f"unknown scenario {name_or_path!r} (built-in: {', '.join(names)}; or give a .toml path)")
        where = f"scenarios/{name_or_path}.toml"
        text = resources.files("kbench.scenarios").joinpath(f"{name_or_path}.toml").read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{where}: not valid TOML: {e}") from None
    except RecursionError:
        raise BadInput(f"{where}: not valid TOML: nested too deeply") from None
    except ValueError:  # int(): an integer of more digits than Python converts
        raise BadInput(f"{where}: {_long_int_at(text)}") from None
    return scenario_from_dict(data, where)


def _long_int_at(text: str) -> str:
    """Where a TOML text holds an integer too long to read: `line 5: batch_size: an integer of 5000 digits, ...`."""
    for n, line in enumerate(text.splitlines(), 1):
        for run in re.findall(r"[0-9_]{100,}", line):
            why = long_int(run)
            if why:
                key = re.match(r"\s*([^=\[]+?)\s*=", line)
                return f"line {n}: {key.group(1) + ': ' if key else ''}{why}"
    return "an integer of more digits than kbench reads"


TIMING_OVERRIDES = ("spread_target", "budget_s", "l2", "min_time_s", "duty")  # the [timing] fields a flag overrides


def apply_overrides(sc: Scenario, **axes) -> Scenario:
    """The scenario with overrides, as the sweep's flags give them: a grid axis as a string in its syntax ('1,16,64',
    '1..16', '512..32768*2') or a list; kernels ('a,b'), model or heads; the timing's spread_target, budget_s,
    min_time_s, duty (numbers) and l2. None leaves a field alone; an unknown name is BadInput."""
    known = {*axes_mod.names(axes_mod.GRID), "kernels", "model", "heads", *TIMING_OVERRIDES}
    unknown = sorted(k for k in axes if k not in known)
    if unknown:
        raise BadInput(f"apply_overrides: unknown field {unknown[0]!r} (fields: {', '.join(sorted(known))})")
    changes = {}
    for a in axes_mod.axes_with(axes_mod.GRID):
        if axes.get(a.name) is not None:
            changes[a.name] = a.parse(axes[a.name], a.flag, "command line")
    if axes.get("kernels") is not None:
        changes["kernels"] = [k.strip() for k in axes["kernels"].split(",") if k.strip()]
    if axes.get("model") is not None:
        if axes["model"] not in MODELS:
            raise BadInput(f"--model: unknown model {axes['model']!r} (known: {', '.join(MODELS)})")
        changes["heads"], changes["model"] = MODELS[axes["model"]], axes["model"]
    if axes.get("heads") is not None:
        if axes.get("model") is not None:
            h = MODELS.get(axes["model"])
            raise BadInput(f"--model {axes['model']} and --heads {axes['heads']} both set the heads (--model "
                           f"{axes['model']} is {h.text()}): give one")
        changes["heads"], changes["model"] = parse_heads(axes["heads"]), None
    timing = replace(sc.timing)
    for k in TIMING_OVERRIDES:
        if axes.get(k) is not None:
            v = axes[k]
            if k != "l2":  # a number ('0.2' from a script too); anything else is bad input, not a TypeError later
                try:
                    if isinstance(v, bool):
                        raise TypeError(v)
                    v = float(v) if isinstance(v, (int, float)) else parse_float(v)  # ASCII digits, no '_'
                except (TypeError, ValueError):
                    raise BadInput(f"apply_overrides: {k} {axes[k]!r} is not a number") from None
            setattr(timing, k, v)
    changes["timing"] = timing
    out = replace(sc, **changes)
    if any(v is not None for v in axes.values()):
        out.source = f"{sc.source} + command line"
    out.validate()
    if "tree" in changes:  # a spec the user named must have a tree at some q_len; a scenario's own may be left out
        check_trees(out.tree, out.q_len, out.source, strict=True)
    return out
