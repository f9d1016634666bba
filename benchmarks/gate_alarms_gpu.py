"""The kernel gate's false-alarm and miss rates on one GPU: A/A pairs from repeated sweeps of one card, and a kernel
slowed by a known factor (``kbench sweep --slow-kernel KERNEL=N``: the kernel runs N times per timed call).

    python3 benchmarks/gate_alarms_gpu.py [--out DIR] [--sweeps 7] [--slow-sweeps 3] [--slow fa2-prefill=2]
        [--grid '--scenario draft-extend --kv-len 4096 --batch-size 16,64'] [--dry-run]
    python3 benchmarks/gate_alarms_gpu.py --analyse-only --runs RUN1 RUN2 ... [--slow-runs RUN ...]

Steps (each sweep's run folder is kept under OUT/runs and reused by a later call, so a call cut short by a time
limit is finished by the next one):

1. ``--sweeps`` sweeps of the grid on this card (A/A material) and ``--slow-sweeps`` of it with --slow-kernel;
2. A/A, single-run baseline: every pair (i < j) of the plain sweeps, gated j against i with the gate's defaults
   (7 sweeps: 21 pairs), and again with ``--noise-floor 1%``;
3. A/A, baseline of two runs: ``kbench baseline`` of sweeps (i, i+1), gated against every other plain sweep;
4. slowdown: each slowed sweep gated against the baseline of sweeps 1 and 2, and against sweep 1 alone; detected
   when the gate fails with the slowed kernel's rows regressing (rows of other kernels failing are counted apart,
   as false alarms beside the detection).

It prints one table (procedure x condition: alarms / pairs, the card named from the runs' manifests) and writes
it, with every gate's verdict line, to OUT/summary.md and OUT/gates.jsonl. Runs as a plain script on the GPU
machine (python3, FlashInfer on PYTHONPATH, no network): kbench is called as ``python3 -m kbench.cli.main``.
``--analyse-only`` skips the sweeps and gates given run folders (on a CPU: the committed H200 sweeps of
results/baselines/h200-power-both-kv4096-sweep1 and -sweep2 make one A/A pair).
"""
from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID = "--scenario draft-extend --kv-len 4096 --batch-size 16,64"


def kbench(*args, dry: bool = False, timeout: float = 3600) -> subprocess.CompletedProcess | None:
    cmd = [sys.executable, "-m", "kbench.cli.main", *map(str, args)]
    print("$ " + " ".join(shlex.quote(c) for c in cmd[1:]), flush=True)
    if dry:
        return None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**__import__("os").environ, "COLUMNS": "250"})


