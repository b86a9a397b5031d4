"""The sync client's plain-HTTP transport: ``client/http11.py`` over blocking sockets.

The same contract as the async one (httpx's timeouts and exception classes, keep-alive
bounded by ``Limits``, a reused connection that fails before any byte of its answer is
sent once more on a fresh one when it is safe to send twice), for ``Client``: httpcore's sync pool costs about twice
the framing and the system calls per request. Safe to share between threads, as
``httpx.Client`` is: the pool is guarded by a lock, each connection used by one request
at a time.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from functools import partial
from typing import TYPE_CHECKING

import h11
import httpx

from ferryman.client.http11 import (
    Answer,
    Stale,
    read_outcome,
    request_bytes,
    resendable,
    reusable,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

_READ_SIZE = 65536
_DEFAULT_KEEPALIVE_EXPIRY_SECONDS = 5.0


class _Connection:
    __slots__ = ("broken", "h11", "idle_since", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.broken = False

    def usable(self, now: float, expiry: float) -> bool:
        """Not expired, and nothing to read: an idle connection the server closed (or
        wrote to unasked) is readable."""
        if now - self.idle_since >= expiry:
            return False
        try:
            return not _readable(self.sock)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _readable(sock: socket.socket) -> bool:
    """Whether a read would not block; poll() where there is one (select() refuses
    descriptors past 1023)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


@contextlib.contextmanager
def _mapped(
    timeout_class: type[httpx.TimeoutException], error_class: type[httpx.TransportError]
) -> Iterator[None]:
    """Turns the socket's failures into httpx's classes."""
    try:
        yield
    except TimeoutError as exc:  # socket.timeout is TimeoutError
        raise timeout_class(str(exc) or timeout_class.__name__) from exc
    except OSError as exc:
        raise error_class(str(exc) or type(exc).__name__) from exc


# speed exception: see docs/design-notes.md, Speed exceptions
class Http11SyncTransport(httpx.BaseTransport):
    """HTTP/1.1 keep-alive connections to plain ``http://`` origins, blocking."""

    def __init__(self, *, limits: httpx.Limits | None = None) -> None:
        limits = limits or httpx.Limits()
        self._max_connections = limits.max_connections or 100
        self._max_idle = limits.max_keepalive_connections or self._max_connections
        expiry = limits.keepalive_expiry
        self._expiry = expiry if expiry is not None else _DEFAULT_KEEPALIVE_EXPIRY_SECONDS
        self._slots = threading.BoundedSemaphore(self._max_connections)
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"Http11SyncTransport serves http:// only, not {url}")
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        body = request.read()
        pool_seconds = timeouts.get("pool")
        if not self._slots.acquire(timeout=pool_seconds):
            raise httpx.PoolTimeout("no connection free in time")
        try:
            origin = (url.host, url.port or 80)
            connection = self._idle_connection(origin)
            if connection is not None:
                try:
                    return self._exchange(connection, origin, request, body, timeouts, True)
                except Stale as stale:
                    if not resendable(request):
                        raise stale.cause from None
                    # The server had closed it: once more on a fresh connection.
            connection = _connect(origin, timeouts.get("connect"))
            try:
                return self._exchange(connection, origin, request, body, timeouts, False)
            except Stale as stale:  # not raised for a fresh connection; for mypy
                raise stale.cause from None
        finally:
            self._slots.release()

    def _idle_connection(self, origin: tuple[str, int]) -> _Connection | None:
        now = time.monotonic()
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                connection = idle.pop()
            if connection.usable(now, self._expiry):
                return connection
            connection.close()

    def _exchange(
        self,
        connection: _Connection,
        origin: tuple[str, int],
        request: httpx.Request,
        body: bytes,
        timeouts: dict[str, float | None],
        reused: bool,
    ) -> httpx.Response:
        kept = False
        try:
            response = _send_and_read(connection, request, body, timeouts, reused)
            if reusable(connection.h11, broken=connection.broken):
                with self._lock:
                    idle = self._idle.setdefault(origin, [])
                    if len(idle) < self._max_idle and not self._closed:
                        connection.idle_since = time.monotonic()
                        idle.append(connection)
                        kept = True
            return response
        finally:
            if not kept:
                connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


def _connect(origin: tuple[str, int], seconds: float | None) -> _Connection:
    with _mapped(httpx.ConnectTimeout, httpx.ConnectError):
        sock = socket.create_connection(origin, timeout=seconds)
    # One write per request already; no Nagle delay waiting on the server's ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return _Connection(sock)


def _send_and_read(
    connection: _Connection,
    request: httpx.Request,
    body: bytes,
    timeouts: dict[str, float | None],
    reused: bool,
) -> httpx.Response:
    data = request_bytes(connection.h11, request, body)
    write_error: httpx.WriteError | None = None
    try:
        with _mapped(httpx.WriteTimeout, httpx.WriteError):
            connection.sock.settimeout(timeouts.get("write"))
            connection.sock.sendall(data)
    except httpx.WriteError as exc:
        # A server may answer before it has read the whole body (a 413) and close.
        write_error = exc
        connection.broken = True
    connection.sock.settimeout(timeouts.get("read"))
    answer = Answer(connection.h11)
    received = False
    while not answer.step():
        connection.h11.receive_data(_receive(connection, reused, received, write_error))
        received = True
    return answer.response(request)


def _receive(
    connection: _Connection, reused: bool, received: bool, write_error: httpx.WriteError | None
) -> bytes:
    """The next bytes of the answer, or what their absence means (``read_outcome``)."""
    outcome = partial(read_outcome, reused=reused, received=received, write_error=write_error)
    try:
        with _mapped(httpx.ReadTimeout, httpx.ReadError):
            data = connection.sock.recv(_READ_SIZE)
    except httpx.ReadError as exc:
        return outcome(b"", exc)
    return outcome(data, None)
