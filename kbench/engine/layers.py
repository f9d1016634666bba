"""`kbench layers`: a model's work outside attention, per part of a speculative step, timed on the GPU by kbench's
timer (CUDA-graph replays, fenced, duty-cycled: kbench.timing.timer.GraphTimer) into a run folder of kind "layers"
(kbench.runs.layer_rows). kbench.recommend.step prices a step's other layers and draft passes from these rows.

The token counts a step runs each part at (batch bs, q draft tokens verified per request, topk):
  target-layer, target-dense-layer, target-lm-head   bs x q   (target verify: every verified token's logits)
  draft-layer                                         bs x q   (draft extend over the verified tokens)
                                                      bs x topk (each draft decode pass)
  draft-lm-head                                       bs       (draft extend: the last token's logits)
                                                      bs x topk (each draft decode pass)
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from kbench.cases.model_dims import model_dims
from kbench.cases.models import MODELS
from kbench.errors import BadInput


def step_tokens(batch_sizes, q_lens, topk: int) -> dict[str, set[int]]:
    """part -> the token counts a step at these shapes runs it at (see the module's docstring)."""
    out: dict[str, set[int]] = {"target-layer": set(), "target-dense-layer": set(), "target-lm-head": set(),
                                "draft-layer": set(), "draft-lm-head": set()}
    for bs in batch_sizes:
        for q in q_lens:
            for p in ("target-layer", "target-dense-layer", "target-lm-head", "draft-layer"):
                out[p].add(bs * q)
        out["draft-layer"].add(bs * topk)
        out["draft-lm-head"] |= {bs, bs * topk}
    return out


@dataclass
class LayersPlan:
    preset: str
    batch_sizes: list[int]
    q_lens: list[int]
    topk: int

    def cases(self) -> list[tuple[str, int]]:
        from kbench.kernels.model_layers import parts_of

        dims = model_dims(self.preset)
        tokens = step_tokens(self.batch_sizes, self.q_lens, self.topk)
        return [(p, t) for p in parts_of(dims) for t in sorted(tokens[p])]


def check_plan(preset: str, batch_sizes: list[int], q_lens: list[int], topk: int) -> LayersPlan:
    model_dims(preset)  # a preset without its dimensions: one line naming what is missing
    if not batch_sizes or not q_lens or min(batch_sizes) < 1 or min(q_lens) < 1:
        raise BadInput("--batch-size and --q-len: positive integers")
    if not 1 <= topk <= 16:
        raise BadInput(f"--topk {topk}: 1..16 (the draft's branches per request)")
    return LayersPlan(preset, sorted(set(batch_sizes)), sorted(set(q_lens)), topk)


def measure_layers(plan: LayersPlan, run, device, timer, progress=None) -> int:
    """Time every (part, tokens) of the plan not yet in the run (a resumed run keeps its rows); rows appended as
    measured. Returns the number of rows written. device: kbench.device.DeviceInfo (CUDA)."""
    import torch

    from kbench.kernels.model_layers import build, spec
    from kbench.runs.layer_rows import LayerRow, case_id

    dims = model_dims(plan.preset)
    heads = MODELS[plan.preset]
    n = 0
    for part, tokens in plan.cases():
        cid = case_id(part, tokens)
        if (cid,) in run.done:
            continue
        s = spec(dims, heads, part, tokens)
        row = LayerRow(cid, plan.preset, part, tokens, "ok", method=s.method, weight_bytes=s.weight_bytes,
                       tp=dims.tp, device=device.name, sm=device.sm)
        try:
            fn, copies = build(dims, heads, part, tokens, device.torch_device)
            m = timer.measure(fn, copies=copies)
            row.copies = copies
            row.median_us, row.p25_us, row.p75_us, row.iqr_us = m.median_us, m.p25_us, m.p75_us, m.iqr_us
            row.rel_spread, row.num_samples, row.timer, row.stop = m.rel_spread, len(m.samples_us), m.timer, m.stop
            row.samples_us = list(m.samples_us)
        except torch.cuda.OutOfMemoryError as e:
            row.status, row.reason = "failed", f"out of GPU memory: {str(e).splitlines()[0]}"
        finally:
            fn = None
            torch.cuda.empty_cache()
        row.measured_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        run.append(row.to_dict())
        n += 1
        if progress is not None:
            progress(row)
    return n


def resumed_plan(run_dir) -> LayersPlan:
    """The plan a layers run was started with (its manifest), to measure the rows it lacks."""
    from kbench.runs.layer_rows import ROW_KIND
    from kbench.runs.store import check_run_folder, read_manifest

    m = read_manifest(check_run_folder(run_dir))
    cfg = m.get("config") if isinstance(m.get("config"), dict) else {}
    if m.get("kind") != ROW_KIND or not isinstance(m.get("model"), str):
        raise BadInput(f"--resume {run_dir}: not a kbench layers run")
    try:
        return check_plan(m["model"], [int(x) for x in cfg["batch_sizes"]], [int(x) for x in cfg["q_lens"]],
                          int(cfg["topk"]))
    except (KeyError, TypeError, ValueError):
        raise BadInput(f"--resume {run_dir}: its manifest's config lacks the shapes (batch_sizes, q_lens, topk)") from None


def manifest_for(plan: LayersPlan, device, command: list[str]):
    from kbench import __version__
    from kbench.cases.model_dims import model_dims
    from kbench.runs.layer_rows import ROW_KIND
    from kbench.runs.manifest import Manifest

    d = model_dims(plan.preset)
    return Manifest(kind=ROW_KIND, command=command, kbench_version=__version__, device=device.to_dict(),
                    model=plan.preset,
                    config={"batch_sizes": plan.batch_sizes, "q_lens": plan.q_lens, "topk": plan.topk,
                            "dims": {"hidden": d.hidden, "intermediate": d.intermediate, "vocab": d.vocab,
                                     "layers": d.layers, "tp": d.tp, "moe": None if d.moe is None else vars(d.moe),
                                     "draft": d.draft, "assumed": d.assumed, "source": d.source},
                            "not_timed": "attention (its own rows), RoPE, the KV-cache write, TP all-reduces"})
