"""The whole speculative step in the server's terms: attention (what `recommend` prices per setting) + the model's
other layers + the draft's decode passes + their host work, the saving as a share of that step, and tokens per
second = batch x accepted tokens per step / step time.

Per batch of the workload (bs requests, q tokens verified each, kv, the spec config's topk and steps):
  attention     the setting's price (kbench.recommend.price: target verify x layers + draft extend x draft
                layers + the routes' host work under the engine's overlap rule)
  other layers  target: dense_layers x target-dense-layer(bs q) + the other layers x target-layer(bs q)
                + target-lm-head(bs q); draft extend: draft-layer(bs q) + draft-lm-head(bs)
  draft passes  (steps - 1) passes (SGLang runs steps - 1 after draft extend: flashinfer_backend.py:2474; vLLM's
                drafter likewise), each: draft layers x the draft-decode route at (bs x topk rows, q 1, kv)
                + draft-layer(bs topk) + draft-lm-head(bs topk), plus the route's host work per pass (added where
                it waits for the GPU or the overlap rule is sum; else hidden behind the pass's GPU work)
Other-layer times come from a `kbench layers` run (kind "layers"), looked up by part and token count: linear
between the two measured token counts around it, clamped (and said so) outside them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from kbench import shell
from kbench.errors import BadInput


# ---- the other layers' rows ---------------------------------------------------------------------------------
@dataclass
class LayerTimes:
    model: str
    device: str
    sm: int
    times: dict[str, list[tuple[int, float]]]  # part -> sorted (tokens, median us)
    methods: dict[str, str]
    label: str = ""
    clamped: list[str] = field(default_factory=list)

    def at(self, part: str, tokens: int) -> float:
        pts = self.times.get(part)
        if not pts:
            raise BadInput(f"{self.label}: no {part} rows (measure them: kbench layers --model {self.model})")
        if tokens <= pts[0][0] or tokens >= pts[-1][0]:
            t0, v = pts[0] if tokens <= pts[0][0] else pts[-1]
            if t0 != tokens:
                note = f"{part} at {tokens} tokens priced at {t0} (the run's edge)"
                if note not in self.clamped:
                    self.clamped.append(note)
            return v
        for (a, va), (b, vb) in zip(pts, pts[1:]):
            if a <= tokens <= b:
                return va + (vb - va) * (tokens - a) / (b - a)
        raise AssertionError("unreachable")


def load_layers(path: str | Path) -> LayerTimes:
    """A `kbench layers` run folder (or a committed baseline of one)."""
    from kbench.runs.store import load_run

    run = load_run(path)
    if run.kind != "layers":
        raise BadInput(f"--layers {path}: a kbench layers run, not a {run.kind} run")
    times: dict[str, list[tuple[int, float]]] = {}
    methods: dict[str, str] = {}
    for r in run.rows.to_dict("records"):
        if r.get("status") != "ok" or r.get("median_us") is None or not math.isfinite(float(r["median_us"])):
            continue
        times.setdefault(str(r["part"]), []).append((int(r["tokens"]), float(r["median_us"])))
        methods[str(r["part"])] = str(r.get("method") or "")
    if not times:
        raise BadInput(f"--layers {path}: no measured rows")
    dev = run.manifest.get("device") if isinstance(run.manifest.get("device"), dict) else {}
    return LayerTimes(str(run.manifest.get("model") or ""), str(dev.get("name") or ""), int(dev.get("sm") or 0),
                      {p: sorted(v) for p, v in times.items()}, methods, str(path))


# ---- acceptance -----------------------------------------------------------------------------------------------
@dataclass
class Acceptance:
    length: float  # accepted tokens per step (the bonus token included), >= 1
    source: str  # "--accept-length 3.2" | "measured by server-bench in RUN (n cases)"


def acceptance(value: str | None, spec, engine: str, model: str | None = None) -> Acceptance | None:
    """--accept-length X, or a server-bench run folder whose measured acceptance length is taken (its engine and
    model checked against the line's); None when not given. BadInput: below 1, above steps + 1 (the drafted tokens
    and the target's own), a run of another engine or model, a run with no measured acceptance."""
    if value is None:
        return None
    text = str(value).strip()
    p = Path(text)
    if p.is_dir():
        length, src = _from_server_bench(p, engine, model)
    else:
        try:
            length = float(text)
        except ValueError:
            raise BadInput(f"--accept-length {text!r}: a number (accepted tokens per step) or a kbench server-bench "
                           "run folder") from None
        src = f"--accept-length {text}"
    most = spec.steps + 1
    if not math.isfinite(length) or length < 1 or length > most:
        where = "" if src.startswith("--accept-length") else f" ({src})"
        raise BadInput(f"--accept-length {length:g}{where}: accepted tokens per step are 1 (no draft accepted) to "
                       f"{most} ({spec.steps} drafted + the target's own) for this spec config")
    return Acceptance(length, src)


def _from_server_bench(path: Path, engine: str, model: str | None) -> tuple[float, str]:
    from kbench.runs.store import load_run

    run = load_run(path)
    if run.kind != "server-bench":
        raise BadInput(f"--accept-length {path}: a kbench server-bench run, not a {run.kind} run")
    backend = str(run.manifest.get("backend") or "")
    if backend and backend != engine:
        raise BadInput(f"--accept-length {path}: a {backend} server's run; the line is {engine}: measure the server "
                       "you price")
    run_model = str(run.manifest.get("model") or "")
    if model and run_model and run_model.rstrip("/").split("/")[-1] != str(model).rstrip("/").split("/")[-1]:
        raise BadInput(f"--accept-length {path}: measured on {run_model}, the line serves {model}: acceptance "
                       "depends on the model and its draft")
    vals = [float(r["acc_length"]) for r in run.rows.to_dict("records")
            if r.get("status") == "ok" and r.get("acc_length") is not None and float(r["acc_length"]) > 0]
    if not vals:
        raise BadInput(f"--accept-length {path}: no case of the run measured an acceptance length (a server without "
                       "speculative decoding, or no counters)")
    return sum(vals) / len(vals), f"measured by server-bench in {path} (mean of {len(vals)} case(s))"


# ---- the step whole -------------------------------------------------------------------------------------------
@dataclass
class WholeStep:
    setting: str
    attention_us: float  # the setting's price per step
    other_us: float  # target layers + LM head, draft extend's model
    passes: int
    draft_attention_us: float  # the draft passes' attention
    draft_model_us: float  # the draft passes' layer + LM head
    draft_host_us: float  # the draft passes' host work added
    draft_route: str | None
    missing: str = ""  # why the draft passes could not be priced ("" when they were)

    @property
    def total_us(self) -> float:
        return (self.attention_us + self.other_us + self.draft_attention_us + self.draft_model_us
                + self.draft_host_us)

    def tokens_per_s(self, batch_size: float, accept: Acceptance | None) -> float | None:
        return None if accept is None else batch_size * accept.length / (self.total_us * 1e-6)


def other_layers_us(lt: LayerTimes, dims, bs: int, q: int) -> float:
    """Target verify's other layers and LM head over bs x q tokens, and draft extend's model (its layer over the
    bs x q tokens, its LM head over the bs last ones)."""
    t = bs * q
    dense = dims.moe.dense_layers if dims.moe is not None else 0
    us = (dims.layers - dense) * lt.at("target-layer", t) + lt.at("target-lm-head", t)
    if dense:
        us += dense * lt.at("target-dense-layer", t)
    return us + lt.at("draft-layer", t) + lt.at("draft-lm-head", bs)


def draft_pass_model_us(lt: LayerTimes, bs: int, topk: int) -> float:
    return lt.at("draft-layer", bs * topk) + lt.at("draft-lm-head", bs * topk)


def whole_step(rec, r, lt: LayerTimes, dims) -> WholeStep:
    """Setting r of recommendation rec, whole, per step (weighted over the workload's batches as rec's price)."""
    from kbench.kernels.routes.draft_decode import DRAFT_DECODE_OF
    from kbench.recommend.price import _locate, step_cost

    spec = rec.spec
    passes = max(0, spec.steps - 1)
    route = DRAFT_DECODE_OF.get(r.kernels.get("draft_extend") or "")
    tw = rec.workload.total_weight
    other = d_att = d_model = d_host = 0.0
    missing = "" if route else f"no draft-decode route known for {r.kernels.get('draft_extend')}"
    groups: dict = {}
    draft_layers = rec.layers.get("draft_extend", 1) or 1
    for b in rec.workload.batches:
        w = b.weight / tw
        other += w * other_layers_us(lt, dims, b.batch_size, b.q_len)
        d_model += w * passes * draft_pass_model_us(lt, b.batch_size, spec.topk)
        if not passes or not route or missing:
            continue
        one = dataclasses.replace(b, batch_size=b.batch_size * spec.topk, q_len=1, steps=("verify",),
                                  group=tuple(sorted({**b.filters, "tree": "chain"}.items())))
        try:
            p = _locate(rec.source, rec.workload, one, one.group, groups, math.inf)
        except BadInput as e:
            missing = f"{route}: {e}"
            continue
        c = step_cost(p, route, draft_layers, "sum")
        if c is None:
            sweep = shell.kbench("sweep", "--kernels", route, "--q-len", "1")
            missing = f"{route} has no rows at q 1 (measure it: {sweep})"
            continue
        if p.clamped or p.interpolated:  # said only where the route was priced from that cell
            note = (f"{route} at bs {one.batch_size} q 1 kv {one.kv_len} priced at the measured cell bs "
                    f"{p.used['batch_size']} q {p.used['q_len']} kv {p.used['kv_len']}"
                    + (" (beyond the measured range)" if p.clamped else ""))
            if note not in lt.clamped:
                lt.clamped.append(note)
        d_att += w * passes * c.gpu_us
        if c.waits or rec.overlap == "sum":
            d_host += w * passes * c.host_us
    if missing:
        d_att = d_host = 0.0
    return WholeStep(r.setting.id, r.per_step_us, other, passes, d_att, d_model, d_host, route, missing)


@dataclass
class StepAnswer:
    layers: LayerTimes
    steps: list[WholeStep]  # you run (if any), best, the default
    accept: Acceptance | None
    batch_size: float  # the workload's mean batch size (weights)
    method_notes: list[str]

    def of(self, setting: str) -> WholeStep | None:
        return next((s for s in self.steps if s.setting == setting), None)


def answer(rec, lt: LayerTimes, accept: Acceptance | None) -> StepAnswer:
    """The whole step of what the user runs, the best setting and the default (those priced)."""
    from kbench.cases.model_dims import model_dims

    preset = lt.model
    dims = model_dims(preset)
    fam = rec.family
    card = str(rec.source.device.get("name") or "")
    if (lt.sm and rec.source.device.get("sm") and lt.sm != rec.source.device.get("sm")) or (
            lt.device and card and lt.device != card):
        raise BadInput(f"--layers {lt.label}: measured on {lt.device} (SM{lt.sm}), the attention on "
                       f"{rec.source.device_label}: time both on the GPU you deploy on")
    del fam
    want = [x for x in (rec.you_run, rec.best, rec.default) if x is not None and x.total_us is not None]
    seen, steps = set(), []
    for r in want:
        if r.setting.id not in seen:
            seen.add(r.setting.id)
            steps.append(whole_step(rec, r, lt, dims))
    tw = rec.workload.total_weight
    bs = sum(b.batch_size * b.weight for b in rec.workload.batches) / tw
    notes = sorted({f"{p}: {m}" for p, m in lt.methods.items() if m.startswith("estimate")})
    if dims.assumed:
        notes.append(f"{preset}: assumed {dims.assumed}")
    return StepAnswer(lt, steps, accept, bs, notes)


def lines(ans: StepAnswer, rec) -> list[str]:
    """The block recommend prints under the settings: each step whole, part by part, what is not priced and how
    tokens per second are taken (the step, its saving and tokens/s are in the headline: kbench.recommend.render)."""
    out = [f"the whole step, us ({ans.layers.model}'s other layers from {ans.layers.label}, {ans.layers.device}):"]
    mine = rec.you_run
    best = rec.best
    for s in ans.steps:
        tag = " (you run)" if mine is not None and s.setting == mine.setting.id else (
            " (best)" if best is not None and s.setting == best.setting.id else " (default)")
        att = "attention not priced" if s.missing else \
            f"attention {_us(s.draft_attention_us / max(s.passes, 1))} on {s.draft_route}"
        draft = (f" + {s.passes} draft passes x ({att} + layer and LM head {_us(s.draft_model_us / max(s.passes, 1))})"
                 if s.passes else "") + (f" + their host {_us(s.draft_host_us)}" if s.draft_host_us else "")
        out.append(f"  {s.setting}{tag}: {_us(s.total_us)} = attention {_us(s.attention_us)} + other layers "
                   f"{_us(s.other_us)}{draft}")
    for why in sorted({s.missing for s in ans.steps if s.missing}):
        out.append(f"  draft passes' attention not priced: {why}")
    if ans.accept is not None:
        out.append(f"  tokens/s = batch {ans.batch_size:g} x {ans.accept.length:.2f} accepted tokens per step / "
                   f"step time; acceptance {ans.accept.source}")
    for n in ans.method_notes + ans.layers.clamped:
        out.append(f"  note: {n}")
    return out


def compared(a: WholeStep, b: WholeStep) -> tuple[float, float, str]:
    """(a's step, b's step, why the draft passes' attention is left out of both): the two totals a saving is taken
    between, on the same parts (a draft-decode route unmeasured for one of them leaves it out of both)."""
    if not a.missing and not b.missing:
        return a.total_us, b.total_us, ""
    def part(s: WholeStep) -> float:
        return s.total_us - s.draft_attention_us - s.draft_host_us
    why = "; ".join(f"{s.setting}: {s.missing}" for s in (a, b) if s.missing)
    return part(a), part(b), why


def switch(ans: StepAnswer, rec) -> tuple[WholeStep, WholeStep] | None:
    """(what the user runs, or the default; the best) when they differ and both are priced."""
    mine, best = rec.you_run, rec.best
    a = ans.of(mine.setting.id) if mine is not None else None
    if a is None and rec.default is not None:
        a = ans.of(rec.default.setting.id)
    b = ans.of(best.setting.id) if best is not None else None
    return (a, b) if a is not None and b is not None and a is not b else None


def to_json(ans: StepAnswer, rec) -> dict:
    sw = switch(ans, rec)
    moved = None
    if sw is not None:
        ta, tb, left = compared(*sw)
        moved = {"from": sw[0].setting, "to": sw[1].setting, "step_from_us": ta, "step_to_us": tb,
                 "saving_us": ta - tb, "share_of_step": (ta - tb) / ta, "tokens_per_s_ratio": ta / tb,
                 "attention_share": (sw[0].attention_us - sw[1].attention_us) / sw[0].attention_us,
                 "draft_attention_left_out": left or None}
    return {"switch": moved, "layers_from": ans.layers.label, "model": ans.layers.model, "device": ans.layers.device,
            "accept_length": None if ans.accept is None else ans.accept.length,
            "accept_from": None if ans.accept is None else ans.accept.source, "batch_size": ans.batch_size,
            "steps": [{"setting": s.setting, "total_us": s.total_us, "attention_us": s.attention_us,
                       "other_layers_us": s.other_us, "draft_passes": s.passes,
                       "draft_attention_us": s.draft_attention_us, "draft_model_us": s.draft_model_us,
                       "draft_host_us": s.draft_host_us, "draft_route": s.draft_route,
                       "draft_unpriced": s.missing or None,
                       "tokens_per_s": s.tokens_per_s(ans.batch_size, ans.accept)} for s in ans.steps],
            "notes": ans.method_notes + ans.layers.clamped}


def _us(v: float) -> str:
    return f"{v:,.1f}" if v >= 10 else f"{v:.2f}"
