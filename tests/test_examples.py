"""examples/: the files parse (YAML, bash), and every `kbench` command in them is a real command whose options
its click command accepts (make_context parses without running), its grid a valid grid and its --shard a slice
under the scheduler's variables."""
import importlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from kbench.cases.axes import GRID, axes_with
from kbench.cases.scenario import apply_overrides, load_scenario
from kbench.cli.main import COMMANDS
from kbench.engine.shards import parse_shard

EX = Path(__file__).resolve().parent.parent / "examples"
UNKNOWN = "0"  # a variable the example leaves to the scheduler or the shell (a task id, a run folder)


def expand(text: str, env: dict) -> str:
    """Shell and workflow variables as the job would see them: ${{ ... }} and unknown ones as a placeholder."""
    text = re.sub(r"\$\{\{[^}]*\}\}", "x", text)
    text = re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: env.get(m.group(1)) or m.group(2) or UNKNOWN, text)
    return re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), UNKNOWN), text)


def logical_lines(script: str) -> list[str]:
    return script.replace("\\\n", " ").splitlines()


def kbench_commands(script: str, env: dict) -> list[list[str]]:
    out = []
    for line in logical_lines(script):
        words = shlex.split(expand(line, env), comments=True) if line.strip() else []
        if words[:1] == ["kbench"]:
            out.append(words[1:])
    return out


def assignments(script: str, env: dict) -> dict:
    """NAME=value and export NAME=value lines, expanded in order (${NAME:-default} takes the default)."""
    env = dict(env)
    for line in logical_lines(script):
        m = re.match(r"^\s*(?:export\s+)?(\w+)=(.*)$", line)
        if m:
            words = shlex.split(m.group(2), comments=True)
            env[m.group(1)] = expand(words[0] if words else "", env)
    return env


def check(argv: list[str], shard_env: dict | None = None) -> dict:
    """Parse one kbench command line with its click command; grids and shards checked as the command will."""
    name, args = argv[0], argv[1:]
    assert name in COMMANDS, f"kbench {name}: not a kbench command"
    mod, attr, _ = COMMANDS[name]
    cmd = getattr(importlib.import_module(mod), attr)
    params = cmd.make_context(name, args).params  # raises on an unknown option or a bad value
    if name in ("sweep", "prebuild"):
        axes = {a.name: params.get(a.name) for a in axes_with(GRID)}
        sc = apply_overrides(load_scenario(params["scenario"]), **axes, model=params.get("model"),
                             heads=params.get("heads"), kernels=params.get("kernels"))
        assert sc.cases()
    if params.get("shard"):
        assert shard_env is not None, f"{argv}: --shard outside a scheduler's job"
        parse_shard(params["shard"], shard_env)
    return params


def bash_syntax(script: str) -> None:
    r = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_slurm_array_with_a_dependent_merge():
    folder = EX / "slurm"
    submit = (folder / "submit.sh").read_text()
    env = assignments(submit, {"HOME": "/home/u"})
    assert env["GRID"].startswith("--scenario")
    commands = {}
    for f in sorted(folder.iterdir()):
        text = f.read_text()
        bash_syntax(text)
        for argv in kbench_commands(text, env):
            slurm = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "8"}
            commands.setdefault(argv[0], []).append(check(argv, slurm))
    assert sorted(commands) == ["merge", "prebuild", "report", "sweep"]
    resume, sweep = commands["sweep"]  # a task that runs again resumes its own run, else it starts its slice
    assert resume["resume"] and not resume["shard"] and sweep["shard"] == "auto"
    # the merge depends on the whole array, the array on the prebuild, and the array is a range (--shard auto)
    assert re.search(r"--dependency=afterok:\"\$arr\" --export=ALL,ARRAY_JOB_ID=\"\$arr\" merge\.sbatch", submit)
    assert re.search(r"--dependency=afterok:\"\$pre\" --array=0-", submit)
    assert "#SBATCH --gres=gpu:1" in (folder / "sweep-array.sbatch").read_text()


