"""The table of engine settings (engines.toml, shipped with kbench): for each engine release, each setting's flags,
the GPU families it is valid on, and per step (verify, draft_extend) the kbench kernel that runs it, each route
citing the engine source it was read from.

    table = load_table()
    eng = table.engine("sglang")                      # the newest version in the table, or engine("sglang", "0.5.23")
    for s in eng.valid_on("sm90"): s.kernel("verify", "sm90", flashinfer=eng.flashinfer)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

from packaging.version import InvalidVersion, Version

from kbench.errors import BadInput

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

TABLE_SCHEMA = "kbench.engines/1"
STEPS = ("verify", "draft_extend")
ATTENTIONS = ("gqa", "mla")
STEP_LABEL = {"verify": "target verify", "draft_extend": "draft extend"}
FAMILIES = ("sm80", "sm90", "sm100", "sm120")
FAMILY_NAME = {"sm80": "SM8x (Ampere, Ada)", "sm90": "SM90 (Hopper)", "sm100": "SM100/SM103 (Blackwell)",
               "sm120": "SM12x (Blackwell RTX)"}
FLASHINFER_CITE = "https://github.com/flashinfer-ai/flashinfer/blob/v{version}/{file}#L{first}-L{last}"


def gpu_family(sm) -> str | None:
    """The family of an SM version (90 -> sm90, 103 -> sm100); None for no or an unknown GPU."""
    if not isinstance(sm, int) or isinstance(sm, bool):
        return None
    if 80 <= sm < 90:
        return "sm80"
    if sm == 90:
        return "sm90"
    if 100 <= sm < 110:
        return "sm100"
    if 120 <= sm < 130:
        return "sm120"
    return None


def parse_version(text, option: str = "version") -> Version:
    """A version as pip reads it (PEP 440, packaging.version): '0.7.4', 'v0.34.0', '0.7.2.post1', '0.7.4+cu128';
    anything else ('abc', '0.7.4abc', '') is BadInput naming ``option``."""
    try:
        return Version(str(text).strip())
    except InvalidVersion:
        raise BadInput(f"{option} {text!r}: not a version (expected one like 0.7.4 or 0.7.2.post1)") from None


def version_key(text: str, option: str = "version") -> tuple[int, ...]:
    """'0.7.2.post1' -> (0, 7, 2): the release numbers, enough to order the versions the table names."""
    return parse_version(text, option).release


@dataclass(frozen=True)
class Cite:
    file: str  # path in the engine's repository; "flashinfer/prefill.py@0.7.4" for FlashInfer's own source
    lines: str  # "1749-1752" or "258"
    says: str  # what those lines do, in our words

    @property
    def span(self) -> tuple[int, int]:
        a, _, b = self.lines.partition("-")
        return int(a), int(b or a)

    def label(self) -> str:
        path, _, fi = self.file.partition("@")
        return f"{'flashinfer ' + fi + ' ' if fi else ''}{path}:{self.lines}"

    def url(self, template: str) -> str:
        path, _, fi = self.file.partition("@")
        first, last = self.span
        if fi:
            return FLASHINFER_CITE.format(version=fi, file=path, first=first, last=last)
        return template.format(file=path, first=first, last=last)


@dataclass(frozen=True)
class Route:
    step: str
    gpus: tuple[str, ...]
    kernel: str | None  # None: a kernel kbench does not measure (unmeasured says which)
    ragged_kernel: str | None = None
    route: str | None = None  # the kbench route (kbench.kernels.routes) that runs it as the engine does
    tree_route: str | None = None  # the route of a topk > 1 tree, when the engine takes another path for it
    unmeasured: str = ""
    flashinfer_below: str | None = None
    flashinfer_from: str | None = None
    note: str = ""
    priced_low: bool = False  # the engine runs a costlier path of the kernel than the one kbench times
    cites: tuple[Cite, ...] = ()

    def holds(self, family: str, flashinfer: str | None) -> bool:
        if family not in self.gpus:
            return False
        if flashinfer is not None:
            if self.flashinfer_below and version_key(flashinfer) >= version_key(self.flashinfer_below):
                return False
            if self.flashinfer_from and version_key(flashinfer) < version_key(self.flashinfer_from):
                return False
        return True


@dataclass(frozen=True)
class KvRefusal:
    """The engine refuses a setting with this KV-cache dtype and runs `falls_to` (a setting id) instead."""
    kv_dtype: str
    falls_to: str
    why: str
    cites: tuple[Cite, ...] = ()

    def text(self, engine_label: str) -> str:
        return (f"an {self.kv_dtype} KV cache: {self.why}; {engine_label} runs {self.falls_to} instead ("
                + ", ".join(c.label() for c in self.cites) + ")")


@dataclass(frozen=True)
class Setting:
    id: str
    flags: str
    gpus: tuple[str, ...]
    routes: tuple[Route, ...]
    default_on: tuple[str, ...] = ()
    attention: str = "gqa"  # the models it serves: gqa (GQA/MHA heads) or mla (latent attention)
    # KV-cache dtypes the engine refuses for this setting: kv dtype -> what it does instead (a cited KvRefusal)
    refuses_kv: dict = field(default_factory=dict, hash=False, compare=False)
    env: tuple[tuple[str, str], ...] = ()  # environment variables the setting needs (VAR, value), set before the command
    chains_only: bool = False  # the setting holds for topk 1 only (the engine ignores it for a tree)

    @property
    def env_text(self) -> str:
        """'VAR=value ...' as a shell line starts with it ('' without)."""
        return " ".join(f"{k}={v}" for k, v in self.env)

    def route(self, step: str, family: str, flashinfer: str | None = None) -> Route:
        hits = [r for r in self.routes if r.step == step and r.holds(family, flashinfer)]
        if len(hits) != 1:  # the table's own test keeps this from happening
            raise BadInput(f"engine table: setting {self.id!r} has {len(hits)} routes for {step} on {family}")
        return hits[0]

    def kernel(self, step: str, family: str, flashinfer: str | None = None, ragged: bool = False) -> str | None:
        r = self.route(step, family, flashinfer)
        return (r.ragged_kernel or r.kernel) if ragged else r.kernel

    def priced(self, family: str, flashinfer: str | None = None) -> bool:
        return all(self.route(s, family, flashinfer).kernel for s in STEPS)


@dataclass(frozen=True)
class Unreached:
    kernel: str
    why: str
    cites: tuple[Cite, ...] = ()


@dataclass(frozen=True)
class Engine:
    engine: str
    version: str
    read_from: str
    cite_url: str
    flashinfer: str | None
    settings: tuple[Setting, ...]
    unreached: tuple[Unreached, ...] = ()
    notes: tuple[str, ...] = ()
    # whether the engine overlaps a step's host work with the previous step's GPU work: its modes (max: overlapped,
    # sum: one after the other) with the flags that select each, the default, and why (cited)
    overlap_modes: dict = field(default_factory=lambda: {"sum": ""})
    overlap_default: str = "sum"
    overlap_why: str = ""
    overlap_cites: tuple[Cite, ...] = ()
    # backends whose need of CPU-side sequence lengths makes the overlap scheduler wait for the previous verify
    fenced_by: tuple[str, ...] = ()
    fence_why: str = ""
    fence_cites: tuple[Cite, ...] = ()
    # a step's host work is done once for both phases (the drafter reuses the target's metadata)
    host_once: bool = False
    host_why: str = ""
    host_cites: tuple[Cite, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"

    def setting(self, ident: str) -> Setting:
        for s in self.settings:
            if s.id == ident:
                return s
        raise BadInput(f"{self.label} has no setting {ident!r} (known: {', '.join(s.id for s in self.settings)})")

    def default_for(self, family: str, attention: str = "gqa", kv_dtype: str | None = None) -> Setting | None:
        """The setting the engine runs with no attention flag on this GPU family for this attention kind and KV-cache
        dtype: the table's default_on setting, or where the engine refuses that one for the KV dtype, the setting it
        falls to (refuses_kv); None when the table names no default there."""
        for s in self.valid_on(family, attention):
            if family in s.default_on:
                refusal = s.refuses_kv.get(kv_dtype)
                return self.setting(refusal.falls_to) if refusal else s
        return None

    def valid_on(self, family: str, attention: str | None = "gqa") -> list[Setting]:
        """The settings valid on a GPU family for one attention kind (None: every kind)."""
        return [s for s in self.settings if family in s.gpus and attention in (None, s.attention)]

    def kernels(self) -> set[str]:
        """Every kbench kernel some setting of this release reaches."""
        return {k for s in self.settings for r in s.routes for k in (r.kernel, r.ragged_kernel) if k}

    def unreached_kernels(self, known: list[str]) -> list[tuple[str, str, tuple[Cite, ...]]]:
        """(kernel, why, cites) for each kbench kernel in `known` that no setting reaches; a kernel the table has
        no word on is listed as such."""
        why = {u.kernel: u for u in self.unreached}
        reached = self.kernels()
        return [(k, why[k].why if k in why else "no setting in the table reaches it (no entry: not read yet)",
                 why[k].cites if k in why else ()) for k in known if k not in reached]


@dataclass
class Table:
    engines: list[Engine] = field(default_factory=list)

    def names(self) -> list[str]:
        return sorted({e.engine for e in self.engines})

    def versions(self, engine: str) -> list[str]:
        return sorted((e.version for e in self.engines if e.engine == engine), key=version_key)

    def engine(self, name: str, version: str | None = None) -> Engine:
        """One engine release; version None: the newest in the table."""
        if name not in self.names():
            raise BadInput(f"--engine {name!r}: unknown engine (the table has: {', '.join(self.names())})")
        versions = self.versions(name)
        if version is None:
            version = versions[-1]
        for e in self.engines:
            if e.engine == name and e.version == version:
                return e
        raise BadInput(f"--engine-version {version!r}: the table has {name} {', '.join(versions)} only")


# ---- reading the file ------------------------------------------------------------------------------------
def _cites(raw, where: str) -> tuple[Cite, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: cites must be a non-empty list")
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict) or set(c) != {"file", "lines", "says"}:
            raise ValueError(f"{where}.cites[{i}]: needs exactly file, lines, says")
        if not re.fullmatch(r"\d+(-\d+)?", str(c["lines"])):
            raise ValueError(f"{where}.cites[{i}]: lines {c['lines']!r} is not N or N-M")
        out.append(Cite(str(c["file"]), str(c["lines"]), str(c["says"])))
    return tuple(out)


def _route(raw: dict, setting_gpus: tuple[str, ...], where: str) -> Route:
    known = {"step", "gpus", "kernel", "ragged_kernel", "route", "tree_route", "unmeasured", "flashinfer_below",
             "flashinfer_from", "note", "priced_low", "cites"}
    extra = set(raw) - known
    if extra:
        raise ValueError(f"{where}: unknown key {sorted(extra)[0]!r}")
    if raw.get("step") not in STEPS:
        raise ValueError(f"{where}: step must be one of {', '.join(STEPS)}")
    if bool(raw.get("kernel")) == bool(raw.get("unmeasured")):
        raise ValueError(f"{where}: give kernel or unmeasured (one of them)")
    if raw.get("route") and not raw.get("kernel"):
        raise ValueError(f"{where}: a route runs a kernel: give kernel too")
    if raw.get("priced_low") and not raw.get("note"):
        raise ValueError(f"{where}: priced_low needs a note saying how the engine's path differs")
    for key in ("flashinfer_below", "flashinfer_from"):
        _table_version(raw.get(key), f"{where}: {key}")
    gpus = tuple(raw.get("gpus", setting_gpus))
    if not set(gpus) <= set(setting_gpus):
        raise ValueError(f"{where}: gpus {gpus} outside the setting's {setting_gpus}")
    return Route(step=raw["step"], gpus=gpus, kernel=raw.get("kernel"), ragged_kernel=raw.get("ragged_kernel"),
                 route=raw.get("route"), tree_route=raw.get("tree_route"),
                 unmeasured=raw.get("unmeasured", ""), flashinfer_below=raw.get("flashinfer_below"),
                 flashinfer_from=raw.get("flashinfer_from"), note=raw.get("note", ""),
                 priced_low=bool(raw.get("priced_low", False)), cites=_cites(raw.get("cites"), where))


def _overlap(raw, where: str) -> dict:
    """An engine's [engines.overlap]: modes = {max = "flags", sum = "flags"} (the modes it has), default, why, cites."""
    if raw is None:  # not read for this release: host work is added to the GPU work, never assumed hidden
        return dict(overlap_modes={"sum": ""}, overlap_default="sum",
                    overlap_why="not read for this release: host work counted on top of the GPU work")
    modes = raw.get("modes")
    if not isinstance(modes, dict) or not modes or not set(modes) <= {"max", "sum"}:
        raise ValueError(f"{where}.overlap: modes must map max and/or sum to the flags that select them")
    if raw.get("default") not in modes:
        raise ValueError(f"{where}.overlap: default must be one of its modes")
    fence = {}
    if raw.get("fenced_by"):
        fence = dict(fenced_by=tuple(map(str, raw["fenced_by"])), fence_why=str(raw.get("fence_why", "")),
                     fence_cites=_cites(raw.get("fence_cites"), f"{where}.overlap.fence"))
    return dict(overlap_modes={k: str(v) for k, v in modes.items()}, overlap_default=raw["default"],
                overlap_why=str(raw.get("why", "")), overlap_cites=_cites(raw.get("cites"), f"{where}.overlap"),
                **fence)


