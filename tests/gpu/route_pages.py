"""Issue 44's GPU table from an engine-routes run: SGLang's routes at page 1 against page 64, and the fa3 tree route
(cascade) against flashinfer's tree route (custom mask), bs 1/4/16/64, kv 4096, q 4 and 8; every row's check status.

    python3 tests/gpu/route_pages.py RUN_DIR [--json FILE]

Per route and page: the kernel's median (us, one layer) and its host work per step (us); `wrong`/`failed` rows are
printed as such (the campaign step fails on them). Reads rows.jsonl (or rows.csv) with the standard library only.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

CHAIN = ["sglang-fi-verify", "sglang-fi-verify-hostplan", "sglang-fi-extend", "sglang-fa3", "sglang-trtllm-mha"]
TREE = ["sglang-fi-verify", "sglang-fa3-tree"]
BATCHES = (1, 4, 16, 64)


def load(run: Path) -> list[dict]:
    j = run / "rows.jsonl"
    if j.exists():
        return [json.loads(line) for line in j.read_text().splitlines() if line.strip()]
    with open(run / "rows.csv", newline="") as f:
        return list(csv.DictReader(f))


def cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("status") != "ok":
        return str(r.get("status"))
    host = r.get("host_us")
    h = "" if host in (None, "") else f"+{float(host):.0f}h"
    return f"{float(r['median_us']):.1f}{h}"


def table(rows: list[dict]) -> tuple[str, list[dict]]:
    by = {(r["kernel"], int(r["batch_size"]), int(r["q_len"]), int(r["page_size"]), r.get("tree") or "chain"): r
          for r in rows if int(r.get("kv_len", 0)) == 4096}
    out, flat = [], []
    for tree, names in (("chain", CHAIN), ("topk:4", TREE)):
        head = ["bs", "q"] + [f"{n.replace('sglang-', '')} p{p}" for n in names for p in (1, 64)]
        out.append(f"{tree}: us per layer (+host us per step), kv 4096")
        out.append("  ".join(f"{h:>15}" if i > 1 else f"{h:>3}" for i, h in enumerate(head)))
        for bs in BATCHES:
            for q in (4, 8):
                cells = []
                for n in names:
                    for p in (1, 64):
                        r = by.get((n, bs, q, p, tree))
                        cells.append(cell(r))
                        if r is not None:
                            flat.append({"tree": tree, "bs": bs, "q": q, "page": p, "kernel": n,
                                         "status": r.get("status"), "median_us": r.get("median_us"),
                                         "host_us": r.get("host_us"), "reason": r.get("reason")})
                out.append("  ".join([f"{bs:>3}", f"{q:>3}"] + [f"{c:>15}" for c in cells]))
        out.append("")
    checked = [f for f in flat if f["status"] in ("ok", "wrong", "failed")]
    bad = [f for f in checked if f["status"] != "ok"]
    out.append(f"{len(checked)} route rows measured, {len(checked) - len(bad)} checked ok against the float32 "
               f"reference, {len(bad)} wrong/failed")
    return "\n".join(out), flat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    text, flat = table(load(a.run))
    print(text)
    if a.json:
        a.json.write_text(json.dumps(flat, indent=1))
    return 1 if any(f["status"] in ("wrong", "failed") for f in flat) else 0


if __name__ == "__main__":
    sys.exit(main())
