"""The gate on server-bench runs: latency/TTFT lower is better, throughputs higher is better, per case."""
from __future__ import annotations

import importlib

from gate_synth import gate_json, outcomes, write_run
import numpy as np

METRICS = ["latency", "last_ttft", "input_throughput", "output_throughput", "overall_throughput"]
CASES = ["bs1-in512-out32", "bs8-in1024-out64"]


def ensure_server_kind():
    """Use the real server-bench row kind when kbench.server defines one, else register the SGLang columns."""
    from kbench.runs.store import ROW_KINDS, register_row_kind
    for mod in ("kbench.server.rows", "kbench.server"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    if "server-bench" not in ROW_KINDS:
        cols = ["run_name", "case_id", "batch_size", "input_len", "output_len", "status", "reason", *METRICS,
                "last_gen_throughput", "acc_length", *[f"{m}_samples" for m in METRICS]]
        register_row_kind("server-bench", cols, tuple(f"{m}_samples" for m in METRICS))
    return ROW_KINDS["server-bench"][0]


def server_row(case_id, latency=2.0, ttft=0.2, scale=None, samples=True, seed=0, n=8, sd=0.003):
    """One case; ``scale`` multiplies named metrics (e.g. {"output_throughput": 0.9})."""
    bs, inp, out = (int(x[2:] if x.startswith("bs") else x[2:] if x.startswith("in") else x[3:])
                    for x in case_id.split("-"))
    vals = {"latency": latency, "last_ttft": ttft, "input_throughput": bs * inp / ttft,
            "output_throughput": bs * out / (latency - ttft), "overall_throughput": bs * (inp + out) / latency}
    for k, f in (scale or {}).items():
        vals[k] *= f
    rng = np.random.default_rng(seed)
    try:  # the real row when the server-bench module is there
        from kbench.server.rows import ServerBenchRow
        row = ServerBenchRow(case_id=case_id, run_name="synthetic", backend="sglang", url="http://127.0.0.1:30000",
                             model="synthetic", batch_size=bs, input_len=inp, output_len=out, status="ok",
                             **vals).to_dict()
    except ImportError:
        row = {"run_name": "synthetic", "case_id": case_id, "batch_size": bs, "input_len": inp, "output_len": out,
               "status": "ok", "reason": "", **vals, "last_gen_throughput": -1, "acc_length": -1}
    if samples:  # per-repeat values: not written by server-bench today, used by the gate when present
        for m, v in vals.items():
            s = 1 + rng.normal(0, sd, n)
            row[f"{m}_samples"] = [float(x) for x in s * (v / np.median(s))]
    return row


def _run(path, rows):
    ensure_server_kind()
    return write_run(path, rows, kind="server-bench")


def test_server_identical_pass(tmp_path):
    base = _run(tmp_path / "base", [server_row(c, seed=1) for c in CASES])
    cand = _run(tmp_path / "cand", [server_row(c, seed=2) for c in CASES])
    res, data = gate_json(tmp_path, base, cand)
    assert res.exit_code == 0, res.output
    metrics = {r["metric"] for r in data["rows"]}
    assert {"latency", "ttft", "input_throughput", "output_throughput", "overall_throughput"} <= metrics
    assert set(outcomes(data).values()) == {"pass"}
    assert data["winner_changes"] == []


def test_server_throughput_drop_is_regression(tmp_path):
    base = _run(tmp_path / "base", [server_row(c, seed=1) for c in CASES])
    cand = _run(tmp_path / "cand", [server_row(CASES[0], seed=2, scale={"output_throughput": 0.9}),
                                    server_row(CASES[1], seed=2)])
    res, data = gate_json(tmp_path, base, cand)
    assert res.exit_code == 1
    reg = [(r["case_id"], r["metric"], r["method"]) for r in data["rows"] if r["outcome"] == "regression"]
    assert reg == [(CASES[0], "output_throughput", "mann-whitney")]
    assert "output_throughput" in res.output


def test_server_higher_throughput_and_lower_latency_are_improvements(tmp_path):
    base = _run(tmp_path / "base", [server_row(c, seed=1) for c in CASES])
    cand = _run(tmp_path / "cand", [server_row(CASES[0], seed=2, scale={"overall_throughput": 1.2, "latency": 0.8}),
                                    server_row(CASES[1], seed=2)])
    res, data = gate_json(tmp_path, base, cand)
    assert res.exit_code == 0
    imp = {(r["case_id"], r["metric"]) for r in data["rows"] if r["outcome"] == "improvement"}
    assert imp == {(CASES[0], "overall_throughput"), (CASES[0], "latency")}


def test_server_without_repeats_is_inconclusive_never_a_blind_answer(tmp_path):
    # one batch a side: no noise known, so neither a +8% (was: a threshold-only FAIL) nor a +3% (was: PASS) can
    # be told from noise; both are INCONCLUSIVE (exit 3), saying that the noise is unknown
    base = _run(tmp_path / "base", [server_row(c, samples=False) for c in CASES])
    slow = _run(tmp_path / "slow", [server_row(CASES[0], samples=False, scale={"last_ttft": 1.08}),
                                    server_row(CASES[1], samples=False)])
    res, data = gate_json(tmp_path, base, slow)
    assert res.exit_code == 3, res.output
    assert not [r for r in data["rows"] if r["outcome"] == "regression"]
    ttft = next(r for r in data["rows"] if r["case_id"] == CASES[0] and r["metric"] == "ttft")
    assert ttft["outcome"] == "inconclusive" and "noise is unknown" in ttft["note"]
    near = _run(tmp_path / "near", [server_row(CASES[0], samples=False, scale={"last_ttft": 1.03}),
                                    server_row(CASES[1], samples=False)])
    assert gate_json(tmp_path, base, near)[0].exit_code == 3


def test_server_missing_case_and_failed_case(tmp_path):
    base = _run(tmp_path / "base", [server_row(c, seed=1) for c in CASES])
    failed = server_row(CASES[1], seed=2)
    failed["status"] = "failed"
    cand = _run(tmp_path / "cand", [failed])
    res, data = gate_json(tmp_path, base, cand)
    assert res.exit_code == 1
    o = outcomes(data)
    assert o[("", CASES[0], None)] == "missing" and o[("", CASES[1], None)] == "failed"
