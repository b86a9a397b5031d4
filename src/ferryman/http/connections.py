"""Connection-level limits uvicorn lacks: a header read timeout and a connection cap
that answers in problem+json and keeps liveness probes working.

uvicorn (h11) bounds an idle keep-alive connection (``timeout_keep_alive``), but
nothing bounds a client that opens a connection and never finishes its request
head: half a header line holds a socket, and its memory, forever. Its
``limit_concurrency`` answers plain-text 503s and refuses liveness probes too.

``LimitedH11Protocol`` adds:

- a header deadline: whenever the server waits for a request head (on a new
  connection, after a keep-alive response once bytes start arriving, or while a
  client is still sending a body nobody reads) the head must be complete within
  ``header_timeout_seconds``, or the connection is closed;
- a cap on open connections: a request on a connection past ``max_connections``
  gets 503 ``too_many_connections`` with Retry-After and Connection: close, except
  ``/healthz``, so a busy process is not mistaken for a dead one;
- ``keepalive_timeout_seconds`` with sub-second precision.

The body deadline is enforced in the app (http/body_limit.py), where a 408 can
still be sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from ferryman.http.error_map import render_error
from ferryman.http.errors import TooManyConnectionsError

if TYPE_CHECKING:
    import asyncio

    from starlette.types import ASGIApp, Receive, Scope, Send
    from uvicorn.config import Config
    from uvicorn.server import ServerState

# Answered even at the connection cap: liveness probes must not fail because of load.
UNCAPPED_PATHS = frozenset({"/healthz"})


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_seconds: float
    keepalive_timeout_seconds: float
    max_connections: int

    def __post_init__(self) -> None:
        if self.header_timeout_seconds <= 0 or self.keepalive_timeout_seconds <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the limits above (set ``limits`` on a subclass,
    see ``protocol_with``)."""

    limits: ConnectionLimits

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.timeout_keep_alive = self.limits.keepalive_timeout_seconds  # type: ignore[assignment]
        # The cap is ours (a problem+json 503, /healthz exempt), not uvicorn's.
        self.limit_concurrency = None
        self.app = _CappedApp(self.app, self)
        self._header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._handling_request():
            self._disarm_header_deadline()
        elif not self.transport.is_closing():
            self._arm_header_deadline()

    def over_capacity(self) -> bool:
        return len(self.connections) > self.limits.max_connections

    def _handling_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm_header_deadline(self) -> None:
        # Armed once per wait: more bytes must not push the deadline back.
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(
                self.limits.header_timeout_seconds, self._header_deadline_passed
            )

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_deadline_passed(self) -> None:
        self._header_deadline = None
        if not self._handling_request():
            # connection_lost tells h11 and uvicorn's bookkeeping.
            self.transport.close()


class _CappedApp:
    """The app, or a 503 problem when the connection it serves is past the cap."""

    def __init__(self, app: ASGIApp, protocol: LimitedH11Protocol) -> None:
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


def protocol_with(limits: ConnectionLimits) -> type[LimitedH11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` that applies ``limits``."""
    given = limits

    class FerrymanH11Protocol(LimitedH11Protocol):
        limits = given

    return FerrymanH11Protocol
