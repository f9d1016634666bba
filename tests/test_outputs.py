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

    def full(res):  # the text is produced, the disk takes only part of it
        raise OSError(28, "No space left on device")

    real_write = Path.write_text

    def partial_write(self, text, *a, **kw):
        real_write(self, text[:10], *a, **kw)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", partial_write)
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
