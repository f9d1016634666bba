"""Crash isolation on the CPU: a kernel that kills its worker process gets a failed row; the sweep goes on."""
import os

import pytest
from click.testing import CliRunner

from kbench.cli.main import cli
from kbench.store import load_run

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


@pytest.fixture
def killer_kernel(tmp_path, monkeypatch):
    """Registered in this process and, through sitecustomize on PYTHONPATH, in every spawned worker."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(KILLER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site") + os.pathsep + os.environ.get("PYTHONPATH", ""))
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
