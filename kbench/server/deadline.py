"""A total deadline on one HTTP exchange with the server, not only a timeout on each read.

requests' timeout bounds the connect and each read from the socket: a server that sends an endless series of
`100 Continue` interim responses, or its status line and then one header byte a second, answers every read in
time and never ends the exchange. Here a timer shuts the exchange's socket down when its deadline passes (the
blocked read returns at once, the HTTP library raises) and the exchange knows it was its deadline:

    session = deadline_session()               # a requests.Session whose connections report to the deadline
    with Deadline(30.0) as dl:
        with dl.attaching():                   # the connection the request takes joins this deadline
            r = session.get(url, stream=True, timeout=(10, 30))
        body = r.raw.read()                    # still bounded: the socket is shut at the deadline
    if dl.expired: ...                         # whatever the library raised, it was the deadline

The connection is found by the urllib3 connection class the session's pools use (DeadlineAdapter), which joins
the deadline of the exchange under way in its thread (attaching) when it connects and sends. kbench.server.client
makes every request through this.
"""
from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator

import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool

_current = threading.local()


class Deadline:
    """``seconds`` from entering the block; on expiry every socket of the exchange is shut down (once)."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.expired = False
        self._conns: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(self.seconds, 0.0), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    @contextlib.contextmanager
    def attaching(self) -> Iterator["Deadline"]:
        """Within the block, the connection a request in this thread takes joins this deadline."""
        before = getattr(_current, "deadline", None)
        _current.deadline = self
        try:
            yield self
        finally:
            _current.deadline = before

    def attach(self, conn) -> None:
        with self._lock:
            if conn not in self._conns:
                self._conns.append(conn)
            if self.expired:
                _shut(conn)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for c in self._conns:
                _shut(c)


def _shut(conn) -> None:
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the base class's: an SSL socket's own would unwrap
    except (OSError, ValueError):
        pass


def _join() -> None:
    return getattr(_current, "deadline", None)


class _Joining:
    """Mixed into urllib3's connection classes: connect and request join the deadline under way, if any."""

    def connect(self):
        dl = _join()
        if dl is not None:
            dl.attach(self)
        super().connect()
        if dl is not None:
            dl.attach(self)  # its socket exists now: shut at once if the deadline already passed

    def request(self, *a, **kw):
        dl = _join()
        if dl is not None:
            dl.attach(self)
        return super().request(*a, **kw)


class _HTTPConnection(_Joining, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_Joining, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class DeadlineAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose pools (a proxy's too) make connections that join the exchange's Deadline."""

    def init_poolmanager(self, *a, **kw):
        super().init_poolmanager(*a, **kw)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, *a, **kw):
        manager = super().proxy_manager_for(*a, **kw)
        manager.pool_classes_by_scheme = _POOLS
        return manager


def deadline_session(session: requests.Session | None = None) -> requests.Session:
    """``session`` (a new one by default) with DeadlineAdapter mounted for http:// and https://."""
    s = session or requests.Session()
    s.mount("http://", DeadlineAdapter())
    s.mount("https://", DeadlineAdapter())
    return s
