"""The README's GPU tour, run as written on a GPU host: each command of its first `readme-test: gpu` block (the
"A tour on a GPU" section), in order, from the checkout's root, with its exit code, seconds and last lines.

    python3 tests/gpu/readme_tour.py [--out DIR] [--from N]

Writes DIR/readme-gpu-tour.txt (one line per command: exit, seconds, the command) and DIR/readme-gpu-tour/NN.txt
(each command's output); prints the same table. --from N starts at command N (1-based; a call cut short resumes).
Exit 0 when every command exited 0, else 1. Run through the campaign as a shell step:
    bash tests/gpu/h200.sh --limit sh1=560 --deadline-s 590 'python3 tests/gpu/readme_tour.py --out $OUT'
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- readme-test: gpu -->\n```sh\n(.*?)\n```", re.S)


def tour_commands(readme: Path = ROOT / "README.md") -> list[str]:
    """The commands of the README's first GPU block, comments dropped, in order."""
    m = BLOCK.search(readme.read_text())
    if m is None:
        raise SystemExit("README.md has no `readme-test: gpu` block")
    out = []
    for line in m.group(1).splitlines():
        cmd = line.split("  #")[0].split(" # ")[0].strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/readme-gpu-tour"))
    ap.add_argument("--from", dest="start", type=int, default=1)
    a = ap.parse_args()
    logs = a.out / "readme-gpu-tour"
    logs.mkdir(parents=True, exist_ok=True)
    table = a.out / "readme-gpu-tour.txt"
    env = dict(os.environ)
    if shutil.which("kbench") is None:  # pip put the script off PATH (--user, a bare host): what `source .venv/...` gives
        shim = Path(tempfile.mkdtemp(prefix="kbench-tour-"))
        (shim / "kbench").write_text(f'#!/bin/sh\nexec {sys.executable} -m kbench.cli.main "$@"\n')
        (shim / "kbench").chmod(0o755)
        env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    ok = True
    with open(table, "a") as t:
        for i, cmd in enumerate(tour_commands(), 1):
            if i < a.start:
                continue
            t0 = time.perf_counter()
            p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, env=env)
            secs = time.perf_counter() - t0
            (logs / f"{i:02d}.txt").write_text(f"$ {cmd}\n{p.stdout}{p.stderr}\nexit {p.returncode}\n")
            tail = " | ".join((p.stdout + p.stderr).strip().splitlines()[-2:])[:300]
            line = f"{i:2d}  exit {p.returncode:3d}  {secs:7.1f} s  {cmd}\n      {tail}"
            print(line, flush=True)
            t.write(line + "\n")
            t.flush()
            ok &= p.returncode == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
