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

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

from kbench.errors import BadInput
from kbench.recommend.settings import FAMILY_NAME, STEP_LABEL, STEPS, Engine, Setting, gpu_family, parse_version
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
    host: dict = field(default_factory=dict)  # {"cpus", "cpu"}: the host the routes' host work was timed on
    model: str | None = None  # the runs' model preset (their scenario's `model`), when they agree on one

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
        return Source(pol, str(first), "policy", {"name": dev.get("name"), "sm": dev.get("sm")}, _host(pol))
    models = {(r.manifest.get("scenario") or {}).get("model") for r in rs.runs
              if isinstance(r.manifest.get("scenario"), dict)}
    model = next(iter(models)) if len(models) == 1 and isinstance(next(iter(models)), str) else None
    return Source(pol, ", ".join(map(str, paths)), "run", dict(rs.device), _host(pol), model)


def _host(policy: dict) -> dict:
    host = policy.get("host")
    return dict(host) if isinstance(host, dict) else {}


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
    host: dict[str, float] = field(default_factory=dict)  # route -> per-step host work (us) at the used cell
    host_iqr: dict[str, float] = field(default_factory=dict)
    spread: dict[str, float] = field(default_factory=dict)  # kernel -> relative spread of its median
    tree: str = "chain"
    attention: str = "gqa"
    kv_dtype: str | None = None
    page_size: int | None = None
    host_cpus: int | None = None
    host_cpu: str = ""
    # a step measured in another group: the draft extend after a draft tree runs the chain's shape (_locate_all)
    steps_at: dict[str, "Priced"] = field(default_factory=dict)

    def at(self, step: str) -> "Priced":
        """Where a step of this batch is measured: this group's cell, or the one steps_at names for the step."""
        return self.steps_at.get(step, self)


# SGLang 0.5.23's draft extend v2 after a verify fills the whole verified width, num_draft_tokens per request,
# causal, whatever the tree (eagle_worker_v2.py:1154-1157; flashattention_backend.py:1194-1207 and 2905-2911 set
# max_seq_len_q to it, flashinfer_backend.py:807-818 plans it causal): the shape of a chain of that many tokens
TREE_DRAFT_EXTEND = ("python/sglang/srt/speculative/eagle_worker_v2.py:1154-1157; "
                     "layers/attention/flashattention_backend.py:1194-1207, 2905-2911")


def _beyond(grid: dict, query: dict) -> dict[str, float]:
    out = {}
    for ax in LOOKUP_AXES:
        lo, hi, v = min(grid[ax]), max(grid[ax]), query[ax]
        if v > hi:
            out[ax] = v / hi
        elif v < lo:
            out[ax] = lo / v
    return out


class _AtPage:
    """The workload's batches located at the page the engine runs a setting at: SGLang moves the page for some
    backends (trtllm_mha runs 16/32/64/128, else 64: kbench.recommend.resolve.sglang_page), so a setting the user
    would switch to is priced at its own page when the run measured it, not at the user's."""

    def __init__(self, source: Source, workload: Workload, max_extrapolation: float, priced: list[Priced],
                 page: int | None, user_page: int | None):
        self.source, self.workload, self.max_x = source, workload, max_extrapolation
        self.page, self.user_page = page, user_page  # the page priced (the run's), the page the user's line runs
        self.located: dict[int, list[Priced] | None] = {page: priced} if page is not None else {}
        self.priced = priced

    def __call__(self, runs_at: int | None, why: str, engine: str) -> tuple[list[Priced], str]:
        """(the batches to price the setting on, a note when they are not at the user's page)."""
        if runs_at is None or runs_at == self.user_page:
            return self.priced, ""
        why = "the page your line gives" if why == "given" else why
        if runs_at not in self.located:
            batches = [dataclasses.replace(b, group=tuple(sorted({**b.filters, "page_size": runs_at}.items())))
                       for b in self.workload.batches]
            try:
                self.located[runs_at] = _locate_all(self.source, Workload(batches, self.workload.source,
                                                                          self.workload.header), self.max_x)
            except BadInput:
                self.located[runs_at] = None
        there = self.located[runs_at]
        if there is None:
            return self.priced, (f"{engine} runs it at page {runs_at} ({why}); the run has no rows at page "
                                 f"{runs_at}: priced at page {self.page}")
        cache = (f"; at page {runs_at} its radix cache reuses a prompt prefix in whole pages of {runs_at} tokens "
                 "(python/sglang/srt/mem_cache/radix_cache.py:178-220, 0.5.23)"
                 if engine == "sglang" and runs_at > (self.user_page or 1) else "")
        return there, f"priced at page {runs_at}, where {engine} runs it ({why}){cache}"


def _locate_all(source: Source, workload: Workload, max_extrapolation: float) -> list[Priced]:
    groups: dict[tuple, dict] = {}
    out = []
    for b in workload.batches:
        p = _locate(source, workload, b, b.group, groups, max_extrapolation)
        if p.tree != "chain" and "draft_extend" in b.steps:  # its draft extend: a chain of as many tokens
            chain = tuple(sorted({**b.filters, "tree": "chain"}.items()))
            try:
                p.steps_at["draft_extend"] = _locate(source, workload, b, chain, groups, max_extrapolation)
            except BadInput as e:
                raise BadInput(f"{workload.source}: {b.label}: the draft extend after a {p.tree} tree runs the shape "
                               f"of a chain of {b.q_len} tokens ({TREE_DRAFT_EXTEND}), and the run has no chain "
                               f"rows to price it ({e}): measure --tree chain too, or price --steps verify") from None
        out.append(p)
    return out


