"""Routes (kbench.kernels.routes): kernels as the engines call them, measured by the sweep with their per-step host
work. On a CPU the real routes are skipped rows; a CPU route made here proves the measuring, the rows and the
policy cells carry the host work."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import route_emulators as emu
from helpers import ancestors
from kbench.cases.case import Case
from kbench.device import DeviceInfo
from kbench.engine.measure import kernel_reason
from kbench.kernels import registry
from kbench.kernels.inputs import build_inputs
from kbench.kernels.reference import reference_attention
from kbench.kernels.routes import fa3_tree, sglang_host_plan
from kbench.kernels.routes.base import Route, sglang_kv_pool, token_slots
from kbench.recommend.settings import load_table

ROUTES = [k for k in registry.all_kernels() if registry.is_route(k) and not registry.is_eager(k)]
EAGER = [k for k in registry.all_kernels() if registry.is_eager(k)]


def test_routes_are_registered_apart_from_all():
    names = {k.name for k in ROUTES}
    assert names == {"sglang-fi-verify", "sglang-fi-extend", "sglang-trtllm-mha", "sglang-fa3", "sglang-flashmla",
                     "sglang-fi-mla", "sglang-fi-mla-extend", "sglang-fa3-mla", "sglang-fi-verify-hostplan",
                     "sglang-fa3-tree", "vllm-fi-decode", "vllm-fi-prefill", "vllm-fi-prefill-fa3", "vllm-flash-attn",
                     "vllm-flashmla", "vllm-flash-attn-mla", "sglang-fi-draft-decode", "sglang-trtllm-mha-draft",
                     "sglang-fa3-draft"}
    assert not names & {k.name for k in registry.select(["all"])}
    assert {k.name for k in registry.select(["routes"])} == names
    assert {k.name for k in registry.select(["routes", "fa2-prefill"])} == names | {"fa2-prefill"}
    for k in ROUTES:
        assert k.engine in ("sglang", "vllm") and k.runs in registry.kernel_names() and k.host_work and k.source
        assert k.path == registry.get_kernel(k.runs).path  # a route competes on the path of the kernel it runs


def test_every_graph_route_but_the_capture_only_plan_has_an_eager_twin_in_its_own_group():
    names = {k.name for k in ROUTES}
    eager = {k.name: k for k in EAGER}
    assert set(eager) == {n + "-eager" for n in names - {"sglang-fi-verify-hostplan"}}
    assert {k.name for k in registry.select(["eager-routes"])} == set(eager)
    assert not set(eager) & {k.name for k in registry.select(["routes"])}
    by = {k.name: k for k in ROUTES}
    for name, k in eager.items():
        g = by[name.removesuffix("-eager")]
        assert registry.is_route(k) and k.eager and not getattr(g, "eager", False)
        # the same kernel, steps, per-step host work and wait as the graph route: only the launch differs
        assert (k.runs, k.steps, k.host_waits_for_gpu, k.engine, k.path) == (g.runs, g.steps, g.host_waits_for_gpu,
                                                                             g.engine, g.path)
    # FlashInfer's eager wrapper has no CUDA-graph buffers; the graph route keeps its own
    assert not eager["sglang-fi-verify-eager"].cuda_graph and by["sglang-fi-verify"].cuda_graph
    assert eager["sglang-fa3-eager"]._kernel is not by["sglang-fa3"]._kernel


def test_the_settings_table_names_routes_that_run_its_kernel_at_its_step():
    for eng in load_table().engines:
        for s in eng.settings:
            for r in s.routes:
                if r.route is None:
                    continue
                k = registry.get_kernel(r.route)
                assert registry.is_route(k), (s.id, r.route)
                assert k.engine == eng.engine and k.runs == r.kernel and r.step in k.steps, (s.id, r.step, r.route)


def test_host_work_that_waits_for_the_gpu_is_the_plan_reading_gpu_offsets():
    by = {k.name: k for k in ROUTES}
    assert by["sglang-fi-verify"].host_waits_for_gpu and by["sglang-fi-verify"].custom_mask
    assert not by["sglang-fi-extend"].host_waits_for_gpu and not by["sglang-fi-extend"].custom_mask
    # vLLM FLASHINFER without TRT-LLM reads seq_lens back every step (flashinfer.py:1696-1706): it waits too
    assert by["vllm-fi-prefill"].host_waits_for_gpu and not by["vllm-fi-prefill"].cuda_graph
    assert not by["sglang-trtllm-mha"].host_waits_for_gpu and not by["vllm-fi-decode"].host_waits_for_gpu
    # SGLang's sync-free verify plan: the same mask and GPU offsets, no read-back; the fa3 cascade: no plan at all
    hp = by["sglang-fi-verify-hostplan"]
    assert hp.custom_mask and hp.indices_on_gpu and hp.host_plan and not hp.host_waits_for_gpu
    assert not by["sglang-fa3-tree"].host_waits_for_gpu and by["sglang-fa3-tree"].steps == ("verify",)
    # SGLang's flashinfer routes plan page size 1 whatever the pool's page; vLLM's plans its block size
    assert all(by[n].page_one for n in ("sglang-fi-verify", "sglang-fi-extend", "sglang-fi-verify-hostplan"))
    assert not by["vllm-fi-prefill"].page_one
    # below FlashInfer 0.7.4 the same route runs fa3 on SM90 (auto): the same host work, FA3's kernel
    fa3 = by["vllm-fi-prefill-fa3"]
    assert (fa3.fa, fa3.runs, by["vllm-fi-prefill"].runs) == ("fa3", "fa3-prefill", "fa2-prefill")
    assert fa3.host_waits_for_gpu and not fa3.cuda_graph and not fa3.custom_mask and fa3.host_work == \
        by["vllm-fi-prefill"].host_work


class CpuRoute(Route):
    """A route that runs on the CPU: the reference as its kernel, a sleep as its host work."""
    name, path, engine, runs, host_work, source = "test-cpu-route", "decode", "sglang", "trtllm-decode", "sleep", "-"
    HOST_S = 0.002

    def supports(self, device, case):
        return None

    def prepare(self, inputs):
        out = reference_attention(inputs).to(inputs.q.dtype)
        return lambda i: out

    def host_step(self, inputs):
        return lambda: time.sleep(self.HOST_S)


def sweep(out, kernels: str):
    from kbench.cases.scenario import apply_overrides, load_scenario
    from kbench.engine.sweep import run_sweep

    sc = apply_overrides(load_scenario("quick"), kernels=kernels, batch_size="1", q_len="4", kv_len="128")
    return run_sweep(sc, out_dir=out, run_name="r").run_dir


@pytest.fixture
def cpu_route(monkeypatch):
    registry._load()
    monkeypatch.setitem(registry._REGISTRY, CpuRoute.name, CpuRoute())
    return CpuRoute


def test_a_route_row_carries_its_host_work_timed_on_this_cpu(tmp_path, cpu_route):
    from kbench.report.policy import policy_from
    from kbench.runs.store import load_rows

    run = sweep(tmp_path, "routes,reference")
    rows = load_rows(run)
    mine = rows[rows["kernel"] == cpu_route.name].iloc[0]
    assert mine["status"] == "ok", mine["reason"]
    assert cpu_route.HOST_S * 1e6 <= mine["host_us"] < cpu_route.HOST_S * 1e6 * 5
    assert mine["host_p25_us"] <= mine["host_us"] <= mine["host_p75_us"]
    assert mine["host_cpus"] == os.cpu_count() and mine["host_cpu"]
    # the real routes are skipped rows here, with the reason; plain kernels carry no host columns
    real = rows[rows["kernel"].isin([k.name for k in ROUTES])]
    assert set(real["status"]) == {"skipped"}
    assert real["reason"].str.contains("CUDA|takes MLA|a draft decode pass has one query token").all()
    ref = rows[rows["kernel"] == "reference"].iloc[0]
    assert pd.isna(ref["host_us"])
    # the policy's cell keeps the route's host work beside its time, and the host it was timed on
    pol, _ = policy_from([run])
    cell = pol["groups"][0]["cells"][0]
    assert cell["kernels_host_us"][cpu_route.name] == pytest.approx(mine["host_us"], rel=1e-3)
    assert cell["kernels_host_iqr_us"][cpu_route.name] == pytest.approx(mine["host_p75_us"] - mine["host_p25_us"],
                                                                        rel=1e-3, abs=1e-3)
    assert "reference" not in cell.get("kernels_host_us", {})
    assert pol["host"] == {"cpus": os.cpu_count(), "cpu": mine["host_cpu"]}


def test_a_route_whose_host_work_raises_is_a_failed_row_not_a_crash(tmp_path, cpu_route, monkeypatch):
    from kbench.runs.store import load_rows

    def broken(self, inputs):
        def step():
            raise RuntimeError("plan exploded")
        return step

    monkeypatch.setattr(CpuRoute, "host_step", broken)
    run = sweep(tmp_path, cpu_route.name)
    row = load_rows(run).query("kernel == @cpu_route.name").iloc[0]
    assert row["status"] == "failed" and row["reason"] == "host work: RuntimeError: plan exploded"


def test_time_host_takes_quartiles_of_separate_samples():
    from kbench.timing.host import time_host

    calls = []
    m = time_host(lambda: calls.append(time.perf_counter()) or time.sleep(0.001), sync=lambda: calls.append(None),
                  warmup=2, samples=9)
    assert m.samples == 9 and len([c for c in calls if c is not None]) == 11
    assert 1000 <= m.p25_us <= m.median_us <= m.p75_us < 20000


# ---- SGLang's routes as SGLang runs them: page 1, the sync-free verify plan, the fa3 tree cascade (issue 44) ----
H100 = DeviceInfo(cuda=True, name="fake H100", sm=90)
SERVERS = Path(__file__).resolve().parent / "servers"


@pytest.fixture
def emu_fi(monkeypatch):
    """FlashInfer's prefill wrapper emulated in torch (tests/route_emulators.py), small route workspaces."""
    monkeypatch.setitem(sys.modules, "flashinfer", emu.flashinfer_module())
    for k in ROUTES:
        monkeypatch.setattr(k, "workspace_bytes", 1024)
    monkeypatch.setattr(sglang_host_plan, "pack_verify_mask_into", emu.pack_numpy)
    monkeypatch.setattr(sglang_host_plan, "planner_tail", lambda: ())
    return emu


