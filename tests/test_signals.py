"""Signals: SIGTERM ends a sweep or a server-bench run like Ctrl-C (exit 143; SIGINT 130), the rows measured are
kept and finalized, the run is marked interrupted with the --resume command to finish it; SIGTERM before any case
ran is one line and nothing written. (Ctrl-C handled in-process: test_run_session, test_server_bench_faults;
a signal deferred while a folder is swapped: test_trust.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

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
    assert "interrupted (stopped by SIGTERM)" in out and "--resume" in out
    run = runs[0]
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
    assert "interrupted; 1 row(s) kept" in output
    (run_dir,) = out.iterdir()
    run = load_run(run_dir)
    assert run.manifest["status"] == "interrupted" and run.rows["case_id"].tolist() == ["bs1-in8-out2"]
    # and from Python in a process that never imported kbench.server (the run kind registers itself on reading)
    code = ("import sys; from kbench.runs.store import ROW_KINDS, load_run; assert 'server-bench' not in ROW_KINDS; "
            "r = load_run(sys.argv[1]); print(r.manifest['kind'], r.rows['case_id'].tolist())")
    fresh = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True)
    assert fresh.stdout.strip() == "server-bench ['bs1-in8-out2']", fresh.stderr[-2000:]
