"""The GPU campaign driver (tests/gpu/campaign.py, h200.sh) on the CPU: a fake `kbench` (tests/fake_kbench.py) and
a fake `nvidia-smi` on PATH stand in for the lent H200; the checks, statuses, resume, deadline, summary and
packing are the real ones."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import campaign
import campaign_aot
import campaign_out
import campaign_runs
import campaign_steps  # noqa: F401 - registers the steps
from campaign_steps import studies

REPO = Path(__file__).resolve().parents[1]
FAKE = Path(__file__).with_name("fake_kbench.py")


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    """A stand-in machine: fake kbench and nvidia-smi first on PATH, RES/OUT/SITE under tmp_path."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "kbench").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    (bin_ / "nvidia-smi").write_text('#!/bin/sh\necho "NVIDIA H200, 570.86.15, 1980 MHz, 1980 MHz, 3201 MHz"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    m = SimpleNamespace(tmp=tmp_path, res=tmp_path / "res", out=tmp_path / "out", site=tmp_path / "site",
                        log=tmp_path / "kbench-calls.jsonl")
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    for k, v in (("RES", m.res), ("OUT", m.out), ("SITE", m.site), ("FAKE_LOG", m.log), ("HOME", tmp_path / "home")):
        monkeypatch.setenv(k, str(v))
    for k in ("AOT_ARCHIVE", "CALL_LIMIT", "CAMPAIGN_T0", "FAKE_SLEEP", "FAKE_WRONG", "FAKE_SCALE", "FAKE_JITTER", "FAKE_VALIDATE",
              "FLASHINFER_WORKSPACE_BASE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(campaign, "GRACE_S", 3)
    monkeypatch.chdir(REPO)
    return m


def call(*argv: str) -> tuple[int, dict[str, campaign.Outcome]]:
    """One call of the driver: its exit code and the outcome of each step, from the summary it wrote."""
    rc = campaign.main(list(argv))
    res = Path(os.environ["RES"])
    newest = max((res / "logs").glob("summary-*.json"), key=lambda p: p.stat().st_mtime)
    return rc, {o["step"]: campaign.Outcome(**o) for o in json.loads(newest.read_text())}


def kbench_calls(m) -> list[list[str]]:
    return [json.loads(line) for line in m.log.read_text().splitlines()] if m.log.exists() else []


# --- statuses and the exit code ----------------------------------------------------------------------------

def test_a_passing_campaign_exits_0_and_writes_the_table_last(gpu, capsys):
    rc, o = call("env", "sweep")
    assert rc == 0
    assert [o[s].status for s in ("env", "sweep")] == ["PASS", "PASS"]
    assert "NVIDIA H200" in o["env"].figures and "SM90" in o["env"].figures
    assert "ok 8" in o["sweep"].figures
    out = capsys.readouterr().out.strip().splitlines()
    i = next(i for i, ln in enumerate(out) if ln.startswith("step ") and "status" in ln)
    assert [ln.split()[:2] for ln in out[i + 1:i + 3]] == [["env", "PASS"], ["sweep", "PASS"]]
    assert out[i + 3].startswith("campaign: 2 step(s): 2 PASS; exit 0")
    summary = (gpu.out / "summary.txt").read_text()
    assert "sweep" in summary and "exit 0" in summary and "packed: results.tgz" in summary


def test_a_command_that_fails_its_check_fails_the_step_and_the_exit_code(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_WRONG", "fa2-prefill")  # the sweep exits 1: a kernel computed the wrong thing
    rc, o = call("sweep", "env")
    assert rc == 1
    assert o["sweep"].status == "FAILED"
    assert o["sweep"].reason.startswith("kbench sweep exited 1: 4 wrong/failed row(s): fa2-prefill bs16-q1-kv4096 wrong")
    assert o["env"].status == "PASS"  # the campaign goes on after a failed step
    assert "sweep" in (gpu.out / "summary.txt").read_text().split("details:")[1]


def test_a_figure_outside_its_bound_fails_the_step(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_JITTER", "rep2=8")  # every row of rep2 8% off rep1
    rc, o = call("repeat")
    assert rc == 1
    assert o["rep1"].status == o["rep2"].status == "PASS"
    r = o["repeat-check"]
    assert r.status == "FAILED"
    assert "|diff| median 8.00% > 1.00%" in r.reason and "p95 8.00% > 3.00%" in r.reason
    assert "kbench gate rep2 vs rep1 failed" in r.reason  # both checks are made and shown


def test_runs_within_their_bound_pass_the_repeat_check(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_JITTER", "rep2=0.4")
    rc, o = call("repeat")
    assert rc == 0, o["repeat-check"].line()
    assert "|diff| median 0.40%" in o["repeat-check"].figures


def test_the_slow_step_passes_only_when_the_gate_catches_the_slowed_kernel_alone(gpu, monkeypatch):
    rc, o = call("slow")
    assert rc == 0 and "fa2-prefill: 2 of 2 rows regressed" in o["slow-gate"].figures
    shutil.rmtree(gpu.res)
    monkeypatch.setenv("FAKE_SCALE", "slow=1.3")  # every kernel of the candidate 30% slower: noise, not the test
    rc, o = call("slow")
    assert rc == 1 and o["slow-gate"].status == "FAILED"
    assert "the gate also flagged trtllm-decode" in o["slow-gate"].reason
    shutil.rmtree(gpu.res)
    monkeypatch.setenv("FAKE_SCALE", "slow=0.5")  # the slowed kernel comes out faster: the gate passes it
    rc, o = call("slow")
    assert o["slow-gate"].status == "FAILED" and "the gate passed a run with fa2-prefill 2x slower" in o["slow-gate"].reason


def test_fault_needs_exactly_the_faulting_rows_failed_and_the_survivors_ok(gpu, monkeypatch):
    rc, o = call("fault")
    assert rc == 0, {k: v.line() for k, v in o.items()}
    assert "2 failed" in o["fault-isolated"].figures and "worker restarts 2" in o["fault-isolated"].figures
    assert "stopped at the first fault: exit 1" in o["fault-inproc"].figures
    assert "2 resume(s) this call" in o["fault-inproc"].figures  # each resume stops at the next case's fault
    shutil.rmtree(gpu.res)
    monkeypatch.setenv("FAKE_WRONG", "trtllm-decode")  # a survivor computes the wrong thing
    rc, o = call("fault-isolated")
    assert rc == 1 and "kbench sweep exited 1: 4 wrong/failed row(s): trtllm-decode bs16-q2-kv1024 wrong" in \
        o["fault-isolated"].reason


def test_a_missing_feature_script_is_a_failed_step_with_that_reason(gpu, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "tests/gpu").mkdir(parents=True)
    monkeypatch.chdir(repo)
    rc, o = call("tree", "mla")
    assert rc == 1
    assert o["tree"].reason == "tests/gpu/tree_check.py is missing"
    assert o["mla"].reason == "tests/gpu/mla_check.py is missing"
    (repo / "tests/gpu/tree_check.py").write_text(
        "import sys\nprint('n 8 16 32')\nprint('xqa tree ok 3/3, fa2 mask ok 3/3')\nsys.exit(int(sys.argv[2].endswith('tree') and 0))\n")
    (repo / "tests/gpu/mla_check.py").write_text("import sys\nprint('flashmla: rel err 0.2 > 0.01')\nsys.exit(1)\n")
    rc, o = call("tree", "mla")
    assert o["tree"].status == "PASS" and o["tree"].figures == "xqa tree ok 3/3, fa2 mask ok 3/3"
    assert o["mla"].status == "FAILED" and "exited 1: flashmla: rel err 0.2 > 0.01" in o["mla"].reason


def _stub_repo(tmp_path, monkeypatch, scripts: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests/gpu").mkdir(parents=True)
    for name, body in scripts.items():
        (repo / "tests/gpu" / name).write_text(body)
    monkeypatch.chdir(repo)
    return repo


def test_prebuild_runs_in_the_background_and_its_wait_checks_it(gpu, tmp_path, monkeypatch):
    _stub_repo(tmp_path, monkeypatch, {"prebuild.py": (
        "import sys, time\ntime.sleep(float(__import__('os').environ.get('STUB_SLEEP', '0.5')))\n"
        "print('  built       3 s  xqa_a')\nprint('  cached           xqa_c')\n"
        "print('  FAILED      4 s  fmha_b: error: nvcc')\nprint('3 modules: 1 built, 1 cached, 1 failed in 9 s')\n"
        "sys.exit(1)\n")})
    rc, o = call("prebuild-bg", "env", "prebuild-wait")
    assert o["prebuild-bg"].status == "PASS" and o["env"].status == "PASS"
    assert o["prebuild-wait"].status == "FAILED" and o["prebuild-wait"].reason == "prebuild.py exited 1"
    assert o["prebuild-wait"].figures == "1 built, 1 failed; 3 modules: 1 built, 1 cached, 1 failed in 9 s"
    rc, o = call("prebuild-wait")
    assert o["prebuild-wait"].reason == "prebuild was not started in this call"
    monkeypatch.setenv("STUB_SLEEP", "60")
    t0 = time.time()
    rc, o = call("--limit", "prebuild-wait=1", "prebuild-bg", "prebuild-wait")
    assert o["prebuild-wait"].status == "TIMEOUT" and time.time() - t0 < 20  # stopped at the end of the call


def test_the_study_groups_run_their_sweeps_then_their_table(gpu, tmp_path, monkeypatch):
    table = ("| measurements (timed kernel x case) | 20 | 8 (40%) |\n| mean regret (full grid's rows) | 0 | 0.30% |\n"
             "| worst regret | 0 | 2.00% (bs1) |\n| regret at the 6 cases not measured by the adaptive run (the "
             "planner's inference) | - | mean 0.20%, worst 5.50% |\n")
    _stub_repo(tmp_path, monkeypatch, {
        "realistic.py": "import sys\nprint('runs', len(sys.argv) - 2, 'table to', sys.argv[1].rsplit('/', 1)[-1])\n",
        "adaptive_bench.py": f"print({table!r})\n"})
    rc, o = call("realistic", "adaptive")
    assert [o[s].status for s in ("real-kv", "real-accept", "real-gptoss", "real-msl", "real-skip", "real-table")] \
        == ["PASS"] * 6
    assert o["real-table"].report == "runs 5 table to realistic.txt"
    assert o["adaptive-full"].status == o["adaptive-run"].status == "PASS"
    a = o["adaptive-table"]
    assert a.status == "FAILED" and a.reason == "worst inferred 5.50% > 4.00%", a.line()
    assert "measured 0.40; mean regret 0.30%" in a.figures
    sweeps = [c for c in kbench_calls(gpu) if c[0] == "sweep"]
    assert ["--adaptive", "--regret-bound", "2", "--coarse-step", "8"] == sweeps[-1][sweeps[-1].index("--adaptive"):][:5]
    assert sorted(p.name for p in gpu.out.iterdir()) == ["adaptive.tgz", "results.tgz", "summary.txt"]


def test_an_unknown_step_is_refused_before_anything_runs(gpu, capsys):
    assert campaign.main(["env", "sweeep"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown step 'sweeep'")
    assert not gpu.res.exists()
    assert campaign.main(["--limit", "sweep=abc", "sweep"]) == 2
    assert campaign.main(["--limit", "nope=3", "sweep"]) == 2


def test_a_word_with_a_space_is_a_shell_command_step(gpu):
    rc, o = call("echo one two", "exit 3")
    assert o["sh1"].status == "PASS" and o["sh1"].figures == "one two"
    assert o["sh2"].status == "FAILED" and "exited 3" in o["sh2"].reason and rc == 1


def test_groups_expand_in_order_and_a_step_runs_once():
    assert campaign.expand(["repeat", "slow", "rep1"]) == ["rep1", "rep2", "repeat-check", "slow-sweep", "slow-gate"]
    assert campaign.expand(["power", "adaptive"]) == ["power-1", "power-2", "power-table", "adaptive-full",
                                                      "adaptive-run", "adaptive-table"]
    assert campaign.expand(["time-to-answer"]) == ["tta-cold", "tta-warm", "stream-repeat", "tta-prebuild"]


# --- time limits, resume, the deadline -----------------------------------------------------------------------

def test_a_step_past_its_limit_is_a_timeout_and_the_next_call_resumes_its_sweep(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "0.6")  # 8 rows: about 5 s
    t0 = time.time()
    rc, o = call("--limit", "sweep=2", "sweep")
    assert rc == 1 and o["sweep"].status == "TIMEOUT"
    assert "the next call resumes it" in o["sweep"].reason
    assert time.time() - t0 < 2 + campaign.GRACE_S + 3  # SIGTERM at the limit: kbench stopped, not waited for
    run = campaign_runs.Run(campaign_runs.run_folders(gpu.res, "de-kv4096")[-1])
    assert run.status == "interrupted" and 0 < len(run.rows()) < 8  # finalized by kbench's SIGTERM handler
    monkeypatch.setenv("FAKE_SLEEP", "0")
    rc, o = call("sweep")
    assert rc == 0 and "de-kv4096: resumed" in o["sweep"].figures
    assert kbench_calls(gpu)[-1] == ["sweep", "--resume", str(run.path)]
    rows = run.rows()
    assert len(rows) == 8 and len({(r["kernel"], r["case_id"]) for r in rows}) == 8
    rc, o = call("sweep")  # complete: reused, nothing run
    assert rc == 0 and "de-kv4096: reused" in o["sweep"].figures and len(kbench_calls(gpu)) == 2


def test_a_timeout_leaves_no_process_behind(gpu, tmp_path):
    pidfile = tmp_path / "child.pid"
    rc, o = call("--limit", "sh=2", f"sleep 60 & echo $! > {pidfile}; wait")
    assert o["sh1"].status == "TIMEOUT"
    status = Path(f"/proc/{int(pidfile.read_text())}/status")
    time.sleep(0.2)
    assert not status.exists() or "State:\tZ" in status.read_text()  # gone, or dead and not yet reaped by init


def test_a_shell_step_takes_its_own_limit_before_the_one_for_every_shell_step(gpu):
    """--limit sh2=S limits the second shell command only; sh=S the others (the summary names them sh1, sh2)."""
    rc, o = call("--limit", "sh=30", "--limit", "sh2=1", "sleep 0.1; echo one", "sleep 5; echo two")
    assert o["sh1"].status == "PASS" and o["sh2"].status == "TIMEOUT"
    assert campaign.main(["--limit", "shx=3", "sleep 1"]) == 2


def test_a_devices_sweep_cut_short_resumes_its_shards_then_merges(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "0.6")
    rc, o = call("--limit", "sweep2=2", "sweep2")
    assert o["sweep2"].status == "TIMEOUT"
    assert not campaign_runs.run_folders(gpu.res, "de-kv4096-devices0")  # no merged run yet
    shard = campaign_runs.shard_runs(gpu.res, "de-kv4096-devices0")
    assert len(shard) == 1 and campaign_runs.Run(shard[0]).status == "interrupted"
    monkeypatch.setenv("FAKE_SLEEP", "0")
    rc, o = call("sweep2")
    assert rc == 0, o["sweep2"].line()
    calls = kbench_calls(gpu)[-2:]
    assert calls[0] == ["sweep", "--resume", str(shard[0])]
    assert calls[1][0] == "merge" and str(shard[0]) in calls[1]
    merged = campaign_runs.Run(campaign_runs.run_folders(gpu.res, "de-kv4096-devices0")[-1])
    assert merged.complete and len(merged.rows()) == 8


def test_the_deadline_stops_starting_steps_that_cannot_finish(gpu, monkeypatch):
    monkeypatch.setenv("CALL_LIMIT", "200")  # deadline 170 s: env (120) fits, validate (480) does not
    rc, o = call("env", "validate", "sweep")
    assert o["env"].status == "PASS"
    assert o["validate"].status == "NOT RUN" and "needs up to 480 s" in o["validate"].reason
    assert o["sweep"].status == "PASS"  # resumable: starts with the rest of the call
    assert rc == 1
    rc, o = call("--deadline-s", "30", "sweep")
    assert o["sweep"].status == "NOT RUN" and "a start needs 60 s" in o["sweep"].reason


def test_a_resumable_step_gets_the_rest_of_the_call_and_stops_at_the_deadline(gpu, monkeypatch):
    monkeypatch.setattr(campaign, "MIN_START_S", 1)
    monkeypatch.setenv("FAKE_SLEEP", "0.6")
    monkeypatch.setenv("CAMPAIGN_T0", str(time.time()))
    rc, o = call("--deadline-s", "2.5", "sweep")
    assert o["sweep"].status == "TIMEOUT"
    assert "stopped at the call's deadline; the next call resumes it" in o["sweep"].reason


def test_resume_or_start(tmp_path):
    out = tmp_path / "res"
    assert campaign_runs.plan(out, "rep1").action == "start"  # no folder at all

    def run(name, status):
        d = out / name
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"status": status}))
        return d

    other = run("rep1x-20261203-101500", "running")  # another name's run
    longer = run("rep1-devices0-20261203-101500", "running")  # a longer name's run
    assert campaign_runs.plan(out, "rep1").action == "start", (other, longer)
    old = run("rep1-20261203-101500", "complete")
    p = campaign_runs.plan(out, "rep1")
    assert (p.action, p.path) == ("done", old)
    cut = run("rep1-20261203-101500-2", "running")  # newer (a clash suffix), killed before it could say
    p = campaign_runs.plan(out, "rep1")
    assert (p.action, p.path) == ("resume", cut)
    newer = run("rep1-20261204-090000", "interrupted")
    assert campaign_runs.plan(out, "rep1").path == newer
    assert campaign_runs.plan(out, "rep1", fresh=True).action == "start"
    budget = run("ada-20261204-090000", "complete")
    (budget / "manifest.json").write_text(json.dumps({"status": "complete", "adaptive": {"stopped_by": "budget-minutes"}}))
    assert campaign_runs.plan(out, "ada").action == "resume"  # an adaptive run stopped by its budget goes on


def test_fresh_starts_each_sweep_once_then_reuses_it_in_the_same_call(gpu):
    call("rep1")
    rc, o = call("--fresh", "slow")
    starts = [c for c in kbench_calls(gpu) if c[0] == "sweep" and "--name" in c]
    assert [c[c.index("--name") + 1] for c in starts] == ["rep1", "rep1", "slow"]
    assert len(campaign_runs.run_folders(gpu.res, "rep1")) == 2


# --- the summary table ----------------------------------------------------------------------------------

def test_the_summary_table_has_step_status_seconds_and_one_line_of_figures():
    outcomes = [campaign.Outcome("env", "PASS", 3.2, "NVIDIA H200; SM90"),
                campaign.Outcome("repeat-check", "FAILED", 1.0, "8 rows", "|diff| median 1.40% > 1.00%", "a table"),
                campaign.Outcome("power-1", "TIMEOUT", 540.4, "", "still running"),
                campaign.Outcome("validate", "NOT RUN", 0, "", "needs up to 200 s, 20 s left in the call")]
    text = campaign.summary(outcomes)
    lines = text.splitlines()
    assert lines[:2] == ["--- repeat-check", "a table"]  # reports first: the table stays at the end
    head = lines.index(next(ln for ln in lines if ln.startswith("step")))
    assert lines[head].split() == ["step", "status", "seconds", "figures"]
    assert lines[head + 1].split()[:4] == ["env", "PASS", "3", "NVIDIA"]
    assert lines[head + 2].split()[:4] == ["repeat-check", "FAILED", "1", "|diff|"]
    assert lines[head + 3].split()[:3] == ["power-1", "TIMEOUT", "540"]
    assert lines[head + 4].split()[:4] == ["validate", "NOT", "RUN", "0"]
    assert lines[head + 5] == "campaign: 4 step(s): 1 PASS, 1 FAILED, 1 TIMEOUT, 1 NOT RUN; exit 1"
    assert "--- repeat-check" not in campaign.summary(outcomes, reports=False)
    assert campaign.exit_code(outcomes[:1]) == 0 and campaign.exit_code([]) == 1


# --- the checks' parsers, on the real scripts' output --------------------------------------------------------

def test_repeatability_matches_pandas():
    pd = pytest.importorskip("pandas")
    import random
    rnd = random.Random(3)
    a = [{"kernel": "k", "case_id": str(i), "status": "ok", "median_us": 100.0} for i in range(37)]
    b = [dict(r, median_us=100 * (1 + rnd.uniform(-0.03, 0.03))) for r in a]
    b[5]["status"] = "failed"
    rep = campaign_runs.repeatability(a, b)
    d = pd.Series([abs(y["median_us"] / 100 - 1) * 100 for y in b if y["status"] == "ok"])
    assert rep["rows"] == 36
    assert rep["median"] == pytest.approx(d.median()) and rep["p95"] == pytest.approx(d.quantile(0.95))
    assert rep["max"] == pytest.approx(d.max()) and rep["over3"] == 0


def _baseline_as(gpu, src: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "results/baselines" / src, dest)
    return dest


def test_power_table_checks_the_committed_power_runs(gpu):
    _baseline_as(gpu, "h200-power-both-kv4096-sweep1", gpu.res / "power1-20261203-100000")
    _baseline_as(gpu, "h200-power-both-kv4096-sweep2", gpu.res / "power2-20261203-110000")
    rc, o = call("power-table")
    r = o["power-table"]
    assert r.status == "PASS", r.line()
    assert "unthrottled median 0.48%; p95 1.60%; sustained median 0.43%; p95 1.57%" in r.figures
    assert "decision(s) flip" in r.report
    text = "unthrottled    160    1.20%    1.60%    2.57%\nsustained      160    0.43%    3.57%    4.41%\n"
    assert studies.power_figures(text) == {"unthrottled": {"rows": 160, "median": 1.2, "p95": 1.6, "max": 2.57},
                                           "sustained": {"rows": 160, "median": 0.43, "p95": 3.57, "max": 4.41}}


def test_adaptive_table_checks_the_committed_adaptive_run(gpu):
    _baseline_as(gpu, "h200-draft-extend-full-kv512-4096-32768", gpu.res / "adaptive/full-20261203-100000")
    _baseline_as(gpu, "h200-draft-extend-adaptive-kv512-4096-32768", gpu.res / "adaptive/adaptive-20261203-110000")
    rc, o = call("adaptive-table")
    r = o["adaptive-table"]
    assert r.status == "PASS", r.line()
    assert "measured 0.27; mean regret 0.12%; worst inferred 1.64%" in r.figures
    assert "adaptive.tgz" in (gpu.out / "summary.txt").read_text()  # RES/adaptive is packed on its own
    text = r.report.replace("mean 0.11%, worst 1.64%", "mean 0.11%, worst 6.10%")
    assert studies.adaptive_figures(text)["inferred_worst_pct"] == 6.1


def test_a_step_that_needs_another_steps_run_says_which(gpu):
    rc, o = call("power-table", "repeat-check", "adaptive-table")
    assert o["power-table"].reason == "needs a complete run power1 (none): run the power-1 step first"
    assert o["repeat-check"].reason == "needs a complete run rep1 (none): run the rep1 step first"
    assert "run the adaptive-full step first" in o["adaptive-table"].reason


def test_the_tests_step_reads_pytests_summary_framed_or_bare():
    """On the H100 (2026-12-05) `pytest -q` printed its summary bare after a warnings summary, "10 passed, 1 warning
    in 220.41s (0:03:40)", and the step said "no GPU test passed"."""
    from campaign_steps.machine import pytest_summary

    bare = "..........\n-- Docs: https://docs.pytest.org\n10 passed, 1 warning in 220.41s (0:03:40)\n"
    assert pytest_summary(bare) == "10 passed, 1 warning"
    framed = "==== 2 failed, 8 passed in 12.00s ====\n"
    assert pytest_summary(framed) == "2 failed, 8 passed"
    assert pytest_summary("=== 10 skipped in 1.0s ===") == "10 skipped"
    assert pytest_summary("ERROR: file not found: tests/x.py\n") is None


def test_ceiling_ratio_parser():
    assert studies.ceiling_ratio("x\nhighest kernel rate / read ceiling: 0.982 (a ceiling)\n") == 0.982
    assert studies.ceiling_ratio("no such line") is None
    line = "memory peak 4,917 GB/s (NVML)   read ceiling / peak: 1.120 (ABOVE THE PEAK)"
    assert studies.peak_ratio(line) == 1.12 and studies.peak_ratio("no such line") is None
    assert studies.peak_ratio(line) > studies.PEAK_SLACK  # the step fails on it


def test_validate_checks_every_row_of_30_us_or_more(gpu, monkeypatch):
    def row(us, diff, wall=0.2, fi=0.1, before=None, spread=0.004):
        return {"kernel": "fa2-prefill", "case_id": f"bs1-q4-kv{us}-h32", "kbench_us": us, "cupti_diff": diff,
                "kbench_wall_s": wall, "flashinfer_wall_s": fi, "kbench_spread": spread, "flashinfer_spread": 0.001,
                "phases": {"warmup": 0.005, "sampling": wall - 0.005},
                **({"before": {"wall_s": before}} if before else {})}

    monkeypatch.setenv("FAKE_VALIDATE", json.dumps([row(9, 0.08), row(67, 0.01), row(4000, -0.02)]))  # a list: old
    rc, o = call("validate")
    assert o["validate"].status == "FAILED", o["validate"].line()  # kbench's wall twice bench_gpu_time's
    assert "2/3 within 3% of CUPTI, 2/2 of >= 30 us" in o["validate"].figures
    assert "wall / bench_gpu_time: median 2.00x, total 2.00x" in o["validate"].figures
    assert "kbench's wall 2.00x (median), 2.00x (total) of bench_gpu_time's > 1.0x" in o["validate"].reason
    assert "worst |vs CUPTI| at >= 30 us 2.00%" in o["validate"].figures
    validate_call = [c for c in kbench_calls(gpu) if c[0] == "validate-timer"][-1]
    before = Path(validate_call[validate_call.index("--before") + 1])
    from kbench.cases.scenario import Timing, load_scenario
    assert load_scenario(str(before)).timing == Timing(warmup_ms=25.0, settle_ms=20.0, min_time_s=0.1, min_samples=10)
    rows = [row(9, 0.0, 0.05, 0.1, 0.15), row(67, 0.01, 0.08, 0.1, 0.2), row(4000, -0.025, 0.18, 0.2, 0.5)]
    monkeypatch.setenv("FAKE_VALIDATE", json.dumps({"rows": rows, "wall_ratio": {}}))
    rc, o = call("validate")
    assert rc == 0, o["validate"].line()
    assert "wall / bench_gpu_time before: median 2.00x, total 2.12x" in o["validate"].figures
    assert "wall / bench_gpu_time: median 0.80x, total 0.77x" in o["validate"].figures
    assert "worst |vs CUPTI| at >= 30 us 2.50%" in o["validate"].figures
    assert "spread median kbench 0.40%, bench_gpu_time 0.10%" in o["validate"].figures
    monkeypatch.setenv("FAKE_VALIDATE", json.dumps([row(9, 0.0, 0.05), row(67, 0.05, 0.05)]))
    rc, o = call("validate")
    assert o["validate"].status == "FAILED" and "1 row(s) of >= 30 us outside 3%" in o["validate"].reason
    # with CUPTI's span of the same replays a failed row says whether the launch gaps explain it
    spanned = [{**row(9, 0.0, 0.05), "span_diff": -0.01, "cupti_gap_us": 0.4},
               {**row(34, 0.052, 0.05), "span_diff": 0.004, "cupti_gap_us": 1.6},
               {**row(500, 0.01, 0.05), "span_diff": -0.02, "cupti_gap_us": 1.1}]
    monkeypatch.setenv("FAKE_VALIDATE", json.dumps(spanned))
    rc, o = call("validate")
    v = o["validate"]
    assert v.status == "FAILED" and "fa2-prefill bs1-q4-kv34 +5.2% (vs span +0.4%, gaps 1.6 us)" in v.reason, v.line()
    assert "2/2 of >= 30 us within 3% of CUPTI's span of the same replays (gaps included); worst 2.00%" in v.figures
    assert "launch gaps per call: median 1.35 us, max 1.60 us" in v.figures
    # a call of two kernels, 6% over their sum: judged on the replays CUPTI profiled (kbench.engine.validate)
    two = {**row(37.67, 0.06, 0.05), "cupti_us": 35.53, "cupti_kernels": 2, "cupti_span_us": 39.70,
           "span_diff": -0.051, "cupti_gap_us": 3.8, "cupti_profiled_us": 39.5, "profiled_span_diff": -0.005,
           "cupti_names": ["fmha_v2_flash_attention_bf16_64_128", "Memset (Device)"]}
    monkeypatch.setenv("FAKE_VALIDATE", json.dumps([two, row(500, 0.01, 0.05)]))
    rc, o = call("validate")
    v = o["validate"]
    assert rc == 0, v.line()
    assert "2/2 within 3% of CUPTI, 2/2 of >= 30 us" in v.figures
    assert ("fa2-prefill bs1-q4-kv37.67: 2 kernels (fmha_v2_flash_attention_bf16_64_128, Memset (Device)); kbench "
            "37.7 us = +6.0% over their sum, -5.1% vs span 39.7 us; on the profiled replays 39.5 us = -0.5% vs span"
            ) in v.figures
    assert "kbench's events on the profiled replays vs CUPTI's span of them, 1 rows of >= 30 us: worst 0.50%" in v.figures
    monkeypatch.setenv("FAKE_VALIDATE", json.dumps([{**two, "cupti_profiled_us": 37.6, "profiled_span_diff": -0.053}]))
    rc, o = call("validate")
    assert o["validate"].status == "FAILED" and "1 row(s) of >= 30 us outside 3%" in o["validate"].reason


# --- time to the answer (#29) ----------------------------------------------------------------------------

def test_time_to_answer_runs_cold_then_warm_then_with_the_prebuild_archive(gpu):
    aot = _aot(gpu.tmp, "0.7.4", {"xqa_a": b"so"})
    cfg = campaign.Config.from_env()
    o = {x.step: x for x in campaign.run_steps(["tta-cold", "tta-warm", "tta-prebuild"], cfg, echo=lambda _: None)}
    assert [x.status for x in o.values()] == ["PASS"] * 3, {k: v.line() for k, v in o.items()}
    assert "compile 5.0 s" in o["tta-cold"].figures  # no AOT module and an empty JIT cache: it compiles
    assert "compile 0.2 s" in o["tta-warm"].figures and "compile 0.2 s" in o["tta-prebuild"].figures
    assert "1 AOT modules" in o["tta-prebuild"].figures
    for x in o.values():
        assert "first ok row 0 s" in x.figures or "first ok row 1 s" in x.figures
    assert (aot / "xqa_a/xqa_a.so").exists()  # put back after tta-cold
    cold = json.loads((gpu.res / "tta/cold.json").read_text())
    assert cold["compile_s"] == 5.0 and cold["wall_s"] > 0 and Path(cold["run"]).is_dir()
    starts = [c for c in kbench_calls(gpu) if c[0] == "sweep"]
    assert len(starts) == 3 and all("--resume" not in c for c in starts)


def test_tta_prebuild_installs_the_carried_archive_as_a_user_does(gpu, monkeypatch):
    _aot(gpu.tmp, "0.7.4", {"xqa_a": b"so"})
    archive = gpu.tmp / "aot.tgz"
    archive.write_bytes(b"an archive")
    monkeypatch.setenv("AOT_ARCHIVE", str(archive))
    cfg = campaign.Config.from_env()
    o = {x.step: x for x in campaign.run_steps(["tta-cold", "tta-prebuild"], cfg, echo=lambda _: None)}
    assert o["tta-prebuild"].status == "PASS", o["tta-prebuild"].line()
    assert "kbench prebuild --load in" in o["tta-prebuild"].figures and "1 already there" in o["tta-prebuild"].figures
    calls = [json.loads(ln) for ln in gpu.log.read_text().splitlines()]
    assert ["prebuild", "--load", str(archive)] in calls
    assert calls.index(["prebuild", "--load", str(archive)]) < max(i for i, c in enumerate(calls) if c[0] == "sweep")


def test_tta_records_the_manifests_compile_mode_and_first_ok_row(gpu):
    cfg = campaign.Config.from_env()
    o = {x.step: x for x in campaign.run_steps(["tta-cold", "tta-warm"], cfg, echo=lambda _: None)}
    assert "compile 5.0 s (stream, 1 built, measuring waited 0.1 s)" in o["tta-cold"].figures
    assert "(0.5 s into the sweep)" in o["tta-warm"].figures
    cold = json.loads((gpu.res / "tta/cold.json").read_text())
    assert cold["first_ok_row_s"] == 0.5 and cold["compile_mode"] == "stream" and cold["timing_s"] is not None


def test_stream_repeat_compares_the_streamed_run_with_the_warm_spread(gpu, monkeypatch):
    cfg = campaign.Config.from_env()
    o = {x.step: x for x in campaign.run_steps(["stream-repeat"], cfg, echo=lambda _: None)}
    assert o["stream-repeat"].reason == "needs tta-cold and tta-warm on this machine first (their runs)"
    monkeypatch.setenv("FAKE_JITTER", "tta-warm2=0.4")  # two warm runs 0.4% apart; the streamed one as warm
    o = {x.step: x for x in campaign.run_steps(["tta-cold", "tta-warm", "stream-repeat"], cfg, echo=lambda _: None)}
    assert o["stream-repeat"].status == "PASS", o["stream-repeat"].line()
    assert "warm/warm: |ratio-1| median 0.40%" in o["stream-repeat"].figures
    assert "median ratio 1.0000" in o["stream-repeat"].figures
    sweeps = [c for c in kbench_calls(gpu) if c[0] == "sweep"]
    assert len(sweeps) == 3  # cold, warm, and the second warm sweep
    monkeypatch.setenv("FAKE_JITTER", "tta-cold=3,tta-warm2=0.4")  # the streamed run 3% off: clearly worse
    (gpu.res / "tta/cold.json").unlink()
    o = {x.step: x for x in campaign.run_steps(["tta-cold", "stream-repeat"], cfg, echo=lambda _: None)}
    assert o["stream-repeat"].status == "FAILED" and "streamed |diff| median 3.00%" in o["stream-repeat"].reason
    assert len([c for c in kbench_calls(gpu) if c[0] == "sweep"]) == 4  # warm2 reused


def test_tta_warm_needs_the_cold_cache_and_tta_prebuild_an_archive(gpu):
    cfg = campaign.Config.from_env()
    o = {x.step: x for x in campaign.run_steps(["tta-warm", "tta-prebuild"], cfg, echo=lambda _: None)}
    assert o["tta-warm"].reason == "needs tta-cold on this machine first (its JIT cache)"
    assert o["tta-prebuild"].reason == "no AOT modules: carry a prebuild archive as .fi-cache/aot.tgz"


# --- the AOT modules ---------------------------------------------------------------------------------------

def _aot(tmp_path, version: str | None, modules: dict[str, bytes]) -> Path:
    aot = tmp_path / "site/flashinfer/data/aot"
    aot.mkdir(parents=True)
    if version:
        (aot / "FLASHINFER_VERSION").write_text(version + "\n")
    for name, data in modules.items():
        (aot / name).mkdir()
        (aot / name / f"{name}.so").write_bytes(data)
    return aot


def test_aot_modules_built_for_another_flashinfer_are_all_dropped(tmp_path):
    aot = _aot(tmp_path, "0.7.2.post1", {"xqa_a": b"ok", "fa2_b": b"ok"})
    loaded = []
    r = campaign_aot.check(aot, "0.7.4", loaded.append)
    assert loaded == [] and r["kept"] == [] and sorted(m for m, _ in r["removed"]) == ["fa2_b", "xqa_a"]
    assert r["built_for"] == "0.7.2.post1" and not any(aot.iterdir())


def test_aot_modules_that_do_not_load_are_dropped_the_others_kept(tmp_path):
    aot = _aot(tmp_path, "0.7.4", {"xqa_a": b"ok", "fa2_b": b"bad", "fa3_c": b"ok"})

    def load(so: Path):
        if so.read_bytes() == b"bad":
            raise OSError("libcudart.so.12: cannot open shared object file\nmore")

    r = campaign_aot.check(aot, "0.7.4", load)
    assert r["kept"] == ["fa3_c", "xqa_a"]
    assert r["removed"] == [["fa2_b", "libcudart.so.12: cannot open shared object file"]]
    assert (aot / "FLASHINFER_VERSION").exists()
    unstamped = _aot(tmp_path / "u", None, {"xqa_a": b"ok"})  # an archive without a stamp: taken as this version's
    assert campaign_aot.check(unstamped, "0.7.4", lambda so: None)["kept"] == ["xqa_a"]


def test_the_aot_step_runs_first_and_fails_when_a_module_does_not_load(gpu):
    _aot(gpu.tmp, "0.7.4", {"xqa_a": b"\x7fELF not really"})  # gpu.site == tmp/site; tvm_ffi refuses it
    rc, o = call("env")
    assert list(o) == ["aot", "env"] and rc == 1  # carried modules are checked before any step loads them
    assert o["aot"].status == "FAILED" and "1 do not load here (removed): xqa_a" in o["aot"].reason
    assert o["aot"].figures == "0 kept, 1 removed (FlashInfer 0.7.4)"
    assert not list((gpu.site / "flashinfer/data/aot").glob("*/*.so"))


def test_without_aot_hides_the_modules_and_a_killed_call_gets_them_back(tmp_path):
    aot = _aot(tmp_path, "0.7.4", {"xqa_a": b"ok"})
    site = tmp_path / "site"
    with campaign_aot.without_aot(site):
        assert not aot.exists()
    assert (aot / "xqa_a/xqa_a.so").exists()
    aot.rename(campaign_aot.hidden(site))  # as a call killed inside the block leaves it
    campaign_aot.restore_hidden(site)
    assert (aot / "xqa_a/xqa_a.so").exists() and not campaign_aot.hidden(site).exists()


# --- $OUT ---------------------------------------------------------------------------------------------------

def _run_folder(root: Path, name: str, payload: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text("{}")
    (d / "rows.jsonl").write_text("{}\n")
    (d / "rows.csv").write_bytes(os.urandom(payload))  # incompressible
    (d / "rows.parquet").write_bytes(os.urandom(payload))
    return d


def test_pack_puts_adaptive_runs_apart_and_slims_then_splits_an_archive_over_the_limit(tmp_path):
    res, out = tmp_path / "res", tmp_path / "out"
    _run_folder(res, "rep1-20261203-101500", 40_000)
    _run_folder(res, "adaptive/full-20261203-101500", 1_000)
    (res / "logs").mkdir()
    (res / "logs/rep1.txt").write_text("log")
    packed, problems = campaign_out.pack(res, out, limit=100_000, part=30_000)
    assert problems == [] and packed[0].startswith("results.tgz") and packed[1].startswith("adaptive.tgz")
    with tarfile.open(out / "results.tgz") as t:
        names = t.getnames()
    assert "res/logs/rep1.txt" in names and "res/rep1-20261203-101500/rows.csv" in names
    assert not any("adaptive" in n for n in names)
    packed, _ = campaign_out.pack(res, out, limit=60_000, part=30_000)  # 80 kB of tables: left out
    assert "rows.csv/rows.parquet left out" in packed[0]
    with tarfile.open(out / "results.tgz") as t:
        assert "res/rep1-20261203-101500/rows.jsonl" in t.getnames()
        assert "res/rep1-20261203-101500/rows.csv" not in t.getnames()
    (res / "logs/big.bin").write_bytes(os.urandom(70_000))  # still over: split in parts
    packed, _ = campaign_out.pack(res, out, limit=60_000, part=30_000)
    assert "split in 3 parts" in packed[0] and not (out / "results.tgz").exists()
    parts = sorted(out.glob("results.tgz.part-*"))
    assert [p.name[-2:] for p in parts] == ["aa", "ab", "ac"]
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as t:
        assert "res/logs/big.bin" in t.getnames()
    (res / "logs/big.bin").unlink()
    campaign_out.pack(res, out, limit=100_000, part=30_000)
    assert (out / "results.tgz").exists() and not list(out.glob("results.tgz.part-*"))  # stale parts removed


def test_the_limits_of_what_comes_back(tmp_path):
    assert campaign_out.FILE_LIMIT == 16 << 20 and campaign_out.PART == 15 << 20 and campaign_out.MAX_FILES == 8
    out = tmp_path / "out"
    (out / "a/b/c").mkdir(parents=True)
    for i in range(8):
        (out / f"f{i}").write_text("x")
    assert campaign_out.fits(out) == []
    (out / "a/b/f8").write_text("x")  # two folders down: comes back, counts
    (out / "a/b/c/f9").write_text("x")  # three: does not come back
    assert campaign_out.fits(out) == ["$OUT would hold 9 files: only 8 come back"]
    assert campaign_out.fits_sizes([17 << 20, 50 << 20]) == ["2 file(s) over 16 MiB do not come back",
                                                            "$OUT would hold 67 MiB: only 64 MiB come back"]


def test_cache_splits_the_jit_cache_in_parts_that_rejoin(tmp_path):
    cache, out = tmp_path / "home/.cache/flashinfer", tmp_path / "out"
    (cache / "0.7.4/90a/cached_ops/xqa").mkdir(parents=True)
    (cache / "0.7.4/90a/cached_ops/xqa/xqa.so").write_bytes(os.urandom(50_000))
    out.mkdir()
    parts, why = campaign_out.pack_jit_cache(cache, out, tmp_path / "jit.tgz", part=20_000)
    assert why is None and [p.name for p in parts] == [f"jit-cache.tgz.part-a{c}" for c in "abc"]
    dest = tmp_path / "restored"
    dest.mkdir()
    subprocess.run(f"cat {out}/jit-cache.tgz.part-* | tar xz -C {dest}", shell=True, check=True)  # as h200.sh does
    assert (dest / "flashinfer/0.7.4/90a/cached_ops/xqa/xqa.so").read_bytes() == \
        (cache / "0.7.4/90a/cached_ops/xqa/xqa.so").read_bytes()
    for i in range(6):
        (out / f"other{i}").write_text("x")
    parts, why = campaign_out.pack_jit_cache(cache, out, tmp_path / "jit.tgz", part=20_000)
    assert parts == [] and "would hold 9 files" in why
    assert not list(out.glob("jit-cache.tgz.part-*")) or len(list(out.glob("jit-cache.tgz.part-*"))) == 3


def test_the_cache_step_fails_when_there_is_nothing_to_carry(gpu):
    rc, o = call("cache")
    assert o["cache"].status == "FAILED" and o["cache"].reason.startswith("no JIT cache at")


# --- the whole thing through h200.sh -------------------------------------------------------------------------

def test_h200_sh_sets_up_the_machine_runs_the_driver_and_packs(gpu, tmp_path):
    carry = tmp_path / "carry"
    (carry / ".whl").mkdir(parents=True)
    with tarfile.open(carry / ".whl/site.txz", "w:xz") as t:  # a bundle as slim_bundle.sh makes it
        info = tarfile.TarInfo("bundle-marker.txt")
        info.size = 2
        t.addfile(info, io.BytesIO(b"ok"))
    (carry / ".whl/sgl_flash_mla-1.0.0-cp39-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"wheel")
    (carry / ".fi-cache").mkdir()
    jit = tmp_path / "jit/flashinfer/x.so"
    jit.parent.mkdir(parents=True)
    jit.write_bytes(b"module")
    campaign_out.pack_jit_cache(jit.parent, carry / ".fi-cache", tmp_path / "j.tgz", part=100)
    with tarfile.open(carry / ".fi-cache/aot.tgz", "w:gz") as t:
        for name, data in (("aot/FLASHINFER_VERSION", b"0.6.0\n"), ("aot/m/m.so", b"so")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    pylog = tmp_path / "python-calls.txt"
    py = tmp_path / "bin/python-wrapper"
    py.write_text(f'#!/bin/sh\necho "$@" >> {pylog}\n[ "$1" = -m ] && [ "$2" = pip ] && exit 0\n'
                  f'exec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    env = {**os.environ, "CARRY": str(carry), "PYTHON": str(py), "HOME": str(tmp_path / "home")}
    p = subprocess.run(["bash", "tests/gpu/h200.sh", "env", "sweep"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr  # the carried AOT modules are for another FlashInfer: aot FAILED
    assert (gpu.site / "bundle-marker.txt").read_text() == "ok"
    calls = pylog.read_text()
    assert f"-m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target {gpu.site} " \
           f"{carry}/.whl/sgl_flash_mla-1.0.0-cp39-abi3-manylinux_2_28_x86_64.whl" in calls
    assert "-m pip install -q --no-deps --no-build-isolation -e ." in calls
    assert (tmp_path / "home/.cache/flashinfer/x.so").read_bytes() == b"module"
    lines = p.stdout.splitlines()
    table = lines[next(i for i, ln in enumerate(lines) if ln.startswith("step ")):]
    assert [ln.split()[:2] for ln in table[1:4]] == [["aot", "FAILED"], ["env", "PASS"], ["sweep", "PASS"]]
    assert "built for FlashInfer 0.6.0, this is 0.7.4: all removed" in table[1]
    assert sorted(f.name for f in gpu.out.iterdir()) == ["results.tgz", "summary.txt"]
    with tarfile.open(gpu.out / "results.tgz") as t:
        assert "res/logs/setup.txt" in t.getnames() and "res/logs/sweep.txt" in t.getnames()
    # the next call, on a fresh machine: the results carried back as .gpu-carry; the sweep is reused
    (carry / ".gpu-carry").mkdir()
    shutil.copy(gpu.out / "results.tgz", carry / ".gpu-carry/results.tgz")
    shutil.rmtree(gpu.res)
    (carry / ".fi-cache/aot.tgz").unlink()
    p = subprocess.run(["bash", "tests/gpu/h200.sh", "sweep"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "de-kv4096: reused" in p.stdout
    bad = subprocess.run(["bash", "tests/gpu/h200.sh", "swep"], cwd=REPO, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown step 'swep'" in bad.stderr and "setup:" not in bad.stdout
