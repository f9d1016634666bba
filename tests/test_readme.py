"""The README runs as written.

Convention (the README says it too): a fenced ```sh block right after a line `<!-- readme-test: KIND -->` is a
tour block. KIND `cpu`: this test runs it, in README order, in a fresh copy of the checkout (the files git
tracks, with `.venv` pointing at the environment running the tests, and an empty HOME), each line in its own
`bash -c 'source .venv/bin/activate && ...'` from the copy's root, with the block's `NAME=value` lines before it.
A command's comment holds what it shows after `→ `: a key text its output must contain (exit 0), or
`exit N: text`. KIND `gpu` (needs a CUDA GPU) and `server` (needs a live SGLang or vLLM server) are not run here;
the test only checks that their commands are real kbench commands with valid options (test_examples' parser).

Also here: the set-up block is the first thing, command 2 is `.ci/run`'s line, the committed-baselines table is
the manifests', and no user-facing text (README, docs/, scenario descriptions, --help, schemas, examples) holds
internal wording.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- readme-test: (\w+) -->\n```sh\n(.*?)\n```", re.S)
ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S+$")


def blocks(kind: str | None = None) -> list[tuple[str, list[str]]]:
    out = [(k, body.splitlines()) for k, body in BLOCK.findall(README.read_text())]
    return [b for b in out if kind is None or b[0] == kind]


def assignment(line: str) -> str | None:
    """A block's `NAME=value` line (its comment dropped), else None."""
    code = line.split(" #")[0].strip()
    return code if ASSIGN.match(code) else None


def split(line: str) -> tuple[str, int | None, str | None]:
    """(command, expected exit code, expected text) of a tour line; None, None without a `→`."""
    cmd, _, comment = line.partition("  #") if "  #" in line else line.partition(" # ")
    cmd = cmd.strip()
    if "→ " not in comment:
        return cmd, None, None
    want = comment.split("→ ", 1)[1].strip()
    m = re.match(r"exit (\d+): (.*)", want)
    return (cmd, int(m.group(1)), m.group(2)) if m else (cmd, 0, want)


def fresh_checkout(dest: Path) -> Path:
    """The files a clone has (git ls-files), without the ignored ones (runs, reports, .venv)."""
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout:
        pytest.skip("not a git checkout")
    for f in r.stdout.split("\0"):
        if f and (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


def tour_env(home: Path) -> dict:
    """The environment a documented command runs in: a new home folder, no venv or KBENCH_ variables inherited."""
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "KBENCH_"))}
    env.update(HOME=str(home), COLUMNS="200", PATH="/usr/local/bin:/usr/bin:/bin")
    return env


