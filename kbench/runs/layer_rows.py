"""One row per (part, tokens) of a `kbench layers` run (kind "layers", registered here on import): a model's work
outside attention timed on the GPU (kbench.engine.layers). Its own kind, so kernel reports and gates never read it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from kbench.runs.store import register_row_kind

ROW_KIND = "layers"


def case_id(part: str, tokens: int) -> str:
    return f"{part}-t{tokens}"


@dataclass
class LayerRow:
    case_id: str
    model: str  # the kbench model preset
    part: str  # kbench.kernels.model_layers.PARTS
    tokens: int
    status: str  # ok | failed | skipped
    reason: str = ""
    method: str = ""  # measured (dense GEMMs) | estimate (MoE experts touched): the words say how
    copies: int = 1  # weight copies rotated (L2 holds none of them)
    weight_bytes: int = 0
    dtype: str = "bf16"
    tp: int = 1
    median_us: float | None = None
    p25_us: float | None = None
    p75_us: float | None = None
    iqr_us: float | None = None
    rel_spread: float | None = None
    num_samples: int = 0
    timer: str = ""
    stop: str = ""
    samples_us: list[float] = field(default_factory=list)
    device: str = ""
    sm: int = 0
    measured_at: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


COLUMNS = [f.name for f in fields(LayerRow)]
register_row_kind(ROW_KIND, COLUMNS, ("samples_us",))
