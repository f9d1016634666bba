"""A/A of `kbench recommend`: two measurements of the same routes (two engine-routes runs of one GPU model) priced
over the same workloads must give the same answer. Prints, per engine, how far each setting's price moved between
the two runs (median, 90th percentile, largest, and where) and whether the answer (the best setting, or one tied
with it) is the same.

    python benchmarks/recommend_aa.py RUN_A RUN_B [--engines sglang,vllm] [--batch-size 1,4,16,64,256]
        [--q-len 4,8] [--kv-len 4096] [--page-size 1,64] [--verify-layers 32] [--draft-layers 1]

Each workload is one batch (bs, q, kv) on chains at one page (vLLM: the pages above 1); settings priced as
`kbench recommend` prices them (the engine's overlap rule and FlashInfer pin), the same layers on both sides.
Exit 1 when an answer differs, 2 on bad input, and 2 when the two runs had nothing to compare (another GPU model,
no workload both price, no setting priced on both sides): an A/A that compared nothing proves nothing. 2026-12-06, NVIDIA H100 80GB HBM3, the committed
h100-engine-routes-page1-64-kv4096 against -r2 (two calls 2.8 hours apart): 30 of 30 answers the same; prices
moved by a median 0.6%, 90th percentile 5.6%, at most 15.9% (SGLang flashinfer at bs 1, where 500-900 us of host
work per step, timed on the host's CPU, is most of the price).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--engines", default="sglang,vllm")
    ap.add_argument("--batch-size", type=ints, default=[1, 4, 16, 64, 256])
    ap.add_argument("--q-len", type=ints, default=[4, 8])
    ap.add_argument("--kv-len", type=ints, default=[4096])
    ap.add_argument("--page-size", type=ints, default=[1, 64])
    ap.add_argument("--verify-layers", type=int, default=32)
    ap.add_argument("--draft-layers", type=int, default=1)
    a = ap.parse_args(argv)

    from kbench.errors import BadInput
    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.settings import load_table
    from kbench.recommend.workload import Batch, Workload

    try:
        runs = load_source([a.run_a]), load_source([a.run_b])
        engines = [load_table().engine(e) for e in a.engines.split(",")]
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    gpus = [((r.policy.get("device") or {}).get("name") if isinstance(r.policy.get("device"), dict) else None)
            for r in runs]
    if all(gpus) and gpus[0] != gpus[1]:
        print(f"error: the runs are of two GPU models ({gpus[0]!r}, {gpus[1]!r}): an A/A measures one GPU model "
              "twice", file=sys.stderr)
        return 2
    layers = {"verify": a.verify_layers, "draft_extend": a.draft_layers}
    why_not: list[str] = []
    moved: list[tuple[float, str]] = []
    differ = total = 0
    table = [f"{'engine':<7} {'page':>4} {'bs':>4} {'q':>3} {'kv':>6}  {'best in A':<28} {'best in B':<28} same"]
    for eng, page, bs, q, kv in itertools.product(engines, a.page_size, a.batch_size, a.q_len, a.kv_len):
        if eng.engine == "vllm" and page == 1:
            continue  # vLLM's backends take no page 1
        wl = Workload([Batch(bs, q, kv, 1.0, group=(("page_size", page), ("tree", "chain")))], "A/A")
        try:
            ra, rb = (recommend(r, wl, eng, layers=layers) for r in runs)
        except BadInput as e:
            table.append(f"{eng.engine:<7} {page:>4} {bs:>4} {q:>3} {kv:>6}  not priced: {e}")
            why_not.append(str(e))
            continue
        pa = {r.setting.id: r.total_us for r in ra.results if r.total_us}
        pb = {r.setting.id: r.total_us for r in rb.results if r.total_us}
        for k in sorted(pa.keys() & pb.keys()):
            moved.append((abs(pb[k] / pa[k] - 1) * 100, f"{eng.engine} {k} page {page} bs {bs} q {q} kv {kv}"))
        if ra.best is None or rb.best is None or not pa.keys() & pb.keys():
            why_not.append(f"{eng.engine} page {page} bs {bs} q {q} kv {kv}: no setting priced on both sides")
            continue
        same = (ra.best.setting.id == rb.best.setting.id or rb.best.setting.id in ra.best.tied_with
                or ra.best.setting.id in rb.best.tied_with)
        total += 1
        differ += not same
        table.append(f"{eng.engine:<7} {page:>4} {bs:>4} {q:>3} {kv:>6}  {ra.best.setting.id[:28]:<28} "
                     f"{rb.best.setting.id[:28]:<28} {'yes' if same else 'NO'}")
    if total == 0:  # one line, not a table of nothing
        print("error: the runs share no workload and setting priced on both (" + (why_not[0] if why_not else
              "no workload in the grid given") + "): nothing was compared, so the A/A proves nothing; give two runs "
              "of the same routes and a grid they measured", file=sys.stderr)
        return 2
    print("\n".join(table))
    if moved:
        v = sorted(m[0] for m in moved)
        worst = max(moved)
        print(f"prices of {len(v)} (setting, workload) pairs moved by: median {statistics.median(v):.2f}%, "
              f"90th percentile {v[int(0.9 * (len(v) - 1))]:.2f}%, largest {worst[0]:.2f}% ({worst[1]})")
    print(f"answers: {total - differ} of {total} the same")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
