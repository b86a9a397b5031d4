"""Slow and silent clients cannot hold connections forever (issue 5, item 12).

Against a real `ferryman serve` with short limits (1 s header and body timeouts, at
most 4 connections): a request head must be complete within the header timeout
(bytes trickling in do not extend it), a body within the body timeout (408
problem+json, then close), and a connection past the cap gets 503
too_many_connections, while /healthz still answers.
"""

from __future__ import annotations

import json
import socket
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.hostile.conftest import Server

pytestmark = pytest.mark.slow

TIMEOUT_SECONDS = 1.0
MAX_CONNECTIONS = 4
# Closed by the server: not before the limit, and well before anything unbounded.
EARLIEST = TIMEOUT_SECONDS * 0.8
LATEST = 15.0


@pytest.fixture(scope="module")
def server(start_module_server: Callable[..., Server]) -> Server:
    return start_module_server(
        header_timeout_seconds=TIMEOUT_SECONDS,
        body_timeout_seconds=TIMEOUT_SECONDS,
        keepalive_timeout_seconds=60,
        max_connections=MAX_CONNECTIONS,
    )


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took."""
    began = time.monotonic()
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks), time.monotonic() - began


def request(path: str, *, host: str = "ferryman.test", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length body, leaving the connection open."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def test_half_a_header_line_is_disconnected_after_the_header_timeout(server: Server) -> None:
    with server.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: ferr")

        sent_back, waited = read_until_closed(sock)

    assert sent_back == b""
    assert EARLIEST <= waited <= LATEST


def test_a_connection_that_never_speaks_is_disconnected(server: Server) -> None:
    with server.connect() as sock:
        sent_back, waited = read_until_closed(sock)

    assert sent_back == b""
    assert EARLIEST <= waited <= LATEST


def test_trickling_header_bytes_do_not_extend_the_deadline(server: Server) -> None:
    head = request("/healthz", extra="X-Padding: " + "a" * 40 + "\r\n")
    with server.connect() as sock:
        began = time.monotonic()
        closed = False
        for byte in head[:-2]:  # never the final CRLF
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.1)  # 60 bytes at 10 a second: 6 s, far past the limit
            if time.monotonic() - began > LATEST:
                break
        if not closed:
            sent_back, _ = read_until_closed(sock)
            assert sent_back == b""
        waited = time.monotonic() - began

    assert waited < LATEST
    assert waited < len(head) * 0.1  # cut off before the head could be finished


def test_a_body_that_stalls_gets_408_then_close(server: Server) -> None:
    head = (
        "POST /v1/generations HTTP/1.1\r\n"
        "Host: ferryman.test\r\n"
        f"Authorization: Bearer {server.key}\r\n"
        "Content-Type: application/json\r\n"
        "Content-Length: 200\r\n\r\n"
    ).encode()
    with server.connect() as sock:
        sock.sendall(head + b'{"task": "generate", ')

        sent_back, waited = read_until_closed(sock)

    status_line, _, rest = sent_back.partition(b"\r\n")
    assert status_line.split()[1] == b"408", sent_back
    assert b"application/problem+json" in rest
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["code"] == "request_timeout"
    assert EARLIEST <= waited <= LATEST


def test_connections_past_the_cap_get_503_while_healthz_answers(server: Server) -> None:
    held = hold_connections(server, MAX_CONNECTIONS)
    try:
        with server.connect() as extra:
            extra.sendall(request("/readyz"))
            status, headers, body = read_response(extra)
            assert status == 503
            assert headers["content-type"] == "application/problem+json"
            assert json.loads(body)["code"] == "too_many_connections"
            assert headers["retry-after"] == "1"
            assert read_until_closed(extra)[0] == b""

        # Liveness is never refused, on a held connection or a new one.
        held[0].sendall(request("/healthz"))
        assert read_response(held[0])[0] == 200
        with server.connect() as probe:
            probe.sendall(request("/healthz"))
            assert read_response(probe)[0] == 200
    finally:
        for sock in held:
            sock.close()

    # Once they are gone, new connections are served again.
    assert ready_on_a_new_connection(server, deadline_seconds=LATEST)


def hold_connections(server: Server, count: int) -> list[socket.socket]:
    """``count`` keep-alive connections, each served once (so each counts)."""
    held: list[socket.socket] = []
    deadline = time.monotonic() + LATEST
    while len(held) < count:
        assert time.monotonic() < deadline, "could not open the connections to hold"
        sock = server.connect()
        sock.sendall(request("/readyz"))
        if read_response(sock)[0] == 200:
            held.append(sock)
        else:
            # An earlier test's connection not yet noticed as closed: try again.
            sock.close()
            time.sleep(0.1)
    return held


def ready_on_a_new_connection(server: Server, *, deadline_seconds: float) -> bool:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        with server.connect() as sock:
            sock.sendall(request("/readyz"))
            if read_response(sock)[0] == 200:
                return True
        time.sleep(0.1)
    return False
