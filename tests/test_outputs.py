"""Outputs that cannot be written (a file, /proc, an empty path, a full or read-only disk): one `error:` line,
exit 2, before anything runs where that can be known; result files replaced atomically, so a failed write
keeps the old file whole and leaves no temporary file."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gate_synth import gate_cli, sweep_rows, write_run
from helpers import BASELINE, TINY, one_error_line, run_cli, server_bench_cli

from kbench.errors import BadInput
from kbench.runs import atomic
from kbench.runs.store import load_run


# ---- kbench sweep, report, merge, baseline, gate ----------------------------------------------------------
@pytest.mark.parametrize("where", ["file", "proc", "empty", "under-file"])
def test_sweep_out_unwritable_is_one_line_before_anything_runs(tmp_path, where):
    f = tmp_path / "a-file"
    f.write_text("keep")
    out = {"file": f, "proc": "/proc/kbench-out", "empty": "", "under-file": f / "sub"}[where]
    t0 = time.perf_counter()
    line = one_error_line(run_cli(["sweep", *TINY, "--out", out]))
    assert "--out" in line and time.perf_counter() - t0 < 5
    assert f.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_jit_cache_report_merge_baseline_outputs_unwritable(tmp_path, cpu_run):
    f = tmp_path / "a-file"
    f.write_text("keep")
    assert "--jit-cache" in one_error_line(run_cli(["sweep", *TINY, "--jit-cache", f, "--out", tmp_path / "r"]))
    assert "--out" in one_error_line(run_cli(["report", BASELINE, "--out", f]))
    assert "--out" in one_error_line(run_cli(["merge", cpu_run, cpu_run, "--out", f]))
    assert "--out" in one_error_line(run_cli(["baseline", cpu_run, "--name", "b", "--root", f]))  # --root: the old spelling of --out
    assert "--out" in one_error_line(run_cli(["baseline", cpu_run, "--name", "b", "--out", "/proc/kb"]))
    assert f.read_text() == "keep" and not (tmp_path / "r").exists()


@pytest.mark.parametrize("bad", [["-b", "abc"], ["--budget-minutes", "3"], ["--shard", "3/2"], ["--seed", "-1"]])
def test_bad_input_leaves_no_new_jit_cache_folder(tmp_path, bad):
    # the --jit-cache folder was made before the other options were read: bad input left it behind, empty
    one_error_line(run_cli(["sweep", *TINY, "--jit-cache", tmp_path / "jc" / "new", "--out", tmp_path / "r", *bad]))
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_failure_keeps_the_old_file_and_no_tmp(tmp_path):
    p = tmp_path / "gate.json"
    p.write_text('{"valid": true}\n')

    def half_then_full(tmp):
        tmp.write_text('{"trunc')
        raise OSError(28, "No space left on device")

    with pytest.raises(BadInput, match="cannot write .*gate.json: No space left"):
        atomic.write_with(p, half_then_full)
    assert json.loads(p.read_text()) == {"valid": True}
    assert sorted(x.name for x in tmp_path.iterdir()) == ["gate.json"]


def test_gate_json_on_a_full_disk_keeps_the_valid_file(tmp_path, monkeypatch):
    base = write_run(tmp_path / "b", sweep_rows(seed=1))
    cand = write_run(tmp_path / "c", sweep_rows(seed=2))
    out = tmp_path / "gate.json"
    assert gate_cli("--baseline", base, "--candidate", cand, "--json", out).exit_code == 0
    good = out.read_text()
    import kbench.gate.json_out as jo

    class FillingFile:  # the JSON is written a piece at a time: the disk takes the first 10 characters
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            self.f.write(text[:10])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(jo, "open", lambda *a, **kw: FillingFile(open(*a, **kw)), raising=False)
    r = gate_cli("--baseline", base, "--candidate", cand, "--json", out)
    monkeypatch.undo()
    assert r.exit_code == 2 and "No space left" in r.output and "Traceback" not in r.output
    assert out.read_text() == good and not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*tmp*"))


def _tmpfs(path: Path, size="200k"):
    path.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    return path


def test_full_disk_mid_sweep_keeps_complete_rows_and_marks_interrupted(tmp_path):
    mnt = _tmpfs(tmp_path / "small", "48k")
    try:
        r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", "-b", "1,2,3,4", "-q", "1..8",
                            "-k", "64", "--kernels", "reference", "--budget", "0.01", "--out", str(mnt)],
                           capture_output=True, text=True, timeout=300)
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
        assert err[-1].startswith("error: ") and "No space left" in err[-1] and "--resume" in err[-1]
        run = next(p for p in mnt.iterdir() if p.is_dir())
        m = json.loads((run / "manifest.json").read_text())
        assert m["status"] == "interrupted" and "No space left" in m["stopped_by"]
        lines = (run / "rows.jsonl").read_text().splitlines()
        assert 0 < len(lines) < 32 and all(json.loads(x)["case_id"] for x in lines)  # every row complete
        assert not [p for p in mnt.rglob("*") if ".tmp" in p.name]
    finally:
        subprocess.run(["umount", str(mnt)])


# ---- kbench server-bench ----------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["file", "proc", "nested-in-file"])
def test_unwritable_out_is_one_line_before_anything_runs(fake, tmp_path, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    out = {"file": blocker, "proc": Path("/proc/kbench-results"), "nested-in-file": blocker / "results"}[where]
    r = server_bench_cli("--url", fake.url, "--skip-warmup", "--out", out)
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: --out ") and "Traceback" not in r.output
    assert fake.requests == []  # nothing ran: not even a probe of the server
    assert blocker.read_text() == "keep me"


def test_result_file_write_failure_keeps_the_old_file(fake, tmp_path, monkeypatch):
    lines = tmp_path / "result.jsonl"
    lines.write_text('{"run_name": "earlier"}\n')
    import kbench.runs.atomic as atomic

    real_replace = os.replace

    def full_disk(src, dst):  # the disk is full when the JSON line lands in --result-filename
        if Path(dst) == lines:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", full_disk)
    r = server_bench_cli("--url", fake.url, "--skip-warmup", "--input-len", "8", "--output-len", "2",
               "--result-filename", lines, "--out", tmp_path / "r")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1].startswith("error: cannot write ")
    assert "No space left on device" in r.output
    (run_dir,) = (tmp_path / "r").iterdir()
    run = load_run(run_dir)  # the row is in the journal; the run says why it stopped
    assert run.manifest["status"] == "interrupted" and "No space left" in run.manifest["stopped_by"]
    assert run.rows["case_id"].tolist() == ["bs1-in8-out2"]
    assert lines.read_text() == '{"run_name": "earlier"}\n'  # untouched, not truncated
    assert not list(tmp_path.glob(".result.jsonl.*"))  # no temporary file left behind


def test_result_filename_through_a_link_and_to_a_fifo(fake, tmp_path):
    (tmp_path / "all.jsonl").write_text('{"run_name": "earlier"}\n')
    (tmp_path / "latest.jsonl").symlink_to("all.jsonl")
    args = ["--url", fake.url, "--skip-warmup", "--input-len", "8", "--output-len", "2"]
    r = server_bench_cli(*args, "--result-filename", tmp_path / "latest.jsonl", "--out", tmp_path / "r1")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "latest.jsonl").is_symlink()  # the link kept, its file appended to
    lines = (tmp_path / "all.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["batch_size"] == 1
    fifo = tmp_path / "pipe"  # a line at a time would reach a reader as one line then EOF: refused up front
    os.mkfifo(fifo)
    line = one_error_line(server_bench_cli(*args, "--result-filename", fifo, "--out", tmp_path / "r2"))
    assert "named pipe" in line and fifo.is_fifo()


@pytest.mark.parametrize("opts,fill,needle", [("ro,size=100k", False, "Read-only file system"),
                                              ("size=200k", True, "No space left on device")])
def test_out_on_a_read_only_or_full_filesystem(fake, tmp_path, opts, fill, needle):
    """A real tmpfs (needs mount rights: root in CI containers; skipped elsewhere)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        if fill:
            with pytest.raises(OSError, match="No space left"):
                with open(mnt / "fill", "wb") as f:
                    while True:
                        f.write(b"\0" * 4096)
                        f.flush()
        r = server_bench_cli("--url", fake.url, "--skip-warmup", "--out", mnt / "results")
        assert r.exit_code == 2, r.output
        (line,) = r.output.strip().splitlines()
        assert line == f"error: --out {mnt / 'results'}: cannot write there ({needle})"
        assert fake.requests == []
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# ---- a file the user names: links followed, devices and FIFOs written through, inputs never replaced ------------
def _gate_run(tmp_path):
    return write_run(tmp_path / "run", sweep_rows(seed=1))


