"""The bandwidth ceilings the roofline is drawn against: copy and read bandwidth measured by `kbench env` on a
CPU, the read ceiling as the fastest of several read-only probes (Triton's checked in its interpreter), and the
read ceiling in the typed manifest keeping old runs comparable."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import BASELINE, run_cli

from kbench.runs.store import load_run


def test_env_measures_copy_and_read_bandwidth_on_a_cpu():
    r = run_cli(["env", "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["copy_bandwidth_gbs"] > 0 and info["read_bandwidth_gbs"] > 0
    assert info["read_over_copy"] == round(info["read_bandwidth_gbs"] / info["copy_bandwidth_gbs"], 3)


def test_env_from_python_is_the_json_the_command_prints(monkeypatch, tmp_path):
    """kbench.engine.environment.environment() is `kbench env --json` without the CLI (one place for both)."""
    from kbench.engine.environment import environment

    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    info = environment(bandwidth=False)
    r = run_cli(["env", "--json", "--no-bandwidth"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == json.loads(json.dumps(info, default=str))
    assert "copy_bandwidth_gbs" not in info and info["flashinfer_cache"]["workspace_base"] == str(tmp_path)


def test_read_ceiling_is_the_fastest_of_several_read_only_probes(monkeypatch):
    # on the H200 one torch reduction read 4,017 GB/s while fa2 read KV at 4,370: a single probe is no ceiling
    from kbench.timing import hardware
    probes = hardware.read_probes("cpu", nbytes=16 << 20, reps=4)
    assert set(probes) == set(hardware.CPU_PROBES) and all(v > 0 for v in probes.values())
    monkeypatch.setattr(hardware, "read_probes", lambda *a, **k: {"sum-bf16": 3.0, "gemv-bf16": 5.0, "amax-int32": 4.0})
    assert hardware.read_bandwidth_gbs("cpu") == 5.0
    monkeypatch.setattr(hardware, "read_probes", lambda *a, **k: {})
    assert hardware.read_bandwidth_gbs("cuda") is None  # no device: no figure, never 0


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


def test_memory_peak_from_nvml_and_a_ceiling_above_it_is_named(monkeypatch):
    """The theoretical peak is 2 transfers per clock x the max memory clock x the bus width (H100 SXM's data sheet
    says 3.35 TB/s); a read ceiling more than 3% above it is no ceiling (the H200 printed 5,507 GB/s once, in a
    call whose timer was broken), and the sweep and `kbench env` say so."""
    from types import SimpleNamespace

    from kbench.timing import hardware

    assert hardware.peak_gbs(2619, 5120) == pytest.approx(3352.3, abs=0.1)  # H100 SXM
    assert hardware.peak_gbs(3201, 6144) == pytest.approx(4916.7, abs=0.1)  # H200
    assert hardware.peak_gbs(0, 6144) is None and hardware.peak_gbs(3201, 0) is None
    nvml = SimpleNamespace(NVML_CLOCK_MEM=2, nvmlDeviceGetMaxClockInfo=lambda h, kind: 3201 if kind == 2 else 1980,
                           nvmlDeviceGetMemoryBusWidth=lambda h: 6144)
    monkeypatch.setattr(hardware, "_handle", lambda index: "h0")
    monkeypatch.setattr(hardware, "_nvml", nvml)
    assert hardware.memory_peak_gbs(0) == pytest.approx(4916.7, abs=0.1)
    monkeypatch.setattr(nvml, "nvmlDeviceGetMemoryBusWidth", lambda h: 1 / 0)  # an NVML without the call
    assert hardware.memory_peak_gbs(0) is None
    monkeypatch.setattr(hardware, "_handle", lambda index: None)  # no driver
    assert hardware.memory_peak_gbs(0) is None
    assert hardware.ceiling_problem(4605.0, 4916.7) is None  # the H200's ceiling: 94% of the peak
    assert hardware.ceiling_problem(5060.0, 4916.7) is None  # within the 3% slack
    msg = hardware.ceiling_problem(5507.0, 4916.7)
    assert "5,507 GB/s is above the memory's theoretical peak 4,917 GB/s" in msg
    assert hardware.ceiling_problem(5507.0, None) is None and hardware.ceiling_problem(None, 4916.7) is None
