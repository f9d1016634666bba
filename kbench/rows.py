"""One row per (kernel, case): the unit every later step (report, gate, merge) reads.

Schema version RESULT_SCHEMA_VERSION (kbench/__init__.py); bump it when a column changes meaning.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from kbench.case import Case

STATUSES = ("ok", "skipped", "wrong", "failed")


@dataclass
class Row:
    # what was measured
    kernel: str
    path: str  # decode | context | reference
    backend: str  # the implementation that ran (xqa, trtllm-gen, fa2, ...)
    case_id: str
    batch_size: int
    q_len: int
    kv_len: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    kv_layout: str
    dtype: str
    kv_dtype: str
    # outcome
    status: str  # ok | skipped | wrong | failed
    reason: str = ""
    # time, microseconds per call
    median_us: float | None = None
    p25_us: float | None = None
    p75_us: float | None = None
    iqr_us: float | None = None
    min_us: float | None = None
    rel_spread: float | None = None  # relative half-width of the 95% CI of the median
    num_samples: int = 0
    calls_per_sample: int = 0
    samples_us: list[float] = field(default_factory=list)
    timer: str = ""  # cuda-graph | cuda-events | wall-clock
    l2: str = ""  # rotate-N (N input copies) | warm
    stop: str = ""  # why timing stopped: spread | budget | max-samples
    # roofline
    kv_bytes: int = 0
    kv_bandwidth_gbs: float | None = None  # KV bytes read / median time
    roofline_frac: float | None = None  # of the measured copy bandwidth
    # check against the reference
    rel_err: float | None = None  # ||out - ref|| / ||ref||
    max_abs_err: float | None = None
    tolerance: float | None = None
    # environment of this row
    device: str = ""
    sm: int = 0
    sm_clock_mhz: float | None = None
    peak_mem_bytes: int | None = None
    measured_at: str = ""

    @classmethod
    def for_case(cls, kernel: str, path: str, backend: str, case: Case, status: str, **kw) -> "Row":
        return cls(kernel=kernel, path=path, backend=backend, case_id=case.case_id, status=status,
                   **case.to_dict(), **kw)

    def key(self) -> tuple[str, str]:
        return (self.kernel, self.case_id)

    def to_dict(self) -> dict:
        return asdict(self)


COLUMNS = [f.name for f in fields(Row)]
CASE_COLUMNS = Case.field_names()
