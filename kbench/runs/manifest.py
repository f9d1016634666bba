"""A run's manifest as a typed, versioned object, and the one answer to "may these runs be merged, gated
or pooled into a baseline, and if not, why".

manifest.json is written from `Manifest` (kbench.runs.store.RunWriter, kbench.gate.baselines) and keeps the keys and
values every kbench version wrote: each key kbench writes is a typed field (FIELDS, in file order), a key the
file does not hold stays absent (ABSENT, never written as null), and a key this kbench does not know (a newer
kbench, a plug-in kind, a hand edit) is kept in `extra` and written back unchanged. `Manifest.from_dict` reads
tolerantly (old or hand-edited files: nothing is checked but what kbench.runs.store.read_manifest checks); kbench's
own writes are checked against the field types (a TypeError names the field). `Manifest.of(run)` adds the GPU
read from the rows when the manifest lacks it. `comparable(a, b, purpose)` is the contract:

  merge  shards of one run: the same kind, schema, kbench version, scenario (its source aside), timer,
         --slow-kernel and seed, on the same GPU model and SM version. Any difference refuses.
  pool   runs pooled into one baseline: the same kind, GPU, scenario (name, model, heads), timer (its
         description aside) and --slow-kernel. Any difference refuses.
  gate   baseline vs candidate: a different GPU model or SM refuses (--force compares anyway); an unknown
         GPU on one side, another result schema or other timer settings warn.

The bandwidth figures (`copy_bandwidth_gbs`, and `read_bandwidth_gbs` since the read ceiling: older runs and
the committed baseline have none) are measurements of the machine, not settings: no purpose compares them.
`ceiling(copy, read)` is the roofline ceiling a run's roofline_frac was computed against.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, make_dataclass
from typing import Any

MANIFEST_VERSION = 1  # of this reading of manifest.json; the rows' schema is RESULT_SCHEMA_VERSION
MERGE = "merge"
POOL = "pool"
GATE = "gate"
# manifest fields that must agree for rows to belong to one run (a merged run keeps them)
MERGE_FIELDS = ("kind", "schema_version", "kbench_version", "scenario", "timer", "slow_kernel", "seed")
# timer settings that change what a number means (kbench.timing.timer); a missing key is an older kbench. How long
# it warmed up, settled and sampled (warmup_ms, settle_ms, min_time_s, min_samples: shorter since issue #29) is not
# among them: a row's median is known to its spread target either way, and the gate weighs each row's own spread
TIMER_KEYS = ("kind", "duty", "fence", "l2", "spread_target")


class _Absent:
    """A key the manifest does not hold: written as nothing (not null), read by `get` as its default."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT = _Absent()
NUMBER = (int, float)

