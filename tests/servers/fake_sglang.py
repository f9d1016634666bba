"""A small SGLang-protocol server for fault tests: stdlib http.server in a thread, faults set per test.

It speaks the parts of SGLang's native API that server-bench uses (/flush_cache, /server_info,
/get_server_info, /get_model_info, /generate streaming SSE with chunked transfer encoding like uvicorn,
/start_profile, /stop_profile) and records every request with its arrival time.
"""
from __future__ import annotations

import json
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


@dataclass
class Faults:
    # /flush_cache: statuses answered in turn, then flush_default; "drop" closes the connection unanswered
    flush_plan: list = field(default_factory=list)
    flush_default: int | str = 200
    flush_body_busy: str = "Cache not flushed because there are pending requests. #queue-req: 1, #running-req: 0"
    # /generate
    generate_status: int = 200
    stream_mode: str = "ok"  # ok | truncate (no [DONE]) | error_chunk | malformed | deep | stop_early | slow
    stream_plan: list = field(default_factory=list)  # modes for the first /generate calls, then stream_mode
    truncate_after: int = 3  # chunks sent before a truncate / error chunk / malformed line
    first_token_delay: float = 0.0  # seconds before the first chunk (prefill)
    first_token_jitter: float = 0.0  # and a random 0 to this many seconds more (a noisy machine), each request
    step_delay: float = 0.0  # seconds between decode steps
    # server info
    max_running_requests: int = 64
    token_capacity: int = 1_000_000
    avg_spec_accept_length: float | None = 2.5
    last_gen_throughput: float = 1234.5
    model_path: str = "fake/model"
    vocab_size: int | None = 512
    info_paths: tuple = ("/server_info", "/get_server_info")
    info_body: str | None = None  # the info paths' answer as this text instead (a broken or hostile server)
    profile_status: int = 200
    # auth, as SGLang's --api-key: every path but /health needs `Authorization: Bearer api_key`; a 401 body that
    # echoes what was sent (some gateways do) tests that kbench never keeps it
    api_key: str | None = None
    required_headers: dict = field(default_factory=dict)  # name -> value, else 401
    # redirects: every path but /health (and /r/...) answered with `redirect_status` to redirect_to + "/r" + path;
    # a path under /r/ is served as the path without it (so a redirect to this server's own URL lands)
    redirect_to: str | None = None
    redirect_status: int = 307
    # (path, status): that path answered with the status and a page quoting the Authorization header it got, and
    # its secret (a Basic password decoded, or a Bearer key) raw, HTML-escaped, percent-encoded and JSON-escaped,
    # as an error page or a gateway's log line may
    echo_auth: tuple | None = None
    # every path but /health (or only those in stall_paths) never finishes its answer: "continue" sends `100
    # Continue` interim responses for ever, "header-drip" the status line, then one header byte every drip seconds
    # for ever, "body-drip" a 200 and its headers (a body of 1 MB said), then one body byte every drip seconds for
    # ever, "headers-silent" a 200 and its headers, then nothing while the connection stays open
    stall: str | None = None
    drip: float = 0.5
    stall_paths: tuple | None = None
    # /metrics (SGLang --enable-metrics): None answers 404; a number is the process_start_time_seconds it exports,
    # beside sglang:prompt_tokens_total (every /generate prompt's tokens so far) and sglang:cached_tokens_total
    # (a quarter of them)
    metrics_start_time: float | None = None
    metrics_plan: list = field(default_factory=list)  # statuses of the first /metrics reads (then 200)


@dataclass
class Seen:
    method: str
    path: str
    query: dict
    body: dict | None
    t: float  # time.monotonic() at arrival
    headers: dict = field(default_factory=dict)


