"""The async client's connections: several small httpx pools instead of one large one.

httpcore's connection pool (httpcore 1.0) re-examines every connection it holds each
time a request arrives or a response ends, and for each idle one counts the whole pool
again and asks the kernel whether the socket is readable (a poll() call). With 32
requests in flight over 32 connections that is about a thousand checks and sixty
system calls per request: 1.7 CPU-ms of the producer's 1.9 per submit, measured
against a bare server (bench/http_floor.py). It also counts every connection, not
the idle ones, against the keep-alive limit, so past 20 connections it closes idle
connections that the next request must open again.

``ShardedTransport`` spreads requests over a few independent httpx transports, each
holding a handful of connections, and sends each request to the one with the fewest
requests in flight. Each pool's work per request then stays small, and every shard's
keep-alive limit equals its size, so no connection is closed for being counted
twice. Timeouts, TLS, errors and retries are httpx's own, per shard.

Used for https only: plain http goes through ``client/http11.py``, at about half the
producer CPU per request (bench/http_floor.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

DEFAULT_SHARDS = 8


# speed exception: see docs/design-notes.md, Speed exceptions
class ShardedTransport(httpx.AsyncBaseTransport):
    """``shards`` httpx transports sharing ``limits.max_connections`` between them."""

    def __init__(self, *, shards: int = DEFAULT_SHARDS, limits: httpx.Limits | None = None) -> None:
        if shards < 1:
            raise ValueError("shards must be at least 1")
        total = (limits or httpx.Limits()).max_connections or 100
        size = max(1, math.ceil(total / shards))
        shard_limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        # One TLS context for all: loading the CA bundle takes ~30 ms each time.
        tls = httpx.create_ssl_context()
        self._shards = [
            httpx.AsyncHTTPTransport(verify=tls, limits=shard_limits) for _ in range(shards)
        ]
        self._in_flight = [0] * shards

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        in_flight = self._in_flight
        shard = in_flight.index(min(in_flight))
        in_flight[shard] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                in_flight[shard] -= 1

        try:
            response = await self._shards[shard].handle_async_request(request)
        except BaseException:
            release()
            raise
        response.stream = _Released(response.stream, release)
        return response

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


class _Released(httpx.AsyncByteStream):
    """A response body that gives its shard's slot back once it is closed (httpx closes
    it when the body has been read, or when the response is closed unread)."""

    def __init__(
        self, stream: httpx.AsyncByteStream | httpx.SyncByteStream, release: Callable[[], None]
    ) -> None:
        assert isinstance(stream, httpx.AsyncByteStream)
        self._stream = stream
        self._release = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._release()
