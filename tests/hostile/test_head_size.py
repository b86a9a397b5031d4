"""A request head is bounded (16 KiB) whatever the parser: llhttp has no bound of its
own, so the server counts the head's bytes as they are parsed."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.hostile.conftest import Server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(start_module_server: Callable[..., Server]) -> Server:
    return start_module_server()


def exchange(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def head(path: str = "/healthz", padding: int = 0) -> bytes:
    pad = f"X-Padding: {'a' * padding}\r\n" if padding else ""
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n{pad}Connection: close\r\n\r\n".encode()


def test_a_head_under_16_kib_is_served(server: Server) -> None:
    with server.connect() as sock:
        answer = exchange(sock, head(padding=15 * 1024))

    assert answer.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "data",
    [head(padding=17 * 1024), head(path="/healthz?" + "q" * 17 * 1024)],
    ids=["a long header", "a long target"],
)
def test_a_head_over_16_kib_is_a_400_and_the_connection_closes(server: Server, data: bytes) -> None:
    with server.connect() as sock:
        answer = exchange(sock, data)

    assert answer.startswith(b"HTTP/1.1 400")
    assert b"connection: close" in answer.lower()


def test_many_small_headers_add_up(server: Server) -> None:
    headers = "".join(f"X-H{i}: {'b' * 100}\r\n" for i in range(200))  # ~21 KiB
    data = f"GET /healthz HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode()
    with server.connect() as sock:
        answer = exchange(sock, data)

    assert answer.startswith(b"HTTP/1.1 400")
