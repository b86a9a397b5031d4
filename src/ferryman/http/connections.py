"""Connection-level limits uvicorn lacks: a header read timeout and a connection cap
that answers in problem+json and keeps liveness probes working.

The server is uvicorn over llhttp (httptools) by default, h11 on request; both get
the same limits. uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``), but
nothing bounds a client that opens a connection and never finishes its request
head: half a header line holds a socket, and its memory, forever. Its
``limit_concurrency`` answers plain-text 503s and refuses liveness probes too.

``LimitedHttpToolsProtocol`` and ``LimitedH11Protocol`` add:

- a header deadline: whenever the server waits for a request head (on a new
  connection, after a keep-alive response once bytes start arriving, or while a
  client is still sending a body nobody reads) the head must be complete within
  ``header_timeout_seconds``, or the connection is closed;
- a cap on open connections: a request on a connection past ``max_connections``
  gets 503 ``too_many_connections`` with Retry-After and Connection: close, except
  ``/healthz``, so a busy process is not mistaken for a dead one. Connections still
  waiting for a request head are not counted: they are bounded apart, per client
  address and in all, and the oldest slow ones closed past those bounds
  (http/slow_heads.py), so header-dripping sockets never refuse a request that has
  its head;
- ``keepalive_timeout_seconds`` with sub-second precision;
- over llhttp, h11's 16 KiB bound on a request head (llhttp has none): a 400.

These are safety, not speed: the subclasses exist for them. Responses are written as
uvicorn writes them (docs/design-notes.md, "Speed exceptions", on the head and body
that used to leave in one send).

The body deadline is enforced in the app (http/body_limit.py), where a 408 can
still be sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ferryman.http.error_map import render_error
from ferryman.http.errors import TooManyConnectionsError
from ferryman.http.slow_heads import SLOW_AFTER_SECONDS, HeadWaits

if TYPE_CHECKING:
    import asyncio

    from starlette.types import ASGIApp, Receive, Scope, Send
    from uvicorn.config import Config
    from uvicorn.server import ServerState

# h11's bound on a request head (its max_incomplete_event_size), kept over llhttp.
MAX_HEAD_BYTES = 16 * 1024
# Answered even at the connection cap: liveness probes must not fail because of load.
UNCAPPED_PATHS = frozenset({"/healthz"})


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_seconds: float
    keepalive_timeout_seconds: float
    # Connections that have sent a request head (served, or idle between requests).
    max_connections: int
    # Connections whose head is slow (http/slow_heads.py), in all and per client address.
    max_slow_heads: int = 256
    max_slow_heads_per_client: int = 32

    def __post_init__(self) -> None:
        if self.header_timeout_seconds <= 0 or self.keepalive_timeout_seconds <= 0:
            raise ValueError("timeouts must be positive")
        if min(self.max_connections, self.max_slow_heads, self.max_slow_heads_per_client) < 1:
            raise ValueError("max_connections and the slow head caps must be at least 1")

    @property
    def slow_after_seconds(self) -> float:
        """When a head counts as slow: SLOW_AFTER_SECONDS, within the header timeout."""
        return min(SLOW_AFTER_SECONDS, self.header_timeout_seconds / 2)


class _Limited:
    """The limits above, over either of uvicorn's HTTP/1.1 protocols (set ``limits`` on
    a subclass, see ``protocol_with``). Both keep the request being served in
    ``cycle`` and the open connections in ``connections``."""

    limits: ConnectionLimits
    # The server's connections waiting for a head (one per server, see protocol_with).
    head_waits: HeadWaits
    if TYPE_CHECKING:  # what the uvicorn protocol this is mixed into provides
        app: Any
        cycle: Any
        connections: set[Any]
        transport: asyncio.Transport
        loop: asyncio.AbstractEventLoop
        timeout_keep_alive: int
        limit_concurrency: int | None

    _header_deadline: asyncio.TimerHandle | None
    _slow_timer: asyncio.TimerHandle | None
    _client_address: str

    def _apply_limits(self) -> None:
        self.timeout_keep_alive = self.limits.keepalive_timeout_seconds  # type: ignore[assignment]
        # The cap is ours (a problem+json 503, /healthz exempt), not uvicorn's.
        self.limit_concurrency = None
        self.app = _CappedApp(self.app, self)
        self._header_deadline = None
        self._slow_timer = None
        self._client_address = ""

    def _note_client(self, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        # A Unix socket's peer has no address: its clients are all one local client.
        self._client_address = str(peer[0]) if isinstance(peer, tuple) and peer else "local"

    @property
    def client_address(self) -> str:
        return self._client_address

    def close_slow(self) -> None:
        """Closed for a slow head past the caps (http/slow_heads.py)."""
        self.transport.close()

    def _after_data(self) -> None:
        if self._handling_request():
            self._disarm_header_deadline()
        elif not self.transport.is_closing():
            self._arm_header_deadline()

    def over_capacity(self) -> bool:
        served = len(self.connections) - self.head_waits.waiting
        return served > self.limits.max_connections

    def _handling_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm_header_deadline(self) -> None:
        # Armed once per wait: more bytes must not push the deadline back.
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(
                self.limits.header_timeout_seconds, self._header_deadline_passed
            )
            self._slow_timer = self.loop.call_later(
                self.limits.slow_after_seconds, self._head_is_slow
            )
            self.head_waits.started()

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None
            if self._slow_timer is not None:
                self._slow_timer.cancel()
                self._slow_timer = None
            self.head_waits.ended(self)

    def _head_is_slow(self) -> None:
        self._slow_timer = None
        self.head_waits.slow(self)

    def _header_deadline_passed(self) -> None:
        handling = self._handling_request()
        self._disarm_header_deadline()
        if not handling:
            # connection_lost tells the parser and uvicorn's bookkeeping.
            self.transport.close()


class LimitedH11Protocol(_Limited, H11Protocol):
    """uvicorn's h11 protocol with the limits above."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._apply_limits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._note_client(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._after_data()