# Every key kbench writes, in the order the file holds them: (key, JSON type, may be null).
FIELDS: tuple[tuple[str, Any, bool], ...] = (
    ("kind", str, False),  # sweep | server-bench (kbench.runs.store.ROW_KINDS)
    ("schema_version", int, False),  # of the rows (RESULT_SCHEMA_VERSION)
    ("kbench_version", str, False),
    ("command_line", str, False),  # a sweep's
    ("command", (list, str), False),  # a server bench's argv (a string in hand-made runs)
    ("scenario", dict, False),  # Scenario.to_dict()
    ("device", dict, False),  # DeviceInfo.to_dict()
    ("python", str, False),
    ("copy_bandwidth_gbs", NUMBER, True),  # kbench.timing.hardware; null on a CPU
    ("clocks_start", dict, False),
    ("timer", dict, False),
    ("slow_kernel", dict, False),
    ("seed", int, False),
    ("shard", dict, True),  # {index, count}; null: the whole grid
    ("read_bandwidth_gbs", NUMBER, True),  # absent in runs from before the read ceiling
    ("roofline_ceiling", str, True),  # which of the two roofline_frac is against; null: neither measured (a CPU)
    ("memory_peak_gbs", NUMBER, False),  # the memory's theoretical peak (NVML), where it says: a ceiling above it is none
    ("adaptive", dict, False),  # an adaptive sweep's (kbench.engine.plans.adaptive_plan): options, rounds, stopped_by, ...
    # a server bench's (kbench.server.bench)
    ("url", str, False),
    ("backend", str, False),
    ("model", str, True),
    ("server", dict, True),
    ("vocab_size", int, True),
    ("vocab_source", str, True),
    ("config", dict, False),
    ("cases", list, False),
    # a merged run's (kbench.runs.merge)
    ("merged_from", list, False),
    ("all_shards", bool, False),
    # the run's life (kbench.runs.store.RunWriter, kbench.engine.sweep)
    ("start_time", str, False),
    ("resumed_at", list, False),
    ("status", str, False),  # running | complete | interrupted | partial
    ("isolated", bool, False),
    ("stopped_by", str, False),
    ("interrupted_at", str, False),
    ("worker_restarts", int, False),
    ("cuda_context_losses", list, False),
    ("wall_s", dict, False),  # this call's seconds (WallSplit) and first_ok_row_s; compile_s overlaps when streamed
    ("compile", dict, False),  # this call's compile step: mode (stream | before), modules, build wall, waited, ...
    ("wall_s_earlier", list, False),
    ("measurements", int, False),
    ("clocks_end", dict, False),
    ("end_time", str, False),
    ("num_rows", int, False),
    ("baseline", dict, False),  # kbench.gate.baselines: source runs, when
    # the files written with this manifest, {name: {bytes, sha256}} (kbench.files.record): a baseline's tables.
    # The manifest is written last; a reader refuses a folder whose files disagree with it (a half replace)
    ("files", dict, False),
    # a run's journal and the rows.parquet finalize wrote from it, {name: {bytes, sha256}}: the Parquet stands in
    # for the journal (kbench.runs.store.parquet_current) only while both are as recorded here
    ("tables", dict, False),
)
FILE_KEYS = tuple(k for k, _, _ in FIELDS)
_TYPES = {k: (t, nullable) for k, t, nullable in FIELDS}


def check_value(key: str, value) -> None:
    """TypeError unless value fits the field `key` (ABSENT always fits; unknown keys are not checked)."""
    if key not in _TYPES or value is ABSENT:
        return
    want, nullable = _TYPES[key]
    if value is None and nullable:
        return
    kinds = want if isinstance(want, tuple) else (want,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds) + (" or null" if nullable else "")
        raise TypeError(f"manifest field {key}: expected {names}, got {type(value).__name__}")


@dataclass(frozen=True)
class Hardware:
    name: str | None
    sm: int | None

    def describe(self) -> str:
        parts = [self.name or "unknown GPU"]
        if self.sm:
            parts.append(f"SM{self.sm}")
        return ", ".join(parts)


