"""Issue #26 on the GPU: draft trees (EAGLE topk > 1) against chains, every tree-capable kernel checked.

    python3 tests/gpu/tree_check.py --out DIR          # about 3-4 minutes on an H200 (compiles included)
    python3 tests/gpu/tree_check.py --out DIR --masks-only   # the per-step mask timing alone (a CPU too)

Four steps, each a `kbench sweep` of scenario eagle-tree (Llama-3-8B heads, bf16, page 64, HND) into DIR:
1. timing: bs 16 and 64, kv 4096, tree size n 8/16/32/64, tree chain and topk:4 (topk:1 is the chain), with
   trtllm-decode (xqa) and fa2-prefill (the custom mask);
2. check: bs 4, kv 1024, the same n, trees topk:2, topk:8, a star (every token sees the root and itself) and
   random trees from files, with every kernel but the ragged one: xqa and fa2 must pass the check against the
   float32 reference, the decode wrapper, fa3, fmha-v2 and trtllm-context must be skipped with a tree reason;
3. ragged: bs 16, kv 4096, n 8, q_dist accept:0.7 and kv_dist lognormal:1.0 (each request its own tree
   size and KV length), tree topk:4 and a random file, trtllm-decode (padded), trtllm-decode-ragged and fa2;
4. masks: what an engine pays per verify step to build the masks from the parent lists (kernels/tree_masks:
   xqa's packed rows; FA2's whole-block mask, packed by flashinfer.segment_packbits as plan() packs it), on
   the GPU and on the CPU, bs 16/64, kv 4096, topk:4 trees of n 8..64; the GPU masks must equal the CPU's.
Prints the relative errors per kernel and tree kind, the table (xqa tree, fa2 tree, fa2 chain, xqa chain,
the winner and margin for the tree and for the chain, what the tree costs), the mask times, and writes the
tables to DIR/tree_check.txt (and `kbench report` of the timing run to DIR/report). Exit 1 when a check fails.
"""
from __future__ import annotations

import argparse
import glob
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd


SIZES = (8, 16, 32, 64)
BATCHES = (16, 64)
SKIPPED_FOR_TREES = ("decode-wrapper", "fa3-prefill", "trtllm-fmha-v2", "trtllm-context")
XQA, FA2, RAGGED = "trtllm-decode", "fa2-prefill", "trtllm-decode-ragged"


def fmt_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


# ---- tree files -------------------------------------------------------------------------------------------
def write_tree_files(folder: Path, sizes=SIZES, seed: int = 26) -> dict[str, dict[int, Path]]:
    """star<n>.txt (one star a line) and random<n>.txt (five random trees: each token's parent drawn
    uniformly among the tokens before it), per size."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out: dict[str, dict[int, Path]] = {"star": {}, "random": {}}
    for n in sizes:
        star = folder / f"star{n}.txt"
        star.write_text(" ".join(["-1"] + ["0"] * (n - 1)) + "\n")
        rand = folder / f"random{n}.txt"
        rand.write_text("".join(" ".join(["-1"] + [str(int(rng.integers(0, i))) for i in range(1, n)]) + "\n"
                                for _ in range(5)))
        out["star"][n], out["random"][n] = star, rand
    return out


def tree_kind(spec: str) -> str:
    """chain, topk:K, star or random (a file's kind from its name)."""
    if spec.startswith("file:"):
        name = Path(spec[5:]).name
        return "star" if name.startswith("star") else "random" if name.startswith("random") else "file"
    return spec


# ---- the sweeps -------------------------------------------------------------------------------------------
def sweep_commands(out: Path, files: dict[str, dict[int, Path]], budget: float) -> dict[str, list[str]]:
    q = ",".join(map(str, SIZES))
    common = ["--scenario", "eagle-tree", "--out", str(out), "--allow-wrong"]
    checked = ",".join(["topk:2", "topk:8"] + [f"file:{files[k][n]}" for k in ("star", "random") for n in SIZES])
    return {
        "timing": common + ["--name", "tree-timing", "--batch-size", ",".join(map(str, BATCHES)), "--kv-len", "4096",
                            "--q-len", q, "--tree", "chain,topk:4", "--kernels", f"{XQA},{FA2}", "--budget", str(budget)],
        "check": common + ["--name", "tree-check", "--batch-size", "4", "--kv-len", "1024", "--q-len", q,
                           "--tree", checked, "--budget", "0.05", "--min-time", "0.02",
                           "--kernels", ",".join([XQA, FA2, *SKIPPED_FOR_TREES])],
        "ragged": common + ["--name", "tree-ragged", "--batch-size", "16", "--kv-len", "4096", "--q-len", "8",
                            "--q-dist", "accept:0.7", "--kv-dist", "lognormal:1.0",
                            "--tree", f"topk:4,file:{files['random'][8]}", "--budget", "0.1",
                            "--kernels", f"{XQA},{RAGGED},{FA2}"],
    }


def run_sweep(name: str, args: list[str], out: Path) -> tuple[int, Path | None, float]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "kbench.cli.main", "sweep", *args]
    print(f"== {name}: kbench sweep {' '.join(args)}", flush=True)
    log = out / f"{name}.log"
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    runs = sorted(glob.glob(str(out / f"tree-{name}-*")))
    secs = time.perf_counter() - t0
    print(f"   rc={rc} in {secs:.0f} s, log {log}" + ("" if runs else " (no run folder)"), flush=True)
    if rc != 0:
        print("   " + "\n   ".join(log.read_text().splitlines()[-8:]))
    return rc, Path(runs[-1]) if runs else None, secs


