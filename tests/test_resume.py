"""Resume: after Ctrl-C or kill -9 in the middle of a sweep or a server-bench run the journal keeps every row
written (at most the row being measured is lost), and `--resume` completes the run to the same rows and schema as
an uninterrupted run, with no duplicates; what resume refuses (a baseline, another device, options it cannot
honour, a run still being written, a corrupt journal, a run of the other kind), touching nothing."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import BASELINE, StopAfter, one_error_line, run_cli, server_bench_cli, tiny, tree

from kbench.cli.main import cli
from kbench.engine.sweep import resume_sweep, run_sweep
from kbench.errors import BadInput
from kbench.kernels.registry import select
from kbench.runs.store import load_run
from kbench.server import ServerBenchConfig, run_server_bench

ALL = len(select(["all"]))  # every kernel of 'all' (GQA, MLA and the reference) gets a row per case

GRID = ["--batch-size", "1,2", "--q-len", "1,2", "--kv-len", "64", "--page-size", "16", "--spread-target", "0.01"]


def journal_lines(out: Path) -> int:
    js = list(out.glob("*/rows.jsonl"))
    return js[0].read_bytes().count(b"\n") if js else 0


def start_and_kill(args: list[str], out: Path, at_rows: int, timeout=90) -> Path:
    p = subprocess.Popen([sys.executable, "-m", "kbench.cli.main", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while journal_lines(out) < at_rows:
            assert p.poll() is None, f"finished before the kill: {p.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL
    (run,) = out.iterdir()
    return run


# ---- kbench sweep: kill -9, Ctrl-C, a half-written journal ---------------------------------------------
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    r = CliRunner().invoke(cli, ["sweep", *GRID, "--budget", "0.02", "--out", str(out)])
    assert r.exit_code == 0, r.output
    (run,) = out.iterdir()
    return load_run(run)


@pytest.mark.parametrize("at_rows", [1, 9])
def test_kill_9_mid_sweep_then_resume(tmp_path, uninterrupted, at_rows):
    out = tmp_path / "out"
    # budget 0.4 s per timed row: the process is inside a measurement when it is killed
    run = start_and_kill(["sweep", *GRID, "--budget", "0.4", "--out", str(out)], out, at_rows)
    raw = (run / "rows.jsonl").read_bytes()
    complete = raw[: raw.rfind(b"\n") + 1].decode().splitlines()
    recs = [json.loads(x) for x in complete]  # every complete line is a valid row
    assert len(recs) >= at_rows and all(r["case_id"] and r["kernel"] for r in recs)
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"  # killed: never finalized
    kept = load_run(run)  # readers tolerate a half line at the end
    assert len(kept.rows) == len(recs)
    full_keys = list(zip(uninterrupted.rows.kernel, uninterrupted.rows.case_id))
    # rows are written in a fixed order: what was kept is a prefix of the full run (nothing lost before it)
    assert list(zip(kept.rows.kernel, kept.rows.case_id)) == full_keys[: len(recs)]
    before = {(r["kernel"], r["case_id"], r["status"], r["median_us"]) for r in recs}

    r = CliRunner().invoke(cli, ["sweep", "--resume", str(run)])
    assert r.exit_code == 0, r.output
    done = load_run(run)
    keys = list(zip(done.rows.kernel, done.rows.case_id))
    assert sorted(keys) == sorted(full_keys) and len(keys) == len(set(keys))  # same rows, no duplicates
    assert list(done.rows.columns) == list(uninterrupted.rows.columns)
    assert done.manifest["status"] == "complete" and len(done.manifest["resumed_at"]) == 1
    # the rows measured before the kill were kept, not re-measured
    again = {(k, c, s, m) for k, c, s, m in zip(done.rows.kernel, done.rows.case_id, done.rows.status,
                                                done.rows.median_us)}
    assert {(k, c, s, None if m != m else m) for k, c, s, m in before} <= \
        {(k, c, s, None if m != m else m) for k, c, s, m in again}
    for f in ("rows.parquet", "rows.csv"):
        assert (run / f).is_file()
    import pandas as pd

    assert list(pd.read_parquet(run / "rows.parquet").columns) == list(uninterrupted.rows.columns)
    assert len(pd.read_csv(run / "rows.csv")) == len(full_keys)


def test_resume_without_journal_keeps_the_tables_rows(tmp_path, uninterrupted):
    """A run folder whose journal is gone (copied without it): --resume carries the Parquet rows over
    instead of re-measuring everything and replacing them."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(uninterrupted.path, run)
    (run / "rows.jsonl").unlink()
    m = json.loads((run / "manifest.json").read_text())
    m["status"] = "interrupted"  # a complete run is left untouched by --resume (issue #17)
    (run / "manifest.json").write_text(json.dumps(m))
    before = load_run(run).rows
    r = CliRunner().invoke(cli, ["sweep", "--resume", str(run)])
    assert r.exit_code == 0, r.output
    assert "timed 0 this call" in r.output
    after = load_run(run).rows
    assert after["median_us"].tolist() == pytest.approx(before["median_us"].tolist(), nan_ok=True)


