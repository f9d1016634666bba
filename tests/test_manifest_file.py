"""manifest.json is written from the typed kbench.runs.manifest.Manifest and keeps the file format every kbench
wrote: the same keys and values (absent keys stay absent, unknown keys are kept), so old runs and the
committed baseline load, resume and gate as before."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import COMMITTED_BASELINES

from kbench.runs.manifest import ABSENT, FILE_KEYS, Manifest
from kbench.runs.store import RunWriter, load_run

BASELINE = Path(__file__).resolve().parents[1] / "results" / "baselines" / "h200-draft-extend-kv4096"


def test_the_committed_baseline_manifest_round_trips_byte_for_byte():
    text = (BASELINE / "manifest.json").read_text()
    m = Manifest.from_dict(json.loads(text))
    assert m.to_json() == text
    assert m.read_bandwidth_gbs is ABSENT and "read_bandwidth_gbs" not in m.to_dict()  # absent, never null
    assert m.shard is None and "shard" in m.to_dict()  # null stays null
    assert m.hardware.describe() == "NVIDIA H200, SM90" and m.ceiling[0] == "copy"


def test_a_cpu_sweep_writes_the_same_keys_as_before(tmp_path):
    from kbench.cases.scenario import Scenario, Timing
    from kbench.engine.sweep import run_sweep

    sc = Scenario(name="m", heads=__import__("kbench.cases.models", fromlist=["MODELS"]).MODELS["gqa8-d64"],
                  batch_size=[1], q_len=[2], kv_len=[64], kernels=["reference"],
                  timing=Timing(spread_target=0.5, budget_s=0.02, min_samples=3, max_samples=5, warmup_ms=0))
    res = run_sweep(sc.validate(), out_dir=tmp_path)
    written = json.loads((res.run_dir / "manifest.json").read_text())
    # the keys of main 34e20ac's sweep manifest on a CPU, in its order
    assert list(written) == [
        "kind", "schema_version", "kbench_version", "command_line", "scenario", "device", "python",
        "copy_bandwidth_gbs", "clocks_start", "timer", "slow_kernel", "seed", "shard", "read_bandwidth_gbs",
        "roofline_ceiling", "start_time", "status", "isolated", "wall_s", "measurements", "end_time", "num_rows",
        "tables"]  # tables: the journal and the Parquet written from it (#48: one source of truth)
    assert written["kind"] == "sweep" and written["status"] == "complete" and written["num_rows"] == 1
    # no bandwidth measured on a CPU, so no roofline ceiling named (34e20ac named the read figure it lacked)
    assert written["copy_bandwidth_gbs"] is None and written["roofline_ceiling"] is None
    assert Manifest.from_dict(written).to_dict() == written


def test_kbench_writes_are_typed_and_name_the_field(tmp_path):
    with pytest.raises(TypeError, match="manifest field seed: expected int, got str"):
        Manifest(kind="sweep", seed="0")
    with pytest.raises(TypeError, match="manifest field isolated: expected bool, got int"):
        Manifest(isolated=1)
    with pytest.raises(TypeError, match="manifest field num_rows"):
        RunWriter(tmp_path / "r", {"num_rows": "3"})
    assert not (tmp_path / "r").exists()  # refused before the folder was made
    m = Manifest(kind="sweep")
    with pytest.raises(TypeError, match="manifest field status"):
        m["status"] = None
    m["a_plugin_key"] = {"x": 1}  # a key kbench does not know: kept, not checked
    assert m.to_dict() == {"kind": "sweep", "a_plugin_key": {"x": 1}}


def test_resume_writes_back_what_it_read_plus_what_it_adds(tmp_path):
    run = tmp_path / "run"
    w = RunWriter(run, {"kind": "sweep", "device": {"name": "X", "sm": 90}, "future_key": [1, 2]})
    w.append({"kernel": "k", "case_id": "c", "status": "ok"})
    w.finalize("interrupted")
    on_disk = json.loads((run / "manifest.json").read_text())
    on_disk["seed"] = "hand-edited"  # a wrong type in an old or edited run: kept as it is, not refused
    (run / "manifest.json").write_text(json.dumps(on_disk))
    w = RunWriter(run, {}, resume=True)
    w.finalize("complete")
    after = json.loads((run / "manifest.json").read_text())
    assert after["future_key"] == [1, 2] and after["seed"] == "hand-edited" and len(after["resumed_at"]) == 1
    assert {k: v for k, v in after.items() if k not in ("resumed_at", "status", "end_time")} == \
        {k: v for k, v in on_disk.items() if k not in ("status", "end_time")}
    assert load_run(run).manifest["status"] == "complete"


def test_field_table_covers_every_key_kbench_writes():
    text = json.loads((BASELINE / "manifest.json").read_text())
    assert set(text) <= set(FILE_KEYS)
    assert Manifest.from_dict(text).extra == {}


@pytest.mark.parametrize("name", COMMITTED_BASELINES)
def test_every_committed_baseline_loads_with_the_rows_it_recorded(name):
    """load_run refuses tables holding another number of rows than the manifest recorded (a copy cut short): every
    committed baseline holds its count, read with its samples and without them (the lean read of report and gate)."""
    m = json.loads((BASELINE.parent / name / "manifest.json").read_text())
    for lists in (True, False):
        assert len(load_run(BASELINE.parent / name, lists=lists).rows) == m["baseline"]["num_rows"] == m["num_rows"]


def test_the_tests_list_of_committed_baselines_is_what_git_holds():
    """Tests name the committed baselines (helpers.COMMITTED_BASELINES) instead of listing results/baselines/, where
    a user's own uncommitted baseline may lie; the list is every baseline git tracks, no more, no less."""
    import subprocess

    root = BASELINE.parents[2]
    r = subprocess.run(["git", "-C", str(root), "ls-files", "results/baselines"], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        pytest.skip("not a git checkout")
    tracked = {Path(f).parts[2] for f in r.stdout.split() if f.endswith("/manifest.json")}
    assert tracked == set(COMMITTED_BASELINES)
