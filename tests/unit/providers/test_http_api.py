"""providers.http_api: a provider's connections, split between small keep-alive pools."""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from ferryman.providers.http_api import CONNECTIONS_PER_CLIENT, HttpApi, shard_sizes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request


@pytest.mark.parametrize(
    ("max_connections", "sizes"),
    [
        (1, [1]),
        (16, [16]),
        (17, [9, 8]),
        (64, [16, 16, 16, 16]),
        (200, [16] * 5 + [15] * 8),
    ],
)
def test_connections_are_split_evenly_into_pools_of_at_most_sixteen(max_connections, sizes):
    assert CONNECTIONS_PER_CLIENT == 16
    assert shard_sizes(max_connections) == sizes
    assert sum(sizes) == max_connections


class Gate:
    """A server whose calls wait until released, counting how many were in at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.peak = 0
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.expected = 0

    def app(self) -> Starlette:
        async def call(request: Request) -> JSONResponse:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            if self.inside >= self.expected:
                self.arrived.set()
            await self.release.wait()
            self.inside -= 1
            return JSONResponse({"ok": True})

        return Starlette(routes=[Route("/v1/call", call, methods=["POST"])])


@pytest.fixture
async def gate() -> AsyncIterator[tuple[Gate, int]]:
    gate = Gate()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    config = uvicorn.Config(gate.app(), log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield gate, sock.getsockname()[1]
    finally:
        gate.release.set()
        server.should_exit = True
        await task
        sock.close()


async def test_a_provider_holds_exactly_its_max_connections_calls_at_once(gate):
    server, port = gate
    server.expected = 40
    api = HttpApi(
        provider="gated",
        base_url=f"http://127.0.0.1:{port}/v1",
        headers={},
        request_id_header="x-request-id",
        max_connections=40,  # three pools: 14, 13 and 13
    )
    try:
        calls = [
            asyncio.create_task(api.post("call", {"n": n}, timeout_seconds=30)) for n in range(60)
        ]
        await asyncio.wait_for(server.arrived.wait(), timeout=20)
        await asyncio.sleep(0.2)  # room for any call beyond the limit to get in
        assert server.peak == 40  # every pool used, none beyond its size
        server.release.set()
        answers = await asyncio.gather(*calls)
    finally:
        await api.aclose()
    assert [answer.body for answer in answers] == [{"ok": True}] * 60
