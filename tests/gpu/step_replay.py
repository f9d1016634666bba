"""The whole speculative step replayed end to end on the GPU, independently of kbench's pricing (issue 53, Do 3), and
compared with what `kbench recommend --layers` prices for the same step.

A Llama-3-8B-shaped target (32 layers, hidden 4096, MLP 14336, 32/8 heads of 128, vocabulary 128256, random bf16
weights, one KV pool per layer) and its EAGLE draft (fc over [embedding, hidden], one layer, full-vocabulary LM
head), run as SGLang 0.5.23's flashinfer backend runs a topk-1 chain of q tokens (steps = q - 1):
  target verify   plan(): fa2 paged prefill at page 1 over the token pool, the chain's mask as custom_mask, offsets
                  on the GPU (plan reads them back: waits); then one CUDA graph: 32 x (norm, QKV, KV write,
                  attention, o_proj, norm, MLP) + norm + LM head over bs x q tokens
  draft extend    plan() from host offsets, causal; graph: fc, the draft layer over bs x q tokens, LM head over bs
  draft passes    steps - 1 decode-wrapper plans (tensor cores, host offsets); one graph of the passes, each: fc,
                  layer and LM head over bs tokens
Timed as a server loop: N steps back to back, wall clock over them after a synchronize, per step. Written only with
torch and FlashInfer (no kbench import), so it checks kbench's sum rather than repeating it.

    python3 tests/gpu/step_replay.py --out DIR [--kbench-sum CMD_JSON_DIR]
kbench's sum at each shape: `kbench recommend ROUTES_RUN --engine sglang --setting flashinfer --batch-size B --q-len Q
--kv-len 4096 --page-size 1 --layers LAYERS_RUN --model llama3-8b --json` (whole_step total), run by this script
when --routes and --layers are given. Prints a table (bs, q, replay ms, kbench ms, ratio) and writes replay.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

H, INTER, VOCAB, LAYERS, HQ, HKV, D = 4096, 14336, 128256, 32, 32, 8, 128


def build(bs_max: int, kv: int, q_max: int, torch, dev):
    g = torch.Generator(device=dev).manual_seed(0)

    def w(*s):
        return torch.randn(*s, device=dev, dtype=torch.bfloat16, generator=g) * 0.02

    layers = [dict(qkv=w((HQ + 2 * HKV) * D, H), o=w(H, HQ * D), up=w(2 * INTER, H), down=w(H, INTER))
              for _ in range(LAYERS)]
    slots = bs_max * (kv + 16)  # the replay's stride per request (kv + 16 token slots)
    pools = [(torch.zeros(slots, 1, HKV, D, device=dev, dtype=torch.bfloat16),
              torch.zeros(slots, 1, HKV, D, device=dev, dtype=torch.bfloat16)) for _ in range(LAYERS + 1)]
    for k, v in pools:  # random KV (the kernels' time does not depend on values; NaN-free keeps it honest)
        k.normal_(generator=g)
        v.normal_(generator=g)
    model = dict(layers=layers, lm=w(VOCAB, H), norm=torch.ones(H, device=dev, dtype=torch.bfloat16),
                 draft=dict(fc=w(H, 2 * H), qkv=w((HQ + 2 * HKV) * D, H), o=w(H, HQ * D), up=w(2 * INTER, H),
                            down=w(H, INTER)), draft_lm=w(VOCAB, H), embed=w(VOCAB, H))
    return model, pools


def layer(x, p, attn, pool, slots_new, torch, F, norm):
    h = F.rms_norm(x, (H,), norm)
    qkv = F.linear(h, p["qkv"])
    q, k, v = qkv.split([HQ * D, HKV * D, HKV * D], dim=-1)
    pool[0].view(-1, HKV, D).index_copy_(0, slots_new, k.reshape(-1, HKV, D))  # the KV write (set_kv_buffer)
    pool[1].view(-1, HKV, D).index_copy_(0, slots_new, v.reshape(-1, HKV, D))
    o = attn(q.reshape(-1, HQ, D), pool).reshape(-1, HQ * D)
    x = x + F.linear(o, p["o"])
    h = F.rms_norm(x, (H,), norm)
    gu = F.linear(h, p["up"])
    a, b = gu.chunk(2, dim=-1)
    return x + F.linear(F.silu(a) * b, p["down"])


def replay_one(bs: int, q: int, kv: int, model, pools, torch, F, flashinfer, iters: int) -> dict:
    dev = pools[0][0].device
    steps = q - 1
    norm = model["norm"]
    stride = kv + 16  # token slots per request in the pool
    prefix = kv - q  # kv includes the q new tokens (kbench's convention)
    # token slot lists: request r owns slots r*stride .. r*stride + kv - 1
    def slots_of(n_tok):
        return torch.cat([torch.arange(r * stride, r * stride + n_tok, device=dev, dtype=torch.int32)
                          for r in range(bs)])

    kv_indices = slots_of(kv)
    kv_indptr = torch.arange(0, (bs + 1) * kv, kv, device=dev, dtype=torch.int32)
    qo_indptr = torch.arange(0, (bs + 1) * q, q, device=dev, dtype=torch.int32)
    last = torch.ones(bs, device=dev, dtype=torch.int32)
    new_slots = torch.cat([torch.arange(r * stride + prefix, r * stride + kv, device=dev) for r in range(bs)])
    ar = torch.arange(kv, device=dev)
    block = ar[None, :] <= (kv - q + torch.arange(q, device=dev))[:, None]  # the chain's causal rows over the KV
    mask = block.reshape(-1).repeat(bs)
    ws = [torch.zeros(384 * 1024 * 1024, dtype=torch.uint8, device=dev) for _ in range(2 + max(steps, 1))]
    dt = dict(q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)

    def prefill_wrapper(i, masked):
        bufs = dict(qo_indptr_buf=torch.empty_like(qo_indptr), paged_kv_indptr_buf=torch.empty_like(kv_indptr),
                    paged_kv_indices_buf=torch.empty_like(kv_indices), paged_kv_last_page_len_buf=torch.empty_like(last))
        if masked:
            bufs["custom_mask_buf"] = torch.empty((mask.numel() + 7) // 8, dtype=torch.uint8, device=dev)
            bufs["mask_indptr_buf"] = torch.empty_like(qo_indptr)
        return flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws[i], "NHD", backend="fa2", use_cuda_graph=True,
                                                              **bufs)

    verify_w, extend_w = prefill_wrapper(0, True), prefill_wrapper(1, False)
    heads = (HQ, HKV, D, 1)

    def plan_verify():  # offsets on the GPU: plan() reads them back (waits for the GPU), as SGLang's verify
        verify_w.plan(qo_indptr, kv_indptr, kv_indices, last, *heads, custom_mask=mask, causal=False, **dt)

    qo_h, kv_h, last_h = qo_indptr.cpu(), kv_indptr.cpu(), last.cpu()

    def plan_extend():
        extend_w.plan(qo_h, kv_h, kv_indices, last_h, *heads, causal=True, **dt)

    dec_ws = []
    dec_indptr = torch.arange(0, (bs + 1) * kv, kv, dtype=torch.int32)
    for i in range(max(steps - 1, 0)):
        dec_ws.append(flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            ws[2 + i], "NHD", use_cuda_graph=True, use_tensor_cores=True,
            paged_kv_indptr_buffer=torch.empty(bs + 1, dtype=torch.int32, device=dev),
            paged_kv_indices_buffer=torch.empty_like(kv_indices),
            paged_kv_last_page_len_buffer=torch.empty(bs, dtype=torch.int32, device=dev)))

    def plan_passes():
        indptr_dev = torch.arange(0, (bs + 1) * kv, kv, dtype=torch.int32, device=dev)
        indptr_dev.cpu()  # SGLang reads the passes' kv_indptr back once per step (flashinfer_backend.py:2594)
        for w in dec_ws:
            w.plan(dec_indptr, kv_indices, last_h, HQ, HKV, D, 1, **dt)

    plan_verify()
    plan_extend()
    plan_passes()
    tokens = bs * q
    x_v = torch.randn(tokens, H, device=dev, dtype=torch.bfloat16) * 0.1
    x_e = torch.randn(tokens, 2 * H, device=dev, dtype=torch.bfloat16) * 0.1
    x_p = torch.randn(bs, 2 * H, device=dev, dtype=torch.bfloat16) * 0.1
    last_rows = torch.arange(q - 1, tokens, q, device=dev)
    pass_slots = torch.cat([torch.arange(r * stride + kv, r * stride + kv + 1, device=dev) for r in range(bs)])
    dp = model["draft"]

    def verify():
        x = x_v
        for p, pool in zip(model["layers"], pools):
            x = layer(x, p, verify_w.run, pool, new_slots, torch, F, norm)
        return F.linear(F.rms_norm(x, (H,), norm), model["lm"])

    def extend():
        x = F.linear(x_e, dp["fc"])
        x = layer(x, dp, extend_w.run, pools[-1], new_slots, torch, F, norm)
        return F.linear(F.rms_norm(x[last_rows], (H,), norm), model["draft_lm"])

    def passes():
        out = None
        for w in dec_ws:
            x = F.linear(x_p, dp["fc"])
            x = layer(x, dp, w.run, pools[-1], pass_slots, torch, F, norm)
            out = F.linear(F.rms_norm(x, (H,), norm), model["draft_lm"])
        return out

    graphs = []
    for fn in (verify, extend, passes):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            fn()
        graphs.append(g)
    torch.cuda.synchronize()
    g_verify, g_extend, g_passes = graphs

    def step():
        plan_verify()
        g_verify.replay()
        plan_extend()
        g_extend.replay()
        if dec_ws:
            plan_passes()
            g_passes.replay()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    walls = []
    for _ in range(5):  # 5 repeats of `iters` steps: the median per step
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) / iters * 1e6)
    # the phases alone (GPU), for the table
    def gpu_us(g):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            g.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 100
    walls.sort()
    return dict(bs=bs, q=q, kv=kv, steps=steps, replay_us=walls[len(walls) // 2], replay_min_us=walls[0],
                verify_gpu_us=gpu_us(g_verify), extend_gpu_us=gpu_us(g_extend),
                passes_gpu_us=gpu_us(g_passes) if dec_ws else 0.0)


def kbench_sum(routes: str, layers: str, bs: int, q: int, kv: int) -> tuple[float | None, str]:
    cmd = ["kbench", "recommend", *routes.split(","), "--engine", "sglang", "--setting", "flashinfer",
           "--batch-size", str(bs), "--q-len", str(q), "--kv-len", str(kv), "--page-size", "1", "--tree", "chain", "--layers", layers,
           "--model", "llama3-8b", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["?"])[-1]
    j = json.loads(p.stdout)
    st = j["whole_step"]["steps"][0]
    return st["total_us"], "" if not st["draft_unpriced"] else st["draft_unpriced"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-size", default="1,16,64")
    ap.add_argument("--q-len", default="4,8")
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--routes", default=None, help="the sweep run(s) with the sglang flashinfer routes (comma-separated)")
    ap.add_argument("--layers", default=None, help="the kbench layers run of llama3-8b")
    a = ap.parse_args()
    import flashinfer
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    bss = [int(x) for x in a.batch_size.split(",")]
    qs = [int(x) for x in a.q_len.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model, pools = build(max(bss), a.kv_len, max(qs), torch, dev)
    card = torch.cuda.get_device_name()
    rows = []
    for bs in bss:
        for q in qs:
            r = replay_one(bs, q, a.kv_len, model, pools, torch, F, flashinfer, a.iters)
            r["card"] = card
            if a.routes and a.layers:
                r["kbench_us"], r["kbench_note"] = kbench_sum(a.routes, a.layers, bs, q, a.kv_len)
            rows.append(r)
            print(json.dumps(r), flush=True)
    (out / "replay.json").write_text(json.dumps(rows, indent=1))
    print(f"\nwhole step, SGLang flashinfer route, Llama-3-8B shapes, kv {a.kv_len}, on {card}")
    print(f"{'bs':>4} {'q':>2} {'replay ms':>10} {'kbench ms':>10} {'kbench/replay':>14}  (verify/extend/passes GPU ms)")
    bad = 0
    for r in rows:
        k = r.get("kbench_us")
        ratio = k / r["replay_us"] if k else None
        bad += ratio is None or abs(ratio - 1) > 0.10
        print(f"{r['bs']:>4} {r['q']:>2} {r['replay_us'] / 1e3:>10.2f} "
              f"{(k or 0) / 1e3:>10.2f} {ratio if ratio else float('nan'):>14.3f}  "
              f"({r['verify_gpu_us'] / 1e3:.2f}/{r['extend_gpu_us'] / 1e3:.2f}/{r['passes_gpu_us'] / 1e3:.2f})"
              + (f"  {r.get('kbench_note')}" if r.get("kbench_note") else ""))
    return 1 if bad and a.routes else 0


if __name__ == "__main__":
    sys.exit(main())
