"""Crash isolation on the CPU: a kernel that kills its worker process gets a failed row; the sweep goes on."""
import os

import pytest
from click.testing import CliRunner

from kbench.cli.main import cli
from kbench.runs.store import load_run

KILLER = '''
import os, signal
from kbench.kernels import registry
from kbench.kernels.reference import ReferenceKernel

class Killer(ReferenceKernel):
    """Test only: dies like a process whose CUDA context was poisoned."""
    name = "killer"
    path = "decode"
    def prepare(self, inputs):
        os.kill(os.getpid(), signal.SIGKILL)

registry._load()
registry.register(Killer())
'''


def _in_spawned_workers(code: str, tmp_path, monkeypatch) -> None:
    """Runs `code` in every spawned worker, through a sitecustomize on PYTHONPATH."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site") + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture
def killer_kernel(tmp_path, monkeypatch):
    """Registered in this process and, through sitecustomize on PYTHONPATH, in every spawned worker."""
    _in_spawned_workers(KILLER, tmp_path, monkeypatch)
    from kbench.kernels import registry

    ns = {}
    exec(KILLER.replace("os.kill(os.getpid(), signal.SIGKILL)", "raise SystemExit('not in the parent')"), ns)
    yield "killer"
    registry._REGISTRY.pop("killer", None)


def test_worker_killed_by_a_kernel_is_a_failed_row_and_the_sweep_goes_on(tmp_path, killer_kernel):
    r = CliRunner().invoke(cli, ["sweep", "--batch-size", "1,2", "--q-len", "2", "--kv-len", "64", "--budget", "0.02",
                                 "--kernels", "killer,reference", "--isolate", "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    run = load_run(next((tmp_path / "r").iterdir()))
    rows = run.rows
    killed = rows[rows.kernel == "killer"]
    assert len(killed) == 2 and (killed.status == "failed").all()
    assert killed.reason.str.contains("SIGKILL").all() and killed.reason.str.contains("restarted").all()
    ref = rows[rows.kernel == "reference"]
    assert len(ref) == 2 and (ref.status == "ok").all()  # measured after each restart
    assert run.manifest["worker_restarts"] == 2
    assert run.manifest["status"] == "complete"


def test_isolated_sweep_matches_in_process_rows(tmp_path):
    args = ["sweep", "--batch-size", "1", "--q-len", "1,2", "--kv-len", "64", "--budget", "0.02"]
    a = CliRunner().invoke(cli, args + ["--out", str(tmp_path / "a")])
    b = CliRunner().invoke(cli, args + ["--isolate", "--out", str(tmp_path / "b")])
    assert a.exit_code == 0 and b.exit_code == 0, b.output
    ra = load_run(next((tmp_path / "a").iterdir())).rows
    rb = load_run(next((tmp_path / "b").iterdir())).rows
    assert list(zip(ra.kernel, ra.case_id, ra.status)) == list(zip(rb.kernel, rb.case_id, rb.status))
    assert list(ra.columns) == list(rb.columns)


POISONER = '''
from kbench.kernels import registry
from kbench.kernels.reference import ReferenceKernel
from kbench.engine import measure as _measure
class Poisoner(ReferenceKernel):
    """Test only: fails the way a CUDA fault does (an exception, then a context that runs nothing)."""
    name = "poisoner"
    path = "decode"
    def prepare(self, inputs):
        def run(i):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return run

_orig = _measure.CaseMeasurer.after_failure
def after_failure(self, row):
    _orig(self, row)
    if row.kernel == "poisoner":  # on the CPU there is no CUDA context to probe: say it is lost
        raise _measure.CudaContextLost(row.kernel, row.case_id, row.reason)
_measure.CaseMeasurer.after_failure = after_failure
registry._load()
registry.register(Poisoner())
'''


@pytest.fixture
def poisoner_kernel(tmp_path, monkeypatch):
    _in_spawned_workers(POISONER, tmp_path, monkeypatch)
    from kbench.engine import measure as measure_mod
    from kbench.kernels import registry

    orig = measure_mod.CaseMeasurer.after_failure
    exec(POISONER, {})  # the same in this process (the in-process run below)
    yield "poisoner"
    measure_mod.CaseMeasurer.after_failure = orig
    registry._REGISTRY.pop("poisoner", None)


def test_lost_cuda_context_restarts_the_worker_and_keeps_the_error(tmp_path, poisoner_kernel):
    r = CliRunner().invoke(cli, ["sweep", "--batch-size", "1,2", "--q-len", "2", "--kv-len", "64", "--budget", "0.02",
                                 "--kernels", "poisoner,reference", "--isolate", "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    run = load_run(next((tmp_path / "r").iterdir()))
    rows = run.rows
    bad = rows[rows.kernel == "poisoner"]
    assert len(bad) == 2 and (bad.status == "failed").all()
    assert bad.reason.str.contains("illegal memory access").all()  # the CUDA error, not just "died"
    ref = rows[rows.kernel == "reference"]
    assert len(ref) == 2 and (ref.status == "ok").all()  # measured by the restarted worker
    assert run.manifest["worker_restarts"] == 2 and len(run.manifest["cuda_context_losses"]) == 2
    assert run.manifest["status"] == "complete"


def test_lost_cuda_context_without_isolation_stops_with_one_line_and_resume_finishes(tmp_path, poisoner_kernel):
    args = ["sweep", "--batch-size", "1,2", "--q-len", "2", "--kv-len", "64", "--budget", "0.02",
            "--kernels", "poisoner,reference", "--out", str(tmp_path / "r")]
    r = CliRunner().invoke(cli, args + ["--no-isolate"])
    assert r.exit_code == 1, r.output
    assert "stopped: the CUDA context is unusable after poisoner failed on bs1-q2" in " ".join(r.output.split())
    assert "Traceback" not in r.output
    run_dir = next((tmp_path / "r").iterdir())
    run = load_run(run_dir)
    assert run.manifest["status"] == "interrupted" and "poisoner" in run.manifest["stopped_by"]
    assert len(run.rows) == 2 and set(run.rows.case_id) == {run.rows.case_id.iloc[0]}  # nothing after the loss
    assert run.rows[run.rows.kernel == "poisoner"].status.tolist() == ["failed"]
    r2 = CliRunner().invoke(cli, ["sweep", "--resume", str(run_dir), "--isolate"])
    assert r2.exit_code == 0, r2.output
    rows = load_run(run_dir).rows
    assert sorted(zip(rows.kernel, rows.case_id)) == sorted(
        (k, c) for k in ("poisoner", "reference") for c in set(rows.case_id))
    assert len(rows) == 4 and (rows[rows.kernel == "reference"].status == "ok").all()


def test_the_out_of_bounds_kernel_is_test_only():
    from kbench.kernels.registry import select

    assert "test-oob-write" not in [k.name for k in select(["all"])]
    assert [k.name for k in select(["test-oob-write"])] == ["test-oob-write"]
    assert "test-oob-write" in [k.name for k in select(["all", "test-oob-write"])]


def test_out_of_bounds_kernel_is_skipped_without_a_gpu(tmp_path):
    r = CliRunner().invoke(cli, ["sweep", "--batch-size", "1", "--q-len", "2", "--kv-len", "64", "--budget", "0.02",
                                 "--kernels", "test-oob-write,reference", "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    rows = load_run(next((tmp_path / "r").iterdir())).rows
    oob = rows[rows.kernel == "test-oob-write"]
    assert list(oob.status) == ["skipped"] and "needs a CUDA GPU" in oob.reason.iloc[0]


def test_the_worker_starts_before_the_bandwidth_and_the_run_folder_and_a_failed_start_ends_it(tmp_path, monkeypatch):
    """Time to the first row: the isolated worker's imports and CUDA context overlap the bandwidth measurement and
    the module planning instead of following them (on the H200 a warm sweep's first row came about 10 s after the
    bandwidth, the worker's start part of it). If the run cannot start (here: the session fails), the worker ends."""
    from kbench.cases.scenario import Scenario, Timing
    from kbench.cases.models import MODELS
    from kbench.engine import sweep as S

    sc = Scenario(name="early", heads=MODELS["gqa8-d64"], batch_size=[1], q_len=[2], kv_len=[64], page_size=[16],
                  timing=Timing(budget_s=0.02, min_samples=3), kernels=["reference"]).validate()
    seen = {}
    session = S.Sweep._session

    def watched(self, dev, plan):
        w = self._isolated
        seen["spawned"] = w is not None and w.proc is not None and w.proc.is_alive() and w._starting
        return session(self, dev, plan)

    monkeypatch.setattr(S.Sweep, "_session", watched)
    res = S.run_sweep(sc, out_dir=tmp_path / "r", isolate=True)
    assert seen["spawned"] is True
    run = load_run(res.run_dir)
    assert res.status == "complete" and list(run.rows.status) == ["ok"]
    assert run.manifest["worker_restarts"] == 0 and run.manifest["isolated"] is True

    procs = []

    def failing(self, dev, plan):
        procs.append(self._isolated.proc)
        raise OSError("no room for the run folder")

    monkeypatch.setattr(S.Sweep, "_session", failing)
    with pytest.raises(OSError):
        S.run_sweep(sc, out_dir=tmp_path / "r2", isolate=True)
    procs[0].join(timeout=15)
    assert not procs[0].is_alive()
