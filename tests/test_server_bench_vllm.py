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

from vllm_fixture import vllm_server, vllm_spec_server  # noqa: E402,F401  (the fixtures)

from kbench.server import ServerBenchConfig, run_server_bench  # noqa: E402
from kbench.server.auth import Credentials  # noqa: E402
from kbench.server.bench import random_ids  # noqa: E402
from kbench.server.client import ServerClient  # noqa: E402
from kbench.runs.store import load_run  # noqa: E402

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


# ---- issue #14: SGLang's command line, cache hit rate, speculative acceptance, A/B ---------------------------

def counter(url: str, name: str) -> float:
    """One vLLM counter, summed over its label sets, read with a regex (not kbench's parser)."""
    text = requests.get(url + "/metrics", timeout=10).text
    vals = [float(v) for v in re.findall(rf"^vllm:{name}_total(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)]
    assert vals, f"no vllm:{name}_total in /metrics"
    return sum(vals)


SPEC = ("spec_decode_num_drafts", "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens")


def test_sglang_command_line_runs_unchanged(vllm_server, tmp_path):
    """A bench_one_batch_server command line, pasted: space-separated lists, --base-url, --model None, ..."""
    from test_server_bench_sglang import BenchOneCaseResult

    lines = tmp_path / "result.jsonl"
    cmd = (f"--model None --base-url {vllm_server.url} --batch-size 1 4 --input-len 256 512 --output-len 8 "
           f"--run-name pasted --result-filename {lines} --seed 42 --temperature 0 --cache-hit-rate 0.5 "
           f"--show-report").split()
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", *cmd, "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=600, env={"COLUMNS": "200", **_env()})
    assert p.returncode == 0, p.stdout + p.stderr
    parsed = [BenchOneCaseResult.parse(x) for x in lines.read_text().splitlines()]
    assert [(r.batch_size, r.input_len, r.output_len) for r in parsed] == [
        (1, 256, 8), (1, 512, 8), (4, 256, 8), (4, 512, 8)]
    # warmed with the first half of each prompt: the server hit the whole 128-token blocks of that half
    assert [r.cache_hit_rate for r in parsed] == [0.5, 0.5, 0.5, 0.5]  # 128/256, 256/512
    assert all(r.acc_length == -1 for r in parsed)  # no speculative decoding on this server
    assert "Input lens: [256, 512]. Output lens: [8]. Cache hit rate: 50.0%." in p.stdout


def test_cache_hit_rate_is_the_servers_own_count(vllm_server, tmp_path):
    srv = vllm_server
    kw = dict(url=srv.url, backend="vllm", batch_sizes=(2,), input_lens=(400,), output_lens=(4,), skip_warmup=True,
              out_dir=tmp_path / "r", flush_retry_wait=0.5)
    q0, h0 = counter(srv.url, "prefix_cache_queries"), counter(srv.url, "prefix_cache_hits")
    (row,) = run_server_bench(ServerBenchConfig(**kw, cache_hit_rate=0.5)).rows
    q1, h1 = counter(srv.url, "prefix_cache_queries"), counter(srv.url, "prefix_cache_hits")
    # int(400 * 0.5) = 200 warm tokens per prompt: one whole 128-token block of each of the 2 prompts hits
    assert row.status == "ok" and row.cache_hit_rate == pytest.approx(2 * BLOCK / (2 * 400))
    assert h1 - h0 == 2 * BLOCK  # the warm-up requests hit nothing (flushed); the timed batch hit 256
    assert q1 - q0 == 2 * 200 + 2 * 400  # looked up: the warm-up prefixes, then the whole prompts
    (cold,) = run_server_bench(ServerBenchConfig(**kw)).rows
    assert cold.cache_hit_rate == 0.0  # flushed and not warmed: measured, not assumed


def test_spec_acceptance_length_matches_vllm_counters(vllm_spec_server, tmp_path):
    srv = vllm_spec_server
    before = [counter(srv.url, n) for n in SPEC]
    res = run_server_bench(ServerBenchConfig(
        url=srv.url, backend="vllm", batch_sizes=(2,), input_lens=(400,), output_lens=(64,), skip_warmup=True,
        prompt_pattern="repeat:5", out_dir=tmp_path / "r", result_filename=tmp_path / "res.jsonl",
        credentials=Credentials(api_key=srv.api_key)))
    drafts, draft_tokens, accepted = (counter(srv.url, n) - b for n, b in zip(SPEC, before))
    (row,) = res.rows
    assert row.status == "ok", row.reason
    assert drafts > 0 and (row.spec_drafts, row.spec_draft_tokens, row.spec_accepted_tokens) == (
        drafts, draft_tokens, accepted)
    assert row.acc_length == pytest.approx(1 + accepted / drafts) and row.acc_length > 1.5
    assert row.acceptance_rate == pytest.approx(accepted / draft_tokens)
    (line,) = [json.loads(x) for x in (tmp_path / "res.jsonl").read_text().splitlines()]
    assert line["acc_length"] == round(1 + accepted / drafts, 2)
    print(f"\n[spec] drafts {drafts:g}, draft tokens {draft_tokens:g}, accepted {accepted:g}: "
          f"acc_length {row.acc_length:.3f}, acceptance rate {row.acceptance_rate:.3f}", file=sys.stderr)


def test_ab_spec_off_vs_on_interleaved(vllm_server, vllm_spec_server, tmp_path):
    """A: the plain server, B: n-gram speculative decoding; one interleaved run (7 ABBA rounds, the fewest with which
    the paired signed-rank test can reach alpha 0.01), gated as paired samples: one verdict, classes by shape."""
    from kbench.gate import run_gate
    from kbench.gate.ab import ab_groups, case_class
    from kbench.server.interleave import run_interleaved

    ab = run_interleaved(ServerBenchConfig(
        url=vllm_server.url, url_b=vllm_spec_server.url, backend="vllm", batch_sizes=(1,), input_lens=(64, 1024),
        output_lens=(2, 64), prompt_pattern="repeat:5", repeat=7, run_name="ab", out_dir=tmp_path / "r",
        credentials=Credentials(api_key=vllm_spec_server.api_key)))
    assert [r.status for r in ab.a.rows + ab.b.rows] == ["ok"] * 8
    assert all(len(r.latency_samples) == 7 for r in ab.a.rows + ab.b.rows)
    md = tmp_path / "ab.md"
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "gate", "--baseline", str(ab.a.run_dir),
                        "--candidate", str(ab.b.run_dir), "--markdown", str(md)],
                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "200", **_env()})
    assert p.returncode in (0, 1, 3), p.stdout + p.stderr
    gate = run_gate(ab.a.run_dir, ab.b.run_dir)
    verdict = gate.summary_line()
    assert verdict.split(":")[0] == {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}[p.returncode]  # as the exit code
    assert p.stdout.strip().splitlines()[-1] == verdict and len(verdict) <= 120
    assert md.read_text().startswith(f"## {({0: '✅', 1: '❌', 3: '⚠️'})[p.returncode]} kbench gate: {verdict}")
    assert gate.paired and "noise: paired, the 7 ABBA rounds" in gate.noise_used
    judged = [r for r in gate.rows if r.method]
    assert judged and all(r.method == "wilcoxon" for r in judged), judged
    for g in ab_groups(gate.rows):  # the class is the case's shape, whatever this run's timings were
        assert all(case_class(c) == g.name for c in g.cases)
    assert {case_class(r.case_id) for r in ab.a.rows} == {"decode-heavy", "prefill-heavy"}
    assert all(r.acc_length > 1 for r in ab.b.rows if r.output_len > 2)  # B really drafted
    assert all(r.acc_length == -1 for r in ab.a.rows)
    print(f"\n[ab] {verdict}\n" + md.read_text(), file=sys.stderr)