def run_as_written(clone: Path, env: dict, assigns: list[str], line: str, timeout: float,
                   where: tuple = ()) -> tuple[str, int]:
    """One documented command run from the checkout after `source .venv/bin/activate` and the block's
    assignments: its exit code and the text after `# →` checked, an exit 2 one line. Returns (command, code)."""
    cmd, rc, want = split(line)
    script = " && ".join(["source .venv/bin/activate", *assigns, cmd])
    p = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=timeout)
    out = " ".join((p.stdout + p.stderr).split())
    assert p.returncode == rc, (*where, cmd, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert " ".join(want.split()) in out, (*where, cmd, want, out[-3000:])
    if rc == 2:
        assert len((p.stdout + p.stderr).strip().splitlines()) == 1, (cmd, p.stdout, p.stderr)
    return cmd, p.returncode


def test_the_readme_has_the_tour_blocks_this_test_knows():
    kinds = [k for k, _ in blocks()]
    assert kinds.count("cpu") >= 3 and "gpu" in kinds and "server" in kinds, kinds
    assert set(kinds) <= {"cpu", "gpu", "server"}, kinds
    expected = [split(line) for _, lines in blocks("cpu") for line in lines if not assignment(line)]
    assert all(rc is not None for _, rc, _ in expected), "every CPU tour command says what it shows (→ ...)"


def test_the_readme_cpu_tour_runs_as_written_from_a_fresh_checkout(tmp_path, capsys):
    if not (Path(sys.prefix) / "bin" / "activate").is_file():
        pytest.skip("tests not run from a virtual environment (.venv/bin/activate)")
    clone = fresh_checkout(tmp_path / "clone")
    before = {f.relative_to(clone).as_posix() for f in clone.rglob("*") if f.is_file() and ".venv" not in f.parts}
    env = tour_env(tmp_path / "home")
    ran = []
    for _, lines in blocks("cpu"):
        assigns = []
        for line in lines:
            if assignment(line):
                assigns.append(assignment(line))
                continue
            ran.append(run_as_written(clone, env, assigns, line, timeout=300))
    with capsys.disabled():
        print("\nREADME CPU tour:" + "".join(f"\n  exit {rc}: {cmd}" for cmd, rc in ran))
    # the tour writes under results/ only (git-ignored), never into a committed baseline
    new = [f for f in clone.rglob("*") if f.is_file() and f.relative_to(clone).as_posix() not in before]
    assert new and all(f.relative_to(clone).parts[0] == "results" for f in new), new[:5]
    assert not any(f.relative_to(clone).parts[1] == "baselines" for f in new), new[:5]


def test_the_gpu_and_server_tour_commands_are_real_kbench_commands():
    """Not run here (a CUDA GPU, a live server), but each `kbench ...` line parses with the command's options and
    a sweep's grid expands (test_examples' checker)."""
    from test_examples import assignments, check, kbench_commands

    n = 0
    for _, lines in blocks("gpu") + blocks("server"):
        script = "\n".join(lines)
        for argv in kbench_commands(script, assignments(script, {})):
            check(argv)
            n += 1
    assert n >= 12, n


def test_setup_block_comes_first_and_command_2_is_ci_run_s():
    text = README.read_text()
    first = re.search(r"```sh\n(.*?)\n```", text, re.S)
    assert text[:first.start()].strip() == "# kbench"
    lines = first.group(1).splitlines()
    assert lines[0].startswith("# 1.") and lines[2].startswith("# 2.")
    ci = (ROOT / ".ci" / "run").read_text()
    assert lines[3] in ci.splitlines(), "README command 2 and .ci/run must be the same line"
    after = text[first.end():]
    assert re.match(r"\s*Then, in every new shell.*?\n```sh\nsource \.venv/bin/activate\n```", after, re.S)
    assert len(text.splitlines()) <= 500


def test_the_committed_baselines_table_is_the_manifests():
    from readme_baselines import readme_table, table

    assert readme_table(README.read_text()) == table(), "python3 tests/readme_baselines.py --write"


# internal wording: issue numbers, the task brief, how a test machine was obtained
INTERNAL = re.compile(r"issue #\d+|\bthe brief\b|\blent\b|device machine|(?<![\w/.])sessions?\b(?!\.py)", re.I)


def _user_texts():
    yield "README.md", README.read_text()
    for p in sorted((ROOT / "docs").glob("*.md")):
        yield str(p.relative_to(ROOT)), p.read_text()
    for p in sorted((ROOT / "schemas").glob("*.json")):
        yield str(p.relative_to(ROOT)), p.read_text()
    for p in sorted((ROOT / "examples").rglob("*")):
        if p.is_file():
            yield str(p.relative_to(ROOT)), p.read_text()
    import tomllib

    for p in sorted((ROOT / "scenarios").glob("*.toml")):
        yield f"{p.name} description", tomllib.loads(p.read_text()).get("description", "")


def test_no_internal_wording_in_user_facing_text():
    bad = [(name, m.group(0)) for name, text in _user_texts() for m in INTERNAL.finditer(text)]
    assert not bad, bad


def test_no_internal_wording_in_any_help():
    from click.testing import CliRunner

    from kbench.cli.main import cli

    names = sorted(cli.list_commands(None))
    assert "sweep" in names and "kernels" in names
    for name in [None, *names]:
        r = CliRunner().invoke(cli, [name, "--help"] if name else ["--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, (name, r.output)
        assert not INTERNAL.search(r.output), (name, INTERNAL.search(r.output).group(0))


def test_docs_links_point_at_files_that_exist():
    texts = {"README.md": README.read_text(), **{f"docs/{p.name}": p.read_text() for p in (ROOT / "docs").glob("*.md")}}
    for name, text in texts.items():
        base = (ROOT / name).parent
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (base / target).exists(), (name, target)
