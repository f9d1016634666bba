"""server-bench against servers that hang mid-stream, stream forever, send endless lines or malformed JSON:
bounded time and memory, a failed row with a clear one-line reason, the run goes on."""
from __future__ import annotations

import functools
import json
import time

import pytest

from fake_sglang import FakeSGLang, Faults, _Handler  # noqa: E402

from kbench.server import ServerBenchConfig, run_server_bench  # noqa: E402
from kbench.server import client as client_mod  # noqa: E402
from kbench.runs.store import load_run  # noqa: E402


class HostileHandler(_Handler):
    """Extra /generate modes: hang_mid (two chunks then silence), endless (valid chunks forever), long_line
    (one line that never ends), and /server_info answered with broken JSON."""

    def do_GET(self):
        if self.server_obj.faults.model_path == "broken-info" and self.path.startswith("/server_info"):
            self._record(None)
            return self._send(200, '{"model_path": "x", "internal_states": [', "application/json")
        return super().do_GET()

    def _generate(self, body):
        mode = self.server_obj.next_stream_mode()
        if mode not in ("hang_mid", "endless", "long_line"):
            self.server_obj._generate_calls -= 1  # let the base class take this call's mode
            return super()._generate(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        meta = {"id": "req-0", "prompt_tokens": 4, "completion_tokens": 1, "cached_tokens": 0, "finish_reason": None}
        line = b"data: " + json.dumps({"text": "x", "index": 0, "meta_info": meta}).encode() + b"\n\n"
        try:
            if mode == "hang_mid":
                self._chunk(line)
                self._chunk(line)
                time.sleep(30)
            elif mode == "endless":
                t0 = time.monotonic()
                while time.monotonic() - t0 < 30:
                    self._chunk(line * 64)
            else:
                self._chunk(b"data: {\"text\": \"")
                t0 = time.monotonic()
                while time.monotonic() - t0 < 30:
                    self._chunk(b"x" * 65536)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass


class HostileServer(FakeSGLang):
    def start(self):
        outer = self

        class H(HostileHandler):
            server_obj = outer

        from http.server import ThreadingHTTPServer
        import threading

        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self


@pytest.fixture
def srv(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"vocab_size": 512}))
    s = HostileServer(Faults(model_path=str(d))).start()
    yield s
    s.stop()


def cfg(url, tmp_path, **kw):
    base = dict(url=url, backend="sglang", batch_sizes=(1, 2), input_lens=(4,), output_lens=(2,), skip_warmup=True,
                flush_retry_wait=0.01, request_timeout=1.0, out_dir=tmp_path / "results")
    base.update(kw)
    return ServerBenchConfig(**base)


def peak_mb(fn):
    import tracemalloc

    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("mode,needle", [("hang_mid", "timeout"), ("endless", "request timeout"),
                                         ("long_line", "longer than")])
def test_hostile_stream_fails_the_case_in_bounded_time(srv, tmp_path, mode, needle):
    srv.faults.stream_plan = [mode]
    t0 = time.monotonic()
    res = run_server_bench(cfg(srv.url, tmp_path), sleep=lambda s: None)
    elapsed = time.monotonic() - t0
    assert elapsed < 6, elapsed  # 1 s request timeout, not the server's 30 s
    bad, good = res.rows
    assert bad.status == "failed" and needle in bad.reason and "\n" not in bad.reason, bad.reason
    assert good.status == "ok", good.reason
    assert load_run(res.run_dir).rows["status"].tolist() == ["failed", "ok"]


def test_endless_stream_stops_at_the_size_cap_with_bounded_memory(srv, tmp_path, monkeypatch):
    """The client stops reading at max_bytes (1 GiB by default; 2 MiB here) and holds no more than that."""
    orig = client_mod.ServerClient.stream_events
    monkeypatch.setattr(client_mod.ServerClient, "stream_events",
                        functools.partialmethod(orig, max_bytes=2 << 20))
    srv.faults.stream_plan = ["endless"]
    res, peak = peak_mb(lambda: run_server_bench(cfg(srv.url, tmp_path, request_timeout=20), sleep=lambda s: None))
    bad = res.rows[0]
    assert bad.status == "failed" and f"stream larger than {2 << 20} bytes" in bad.reason
    assert peak < 64, peak


def test_endless_line_memory_is_capped(srv, tmp_path, monkeypatch):
    monkeypatch.setattr(client_mod, "MAX_LINE_BYTES", 1 << 20)
    srv.faults.stream_plan = ["long_line"]
    res, peak = peak_mb(lambda: run_server_bench(cfg(srv.url, tmp_path, request_timeout=20), sleep=lambda s: None))
    assert "an SSE line is longer than 1048576 bytes" in res.rows[0].reason
    assert peak < 64, peak


def test_malformed_server_info_json_is_one_line(srv, tmp_path):
    from click.testing import CliRunner
    from kbench.cli.main import cli

    srv.faults.model_path = "broken-info"
    r = CliRunner().invoke(cli, ["server-bench", "--url", srv.url, "--backend", "sglang", "--skip-warmup",
                                 "--batch-size", "1", "--input-len", "4", "--output-len", "2",
                                 "--request-timeout", "2", "--out", str(tmp_path / "r")])
    assert "Traceback" not in r.output
    assert r.exit_code in (0, 1), r.output  # a usable server without info, or one clear error line
    if r.exit_code == 1:
        errs = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
        assert len(errs) == 1