def test_a_linked_output_writes_the_file_the_link_points_to_and_keeps_the_link(tmp_path):
    run = _gate_run(tmp_path)
    (tmp_path / "latest.json").symlink_to("gate-1.json")
    r = gate_cli("--baseline", run, "--candidate", run, "--json", tmp_path / "latest.json")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "latest.json").is_symlink() and json.loads((tmp_path / "gate-1.json").read_text())["counts"]
    sink = tmp_path / "sink"
    sink.symlink_to("/dev/null")  # was replaced by a plain file (as root, --json /dev/null replaced /dev/null)
    assert gate_cli("--baseline", run, "--candidate", run, "--markdown", sink).exit_code == 0
    assert sink.is_symlink() and Path("/dev/null").is_char_device()


def test_a_fifo_output_is_written_through_not_replaced(tmp_path):
    import threading

    run = _gate_run(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    r = gate_cli("--baseline", run, "--candidate", run, "--junit", fifo)
    reader.join(10)
    assert r.exit_code == 0, r.output
    assert fifo.is_fifo() and got and got[0].startswith(b"<?xml") and b"<testsuites" in got[0]


@pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="needs /dev/full")
def test_a_device_that_refuses_the_write_is_one_line(tmp_path):
    run = _gate_run(tmp_path)
    (tmp_path / "full").symlink_to("/dev/full")
    r = gate_cli("--baseline", run, "--candidate", run, "--json", tmp_path / "full")  # known only when written:
    err = r.stderr.strip().splitlines()  # the gate's table is on stdout already
    assert r.exit_code == 2 and len(err) == 1 and err[0].startswith("error: ") and "No space left on device" in err[0]
    assert Path("/dev/full").is_char_device() and "Traceback" not in r.output
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    line = one_error_line(run_cli(["gate", "--baseline", run, "--candidate", run, "--json", tmp_path / "to-dir"]))
    assert "is a directory" in line and (tmp_path / "to-dir").is_symlink() and not any((tmp_path / "dir").iterdir())


