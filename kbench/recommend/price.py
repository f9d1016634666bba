"""Price each engine setting on a workload, from a run's measurements (or a policy that keeps them).

For every batch of the workload and every step it runs (target verify, draft extend), the setting's kernel for
that step on the run's GPU family (kbench.recommend.settings) is priced at the measured cell `kbench select`
answers the shape with (kbench.report.nearest: the nearest measured neighbour, log2 in batch and KV, linear in
q; clamped to the measured box beyond it, and said so): that cell's median time of that kernel. A step costs
its time x the step's layer count (--verify-layers / --draft-layers, default 1: the time of one attention call);
a batch its steps; the workload the weighted sum (``total_us``), and per step the weighted mean (``per_step_us``).

Per-shape routing (the oracle) takes, at each (batch, step), the fastest kernel that some setting of this
engine reaches on this GPU (``engine_oracle``), or any kernel kbench measured there (``kbench_oracle``). The best
setting's gap to the engine oracle is what a per-shape switch in the engine would win; the drivers are the
(batch, step) pairs where most of that gap comes from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kbench.errors import BadInput
from kbench.recommend.settings import FAMILY_NAME, STEPS, Engine, Setting, gpu_family, parse_version
from kbench.recommend.workload import Batch, Workload
from kbench.report.nearest import LOOKUP_AXES, locate
from kbench.report.policy import group_label, policy_from, select_group
from kbench.runs.store import as_run_list

DEFAULT_MAX_EXTRAPOLATION = 2.0
MAX_LAYERS = 1000  # attention layers of one model (the largest today have about 130)
LAYER_FLAG = {"verify": "--verify-layers", "draft_extend": "--draft-layers"}


# ---- the measurements ------------------------------------------------------------------------------------
@dataclass
class Source:
    policy: dict  # with kernels_us in its cells
    label: str
    kind: str  # run | policy
    device: dict  # {"name", "sm"}

    @property
    def family(self) -> str | None:
        return gpu_family(self.device.get("sm"))

    @property
    def device_label(self) -> str:
        sm = self.device.get("sm")
        return f"{self.device.get('name') or 'unknown GPU'}" + (f" (SM{sm})" if sm else "")


def load_source(paths: list[str | Path] | str | Path) -> Source:
    """One policy file (from `kbench report`), or one or more sweep run folders (merged as `kbench report` does);
    a list, or one path."""
    paths = as_run_list(paths)
    pol, rs = policy_from(paths)
    if rs is None:
        first = paths[0]
        cells = [c for g in pol["groups"] for c in g["cells"]]
        if not cells or not any("kernels_us" in c for c in cells):
            raise BadInput(f"{first}: this policy keeps only each case's winner (written before kbench kept every "
                           "kernel's time): pass the run folder, or re-run kbench report on it")
        dev = pol.get("device") if isinstance(pol.get("device"), dict) else {}
        return Source(pol, str(first), "policy", {"name": dev.get("name"), "sm": dev.get("sm")})
    return Source(pol, ", ".join(map(str, paths)), "run", dict(rs.device))


def check_gpu(source: Source, want: str | None, where: str = "--gpu") -> str:
    """The run's GPU family, after checking it is the one asked for (an SM number, a family or a name part)."""
    fam = source.family
    if fam is None:
        raise BadInput(f"{source.label}: measured on {source.device_label}, which is no GPU kbench has engine "
                       "settings for (a CPU run has no kernel times): use a run from the GPU you deploy on")
    if want:
        w = str(want).strip().lower()
        sm = w.removeprefix("sm")
        ok = (w == fam or (sm.isdigit() and gpu_family(int(sm)) == fam and int(sm) == source.device.get("sm"))
              or (not sm.isdigit() and w in str(source.device.get("name") or "").lower()))
        if not ok:
            raise BadInput(f"{where} {want}: the measurements are from {source.device_label}, another GPU; "
                           "measure on the GPU you deploy on")
    return fam


