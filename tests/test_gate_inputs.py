"""kbench gate refuses what it cannot compare: other hardware, other schema versions, bad files (exit 2)."""
from __future__ import annotations

import json

import pytest
from gate_synth import H200, gate_cli, gate_json, sweep_rows, write_run

from kbench import RESULT_SCHEMA_VERSION
from kbench.errors import BadInput
from kbench.gate import parse_threshold

H100 = {"name": "NVIDIA H100 80GB HBM3", "sm": 90}


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.fixture
def base(tmp_path):
    return write_run(tmp_path / "base", sweep_rows(seed=1))


def test_gpu_model_mismatch_refused_unless_forced(tmp_path, base):
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2, device=H100), device=H100)
    res = gate_cli("--baseline", base, "--candidate", cand)
    _one_line_error(res, "GPU model differs", "NVIDIA H200", "NVIDIA H100 80GB HBM3", "--force")
    res2, data = gate_json(tmp_path, base, cand, "--force")
    assert res2.exit_code == 0, res2.output
    assert any("GPU model differs" in w for w in data["warnings"])


def test_sm_mismatch_refused(tmp_path, base):
    b200_sm = {"name": "NVIDIA H200", "sm": 100}
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2, device=b200_sm), device=b200_sm)
    _one_line_error(gate_cli("--baseline", base, "--candidate", cand), "SM version differs", "SM90", "SM100")


def test_hardware_from_rows_when_manifest_lacks_device(tmp_path, base):
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2, device=H100), device={})
    _one_line_error(gate_cli("--baseline", base, "--candidate", cand), "GPU model differs")


def _set_schema(run, version):
    m = json.loads((run / "manifest.json").read_text())
    m["schema_version"] = version
    (run / "manifest.json").write_text(json.dumps(m))


def test_schema_version_mismatch_refused_unless_forced(tmp_path, base):
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2))
    _set_schema(base, RESULT_SCHEMA_VERSION + 1)
    _one_line_error(gate_cli("--baseline", base, "--candidate", cand), "schema version",
                    str(RESULT_SCHEMA_VERSION + 1), "--force")
    res, data = gate_json(tmp_path, base, cand, "--force")
    assert res.exit_code == 0, res.output
    assert any("schema version" in w for w in data["warnings"])


def test_sweep_vs_server_bench_refused_even_forced(tmp_path, base):
    import test_gate_server as ts
    ts.ensure_server_kind()
    cand = write_run(tmp_path / "cand", [ts.server_row("bs1-in512-out32")], kind="server-bench")
    _one_line_error(gate_cli("--baseline", base, "--candidate", cand, "--force"), "server-bench")


def test_missing_folder(tmp_path, base):
    _one_line_error(gate_cli("--baseline", base, "--candidate", tmp_path / "nope"), "candidate", "no such run")
    _one_line_error(gate_cli("--baseline", tmp_path / "nope", "--candidate", base), "baseline")


def test_folder_without_manifest(tmp_path, base):
    (tmp_path / "empty").mkdir()
    _one_line_error(gate_cli("--baseline", base, "--candidate", tmp_path / "empty"), "manifest.json")


def test_truncated_parquet(tmp_path, base):
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2))
    (cand / "rows.jsonl").unlink()  # like a baseline: no journal, Parquet is what is read
    (cand / "rows.csv").unlink()
    data = (cand / "rows.parquet").read_bytes()
    (cand / "rows.parquet").write_bytes(data[: len(data) // 2])
    _one_line_error(gate_cli("--baseline", base, "--candidate", cand), "Parquet")


def test_manifest_not_json(tmp_path, base):
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2))
    (cand / "manifest.json").write_text("{ not json")
    _one_line_error(gate_cli("--baseline", base, "--candidate", cand), "not valid JSON")


@pytest.mark.parametrize("bad", ["abc", "5", "150%", "-1%", "", "nan"])
def test_bad_threshold(tmp_path, base, bad):
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2))
    _one_line_error(gate_cli("--baseline", base, "--candidate", cand, "--threshold", bad), "--threshold")


def test_bad_alpha(tmp_path, base):
    _one_line_error(gate_cli("--baseline", base, "--candidate", base, "--alpha", "1.5"), "--alpha")


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), (" 12.5% ", 0.125), ("0", 0.0), ("0%", 0.0)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


def test_parse_threshold_hints_percent():
    with pytest.raises(BadInput, match="did you mean 5%"):
        parse_threshold("5")


def test_incomplete_candidate_warns(tmp_path, base):
    from kbench.runs.store import RunWriter
    w = RunWriter(tmp_path / "cand", {"kind": "sweep", "device": H200})
    for r in sweep_rows(seed=2):
        w.append(r)  # killed before finalize: status stays "running"
    w._journal.close()
    res, data = gate_json(tmp_path, base, tmp_path / "cand")
    assert res.exit_code == 0
    assert any("not complete" in x for x in data["warnings"])
