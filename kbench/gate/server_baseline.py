"""A server-bench baseline from several runs (`kbench baseline RUN1 RUN2 RUN3 --name NAME` on server-bench runs):
what the gate needs to know of the run-to-run spread of a server's figures.

The runs must be of one server setting: the same backend, model and case list (else BadInput, one line). Per
case, ok in every run, each metric the server gate reads (kbench.server.rows.SAMPLED) gets

    <metric>               the median of the per-run medians
    <metric>_run_medians   the per-run medians, in the order the runs were given
    <metric>_run_spread    (max - min) / median of them: how far apart runs of the same server landed
    <metric>_samples       every run's repeats pooled (the within-run test compares the candidate's with them)

and ``runs`` (how many runs), ``run_spread`` (the largest metric spread). A case not ok in every run keeps its
non-ok status (the gate does not compare it) and a warning says so. The gate then allows each case and metric
``band = max(threshold, K x run_noise, own run spread)``, run_noise being the median run spread of that metric
over the baseline's cases (kbench.gate.compare).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.text import recorded
from kbench.errors import BadInput
from kbench.gate.run_status import mark_mixed, mixed_warning
from kbench.values import finite, status

SERVER_METRIC_COLUMNS = ("latency", "last_ttft", "input_throughput", "output_throughput", "overall_throughput")


def spread_column(column: str) -> str:
    return f"{column}_run_spread"


def _cases(run) -> list[str]:
    cases = run.manifest.get("cases")
    if isinstance(cases, list):
        return [str(c) for c in cases]
    return [str(c) for c in run.rows["case_id"].tolist()] if "case_id" in run.rows else []


# the server's settings a run records (manifest ``server``, SGLang's /server_info) that make it another setting:
# a baseline pooling two of them would widen its band by the difference between them
SETTING_KEYS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size",
                "kv_cache_dtype", "speculative_algorithm", "speculative_num_draft_tokens", "speculative_num_steps",
                "speculative_eagle_topk", "speculative_attention_mode", "disable_overlap_schedule", "tp_size",
                "dp_size", "cuda_graph_max_bs", "max_running_requests")


def _setting(run) -> dict:
    info = run.manifest.get("server")
    return {k: info.get(k) for k in SETTING_KEYS if k in info} if isinstance(info, dict) else {}


def _side(run) -> tuple | None:
    v = run.manifest.get("interleave")
    return (v.get("id"), v.get("side")) if isinstance(v, dict) and v.get("side") in ("a", "b") else None


def check_same_cases(runs) -> None:
    """BadInput unless every run measured the first one's server setting: backend, model, case list, the server's
    recorded settings (attention backend, page size, ...) and, for halves of interleaved A/Bs, the same side."""
    first = runs[0]
    for r in runs[1:]:
        sa, sb = _side(first), _side(r)
        if sa and sb and sa[1] != sb[1]:
            same = " of one interleaved A/B" if sa[0] == sb[0] else " of interleaved A/Bs"
            raise BadInput(f"refusing to pool {first.path} and {r.path}: they are side {sa[1].upper()} and side "
                           f"{sb[1].upper()}{same} (two settings); a baseline is one setting: pool the A halves")
        ia, ib = _setting(first), _setting(r)
        diff = [k for k in SETTING_KEYS if ia.get(k) != ib.get(k) and (k in ia or k in ib)]
        if diff:
            k = diff[0]
            raise BadInput(f"refusing to pool {first.path} and {r.path}: the server ran another setting "
                           f"({k} {ia.get(k)!r} vs {ib.get(k)!r}{f', and {len(diff) - 1} more' if len(diff) > 1 else ''}"
                           f"); a baseline is one setting")
        for what in ("backend", "model"):
            if r.manifest.get(what) != first.manifest.get(what):
                raise BadInput(f"refusing to pool {first.path} and {r.path}: different {what} "
                               f"({recorded(first.manifest.get(what))} vs {recorded(r.manifest.get(what))}); a "
                               f"baseline is one setting")
        ca, cb = _cases(first), _cases(r)
        if sorted(ca) != sorted(cb):
            only_a, only_b = sorted(set(ca) - set(cb)), sorted(set(cb) - set(ca))
            diff = "; ".join(x for x in (f"only in the first: {', '.join(only_a[:3])}" if only_a else "",
                                         f"only in {r.path.name}: {', '.join(only_b[:3])}" if only_b else "") if x)
            raise BadInput(f"refusing to pool {first.path} and {r.path}: their cases differ ({diff or 'repeated cases'}); "
                           f"a baseline of several runs needs the same cases in every run")


def _samples(rec: dict, col: str) -> list[float]:
    raw = rec.get(f"{col}_samples")
    vals = [] if raw is None or isinstance(raw, (str, float)) else list(raw)
    vals = [f for f in (finite(x) for x in vals) if f is not None]
    if not vals and finite(rec.get(col)) is not None:
        vals = [finite(rec.get(col))]  # a run without --repeat: its one value
    return vals


def _pool(recs: list[dict]) -> dict:
    out = dict(recs[-1])
    spreads = []
    for col in SERVER_METRIC_COLUMNS:
        meds = [finite(r.get(col)) for r in recs]
        if any(m is None or m <= 0 for m in meds):
            out[col], out[f"{col}_run_medians"], out[spread_column(col)] = None, [], None
            out[f"{col}_samples"] = []
            continue
        med = float(np.median(meds))
        out[col] = med
        out[f"{col}_run_medians"] = meds
        out[spread_column(col)] = (max(meds) - min(meds)) / med
        spreads.append(out[spread_column(col)])
        out[f"{col}_samples"] = [x for r in recs for x in _samples(r, col)]
    out["runs"] = len(recs)
    out["run_spread"] = max(spreads) if spreads else None
    out["repeats"] = sum(int(finite(r.get("repeats")) or 1) for r in recs)
    return out


def pool_server_runs(runs) -> tuple[pd.DataFrame, list[str]]:
    """One row per case from several server-bench runs (module docstring), and warnings."""
    by_case: dict[str, list[dict]] = {}
    for run in runs:
        last = {str(rec["case_id"]): rec for rec in run.rows.to_dict("records")}
        for case, rec in last.items():
            by_case.setdefault(case, []).append(rec)
    out, mixed = [], []
    for case, recs in by_case.items():
        statuses = [status(r) for r in recs]
        if all(s == "ok" for s in statuses):
            out.append(_pool(recs))
            continue
        row = dict(next(r for r in recs if status(r) != "ok"))
        row["runs"], row["run_spread"] = sum(s == "ok" for s in statuses), None
        mixed.append(f"{case} ({mark_mixed(row, statuses)})")
        out.append(row)
    warnings = []
    if mixed:
        warnings.append(mixed_warning(mixed, "case(s)"))
    return pd.DataFrame.from_records(out), warnings
