"""Partitioning, merging, and --devices workers (and their validation), on the CPU (two workers may share one device)."""
import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from helpers import TINY, one_error_line, run_cli

from kbench.cli.main import cli
from kbench.engine.devices import run_on_devices
from kbench.errors import BadInput
from kbench.runs.merge import merge_runs
from kbench.cases.models import MODELS
from kbench.kernels.registry import select

ALL = len(select(["all"]))  # kernels of 'all': one row each per case
from kbench.cases.scenario import Scenario, Timing
from kbench.runs.store import load_run
from kbench.engine.shards import parse_shard, shard_cases
from kbench.engine.sweep import run_sweep

FAST = Timing(spread_target=0.3, budget_s=0.02, min_samples=3, max_samples=5)


def sc(**kw):
    base = dict(name="sh", heads=MODELS["gqa8-d64"], batch_size=[1, 2], q_len=[1, 2, 4], kv_len=[64], page_size=[16],
                timing=FAST)
    base.update(kw)
    return Scenario(**base).validate()


@settings(max_examples=50, deadline=None)
@given(n_bs=st.integers(1, 5), n_q=st.integers(1, 6), n=st.integers(1, 9))
def test_partition_is_deterministic_and_exact(n_bs, n_q, n):
    cases = sc(batch_size=list(range(1, n_bs + 1)), q_len=list(range(1, n_q + 1))).cases()
    slices = [shard_cases(cases, (i, n)) for i in range(n)]
    flat = [c.case_id for s in slices for c in s]
    assert sorted(flat) == sorted(c.case_id for c in cases)  # every case exactly once
    assert len(set(flat)) == len(flat)
    assert [c.case_id for c in shard_cases(cases, (0, n))] == [c.case_id for c in slices[0]]
    sizes = [len(s) for s in slices]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("bad", ["2/2", "1", "a/b", "-1/2", "0/0"])
def test_bad_shard(bad):
    with pytest.raises(BadInput):
        parse_shard(bad)


def test_shards_merge_to_the_rows_of_one_run(tmp_path):
    whole = run_sweep(sc(), out_dir=tmp_path / "whole")
    parts = [run_sweep(sc(), out_dir=tmp_path / "p", run_name=f"s{i}", shard=(i, 3)).run_dir for i in range(3)]
    merged = load_run(merge_runs(parts, tmp_path / "m"))
    assert merged.manifest["status"] == "complete" and merged.manifest["all_shards"]
    got = sorted(zip(merged.rows.kernel, merged.rows.case_id))
    assert got == sorted(zip(whole.rows.kernel, whole.rows.case_id))
    assert len(merged.manifest["merged_from"]) == 3


def test_merge_refuses_mismatched_manifests(tmp_path):
    a = run_sweep(sc(), out_dir=tmp_path, run_name="a", shard=(0, 2)).run_dir
    b = run_sweep(sc(q_len=[1, 2]), out_dir=tmp_path, run_name="b", shard=(1, 2)).run_dir
    with pytest.raises(BadInput, match="scenario"):
        merge_runs([a, b], tmp_path)
    c = run_sweep(sc(), out_dir=tmp_path, run_name="c", shard=(1, 2)).run_dir
    m = json.loads((c / "manifest.json").read_text())
    m["device"]["name"] = "NVIDIA B200"
    (c / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BadInput, match="GPU"):
        merge_runs([a, c], tmp_path)
    with pytest.raises(BadInput, match="twice") as e:
        merge_runs([a, a], tmp_path)
    assert str(e.value).startswith(f"cannot merge: shard 0/2 appears twice ({a} and {a})")  # which, and where
    r = CliRunner().invoke(cli, ["merge", str(a), str(b), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output


def _quick_payload(batch_size, q_len):
    """What `kbench sweep --batch-size .. --q-len .. --kv-len 64 --budget 0.02 --devices ..` hands its workers."""
    from kbench.cases.scenario import apply_overrides, load_scenario
    from kbench.engine.sweep import SweepOptions, sweep_payload

    scenario = apply_overrides(load_scenario("quick"), batch_size=",".join(map(str, batch_size)),
                               q_len=",".join(map(str, q_len)), kv_len="64", budget_s=0.02)
    return sweep_payload(scenario, SweepOptions())


def test_devices_runs_one_worker_per_listed_device_and_merges(tmp_path):
    """The worker machinery from Python (the CLI refuses --devices without GPUs): two workers on 'device 0'."""
    merged = run_on_devices(_quick_payload([1, 2], [1, 2, 4]), [0, 0], tmp_path, "quick")
    runs = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert runs == [merged]
    run = load_run(runs[0])
    assert len(run.rows) == 6 * ALL and not run.rows.duplicated(["kernel", "case_id"]).any()
    shards = sorted(m["shard"]["index"] for m in run.manifest["merged_from"])
    assert shards == [0, 1]


def test_devices_with_one_device_gives_one_complete_run(tmp_path):
    """Seen on the H200: --devices 0 ran its shard and then refused to 'merge' a single run."""
    merged = run_on_devices(_quick_payload([1], [1, 2]), [0], tmp_path, "quick")
    run = load_run(merged)
    assert run.manifest["status"] == "complete" and len(run.rows) == 2 * ALL


def test_devices_and_shard_bad_input(tmp_path):
    r = CliRunner().invoke(cli, ["sweep", "--devices", "x", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--devices" in r.output
    r = CliRunner().invoke(cli, ["sweep", "--shard", "3/2", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--shard" in r.output


@pytest.mark.parametrize("devs,says", [("0", "no GPU"), ("5", "no GPU"), ("0,0", "listed twice")])
def test_devices_validated(tmp_path, devs, says):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks a machine without a GPU")
    line = one_error_line(run_cli(["sweep", *TINY, "--devices", devs, "--out", tmp_path]))
    assert says in line and not list(tmp_path.iterdir())


def test_a_merge_stopped_midway_leaves_no_run_and_one_both_manifests_lack_a_field_merges(tmp_path, monkeypatch):
    # SIGTERM after the first row left a 'running' run folder of 1 row that report and export then read
    from kbench.runs import store

    parts = [run_sweep(sc(), out_dir=tmp_path / "p", run_name=f"s{i}", shard=(i, 2)).run_dir for i in range(2)]
    appended = []

    def stop_after_one(self, rec):
        if appended:
            raise KeyboardInterrupt
        appended.append(rec)
        return real(self, rec)

    real = store.RunWriter.append
    monkeypatch.setattr(store.RunWriter, "append", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        merge_runs(parts, tmp_path / "m")
    assert appended and (not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir()))
    monkeypatch.setattr(store.RunWriter, "append", real)
    for p in parts:  # hand-made or older manifests without kbench_version and seed: merged, not a TypeError
        m = json.loads((p / "manifest.json").read_text())
        del m["kbench_version"], m["seed"]
        (p / "manifest.json").write_text(json.dumps(m))
    merged = load_run(merge_runs(parts, tmp_path / "m"))
    assert merged.manifest["status"] == "complete" and "kbench_version" not in merged.manifest
