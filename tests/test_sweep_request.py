"""Every rule between `kbench sweep`'s options lives in kbench.engine.request.SweepRequest.check, usable without
click: the first rule broken is named (one BadInput line, exit 2 from the CLI) before anything is written."""
from __future__ import annotations

import pytest

from kbench.engine.plans.adaptive_plan import AdaptivePlan
from kbench.engine.plans.grid import FullGridPlan
from kbench.engine.request import SweepRequest
from kbench.engine.sweep import run_sweep
from kbench.errors import BadInput


@pytest.fixture
def cpu_run(tmp_path_factory):
    """A finished full-grid run, marked interrupted so that --resume has work to do."""
    import json

    from kbench.cases.models import MODELS
    from kbench.cases.scenario import Scenario, Timing

    sc = Scenario(name="r", heads=MODELS["gqa8-d64"], batch_size=[1], q_len=[1], kv_len=[64], page_size=[16],
                  kernels=["reference"], timing=Timing(spread_target=0.5, budget_s=0.02, min_samples=3,
                                                       max_samples=5)).validate()
    res = run_sweep(sc, out_dir=tmp_path_factory.mktemp("runs"))
    m = json.loads((res.run_dir / "manifest.json").read_text())
    m["status"] = "interrupted"
    (res.run_dir / "manifest.json").write_text(json.dumps(m))
    return str(res.run_dir)


@pytest.mark.parametrize("request_kw, message", [
    (dict(budget_measurements=5), "--budget-measurements/--budget-minutes goes with --adaptive"),
    (dict(regret_bound=3.0, given=frozenset({"regret_bound"})), "--regret-bound goes with --adaptive"),
    (dict(force=True), "--force goes with --resume"),
    (dict(adaptive=True, shard="0/2"), "--adaptive plans from the whole grid's rows: drop --shard/--devices"),
    (dict(adaptive=True, devices="0"), "--adaptive plans from the whole grid's rows: drop --shard/--devices"),
    (dict(devices="0", given=frozenset({"device_index"})), "--device and --devices: give one"),
    (dict(devices="0", shard="0/2"), "--devices runs its own shards: drop --shard/--resume"),
    (dict(shard="2/2"), "--shard: expected i/N with 0 <= i < N, or auto, got '2/2'"),
    (dict(slow_kernel=("reference",)), "--slow-kernel: expected KERNEL=N with N in 2..1000, got 'reference'"),
    (dict(device_index=-1), "--device -1: expected a GPU index, 0 or more"),
])
def test_each_rule_names_itself(tmp_path, request_kw, message):
    with pytest.raises(BadInput) as e:
        SweepRequest(out_dir=str(tmp_path / "out"), **request_kw).check()
    assert message in str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("gpus, index, message", [
    (0, 1, "--device 1: this machine has no GPU that torch can use (a sweep here runs on the CPU): drop --device"),
    (0, 99, "--device 99: this machine has no GPU"),
    (2, 2, "--device 2: GPU 2 does not exist (this machine has 2: 0..1)"),
    (2, -1, "--device -1: expected a GPU index, 0 or more"),
])
def test_a_device_index_this_machine_lacks_is_refused(tmp_path, monkeypatch, gpus, index, message):
    import kbench.engine.request as req

    monkeypatch.setattr(req, "gpu_count", lambda: gpus)
    with pytest.raises(BadInput) as e:
        SweepRequest(out_dir=str(tmp_path / "out"), device_index=index).check()
    assert message in str(e.value)
    assert not (tmp_path / "out").exists()
    if gpus:  # an index the machine has is taken
        assert SweepRequest(out_dir=str(tmp_path / "out"), device_index=gpus - 1).check().options.device_index == gpus - 1


def test_the_rules_of_a_resume(cpu_run):
    with pytest.raises(BadInput, match=r"--batch-size, --seed cannot change it \(drop them\); a resume takes only"):
        SweepRequest(resume=cpu_run, overrides={"batch_size": "2"}, given=frozenset({"seed"})).check()
    with pytest.raises(BadInput, match=r"--out, --seed cannot change it \(drop them\)"):
        SweepRequest(resume=cpu_run, given=frozenset({"seed", "out_dir"})).check()
    with pytest.raises(BadInput, match=r"--coarse-step cannot change it \(drop it\)"):
        SweepRequest(resume=cpu_run, given=frozenset({"coarse_step"})).check()
    with pytest.raises(BadInput, match="is a full-grid sweep, not an adaptive one"):
        SweepRequest(resume=cpu_run, budget_minutes=1.0).check()
    checked = SweepRequest(resume=cpu_run).check()
    assert isinstance(checked.plan, FullGridPlan) and checked.options.resume == cpu_run
    assert checked.scenario.name == "r" and checked.devices is None and checked.nothing_to_do is None


def test_a_checked_request_says_what_to_run(tmp_path):
    said = []
    checked = SweepRequest(out_dir=str(tmp_path), run_name="a b", adaptive=True, regret_bound=5.0,
                           budget_measurements=7, overrides={"batch_size": "1,4"}).check(note=said.append)
    assert isinstance(checked.plan, AdaptivePlan) and checked.options.adaptive.regret_bound == 0.05
    assert checked.options.adaptive.budget_measurements == 7 and checked.scenario.batch_size == [1, 4]
    assert said and "'a-b'" in said[0]  # the --name note, said on the way
    grid = SweepRequest(out_dir=str(tmp_path), shard="1/3").check()
    assert isinstance(grid.plan, FullGridPlan) and grid.options.shard == (1, 3)
    assert [c.case_id for c in grid.plan.cases()] == [c.case_id for c in grid.scenario.cases()[1::3]]


def test_a_resume_refusal_names_the_options_given_and_what_a_resume_takes(cpu_run):
    """`--resume RUN --budget 5` said "drop the axis options": --budget is no axis (it is the [timing] budget per
    measurement), and the user was left guessing which option was meant and what a resume does take."""
    from click.testing import CliRunner

    from kbench.cli.main import cli

    r = CliRunner().invoke(cli, ["sweep", "--resume", cpu_run, "--budget", "5"])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        "error: --resume finishes the run as it was started: --budget cannot change it (drop it); a resume takes only "
        "--device, --force, --allow-wrong, --isolate/--no-isolate, --stream/--no-stream, --compile-workers, "
        "--jit-cache, --max-table-cases, --slow-kernel, and for an adaptive run --adaptive, --budget-measurements, "
        "--budget-minutes"], r.output


def test_every_sweep_option_is_either_refused_by_name_or_taken_by_a_resume():
    """The refusal's lists stay true: each option of kbench sweep is one the run fixes (named by its own flag when
    given) or one that RESUME_TAKES names."""
    import re

    from kbench.cli.sweep_cmd import sweep
    from kbench.engine.request import FIXED_BY_RUN, OVERRIDE_FLAGS, RESUME_TAKES, TUNING

    takes = set(re.findall(r"--[a-z-]+", RESUME_TAKES))
    refused = {**OVERRIDE_FLAGS, **dict(FIXED_BY_RUN), **{name: flag for flag, name in TUNING}}
    for param in sweep.params:
        flags = {o for o in param.opts + param.secondary_opts if o.startswith("--")}
        if param.name in ("resume", "help"):
            continue
        if param.name in refused:
            assert refused[param.name] in flags and not flags & takes, (param.name, flags)
        else:
            assert flags and flags <= takes, (param.name, flags)
    assert takes <= {o for p in sweep.params for o in p.opts + p.secondary_opts}
