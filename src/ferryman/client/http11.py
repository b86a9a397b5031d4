"""The async client's plain-HTTP transport: HTTP/1.1 over asyncio streams, framed by h11.

httpx's own transport (httpcore) spends about 0.5 CPU-ms per request on its pool's
bookkeeping, its locks and its per-request event objects, against 0.2 for the framing
and the socket I/O themselves (bench/http_floor.py, producer ``ferryman`` against
``raw``). The client sends small JSON requests and reads every answer whole, so a
transport that does only that is enough for plain ``http://``; https, proxies and a
caller's own transport keep httpx's (``AsyncClient`` chooses).

What it keeps of httpx's contract, so that ``client/retrying.py`` and
``client/errors.py`` see the same failures as before:

- the per-request timeouts (``connect``, ``read``, ``write``, ``pool``) and httpx's own
  exception classes: ConnectError / ConnectTimeout, ReadError / ReadTimeout,
  WriteError / WriteTimeout, PoolTimeout, RemoteProtocolError;
- keep-alive connections, at most ``max_connections`` open at once, idle ones dropped
  after ``keepalive_expiry`` seconds (uvicorn closes them after 5);
- a reused connection that fails before a single byte of its answer arrived (most
  often the server closed it while it was idle) is replaced by a fresh one and the
  request sent once more, but only a request that is safe to send twice: a GET, HEAD,
  OPTIONS, PUT or DELETE, or one carrying an ``Idempotency-Key`` (every submit). The
  server may have read and acted on the request before it went away (a restart
  between commit and answer); a cancel sent twice would answer 409 for a cancel that
  worked, so any other request gets httpcore's error, RemoteProtocolError, and the
  client's retry rules (client/retrying.py) decide. Once any byte of an answer was
  read, the failure is the caller's.

Answers are read whole (Content-Length, chunked or up to the close), 1xx answers are
skipped and HEAD has no body: h11 does the framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from functools import partial
from typing import TYPE_CHECKING, Any

import h11
import httpx

if TYPE_CHECKING:
    from collections.abc import Iterator

_READ_SIZE = 65536
_DEFAULT_KEEPALIVE_EXPIRY_SECONDS = 5.0


_SAFE_TO_RESEND = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


def resendable(request: httpx.Request) -> bool:
    """Whether sending the request twice does what sending it once does."""
    return request.method in _SAFE_TO_RESEND or "idempotency-key" in request.headers


class Stale(Exception):
    """A reused connection failed before any byte of the answer came: send again."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def proxied() -> bool:
    """Whether the environment names a proxy: then httpx's own transports are kept, since
    httpx routes through a proxy only when it chooses the transports itself."""
    return any(scheme != "no" for scheme in urllib.request.getproxies())


def request_bytes(conn: h11.Connection, request: httpx.Request, body: bytes) -> bytes:
    """The whole request, framed (h11 also refuses a header that would split it)."""
    try:
        data = conn.send(
            h11.Request(
                method=request.method, target=request.url.raw_path, headers=request.headers.raw
            )
        )
        if body:
            data += conn.send(h11.Data(data=body))
        data += conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError as exc:
        raise httpx.LocalProtocolError(str(exc)) from exc
    return data


def response_of(
    head: h11.Response | None, chunks: list[bytes], request: httpx.Request
) -> httpx.Response:
    assert head is not None  # h11 gives the head before any body and the end
    return httpx.Response(
        head.status_code,
        headers=head.headers.raw_items(),
        stream=httpx.ByteStream(b"".join(chunks)),
        request=request,
        extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
    )


def reusable(conn: h11.Connection, *, broken: bool) -> bool:
    """Whether a connection whose exchange just ended may go back to the pool: both
    sides finished cleanly and nothing broke it. If so, h11 is readied for the next."""
    if broken or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
        return False
    conn.start_next_cycle()
    return True


class Answer:
    """An answer as h11 frames it, shared by both transports: ``step`` takes h11's events
    until it needs more bytes (False) or the answer is whole (True)."""

    def __init__(self, conn: h11.Connection) -> None:
        self._conn = conn
        self._head: h11.Response | None = None
        self._chunks: list[bytes] = []

    def step(self) -> bool:
        while True:
            try:
                event: Any = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is h11.NEED_DATA:
                return False
            if isinstance(event, h11.Response):
                self._head = event
            elif isinstance(event, h11.Data):
                self._chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return True
            elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                # PAUSED: a 101, though we never ask to switch protocols.
                raise httpx.RemoteProtocolError(f"unexpected from the server: {event!r}")
            # h11.InformationalResponse (1xx): skipped, the real answer follows

    def response(self, request: httpx.Request) -> httpx.Response:
        return response_of(self._head, self._chunks, request)


def read_outcome(
    data: bytes,
    error: httpx.ReadError | None,
    *,
    reused: bool,
    received: bool,
    write_error: httpx.WriteError | None,
) -> bytes:
    """What one read of an answer gave, for both transports: its bytes, or what its
    failure means. Nothing at all on a reused connection (the server closed it before
    reading the request) is ``Stale``: the caller may send again. Nothing after a
    failed write is that write's error. Once any byte came, a failure is the caller's."""
    failure: httpx.TransportError
    if error is not None:
        if received:
            raise error
        failure = error
    elif data or received:
        return data
    else:
        failure = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    if reused:
        raise Stale(failure)
    raise write_error or failure