class LimitedHttpToolsProtocol(_Limited, HttpToolsProtocol):
    """uvicorn's httptools (llhttp) protocol with the limits above, and h11's bound on a
    request head, which llhttp does not have: a head over ``MAX_HEAD_BYTES`` is a 400."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._apply_limits()
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._note_client(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._after_data()

    def on_message_begin(self) -> None:
        self._head_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # The 4 bytes of ": " and CRLF count too, as they do in h11's buffer.
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_head(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD_BYTES:
            # Raised inside a parser callback, it surfaces as httptools' parser error,
            # which uvicorn answers with a 400 and Connection: close.
            raise HeadTooLargeError()


class HeadTooLargeError(Exception):
    """The request head is over the limit."""


class _CappedApp:
    """The app, or a 503 problem when the connection it serves is past the cap."""

    def __init__(self, app: ASGIApp, protocol: _Limited) -> None:
        self._app = app
        self._protocol = protocol

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] not in UNCAPPED_PATHS
            and self._protocol.over_capacity()
        ):
            await render_error(TooManyConnectionsError())(scope, receive, send)
            return
        await self._app(scope, receive, send)


def protocol_with(
    limits: ConnectionLimits, parser: str = "httptools"
) -> type[LimitedHttpToolsProtocol] | type[LimitedH11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` that applies ``limits``, over
    llhttp (``httptools``, the fast one) or ``h11`` (pure Python)."""
    given = limits
    waits = HeadWaits(limits.max_slow_heads, limits.max_slow_heads_per_client)
    if parser == "h11":

        class FerrymanH11Protocol(LimitedH11Protocol):
            limits = given
            head_waits = waits

        return FerrymanH11Protocol

    class FerrymanHttpToolsProtocol(LimitedHttpToolsProtocol):
        limits = given
        head_waits = waits

    return FerrymanHttpToolsProtocol
