"""One run session (kbench.runs.session.RunSession) for every command that writes a run: a new folder or a
resumed one, the done set rebuilt from the journal, and one set of finish rules (complete / interrupted /
crashed) whichever command wrote the run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbench.errors import BadInput
from kbench.runs.session import RunSession
from kbench.runs.store import load_run


def _rows(*case_ids, kernel="k"):
    return [{"kernel": kernel, "path": "decode", "case_id": c, "status": "ok"} for c in case_ids]


def _manifest(run_dir):
    return json.loads((run_dir / "manifest.json").read_text())


def test_a_run_that_ends_its_block_is_complete_and_a_resume_knows_its_rows(tmp_path):
    with RunSession.new(tmp_path, "s", {"kind": "sweep", "seed": 0}) as run:
        assert _manifest(run.dir)["status"] == "running"  # written when the session opens
        for r in _rows("c1", "c2"):
            run.append(r)
        assert run.done == {("k", "c1"), ("k", "c2")}
    m = _manifest(run.dir)
    assert m["status"] == "complete" and m["num_rows"] == 2 and "stopped_by" not in m
    with RunSession.resume(run.dir, kind="sweep") as again:
        assert again.resumed and again.done == {("k", "c1"), ("k", "c2")}  # rebuilt from the journal
        again.append(_rows("c3")[0])
    assert len(load_run(run.dir).rows) == 3 and len(_manifest(run.dir)["resumed_at"]) == 1


def test_ctrl_c_ends_the_run_interrupted_and_goes_on_up(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with RunSession.new(tmp_path, "s", {"kind": "sweep"}) as run:
            run.append(_rows("c1")[0])
            raise KeyboardInterrupt
    m = _manifest(run.dir)
    assert m["status"] == "interrupted" and m["stopped_by"] == "stopped by SIGINT" and m["interrupted_at"]
    assert len(load_run(run.dir).rows) == 1  # the rows so far are kept (journal and tables)


def test_a_stop_the_command_handled_ends_the_run_interrupted_without_an_error(tmp_path):
    with RunSession.new(tmp_path, "s", {"kind": "sweep"}) as run:
        run.stop("the CUDA context is unusable")
    m = _manifest(run.dir)
    assert m["status"] == "interrupted" and m["stopped_by"] == "the CUDA context is unusable"


@pytest.mark.parametrize("error, status, stopped_by", [
    (OSError(28, "No space left on device"), "interrupted", "[Errno 28] No space left on device"),
    (BadInput("a row that cannot be read"), "interrupted", "a row that cannot be read"),
    (ValueError("a bug"), "crashed", "ValueError: a bug"),
])
def test_an_error_ends_the_run_by_the_same_rules_for_every_kind(tmp_path, error, status, stopped_by):
    import kbench.server.rows  # noqa: F401 - registers the server-bench row kind

    for kind in ("sweep", "server-bench"):
        with pytest.raises(type(error)):
            with RunSession.new(tmp_path / kind, "s", {"kind": kind}) as run:
                raise error
        m = _manifest(run.dir)
        assert (m["status"], m["stopped_by"]) == (status, stopped_by), kind


def test_a_server_bench_row_is_keyed_by_its_case(tmp_path):
    import kbench.server.rows  # noqa: F401

    with RunSession.new(tmp_path, "b", {"kind": "server-bench"}) as run:
        run.append({"case_id": "bs1-in8-out2", "status": "ok"})
    with RunSession.resume(run.dir, kind="server-bench") as again:
        assert again.done == {("bs1-in8-out2",)}


def test_a_resumed_run_of_another_kind_is_refused_before_anything_is_touched(tmp_path):
    with RunSession.new(tmp_path, "s", {"kind": "sweep"}) as run:
        run.append(_rows("c1")[0])
    before = {p.name: p.read_bytes() for p in run.dir.iterdir()}
    with pytest.raises(BadInput, match=r"not a server-bench run \(kind 'sweep'\)"):
        with RunSession.resume(run.dir, kind="server-bench"):
            pass
    assert {p.name: p.read_bytes() for p in run.dir.iterdir()} == before


def test_a_stop_while_a_new_run_folder_is_made_leaves_no_folder_and_ends_as_the_signal(tmp_path, monkeypatch):
    # SIGTERM the moment the folder appeared left one holding only .kbench.lock: the sweep said "not a kbench run
    # (no manifest.json)", exit 2, and a requeued Slurm task's --resume failed on it every time
    from click.testing import CliRunner

    import kbench.runs.session as S
    from helpers import tiny
    from kbench.cli.main import cli
    from kbench.engine.sweep import run_sweep

    real = S.RunWriter

    class CutShort(real):
        def __init__(self, run_dir, manifest, resume=False):
            Path(run_dir).mkdir(parents=True)
            (Path(run_dir) / ".kbench.lock").write_text("1\n")
            raise KeyboardInterrupt

    monkeypatch.setattr(S, "RunWriter", CutShort)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny(), out_dir=tmp_path / "py")
    assert not any((tmp_path / "py").iterdir())
    r = CliRunner().invoke(cli, ["sweep", "-b", "1", "-q", "1", "-k", "64", "--kernels", "reference",
                                 "--out", str(tmp_path / "cli")])
    assert r.exit_code == 130 and r.output.strip().splitlines()[-1].startswith("error: stopped by SIGINT"), r.output
    assert not (tmp_path / "cli").exists() or not any((tmp_path / "cli").iterdir())
