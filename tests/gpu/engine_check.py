"""The redesigned engine (issue #24) on a GPU: the sweep plans, the timing states and the run session, each
through `kbench sweep` as a user runs it. Prints one line per check and exits 1 when any fails.

    python3 tests/gpu/engine_check.py --out DIR          # on the H200: bash tests/gpu/h200.sh "python3 ..."

Checks (each a small sweep of draft-extend at kv 4096, bs 16, trtllm-decode and fa2-prefill; ~2-3 minutes):
  states     --power both, isolated: every kernel row ok and graph-timed; unthrottled rows carry the NVML columns
             (SM clock, power), sustained rows too plus the settle note, exactly one row of the worker says its heat
             soak; both states measured at every case; chosen_by empty (a full-grid plan)
  resume     --no-isolate, then the run cut back to its first case and marked interrupted, then --resume: the
             missing rows measured once (no duplicate), resumed_at recorded, the run complete
  adaptive   --adaptive over q 1..16 with decode-wrapper too: converged, every row tagged by the plan (coarse
             first), no (kernel, case) twice, measurements in the manifest = its timed rows
Without CUDA it runs the same steps on the reference kernel (wall clock) at the quick scenario's bs 1, kv 128,
to test the checks themselves.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

GPU_GRID = ["--scenario", "draft-extend", "--kv-len", "4096", "--batch-size", "16"]
CPU_GRID = ["--scenario", "quick", "--kv-len", "128", "--batch-size", "1"]  # the float32 reference is slow on a CPU
GPU_KERNELS = "trtllm-decode,fa2-prefill"


def grid(cuda: bool) -> list[str]:
    return GPU_GRID if cuda else CPU_GRID


def kbench(*args: str, out: Path) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", *args], capture_output=True, text=True,
                       timeout=240)
    log = out / "logs"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{int(time.time() * 1000)}.txt").write_text(" ".join(args) + "\n" + p.stdout + p.stderr)
    return p.returncode, p.stdout + p.stderr


def only_run(folder: Path) -> Path:
    runs = [p for p in folder.iterdir() if (p / "manifest.json").is_file()]
    assert len(runs) == 1, f"{folder}: expected one run folder, found {len(runs)}"
    return runs[0]


def load(run: Path):
    from kbench.runs.store import load_run

    return load_run(run)


def check_states(out: Path, cuda: bool, kernels: str) -> list[str]:
    rc, text = kbench("sweep", *grid(cuda), "--q-len", "1,4", "--power", "both", "--kernels", kernels, "--budget", "0.3",
                      "--out", str(out / "states"), out=out)
    if rc != 0:
        return [f"sweep exited {rc}: {text.strip().splitlines()[-1:]}"]
    run = load(only_run(out / "states"))
    rows, m, bad = run.rows, run.manifest, []
    timed = rows[rows.status == "ok"]
    if m["status"] != "complete" or m.get("isolated") is not cuda:
        bad.append(f"manifest status {m['status']}, isolated {m.get('isolated')}")
    if set(rows.chosen_by) != {""}:
        bad.append(f"a full-grid run with chosen_by {set(rows.chosen_by)}")
    if len(timed) == 0 or (timed.status != "ok").any():
        bad.append("no timed row")
    for state in ("unthrottled", "sustained"):
        s = timed[timed.power == state]
        if s.case_id.nunique() != rows[rows.power == state].case_id.nunique() or len(s) == 0:
            bad.append(f"{state}: not every case timed")
        if cuda and (set(s.timer) != {"cuda-graph"} or s.sm_clock_mhz.isna().any() or s.power_w.isna().any()):
            bad.append(f"{state}: timer {set(s.timer)}, SM clock or power missing")
        if not cuda and set(s.timer) != {"wall-clock"}:
            bad.append(f"{state}: timer {set(s.timer)} without CUDA")
    soaks = timed[timed.reason.astype(str).str.startswith("heat soak")]
    if cuda and (len(soaks) != 1 or set(soaks.power) != {"sustained"}):
        bad.append(f"{len(soaks)} row(s) say a heat soak (expected one, sustained)")
    if int(m.get("measurements") or 0) != len(timed):
        bad.append(f"manifest measurements {m.get('measurements')} != {len(timed)} timed rows")
    return bad


def check_resume(out: Path, cuda: bool, kernels: str) -> list[str]:
    rc, text = kbench("sweep", *grid(cuda), "--q-len", "2,8", "--kernels", kernels, "--budget", "0.2", "--no-isolate",
                      "--out", str(out / "resume"), out=out)
    if rc != 0:
        return [f"sweep exited {rc}: {text.strip().splitlines()[-1:]}"]
    path = only_run(out / "resume")
    full = load(path).rows
    first = full.case_id.iloc[0]
    journal = path / "rows.jsonl"
    kept = [line for line in journal.read_text().splitlines() if json.loads(line)["case_id"] == first]
    journal.write_text("\n".join(kept) + "\n")
    for f in ("rows.parquet", "rows.csv"):
        (path / f).unlink()
    m = json.loads((path / "manifest.json").read_text())
    m["status"] = "interrupted"
    (path / "manifest.json").write_text(json.dumps(m, indent=2))
    rc, text = kbench("sweep", "--resume", str(path), out=out)
    if rc != 0:
        return [f"--resume exited {rc}: {text.strip().splitlines()[-1:]}"]
    run = load(path)
    bad = []
    if run.manifest["status"] != "complete" or len(run.manifest.get("resumed_at") or []) != 1:
        bad.append(f"after --resume: status {run.manifest['status']}, resumed_at {run.manifest.get('resumed_at')}")
    if run.rows.duplicated(["kernel", "case_id"]).any():
        bad.append("a (kernel, case) measured twice")
    if sorted(zip(run.rows.kernel, run.rows.case_id)) != sorted(zip(full.kernel, full.case_id)):
        bad.append("the resumed run's rows are not the first run's")
    return bad


def check_adaptive(out: Path, cuda: bool, kernels: str) -> list[str]:
    rc, text = kbench("sweep", *grid(cuda), "--q-len", "1..16", "--adaptive", "--kernels", kernels, "--budget", "0.2",
                      "--out", str(out / "adaptive"), out=out)
    if rc != 0:
        return [f"adaptive sweep exited {rc}: {text.strip().splitlines()[-1:]}"]
    run = load(only_run(out / "adaptive"))
    rows, block, bad = run.rows, run.manifest.get("adaptive") or {}, []
    if block.get("stopped_by") != "converged" or run.manifest["status"] != "complete":
        bad.append(f"stopped_by {block.get('stopped_by')}, status {run.manifest['status']}")
    if (rows.chosen_by == "").any() or rows.chosen_by.iloc[0] != "coarse":
        bad.append(f"tags {rows.chosen_by.unique().tolist()} (every row tagged, coarse first)")
    if rows.duplicated(["kernel", "case_id"]).any():
        bad.append("a (kernel, case) measured twice")
    if int(run.manifest.get("measurements") or 0) != int((rows.status == "ok").sum()):
        bad.append(f"manifest measurements {run.manifest.get('measurements')} != timed rows")
    if block.get("measured_cases") != rows.case_id.nunique() or block.get("grid_cases") != 16:
        bad.append(f"measured_cases {block.get('measured_cases')}, grid_cases {block.get('grid_cases')}")
    return bad


CHECKS = {"states": check_states, "resume": check_resume, "adaptive": check_adaptive}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the runs and logs (emptied first)")
    ap.add_argument("--only", choices=sorted(CHECKS), action="append", help="run only these checks")
    args = ap.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    failed = 0
    print(f"{'check':10s} {'result':6s} {'s':>6s}  details ({'GPU ' + torch.cuda.get_device_name() if cuda else 'CPU'})")
    for name in args.only or CHECKS:
        kernels = (GPU_KERNELS + (",decode-wrapper" if name == "adaptive" else "")) if cuda else "reference"
        t0 = time.perf_counter()
        try:
            bad = CHECKS[name](args.out, cuda, kernels)
        except Exception as e:  # noqa: BLE001 - a check that cannot run fails
            bad = [f"{type(e).__name__}: {e}"]
        failed += bool(bad)
        print(f"{name:10s} {'FAIL' if bad else 'ok':6s} {time.perf_counter() - t0:6.1f}  {'; '.join(bad)}", flush=True)
    (args.out / "summary.json").write_text(json.dumps({"failed": failed, "cuda": cuda}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
