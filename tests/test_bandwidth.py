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