def _locate(source: Source, workload: Workload, b: Batch, key: tuple, groups: dict, max_extrapolation: float) -> Priced:
    """Batch b in the group its filters `key` select (groups: those selected so far, by key)."""
    if key not in groups:
        try:
            groups[key] = select_group(source.policy, **dict(key))
        except BadInput as e:
            raise BadInput(f"{workload.source}: {b.label}: {e}") from None
    g = groups[key]
    tree = g.get("tree", "chain")
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
    cell = found["used_cell"]
    return Priced(b, g.get("label") or group_label(g), found["used"], dict(cell.get("kernels_us") or {}),
                  found["interpolated"], found["extrapolated"], found["clamped"], beyond, q_dist != "fixed",
                  host=dict(cell.get("kernels_host_us") or {}), host_iqr=dict(cell.get("kernels_host_iqr_us") or {}),
                  spread=dict(cell.get("kernels_rel_spread") or {}), tree=tree, attention=g.get("attention", "gqa"),
                  kv_dtype=g.get("kv_dtype"), page_size=g.get("page_size"), host_cpus=source.host.get("cpus"),
                  host_cpu=source.host.get("cpu", ""))


# ---- the answer ------------------------------------------------------------------------------------------
OVERLAP_MODES = ("max", "sum")
OVERLAP_RULE = {
    "max": "host work overlaps GPU work (the previous step's, and the other phase's of the same step): one engine "
           "step (target verify + draft extend) costs max(host work, GPU work), plus the host work that waits for "
           "the GPU (a device-to-host read in plan()), which cannot overlap",
    "sum": "host work and GPU work one after the other: one engine step costs host work + GPU work",
}


@dataclass
class StepCost:
    """One (batch, step) under one setting: the route (or kernel) that runs it and what it costs per step."""
    route: str  # the kbench kernel whose rows price it (a route, or the plain kernel of a bound)
    gpu_us: float  # layers x the kernel's median
    host_us: float  # the route's per-step host work (0: none measured)
    total_us: float  # this phase alone under the overlap rule (per-shape routing compares phases with it)
    noise_us: float  # layers x median x rel_spread + host IQR / 2: what one measurement may be off by
    waits: bool = False  # the host work waits for the GPU: it never overlaps
    step: str = ""  # verify | draft_extend


def batch_total(costs: list[StepCost], overlap: str, fenced: bool = False) -> float:
    """One engine step of a batch (its phases: target verify, draft extend) under the overlap rule. fenced: the
    engine's scheduler waits for the previous step's verify on the GPU before it prepares the next step (SGLang's
    overlap scheduler with a backend that reads sequence lengths on the CPU), so host work overlaps only the other
    phases' GPU work."""
    gpu = sum(c.gpu_us for c in costs)
    free = sum(c.host_us for c in costs if not c.waits)
    waiting = sum(c.host_us for c in costs if c.waits)
    if overlap == "max" and fenced:
        verify = sum(c.gpu_us for c in costs if c.step == "verify")
        return verify + max(free, gpu - verify) + waiting
    return (max(free, gpu) if overlap == "max" else free + gpu) + waiting


@dataclass
class SettingResult:
    setting: Setting
    kernels: dict[str, str | None]  # step -> the route (or kernel) that runs it on this GPU (None: unmeasured)
    total_us: float | None  # weighted sum over the workload; None when it cannot be priced
    per_step_us: float | None
    unpriced: str = ""  # why not priced (a bound, when there is one, is in bound_us)
    reason: str = ""  # the unpriced reason without the setting's own name: settings refused alike share it (render)
    missing: list[str] = field(default_factory=list)  # "route at bs .. q .. kv .." without a time
    notes: list[str] = field(default_factory=list)  # the routes' caveats
    same_as: list[str] = field(default_factory=list)  # settings with the same routes on this GPU
    priced_low: list[str] = field(default_factory=list)  # steps priced from a plain kernel, not the engine's route
    you_run: bool = False  # the configuration the user's server resolves to (--current)
    fenced: bool = False  # the engine waits for the previous verify before preparing a step (see batch_total)
    gpu_us: float | None = None  # the total's GPU part (weighted sum)
    host_us: float | None = None  # the total's host part (weighted sum, before overlap)
    noise_us: float = 0.0
    bound_us: float | None = None  # not priced: a lower bound from the plain kernel's GPU time alone
    tied_with: list[str] = field(default_factory=list)  # settings within the measured noise of this one
    default: bool = False
    overlap: str = "sum"
    page_size: int | None = None  # the page its rows are from
    runs_at: int | None = None  # the page the engine runs it at from the user's line (it may move the user's page)
    batch_us: list[float] = field(default_factory=list)  # one engine step of each batch (the workload's order)
    batch_costs: list[list[StepCost]] = field(default_factory=list)  # its phases


