"""GPU diagnostics for the repeatability and timer-agreement gaps (issue #6); run on the H200.

Part A, noise: the same (kernel, case) measured in rounds, with NVML sampled every 2 ms during each
measurement (SM clock, power, temperature, clock-event reasons), on kept inputs and on inputs rebuilt
at new addresses, to tell allocation effects from clock/power effects.
Part B, PDL: xqa timed back to back in a graph with and without programmatic dependent launch, and by
CUPTI over back-to-back and over synchronised eager calls.

    python3 tests/gpu/probe_noise.py OUT_DIR
"""
from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

from kbench.cases.case import Case
from kbench.timing.probe import probe_device
from kbench.kernels.inputs import build_inputs
from kbench.kernels.registry import get_kernel
from kbench.timing.timer import GraphTimer, StopRule
from kbench.cases.models import MODELS
from kbench.cases.scenario import Timing
from kbench.engine.placement import copies_for
from kbench.engine.validate import cupti_us_per_call

H = MODELS["llama3-8b"]


class Sampler(threading.Thread):
    def __init__(self, period_s=0.002):
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nv = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.period = period_s
        self.samples = []
        self.stop_flag = False

    def run(self):
        nv, h = self.nv, self.h
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        while not self.stop_flag:
            try:
                self.samples.append((time.perf_counter(), nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                     nv.nvmlDeviceGetPowerUsage(h), nv.nvmlDeviceGetTemperature(h, 0), reasons(h)))
            except Exception:
                pass
            time.sleep(self.period)

    def window(self, t0, t1):
        w = [s for s in self.samples if t0 <= s[0] <= t1]
        if not w:
            return {}
        clk = [s[1] for s in w]
        reasons = 0
        for s in w:
            reasons |= s[4]
        return dict(n=len(w), clk_min=min(clk), clk_mean=round(statistics.mean(clk)), clk_max=max(clk),
                    power_w=round(statistics.mean(s[2] for s in w) / 1000), temp=max(s[3] for s in w),
                    reasons=hex(reasons))


def case_of(bs, q, kv):
    return Case(bs, q, kv, H.num_qo_heads, H.num_kv_heads, H.head_dim, 64)


