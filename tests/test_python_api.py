"""The engine from Python follows the commands' rules: what a command refuses with one line is BadInput (never
another exception, never a half-made folder), an empty output path is refused rather than read as the current
folder, and the functions that read a policy take a path as the commands do."""
from __future__ import annotations

import pytest
from helpers import BASELINE, run_cli, tiny

from kbench.errors import BadInput


@pytest.mark.parametrize("kw, says", [
    ({"shard": "0/2x"}, "--shard: expected i/N"), ({"shard": (0, 0)}, "0 <= i < n"), ({"shard": (2, 2)}, "0 <= i < n"),
    ({"shard": (-1, 2)}, "0 <= i < n"), ({"shard": [0]}, "0 <= i < n"), ({"shard": (True, 2)}, "0 <= i < n"),
    ({"out_dir": ""}, "--out: an empty path"), ({"out_dir": "  "}, "--out: an empty path"),
    ({"seed": -1}, "0..2**63-1"), ({"seed": 2**63}, "0..2**63-1"), ({"seed": 1.5}, "0..2**63-1"),
    ({"device_index": 1}, "no GPU"), ({"device_index": -1}, "0 or more")])
def test_run_sweep_refuses_what_sweep_refuses_before_any_folder(tmp_path, monkeypatch, kw, says):
    # a shard of (0, 0) raised ZeroDivisionError, '0/2' unpacked as ('0', '/'), (2, 2) ran a "complete" empty
    # run, out_dir '' wrote into the current folder, device_index 1 ran on the CPU: each after making a run folder
    from kbench.engine.sweep import run_sweep

    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match=says.replace("*", r"\*").replace(".", r"\.")):
        run_sweep(tiny(), **{"out_dir": "runs", **kw})
    assert list(tmp_path.iterdir()) == []


def test_run_sweep_reads_a_shard_as_the_flag_does(tmp_path):
    from kbench.engine.sweep import run_sweep
    from kbench.runs.merge import merge_runs
    from kbench.runs.store import load_run

    a = run_sweep(tiny(), out_dir=tmp_path, shard="0/2", run_name="s")
    b = run_sweep(tiny(), out_dir=tmp_path, shard=[1, 2], run_name="s")
    assert load_run(a.run_dir).manifest["shard"] == {"index": 0, "count": 2}
    merged = load_run(merge_runs([a.run_dir, b.run_dir], out_dir=tmp_path / "m"))
    assert len(merged.rows) == len(load_run(run_sweep(tiny(), out_dir=tmp_path / "whole").run_dir).rows)


def test_an_empty_output_path_is_refused_from_python_too(tmp_path, monkeypatch, cpu_run):
    from kbench.gate import write_multi_baseline
    from kbench.recommend.export import export_policy
    from kbench.report import build_report
    from kbench.runs.merge import merge_runs
    from kbench.server import ServerBenchConfig

    monkeypatch.chdir(tmp_path)
    for empty in ("", "   "):
        with pytest.raises(BadInput, match="--out: an empty path"):
            merge_runs([cpu_run, cpu_run], out_dir=empty)
        with pytest.raises(BadInput, match="--out: an empty path"):
            write_multi_baseline([cpu_run], "b", root=empty)
        with pytest.raises(BadInput, match="--out: an empty path"):
            build_report(BASELINE, out_dir=empty)
        with pytest.raises(BadInput, match="--out: an empty path"):
            export_policy(BASELINE, None, empty)
        with pytest.raises(BadInput, match="--result-filename: an empty path"):
            ServerBenchConfig(url="http://127.0.0.1:9", result_filename=empty).validate()
    assert list(tmp_path.iterdir()) == []


def test_lookup_and_export_take_a_path_as_select_and_export_do(tmp_path):
    from kbench.recommend.export import export_policy
    from kbench.report import lookup
    from kbench.report.policy import load_policy, policy_from

    r = run_cli(["select", "--policy", BASELINE, "--batch-size", "16", "--q-len", "4", "--kv-len", "4096", "--json"])
    assert r.exit_code == 0, r.output
    import json

    want = json.loads(r.output)
    policy, _ = policy_from(BASELINE)
    assert lookup(BASELINE, 16, 4, 4096) == lookup(str(BASELINE), 16, 4, 4096) == lookup(policy, 16, 4, 4096)
    assert lookup(BASELINE, 16, 4, 4096)["kernel"] == want["kernel"]
    rep = tmp_path / "rep"
    assert run_cli(["report", BASELINE, "--out", rep]).exit_code == 0
    assert lookup(rep, 16, 4, 4096) == lookup(load_policy(rep / "policy.json"), 16, 4, 4096)
    for bad, says in (({}, "not a kbench policy"), ((policy, None), "take its first item"), (3, "got int"),
                      (tmp_path / "none", "no such run folder")):
        with pytest.raises(BadInput, match=says):
            lookup(bad, 16, 4, 4096)
    out = export_policy(BASELINE, None, tmp_path / "sel.py")
    assert str(BASELINE) in out.read_text() and export_policy(policy, "x", tmp_path / "sel2.py").is_file()
    with pytest.raises(BadInput, match="take its first item"):
        export_policy(policy_from(BASELINE), "x", tmp_path / "sel3.py")
    assert not (tmp_path / "sel3.py").exists()


