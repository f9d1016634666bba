"""FlashAttention-3 on the GPU (issue 38 part 1): vLLM 0.33.0's FA3 library (kernels/vllm_fa3.py, docs/fa3.md) loads
with this torch, and both of its kbench kernels compute the float32 reference and are timed.

On the GPU host, with the repack carried in .whl/ (python3 tools/build_fa3.py here makes it):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
        .whl/kbench_vllm_fa3-*.whl && python3 -m pip install -q --no-deps --no-build-isolation -e . \\
        && PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 tests/gpu/fa3_check.py --out $OUT
(kbench needs torch and numpy here, nothing of the FlashInfer bundle.)

Cases: Llama-3-8B heads (32 q, 8 KV, d 128), bf16, kv 4096, bs 1/16/64, q 4/8, pages of 1 (SGLang's fa3
default) and 64 (vLLM's default block), HND; three at page 1 with a page table 131072 tokens wide (SGLang's
CUDA-graph verify buffers; without max_seqlen_k FA3 takes that width as seqlen_k); then correctness extras, hardly timed: NHD, fp16, ragged q
(accept:0.6) with per-request KV (lognormal:1.0), a partial last page, Llama-3-70B at TP8 (8/1/128), d 64.
Each: `vllm-fa3` (vLLM's call) and `vllm-fa3-sgl-call` (SGLang's arguments), every input copy checked against
kbench's float32 reference (relative L2 error, kbench's tolerance), then timed by kbench's GraphTimer (CUDA graph
replays, fenced, duty-cycled: the sweep's timer) with input copies rotating past L2.
Prints the library's provenance (path, sha256, torch), a table (rel err, max abs err, median us, KV GB/s) and a
verdict line; writes fa3_check.json to --out. Exit 0 all correct, 1 a kernel wrong or failed, 2 the library does
not load here (the reason is printed), 3 no SM90 GPU. About 1 minute on an H100.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

TIMED = [dict(bs=bs, q=q, page=page) for page in (1, 64) for bs in (1, 16, 64) for q in (4, 8)] + [
    # SGLang's CUDA-graph verify hands FA3 a page table as wide as the model's context
    # (target_verify_metadata["page_table"][:bs, :]) and no max_seqlen_k: FA3 then sizes its split heuristic by it
    dict(bs=bs, q=q, page=1, max_seq_len="context:131072") for bs, q in ((1, 4), (16, 4), (64, 8))]
EXTRAS = [dict(bs=16, q=4, page=64, kv_layout="NHD"), dict(bs=16, q=4, page=64, dtype="fp16", kv_dtype="fp16"),
          dict(bs=16, q=8, page=1, q_dist="accept:0.6", kv_dist="lognormal:1.0"),
          dict(bs=16, q=8, page=64, q_dist="accept:0.6", kv_dist="lognormal:1.0"),
          dict(bs=5, q=4, page=64, kv=1000), dict(bs=16, q=4, page=64, heads=(8, 1, 128)),
          dict(bs=16, q=4, page=1, heads=(8, 1, 128)), dict(bs=16, q=4, page=16, heads=(16, 4, 64))]
NAMES = ("vllm-fa3", "vllm-fa3-sgl-call")
L2_ROTATE_BYTES = 256 << 20  # copies rotate until this much KV is touched: well past the H100/H200 L2 (50/60 MB)


def make_case(spec: dict):
    from kbench.cases.case import Case

    hq, hkv, d = spec.get("heads", (32, 8, 128))
    kw = {k: spec[k] for k in ("kv_layout", "dtype", "kv_dtype", "q_dist", "kv_dist", "max_seq_len") if k in spec}
    return Case(spec["bs"], spec["q"], spec.get("kv", 4096), hq, hkv, d, spec["page"], **kw)


def sha256(path: Path) -> str:
    from kbench.files import record

    return record(path)["sha256"]


def run_case(kernels, case, timed: bool, timer, dev) -> list[dict]:
    import torch

    from kbench.kernels.inputs import build_inputs, copy_bytes
    from kbench.kernels.reference import reference_attention
    from kbench.timing.check import compare, tolerance_for

    copies = max(1, min(8, -(-L2_ROTATE_BYTES // copy_bytes(case)))) if timed else 1
    inputs = build_inputs(case, device=dev.torch_device, copies=copies)
    refs = [reference_attention(inputs, i) for i in range(copies)]
    tol = tolerance_for(case.dtype, case.kv_dtype)
    kv_bytes = sum(case.lengths().kv) * case.num_kv_heads * case.head_dim * 2 * case.kv_elem_bytes()
    rows = []
    for k in kernels:
        row = dict(kernel=k.name, case=case.case_id, timed=timed)
        why = k.supports(dev, case)
        if why:
            rows.append(dict(row, status="skipped", reason=why))
            continue
        try:
            fn = k.prepare(inputs)
            worst = None
            for i in reversed(range(copies)):
                chk = compare(fn(i), refs[i], tol)
                if worst is None or not chk.ok or chk.rel_err > worst.rel_err:
                    worst = chk
                if not chk.ok:
                    break
            torch.cuda.synchronize()
            row.update(rel_err=worst.rel_err, max_abs_err=worst.max_abs_err, tolerance=tol,
                       status="ok" if worst.ok else "wrong", reason="" if worst.ok else worst.describe())
            if worst.ok and timed:
                m = timer.measure(fn, copies=copies)
                row.update(median_us=m.median_us, iqr_us=m.iqr_us, samples=len(m.samples_us), stop=m.stop,
                           kv_gbs=kv_bytes / (m.median_us * 1e-6) / 1e9, copies=copies)
        except Exception as e:  # noqa: BLE001 - a kernel that raises is a failed row, the others still run
            row.update(status="failed", reason=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                       trace=traceback.format_exc(limit=4))
        rows.append(row)
    del inputs, refs
    torch.cuda.empty_cache()
    return rows


def fmt(rows: list[dict]) -> str:
    head = ["kernel", "case", "status", "rel err", "max abs", "median us", "KV GB/s"]
    body = [[r["kernel"], r["case"], r["status"], f"{r['rel_err']:.2e}" if "rel_err" in r else "",
             f"{r['max_abs_err']:.2e}" if "max_abs_err" in r else "",
             f"{r['median_us']:.1f}" if "median_us" in r else "", f"{r['kv_gbs']:.0f}" if "kv_gbs" in r else ""]
            for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in body])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    ap.add_argument("--budget", type=float, default=0.6, help="timing budget per kernel and case, seconds")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    import torch

    from kbench.kernels import vllm_fa3
    from kbench.timing.probe import probe_device
    from kbench.timing.timer import GraphTimer, StopRule

    dev = probe_device(0, with_flashinfer=False)
    print(f"device: {dev.name} SM{dev.sm}; torch {torch.__version__} (CUDA {torch.version.cuda})")
    summary = dict(device=dev.name, sm=dev.sm, torch=torch.__version__, cuda=torch.version.cuda)
    if not dev.cuda or dev.sm != 90:
        print(f"fa3_check: FAILED: needs an SM90 GPU (this is {dev.name}, SM{dev.sm})")
        return 3
    lib, origin = vllm_fa3.find_library()
    if lib is not None:
        summary.update(library=str(lib), origin=origin, library_sha256=sha256(lib), library_bytes=lib.stat().st_size)
        print(f"library: {lib} ({origin}), {lib.stat().st_size} bytes, sha256 {summary['library_sha256']}")
    t = time.time()
    ops, why = vllm_fa3.load_fa3()
    summary["load_s"] = round(time.time() - t, 2)
    if ops is None:
        summary.update(verdict="does not load", reason=why)
        (args.out / "fa3_check.json").write_text(json.dumps(summary, indent=1))
        print(f"fa3_check: FAILED: {why}")
        return 2
    print(f"loaded in {summary['load_s']} s: torch.ops._vllm_fa3_C.{{fwd, get_scheduler_metadata}}")

    kernels = [vllm_fa3.VllmFa3("vllm"), vllm_fa3.VllmFa3("sglang")]
    timer = GraphTimer(StopRule(spread_target=0.01, budget_s=args.budget, min_samples=10))
    rows: list[dict] = []
    for timed, specs in ((True, TIMED), (False, EXTRAS)):
        for spec in specs:
            case_rows = run_case(kernels, make_case(spec), timed, timer, dev)
            for r in case_rows:
                print(f"  {r['kernel']:18s} {r['case']:46s} {r['status']:7s} "
                      + (f"rel {r['rel_err']:.2e} " if "rel_err" in r else "")
                      + (f"{r['median_us']:8.1f} us {r['kv_gbs']:6.0f} GB/s" if "median_us" in r else "")
                      + (f" {r['reason']}" if r.get("reason") else ""), flush=True)
            rows += case_rows
    print()
    print(fmt(rows))
    bad = [r for r in rows if r["status"] != "ok"]
    worst = max((r["rel_err"] for r in rows if "rel_err" in r), default=float("nan"))
    summary.update(rows=rows, worst_rel_err=worst, wall_s=round(time.time() - t0, 1),
                   verdict="ok" if not bad else f"{len(bad)} not ok")
    (args.out / "fa3_check.json").write_text(json.dumps(summary, indent=1))
    (args.out / "fa3_check.txt").write_text(fmt(rows) + "\n")
    print(f"\nfa3_check: {'OK' if not bad else 'FAILED'}: {len(rows) - len(bad)}/{len(rows)} kernel-cases correct, "
          f"worst rel err {worst:.2e} (tolerance 2e-2 bf16, 1e-2 fp16), {summary['wall_s']} s"
          + ("".join(f"\n  {r['kernel']} {r['case']}: {r['status']}: {r.get('reason')}" for r in bad)))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
