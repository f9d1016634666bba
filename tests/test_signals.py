"""Signals: SIGTERM ends a sweep or a server-bench run like Ctrl-C (exit 143; SIGINT 130), the rows measured are
kept and finalized, the run is marked interrupted with the --resume command to finish it; SIGTERM before any case
ran is one line and nothing written; SIGTERM at any moment of any command (report, gate, baseline, sweep) is 143 and
one line, outputs whole, as Ctrl-C there is 130. (Ctrl-C handled in-process: test_run_session, test_server_bench_faults;
a signal deferred while a folder is swapped: test_trust.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import BASELINE

from kbench.runs.store import load_run


def kbench_process(*args: str) -> subprocess.Popen:
    """`kbench ARGS` in a child of its own, output as text; SIGINT at its default there, so Python installs its
    Ctrl-C handler (a shell's background job, `cmd &` without job control, starts with SIGINT ignored, and a
    test sending Ctrl-C would then wait in vain)."""
    return subprocess.Popen([sys.executable, "-m", "kbench.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def signal_when(p: subprocess.Popen, ready, signum: int, wait_s: float = 60) -> str:
    """Once ready() holds (the process still running), send signum; what the process printed. A process that
    ends first, or is not ready within wait_s, fails the test; one that does not stop is killed."""
    try:
        deadline = time.monotonic() + wait_s
        while not ready():
            assert p.poll() is None and time.monotonic() < deadline, p.stdout.read() if p.poll() is not None else ""
            time.sleep(0.05)
        p.send_signal(signum)
        return p.communicate(timeout=120)[0]
    finally:
        if p.poll() is None:
            p.kill()


# ---- kbench sweep ---------------------------------------------------------------------------------------
def test_sigterm_ends_a_sweep_like_ctrl_c(tmp_path):
    p = kbench_process("sweep", "-b", "1..64", "-q", "1..16", "-k", "64", "--kernels", "reference", "--budget", "0.05",
                       "--out", str(tmp_path))
    runs = []

    def a_row_written():
        runs[:] = [d for d in tmp_path.iterdir() if (d / "rows.jsonl").exists() and (d / "rows.jsonl").stat().st_size]
        return bool(runs)

    out = signal_when(p, a_row_written, signal.SIGTERM, wait_s=120)
    assert p.returncode == 143, out[-2000:]
    run = runs[0]
    n = len(load_run(run).rows)
    assert f"error: stopped by SIGTERM; {n} row(s) kept in {run}; finish with: kbench sweep --resume {run}" in out
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["stopped_by"] == "stopped by SIGTERM"
    assert (run / "rows.parquet").exists() and (run / "rows.csv").exists()
    assert len(load_run(run).rows) > 0


# ---- kbench server-bench (the fake SGLang server) ----------------------------------------------------------
def test_sigterm_finalizes_marks_interrupted_and_exits_143(fake, tmp_path):
    fake.faults.stream_plan = ["ok", "slow"]  # the second case hangs until the signal
    out = tmp_path / "r"
    p = kbench_process("server-bench", "--url", fake.url, "--backend", "sglang", "--skip-warmup", "--batch-size", "1",
                       "2", "--input-len", "8", "--output-len", "2", "--out", str(out))
    output = signal_when(p, lambda: len(fake.seen("/generate")) >= 2, signal.SIGTERM)
    assert p.returncode == 143, output
    (run_dir,) = out.iterdir()
    assert f"kbench server-bench --resume {run_dir}" in output.replace("\n", "")
    assert "stopped by SIGTERM" in output and "Traceback" not in output
    run = load_run(run_dir)
    assert run.manifest["status"] == "interrupted" and run.manifest["stopped_by"] == "stopped by SIGTERM"
    assert run.rows["case_id"].tolist() == ["bs1-in8-out2"]
    assert (run_dir / "rows.parquet").is_file()  # finalized, not left running


def test_sigterm_while_connecting_is_one_line_and_143(tmp_path):
    """A server that accepts the connection and never answers: SIGTERM before any case ran."""
    import socket
    import threading

    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    conns = []
    threading.Thread(target=lambda: conns.append(lsock.accept()), daemon=True).start()
    out = tmp_path / "r"
    p = kbench_process("server-bench", "--url", f"http://127.0.0.1:{lsock.getsockname()[1]}", "--backend", "sglang",
                       "--out", str(out))
    try:
        output = signal_when(p, lambda: bool(conns), signal.SIGTERM)
    finally:
        lsock.close()
    assert p.returncode == 143, output
    assert output.strip().splitlines() == ["error: stopped by SIGTERM before any case ran; nothing was written"]
    assert not out.exists() or not any(out.iterdir())


def test_sigint_in_a_real_process_keeps_rows(fake, tmp_path):
    fake.faults.stream_plan = ["ok", "slow"]  # the second case hangs until Ctrl-C
    out = tmp_path / "r"
    p = kbench_process("server-bench", "--url", fake.url, "--backend", "sglang", "--skip-warmup", "--batch-size",
                       "1,2", "--input-len", "8", "--output-len", "2", "--out", str(out))
    output = signal_when(p, lambda: len(fake.seen("/generate")) >= 2, signal.SIGINT)
    assert p.returncode == 130, output
    assert "error: stopped by SIGINT; 1 row(s) kept in" in output
    (run_dir,) = out.iterdir()
    run = load_run(run_dir)
    assert run.manifest["status"] == "interrupted" and run.rows["case_id"].tolist() == ["bs1-in8-out2"]
    # and from Python in a process that never imported kbench.server (the run kind registers itself on reading)
    code = ("import sys; from kbench.runs.store import ROW_KINDS, load_run; assert 'server-bench' not in ROW_KINDS; "
            "r = load_run(sys.argv[1]); print(r.manifest['kind'], r.rows['case_id'].tolist())")
    fresh = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True)
    assert fresh.stdout.strip() == "server-bench ['bs1-in8-out2']", fresh.stderr[-2000:]


# ---- any command, any moment: SIGTERM is Ctrl-C for the whole run (cli.main), not only where a block says so ------
PAUSE_AT = Path(__file__).resolve().parent / "pause_at.py"
STOPPED = "error: stopped by {}; outputs not yet replaced are as they were"


def stop_at(tmp_path: Path, target: str, when: str, signum: int, *args: str) -> tuple[int, str]:
    """`kbench ARGS` (tests/pause_at.py) held at the first call of target, signalled there: its exit code and output.
    The moment is one the test chooses, not a race: the process waits there until signalled."""
    marker = tmp_path / f".pause-{target.replace(':', '-')}-{when}"
    p = subprocess.Popen([sys.executable, str(PAUSE_AT), target, when, str(marker), "--", *args], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    try:
        out = signal_when(p, marker.exists, signum, wait_s=120)
    finally:
        marker.with_name(marker.name + ".go").write_text("go\n")  # a held signal (a swap) would go on now
    return p.returncode, out


def whole_report(folder: Path, reference: set[str]) -> None:
    """A report --out folder is absent or holds every file an uninterrupted report writes; nothing half written."""
    left = [p.name for p in folder.parent.iterdir() if ".kbench-" in p.name]
    assert not left, left
    if folder.exists():
        assert {p.name for p in folder.iterdir()} == reference


@pytest.fixture(scope="module")
def report_files(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("whole") / "rep"
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "report", str(BASELINE), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return {q.name for q in out.iterdir()}


@pytest.mark.parametrize("target,when", [
    ("kbench.report.runs:load_run", "before"),  # loading the run
    ("kbench.report.build:save_policy", "before"),  # the new folder half written (its own block)
    ("kbench.cli.report_cmd:case_table", "before"),  # the report written, the tables being printed
    ("kbench.cli.report_cmd:wrote_line", "after"),  # the last line about to be printed
])
def test_sigterm_at_any_moment_of_a_report_is_143_one_line_and_outputs_whole(tmp_path, report_files, target, when):
    rep = tmp_path / "rep"
    code, out = stop_at(tmp_path, target, when, signal.SIGTERM, "report", str(BASELINE), "--out", str(rep))
    assert code == 143, out[-3000:]
    assert "Traceback" not in out and out.strip().splitlines()[-1] == STOPPED.format("SIGTERM"), out[-3000:]
    whole_report(rep, report_files)


def test_sigint_late_in_a_report_is_130_as_sigterm_is_143(tmp_path, report_files):
    rep = tmp_path / "rep"
    code, out = stop_at(tmp_path, "kbench.cli.report_cmd:wrote_line", "after", signal.SIGINT, "report", str(BASELINE),
                        "--out", str(rep))
    assert code == 130 and out.strip().splitlines()[-1] == STOPPED.format("SIGINT"), out[-3000:]
    whole_report(rep, report_files)


@pytest.mark.parametrize("args,target,when", [
    (["gate", "--baseline", str(BASELINE), "--candidate", str(BASELINE)], "kbench.gate.export:export", "before"),
    (["baseline", str(BASELINE), "--name", "b", "--out", "bl"], "kbench.gate.baselines:write_multi_baseline",
     "after"),
    (["sweep", "--resume", "/nonexistent-run"], "kbench.engine.request:SweepRequest", "before"),
])
def test_sigterm_in_gate_baseline_and_sweep_is_143_and_one_line(tmp_path, args, target, when):
    code, out = stop_at(tmp_path, target, when, signal.SIGTERM, *args)
    assert code == 143, out[-3000:]
    assert "Traceback" not in out and out.strip().splitlines()[-1] == STOPPED.format("SIGTERM"), out[-3000:]
    if args[0] == "baseline":  # written before the signal: whole
        assert len(load_run(tmp_path / "bl" / "b").rows) == 224


def test_sigterm_after_the_commands_block_is_143_and_one_line():
    """The `kbench` process's own handler (cli.main.main), outside the command's block: a SIGTERM there (here sent
    by the command itself as it returns) is still 143 and the one line."""
    code = ("import signal, sys; import kbench.cli.main as m\n"
            "def cli(prog_name):\n    signal.raise_signal(signal.SIGTERM)\n    sys.exit(0)\n"
            "m.cli = cli; m.main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 143 and p.stderr.strip() == STOPPED.format("SIGTERM"), (p.returncode, p.stderr)


def test_an_error_a_signal_caused_ends_as_the_signal_and_a_huge_integer_is_one_line(monkeypatch):
    # a SIGTERM that cuts an import in half surfaces as RuntimeError (matplotlib's class set-up) or ImportError (a C
    # extension's init), not as KeyboardInterrupt: exit 143 and the stop line, not a traceback and exit 1
    import click
    from click.testing import CliRunner

    from kbench.cli.errors import one_line_errors
    from kbench.runs import signals

    def command(exc):
        @click.command()
        @one_line_errors
        def cmd():
            raise exc
        return cmd

    def caused_by(interrupt):
        try:
            try:
                raise interrupt
            except KeyboardInterrupt as e:
                raise RuntimeError("Error calling __set_name__ on 'deprecate_privatize_attribute'") from e
        except RuntimeError as e:
            return e

    monkeypatch.setattr(signals, "_RAISED", [])
    r = CliRunner().invoke(command(caused_by(signals.Terminated())))
    assert r.exit_code == 143 and r.output.startswith("error: stopped by SIGTERM")
    r = CliRunner().invoke(command(ImportError("initialization failed")))  # the chain lost it: no signal, an error
    assert isinstance(r.exception, ImportError)
    monkeypatch.setattr(signals, "_RAISED", [signal.SIGTERM])  # ... unless this process raised a SIGTERM
    r = CliRunner().invoke(command(ImportError("initialization failed")))
    assert r.exit_code == 143 and "Traceback" not in r.output
    monkeypatch.setattr(signals, "_RAISED", [])
    try:
        int("1" * 5000)
    except ValueError as e:
        huge = e
    r = CliRunner().invoke(command(huge))
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        "error: the input holds an integer of more than 4,300 digits (Python reads none that long; no size kbench "
        "takes is near it)"]
    r = CliRunner().invoke(command(ValueError("a bug")))
    assert isinstance(r.exception, ValueError)  # an error of kbench's own still goes up