def test_resume_refuses_a_corrupt_journal_without_touching_the_run(tmp_path, uninterrupted):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(uninterrupted.path, run)
    lines = (run / "rows.jsonl").read_text().splitlines()
    lines[3] = "{garbage"
    (run / "rows.jsonl").write_text("\n".join(lines) + "\n")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    r = CliRunner().invoke(cli, ["sweep", "--resume", str(run)])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"error: {run / 'rows.jsonl'}: line 4 is not valid JSON (Expecting property name enclosed in double quotes "
        f"at column 2)"]
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # the manifest was not re-marked running


def test_interrupt_keeps_rows_and_resume_finishes_with_the_same_rows(tmp_path):
    full = run_sweep(tiny(), out_dir=tmp_path / "full")
    part = run_sweep(tiny(), out_dir=tmp_path / "part", observer=StopAfter(10))
    assert part.status == "interrupted"
    kept = load_run(part.run_dir)
    assert kept.manifest["status"] == "interrupted" and len(kept.rows) == 10
    done = resume_sweep(part.run_dir)
    assert done.status == "complete" and done.run_dir == part.run_dir
    resumed = load_run(part.run_dir).rows
    assert sorted(zip(resumed.kernel, resumed.case_id)) == sorted(zip(full.rows.kernel, full.rows.case_id))
    assert len(resumed) == len(set(zip(resumed.kernel, resumed.case_id)))  # nothing measured twice
    assert list(resumed.columns) == list(full.rows.columns)


def test_a_sweep_result_says_how_it_ended_and_its_exit_code_from_python(tmp_path):
    # the CLI's exit rule, on the engine's result (kbench sweep returns result.exit_code)
    part = run_sweep(tiny(), out_dir=tmp_path / "part", observer=StopAfter(3))
    assert part.outcome() == "interrupted" and part.exit_code() == 130 and part.exit_code(signum=15) == 143
    full = run_sweep(tiny(), out_dir=tmp_path / "full")
    assert full.outcome() == "ok" and full.exit_code() == 0
    full.rows.loc[0, "status"] = "wrong"
    assert full.outcome() == "wrong" and full.exit_code() == 1 and full.exit_code(allow_wrong=True) == 0
    full.error = "cannot write the run: No space left on device"
    assert full.outcome() == "unwritable" and full.exit_code() == 2
    full.error = "CUDA context lost"
    assert full.outcome() == "lost" and full.exit_code(allow_wrong=True) == 1


