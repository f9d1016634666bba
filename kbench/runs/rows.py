"""One row per (kernel, case): the unit every later step (report, gate, merge) reads.

Schema version RESULT_SCHEMA_VERSION (kbench/__init__.py); bump it when a column changes meaning.
The case columns are the axes of `kbench.cases.axes.AXES` (a column an older run lacks reads as its default).
"""
from __future__ import annotations

from dataclasses import asdict, field, fields, make_dataclass

from kbench.cases import axes
from kbench.cases.case import Case
from kbench.cases.trees import case_trees

# what was measured, before the case columns
_HEAD = [
    ("kernel", str),
    ("path", str),  # decode | context | reference
    ("backend", str),  # the implementation that ran (xqa, trtllm-gen, fa2, ...)
    ("case_id", str),
]
# outcome, time, roofline, check and environment, after the case columns
_TAIL = [
    ("status", str),  # ok | skipped | wrong | failed
    ("reason", str, field(default="")),
    # the batch's per-request lengths as drawn (kbench.cases.dists); the hash tells two runs whether they ran the
    # same batch. An older run's rows lack them (read as missing).
    ("kv_mean", float | None, field(default=None)),
    ("kv_max", int | None, field(default=None)),
    ("kv_min", int | None, field(default=None)),
    ("kv_hash", str, field(default="")),
    ("q_mean", float | None, field(default=None)),
    ("q_max", int | None, field(default=None)),
    ("q_min", int | None, field(default=None)),
    ("q_hash", str, field(default="")),
    # the batch's draft trees (kbench.cases.trees; the spec is the `tree` column): the most levels and the widest
    # level of any request's tree, and a hash of the parent lists. An older run's rows lack them (read as missing).
    ("tree_depth", int | None, field(default=None)),
    ("tree_width", int | None, field(default=None)),
    ("tree_hash", str, field(default="")),
    # time, microseconds per call
    ("median_us", float | None, field(default=None)),
    ("p25_us", float | None, field(default=None)),
    ("p75_us", float | None, field(default=None)),
    ("iqr_us", float | None, field(default=None)),
    ("min_us", float | None, field(default=None)),
    ("rel_spread", float | None, field(default=None)),  # relative half-width of the 95% CI of the median
    ("num_samples", int, field(default=0)),
    ("calls_per_sample", int, field(default=0)),
    ("samples_us", list[float], field(default_factory=list)),
    ("timer", str, field(default="")),  # cuda-graph | cuda-events | wall-clock
    ("l2", str, field(default="")),  # rotate-N (N input copies) | warm
    ("stop", str, field(default="")),  # why timing stopped: spread | budget | max-samples
    # roofline
    ("kv_bytes", int, field(default=0)),
    ("kv_bandwidth_gbs", float | None, field(default=None)),  # KV bytes read / median time
    ("roofline_frac", float | None, field(default=None)),  # of the measured copy bandwidth
    # check against the reference
    ("rel_err", float | None, field(default=None)),  # ||out - ref|| / ||ref||
    ("max_abs_err", float | None, field(default=None)),
    ("tolerance", float | None, field(default=None)),
    # environment of this row
    ("device", str, field(default="")),
    ("sm", int, field(default=0)),
    ("sm_clock_mhz", float | None, field(default=None)),
    ("peak_mem_bytes", int | None, field(default=None)),
    # power state while timed (kbench.timing.power; NVML sampled in both states): mean SM clock, power draw and GPU
    # temperature, the throttle reasons seen ('+'-joined), and why the pre-load did not settle ('' when it did)
    ("sm_clock_mean_mhz", float | None, field(default=None)),
    ("power_w", float | None, field(default=None)),
    ("gpu_temp_c", float | None, field(default=None)),
    ("throttle_reasons", str, field(default="")),
    ("power_settle", str, field(default="")),
    ("measured_at", str, field(default="")),
    # how an adaptive sweep chose this case (kbench.engine.plans.adaptive.TAGS: coarse | refine-crossover | refine-tie |
    # refine-step); "" in a full-grid sweep
    ("chosen_by", str, field(default="")),
    # a route (kbench.kernels.routes: a kernel as an engine calls it): the host work the engine redoes every step
    # (plan, masks, metadata), wall time on the host's CPU per step, and that CPU; None for a plain kernel
    ("host_us", float | None, field(default=None)),
    ("host_p25_us", float | None, field(default=None)),
    ("host_p75_us", float | None, field(default=None)),
    ("host_cpus", int | None, field(default=None)),  # the host's logical CPUs (os.cpu_count)
    ("host_cpu", str, field(default="")),  # the host CPU's model name
]


class _RowMethods:
    @classmethod
    def for_case(cls, kernel: str, path: str, backend: str, case: Case, status: str, seed: int = 0,
                 **kw) -> "Row":
        return cls(kernel=kernel, path=path, backend=backend, case_id=case.case_id, status=status,
                   **case.to_dict(), **case.lengths(seed).summary(), **case_trees(case, seed).summary(), **kw)

    def key(self) -> tuple[str, str]:
        return (self.kernel, self.case_id)

    def to_dict(self) -> dict:
        return asdict(self)


Row = make_dataclass("Row", [*_HEAD, *((a.name, a.type) for a in axes.AXES), *_TAIL], bases=(_RowMethods,))
Row.__module__ = __name__
Row.__doc__ = "One (kernel, case) result: what was measured, the case's axes, outcome, time, roofline, check, environment."

COLUMNS = [f.name for f in fields(Row)]
CASE_COLUMNS = Case.field_names()
STATUSES = ("ok", "skipped", "wrong", "failed")
# the columns beside the case axes a loaded row must hold numbers (or nothing) in (kbench.runs.store)
NUMBER_COLUMNS = [f.name for f in fields(Row) if f.type in (int, float, int | None, float | None)]
