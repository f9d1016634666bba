"""kill -9 in the middle of a sweep or a server-bench run: the journal keeps every row written (at most the
row being measured is lost), `kbench sweep --resume` completes the run to the same rows and schema as an
uninterrupted run, with no duplicates."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbench.cli.main import cli
from kbench.runs.store import load_run

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
        f"error: {run / 'rows.jsonl'}: line 4 is not valid JSON"]
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # the manifest was not re-marked running


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
