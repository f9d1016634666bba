"""Issue #17, honest edges: outputs that cannot be written, atomic rewrites, resume/baseline/gate safety,
signals, devices, CLI consistency. Each test names the case in /work/notes/edges-table.md."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from gate_synth import CASE_A, DECODE, gate_cli, sweep_rows, write_run

from kbench.runs import atomic
from kbench.cli.main import COMMANDS, cli
from kbench.errors import BadInput
from kbench.runs.store import load_run

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "results" / "baselines" / "h200-draft-extend-kv4096"
TINY = ["-b", "1", "-q", "1,2", "-k", "64", "--budget", "0.02"]


def run_cli(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)


def one_error_line(r, code=2):
    assert r.exit_code == code, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def tree(p: Path) -> dict:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """A complete CPU sweep run (reference rows ok, the GPU kernels skipped)."""
    out = tmp_path_factory.mktemp("cpu")
    r = run_cli(["sweep", *TINY, "--out", out])
    assert r.exit_code == 0, r.output
    return next(p for p in out.iterdir() if p.is_dir())


# ---- outputs that cannot be written ------------------------------------------------------------------


# ---- resume ----------------------------------------------------------------------------------------------


# ---- baselines -------------------------------------------------------------------------------------------


# ---- the gate never passes vacuously ------------------------------------------------------------------


# ---- signals ---------------------------------------------------------------------------------------------


# ---- devices ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("devs,says", [("0", "no GPU"), ("5", "no GPU"), ("0,0", "listed twice")])
def test_devices_validated(tmp_path, devs, says):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks a machine without a GPU")
    line = one_error_line(run_cli(["sweep", *TINY, "--devices", devs, "--out", tmp_path]))
    assert says in line and not list(tmp_path.iterdir())


# ---- CLI consistency -------------------------------------------------------------------------------------
def test_click_usage_errors_are_one_kbench_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", "--no-such-option"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "error: No such option '--no-such-option'. (see kbench sweep --help)"] or (
        len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: No such option")), r.stderr
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "select", "--policy", "x"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Missing option" in r.stderr


def test_closed_pipe_is_quiet_and_exit_0(tmp_path):
    r = subprocess.run(f"{sys.executable} -m kbench.cli.main report {BASELINE} --out {tmp_path / 'rep'} | head -2",
                       shell=True, capture_output=True, text=True, executable="/bin/bash",
                       env={**os.environ, "COLUMNS": "80"})
    assert len(r.stdout.splitlines()) == 2 and r.stderr == "", r.stderr
    r = subprocess.run(f"set -o pipefail; {sys.executable} -m kbench.cli.main report {BASELINE} --out "
                       f"{tmp_path / 'rep'} | head -1 >/dev/null", shell=True, executable="/bin/bash")
    assert r.returncode == 0


# ---- a CPU path that tells the truth ---------------------------------------------------------------------
def test_report_of_a_cpu_run_says_why_and_points_to_the_baseline(tmp_path, cpu_run):
    line = one_error_line(run_cli(["report", cpu_run, "--out", tmp_path / "rep"]))
    assert "this run is from a CPU" in line and f"{2 * _flashinfer_kernels()} skipped" in line
    assert "2 ok row(s) are the float32 reference" in line and "kbench report results/baselines/h200" in line
    assert not (tmp_path / "rep").exists()


def test_cpu_case_too_big_for_host_memory_is_skipped_before_allocating(tmp_path, monkeypatch):
    from kbench.timing import hardware
    from kbench.cases.scenario import apply_overrides, load_scenario
    from kbench.engine.sweep import run_sweep

    monkeypatch.setattr(hardware, "host_available_bytes", lambda: 3 << 30)
    sc = apply_overrides(load_scenario("quick"), batch_size="1,256", q_len="16", kv_len="32768",
                         kernels="reference", budget_s=0.02)
    res = run_sweep(sc, tmp_path)
    big = res.rows[res.rows["batch_size"] == 256].iloc[0]
    assert big.status == "skipped" and "GiB of host memory, 3.0 GiB available" in big.reason
    assert res.rows[res.rows["batch_size"] == 1].iloc[0].status == "ok"


def test_long_cpu_sweep_says_so_at_the_start(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CPU warning")
    p = subprocess.Popen([sys.executable, "-m", "kbench.cli.main", "sweep", "-s", "draft-extend", "--out",
                          str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "COLUMNS": "300"})
    try:
        head = [p.stdout.readline() for _ in range(2)]
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
    text = " ".join(" ".join(head).split())
    assert "1008 cases" in text and "take up to about" in text and "narrow the grid" in text


def test_env_measures_copy_and_read_bandwidth_on_a_cpu():
    r = run_cli(["env", "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["copy_bandwidth_gbs"] > 0 and info["read_bandwidth_gbs"] > 0
    assert info["read_over_copy"] == round(info["read_bandwidth_gbs"] / info["copy_bandwidth_gbs"], 3)


def test_read_ceiling_is_the_fastest_of_several_read_only_probes(monkeypatch):
    # on the H200 one torch reduction read 4,017 GB/s while fa2 read KV at 4,370: a single probe is no ceiling
    from kbench.timing import hardware
    probes = hardware.read_probes("cpu", nbytes=16 << 20, reps=4)
    assert set(probes) == set(hardware.CPU_PROBES) and all(v > 0 for v in probes.values())
    monkeypatch.setattr(hardware, "read_probes", lambda *a, **k: {"sum-bf16": 3.0, "gemv-bf16": 5.0, "amax-int32": 4.0})
    assert hardware.read_bandwidth_gbs("cpu") == 5.0
    monkeypatch.setattr(hardware, "read_probes", lambda *a, **k: {})
    assert hardware.read_bandwidth_gbs("cuda") is None  # no device: no figure, never 0


# ---- plots a reader understands --------------------------------------------------------------------------
def test_heatmap_colorbar_has_a_scale_and_roofline_says_its_ceiling(tmp_path, monkeypatch):
    from kbench.report import plots
    from kbench.report.build import build_report

    figs = {}
    real = plots._save

    def keep(fig, path):
        figs[Path(path).name] = fig
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    build_report([BASELINE], tmp_path / "rep")
    heat = next(f for n, f in figs.items() if n.startswith("speedup-heatmap"))
    cbar = heat.axes[-1]
    labels = [t.get_text() for t in cbar.get_yticklabels() if t.get_text()]
    assert len(labels) >= 5 and "1x" in labels, labels
    roof = figs["roofline.png"].axes[0]
    assert "copy bandwidth" in roof.get_ylabel() and "may pass 1.0" in roof.get_title()
    assert [t.get_text() for t in roof.get_xticklabels()] == ["268", "1,074"]


# ---- CI logs ---------------------------------------------------------------------------------------------
def test_without_a_terminal_tables_keep_words_and_progress_is_logged(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["KBENCH_PROGRESS_S"] = "0"
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", *TINY, "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "trtllm-decode" in r.stdout and "trtllm-context" in r.stdout  # one word, not trtl/lm-d/ecod/e
    n = 2 * (_flashinfer_kernels() + 1)  # two cases x (every kernel in "all" + the reference)
    assert "  measuring: 1/" + str(n) + " after" in r.stdout and f"  measuring: {n}/{n} after" in r.stdout


def test_read_bandwidth_in_the_typed_manifest_keeps_old_runs_comparable(tmp_path):
    """A run with the read ceiling and the committed baseline (from before it) merge, pool and gate alike."""
    from kbench.runs.manifest import GATE, MERGE, POOL, Manifest, comparable

    old = load_run(BASELINE)
    new_dir = tmp_path / "new"
    shutil.copytree(BASELINE, new_dir)
    m = json.loads((new_dir / "manifest.json").read_text())
    m.update(read_bandwidth_gbs=4418.0, roofline_ceiling="read_bandwidth_gbs")
    (new_dir / "manifest.json").write_text(json.dumps(m))
    new = load_run(new_dir)
    assert Manifest.of(old).ceiling == ("copy", pytest.approx(4134.36, abs=0.01))
    assert Manifest.of(new).ceiling == ("read", 4418.0)
    for purpose in (MERGE, POOL, GATE):
        v = comparable(old, new, purpose)
        assert v.ok and not v.warnings, (purpose, v)


def _flashinfer_kernels() -> int:
    """Kernels in "all" other than the reference: each is one skipped row per case on a CPU."""
    from kbench.kernels.registry import select

    return len([k for k in select(["all"]) if k.name != "reference"])


def test_triton_read_kernel_sums_every_element_in_the_interpreter(tmp_path):
    # the GPU read ceiling's Triton probes (kbench.timing.hardware.triton_read_probes) checked where Triton is installed,
    # in its CPU interpreter: each shape must read (sum) every element, a ragged tail included (the tiled, the
    # persistent and the TMA kernels)
    pytest.importorskip("triton")
    code = ("import torch; from kbench.timing import hardware\n"
            "x = torch.rand(3 * 8192 * 4 * 4 + 256 * 7)\n"  # the TMA probes take whole rows of 256
            "p = hardware.triton_read_probes(x)\n"
            "want = [f'triton-{b}x{i}w{w}' for b, i, w in hardware.TRITON_SHAPES]\n"
            "want += [f'triton-persistent-{b}x{s}w{w}' for b, s, w in hardware.TRITON_PERSISTENT]\n"
            "want += [f'triton-tma-{m}x{n}s{st}w{w}' for m, n, st, w, _ in hardware.TRITON_TMA]\n"
            "assert sorted(p) == sorted(want), p\n"
            "for fn in p.values(): assert torch.allclose(fn().sum(), x.sum(), rtol=1e-5)\n"
            "print('ok', len(p))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "TRITON_INTERPRET": "1"})
    assert r.returncode == 0 and "ok 10" in r.stdout, r.stderr[-2000:]

