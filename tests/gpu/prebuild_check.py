"""Issue #29 on the GPU: a `kbench prebuild` archive made on a machine without a GPU serves the README sweep
with nothing compiled on the H200.

    python3 tests/gpu/prebuild_check.py --archive .fi-cache/aot.tgz --out /tmp/res/prebuild-check

1. `kbench prebuild --load ARCHIVE` installs the archive's modules as FlashInfer AOT modules;
2. `kbench prebuild GRID --list` on the GPU: every module the grid needs is there (aot), none missing;
3. the README sweep with FlashInfer's JIT cache pointed at an empty folder: no module is compiled (the folder
   holds no library afterwards), every kernel passes its check; wall, compile, timing and the time to the
   first ok row from the run. Exits 1 when a check fails. About 2 minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

GRID = "--scenario draft-extend --kv-len 4096 --batch-size 16,64"
KBENCH = [sys.executable, "-c", "from kbench.cli.main import main; main()"]


def kbench(args: list[str], log: Path, env: dict | None = None, timeout: int = 600) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    r = subprocess.run(KBENCH + args, capture_output=True, text=True, env={**os.environ, "COLUMNS": "400", **(env or {})},
                       timeout=timeout)
    log.write_text(f"$ kbench {' '.join(args)}\n{r.stdout}\n{r.stderr}")
    return r.returncode, r.stdout + r.stderr, time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", default=".fi-cache/aot.tgz")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    checks: list[tuple[str, bool, str]] = []

    rc, text, secs = kbench(["prebuild", "--load", a.archive], out / "load.txt")
    checks.append(("load the archive", rc == 0, text.strip().splitlines()[-1] if text.strip() else f"rc {rc}"))

    rc, text, _ = kbench(["prebuild", *GRID.split(), "--list"], out / "list.txt")
    states = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    missing = states.count("missing")
    checks.append(("grid modules present", rc == 0 and states and missing == 0,
                   f"{len(states)} modules: {states.count('aot')} aot, {states.count('cached')} cached, {missing} missing"))

    with tempfile.TemporaryDirectory(prefix="fi-empty-") as empty:
        t0 = time.time()
        rc, text, wall = kbench(["sweep", *GRID.split(), "--out", str(out / "runs")], out / "sweep.txt",
                                env={"FLASHINFER_WORKSPACE_BASE": empty})
        compiled = sorted(p.parent.name for p in Path(empty).rglob("cached_ops/*/*.so"))
    checks.append(("sweep passes", rc == 0, f"rc {rc}"))
    checks.append(("nothing compiled in the sweep", not compiled, f"{len(compiled)} modules built: {compiled[:3]}"))
    runs = sorted((out / "runs").glob("draft-extend-*"))
    figures = {}
    if runs:
        run = runs[-1]
        m = json.loads((run / "manifest.json").read_text())
        rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
        ok = [r for r in rows if r.get("status") == "ok"]
        stamps = [datetime.fromisoformat(r["measured_at"]).timestamp() for r in ok if r.get("measured_at")]
        figures = {"wall_s (outside)": round(wall, 1), **{k: v for k, v in m.get("wall_s", {}).items()},
                   "rows": len(rows), "ok rows": len(ok),
                   "first ok row after s": round(min(stamps) - t0, 1) if stamps else "-"}
        (out / "figures.json").write_text(json.dumps(figures, indent=1, default=str))
    print(f"{'check':32} {'result':6} detail")
    for name, good, detail in checks:
        print(f"{name:32} {'ok' if good else 'FAIL':6} {detail}")
    for k, v in figures.items():
        print(f"  {k:22} {v}")
    return 0 if all(good for _, good, _ in checks) else 1


if __name__ == "__main__":
    # piped to head: end quietly (set here, not on import: a test importing this module must keep Python's
    # handling, or a write to a closed socket kills the whole test run with SIGPIPE)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