def test_ab_rounds_flush_once_a_side_and_still_hit_nothing(vllm_server, vllm_spec_server, tmp_path):
    """#54, fewer flushes: with --batches-per-round 3 each of a side's 3 batches of a case in a round has its own
    prompts (the same on both sides), so each server is flushed once a round, before the batch whose prompts it
    has seen, not before each of its 3 batches. On two real vLLM servers with prefix caching (prompts of 300
    tokens: two whole 128-token blocks each, which a repeat would hit): no batch of the 7 rounds hits the cache
    (neither server's hit counter moves, every row's cached tokens 0), and a round's row says 1 flush a side.
    The fewer flushes themselves are counted on the test server (test_server_bench_interleave.py); here, that
    skipping them is safe on a real prefix cache (the same prompts in a side's 3 batches would hit it)."""
    from kbench.server.interleave import run_interleaved

    h0 = [prefix_counters(s.url)[1] for s in (vllm_server, vllm_spec_server)]
    ab = run_interleaved(ServerBenchConfig(
        url=vllm_server.url, url_b=vllm_spec_server.url, backend="vllm", batch_sizes=(2,), input_lens=(300,),
        output_lens=(4,), repeat=7, batches_per_round=3, skip_warmup=True, run_name="ab", out_dir=tmp_path / "r",
        credentials=Credentials(api_key=vllm_spec_server.api_key)))
    rows = ab.a.rows + ab.b.rows
    assert [r.status for r in rows] == ["ok"] * 2 and all(len(r.latency_samples) == 7 for r in rows)
    assert [prefix_counters(s.url)[1] for s in (vllm_server, vllm_spec_server)] == h0
    assert all(r.cached_tokens == 0 and r.flush_attempts == 1 for r in rows), [(r.cached_tokens, r.flush_attempts)
                                                                                for r in rows]