def test_prebuild_environment_and_jit_cache_refuse_cleanly(tmp_path):
    from kbench.engine.environment import environment
    from kbench.engine.jit_cache import use_jit_cache
    from kbench.engine.prebuild import plan_prebuild, prebuild

    for bad in (None, [], ["quick"], "quick", [tiny(), 3]):
        with pytest.raises(BadInput, match="give one or more scenarios"):
            prebuild(bad, "9.0a", build_modules=False)
    with pytest.raises(BadInput, match="give one or more scenarios"):
        plan_prebuild(3)
    for index in (-1, 1, True):
        with pytest.raises(BadInput, match="--device"):
            environment(bandwidth=False, device_index=index)
    (tmp_path / "f").write_text("x")
    with pytest.raises(BadInput, match="not a folder"):
        use_jit_cache(tmp_path / "f" / "sub")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_prebuild_api_checks_its_arguments_as_the_flags_are_checked(tmp_path, monkeypatch):
    from kbench.cases.scenario import load_scenario
    from kbench.engine.jit_cache import use_jit_cache
    from kbench.engine.prebuild import PrebuildPlan, build_plan, check_archive_path, plan_prebuild
    from kbench.device import DeviceInfo

    monkeypatch.chdir(tmp_path)
    sc = load_scenario("quick")
    for archive, says in ((None, "--archive None"), (5, "--archive 5"), ("", "an empty path"), ("  ", "an empty path"),
                          (sc.input_files()[0], "would replace what the command reads")):
        with pytest.raises(BadInput, match=says):
            check_archive_path(archive, sc)  # one scenario, as prebuild() takes it
    check_archive_path("new/a.tgz", [sc])  # fine, and nothing made before the archive is written
    with pytest.raises(BadInput, match="give one or more scenarios"):
        check_archive_path("x.tgz", "quick")
    with pytest.raises(BadInput, match="--arch 9.0"):
        plan_prebuild([sc], 9.0, for_build=False)
    with pytest.raises(BadInput, match=f"--include {tmp_path / 'nope'}: not a folder"):
        plan_prebuild([sc], "9.0a", include=str(tmp_path / "nope"), for_build=False)  # one folder, not its letters
    pp = PrebuildPlan(DeviceInfo(cuda=True, name="H200", sm=90), [])
    for kw in ({"jobs": -3}, {"jobs": "abc"}, {"jobs": 2.5}, {"parallel": 0}, {"parallel": "4"}, {"parallel": 65}):
        with pytest.raises(BadInput, match="expected an integer in 1.."):
            build_plan(pp, **kw)
    with pytest.raises(BadInput, match="give a folder"):
        use_jit_cache(5)
    assert list(tmp_path.iterdir()) == []


def test_a_builtin_scenario_names_its_installed_file_from_any_folder(tmp_path, monkeypatch):
    # from another folder the built-in scenario's file was not seen: --archive could have replaced it
    from importlib import resources

    from kbench.cases.scenario import load_scenario

    monkeypatch.chdir(tmp_path)
    want = str(resources.files("kbench.scenarios").joinpath("quick.toml"))
    assert load_scenario("quick").input_files() == [want]


def test_use_jit_cache_reads_a_tilde_as_the_shell_does(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    monkeypatch.setenv("HOME", str(tmp_path))
    code = "from kbench.engine.jit_cache import use_jit_cache; print(use_jit_cache('~/kb-jit'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env=os.environ)
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path / "kb-jit"), out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb-jit"]


def test_build_report_refuses_a_negative_holdout_seed(tmp_path):
    from kbench.report import build_report

    for seed in (-1, 2**63, 1.5):  # numpy raised ValueError
        with pytest.raises(BadInput, match="--seed"):
            build_report(BASELINE, out_dir=tmp_path / "rep", holdout=0.5, seed=seed)
    assert list(tmp_path.iterdir()) == []


def _quick():
    from kbench.cases.scenario import apply_overrides, load_scenario

    return apply_overrides(load_scenario("quick"), batch_size="1", q_len="1", kv_len="64", kernels="reference")


@pytest.mark.parametrize("kw, says", [
    ({"adaptive": "nan-minutes"}, "budget_minutes"), ({"adaptive": "nan-twin"}, "twin"),
    ({"adaptive": "str-bound"}, "regret_bound"), ({"adaptive": 5}, "AdaptiveOptions"),
    ({"slow_kernel": {"reference": 1}}, "slow_kernel"), ({"slow_kernel": ["reference=2"]}, "slow_kernel"),
    ({"compile_workers": 0}, "compile_workers"), ({"compile_workers": "2"}, "compile_workers"),
    ({"run_name": 5}, "run_name"), ({"bogus": 1}, "unknown sweep option 'bogus'"), ({"out_dir": 5}, "out_dir 5")])
