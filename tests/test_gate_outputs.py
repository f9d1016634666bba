"""The gate's reports: markdown (file and $GITHUB_STEP_SUMMARY), JUnit XML, JSON."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from gate_synth import CASE_A, CASE_B, CONTEXT, DECODE, gate_cli, sweep_rows, with_time, write_run


def _runs(tmp_path):
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    times = with_time(DECODE, CASE_A, 1.10)          # regression
    times = with_time(CONTEXT, CASE_B, 0.8, times)    # improvement
    cand = write_run(tmp_path / "cand", sweep_rows(times, seed=2, overrides={
        (CONTEXT, CASE_A): {"status": "wrong", "reason": "rel_err 0.3"}}))
    return base, cand


def test_reports_written_and_parseable(tmp_path):
    base, cand = _runs(tmp_path)
    md, xml, js = tmp_path / "gate.md", tmp_path / "gate.xml", tmp_path / "gate.json"
    res = gate_cli("--baseline", base, "--candidate", cand, "--markdown", md, "--junit", xml, "--json", js)
    assert res.exit_code == 1, res.output

    data = json.loads(js.read_text())
    assert data["passed"] is False and data["exit_code"] == 1
    assert data["counts"]["regression"] == 1 and data["counts"]["wrong"] == 1 and data["counts"]["improvement"] == 1
    assert data["threshold"] == 0.05 and data["baseline_hw"] == "NVIDIA H200, SM90"
    # the result whole (as to_dict and json_safe give it), each row on a line of its own
    from kbench.gate import run_gate
    from kbench.values import json_safe

    assert data == json.loads(json.dumps(json_safe(run_gate(base, cand).to_dict()), default=str))
    lines = [ln for ln in js.read_text().splitlines() if ln.lstrip().startswith('{"key": ')]
    assert [json.loads(ln.strip().rstrip(",")) for ln in lines] == data["rows"] and len(lines) == 4

    text = md.read_text()
    assert text.startswith("## ❌ kbench gate: FAIL")
    fail_section = text.split("### Failures")[1].split("###")[0]
    assert DECODE in fail_section and "regression" in fail_section and "wrong" in fail_section
    assert CONTEXT in text.split("### Improvements")[1] and "kbench baseline" in text

    root = ET.parse(xml).getroot()
    rows_suite = next(s for s in root.iter("testsuite") if s.get("name") == "kbench-gate.rows")
    cases = rows_suite.findall("testcase")
    assert len(cases) == len(data["rows"]) == 4
    assert rows_suite.get("tests") == "4" and rows_suite.get("failures") == "2"
    failed = {(c.get("classname"), c.get("name")): c.find("failure").get("type")
              for c in cases if c.find("failure") is not None}
    assert failed == {(f"kbench.gate.{DECODE}", CASE_A.case_id): "regression",
                      (f"kbench.gate.{CONTEXT}", CASE_A.case_id): "wrong"}
    winners_suite = next(s for s in root.iter("testsuite") if s.get("name") == "kbench-gate.winners")
    # case A lost its context row (wrong), so only case B can be compared for its winner
    assert [c.get("name") for c in winners_suite.findall("testcase")] == [CASE_B.case_id]


def test_passing_reports(tmp_path):
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2))
    md, xml = tmp_path / "gate.md", tmp_path / "gate.xml"
    res = gate_cli("--baseline", base, "--candidate", cand, "--markdown", md, "--junit", xml)
    assert res.exit_code == 0
    assert md.read_text().startswith("## ✅ kbench gate: PASS")
    root = ET.parse(xml).getroot()
    assert root.get("failures") == "0" and not list(root.iter("failure"))
    assert len([c for s in root.iter("testsuite") if s.get("name") == "kbench-gate.rows"
                for c in s.findall("testcase")]) == 4


def test_github_step_summary_appended(tmp_path):
    base, cand = _runs(tmp_path)
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    res = gate_cli("--baseline", base, "--candidate", cand, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.exit_code == 1
    text = summary.read_text()
    assert text.startswith("# earlier step\n") and "kbench gate: FAIL" in text and DECODE in text
    gate_cli("--baseline", base, "--candidate", cand, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert summary.read_text().count("kbench gate: FAIL") == 2


def test_unwritable_report_is_bad_input(tmp_path):
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    res = gate_cli("--baseline", base, "--candidate", base, "--junit", tmp_path / "no" / "such" / "gate.xml")
    assert res.exit_code == 2 and res.stderr.startswith("error: cannot write")


def test_markdown_escapes_pipes(tmp_path):
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2, overrides={
        (DECODE, CASE_B): {"status": "failed", "reason": "CUDA error | illegal address"}}))
    md = tmp_path / "gate.md"
    gate_cli("--baseline", base, "--candidate", cand, "--markdown", md)
    line = next(x for x in md.read_text().splitlines() if "illegal address" in x)
    assert "CUDA error \\| illegal address" in line
    import re
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    assert len(cells) == 8  # the pipe in the reason did not add a column


def test_terminal_table_survives_markup_in_reasons(tmp_path):
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    cand = write_run(tmp_path / "cand", sweep_rows(seed=2, overrides={
        (DECODE, CASE_B): {"status": "wrong", "reason": "out[0] [/] [bold]mismatch"}}))
    res = gate_cli("--baseline", base, "--candidate", cand)
    assert res.exit_code == 1, res.output
    assert "out[0] [/] [bold]mismatch" in res.output


def test_main_cli_registers_gate_and_baseline():
    import pytest
    try:
        from kbench.cli.main import cli
    except ImportError as e:  # another command module of the group is not written yet
        pytest.skip(f"kbench.cli.main not importable yet: {e}")
    assert {"gate", "baseline"} <= set(cli.list_commands(None))  # lazy: listed, loaded when run
    assert all(cli.get_command(None, n) is not None for n in ("gate", "baseline"))


def test_end_to_end_through_the_kbench_entry_point(tmp_path):
    """The installed CLI in a fresh process: server-bench kind registered by the gate itself, exit codes."""
    import subprocess
    import sys

    import pytest
    try:
        import kbench.cli.main  # noqa: F401
    except ImportError as e:
        pytest.skip(f"kbench.cli.main not importable yet: {e}")
    import test_gate_server as ts
    ts.ensure_server_kind()
    base = write_run(tmp_path / "base", [ts.server_row(c, seed=1) for c in ts.CASES], kind="server-bench")
    slow = write_run(tmp_path / "slow", [ts.server_row(ts.CASES[0], seed=2, latency=2.4),
                                         ts.server_row(ts.CASES[1], seed=2)], kind="server-bench")

    def kbench(*args):
        return subprocess.run([sys.executable, "-m", "kbench.cli.main", *map(str, args)], capture_output=True,
                              text=True, timeout=120, env={**__import__("os").environ, "COLUMNS": "200"})

    ok = kbench("gate", "--baseline", base, "--candidate", base)
    assert ok.returncode == 0, ok.stderr
    bad = kbench("gate", "--baseline", base, "--candidate", slow, "--json", tmp_path / "g.json")
    assert bad.returncode == 1, bad.stderr
    data = json.loads((tmp_path / "g.json").read_text())
    assert {(r["case_id"], r["metric"]) for r in data["rows"] if r["outcome"] == "regression"} >= {
        (ts.CASES[0], "latency")}
    err = kbench("gate", "--baseline", base, "--candidate", tmp_path / "missing")
    assert err.returncode == 2 and err.stderr.strip().startswith("error: ") and "Traceback" not in err.stderr


def test_markdown_lists_at_most_rows_max_rows_a_table(tmp_path, monkeypatch):
    """A table of the summary lists ROWS_MAX rows and counts the rest (GitHub refuses a step summary over 1 MiB);
    every row stays in the JSON report."""
    from kbench.gate import markdown

    monkeypatch.setattr(markdown, "ROWS_MAX", 1)
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    cand = write_run(tmp_path / "cand", sweep_rows(with_time(DECODE, CASE_A, 1.2, with_time(DECODE, CASE_B, 1.2)),
                                                   seed=2))
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    res = gate_cli("--baseline", base, "--candidate", cand, "--markdown", md, "--json", js)
    assert res.exit_code == 1, res.output
    failures = md.read_text().split("### Failures")[1].split("###")[0]
    assert failures.count("| regression |") == 1 and "... and 1 more rows" in failures
    assert json.loads(js.read_text())["counts"]["regression"] == 2


def test_no_report_is_written_when_another_cannot_be(tmp_path):
    # every output is checked before the gate judges: a bad --json does not come after --markdown and --junit
    # were written, and a $GITHUB_STEP_SUMMARY that cannot be appended to is one line too
    base = write_run(tmp_path / "base", sweep_rows(seed=1))
    md, xml = tmp_path / "new.md", tmp_path / "new.xml"
    res = gate_cli("--baseline", base, "--candidate", base, "--markdown", md, "--junit", xml,
                   "--json", tmp_path / "nonexist" / "g.json")
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        f"error: cannot write {tmp_path / 'nonexist' / 'g.json'} (--json): its folder {tmp_path / 'nonexist'} "
        f"does not exist"]
    assert not md.exists() and not xml.exists() and "PASS" not in res.output
    res = gate_cli("--baseline", base, "--candidate", base, "--markdown", md, "--json", tmp_path)
    assert res.exit_code == 2 and "is a directory" in res.stderr and "--json" in res.stderr and not md.exists()
    res = gate_cli("--baseline", base, "--candidate", base, "--markdown", md,
                   env={"GITHUB_STEP_SUMMARY": str(tmp_path / "gone" / "summary.md")})
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        f"error: GITHUB_STEP_SUMMARY {tmp_path / 'gone' / 'summary.md'}: its folder {tmp_path / 'gone'} does not exist"]
    assert not md.exists()
    res = gate_cli("--baseline", base, "--candidate", base, "--json", "-", "--markdown", "-")
    assert res.exit_code == 2 and "--markdown -: the gate prints its table on stdout" in res.stderr
    assert not Path("-").exists()
    res = gate_cli("--baseline", base, "--candidate", base, "--markdown", md, "--json", "/dev/null")
    assert res.exit_code == 0 and md.exists()  # a device is a stream: fine