def _host(raw, where: str) -> dict:
    """An engine's [engines.host]: once_per_step (the drafter reuses the target's metadata), why, cites."""
    if not raw:
        return {}
    return dict(host_once=bool(raw.get("once_per_step")), host_why=str(raw.get("why", "")),
                host_cites=_cites(raw.get("cites"), f"{where}.host"))


def _table_version(value, where: str) -> None:
    """A version the table gives (a FlashInfer pin or bound): one that routes are compared with."""
    if value is not None:
        try:
            Version(str(value))
        except InvalidVersion:
            raise ValueError(f"{where} {value!r} is not a version") from None


def parse_table(data: dict) -> Table:
    """The table from engines.toml's data; ValueError naming the entry when it is malformed."""
    if data.get("schema") != TABLE_SCHEMA:
        raise ValueError(f"schema {data.get('schema')!r} is not {TABLE_SCHEMA!r}")
    engines = []
    for i, e in enumerate(data.get("engines", [])):
        where = f"engines[{i}] ({e.get('engine')} {e.get('version')})"
        _table_version(e.get("version"), f"{where}: version")
        _table_version(e.get("flashinfer"), f"{where}: flashinfer")
        settings = []
        for j, s in enumerate(e.get("settings", [])):
            sw = f"{where}.settings[{j}] ({s.get('id')})"
            gpus = tuple(s.get("gpus", ()))
            if not gpus or not set(gpus) <= set(FAMILIES):
                raise ValueError(f"{sw}: gpus must be a non-empty list of {', '.join(FAMILIES)}")
            routes = tuple(_route(r, gpus, f"{sw}.routes[{k}]") for k, r in enumerate(s.get("routes", [])))
            default_on = tuple(s.get("default_on", ()))
            if not set(default_on) <= set(gpus):
                raise ValueError(f"{sw}: default_on outside its gpus")
            attention = s.get("attention", "gqa")
            if attention not in ATTENTIONS:
                raise ValueError(f"{sw}: attention must be one of {', '.join(ATTENTIONS)}")
            refuses = {}
            for k, r in (s.get("refuses_kv") or {}).items():
                if k not in ("bf16", "fp16", "fp8") or not isinstance(r, dict) or set(r) != {"falls_to", "why", "cites"}:
                    raise ValueError(f"{sw}: refuses_kv.{k}: a KV dtype (bf16/fp16/fp8) with falls_to, why, cites")
                refuses[k] = KvRefusal(k, str(r["falls_to"]), str(r["why"]), _cites(r["cites"], f"{sw}.refuses_kv"))
            env = s.get("env", {})
            if not isinstance(env, dict) or not all(re.fullmatch(r"[A-Z_][A-Z0-9_]*", k) for k in env):
                raise ValueError(f"{sw}: env must map variable names to values")
            settings.append(Setting(id=str(s["id"]), flags=str(s["flags"]), gpus=gpus, routes=routes,
                                    default_on=default_on, attention=attention, refuses_kv=refuses,
                                    env=tuple((k, str(v)) for k, v in env.items()),
                                    chains_only=bool(s.get("chains_only", False))))
        ids = [s.id for s in settings]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{where}: a setting id is given twice")
        for s in settings:
            for r in s.refuses_kv.values():
                if r.falls_to not in ids:
                    raise ValueError(f"{where}: setting {s.id}: refuses_kv.{r.kv_dtype} falls to an unknown setting "
                                     f"{r.falls_to!r}")
        unreached = tuple(Unreached(str(u["kernel"]), str(u["why"]), _cites(u.get("cites"), f"{where}.unreached"))
                          for u in e.get("unreached", []))
        ov = _overlap(e.get("overlap"), where)
        engines.append(Engine(engine=str(e["engine"]), version=str(e["version"]), read_from=str(e["read_from"]),
                              cite_url=str(e["cite_url"]), flashinfer=e.get("flashinfer"),
                              settings=tuple(settings), unreached=unreached, notes=tuple(e.get("notes", ())), **ov,
                              **_host(e.get("host"), where)))
    return Table(engines)


_TABLE: Table | None = None


def load_table() -> Table:
    """The table shipped with kbench (read once)."""
    global _TABLE
    if _TABLE is None:
        text = resources.files("kbench.recommend").joinpath("engines.toml").read_text(encoding="utf-8")
        _TABLE = parse_table(tomllib.loads(text))
    return _TABLE


def known_kernels() -> list[str]:
    """kbench's kernels an engine could run (the registry's, less the reference, the test-only ones and the routes:
    a route is an engine's call of one of these kernels, reached by the settings that name it)."""
    from kbench.kernels.registry import all_kernels, is_route

    return [k.name for k in all_kernels()
            if k.path != "reference" and not getattr(k, "test_only", False) and not is_route(k)]
