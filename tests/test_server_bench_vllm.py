"""server-bench against a REAL vLLM server on the CPU (tiny local model). Marked ``server``: slow.

The server is started once per session by tests/servers/vllm_fixture.py (venv cached between runs).
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import pytest
import requests

from vllm_fixture import vllm_server  # noqa: E402,F401  (the fixture)

from kbench.server import ServerBenchConfig, run_server_bench  # noqa: E402
from kbench.server.bench import random_ids  # noqa: E402
from kbench.server.client import ServerClient  # noqa: E402
from kbench.store import load_run  # noqa: E402

pytestmark = pytest.mark.server
BLOCK = 128  # the CPU backend's KV block size (server /metrics cache_config_info says so; checked below)
SGLANG_FIELDS = ["run_name", "batch_size", "input_len", "output_len", "latency", "input_throughput",
                 "output_throughput", "overall_throughput", "last_ttft", "last_gen_throughput", "acc_length",
                 "cache_hit_rate"]  # BenchOneCaseResult.dump_to_jsonl, SGLang with --cache-hit-rate (#14)


def prefix_counters(url: str) -> tuple[float, float]:
    """(queries, hits) in tokens from vLLM's Prometheus counters."""
    text = requests.get(url + "/metrics", timeout=10).text
    def one(name):
        m = re.search(rf"^vllm:{name}_total{{[^}}]*}} ([0-9.e+]+)$", text, re.M)
        assert m, f"no vllm:{name}_total in /metrics"
        return float(m.group(1))
    return one("prefix_cache_queries"), one("prefix_cache_hits")