def test_slurm_scripts_run_twice_with_a_requeued_task_and_merge_each_submission(tmp_path):
    # the array's and the merge's scripts as Slurm runs them (a tiny CPU grid): two submissions, one task of the
    # first run again (a requeue). Each merge joins its own submission's slices, once each (before, the second
    # merge met the first's folders too: "the same shard appears twice")
    import os
    import sys

    folder = EX / "slurm"
    # the scripts' venv: kbench itself, except `kbench report`, which has no kernel row to report on from a CPU
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    real = Path(sys.prefix) / "bin" / "kbench"
    (venv / "bin" / "kbench").write_text(f'#!/bin/bash\nif [ "$1" = report ]; then test -f "$2/manifest.json" && '
                                         f'echo "report of $2"; exit $?; fi\nexec {real} "$@"\n')
    (venv / "bin" / "kbench").chmod(0o755)
    (venv / "bin" / "activate").write_text(f'export PATH="{venv / "bin"}:$PATH"\n')
    out_dir = tmp_path / "out"
    env = {**os.environ, "KBENCH_VENV": str(venv), "OUT": str(out_dir), "NAME": "de",
           "GRID": "--scenario quick -b 1 -q 1,2,4 -k 64 --budget 0.02 --kernels reference"}

    def sbatch(script, **var):
        r = subprocess.run(["bash", str(folder / script)], env={**env, **var}, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, (script, var, r.stdout[-2000:], r.stderr[-2000:])
        return r.stdout

    def task(job, i, n=2):
        return sbatch("sweep-array.sbatch", SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID=str(i),
                      SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_MAX=str(n - 1), SLURM_ARRAY_TASK_COUNT=str(n))

    for job in ("101", "202"):
        task(job, 0)
        task(job, 1)
        if job == "101":
            assert "nothing to resume" in task(job, 0)  # requeued after it finished: its own run, untouched
            (out_dir / "de-101" / "de-shard1-20260101-000000").mkdir()  # a lost node's folder, no manifest
        out = sbatch("merge.sbatch", ARRAY_JOB_ID=job)
        assert f"merged run: {out_dir}/de-{job}/de-2" in out and "report of" in out
    for job in ("101", "202"):
        runs = sorted(p.name for p in (out_dir / f"de-{job}").iterdir() if (p / "manifest.json").exists())
        assert [r.split("-2")[0] for r in runs] == ["de", "de-shard0", "de-shard1"], runs


def k8s_containers(doc: dict) -> list[dict]:
    return doc["spec"]["template"]["spec"]["containers"]


def test_kubernetes_indexed_job_and_merge():
    folder = EX / "kubernetes"
    docs = {f.name: list(yaml.safe_load_all(f.read_text())) for f in sorted(folder.glob("*.yaml"))}
    assert set(docs) == {"pvc.yaml", "prebuild-job.yaml", "sweep-job.yaml", "merge-job.yaml"}
    commands = {}
    for name, (doc,) in docs.items():
        if doc["kind"] != "Job":
            assert doc["kind"] == "PersistentVolumeClaim" and "ReadWriteMany" in doc["spec"]["accessModes"]
            continue
        for c in k8s_containers(doc):
            assert c["command"] == ["bash", "-c"] and len(c["args"]) == 1
            bash_syntax(c["args"][0])
            env = {e["name"]: e["value"] for e in c.get("env", [])}
            for argv in kbench_commands(c["args"][0], env):
                commands.setdefault(argv[0], []).append((doc, check(argv, {"JOB_COMPLETION_INDEX": "3"})))
    assert sorted(commands) == ["merge", "prebuild", "report", "sweep"]
    (_, resume), (sweep_doc, sweep) = commands["sweep"]  # a retried pod resumes its index's run
    assert resume["resume"] and not resume["shard"]
    spec = sweep_doc["spec"]
    assert spec["completionMode"] == "Indexed"
    assert sweep["shard"] == f"auto/{spec['completions']}"  # the count the pod is not told
    run = (folder / "run.sh").read_text()
    bash_syntax(run)
    order = [run.index(f) for f in ("prebuild-job.yaml", "sweep-job.yaml", "merge-job.yaml")]
    assert "with_run_id sweep-job.yaml | kubectl apply -f -" in run and "with_run_id merge-job.yaml" in run
    assert order == sorted(order) and "kubectl wait --for=condition=complete --timeout=6h job/kbench-sweep" in run


def test_github_actions_gate_with_cache_and_junit():
    wf = yaml.safe_load((EX / "github-actions" / "kernel-gate.yml").read_text())
    job = wf["jobs"]["gate"]
    assert "self-hosted" in job["runs-on"]
    env = {k: str(v) for k, v in wf["env"].items()}
    commands = {}
    for step in job["steps"]:
        if "run" in step:
            bash_syntax(step["run"])
            for argv in kbench_commands(step["run"], {**env, **step.get("env", {})}):
                commands.setdefault(argv[0], []).append(check(argv))
    assert sorted(commands) == ["gate", "prebuild", "sweep"]
    assert commands["gate"][0]["junit_file"] == "gate.xml" and commands["gate"][0]["baseline"] == env["BASELINE"]
    from committed import COMMITTED_BASELINES  # the gate's baseline ships with kbench: a fresh clone has it

    assert env["BASELINE"].startswith("results/baselines/") and env["BASELINE"].split("/")[-1] in COMMITTED_BASELINES
    assert (Path(__file__).resolve().parent.parent / env["BASELINE"]).is_dir()
    assert any(p.get("load") for p in commands["prebuild"])
    cache = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/cache"))
    # the cached folder is FlashInfer's cache under FLASHINFER_WORKSPACE_BASE (kbench.engine.jit_cache)
    assert env["FLASHINFER_WORKSPACE_BASE"].endswith("/.fi-ws") and cache["with"]["path"] == ".fi-ws/.cache/flashinfer"
    junit = next(s for s in job["steps"] if "junit" in str(s.get("uses", "")))
    assert junit["with"]["report_paths"] == "gate.xml" and junit["if"] == "always()"


@pytest.mark.parametrize("line", [
    "kbench sweep --scenario quick --shard 9/8",
    "kbench sweep --no-such-option",
    "kbench gate --candidate x",  # --baseline is required
    "kbench nosuch",
    "kbench prebuild --parallel 0",
])
def test_the_checker_catches_bad_commands(line):
    """The check above fails on what a wrong example would hold."""
    with pytest.raises(Exception):
        for argv in kbench_commands(line, {}):
            check(argv, {})
