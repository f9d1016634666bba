"""GPU evidence for engine truth: the engines' routes measured by the sweep, and `kbench recommend`'s per-step prices
against one engine step replayed on the GPU.

1. `kbench sweep -s engine-routes` (bs 1..256, q 4 and 8, kv 4096, Llama-3-8B heads, page 64): every route (each
   kernel as SGLang 0.5.23 / vLLM 0.34.0 call it) checked against the reference and timed, with its per-step host
   work timed on this machine's CPU; the table lists plan/host us, kernel us and the mask form per route and shape.
2. For three workloads and every setting `kbench recommend` prices from those rows, one engine step is replayed:
   per step (target verify, then draft extend) the route's host work, then its layers as the engine launches them
   (the verify layers captured in one CUDA graph, the draft layer in another; an eager route launches its layers
   one by one; one small kernel between two attention calls stands for the rest of the layer, so no two
   attention kernels run back to back as in no model; those stand-ins are timed alone, the same way, and taken
   off), under both overlap rules: `sum` (the GPU drained after every step) and `max` (steps back to back,
   so a step's host work runs while the GPU still runs the previous one). The replay's wall time per step is set
   beside recommend's price.

    python3 tests/gpu/engine_replay.py --out DIR [--run RUN]    (--run: an engine-routes run already measured)

Prints the tables, writes DIR/engine_replay.json; exit 1 when a route is wrong or failed, or no setting is priced.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORKLOADS = [(4, 4, 4096), (16, 4, 4096), (64, 8, 4096)]  # (bs, q, kv): each one verify/draft-extend step
LAYERS = {"verify": 32, "draft_extend": 1}  # Llama-3-8B's 32 layers, one EAGLE draft layer
STEPS_TIMED, WARMUP = 30, 5


def sweep(out: Path) -> Path:
    d = out / "runs"
    cmd = [sys.executable, "-m", "kbench.cli.main", "sweep", "-s", "engine-routes", "--out", str(d), "--name", "routes"]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=False, env={**os.environ, "COLUMNS": "200"})
    runs = sorted(d.glob("routes*"))
    if not runs:
        raise SystemExit("the sweep wrote no run folder")
    return runs[-1]


def route_table(run: Path) -> tuple[list[dict], list[str]]:
    from kbench.kernels.registry import get_kernel, is_route
    from kbench.runs.store import load_rows

    rows = load_rows(run)
    out, bad = [], []
    plain = {(r["kernel"], r["batch_size"], r["q_len"]): r for r in rows.to_dict("records")}
    print("\n== routes (the sweep's rows): host work per step, kernel per layer")
    print(f"{'route':18} {'bs':>4} {'q':>3} {'status':7} {'host us':>9} {'(p25-p75)':>15} {'kernel us':>10} "
          f"{'plain kernel us':>16}  mask / host work")
    for r in rows.sort_values(["kernel", "batch_size", "q_len"]).to_dict("records"):
        if r["kernel"] in ("trtllm-decode", "fa2-prefill", "reference"):
            continue
        k = get_kernel(r["kernel"])
        if not is_route(k):
            continue
        if r["status"] in ("wrong", "failed"):
            bad.append(f"{r['kernel']} at bs {r['batch_size']} q {r['q_len']}: {r['status']}: {r['reason']}")
        p = plain.get((k.runs, r["batch_size"], r["q_len"]), {})
        mask = ("custom mask" if getattr(k, "custom_mask", False) else
                "xqa draft mask" if k.runs == "trtllm-decode" else "causal")
        rec = {"route": r["kernel"], "bs": int(r["batch_size"]), "q": int(r["q_len"]), "kv": int(r["kv_len"]),
               "status": r["status"], "host_us": r.get("host_us"), "host_p25_us": r.get("host_p25_us"),
               "host_p75_us": r.get("host_p75_us"), "kernel_us": r.get("median_us"),
               "plain_kernel": k.runs, "plain_kernel_us": p.get("median_us"), "mask": mask,
               "host_waits_for_gpu": bool(getattr(k, "host_waits_for_gpu", False)), "rel_err": r.get("rel_err"),
               "host_cpus": r.get("host_cpus"), "host_cpu": r.get("host_cpu")}
        out.append(rec)

        def f(v, w=9):
            return f"{v:>{w}.1f}" if isinstance(v, (int, float)) and v == v else f"{'-':>{w}}"

        spread = (f"{rec['host_p25_us']:.0f}-{rec['host_p75_us']:.0f}" if rec["host_p25_us"] == rec["host_p25_us"]
                  and rec["host_p25_us"] is not None else "-")
        print(f"{rec['route']:18} {rec['bs']:>4} {rec['q']:>3} {rec['status']:7} {f(rec['host_us'])} {spread:>15} "
              f"{f(rec['kernel_us'], 10)} {f(rec['plain_kernel_us'], 16)}  {mask}"
              + (", host waits for the GPU" if rec["host_waits_for_gpu"] else ""))
    return out, bad


def _timed(one, mode: str) -> float:
    """Wall us per call of one(): sum = the GPU drained around each call; max = calls back to back."""
    import torch

    for _ in range(WARMUP):
        one()
    torch.cuda.synchronize()
    if mode == "sum":
        times = []
        for _ in range(STEPS_TIMED):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            one()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)
    reps = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(STEPS_TIMED):
            one()
        torch.cuda.synchronize()
        reps.append((time.perf_counter() - t0) * 1e6 / STEPS_TIMED)
    return statistics.median(reps)


def _graphed(calls):
    """calls() captured in one CUDA graph: its replay."""
    import torch

    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        calls()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        calls()
    return g.replay


def replay_step(routes: dict, case, mode: str) -> tuple[float, float]:
    """(wall us per engine step, of which the stand-ins for the rest of the layers and the graph launches): per
    step kind, the route's host work, then its layers (one CUDA graph, or eager), a small kernel between two
    attention calls standing for the rest of the layer (no model runs two attention kernels back to back, and PDL
    would overlap them). The stand-ins are timed alone, the same way, and reported apart."""
    import torch

    from kbench.kernels.inputs import build_inputs
    from kbench.kernels.registry import get_kernel

    dev = torch.device("cuda:0")
    inputs = build_inputs(case, dev, copies=4, seed=0)
    rest = torch.zeros(1, device=dev)
    phases, stand_ins = [], []
    for step, name in routes.items():
        route = copy.copy(get_kernel(name))  # its own wrapper per step kind
        fn = route.prepare(inputs)
        host = route.host_step(inputs)
        n = LAYERS[step]
        for i in range(3):
            fn(i % 4)
        torch.cuda.synchronize()

        def layer_calls(fn=fn, n=n):
            for layer in range(n):
                fn(layer % 4)
                rest.add_(1.0)

        def rest_calls(n=n):
            for _ in range(n):
                rest.add_(1.0)

        graph = getattr(route, "cuda_graph", True)
        phases.append((host, _graphed(layer_calls) if graph else layer_calls))
        stand_ins.append(_graphed(rest_calls) if graph else rest_calls)

    def one():
        for host, layers in phases:
            host()
            layers()

    def others():
        for calls in stand_ins:
            calls()

    return _timed(one, mode), _timed(others, mode)


def replay_table(run: Path) -> tuple[list[dict], list[str]]:
    from kbench.cases.case import Case
    from kbench.recommend import recommend_for

    out, problems = [], []
    print("\n== one engine step replayed vs kbench recommend's price "
          f"(verify x {LAYERS['verify']} layers + draft extend x {LAYERS['draft_extend']})")
    print(f"{'workload':18} {'engine':7} {'setting':28} {'mode':4} {'host us':>8} {'GPU us':>9} {'price us':>9} "
          f"{'replay us':>10} {'stand-ins':>9} {'net us':>9} {'diff':>7}")
    for bs, q, kv in WORKLOADS:
        case = Case(batch_size=bs, q_len=q, kv_len=kv, num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=64)
        for engine in ("sglang", "vllm"):
            for mode in ("sum", "max"):
                rec = recommend_for(str(run), engine, batch_size=bs, q_len=q, kv_len=kv, overlap=mode,
                                    layers=dict(LAYERS))
                seen = set()
                for r in rec.results:
                    if r.total_us is None:
                        continue
                    key = tuple(sorted(r.kernels.items()))
                    if key in seen:  # settings with the same routes replay the same step
                        continue
                    seen.add(key)
                    try:
                        wall, others = replay_step(r.kernels, case, mode)
                    except Exception as e:  # a route that cannot replay is a finding, not a crash
                        problems.append(f"{engine} {r.setting.id} at bs {bs} q {q}: {type(e).__name__}: {e}")
                        continue
                    net = wall - others
                    diff = (net / r.per_step_us - 1) * 100
                    row = {"bs": bs, "q": q, "kv": kv, "engine": engine, "setting": r.setting.id,
                           "same_as": r.same_as, "routes": r.kernels, "mode": mode, "host_us": r.host_us,
                           "gpu_us": r.gpu_us, "price_us": r.per_step_us, "replay_us": wall, "stand_ins_us": others,
                           "net_us": net, "diff_pct": diff}
                    out.append(row)
                    print(f"bs {bs:>3} q {q} kv {kv:<5} {engine:7} {r.setting.id[:28]:28} {mode:4} {r.host_us:>8.1f} "
                          f"{r.gpu_us:>9.1f} {r.per_step_us:>9.1f} {wall:>10.1f} {others:>9.1f} {net:>9.1f} "
                          f"{diff:>+6.1f}%", flush=True)
    return out, problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--run", type=Path, default=None, help="an engine-routes run already measured")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to replay")
        return 2
    print(f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs")
    run = args.run or sweep(args.out)
    routes, bad = route_table(run)
    replays, problems = replay_table(run)
    within = [r for r in replays if abs(r["diff_pct"]) <= 5]
    (args.out / "engine_replay.json").write_text(json.dumps(
        {"device": torch.cuda.get_device_name(0), "run": str(run), "routes": routes, "replays": replays,
         "bad_routes": bad, "problems": problems}, indent=2, default=str) + "\n")
    for b in bad + problems:
        print("FAIL: " + b)
    print(f"\nroutes: {len(routes)} rows, {len(bad)} wrong/failed; replays: {len(within)} of {len(replays)} within 5% "
          f"of the price; details in {args.out / 'engine_replay.json'}")
    return 1 if bad or not replays else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