class _ManifestMethods:
    """manifest.json as a typed object: one field per key of FIELDS, `extra` for the keys kbench does not know."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> "Manifest":
        """TypeError (naming the field) unless every known field holds its type: what kbench writes is typed."""
        for k in FILE_KEYS:
            check_value(k, getattr(self, k))
        return self

    # -- reading and writing the file ----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict) -> "Manifest":
        """A manifest.json as read (tolerant: its values are kept as they are, for writing back unchanged)."""
        m = cls.__new__(cls)
        for k in FILE_KEYS:
            setattr(m, k, data.get(k, ABSENT))
        m.extra = {k: v for k, v in data.items() if k not in _TYPES}
        m.rows_hardware = None
        return m

    def to_dict(self) -> dict:
        """What manifest.json holds: the fields kbench knows in FIELDS order (absent ones left out), then extra."""
        out = {k: getattr(self, k) for k in FILE_KEYS if getattr(self, k) is not ABSENT}
        out.update(self.extra)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str) + "\n"

    # -- dict-style access (the writers set keys one by one as a run goes) -----------------------------------
    def get(self, key: str, default=None):
        v = getattr(self, key) if key in _TYPES else self.extra.get(key, ABSENT)
        return default if v is ABSENT else v

    def __contains__(self, key: str) -> bool:
        return self.get(key, ABSENT) is not ABSENT

    def __getitem__(self, key: str):
        v = self.get(key, ABSENT)
        if v is ABSENT:
            raise KeyError(key)
        return v

    def __setitem__(self, key: str, value) -> None:
        if key in _TYPES:
            check_value(key, value)
            setattr(self, key, value)
        else:
            self.extra[key] = value

    def setdefault(self, key: str, default):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, fields: dict | None = None, **more) -> None:
        for k, v in {**(fields or {}), **more}.items():
            self[k] = v

    # -- the comparability view -------------------------------------------------------------------------------
    @classmethod
    def of(cls, run) -> "Manifest":
        """A run's manifest (a kbench.runs.store.Run), with the GPU read from its rows when the manifest lacks it."""
        m = run.manifest if isinstance(run.manifest, _ManifestMethods) else cls.from_dict(run.manifest)
        m.rows_hardware = hardware_of(run)
        return m

    @property
    def hardware(self) -> Hardware:
        return self.rows_hardware or hardware_from(self.get("device"))

    @property
    def device_key(self) -> tuple:
        """(name, sm) exactly as the manifest says (merge compares these)."""
        return device_key(self.to_dict())

    @property
    def num_runs(self) -> int:
        return num_runs(self.to_dict())

    @property
    def scenario_dict(self) -> dict:
        return self.scenario if isinstance(self.scenario, dict) else {}

    @property
    def timer_dict(self) -> dict:
        return self.timer if isinstance(self.timer, dict) else {}

    @property
    def copy_gbs(self) -> float | None:
        return _gbs(self.get("copy_bandwidth_gbs"))

    @property
    def read_gbs(self) -> float | None:
        return _gbs(self.get("read_bandwidth_gbs"))

    @property
    def ceiling(self) -> tuple[str, float | None]:
        return ceiling(self.copy_gbs, self.read_gbs)

    version = MANIFEST_VERSION


Manifest = make_dataclass(
    "Manifest",
    [(k, Any, field(default=ABSENT)) for k in FILE_KEYS]
    + [("extra", dict, field(default_factory=dict)),
       ("rows_hardware", Any, field(default=None, repr=False, compare=False))],  # not in the file
    bases=(_ManifestMethods,))
Manifest.__module__ = __name__
Manifest.__doc__ = _ManifestMethods.__doc__


def hardware_from(dev) -> Hardware:
    name = sm = None
    if isinstance(dev, dict):
        name, sm = dev.get("name"), dev.get("sm")
    elif isinstance(dev, str):
        name = dev
    try:
        sm = int(sm) if sm not in (None, "") else None
    except (TypeError, ValueError):
        sm = None
    return Hardware(str(name) if name else None, sm or None)


@dataclass
class Verdict:
    refusals: list[str] = field(default_factory=list)  # why not (empty: allowed)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refusals