def sweep(out: Path, name: str, grid: str, extra: list[str], dry: bool) -> Path | None:
    """OUT/runs/NAME-*: an existing complete run of that name is reused."""
    runs = out / "runs"
    done = [p for p in sorted(runs.glob(f"{name}-*")) if _complete(p)]
    if done:
        print(f"reusing {done[-1]}", flush=True)
        return done[-1]
    p = kbench("sweep", *shlex.split(grid), *extra, "--name", name, "--out", runs, dry=dry)
    if dry:
        return runs / f"{name}-TIME"
    made = [q for q in sorted(runs.glob(f"{name}-*")) if _complete(q)]
    if not made:
        raise SystemExit(f"sweep {name} wrote no complete run (exit {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return made[-1]


def _complete(run: Path) -> bool:
    try:
        return json.loads((run / "manifest.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def card(run: Path) -> str:
    try:
        d = json.loads((run / "manifest.json").read_text()).get("device") or {}
        return f"{d.get('name')} (SM{d.get('sm')})"
    except (OSError, ValueError):
        return "unknown card"


def gate(base: Path, cand: Path, *extra) -> dict:
    from kbench.gate import run_gate

    kw = {}
    if "--noise-floor" in extra:
        kw["noise_floor"] = extra[extra.index("--noise-floor") + 1]
    res = run_gate(base, cand, **kw)
    failing = sorted({r.kernel for r in res.failing_rows}) + (["winner-change"] if any(
        w.fails for w in res.winner_changes) else [])
    return {"baseline": str(base), "candidate": str(cand), "options": list(extra), "passed": res.passed,
            "verdict_word": res.verdict, "failed": res.verdict == "FAIL",
            "verdict": res.summary_line(), "noise": res.noise_used, "failing_kernels": failing}


def baseline(runs: list[Path], name: str, out: Path) -> Path:
    from kbench.gate import write_multi_baseline

    dest = out / "baselines" / name
    if (dest / "manifest.json").is_file():
        return dest
    (out / "baselines").mkdir(parents=True, exist_ok=True)
    folder, _, _ = write_multi_baseline(runs, name, out / "baselines")
    return folder


def analyse(plain: list[Path], slow: list[Path], slow_kernel: str, out: Path) -> str:
    rows: dict[tuple[str, str], list[bool]] = {}
    log = open(out / "gates.jsonl", "a")

    undecided: dict[tuple[str, str], int] = {}

    def record(proc: str, cond: str, g: dict, alarm: bool) -> None:
        rows.setdefault((proc, cond), []).append(alarm)
        undecided[(proc, cond)] = undecided.get((proc, cond), 0) + (g.get("verdict_word") == "INCONCLUSIVE")
        log.write(json.dumps({"procedure": proc, "condition": cond, "alarm": alarm, **g}) + "\n")
        log.flush()
        print(f"{proc:28s} {cond:10s} {'ALARM' if alarm else 'quiet'}  {g['verdict'][:140]}", flush=True)

    for i, j in itertools.combinations(range(len(plain)), 2):
        record("single-run baseline", "A/A", g := gate(plain[i], plain[j]), g["failed"])
        record("single-run, noise floor 1%", "A/A", g := gate(plain[i], plain[j], "--noise-floor", "1%"),
               g["failed"])
    bases = []
    for i in range(0, len(plain) - 1, 2):
        b = baseline([plain[i], plain[i + 1]], f"aa-{i + 1}-{i + 2}", out)
        bases.append(b)
        for j in range(len(plain)):
            if j not in (i, i + 1):
                record("baseline of 2 runs", "A/A", g := gate(b, plain[j]), g["failed"])
    for s in slow:
        for proc, base in (("single-run baseline", plain[0]), ("baseline of 2 runs", bases[0] if bases else None)):
            if base is None:
                continue
            g = gate(base, s)
            detected = g["failed"] and slow_kernel in g["failing_kernels"]
            record(proc, f"slow {slow_kernel}", g, detected)
            if g["failed"] and set(g["failing_kernels"]) - {slow_kernel}:
                record(proc, "A/A in slow", g, True)  # other kernels failing beside the slowed one: false alarms
    conds = list(dict.fromkeys(c for _, c in rows))
    procs = list(dict.fromkeys(p for p, _ in rows))
    lines = [f"card: {card(plain[0]) if plain else 'none'}; alarms (slowdown: detections) / gates", "",
             "| procedure | " + " | ".join(conds) + " |", "|---|" + "---|" * len(conds)]
    for p in procs:
        cells = [f"{sum(rows[(p, c)])} / {len(rows[(p, c)])}"
                 + (f" ({undecided[(p, c)]} INCONCLUSIVE)" if undecided.get((p, c)) else "") if (p, c) in rows
                 else "-" for c in conds]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/kbench-gate-alarms-gpu")
    ap.add_argument("--sweeps", type=int, default=7)
    ap.add_argument("--slow-sweeps", type=int, default=3)
    ap.add_argument("--slow", default="fa2-prefill=2", help="KERNEL=N for --slow-kernel")
    ap.add_argument("--grid", default=GRID, help="the sweep's grid options")
    ap.add_argument("--dry-run", action="store_true", help="print the sweep commands, run nothing")
    ap.add_argument("--analyse-only", action="store_true", help="no sweep: gate the run folders given")
    ap.add_argument("--runs", nargs="*", default=[], help="with --analyse-only: the plain sweeps")
    ap.add_argument("--slow-runs", nargs="*", default=[], help="with --analyse-only: the slowed sweeps")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    slow_kernel = a.slow.split("=")[0]
    t0 = time.monotonic()
    if a.analyse_only:
        plain, slow = [Path(r) for r in a.runs], [Path(r) for r in a.slow_runs]
    else:
        plain = [sweep(out, f"aa{i + 1}", a.grid, [], a.dry_run) for i in range(a.sweeps)]
        slow = [sweep(out, f"slow{i + 1}", a.grid, ["--slow-kernel", a.slow], a.dry_run) for i in range(a.slow_sweeps)]
        if a.dry_run:
            return 0
    table = analyse(plain, slow, slow_kernel, out)
    print("\n" + table + f"\n\n{(time.monotonic() - t0) / 60:.1f} min", flush=True)
    (out / "summary.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
