"""README command 2 runs the tests on every CPU (pytest-xdist, `-n logical --dist loadgroup`: one worker per
CPU the OS reports): what that relies on.

The real vLLM CPU servers are session fixtures (tests/servers/vllm_fixture.py); every xdist worker would start its
own, so tests/conftest.py puts each test that uses one in a single xdist group (one worker, the servers started
once). Checked here on the collected items, whatever file a server test lives in.
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
        groups = sorted(m.args[0] for m in item.iter_markers("xdist_group"))
        fixtures = sorted({"vllm_server", "vllm_spec_server"} & set(item.fixturenames))
        print(f"PROBE {item.nodeid} groups={','.join(groups)} servers={','.join(fixtures)}")
'''


def test_every_test_of_a_real_vllm_server_is_in_the_one_xdist_group(tmp_path):
    (tmp_path / "group_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-p", "group_probe", "tests/test_recommend_flags.py", "tests/test_server_bench_vllm.py"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = re.findall(r"^PROBE (\S+) groups=(\S*) servers=(\S*)$", p.stdout, re.M)
    with_server = [(n, g) for n, g, s in rows if s]
    assert len(with_server) >= 10, rows  # the server-bench file's tests, through both fixtures
    assert {s for _, _, s in rows} >= {"vllm_server", "vllm_server,vllm_spec_server"}  # the spec one needs both
    assert all(g == "vllm-cpu-server" for _, g in with_server), with_server
    # collected first although their file comes last here: one worker starts the group at once
    assert rows[:len(with_server)] == [r for r in rows if r[2]]
    # the other tests (test_recommend_flags's parser tests among them) stay free to run on any worker
    others = [(n, g) for n, g, s in rows if not s]
    assert any(n.startswith("tests/test_recommend_flags.py") for n, _ in others)
    assert all(g == "" for _, g in others), [x for x in others if x[1]]


def test_command_2_installs_the_plugin_its_options_need():
    """`-n logical --dist loadgroup` are pytest-xdist's: the [test] extra that command 2 installs names it."""
    readme = (ROOT / "README.md").read_text()
    command_2 = next(ln for ln in readme.splitlines() if "pip install -e '.[test]'" in ln and "pytest" in ln)
    assert " -n logical --dist loadgroup " in command_2, command_2
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"pytest-xdist\b", req) for req in extra), extra
