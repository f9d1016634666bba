"""What the gate compares for each kind of run: the row key and the metrics with their direction.

Sweep runs: one metric, ``median_us`` (lower is better), with ``samples_us`` for the noise test and
``rel_spread`` / ``p25_us``..``p75_us`` as the spread. Rows match on kernel, case, dtype and layout (the
case id already holds dtype, layout, page size and heads; the explicit columns guard against rows whose
case id was built differently). The reference path is the correctness oracle, not a product, and is not gated.

Server-bench runs: per case, latency and TTFT (lower is better) and the throughputs (higher is better),
as SGLang's bench_one_batch_server names them. Per-repeat values, when the row has a list column
``<metric>_samples``, feed the noise test; without them the threshold alone decides.
"""
from __future__ import annotations

from dataclasses import dataclass

import math

from kbench.values import finite, number
from kbench.cases import axes
from kbench.gate.stats import GateValue


@dataclass(frozen=True)
class Metric:
    name: str
    column: str
    higher_is_better: bool = False
    samples_column: str | None = None
    unit: str = ""
    # an ok row must carry it: absent, NaN, infinite, zero or negative is a broken measurement (the gate fails
    # it, never passes it as not compared). Other metrics may be absent (vLLM's output throughput of a case whose
    # tokens all came in the first chunk), but present they must be finite and positive too.
    required: bool = False
    # server runs: the column a baseline of several runs holds the case's run-to-run spread of this metric in
    # (kbench.gate.server_baseline); sweep rows have one run_spread per row
    spread_column: str | None = None


SWEEP_KEY = axes.gate_key()  # kernel, case_id and the GATE axes
SERVER_KEY = ("case_id",)
SWEEP_METRICS = (Metric("median_us", "median_us", False, "samples_us", "us", required=True),)
SERVER_METRICS = (
    Metric("latency", "latency", False, "latency_samples", "s", required=True, spread_column="latency_run_spread"),
    Metric("ttft", "last_ttft", False, "last_ttft_samples", "s", required=True,
           spread_column="last_ttft_run_spread"),
    Metric("ttft", "ttft", False, "ttft_samples", "s", required=True),
    Metric("input_throughput", "input_throughput", True, "input_throughput_samples", "tok/s",
           spread_column="input_throughput_run_spread"),
    Metric("output_throughput", "output_throughput", True, "output_throughput_samples", "tok/s",
           spread_column="output_throughput_run_spread"),
    Metric("overall_throughput", "overall_throughput", True, "overall_throughput_samples", "tok/s",
           spread_column="overall_throughput_run_spread"),
)


def key_columns(kind: str, columns) -> tuple[str, ...]:
    key = SWEEP_KEY if kind == "sweep" else SERVER_KEY
    return tuple(c for c in key if c in columns)


def metrics_for(kind: str, base_columns, cand_columns) -> list[Metric]:
    if kind == "sweep":
        return list(SWEEP_METRICS)
    both = set(base_columns) & set(cand_columns)
    seen, out = set(), []
    for m in SERVER_METRICS:  # last_ttft wins over ttft when a row has both
        if m.column in both and m.name not in seen:
            seen.add(m.name)
            out.append(m)
    return out


def broken(row: dict, metric: Metric) -> str | None:
    """Why an ok row's value of ``metric`` is not a measurement (None: it is one, or an optional metric is absent)."""
    v = row.get(metric.column)
    x = number(v)
    if x is None:
        if not metric.required:
            return None
        return f"{metric.column} is missing" if v is None or v != v else f"{metric.column} is {v!r}, not a number"
    if not math.isfinite(x) or x <= 0:
        return f"{metric.column} is {x:g}"
    return None


def samples_of(row: dict, metric: Metric) -> list[float]:
    """The row's samples of the metric (its finite values; [] without any)."""
    raw = row.get(metric.samples_column) if metric.samples_column else None
    values = list(raw) if raw is not None and not isinstance(raw, (str, float)) else []
    if all(type(x) is float for x in values):  # as a run's file holds them: no conversion to try
        return [x for x in values if math.isfinite(x)]
    return [f for f in (finite(x) for x in values) if f is not None]


def measurement(row: dict, metric: Metric, with_samples: bool = True) -> GateValue | None:
    """The metric of one row, its samples and its spread interval; None when the row has no value.
    with_samples=False: samples left empty (samples_of reads them when the noise test needs them)."""
    value = finite(row.get(metric.column))
    if value is None or value <= 0:  # SGLang writes -1 for "not available"
        return None
    samples = samples_of(row, metric) if with_samples else []
    low = high = None
    spread = finite(row.get("rel_spread")) if metric.column == "median_us" else None
    if spread is not None and spread >= 0:
        low, high = value * (1 - spread), value * (1 + spread)
    elif metric.column == "median_us" and finite(row.get("p25_us")) is not None and finite(row.get("p75_us")) is not None:
        low, high = finite(row.get("p25_us")), finite(row.get("p75_us"))
    return GateValue(value, samples, low, high)