def default_kv_dtype(priced: list[Priced]) -> str | None:
    """The KV-cache dtype of the workload's batches when they share one (which setting an engine resolves by default
    may depend on it: Setting.is_default); None when they do not or it is not known."""
    kinds = {p.kv_dtype for p in priced}
    return kinds.pop() if len(kinds) == 1 else None


@dataclass
class Driver:
    batch: Batch
    step: str
    weight_share: float  # of the workload's weight
    gap_us: float  # weight x (best setting's step cost - oracle's), in the total's units
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
    results: list[SettingResult]  # priced first (fastest first, ties by the rule), then the unpriced
    engine_oracle_us: float | None
    kbench_oracle_us: float | None
    engine_oracle_kernels: dict[str, dict[str, float]]  # step -> route -> weight share where it is the oracle
    drivers: list[Driver]
    extrapolated: list[Priced]
    interpolated_weight: float  # share of the weight priced at a neighbour, not a measured point
    notes: list[str]
    overlap: str = "sum"  # the overlap rule asked for (max | sum)
    overlap_from: str = ""  # where it comes from: the engine's default (and its citation) or the option
    spec: object = None  # kbench.recommend.flags.SpecConfig of the workload
    page_size: int | None = None
    host_cpus: int | None = None
    host_cpu: str = ""
    current: object = None  # kbench.recommend.resolve.Resolved: what the user's server runs (--current)
    default_resolved: object = None  # the engine's own resolution with no backend flag (the default's why)
    layers_known: bool = True  # False: no model preset, no --verify-layers: prices are per attention layer
    cap_flag: int | None = None  # the cap the printed command sets (the priced batch is above the engine's cap)
    default_why: str = ""  # why the default is that setting (the engine's rule, cited)
    plan: object = None  # kbench.recommend.ranks.RankPlan: what one GPU of the --current line runs
    kv_dtype: str | None = None  # the KV-cache dtype of the rows priced (bf16, fp8: e4m3), when they share one

    @property
    def you_run(self) -> SettingResult | None:
        return next((r for r in self.results if r.you_run), None)

    @property
    def default(self) -> SettingResult | None:
        return next((r for r in self.results if r.default), None)

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


@functools.lru_cache(maxsize=None)  # asked per (batch, setting, step): the registry's answer never changes
def _waits_for_gpu(route: str) -> bool:
    """Whether a route's host work blocks on the GPU (kbench.kernels.routes: it cannot overlap GPU work)."""
    from kbench.kernels.registry import get_kernel, kernel_names

    return route in kernel_names() and bool(getattr(get_kernel(route), "host_waits_for_gpu", False))


def step_cost(p: Priced, route: str, layers: int, overlap: str, step: str = "", host: bool = True) -> StepCost | None:
    """The cost of one step of batch p on `route` (its cell's kernel time x layers, plus its host work under the
    overlap rule); None when the cell has no time for it."""
    p = p.at(step)
    t = p.times.get(route)
    if t is None:
        return None
    host = p.host.get(route, 0.0) if host else 0.0
    gpu = layers * t
    waits = _waits_for_gpu(route)
    total = max(host, gpu) if overlap == "max" and not waits else host + gpu
    noise = gpu * p.spread.get(route, 0.0) + p.host_iqr.get(route, 0.0) / 2
    return StepCost(route, gpu, host, total, noise, waits, step)


def check_overlap(engine: Engine, overlap: str | None) -> tuple[str, str]:
    """(mode, where it comes from): the engine's default (from the table, with its citation), or the mode asked
    for when the engine has it; BadInput for a mode the engine does not have."""
    modes = engine.overlap_modes
    if overlap in (None, "", "engine"):
        mode = engine.overlap_default
        return mode, f"{engine.label}'s default ({engine.overlap_why})"
    if overlap not in OVERLAP_MODES:
        raise BadInput(f"--host-overlap {overlap!r}: one of engine, {', '.join(OVERLAP_MODES)}")
    if overlap not in modes:
        raise BadInput(f"--host-overlap {overlap}: {engine.label} has no such mode (it has: {', '.join(modes)}; "
                       f"{engine.overlap_why})")
    return overlap, "--host-overlap " + overlap + (f" ({modes[overlap]})" if modes[overlap] else "")


