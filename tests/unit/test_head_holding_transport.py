"""HeadHoldingTransport: a response's head leaves with its body in one send."""

from __future__ import annotations

import asyncio
from typing import Any

from ferryman.http.connections import HeadHoldingTransport

HEAD = b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n"


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.peer = ("127.0.0.1", 1)

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> Any:
        return self.peer if name == "peername" else None


async def test_a_head_and_its_body_leave_in_one_write() -> None:
    real = FakeTransport()
    transport = HeadHoldingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    assert real.writes == []  # held for the body
    transport.write(b"{}")
    assert real.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)
    assert real.writes == [HEAD + b"{}"]  # nothing sent twice


async def test_a_head_with_no_body_write_after_it_leaves_when_the_loop_comes_round() -> None:
    real = FakeTransport()
    transport = HeadHoldingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    await asyncio.sleep(0)
    assert real.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_a_close_sends_what_is_held_first() -> None:
    real = FakeTransport()
    transport = HeadHoldingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    transport.close()
    assert real.writes == [HEAD]
    assert real.closed and transport.is_closing()
    await asyncio.sleep(0)
    assert real.writes == [HEAD]


async def test_body_chunks_are_not_held_and_the_rest_is_the_transports() -> None:
    real = FakeTransport()
    transport = HeadHoldingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    transport.write(b"a")
    transport.write(b"b")
    assert real.writes == [HEAD + b"a", b"b"]
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1)


class FakeSocketTransport(FakeTransport):
    """What uvicorn's protocol asks of a socket transport, writes recorded."""

    def get_extra_info(self, name: str) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 8000)}.get(name)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _served(app: Any) -> tuple[Any, FakeSocketTransport]:
    """The limited llhttp protocol serving ``app`` on a recorded transport."""
    import uvicorn
    from uvicorn.server import ServerState

    from ferryman.http.connections import ConnectionLimits, protocol_with

    limits = ConnectionLimits(
        header_timeout_seconds=5, keepalive_timeout_seconds=5, max_connections=10
    )
    config = uvicorn.Config(app, http=protocol_with(limits), log_config=None, lifespan="off")
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})
    real = FakeSocketTransport()
    protocol.connection_made(real)
    return protocol, real


async def _until(condition: Any) -> None:
    async with asyncio.timeout(5):
        while not condition():  # noqa: ASYNC110 - the protocol offers nothing to wait on
            await asyncio.sleep(0)


async def test_a_served_answer_leaves_in_one_write() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    protocol, real = _served(app)
    protocol.data_received(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    await _until(lambda: real.writes)
    await asyncio.sleep(0.01)
    assert len(real.writes) == 1  # uvicorn's own transport would get the head, then the body
    head, _, body = real.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 202") and body == b"{}"
    protocol.connection_lost(None)


async def test_a_head_alone_is_sent_before_a_shutdown_in_the_same_turn() -> None:
    """A HEAD answer is a head and nothing after it; a server shutting down closes the
    connection in the very turn the answer completed. The head still goes out first."""
    protocols: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        protocols[0].shutdown()

    protocol, real = _served(app)
    protocols.append(protocol)
    protocol.data_received(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n")
    await _until(lambda: real.closed)
    assert len(real.writes) == 1 and real.writes[0].startswith(b"HTTP/1.1 200")
    protocol.connection_lost(None)


async def test_a_streamed_answer_ends_whole_before_a_shutdown_in_the_same_turn() -> None:
    protocols: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hi", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        protocols[0].shutdown()

    protocol, real = _served(app)
    protocols.append(protocol)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    await _until(lambda: real.closed)
    sent = b"".join(real.writes)
    assert b"transfer-encoding: chunked" in sent.lower()
    assert sent.endswith(b"2\r\nhi\r\n0\r\n\r\n")  # the last chunk was not lost
    protocol.connection_lost(None)
