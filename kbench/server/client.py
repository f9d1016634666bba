"""HTTP to the server under test: small JSON calls, a bounded SSE stream reader, the cache flush with retry.

Everything here is bounded: every call has a total deadline (kbench.server.deadline: not only a timeout per
read, which endless `100 Continue` lines or a header byte a second never trip), a stream a maximum line length
and a maximum size, so a misbehaving server turns into a ServerError with one clear line, never a hang.

Credentials (kbench.server.auth) travel as headers, never in a URL kbench prints; every reply body and error
this client hands back has their values replaced by *** (a 401 page that echoes the key). Redirects: one to
another origin (scheme, host, port) is refused with one line (the batch and the credentials would go to another
server, and the rows would hold its figures); up to MAX_REDIRECTS within the same origin are followed with the
method and body kept (a proxy's /path -> /path/), as a 307/308 asks. The origin of a redirect's target is read
by the parser that connects (kbench.server.auth.origin): a Location that Python's urlsplit and urllib3 read as two
places (`http://OTHER\\@host:port/`) is another origin.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Iterator
from urllib.parse import urljoin

import requests
import urllib3.exceptions
import urllib3.util

from kbench import files
from kbench.text import one_line
from kbench.server.auth import NO_CREDENTIALS, Credentials, origin, redact_url, without_userinfo
from kbench.server.deadline import Deadline, deadline_session

# Bounds on what the server may send back
MAX_JSON_BYTES = 16 << 20  # a /server_info or /metrics reply
MAX_LINE_BYTES = 4 << 20  # one SSE line
MAX_STREAM_BYTES = 1 << 30  # a whole streamed batch
READ_CHUNK = 64 << 10
MAX_REDIRECTS = 5  # within the server's own origin
# the total deadline (kbench.server.deadline) ends an exchange this long after its timeout: the per-read timeout and
# the checks between chunks say what happened where they can; the deadline ends what they cannot see end
BACKSTOP_S = 1.0


class ServerError(Exception):
    """The server (or the way to it) failed; str() is one line naming what was asked and what came back."""


class StreamError(ServerError):
    """The generation stream was unusable: truncated, malformed, an error chunk, too slow or too big."""


def snippet(body: str | bytes, limit: int = 200) -> str:
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    body = " ".join(body.split())
    return body if len(body) <= limit else body[: limit - 3] + "..."


# what reading a response body directly from urllib3 can raise (requests wraps these only in iter_content)
TRANSPORT_ERRORS = (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError)


def describe_exception(e: BaseException) -> str:
    """A one-line name for a transport failure (connection refused, timeout, ...)."""
    if isinstance(e, (urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return "read timeout"
    if isinstance(e, urllib3.exceptions.ProtocolError):
        return f"connection broken ({snippet(str(e), 120)})"
    if isinstance(e, requests.exceptions.ConnectTimeout):
        return "connect timeout"
    if isinstance(e, requests.exceptions.ReadTimeout):
        return "read timeout"
    if isinstance(e, requests.exceptions.ConnectionError):
        text = str(e)
        for needle, name in (("Connection refused", "connection refused"), ("Connection reset", "connection reset"),
                             ("RemoteDisconnected", "connection closed by server"),
                             ("Name or service not known", "unknown host")):
            if needle in text:
                return name
        return "connection error"
    return f"{type(e).__name__}: {snippet(str(e), 120)}"


@dataclass
class FlushResult:
    ok: bool
    attempts: int
    seconds: float
    message: str  # on failure: one line naming the endpoint, the status and the body


class ServerClient:
    """A session bound to one base URL. ``timeout`` bounds small calls (connect and each read)."""

    def __init__(self, base_url: str, timeout: float = 30.0, session: requests.Session | None = None,
                 credentials: Credentials | None = None):
        self.base_url = without_userinfo(base_url).rstrip("/")  # a password travels as a header, not here
        self.origin = origin(self.base_url)
        self.timeout = timeout
        self.session = deadline_session(session)  # every exchange has a total deadline
        self.credentials = credentials or NO_CREDENTIALS
        self.headers = self.credentials.http_headers()
        self.auth = self.credentials.basic

    def url(self, path: str) -> str:
        return self.base_url + path

    def _send(self, method: str, path: str, *, timeout, deadline: Deadline, json_body=None,
              params=None) -> requests.Response:
        """The streamed response, after same-origin redirects; ServerError for one to another origin. Every
        connection it takes joins ``deadline``."""
        url = self.url(path)
        for _ in range(MAX_REDIRECTS + 1):
            with deadline.attaching():
                try:
                    r = self.session.request(method, url, json=json_body, params=params, stream=True,
                                             timeout=timeout, headers=self.headers, auth=self.auth,
                                             allow_redirects=False)
                except ValueError as e:  # requests prepares a redirect's next request even when not following it:
                    # a Location Python's URL parser refuses (http://[::1/, a bad IPv6 literal) raises there
                    raise ServerError(f"{method} {self.url(path)}: redirected to a Location that is no URL ({e}); "
                                      "kbench does not follow it") from None
            if not r.is_redirect:
                return r
            location = r.headers.get("location", "")
            r.close()
            try:
                target = urljoin(r.url, location)
            except ValueError as e:  # a Location Python's URL parser refuses (http://[::1/, a bad IPv6 literal)
                raise ServerError(f"{method} {self.url(path)}: redirected ({r.status_code}) to a Location that is no "
                                  f"URL ({e}): {one_line(redact_url(location))[:200]!r}; kbench does not follow it") \
                    from None
            if self.origin is None or origin(target) != self.origin:
                raise ServerError(f"{method} {self.url(path)}: redirected ({r.status_code}) to another origin, "
                                  f"{redact_url(target)}{_connects_to(target)}; kbench does not follow it (the batch and any credentials "
                                  f"would go to another server): give that server's URL as --url")
            url, params = target, None  # the Location holds its own query
        raise ServerError(f"{method} {self.url(path)}: more than {MAX_REDIRECTS} redirects")

    # ---- small calls ------------------------------------------------------------------------------------
    def request(self, method: str, path: str, *, json_body=None, params=None, timeout: float | None = None):
        """(status, text). Raises ServerError on a transport failure; reads at most MAX_JSON_BYTES."""
        t = self.timeout if timeout is None else timeout
        scrub = self.credentials.scrub
        total = t
        with Deadline(total + BACKSTOP_S) as dl:
            try:
                with self._send(method, path, json_body=json_body, params=params, timeout=(min(t, 10.0), t),
                                deadline=dl) as r:
                    body = _read_bounded(r, MAX_JSON_BYTES, _Due(total, f"{method} {self.url(path)}"))
                    if not dl.expired:
                        return r.status_code, scrub(body.decode("utf-8", errors="replace"))
            except TRANSPORT_ERRORS as e:
                if not dl.expired or _own_timeout(e):
                    raise ServerError(scrub(f"{method} {self.url(path)}: {_waited(e, t)}")) from None
            except ServerError as e:
                if not dl.expired or _own_timeout(e):
                    msg = str(e) if str(e).startswith(f"{method} {self.url(path)}") else f"{method} {self.url(path)}: {e}"
                    raise ServerError(scrub(msg)) from None
        raise ServerError(f"{method} {self.url(path)}: {timed_out(total)}")

    def get_json(self, path: str, timeout: float | None = None):
        """Parsed JSON of a 200 reply, else None (the endpoint is absent or broken). Transport errors raise."""
        status, text = self.request("GET", path, timeout=timeout)
        if status in (401, 403):  # not an absent endpoint: the server wants (other) credentials
            raise ServerError(f"GET {self.url(path)} -> {status} {snippet(text)!r}: the server refused the request "
                              f"{'with' if self.credentials else 'without'} credentials (an API key: --api-key-file, "
                              f"$KBENCH_API_KEY or --api-key; other auth: --header)")
        if status != 200:
            return None
        try:
            return files.loads(text)
        except files.JSONProblem:
            return None

    def post(self, path: str, json_body=None, timeout: float | None = None) -> tuple[int, str]:
        return self.request("POST", path, json_body=json_body, timeout=timeout)

    # ---- cache flush ------------------------------------------------------------------------------------
    def flush_with_retry(self, path: str, *, attempts: int, wait: float, params: dict | None = None,
                         timeout: float = 30.0, sleep: Callable[[float], None] = time.sleep,
                         on_retry: Callable[[int, str, float], None] | None = None) -> FlushResult:
        """POST ``path`` up to ``attempts`` times in all (SGLang's _flush_cache_with_retry: 3 tries, 2 s apart).

        Retries on 400 (SGLang's "not idle"), 200 {"success": false} (vLLM's "blocks still held"), 5xx and
        transport errors, sleeping ``wait`` seconds between
        tries; any other status (404: the endpoint is off, e.g. vLLM without VLLM_SERVER_DEV_MODE=1) fails at
        once because asking again cannot help.
        """
        t0 = time.monotonic()
        shown = path + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                status, body = self.request("POST", path, params=params, timeout=timeout)
            except ServerError as e:
                last = f"POST {shown} -> {str(e).split(': ', 1)[-1]}"
                retryable = True
            else:
                if status == 200 and not _says_not_done(body):
                    return FlushResult(True, attempt, time.monotonic() - t0, "")
                last = f"POST {shown} -> {status} {snippet(body)!r}"
                # vLLM answers 200 {"success": false} while blocks are held by running requests: retry it
                retryable = status in (200, 400) or 500 <= status < 600
                if not retryable:
                    hint = (" (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)"
                            if status == 404 and "reset_prefix_cache" in path else "")
                    return FlushResult(False, attempt, time.monotonic() - t0,
                                       f"cache flush failed: {last}{hint}")
            if attempt < attempts:
                if on_retry:
                    on_retry(attempt, last, wait)
                sleep(wait)
        return FlushResult(False, attempts, time.monotonic() - t0,
                           f"cache flush failed after {attempts} attempt{'s' if attempts != 1 else ''}: {last}")

    # ---- the streamed batch -----------------------------------------------------------------------------
    def stream_events(self, path: str, body: dict, *, timeout: float,
                      max_bytes: int = MAX_STREAM_BYTES) -> Iterator[tuple[float, dict | None]]:
        """POST ``body`` and yield (arrival time.perf_counter(), parsed chunk) per SSE ``data:`` line.

        The final yield is (time, None) for ``data: [DONE]``. ``timeout`` bounds the whole exchange. Raises
        StreamError for a non-200 reply, a malformed line, an ``error`` chunk, a stream that ends before
        [DONE], or one that outlives the deadline or max_bytes.
        """
        try:
            yield from self._stream_events(path, body, timeout=timeout, max_bytes=max_bytes)
        except ServerError as e:  # the message may quote the server: no secret in it
            raise StreamError(self.credentials.scrub(str(e))) from None

    def _stream_events(self, path: str, body: dict, *, timeout: float,
                       max_bytes: int) -> Iterator[tuple[float, dict | None]]:
        with Deadline(timeout + BACKSTOP_S) as dl:
            try:
                yield from self._stream_within(path, body, timeout, max_bytes, dl)
            except (*TRANSPORT_ERRORS, ServerError) as e:
                if not dl.expired or _own_timeout(e):
                    if isinstance(e, ServerError):
                        raise
                    raise StreamError(f"POST {self.url(path)}: {_waited(e, timeout)}") from None
            if dl.expired:  # whatever the library made of the socket shut under it
                raise StreamError(f"POST {self.url(path)}: {timed_out(timeout)}")

    def _stream_within(self, path: str, body: dict, timeout: float, max_bytes: int,
                       dl: Deadline) -> Iterator[tuple[float, dict | None]]:
        deadline = _Due(timeout, f"POST {self.url(path)}")
        try:
            resp = self._send("POST", path, json_body=body, timeout=(min(timeout, 10.0), timeout), deadline=dl)
        except TRANSPORT_ERRORS as e:
            raise StreamError(f"POST {self.url(path)}: {_waited(e, timeout)}") from None
        with resp:
            if dl.expired:
                return
            if resp.status_code != 200:
                try:
                    text = _read_bounded(resp, 64 << 10, deadline, truncate=True)
                except (*TRANSPORT_ERRORS, ServerError):
                    text = b""
                text = self.credentials.scrub(text.decode("utf-8", errors="replace"))  # before it is cut short
                raise StreamError(f"POST {self.url(path)} -> {resp.status_code} {snippet(text)!r}")
            n_lines = 0
            try:
                for t, line in _iter_lines(resp, deadline, max_bytes):
                    n_lines += 1
                    if not line.startswith(b"data:"):
                        continue  # blank separators, comments, event:/id: fields
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        yield t, None
                        return
                    try:
                        chunk = files.loads(payload)
                    except files.JSONProblem as e:
                        raise StreamError(f"malformed SSE data (line {n_lines}): {e}: {snippet(payload, 120)!r}") \
                            from None
                    if not isinstance(chunk, dict):
                        raise StreamError(f"malformed SSE data (line {n_lines}): not a JSON object")
                    if chunk.get("error") is not None:
                        raise StreamError(f"server sent an error chunk: {snippet(json.dumps(chunk['error']), 200)}")
                    yield t, chunk
            except TRANSPORT_ERRORS as e:
                raise StreamError(f"stream from {path} broke after {n_lines} lines: {_waited(e, timeout)}") from None
            raise StreamError(f"stream from {path} ended before [DONE] after {n_lines} lines")


def _connects_to(url: str) -> str:
    """Where the HTTP library would connect for ``url``, said where Python's urlsplit reads another host in it."""
    try:
        u = urllib3.util.parse_url(url)
    except (ValueError, urllib3.exceptions.LocationParseError):
        return " (a URL the HTTP library cannot read)"
    if origin(url) is not None:
        return ""
    return f" (read by the HTTP library as host {u.host}, port {u.port or 'default'})"


def _waited(e: BaseException, read_s: float) -> str:
    """describe_exception, with the seconds a read waited where that was the failure."""
    said = describe_exception(e)
    return f"{said} (nothing for {read_s:g} s)" if said == "read timeout" else said


def _own_timeout(e: BaseException) -> bool:
    """A timeout of its own (the server silent for a read's time, or the stream's deadline checked between chunks):
    said as it is, also when the total deadline passed at the same moment."""
    if isinstance(e, ServerError):
        return "read timeout" in str(e) or "connect timeout" in str(e) or "request timeout" in str(e)
    return describe_exception(e) in ("read timeout", "connect timeout")


def timed_out(seconds: float) -> str:
    return (f"request timeout: no complete answer within {seconds:g} s (a total deadline: the server kept the "
            f"exchange going without finishing it)")


def _says_not_done(body: str) -> bool:
    try:
        data = files.loads(body)
    except files.JSONProblem:
        return False
    return isinstance(data, dict) and data.get("success") is False


def _raw_chunks(resp: requests.Response) -> Iterator[bytes]:
    """Bytes as they arrive (not buffered up to a fixed size, which would blur the arrival times)."""
    raw = resp.raw
    if getattr(raw, "chunked", False) and hasattr(raw, "read_chunked"):
        yield from raw.read_chunked(READ_CHUNK, decode_content=True)
        return
    read1 = getattr(raw, "read1", None)
    while True:
        data = read1(READ_CHUNK) if read1 else raw.read(1)
        if not data:
            return
        yield data


class _Due:
    """An exchange's deadline, checked between the chunks that arrive: ``seconds`` from now, for ``where`` (the
    method and URL) named in the error line with the seconds."""

    def __init__(self, seconds: float, where: str):
        self.seconds, self.where = seconds, where
        self.at = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise StreamError(f"{self.where}: {timed_out(self.seconds)}")


def _iter_lines(resp, deadline: _Due, max_bytes: int) -> Iterator[tuple[float, bytes]]:
    buf = b""
    total = 0
    for data in _raw_chunks(resp):
        t = time.perf_counter()
        deadline.check()
        total += len(data)
        if total > max_bytes:
            raise StreamError(f"stream larger than {max_bytes} bytes")
        buf += data
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            line, buf = buf[:i].rstrip(b"\r"), buf[i + 1:]
            yield t, line
        if len(buf) > MAX_LINE_BYTES:
            raise StreamError(f"an SSE line is longer than {MAX_LINE_BYTES} bytes")
    if buf.strip():
        yield time.perf_counter(), buf.rstrip(b"\r")


def _read_bounded(resp, limit: int, deadline: _Due, truncate: bool = False) -> bytes:
    out = b""
    for data in _raw_chunks(resp):
        deadline.check()
        out += data
        if len(out) > limit:
            if truncate:
                return out[:limit]
            raise ServerError(f"reply from {resp.url} is larger than {limit} bytes")
    return out