def recommend(source: Source, workload: Workload, engine: Engine, *, settings: list[str] | None = None,
              flashinfer: str | None = None, layers: dict[str, int] | None = None,
              max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION, gpu: str | None = None,
              top: int = 5, overlap: str | None = None, current=None, layers_known: bool = True,
              cap_check: bool = True, preset: str | None = None) -> Recommendation:
    """preset: the model (a kbench preset) the workload is of [default: the run's]: its heads, spread over the GPUs
    of the --current line (kbench.recommend.ranks), pick the rows of one rank."""
    from kbench.recommend.flags import check_spec, spec_of

    layers = {s: 1 for s in STEPS} | (layers or {})
    _layers_ok(layers)
    max_batch = max(b.batch_size for b in workload.batches)  # the server's whole batch (the cap is the server's)
    plan = None
    if current is not None:
        workload, plan = _per_rank(source, workload, current, preset or source.model)
    if not max_extrapolation >= 1:
        raise BadInput(f"--max-extrapolation {max_extrapolation}: must be >= 1 (1: no extrapolation)")
    mode, mode_from = check_overlap(engine, overlap)
    eager = plan is not None and plan.eager
    if eager:  # one Python thread issues the step's plan and every layer's launch: nothing overlaps
        mode, mode_from = "sum", (f"{plan.eager_flag} (eager: the host work that plans a step and the layers' "
                                  "launches come from one Python thread, one after the other)")
    fam = check_gpu(source, gpu)
    wl_gpu = workload.header.get("gpu") if isinstance(workload.header, dict) else None
    if wl_gpu:
        check_gpu(source, str(wl_gpu), f"{workload.source}: its header's gpu")
    if flashinfer is not None:  # routes compare it with the table's versions: junk is refused, not compared
        flashinfer = str(parse_version(flashinfer, "--flashinfer"))
    fi = flashinfer or engine.flashinfer
    priced = _locate_all(source, workload, max_extrapolation)
    kinds = sorted({p.attention for p in priced})
    if len(kinds) > 1:
        raise BadInput(f"{workload.source}: the workload's batches are both GQA and MLA groups: one model at a time")
    attention = kinds[0]
    if settings:
        chosen = []
        for ident in settings:
            s = engine.setting(ident)
            if s.attention != attention:
                raise BadInput(f"setting {ident!r} is for {s.attention.upper()} models and the workload's group is "
                               f"{attention.upper()}: pick one of "
                               f"{', '.join(x.id for x in engine.valid_on(fam, attention)) or 'none'}")
            if fam not in s.gpus:
                raise BadInput(f"setting {ident!r} ({s.flags}) is not valid on {FAMILY_NAME[fam]}, the GPU of "
                               f"{source.label} ({source.device_label}); {engine.label} runs it on "
                               f"{', '.join(FAMILY_NAME[g] for g in s.gpus)}")
            for kv in sorted({p.kv_dtype for p in priced} & set(s.refuses_kv)):
                raise BadInput(f"setting {ident!r} ({s.flags}): {s.refuses_kv[kv].text(engine.label)}")
            chosen.append(s)
    else:
        chosen = engine.valid_on(fam, attention)
    if not chosen:
        raise BadInput(f"{engine.label}: no {attention.upper()} setting in the table is valid on {FAMILY_NAME[fam]}")
    spec = spec_of(workload, [p.tree for p in priced])
    check_spec(engine.engine, "(any)", "", spec)  # a q_len or tree no setting of the engine makes: exit 2
    if settings:  # a setting named on purpose that the engine refuses for this spec config: exit 2
        for s in chosen:
            check_spec(engine.engine, s.id, s.flags, spec)
    pages = sorted({p.page_size for p in priced if p.page_size})
    total_w = workload.total_weight
    page = pages[0] if len(pages) == 1 else None
    from kbench.recommend.resolve import check_cap

    cap_flag = check_cap(engine.engine, current, max_batch) if cap_check else None
    if current is not None:
        if current.engine != engine.engine:
            raise BadInput(f"--current is a {current.engine} server and --engine is {engine.engine}: give one engine")
        if current.attention != attention:
            raise BadInput(f"--current serves a {current.attention.upper()} model and the run's group is "
                           f"{attention.upper()}: price it on a run of that kind of attention")
        if (current.spec.q_len, current.spec.topk) != (spec.q_len, spec.topk):
            raise BadInput(f"--current verifies {current.spec.q_len} tokens (topk {current.spec.topk}) and the "
                           f"workload {spec.q_len} (topk {spec.topk}): price what the server runs")
        spec = current.spec
    from kbench.recommend.resolve import engine_default, setting_for

    default_setting, default_resolved = (None, None)
    if page is not None:
        default_setting, default_resolved = engine_default(
            engine, fam, attention, spec, page, argv=current.argv if current is not None else None,
            env=current.env if current is not None else None)
    mine = setting_for(engine, current) if current is not None else None
    kv = default_kv_dtype(priced)
    if plan is not None and plan.kv_engine == "fp8_e5m2":
        kv = "fp8_e5m2"  # priced on no rows: kbench's fp8 rows are e4m3 (_price_setting says so per setting)
    default_why = default_resolved.why.get("attention_backend", "") if default_resolved is not None else ""
    if default_setting is None:  # a backend the table has no setting for: the table's own default, if any
        default_setting = engine.default_for(fam, attention, kv)
        default_why = "the table's default_on" if default_setting is not None else ""
    elif default_setting.refuses_kv.get(kv):  # the engine falls to another backend for this KV dtype
        refusal = default_setting.refuses_kv[kv]
        default_why += f"; then {refusal.text(engine.label)}"
        default_setting = engine.setting(refusal.falls_to)

    results = []
    at_page = _AtPage(source, workload, max_extrapolation, priced, page,
                      current.page_size if current is not None else page)
    from kbench.recommend.resolve import given_page, setting_page

    line_page = given_page(current) if current is not None else page
    placed: dict[str, tuple[int | None, list[Priced], str]] = {}  # setting id -> (the page it runs at, rows, note)
    for s in {x.id: x for x in [*chosen, *engine.valid_on(fam, attention)]}.values():
        runs_at, why = setting_page(engine.engine, s.flags, line_page) if page is not None else (None, "")
        placed[s.id] = (runs_at, *at_page(runs_at, why, engine.engine))
    for s in chosen:
        runs_at, s_priced, note = placed[s.id]
        r = _price_setting(s, s_priced, fam, fi, layers, mode, engine, spec, kv, eager)
        r.page_size = s_priced[0].page_size if s_priced else page
        r.runs_at = runs_at
        r.notes += [note] if note and (r.total_us is not None or r.missing) else []  # where its page mattered
        r.default = default_setting is not None and s.id == default_setting.id
        r.you_run = mine is not None and s.id == mine.id
        results.append(r)
    _rank(results, fam)
    same: dict[tuple, list[str]] = {}
    for r in results:
        same.setdefault(tuple(r.kernels.get(step) for step in STEPS), []).append(r.setting.id)
    for r in results:
        r.same_as = [i for i in same[tuple(r.kernels.get(step) for step in STEPS)] if i != r.setting.id]

    # per-shape routing: in the engine, at each batch the cheapest of its settings, each priced as a whole step the
    # way the engine runs it (its host work, its overlap fence, the page it runs at: _price_setting), so on a
    # one-shape workload it is the best single setting; in kbench, the fastest kernel measured there (GPU time
    # alone, no host work: a floor)
    whole = {r.setting.id: r for r in results}
    for s in engine.valid_on(fam, attention):
        if s.id not in whole:
            whole[s.id] = _price_setting(s, placed[s.id][1], fam, fi, layers, mode, engine, spec, kv, eager)
    eng_total, kb_total = 0.0, 0.0
    oracle_of: dict[tuple[int, str], StepCost] = {}
    oracle_kernels: dict[str, dict[str, float]] = {step: {} for step in STEPS}
    eng_ok = kb_ok = True
    for i, p in enumerate(priced):
        here = [(r.batch_us[i], r.setting.id, r.batch_costs[i]) for r in whole.values()
                if r.total_us is not None and r.batch_us]
        if here:
            cost, _, costs = min(here, key=lambda x: (x[0], x[1]))
            for c in costs:
                oracle_of[(i, c.step)] = c
                oracle_kernels[c.step][c.route] = oracle_kernels[c.step].get(c.route, 0.0) + p.batch.weight / total_w
            eng_total += p.batch.weight * cost
        else:
            eng_ok = False
        rows_all = [priced, *{id(placed[x][1]): placed[x][1] for x in placed}.values()]
        for step in p.batch.steps:
            times = [min(rows[i].at(step).times.values()) for rows in rows_all if rows[i].at(step).times]
            if times:
                kb_total += p.batch.weight * layers[step] * min(times)
            else:
                kb_ok = False

    cpus = sorted({p.host_cpus for p in priced if p.host_cpus})
    rec = Recommendation(engine, fam, source, workload, fi, layers, results, eng_total if eng_ok else None,
                         kb_total if kb_ok else None, oracle_kernels, [],
                         [p for p in priced if p.extrapolated],
                         sum(p.batch.weight for p in priced if p.interpolated) / total_w,
                         sorted({n for b in workload.batches for n in b.notes})[:20], mode, mode_from, spec,
                         pages[0] if len(pages) == 1 else None, cpus[0] if cpus else None,
                         next((p.host_cpu for p in priced if p.host_cpu), ""), current, default_resolved,
                         layers_known, cap_flag, default_why, plan=plan)
    rec.notes += plan.notes if plan is not None else []
    rec.kv_dtype = default_kv_dtype(priced)
    best = rec.best
    if best is not None and eng_ok:
        gaps = []
        for i, p in enumerate(placed[best.setting.id][1]):
            for step in p.batch.steps:
                c = step_cost(p, best.kernels[step] if not p.ragged else _kernel_for(best.setting, step, fam, fi, True),
                              layers[step], mode, step)
                o = oracle_of[(i, step)]
                if c is None:
                    continue
                g = p.batch.weight * (c.total_us - o.total_us)
                if g > 0:
                    gaps.append(Driver(p.batch, step, p.batch.weight / total_w, g, 0.0, c.route, o.route, c.total_us,
                                       o.total_us))
        whole = sum(d.gap_us for d in gaps)
        for d in gaps:
            d.share = d.gap_us / whole if whole else 0.0
        rec.drivers = sorted(gaps, key=lambda d: -d.gap_us)[:top]
    return rec