def part_a(out, sampler, dev):
    """Where does a measurement's state come from? Per pair, four ways of measuring again."""
    pairs = [("decode-wrapper", 7), ("decode-wrapper", 9), ("decode-wrapper", 10), ("fa2-prefill", 7),
             ("fa2-prefill", 13), ("trtllm-decode", 2), ("trtllm-decode", 3), ("trtllm-decode", 5),
             ("fa3-prefill", 10), ("trtllm-fmha-v2", 15)]
    timer = GraphTimer(StopRule(0.01, 2.0, 10, 400))
    inputs_by_q = {}
    rows = []

    def rec(kn, c, variant, i, med, t0, t1, extra=None):
        r = dict(kernel=kn, case=c.case_id, variant=variant, i=i, median=round(med, 2), **sampler.window(t0, t1),
                 **(extra or {}))
        rows.append(r)

    for kn, q in pairs:
        c = case_of(64, q, 4096)
        if q not in inputs_by_q:
            inputs_by_q[q] = build_inputs(c, dev.torch_device, copies=copies_for(c, dev, Timing()))
        inputs = inputs_by_q[q]
        copies = len(inputs.copies)
        k = get_kernel(kn)
        fn = k.prepare(inputs)
        fn(0)
        # V1: one graph, windows of ~30 ms, 50 ms apart
        m0 = timer.measure(fn, copies)
        fence = torch.zeros(1, dtype=torch.int32, device="cuda")
        g = timer._capture(fn, m0.calls_per_sample, copies, fence)
        for w in range(8):
            time.sleep(0.05)
            t0 = time.perf_counter()
            xs = []
            while time.perf_counter() - t0 < 0.03:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                xs.append(a.elapsed_time(b) * 1000 / m0.calls_per_sample - m0.fence_us)
            rec(kn, c, "same-graph", w, statistics.median(xs), t0, time.perf_counter())
        del g
        # V2: new capture each time, same prepared fn
        for w in range(6):
            t0 = time.perf_counter()
            m = timer.measure(fn, copies)
            rec(kn, c, "recapture", w, m.median_us, t0, time.perf_counter())
        # V3: prepared again (new output tensor, plan) each time
        for w in range(6):
            fn2 = k.prepare(inputs)
            fn2(0)
            t0 = time.perf_counter()
            m = timer.measure(fn2, copies)
            rec(kn, c, "reprepare", w, m.median_us, t0, time.perf_counter())
        # V4: inputs rebuilt at new addresses
        for w in range(4):
            spacer = torch.empty((w * 37 + 11) << 20, dtype=torch.uint8, device="cuda")
            inp = build_inputs(c, dev.torch_device, copies=copies, seed=0)
            fn3 = k.prepare(inp)
            fn3(0)
            t0 = time.perf_counter()
            m = timer.measure(fn3, copies)
            rec(kn, c, "rebuilt", w, m.median_us, t0, time.perf_counter())
            del inp, fn3, spacer
            torch.cuda.empty_cache()
    (out / "probe_a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("\n== part A: medians (us) per way of measuring again; max/min; SM clock MHz mean per window")
    by = {}
    for r in rows:
        by.setdefault((r["kernel"], r["case"], r["variant"]), []).append(r)
    for (kn, cid, v), rs in by.items():
        meds = [r["median"] for r in rs]
        print(f"{kn:15s} {cid.split('-h')[0]:15s} {v:10s} " + " ".join(f"{x:6.1f}" for x in meds)
              + f" | {max(meds) / min(meds):.3f} | clk " + ",".join(str(r.get("clk_mean")) for r in rs)
              + f" | W {max(r.get('power_w', 0) for r in rs)} reasons {sorted(set(r.get('reasons') for r in rs))}")


def part_b(out, sampler, dev):
    import flashinfer.decode as fd

    orig = fd.trtllm_batch_decode_with_kv_cache
    res = []
    timer = GraphTimer(StopRule(0.01, 2.0, 10, 400))
    for bs, q, kv in ((16, 4, 4096), (64, 8, 4096), (1, 4, 512), (128, 4, 16384)):
        c = case_of(bs, q, kv)
        inputs = build_inputs(c, dev.torch_device, copies=copies_for(c, dev, Timing()))
        copies = len(inputs.copies)
        for kn in ("trtllm-decode", "decode-wrapper", "fa3-prefill", "trtllm-fmha-v2"):
            for pdl in (None, False):
                if kn != "trtllm-decode" and pdl is False:
                    continue
                if pdl is False:
                    fd.trtllm_batch_decode_with_kv_cache = lambda *a, **kw: orig(*a, enable_pdl=False, **kw)
                fn = get_kernel(kn).prepare(inputs)
                fn(0)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                g = timer.measure(fn, copies).median_us
                t1 = time.perf_counter()
                cu, nk = cupti_us_per_call(fn, copies)

                def synced(i, fn=fn):
                    o = fn(i)
                    torch.cuda.synchronize()
                    return o

                cs, _ = cupti_us_per_call(synced, copies)
                fd.trtllm_batch_decode_with_kv_cache = orig
                r = dict(kernel=kn, case=c.case_id, pdl=pdl, graph_us=round(g, 2), cupti_b2b_us=round(cu, 2),
                         cupti_synced_us=round(cs, 2), kernels_per_call=nk, **sampler.window(t0, t1))
                res.append(r)
                print(json.dumps(r), flush=True)
        del inputs
        torch.cuda.empty_cache()
    (out / "probe_b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in res))
    print("\n== part B: graph vs CUPTI (us)")
    for r in res:
        print(f"{r['kernel']:15s} {r['case'].split('-h')[0]:16s} pdl={str(r['pdl']):5s} graph {r['graph_us']:8.1f} "
              f"cupti b2b {r['cupti_b2b_us']:8.1f} cupti synced {r['cupti_synced_us']:8.1f} k/call {r['kernels_per_call']}")


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dev = probe_device(0)
    sampler = Sampler()
    sampler.start()
    parts = sys.argv[2:] or ["b", "a"]
    if "b" in parts:
        part_b(out, sampler, dev)
    if "a" in parts:
        part_a(out, sampler, dev)
    sampler.stop_flag = True


if __name__ == "__main__":
    main()
