"""The async client's plain-http transport (client/http11.py) against a scripted server:
keep-alive, stale connections, framing, timeouts and httpx's error classes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import httpx
import pytest

from ferryman.client import AsyncClient, Client, ClientError, UnreachableError
from ferryman.client.http11 import Http11Transport
from ferryman.client.http11_sync import Http11SyncTransport

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One request's head and body, or None when the client closed the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def answer(status: int, body: bytes = b"", *, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n%s\r\n" % (status, len(body), extra) + body


class Server:
    """A local server running ``handler`` per connection (with the connection's number)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests = 0
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> Server:
        server = Server(handler)
        listening = await asyncio.start_server(server._serve, "127.0.0.1", 0)
        servers.append(listening)
        port = listening.sockets[0].getsockname()[1]
        server.url = f"http://127.0.0.1:{port}"
        return server

    yield start
    for listening in servers:
        listening.close()


def keep_alive(server_box: list[Server], respond: Callable[[int], bytes]) -> Handler:
    """A well-behaved keep-alive handler answering ``respond(request number)``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while await read_request(reader) is not None:
            server_box[0].requests += 1
            writer.write(respond(server_box[0].requests))
            await writer.drain()

    return handler


async def test_connections_are_kept_alive_and_chunked_bodies_read(serve) -> None:  # type: ignore[no-untyped-def]
    box: list[Server] = []
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    box.append(await serve(keep_alive(box, lambda n: chunked if n % 2 else answer(200, b"{}"))))
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=box[0].url) as http:
        texts = [(await http.post("/x", json={"n": n})).text for n in range(4)]
    assert texts == ["hello world", "{}"] * 2
    assert box[0].connections == 1


async def test_a_connection_the_server_closed_while_idle_is_replaced(serve) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []

    async def close_after_one(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int
    ) -> None:
        if await read_request(reader) is None:
            return
        seen.append(number)
        writer.write(answer(200, b"ok"))
        await writer.drain()

    server = await serve(close_after_one)
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=server.url) as http:
        assert (await http.get("/a")).text == "ok"
        await asyncio.sleep(0.05)  # the close has arrived: seen before sending
        assert (await http.get("/b")).text == "ok"
    assert seen == [1, 2]


async def test_a_reused_connection_dropped_before_any_answer_is_retried_once(serve) -> None:  # type: ignore[no-untyped-def]
    # The server takes the second request on the kept connection and closes without a
    # byte of answer (a keep-alive timeout racing the request): sent again on a new one.
    requests: list[int] = []

    async def drop_second(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int
    ) -> None:
        while await read_request(reader) is not None:
            requests.append(number)
            if len(requests) == 2:
                return
            writer.write(answer(200, b"ok"))
            await writer.drain()

    server = await serve(drop_second)
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=server.url) as http:
        assert (await http.get("/a")).text == "ok"
        assert (await http.get("/b")).text == "ok"
    assert requests == [1, 1, 2]


def _drop_second(requests: list[str]) -> Handler:
    """Answers the first request on a connection, then takes the second and closes
    without a byte of answer; ``requests`` records each request's line."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        on_this_connection = 0
        while (request := await read_request(reader)) is not None:
            requests.append(request[0].split(b"\r\n", 1)[0].decode())
            on_this_connection += 1
            if on_this_connection == 2:
                return
            writer.write(answer(200, b"ok"))
            await writer.drain()

    return handler


async def test_a_request_unsafe_to_send_twice_is_not_resent_on_a_dropped_connection(serve) -> None:  # type: ignore[no-untyped-def]
    # The server may have acted on it before going away (a cancel that committed and
    # then a restart): httpcore's error, and client/retrying.py decides.
    requests: list[str] = []
    server = await serve(_drop_second(requests))
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=server.url) as http:
        assert (await http.get("/a")).text == "ok"
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post("/v1/generations/j/cancel")
    with _sync_client(server.url) as sync_http:
        assert (await asyncio.to_thread(sync_http.get, "/a")).text == "ok"
        with pytest.raises(httpx.RemoteProtocolError):
            await asyncio.to_thread(sync_http.post, "/v1/generations/j/cancel")
    assert [r for r in requests if r.startswith("POST")] == [
        "POST /v1/generations/j/cancel HTTP/1.1"
    ] * 2  # once per client: never sent a second time