def _per_rank(source: Source, workload: Workload, current, preset: str | None):
    """The workload as one GPU of the --current line runs it (kbench.recommend.ranks): its heads per rank and KV
    dtype as group filters, its share of the batch under DP attention, the steps its algorithm runs; BadInput when
    the run has no rows of that rank, naming a run beside it that has them."""
    from kbench.recommend.ranks import rank_plan, run_heads_words

    plan = rank_plan(current, preset)
    groups = source.policy.get("groups", [])
    if plan.eager and not has_eager_rows(groups):
        raise BadInput(f"--current: your line runs {plan.eager_flag} (no CUDA graphs: every layer launched from "
                       f"Python), and {source.label} has no eager rows (`<route>-eager`, timed as launched), only "
                       "routes timed as CUDA-graph replays, which would understate every step: not priced"
                       + which_run_answers(source, {"eager": True}))
    want: dict = {}
    if plan.counts is not None:
        from kbench.cases.models import heads_text

        def fits(g) -> bool:  # the rank's head counts (and, where the model's widths are known, its whole spelling)
            if plan.heads is not None:
                return heads_text(g) == plan.heads
            return ((int(g.get("num_qo_heads", 0)), int(g.get("num_kv_heads", 0))) == plan.counts
                    and g.get("attention", "gqa") == current.attention)

        hits = sorted({heads_text(g) for g in groups if fits(g)})
        mine = plan.heads or (hits[0] if len(hits) == 1 else
                              f"{plan.counts[0]} q / {plan.counts[1]} KV")
        if len(hits) != 1:
            have = ", ".join(sorted({heads_text(g) for g in groups}))
            tp = (f"the model's heads over TP{plan.attn_tp}" if plan.attn_tp > 1 else
                  "all the model's heads on one GPU" + (f", DP attention over {plan.dp}" if plan.dp > 1 else ""))
            words = run_heads_words(source)
            raise BadInput(f"--current: your line runs {mine} heads per GPU ({tp}); {source.label} has rows of {have} "
                           f"only" + (f" ({words})" if words else "") + ": not priced from them"
                           + which_run_answers(source, {"heads": mine if plan.heads else None,
                                                        "counts": None if plan.heads else plan.counts,
                                                        "kv_dtype": plan.kv_rows if plan.kv_rows
                                                        not in (None, "fp8_e5m2") else None}))
        want["heads"] = mine
    kvs = {g.get("kv_dtype") for g in groups}
    kv = "fp8" if plan.kv_rows == "fp8_e5m2" else plan.kv_rows
    if kv is None and len(kvs) > 1:
        kv = "bf16" if "bf16" in kvs else None  # the line's cache is the model's dtype (auto)
    if kv is not None:
        if kv not in kvs:
            from kbench.recommend.ranks import SGLANG_E5M2

            # no run of any kind measures e5m2 (kbench's fp8 rows are e4m3): say why rather than "measure them"
            why = ("; no kbench run measures fp8_e5m2 (kbench's fp8 rows are e4m3)"
                   + (f" ({SGLANG_E5M2}, not a kbench kernel)" if current.engine == "sglang" else "")
                   if plan.kv_rows == "fp8_e5m2" else
                   which_run_answers(source, {"heads": want.get("heads"), "kv_dtype": kv}))
            raise BadInput(f"--current: your line runs a {plan.kv_engine} KV cache; {source.label} has rows of "
                           f"{', '.join(sorted(map(str, kvs)))} KV caches only: not priced" + why)
        want["kv_dtype"] = kv
    if plan.layer_mix:  # gpt-oss: rows of every layer kind, or the run that has them named
        from kbench.cases.models import heads_text
        from kbench.recommend.ranks import GPT_OSS_REFUSAL
        from kbench.report.policy import LATER_KEYS

        for kind, _, words in plan.layer_mix:
            if not any(all(str(g.get(k, LATER_KEYS.get(k))) == str(v) for k, v in kind)
                       and ("heads" not in want or heads_text(g) == want["heads"]) for g in groups):
                raise BadInput(GPT_OSS_REFUSAL.split(", on {backends}")[0] + f"; {source.label} has no rows of its "
                               f"{words} (sinks on" + (", window 128" if "window" in words else "") + "): not "
                               "priced" + which_run_answers(source, {**dict(kind), "heads": want.get("heads")}))
    batches = []
    for b in workload.batches:
        f = b.filters
        for k, v in want.items():
            if k in f and str(f[k]) != str(v):
                raise BadInput(f"--{k.replace('_', '-')} {f[k]}: your --current line runs {v}: give one")
        steps = tuple(st for st in b.steps if st in plan.steps) or b.steps
        bs = plan.rank_batch(b.batch_size, current.cap if getattr(current, "cap_given", False) else None)
        group = tuple(sorted({**f, **want}.items()))
        nb = dataclasses.replace(b, batch_size=bs, group=group, steps=steps)
        if bs != b.batch_size or group != b.group:
            nb = dataclasses.replace(nb, label=nb.describe() if b.label == b.describe() else b.label)
        if not plan.layer_mix:
            batches.append(nb)
            continue
        for kind, share, words in plan.layer_mix:  # one batch a layer kind, its share of the layers as its weight
            g = tuple(sorted({**dict(group), **dict(kind)}.items()))
            batches.append(dataclasses.replace(nb, group=g, weight=nb.weight * share,
                                               label=f"{nb.label or nb.describe()} ({words})"))
    return Workload(batches, workload.source, workload.header), plan


