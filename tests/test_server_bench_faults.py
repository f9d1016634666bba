"""server-bench against a small SGLang-protocol test server: flush retries, stream faults, timeouts, guards."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fake_sglang import FakeSGLang, Faults  # noqa: E402

from kbench.server import Listener, ServerBenchConfig, ServerBenchInterrupted, run_server_bench  # noqa: E402
from kbench.server.metrics import compute_metrics  # noqa: E402
from kbench.runs.store import load_run  # noqa: E402

SGLANG_FIELDS = ["run_name", "batch_size", "input_len", "output_len", "latency", "input_throughput",
                 "output_throughput", "overall_throughput", "last_ttft", "last_gen_throughput", "acc_length",
                 "cache_hit_rate"]  # BenchOneCaseResult.dump_to_jsonl, SGLang with --cache-hit-rate (#14)


class Sleeps:
    """Injected in place of time.sleep: records the waits between flush attempts, does not wait."""

    def __init__(self, then=None):
        self.waits: list[float] = []
        self.then = then

    def __call__(self, s: float) -> None:
        self.waits.append(s)
        if self.then:
            self.then(len(self.waits))


def cfg(url, tmp_path, **kw) -> ServerBenchConfig:
    base = dict(url=url, backend="sglang", batch_sizes=(2,), input_lens=(32,), output_lens=(4,), skip_warmup=True,
                flush_retry_wait=0.75, flush_timeout=7, request_timeout=10, out_dir=tmp_path / "results")
    base.update(kw)
    return ServerBenchConfig(**base)


def cli():
    from kbench.cli.main import cli as group
    return group


# ---- flush retries -----------------------------------------------------------------------------------------

def test_busy_400_twice_then_200_succeeds_on_third_attempt(fake, tmp_path):
    fake.faults.flush_plan = [400, 400]
    sleeps = Sleeps()
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=3), sleep=sleeps)
    (row,) = res.rows
    assert row.status == "ok", row.reason
    assert row.flush_attempts == 3
    assert sleeps.waits == [0.75, 0.75]  # the configured wait, between attempts only
    flushes = fake.seen("/flush_cache")
    assert len(flushes) == 3
    assert all(f.query == {"timeout": ["7"]} for f in flushes)  # --flush-timeout is sent
    gen = fake.seen("/generate")
    assert len(gen) == 1 and gen[0].t > flushes[-1].t  # the batch went only after the flush worked
    assert load_run(res.run_dir).rows["flush_attempts"].tolist() == [3]


def test_busy_forever_fails_after_exactly_n_attempts(fake, tmp_path):
    fake.faults.flush_default = 400
    sleeps = Sleeps()
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=5, batch_sizes=(1, 2)), sleep=sleeps)
    assert [r.status for r in res.rows] == ["failed", "failed"]  # recorded, and the run went on
    assert [r.flush_attempts for r in res.rows] == [5, 5]
    assert len(fake.seen("/flush_cache")) == 10 and sleeps.waits == [0.75] * 8
    assert fake.seen("/generate") == []
    reason = res.rows[0].reason
    assert "\n" not in reason
    assert "after 5 attempts" in reason and "/flush_cache?timeout=7" in reason and "400" in reason
    assert "Cache not flushed because there are pending requests" in reason
    assert res.exit_code == 1
    assert load_run(res.run_dir).manifest["status"] == "complete"


def test_busy_forever_cli_exit_1_with_one_clear_line(fake, tmp_path):
    fake.faults.flush_default = 400
    t0 = time.monotonic()
    r = CliRunner().invoke(cli(), ["server-bench", "--url", fake.url, "--backend", "sglang", "--skip-warmup",
                                   "--batch-size", "1", "--input-len", "16", "--output-len", "2",
                                   "--flush-retries", "4", "--flush-retry-wait", "0.2",
                                   "--out", str(tmp_path / "r")])
    elapsed = time.monotonic() - t0
    assert r.exit_code == 1, r.output
    assert len(fake.seen("/flush_cache")) == 4
    assert elapsed >= 3 * 0.2  # it really waited between attempts
    err = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(err) == 1
    assert "cache flush failed after 4 attempts: POST /flush_cache?timeout=30 -> 400" in err[0]
    assert "Traceback" not in r.output


def test_real_wait_between_attempts(fake, tmp_path):
    fake.faults.flush_plan = [400]
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=3, flush_retry_wait=0.3))  # real time.sleep
    assert res.rows[0].status == "ok" and res.rows[0].flush_attempts == 2
    a, b = fake.seen("/flush_cache")
    assert b.t - a.t >= 0.3
    assert res.rows[0].flush_seconds >= 0.3


def test_503_is_retried(fake, tmp_path):
    fake.faults.flush_plan = [503, 503]
    sleeps = Sleeps()
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=3), sleep=sleeps)
    assert res.rows[0].status == "ok" and res.rows[0].flush_attempts == 3 and len(sleeps.waits) == 2


def test_503_forever_fails_naming_status(fake, tmp_path):
    fake.faults.flush_default = 503
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=2), sleep=Sleeps())
    row = res.rows[0]
    assert row.status == "failed" and row.flush_attempts == 2 and len(fake.seen("/flush_cache")) == 2
    assert "-> 503 'Service Unavailable'" in row.reason


def test_404_is_not_retried(fake, tmp_path):
    fake.faults.flush_default = 404
    sleeps = Sleeps()
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=3), sleep=sleeps)
    assert res.rows[0].status == "failed" and res.rows[0].flush_attempts == 1 and sleeps.waits == []
    assert "404" in res.rows[0].reason


def test_200_success_false_is_retried(fake, tmp_path):
    fake.faults.flush_plan = ["success_false"]
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=3), sleep=Sleeps())
    assert res.rows[0].status == "ok" and res.rows[0].flush_attempts == 2


def test_dropped_connection_is_retried(fake, tmp_path):
    fake.faults.flush_plan = ["drop"]
    sleeps = Sleeps()
    res = run_server_bench(cfg(fake.url, tmp_path, flush_retries=3), sleep=sleeps)
    assert res.rows[0].status == "ok" and res.rows[0].flush_attempts == 2 and len(sleeps.waits) == 1


def test_connection_refused_then_server_back(model_dir, tmp_path):
    """The server goes away after it answered server info; it is back after the 2nd refused attempt."""
    srv = FakeSGLang(Faults(model_path=str(model_dir))).start()
    port = srv.port
    holder = {}

    def after_wait(n):
        if n == 2:  # two attempts were refused: bring it back on the same port
            holder["srv"] = FakeSGLang(Faults(model_path=str(model_dir)), port=port).start()

    class StopAfterConnect(Listener):
        def run_started(self, *a):
            srv.stop()  # nothing listens on the port now: connection refused

    sleeps = Sleeps(then=after_wait)
    try:
        res = run_server_bench(cfg(srv.url, tmp_path, flush_retries=3), StopAfterConnect(), sleep=sleeps)
    finally:
        if "srv" in holder:
            holder["srv"].stop()
    row = res.rows[0]
    assert row.status == "ok", row.reason
    assert row.flush_attempts == 3 and len(sleeps.waits) == 2
    assert len(holder["srv"].seen("/flush_cache")) == 1


def test_connection_refused_forever(model_dir, tmp_path):
    srv = FakeSGLang(Faults(model_path=str(model_dir))).start()

    class StopAfterConnect(Listener):
        def run_started(self, *a):
            srv.stop()

    res = run_server_bench(cfg(srv.url, tmp_path, flush_retries=3), StopAfterConnect(), sleep=Sleeps())
    row = res.rows[0]
    assert row.status == "failed" and row.flush_attempts == 3
    assert "after 3 attempts: POST /flush_cache?timeout=7 -> connection refused" in row.reason


def test_no_server_at_all_is_one_line_exit_1(tmp_path):
    from fake_sglang import free_port
    r = CliRunner().invoke(cli(), ["server-bench", "--url", f"http://127.0.0.1:{free_port()}",
                                   "--out", str(tmp_path / "r")])
    assert r.exit_code == 1
    assert r.output.strip().startswith("error: cannot use the server:") and "connection refused" in r.output
    assert len(r.output.strip().splitlines()) == 1


# ---- the stream -------------------------------------------------------------------------------------------

def test_metrics_follow_the_streams_timestamps(fake, tmp_path):
    fake.faults.first_token_delay = 0.12
    fake.faults.step_delay = 0.03
    res = run_server_bench(cfg(fake.url, tmp_path, batch_sizes=(3,), input_lens=(40,), output_lens=(5,)))
    (row,) = res.rows
    assert row.status == "ok", row.reason
    tr = res.traces[row.case_id]
    # every request: 5 chunks, tokens 1..5, arrival spaced by the server's step delay (nothing buffered)
    for r in tr.requests:
        assert r.tokens_at == [1, 2, 3, 4, 5]
        gaps = [b - a for a, b in zip(r.chunk_times, r.chunk_times[1:])]
        assert min(gaps) >= 0.025, gaps
        assert r.first_token_s == r.chunk_times[0] >= 0.12
        assert r.prompt_tokens == 40
    ttft = max(r.chunk_times[0] for r in tr.requests)
    assert row.last_ttft == ttft and row.latency == tr.end_s >= max(r.chunk_times[-1] for r in tr.requests)
    assert row.input_throughput == pytest.approx(3 * 40 / ttft, rel=1e-12)
    assert row.output_throughput == pytest.approx(3 * 5 / (tr.end_s - ttft), rel=1e-12)
    assert row.overall_throughput == pytest.approx(3 * 45 / tr.end_s, rel=1e-12)
    assert row.itl_ms == pytest.approx(1000 * (tr.end_s - ttft) / 5, rel=1e-9)
    assert row.itl_ms >= 4 * 30 / 5 * 0.9  # 4 gaps of >= 30 ms over 5 tokens
    # SGLang's server-info values after the case
    assert row.acc_length == 2.5 and row.last_gen_throughput == 1234.5
    # the batch that was sent: one request, input_ids bs x input_len within the vocabulary (512, config.json)
    (gen,) = fake.seen("/generate")
    ids = gen.body["input_ids"]
    assert len(ids) == 3 and all(len(x) == 40 for x in ids) and max(map(max, ids)) < 512
    assert gen.body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 5, "ignore_eos": True,
                                           "stream_interval": 1}
    assert gen.body["stream"] is True
    # the JSON line: SGLang's names and rounding
    (line,) = [json.loads(x) for x in (res.run_dir / "result.jsonl").read_text().splitlines()]
    assert list(line) == SGLANG_FIELDS
    assert line["latency"] == round(tr.end_s, 4) and line["acc_length"] == 2.5
    assert line["output_throughput"] == round(3 * 5 / (tr.end_s - ttft), 2)
    # per-request timings kept in the run folder
    rows = load_run(res.run_dir).rows
    assert rows["req_ttft_s"][0] == pytest.approx([r.first_token_s for r in tr.requests])
    assert rows["req_output_tokens"][0] == [5.0, 5.0, 5.0]


def test_compute_metrics_definitions():
    m = compute_metrics(4, 100, 10, latency=2.0, last_ttft=0.5)
    assert (m.input_throughput, m.output_throughput, m.overall_throughput) == (800.0, 40 / 1.5, 220.0)
    assert m.itl_ms == pytest.approx(1000 * 4 / (40 / 1.5))
    assert compute_metrics(1, 1, 1, latency=0.0, last_ttft=0.0).input_throughput is None  # no div by zero


@pytest.mark.parametrize("mode,needle", [
    ("truncate", "ended before [DONE]"),
    ("error_chunk", "server sent an error chunk"),
    ("malformed", "malformed SSE data"),
    ("stop_early", "finished with 'stop'"),
])
def test_stream_faults_fail_the_case_and_the_run_goes_on(fake, tmp_path, mode, needle):
    fake.faults.stream_plan = [mode]  # only the first batch is broken
    res = run_server_bench(cfg(fake.url, tmp_path, batch_sizes=(2, 3)), sleep=Sleeps())
    bad, good = res.rows
    assert bad.status == "failed" and needle in bad.reason and "\n" not in bad.reason
    assert good.status == "ok" and good.flush_attempts == 1
    if mode == "error_chunk":
        assert "CUDA out of memory" in bad.reason
    lines = (res.run_dir / "result.jsonl").read_text().splitlines()
    assert [json.loads(x)["batch_size"] for x in lines] == [3]  # only ok cases get a JSON line
    assert load_run(res.run_dir).rows["status"].tolist() == ["failed", "ok"]


def test_generate_http_error_fails_with_status(fake, tmp_path):
    fake.faults.generate_status = 500
    res = run_server_bench(cfg(fake.url, tmp_path), sleep=Sleeps())
    assert res.rows[0].status == "failed" and "/generate -> 500" in res.rows[0].reason


def test_server_slower_than_request_timeout(fake, tmp_path):
    fake.faults.stream_plan = ["slow"]  # sleeps 30 s before the first byte
    t0 = time.monotonic()
    res = run_server_bench(cfg(fake.url, tmp_path, request_timeout=0.5, batch_sizes=(1, 2)), sleep=Sleeps())
    assert time.monotonic() - t0 < 5
    slow, ok = res.rows
    assert slow.status == "failed" and "read timeout" in slow.reason
    assert ok.status == "ok"


def test_trickling_server_hits_the_total_deadline(fake, tmp_path):
    fake.faults.step_delay = 0.15  # every read succeeds, the whole batch is too slow
    t0 = time.monotonic()
    res = run_server_bench(cfg(fake.url, tmp_path, request_timeout=0.5, output_lens=(40,)), sleep=Sleeps())
    assert time.monotonic() - t0 < 3
    assert res.rows[0].status == "failed" and "request timeout" in res.rows[0].reason


# ---- guards, warm-up, profile, backends -------------------------------------------------------------------

def test_skip_guards_from_server_info(fake, tmp_path):
    fake.faults.max_running_requests = 4
    fake.faults.token_capacity = 1000
    res = run_server_bench(cfg(fake.url, tmp_path, batch_sizes=(2, 8), input_lens=(100, 600), output_lens=(4,)),
                           sleep=Sleeps())
    got = {r.case_id: (r.status, r.reason) for r in res.rows}
    assert got["bs2-in100-out4"][0] == "ok"
    assert got["bs2-in600-out4"] == ("skipped", "bs*(input+output) = 1208 > token_capacity 1000")
    assert got["bs8-in100-out4"] == ("skipped", "batch size 8 > max_running_requests 4 x dp_size 1")
    assert len(fake.seen("/flush_cache")) == 1 and len(fake.seen("/generate")) == 1
    assert res.exit_code == 0


def test_warmup_once_per_batch_size(fake, tmp_path):
    res = run_server_bench(cfg(fake.url, tmp_path, skip_warmup=False, batch_sizes=(1, 2), input_lens=(8, 16),
                               output_lens=(2,)), sleep=Sleeps())
    gens = fake.seen("/generate")
    shapes = [(len(g.body["input_ids"]), len(g.body["input_ids"][0]), g.body["sampling_params"]["max_new_tokens"])
              for g in gens]
    assert shapes == [(1, 1024, 16), (1, 8, 2), (1, 16, 2), (2, 1024, 16), (2, 8, 2), (2, 16, 2)]
    assert len(fake.seen("/flush_cache")) == 6  # every batch, warm-ups included, starts from a flushed cache
    assert [r.case_id for r in res.rows] == ["bs1-in8-out2", "bs1-in16-out2", "bs2-in8-out2", "bs2-in16-out2"]
    assert len(res.warmups) == 2 and len((res.run_dir / "result.jsonl").read_text().splitlines()) == 4


def test_profile_brackets_each_case(fake, tmp_path):
    res = run_server_bench(cfg(fake.url, tmp_path, profile=True, batch_sizes=(1, 2)), sleep=Sleeps())
    assert all(r.status == "ok" and r.profile for r in res.rows)
    order = [r.path for r in fake.requests if r.method == "POST"]
    assert order == ["/flush_cache", "/start_profile", "/generate", "/stop_profile"] * 2


def test_profile_refused_fails_case(fake, tmp_path):
    fake.faults.profile_status = 400
    res = run_server_bench(cfg(fake.url, tmp_path, profile=True), sleep=Sleeps())
    assert res.rows[0].status == "failed" and "/start_profile -> 400" in res.rows[0].reason


def test_auto_backend_detects_sglang_old_info_path(fake, tmp_path):
    fake.faults.info_paths = ("/get_server_info",)  # an older server
    res = run_server_bench(cfg(fake.url, tmp_path, backend="auto"), sleep=Sleeps())
    assert res.backend == "sglang" and res.rows[0].status == "ok" and res.rows[0].acc_length == 2.5
    assert res.facts.vocab_size == 512


def test_unknown_vocab_falls_back_with_warning(fake, tmp_path):
    fake.faults.model_path = "not/a/local/dir"
    warnings = []

    class L(Listener):
        def warning(self, m):
            warnings.append(m)

    res = run_server_bench(cfg(fake.url, tmp_path, input_lens=(300,)), L(), sleep=Sleeps())
    assert any("--vocab-size" in w for w in warnings)
    ids = fake.seen("/generate")[0].body["input_ids"]
    assert max(map(max, ids)) < 1000 and res.facts.vocab_source == "fallback"


def test_a_metrics_page_that_fails_is_said_once_not_dropped_silently(fake, tmp_path):
    """A /metrics read that fails (a 503 here; a timeout alike) loses that batch's server counters (cache hits,
    acceptance). Before, kbench dropped them without a word, and a row without a cache hit rate read as a server
    that exports none. Now the first failure is a warning naming the URL and why; the batches whose reads
    answered keep their counters; a server without /metrics (404) is not warned about."""
    fake.faults.metrics_start_time = 1000.0
    fake.faults.metrics_plan = [503, 503]  # the first batch's before and after snapshots
    warnings = []

    class L(Listener):
        def warning(self, m):
            warnings.append(m)

    res = run_server_bench(cfg(fake.url, tmp_path, repeat=3), L(), sleep=Sleeps())
    said = [w for w in warnings if "/metrics" in w]
    assert len(said) == 1 and said[0].startswith(f"{fake.url}/metrics did not answer (GET /metrics -> 503)"), warnings
    assert "counters of that batch" in said[0]
    assert res.rows[0].cache_hit_rate == pytest.approx(0.25)  # the other two batches' counters
    fake.faults.metrics_start_time = None  # no /metrics at all: nothing to warn about
    warnings.clear()
    run_server_bench(cfg(fake.url, tmp_path, run_name="plain"), L(), sleep=Sleeps())
    assert not [w for w in warnings if "/metrics" in w]


def test_fail_fast_stops(fake, tmp_path):
    fake.faults.stream_plan = ["truncate"]
    res = run_server_bench(cfg(fake.url, tmp_path, batch_sizes=(1, 2), fail_fast=True), sleep=Sleeps())
    assert [r.status for r in res.rows] == ["failed"] and res.status == "stopped"
    assert len(fake.seen("/generate")) == 1 and load_run(res.run_dir).manifest["status"] == "stopped"


def test_result_filename_is_appended(fake, tmp_path):
    out = tmp_path / "res.jsonl"
    for name in ("before", "after"):
        run_server_bench(cfg(fake.url, tmp_path, run_name=name, batch_sizes=(1, 2), result_filename=out),
                         sleep=Sleeps())
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(x["run_name"], x["batch_size"]) for x in lines] == [("before", 1), ("before", 2), ("after", 1),
                                                                   ("after", 2)]


# ---- Ctrl-C -----------------------------------------------------------------------------------------------

def test_interrupt_keeps_rows(fake, tmp_path):
    class CtrlC(Listener):
        def case_finished(self, case, row, warmup):
            if case.batch_size == 2:
                raise KeyboardInterrupt

    with pytest.raises(ServerBenchInterrupted) as ei:
        run_server_bench(cfg(fake.url, tmp_path, batch_sizes=(1, 2, 3)), CtrlC(), sleep=Sleeps())
    run = load_run(ei.value.result.run_dir)
    assert run.manifest["status"] == "interrupted"
    assert run.rows["case_id"].tolist() == ["bs1-in32-out4", "bs2-in32-out4"]
    assert (run.path / "rows.parquet").is_file()


# ---- bad input --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["--url", "ftp://127.0.0.1:1"], "--url"),
    (["--url", "127.0.0.1:30000"], "--url"),
    (["--url", "http://x", "--backend", "trt"], "--backend"),
    (["--url", "http://x", "--batch-size", "1,x"], "--batch-size"),
    (["--url", "http://x", "--input-len", "0"], "--input-len"),
    (["--url", "http://x", "--flush-retries", "0"], "--flush-retries"),
    (["--url", "http://x", "--flush-retry-wait", "-1"], "--flush-retry-wait"),
    (["--url", "http://x", "--request-timeout", "nan"], "--request-timeout"),
    (["--url", "http://x", "--temperature", "hot"], "--temperature"),
    (["--url", "http://x", "--result-filename", "/nonexistent-dir/x.jsonl"], "--result-filename"),
])
def test_bad_input_exit_2_one_line(tmp_path, args, needle):
    r = CliRunner().invoke(cli(), ["server-bench", *args, "--out", str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert not (tmp_path / "r").exists()  # nothing written



@pytest.mark.parametrize("path,fs", [("/proc/x.jsonl", "proc"), ("/proc/self/x.jsonl", "proc"), ("/sys/x.jsonl", "sysfs")])
def test_result_filename_in_a_kernel_file_system_says_so(tmp_path, path, fs):
    """/proc answers "No such file or directory" when a file is created in it: the line said /proc itself did not
    exist ("--result-filename's folder /proc: cannot write there (No such file or directory)")."""
    if not Path(path).parent.is_dir():
        pytest.skip(f"no {Path(path).parent} here")
    r = CliRunner().invoke(cli(), ["server-bench", "--url", "http://127.0.0.1:9", "--result-filename", path,
                                   "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"error: --result-filename {path}: {Path(path).parent} is on a {fs} file system (the kernel's own entries), "
        f"where no file can be created; give a path on a disk"], r.output
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def _trace(chunks_per_request):
    """A BatchTrace from, per request, [(seconds since the batch was sent, tokens so far), ...]; [DONE] at the
    last chunk's time."""
    from kbench.server.backends import TokenEvent
    from kbench.server.metrics import BatchTrace

    tr = BatchTrace.empty(len(chunks_per_request))
    for i, chunks in enumerate(chunks_per_request):
        for t, k in chunks:
            tr.add(t, TokenEvent(i, k, "length" if k == 16 else None))
    tr.end_s = max(t for chunks in chunks_per_request for t, _ in chunks)
    return tr


