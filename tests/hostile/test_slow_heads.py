"""Header-dripping sockets cannot take the connection cap from requests (issue 18, item 11).

Against a real `ferryman serve` with a small cap (4 connections) and a long header
timeout (60 s, so nothing here is closed by it): sockets that never finish their
request head are not counted under the cap, and past their own caps (per client
address, and in all) the oldest of them are closed, so a tenant's request still gets
its answer while they are held. 127.0.0.2 is another client address on the loopback.
"""

from __future__ import annotations

import select
import socket
import time
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.hostile.conftest import Server

pytestmark = pytest.mark.slow

MAX_CONNECTIONS = 4
PER_CLIENT = 3
DEADLINE_SECONDS = 30.0
DRIP = b"POST /v1/generations HTTP/1.1\r\nHost: ferryman.test\r\nX-Drip: a"


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    return start_server(
        header_timeout_seconds=60,
        max_connections=MAX_CONNECTIONS,
        max_slow_heads=5,
        max_slow_heads_per_client=PER_CLIENT,
    )


@pytest.fixture
def drips() -> Iterator[Callable[..., list[socket.socket]]]:
    """Factory: ``drips(server, count, source=...)`` opens sockets that send half a head."""
    opened: list[socket.socket] = []

    def open_drips(server: Server, count: int, *, source: str = "127.0.0.1") -> list[socket.socket]:
        made = []
        for _ in range(count):
            sock = socket.create_connection(
                (server.host, server.port), timeout=5, source_address=(source, 0)
            )
            sock.sendall(DRIP)
            made.append(sock)
        opened.extend(made)
        return made

    yield open_drips
    for sock in opened:
        sock.close()


def closed_by_server(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, OSError):
        return True


def wait_until_closed(socks: list[socket.socket], count: int) -> list[bool]:
    """Which of ``socks`` the server closed, once ``count`` of them are."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    closed = [False] * len(socks)
    while True:
        closed = [was or closed_by_server(sock) for was, sock in zip(closed, socks, strict=True)]
        if sum(closed) >= count:
            return closed
        assert time.monotonic() < deadline, f"only {sum(closed)} of {count} closed"
        time.sleep(0.05)


def submit(server: Server) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/generations",
        json={"task": "generate", "input": {"prompt": "hi"}},
        headers={"Authorization": f"Bearer {server.key}"},
        timeout=DEADLINE_SECONDS,
    )


def test_drippers_past_the_cap_never_refuse_a_tenants_request(
    server: Server, drips: Callable[..., list[socket.socket]]
) -> None:
    held = drips(server, MAX_CONNECTIONS + 4)

    # Sockets still sending their head take no place a request with a head needs.
    response = submit(server)
    assert response.status_code == 202, response.text

    # Past its own cap, one host's slowest heads are closed, oldest first.
    closed = wait_until_closed(held, len(held) - PER_CLIENT)
    assert closed == [True] * (len(held) - PER_CLIENT) + [False] * PER_CLIENT
    assert submit(server).status_code == 202


def test_one_hosts_drippers_displace_only_their_own(
    server: Server, drips: Callable[..., list[socket.socket]]
) -> None:
    other = drips(server, 2, source="127.0.0.2")
    own = drips(server, PER_CLIENT + 2)

    wait_until_closed(own, 2)

    assert not any(closed_by_server(sock) for sock in other)
    assert submit(server).status_code == 202


def test_past_the_total_the_oldest_slow_head_is_closed_whoever_holds_it(
    server: Server, drips: Callable[..., list[socket.socket]]
) -> None:
    # Each head counts as slow a second after its connection opened: these first.
    first = drips(server, PER_CLIENT, source="127.0.0.2")
    later = drips(server, PER_CLIENT)  # six slow heads against a total of five

    closed = wait_until_closed(first, 1)

    assert closed == [True, False, False]
    assert not any(closed_by_server(sock) for sock in later)