def _kernel_for(s: Setting, step: str, fam: str, fi: str | None, ragged: bool = False, tree: bool = False) -> str | None:
    """What a setting's step runs: the engine's route when the table names one (its tree route for a topk > 1
    tree, when it has one), else its kernel."""
    r = s.route(step, fam, fi)
    if ragged and r.ragged_kernel:
        return r.ragged_kernel
    if tree and r.tree_route:
        return r.tree_route
    return r.route or r.kernel


def _setting_backends(engine: Engine, s: Setting) -> dict[str, str]:
    from kbench.recommend.resolve import _backends_of_setting

    return _backends_of_setting(engine.engine, s)


def _price_setting(s: Setting, priced: list[Priced], fam: str, fi: str | None, layers: dict[str, int], mode: str,
                   engine: Engine, spec, kv_dtype: str | None = None, eager: bool = False) -> SettingResult:
    """eager: the line runs without CUDA graphs: each step on its route's eager twin (kbench.kernels.routes.eager)."""
    from kbench.recommend.flags import check_spec

    routes = {step: s.route(step, fam, fi) for step in STEPS}
    tree = spec is not None and not spec.is_chain
    # only verify sees the tree: the draft extend after it runs a chain's shape (TREE_DRAFT_EXTEND)
    kernels = {step: _kernel_for(s, step, fam, fi, tree=tree and step == "verify") for step in STEPS}
    if eager:
        from kbench.kernels.routes.eager import eager_route_name

        no_route = sorted(STEP_LABEL[st] for st in STEPS if kernels[st] and not routes[st].route)
        kernels = {st: eager_route_name(k) if k and routes[st].route else None for st, k in kernels.items()}
        if no_route:
            why = f"kbench has no engine route for its {' and '.join(no_route)}, so none launched eagerly"
            return SettingResult(s, kernels, None, None, unpriced=why, default=False, overlap=mode,
                                 reason="no eager route (kbench times this step as a plain kernel only)")
    notes = sorted({r.note for r in routes.values() if r.note})
    default = False  # set by recommend(): what the engine resolves with no backend flag (kbench.recommend.resolve)
    fenced = engine.engine == "sglang" and bool(set(engine.fenced_by) & set(_setting_backends(engine, s).values()))
    # vLLM's drafter reuses the target's metadata: one step's host work is done once when both phases share a route
    host_once = engine.host_once and kernels["verify"] == kernels["draft_extend"]
    if kv_dtype == "fp8_e5m2" and all(kernels[step] for step in STEPS):  # an unmeasured backend says so below
        from kbench.recommend.ranks import SGLANG_E5M2

        fa3 = engine.engine == "sglang" and "fa3" in _setting_backends(engine, s).values()
        why = (f"{SGLANG_E5M2}: SGLang's Triton kernels, not measured" if fa3 else
               "an fp8_e5m2 KV cache: kbench's fp8 rows are fp8_e4m3, and no run measures e5m2")
        return SettingResult(s, kernels, None, None, unpriced=why, notes=notes, default=default, overlap=mode,
                             reason=("runs triton with fp8_e5m2 (python/sglang/srt/arg_groups/overrides.py:1263-1270), "
                                     "not measured" if fa3 else "no run measures an fp8_e5m2 KV cache (kbench's fp8 "
                                     "rows are e4m3); your line keeps --kv-cache-dtype fp8_e5m2"))
    refusal = s.refuses_kv.get(kv_dtype)
    if refusal:
        return SettingResult(s, kernels, None, None, unpriced=f"refused by the engine: {refusal.text(engine.label)}",
                             notes=notes, default=default, overlap=mode,
                             reason=f"{engine.engine} refuses with a {kv_dtype} KV cache (--all says what it runs)")
    try:
        check_spec(engine.engine, s.id, s.flags, spec)
        refusal = ""
        if s.chains_only and tree:
            refusal = (f"{engine.engine} setting {s.id!r} holds for topk 1 only: with topk {spec.topk} the engine "
                       "runs the plain backend")
    except BadInput as e:
        refusal = str(e)
    if refusal:
        short = (f"need topk 1 (your draft is a topk {spec.topk} tree; {engine.engine} refuses them or runs the plain "
                 "backend)" if tree else refusal.partition(": ")[2] or refusal)
        return SettingResult(s, kernels, None, None, unpriced=f"refused by the engine: {refusal}", notes=notes,
                             default=default, overlap=mode, reason=short)
    if not all(kernels[step] for step in STEPS):
        why = "; ".join(sorted({r.unmeasured for r in routes.values() if not r.kernel}))
        return SettingResult(s, kernels, None, None, unpriced=why, notes=notes, default=default, overlap=mode,
                             reason=f"not measured by kbench ({why})")
    total = gpu = host = noise = 0.0
    missing: list[str] = []
    bound, bound_ok = 0.0, True
    batch_us: list[float] = []
    batch_costs: list[list[StepCost]] = []
    for p in priced:
        costs = []
        for step in p.batch.steps:
            r = routes[step]
            plain = (r.ragged_kernel or r.kernel) if p.ragged else r.kernel
            rt = kernels[step] if r.route else None
            c = (step_cost(p, rt, layers[step], mode, step, host=not (host_once and step == "draft_extend"))
                 if rt and not p.ragged else None)
            if c is None:
                at = p.at(step)
                missing.append(f"{rt} at {_cell(at.used)} ({at.group})" if r.route and not p.ragged else
                               f"{STEP_LABEL[step]}: no route of the engine in kbench's table"
                               + (" for a ragged batch" if p.ragged and r.route else ""))
                t = at.times.get(plain)
                if t is None:
                    bound_ok = False
                else:
                    bound += p.batch.weight * layers[step] * t
                continue
            costs.append(c)
        w = p.batch.weight
        step_total = batch_total(costs, mode, fenced)
        batch_us.append(step_total)
        batch_costs.append(costs)
        total += w * step_total
        gpu += w * sum(c.gpu_us for c in costs)
        host += w * sum(c.host_us for c in costs)
        noise += w * sum(c.noise_us for c in costs)
        bound += w * step_total
    tw = sum(p.batch.weight for p in priced)
    if missing:
        n = len(set(missing))
        why = (f"{n} measured cell(s) have no time of the engine's route (not measured there, or it cannot run that "
               "case: `kbench sweep --kernels routes` on the shape says which)" if any(" at bs " in m for m in missing)
               else "; ".join(sorted(set(missing))))
        if bound_ok:
            why += "; the plain kernel's GPU time alone is a lower bound"
        return SettingResult(s, kernels, None, None, unpriced=why, missing=sorted(set(missing)), notes=notes,
                             bound_us=bound if bound_ok else None, default=default, overlap=mode,
                             reason="no rows of their routes at the priced shapes in this run")
    low = [step for step in STEPS if routes[step].priced_low]
    return SettingResult(s, kernels, total, total / tw, notes=notes, priced_low=low, gpu_us=gpu, host_us=host,
                         noise_us=noise, default=default, overlap=mode, fenced=fenced, batch_us=batch_us,
                         batch_costs=batch_costs)


