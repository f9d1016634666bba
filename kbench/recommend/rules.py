"""An engine release's resolution rules, as data: kbench/recommend/rules/<engine>-<version>.toml, one file per
release, read here and applied in the file's order (the engine's own pipeline order). Adding a release is a new
file (and a run of tests/test_resolve_parity.py against the engine itself); nothing here names a backend.

A file holds
- `engine`, `version`, `root` (the source tree every cite is under);
- `[models]`: the architectures the rules know and what each is (mla, sinks, dsa, the speculative defaults);
- `[flags."--name"]`: the flags a launch line may carry: the engine field it sets, its type, the values the
  engine's parser accepts (`choices`), `refuse` for a flag the parser refuses (removed, ambiguous), `alias` for
  another spelling; `inert`: flags that cannot change what kbench prices (read and set aside);
- `[defaults]`: a field's value when the line does not give it (the parser's default), with `[defaults_cite]`;
- `[[rule]]`: `when` (a condition over the fields and the model), then `set` (fields; a string starting with
  "=" is an expression) or `refuse` (the engine's own words: `says`), each with its `cite` (file:line of the
  released source).

Conditions and "=" values are small Python expressions: names are fields and model facts, literals, and/or/not,
comparisons, `in`, + - *, indexing, and the functions in FUNCTIONS. Nothing else is evaluated.

    from kbench.recommend.rules import load_rules
    rs = load_rules("sglang")               # the newest release kbench has rules for
    out = rs.apply({"attention_backend": None, ...}, {"gpu": "sm90", "arch": "LlamaForCausalLM", ...})
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from importlib import resources

from kbench.errors import BadInput

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


class Refused(BadInput):
    """The engine refuses the line: `says` is the engine's own reason, `cite` where it says it."""

    def __init__(self, message: str, says: str = "", cite: str = "", rule: str = ""):
        super().__init__(message)
        self.says, self.cite, self.rule = says, cite, rule


def _unset(state):
    return lambda *names: all(state.get(n) is None for n in names)


FUNCTIONS = {
    # unset('a', 'b'): every named field is None
    "unset": _unset,
    # uses('flashmla', 'attention_backend', 'decode_attention_backend'): a named field holds the backend
    "uses": lambda state: lambda backend, *names: any(state.get(n) == backend for n in names),
    # get(mapping, key, default)
    "get": lambda state: lambda m, k, d=None: m.get(k, d) if isinstance(m, dict) else d,
    "int": lambda state: int,
    "str": lambda state: str,
    "upper": lambda state: lambda s: str(s).upper(),
}
_CMP = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b,
        ast.IsNot: lambda a, b: a is not b}
_BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


@functools.lru_cache(maxsize=None)
def _parse(expr: str) -> ast.expr:
    try:
        return ast.parse(expr, mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"rule expression {expr!r} does not parse: {e.msg}") from None


def evaluate(expr: str, state: dict):
    """The value of a rule expression over `state` (fields and model facts); ValueError on anything outside the
    small language (no attribute access, no calls but FUNCTIONS)."""
    def ev(n):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id in state:
                return state[n.id]
            raise ValueError(f"rule expression {expr!r}: unknown name {n.id!r}")
        if isinstance(n, (ast.List, ast.Tuple)):
            return tuple(ev(e) for e in n.elts)
        if isinstance(n, ast.BoolOp):  # Python's own: the deciding value, not a bool
            v = None
            for e in n.values:
                v = ev(e)
                if (not v) if isinstance(n.op, ast.And) else v:
                    return v
            return v
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return not ev(n.operand)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, right in zip(n.ops, n.comparators):
                r = ev(right)
                if not _CMP[type(op)](left, r):
                    return False
                left = r
            return True
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            return _BIN[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.IfExp):
            return ev(n.body) if ev(n.test) else ev(n.orelse)
        if isinstance(n, ast.Subscript):
            return ev(n.value)[ev(n.slice)]
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in FUNCTIONS and not n.keywords:
            return FUNCTIONS[n.func.id](state)(*(ev(a) for a in n.args))
        raise ValueError(f"rule expression {expr!r}: {type(n).__name__} is not in the rules' language")

    return ev(_parse(expr))


@dataclass
class Rule:
    id: str
    cite: str
    when: str = "True"
    set: dict = field(default_factory=dict)
    refuse: str | None = None  # the engine's reason (its own words, with {field} filled in)
    says: str = ""  # what the rule does, in words (printed beside the cite)


@dataclass
class Outcome:
    fields: dict
    why: dict[str, str]  # field -> "given", or the rule's words and cite
    fired: list[str]  # the rules that changed something, in order


