"""Safety: http(s) URLs only, no shell anywhere, run and file names cannot leave the output folder.
(HTML escaping of result strings: tests/test_report_cli.py::test_html_is_self_contained_and_escapes_result_strings.)"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbench.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent


def one_error_line(r):
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1:21", "javascript:alert(1)",
                                 "localhost:30000", "127.0.0.1:30000", "http://", "https:///x", "gopher://h:70",
                                 "data:text/plain,hi", "//127.0.0.1:1", "", "ws://127.0.0.1:1"])
def test_only_http_and_https_urls(tmp_path, url):
    r = CliRunner().invoke(cli, ["server-bench", "--url", url, "--out", str(tmp_path / "r")])
    assert "--url" in one_error_line(r)
    assert not (tmp_path / "r").exists()


def test_no_shell_anywhere():
    offenders = []
    for d in ("kbench", "cli", "kernels", "scenarios"):
        for p in (ROOT / d).rglob("*.py"):
            text = p.read_text(encoding="utf-8")
            for pat in (r"shell\s*=\s*True", r"\bos\.system\(", r"\bos\.popen\(", r"\bos\.exec\w*\(",
                        r"\bos\.spawn\w*\(", r"\bcommands\.getoutput", r"\beval\(", r"\bexec\("):
                offenders += [f"{p.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(pat, text)]
    assert offenders == []


def files_under(root: Path) -> set[Path]:
    return {p.resolve() for p in root.rglob("*")}


def test_sweep_name_cannot_escape_out(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    for name in ("../../evil", "/abs/evil", "..", "a/../../b", "..\\..\\x", "\x00", "~root"):
        r = CliRunner().invoke(cli, ["sweep", "-b", "1", "-q", "1", "-k", "16", "--kernels", "reference",
                                     "--budget", "0.02", "--page-size", "16", "--name", name, "--out", str(out)])
        assert r.exit_code == 0, r.output
    everything = files_under(tmp_path)
    assert everything and all(p == out.resolve() or out.resolve() in p.parents or p in out.resolve().parents
                              for p in everything), sorted(everything)
    assert len(list(out.iterdir())) == 7 and all(p.is_dir() and "/" not in p.name for p in out.iterdir())


def test_scenario_name_cannot_escape_out(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('name = "../../../../evil"\nmodel = "llama3-8b"\nkernels = ["reference"]\n'
                 '[grid]\nbatch_size = 1\nq_len = 1\nkv_len = 16\npage_size = 16\n[timing]\nbudget_s = 0.02\n')
    out = tmp_path / "x" / "out"
    r = CliRunner().invoke(cli, ["sweep", "--scenario", str(f), "--out", str(out)])
    assert r.exit_code == 0, r.output
    (run,) = out.iterdir()
    assert run.name.startswith("evil-")
    assert {p for p in tmp_path.iterdir()} == {f, tmp_path / "x"}


def test_server_bench_run_name_cannot_escape_out(tmp_path):
    from fake_sglang import FakeSGLang, Faults

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 512}))
    out = tmp_path / "deep" / "out"
    with FakeSGLang(Faults(model_path=str(model))) as srv:
        for name in ("../x", "../../../../tmp/evil", "/etc/x", ".."):
            r = CliRunner().invoke(cli, ["server-bench", "--url", srv.url, "--backend", "sglang", "--skip-warmup",
                                         "--batch-size", "1", "--input-len", "4", "--output-len", "2",
                                         "--run-name", name, "--out", str(out)])
            assert r.exit_code == 0, r.output
    assert {p.name for p in tmp_path.iterdir()} == {"model", "deep"}
    assert {p.name for p in (tmp_path / "deep").iterdir()} == {"out"}
    runs = list(out.iterdir())
    assert len(runs) == 4 and all(p.name.startswith("server-bench-") for p in runs)
    # the name is kept as given in the data (JSON lines, rows), only the folder name is sanitized
    lines = [json.loads(p.joinpath("result.jsonl").read_text()) for p in runs]
    assert {x["run_name"] for x in lines} == {"../x", "../../../../tmp/evil", "/etc/x", ".."}


@pytest.mark.parametrize("name", ["../../x", "../x", "/abs", "a/b", "..", ".", ""])
def test_baseline_name_cannot_escape_root(tmp_path, name):
    from report_synth import flip_back_rows, write_run

    run = write_run(tmp_path / "run", flip_back_rows(bss=(1,), kvs=(1024,), qs=(1, 2)))
    root = tmp_path / "r1" / "r2" / "baselines"
    r = CliRunner().invoke(cli, ["baseline", str(run), "--name", name, "--root", str(root)])
    assert "--name" in one_error_line(r)
    assert {p.name for p in tmp_path.iterdir()} == {"run"}