def test_run_sweep_checks_every_option_before_a_folder(tmp_path, monkeypatch, kw, says):
    # bad adaptive options were refused only after the run folder (and a manifest holding NaN) was written
    from kbench.engine.plans.adaptive_options import AdaptiveOptions
    from kbench.engine.sweep import run_sweep

    made = {"nan-minutes": AdaptiveOptions(budget_minutes=float("nan")), "nan-twin": AdaptiveOptions(twin=float("nan")),
            "str-bound": AdaptiveOptions(regret_bound="x")}
    if isinstance(kw.get("adaptive"), str):
        kw = {"adaptive": made[kw["adaptive"]]}
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match=says):
        run_sweep(_quick(), **{"out_dir": "o", **kw})
    assert list(tmp_path.iterdir()) == []


def test_arguments_of_the_wrong_kind_are_bad_input_not_a_python_error(tmp_path):
    from kbench.engine.prebuild import load_archive
    from kbench.engine.sweep import resume_sweep, run_sweep
    from kbench.gate import run_gate, write_multi_baseline
    from kbench.recommend import recommend_for
    from kbench.recommend.export import export_policy
    from kbench.report import build_report, lookup
    from kbench.report.policy import policy_from
    from kbench.runs.merge import merge_runs

    policy, _ = policy_from(BASELINE)
    calls = [lambda: run_gate(5, BASELINE), lambda: run_gate([BASELINE], BASELINE), lambda: resume_sweep(5),
             lambda: load_archive(5), lambda: merge_runs(5), lambda: merge_runs([5, 6]),
             lambda: write_multi_baseline([5], "x", root=tmp_path), lambda: build_report(5),
             lambda: build_report(BASELINE, 5), lambda: build_report(BASELINE, tmp_path / "r", holdout="0.2"),
             lambda: build_report(BASELINE, tmp_path / "r", plot_groups="2"),
             lambda: build_report(BASELINE, tmp_path / "r", plot_points=5),
             lambda: recommend_for(5, "sglang", batch_size=16, q_len=4, kv_len=4096),
             lambda: recommend_for(BASELINE, "sglang", batch_size=16, q_len=4, kv_len=4096, steps=["bogus"]),
             lambda: recommend_for(BASELINE, "sglang", batch_size=16, q_len=4, kv_len=4096, filters=5),
             lambda: recommend_for(BASELINE, "sglang", workload=5),
             lambda: run_gate(BASELINE, BASELINE, alpha="0.01"), lambda: run_gate(BASELINE, BASELINE, run_spread_k="3"),
             lambda: lookup({"groups": [5]}, 16, 1, 4096), lambda: lookup({"groups": [{}]}, 16, 1, 4096),
             lambda: lookup(policy, 16, 1, 4096, heads=5), lambda: lookup(policy, 16, 1, 4096, page_size=[64]),
             lambda: export_policy({"groups": [5]}, None, tmp_path / "x.py"),
             lambda: export_policy(policy, 5, tmp_path / "x.py"), lambda: run_sweep("quick", tmp_path / "o")]
    for i, call in enumerate(calls):
        with pytest.raises(BadInput):
            call()
    assert list(tmp_path.iterdir()) == []


def test_overrides_and_server_config_of_the_wrong_kind_are_bad_input():
    from kbench.cases.scenario import apply_overrides, load_scenario
    from kbench.engine.prebuild import plan_prebuild, prebuild
    from kbench.server import ServerBenchConfig

    for v in ("1_0", "\uff10.5", True):  # float() read '1_0' as 10 and '０.5' as 0.5
        with pytest.raises(BadInput, match="budget_s"):
            apply_overrides(load_scenario("quick"), budget_s=v)
    assert apply_overrides(load_scenario("quick"), budget_s="0.5").timing.budget_s == 0.5
    for kw, says in ((dict(url=5), "--url 5"), (dict(url="http://127.0.0.1:9", batch_sizes=5), "--batch-size 5"),
                     (dict(url="http://127.0.0.1:9", seed=-1), "--seed -1"),
                     (dict(url="http://127.0.0.1:9", vocab_size=2**40), "--vocab-size")):
        with pytest.raises(BadInput, match=says):
            ServerBenchConfig(**kw).validate()
    with pytest.raises(BadInput, match="--parallel 0"):
        prebuild(tiny(), "9.0a", build_modules=False, parallel=0)  # before any planning
    with pytest.raises(BadInput, match="--include: one folder or a list"):
        plan_prebuild(tiny(), "9.0a", include=5, for_build=False)
