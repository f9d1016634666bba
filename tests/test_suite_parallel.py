"""README command 2 runs the tests on every CPU (pytest-xdist, `-n logical --dist loadfile`: one worker per CPU
the OS reports, each test file on one worker): what that relies on.

The real vLLM CPU servers are session fixtures (tests/servers/vllm_fixture.py); every xdist worker that runs a test
using one starts its own. So every such test lives in one file (one worker, the servers started once), and
tests/conftest.py collects them first. Checked here on the collected items.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = sorted({"vllm_server", "vllm_spec_server"} & set(item.fixturenames))
        print(f"PROBE {item.nodeid} servers={','.join(fixtures)}")
'''


def test_only_the_server_bench_file_uses_a_real_vllm_server():
    """--dist loadfile runs a file on one worker, which starts the servers once: no other test file (or helper
    module the tests import) names the fixtures."""
    here = Path(__file__).resolve().parent
    users = sorted(p.relative_to(ROOT).as_posix() for p in here.rglob("*.py")
                   if re.search(r"\bvllm_(spec_)?server\b", p.read_text()))
    assert users == ["tests/conftest.py", "tests/servers/vllm_fixture.py", "tests/test_server_bench_vllm.py",
                     "tests/test_suite_parallel.py"], users


def test_the_real_vllm_server_tests_are_collected_first(tmp_path):
    (tmp_path / "group_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-p", "group_probe", "tests/test_recommend_flags.py", "tests/test_server_bench_vllm.py"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = re.findall(r"^PROBE (\S+) servers=(\S*)$", p.stdout, re.M)
    with_server = [n for n, s in rows if s]
    assert len(with_server) >= 10, rows  # the server-bench file's tests, through both fixtures
    assert {s for _, s in rows} >= {"vllm_server", "vllm_server,vllm_spec_server"}  # the spec one needs both
    assert any(n.startswith("tests/test_recommend_flags.py") for n, s in rows if not s)
    # collected first although their file was named last: the worker that takes it starts them at once
    assert [n for n, _ in rows[:len(with_server)]] == with_server


def test_command_2_installs_the_plugin_its_options_need():
    """`-n logical --dist loadfile` are pytest-xdist's: the [test] extra that command 2 installs names it."""
    readme = (ROOT / "README.md").read_text()
    command_2 = next(ln for ln in readme.splitlines() if "pip install -e '.[test]'" in ln and "pytest" in ln)
    assert " -n logical --dist loadfile " in command_2, command_2
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"pytest-xdist\b", req) for req in extra), extra
