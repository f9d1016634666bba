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

from kbench.case import Case
from kbench.kernels.device import probe_device
from kbench.kernels.inputs import build_inputs
from kbench.kernels.registry import get_kernel
from kbench.kernels.timer import GraphTimer, StopRule
from kbench.models import MODELS
from kbench.scenario import Timing
from kbench.sweep import copies_for
from kbench.validate import cupti_us_per_call

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
    kernels = ["trtllm-decode", "decode-wrapper", "fa2-prefill", "fa3-prefill", "trtllm-fmha-v2"]
    cases = [case_of(64, q, 4096) for q in (2, 5, 7, 10)] + [case_of(16, q, 4096) for q in (8, 15)]
    timer = GraphTimer(StopRule(0.01, 2.0, 10, 400))
    timer_long = GraphTimer(StopRule(0.01, 2.0, 10, 400), warmup_ms=300)
    kept = {}
    for c in cases:
        kept[c.case_id] = build_inputs(c, dev.torch_device, copies=copies_for(c, dev, Timing()))
    rows = []
    for rnd in range(7):
        variant = "kept" if rnd < 3 else ("rebuilt" if rnd < 5 else "kept-warm300")
        for c in cases:
            if variant == "rebuilt":
                spacer = torch.empty((rnd * 37 + 11) << 20, dtype=torch.uint8, device="cuda")
                inputs = build_inputs(c, dev.torch_device, copies=copies_for(c, dev, Timing()), seed=0)
            else:
                inputs = kept[c.case_id]
            for kn in kernels:
                k = get_kernel(kn)
                fn = k.prepare(inputs)
                fn(0)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                m = (timer_long if variant == "kept-warm300" else timer).measure(fn, len(inputs.copies))
                t1 = time.perf_counter()
                r = dict(round=rnd, variant=variant, kernel=kn, case=c.case_id, median=round(m.median_us, 2),
                         spread=round(m.rel_spread, 4), n=len(m.samples_us), calls=m.calls_per_sample,
                         wall=round(t1 - t0, 3), first5=[round(x, 1) for x in m.samples_us[:5]],
                         last5=[round(x, 1) for x in m.samples_us[-5:]], **sampler.window(t0, t1))
                rows.append(r)
                print(json.dumps(r), flush=True)
            if variant == "rebuilt":
                del inputs, spacer
                torch.cuda.empty_cache()
    (out / "probe_a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # summary: per (kernel, case) medians by round, and min/max ratio
    print("\n== part A: medians per round (us); kept r0-2, rebuilt r3-4, warm-up 300 ms r5-6")
    by = {}
    for r in rows:
        by.setdefault((r["kernel"], r["case"]), []).append(r)
    for (kn, cid), rs in by.items():
        meds = [r["median"] for r in rs]
        clk = [r.get("clk_mean") for r in rs]
        print(f"{kn:15s} {cid.split('-h')[0]:16s} " + " ".join(f"{x:7.1f}" for x in meds)
              + f"  max/min {max(meds) / min(meds):.3f}  clk " + ",".join(str(x) for x in clk))


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