def _flag_count(s: Setting) -> int:
    import shlex

    return len([a for a in shlex.split(s.flags) if a.startswith("-")])


def _rank(results: list[SettingResult], fam: str) -> None:
    """Fastest first; settings within the measured noise of the fastest tie, and a tie goes to the engine's default,
    then to the setting with the fewest flags (a setting priced from a plain kernel, not the engine's route, never
    leads a tie it could only join by a price that leaves its route's cost out). The unpriced come last."""
    priced = sorted((r for r in results if r.total_us is not None), key=lambda r: (r.total_us, r.setting.id))
    rest = [r for r in results if r.total_us is None]
    rest.sort(key=lambda r: (r.bound_us is None, r.bound_us or 0.0, r.setting.id))
    ordered: list[SettingResult] = []
    if priced:  # a tie is with the best only: the settings within the measured noise of the fastest
        lead = priced[0]
        tied = [r for r in priced if r.total_us - lead.total_us <= max(lead.noise_us, r.noise_us)]
        tied.sort(key=lambda r: (bool(r.priced_low), not r.you_run, not r.default, _flag_count(r.setting),
                                 r.total_us, r.setting.id))
        ids = [r.setting.id for r in tied]
        for r in tied:
            r.tied_with = [i for i in ids if i != r.setting.id] if len(tied) > 1 else []
        ordered = tied + [r for r in priced if r not in tied]
    results[:] = ordered + rest


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


