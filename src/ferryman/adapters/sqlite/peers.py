"""Wake-ups between processes sharing one SQLite file, over unix datagram sockets.

SQLite tells nobody that a row was written. Without help, a worker in another process
learns of a new job only when its poll comes round (every 50 ms), and of a cancel
request for a call it runs only at its next cancel check. Each process that waits for
either binds one datagram socket in a directory next to the database
(``<file>-wake/<pid>-<random>.sock``); a process that makes work visible, or asks a
running job to stop, sends one byte to every socket there, whose value says which
(``MESSAGES``, ``CANCELS``, ``STATUSES``: each a ``PeerChannel`` over the one socket).
A byte is a
hint, never the news itself: the receiver reads the table as it would after a poll or
a periodic check, so a lost, late or extra byte changes nothing but latency, and the
poll and the periodic check stay as the fallback (a full socket buffer, a peer that
started after the sender last looked, a directory that cannot be made).

A peer that died leaves its socket file behind; the first send to it is refused
(ECONNREFUSED) and the file is removed. A sender lists the directory again when its
modification time has changed since the last listing (a peer came or went: one stat
per send, not a listing per job), and at least every ``refresh_seconds`` in case a
peer bound its socket within the same clock tick as that listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import socket
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

SUFFIX = ".sock"
DIRECTORY_MODE = 0o700
# sun_path holds 108 bytes on Linux (104 on macOS), the final NUL included.
MAX_SOCKET_PATH_BYTES = 100
DEFAULT_REFRESH_SECONDS = 0.5
_GONE = (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK)
# What a byte says. A process of an older version wakes on any byte (a harmless extra
# look); an unknown value is ignored.
MESSAGES = 1  # a queue message became visible: look for work
CANCELS = 2  # a cancel was requested for a running job: run the cancel check
STATUSES = 3  # a job moved to another status: read the jobs clients wait on


def directory_for(database: Path) -> Path:
    """Where the processes sharing ``database`` meet."""
    return database.with_name(database.name + "-wake")


class PeerWakeups:
    """Send and receive one-byte wake-ups among the processes of one database file.

    One socket per process carries every kind; ``channel(kind)`` is what a Wakeup
    holds (adapters/wakeup.py's Peers)."""

    def __init__(
        self, directory: Path, *, refresh_seconds: float = DEFAULT_REFRESH_SECONDS
    ) -> None:
        self.directory = directory
        self._refresh_seconds = refresh_seconds
        self._peers: list[str] = []
        self._listed_at = float("-inf")
        self._listed_mtime_ns: int | None = None
        self._sender: socket.socket | None = None
        self._listener: socket.socket | None = None
        self._own: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handlers: dict[int, Callable[[], None]] = {}
        # Why wake-ups between processes are off here (the poll alone), or None.
        self.off_reason: str | None = None
        self.sent = 0
        self._closed = False

    def channel(self, kind: int, *, coalesce: bool = False) -> PeerChannel:
        """The wake-ups of one kind, as a Wakeup uses them. ``coalesce``: the
        broadcasts of one event-loop turn send one byte per peer, not one each (every
        outcome of a busy worker nudges status watchers)."""
        return PeerChannel(self, kind, coalesce=coalesce)

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def listens_for(self, kind: int) -> bool:
        return self._listener is not None and kind in self._handlers

    def listen(self, on_wake: Callable[[], None], *, kind: int = MESSAGES) -> bool:
        """Call ``on_wake`` on the running loop whenever bytes of ``kind`` arrive (the
        socket is bound on the first call). False (and the poll alone) when it cannot
        be done here."""
        if self._bind():
            self._handlers[kind] = on_wake
            return True
        return False

    def _bind(self) -> bool:
        if self._listener is not None or self.off_reason is not None:
            return self._listener is not None
        path = self.directory / f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
        if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            self._give_up("the database path is too long for a unix socket")
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
            sock.bind(str(path))
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            loop.add_reader(sock.fileno(), self._drain, sock, self._handlers)
        except (OSError, NotImplementedError) as exc:
            # OSError: the directory or socket cannot be made here (read-only, no unix
            # sockets). NotImplementedError: a loop without add_reader (Windows'
            # proactor). Either way this process keeps to the poll (off_reason says why).
            sock.close()
            self._give_up(type(exc).__name__)
            return False
        self._listener, self._own, self._loop = sock, str(path), loop
        return True

    def broadcast(self, *, kind: int = MESSAGES) -> int:
        """One byte of ``kind`` to every other process listening; never raises, never
        blocks. How many were sent."""
        if self._closed:
            return 0  # a coalesced send due after close: nobody to tell
        peers = self._current_peers()
        if not peers:
            return 0
        sender = self._sender
        if sender is None:
            sender = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sender.setblocking(False)
        byte, sent = bytes((kind,)), 0
        for peer in peers:
            try:
                sender.sendto(byte, peer)
                sent += 1
            except BlockingIOError:
                pass  # its buffer is full of wake-ups already: it will wake
            except OSError as exc:
                if exc.errno in _GONE:
                    self._forget(peer)
        self.sent += sent
        return sent

    def close(self) -> None:
        """Idempotent: every channel of the process closes it."""
        self._closed = True
        self._handlers.clear()
        if self._listener is not None:
            if self._loop is not None and not self._loop.is_closed():
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        if self._own is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._own)
            self._own = None
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def _current_peers(self) -> list[str]:
        now = time.monotonic()
        try:
            mtime_ns: int | None = os.stat(self.directory).st_mtime_ns
        except OSError:
            mtime_ns = None
        # A worker that bound its socket after the last listing must hear the very next
        # hint: a cancel sent right after it claimed a job is not sent again.
        if mtime_ns != self._listed_mtime_ns or now - self._listed_at >= self._refresh_seconds:
            self._listed_at, self._listed_mtime_ns = now, mtime_ns
            try:
                with os.scandir(self.directory) as entries:
                    names = [e.path for e in entries if e.name.endswith(SUFFIX)]
            except OSError:
                names = []
            self._peers = [p for p in names if p != self._own]
        return self._peers

    def _forget(self, peer: str) -> None:
        self._peers = [p for p in self._peers if p != peer]
        with contextlib.suppress(OSError):
            os.unlink(peer)

    def _give_up(self, reason: str) -> None:
        self.off_reason = reason

    @staticmethod
    def _drain(sock: socket.socket, handlers: dict[int, Callable[[], None]]) -> None:
        # Every byte waiting is one wake-up: however many of a kind came, wake it once.
        kinds: set[int] = set()
        while True:
            try:
                kinds.update(sock.recv(64))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
        for kind in sorted(kinds):
            handler = handlers.get(kind)
            if handler is not None:
                handler()


class PeerChannel:
    """One kind of wake-up over a process's PeerWakeups: adapters/wakeup.py's Peers."""

    def __init__(self, peers: PeerWakeups, kind: int, *, coalesce: bool = False) -> None:
        self._peers = peers
        self._kind = kind
        self._coalesce = coalesce
        self._pending = False
        # Bytes of this kind sent (tests and benchmarks look).
        self.sent = 0

    @property
    def off_reason(self) -> str | None:
        return self._peers.off_reason

    @property
    def listening(self) -> bool:
        return self._peers.listens_for(self._kind)

    def listen(self, on_wake: Callable[[], None]) -> bool:
        return self._peers.listen(on_wake, kind=self._kind)

    def broadcast(self) -> None:
        if not self._coalesce:
            self._send()
            return
        if self._pending:
            return  # a send is already due at the end of this loop turn
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._send()  # no loop here (a thread, a test): at once
            return
        self._pending = True
        loop.call_soon(self._send)

    def _send(self) -> None:
        self._pending = False
        self.sent += self._peers.broadcast(kind=self._kind)

    def close(self) -> None:
        self._peers.close()