def complete(srv, prompt, max_tokens=1) -> dict:
    r = requests.post(srv.url + "/v1/completions", timeout=60, json={
        "model": srv.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def cached(resp: dict) -> int:
    return (resp["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def test_block_size_is_what_the_tests_assume(vllm_server):
    text = requests.get(vllm_server.url + "/metrics", timeout=10).text
    assert re.search(r'cache_config_info\{[^}]*block_size="128"', text)
    assert re.search(r'cache_config_info\{[^}]*enable_prefix_caching="True"', text)


def test_flush_takes_effect(vllm_server):
    """A prompt longer than a block hits the prefix cache when repeated; after the flush it does not."""
    srv = vllm_server
    client = ServerClient(srv.url)
    prompt = [random.Random(7).randrange(1024) for _ in range(3 * BLOCK + 10)]
    assert client.flush_with_retry("/reset_prefix_cache", attempts=3, wait=0.5).ok
    first = complete(srv, prompt)
    q0, h0 = prefix_counters(srv.url)
    second = complete(srv, prompt)
    q1, h1 = prefix_counters(srv.url)
    assert cached(first) == 0
    assert cached(second) == 3 * BLOCK and h1 - h0 == 3 * BLOCK  # a hit: the three whole blocks
    flush = client.flush_with_retry("/reset_prefix_cache", attempts=3, wait=0.5)
    assert flush.ok and flush.attempts == 1
    third = complete(srv, prompt)
    q2, h2 = prefix_counters(srv.url)
    assert cached(third) == 0 and h2 == h1  # no hit after the flush
    assert q2 - q1 == len(prompt)  # the prompt was looked up, just not found


def test_bench_rows_and_metric_arithmetic(vllm_server, tmp_path):
    srv = vllm_server
    out_file = tmp_path / "res.jsonl"
    cfg = ServerBenchConfig(url=srv.url, backend="vllm", model=srv.model, batch_sizes=(1, 3), input_lens=(200,),
                            output_lens=(8,), run_name="real", out_dir=tmp_path / "results",
                            result_filename=out_file, flush_retry_wait=0.5)
    res = run_server_bench(cfg)
    assert res.backend == "vllm" and res.facts.vocab_size == 1024 and res.facts.max_model_len == 2048
    assert [r.status for r in res.rows] == ["ok", "ok"], [r.reason for r in res.rows]
    assert [(w.case_id, w.status) for w in res.warmups] == [("bs1-in1024-out16", "ok"), ("bs3-in1024-out16", "ok")]
    for row in res.rows:
        tr = res.traces[row.case_id]
        bs, n_in, n_out = row.batch_size, row.input_len, row.output_len
        assert row.flush_attempts >= 1
        assert len(tr.requests) == bs
        for r in tr.requests:
            assert r.prompt_tokens == n_in  # the server saw each prompt of the batch whole
            assert r.tokens_at[-1] == n_out and r.finish_reason == "length"
            assert r.tokens_at == sorted(r.tokens_at) and r.chunk_times == sorted(r.chunk_times)
            assert r.first_token_s == r.chunk_times[0] > 0
            assert r.chunk_times[-1] <= tr.end_s
        ttft = max(r.chunk_times[0] for r in tr.requests)
        lat = tr.end_s
        assert row.latency == lat and row.last_ttft == ttft and 0 < ttft < lat
        assert row.input_throughput == pytest.approx(bs * n_in / ttft, rel=1e-12)
        assert row.output_throughput == pytest.approx(bs * n_out / (lat - ttft), rel=1e-12)
        assert row.overall_throughput == pytest.approx(bs * (n_in + n_out) / lat, rel=1e-12)
        assert row.itl_ms == pytest.approx(1000 * bs / row.output_throughput, rel=1e-12)
        assert row.acc_length == -1 and row.last_gen_throughput == -1  # vLLM exposes neither
        assert row.cached_tokens == 0  # flushed, and random ids
        assert row.req_ttft_s == [r.first_token_s for r in tr.requests]
    lines = [json.loads(x) for x in out_file.read_text().splitlines()]
    assert [list(x) for x in lines] == [SGLANG_FIELDS] * 2
    assert [(x["run_name"], x["batch_size"], x["input_len"], x["output_len"]) for x in lines] == [
        ("real", 1, 200, 8), ("real", 3, 200, 8)]
    assert lines[1]["latency"] == round(res.rows[1].latency, 4)
    assert lines[1]["input_throughput"] == round(res.rows[1].input_throughput, 2)
    run = load_run(res.run_dir)
    assert run.kind == "server-bench" and run.manifest["status"] == "complete"
    assert run.rows["case_id"].tolist() == ["bs1-in200-out8", "bs3-in200-out8"]
    assert len(run.rows["req_latency_s"][1]) == 3


def test_bench_flush_prevents_prefix_hits(vllm_server, tmp_path):
    """Same seed twice: the second run's batch repeats the first's prompts, and still hits nothing because
    server-bench flushed first. Sending those prompts again without a flush does hit (the control)."""
    srv = vllm_server
    kw = dict(url=srv.url, backend="vllm", batch_sizes=(2,), input_lens=(300,), output_lens=(4,), skip_warmup=True,
              seed=11, out_dir=tmp_path / "results")
    run_server_bench(ServerBenchConfig(**kw))
    _, h0 = prefix_counters(srv.url)
    res = run_server_bench(ServerBenchConfig(**kw))
    _, h1 = prefix_counters(srv.url)
    assert res.rows[0].status == "ok" and res.rows[0].cached_tokens == 0
    assert h1 == h0
    ids = random_ids(random.Random(f"11-{res.rows[0].case_id}"), 2, 300, 1024)
    control = complete(srv, ids)
    _, h2 = prefix_counters(srv.url)
    assert h2 - h1 == 2 * 2 * BLOCK  # two whole blocks of each of the two prompts
    assert cached(control) > 0  # vLLM's usage reports the cached tokens of one prompt of a list, not the sum


def test_cli_auto_backend_table_and_lines(vllm_server, tmp_path):
    out_file = tmp_path / "res.jsonl"
    cmd = [sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", vllm_server.url, "--backend", "auto",
           "--batch-size", "1,2", "--input-len", "64", "--output-len", "4", "--skip-warmup",
           "--result-filename", str(out_file), "--out", str(tmp_path / "results")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", **_env()})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "server-bench vllm" in p.stdout
    for case in ("bs1-in64-out4", "bs2-in64-out4"):
        assert re.search(rf"{case}\s+│ ok\s+│\s+1 │", p.stdout), p.stdout
    assert len(out_file.read_text().splitlines()) == 2


def _env():
    import os
    return {k: v for k, v in os.environ.items() if k != "COLUMNS"}
