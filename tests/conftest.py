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
# would start its own. README command 2 runs `--dist loadfile` (each file on one worker) and every test that uses
# one lives in tests/test_server_bench_vllm.py, so the servers start once per run, as without xdist
# (tests/test_suite_parallel.py checks it). (Not `--dist loadgroup` with xdist_group marks: pytest-xdist 3.8
# cannot rename pytest 9's node ids, so its groups are silently ignored: measured, both workers started servers.)
# The server tests are collected first: they are about 6 minutes that cannot be split (the README server block
# alone 2 min), so one worker starts them at once while the other takes the other files, rather than running them
# alone at the end.
VLLM_SERVER_FIXTURES = {"vllm_server", "vllm_spec_server"}


def uses_a_vllm_server(item) -> bool:
    return bool(VLLM_SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config, items):
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