# ---- one shape -------------------------------------------------------------------------------------------
@dataclass
class Priced:
    """One batch located in the measurements."""
    batch: Batch
    group: str
    used: dict
    times: dict[str, float]  # kernel -> us at the used cell
    interpolated: bool
    extrapolated: bool
    clamped: list[str]
    beyond: dict[str, float]  # axis -> factor beyond the measured range (1 < f)
    ragged: bool


def _beyond(grid: dict, query: dict) -> dict[str, float]:
    out = {}
    for ax in LOOKUP_AXES:
        lo, hi, v = min(grid[ax]), max(grid[ax]), query[ax]
        if v > hi:
            out[ax] = v / hi
        elif v < lo:
            out[ax] = lo / v
    return out


def _locate_all(source: Source, workload: Workload, max_extrapolation: float) -> list[Priced]:
    groups: dict[tuple, dict] = {}
    out = []
    for b in workload.batches:
        key = b.group
        if key not in groups:
            try:
                groups[key] = select_group(source.policy, **b.filters)
            except BadInput as e:
                raise BadInput(f"{workload.source}: {b.label}: {e}") from None
        g = groups[key]
        tree = g.get("tree", "chain")
        if tree != "chain":
            raise BadInput(f"{workload.source}: {b.label}: tree {tree}: kbench's engine table is read for EAGLE chains "
                           "(topk 1) only, so recommend prices chains only (SGLang 0.5.23 refuses trtllm_mha for "
                           "topk > 1); select and report answer per tree shape")
        if g.get("attention", "gqa") == "mla":
            raise BadInput(f"{workload.source}: {b.label}: {g.get('label') or group_label(g)} is latent attention "
                           "(MLA): kbench's engine table holds the engines' GQA/MHA attention settings only (their MLA "
                           "backends, e.g. SGLang's flashmla/trtllm_mla and vLLM's FLASHMLA, are not read yet), so "
                           "recommend prices GQA/MHA runs only; select and report answer per MLA shape")
        found = locate(g["grid"], g["cells"], b.batch_size, b.q_len, b.kv_len, extrapolate=True, error=BadInput)
        beyond = _beyond(g["grid"], found["query"])
        far = {ax: f for ax, f in beyond.items() if f > max_extrapolation}
        if far:
            ax, f = max(far.items(), key=lambda x: x[1])
            lo, hi = min(g["grid"][ax]), max(g["grid"][ax])
            raise BadInput(f"{workload.source}: {b.label}: {ax} {found['query'][ax]} is {f:.1f}x beyond the run's "
                           f"{lo}..{hi} (more than --max-extrapolation {max_extrapolation:g}x): measure it, or widen "
                           "--max-extrapolation to price it clamped to the edge")
        q_dist = dict(b.group).get("q_dist", g.get("q_dist", "fixed"))
        out.append(Priced(b, g.get("label") or group_label(g), found["used"],
                          dict(found["used_cell"].get("kernels_us") or {}), found["interpolated"],
                          found["extrapolated"], found["clamped"], beyond, q_dist != "fixed"))
    return out


# ---- the answer ------------------------------------------------------------------------------------------
@dataclass
class SettingResult:
    setting: Setting
    kernels: dict[str, str | None]  # step -> kernel on this GPU (None: unmeasured by kbench)
    total_us: float | None  # weighted sum over the workload; None when it cannot be priced
    per_step_us: float | None
    unpriced: str = ""  # why not priced
    missing: list[str] = field(default_factory=list)  # "kernel at bs .. q .. kv .." without a time
    notes: list[str] = field(default_factory=list)  # the routes' caveats
    same_as: list[str] = field(default_factory=list)  # settings with the same kernels on this GPU
    priced_low: list[str] = field(default_factory=list)  # steps the engine runs on a costlier path than timed


