"""An httpx transport that runs an ASGI app in-process and streams its answer.

httpx's own ASGITransport waits for the whole body before it returns a response, so
a stream's pacing (a stall, a slow but steady generation) never reaches the client.
This one hands each body part over as the app sends it, and an app that fails in the
middle of a body looks to the client like a connection broken mid-answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class _Body(httpx.AsyncByteStream):
    def __init__(
        self, parts: asyncio.Queue[bytes | BaseException | None], task: asyncio.Task[None]
    ):
        self._parts = parts
        self._task = task

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            part = await self._parts.get()
            if part is None:
                return
            if isinstance(part, BaseException):
                raise httpx.RemoteProtocolError("peer closed connection mid-body") from part
            yield part

    async def aclose(self) -> None:
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def _scope(request: httpx.Request) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.url.scheme,
        "path": request.url.path,
        "raw_path": request.url.raw_path.split(b"?")[0],
        "query_string": request.url.query,
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "server": ("fake", 80),
        "client": ("127.0.0.1", 1234),
    }


class _Exchange:
    """One request's ASGI conversation: the body in, the answer out as it is sent."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.parts: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self.start: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.request_sent = False
        self.finished = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if not self.request_sent:
            self.request_sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.finished.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.start.set_result(message)
        elif message["type"] == "http.response.body":
            if message.get("body"):
                await self.parts.put(message["body"])
            if not message.get("more_body", False):
                await self.parts.put(None)

    async def run(self, app: Any, scope: dict[str, Any]) -> None:
        try:
            await app(scope, self.receive, self.send)
        except Exception as exc:  # noqa: BLE001 - a failing app is a broken connection
            if not self.start.done():
                self.start.set_exception(httpx.RemoteProtocolError("server closed the connection"))
            await self.parts.put(exc)
        finally:
            self.finished.set()


class StreamingASGITransport(httpx.AsyncBaseTransport):
    def __init__(self, app: Any) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        exchange = _Exchange(await request.aread())
        task = asyncio.create_task(exchange.run(self.app, _scope(request)))
        try:
            message = await exchange.start
        except BaseException:
            task.cancel()
            raise
        return httpx.Response(
            message["status"],
            headers=message.get("headers", []),
            stream=_Body(exchange.parts, task),
        )