@dataclass
class RuleSet:
    engine: str
    version: str
    root: str
    path: str  # the file the rules came from (kbench/recommend/rules/...)
    models: dict
    flags: dict[str, dict]
    inert: dict[str, str]  # flag -> "value" | "bool"
    defaults: dict
    defaults_cite: dict
    rules: list[Rule]
    report: list[str]  # the fields `kbench resolve` prints, in order (the engine's own names)

    def rule(self, rid: str) -> Rule:
        return next(r for r in self.rules if r.id == rid)

    def field_names(self) -> set[str]:
        """Every field a rule may read or set: the flags', the defaults', the rules' targets."""
        out = set(self.defaults) | set(self.report)
        for spec in self.flags.values():
            out |= {spec["field"]} if "field" in spec else set()
            out |= set(spec.get("keys", {}).values())
        for r in self.rules:
            out |= set(r.set)
        return out

    def apply_only(self, fields: dict, facts: dict, prefix: str) -> Outcome:
        """The rules whose id starts with `prefix`, in order (e.g. SGLang's page rules for a setting's slots);
        the names they read that `fields` and `facts` lack are None."""
        sub = RuleSet(self.engine, self.version, self.root, self.path, self.models, self.flags, self.inert,
                      self.defaults, self.defaults_cite, [r for r in self.rules if r.id.startswith(prefix)],
                      self.report)
        base = {n: None for n in self.field_names()}
        base.update(fields)
        return sub.apply(base, {**{k: None for k in ("gpu", "arch")}, "mla": False, "sinks": False, "dsa": False,
                                **facts})

    def cite(self, where: str) -> str:
        """A rule's cite with the source root before each file (`a.py:1-2; b.py:3` -> root/a.py:1-2; root/b.py:3)."""
        return "; ".join(p if p.startswith(self.root) or not p else self.root + p
                         for p in (s.strip() for s in where.split(";")))

    def known(self, arch: str | None) -> bool:
        return arch in self.models.get("known", ())

    def facts(self, arch: str | None, config: dict | None) -> dict:
        """What the rules may ask of the model: arch, mla, sinks, dsa (its config has the DSA key), the
        speculative defaults for it."""
        m = self.models
        cfg = config or {}
        by_name = config is None and arch in m.get("dsa_by_name", ())  # a hub name, no config.json to read
        return {"arch": arch, "mla": arch in m.get("mla", ()), "sinks": arch in m.get("sinks", ()),
                "dsa": arch in m.get("dsa", ()) and (by_name or cfg.get(m.get("dsa_key", "index_topk")) is not None),
                "draft_is_target": tuple(m.get("draft_is_target", ())),
                "auto_spec": tuple(m.get("auto_spec", {}).get(arch or "", m.get("auto_spec_other", ())))}

    def apply(self, fields: dict, facts: dict, why: dict[str, str] | None = None) -> Outcome:
        """The rules in order over `fields` (the parsed line with the parser's defaults); Refused where a rule
        refuses."""
        f = dict(fields)
        why = dict(why or {})
        fired = []
        for r in self.rules:
            state = {**facts, **f}
            try:
                hit = evaluate(r.when, state)
            except (TypeError, KeyError, IndexError) as e:
                raise ValueError(f"{self.path}: rule {r.id}: {r.when!r} fails ({e})") from None
            if not hit:
                continue
            cite = self.cite(r.cite)
            if r.refuse is not None:
                says = r.refuse.format(**state)
                raise Refused(f"{self.engine} {self.version} refuses it: \"{says}\" ({cite})", says, cite, r.id)
            changed = False
            for k, v in r.set.items():
                new = evaluate(v[1:], state) if isinstance(v, str) and v.startswith("=") else v
                if isinstance(new, tuple):
                    new = list(new)
                if f.get(k) != new or k not in f:
                    f[k] = new
                    why[k] = f"{r.says} ({cite})" if r.says else cite
                    changed = True
            if changed:
                fired.append(r.id)
        return Outcome(f, why, fired)


RULES_DIR = "rules"


def available() -> list[tuple[str, str]]:
    """(engine, version) of every rules file kbench ships, oldest first per engine."""
    out = []
    for p in resources.files("kbench.recommend").joinpath(RULES_DIR).iterdir():
        m = re.fullmatch(r"([a-z]+)-(.+)\.toml", p.name)
        if m:
            out.append((m.group(1), m.group(2)))
    return sorted(out, key=lambda ev: (ev[0], tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.]", ev[1]))))


@functools.lru_cache(maxsize=None)
def load_rules(engine: str, version: str | None = None) -> RuleSet:
    """The rules of an engine release (version None: the newest kbench ships)."""
    have = [v for e, v in available() if e == engine]
    if not have:
        raise BadInput(f"kbench has no resolution rules for {engine}")
    version = version or have[-1]
    if version not in have:
        raise BadInput(f"kbench has no resolution rules for {engine} {version} (it has {', '.join(have)})")
    name = f"{engine}-{version}.toml"
    data = tomllib.loads(resources.files("kbench.recommend").joinpath(RULES_DIR, name).read_text())
    rules = [Rule(**r) for r in data.get("rule", [])]
    ids = [r.id for r in rules]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name}: a rule id is used twice")
    for r in rules:  # every expression parses before any line is resolved
        _parse(r.when)
        for v in r.set.values():
            if isinstance(v, str) and v.startswith("="):
                _parse(v[1:])
    return RuleSet(data["engine"], data["version"], data["root"], f"kbench/recommend/{RULES_DIR}/{name}",
                   data.get("models", {}), data.get("flags", {}), data.get("inert", {}), data.get("defaults", {}),
                   data.get("defaults_cite", {}), rules, data.get("report", []))
