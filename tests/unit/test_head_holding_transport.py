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


async def _started(server: Any) -> None:
    async with asyncio.timeout(10):
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
            await asyncio.sleep(0.01)


async def test_served_answers_arrive_whole(tmp_path) -> None:
    """Through uvicorn with the limited llhttp protocol: a 202's head and body come in
    one segment, read with one recv."""
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from ferryman.http.connections import ConnectionLimits, protocol_with

    async def accepted(request: Any) -> JSONResponse:
        return JSONResponse({"ok": True}, status_code=202)

    app = Starlette(routes=[Route("/", accepted, methods=["POST"])])
    limits = ConnectionLimits(
        header_timeout_seconds=5, keepalive_timeout_seconds=5, max_connections=10
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=protocol_with(limits), log_level="warning"
    )
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve())
    try:
        await _started(server)

        def exchange() -> list[bytes]:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                got = []
                for _ in range(20):
                    sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
                    got.append(sock.recv(65536))
                return got

        for answer in await asyncio.to_thread(exchange):
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 202")
            assert body == b'{"ok":true}'
    finally:
        server.should_exit = True
        await serving