@dataclass
class Driver:
    batch: Batch
    step: str
    weight_share: float  # of the workload's weight
    gap_us: float  # weight x layers x (best setting's time - oracle's time), in the total's units
    share: float  # of the whole gap
    setting_kernel: str
    oracle_kernel: str
    setting_us: float
    oracle_us: float


@dataclass
class Recommendation:
    engine: Engine
    family: str
    source: Source
    workload: Workload
    flashinfer: str | None
    layers: dict[str, int]
    results: list[SettingResult]  # priced first (fastest first), then the unpriced
    engine_oracle_us: float | None
    kbench_oracle_us: float | None
    engine_oracle_kernels: dict[str, dict[str, float]]  # step -> kernel -> weight share where it is the oracle
    drivers: list[Driver]
    extrapolated: list[Priced]
    interpolated_weight: float  # share of the weight priced at a neighbour, not a measured point
    notes: list[str]

    @property
    def best(self) -> SettingResult | None:
        priced = [r for r in self.results if r.total_us is not None]
        return priced[0] if priced else None

    def gap_pct(self, r: SettingResult | None = None, oracle: float | None = None) -> float | None:
        r = r or self.best
        oracle = self.engine_oracle_us if oracle is None else oracle
        if r is None or r.total_us is None or not oracle:
            return None
        return (r.total_us / oracle - 1) * 100


def _layers_ok(layers: dict[str, int]) -> None:
    for s in STEPS:
        v = layers.get(s, 1)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_LAYERS:
            raise BadInput(f"{LAYER_FLAG[s]} {v}: attention layers of a model, 0..{MAX_LAYERS} "
                           f"(0: the step is not priced)")
    if not any(layers.get(s, 1) for s in STEPS):
        raise BadInput("--verify-layers and --draft-layers are both 0: nothing to price")