def test_the_readme_server_block_runs_as_written(vllm_server, tmp_path):
    """The README's server block: its kbench lines, as written, against the tests' vLLM server (A and B both this
    server: an A/A), from a fresh folder; the interleaved A/B writes its two run folders and the gate reads them as
    paired samples, its verdict line consistent with its exit code."""
    from pathlib import Path
    from test_readme import blocks

    ((_, block),) = blocks("server")
    lines = [ln.split("  #")[0].strip() for ln in block if ln.startswith("kbench ")]
    assert any("--url-b" in ln for ln in lines) and lines[-1].startswith("kbench gate")
    bindir = Path(sys.executable).parent
    env = {**_env(), "COLUMNS": "200", "PATH": f"{bindir}:/usr/bin:/bin"}
    port = vllm_server.url.rsplit(":", 1)[1]
    ran = []
    for ln in lines:
        cmd = ln.replace("127.0.0.1:30000", f"127.0.0.1:{port}").replace("127.0.0.1:30001", f"127.0.0.1:{port}")
        p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        ran.append((ln, p.returncode))
        out = p.stdout + p.stderr
        if ln.startswith("kbench gate"):
            assert p.returncode in (0, 1, 3), out
            flat = " ".join(out.split())
            assert re.search(r"noise: paired, the \d+ ABBA rounds of one interleaved run", flat), flat
            word = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}[p.returncode]
            first = p.stdout.splitlines()[0]
            assert first.startswith(word + ": ") and len(first) <= 120 and p.stdout.strip().splitlines()[-1] == first
            assert (tmp_path / "ab.md").read_text().startswith("## ")
        else:
            assert p.returncode == 0, out[-3000:]
    assert len(list((tmp_path / "results").glob("server-bench-ab-a-*"))) == 1
    assert len(list((tmp_path / "results").glob("server-bench-ab-b-*"))) == 1
    print("\nREADME server block:" + "".join(f"\n  exit {rc}: {c}" for c, rc in ran), file=sys.stderr)


def test_recommend_check_on_two_real_runs_of_one_setting(vllm_spec_server, tmp_path):
    """What can be shown on a CPU (#28): the CPU vLLM server cannot switch GPU attention kernels, so the A/B here is
    one setting run twice. Each run writes RUN/workload.jsonl (its batches: q from the server's draft counters);
    kbench recommend prices them on the committed H100 engine-routes baseline (its routes, kv 4096; the runs' KV
    priced at that edge) and puts the gate's A/B beside it: predicted no change (A and B run the same route),
    measured by the gate on the two runs. The two runs are the halves of one interleaved A/A (the same server as A
    and B, 7 ABBA rounds): two runs one after the other are not an A/A on a shared CPU (a neighbour's burst during
    B's case read as "B is slower ... ttft +627%" under the parallel test run), adjacent rounds are."""
    from kbench.server.interleave import run_interleaved

    ab = run_interleaved(ServerBenchConfig(
        url=vllm_spec_server.url, url_b=vllm_spec_server.url, backend="vllm", batch_sizes=(1,),
        input_lens=(600, 1200), output_lens=(64,), prompt_pattern="repeat:5", repeat=7, run_name="aa",
        out_dir=tmp_path / "r", skip_warmup=True, credentials=Credentials(api_key=vllm_spec_server.api_key)))
    runs = [ab.a, ab.b]
    for res in runs:
        assert [r.status for r in res.rows] == ["ok"] * 2
    from kbench.recommend.workload import read_workload

    wl = read_workload(runs[0].run_dir / "workload.jsonl")
    assert {b.case for b in wl.batches} == {r.case_id for r in runs[0].rows}
    assert all(b.q_len == 4 and b.steps == ("verify", "draft_extend") for b in wl.batches)  # 1 + 3 drafts
    for r in runs[0].rows:  # the steps of one batch: the tokens after the first / the measured acc_length
        steps = sum(b.weight for b in wl.batches if b.case == r.case_id)
        assert steps == -(-(r.output_len - 1) // max(r.acc_length, 1.0))
    md = tmp_path / "check.md"
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "recommend",
                        "results/baselines/h100-engine-routes-kv4096", "--engine", "vllm",
                        "--workload", str(runs[0].run_dir / "workload.jsonl"), "--max-extrapolation", "16",
                        "--ab", str(runs[0].run_dir), str(runs[1].run_dir), "--ab-settings", "FLASHINFER,FLASHINFER",
                        "--verify-layers", "2", "--json"],
                       capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", **_env()})
    assert p.returncode == 0, p.stdout + p.stderr
    chk = json.loads(p.stdout)["ab_check"]
    assert {c["case"] for c in chk["cases"]} == {r.case_id for r in runs[0].rows}
    assert all(c["predicted_saving_ms"] == 0 and c["attention_a_us"] > 0 for c in chk["cases"])
    # one setting run twice: within noise, or -- on a busy CPU, with 5 repeats -- too noisy to tell; never slower
    # or faster (the gate's three verdicts: kbench.gate.ab)
    assert chk["gate_answer"].startswith(("B is within noise of A", "B cannot be told from A")), chk["gate_answer"]
    print("\n[recommend check] " + chk["gate_answer"] + "\n" + json.dumps(chk["cases"], indent=1), file=sys.stderr)


