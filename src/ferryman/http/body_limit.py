"""Limits on a request body, before any route reads it: its size (413) and how long
it may take to arrive (408).

A pure ASGI middleware, so it sees the raw stream: a declared Content-Length over
the limit is refused without reading a byte, and a body sent without one
(chunked) is counted as it arrives and cut off as soon as it passes the limit.

The time limit runs from the moment the request reaches the app (its headers are
in) to the last byte of its body, so a client that trickles or stalls mid-body
holds a connection for ``timeout_seconds`` at most. It only bounds waiting for the
body: once the body is complete, a route that waits for a disconnect (or does
slow work) is not cut short. The header phase is bounded by the server's own
protocol (http/connections.py).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ferryman.core.errors import FerrymanError, PayloadTooLargeError
from ferryman.http.error_map import render_error
from ferryman.http.errors import RequestTimeoutError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLargeError(PayloadTooLargeError):
    """The request body is over the size limit."""


class BodyLimitMiddleware:
    """``path_limits``: a limit of its own for the paths named (the batch intake takes
    up to 1,000 jobs in one body); every other path has ``max_body_bytes``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        timeout_seconds: float,
        path_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.timeout_seconds = timeout_seconds
        self.path_limits = dict(path_limits or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope.get("path", ""), self.max_body_bytes)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(PayloadTooLargeError(self._detail(limit)), scope, receive, send)
            return
        body = _LimitedBody(
            receive,
            max_bytes=limit,
            deadline=asyncio.get_running_loop().time() + self.timeout_seconds,
            too_large=self._detail(limit),
            too_late=f"The request body did not arrive within {self.timeout_seconds:g} seconds.",
        )
        started = False

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, body.receive, watching_send)
        except (PayloadTooLargeError, RequestTimeoutError) as exc:
            # Normally the app's error handler answers; this covers a body read
            # outside it. Once a response has started there is nothing left to say.
            if started:
                raise
            await self._refuse(exc, scope, receive, send)

    def _detail(self, limit: int) -> str:
        return f"The request body is over the limit of {limit} bytes."

    async def _refuse(self, exc: FerrymanError, scope: Scope, receive: Receive, send: Send) -> None:
        response = render_error(exc)
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


class _LimitedBody:
    """``receive`` for the app: the body's bytes are counted and must all arrive
    before the deadline; afterwards (disconnect notices) it passes through."""

    def __init__(
        self, receive: Receive, *, max_bytes: int, deadline: float, too_large: str, too_late: str
    ) -> None:
        self._receive = receive
        self._max_bytes = max_bytes
        self._deadline = deadline
        self._too_large = too_large
        self._too_late = too_late
        self._received = 0
        self._done = False

    async def receive(self) -> Message:
        if self._done:
            return await self._receive()
        try:
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            raise RequestTimeoutError(self._too_late) from None
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > self._max_bytes:
                raise BodyTooLargeError(self._too_large)
            self._done = not message.get("more_body", False)
        return message


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