def recommend(source: Source, workload: Workload, engine: Engine, *, settings: list[str] | None = None,
              flashinfer: str | None = None, layers: dict[str, int] | None = None,
              max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION, gpu: str | None = None,
              top: int = 5) -> Recommendation:
    layers = {s: 1 for s in STEPS} | (layers or {})
    _layers_ok(layers)
    if not max_extrapolation >= 1:
        raise BadInput(f"--max-extrapolation {max_extrapolation}: must be >= 1 (1: no extrapolation)")
    fam = check_gpu(source, gpu)
    wl_gpu = workload.header.get("gpu") if isinstance(workload.header, dict) else None
    if wl_gpu:
        check_gpu(source, str(wl_gpu), f"{workload.source}: its header's gpu")
    if flashinfer is not None:  # routes compare it with the table's versions: junk is refused, not compared
        flashinfer = str(parse_version(flashinfer, "--flashinfer"))
    fi = flashinfer or engine.flashinfer
    if settings:
        chosen = []
        for ident in settings:
            s = engine.setting(ident)
            if fam not in s.gpus:
                raise BadInput(f"setting {ident!r} ({s.flags}) is not valid on {FAMILY_NAME[fam]}, the GPU of "
                               f"{source.label} ({source.device_label}); {engine.label} runs it on "
                               f"{', '.join(FAMILY_NAME[g] for g in s.gpus)}")
            chosen.append(s)
    else:
        chosen = engine.valid_on(fam)
    if not chosen:
        raise BadInput(f"{engine.label}: no setting in the table is valid on {FAMILY_NAME[fam]}")
    priced = _locate_all(source, workload, max_extrapolation)
    total_w = workload.total_weight

    # the engine's kernels per step on this GPU: what per-shape routing inside the engine could pick from
    reach: dict[str, set[str]] = {s: set() for s in STEPS}
    for s in engine.valid_on(fam):
        for step in STEPS:
            r = s.route(step, fam, fi)
            reach[step].update(k for k in (r.kernel, r.ragged_kernel) if k)

    results = []
    for s in chosen:
        kernels = {step: s.kernel(step, fam, fi) for step in STEPS}
        notes = sorted({s.route(step, fam, fi).note for step in STEPS if s.route(step, fam, fi).note})
        low = [step for step in STEPS if s.route(step, fam, fi).priced_low]
        if not all(kernels[step] for step in STEPS):
            why = "; ".join(sorted({s.route(step, fam, fi).unmeasured for step in STEPS if not kernels[step]}))
            results.append(SettingResult(s, kernels, None, None, unpriced=why, notes=notes))
            continue
        total, missing = 0.0, []
        for p in priced:
            for step in p.batch.steps:
                k = s.kernel(step, fam, fi, ragged=p.ragged)
                t = p.times.get(k)
                if t is None:
                    missing.append(f"{k} at {_cell(p.used)} ({p.group})")
                    continue
                total += p.batch.weight * layers[step] * t
        if missing:
            results.append(SettingResult(s, kernels, None, None, missing=sorted(set(missing)), notes=notes,
                                         unpriced=f"{len(set(missing))} measured cell(s) lack its kernel's time"))
        else:
            results.append(SettingResult(s, kernels, total, total / total_w, notes=notes, priced_low=low))
    results.sort(key=lambda r: (r.total_us is None, r.total_us if r.total_us is not None else 0, r.setting.id))
    same: dict[tuple, list[str]] = {}
    for r in results:
        same.setdefault(tuple(r.kernels.get(step) for step in STEPS), []).append(r.setting.id)
    for r in results:
        r.same_as = [i for i in same[tuple(r.kernels.get(step) for step in STEPS)] if i != r.setting.id]

    eng_total, kb_total = 0.0, 0.0
    oracle_of: dict[tuple[int, str], tuple[str, float]] = {}
    oracle_kernels: dict[str, dict[str, float]] = {s: {} for s in STEPS}
    eng_ok = kb_ok = True
    for i, p in enumerate(priced):
        for step in p.batch.steps:
            cands = {k: t for k, t in p.times.items() if k in reach[step]}
            if cands:
                k, t = min(cands.items(), key=lambda kt: (kt[1], kt[0]))
                oracle_of[(i, step)] = (k, t)
                eng_total += p.batch.weight * layers[step] * t
                oracle_kernels[step][k] = oracle_kernels[step].get(k, 0.0) + p.batch.weight / total_w
            else:
                eng_ok = False
            if p.times:
                kb_total += p.batch.weight * layers[step] * min(p.times.values())
            else:
                kb_ok = False

    rec = Recommendation(engine, fam, source, workload, fi, layers, results, eng_total if eng_ok else None,
                         kb_total if kb_ok else None, oracle_kernels, [],
                         [p for p in priced if p.extrapolated],
                         sum(p.batch.weight for p in priced if p.interpolated) / total_w,
                         sorted({n for b in workload.batches for n in b.notes})[:20])
    best = rec.best
    if best is not None and eng_ok:
        gaps = []
        for i, p in enumerate(priced):
            for step in p.batch.steps:
                k = best.setting.kernel(step, fam, fi, ragged=p.ragged)
                ok, ot = oracle_of[(i, step)]
                g = p.batch.weight * layers[step] * (p.times[k] - ot)
                if g > 0:
                    gaps.append(Driver(p.batch, step, p.batch.weight / total_w, g, 0.0, k, ok, p.times[k], ot))
        whole = sum(d.gap_us for d in gaps)
        for d in gaps:
            d.share = d.gap_us / whole if whole else 0.0
        rec.drivers = sorted(gaps, key=lambda d: -d.gap_us)[:top]
    return rec


def _cell(used: dict) -> str:
    return f"bs {used['batch_size']} q {used['q_len']} kv {used['kv_len']}"


def describe_beyond(p: Priced) -> str:
    """'kv_len 65536 -> 32768 (2.0x beyond)' for each clamped axis."""
    parts = []
    for c in p.clamped:
        ax = c.split(" ", 1)[0]
        f = p.beyond.get(ax)
        parts.append(f"{c} ({f:.1f}x beyond)" if f else c)
    return "; ".join(parts)


