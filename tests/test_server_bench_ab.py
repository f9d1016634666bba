"""The A/B verdict on two server-bench runs gated against each other (kbench.gate.ab, kbench.gate.paired), from
synthetic rows whose repeats the gate's tests read: one verdict line (the A/B answer is the gate's own decision),
a case's class from its shape, the paired gate on the two halves of an interleaved run, server baselines of
several runs, and the bad inputs (one line, exit 2). The real interleaved A/B is in test_server_bench_vllm.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

from test_gate_server import _run, server_row

from gate_synth import gate_cli

DECODE = "bs1-in64-out512"  # 512 decode steps >= 64 / 256 prefill: decode-heavy
PREFILL = "bs8-in4096-out4"  # 4 steps < 8 x 4096 / 256 = 128: prefill-heavy


def rows(seed, decode_scale=None, prefill_scale=None):
    return [server_row(DECODE, latency=2.0, ttft=0.2, seed=seed, scale=decode_scale),
            server_row(PREFILL, latency=1.0, ttft=0.8, seed=seed, scale=prefill_scale)]


def last_line(res) -> str:
    """The whole answer: the verdict word of the last line (the verdict, at most 120 characters and the same as
    the first line: what a CI log shows) and the details line above it."""
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines[0] == lines[-1] and len(lines[-1]) <= 120, res.output
    return lines[-1].split(":")[0] + ": " + lines[-2]


def test_b_faster_in_decode_heavy_cases_within_noise_elsewhere(tmp_path):
    a = _run(tmp_path / "a", rows(1))
    b = _run(tmp_path / "b", rows(2, decode_scale={"latency": 0.8, "output_throughput": 1.3}))
    md = tmp_path / "ab.md"
    res = gate_cli("--baseline", a, "--candidate", b, "--markdown", md)
    assert res.exit_code == 0, res.output
    answer = ("PASS: B is faster in the decode-heavy case (bs1-in64-out512: latency -20.0%, output_throughput "
              "+30.0%); within noise in the prefill-heavy case (1).")
    assert last_line(res).startswith(answer), res.output
    assert md.read_text().startswith("## ✅ kbench gate: PASS: ") and answer.removeprefix("PASS: ") in md.read_text()
    assert "A/B:" not in res.output  # one verdict: no second line that could say otherwise


def test_b_slower_in_prefill_heavy_cases_fails_the_gate(tmp_path):
    a = _run(tmp_path / "a", rows(1))
    b = _run(tmp_path / "b", rows(2, prefill_scale={"latency": 1.25, "last_ttft": 1.3}))
    res = gate_cli("--baseline", a, "--candidate", b, "--markdown", tmp_path / "ab.md")
    assert res.exit_code == 1, res.output
    assert last_line(res).startswith("FAIL: B is slower in the prefill-heavy case (bs8-in4096-out4: latency +25.0%, "
                                     "ttft +30.0%"), res.output
    assert "within noise in the decode-heavy case (1)" in last_line(res)


def test_a_ttft_only_regression_is_a_slower_case_in_the_one_verdict(tmp_path):
    """The issue's two opposite answers: latency within noise, TTFT +300%. The verdict fails and says why."""
    a = _run(tmp_path / "a", rows(1))
    b = _run(tmp_path / "b", rows(2, decode_scale={"last_ttft": 4.0, "input_throughput": 0.25}))
    res = gate_cli("--baseline", a, "--candidate", b)
    assert res.exit_code == 1
    line = last_line(res)
    assert line.startswith("FAIL: B is slower in the decode-heavy case (bs1-in64-out512: ttft +300.0%, "
                           "input_throughput -75.0%)"), line
    assert "within noise of A in every case" not in res.output


