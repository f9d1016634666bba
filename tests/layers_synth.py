"""Synthetic `kbench layers` runs for the whole-step tests: each part's time a known formula of its token count, so
the tests compute the whole step independently of kbench.recommend.step."""
from __future__ import annotations

from pathlib import Path

PER_TOKEN = {"target-layer": (100.0, 2.0), "target-dense-layer": (150.0, 3.0), "target-lm-head": (400.0, 5.0),
             "draft-layer": (110.0, 2.0), "draft-lm-head": (420.0, 5.0)}
TOKENS = (1, 4, 16, 64, 256, 512)


def t_part(part: str, tokens: int) -> float:
    """A part's time: a fixed weight read plus a cost per token (linear: interpolation between points is exact)."""
    base, per = PER_TOKEN[part]
    return base + per * tokens


def write_layers_run(out: Path, model: str = "llama3-8b", device: dict | None = None, tokens=TOKENS,
                     parts=None) -> Path:
    """A complete layers run folder under `out`, through kbench's own RunSession (as `kbench layers` writes it)."""
    from kbench.engine.layers import LayersPlan, manifest_for
    from kbench.kernels.model_layers import DENSE, METHOD, parts_of
    from kbench.cases.model_dims import model_dims
    from kbench.device import DeviceInfo
    from kbench.runs.layer_rows import LayerRow, case_id
    from kbench.runs.session import RunSession

    dev = DeviceInfo(cuda=True, **(device or {"name": "NVIDIA H200", "sm": 90}))
    dims = model_dims(model)
    plan = LayersPlan(model, [1, 16, 64], [4, 8], 1)
    with RunSession.new(out, f"layers-{model}", manifest_for(plan, dev, ["kbench", "layers"])) as run:
        for part in parts or parts_of(dims):
            for t in tokens:
                m = t_part(part, t)
                moe = dims.moe is not None and part in ("target-layer",)
                run.append(LayerRow(case_id(part, t), model, part, t, "ok", method=METHOD if moe else DENSE,
                                    median_us=m, p25_us=m, p75_us=m, iqr_us=0.0, rel_spread=0.001, num_samples=10,
                                    timer="cuda-graph", device=dev.name, sm=dev.sm).to_dict())
    return run.dir
