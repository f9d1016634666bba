"""`--shard auto`: the slice of a Slurm array task or a Kubernetes Indexed Job pod, from their variables."""
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from kbench.cli.main import cli
from kbench.engine.shards import parse_shard, shard_cases
from kbench.errors import BadInput
from kbench.cases.models import MODELS
from kbench.cases.scenario import Scenario


def slurm(task, first, count, step=None, last=None):
    """A Slurm array task's variables; MAX as Slurm sets it for a range (last: another, as a list array gives)."""
    env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(first), "SLURM_ARRAY_TASK_COUNT": str(count),
           "SLURM_ARRAY_TASK_MAX": str(first + (count - 1) * (step or 1) if last is None else last),
           "SLURM_ARRAY_JOB_ID": "77", "SLURM_JOB_ID": "78"}
    if step is not None:
        env["SLURM_ARRAY_TASK_STEP"] = str(step)
    return env


@settings(max_examples=60, deadline=None)
@given(first=st.integers(0, 50), count=st.integers(1, 40), step=st.integers(1, 5), data=st.data())
def test_every_task_of_a_slurm_range_gets_its_own_slice(first, count, step, data):
    """--array=FIRST-LAST:STEP: the tasks' slices are 0..COUNT-1, each once, and together cover the grid once."""
    tasks = [first + k * step for k in range(count)]
    shards = [parse_shard("auto", slurm(t, first, count, step)) for t in tasks]
    assert shards == [(k, count) for k in range(count)]
    assert parse_shard(f"auto/{count}", slurm(tasks[-1], first, count, step)) == (count - 1, count)
    cases = Scenario(name="t", heads=MODELS["llama3-8b"], batch_size=[1, 2, 4], q_len=list(range(1, 8)), kv_len=[64],
                     page_size=[16]).validate().cases()
    got = sorted(c.case_id for s in shards for c in shard_cases(cases, s))
    assert got == sorted(c.case_id for c in cases)
    off = data.draw(st.integers(1, step)) if step > 1 else None
    if off is not None and off < step:  # a task id between the steps: no slice of its own
        with pytest.raises(BadInput, match="not MIN"):
            parse_shard("auto", slurm(first + off, first, count, step))


def test_slurm_without_step_variable_is_step_1():
    assert parse_shard("auto", slurm(5, 3, 4)) == (2, 4)


@pytest.mark.parametrize("env,text,msg", [
    (slurm(9, 1, 3, last=9), "auto", "not a range"),  # --array=1,4,9: no range numbering, in every task ...
    (slurm(1, 1, 3, step=1, last=9), "auto", "not a range"),  # ... the first one too (it used to run slice 0/3)
    ({k: v for k, v in slurm(9, 1, 3).items() if k != "SLURM_ARRAY_TASK_MAX"}, "auto", "not MIN \\+ k\\*STEP"),
    (slurm(2, 3, 4), "auto", "not MIN"),
    (slurm(1, 0, 4), "auto/8", "has 4 tasks"),
    ({**slurm(1, 0, 4), "SLURM_ARRAY_TASK_COUNT": "four"}, "auto", "not a task number"),
    ({k: v for k, v in slurm(1, 0, 4).items() if k != "SLURM_ARRAY_TASK_MIN"}, "auto", "SLURM_ARRAY_TASK_MIN is not set"),
    ({**slurm(1, 0, 4), "SLURM_ARRAY_TASK_STEP": "0"}, "auto", "STEP=0 is not a step"),  # was taken as 1
    ({**slurm(1, 0, 4), "SLURM_ARRAY_TASK_ID": "\u0661"}, "auto", "not a task number"),  # an Arabic-Indic 1
    ({"JOB_COMPLETION_INDEX": "1"}, "auto/\u0664", "auto or auto/N"),
    ({"JOB_COMPLETION_INDEX": "3"}, "auto", "give it as --shard auto/N"),
    ({"JOB_COMPLETION_INDEX": "4"}, "auto/4", "not below 4"),
    ({"JOB_COMPLETION_INDEX": "x"}, "auto/4", "not a task number"),
    ({}, "auto", "no Slurm array"),
    ({"SLURM_JOB_ID": "5"}, "auto", "no Slurm array"),  # a plain Slurm job is not an array
    ({"JOB_COMPLETION_INDEX": "1"}, "auto/0", "N >= 1"),
    ({"JOB_COMPLETION_INDEX": "1"}, "auto/x", "auto or auto/N"),
])
def test_auto_refuses_with_one_line(env, text, msg):
    with pytest.raises(BadInput, match=msg) as e:
        parse_shard(text, env)
    assert "\n" not in str(e.value)


def test_kubernetes_indexed_job():
    assert [parse_shard("auto/4", {"JOB_COMPLETION_INDEX": str(i)}) for i in range(4)] == [(i, 4) for i in range(4)]
    assert parse_shard(" auto / 4 ", {"JOB_COMPLETION_INDEX": "0"}) == (0, 4)


def test_i_of_n_unchanged():
    assert parse_shard("1/3", {}) == (1, 3)
    with pytest.raises(BadInput, match="or auto"):
        parse_shard("3/3", {})


def test_sweep_shard_auto_records_the_resolved_slice(tmp_path, monkeypatch):
    for k, v in slurm(12, 10, 3).items():
        monkeypatch.setenv(k, v)
    r = CliRunner().invoke(cli, ["sweep", "-s", "quick", "-b", "1", "-q", "1,2,4", "-k", "64", "--budget", "0.02",
                                 "--kernels", "reference", "--shard", "auto", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    import json

    (run,) = tmp_path.glob("quick-*")
    assert json.loads((run / "manifest.json").read_text())["shard"] == {"index": 2, "count": 3}
    assert r.output.startswith("quick: 1 of 3 cases (shard 2/3) x 1 kernels")  # which slice this task took
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    r = CliRunner().invoke(cli, ["sweep", "-s", "quick", "--shard", "auto", "--out", str(tmp_path)])
    assert r.exit_code == 2 and r.output.startswith("error: --shard auto: no Slurm array") and len(
        r.output.strip().splitlines()) == 1
