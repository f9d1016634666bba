"""A run's manifest as a typed, versioned object, and the one answer to "may these runs be merged, gated
or pooled into a baseline, and if not, why".

manifest.json stays the file every kbench version wrote (kbench.store writes it); `Manifest.of(run)` reads
it tolerantly (a hand-edited or older manifest: missing keys are None, a device given as a string is its
name, the GPU read from the rows when the manifest lacks it). `comparable(a, b, purpose)` is the contract:

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
from dataclasses import dataclass, field

import pandas as pd

from kbench.store import Run

MANIFEST_VERSION = 1  # of this reading of manifest.json; the rows' schema is RESULT_SCHEMA_VERSION
MERGE = "merge"
POOL = "pool"
GATE = "gate"
# manifest fields that must agree for rows to belong to one run (a merged run keeps them)
MERGE_FIELDS = ("kind", "schema_version", "kbench_version", "scenario", "timer", "slow_kernel", "seed")
# timer settings that change what a number means (kbench.timer); a missing key is an older kbench
TIMER_KEYS = ("kind", "duty", "min_time_s", "fence", "l2", "spread_target", "warmup_ms")


@dataclass(frozen=True)
class Hardware:
    name: str | None
    sm: int | None

    def describe(self) -> str:
        parts = [self.name or "unknown GPU"]
        if self.sm:
            parts.append(f"SM{self.sm}")
        return ", ".join(parts)


@dataclass
class Manifest:
    kind: str
    raw: dict  # manifest.json as read
    hardware: Hardware
    device_key: tuple  # (name, sm) exactly as the manifest says (merge compares these)
    scenario: dict = field(default_factory=dict)
    timer: dict = field(default_factory=dict)
    num_runs: int = 1  # runs a baseline was built from (a plain run: 1)
    copy_bandwidth_gbs: float | None = None  # device-to-device copy (bytes read + written), kbench.hardware
    read_bandwidth_gbs: float | None = None  # read-only reduction; None in runs from before it was measured
    version: int = MANIFEST_VERSION

    @property
    def ceiling(self) -> tuple[str, float | None]:
        return ceiling(self.copy_bandwidth_gbs, self.read_bandwidth_gbs)

    @classmethod
    def of(cls, run: Run) -> "Manifest":
        m = run.manifest
        sc = m.get("scenario") if isinstance(m.get("scenario"), dict) else {}
        timer = m.get("timer") if isinstance(m.get("timer"), dict) else {}
        return cls(run.kind, m, hardware_of(run), device_key(m), sc, timer, num_runs(m),
                   _gbs(m.get("copy_bandwidth_gbs")), _gbs(m.get("read_bandwidth_gbs")))

    def get(self, key: str, default=None):
        return self.raw.get(key, default)


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


def _unique(rows: pd.DataFrame, col: str, skip) -> list:
    if col not in rows:
        return []
    return sorted({v for v in rows[col].dropna().tolist() if v not in skip}, key=str)


def hardware_of(run: Run) -> Hardware:
    """From the manifest's device; rows' device/sm columns when the manifest lacks it."""
    dev = run.manifest.get("device")
    name = sm = None
    if isinstance(dev, dict):
        name, sm = dev.get("name"), dev.get("sm")
    elif isinstance(dev, str):
        name = dev
    if not name:
        names = _unique(run.rows, "device", ("",))
        name = names[0] if len(names) == 1 else None
    if not sm:
        sms = _unique(run.rows, "sm", (0, "", "0"))
        sm = sms[0] if len(sms) == 1 else None
    try:
        sm = int(sm) if sm not in (None, "") else None
    except (TypeError, ValueError):
        sm = None
    return Hardware(str(name) if name else None, sm or None)


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
    return {
        "run kind": m.kind,
        "GPU model": m.hardware.name,
        "SM version": m.hardware.sm,
        "scenario": m.scenario.get("name") if m.scenario else m.get("scenario"),
        "model": m.scenario.get("model"),
        "heads": json.dumps(m.scenario.get("heads"), sort_keys=True),
        "timer": json.dumps({k: v for k, v in m.timer.items() if k != "spread"}, sort_keys=True),
        "--slow-kernel": json.dumps(m.get("slow_kernel") or {}, sort_keys=True),
    }


def _pool(a: Manifest, b: Manifest, v: Verdict) -> None:
    first, ident = identity(a), identity(b)
    diff = [f"{k} {first[k]!s} vs {ident[k]!s}" for k in first if first[k] != ident[k]]
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


def comparable(a: Run | Manifest, b: Run | Manifest, purpose: str) -> Verdict:
    """May runs a and b be merged (MERGE), pooled into a baseline (POOL) or gated (GATE: a = baseline)?"""
    ma = a if isinstance(a, Manifest) else Manifest.of(a)
    mb = b if isinstance(b, Manifest) else Manifest.of(b)
    v = Verdict()
    _RULES[purpose](ma, mb, v)
    return v