def test_killed_mid_row_journal_is_tolerated_and_resumed(tmp_path):
    """kill -9 while a row is written leaves half a line: readers drop it and --resume re-measures it."""
    res = run_sweep(tiny(), out_dir=tmp_path)
    j = res.run_dir / "rows.jsonl"
    lines = j.read_text().splitlines()
    j.write_text("\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2])
    (res.run_dir / "rows.parquet").unlink()
    m = json.loads((res.run_dir / "manifest.json").read_text())
    m["status"] = "running"  # as a run killed mid-row left it: never finalized, so no num_rows recorded
    del m["num_rows"]
    (res.run_dir / "manifest.json").write_text(json.dumps(m))
    assert len(load_run(res.run_dir).rows) == 5
    resume_sweep(res.run_dir)
    rows = load_run(res.run_dir).rows
    assert len(rows) == 4 * ALL and len(set(zip(rows.kernel, rows.case_id))) == 4 * ALL  # 4 cases x every kernel


def test_cli_resume_refuses_axis_options_and_finishes(tmp_path):
    part = run_sweep(tiny(), out_dir=tmp_path, observer=StopAfter(3))
    r = CliRunner().invoke(cli, ["sweep", "--resume", str(part.run_dir), "--q-len", "2"])
    assert r.exit_code == 2
    r = CliRunner().invoke(cli, ["sweep", "--resume", str(part.run_dir)])
    assert r.exit_code == 0, r.output
    assert len(load_run(part.run_dir).rows) == 4 * ALL  # 4 cases x every kernel


# ---- what kbench sweep --resume refuses or does with a finished run --------------------------------------
def test_resume_of_a_baseline_is_refused_and_touches_nothing(tmp_path):
    base = tmp_path / "base"
    shutil.copytree(BASELINE, base)
    before = tree(base)
    line = one_error_line(run_cli(["sweep", "--resume", base]))
    assert "is a baseline" in line and "--force" in line
    assert tree(base) == before and sorted(p.name for p in base.iterdir()) == sorted(before)


def test_resume_from_another_device_is_refused(tmp_path, cpu_run):
    run = tmp_path / "run"
    shutil.copytree(cpu_run, run)
    m = json.loads((run / "manifest.json").read_text())
    m["status"] = "interrupted"
    m["device"] = {**m["device"], "name": "NVIDIA H200", "sm": 90}
    (run / "manifest.json").write_text(json.dumps(m))
    before = tree(run)
    line = one_error_line(run_cli(["sweep", "--resume", run]))
    assert "NVIDIA H200" in line and "--force" in line and tree(run) == before


def test_resume_of_a_complete_run_says_so_and_touches_nothing(tmp_path, cpu_run):
    run = tmp_path / "run"
    shutil.copytree(cpu_run, run)
    before = tree(run)
    r = run_cli(["sweep", "--resume", run])
    assert r.exit_code == 0 and "nothing to resume" in r.output, r.output
    assert tree(run) == before
    assert json.loads((run / "manifest.json").read_text())["measurements"] == 2


def test_resume_from_python_keeps_the_commands_rules(tmp_path, cpu_run):
    # resume_sweep, the engine's entry point, refuses what `kbench sweep --resume` refuses, touching nothing
    base = tmp_path / "base"
    shutil.copytree(BASELINE, base)
    before = tree(base)
    with pytest.raises(BadInput, match="is a baseline.*--force"):
        resume_sweep(base)
    assert tree(base) == before
    run = tmp_path / "run"
    shutil.copytree(cpu_run, run)
    before = tree(run)
    assert resume_sweep(run) is None and tree(run) == before  # complete: nothing to do
    m = json.loads((run / "manifest.json").read_text())
    m["status"] = "interrupted"
    m["device"] = {**m["device"], "name": "NVIDIA H200", "sm": 90}
    (run / "manifest.json").write_text(json.dumps(m))
    before = tree(run)
    with pytest.raises(BadInput, match="NVIDIA H200.*--force"):
        resume_sweep(run)
    assert tree(run) == before


@pytest.mark.parametrize("opt", [["--scenario", "quick"], ["--out", "x"], ["--name", "n"], ["--shard", "0/2"],
                                 ["--seed", "3"]])
def test_resume_refuses_options_it_cannot_honour(tmp_path, cpu_run, opt):
    line = one_error_line(run_cli(["sweep", "--resume", cpu_run, *opt]))
    assert opt[0] in line and "cannot change" in line


def test_resume_while_the_sweep_still_writes_is_refused_naming_the_pid(tmp_path, cpu_run):
    from kbench.runs.lock import RunLock

    run = tmp_path / "run"
    shutil.copytree(cpu_run, run)
    m = json.loads((run / "manifest.json").read_text())
    m["status"] = "running"
    (run / "manifest.json").write_text(json.dumps(m))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from kbench.runs.lock import RunLock; "
                               f"RunLock({str(run)!r}).acquire(); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = tree(run)
        line = one_error_line(run_cli(["sweep", "--resume", run]))
        assert f"pid {holder.pid}" in line and tree(run) == before
        with pytest.raises(BadInput, match=f"pid {holder.pid}"):
            RunLock(run).acquire()
    finally:
        holder.kill()
        holder.wait()
    RunLock(run).acquire().release()  # the lock goes with its process


def test_resume_adds_to_measurements(tmp_path, cpu_run):
    run = tmp_path / "run"
    shutil.copytree(cpu_run, run)
    lines = (run / "rows.jsonl").read_text().splitlines()
    kept = [x for x in lines if json.loads(x)["status"] != "ok"]  # drop the 2 measured rows
    (run / "rows.jsonl").write_text("\n".join(kept) + "\n")
    m = json.loads((run / "manifest.json").read_text())
    m["status"] = "interrupted"
    m["num_rows"] = len(kept)  # as a run stopped before those rows recorded it (fewer: rows lost, restored instead)
    (run / "manifest.json").write_text(json.dumps(m))
    r = run_cli(["sweep", "--resume", run])
    assert r.exit_code == 0, r.output
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and m["measurements"] == 2 + 2


# ---- server-bench ---------------------------------------------------------------------------------------
def test_kill_9_mid_server_bench_keeps_rows_and_resume_finishes(tmp_path):
    from fake_sglang import FakeSGLang, Faults

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 512}))
    srv = FakeSGLang(Faults(model_path=str(model), step_delay=0.05)).start()
    out = tmp_path / "out"
    cases = ["bs1-in8-out20", "bs2-in8-out20", "bs3-in8-out20", "bs4-in8-out20", "bs5-in8-out20", "bs6-in8-out20"]
    try:
        run = start_and_kill(["server-bench", "--url", srv.url, "--backend", "sglang", "--skip-warmup",
                              "--batch-size", "1,2,3,4,5,6", "--input-len", "8", "--output-len", "20",
                              "--out", str(out)], out, at_rows=2)
        assert len(srv.seen("/generate")) < 6  # it really was killed mid-run
        kept = load_run(run)
        assert kept.manifest["status"] == "running"
        n_kept = len(kept.rows)
        assert kept.rows["case_id"].tolist() == cases[:n_kept]
        assert (kept.rows["status"] == "ok").all() and kept.rows["latency"].notna().all()
        sent_before = len(srv.seen("/generate"))
        r = CliRunner().invoke(cli, ["server-bench", "--resume", str(run), "--url", srv.url])
        assert r.exit_code == 0, r.output
    finally:
        srv.stop()
    done = load_run(run)
    assert done.manifest["status"] == "complete"
    assert done.rows["case_id"].tolist() == cases  # each case once, in order, the kept ones not re-run
    assert len(srv.seen("/generate")) - sent_before == 6 - n_kept
    assert (done.rows["status"] == "ok").all()