async def test_a_request_with_an_idempotency_key_is_resent_on_a_dropped_connection(serve) -> None:  # type: ignore[no-untyped-def]
    requests: list[str] = []
    server = await serve(_drop_second(requests))
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=server.url) as http:
        assert (await http.get("/a")).text == "ok"
        submitted = await http.post("/v1/generations", json={}, headers={"Idempotency-Key": "k1"})
        assert submitted.text == "ok"
    assert requests == ["GET /a HTTP/1.1"] + ["POST /v1/generations HTTP/1.1"] * 2


async def test_a_connection_dropped_mid_answer_is_a_protocol_error_not_retried(serve) -> None:  # type: ignore[no-untyped-def]
    requests: list[int] = []

    async def truncate_second(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int
    ) -> None:
        while await read_request(reader) is not None:
            requests.append(number)
            if len(requests) == 2:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                await writer.drain()
                return
            writer.write(answer(200, b"ok"))
            await writer.drain()

    server = await serve(truncate_second)
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=server.url) as http:
        await http.get("/a")
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/b")
    assert requests == [1, 1]


async def test_a_fresh_connection_closed_without_answer_is_a_protocol_error(serve) -> None:  # type: ignore[no-untyped-def]
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)

    server = await serve(hang_up)
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=server.url) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/a")
    assert server.connections == 1


async def test_connection_close_informational_answers_and_head(serve) -> None:  # type: ignore[no-untyped-def]
    box: list[Server] = []

    def respond(n: int) -> bytes:
        if n == 1:
            return b"HTTP/1.1 100 Continue\r\n\r\n" + answer(200, b"one")
        if n == 2:
            return b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"  # HEAD: no body
        return answer(200, b"three", extra=b"Connection: close\r\n")

    box.append(await serve(keep_alive(box, respond)))
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=box[0].url) as http:
        assert (await http.get("/1")).text == "one"
        head = await http.head("/2")
        assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "9")
        assert (await http.get("/3")).text == "three"
        assert (await http.get("/4")).text == "three"
    assert box[0].connections == 2


async def test_a_refused_connection_is_a_connect_error_and_unreachable_at_once() -> None:
    listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=url) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get("/a")
    async with AsyncClient(url, "k", wait_for_server=False) as client:
        assert isinstance(client._http._transport, Http11Transport)
        with pytest.raises(UnreachableError) as caught:
            await client.get("job_1")
    assert caught.value.reason == "ConnectError"


async def test_read_and_pool_timeouts_are_httpx_timeouts(serve) -> None:  # type: ignore[no-untyped-def]
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    server = await serve(silent)
    transport = Http11Transport(limits=httpx.Limits(max_connections=1))
    async with httpx.AsyncClient(transport=transport, base_url=server.url) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get("/a", timeout=httpx.Timeout(5, read=0.1))
        hanging = asyncio.create_task(http.get("/b"))
        await asyncio.sleep(0.05)
        with pytest.raises(httpx.PoolTimeout):
            await http.get("/c", timeout=httpx.Timeout(5, pool=0.1))
        hanging.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hanging
        # The cancelled request gave its connection slot back.
        with pytest.raises(httpx.ReadTimeout):
            await http.get("/d", timeout=httpx.Timeout(0.1))


@pytest.mark.parametrize(
    ("status", "code"), [(413, "too_large"), (422, "invalid_request"), (429, "rate_limited")]
)
async def test_problem_answers_are_client_errors_as_before(serve, status: int, code: str) -> None:  # type: ignore[no-untyped-def]
    problem = json.dumps({"title": "No", "status": status, "code": code}).encode()
    box: list[Server] = []
    box.append(
        await serve(
            keep_alive(
                box,
                lambda _: answer(
                    status, problem, extra=b"Content-Type: application/problem+json\r\n"
                ),
            )
        )
    )
    async with AsyncClient(box[0].url, "k", retry_budget_seconds=0) as client:
        with pytest.raises(ClientError) as caught:
            await client.submit("generate", {"prompt": "hi"})
    assert (caught.value.status, caught.value.code) == (status, code)
    assert box[0].requests == 1