def route(name):
    return registry.get_kernel(name)


@pytest.mark.parametrize("page,layout", [(1, "HND"), (1, "NHD"), (16, "HND"), (16, "NHD")])
def test_the_token_pool_holds_each_requests_kv_at_its_slots(page, layout):
    """SGLang's pool is by token (slot = page * page_size + offset); at page 1 kbench's pool is that already."""
    inp = build_inputs(Case(3, 4, 70, 4, 2, 32, page, kv_layout=layout), seed=1)
    k, v = sglang_kv_pool(inp)
    indptr, slots = token_slots(inp)
    assert k.shape[1:] == (1, 2, 32) and indptr.tolist() == [0, 70, 140, 210] and len(slots) == 210
    kv = inp.kv_cache
    for r, j in [(0, 0), (1, 37), (2, 69)]:
        pg, off = int(inp.block_tables[r, j // page]), j % page
        want = kv[pg, 0, :, off] if layout == "HND" else kv[pg, 0, off]
        assert torch.equal(k[int(slots[indptr[r] + j]), 0], want)
    same_memory = k.data_ptr() == kv.data_ptr()
    assert same_memory == (page == 1)  # a view at page 1, SGLang's order copied above


TREE4 = dict(tree="topk:4")


@pytest.mark.parametrize("name,page,extra", [
    ("sglang-fi-verify", 1, {}), ("sglang-fi-verify", 16, {}), ("sglang-fi-verify", 1, TREE4),
    ("sglang-fi-verify", 16, dict(TREE4, kv_layout="NHD")), ("sglang-fi-extend", 1, {}),
    ("sglang-fi-extend", 16, {}), ("sglang-fi-verify-hostplan", 1, {}), ("sglang-fi-verify-hostplan", 16, {})])
def test_sglang_flashinfer_routes_plan_page_one_over_the_token_pool_and_compute_the_reference(emu_fi, name, page,
                                                                                               extra):
    """prepare() as the GPU runs it, FlashInfer emulated: plan() gets page size 1, one index per token, last-page
    lengths of one (flashinfer_backend.py:2395-2403, 486-488), whatever the case's page; the output is the
    reference's. The host-plan route's output comes from SGLang's fast_prefill_plan (buffers refreshed, the mask
    packed into the wrapper's buffer by the packer, the planner fed host offsets)."""
    inp = build_inputs(Case(3, 8, 75, 4, 2, 32, page, **extra), copies=2, seed=4)
    k = route(name)
    fn = k.prepare(inp)
    w = k._wrapper
    first = w.plans[0]
    assert first["page_size"] == 1 and first["last_page_len"].tolist() == [1, 1, 1]
    assert first["kv_indptr"].tolist() == [0, 75, 150, 225] and len(first["indices"]) == 225
    assert (first["custom_mask"] is not None) == (name != "sglang-fi-extend")
    ref = reference_attention(inp)
    for i in (1, 0):
        torch.testing.assert_close(fn(i).float(), reference_attention(inp, i), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(fn(0).float(), ref, rtol=2e-2, atol=2e-2)
    if name == "sglang-fi-verify-hostplan":
        # the capture's plan(), then fast_prefill_plan: host offsets and page 1 to the planner, no other plan()
        assert len(w.plans) == 1 and len(w.planner_calls) == 2
        planned = w.planner_calls[-1]
        assert planned[3].tolist() == [0, 8, 16, 24] and planned[4].tolist() == [0, 75, 150, 225]
        assert planned[5].tolist() == [75, 75, 75] and planned[10] == 1 and not planned[3].is_cuda
        w._custom_mask_buf.zero_()  # one replay's host work packs the mask again
        k.host_step(inp)()
        torch.testing.assert_close(fn(0).float(), ref, rtol=2e-2, atol=2e-2)


def test_the_host_plan_route_refuses_a_tree_and_the_fa3_routes_split_chain_and_tree(monkeypatch):
    tree, chain_ = Case(4, 8, 4096, 32, 8, 128, 1, tree="topk:4"), Case(4, 8, 4096, 32, 8, 128, 1)
    assert "topk 1 only" in route("sglang-fi-verify-hostplan").supports(H100, tree)
    assert "sglang-fa3-tree" in route("sglang-fa3").supports(H100, tree)
    fa3_tree_route = route("sglang-fa3-tree")
    monkeypatch.setattr(fa3_tree_route._fa3, "supports", lambda device, case: None)  # as if the library loaded
    assert fa3_tree_route.supports(H100, chain_).endswith(": sglang-fa3")
    assert fa3_tree_route.supports(H100, tree) is None
    assert route("sglang-fi-verify").uniform_q_reason(tree) is None


@pytest.mark.parametrize("name,takes_page_one", [
    ("sglang-fi-verify", True), ("sglang-fi-extend", True), ("sglang-fi-verify-hostplan", True),
    ("sglang-fa3", True), ("sglang-fa3-tree", True), ("sglang-trtllm-mha", False), ("trtllm-decode", False),
    ("vllm-fi-decode", False), ("vllm-fi-prefill", False), ("vllm-fi-prefill-fa3", False), ("vllm-flash-attn", False),
    ("fa2-prefill", True)])
def test_page_one_rows_are_run_or_refused_as_the_engine_allows(name, takes_page_one):
    k = route(name)
    tree = "topk:4" if name == "sglang-fa3-tree" else "chain"
    why = kernel_reason(k, H100, Case(4, 8, 4096, 32, 8, 128, 1, tree=tree))
    assert (why is None or not why.startswith("page size 1")) == takes_page_one, why
    if not takes_page_one:
        assert why.startswith("page size 1: ") and ".py:" in why  # the engine's or FlashInfer's line
    assert kernel_reason(k, H100, Case(4, 8, 4096, 32, 8, 128, 64, tree=tree)) is None or not \
        kernel_reason(k, H100, Case(4, 8, 4096, 32, 8, 128, 64, tree=tree)).startswith("page size")


@pytest.mark.parametrize("page,tree,layout", [(1, "topk:4", "HND"), (1, "topk:2", "NHD"), (16, "topk:4", "HND"),
                                              (16, "topk:4", "NHD"), (1, "chain", "HND")])
def test_fa3_tree_cascade_is_the_reference(page, tree, layout):
    """SGLang's cascade on kbench's tensors, FA3 and merge_state_v2 emulated in torch: the expand page table holds
    each token's ancestors and itself (visible first), cache_seqlens their count, and prefix + expand merged by LSE
    is the tree's reference; the host work rebuilds the metadata the graph reads."""
    inp = build_inputs(Case(3, 8, 60, 4, 2, 32, page, kv_layout=layout, tree=tree), copies=2, seed=7)
    meta = fa3_tree.CascadeMetadata(inp)
    table, lens, cu_k = meta.expand
    trees = inp.tree.parents if inp.tree is not None else [tuple(range(-1, 7))] * 3
    slots = fa3_tree.req_to_token(inp)
    for r in range(3):
        for i in range(8):
            want = sorted(ancestors(trees[r], i))
            n = int(lens[r * 8 + i])
            assert n == len(want)
            assert table[r * 8 + i, :n].tolist() == [int(slots[r, 52 + j]) for j in want]
    assert cu_k.tolist() == [0] + lens.cumsum(0).tolist() and meta.cache_seqlens.tolist() == [52, 52, 52]
    out = torch.full(inp.q.shape, float("nan"), dtype=inp.q.dtype)
    run = fa3_tree.cascade(inp, meta, emu.fa3_attend(inp.sm_scale), emu.merge_natural, out)
    for i in (1, 0):
        torch.testing.assert_close(run(i).float(), reference_attention(inp, i), rtol=2e-2, atol=2e-2)
    table.fill_(0), lens.fill_(0), meta.page_table.fill_(0)
    meta.refresh()
    torch.testing.assert_close(run(0).float(), reference_attention(inp), rtol=2e-2, atol=2e-2)


def test_fa3_tree_route_takes_trees_at_every_page_and_checks_like_any_kernel():
    k = route("sglang-fa3-tree")
    assert k.takes_trees and k.runs == "vllm-fa3-sgl-call" and k.path == registry.get_kernel(k.runs).path
    why = k.supports(H100, Case(4, 8, 4096, 32, 8, 128, 64, tree="topk:4"))
    assert why is None or "FlashAttention-3 library" in why  # only the library's absence here


def _sglang_source(rel: str) -> Path:
    import sglang_args

    if not sglang_args.venv_ready():
        if os.environ.get("CI"):
            pytest.fail("the SGLang args venv (tests/servers/setup_sglang_args.sh) is missing under CI")
        pytest.skip("the SGLang args venv is missing: bash tests/servers/setup_sglang_args.sh")
    found = sorted(sglang_args.venv_dir().glob(f"lib/python3*/site-packages/sglang/{rel}"))
    assert found, rel
    return found[0]


def sglang_function(rel: str, name: str, namespace: dict):
    """SGLang's own function `name`, compiled from the installed sglang 0.5.23 wheel's source."""
    tree = ast.parse(_sglang_source(rel).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module([fn], []), rel, "exec"), namespace)
    return namespace[name]


def test_fast_prefill_plan_is_sglangs_own(emu_fi, monkeypatch):
    """SGLang's fast_prefill_plan, read from the sglang 0.5.23 wheel, and kbench's port, each on a wrapper planned
    once the same way: the same buffers, attributes and planner arguments after one replay."""
    from typing import Optional, Union

    fake = type(sys)("pack_verify_mask")
    fake.pack_verify_mask_into = emu.pack_numpy
    for mod in ("sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.speculative"):
        monkeypatch.setitem(sys.modules, mod, type(sys)(mod))
    monkeypatch.setitem(sys.modules, "sglang.kernels.ops.speculative.pack_verify_mask", fake)
    theirs = sglang_function("srt/layers/attention/flashinfer_backend.py", "fast_prefill_plan",
                             dict(torch=torch, Optional=Optional, Union=Union))
    inp = build_inputs(Case(3, 4, 40, 4, 2, 32, 1), seed=2)
    k = route("sglang-fi-verify-hostplan")
    states = []
    for plan in (theirs, sglang_host_plan.fast_prefill_plan):
        k.prepare(inp)
        w = k._wrapper
        for buf in (w._custom_mask_buf, w._paged_kv_indices_buf, w._qo_indptr_buf):
            buf.zero_()
        args, kw = k._plan_args(inp)
        kw = {n: v for n, v in kw.items() if n != "sm_scale"}
        plan(w, *args, **kw, **sglang_host_plan.host_plan_kwargs(inp.host("seq_lens") - 4, 4))
        states.append(({n: v.clone() for n, v in vars(w).items() if isinstance(v, torch.Tensor)},
                       {n: v for n, v in vars(w).items() if not isinstance(v, (torch.Tensor, list))
                        and n != "_cached_module"}, w.planner_calls[-1]))
    (bufs_a, attrs_a, call_a), (bufs_b, attrs_b, call_b) = states
    assert bufs_a.keys() == bufs_b.keys() and all(torch.equal(bufs_a[n], bufs_b[n]) for n in bufs_a)
    assert attrs_a == attrs_b
    assert len(call_a) == len(call_b) == 20
    for a, b in zip(call_a, call_b):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def test_the_mask_packing_kernel_is_sglangs_and_packs_as_flashinfer(tmp_path):
    """kbench's copy of SGLang's Triton packer and SGLang's own, both run by Triton's interpreter on the CPU (the
    sglang venv has Triton): the same bytes, each request's [q, kv] bits in little order (FlashInfer's layout)."""
    import sglang_args

    _sglang_source("kernels/ops/speculative/pack_verify_mask.py")
    script = tmp_path / "pack.py"
    script.write_text(
        "import importlib.util, json, sys, numpy as np, torch\n"
        "spec = importlib.util.spec_from_file_location('hp', sys.argv[1]); hp = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(hp)\n"
        "from sglang.kernels.ops.speculative.pack_verify_mask import pack_verify_mask_into as theirs\n"
        "W, kv = 6, [300, 7, 1029]\n"
        "mask = torch.rand(sum(k * W for k in kv), generator=torch.Generator().manual_seed(0)) > 0.5\n"
        "kv_ptr = torch.tensor(np.cumsum([0] + kv), dtype=torch.int32)\n"
        "ptr = torch.tensor(np.cumsum([0] + [(k * W + 7) // 8 for k in kv]), dtype=torch.int32)\n"
        "outs = []\n"
        "for f in (hp.pack_verify_mask_into, theirs):\n"
        "    o = torch.zeros(int(ptr[-1]), dtype=torch.uint8)\n"
        "    f(mask, kv_ptr, ptr, o, batch_size=3, query_width=W, max_kv_len=max(kv)); outs.append(o.tolist())\n"
        "want = np.concatenate([np.packbits(mask.numpy()[a * W:b * W], bitorder='little')\n"
        "                       for a, b in zip(kv_ptr.tolist(), kv_ptr.tolist()[1:])]).tolist()\n"
        "print(json.dumps([outs[0] == outs[1], outs[0] == want, len(want)]))\n")
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}, "TRITON_INTERPRET": "1"}
    r = subprocess.run([str(sglang_args.venv_python()), str(script),
                        str(Path(sglang_host_plan.__file__))], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [True, True, (300 * 6 + 7) // 8 + (7 * 6 + 7) // 8
                                                             + (1029 * 6 + 7) // 8]


def test_the_engine_routes_scenario_measures_page_one_and_64_chains_and_trees():
    from kbench.cases.scenario import load_scenario

    sc = load_scenario("engine-routes")
    cases = sc.cases()
    assert {c.page_size for c in cases} == {1, 64} and {c.tree for c in cases} == {"chain", "topk:4"}
    assert {c.batch_size for c in cases} == {1, 4, 16, 64, 256} and {c.q_len for c in cases} == {4, 8}


def test_vllm_flashinfer_without_trtllm_runs_fa3_on_hopper_only_and_takes_no_fp8_cache():
    k = route("vllm-fi-prefill-fa3")
    c = Case(4, 8, 4096, 32, 8, 128, 64)
    assert kernel_reason(k, H100, c) is None
    assert "Hopper-only" in (k.supports(DeviceInfo(cuda=True, name="fake B200", sm=100), c) or "")
    assert "fp8" not in k.kv_dtypes and "fp8" in route("vllm-fi-prefill").kv_dtypes