def test_no_change_is_within_noise_everywhere(tmp_path):
    a = _run(tmp_path / "a", rows(1))
    b = _run(tmp_path / "b", rows(2))
    res = gate_cli("--baseline", a, "--candidate", b, "--markdown", tmp_path / "ab.md")
    assert res.exit_code == 0
    assert last_line(res).startswith("PASS: B is within noise of A in every case (1 decode-heavy, 1 prefill-heavy).")
    assert "noise: within each run only" in " ".join(res.output.split())


@pytest.mark.parametrize("case,cls", [("bs1-in1024-out4", "decode-heavy"), ("bs1-in1024-out3", "prefill-heavy"),
                                      ("bs8-in256-out8", "decode-heavy"), ("bs8-in1536-out2", "prefill-heavy"),
                                      ("bs1-in64-out16", "decode-heavy"), ("weird", "other")])
def test_a_case_class_is_its_shape(case, cls):
    from kbench.gate.ab import case_class

    assert case_class(case) == cls


def test_the_class_does_not_move_with_the_timings(tmp_path):
    """A case whose TTFT took most of A's latency in one run (a busy machine) stays decode-heavy: its shape says so."""
    a = _run(tmp_path / "a", [server_row(DECODE, latency=2.0, ttft=1.8, seed=1)])
    b = _run(tmp_path / "b", [server_row(DECODE, latency=2.0, ttft=1.8, seed=2)])
    res = gate_cli("--baseline", a, "--candidate", b)
    assert "(1 decode-heavy)" in last_line(res)


# --- interleaved: the two halves of one run, paired ----------------------------------------------------------

def paired_rows(seed, n, scale=1.0, drift=None, case=DECODE, rounds_off=0):
    """One case's row on one side: every metric's samples in round order; ``drift`` multiplies round i's values on
    both sides alike (a neighbour busy during the second half), ``scale`` B's latency and TTFT."""
    rng = np.random.default_rng(seed)
    drift = drift if drift is not None else np.ones(n)
    lat = 2.0 * drift * (1 + rng.normal(0, 0.01, n)) * scale
    ttft = 0.2 * drift * (1 + rng.normal(0, 0.01, n)) * scale
    r = server_row(case, latency=float(np.median(lat)), ttft=float(np.median(ttft)), samples=False)
    bs, inp, out = r["batch_size"], r["input_len"], r["output_len"]
    r["latency_samples"], r["last_ttft_samples"] = lat.tolist(), ttft.tolist()
    r["input_throughput_samples"] = (bs * inp / ttft).tolist()
    r["output_throughput_samples"] = (bs * out / (lat - ttft)).tolist()
    r["overall_throughput_samples"] = (bs * (inp + out) / lat).tolist()
    for m in ("input_throughput", "output_throughput", "overall_throughput"):
        r[m] = float(np.median(r[f"{m}_samples"]))
    r["repeats"] = n - rounds_off
    if rounds_off:
        for k in [k for k in r if k.endswith("_samples")]:
            r[k] = r[k][:n - rounds_off]
    return r


def interleaved(tmp_path, a_rows, b_rows, rounds=8, pair="p1", model_b="synthetic", cases_b=None):
    cases = [r["case_id"] for r in a_rows]
    meta = {"order": "ABBA", "rounds": rounds, "mode": "two-servers"}
    a = _run(tmp_path / "a", a_rows)
    b = _run(tmp_path / "b", b_rows)
    for p, side, model, cs in ((a, "a", "synthetic", cases), (b, "b", model_b, cases_b or cases)):
        m = json.loads((p / "manifest.json").read_text())
        m.update(interleave={"id": pair, "side": side, **meta}, model=model, cases=cs)
        (p / "manifest.json").write_text(json.dumps(m))
    return a, b


