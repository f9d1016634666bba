"""GPU evidence for two entries of kbench's engine-settings table (kbench/recommend/engines.toml, issue #28).

1. FlashInfer's paged prefill wrapper with backend="auto" (what vLLM's FLASHINFER backend builds when its TRTLLM
   decode is off): which kernel does it run for draft-extend shapes on this GPU? The table says fa3 on SM90 with
   FlashInfer 0.7.2.post1 and fa2 (every request <= 64 query tokens) from 0.7.4. Checked by running auto, fa2
   and fa3 on the same inputs: auto's output is bitwise one of the two.
2. SGLang's flashinfer backend hands EAGLE verify a custom mask, a chain's too (the table marks the route
   priced_low): what does the fa2 prefill cost with the chain's causal mask passed as custom_mask, against the
   causal=True path kbench times? Timed with kbench's own timer (CUDA graph, fence, duty cycle); both outputs are
   checked against each other (the same attention, so they must agree to bf16 rounding).

    python3 tests/gpu/engine_routes.py --out DIR

Prints a table per part, writes DIR/engine_routes.json, exits 1 when a check fails (auto runs a kernel the table
does not name for this FlashInfer, or the masked output disagrees with the causal one). About a minute with the
fa2/fa3 modules prebuilt.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

ROUTE_SHAPES = [(16, 2, 4096), (16, 4, 4096), (16, 8, 4096), (16, 16, 4096), (2, 128, 4096)]
MASK_SHAPES = [(1, 4, 4096), (16, 4, 4096), (16, 8, 4096), (64, 4, 4096), (64, 8, 4096), (16, 4, 32768)]


def version_key(text: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.match(r"(\d+(?:\.\d+)*)", text).group(1).split("."))


def prefill(inputs, backend: str, mask=None):
    """A paged prefill wrapper planned for the case (causal, or with a custom mask), and fn(i) for the timer."""
    import flashinfer
    import torch

    from kbench.kernels.base import WORKSPACE_BYTES
    from kbench.kernels.inputs import torch_dtype

    c = inputs.case
    ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=inputs.device)
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, c.kv_layout, backend=backend)
    w.plan(inputs.host("qo_indptr"), inputs.host("kv_indptr"), inputs.host("kv_indices"), inputs.host("last_page_len"),
           c.num_qo_heads, c.num_kv_heads, c.head_dim, c.page_size, causal=mask is None, custom_mask=mask,
           sm_scale=inputs.sm_scale, q_data_type=torch_dtype(c.dtype), kv_data_type=torch_dtype(c.kv_dtype))
    out = torch.empty_like(inputs.q)

    def fn(i: int):
        cp = inputs.copies[i]
        return w.run(cp.q, cp.kv_cache, out=out)

    return fn, out


def chain_mask(bs: int, q: int, kv: int, device):
    """SGLang's chain verify mask, written out: query i of a request sees KV 0 .. kv - q + i (flattened per request)."""
    import torch

    rows = torch.arange(q, device=device).unsqueeze(1)
    cols = torch.arange(kv, device=device).unsqueeze(0)
    one = cols <= (kv - q + rows)
    return one.reshape(-1).repeat(bs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import flashinfer
    import torch

    from kbench.cases.case import Case
    from kbench.kernels.inputs import build_inputs
    from kbench.timing.timer import GraphTimer, StopRule

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to check")
        return 2
    dev = torch.device("cuda:0")
    major, minor = torch.cuda.get_device_capability(dev)
    sm, fi = major * 10 + minor, flashinfer.__version__
    print(f"{torch.cuda.get_device_name(dev)} (SM{sm}), FlashInfer {fi}")
    failures, record = [], {"device": torch.cuda.get_device_name(dev), "sm": sm, "flashinfer": fi, "auto": [], "mask": []}

    # ---- 1. what backend="auto" runs ----------------------------------------------------------------------
    print("\n== BatchPrefillWithPagedKVCacheWrapper(backend='auto') on draft-extend shapes")
    print(f"{'bs':>4} {'q':>4} {'kv':>6}  auto runs   table says")
    for bs, q, kv in ROUTE_SHAPES:
        inputs = build_inputs(Case(batch_size=bs, q_len=q, kv_len=kv, num_qo_heads=32, num_kv_heads=8, head_dim=128),
                              dev)
        outs = {}
        for b in ("auto", "fa2", "fa3"):
            if b == "fa3" and sm != 90:
                continue
            fn, out = prefill(inputs, b)
            fn(0)
            torch.cuda.synchronize()
            outs[b] = out.clone()
        same = [b for b in ("fa2", "fa3") if b in outs and torch.equal(outs["auto"], outs[b])]
        runs = same[0] if len(same) == 1 else ("fa2 = fa3 (bitwise)" if len(same) == 2 else "neither")
        if sm == 90:
            want = "fa2" if (q <= 64 and version_key(fi) >= (0, 7, 4)) else "fa3"
        else:
            want = "fa2"
        ok = runs == want or runs.startswith("fa2 = fa3")
        if not ok:
            failures.append(f"auto runs {runs} at bs {bs} q {q} kv {kv}; the table says {want} for FlashInfer {fi}")
        record["auto"].append({"bs": bs, "q": q, "kv": kv, "auto_runs": runs, "table": want, "ok": ok})
        print(f"{bs:>4} {q:>4} {kv:>6}  {runs:<10} {want}{'' if ok else '   MISMATCH'}")

    # ---- 2. fa2 with the chain's custom mask vs causal ----------------------------------------------------
    print("\n== fa2 paged prefill: chain custom mask (SGLang's EAGLE verify) vs causal=True (what kbench times)")
    print(f"{'bs':>4} {'q':>4} {'kv':>6}  {'causal us':>10} {'masked us':>10} {'ratio':>6}  max rel diff")
    timer = GraphTimer(StopRule(spread_target=0.01, budget_s=1.5, min_samples=10, max_samples=300, min_time_s=0.1))
    for bs, q, kv in MASK_SHAPES:
        case = Case(batch_size=bs, q_len=q, kv_len=kv, num_qo_heads=32, num_kv_heads=8, head_dim=128)
        inputs = build_inputs(case, dev, copies=2)
        causal_fn, causal_out = prefill(inputs, "fa2")
        masked_fn, masked_out = prefill(inputs, "fa2", chain_mask(bs, q, kv, dev))
        causal_fn(0), masked_fn(0)
        torch.cuda.synchronize()
        diff = ((masked_out.float() - causal_out.float()).norm() / causal_out.float().norm()).item()
        ok = diff < 2e-2
        if not ok:
            failures.append(f"masked fa2 differs from causal fa2 at bs {bs} q {q} kv {kv}: rel {diff:.3g}")
        tc = timer.measure(causal_fn, copies=2).median_us
        tm = timer.measure(masked_fn, copies=2).median_us
        record["mask"].append({"bs": bs, "q": q, "kv": kv, "causal_us": tc, "masked_us": tm, "ratio": tm / tc,
                               "rel_diff": diff, "ok": ok})
        print(f"{bs:>4} {q:>4} {kv:>6}  {tc:>10.1f} {tm:>10.1f} {tm / tc:>6.2f}  {diff:.2e}{'' if ok else '  WRONG'}")

    (args.out / "engine_routes.json").write_text(json.dumps({**record, "failures": failures}, indent=2) + "\n")
    for f in failures:
        print("FAIL: " + f)
    print(f"\n{'all checks passed' if not failures else f'{len(failures)} check(s) failed'}; "
          f"details in {args.out / 'engine_routes.json'}")
    return 1 if failures else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped to head: end quietly (no BrokenPipeError traceback)
    sys.exit(main())
