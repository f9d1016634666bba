"""Every shell block of docs/*.md runs as written, or says why it cannot run here and at least parses.

The README's convention (tests/test_readme.py), page by page: a fenced shell block (```sh, or a fence with no
language) comes right after a line `<!-- readme-test: KIND -->`. KIND `cpu`: run here, in page order, in one fresh
copy of the checkout (the files git tracks, `.venv` pointing at this environment, an empty HOME), each command in
its own `bash -c 'source .venv/bin/activate && ...'` after the block's `NAME=value` lines; its comment's text
after `→ ` (or `exit N: text`) is checked. KIND `gpu` (a CUDA GPU), `server` (a live SGLang or vLLM server) and
`network` (downloads from a package index) are not run: each `kbench ...` line parses with the command's own
options and a sweep's grid expands (test_examples' checker), every other line passes `bash -n`, and every file of
the checkout a line names (tests/..., tools/..., schemas/..., examples/...) exists.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import ROOT, assignment, fresh_checkout, run_as_written, split, tour_env

DOCS = sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```([\w-]*)\n(.*?)\n```", re.S | re.M)
MARK = re.compile(r"<!-- readme-test: (\w+) -->\n$")
KINDS = {"cpu", "gpu", "server", "network"}
SHELL = {"", "sh", "bash", "shell", "console"}
CHECKOUT_PATH = re.compile(r"^(?:tests|tools|schemas|scenarios|examples|benchmarks)/[\w./*-]+$")
# --shard auto reads the scheduler's variables: the parse check gives it a Slurm array task's
SHARD_ENV = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "8"}


def page_blocks(page: Path) -> list[tuple[str | None, list[str]]]:
    """(KIND or None when unmarked, lines) of each shell block of a page, in order."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in SHELL:
            continue
        mark = MARK.search(text[:m.start()])
        out.append((mark.group(1) if mark else None, m.group(2).splitlines()))
    return out


def test_every_shell_block_of_the_docs_is_marked():
    unmarked = [(p.name, lines[0]) for p in DOCS for kind, lines in page_blocks(p) if kind is None]
    assert not unmarked, f"a shell block without <!-- readme-test: KIND --> before it: {unmarked}"
    kinds = {kind for p in DOCS for kind, _ in page_blocks(p)}
    assert kinds <= KINDS, kinds
    expected = [split(ln) for p in DOCS for kind, lines in page_blocks(p) if kind == "cpu" for ln in lines
                if ln.strip() and not assignment(ln) and not ln.lstrip().startswith("#")]
    assert all(rc is not None for _, rc, _ in expected), "every CPU command of the docs says what it shows (→ ...)"


def _parse_line(line: str, env: dict, page: str) -> str:
    """One line of a block that is not run: 'kbench' (parsed by its command) or 'shell' (bash -n)."""
    from test_examples import check, expand

    words = shlex.split(expand(line, env), comments=True)
    if not words:
        return ""
    for w in words:
        if CHECKOUT_PATH.match(w) and "*" not in w:
            assert (ROOT / w).exists(), (page, line, w)
    if words[0] == "kbench":
        check(words[1:], SHARD_ENV)
        return "kbench"
    r = subprocess.run(["bash", "-n"], input=line, capture_output=True, text=True)
    assert r.returncode == 0, (page, line, r.stderr)
    return "shell"


def test_the_docs_gpu_server_and_network_blocks_parse(capsys):
    from test_examples import assignments, logical_lines

    counts = {}
    for page in DOCS:
        for kind, lines in page_blocks(page):
            if kind == "cpu":
                continue
            script = "\n".join(lines)
            env = assignments(script, {})
            for line in logical_lines(script):
                if assignment(line):
                    continue
                what = _parse_line(line, env, page.name)
                if what:
                    counts.setdefault(page.name, {"blocks": 0, "kbench": 0, "shell": 0})[what] += 1
            counts.setdefault(page.name, {"blocks": 0, "kbench": 0, "shell": 0})["blocks"] += 1
    with capsys.disabled():
        print("\ndocs blocks parsed, not run (gpu, server, network):" + "".join(
            f"\n  {p}: {c['blocks']} blocks, {c['kbench']} kbench commands parsed, {c['shell']} shell lines checked"
            for p, c in counts.items()))
    assert sum(c["kbench"] for c in counts.values()) >= 30, counts


def test_the_docs_cpu_blocks_run_as_written_from_a_fresh_checkout(tmp_path, capsys):
    if not (Path(sys.prefix) / "bin" / "activate").is_file():
        pytest.skip("tests not run from a virtual environment (.venv/bin/activate)")
    clone = fresh_checkout(tmp_path / "clone")
    env = tour_env(tmp_path / "home")
    ran: dict[str, list[tuple[str, int]]] = {}
    blocks_run: dict[str, int] = {}
    for page in DOCS:
        for kind, lines in page_blocks(page):
            if kind != "cpu":
                continue
            blocks_run[page.name] = blocks_run.get(page.name, 0) + 1
            assigns = []
            for line in lines:
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if assignment(line):
                    assigns.append(assignment(line))
                    continue
                ran.setdefault(page.name, []).append(run_as_written(clone, env, assigns, line, timeout=600,
                                                                    where=(page.name,)))
    with capsys.disabled():
        print("\ndocs CPU blocks run:" + "".join(
            f"\n  {page}: {blocks_run[page]} blocks, {len(cmds)} commands" + "".join(
                f"\n    exit {rc}: {cmd}" for cmd, rc in cmds) for page, cmds in ran.items()))
    assert sum(len(c) for c in ran.values()) >= 10, ran


def test_build_fa3_is_stdlib_only_as_it_says():
    """tools/build_fa3.py says "Stdlib only (plus pip for the download)": it runs from a bare python3."""
    import ast

    src = (ROOT / "tools" / "build_fa3.py").read_text()
    assert "Stdlib only" in src
    tree = ast.parse(src)
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {m.split(".")[0] for m in mods} - set(sys.stdlib_module_names) - {"__future__"} == set(), mods


def test_the_gpu_tour_runner_runs_the_readme_gpu_block_as_written():
    """tests/gpu/readme_tour.py (the lead's GPU run of the tour) takes its commands from the README itself, ending
    with the recommend that prices (the routes sweep first)."""
    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    import readme_tour

    cmds = readme_tour.tour_commands()
    assert cmds[0] == "kbench kernels" and cmds[-2].startswith("kbench sweep -s engine-routes")
    assert cmds[-1].startswith("kbench recommend results/engine-routes-2*/ --engine vllm")
    assert all("#" not in c for c in cmds)
