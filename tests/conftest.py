import json

import pytest


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
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


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """A complete CPU sweep run (reference rows ok, the GPU kernels skipped), made once per test file."""
    from helpers import TINY, run_cli

    out = tmp_path_factory.mktemp("cpu")
    r = run_cli(["sweep", *TINY, "--out", out])
    assert r.exit_code == 0, r.output
    return next(p for p in out.iterdir() if p.is_dir())


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