def load_rows(run: Path) -> pd.DataFrame:
    from kbench.runs.store import load_run

    return load_run(run).rows


# ---- tables from the rows ---------------------------------------------------------------------------------
def check_table(rows: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    """Per kernel and tree kind: rows by status and the largest relative error; problems: a wrong or failed
    row, a tree-capable kernel without an ok row, a kernel that ran a tree it cannot take."""
    rows = rows[rows["path"] != "reference"].copy()
    rows["kind"] = rows["tree"].map(tree_kind) + rows["q_dist"].map(lambda d: "" if d == "fixed" else " ragged")
    headers, out, problems = ["kernel", "tree", "cases", "ok", "skipped", "wrong/failed", "max rel err", "note"], [], []
    for (kernel, kind), g in rows.groupby(["kernel", "kind"], sort=True):
        st = g["status"].value_counts().to_dict()
        bad = st.get("wrong", 0) + st.get("failed", 0)
        err = g["rel_err"].astype(float).max() if g["rel_err"].notna().any() else None
        reasons = sorted(set(g.loc[g["status"] != "ok", "reason"].fillna("").astype(str)))
        note = reasons[0][:90] if reasons else ""
        out.append([kernel, kind, str(len(g)), str(st.get("ok", 0)), str(st.get("skipped", 0)), str(bad),
                    "-" if err is None else f"{err:.4f}", note])
        if bad:
            problems.append(f"{kernel} {kind}: {bad} wrong/failed: {note}")
        if kernel in (XQA, FA2) and st.get("ok", 0) < len(g):
            problems.append(f"{kernel} {kind}: only {st.get('ok', 0)} of {len(g)} ok: {note}")
        if kernel in SKIPPED_FOR_TREES and kind != "chain" and (
                st.get("skipped", 0) < len(g) or not all(r.startswith("tree") for r in reasons)):
            problems.append(f"{kernel} {kind}: expected a tree skip for every case, got {st}: {note}")
        if kernel == RAGGED and kind.endswith("ragged") and st.get("ok", 0) < len(g):
            problems.append(f"{kernel} {kind}: only {st.get('ok', 0)} of {len(g)} ok: {note}")
    return headers, out, problems


def _us(rows: pd.DataFrame, kernel: str, tree: str) -> float | None:
    r = rows[(rows["kernel"] == kernel) & (rows["tree"] == tree) & (rows["status"] == "ok")]
    return float(r["median_us"].iloc[0]) if len(r) and pd.notna(r["median_us"].iloc[0]) else None


def _winner(a: tuple[str, float | None], b: tuple[str, float | None]) -> tuple[str, float | None]:
    got = sorted((t, n) for n, t in (a, b) if t is not None)
    if not got:
        return "-", None
    if len(got) == 1:
        return got[0][1] + " (alone)", got[0][0]
    return f"{got[0][1]} by {(got[1][0] / got[0][0] - 1) * 100:.1f}%", got[0][0]


def timing_table(rows: pd.DataFrame, tree: str = "topk:4") -> tuple[list[str], list[list[str]], list[str]]:
    headers = ["bs", "n", "xqa tree us", "fa2 tree us", "fa2 chain us", "xqa chain us", "tree winner",
               "chain winner", "tree cost", "xqa tree/chain", "fa2 tree/chain"]
    out, problems = [], []
    rows = rows[rows["path"] != "reference"]
    for (bs, n), g in rows.groupby(["batch_size", "q_len"], sort=True):
        xt, ft, fc, xc = _us(g, XQA, tree), _us(g, FA2, tree), _us(g, FA2, "chain"), _us(g, XQA, "chain")
        tw, tbest = _winner(("xqa", xt), ("fa2", ft))
        cw, cbest = _winner(("xqa", xc), ("fa2", fc))
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"  # noqa: E731
        fmt = lambda v: f"{v:.1f}" if v else "-"  # noqa: E731
        out.append([str(bs), str(n), fmt(xt), fmt(ft), fmt(fc), fmt(xc), tw, cw, ratio(tbest, cbest), ratio(xt, xc),
                    ratio(ft, fc)])
        missing = [name for name, v in (("xqa tree", xt), ("fa2 tree", ft), ("fa2 chain", fc), ("xqa chain", xc))
                   if v is None]
        if missing:
            problems.append(f"bs {bs} n {n}: no ok time for {', '.join(missing)}")
    return headers, out, problems


# ---- per-step mask building -------------------------------------------------------------------------------
def _time(fn, sync, reps: int) -> float:
    """Median wall time of one call in microseconds (synchronised: what a step waits for)."""
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def mask_times(devices: list[str], batches=BATCHES, sizes=SIZES, kv: int = 4096, reps: int = 30,
               k: int = 4) -> tuple[list[str], list[list[str]], list[str]]:
    """Per (bs, n): the xqa mask and FA2's packed mask built from parent lists on each device; the masks of
    every device must equal the CPU's."""
    import torch

    from kbench.cases.trees import batch_trees
    from kbench.kernels.tree_masks import parents_tensor, step_masks

    headers = ["bs", "n", "depth", *[f"{d} {what} us" for d in devices for what in ("xqa", "fa2+pack")]]
    out, problems = [], []
    for bs in batches:
        for n in sizes:
            batch = batch_trees(f"topk:{k}", (n,) * bs, 0)
            trees, q, kvs = batch.parents, [n] * bs, [kv] * bs
            line, ref = [str(bs), str(n), str(batch.summary()["tree_depth"])], None
            for dev in devices:
                sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
                p = parents_tensor(trees, n, dev)
                xqa = lambda: step_masks(p, q, kvs, fa2=False)  # noqa: E731  # what a step of xqa needs
                fa2 = lambda: step_masks(p, q, kvs, xqa=False, pack=True)  # noqa: E731  # fa2's, packed as plan() does
                line += [f"{_time(xqa, sync, reps):.0f}", f"{_time(fa2, sync, reps):.0f}"]
                got = (xqa().xqa.cpu(), *(t.cpu() for t in fa2().fa2_packed))
                if ref is None:
                    ref = got
                elif not all(torch.equal(a, b) for a, b in zip(ref, got)):
                    problems.append(f"masks built on {dev} differ from {devices[0]}'s at bs {bs} n {n}")
            out.append(line)
    return headers, out, problems


class Output:
    """Each table printed and appended to DIR/tree_check.txt as soon as it is made (a run cut short keeps them)."""

    def __init__(self, path: Path):
        self.path, self.problems = path, []
        path.write_text("")

    def part(self, title: str, table: tuple[list[str], list[list[str]], list[str]]) -> None:
        headers, rows, problems = table
        self.problems += problems
        text = f"== {title}\n{fmt_table(headers, rows)}\n"
        with open(self.path, "a") as f:
            f.write(text + "\n")
        print(text, flush=True)

    def done(self) -> int:
        line = "problems: " + ("; ".join(self.problems) if self.problems else "none")
        with open(self.path, "a") as f:
            f.write(line + "\n")
        print(line)
        return 1 if self.problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget", type=float, default=0.5, help="timing budget per (kernel, case) of the timing sweep")
    ap.add_argument("--masks-only", action="store_true", help="only the per-step mask timing")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    import torch

    devices = ["cuda:0", "cpu"] if torch.cuda.is_available() else ["cpu"]
    out = Output(a.out / "tree_check.txt")
    masks_title = ("building an engine's per-step masks from the parent lists (kernels/tree_masks.step_masks; topk:4 "
                   f"trees, kv 4096; median of {a.reps} synchronised calls; fa2+pack = the bool block mask packed by "
                   "segment_packbits, as plan() does)")
    if a.masks_only:
        out.part(masks_title, mask_times(devices, reps=a.reps))
        return out.done()
    files = write_tree_files(a.out.resolve() / "trees")  # absolute: the sweep workers read them too
    cmds, checked = sweep_commands(a.out, files, a.budget), []
    # the table first; the ragged sweep last (it compiles xqa's ragged module, the others share modules)
    for name in ("timing", "check", "masks", "ragged"):
        if name == "masks":
            out.part(masks_title, mask_times(devices, reps=a.reps))
            continue
        rc, run, _ = run_sweep(name, cmds[name], a.out)
        if rc != 0 or run is None:
            out.problems.append(f"sweep {name}: rc={rc} (see {a.out / (name + '.log')})")
        if run is None:
            continue
        rows = load_rows(run)
        checked.append(rows)
        out.part(f"{name} sweep: every tree-capable kernel against the float32 reference (rel err = ||out - ref|| / "
                 "||ref||)", check_table(rows))
        if name == "timing":
            out.part("bs 16 / 64, kv 4096, Llama-3-8B heads: a topk:4 tree vs the chain (topk:1) of the same size n",
                     timing_table(rows))
            rc = subprocess.call([sys.executable, "-m", "kbench.cli.main", "report", str(run), "--out",
                                  str(a.out / "report")], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            if rc != 0:
                out.problems.append(f"kbench report of the timing run: rc={rc}")
    if checked:
        rows = pd.concat(checked, ignore_index=True)
        err = rows.loc[rows["rel_err"].notna() & (rows["path"] != "reference"), "rel_err"].astype(float)
        print(f"checked against the reference: {len(err)} kernel/case pairs, max rel err "
              f"{err.max() if len(err) else float('nan'):.4f}")
    return out.done()


if __name__ == "__main__":
    # piped to head: end quietly (set here, not on import: a test importing this module must keep Python's
    # handling, or a write to a closed socket kills the whole test run with SIGPIPE)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
