"""The listening socket `serve` and `api` create is marked TCP, so replies are not delayed."""

from __future__ import annotations

import socket

from ferryman.cli.serving import bind


def test_listener_is_tcp_so_asyncio_disables_nagle_on_accepted_sockets() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        # asyncio sets TCP_NODELAY on accepted sockets only when the listener's proto
        # is IPPROTO_TCP; with proto 0 every keep-alive reply waits for a delayed ACK.
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