def test_server_bench_resume_refuses_a_sweep_run(tmp_path):
    from kbench.cases.scenario import Scenario, Timing
    from kbench.cases.models import MODELS
    from kbench.engine.sweep import run_sweep

    res = run_sweep(Scenario(name="s", heads=MODELS["gqa8-d64"], batch_size=[1], q_len=[1], kv_len=[64],
                             page_size=[16], timing=Timing(budget_s=0.02)).validate(), out_dir=tmp_path)
    r = CliRunner().invoke(cli, ["server-bench", "--resume", str(res.run_dir)])
    assert r.exit_code == 2 and "not a server-bench run" in r.output


def test_server_bench_resume_refuses_options_it_cannot_honour(fake, tmp_path):
    res = run_server_bench(ServerBenchConfig(url=fake.url, backend="sglang", input_lens=(8,), output_lens=(2,),
                                             skip_warmup=True, out_dir=tmp_path / "r"), sleep=lambda s: None)
    before = {p.name: p.read_bytes() for p in res.run_dir.iterdir()}
    n = len(fake.requests)
    r = server_bench_cli("--resume", res.run_dir, "--batch-size", "8")
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith(f"error: --resume {res.run_dir}: --batch-size cannot be changed on resume")
    r = server_bench_cli("--resume", res.run_dir, "--out", tmp_path / "x", "--run-name", "y")
    assert r.exit_code == 2 and "--out, --run-name cannot be changed" in r.output
    assert {p.name: p.read_bytes() for p in res.run_dir.iterdir()} == before and len(fake.requests) == n


def test_the_python_entry_points_keep_the_commands_rules(tmp_path, cpu_run):
    # what a Python user of the engine could do that the CLI refuses: run_sweep(resume=) skipped every resume check
    # (it appended CPU rows to a copy of an H200 baseline); resume_sweep ignored the options a run fixes; export
    # wrote over its own policy; a path given where a list goes was read letter by letter
    from kbench.cases.scenario import apply_overrides, load_scenario
    from kbench.gate.compare import run_gate
    from kbench.recommend.export import export_policy
    from kbench.report import build_report, lookup
    from kbench.report.policy import load_policy

    base = tmp_path / "base"
    shutil.copytree(BASELINE, base)
    before = tree(base)
    with pytest.raises(BadInput, match="finish one with resume_sweep"):
        run_sweep(tiny(), out_dir=tmp_path / "o", resume=base)
    part = run_sweep(tiny(), out_dir=tmp_path / "p", observer=StopAfter(2))
    for opt in ({"seed": 5}, {"out_dir": tmp_path}, {"run_name": "x"}, {"shard": (0, 2)}):
        with pytest.raises(BadInput, match="cannot change it"):
            resume_sweep(part.run_dir, **opt)
    assert tree(base) == before
    rep = build_report(str(base), out_dir=tmp_path / "rep", plot_groups=0)  # one path, not a list of one
    policy_file = tmp_path / "rep" / "policy.json"
    with pytest.raises(BadInput, match="replace what the command reads"):
        export_policy(rep.policy, str(policy_file), policy_file)
    assert load_policy(policy_file)["groups"]
    with pytest.raises(BadInput, match="batch_size must be an integer, got 16.5"):
        lookup(rep.policy, 16.5, 4, 4096)
    with pytest.raises(BadInput, match="unknown filter 'head'"):
        lookup(rep.policy, 16, 4, 4096, head="32/8/128")
    assert run_gate(base, base, threshold="5%").exit_code == 0
    with pytest.raises(BadInput, match="unknown field 'kv_lens'"):
        apply_overrides(load_scenario("quick"), kv_lens="128")
    with pytest.raises(BadInput, match="budget_s 'fast' is not a number"):
        apply_overrides(load_scenario("quick"), budget_s="fast")
    assert apply_overrides(load_scenario("quick"), budget_s="0.2").timing.budget_s == 0.2