def has_eager_rows(groups) -> bool:
    """Whether a run's policy groups hold times of eager routes (kbench.kernels.routes.eager)."""
    from kbench.kernels.routes.eager import SUFFIX

    return any(k.endswith(SUFFIX) for g in groups for c in g["cells"] for k in (c.get("kernels_us") or {}))


def runs_that_answer(source, want: dict, limit: int = 3) -> list[str]:
    """The runs beside the source's (its folder's other runs: results/baselines/ for a committed one) that have a
    group matching the filters `want` (heads, kv_dtype, tree, page_size; counts: (q heads, KV heads) where the heads'
    widths are not known; eager: True for runs with eager routes' rows): their paths, at most `limit`."""
    if source.kind != "run":
        return []
    first = Path(str(source.label).split(", ")[0])
    parent = first.parent
    out = []
    try:
        siblings = sorted(p for p in parent.iterdir() if p.is_dir() and (p / "manifest.json").is_file()
                          and p.resolve() != first.resolve())
    except OSError:
        return []
    from kbench.cases.models import heads_text

    eager, counts = bool(want.get("eager")), want.get("counts")
    want = {k: str(v) for k, v in want.items() if v is not None and k not in ("eager", "counts")}
    for p in siblings:
        try:
            src = load_source(p)
        except (BadInput, OSError, ValueError, KeyError):
            continue
        if eager and not has_eager_rows(src.policy.get("groups", [])):
            continue
        hits = [g for g in src.policy.get("groups", [])
                if all((heads_text(g) if k == "heads" else str(g.get(k))) == v for k, v in want.items())
                and (counts is None or (int(g.get("num_qo_heads", 0)), int(g.get("num_kv_heads", 0))) == tuple(counts))
                and any(c.get("kernels_host_us") for c in g["cells"])]  # engine routes: a plain run prices nothing
        if not hits:
            continue
        out.append(str(p))
        if len(out) >= limit:
            break
    return out


def which_run_answers(source, want: dict) -> str:
    """'; <run> has them' (or '; no run beside it has them either') for a refusal's end."""
    runs = runs_that_answer(source, want)
    if runs:
        return f"; {' and '.join(runs)} {'has' if len(runs) == 1 else 'have'} them: price it there"
    return "; no run beside it has them either: measure them on the GPU"