def test_output_throughput_of_a_batch_whose_tokens_came_in_one_late_chunk_is_not_a_measurement():
    """#54's second A/A alarm: a starved vLLM frontend sent one request's 16 tokens in one chunk just before the end,
    so latency - last_ttft (SGLang's decode window) held almost none of the decode and bs x out / window read up to
    37x high. Such a batch has no output throughput (nor ITL); a batch streamed token by token keeps SGLang's
    formula, and one whose first chunk folds two tokens too."""
    from kbench.server.metrics import metrics_from_trace

    steady = [[(0.010 + 0.002 * j, j + 1) for j in range(16)] for _ in range(2)]
    m = metrics_from_trace(_trace(steady), 64, 16)
    assert m.output_throughput == pytest.approx(2 * 16 / (0.040 - 0.010))
    assert m.itl_ms == pytest.approx(1000 * 0.030 / 16)
    late = [steady[0], [(0.039, 15), (0.040, 16)]]  # request 1: nothing, then 15 tokens at once
    m = metrics_from_trace(_trace(late), 64, 16)
    assert m.output_throughput is None and m.itl_ms is None
    assert m.latency == pytest.approx(0.040) and m.last_ttft == pytest.approx(0.039)  # the rest still measured
    folded = [[(0.012, 2)] + [(0.012 + 0.002 * j, j + 2) for j in range(1, 15)] for _ in range(2)]
    assert metrics_from_trace(_trace(folded), 64, 16).output_throughput is not None
