"""Refuse request bodies over the limit before any route reads them (413).

A pure ASGI middleware, so it sees the raw stream: a declared Content-Length over
the limit is refused without reading a byte, and a body sent without one
(chunked) is counted as it arrives and cut off as soon as it passes the limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.core.errors import PayloadTooLargeError
from ferryman.http.error_map import render_error

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLargeError(PayloadTooLargeError):
    """The request body is over the size limit."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLargeError(self._detail())
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except PayloadTooLargeError:
            # Normally the app's error handler answers; this covers a body read
            # outside it. Once a response has started there is nothing left to say.
            if started:
                raise
            await self._refuse(scope, receive, send)

    def _detail(self) -> str:
        return f"The request body is over the limit of {self.max_body_bytes} bytes."

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = render_error(PayloadTooLargeError(self._detail()))
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