def test_an_output_never_replaces_an_input_nor_another_output(tmp_path):
    import hashlib

    run = _gate_run(tmp_path)
    digest = lambda p: hashlib.sha256(Path(p).read_bytes()).hexdigest()  # noqa: E731
    before = {p.name: digest(p) for p in run.iterdir() if p.is_file()}
    line = one_error_line(gate_cli("--baseline", run, "--candidate", run, "--markdown", run / "manifest.json"))
    assert "a file of the input" in line and "--markdown" in line
    (tmp_path / "rows-link.csv").symlink_to(run / "rows.csv")  # through a link too
    line = one_error_line(gate_cli("--baseline", run, "--candidate", run, "--junit", tmp_path / "rows-link.csv"))
    assert "rows.csv" in line
    line = one_error_line(gate_cli("--baseline", run, "--candidate", run, "--markdown", tmp_path / "o.md",
                                   "--json", tmp_path / "o.md"))
    assert "name the same file" in line and not (tmp_path / "o.md").exists()
    line = one_error_line(run_cli(["recommend", BASELINE, "--engine", "sglang", "--batch-size", "16", "--q-len", "4",
                                   "--kv-len", "4096", "--markdown", BASELINE / "rows.csv"]))
    assert "a file of the input" in line
    assert {p.name: digest(p) for p in run.iterdir() if p.is_file()} == before
    assert run_cli(["report", run, "--out", tmp_path / "rep"]).exit_code == 0
    policy = tmp_path / "rep" / "policy.json"
    kept = digest(policy)
    line = one_error_line(run_cli(["export", policy, "--out", policy]))
    assert "that is the input" in line and digest(policy) == kept
