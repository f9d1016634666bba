"""Routes (kbench.kernels.routes): kernels as the engines call them, measured by the sweep with their per-step host
work. On a CPU the real routes are skipped rows; a CPU route made here proves the measuring, the rows and the
policy cells carry the host work."""
from __future__ import annotations

import os
import time

import pandas as pd
import pytest

from kbench.kernels import registry
from kbench.kernels.reference import reference_attention
from kbench.kernels.routes.base import Route
from kbench.recommend.settings import load_table

ROUTES = [k for k in registry.all_kernels() if registry.is_route(k)]


def test_routes_are_registered_apart_from_all():
    names = {k.name for k in ROUTES}
    assert names == {"sglang-fi-verify", "sglang-fi-extend", "sglang-trtllm-mha", "sglang-fa3", "sglang-flashmla",
                     "sglang-fi-mla", "sglang-fi-mla-extend", "sglang-fa3-mla", "vllm-fi-decode", "vllm-fi-prefill",
                     "vllm-flash-attn", "vllm-flashmla", "vllm-flash-attn-mla"}
    assert not names & {k.name for k in registry.select(["all"])}
    assert {k.name for k in registry.select(["routes"])} == names
    assert {k.name for k in registry.select(["routes", "fa2-prefill"])} == names | {"fa2-prefill"}
    for k in ROUTES:
        assert k.engine in ("sglang", "vllm") and k.runs in registry.kernel_names() and k.host_work and k.source
        assert k.path == registry.get_kernel(k.runs).path  # a route competes on the path of the kernel it runs


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
    assert not by["vllm-fi-prefill"].host_waits_for_gpu and not by["vllm-fi-prefill"].cuda_graph
    assert not by["sglang-trtllm-mha"].host_waits_for_gpu and not by["vllm-fi-decode"].host_waits_for_gpu


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
    assert real["reason"].str.contains("CUDA|takes MLA").all()
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
