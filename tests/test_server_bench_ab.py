"""The A/B answer on two server-bench runs gated against each other (kbench.gate.ab), from synthetic rows
whose repeats the gate's Mann-Whitney test reads; the real two-run A/B is in test_server_bench_vllm.py."""
from __future__ import annotations

from test_gate_server import _run, server_row

from gate_synth import gate_cli

DECODE = "bs1-in64-out512"  # ttft 0.2 of latency 2.0: decode-heavy
PREFILL = "bs8-in4096-out4"  # ttft 0.8 of latency 1.0: prefill-heavy


def rows(seed, decode_scale=None, prefill_scale=None):
    return [server_row(DECODE, latency=2.0, ttft=0.2, seed=seed, scale=decode_scale),
            server_row(PREFILL, latency=1.0, ttft=0.8, seed=seed, scale=prefill_scale)]


def test_b_faster_in_decode_heavy_cases_within_noise_elsewhere(tmp_path):
    a = _run(tmp_path / "a", rows(1))
    b = _run(tmp_path / "b", rows(2, decode_scale={"latency": 0.8, "output_throughput": 1.3}))
    md = tmp_path / "ab.md"
    res = gate_cli("--baseline", a, "--candidate", b, "--markdown", md)
    assert res.exit_code == 0, res.output
    answer = "B is 25.0% faster in the decode-heavy cases; within noise in the prefill-heavy cases (1)."
    assert f"**A/B:** {answer}" in md.read_text()
    assert f"A/B: {answer}" in " ".join(res.output.split())


def test_b_slower_in_prefill_heavy_cases_fails_the_gate(tmp_path):
    a = _run(tmp_path / "a", rows(1))
    b = _run(tmp_path / "b", rows(2, prefill_scale={"latency": 1.25, "last_ttft": 1.3}))
    res = gate_cli("--baseline", a, "--candidate", b, "--markdown", tmp_path / "ab.md")
    assert res.exit_code == 1, res.output
    assert ("B is 25.0% slower in the prefill-heavy cases; within noise in the decode-heavy cases (1)."
            in (tmp_path / "ab.md").read_text())


def test_no_change_is_within_noise_everywhere(tmp_path):
    a = _run(tmp_path / "a", rows(1))
    b = _run(tmp_path / "b", rows(2))
    gate_cli("--baseline", a, "--candidate", b, "--markdown", tmp_path / "ab.md")
    assert ("B is within noise of A in every case (1 decode-heavy, 1 prefill-heavy)."
            in (tmp_path / "ab.md").read_text())