async def test_an_answer_sent_before_the_body_was_read_is_the_answer(serve) -> None:  # type: ignore[no-untyped-def]
    # A server refusing a large body answers 413 from the head alone, then discards the
    # body until the client hangs up (closing unread data would reset the connection).
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer(413, b"too big", extra=b"Connection: close\r\n"))
        await writer.drain()
        while await reader.read(65536):
            pass

    server = await serve(refuse)
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=server.url) as http:
        response = await http.post("/x", content=b"x" * 8_000_000)
        assert (response.status_code, response.text) == (413, "too big")
        assert (await http.post("/x", content=b"small")).status_code == 413
    assert server.connections == 2


async def test_a_switch_of_protocols_is_a_protocol_error(serve) -> None:  # type: ignore[no-untyped-def]
    box: list[Server] = []
    switch = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
    box.append(await serve(keep_alive(box, lambda _: switch)))
    async with httpx.AsyncClient(transport=Http11Transport(), base_url=box[0].url) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/x")


# --- the sync transport (client/http11_sync.py): the same server, the client in a thread


def _sync_client(url: str, **limits: int) -> httpx.Client:
    transport = Http11SyncTransport(limits=httpx.Limits(**limits) if limits else None)
    return httpx.Client(transport=transport, base_url=url)


async def test_sync_keep_alive_chunked_informational_head_and_close(serve) -> None:  # type: ignore[no-untyped-def]
    box: list[Server] = []
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"

    def respond(n: int) -> bytes:
        return {
            1: chunked,
            2: b"HTTP/1.1 100 Continue\r\n\r\n" + answer(200, b"two"),
            3: b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
        }.get(n, answer(200, b"last", extra=b"Connection: close\r\n"))

    box.append(await serve(keep_alive(box, respond)))
    with _sync_client(box[0].url) as http:
        assert (await asyncio.to_thread(http.post, "/1", json={})).text == "hello"
        assert (await asyncio.to_thread(http.get, "/2")).text == "two"
        head = await asyncio.to_thread(http.head, "/3")
        assert (head.status_code, head.content) == (200, b"")
        assert (await asyncio.to_thread(http.get, "/4")).text == "last"
        assert (await asyncio.to_thread(http.get, "/5")).text == "last"
    assert box[0].connections == 2


async def test_sync_stale_connections_are_replaced_and_truncated_answers_are_errors(serve) -> None:  # type: ignore[no-untyped-def]
    requests: list[int] = []

    async def script(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int
    ) -> None:
        while await read_request(reader) is not None:
            requests.append(number)
            if len(requests) == 2:
                return  # dropped before any answer: sent again on connection 2
            if len(requests) == 5:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                await writer.drain()
                return
            writer.write(answer(200, b"ok"))
            await writer.drain()
            if len(requests) == 3:
                return  # closed while idle: seen before the next request

    server = await serve(script)
    with _sync_client(server.url) as http:
        for path in ("/a", "/b"):
            assert (await asyncio.to_thread(http.get, path)).text == "ok"
        await asyncio.sleep(0.05)
        assert (await asyncio.to_thread(http.get, "/c")).text == "ok"
        with pytest.raises(httpx.RemoteProtocolError):
            await asyncio.to_thread(http.get, "/d")
    assert requests == [1, 1, 2, 3, 3]


async def test_sync_refused_and_timeouts(serve) -> None:  # type: ignore[no-untyped-def]
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    server = await serve(silent)
    with _sync_client(server.url, max_connections=1) as http:
        with pytest.raises(httpx.ReadTimeout):
            await asyncio.to_thread(http.get, "/a", timeout=httpx.Timeout(5, read=0.1))
    listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    url = f"http://127.0.0.1:{port}"
    with _sync_client(url) as http:
        with pytest.raises(httpx.ConnectError):
            await asyncio.to_thread(http.get, "/a")
    with Client(url, "k", wait_for_server=False) as client:
        assert isinstance(client._http._transport, Http11SyncTransport)
        with pytest.raises(UnreachableError):
            await asyncio.to_thread(client.get, "job_1")
