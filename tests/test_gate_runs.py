"""Multi-run baselines: `kbench baseline RUN1 RUN2 ...` records run-to-run spread and the gate widens its band by it.

band = max(threshold, k * run_noise, run_spread), k = 3 by default; run_noise = the median run_spread of the
row's kernel and batch size (each synthetic group holds one row, so here run_noise = the row's run_spread).
"""
from __future__ import annotations

import json

import pytest
from gate_synth import (BASE_TIMES, CASE_A, CASE_B, CONTEXT, DECODE, H200, baseline_cli, gate_cli, gate_json,
                        multi_baseline, outcomes, scaled, sweep_rows, with_time, write_run)

from kbench.runs.store import load_run

H100 = {"name": "NVIDIA H100 80GB HBM3", "sm": 90}


def _row(data, kernel, case):
    return next(r for r in data["rows"] if r["kernel"] == kernel and r["case_id"] == case.case_id)


def test_multi_run_baseline_written_and_read_back(tmp_path):
    r1 = write_run(tmp_path / "r1", sweep_rows(seed=1))
    r2 = write_run(tmp_path / "r2", sweep_rows(with_time(DECODE, CASE_A, 1.04), seed=2))
    r3 = write_run(tmp_path / "r3", sweep_rows(with_time(DECODE, CASE_A, 1.10), seed=3))
    root = tmp_path / "bl"
    res = baseline_cli(r1, r2, r3, "--name", "three", "--root", root)
    assert res.exit_code == 0, res.output
    assert "from 3 runs" in res.output and "run_spread median" in res.output
    dest = root / "three"
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json", "rows.csv", "rows.parquet"]
    m = json.loads((dest / "manifest.json").read_text())
    assert m["baseline"]["num_runs"] == 3
    assert m["baseline"]["source_runs"] == [str(r1), str(r2), str(r3)]
    assert m["device"] == H200 and m["kind"] == "sweep"

    rows = load_run(dest).rows
    assert len(rows) == len(load_run(r1).rows) == 6  # 4 kernel rows + 2 reference rows
    timed = rows[rows["path"] != "reference"].set_index(["kernel", "case_id"])
    a = timed.loc[(DECODE, CASE_A.case_id)]
    assert list(a["run_medians_us"]) == pytest.approx([10.0, 10.4, 11.0])
    assert a["median_us"] == pytest.approx(10.4)  # the median of the medians
    assert a["runs"] == 3 and a["run_spread"] == pytest.approx((11.0 - 10.0) / 10.4)
    assert len(a["samples_us"]) == a["num_samples"] == 180  # 3 x 60 samples, pooled
    assert a["p25_us"] < a["median_us"] < a["p75_us"]
    b = timed.loc[(CONTEXT, CASE_B.case_id)]
    assert b["run_spread"] == pytest.approx(0.0, abs=1e-9) and b["median_us"] == pytest.approx(20.0)
    # the gate reads it: a source run passes against it
    res, data = gate_json(tmp_path, dest, r2)
    assert res.exit_code == 0, res.output
    assert data["baseline_runs"] == 3
    assert not any("run-to-run noise is unknown" in w for w in data["warnings"])


def test_single_run_baseline_unchanged_and_warns(tmp_path):
    run = write_run(tmp_path / "run", sweep_rows(seed=1))
    root = tmp_path / "bl"
    assert baseline_cli(run, "--name", "one", "--root", root).exit_code == 0
    rows = load_run(root / "one").rows
    assert "run_spread" not in rows and "runs" not in rows  # a copy of the run, nothing added
    res, data = gate_json(tmp_path, root / "one", write_run(tmp_path / "cand", sweep_rows(seed=2)))
    assert res.exit_code == 0
    warn = [w for w in data["warnings"] if "run-to-run noise is unknown" in w]
    assert len(warn) == 1 and "kbench baseline RUN1 RUN2" in warn[0]
    assert "run-to-run noise is unknown" in res.output


def test_back_to_back_within_run_spread_passes(tmp_path):
    # the two baseline runs landed 6% apart (a slower clock in the second): run_spread 5.8% on every row
    base = multi_baseline(tmp_path, (1.0, 1.06))
    # the candidate run is 10% slower than the first run, 6.8% slower than the median of medians
    cand = write_run(tmp_path / "cand", sweep_rows(scaled(1.10), seed=5))
    res, data = gate_json(tmp_path, base, cand)
    assert res.exit_code == 0, res.output
    for kernel, case in ((DECODE, CASE_A), (CONTEXT, CASE_A), (DECODE, CASE_B), (CONTEXT, CASE_B)):
        row = _row(data, kernel, case)
        assert row["outcome"] == "within-noise" and row["method"] == "run-spread", row
        assert row["change"] == pytest.approx(1.10 / 1.03 - 1)
        assert row["band"] == pytest.approx(3 * 0.06 / 1.03)
    # against the first run alone the same candidate fails: the run spread is what made it pass
    res1, data1 = gate_json(tmp_path, tmp_path / "multi-run0", cand)
    assert res1.exit_code == 1
    assert set(outcomes(data1).values()) == {"regression"}