class _Connection:
    __slots__ = ("broken", "h11", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.broken = False  # a write failed: never reused, whatever the answer said

    def usable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection may carry another request: not expired, and the
        server has not closed it (EOF seen) nor sent anything unasked."""
        return (
            now - self.idle_since < expiry
            and not self.reader.at_eof()
            and not self.reader._buffer  # type: ignore[attr-defined]  # stray bytes
            and not self.writer.is_closing()
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@contextlib.contextmanager
def _mapped(
    timeout_class: type[httpx.TimeoutException], error_class: type[httpx.TransportError]
) -> Iterator[None]:
    """Turns asyncio's and the socket's failures into httpx's classes."""
    try:
        yield
    except TimeoutError as exc:
        raise timeout_class(str(exc) or timeout_class.__name__) from exc
    except (OSError, asyncio.IncompleteReadError, EOFError) as exc:
        raise error_class(str(exc) or type(exc).__name__) from exc


# speed exception: see docs/design-notes.md, Speed exceptions
class Http11Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive connections to plain ``http://`` origins."""

    def __init__(
        self,
        *,
        limits: httpx.Limits | None = None,
        keepalive_expiry: float | None = None,
    ) -> None:
        limits = limits or httpx.Limits()
        self._max_connections = limits.max_connections or 100
        self._max_idle = limits.max_keepalive_connections or self._max_connections
        expiry = keepalive_expiry if keepalive_expiry is not None else limits.keepalive_expiry
        self._expiry = expiry if expiry is not None else _DEFAULT_KEEPALIVE_EXPIRY_SECONDS
        self._slots: asyncio.Semaphore | None = None
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"Http11Transport serves http:// only, not {url}")
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        body = await request.aread()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max_connections)
        slots = self._slots
        if slots.locked():
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await slots.acquire()
            except TimeoutError as exc:
                raise httpx.PoolTimeout("no connection free in time") from exc
        else:
            await slots.acquire()  # free: returns at once
        try:
            origin = (url.host, url.port or 80)
            connection = self._idle_connection(origin)
            if connection is not None:
                try:
                    return await self._exchange(connection, origin, request, body, timeouts, True)
                except Stale as stale:
                    if not resendable(request):
                        raise stale.cause from None
                    # The server had closed it: once more on a fresh connection.
            connection = await self._connect(origin, timeouts.get("connect"))
            try:
                return await self._exchange(connection, origin, request, body, timeouts, False)
            except Stale as stale:  # not raised for a fresh connection; for mypy
                raise stale.cause from None
        finally:
            slots.release()

    def _idle_connection(self, origin: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable(now, self._expiry):
                return connection
            connection.close()
        return None

    async def _connect(self, origin: tuple[str, int], seconds: float | None) -> _Connection:
        with _mapped(httpx.ConnectTimeout, httpx.ConnectError):
            async with asyncio.timeout(seconds):
                reader, writer = await asyncio.open_connection(
                    origin[0], origin[1], limit=_READ_SIZE
                )
        return _Connection(reader, writer)

    async def _exchange(
        self,
        connection: _Connection,
        origin: tuple[str, int],
        request: httpx.Request,
        body: bytes,
        timeouts: dict[str, float | None],
        reused: bool,
    ) -> httpx.Response:
        """One request and its whole answer on ``connection``; the connection goes back
        to the pool when both sides want to keep it, and is closed otherwise."""
        kept = False
        try:
            response = await self._send_and_read(connection, request, body, timeouts, reused)
            if reusable(connection.h11, broken=connection.broken):
                idle = self._idle.setdefault(origin, [])
                if len(idle) < self._max_idle and not self._closed:
                    connection.idle_since = time.monotonic()
                    idle.append(connection)
                    kept = True
            return response
        finally:
            if not kept:
                connection.close()

    async def _send_and_read(
        self,
        connection: _Connection,
        request: httpx.Request,
        body: bytes,
        timeouts: dict[str, float | None],
        reused: bool,
    ) -> httpx.Response:
        write_error: httpx.WriteError | None = None
        try:
            await _send(connection, request, body, timeouts.get("write"))
        except httpx.WriteError as exc:
            # A server may answer before it has read the whole body (a 413) and close:
            # that answer is read below, as httpcore does. No answer: this error.
            write_error = exc
            connection.broken = True
        read_seconds = timeouts.get("read")
        answer = Answer(connection.h11)
        received = False
        while not answer.step():
            data = await _receive(connection, read_seconds, reused, received, write_error)
            connection.h11.receive_data(data)
            received = True
        return answer.response(request)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


async def _send(
    connection: _Connection, request: httpx.Request, body: bytes, seconds: float | None
) -> None:
    data = request_bytes(connection.h11, request, body)
    writer = connection.writer
    with _mapped(httpx.WriteTimeout, httpx.WriteError):
        writer.write(data)
        if writer.transport.get_write_buffer_size():
            async with asyncio.timeout(seconds):
                await writer.drain()


async def _receive(
    connection: _Connection,
    seconds: float | None,
    reused: bool,
    received: bool,
    write_error: httpx.WriteError | None,
) -> bytes:
    """The next bytes of the answer, or what their absence means (``read_outcome``)."""
    outcome = partial(read_outcome, reused=reused, received=received, write_error=write_error)
    try:
        with _mapped(httpx.ReadTimeout, httpx.ReadError):
            async with asyncio.timeout(seconds):
                data = await connection.reader.read(_READ_SIZE)
    except httpx.ReadError as exc:
        return outcome(b"", exc)
    return outcome(data, None)