class FakeSGLang:
    def __init__(self, faults: Faults | None = None, port: int = 0):
        self.faults = faults or Faults()
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._flush_calls = 0
        self._generate_calls = 0
        self.connections: set = set()  # open client sockets: stop() closes them like a dying server would
        self.port = port
        self.httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> "FakeSGLang":
        outer = self

        class Handler(_Handler):
            server_obj = outer

        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        with self._lock:
            conns, self.connections = list(self.connections), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def seen(self, path: str) -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def next_flush(self):
        with self._lock:
            i = self._flush_calls
            self._flush_calls += 1
        plan = self.faults.flush_plan
        return plan[i] if i < len(plan) else self.faults.flush_default

    def next_stream_mode(self) -> str:
        with self._lock:
            i = self._generate_calls
            self._generate_calls += 1
        plan = self.faults.stream_plan
        return plan[i] if i < len(plan) else self.faults.stream_mode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_obj: FakeSGLang

    def log_message(self, *a):  # quiet
        pass

    def setup(self):
        super().setup()
        with self.server_obj._lock:
            self.server_obj.connections.add(self.connection)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        with self.server_obj._lock:
            self.server_obj.connections.discard(self.connection)

    def _record(self, body):
        u = urlparse(self.path)
        with self.server_obj._lock:
            self.server_obj.requests.append(Seen(self.command, u.path, parse_qs(u.query), body, time.monotonic(),
                                                 dict(self.headers.items())))
        return u.path[2:] if u.path.startswith("/r/") else u.path

    def _refused(self, path: str) -> bool:
        """Answers a redirect, a 401, a stall or an echo when the faults ask for one (True: answered)."""
        f = self.server_obj.faults
        if path == "/health":
            return False
        if f.stall and (f.stall_paths is None or path in f.stall_paths):
            self._stall(f.stall, f.drip)
            return True
        if f.echo_auth and path == f.echo_auth[0]:
            self._echo_auth(f.echo_auth[1])
            return True
        if f.redirect_to and not self.path.startswith("/r/"):
            self.send_response(f.redirect_status)
            self.send_header("Location", f.redirect_to.rstrip("/") + "/r" + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        want = dict(f.required_headers)
        if f.api_key:
            want["Authorization"] = f"Bearer {f.api_key}"
        for name, value in want.items():
            if self.headers.get(name) != value:
                self._send(401, {"error": f"unauthorized: {name} {self.headers.get(name)!r} was not accepted"})
                return True
        return False

    def _stall(self, how: str, drip: float) -> None:
        self.close_connection = True
        try:
            if how == "header-drip":
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            elif how in ("body-drip", "headers-silent"):
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000000\r\n\r\n")
            for _ in range(100_000):  # hours: far beyond any test
                if how == "headers-silent":
                    self.wfile.flush()
                    time.sleep(drip)
                    continue
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n" if how == "continue" else b"X")
                self.wfile.flush()
                time.sleep(drip)
        except OSError:
            pass  # the client gave up

    def _echo_auth(self, status: int) -> None:
        import base64
        import html
        from urllib.parse import quote

        auth = self.headers.get("Authorization") or ""
        kind, _, cred = auth.partition(" ")
        secret = base64.b64decode(cred).decode("latin-1").partition(":")[2] if kind == "Basic" else cred
        page = (f"<html><body>denied: Authorization {html.escape(auth)}; password {html.escape(secret)}; "
                f"url-form {quote(secret, safe='')}; raw {secret}; json {json.dumps(secret)}</body></html>")
        self._send(status, page, "text/html")

    def _send(self, status: int, body, ctype="application/json"):
        data = (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self._record(None)
        if self._refused(path):
            return
        f = self.server_obj.faults
        if path in f.info_paths and f.info_body is not None:
            self._send(200, f.info_body)
        elif path in f.info_paths:
            state = {"memory_usage": {"token_capacity": f.token_capacity},
                     "effective_max_running_requests_per_dp": f.max_running_requests,
                     "last_gen_throughput": f.last_gen_throughput}
            if f.avg_spec_accept_length is not None:
                state["avg_spec_accept_length"] = f.avg_spec_accept_length
            self._send(200, {"model_path": f.model_path, "dp_size": 1, "tp_size": 1, "version": "fake",
                             "max_running_requests": f.max_running_requests, "internal_states": [state]})
        elif path == "/get_model_info":
            self._send(200, {"model_path": f.model_path, "is_generation": True})
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": f.model_path, "owned_by": "sglang"}]})
        elif path == "/health":
            self._send(200, "")
        elif path == "/metrics" and f.metrics_start_time is not None and f.metrics_plan:
            self._send(f.metrics_plan.pop(0), {"detail": "metrics exporter failed"})
        elif path == "/metrics" and f.metrics_start_time is not None:
            prompt = sum(len(ids) for r in self.server_obj.seen("/generate") if isinstance(r.body, dict)
                         for ids in (r.body.get("input_ids") or []))
            self._send(200, f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds "
                            f"{f.metrics_start_time}\nsglang:prompt_tokens_total {float(prompt)}\n"
                            f"sglang:cached_tokens_total {prompt / 4}\n", "text/plain")
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        path = self._record(body)
        if self._refused(path):
            return
        f = self.server_obj.faults
        if path == "/flush_cache":
            st = self.server_obj.next_flush()
            if st == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if st == "success_false":  # vLLM's reply while blocks are still held
                self._send(200, {"success": False})
            elif st == 200:
                self._send(200, "Cache flushed.\nPlease check backend logs for more details. "
                                "(When there are running or waiting requests, the operation will not be performed.)\n",
                           "text/plain")
            elif st == 400:
                self._send(400, f.flush_body_busy, "text/plain")
            else:
                self._send(int(st), "Service Unavailable" if st == 503 else "error", "text/plain")
        elif path in ("/start_profile", "/stop_profile"):
            self._send(f.profile_status, "Start profiling.\n" if f.profile_status == 200 else "no profiler",
                       "text/plain")
        elif path == "/generate":
            self._generate(body or {})
        else:
            self._send(404, {"detail": "Not Found"})

    # ---- /generate --------------------------------------------------------------------------------------
    def _chunk(self, data: bytes):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _generate(self, body: dict):
        f = self.server_obj.faults
        if f.generate_status != 200:
            self._send(f.generate_status, {"error": {"message": "generate refused"}})
            return
        mode = self.server_obj.next_stream_mode()
        ids = body.get("input_ids") or []
        sp = body.get("sampling_params") or {}
        n_out = int(sp.get("max_new_tokens", 16))
        if mode == "stop_early":
            n_out = max(1, n_out - 2)  # finishes with "stop" before max_new_tokens
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        try:
            if mode == "slow":
                time.sleep(30)  # far beyond any test's --request-timeout
            if f.first_token_delay:
                time.sleep(f.first_token_delay)
            if f.first_token_jitter:
                time.sleep(random.uniform(0, f.first_token_jitter))
            for step in range(1, n_out + 1):
                if step > 1 and f.step_delay:
                    time.sleep(f.step_delay)
                for i, prompt in enumerate(ids):
                    if mode in ("truncate", "error_chunk", "malformed", "deep") and sent >= f.truncate_after:
                        if mode == "error_chunk":
                            self._chunk(b'data: {"error": {"message": "CUDA out of memory", "code": 500}}\n\n')
                            self._chunk(b"data: [DONE]\n\n")
                            self._chunk(b"")
                        elif mode == "malformed":
                            self._chunk(b'data: {"index": 0, "meta_info": {broken\n\n')
                            self._chunk(b"")
                        elif mode == "deep":  # valid JSON nested deeper than a recursive parser's stack
                            self._chunk(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n")
                            self._chunk(b"")
                        else:  # truncate: end the HTTP body cleanly but without [DONE]
                            self._chunk(b"")
                        return
                    last = step == n_out
                    finish = None
                    if last:
                        finish = {"type": "stop", "matched": 2} if mode == "stop_early" else \
                            {"type": "length", "length": n_out}
                    meta = {"id": f"req-{i}", "prompt_tokens": len(prompt), "completion_tokens": step,
                            "cached_tokens": 0, "finish_reason": finish}
                    if last:
                        meta["e2e_latency"] = 0.1
                    chunk = {"text": "x" * step, "index": i, "meta_info": meta}
                    self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    sent += 1
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (request timeout)