def test_2x_slowdown_still_fails_and_names_the_kernel(tmp_path):
    base = multi_baseline(tmp_path, (1.0, 1.06))
    cand = write_run(tmp_path / "cand", sweep_rows(with_time(CONTEXT, CASE_A, 2.0, scaled(1.03)), seed=5))
    res, data = gate_json(tmp_path, base, cand, "--ignore-winner-change")
    assert res.exit_code == 1, res.output
    reg = [r for r in data["rows"] if r["outcome"] == "regression"]
    assert [(r["kernel"], r["case_id"]) for r in reg] == [(CONTEXT, CASE_A.case_id)]
    assert reg[0]["change"] == pytest.approx(1.0) and reg[0]["method"] == "mann-whitney"
    assert CONTEXT in res.output and "regression" in res.output
    assert sum(o == "pass" for o in outcomes(data).values()) == 3


def test_10pct_slowdown_on_a_2pct_spread_row_fails(tmp_path):
    base = multi_baseline(tmp_path, (1.0, 1.02))  # run_spread 0.02 / 1.01 = 1.98%: band max(5%, 5.94%)
    times = with_time(DECODE, CASE_A, 1.10, scaled(1.01))  # 10% over the median of medians
    times = with_time(CONTEXT, CASE_B, 1.055, times)  # 5.5%: beyond the threshold, inside the band
    res, data = gate_json(tmp_path, base, write_run(tmp_path / "cand", sweep_rows(times, seed=5)))
    assert res.exit_code == 1, res.output
    row = _row(data, DECODE, CASE_A)
    assert row["outcome"] == "regression" and row["change"] == pytest.approx(0.10)
    assert row["run_spread"] == pytest.approx(0.02 / 1.01) and row["band"] == pytest.approx(3 * 0.02 / 1.01)
    inside = _row(data, CONTEXT, CASE_B)
    assert inside["outcome"] == "within-noise" and inside["method"] == "run-spread"
    assert [r["kernel"] for r in data["rows"] if r["fails"]] == [DECODE]


def test_run_spread_k_sets_the_band(tmp_path):
    base = multi_baseline(tmp_path, (1.0, 1.06))
    cand = write_run(tmp_path / "cand", sweep_rows(scaled(1.10), seed=5))  # +6.8% vs the median of medians
    assert gate_json(tmp_path, base, cand)[0].exit_code == 0
    # k = 0: only the row's own run spread (5.8%) widens the band; 6.8% is beyond it
    res, data = gate_json(tmp_path, base, cand, "--run-spread-k", "0")
    assert res.exit_code == 1
    assert _row(data, DECODE, CASE_A)["band"] == pytest.approx(0.06 / 1.03)


def test_noise_floor_widens_a_single_run_baseline(tmp_path):
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    cand = write_run(tmp_path / "cand", sweep_rows(scaled(1.08), seed=2))
    assert gate_json(tmp_path, base, cand)[0].exit_code == 1
    res, data = gate_json(tmp_path, base, cand, "--noise-floor", "3%")  # band max(5%, 3 x 3%) = 9%
    assert res.exit_code == 0, res.output
    assert [r["band"] for r in data["rows"]] == pytest.approx([0.09] * 4)
    assert not any("run-to-run noise is unknown" in w for w in data["warnings"])
    for bad in ("abc", "150%"):
        res = gate_cli("--baseline", base, "--candidate", cand, "--noise-floor", bad)
        assert res.exit_code == 2 and res.stderr.startswith("error: --noise-floor")


# case A with the decode and context kernels 4% apart: 10.0 us vs 10.4 us
CLOSE = {**BASE_TIMES, (CONTEXT, "context", CASE_A): 10.4}


def test_winner_change_within_run_spread_is_a_tie(tmp_path):
    # candidate: context 9.8 us now beats decode 10.3 us by 5%, well beyond the within-run spreads (~0.2%)
    cand_times = with_time(DECODE, CASE_A, 1.03, with_time(CONTEXT, CASE_A, 9.8 / 10.4, CLOSE))
    cand = write_run(tmp_path / "cand", sweep_rows(cand_times, seed=5))
    noisy = multi_baseline(tmp_path, (1.0, 1.06), CLOSE, name="noisy")  # runs 6% apart
    res, data = gate_json(tmp_path, noisy, cand)
    assert res.exit_code == 0, res.output
    assert data["winner_changes"] == [] and data["winner_ties"] == [CASE_A.case_id]
    assert "counted as ties" in res.output
    # a quiet baseline (runs 0.5% apart) sees the same flip as a change of winner
    quiet = multi_baseline(tmp_path, (1.0, 1.005), CLOSE, name="quiet")
    res2, data2 = gate_json(tmp_path, quiet, cand)
    assert res2.exit_code == 1, res2.output
    assert [(w["case_id"], w["base_path"], w["cand_path"]) for w in data2["winner_changes"]] == [
        (CASE_A.case_id, "decode", "context")]
    assert not [r for r in data2["rows"] if r["fails"]]  # only the winner change fails


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    for n in needles:
        assert n in err, err


