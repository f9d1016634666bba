"""Copy vs read bandwidth on this GPU, and the best KV read rate of each kernel in the sweep runs under a
folder against both (issue #17: fa2 read 4,418 GB/s against a 4,147 GB/s copy figure, "107%").

    python3 tests/gpu/ceiling.py /tmp/res [RUN...]   # after `bash tests/gpu/h200.sh sweep`; RUN: more run folders

Prints each read probe (kbench.timing.hardware.read_probes), the copy figure, then per run and kernel the best KV read
rate against the copy and the read ceiling: a ceiling is one when no kernel's rate is above it.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> int:
    from kbench.timing.hardware import PEAK_SLACK, copy_bandwidth_gbs, memory_peak_gbs, read_probes
    from kbench.runs.store import load_run

    t0 = time.perf_counter()
    read_probes("cuda")  # first use: compiles the Triton probes
    t1 = time.perf_counter()
    probes = read_probes("cuda")
    t2 = time.perf_counter()
    copy_bw = copy_bandwidth_gbs("cuda")
    read_bw = max(probes.values())
    print(f"read probes: {len(probes)}, {t1 - t0:.1f} s the first time (compiles), {t2 - t1:.1f} s again")
    print("read probes: " + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(probes.items(), key=lambda kv: -kv[1]))
          + " GB/s")
    print(f"copy {copy_bw:,.0f} GB/s   read {read_bw:,.0f} GB/s   read/copy {read_bw / copy_bw:.3f}")
    peak = memory_peak_gbs(0)
    if peak:  # a ceiling above the memory's theoretical peak is none
        print(f"memory peak {peak:,.0f} GB/s (NVML)   read ceiling / peak: {read_bw / peak:.3f} "
              f"({'plausible' if read_bw <= peak * PEAK_SLACK else 'ABOVE THE PEAK'})")
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/res")
    extra = [Path(a) / "manifest.json" for a in sys.argv[2:]]
    print(f"{'run':<34} {'kernel':<16} {'best KV GB/s':>12} {'/copy':>6} {'/read':>6} {'manifest read':>13}")
    worst = 0.0
    for m in sorted(root.glob("*/manifest.json")) + extra:
        run = load_run(m.parent)
        man = json.loads(m.read_text())
        ok = run.rows[(run.rows.status == "ok") & (run.rows.path != "reference")]
        for k, g in ok.groupby("kernel"):
            best = float(g["kv_bandwidth_gbs"].max())
            worst = max(worst, best / read_bw)
            print(f"{m.parent.name[:34]:<34} {k:<16} {best:>12,.0f} {best / copy_bw:>6.2f} {best / read_bw:>6.2f} "
                  f"{man.get('read_bandwidth_gbs') or 0:>13,.0f}")
    print(f"highest kernel rate / read ceiling: {worst:.3f} ({'a ceiling' if worst <= 1 else 'NOT a ceiling'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
