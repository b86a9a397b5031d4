"""The async client's sharded connection pools (client/pool.py)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from ferryman.client import AsyncClient
from ferryman.client.http11 import Http11Transport
from ferryman.client.pool import ShardedTransport


def _streamed(status: int, body: bytes) -> httpx.Response:
    """An answer whose body is read from a stream, as a real connection's is."""
    return httpx.Response(status, stream=httpx.ByteStream(body))


def _sharded(handler: httpx.MockTransport, shards: int = 3) -> ShardedTransport:
    transport = ShardedTransport(shards=shards)
    transport._shards = [handler] * shards  # type: ignore[assignment]
    return transport


async def test_requests_in_flight_go_to_the_least_busy_shard_and_give_it_back() -> None:
    release = asyncio.Event()
    all_arrived = asyncio.Event()
    arrived = 0

    async def slow(request: httpx.Request) -> httpx.Response:
        nonlocal arrived
        arrived += 1
        if arrived == 4:
            all_arrived.set()
        await release.wait()
        return _streamed(202, b'{"ok": true}')

    transport = _sharded(httpx.MockTransport(slow))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        sends = [asyncio.create_task(http.post("/x")) for _ in range(4)]
        await all_arrived.wait()
        assert transport._in_flight == [2, 1, 1]
        release.set()
        responses = await asyncio.gather(*sends)
    assert [r.json() for r in responses] == [{"ok": True}] * 4
    assert transport._in_flight == [0, 0, 0]


async def test_a_failed_request_gives_its_slot_back() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = _sharded(httpx.MockTransport(broken))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        with pytest.raises(httpx.ConnectError):
            await http.get("/x")
    assert transport._in_flight == [0, 0, 0]


async def test_a_response_closed_unread_gives_its_slot_back() -> None:
    transport = _sharded(httpx.MockTransport(lambda request: _streamed(200, b"x" * 10)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        async with http.stream("GET", "/x"):
            assert sum(transport._in_flight) == 1
    assert transport._in_flight == [0, 0, 0]


def test_shards_share_the_connection_limit() -> None:
    transport = ShardedTransport(shards=8, limits=httpx.Limits(max_connections=100))
    assert len(transport._shards) == 8
    with pytest.raises(ValueError, match="shards"):
        ShardedTransport(shards=0)


async def test_the_client_picks_its_transport_by_scheme_unless_a_proxy_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    async with AsyncClient("http://127.0.0.1:9", "k") as client:
        assert isinstance(client._http._transport, Http11Transport)
    async with AsyncClient("https://127.0.0.1:9", "k") as client:
        assert isinstance(client._http._transport, ShardedTransport)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    async with AsyncClient("http://127.0.0.1:9", "k") as client:
        assert not isinstance(client._http._transport, (ShardedTransport, Http11Transport))
