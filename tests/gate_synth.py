"""Synthetic sweep and server-bench runs for the gate tests (no GPU: rows are made up, written by RunWriter)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from kbench.cases.case import Case
from kbench.runs.rows import Row
from kbench.runs.store import RunWriter

H200 = {"name": "NVIDIA H200", "sm": 90}
CASE_A = Case(batch_size=4, q_len=4, kv_len=4096, num_qo_heads=32, num_kv_heads=8, head_dim=128)
CASE_B = Case(batch_size=64, q_len=8, kv_len=8192, num_qo_heads=32, num_kv_heads=8, head_dim=128)
DECODE, CONTEXT = "trtllm-decode", "fa2-prefill"

# (kernel, path, case) -> median us. In case A the decode kernel wins, in case B the context kernel.
BASE_TIMES = {(DECODE, "decode", CASE_A): 10.0, (CONTEXT, "context", CASE_A): 14.0,
              (DECODE, "decode", CASE_B): 30.0, (CONTEXT, "context", CASE_B): 20.0}


def timed_row(kernel, path, case, median, sd=0.005, n=60, seed=0, status="ok", samples=True, device=H200,
              rel_spread=None) -> Row:
    """A row whose samples are median * (1 + N(0, sd)); stats computed from them as the timer would."""
    rng = np.random.default_rng(seed)
    s = 1 + rng.normal(0.0, sd, n)
    s = np.abs(s) * (median / np.median(np.abs(s)))  # the sample median is exactly ``median``
    med, p25, p75 = float(np.median(s)), float(np.percentile(s, 25)), float(np.percentile(s, 75))
    rs = rel_spread if rel_spread is not None else 1.57 * (p75 - p25) / np.sqrt(n) / med
    return Row.for_case(kernel, path, "synthetic", case, status, median_us=med, p25_us=p25, p75_us=p75,
                        iqr_us=p75 - p25, min_us=float(s.min()), rel_spread=float(rs), num_samples=n,
                        samples_us=[float(x) for x in s] if samples else [], device=device["name"],
                        sm=device["sm"], timer="wall-clock")


def write_run(path: Path, rows, device=H200, kind="sweep", **manifest) -> Path:
    w = RunWriter(path, {"kind": kind, "device": dict(device), "command": "synthetic", **manifest})
    for r in rows:
        w.append(r)
    return w.finalize()


def sweep_rows(times=None, seed=0, overrides=None, drop=(), sd=0.005, samples=True, device=H200, rel_spread=None,
               sd_of=None):
    """Rows for BASE_TIMES (or ``times``) plus a reference row per case. overrides: (kernel, case) -> dict of
    Row fields (e.g. status) applied after timing; drop: (kernel, case) to leave out; sd_of: (kernel, case)
    -> sample spread for that row instead of ``sd``."""
    times = times or BASE_TIMES
    overrides = overrides or {}
    rows = []
    for i, ((kernel, path, case), t) in enumerate(times.items()):
        if (kernel, case) in drop:
            continue
        r = timed_row(kernel, path, case, t, sd=(sd_of or {}).get((kernel, case), sd), seed=seed * 100 + i, samples=samples, device=device,
                      rel_spread=rel_spread)
        for k, v in overrides.get((kernel, case), {}).items():
            setattr(r, k, v)
        rows.append(r)
    for case in {c for (_, _, c) in times}:
        rows.append(Row.for_case("reference", "reference", "torch", case, "ok"))
    return rows


def with_time(kernel, case, factor, times=None) -> dict:
    times = dict(times or BASE_TIMES)
    for k in times:
        if k[0] == kernel and k[2] == case:
            times[k] = times[k] * factor
    return times


def gate_cli(*args, env=None):
    from kbench.cli.gate_cmd import gate
    e = {"COLUMNS": "250", "GITHUB_STEP_SUMMARY": ""}
    e.update(env or {})
    return CliRunner().invoke(gate, [str(a) for a in args], env=e)


def gate_json(tmp_path: Path, base: Path, cand: Path, *extra, env=None):
    out = tmp_path / f"gate-{len(list(tmp_path.glob('gate-*.json')))}.json"
    res = gate_cli("--baseline", base, "--candidate", cand, "--json", out, *extra, env=env)
    data = json.loads(out.read_text()) if out.exists() else None
    return res, data


def outcomes(data) -> dict:
    return {(r["kernel"], r["case_id"], r["metric"]): r["outcome"] for r in data["rows"]}


def scaled(factor, times=None) -> dict:
    """Every row ``factor`` times slower: a whole run on a slower clock (the run-to-run noise of a GPU)."""
    return {k: t * factor for k, t in (times or BASE_TIMES).items()}


def baseline_cli(*args):
    from kbench.cli.gate_cmd import baseline
    return CliRunner().invoke(baseline, [str(a) for a in args])


def multi_baseline(tmp_path: Path, factors=(1.0, 1.06), times=None, name="multi", **kw) -> Path:
    """A baseline from len(factors) runs, run i at ``factors[i]`` times ``times`` (own samples per run)."""
    runs = [write_run(tmp_path / f"{name}-run{i}", sweep_rows(scaled(f, times), seed=10 + i, **kw))
            for i, f in enumerate(factors)]
    root = tmp_path / "baselines"
    res = baseline_cli(*runs, "--name", name, "--root", root)
    assert res.exit_code == 0, res.output
    return root / name
