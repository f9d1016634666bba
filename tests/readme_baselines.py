"""The README's table of committed baselines, from their manifest.json files.

    python3 tests/readme_baselines.py           # print the table
    python3 tests/readme_baselines.py --write   # replace it in README.md (between the baselines markers)

Only the baselines git tracks are listed (tests/helpers.py COMMITTED_BASELINES names them; test_manifest_file
checks that list against git), so a baseline of your own in results/baselines/ changes nothing here.
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from committed import COMMITTED_BASELINES  # noqa: E402

BEGIN, END = "<!-- baselines:begin -->", "<!-- baselines:end -->"
DROP = {"--out", "--name", "-o"}  # where the run was written and its folder name: not the grid


def sweep_options(command_line: str) -> str:
    """The sweep's grid and mode options from a manifest's command line (without --out, --name and the
    adaptive tuning flags that only set its budgets)."""
    args = shlex.split(command_line)[2:]  # after `kbench sweep`
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in DROP:
            i += 2
            continue
        if a.startswith("--regret") or a.startswith("--budget-") or a.startswith("--coarse"):
            i += 1 if "=" in a or i + 1 >= len(args) or args[i + 1].startswith("-") else 2
            continue
        out.append(a)
        i += 1
    return " ".join(out)


def options(m: dict) -> str:
    """A sweep's grid options; another kind's (kbench layers) command after its name, without --out and --name."""
    if m.get("kind", "sweep") == "sweep":
        return sweep_options(m.get("command_line") or "")
    args = [str(a) for a in (m.get("command") or [])][2:]  # after `kbench layers`
    return " ".join([m["kind"], *sweep_options(shlex.join(["kbench", "x", *args])).split()])


def table() -> str:
    lines = ["| baseline | GPU | FlashInfer, torch | measured | runs | rows | sweep |", "|---|---|---|---|---|---|---|"]
    for name in sorted(COMMITTED_BASELINES):
        m = json.loads((ROOT / "results" / "baselines" / name / "manifest.json").read_text())
        d = m.get("device", {})
        lines.append(f"| `{name}` | {d.get('name')} (SM{d.get('sm')}) | {d.get('flashinfer_version')}, "
                     f"{d.get('torch_version')} | {str(m.get('start_time'))[:10]} | {m['baseline'].get('num_runs', 1)} | "
                     f"{m.get('num_rows')} | `{options(m)}` |")
    return "\n".join(lines)


def readme_table(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        p = ROOT / "README.md"
        s = p.read_text()
        p.write_text(s.replace(readme_table(s), table()))
    else:
        print(table())
