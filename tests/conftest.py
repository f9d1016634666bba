import json
from pathlib import Path

import pytest


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# The real vLLM CPU servers (tests/servers/vllm_fixture.py) are session fixtures: under pytest-xdist each worker
# would start its own. Every test that uses one is put in one xdist group, so that `--dist loadgroup` (README
# command 2) runs them all on one worker and the servers start once per run, as without xdist. The group (about
# 6 minutes that cannot be split) is collected first, so that one worker starts it at once while the others share
# every other test, rather than one worker running it alone at the end.
VLLM_SERVER_FIXTURES = {"vllm_server", "vllm_spec_server"}


def uses_a_vllm_server(item) -> bool:
    return bool(VLLM_SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if uses_a_vllm_server(item):
            item.add_marker(pytest.mark.xdist_group("vllm-cpu-server"))
    items.sort(key=lambda item: not uses_a_vllm_server(item))  # stable: the order within each part is kept
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def results_dir(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def _cpu_sweep(tmp_path_factory):
    """The CPU sweep behind cpu_run, made once for the whole session (a sweep: seconds; a copy: milliseconds)."""
    from helpers import TINY, run_cli

    out = tmp_path_factory.mktemp("cpu-sweep")
    r = run_cli(["sweep", *TINY, "--out", out])
    assert r.exit_code == 0, r.output
    return next(p for p in out.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, _cpu_sweep):
    """A complete CPU sweep run (reference rows ok, the GPU kernels skipped): each test file gets its own copy of
    the session's one sweep (a file may change its copy; the next file's is as the sweep wrote it)."""
    import shutil

    out = tmp_path_factory.mktemp("cpu")
    return Path(shutil.copytree(_cpu_sweep, out / _cpu_sweep.name, symlinks=True))


@pytest.fixture
def model_dir(tmp_path):
    """A stand-in model folder (a config.json with a vocabulary size) for the fake SGLang server."""
    d = tmp_path / "fake-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"vocab_size": 512}))
    return d


@pytest.fixture
def fake(model_dir):
    """The SGLang-protocol test server (tests/servers/fake_sglang.py), started for one test."""
    from fake_sglang import FakeSGLang, Faults

    srv = FakeSGLang(Faults(model_path=str(model_dir))).start()
    yield srv
    srv.stop()