def test_a_neighbour_during_half_the_rounds_is_no_difference_when_paired(tmp_path):
    """The same drift (x1.6 in the second half of the rounds, a CI neighbour) on both sides: the unpaired test calls
    it noise or a difference by chance; paired, every round's ratio is about 1 and the gate passes, saying which
    noise it used."""
    drift = np.array([1.0] * 4 + [1.6] * 4)
    a, b = interleaved(tmp_path, [paired_rows(1, 8, drift=drift)], [paired_rows(2, 8, drift=drift)])
    res = gate_cli("--baseline", a, "--candidate", b)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "noise: paired, the 8 ABBA rounds of one interleaved run" in out
    assert last_line(res).startswith("PASS: B is within noise of A in every case (1 decode-heavy).")


def test_a_real_slowdown_is_found_round_by_round(tmp_path):
    drift = np.array([1.0] * 4 + [1.6] * 4)
    a, b = interleaved(tmp_path, [paired_rows(1, 8, drift=drift)], [paired_rows(2, 8, drift=drift, scale=1.1)])
    res = gate_cli("--baseline", a, "--candidate", b, "--json", tmp_path / "g.json")
    assert res.exit_code == 1, res.output
    rows = {r["metric"]: r for r in json.loads((tmp_path / "g.json").read_text())["rows"]}
    assert rows["latency"]["outcome"] == "regression" and rows["latency"]["method"] == "wilcoxon"
    assert rows["latency"]["change"] == pytest.approx(0.10, abs=0.015)  # the rounds' median ratio
    assert rows["latency"]["p_value"] == pytest.approx(1 / 256)  # all 8 ratios above 1: the exact test's floor
    assert rows["output_throughput"]["outcome"] in ("regression", "within-noise", "pass")
    assert "paired Wilcoxon p=0.0039 over 8 rounds" in rows["latency"]["note"]


def test_too_few_rounds_warns_that_the_paired_test_cannot_reach_alpha(tmp_path):
    a, b = interleaved(tmp_path, [paired_rows(1, 5)], [paired_rows(2, 5, scale=1.3)], rounds=5)
    res = gate_cli("--baseline", a, "--candidate", b)
    assert "the interleaved run has 5 rounds: the paired test cannot reach alpha 0.01 with fewer than 7" in \
        " ".join(res.output.split())
    # a 30% change that 5 rounds cannot tell from noise: INCONCLUSIVE (exit 3; it was a blind PASS), and the
    # row says it could see nothing (detectable inf) and that 7 rounds or more would decide it
    assert res.exit_code == 3, res.output
    first = res.output.splitlines()[0]
    assert first.startswith("INCONCLUSIVE: ") and "detectable inf" in first and len(first) <= 120


def test_halves_that_served_different_models_are_refused(tmp_path):
    a, b = interleaved(tmp_path, [paired_rows(1, 8)], [paired_rows(2, 8)], model_b="another-model")
    res = gate_cli("--baseline", a, "--candidate", b)
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == ["error: the interleaved run's A and B served different models "
                                               "('synthetic' vs 'another-model'): an A/B compares one model with "
                                               "one setting changed"]


def test_halves_with_different_case_lists_are_refused(tmp_path):
    a, b = interleaved(tmp_path, [paired_rows(1, 8)], [paired_rows(2, 8)], cases_b=[DECODE, PREFILL])
    res = gate_cli("--baseline", a, "--candidate", b)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "the interleaved run's A and B have different case lists (1 vs 2 cases; bs8-in4096-out4 differ)" in res.output


def test_b_as_baseline_is_refused_and_halves_of_two_runs_are_unpaired(tmp_path):
    a, b = interleaved(tmp_path, [paired_rows(1, 8)], [paired_rows(2, 8)])
    res = gate_cli("--baseline", b, "--candidate", a)
    assert res.exit_code == 2 and "give A as --baseline and B as --candidate" in res.output
    other = tmp_path / "other"
    other.mkdir()
    _, b2 = interleaved(other, [paired_rows(3, 8)], [paired_rows(4, 8)], pair="p2")
    res = gate_cli("--baseline", a, "--candidate", b2)
    assert "not the two halves of one interleaved run: compared unpaired" in " ".join(res.output.split())


