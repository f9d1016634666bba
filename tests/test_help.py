"""--help: the top-level list names every command (without loading torch) and says what each command's own help
says; every option of every command has help, and every command's --help ends with 2-3 examples."""
from __future__ import annotations

import subprocess
import sys

import click
import pytest
from helpers import run_cli, server_bench_cli

from kbench.cli.main import COMMANDS, cli

OURS = list(COMMANDS)  # every command, server-bench included


def command(name) -> click.Command:
    return cli.get_command(click.Context(cli), name)


def test_top_level_help_lists_every_command_without_loading_torch():
    code = ("import sys; from click.testing import CliRunner; from kbench.cli.main import cli; "
            "r = CliRunner().invoke(cli, ['--help']); print(r.output); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("NO-TORCH")
    for name in COMMANDS:
        assert f"  {name} " in out


def test_a_bare_kbench_prints_the_help_and_exits_0():
    # not "error: Usage: ..." on stderr with exit 2 (click >= 8.2 raises the help as a usage error)
    bare = subprocess.run([sys.executable, "-m", "kbench.cli.main"], capture_output=True, text=True)
    helped = subprocess.run([sys.executable, "-m", "kbench.cli.main", "--help"], capture_output=True, text=True)
    assert bare.returncode == 0 and bare.stderr == "" and bare.stdout == helped.stdout
    assert bare.stdout.startswith("Usage: kbench [OPTIONS] COMMAND")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_listed_help_matches_the_command(name):
    import importlib

    mod, attr, short = COMMANDS[name]
    cmd = getattr(importlib.import_module(mod), attr)
    assert cmd.name == name
    words = lambda s: {w.strip(".,;:()'").lower() for w in s.split()} - {""}
    assert len(words(short) & words(cmd.help)) >= len(words(short)) * 0.6, (short, cmd.help[:200])


@pytest.mark.parametrize("name", OURS)
def test_every_option_has_help_and_the_help_ends_with_examples(name):
    cmd = command(name)
    bare = [p.opts[0] for p in cmd.params if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]
    assert not bare, f"kbench {name}: options without help: {bare}"
    out = run_cli([name, "--help"], env={"COLUMNS": "200"}).output.rstrip().splitlines()
    start = max(i for i, line in enumerate(out) if line.strip() == "Examples:")
    shown = [line.strip() for line in out[start + 1:]]
    assert 2 <= len(shown) <= 3 and all(line.startswith(f"kbench {name}") for line in shown), out[start:]


def test_every_option_has_help_and_help_ends_with_examples():
    from kbench.cli.server_bench_cmd import server_bench

    for p in server_bench.params:
        if isinstance(p, __import__("click").Option) and not p.hidden:
            assert p.help, p.name
    out = server_bench_cli("--help").output.rstrip().splitlines()
    examples = out[out.index("  Examples:") + 1:]
    assert 2 <= len(examples) <= 3 and all(x.strip().startswith("kbench server-bench ") for x in examples)


def test_sweep_help_names_every_built_in_scenario():
    from pathlib import Path

    shipped = sorted(p.stem for p in (Path(__file__).parents[1] / "scenarios").glob("*.toml"))
    assert "eagle-tree" in shipped and "deepseek-mtp" in shipped
    text = " ".join(run_cli(["sweep", "--help"], env={"COLUMNS": "300"}).output.split())
    missing = [n for n in shipped if n not in text]
    assert not missing, f"kbench sweep --help leaves out {missing}"


def test_top_level_exit_codes_are_the_readme_s():
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    line = readme[readme.index("Exit codes everywhere:"):].split("\n\n")[0]
    text = " ".join(run_cli(["--help"], env={"COLUMNS": "300"}).output.split())
    helped = text[text.index("Exit codes:"):]
    codes = lambda s: set(re.findall(r"\b(0|1|2|130|143)\b", s))  # noqa: E731
    assert codes(line) == {"0", "1", "2", "130", "143"} and codes(helped) == codes(line), (line, helped)


def test_cli_defaults_are_the_engine_s(monkeypatch, tmp_path):
    # the commands spell their defaults as literals (the CLI starts without importing the engine); each must be
    # the value a Python user of the engine gets
    import dataclasses
    from click.testing import CliRunner
    import inspect
    from pathlib import Path

    import kbench.cli.server_bench_cmd as sb
    import kbench.gate as gate_pkg
    from kbench.gate.baselines import DEFAULT_ROOT
    from kbench.gate.compare import run_gate
    from kbench.server.bench import ServerBenchConfig

    seen = {}

    class Stop(Exception):
        pass

    def fake_gate(baseline, candidate, **kw):
        seen["gate"] = kw
        raise Stop

    monkeypatch.setattr(gate_pkg, "run_gate", fake_gate)
    r = CliRunner().invoke(cli, ["gate", "--baseline", "b", "--candidate", "c"])
    assert isinstance(r.exception, Stop), r.output
    engine = {n: p.default for n, p in inspect.signature(run_gate).parameters.items()
              if p.default is not inspect.Parameter.empty}
    assert seen["gate"] == engine

    def fake_run(cfg, result_filename):
        seen["server"] = cfg
        raise Stop

    monkeypatch.setattr(sb, "_run", fake_run)
    r = CliRunner().invoke(cli, ["server-bench", "--url", "http://127.0.0.1:9"])
    assert isinstance(r.exception, Stop), r.output
    mine = ServerBenchConfig(url="http://127.0.0.1:9")
    for f in dataclasses.fields(ServerBenchConfig):
        if f.name not in ("command", "credentials"):
            assert getattr(seen["server"], f.name) == getattr(mine, f.name), f.name
    from kbench.cli.gate_cmd import baseline

    out = next(p for p in baseline.params if p.name == "root")
    assert Path(out.default) == DEFAULT_ROOT