def test_mismatched_runs_refused(tmp_path):
    root = tmp_path / "bl"
    scen = {"name": "draft-extend", "model": "llama3-8b"}
    r1 = write_run(tmp_path / "r1", sweep_rows(seed=1), scenario=scen)
    other_gpu = write_run(tmp_path / "h100", sweep_rows(seed=2, device=H100), device=H100, scenario=scen)
    other_scen = write_run(tmp_path / "decode", sweep_rows(seed=2), scenario={**scen, "name": "decode"})
    slowed = write_run(tmp_path / "slow", sweep_rows(seed=2), scenario=scen, slow_kernel={CONTEXT: 2})
    other_timer = write_run(tmp_path / "events", sweep_rows(seed=2), scenario=scen, timer={"kind": "cuda-events"})
    _one_line_error(baseline_cli(r1, other_gpu, "--name", "x", "--root", root), "GPU model", "NVIDIA H100")
    _one_line_error(baseline_cli(r1, other_scen, "--name", "x", "--root", root), "scenario draft-extend vs decode")
    _one_line_error(baseline_cli(r1, slowed, "--name", "x", "--root", root), "--slow-kernel")
    _one_line_error(baseline_cli(r1, other_timer, "--name", "x", "--root", root), "timer")
    _one_line_error(baseline_cli(r1, r1, "--name", "x", "--root", root), "given twice")
    assert not root.exists()  # nothing written
    ok = write_run(tmp_path / "r2", sweep_rows(seed=2), scenario=scen)
    assert baseline_cli(r1, ok, "--name", "pair", "--root", root).exit_code == 0
    # a multi-run baseline is not pooled again
    _one_line_error(baseline_cli(root / "pair", ok, "--name", "y", "--root", root), "already a multi-run baseline")


def test_row_not_ok_in_every_run_is_not_compared(tmp_path):
    r1 = write_run(tmp_path / "r1", sweep_rows(seed=1))
    r2 = write_run(tmp_path / "r2", sweep_rows(seed=2, overrides={(CONTEXT, CASE_A): {"status": "wrong"}}))
    root = tmp_path / "bl"
    res = baseline_cli(r1, r2, "--name", "mixed", "--root", root)
    assert res.exit_code == 0 and "not ok in every run" in res.stderr
    rows = load_run(root / "mixed").rows.set_index(["kernel", "case_id"])
    assert rows.loc[(CONTEXT, CASE_A.case_id), "status"] == "wrong"
    assert rows.loc[(DECODE, CASE_A.case_id), "status"] == "ok"
    res, data = gate_json(tmp_path, root / "mixed", r1, "--ignore-winner-change")
    assert res.exit_code == 0
    assert outcomes(data)[(CONTEXT, CASE_A.case_id, None)] == "not-compared"


def test_the_baseline_and_recommend_entry_points_from_python(tmp_path):
    # kbench baseline and kbench recommend without the CLI: run folders as paths, the package's own names
    from kbench.errors import BadInput
    from kbench.gate import run_gate, write_multi_baseline
    from kbench.recommend import recommend_for
    from kbench.recommend.render import to_json

    a, b = "results/baselines/h200-power-both-kv4096-sweep1", "results/baselines/h200-power-both-kv4096-sweep2"
    folder, rows, warnings = write_multi_baseline([a, b], "pooled", root=tmp_path)
    assert folder == tmp_path / "pooled" and len(rows) and (folder / "manifest.json").exists()
    assert run_gate(folder, b, threshold="5%").exit_code == 0
    rec = recommend_for("results/baselines/h200-draft-extend-kv4096", "sglang", batch_size=16, q_len=4, kv_len=4096)
    # a run of plain kernels only: every setting bounded by its kernel's GPU time, none named best
    assert rec.best is None and to_json(rec)["best"] is None
    assert {r.setting.id for r in rec.results if r.bound_us} >= {"flashinfer", "trtllm_mha"}
    with pytest.raises(BadInput, match="one way"):
        recommend_for(a, "sglang", batch_size=16, q_len=4, kv_len=4096, workload=tmp_path / "w.jsonl")