def test_a_failed_batch_on_a_fails_the_paired_gate(tmp_path):
    bad = server_row(DECODE, samples=False)
    bad.update(status="failed", reason="stream ended early", latency=None, last_ttft=None)
    a, b = interleaved(tmp_path, [bad], [paired_rows(2, 8)])
    res = gate_cli("--baseline", a, "--candidate", b)
    assert res.exit_code == 1
    assert last_line(res).startswith("FAIL: B fails in the decode-heavy case (bs1-in64-out512: failed)")


# --- server baselines of several runs --------------------------------------------------------------------------

def spread_runs(tmp_path, factors, cases=(DECODE, PREFILL)):
    runs = []
    for i, f in enumerate(factors):
        scale = {"latency": f, "last_ttft": f, "input_throughput": 1 / f, "output_throughput": 1 / f,
                 "overall_throughput": 1 / f}
        runs.append(_run(tmp_path / f"r{i}", [server_row(c, seed=i, scale=scale, latency=2.0 if c == DECODE else 1.0,
                                                         ttft=0.2 if c == DECODE else 0.8) for c in cases]))
    return runs


def test_a_server_baseline_of_three_runs_records_each_metric_s_spread(tmp_path):
    from kbench.cli.gate_cmd import baseline
    from click.testing import CliRunner
    from kbench.runs.store import load_run

    runs = spread_runs(tmp_path, [1.0, 1.06, 0.97])
    res = CliRunner().invoke(baseline, [*map(str, runs), "--name", "srv", "--out", str(tmp_path / "bl")])
    assert res.exit_code == 0, res.output
    rows = load_run(tmp_path / "bl" / "srv").rows.set_index("case_id")
    assert rows.loc[DECODE, "latency"] == pytest.approx(2.0)  # the median of the per-run medians
    assert rows.loc[DECODE, "latency_run_spread"] == pytest.approx(0.09)  # (1.06 - 0.97) / 1.0
    assert list(rows.loc[DECODE, "latency_run_medians"]) == pytest.approx([2.0, 2.12, 1.94])
    assert len(rows.loc[DECODE, "latency_samples"]) == 24 and rows.loc[DECODE, "runs"] == 3
    # a candidate 12% slower: beyond the 5% threshold, but within 3 x the 9% run spread: the spread was used
    cand = spread_runs(tmp_path / "c", [1.12])[0]
    g = gate_cli("--baseline", tmp_path / "bl" / "srv", "--candidate", cand)
    out = " ".join(g.output.split())
    assert g.exit_code == 0, g.output
    assert "noise: between runs, from a baseline of 3 runs (median run spread: latency 9.0%, ttft 9.0%" in out
    assert "within the run-to-run band 27.0%" in out
    # 40% slower is beyond it: fails
    cand = spread_runs(tmp_path / "d", [1.4])[0]
    g = gate_cli("--baseline", tmp_path / "bl" / "srv", "--candidate", cand)
    assert g.exit_code == 1 and g.output.startswith("FAIL: ")
    assert "B is slower in the decode-heavy case (bs1-in64-out512: latency +40.0%" in " ".join(g.output.split())


def test_a_baseline_of_runs_whose_cases_differ_is_refused(tmp_path):
    from kbench.cli.gate_cmd import baseline
    from click.testing import CliRunner

    r1 = spread_runs(tmp_path / "x", [1.0])[0]
    r2 = spread_runs(tmp_path / "y", [1.0], cases=(DECODE,))[0]
    res = CliRunner().invoke(baseline, [str(r1), str(r2), "--name", "srv", "--out", str(tmp_path / "bl")])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        f"error: refusing to pool {r1} and {r2}: their cases differ (only in the first: {PREFILL}); a baseline of "
        f"several runs needs the same cases in every run"]
    assert not (tmp_path / "bl" / "srv").exists()
