"""Run `kbench layers` on a CPU for the signal tests: the device probe answers a CUDA device that is the CPU, the
timer is the wall clock, the preset's dimensions are toy ones, and before the Nth part is built the process writes
MARKER and waits (up to 120 s) for the signal the test sends there. Test-only; kbench has no such hook.

    python tests/layers_on_cpu.py MARKER N -- layers-args...
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    marker, n = sys.argv[1], int(sys.argv[2])
    assert sys.argv[3] == "--"
    import kbench.cases.model_dims as md
    import kbench.kernels.model_layers as ml
    import kbench.timing.probe as probe
    import kbench.timing.timer as timer
    from kbench.device import DeviceInfo

    class CpuAsGpu(DeviceInfo):
        @property
        def torch_device(self) -> str:
            return "cpu"

    probe.probe_device = lambda *a, **k: CpuAsGpu(cuda=True, name="CPU as a GPU (test)", sm=90)

    class WallTimer(timer.WallClockTimer):
        def __init__(self, rule, *a, **k):
            super().__init__(timer.StopRule(budget_s=0.01, min_samples=3))

    timer.GraphTimer = WallTimer
    md.DIMS["llama3-8b"] = md.ModelDims(64, 128, 256, 2)
    orig, calls = ml.build, [0]

    def build(*a, **k):
        calls[0] += 1
        if calls[0] == n:
            Path(marker).write_text("here\n")
            t0 = time.monotonic()
            while time.monotonic() - t0 < 120:
                time.sleep(0.05)
        return orig(*a, **k)

    ml.build = build
    from kbench.cli.main import cli

    cli.main(sys.argv[4:], prog_name="kbench")


if __name__ == "__main__":
    main()