# ---- issue #25: a real --api-key server (vLLM's own auth) ----------------------------------------------------
def _tree_holds(root, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def _kbench(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "kbench.cli.main", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env={**_env(), "COLUMNS": "200", **(env or {})})


def test_api_key_server_needs_the_key_and_kbench_never_keeps_or_prints_it(vllm_spec_server, tmp_path):
    """vLLM started with --api-key: without the key, one line naming the 401 and how to give a key; with it from
    $KBENCH_API_KEY or --api-key-file, ok rows; the key is in no file kbench wrote (run folder, result lines, a
    baseline from the run) and in none of its output; a wrong key given on the command line is not printed or
    recorded either (the recorded command line holds *** in its place)."""
    srv, key = vllm_spec_server, vllm_spec_server.api_key
    case = ["server-bench", "--url", srv.url, "--backend", "auto", "--skip-warmup", "--batch-size", "1",
            "--input-len", "200", "--output-len", "4"]
    p = _kbench(*case, "--out", tmp_path / "none")
    lines = [x for x in (p.stdout + p.stderr).splitlines() if x.strip()]
    assert p.returncode == 1 and len(lines) == 1, p.stdout + p.stderr
    assert "401" in lines[0] and "without credentials" in lines[0] and "--api-key-file" in lines[0], lines[0]

    p = _kbench(*case, "--out", tmp_path / "env", "--result-filename", tmp_path / "lines.jsonl",
                env={"KBENCH_API_KEY": key})
    assert p.returncode == 0, p.stdout + p.stderr
    (run,) = (tmp_path / "env").iterdir()
    assert load_run(run).rows["status"].tolist() == ["ok"]
    (tmp_path / "key.txt").write_text(key + "\n")
    p2 = _kbench(*case, "--out", tmp_path / "file", "--api-key-file", tmp_path / "key.txt")
    assert p2.returncode == 0, p2.stdout + p2.stderr
    b = _kbench("baseline", run, "--name", "with-key", "--out", tmp_path / "bl")
    assert b.returncode == 0, b.stdout + b.stderr
    wrong = "sk-wrong-" + key[::-1]
    p3 = _kbench(*case, "--out", tmp_path / "wrong", "--api-key", wrong)
    assert p3.returncode == 1 and "401" in p3.stdout + p3.stderr and "with credentials" in p3.stdout + p3.stderr
    for out in (p, p2, b, p3):
        assert key not in out.stdout + out.stderr and wrong not in out.stdout + out.stderr
    assert _tree_holds(tmp_path, wrong) == []
    held = [f for f in _tree_holds(tmp_path, key) if not f.endswith("key.txt")]
    assert held == [], held
    m = json.loads((run / "manifest.json").read_text())
    assert m["config"]["auth"] == ["Authorization: Bearer *** (API key)"]

    # a resume is refused until the key is given again (the run kept none), then goes on with it
    r = _kbench("server-bench", "--resume", run)
    assert r.returncode == 2 and "API key" in r.stderr and "does not keep" in r.stderr, r.stdout + r.stderr
    r = _kbench("server-bench", "--resume", run, env={"KBENCH_API_KEY": key})
    assert r.returncode == 0, r.stdout + r.stderr