def _gbs(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def ceiling(copy_gbs: float | None, read_gbs: float | None) -> tuple[str, float | None]:
    """The roofline ceiling of roofline_frac: ('read', GB/s) when the read figure was measured, else
    ('copy', GB/s) (runs from before the read ceiling, or a read measurement that failed)."""
    return ("read", read_gbs) if read_gbs else ("copy", copy_gbs)


def num_runs(manifest: dict) -> int:
    """How many runs a baseline (or plain run: 1) was built from."""
    b = manifest.get("baseline")
    n = b.get("num_runs") if isinstance(b, dict) else None
    return int(n) if isinstance(n, int) and n > 0 else 1


def device_key(m: dict) -> tuple:
    d = m.get("device") or {}
    if not isinstance(d, dict):
        return (str(d), None)
    return (d.get("name"), d.get("sm"))


def _unique(rows, col: str, skip) -> list:
    if col not in rows:
        return []
    return sorted({v for v in rows[col].dropna().tolist() if v not in skip}, key=str)


def hardware_of(run) -> Hardware:
    """From the manifest's device; the rows' device/sm columns when the manifest lacks it (a kbench.runs.store.Run)."""
    hw = hardware_from(run.manifest.get("device"))
    name, sm = hw.name, hw.sm
    if not name:
        names = _unique(run.rows, "device", ("",))
        name = names[0] if len(names) == 1 else None
    if not sm:
        sms = _unique(run.rows, "sm", (0, "", "0"))
        sm = sms[0] if len(sms) == 1 else None
    return hardware_from({"name": name, "sm": sm})


def _merge(a: Manifest, b: Manifest, v: Verdict) -> None:
    for k in MERGE_FIELDS:
        x, y = a.get(k), b.get(k)
        if k == "scenario" and isinstance(x, dict) and isinstance(y, dict):
            x = {n: w for n, w in x.items() if n != "source"}
            y = {n: w for n, w in y.items() if n != "source"}
        if x != y:
            v.refusals.append(f"manifests differ in {k}")
            return
    if a.device_key != b.device_key:
        v.refusals.append(f"different GPU model or SM ({b.device_key} vs {a.device_key})")


def identity(m: Manifest) -> dict:
    """What must be equal for runs to be pooled: kind, GPU, scenario (name, model, heads), timer, slowdowns."""
    sc = m.scenario_dict
    return {
        "run kind": m.get("kind", "sweep"),
        "GPU model": m.hardware.name,
        "SM version": m.hardware.sm,
        "scenario": sc.get("name") if sc else m.get("scenario"),
        "model": sc.get("model"),
        "heads": json.dumps(sc.get("heads"), sort_keys=True),
        "timer": json.dumps({k: v for k, v in m.timer_dict.items() if k != "spread"}, sort_keys=True),
        "--slow-kernel": json.dumps(m.get("slow_kernel") or {}, sort_keys=True),
    }


def _said(v) -> str:
    return "not recorded" if v is None or v == "" or v == "null" else str(v)


def _pool(a: Manifest, b: Manifest, v: Verdict) -> None:
    first, ident = identity(a), identity(b)
    diff = [f"{k} {_said(first[k])} vs {_said(ident[k])}" for k in first if first[k] != ident[k]]
    if diff:
        v.refusals.append("; ".join(diff))


def _gate(base: Manifest, cand: Manifest, v: Verdict) -> None:
    vb, vc = base.get("schema_version"), cand.get("schema_version")
    if vb != vc:
        v.warnings.append(f"result schema versions differ (baseline {vb!r}, candidate {vc!r})")
    hb, hc = base.hardware, cand.hardware
    if hb.name and hc.name:
        if hb.name != hc.name:
            v.refusals.append(f"GPU model differs (baseline {hb.name!r}, candidate {hc.name!r})")
    elif hb.name or hc.name:
        v.warnings.append("GPU model unknown on one side; cannot check that the runs are comparable")
    if hb.sm and hc.sm and hb.sm != hc.sm:
        v.refusals.append(f"SM version differs (baseline SM{hb.sm}, candidate SM{hc.sm})")
    tb, tc = base.get("timer"), cand.get("timer")
    if isinstance(tb, dict) and isinstance(tc, dict):
        diff = [f"{k} {tb.get(k)!r} vs {tc.get(k)!r}" for k in TIMER_KEYS if tb.get(k) != tc.get(k)]
        if diff:
            v.warnings.append("the runs were timed with different settings (baseline vs candidate: " + "; ".join(diff)
                              + "): differences may come from the timer; rebuild the baseline with this kbench")


_RULES = {MERGE: _merge, POOL: _pool, GATE: _gate}


def comparable(a, b, purpose: str) -> Verdict:
    """May runs a and b (kbench.runs.store.Run or Manifest) be merged (MERGE), pooled into a baseline (POOL) or
    gated (GATE: a = baseline)?"""
    ma = a if isinstance(a, Manifest) else Manifest.of(a)
    mb = b if isinstance(b, Manifest) else Manifest.of(b)
    v = Verdict()
    _RULES[purpose](ma, mb, v)
    return v
